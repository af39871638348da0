//! The dashboard's one stylesheet and one small script, compiled into the binary (no front-end build).

/// Light and dark follow the system (`prefers-color-scheme`).
pub const STYLE: &str = r#"
:root { --bg:#fafafa; --fg:#1d1f23; --muted:#6b7079; --card:#fff; --line:#e2e4e8; --accent:#2f6fde;
        --bad:#c62828; --warn:#b26a00; --good:#2e7d32; font: 14px/1.45 system-ui, sans-serif; }
@media (prefers-color-scheme: dark) {
  :root { --bg:#15171b; --fg:#e6e8ec; --muted:#9aa0aa; --card:#1e2127; --line:#2c3038; --accent:#6ea0ff;
          --bad:#ef6b6b; --warn:#e0a040; --good:#6cc070; }
}
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg); }
a { color: var(--accent); text-decoration: none; } a:hover { text-decoration: underline; }
header.top { display: flex; gap: 1.2em; align-items: center; padding: .6em 1.2em; border-bottom: 1px solid var(--line); }
header.top .brand { font-weight: 700; } header.top nav a { margin-right: 1em; } header.top nav a.here { font-weight: 700; }
header.top form { margin-left: auto; }
main { padding: 1em 1.2em; }
h1 { font-size: 1.3em; margin: 0 0 .6em; } h2 { font-size: 1.1em; margin: 1.2em 0 .5em; }
.board { display: grid; grid-template-columns: repeat(5, minmax(12em, 1fr)); gap: .8em; align-items: start; }
/* A phone: one column under another, the header wrapping, wide tables scrolling inside themselves. */
@media (max-width: 720px) {
  .board { grid-template-columns: 1fr; }
  header.top { flex-wrap: wrap; gap: .5em; padding: .5em .8em; } main { padding: .8em; }
  table { display: block; overflow-x: auto; }
}
.column { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: .5em; }
.column h2 { margin: 0 0 .5em; font-size: 1em; display: flex; justify-content: space-between; }
.card { border: 1px solid var(--line); border-radius: 5px; padding: .4em .5em; margin-bottom: .4em; background: var(--bg); }
.card .meta, .muted { color: var(--muted); font-size: .9em; }
.reason { white-space: pre-line; }
.card .reason { margin: .3em 0 0; font-size: .9em; color: var(--bad); }
.lane.flagged { background: var(--card); border: 1px solid var(--bad); border-radius: 6px; padding: .5em; margin-bottom: .8em; }
.lane.flagged h2 { margin: 0 0 .5em; font-size: 1em; color: var(--bad); }
.lane-cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(16em, 1fr)); gap: .4em; }
.badge { display: inline-block; padding: 0 .4em; border-radius: 3px; font-size: .85em; border: 1px solid var(--line); }
.badge.bad, .status-fail { color: #fff; background: var(--bad); border-color: var(--bad); }
.badge.warn, .status-warn { color: #fff; background: var(--warn); border-color: var(--warn); }
.status-pass { color: #fff; background: var(--good); }
table { border-collapse: collapse; width: 100%; background: var(--card); }
th, td { text-align: left; padding: .3em .5em; border-bottom: 1px solid var(--line); vertical-align: top; }
pre { background: var(--card); border: 1px solid var(--line); padding: .6em; overflow: auto; max-height: 32em; white-space: pre-wrap; word-break: break-word; }
form.inline { display: inline; } button { font: inherit; padding: .2em .7em; cursor: pointer; }
.filters { margin-bottom: .8em; } .filters * { margin-right: .4em; }
.heading { display: flex; gap: 1em; align-items: baseline; flex-wrap: wrap; }
a.button { border: 1px solid var(--accent); border-radius: 4px; padding: .1em .7em; }
form.new-task { display: flex; flex-direction: column; gap: .3em; max-width: 60em; }
form.new-task input[type=text], form.new-task select { font: inherit; width: 100%; padding: .4em; background: var(--card); color: var(--fg); border: 1px solid var(--line); border-radius: 4px; }
form.new-task fieldset { border: 1px solid var(--line); border-radius: 4px; } form.new-task fieldset label { display: block; }
form.new-task button { align-self: flex-start; }
.signin { max-width: 24em; margin: 4em auto; background: var(--card); border: 1px solid var(--line); padding: 1.5em; border-radius: 6px; }
.signin input { width: 100%; padding: .4em; margin: .4em 0 .8em; }
.error { color: var(--bad); }
tr.status-fail td, tr.status-fail th { color: #fff; } tr.status-fail a { color: #fff; text-decoration: underline; }
table.loops time { white-space: nowrap; }
.checks details, .loops details { margin-top: .2em; } .checks pre, .loops pre { color: var(--fg); }
.attempt { border-top: 1px solid var(--line); margin-top: 1em; }
.diff table.files { width: auto; margin-bottom: .5em; } .added { color: var(--good); } .removed { color: var(--bad); }
details > summary { cursor: pointer; } details.patch-file { margin: .3em 0; }
pre.patch { white-space: pre; word-break: normal; font-size: .9em; }
pre.patch ins { background: rgba(46,125,50,.18); text-decoration: none; display: inline-block; min-width: 100%; }
pre.patch del { background: rgba(198,40,40,.18); text-decoration: none; display: inline-block; min-width: 100%; }
pre.patch .hunk { color: var(--accent); } pre.patch .meta { color: var(--muted); font-weight: 600; }
.cut { color: var(--warn); }
.transcript { display: flex; flex-direction: column; gap: .4em; margin: .5em 0; }
.transcript .said { white-space: pre-wrap; background: var(--card); border-left: 3px solid var(--accent); padding: .4em .6em; }
.transcript .session { color: var(--muted); margin: 0; }
.transcript details.tool, .transcript details.thought { border: 1px solid var(--line); border-radius: 4px; padding: .2em .5em; background: var(--card); }
.transcript details.tool.failed { border-color: var(--bad); } .transcript .tool-name { font-weight: 600; }
.transcript details.thought { color: var(--muted); font-style: italic; } .transcript pre { max-height: 20em; margin: .3em 0; }
.transcript .ended { padding: .4em .6em; border-radius: 4px; white-space: pre-wrap; }
.transcript .ended.ok { border: 1px solid var(--good); } .transcript .ended.bad { border: 1px solid var(--bad); }
.timeline ul.last-output { margin: .2em 0; padding-left: 1.2em; } .timeline details.raw-output pre { max-height: 12em; }
.transcript pre.stderr, pre.log .stderr { color: var(--bad); } .transcript pre.stderr { border-left: 3px solid var(--bad); padding-left: .5em; }
.badge.plan { border-color: var(--accent); color: var(--accent); } .badge.good { color: #fff; background: var(--good); border-color: var(--good); }
.card .family, p.family { font-size: .9em; } .waits { color: var(--warn); }
.plan ol.proposal { padding-left: 1.4em; } .plan ol.proposal > li { margin-bottom: .6em; }
.plan dl { display: grid; grid-template-columns: max-content 1fr; gap: .1em .8em; margin: .3em 0; }
.plan dt { color: var(--muted); } .plan dd { margin: 0; white-space: pre-wrap; } .plan dd ul { margin: 0; padding-left: 1.1em; }
.plan .summary, .rejection q, .triage q { white-space: pre-wrap; }
.plan-actions { display: flex; gap: 1em; align-items: flex-start; flex-wrap: wrap; margin: .6em 0; }
form.reject, form.spec-edit { display: flex; flex-direction: column; gap: .3em; max-width: 60em; }
form.reject { flex: 1; min-width: 20em; } form.reject button, form.spec-edit button { align-self: flex-start; }
textarea { font: inherit; width: 100%; padding: .4em; background: var(--card); color: var(--fg); border: 1px solid var(--line); border-radius: 4px; }
.report .summary, .report .review-summary, .report .comments .body { white-space: pre-wrap; }
.report .comments .body { display: inline; } .report .comments li { margin-bottom: .3em; }
table.spend { margin-bottom: .8em; } table.spend .n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.spend tr.profile td { color: var(--muted); font-size: .9em; } table.spend .cost.unknown, table.spend .cost.partial { color: var(--warn); }
"#;

/// Live updates: the page listens to `/live` (the log as SSE, resuming from the position the page was rendered
/// at, and after a reconnect from the last event seen) and, when something happened, fetches itself again and
/// swaps its `<main>`. Without JavaScript the pages still read fine.
pub const SCRIPT: &str = r#"
(function () {
  var main = document.querySelector('main[data-after]');
  if (!main || !window.EventSource || !window.fetch) return;
  var source = new EventSource('/live?after=' + encodeURIComponent(main.getAttribute('data-after')));
  var timer = null;
  var last = null;
  function refresh() {
    timer = null;
    // `at`: the page is rendered once the read models have caught up with the event that woke us.
    var url = new URL(window.location.href);
    if (last !== null) { url.searchParams.set('at', last); }
    fetch(url.toString(), { credentials: 'same-origin', headers: { 'Accept': 'text/html' } })
      .then(function (r) { if (r.redirected || !r.ok) { throw new Error(String(r.status)); } return r.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, 'text/html').querySelector('main');
        if (!fresh) { return; }
        // What the reader opened or closed stays so: a <details> with an id keeps its state across the swap.
        var kept = {};
        Array.prototype.forEach.call(main.querySelectorAll('details[id]'), function (d) { kept[d.id] = d.open; });
        // And what the reader is typing (a comment, a spec being edited) stays, with the caret where it was.
        var typed = {};
        Array.prototype.forEach.call(main.querySelectorAll('textarea[id]'), function (t) {
          if (t.value !== t.defaultValue) { typed[t.id] = t.value; }
        });
        var active = document.activeElement;
        var focus = active && active.id && main.contains(active) && active.tagName === 'TEXTAREA'
          ? { id: active.id, start: active.selectionStart, end: active.selectionEnd } : null;
        main.innerHTML = fresh.innerHTML;
        Object.keys(kept).forEach(function (id) { var d = document.getElementById(id); if (d) { d.open = kept[id]; } });
        Object.keys(typed).forEach(function (id) { var t = document.getElementById(id); if (t) { t.value = typed[id]; } });
        if (focus) {
          var t = document.getElementById(focus.id);
          if (t) { t.focus(); t.setSelectionRange(focus.start, focus.end); }
        }
        main.setAttribute('data-refreshed', String(Date.now()));
      })
      .catch(function () { /* the next event tries again */ });
  }
  source.onmessage = function (e) {
    last = e.lastEventId || last;
    if (!timer) { timer = setTimeout(refresh, 200); }
  };
})();
"#;
