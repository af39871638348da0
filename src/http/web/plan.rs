//! Plans on the dashboard, pure: a plan's page (its proposal item by item with the forms that approve it as a whole
//! or reject it with a comment; once approved, its items as tasks with their columns and what each waits for), and
//! what a card says of its family (a plan's progress, an item's plan and the dependencies it waits for). A
//! proposal is the planner's text: every value of it is escaped, and none becomes a link or an attribute.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use maud::{html, Markup};

use super::words::{age, column_label};
use crate::board::Steer;
use crate::projectors::tasks::TaskRow;
use crate::tasks::plan::PlanDocument;
use crate::tasks::{Column, PlanState, Task, TaskId};

/// A task a page refers to (a plan's item, an item's dependency), as its row says it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    pub column: Column,
    /// Done as a dependency counts it ([`TaskRow::is_done`]).
    pub done: bool,
}

/// The rows a page's plans and items refer to, by id: read with the page, from the tasks read model.
#[derive(Clone, Debug, Default)]
pub struct Related(HashMap<TaskId, Member>);

impl Related {
    pub fn add<'a>(&mut self, rows: impl IntoIterator<Item = &'a TaskRow>) {
        for row in rows {
            self.0.insert(
                row.id,
                Member {
                    column: row.column,
                    done: row.is_done(),
                },
            );
        }
    }

    /// The tasks `rows` refer to (a plan's items, an item's dependencies) that these rows do not hold yet.
    pub fn missing<'a>(&self, rows: impl IntoIterator<Item = &'a TaskRow>) -> Vec<TaskId> {
        let mut ids: Vec<TaskId> = rows
            .into_iter()
            .flat_map(|row| {
                let mut ids = row.depends_on();
                if row.is_plan() {
                    ids.extend(row.children());
                }
                ids
            })
            .filter(|id| !self.0.contains_key(id))
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// What a task that has not started waits for: its dependencies that are not done (one without a row is not
    /// done, as the dispatcher counts it). Empty once it started or closed.
    pub fn waits_for(&self, column: Column, depends_on: &[TaskId]) -> Vec<TaskId> {
        if !matches!(column, Column::Triage | Column::Todo) {
            return Vec::new();
        }
        depends_on
            .iter()
            .filter(|id| !self.0.get(id).is_some_and(|m| m.done))
            .copied()
            .collect()
    }

    /// How many of `items` are done.
    pub fn done(&self, items: &[TaskId]) -> usize {
        items
            .iter()
            .filter(|id| self.0.get(id).is_some_and(|m| m.done))
            .count()
    }
}

/// `T-4, T-5`, each a link to its page.
fn task_links(ids: &[TaskId]) -> Markup {
    html! {
        @for (i, id) in ids.iter().enumerate() {
            @if i > 0 { ", " }
            a href={ "/tasks/" (id) } { (id) }
        }
    }
}

/// What a card says of its family: a plan and its items' progress; an item's plan and what it waits for.
pub fn card_family(row: &TaskRow, related: &Related) -> Markup {
    let waits_for = related.waits_for(row.column, &row.depends_on());
    html! {
        @if row.is_plan() {
            @let items = row.children();
            div.family {
                span.badge.plan { "plan" } " "
                @if !items.is_empty() {
                    span.progress { (related.done(&items)) " of " (items.len()) " done" }
                } @else if row.has_proposal() && row.column == Column::Triage {
                    span.progress { "proposal waiting for approval" }
                } @else if row.column.is_open() {
                    span.progress.muted { "planning" }
                }
            }
        }
        @if let Some(plan) = row.parent() {
            div.family {
                "item of " a href={ "/tasks/" (plan) } { (plan) }
                @if !waits_for.is_empty() { " · " span.waits { "waits for " (task_links(&waits_for)) } }
            }
        } @else if !waits_for.is_empty() {
            div.family { span.waits { "waits for " (task_links(&waits_for)) } }
        }
    }
}

