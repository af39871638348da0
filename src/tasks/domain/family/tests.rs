//! Plans and triage, case by case: a plan's life from its planner to its items' roll-up, and the triage run.

use super::super::tests::{at, reason, repo, run};
use super::*;
use crate::tasks::plan::{PlanDocument, PlanLimits};
use crate::tasks::values::{ApprovalPolicy, Links, Priority};
use crate::tasks::{decide, evolve, Family, NewTask, RetryCause};

fn id() -> TaskId {
    "T-3".parse().expect("a valid id")
}

fn t(n: u64) -> TaskId {
    format!("T-{n}").parse().expect("a valid id")
}

fn create(kind: TaskKind, approval: ApprovalPolicy) -> Command {
    Command::Create(Box::new(NewTask {
        id: id(),
        repo: repo(),
        spec: Spec::new("Ship orders end to end", "", "an order can be placed").expect("a spec"),
        priority: Priority::Normal,
        links: Links::default(),
        approval,
        max_attempts: MaxAttempts::new(2).expect("a budget"),
        ticket_version: None,
        agent: None,
        family: Family {
            kind,
            ..Family::default()
        },
    }))
}

fn document() -> PlanDocument {
    let json = br#"{"version": 1, "items": [
        {"id": "db", "title": "Orders table", "task": "Add it", "scope": ["migrations/**"], "done_when": "migrates", "depends_on": []},
        {"id": "api", "title": "Orders API", "task": "Serve it", "scope": ["src/api/**"], "done_when": "served", "depends_on": ["db"]}
    ]}"#;
    PlanDocument::parse(json, &PlanLimits::default()).expect("a valid plan")
}

/// Decides `command` and applies what it decided.
fn run_command(state: Option<Task>, command: Command) -> Result<(Task, Vec<TaskEvent>), TaskError> {
    let events = decide(state.as_ref(), &command, at(5))?;
    let task = events
        .iter()
        .try_fold(state, |s, e| evolve(s, e).map(Some))?
        .expect("a task");
    Ok((task, events))
}

fn then(task: Task, command: Command) -> Task {
    let name = command.name();
    run_command(Some(task), command)
        .unwrap_or_else(|e| panic!("{name} refused: {e}"))
        .0
}

fn refused(task: &Task, command: Command) -> TaskError {
    decide(Some(task), &command, at(6)).expect_err("refused")
}

fn plan(approval: ApprovalPolicy) -> Task {
    run_command(None, create(TaskKind::Plan, approval))
        .expect("created")
        .0
}

fn planning(approval: ApprovalPolicy) -> Task {
    then(plan(approval), Command::Start { run: run(1) })
}

fn proposed(approval: ApprovalPolicy) -> Task {
    then(
        planning(approval),
        Command::ProposePlan {
            run: run(1),
            plan: Box::new(document()),
        },
    )
}

fn approved() -> Task {
    then(proposed(ApprovalPolicy::Manual), Command::Approve)
}

#[test]
fn a_plan_starts_in_todo_whatever_its_approval_policy_and_its_run_is_a_planner_attempt() {
    for approval in [ApprovalPolicy::Manual, ApprovalPolicy::Auto] {
        let (task, events) = run_command(None, create(TaskKind::Plan, approval)).unwrap();
        assert_eq!(
            events.len(),
            1,
            "no approval recorded for the goal: {events:?}"
        );
        assert_eq!(task.column(), Column::Todo);
        assert!(task.is_plan() && task.can_start());
        let (task, events) = run_command(Some(task), Command::Start { run: run(1) }).unwrap();
        assert!(matches!(
            events[0],
            TaskEvent::Started {
                attempt: 1,
                purpose: RunPurpose::Plan,
                ..
            }
        ));
        assert_eq!(task.purpose(), Some(RunPurpose::Plan));
        assert_eq!(task.attempts(), 1);
    }
}

