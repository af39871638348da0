//! Any sequence of commands keeps the board's invariants.

use super::super::*;
use super::{at, new_task, reason, repo, run};
use crate::tasks::domain::landing::{CommitSha, FactName};
use crate::tasks::values::{LinearIssue, TelegramMessage};
use crate::tasks::{GITHUB_ISSUE, GITHUB_PR, LINEAR_ISSUE, TELEGRAM};
use proptest::prelude::*;
use uuid::Uuid;

/// A command before it meets a state: run ids are resolved against the live run at the time it is applied, so
/// sequences reach deep states instead of being refused as stale at every step.
#[derive(Clone, Debug)]
enum Op {
    Create { auto: bool, max: u32, plan: bool },
    Approve,
    Reject,
    Start,
    Submit { live: bool, pr: Option<u64> },
    Complete,
    RetryRun { live: bool },
    RetryChecks,
    RetryChanges,
    Cancel,
    Archive,
    Flag,
    Clear,
    UpdateSpec(u8),
    FollowUp,
    Reprioritize(usize),
    AttachLinks(u8),
    ChooseAgent(u8),
    Interrupt { live: bool },
    SetupFailed { live: bool },
    AgentNeedsHuman { live: bool },
    StartTriage,
    ProposeSpec { live: bool },
    ProposePlan { live: bool },
    AdoptChildren(u8),
    RollUp(u8),
    CheckPassed(u8),
    Approval(u8),
    WithdrawApproval,
    WithdrawTicket(u8),
    NoteTicket(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (any::<bool>(), 1u32..=4, prop::bool::weighted(0.3))
            .prop_map(|(auto, max, plan)| Op::Create { auto, max, plan }),
        3 => Just(Op::Approve),
        1 => Just(Op::Reject),
        6 => Just(Op::Start),
        4 => (prop::bool::weighted(0.9), prop::option::of(1u64..4))
            .prop_map(|(live, pr)| Op::Submit { live, pr }),
        2 => Just(Op::Complete),
        5 => prop::bool::weighted(0.9).prop_map(|live| Op::RetryRun { live }),
        2 => Just(Op::RetryChecks),
        2 => Just(Op::RetryChanges),
        1 => Just(Op::Cancel),
        1 => Just(Op::Archive),
        2 => Just(Op::Flag),
        3 => Just(Op::Clear),
        3 => (0u8..6).prop_map(Op::UpdateSpec),
        2 => Just(Op::FollowUp),
        2 => (0usize..4).prop_map(Op::Reprioritize),
        2 => (0u8..4).prop_map(Op::AttachLinks),
        2 => (0u8..3).prop_map(Op::ChooseAgent),
        2 => prop::bool::weighted(0.9).prop_map(|live| Op::Interrupt { live }),
        2 => prop::bool::weighted(0.9).prop_map(|live| Op::SetupFailed { live }),
        1 => prop::bool::weighted(0.9).prop_map(|live| Op::AgentNeedsHuman { live }),
        2 => Just(Op::StartTriage),
        2 => prop::bool::weighted(0.9).prop_map(|live| Op::ProposeSpec { live }),
        3 => prop::bool::weighted(0.9).prop_map(|live| Op::ProposePlan { live }),
        2 => (0u8..2).prop_map(Op::AdoptChildren),
        3 => (0u8..6).prop_map(Op::RollUp),
        2 => (0u8..4).prop_map(Op::CheckPassed),
        2 => (0u8..4).prop_map(Op::Approval),
        1 => Just(Op::WithdrawApproval),
        // A withdrawal closes most tasks it meets, like a cancel: rare enough that sequences still go deep.
        1 => prop_oneof![
            (0u8..6).prop_map(Op::WithdrawTicket),
            (0u8..5).prop_map(Op::NoteTicket),
        ],
    ]
}

