//! The dashboard's pages, pure: values from the read models in, HTML out (maud escapes every value, so a stored
//! webhook body with `<script>` in it is text on the page). Handlers gather the values; tests render from seeded
//! ones.

use chrono::{DateTime, Utc};
use maud::{html, Markup, DOCTYPE};

use crate::board::Steer;
use crate::domain::registry;
use crate::eventlog::StoredEvent;
use crate::http::health::{loop_status, HealthBody, Status};

use super::plan::{item_line, plan_section, PlanView, Related};
use super::report::report_section;
use super::triage::{spec_form, spec_text, triage_note, SpecDraft};
use super::words::{age, column_label};
use crate::projectors::runs::RunRow;
use crate::projectors::tasks::{link_keys, TaskRow, TimelineEntry};
use crate::tasks::{Column, Task};

/// Which page the navigation marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nav {
    Board,
    Runs,
    Spend,
    Health,
    Events,
    Whatif,
    Other,
}

/// What every signed-in page needs.
#[derive(Clone, Debug)]
pub struct Frame {
    pub title: String,
    pub nav: Nav,
    pub csrf: String,
    /// The log position the page was rendered at: live updates start after it. `None`: not a live page.
    pub after: Option<i64>,
}

pub fn layout(frame: &Frame, body: Markup) -> Markup {
    let link = |nav: Nav, href: &str, label: &str| {
        html! { a href=(href) class=[(frame.nav == nav).then_some("here")] { (label) } }
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
                title { (frame.title) " · pidevops" }
                link rel="stylesheet" href="/assets/style.css";
                script src="/assets/app.js" defer {}
            }
            body {
                header.top {
                    span.brand { "pidevops" }
                    nav {
                        (link(Nav::Board, "/", "Board"))
                        (link(Nav::Runs, "/runs", "Runs"))
                        (link(Nav::Spend, "/spend", "Spend"))
                        (link(Nav::Health, "/status", "Health"))
                        (link(Nav::Events, "/events", "Events"))
                        (link(Nav::Whatif, "/whatif", "What if"))
                    }
                    form.inline method="post" action="/sign-out" {
                        input type="hidden" name="csrf" value=(frame.csrf);
                        button type="submit" { "Sign out" }
                    }
                }
                main data-after=[frame.after] { (body) }
            }
        }
    }
}

pub fn sign_in(next: &str, error: Option<&str>, closed: Option<&str>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
                title { "Sign in · pidevops" }
                link rel="stylesheet" href="/assets/style.css";
            }
            body {
                main.signin {
                    h1 { "pidevops" }
                    @if let Some(closed) = closed {
                        p.error { (closed) }
                    } @else {
                        form method="post" action="/sign-in" {
                            label for="token" { "Admin token" }
                            input #token type="password" name="token" autocomplete="current-password" required autofocus;
                            input type="hidden" name="next" value=(next);
                            @if let Some(error) = error { p.error { (error) } }
                            button type="submit" { "Sign in" }
                        }
                    }
                }
            }
        }
    }
}

/// What a `behind` badge's title says: what its code host found, or that its base moved and its refresh is to come.
pub(super) fn behind_title(row: &TaskRow) -> String {
    match row.behind.as_deref() {
        Some(crate::projectors::tasks::BASE_MOVED) => {
            "its base branch moved since its last push; pidevops brings it up to date in turn"
                .to_owned()
        }
        state => format!(
            "its code host finds its pull request {} on its base since its last push",
            state.unwrap_or_default()
        ),
    }
}

pub(super) fn source_badge(source: &str) -> Markup {
    let icon = match (registry::provider(source), source) {
        (Some(provider), _) => provider.label,
        (None, "cron") => "⏱ cron",
        (None, other) => other,
    };
    html! { span.badge.source title={ "from " (source) } { (icon) } }
}