#[test]
fn a_planner_run_cannot_submit_work_and_a_work_run_cannot_propose_a_plan() {
    let task = planning(ApprovalPolicy::Manual);
    let submit = Command::SubmitForReview {
        run: run(1),
        branch: id().branch(),
        pr: None,
        report: Default::default(),
    };
    assert!(matches!(
        refused(&task, submit),
        TaskError::WrongPurpose {
            needs: RunPurpose::Work,
            ..
        }
    ));
    let work = run_command(None, create(TaskKind::Task, ApprovalPolicy::Auto))
        .unwrap()
        .0;
    let work = then(work, Command::Start { run: run(2) });
    assert_eq!(work.purpose(), Some(RunPurpose::Work));
    let propose = Command::ProposePlan {
        run: run(2),
        plan: Box::new(document()),
    };
    assert!(matches!(
        refused(&work, propose),
        TaskError::WrongPurpose {
            needs: RunPurpose::Plan,
            ..
        }
    ));
    // A stale run's proposal is refused as stale.
    let stale = Command::ProposePlan {
        run: run(9),
        plan: Box::new(document()),
    };
    assert!(matches!(refused(&task, stale), TaskError::StaleRun { .. }));
}

#[test]
fn a_proposal_waits_in_triage_for_a_person_and_approval_moves_the_plan_to_its_items() {
    let task = proposed(ApprovalPolicy::Manual);
    assert_eq!(task.column(), Column::Triage);
    assert_eq!(task.run(), None);
    assert_eq!(task.purpose(), None);
    let state = task.plan().unwrap();
    assert_eq!(state.revision, 1);
    assert_eq!(state.proposal.as_deref(), Some(&document()));
    assert!(!task.is_approved_plan());

    let (task, events) = run_command(Some(task), Command::Approve).unwrap();
    assert!(matches!(
        events[..],
        [TaskEvent::PlanApproved {
            automatic: false,
            ..
        }]
    ));
    assert_eq!(task.column(), Column::InProgress);
    assert!(task.is_approved_plan());
    assert!(!task.can_start(), "an approved plan never runs again");
    // A second approval (a double click) is a no-op.
    assert!(decide(Some(&task), &Command::Approve, at(7))
        .unwrap()
        .is_empty());
}

#[test]
fn auto_approves_the_plan_as_proposed() {
    let (task, events) = run_command(
        Some(planning(ApprovalPolicy::Auto)),
        Command::ProposePlan {
            run: run(1),
            plan: Box::new(document()),
        },
    )
    .unwrap();
    assert!(matches!(
        events[..],
        [
            TaskEvent::PlanProposed { .. },
            TaskEvent::PlanApproved {
                automatic: true,
                ..
            }
        ]
    ));
    assert!(task.is_approved_plan());
    assert_eq!(task.column(), Column::InProgress);
}

#[test]
fn there_is_nothing_to_approve_before_a_proposal() {
    for task in [
        plan(ApprovalPolicy::Manual),
        planning(ApprovalPolicy::Manual),
    ] {
        assert!(matches!(
            refused(&task, Command::Approve),
            TaskError::NoProposal { .. }
        ));
    }
}

#[test]
fn rejecting_a_proposal_sends_the_planner_back_with_the_comment_even_when_its_attempts_are_spent() {
    let task = proposed(ApprovalPolicy::Manual);
    let task = then(
        task,
        Command::Reject {
            reason: reason("split the API from the UI"),
        },
    );
    assert_eq!(task.column(), Column::Todo);
    let state = task.plan().unwrap();
    assert!(state.proposal.is_none());
    assert_eq!(
        state.rejection.as_ref().map(Reason::as_str),
        Some("split the API from the UI")
    );
    assert_eq!(task.max_attempts().get(), 2);
    // Second planner attempt, the last of 2: proposed, rejected again, and the budget grows so it can run.
    let task = then(task, Command::Start { run: run(2) });
    let task = then(
        task,
        Command::ProposePlan {
            run: run(2),
            plan: Box::new(document()),
        },
    );
    assert_eq!(task.plan().unwrap().revision, 2);
    assert!(task.plan().unwrap().rejection.is_none());
    let task = then(
        task,
        Command::Reject {
            reason: reason("still one item too many"),
        },
    );
    assert_eq!(task.max_attempts().get(), 3);
    assert!(task.can_start());
}

