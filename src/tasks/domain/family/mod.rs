//! Plans and triage: what a planner's proposal, its approval or rejection, a plan's items and a triage agent's
//! rewrite do to a task, and how a plan's column follows its items' (`roll_up`). Pure, like the rest of the domain.
//!
//! A plan's life: created in `todo` (the goal was stated by someone trusted: the planner may run) → its planner
//! attempt `in-progress` → `plan_proposed` back in `triage`, where a person approves the plan as a whole (or
//! `auto` does) or rejects it with a comment (the planner runs again with it) → `plan_approved`, `in-progress`,
//! its items become tasks (`children_created`) → `rolled_up` as they move: in review when all are, done when all
//! are done, the items waiting for a person named.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::super::plan::PlanDocument;
use super::super::values::{
    Column, MaxAttempts, Reason, RunId, RunPurpose, Spec, TaskId, TaskKind,
};
use super::{Command, Task, TaskError, TaskEvent};

/// A plan's proposal, approval and items.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PlanState {
    /// The plan proposed last (waiting for approval, or approved); `None` before the first and after a rejection.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub proposal: Option<Box<PlanDocument>>,
    /// How many plans the planner proposed so far (a rejection asks for the next).
    pub revision: u32,
    /// Why the last proposal was rejected: the planner's next prompt carries it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejection: Option<Reason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approved_at: Option<DateTime<Utc>>,
    /// The items, as tasks, in the plan's order (dependencies first).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<TaskId>,
    /// Items that wait for a person (the plan shows it, without an alert of its own: each item alerts).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children_needing_human: Vec<TaskId>,
    /// `land = "combined"`: the items' work merged into `pidevops/<plan>`, as last recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub combined: Option<super::Combination>,
}

/// What a triage agent made of a ticket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum TriageState {
    /// It rewrote the spec (the task's spec is now its proposal; the original is in the timeline).
    Proposed { at: DateTime<Utc> },
    /// It ran and gave nothing usable: the approver reads the ticket as it came.
    Failed { at: DateTime<Utc>, reason: Reason },
}

/// How a triage run ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum TriageOutcome {
    Proposed {
        spec: Spec,
    },
    Failed {
        reason: Reason,
    },
    /// pidevops stopped it (a shutdown): it runs again.
    Interrupted,
}

/// A plan's item as the roll-up sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildView {
    pub id: TaskId,
    pub column: Column,
    pub needs_human: bool,
}

/// Where an approved plan stands, from its items.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RollUp {
    pub column: Column,
    pub needs_human: Vec<TaskId>,
}

/// The plan's column from its items': done when every item is closed and one is done (cancelled when all were
/// cancelled), in review when every open item is, in progress otherwise. `None` without items.
pub fn roll_up(children: &[ChildView]) -> Option<RollUp> {
    if children.is_empty() {
        return None;
    }
    let open: Vec<&ChildView> = children.iter().filter(|c| c.column.is_open()).collect();
    let column = if open.is_empty() {
        // An archived item was done or cancelled; either way it is over, and only "all cancelled" cancels.
        if children.iter().all(|c| c.column == Column::Cancelled) {
            Column::Cancelled
        } else {
            Column::Done
        }
    } else if open.iter().all(|c| c.column == Column::InReview) {
        Column::InReview
    } else {
        Column::InProgress
    };
    let needs_human = open
        .iter()
        .filter(|c| c.needs_human)
        .map(|c| c.id)
        .collect();
    Some(RollUp {
        column,
        needs_human,
    })
}

/// The columns a roll-up may put a plan in.
const ROLLED_UP: &[Column] = &[
    Column::InProgress,
    Column::InReview,
    Column::Done,
    Column::Cancelled,
];

// ----------------------------------------------------------------------------------------------------------------
// decide
// ----------------------------------------------------------------------------------------------------------------