fn command(op: &Op, state: Option<&Task>, step: u128) -> Command {
    let live_or_stale = |live: bool| match state.and_then(Task::run) {
        Some(current) if live => current,
        _ => run(10_000 + step),
    };
    match op {
        Op::Create { auto, max, plan } => {
            let Command::Create(mut new) = new_task(
                if *auto {
                    ApprovalPolicy::Auto
                } else {
                    ApprovalPolicy::Manual
                },
                *max,
            ) else {
                unreachable!("new_task makes a create")
            };
            if *plan {
                new.family = Family::plan();
            }
            Command::Create(new)
        }
        Op::Approve => Command::Approve,
        Op::Reject => Command::Reject {
            reason: reason("out of scope"),
        },
        Op::Start => Command::Start { run: run(step) },
        Op::Submit { live, pr } => Command::SubmitForReview {
            run: live_or_stale(*live),
            branch: "pidevops/T-7".parse().expect("a valid branch"),
            pr: pr.map(|n| GithubRef::new(repo(), n).expect("a valid pr")),
            report: Default::default(),
        },
        Op::Complete => Command::Complete,
        Op::RetryRun { live } => Command::Retry {
            cause: RetryCause::RunFailed {
                run: live_or_stale(*live),
            },
            reason: reason("exit status 1"),
        },
        Op::RetryChecks => Command::Retry {
            cause: RetryCause::ChecksFailed,
            reason: reason("CI red"),
        },
        Op::RetryChanges => Command::Retry {
            cause: RetryCause::ChangesRequested,
            reason: reason("please rename"),
        },
        Op::Cancel => Command::Cancel {
            reason: reason("not needed"),
        },
        Op::Archive => Command::Archive,
        Op::Flag => Command::FlagNeedsHuman {
            reason: reason("question from the agent"),
        },
        Op::Clear => Command::ClearNeedsHuman,
        // Versions 0..5 arrive in any order (and 5 from a person, without one): the stale ones change nothing.
        Op::UpdateSpec(n) => Command::UpdateSpec {
            spec: Spec::new(format!("Version {n}"), "", "").expect("a valid spec"),
            ticket_version: (*n < 5).then(|| minute(*n)),
        },
        // The same clock as the edits': versions 0..5 in any order, 5 without one.
        Op::WithdrawTicket(n) => Command::WithdrawTicket {
            reason: reason("the ticket was closed"),
            ticket_version: (*n < 5).then(|| minute(*n)),
        },
        Op::NoteTicket(n) => Command::NoteTicketVersion {
            ticket_version: minute(*n),
        },
        Op::FollowUp => Command::AttachFollowUp {
            text: FollowUpText::new("one more thing").expect("valid text"),
            origin: None,
            send_back: true,
        },
        Op::Reprioritize(i) => Command::Reprioritize {
            priority: Priority::ALL[*i],
        },
        Op::Interrupt { live } => Command::Retry {
            cause: RetryCause::Interrupted {
                run: live_or_stale(*live),
            },
            reason: Reason::new("pidevops shut down").expect("valid"),
        },
        Op::SetupFailed { live } => Command::Retry {
            cause: RetryCause::SetupFailed {
                run: live_or_stale(*live),
            },
            reason: Reason::new("run setup (attempt 1): npm ci exited with status 1")
                .expect("valid"),
        },
        Op::AgentNeedsHuman { live } => Command::Retry {
            cause: RetryCause::AgentNeedsHuman {
                run: live_or_stale(*live),
            },
            reason: Reason::new("The agent asked for a person: which database?").expect("valid"),
        },
        Op::StartTriage => Command::StartTriage { run: run(step) },
        Op::ProposeSpec { live } => Command::ProposeSpec {
            run: live_or_stale(*live),
            spec: Spec::new("Triaged: add an index", "migrations/**", "EXPLAIN uses it")
                .expect("a valid spec"),
        },
        Op::ProposePlan { live } => Command::ProposePlan {
            run: live_or_stale(*live),
            plan: Box::new(plan_document()),
        },
        Op::AdoptChildren(n) => Command::AdoptChildren {
            children: match n {
                0 => vec![task_id(8), task_id(9)],
                _ => vec![task_id(10)],
            },
        },
        Op::RollUp(n) => Command::RollUp {
            column: [
                Column::InProgress,
                Column::InReview,
                Column::Done,
                Column::Cancelled,
                Column::Todo,
                Column::InProgress,
            ][usize::from(*n)],
            needs_human: if *n == 5 { vec![task_id(9)] } else { vec![] },
        },
        Op::CheckPassed(n) => Command::RecordCheckPassed {
            sha: sha(*n),
            name: FactName::new("check", if *n % 2 == 0 { "ci" } else { "lint" }).expect("valid"),
        },
        Op::Approval(n) => Command::RecordApproval {
            by: FactName::new("reviewer", if *n < 2 { "octocat" } else { "hubot" }).expect("valid"),
            sha: sha(*n),
        },
        Op::WithdrawApproval => Command::WithdrawApproval {
            by: FactName::new("reviewer", "octocat").expect("valid"),
        },
        Op::ChooseAgent(n) => Command::ChooseAgent {
            agent: match n {
                0 => None,
                1 => Some("codex".parse().expect("valid")),
                _ => Some("claude".parse().expect("valid")),
            },
        },
        Op::AttachLinks(n) => Command::AttachLinks {
            links: match n {
                0 => {
                    Links::default().with(GITHUB_ISSUE, &GithubRef::new(repo(), 5).expect("valid"))
                }
                1 => Links::default().with(
                    LINEAR_ISSUE,
                    &LinearIssue::new(Uuid::from_u128(1), "ENG-1").expect("valid"),
                ),
                2 => Links::default().with(TELEGRAM, &TelegramMessage::new(42, 1).expect("valid")),
                _ => Links::default().with(GITHUB_PR, &GithubRef::new(repo(), 9).expect("valid")),
            },
        },
    }
}