#[test]
fn an_invalid_plan_is_a_failed_attempt_and_the_last_one_asks_a_human() {
    let failed = |run_id| Command::Retry {
        cause: RetryCause::RunFailed { run: run_id },
        reason: reason(
            "The plan in .pidevops/plan.json was refused:\n- depends_on cycle: a -> b -> a",
        ),
    };
    let task = then(planning(ApprovalPolicy::Manual), failed(run(1)));
    assert_eq!(task.column(), Column::Todo);
    assert!(task.needs_human().is_none());
    assert!(task
        .last_failure()
        .unwrap()
        .reason
        .as_str()
        .contains("cycle"));
    let task = then(task, Command::Start { run: run(2) });
    let task = then(task, failed(run(2)));
    assert!(task.needs_human().is_some(), "2 of 2 attempts failed");
}

#[test]
fn an_approved_plan_refuses_the_commands_of_work() {
    let task = approved();
    for command in [
        Command::Start { run: run(5) },
        Command::Complete,
        Command::Retry {
            cause: RetryCause::ChangesRequested,
            reason: reason("again"),
        },
        Command::SubmitForReview {
            run: run(5),
            branch: id().branch(),
            pr: None,
            report: Default::default(),
        },
    ] {
        assert!(
            matches!(refused(&task, command.clone()), TaskError::PlanWork { .. }),
            "{} refused as plan work",
            command.name()
        );
    }
    // Cancelling is still a person's right.
    let task = then(
        task,
        Command::Cancel {
            reason: reason("not needed"),
        },
    );
    assert_eq!(task.column(), Column::Cancelled);
}

#[test]
fn children_are_adopted_once() {
    let task = approved();
    let children = vec![t(4), t(5)];
    let task = then(
        task,
        Command::AdoptChildren {
            children: children.clone(),
        },
    );
    assert_eq!(task.plan().unwrap().children, children);
    assert!(decide(
        Some(&task),
        &Command::AdoptChildren {
            children: children.clone()
        },
        at(8)
    )
    .unwrap()
    .is_empty());
    assert!(matches!(
        refused(
            &task,
            Command::AdoptChildren {
                children: vec![t(6)]
            }
        ),
        TaskError::ChildrenConflict { .. }
    ));
    assert!(matches!(
        refused(
            &proposed(ApprovalPolicy::Manual),
            Command::AdoptChildren { children }
        ),
        TaskError::NoProposal { .. }
    ));
}

#[test]
fn a_plan_rolls_up_with_its_items_until_it_closes() {
    let task = then(
        approved(),
        Command::AdoptChildren {
            children: vec![t(4), t(5)],
        },
    );
    let roll = |column, needs_human: Vec<TaskId>| Command::RollUp {
        column,
        needs_human,
    };
    // The same as it is: nothing.
    assert!(
        decide(Some(&task), &roll(Column::InProgress, vec![]), at(9))
            .unwrap()
            .is_empty()
    );
    let task = then(task, roll(Column::InProgress, vec![t(5)]));
    assert_eq!(
        task.waiting_for_human().as_deref(),
        Some("T-5 needs a human")
    );
    assert!(task.needs_human().is_none(), "no alert of its own");
    let task = then(task, roll(Column::InReview, vec![]));
    assert_eq!(task.column(), Column::InReview);
    assert_eq!(task.waiting_for_human(), None);
    let task = then(task, roll(Column::Done, vec![]));
    assert_eq!(task.column(), Column::Done);
    // Closed: later news of an item changes nothing.
    assert!(
        decide(Some(&task), &roll(Column::InProgress, vec![]), at(9))
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        refused(&approved(), roll(Column::Triage, vec![])),
        TaskError::WrongColumn { .. }
    ));
    assert!(matches!(
        refused(
            &proposed(ApprovalPolicy::Manual),
            roll(Column::Done, vec![])
        ),
        TaskError::NoProposal { .. }
    ));
}

