//! A task's spec on its page, pure: what a triage agent made of the ticket (its rewrite, marked as such, or why it
//! failed), and while the task waits in triage the form its approver edits it with (a POST with the CSRF token, to
//! `Command::UpdateSpec`), with "Save and approve" next to "Save" so what is approved is what the form shows.

use chrono::{DateTime, Utc};
use maud::{html, Markup};

use super::words::age;
use crate::tasks::{Spec, Task, TriageState};

/// A refused edit, shown again in the form with why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecDraft {
    pub task: String,
    pub scope: String,
    pub done_when: String,
    pub error: String,
}

/// What the triage agent did, if one ran.
pub fn triage_note(task: &Task, now: DateTime<Utc>) -> Markup {
    html! {
        @match task.triage() {
            Some(TriageState::Proposed { at }) => {
                p.triage.rewritten {
                    span.badge.warn { "rewritten by the triage agent" } " "
                    (age(now - *at)) " ago: the spec below is its rewrite of the ticket (the ticket as it came is in the timeline)."
                    @if task.column() == crate::tasks::Column::Triage { " Read it, and edit it before you approve." }
                }
            }
            Some(TriageState::Failed { at, reason }) => {
                p.triage.failed {
                    span.badge.bad { "triage failed" } " "
                    (age(now - *at)) " ago the triage agent gave nothing usable: " q { (reason) }
                    ". The spec below is the ticket as it came."
                }
            }
            None => {}
        }
    }
}

/// The spec as text.
pub fn spec_text(spec: &Spec, task_heading: &str) -> Markup {
    html! {
        h2 { (task_heading) } p { (spec.task()) }
        @if !spec.scope().is_empty() { h2 { "Scope" } p { (spec.scope()) } }
        @if !spec.done_when().is_empty() { h2 { "Done when" } p { (spec.done_when()) } }
    }
}

/// The spec as a form: the current spec, or the refused edit with why.
pub fn spec_form(task: &Task, draft: Option<&SpecDraft>, can_approve: bool, csrf: &str) -> Markup {
    let spec = task.spec();
    let (text, scope, done_when) = match draft {
        Some(d) => (d.task.as_str(), d.scope.as_str(), d.done_when.as_str()),
        None => (spec.task(), spec.scope(), spec.done_when()),
    };
    html! {
        form.spec-edit method="post" action={ "/tasks/" (task.id()) "/spec" } {
            input type="hidden" name="csrf" value=(csrf);
            @if let Some(draft) = draft { p.error.spec-error { "Not saved: " (draft.error) } }
            // A textarea drops one newline right after its start tag: this one, so a spec that starts with a blank
            // line keeps it, and saving an untouched form changes nothing.
            label for="spec-task" { "Task" }
            textarea #spec-task name="task" rows="8" required { "\n" (text) }
            label for="spec-scope" { "Scope" }
            textarea #spec-scope name="scope" rows="3" { "\n" (scope) }
            label for="spec-done-when" { "Done when" }
            textarea #spec-done-when name="done_when" rows="3" { "\n" (done_when) }
            div {
                button type="submit" name="then" value="save" data-action="save-spec" { "Save" } " "
                @if can_approve {
                    button type="submit" name="then" value="approve" data-action="approve" { "Save and approve" }
                }
            }
        }
    }
}