pub struct TaskView {
    pub row: TaskRow,
    /// The task as its read model holds it (spec, follow-ups, last failure).
    pub task: Option<Task>,
    pub timeline: Vec<TimelineEntry>,
    pub runs: Vec<RunRow>,
    /// Each run's diff and log, as this machine has them.
    pub attempts: Vec<super::attempt::Attempt>,
    pub actions: Vec<Steer>,
    /// In review on a repository not on GitHub: the Land button (pidevops merges its commit into the base).
    pub landable: bool,
    /// A plan's items' rows, in the plan's order; empty for a task.
    pub items: Vec<TaskRow>,
    /// The rows the page refers to: a plan's items, an item's dependencies.
    pub related: Related,
    /// A spec edit that was refused, shown again in the form with why.
    pub draft: Option<SpecDraft>,
    pub csrf: String,
    pub now: DateTime<Utc>,
    /// Each refresh of its branch onto a moved base.
    pub refreshes: Vec<super::refreshes::Refresh>,
    /// What each refresh shows as its diff, row for row (`refreshes::diffs`).
    pub refresh_diffs: Vec<super::refreshes::Shown>,
    /// Where its code host compares two commits (`refreshes::compare_prefix`); none for another remote.
    pub compare: Option<String>,
}

/// What the page's spec is: a plan's goal, a triage task's form, or text.
enum SpecShown<'a> {
    Goal(&'a Task),
    Form(&'a Task),
    Text(&'a Task),
}

impl TaskView {
    fn spec_shown(&self) -> Option<SpecShown<'_>> {
        let task = self.task.as_ref()?;
        Some(if task.is_plan() {
            SpecShown::Goal(task)
        } else if task.column() == Column::Triage || self.draft.is_some() {
            // A refused edit is shown in its form wherever the task is now.
            SpecShown::Form(task)
        } else {
            SpecShown::Text(task)
        })
    }

    /// The buttons on top: a plan's approval and rejection are its plan's forms, and a triage task is approved with
    /// the spec as its form shows it.
    fn top_actions(&self) -> Vec<Steer> {
        let shown = self.spec_shown();
        self.actions
            .iter()
            .copied()
            .filter(|action| {
                !matches!(
                    (&shown, action),
                    (Some(SpecShown::Goal(..)), Steer::Approve | Steer::Reject)
                        | (Some(SpecShown::Form(_)), Steer::Approve)
                )
            })
            .collect()
    }
}

/// While a task waits for a person (any needs-human), its question (the agent's own words when it asked) and the
/// form that answers it: the first answer from anywhere becomes the next attempt's follow-up.
fn answer_form(task: &crate::tasks::Task, csrf: &str) -> Markup {
    let Some(flag) = task.needs_human() else {
        return html! {};
    };
    // Every flag is asked on every channel (a Linear elicitation, a Telegram reply prompt), so every flag takes an
    // answer here too; it is called a question only when the agent asked one.
    html! {
        section.question data-asked=(flag.question) {
            @if flag.question {
                h2 { "Question" }
                p { "The agent asks:" }
                blockquote.question-text.reason { (flag.reason) }
            } @else {
                h2 { "Your direction" }
                p.muted {
                    "The agent asked nothing; the reason above is pidevops's. "
                    "What you write here is the next attempt's follow-up."
                }
            }
            form.answer method="post" action={ "/tasks/" (task.id()) "/answer" } {
                input type="hidden" name="csrf" value=(csrf);
                label for="answer-text" { "Your answer (the next attempt gets it; the first answer from anywhere counts)" }
                textarea #answer-text name="text" rows="4" required {}
                div { button type="submit" data-action="answer" { "Answer" } }
            }
        }
    }
}

pub fn task(view: &TaskView) -> Markup {
    let row = &view.row;
    let shown = view.spec_shown();
    let top_actions = view.top_actions();
    html! {
        h1 {
            (row.id) " " (row.title) " "
            span.badge data-column=(row.column.as_str()) { (column_label(row.column)) }
            @if row.is_plan() { " " span.badge.plan { "plan" } }
            @if row.needs_human { " " span.badge.bad { "needs a human" } }
            @if row.stale_since().is_some() { " " span.badge.warn data-stale="1" { "stale" } }
            @if row.is_behind() { " " span.badge.warn data-behind="1" title=(behind_title(row)) { "behind" } }
        }
        p.muted {
            (source_badge(&row.source)) " " (row.repo) " · created " (age(view.now - row.created_at)) " ago"
            " · attempt " (row.attempts) " of " (row.max_attempts)
        }
        @if let Some(reason) = &row.needs_human_reason { p.error.reason { "Needs a human: " (reason) } }
        @if let Some(task) = &view.task { (answer_form(task, &view.csrf)) }
        @if let Some(task) = &view.task { (item_line(task, &view.related)) }
        @if !top_actions.is_empty() || view.landable {
            div.actions {
                @if view.landable {
                    form.inline method="post" action={ "/tasks/" (row.id) "/land" } {
                        input type="hidden" name="csrf" value=(view.csrf);
                        button type="submit" data-action="land" title="merge its commit into the base and push it" { "Land" }
                    }
                    " "
                }
                @for action in &top_actions {
                    form.inline method="post" action={ "/tasks/" (row.id) "/" (action.name()) } {
                        input type="hidden" name="csrf" value=(view.csrf);
                        button type="submit" data-action=(action.name()) { (action_label(*action)) }
                    }
                    " "
                }
            }
        }
        @if let Some(task) = &view.task { (triage_note(task, view.now)) }
        @match shown {
            Some(SpecShown::Goal(task)) => {
                (spec_text(task.spec(), "Goal"))
                (plan_section(&PlanView {
                    task,
                    items: &view.items,
                    related: &view.related,
                    actions: &view.actions,
                    csrf: &view.csrf,
                    now: view.now,
                }))
            }
            Some(SpecShown::Form(task)) => {
                h2 { "Spec" }
                (spec_form(task, view.draft.as_ref(), view.actions.contains(&Steer::Approve), &view.csrf))
            }
            Some(SpecShown::Text(task)) => { (spec_text(task.spec(), "Task")) }
            None => {}
        }
        @if let Some(task) = &view.task { (report_section(task.report())) }
        @if let Some(task) = &view.task { (super::follow_ups::follow_ups_section(task, view.now)) }
        // A plan's items have the branches; the plan pushes nothing, and may have no link at all.
        @if !row.is_plan() || !link_keys(&row.links).is_empty() {
            h2 { "Links" }
            ul {
                @for line in registry::page_links(&row.links) {
                    li {
                        (line.label) " "
                        @if let Some(url) = &line.url { a href=(url) { (line.text) } } @else { (line.text) }
                    }
                }
                @if !row.is_plan() { li { "Branch " code { "pidevops/" (row.id) } } }
            }
        }
        h2 { "Runs" }
        (runs_table(&view.runs, false, view.now))
        (super::attempt::attempts(&view.attempts))
        (super::refreshes::section(&view.refreshes, &view.refresh_diffs, view.compare.as_deref(), view.now))
        h2 { "Timeline" }
        table.timeline {
            thead { tr { th { "at" } th { "event" } th { "what" } th { "by" } } }
            tbody {
                @for entry in &view.timeline {
                    tr {
                        td { (stamp(entry.at, view.now)) }
                        td { (entry.event_type) }
                        td { (super::timeline::what(&entry.summary)) }
                        td { (entry.actor.as_deref().unwrap_or("")) }
                    }
                }
            }
        }
    }
}

fn action_label(action: Steer) -> &'static str {
    match action {
        Steer::Approve => "Approve",
        Steer::Reject => "Reject",
        Steer::Retry => "Retry",
        Steer::Cancel => "Cancel",
        Steer::Archive => "Archive",
        Steer::Done => "Mark done",
    }
}