#[test]
fn a_follow_up_on_a_plan_in_review_stays_with_the_plan_and_sends_nothing_back() {
    let task = then(
        approved(),
        Command::RollUp {
            column: Column::InReview,
            needs_human: vec![],
        },
    );
    let task = then(
        task,
        Command::AttachFollowUp {
            text: crate::tasks::FollowUpText::new("one more thing").unwrap(),
            origin: None,
            send_back: true,
        },
    );
    // Its items hold the work: the plan stays their roll-up instead of going back to todo as a work task would.
    assert_eq!(task.column(), Column::InReview);
    assert_eq!(task.follow_ups().len(), 1);
    assert_eq!(task.attempts(), approved().attempts());
}

#[test]
fn roll_up_follows_the_items() {
    let child = |n, column, needs_human| ChildView {
        id: t(n),
        column,
        needs_human,
    };
    let column_of = |children: &[ChildView]| roll_up(children).map(|r| r.column);
    assert_eq!(roll_up(&[]), None);
    assert_eq!(
        column_of(&[
            child(1, Column::Todo, false),
            child(2, Column::InProgress, false)
        ]),
        Some(Column::InProgress)
    );
    assert_eq!(
        column_of(&[
            child(1, Column::InReview, false),
            child(2, Column::Todo, false)
        ]),
        Some(Column::InProgress),
        "in review only when every open item is"
    );
    assert_eq!(
        column_of(&[
            child(1, Column::InReview, false),
            child(2, Column::Done, false)
        ]),
        Some(Column::InReview)
    );
    assert_eq!(
        column_of(&[
            child(1, Column::Done, false),
            child(2, Column::Archived, false)
        ]),
        Some(Column::Done)
    );
    assert_eq!(
        column_of(&[
            child(1, Column::Done, false),
            child(2, Column::Cancelled, false)
        ]),
        Some(Column::Done)
    );
    assert_eq!(
        column_of(&[
            child(1, Column::Cancelled, false),
            child(2, Column::Cancelled, false)
        ]),
        Some(Column::Cancelled)
    );
    let flagged = roll_up(&[
        child(1, Column::Todo, true),
        child(2, Column::InReview, false),
        child(3, Column::Done, false),
    ])
    .unwrap();
    assert_eq!(flagged.needs_human, vec![t(1)]);
    assert_eq!(flagged.column, Column::InProgress);
}

// --- triage ------------------------------------------------------------------------------------------------

fn waiting() -> Task {
    run_command(None, create(TaskKind::Task, ApprovalPolicy::Manual))
        .unwrap()
        .0
}

fn triaging() -> Task {
    then(waiting(), Command::StartTriage { run: run(1) })
}

#[test]
fn a_triage_run_is_not_an_attempt_and_its_spec_is_what_the_approver_sees() {
    let task = waiting();
    assert!(task.can_triage());
    let (task, events) = run_command(Some(task), Command::StartTriage { run: run(1) }).unwrap();
    assert!(matches!(
        events[..],
        [TaskEvent::Started {
            attempt: 0,
            purpose: RunPurpose::Triage,
            ..
        }]
    ));
    assert_eq!(task.column(), Column::InProgress);
    assert_eq!(task.attempts(), 0);
    // The approver waits for the agent (or cancels).
    assert!(matches!(
        refused(&task, Command::Approve),
        TaskError::Triaging { .. }
    ));
    let spec = Spec::new(
        "Return 404 for unknown orders",
        "src/api/orders.rs",
        "a test asks for T-0",
    )
    .unwrap();
    let task = then(
        task,
        Command::ProposeSpec {
            run: run(1),
            spec: spec.clone(),
        },
    );
    assert_eq!(task.column(), Column::Triage);
    assert_eq!(task.spec(), &spec);
    assert!(matches!(task.triage(), Some(TriageState::Proposed { .. })));
    assert!(!task.can_triage(), "triaged once");
    assert!(
        decide(Some(&task), &Command::StartTriage { run: run(2) }, at(9))
            .unwrap()
            .is_empty()
    );
    // The approver edits and approves; the first attempt is attempt 1.
    let task = then(task, Command::Approve);
    let task = then(task, Command::Start { run: run(3) });
    assert_eq!(task.attempts(), 1);
}

