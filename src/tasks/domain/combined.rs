//! A plan landed as one (`[plans] land = "combined"`): the commit pidevops made by merging its items' recorded
//! commits, in the plan's order, into `pidevops/<plan>` from the base (`task.combined`), and whether that commit
//! is still the combination of the items as they stand.
//!
//! Recorded at most once per set of item commits: the same items at the same commits again change nothing (a
//! crash that redid the merge and the push, or a roll-up seen twice). An item that leaves review after it (sent
//! back for a new attempt) makes the combination stale: the plan leaves review with it, and when every open
//! item is in review again the items are combined again. Auto-land only ever merges a current combination.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::super::values::{Column, TaskId, TaskKind};
use super::landing::CommitSha;
use super::{Command, Task, TaskError, TaskEvent};

/// How a plan's items land (`[plans] land`): a pull request each, or combined into one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PlanLand {
    /// One pull request per item.
    #[default]
    Separate,
    /// The items' branches merged into one `pidevops/<plan>` branch and one pull request.
    Combined,
}

/// One item in a combination: its task and the commit pidevops recorded for its last successful attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CombinedItem {
    pub task: TaskId,
    pub commit: CommitSha,
}

/// The plan's combined branch as pidevops last made it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Combination {
    pub at: DateTime<Utc>,
    /// The last merge commit, pushed as `pidevops/<plan>`.
    pub commit: CommitSha,
    /// The base branch's commit the merges started from.
    pub base: CommitSha,
    /// The items merged, in the plan's order.
    pub items: Vec<CombinedItem>,
    /// Still the items as they stand: false once an item left review after it (its next attempt is not in it).
    pub current: bool,
}

/// `RecordCombined`: the plan's items (open, all in review) were merged into `commit`.
pub(super) fn decide(
    task: &Task,
    command: &Command,
    commit: &CommitSha,
    base: &CommitSha,
    items: &[CombinedItem],
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    if task.kind != TaskKind::Plan {
        return Err(TaskError::WrongKind {
            id: task.id,
            kind: task.kind,
            command: command.name(),
            needs: TaskKind::Plan,
        });
    }
    let Some(plan) = task.plan.as_ref().filter(|p| p.approved_at.is_some()) else {
        return Err(TaskError::NoProposal {
            id: task.id,
            command: command.name(),
        });
    };
    if task.column != Column::InReview {
        return Err(super::decision::wrong_column(
            task,
            command,
            &[Column::InReview],
        ));
    }
    let mut seen = Vec::with_capacity(items.len());
    for item in items {
        if !plan.children.contains(&item.task) || seen.contains(&item.task) {
            return Err(TaskError::NotItems {
                id: task.id,
                items: items
                    .iter()
                    .map(|i| i.task.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        seen.push(item.task);
    }
    if items.is_empty() {
        return Err(TaskError::NotItems {
            id: task.id,
            items: "none".into(),
        });
    }
    if plan
        .combined
        .as_ref()
        .is_some_and(|c| c.current && c.items == items)
    {
        return Ok(Vec::new());
    }
    Ok(vec![TaskEvent::Combined {
        at,
        commit: commit.clone(),
        base: base.clone(),
        items: items.to_vec(),
    }])
}

/// Applies `task.combined`: the plan's branch is the combination, and facts about an older one start over.
pub(super) fn apply(task: &mut Task, event: &TaskEvent) -> Result<(), TaskError> {
    use super::evolution::{inapplicable, require};
    let TaskEvent::Combined {
        at,
        commit,
        base,
        items,
    } = event
    else {
        return Err(inapplicable(Some(task), event, "not a combination".into()));
    };
    require(task, event, &[Column::InReview])?;
    let id = task.id;
    let Some(plan) = task.plan.as_mut().filter(|p| p.approved_at.is_some()) else {
        return Err(inapplicable(
            Some(task),
            event,
            "it is not an approved plan".into(),
        ));
    };
    plan.combined = Some(Combination {
        at: *at,
        commit: commit.clone(),
        base: base.clone(),
        items: items.clone(),
        current: true,
    });
    task.branch = Some(id.branch());
    super::landing::evolve(task, event, super::landing::LandingFact::NewPush)
}

/// The plan rolled up to `column`: anywhere but review, an item left review, so its combination is stale.
pub(super) fn rolled_up(plan: &mut super::PlanState, column: Column) {
    if column != Column::InReview {
        if let Some(combined) = plan.combined.as_mut() {
            combined.current = false;
        }
    }
}

/// For auto-land: the commit a plan's pull request may be merged at (its current combination's, or that brought up
/// to date with the base by a refresh), or why not.
pub(super) fn landing_commit(task: &Task) -> Result<&CommitSha, String> {
    match task.plan.as_ref().and_then(|p| p.combined.as_ref()) {
        // Brought up to date with the base since (`task.refreshed`; a new combination forgets it).
        Some(combined) if combined.current => Ok(task.refreshed.as_ref().unwrap_or(&combined.commit)),
        Some(_) => Err(
            "an item changed since its items were combined; they are combined again once all are in review"
                .into(),
        ),
        None => Err("its items' work is not combined yet".into()),
    }
}

#[cfg(test)]
#[path = "tests/combined.rs"]
mod tests;