/// `approve` on a plan: the proposal waiting in triage is approved; before there is one there is nothing to approve.
pub(super) fn approve_plan(
    task: &Task,
    command: &Command,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    let plan = task.plan.as_ref();
    if plan.is_some_and(|p| p.approved_at.is_some()) {
        return Ok(Vec::new());
    }
    if task.column == Column::Triage && plan.is_some_and(|p| p.proposal.is_some()) {
        return Ok(vec![TaskEvent::PlanApproved {
            at,
            automatic: false,
        }]);
    }
    Err(TaskError::NoProposal {
        id: task.id,
        command: command.name(),
    })
}

/// `reject` on a plan: its proposal goes, and the planner runs again with the comment.
pub(super) fn reject_plan(
    task: &Task,
    command: &Command,
    reason: &Reason,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    let waiting = task.column == Column::Triage
        && task
            .plan
            .as_ref()
            .is_some_and(|p| p.proposal.is_some() && p.approved_at.is_none());
    if !waiting {
        if task.column == Column::Cancelled {
            return Ok(Vec::new());
        }
        return Err(TaskError::NoProposal {
            id: task.id,
            command: command.name(),
        });
    }
    // A person asked for another plan: that works even when the planner's attempts are spent.
    let max_attempts = if task.attempts >= task.max_attempts.get() {
        MaxAttempts::new(task.attempts + 1).map_err(|_| TaskError::AttemptCap {
            id: task.id,
            attempts: task.attempts,
        })?
    } else {
        task.max_attempts
    };
    Ok(vec![TaskEvent::PlanRejected {
        at,
        reason: reason.clone(),
        max_attempts,
    }])
}

/// A run of `purpose` that is `run` must be the live one.
fn live_purpose(
    task: &Task,
    command: &Command,
    run: RunId,
    needs: RunPurpose,
) -> Result<(), TaskError> {
    if task.column != Column::InProgress || task.run != Some(run) {
        return Err(TaskError::StaleRun {
            id: task.id,
            run,
            current: task.run,
        });
    }
    let purpose = task.purpose.unwrap_or_default();
    if purpose != needs {
        return Err(TaskError::WrongPurpose {
            id: task.id,
            run,
            purpose,
            command: command.name(),
            needs,
        });
    }
    Ok(())
}

pub(super) fn start_triage(
    task: &Task,
    command: &Command,
    run: RunId,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    if task.kind != TaskKind::Task {
        return Err(TaskError::WrongKind {
            id: task.id,
            kind: task.kind,
            command: command.name(),
            needs: TaskKind::Task,
        });
    }
    if task.column != Column::Triage {
        return Err(super::decision::wrong_column(
            task,
            command,
            &[Column::Triage],
        ));
    }
    if let Some(flag) = &task.needs_human {
        return Err(TaskError::NeedsHuman {
            id: task.id,
            reason: flag.reason.clone(),
        });
    }
    if task.triage.is_some() {
        // Triaged once already: the approver has its result.
        return Ok(Vec::new());
    }
    Ok(vec![TaskEvent::Started {
        at,
        run,
        attempt: 0,
        purpose: RunPurpose::Triage,
    }])
}

pub(super) fn propose_spec(
    task: &Task,
    command: &Command,
    run: RunId,
    spec: &Spec,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    live_purpose(task, command, run, RunPurpose::Triage)?;
    Ok(vec![TaskEvent::TriageEnded {
        at,
        run,
        outcome: TriageOutcome::Proposed { spec: spec.clone() },
    }])
}

/// A failed or interrupted triage run: not an attempt, so nothing is counted; the task is back in triage.
pub(super) fn triage_failed(
    task: &Task,
    run: RunId,
    interrupted: bool,
    reason: &Reason,
    at: DateTime<Utc>,
) -> Vec<TaskEvent> {
    let _ = task;
    vec![TaskEvent::TriageEnded {
        at,
        run,
        outcome: if interrupted {
            TriageOutcome::Interrupted
        } else {
            TriageOutcome::Failed {
                reason: reason.clone(),
            }
        },
    }]
}