/// A ticket version: minute `n` of the epoch.
fn minute(n: u8) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(i64::from(n) * 60, 0).expect("a valid time")
}

fn task_id(n: u64) -> TaskId {
    format!("T-{n}").parse().expect("a valid id")
}

/// Two commits, for auto-land's facts.
fn sha(n: u8) -> CommitSha {
    CommitSha::new(if n < 2 { "aaaaaaa" } else { "bbbbbbb" }).expect("a valid sha")
}

fn plan_document() -> crate::tasks::plan::PlanDocument {
    crate::tasks::plan::PlanDocument::parse(
        br#"{"version": 1, "items": [{"id": "a", "title": "A", "task": "do a", "scope": ["a/**"], "done_when": "a"}]}"#,
        &crate::tasks::plan::PlanLimits::default(),
    )
    .expect("a valid plan")
}

/// Column moves the lifecycle allows; anything else seen in a run is a bug.
const MOVES: &[(Column, Column)] = &[
    // A triage run starts and ends; a plan's planner proposes, its proposal is approved or rejected.
    (Column::Triage, Column::InProgress),
    (Column::InProgress, Column::Triage),
    (Column::Triage, Column::Todo),
    // An approved plan's roll-up.
    (Column::InProgress, Column::Done),
    (Column::InReview, Column::InProgress),
    (Column::Triage, Column::Cancelled),
    (Column::Todo, Column::InProgress),
    (Column::Todo, Column::Cancelled),
    (Column::InProgress, Column::InReview),
    (Column::InProgress, Column::Todo),
    (Column::InProgress, Column::Cancelled),
    (Column::InReview, Column::Done),
    (Column::InReview, Column::Todo),
    (Column::InReview, Column::Cancelled),
    (Column::Done, Column::Archived),
    (Column::Cancelled, Column::Archived),
];

/// Commands that name a desired state: once accepted, repeating them is a no-op. (A plan's rejection is not one:
/// it sends the planner back, and a second finds no proposal to reject.)
fn names_a_state(command: &Command, task: &Task) -> bool {
    if task.is_plan() && matches!(command, Command::Reject { .. }) {
        return false;
    }
    matches!(
        command,
        Command::Approve
            | Command::Reject { .. }
            | Command::Complete
            | Command::Cancel { .. }
            | Command::FlagNeedsHuman { .. }
            | Command::ClearNeedsHuman
            | Command::UpdateSpec { .. }
            | Command::Reprioritize { .. }
            | Command::AttachLinks { .. }
            | Command::ChooseAgent { .. }
            | Command::AdoptChildren { .. }
            | Command::RollUp { .. }
            | Command::RecordCheckPassed { .. }
            | Command::RecordApproval { .. }
            | Command::WithdrawApproval { .. }
            | Command::WithdrawTicket { .. }
            | Command::NoteTicketVersion { .. }
    )
}