#[test]
fn a_failed_triage_run_leaves_the_ticket_as_it_came_and_an_interrupted_one_runs_again() {
    let failed = then(
        triaging(),
        Command::Retry {
            cause: RetryCause::RunFailed { run: run(1) },
            reason: reason("run exit (attempt 0): status 1"),
        },
    );
    assert_eq!(failed.column(), Column::Triage);
    assert_eq!(failed.attempts(), 0);
    assert!(failed.last_failure().is_none());
    assert!(matches!(failed.triage(), Some(TriageState::Failed { .. })));
    assert_eq!(failed.spec().task(), "Ship orders end to end");

    let interrupted = then(
        triaging(),
        Command::Retry {
            cause: RetryCause::Interrupted { run: run(1) },
            reason: reason("pidevops shut down"),
        },
    );
    assert_eq!(interrupted.column(), Column::Triage);
    assert!(interrupted.can_triage());
    assert_eq!(
        interrupted.max_attempts().get(),
        2,
        "nothing given back: nothing was taken"
    );
}

#[test]
fn triage_is_for_tasks_waiting_in_triage_only() {
    assert!(matches!(
        refused(
            &plan(ApprovalPolicy::Manual),
            Command::StartTriage { run: run(1) }
        ),
        TaskError::WrongKind { .. }
    ));
    let todo = then(waiting(), Command::Approve);
    assert!(matches!(
        refused(&todo, Command::StartTriage { run: run(1) }),
        TaskError::WrongColumn { .. }
    ));
    let submit = Command::SubmitForReview {
        run: run(1),
        branch: id().branch(),
        pr: None,
        report: Default::default(),
    };
    assert!(matches!(
        refused(&triaging(), submit),
        TaskError::WrongPurpose { .. }
    ));
    let cancelled = then(
        triaging(),
        Command::Cancel {
            reason: reason("duplicate"),
        },
    );
    assert_eq!(cancelled.column(), Column::Cancelled);
    assert_eq!(cancelled.purpose(), None);
}

#[test]
fn plan_and_triage_events_round_trip_through_json() {
    let events = [
        decide(
            Some(&planning(ApprovalPolicy::Auto)),
            &Command::ProposePlan {
                run: run(1),
                plan: Box::new(document()),
            },
            at(3),
        )
        .unwrap(),
        decide(
            Some(&triaging()),
            &Command::ProposeSpec {
                run: run(1),
                spec: Spec::new("x", "", "").unwrap(),
            },
            at(3),
        )
        .unwrap(),
    ]
    .concat();
    for event in events {
        let json = serde_json::to_string(&event).unwrap();
        let back: TaskEvent = serde_json::from_str(&json).unwrap();
        assert_eq!(back, event, "{json}");
    }
    // A task created before plans existed reads back as a plain task.
    let old = r#"{"type":"created","at":"2026-01-01T00:00:00Z","id":"T-1","repo":"acme/web",
        "spec":{"task":"x","scope":"","done_when":""},"priority":"normal","links":{},"approval":"auto","max_attempts":3}"#;
    let TaskEvent::Created(created) = serde_json::from_str::<TaskEvent>(old).unwrap() else {
        panic!("a creation");
    };
    assert_eq!(created.family, Family::default());
}