pub(super) fn propose_plan(
    task: &Task,
    command: &Command,
    run: RunId,
    plan: &PlanDocument,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    live_purpose(task, command, run, RunPurpose::Plan)?;
    let mut events = vec![TaskEvent::PlanProposed {
        at,
        run,
        plan: Box::new(plan.clone()),
    }];
    // `auto` approves the plan as proposed, recorded as an approval so everything downstream sees one path.
    if task.approval == super::super::values::ApprovalPolicy::Auto {
        events.push(TaskEvent::PlanApproved {
            at,
            automatic: true,
        });
    }
    Ok(events)
}

fn approved_plan(task: &Task, command: &Command) -> Result<(), TaskError> {
    if task.is_approved_plan() {
        Ok(())
    } else {
        Err(TaskError::NoProposal {
            id: task.id,
            command: command.name(),
        })
    }
}

pub(super) fn adopt_children(
    task: &Task,
    command: &Command,
    children: &[TaskId],
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    approved_plan(task, command)?;
    let existing = task
        .plan
        .as_ref()
        .map(|p| p.children.as_slice())
        .unwrap_or_default();
    if existing == children {
        return Ok(Vec::new());
    }
    if !existing.is_empty() || children.is_empty() {
        let list = |ids: &[TaskId]| {
            ids.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(TaskError::ChildrenConflict {
            id: task.id,
            existing: list(existing),
            proposed: list(children),
        });
    }
    Ok(vec![TaskEvent::ChildrenCreated {
        at,
        children: children.to_vec(),
    }])
}

pub(super) fn roll_up_plan(
    task: &Task,
    command: &Command,
    column: Column,
    needs_human: &[TaskId],
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    approved_plan(task, command)?;
    if !task.column.is_open() {
        // Closed (a person cancelled it, or its items all ended): later news of its items changes nothing.
        return Ok(Vec::new());
    }
    if !ROLLED_UP.contains(&column) {
        return Err(super::decision::wrong_column(task, command, ROLLED_UP));
    }
    let same_flags = task
        .plan
        .as_ref()
        .is_some_and(|p| p.children_needing_human == needs_human);
    if column == task.column && same_flags {
        return Ok(Vec::new());
    }
    Ok(vec![TaskEvent::RolledUp {
        at,
        column,
        needs_human: needs_human.to_vec(),
    }])
}

// ----------------------------------------------------------------------------------------------------------------
// evolve
// ----------------------------------------------------------------------------------------------------------------

fn require_plan<'a>(task: &'a mut Task, event: &TaskEvent) -> Result<&'a mut PlanState, TaskError> {
    if task.kind != TaskKind::Plan {
        return Err(super::evolution::inapplicable(
            Some(task),
            event,
            "it is not a plan".into(),
        ));
    }
    Ok(task.plan.get_or_insert_with(PlanState::default))
}

/// A plan rolled up from its items: to an open column, or closed (then no item waits for a person any more).
fn apply_roll_up(
    task: &mut Task,
    event: &TaskEvent,
    column: Column,
    needs_human: &[TaskId],
) -> Result<(), TaskError> {
    use super::evolution::{inapplicable, require};
    require(task, event, super::OPEN)?;
    if !ROLLED_UP.contains(&column) {
        return Err(inapplicable(
            Some(task),
            event,
            format!("a plan does not roll up to {column}"),
        ));
    }
    let state = require_plan(task, event)?;
    if state.approved_at.is_none() {
        return Err(inapplicable(
            Some(task),
            event,
            "it is not an approved plan".into(),
        ));
    }
    state.children_needing_human = needs_human.to_vec();
    super::combined::rolled_up(state, column);
    match column {
        Column::Done | Column::Cancelled => {
            task.close(column, None);
            if let Some(state) = task.plan.as_mut() {
                state.children_needing_human.clear();
            }
        }
        _ => task.column = column,
    }
    Ok(())
}

