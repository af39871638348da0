//! A plan's checklist in its Linear agent session, part of the Linear policy: when a plan made from an issue with
//! a session is proposed, approved, and as its items move, the session's `plan` (Linear's checklist) is set to
//! one entry per item, its status from the item's column.
//!
//! Each state of the checklist is an effect of its own, `linear:plan:<session>:<n>`, numbered in the order they
//! were asked for. A state is asked for only when it differs from the last one asked for, and the runner makes one
//! provider's calls in the order of their causes, each settled before the next is asked for: so a replay (every
//! key recorded) sends nothing twice, and an older state is never sent after a newer one, even when the
//! checklist returns to a state it had before (that is a new number).

use anyhow::Context;

use super::LinearAction;
use crate::effects::handle::Handle;
use crate::effects::{stream, EffectEvent, Request};
use crate::providers::linear::{PlanStep, PlanStepStatus};
use crate::tasks::{Column, Task};

/// The longest entry Linear is shown: an item's title, written by a planner agent.
const MAX_CONTENT: usize = 200;

/// The request that brings the checklist of `task`'s plan (the task itself, or its parent) up to date in the
/// plan's agent session; `None` when there is no plan, no session, no proposal yet, or nothing changed.
pub(super) async fn checklist(
    fx: &impl Handle<Action = LinearAction>,
    task: &Task,
) -> anyhow::Result<Option<Request<LinearAction>>> {
    let plan = if task.is_plan() {
        task.clone()
    } else {
        let Some(parent) = task.parent() else {
            return Ok(None);
        };
        match fx.board().load(parent).await? {
            Some(loaded) => loaded.task,
            None => return Ok(None),
        }
    };
    let Some(session) = super::session_of(fx, &plan).await? else {
        return Ok(None);
    };
    let mut items = Vec::new();
    for child in plan
        .plan()
        .map(|p| p.children.as_slice())
        .unwrap_or_default()
    {
        if let Some(loaded) = fx.board().load(*child).await? {
            items.push(loaded.task);
        }
    }
    let Some(steps) = plan_checklist(&plan, &items) else {
        return Ok(None);
    };
    let (last, sent) = latest(fx, &session).await?;
    // Unchanged: the last state again, so one asked for and never settled (a crash) is still made.
    let number = match sent {
        Some(sent) if sent == steps => last,
        _ => last + 1,
    };
    Ok(Some(Request {
        key: key(&session, number),
        // A checklist Linear refuses is recorded, and flags nobody: the plan's work does not depend on it.
        task: None,
        action: LinearAction::SessionPlan {
            session,
            plan: steps,
        },
    }))
}

fn key(session: &str, number: u64) -> String {
    format!("linear:plan:{session}:{number}")
}

/// The plan's checklist: one entry per item of its proposal in the plan's order, pending until the item is a
/// task, then as its task stands. Empty after a rejection (that proposal is gone until the planner's next);
/// `None` before the first proposal.
pub fn plan_checklist(plan: &Task, items: &[Task]) -> Option<Vec<PlanStep>> {
    let state = plan.plan()?;
    let Some(proposal) = state.proposal.as_deref() else {
        return (state.revision > 0).then(Vec::new);
    };
    let cancelled = plan.column() == Column::Cancelled;
    Some(
        proposal
            .topological_order()
            .into_iter()
            .enumerate()
            .map(|(n, item)| {
                let made = state
                    .children
                    .get(n)
                    .and_then(|id| items.iter().find(|t| t.id() == *id));
                let status = match made {
                    Some(task) => step_status(task),
                    None if cancelled => PlanStepStatus::Canceled,
                    None => PlanStepStatus::Pending,
                };
                PlanStep {
                    content: item.title().trim().chars().take(MAX_CONTENT).collect(),
                    status,
                }
            })
            .collect(),
    )
}

/// Where an item's task stands, in Linear's words: in review is still in progress (its pull request is not
/// merged); an archived task was done, or cancelled when it carries a reason.
fn step_status(task: &Task) -> PlanStepStatus {
    match task.column() {
        Column::Triage | Column::Todo => PlanStepStatus::Pending,
        Column::InProgress | Column::InReview => PlanStepStatus::InProgress,
        Column::Done => PlanStepStatus::Completed,
        Column::Cancelled => PlanStepStatus::Canceled,
        Column::Archived if task.closed_reason().is_some() => PlanStepStatus::Canceled,
        Column::Archived => PlanStepStatus::Completed,
    }
}