/// What holds of any single state.
fn check_state(task: &Task) -> Result<(), TestCaseError> {
    prop_assert!(task.attempts() <= task.max_attempts().get());
    prop_assert_eq!(
        task.run().is_some(),
        task.column() == Column::InProgress && !task.is_approved_plan(),
        "a live run exactly while in progress (an approved plan's items hold theirs)"
    );
    prop_assert_eq!(task.run().is_some(), task.purpose().is_some());
    if task.is_approved_plan() {
        prop_assert!(task.plan().is_some_and(|p| p.proposal.is_some()));
    }
    if task.purpose() == Some(RunPurpose::Triage) {
        prop_assert!(task.triage().is_none(), "triaged once");
    }
    if task.column() == Column::InReview {
        prop_assert!(task.branch().is_some() || task.is_approved_plan());
    }
    if task.needs_human().is_some() {
        prop_assert!(task.column().is_open(), "only open tasks need a human");
    }
    prop_assert!(task.follow_ups().len() <= MAX_FOLLOW_UPS);
    for f in task.follow_ups() {
        prop_assert!(f
            .delivered_to_attempt
            .is_none_or(|a| a >= 1 && a <= task.attempts()));
    }
    if task.column() == Column::Todo && task.attempts() >= task.max_attempts().get() {
        prop_assert!(
            task.needs_human().is_some(),
            "a spent budget always waits for a human"
        );
    }
    Ok(())
}

