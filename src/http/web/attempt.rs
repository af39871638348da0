//! An attempt on its task's page, pure: its diff (files with their added and removed lines, the patch per file,
//! highlighted by line kind, collapsible) and its agent's log (as turns and tool calls where `transcript` knows the
//! agent, else the lines as printed). All of it is agent-written: maud escapes every value, nothing here is ever
//! `PreEscaped`, and no value of it becomes a link or an attribute other than a class we chose.

use maud::{html, Markup};

use super::transcript::{self, Item};
use crate::dispatch::workspace::diff::{DiffRecord, PATCH_CAP};
use crate::projectors::runs::RunRow;

/// Patches up to this size open their files on the page; larger ones start collapsed.
const OPEN_PATCH_BYTES: usize = 32 * 1024;

/// One attempt as its page shows it.
pub struct Attempt {
    pub run: RunRow,
    pub log: Files<Log>,
    /// `None`: the attempt committed nothing, so it has no diff.
    pub diff: Option<Files<Diff>>,
    /// The attempt whose log opens by default (the running one, else the last).
    pub open: bool,
    /// What its egress proxies refused (host, port, how often): nothing for most.
    pub egress_refused: Vec<crate::domain::runs::RefusedEgress>,
}

impl Attempt {
    /// An older attempt: its row, and where to look for the rest.
    pub fn summarized(run: RunRow, shown: usize) -> Self {
        let why = || format!("only the last {shown} attempts are shown in full");
        Self {
            diff: run.commit_sha.is_some().then(|| Files::Away(why())),
            log: Files::Away(why()),
            run,
            open: false,
            egress_refused: Vec::new(),
        }
    }
}

/// What an attempt left on this machine, or why it cannot be shown.
pub enum Files<T> {
    Here(T),
    /// Why not (on another worker's machine, removed by gc, never recorded).
    Away(String),
}

pub struct Log {
    /// The end of the log, from the first whole line.
    pub text: String,
    /// Bytes before `text` not shown.
    pub skipped: u64,
}

pub struct Diff {
    pub record: DiffRecord,
    pub patch: String,
}

pub fn attempts(attempts: &[Attempt]) -> Markup {
    html! {
        @for attempt in attempts.iter().rev() { (section(attempt)) }
    }
}

fn section(attempt: &Attempt) -> Markup {
    let run = &attempt.run;
    let id = &run.run_id;
    html! {
        section.attempt data-run=(id) data-state=(run.state) {
            h2 {
                "Attempt " (run.attempt) " "
                span.badge data-state=(run.state) { (run.state) }
                @if let Some(failure) = &run.failure { " " small { (super::report::failure(failure)) } }
                @if let Some(profile) = &run.profile { " " small.muted { (profile) } }
            }
            @match &attempt.diff {
                None => {}
                Some(Files::Away(why)) => p.muted.diff-away { "Diff: " (why) }
                Some(Files::Here(diff)) => (diff_view(id, diff)),
            }
            @if !attempt.egress_refused.is_empty() {
                p.egress-refused {
                    "Network refused by its egress proxy: "
                    @for (i, refused) in attempt.egress_refused.iter().enumerate() {
                        @if i > 0 { ", " }
                        code { (refused.host) ":" (refused.port) } " ×" (refused.count)
                    }
                }
            }
            @match &attempt.log {
                Files::Away(why) => p.muted.log-away { "Log: " (why) }
                Files::Here(log) => (log_view(id, log, attempt.open, run.state == "running")),
            }
        }
    }
}

fn diff_view(run: &str, diff: &Diff) -> Markup {
    let record = &diff.record;
    let added: u64 = record.files.iter().filter_map(|f| f.added).sum();
    let removed: u64 = record.files.iter().filter_map(|f| f.removed).sum();
    let chunks = split_patch(&diff.patch);
    let open = diff.patch.len() <= OPEN_PATCH_BYTES;
    html! {
        div.diff {
            h3 {
                "Diff " code { (short(&record.base)) ".." (short(&record.commit)) } " · "
                (record.files.len()) @if record.files_cut { "+" } " files "
                span.added { "+" (added) } " " span.removed { "−" (removed) }
            }
            table.files {
                tbody {
                    @for file in &record.files {
                        tr {
                            td { code { (file.path) } }
                            @match (file.added, file.removed) {
                                (Some(a), Some(r)) => { td.added { "+" (a) } td.removed { "−" (r) } }
                                _ => { td colspan="2" { "binary" } }
                            }
                        }
                    }
                }
            }
            @if record.files_cut { p.muted { "More files changed than are listed." } }
            @if record.patch_cut() {
                p.cut {
                    "The patch is " (bytes(record.patch_bytes))
                    @if record.patch_timed_out { " or more (git was stopped)" }
                    "; the first " (bytes(PATCH_CAP as u64)) " are shown."
                }
            }
            @for (i, chunk) in chunks.iter().enumerate() {
                details.patch-file id={ "patch-" (run) "-" (i) } open[open] {
                    summary { code { (chunk.path) } }
                    pre.patch {
                        // Added and removed lines as `ins` and `del`, context as plain text: a few bytes of markup a
                        // line, since a patch can be half a megabyte.
                        @for line in &chunk.lines {
                            @match line_class(line) {
                                "add" => { ins { (line) } }
                                "del" => { del { (line) } }
                                "ctx" => { (line) }
                                class => { span class=(class) { (line) } }
                            }
                            "\n"
                        }
                    }
                }
            }
        }
    }
}