fn runs_table(runs: &[RunRow], with_task: bool, now: DateTime<Utc>) -> Markup {
    html! {
        @if runs.is_empty() {
            p.muted { "No runs." }
        } @else {
            table.runs {
                thead { tr {
                    @if with_task { th { "task" } }
                    th { "attempt" } th { "state" } th { "agent" } th { "started" } th { "duration" } th { "outcome" }
                } }
                tbody {
                    @for run in runs {
                        tr data-state=(run.state) {
                            @if with_task { td { a href={ "/tasks/" (run.task_id) } { (run.task_id) } } }
                            td { (run.attempt) }
                            td { (run.state) }
                            td { (run.profile.as_deref().unwrap_or("")) }
                            td { @if let Some(at) = run.started_at { (stamp(at, now)) } }
                            td { @if let Some(d) = run.duration_s { (format!("{d:.1} s")) } }
                            td {
                                @if let Some(failure) = &run.failure { (super::report::failure(failure)) }
                                @if let Some(detail) = &run.detail { " — " (detail) }
                                @if let Some(sha) = &run.commit_sha { code { (sha.get(..7).unwrap_or(sha)) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

pub struct RunsView {
    pub running: Vec<RunRow>,
    pub recent: Vec<RunRow>,
    /// The dispatcher's last report (slots, queue), as `/health` has it.
    pub dispatcher: Option<crate::dispatch::dispatcher::DispatchStatus>,
    /// The session's CSRF token, for the forms that lift a profile's pause.
    pub csrf: String,
    pub now: DateTime<Utc>,
}

pub fn runs(view: &RunsView) -> Markup {
    html! {
        h1 { "Runs" }
        @match &view.dispatcher {
            Some(status) => {
                p.dispatcher {
                    "slots in use " strong { (status.running) } " of " (status.slots)
                    " · queued " strong { (status.queue) }
                    " · backing off " (status.backing_off)
                    @if status.paused { " · " span.badge.warn { "paused" } }
                }
                @for (profile, hold) in &status.limit_holds {
                        p.limit {
                            span.badge.warn { "limit" } " "
                            (hold.describe(profile))
                            " "
                            form.inline method="post" action=(format!("/runs/limits/{}/lift", form_urlencoded::byte_serialize(profile.as_bytes()).collect::<String>())) {
                                input type="hidden" name="csrf" value=(view.csrf);
                                button type="submit" { "Lift" }
                            }
                        }
                }
            }
            None => p.muted { "The dispatcher has not reported (dispatch is off, or it has not ticked yet)." },
        }
        h2 { "Running" }
        (runs_table(&view.running, true, view.now))
        h2 { "Recent" }
        (runs_table(&view.recent, true, view.now))
    }
}

/// A moment as people read it: the time with its zone, and how long ago.
pub(super) fn stamp(at: DateTime<Utc>, now: DateTime<Utc>) -> Markup {
    html! {
        time datetime=(at.to_rfc3339()) { (at.format("%Y-%m-%d %H:%M:%S UTC")) }
        " " span.muted.age { "(" (age(now - at)) " ago)" }
    }
}

/// `12 s ago`, with the exact time on hover; empty for never.
fn ago(now: DateTime<Utc>, at: Option<DateTime<Utc>>) -> Markup {
    html! {
        @if let Some(at) = at {
            time datetime=(at.to_rfc3339()) title=(at.format("%Y-%m-%d %H:%M:%S UTC")) { (age(now - at)) " ago" }
        }
    }
}

/// A check's values but its status, as `key: value` pairs.
fn check_summary(check: &serde_json::Value) -> String {
    check
        .as_object()
        .map(|fields| {
            fields
                .iter()
                .filter(|(key, _)| *key != "status")
                .map(|(key, value)| match value {
                    serde_json::Value::String(text) => format!("{key}: {text}"),
                    other => format!("{key}: {other}"),
                })
                .collect::<Vec<_>>()
                .join(" · ")
        })
        .unwrap_or_default()
}

pub fn health(body: &HealthBody, now: DateTime<Utc>) -> Markup {
    let status = |s: Status| match s {
        Status::Pass => "pass",
        Status::Warn => "warn",
        Status::Fail => "fail",
    };
    html! {
        h1 {
            "Health "
            span class={ "badge status-" (status(body.status)) } data-status=(status(body.status)) { (status(body.status)) }
        }
        p.muted {
            "instance " (body.instance) " · version " (body.version) " · up " (age(chrono::Duration::seconds(body.uptime_s as i64)))
            " · " a href="/health" { "as JSON" }
        }
        @if !body.problems.is_empty() {
            ul.problems { @for problem in &body.problems { li { (problem) } } }
        }
        h2 { "Checks" }
        table.checks {
            thead { tr { th { "check" } th { "status" } th { "details" } } }
            tbody {
                @for (name, check) in &body.checks {
                    @let check_status = check["status"].as_str().unwrap_or("");
                    tr data-check=(name) class=[matches!(check_status, "fail" | "warn").then(|| format!("status-{check_status}"))] {
                        th { (name) }
                        td { (check_status) }
                        td {
                            (check_summary(check))
                            details id={ "check-json-" (name) } { summary { "JSON" } pre { (serde_json::to_string_pretty(check).unwrap_or_default()) } }
                        }
                    }
                }
            }
        }
        h2 { "Loops" }
        table.loops {
            thead { tr {
                th { "loop" } th { "state" } th { "last tick" } th { "last success" } th { "errors" }
                th { "reason / last error" } th { "lease holder" } th { "JSON" }
            } }
            tbody {
                @for (name, report) in &body.loops {
                    @let loop_status = status(loop_status(name, report).0);
                    tr data-loop=(name) data-health=(loop_status) class=[(loop_status != "pass").then(|| format!("status-{loop_status}"))] {
                        td { (name) }
                        td {
                            (report.state.as_str())
                            @if report.stale { " (stale)" }
                            @if report.failing { " (failing)" }
                        }
                        td { (ago(now, report.last_tick_at)) }
                        td { (ago(now, report.last_ok_at)) }
                        td { (report.errors) " of " (report.ticks) }
                        td {
                            (report.reason.as_deref().unwrap_or(""))
                            @if let Some(error) = &report.last_error { @if report.reason.is_some() { " · " } (error) }
                        }
                        td { (report.lease.as_ref().and_then(|l| l.holder.clone()).unwrap_or_default()) }
                        td {
                            details id={ "loop-json-" (name) } { summary { "JSON" } pre { (serde_json::to_string_pretty(report).unwrap_or_default()) } }
                        }
                    }
                }
            }
        }
    }
}

/// What the events page filters on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventsFilter {
    pub source: Option<String>,
    pub event_type: Option<String>,
}

pub fn events(
    events: &[StoredEvent],
    filter: &EventsFilter,
    older: Option<i64>,
    now: DateTime<Utc>,
) -> Markup {
    html! {
        h1 { "Events" }
        form.filters method="get" action="/events" {
            select name="source" {
                option value="" { "every source" }
                @for source in registry::names().chain(["pidevops"]) {
                    option value=(source) selected[filter.source.as_deref() == Some(source)] { (source) }
                }
            }
            input type="text" name="type" placeholder="type, e.g. task.created" value=[filter.event_type.as_deref()];
            button type="submit" { "Filter" }
        }
        table.events {
            thead { tr { th { "position" } th { "recorded" } th { "source" } th { "type" } th { "stream" } } }
            tbody {
                @for event in events {
                    tr {
                        td { a href={ "/events/" (event.position) } { (event.position) } }
                        td { (stamp(event.recorded_at, now)) }
                        td { (event.source) }
                        td { (event.event_type) }
                        td { (event.stream.as_deref().unwrap_or("")) }
                    }
                }
            }
        }
        @if let Some(before) = older {
            p { a href={ "/events?before=" (before)
                @if let Some(s) = &filter.source { "&source=" (s) }
                @if let Some(t) = &filter.event_type { "&type=" (t) } } { "older" } }
        }
    }
}

pub fn event(event: &StoredEvent) -> Markup {
    let envelope = serde_json::to_string_pretty(&event.to_envelope()).unwrap_or_default();
    html! {
        h1 { "Event " (event.position) " " small.muted { (event.event_type) } }
        h2 { "Envelope" }
        pre.envelope { (envelope) }
        // JSON pretty-printed to read; the exact bytes (what a signature was checked against) one click away.
        @if let Ok(json) = serde_json::from_slice::<serde_json::Value>(&event.body) {
            details.body-pretty open {
                summary { "Body (" (event.body.len()) " bytes, " (event.content_type) "), pretty-printed" }
                pre.body { (serde_json::to_string_pretty(&json).unwrap_or_default()) }
            }
        }
        details.body-exact {
            summary { "Stored body (exact bytes, " (event.body.len()) " bytes, " (event.content_type) ")" }
            pre.body { (String::from_utf8_lossy(&event.body)) }
        }
    }
}

/// A page that says what went wrong (not found, refused).
pub fn message(title: &str, text: &str) -> Markup {
    html! { h1 { (title) } p { (text) } p { a href="/" { "Back to the board" } } }
}