/// An item's place on its own page: its plan and what it waits for.
pub fn item_line(task: &Task, related: &Related) -> Markup {
    let waits_for = related.waits_for(task.column(), task.depends_on());
    html! {
        @if task.parent().is_some() || !task.depends_on().is_empty() {
            p.family {
                @if let Some(plan) = task.parent() { "An item of plan " a href={ "/tasks/" (plan) } { (plan) } "." }
                @if !task.depends_on().is_empty() {
                    " After " (task_links(task.depends_on())) "."
                }
                @if !waits_for.is_empty() {
                    " " span.waits { "Waits for " (task_links(&waits_for)) " to be done." }
                }
            }
        }
    }
}

/// What a plan's page shows of the plan: its proposal waiting for a person (with the forms), its items as tasks
/// once approved, or where the planner is.
pub struct PlanView<'a> {
    pub task: &'a Task,
    /// The items' rows in the plan's order (an item not on the board yet is left out).
    pub items: &'a [TaskRow],
    pub related: &'a Related,
    /// What the domain allows now: the forms are shown only for what it would accept.
    pub actions: &'a [Steer],
    pub csrf: &'a str,
    pub now: DateTime<Utc>,
}

pub fn plan_section(view: &PlanView) -> Markup {
    // A plan before its planner's first proposal has no plan state yet.
    let none = PlanState::default();
    let plan = view.task.plan().unwrap_or(&none);
    let id = view.task.id();
    html! {
        section.plan data-revision=(plan.revision) {
            h2 {
                "Plan"
                @if plan.revision > 0 { " " small.muted.revision { "revision " (plan.revision) } }
            }
            @if let Some(at) = plan.approved_at {
                p {
                    "Approved " (ago(view.now, at)) " ago as a whole; its items are tasks, in the plan's order."
                }
                @if view.items.is_empty() {
                    p.muted { "Its items are being made into tasks." }
                } @else {
                    (items_table(view.items, view.related))
                }
                @if let Some(proposal) = &plan.proposal {
                    details #approved-proposal {
                        summary { "The plan as it was approved" }
                        (proposal_list(proposal))
                    }
                }
            } @else if let Some(proposal) = &plan.proposal {
                @if view.actions.contains(&Steer::Approve) {
                    p { "The planner proposes these items. Approve the plan as a whole, or reject it with a comment: the planner plans again with it." }
                } @else {
                    p.muted { "Proposed, not approved." }
                }
                (proposal_list(proposal))
                div.plan-actions {
                    @if view.actions.contains(&Steer::Approve) {
                        form.inline method="post" action={ "/tasks/" (id) "/approve" } {
                            input type="hidden" name="csrf" value=(view.csrf);
                            button type="submit" data-action="approve-plan" { "Approve plan" }
                        }
                    }
                    @if view.actions.contains(&Steer::Reject) {
                        form.reject method="post" action={ "/tasks/" (id) "/reject" } {
                            input type="hidden" name="csrf" value=(view.csrf);
                            label for="reject-comment" { "What should the planner change?" }
                            textarea #reject-comment name="reason" rows="3" maxlength="2000" required {}
                            button type="submit" data-action="reject-plan" { "Reject with a comment" }
                        }
                    }
                }
            } @else {
                @if let Some(rejection) = &plan.rejection {
                    p.rejection { "The last proposal was rejected: " q { (rejection) } }
                }
                @if view.task.column().is_open() {
                    p.muted {
                        @if view.task.column() == Column::InProgress { "The planner is at work." }
                        @else if plan.rejection.is_some() { "The planner plans again with the comment." }
                        @else { "The planner has not proposed a plan yet." }
                    }
                }
            }
        }
    }
}