fn log_view(run: &str, log: &Log, open: bool, running: bool) -> Markup {
    let items = transcript::render(&log.text);
    html! {
        details.log id={ "log-" (run) } open[open] data-live=[running.then_some("true")] {
            summary {
                @if running { "Agent's log (live)" } @else { "Agent's log" }
                " · " (bytes(log.skipped + log.text.len() as u64))
            }
            @if log.skipped > 0 { p.cut { "The first " (bytes(log.skipped)) " are not shown." } }
            @if transcript::is_structured(&items) {
                div.transcript { @for (i, item) in items.iter().enumerate() { (item_view(run, i, item)) } }
            } @else {
                // Every line as printed, in order; stderr's marked.
                pre.log {
                    @for line in log.text.lines() {
                        @match crate::dispatch::agent_log::read_line(line) {
                            (true, text) => { span.stderr { (text) } "\n" }
                            (false, text) => { (text) "\n" }
                        }
                    }
                }
            }
        }
    }
}

fn item_view(run: &str, index: usize, item: &Item) -> Markup {
    html! {
        @match item {
            Item::Said(text) => div.said { (text) },
            Item::Thought(text) => details.thought id={ "item-" (run) "-" (index) } { summary { "thinking" } div { (text) } },
            Item::Session(text) => p.session { (text) },
            Item::Ended { ok, summary, text } => div class={ "ended " (if *ok { "ok" } else { "bad" }) } {
                strong { (summary) }
                @if let Some(text) = text { div { (text) } }
            },
            Item::Tool(call) => {
                @let failed = call.output.as_ref().is_some_and(|o| o.failed);
                details id={ "item-" (run) "-" (index) } class={ "tool" @if failed { " failed" } } {
                    summary { span.tool-name { (call.name) } " " code { (call.summary) } @if failed { " ✗" } }
                    @if !call.input.is_empty() { pre.input { (call.input) } }
                    @match &call.output {
                        Some(output) => pre.output { (output.text) },
                        None => p.muted { "no result yet" },
                    }
                }
            },
            Item::Raw(lines) => pre.raw { @for line in lines { (line) "\n" } },
            Item::Stderr(lines) => pre.stderr { @for line in lines { (line) "\n" } },
        }
    }
}

/// A file's part of a patch: its name as the header says it, and its lines.
struct Chunk<'a> {
    path: String,
    lines: Vec<&'a str>,
}

fn split_patch(patch: &str) -> Vec<Chunk<'_>> {
    let mut chunks: Vec<Chunk> = Vec::new();
    for line in patch.lines() {
        if let Some(header) = line.strip_prefix("diff --git ") {
            let path = header
                .rsplit_once(" b/")
                .map_or(header, |(_, path)| path)
                .to_owned();
            chunks.push(Chunk {
                path,
                lines: vec![line],
            });
        } else if let Some(chunk) = chunks.last_mut() {
            chunk.lines.push(line);
        } else {
            chunks.push(Chunk {
                path: String::new(),
                lines: vec![line],
            });
        }
    }
    chunks
}

pub(super) fn line_class(line: &str) -> &'static str {
    if line.starts_with("+++") || line.starts_with("---") || line.starts_with("diff --git") {
        "meta"
    } else if line.starts_with("@@") {
        "hunk"
    } else if line.starts_with('+') {
        "add"
    } else if line.starts_with('-') {
        "del"
    } else if line.starts_with(' ') || line.is_empty() {
        "ctx"
    } else {
        "meta"
    }
}

fn short(id: &str) -> &str {
    id.get(..7).unwrap_or(id)
}

pub(super) fn bytes(n: u64) -> String {
    match n {
        0..1024 => format!("{n} bytes"),
        1024..1_048_576 => format!("{:.1} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_splits_by_file_and_its_lines_are_classed() {
        let patch = "diff --git a/src/a.rs b/src/a.rs\nindex 1..2 100644\n--- a/src/a.rs\n+++ b/src/a.rs\n@@ -1 +1 @@\n-old\n+new\n same\ndiff --git a/b b/b\nnew file mode 100644\n";
        let chunks = split_patch(patch);
        assert_eq!(chunks.len(), 2);
        assert_eq!(
            (chunks[0].path.as_str(), chunks[1].path.as_str()),
            ("src/a.rs", "b")
        );
        let classes: Vec<&str> = chunks[0].lines.iter().map(|l| line_class(l)).collect();
        assert_eq!(
            classes,
            ["meta", "meta", "meta", "meta", "hunk", "del", "add", "ctx"]
        );
    }
}