/// What holds of every accepted step from `before` to `after`.
// One property a paragraph, each a few lines: read as one list of what every step keeps.
#[allow(clippy::too_many_lines)]
fn check_step(
    before: &Task,
    after: &Task,
    command: &Command,
    events: &[TaskEvent],
) -> Result<(), TestCaseError> {
    prop_assert_eq!(after.id(), before.id());
    prop_assert_eq!(after.repo(), before.repo());
    prop_assert_eq!(after.created_at(), before.created_at());
    prop_assert!(
        after.attempts() >= before.attempts(),
        "attempts never decrease"
    );
    prop_assert!(after.max_attempts() >= before.max_attempts());
    prop_assert!(
        after.ticket_version() >= before.ticket_version(),
        "the ticket version never goes back"
    );
    if let (
        Command::UpdateSpec {
            ticket_version: Some(edit),
            ..
        },
        Some(held),
    ) = (command, before.ticket_version())
    {
        if *edit <= held {
            prop_assert!(events.is_empty(), "a stale edit changes nothing");
        }
    }
    if let Command::WithdrawTicket { ticket_version, .. } = command {
        if let (Some(withdrawn), Some(held)) = (ticket_version, before.ticket_version()) {
            if *withdrawn < held {
                prop_assert!(events.is_empty(), "a stale withdrawal changes nothing");
            }
        }
        prop_assert!(
            before.column() != Column::InReview || after.column() == Column::InReview,
            "a withdrawal leaves a task in review to its pull request"
        );
    }
    if after.column() != before.column() {
        prop_assert!(
            MOVES.contains(&(before.column(), after.column())),
            "{} -> {} by {}",
            before.column(),
            after.column(),
            command.name()
        );
    }
    if after.priority() != before.priority() {
        prop_assert!(
            matches!(command, Command::Reprioritize { .. }),
            "changed by {}",
            command.name()
        );
    }
    if after.agent() != before.agent() {
        prop_assert!(
            matches!(command, Command::ChooseAgent { .. }),
            "changed by {}",
            command.name()
        );
        prop_assert!(
            before.column() != Column::InProgress,
            "never the agent of a running attempt"
        );
    }
    if after.spec() != before.spec() {
        prop_assert!(
            matches!(
                command,
                Command::UpdateSpec { .. } | Command::ProposeSpec { .. }
            ),
            "changed by {}",
            command.name()
        );
        // Before work: a person's edit in triage or todo, or the triage agent's rewrite as its run ends.
        prop_assert!(
            matches!(before.column(), Column::Triage | Column::Todo)
                || before.purpose() == Some(RunPurpose::Triage)
        );
    }
    // Links only grow; only a submission may replace the pull request.
    let (b, a) = (before.links(), after.links());
    // A set link stays; only a replaceable one (the pull request) changes, and only by a submission.
    for (name, value) in b.iter() {
        let now = a.iter().find(|(n, _)| *n == name).map(|(_, v)| v);
        prop_assert!(now.is_some(), "{} lost {name}", command.name());
        if now != Some(value) {
            prop_assert!(
                name == GITHUB_PR.name() && matches!(command, Command::SubmitForReview { .. }),
                "{name} changed by {}",
                command.name()
            );
        }
    }
    if matches!(command, Command::Start { .. }) {
        prop_assert!(before.can_start());
    }
    // One flag event per episode: never while flagged, and always when the last attempt fails unflagged.
    let flags = events
        .iter()
        .filter(|e| matches!(e, TaskEvent::FlaggedNeedsHuman { .. }))
        .count();
    prop_assert!(flags <= 1);
    if flags == 1 {
        prop_assert!(before.needs_human().is_none());
        prop_assert!(after
            .needs_human()
            .is_some_and(|f| !f.reason.as_str().is_empty()));
    }
    let triaging = before.purpose() == Some(RunPurpose::Triage);
    if let (Command::Retry { .. }, true) = (command, triaging) {
        // A triage run is not an attempt: whatever ended it, nothing is counted, given back or flagged.
        if !events.is_empty() {
            prop_assert_eq!(after.attempts(), before.attempts());
            prop_assert_eq!(after.max_attempts(), before.max_attempts());
            prop_assert_eq!(after.column(), Column::Triage);
            prop_assert_eq!(flags, 0);
        }
    } else if let Command::Retry { cause, .. } = command {
        // An interrupted attempt is given back (the budget grows by one) unless the budget is at its cap.
        let returned = events
            .iter()
            .any(|e| matches!(e, TaskEvent::AttemptReturned { .. }));
        if returned {
            let interrupted = matches!(cause, RetryCause::Interrupted { .. });
            let setup = matches!(cause, RetryCause::SetupFailed { .. });
            prop_assert!(
                interrupted || setup,
                "only an interruption or a failed setup is given back"
            );
            // An interruption is never a bounce; a setup failing again and again is, and nothing else flags it.
            if interrupted {
                prop_assert_eq!(flags, 0);
            }
            prop_assert_eq!(after.max_attempts().get(), before.max_attempts().get() + 1);
        }
        if matches!(cause, RetryCause::SetupFailed { .. }) && !events.is_empty() {
            // A failed setup never spends the budget while it can grow: the attempts left stay as they were.
            if returned {
                let left = |max: u32, used: u32| i64::from(max) - i64::from(used);
                prop_assert_eq!(
                    left(after.max_attempts().get(), after.attempts()),
                    left(before.max_attempts().get(), before.attempts() - 1)
                );
            } else {
                prop_assert_eq!(before.max_attempts().get(), MaxAttempts::CAP);
            }
        }
        let last = !returned && before.attempts() >= before.max_attempts().get();
        if last && before.needs_human().is_none() {
            prop_assert_eq!(flags, 1);
        }
        let asked = matches!(cause, RetryCause::AgentNeedsHuman { .. }) && !events.is_empty();
        if asked {
            prop_assert!(
                after.needs_human().is_some(),
                "the agent's ask flags at once"
            );
        }
        if flags == 1 && !last && !asked {
            let reason = after
                .needs_human()
                .map(|f| f.reason.as_str())
                .unwrap_or_default();
            prop_assert!(reason.starts_with("bouncing"), "{}", reason);
        }
        prop_assert!(!last || after.needs_human().is_some());
    }
    for event in events {
        prop_assert_eq!(event.at(), after.updated_at());
        let json = serde_json::to_string(event).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back: TaskEvent =
            serde_json::from_str(&json).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, event);
        // The log's readers decode a body by its stored type, without the general decoder's buffering: the same.
        let stored = TaskEvent::from_stored(event.kind(), json.as_bytes())
            .map_err(|e| TestCaseError::fail(format!("{e:#}")))?;
        prop_assert_eq!(&stored, event);
    }
    Ok(())
}