/// The number of the session's last checklist asked for (0: none) and what it said.
async fn latest(
    fx: &impl Handle<Action = LinearAction>,
    session: &str,
) -> anyhow::Result<(u64, Option<Vec<PlanStep>>)> {
    let store = fx.log().store();
    let asked = |n: u64| {
        let name = stream(&key(session, n));
        async move {
            store
                .stream_version(&name)
                .await
                .map(|v| v > 0)
                .with_context(|| format!("reading {name}"))
        }
    };
    // Numbers are asked for in order from 1: gallop to one never asked for, then bisect to the last asked.
    let (mut low, mut high) = (0u64, 1u64);
    while asked(high).await? {
        low = high;
        high = high.saturating_mul(2);
    }
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if asked(mid).await? {
            low = mid;
        } else {
            high = mid;
        }
    }
    if low == 0 {
        return Ok((0, None));
    }
    let name = stream(&key(session, low));
    let events = store
        .read_stream(&name)
        .await
        .with_context(|| format!("reading {name}"))?;
    let sent = events.iter().find_map(|e| {
        match serde_json::from_slice::<EffectEvent<LinearAction>>(&e.body).ok()? {
            EffectEvent::Requested {
                action: LinearAction::SessionPlan { plan, .. },
                ..
            } => Some(plan),
            _ => None,
        }
    });
    Ok((low, sent))
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::tasks::plan::PlanDocument;
    use crate::tasks::values::Spec;
    use crate::tasks::{
        decide, evolve, ApprovalPolicy, Command, Family, MaxAttempts, NewTask, Priority, Reason,
        RunId, TaskId, TaskKind,
    };

    fn id(n: u64) -> TaskId {
        format!("T-{n}").parse().expect("a task id")
    }

    /// `task` after `command`, as the board would record it.
    fn after(task: Option<Task>, command: Command) -> Task {
        let events = decide(task.as_ref(), &command, Utc::now()).expect("accepted");
        events
            .iter()
            .fold(task, |task, event| {
                Some(evolve(task, event).expect("applies"))
            })
            .expect("a task")
    }

    fn created(n: u64, family: Family) -> Task {
        let new = NewTask {
            id: id(n),
            repo: "acme/app".parse().expect("a repo"),
            spec: Spec::new("Split the app", "", "").expect("a spec"),
            priority: Priority::Normal,
            links: Default::default(),
            approval: ApprovalPolicy::Auto,
            max_attempts: MaxAttempts::DEFAULT,
            ticket_version: None,
            agent: None,
            family,
        };
        after(None, Command::Create(Box::new(new)))
    }

    fn proposed(plan: Task) -> Task {
        let run = RunId(uuid::Uuid::now_v7());
        let document = PlanDocument::parse(
            br#"{"version": 1, "items": [
                {"id": "a", "title": " Part A ", "task": "a", "scope": ["a/**"], "done_when": "a", "depends_on": []},
                {"id": "b", "title": "Part B", "task": "b", "scope": ["b/**"], "done_when": "b", "depends_on": ["a"]}
            ]}"#,
            &crate::tasks::plan::PlanLimits::default(),
        )
        .expect("a valid plan");
        let started = after(Some(plan), Command::Start { run });
        after(
            Some(started),
            Command::ProposePlan {
                run,
                plan: Box::new(document),
            },
        )
    }

    fn steps(list: &[(&str, PlanStepStatus)]) -> Vec<PlanStep> {
        list.iter()
            .map(|(content, status)| PlanStep {
                content: (*content).to_owned(),
                status: *status,
            })
            .collect()
    }

    #[test]
    fn the_checklist_is_the_proposal_with_each_item_as_its_task_stands() {
        use PlanStepStatus::*;
        let plan = created(1, Family::plan());
        assert_eq!(
            plan_checklist(&plan, &[]),
            None,
            "nothing before a proposal"
        );
        // Approved as proposed (`auto`): its items are pending until they are tasks.
        let plan = proposed(plan);
        assert_eq!(
            plan_checklist(&plan, &[]),
            Some(steps(&[("Part A", Pending), ("Part B", Pending)]))
        );
        let plan = after(
            Some(plan),
            Command::AdoptChildren {
                children: vec![id(2), id(3)],
            },
        );
        let item = |n| {
            created(
                n,
                Family {
                    kind: TaskKind::Task,
                    parent: Some(id(1)),
                    depends_on: Vec::new(),
                    scope: None,
                },
            )
        };
        let running = after(
            Some(item(2)),
            Command::Start {
                run: RunId(uuid::Uuid::now_v7()),
            },
        );
        let cancel = Command::Cancel {
            reason: Reason::new("not needed").expect("a reason"),
        };
        let cancelled = after(Some(item(3)), cancel.clone());
        assert_eq!(
            plan_checklist(&plan, &[cancelled.clone(), running]),
            Some(steps(&[("Part A", InProgress), ("Part B", Canceled)]))
        );
        let archived = after(Some(cancelled), Command::Archive);
        assert_eq!(step_status(&archived), Canceled, "archived with a reason");
        assert_eq!(
            plan_checklist(&plan, &[archived]),
            Some(steps(&[("Part A", Pending), ("Part B", Canceled)])),
            "an item not found is pending"
        );
        // A plan cancelled before its items were made: nothing of it will run.
        let unmade = after(Some(proposed(created(5, Family::plan()))), cancel);
        assert_eq!(
            plan_checklist(&unmade, &[]).map(|s| s.iter().map(|s| s.status).collect::<Vec<_>>()),
            Some(vec![Canceled, Canceled])
        );
    }
}