/// The proposal, item by item: what each is, what it may touch, when it is done and which items come first.
fn proposal_list(proposal: &PlanDocument) -> Markup {
    html! {
        @if let Some(summary) = proposal.summary().filter(|s| !s.trim().is_empty()) {
            p.summary { (summary) }
        }
        ol.proposal {
            @for item in proposal.items() {
                li.item {
                    div { strong.title { (item.title()) } " " code.item-id { (item.id()) } }
                    dl {
                        dt { "Task" } dd.task { (item.task()) }
                        dt { "Scope" }
                        dd.scope {
                            @if item.scope().is_empty() { span.muted { "none given" } }
                            @else { ul { @for entry in item.scope() { li { code { (entry) } } } } }
                        }
                        dt { "Done when" } dd.done-when { (item.done_when()) }
                        @if !item.depends_on().is_empty() {
                            dt { "Depends on" }
                            dd.depends-on {
                                @for (i, dependency) in item.depends_on().iter().enumerate() {
                                    @if i > 0 { ", " }
                                    code { (dependency) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// An approved plan's items as tasks: each links to its page, with its column, its flag and what it waits for.
fn items_table(items: &[TaskRow], related: &Related) -> Markup {
    html! {
        table.items {
            thead { tr { th { "item" } th { "title" } th { "column" } th { "waits for" } } }
            tbody {
                @for item in items {
                    @let waits_for = related.waits_for(item.column, &item.depends_on());
                    tr data-task=(item.id) data-column=(item.column.as_str()) {
                        td { a href={ "/tasks/" (item.id) } { (item.id) } }
                        td { (item.title) }
                        td {
                            span.badge data-column=(item.column.as_str()) { (column_label(item.column)) }
                            @if item.needs_human {
                                " " span.badge.bad title=[item.needs_human_reason.as_deref()] { "needs a human" }
                            }
                        }
                        td.waits { @if !waits_for.is_empty() { "waits for " (task_links(&waits_for)) } }
                    }
                }
            }
        }
    }
}

fn ago(now: DateTime<Utc>, at: DateTime<Utc>) -> Markup {
    html! { time datetime=(at.to_rfc3339()) { (age(now - at)) } }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: u64, column: Column, state: serde_json::Value) -> TaskRow {
        let at = Utc::now();
        TaskRow {
            id: format!("T-{id}").parse().unwrap(),
            number: id as i64,
            column,
            title: format!("task {id}"),
            repo: "acme/app".into(),
            priority: crate::tasks::Priority::Normal,
            needs_human: false,
            needs_human_reason: None,
            attempts: 0,
            max_attempts: 3,
            source: "api".into(),
            links: Default::default(),
            created_at: at,
            updated_at: at,
            version: 1,
            last_position: 1,
            state,
            behind: None,
        }
    }

    fn ids(ids: &[u64]) -> Vec<TaskId> {
        ids.iter()
            .map(|n| format!("T-{n}").parse().unwrap())
            .collect()
    }

    #[test]
    fn an_item_waits_for_its_dependencies_that_are_not_done_until_it_starts() {
        let mut related = Related::default();
        related.add(&[
            row(4, Column::Done, serde_json::json!({})),
            row(5, Column::InReview, serde_json::json!({})),
            // Archived after it was cancelled: not done.
            row(
                6,
                Column::Archived,
                serde_json::json!({"closed_reason": "no"}),
            ),
            row(7, Column::Archived, serde_json::json!({})),
        ]);
        let deps = ids(&[4, 5, 6, 7, 8]);
        assert_eq!(related.waits_for(Column::Todo, &deps), ids(&[5, 6, 8]));
        assert_eq!(related.waits_for(Column::Triage, &deps), ids(&[5, 6, 8]));
        assert!(related.waits_for(Column::InProgress, &deps).is_empty());
        assert!(related.waits_for(Column::Cancelled, &deps).is_empty());
        assert_eq!(related.done(&ids(&[4, 5, 7])), 2);
    }

    #[test]
    fn a_family_asks_only_for_the_rows_it_lacks() {
        let mut related = Related::default();
        let plan = row(
            1,
            Column::InProgress,
            serde_json::json!({"kind": "plan", "plan": {"children": ["T-2", "T-3"]}}),
        );
        let item = row(
            3,
            Column::Todo,
            serde_json::json!({"parent": "T-1", "depends_on": ["T-2", "T-9"]}),
        );
        related.add([&item]);
        assert_eq!(related.missing([&plan, &item]), ids(&[2, 9]));
    }
}