/// Applies `ops` after a create, checking every step; returns the accepted events.
fn run_sequence(ops: &[Op]) -> Result<Vec<TaskEvent>, TestCaseError> {
    let mut state: Option<Task> = None;
    let mut log: Vec<TaskEvent> = Vec::new();
    // Every sequence starts with a create, so most steps act on a task.
    let first = Op::Create {
        auto: ops.len().is_multiple_of(2),
        max: 1 + (ops.len() % 3) as u32,
        // One sequence in four is a plan's.
        plan: ops.len() % 4 == 1,
    };
    for (i, op) in std::iter::once(&first).chain(ops).enumerate() {
        let step = i as u128 + 1;
        let now = at(i as i64);
        let command = command(op, state.as_ref(), step);
        let before = state.clone();
        let result = decide(before.as_ref(), &command, now);
        prop_assert_eq!(
            &result,
            &decide(before.as_ref(), &command, now),
            "decide is deterministic"
        );
        if before
            .as_ref()
            .is_some_and(|t| t.column() == Column::Archived)
        {
            prop_assert!(
                result.is_err(),
                "archived is final: {} accepted",
                command.name()
            );
        }
        let events = match result {
            // A refusal carries no events and the state is untouched (decide only borrows it).
            Err(_) => continue,
            Ok(events) => events,
        };
        let mut next = before.clone();
        for event in &events {
            next = Some(evolve(next, event).map_err(|e| {
                TestCaseError::fail(format!("{} from decide did not apply: {e}", event.kind()))
            })?);
        }
        let Some(after) = next else {
            prop_assert!(events.is_empty());
            continue;
        };
        check_state(&after)?;
        match &before {
            Some(b) => check_step(b, &after, &command, &events)?,
            None => prop_assert!(matches!(command, Command::Create(_))),
        }
        if !events.is_empty() && names_a_state(&command, &after) {
            prop_assert_eq!(
                decide(Some(&after), &command, now),
                Ok(vec![]),
                "{} again is a no-op",
                command.name()
            );
        }
        log.extend(events);
        state = Some(after);
    }
    // The log alone rebuilds the state, also after a trip through JSON.
    prop_assert_eq!(
        &replay(&log).map_err(|e| TestCaseError::fail(e.to_string()))?,
        &state
    );
    let json = serde_json::to_string(&log).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let back: Vec<TaskEvent> =
        serde_json::from_str(&json).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(
        &replay(&back).map_err(|e| TestCaseError::fail(e.to_string()))?,
        &state
    );
    Ok(log)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_command_sequence_keeps_the_invariants(ops in prop::collection::vec(op(), 0..60)) {
        run_sequence(&ops)?;
    }

    /// Once done or cancelled, a task never works again, whatever follows.
    #[test]
    fn closed_tasks_never_reopen(ops in prop::collection::vec(op(), 0..30), cancel in any::<bool>()) {
        let mut task = super::task_in(if cancel { Column::Cancelled } else { Column::Done });
        let closed = task.column();
        for (i, op) in ops.iter().enumerate() {
            let command = command(op, Some(&task), i as u128 + 1);
            if let Ok(events) = decide(Some(&task), &command, at(100)) {
                for event in &events {
                    task = evolve(Some(task), event).map_err(|e| TestCaseError::fail(e.to_string()))?;
                }
            }
            prop_assert!(task.column() == closed || task.column() == Column::Archived);
            prop_assert!(task.run().is_none() && task.needs_human().is_none());
        }
    }
}

/// The generator is worth its cases only if it reaches every column and every kind of event; this keeps a
/// change to the weights from quietly turning the property test into a test of `triage`.
#[test]
fn generated_sequences_reach_every_column_and_event() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use std::collections::BTreeSet;

    let mut runner = TestRunner::deterministic();
    let sequences = prop::collection::vec(op(), 0..60);
    let mut kinds = BTreeSet::new();
    let mut columns = BTreeSet::new();
    // Until every one is reached (a rare chain, like an approval then its dismissal, may take a while), within
    // a bound.
    for _ in 0..3000 {
        if columns.len() == Column::ALL.len() && kinds.len() == 27 {
            break;
        }
        let ops = sequences
            .new_tree(&mut runner)
            .expect("a sequence")
            .current();
        let log = run_sequence(&ops).expect("the invariants hold");
        let mut state = None;
        for event in &log {
            kinds.insert(event.kind());
            // The derived type is the serde tag with the log's prefix: what is stored is what is read back.
            let json = serde_json::to_value(event).expect("encodes");
            assert_eq!(
                Some(event.kind()),
                json["type"]
                    .as_str()
                    .map(|t| format!("task.{t}"))
                    .as_deref()
            );
            let task = evolve(state, event).expect("applies");
            columns.insert(task.column());
            state = Some(task);
        }
    }
    assert_eq!(columns.len(), Column::ALL.len(), "{columns:?}");
    assert_eq!(kinds.len(), 27, "{kinds:?}");
}