/// A plan or triage event's fields: `evolve` routes the six here by variant, so nothing else can arrive.
pub(super) enum FamilyEvent<'a> {
    TriageEnded {
        at: DateTime<Utc>,
        run: RunId,
        outcome: &'a TriageOutcome,
    },
    PlanProposed {
        run: RunId,
        plan: &'a PlanDocument,
    },
    PlanApproved {
        at: DateTime<Utc>,
    },
    PlanRejected {
        reason: &'a Reason,
        max_attempts: MaxAttempts,
    },
    ChildrenCreated {
        children: &'a [TaskId],
    },
    RolledUp {
        column: Column,
        needs_human: &'a [TaskId],
    },
}

/// Applies a plan or triage event (`event` names it in errors).
pub(super) fn apply(
    task: &mut Task,
    event: &TaskEvent,
    family_event: FamilyEvent<'_>,
) -> Result<(), TaskError> {
    use super::evolution::{inapplicable, require};
    match family_event {
        FamilyEvent::TriageEnded { at, run, outcome } => {
            require(task, event, &[Column::InProgress])?;
            if task.run != Some(run) || task.purpose != Some(RunPurpose::Triage) {
                return Err(inapplicable(
                    Some(task),
                    event,
                    "its run is not the live triage run".into(),
                ));
            }
            task.column = Column::Triage;
            task.run = None;
            task.purpose = None;
            task.triage = match outcome {
                TriageOutcome::Proposed { spec } => {
                    task.spec = spec.clone();
                    Some(TriageState::Proposed { at })
                }
                TriageOutcome::Failed { reason } => Some(TriageState::Failed {
                    at,
                    reason: reason.clone(),
                }),
                TriageOutcome::Interrupted => None,
            };
        }
        FamilyEvent::PlanProposed { run, plan } => {
            require(task, event, &[Column::InProgress])?;
            if task.run != Some(run) || task.purpose != Some(RunPurpose::Plan) {
                return Err(inapplicable(
                    Some(task),
                    event,
                    "its run is not the live planner run".into(),
                ));
            }
            task.column = Column::Triage;
            task.run = None;
            task.purpose = None;
            let state = require_plan(task, event)?;
            state.proposal = Some(Box::new(plan.clone()));
            state.revision += 1;
            state.rejection = None;
        }
        FamilyEvent::PlanApproved { at } => {
            require(task, event, &[Column::Triage])?;
            let state = require_plan(task, event)?;
            if state.proposal.is_none() || state.approved_at.is_some() {
                return Err(inapplicable(
                    Some(task),
                    event,
                    "it has no proposal waiting".into(),
                ));
            }
            state.approved_at = Some(at);
            task.column = Column::InProgress;
        }
        FamilyEvent::PlanRejected {
            reason,
            max_attempts,
        } => {
            require(task, event, &[Column::Triage])?;
            if max_attempts < task.max_attempts {
                return Err(inapplicable(
                    Some(task),
                    event,
                    "the budget would shrink".into(),
                ));
            }
            task.max_attempts = max_attempts;
            let state = require_plan(task, event)?;
            if state.proposal.is_none() || state.approved_at.is_some() {
                return Err(inapplicable(
                    Some(task),
                    event,
                    "it has no proposal waiting".into(),
                ));
            }
            state.proposal = None;
            state.rejection = Some(reason.clone());
            task.column = Column::Todo;
        }
        FamilyEvent::ChildrenCreated { children } => {
            let state = require_plan(task, event)?;
            if state.approved_at.is_none() || !state.children.is_empty() {
                return Err(inapplicable(
                    Some(task),
                    event,
                    "it is not an approved plan without items".into(),
                ));
            }
            state.children = children.to_vec();
        }
        FamilyEvent::RolledUp {
            column,
            needs_human,
        } => apply_roll_up(task, event, column, needs_human)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests;
