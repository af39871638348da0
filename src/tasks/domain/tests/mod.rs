//! The transition table, case by case, and property tests over arbitrary command sequences.

use super::*;
use crate::tasks::values::{LinearIssue, TelegramMessage};
use crate::tasks::{plan, GITHUB_ISSUE, LINEAR_ISSUE, TELEGRAM};
use chrono::{TimeZone, Utc};
use uuid::Uuid;

mod attempts;
mod conflict;
mod conversation;
mod props;
mod records;
mod refresh_check;
mod resume;

pub(super) fn at(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_750_000_000 + seconds, 0)
        .single()
        .expect("a valid time")
}

pub(super) fn run(n: u128) -> RunId {
    RunId(Uuid::from_u128(n))
}

pub(super) fn reason(text: &str) -> Reason {
    Reason::new(text).expect("a valid reason")
}

pub(super) fn repo() -> RepoName {
    "acme/web".parse().expect("a valid repo")
}

fn id() -> TaskId {
    "T-7".parse().expect("a valid id")
}

pub(super) fn new_task(approval: ApprovalPolicy, max_attempts: u32) -> Command {
    Command::Create(Box::new(NewTask {
        id: id(),
        repo: repo(),
        spec: Spec::new(
            "Fix the login redirect",
            "src/auth",
            "the e2e login test passes",
        )
        .expect("a valid spec"),
        priority: Priority::High,
        links: Links::default()
            .with(
                LINEAR_ISSUE,
                &LinearIssue::new(Uuid::from_u128(99), "ENG-12").expect("a valid issue"),
            )
            .with(
                TELEGRAM,
                &TelegramMessage::new(-100, 5).expect("a valid message"),
            ),
        approval,
        max_attempts: MaxAttempts::new(max_attempts).expect("a valid budget"),
        ticket_version: None,
        agent: None,
        family: Default::default(),
    }))
}

/// Decides and applies, failing the test on a refusal.
fn step(state: Option<Task>, command: &Command, now: i64) -> (Task, Vec<TaskEvent>) {
    let events = decide(state.as_ref(), command, at(now))
        .unwrap_or_else(|e| panic!("{} refused: {e}", command.name()));
    let task = events
        .iter()
        .try_fold(state, |s, e| evolve(s, e).map(Some))
        .expect("decide's events apply")
        .expect("a task");
    (task, events)
}

pub(super) fn then(task: Task, command: Command) -> Task {
    step(Some(task), &command, 1).0
}

fn pr(number: u64) -> GithubRef {
    GithubRef::new(repo(), number).expect("a valid pr")
}

fn submit(run_id: RunId, pr_number: Option<u64>) -> Command {
    Command::SubmitForReview {
        run: run_id,
        branch: id().branch(),
        pr: pr_number.map(pr),
        report: Default::default(),
    }
}

fn run_failed(run_id: RunId) -> Command {
    Command::Retry {
        cause: RetryCause::RunFailed { run: run_id },
        reason: reason("exit status 1"),
    }
}

/// A task in `column`, reached through commands only. In progress, its live run is `run(1)`.
pub(super) fn task_in(column: Column) -> Task {
    let triage = step(None, &new_task(ApprovalPolicy::Manual, 3), 0).0;
    let todo = || then(triage.clone(), Command::Approve);
    let in_progress = || then(todo(), Command::Start { run: run(1) });
    let in_review = || then(in_progress(), submit(run(1), Some(3)));
    let done = || then(in_review(), Command::Complete);
    let cancelled = || {
        then(
            triage.clone(),
            Command::Cancel {
                reason: reason("duplicate"),
            },
        )
    };
    let task = match column {
        Column::Triage => triage.clone(),
        Column::Todo => todo(),
        Column::InProgress => in_progress(),
        Column::InReview => in_review(),
        Column::Done => done(),
        Column::Cancelled => cancelled(),
        Column::Archived => then(done(), Command::Archive),
    };
    assert_eq!(task.column(), column);
    task
}

/// One sample of every command, named as in the table below.
fn every_command() -> Vec<(&'static str, Command)> {
    vec![
        ("create", new_task(ApprovalPolicy::Auto, 3)),
        ("approve", Command::Approve),
        (
            "reject",
            Command::Reject {
                reason: reason("not ours"),
            },
        ),
        ("start", Command::Start { run: run(2) }),
        ("submit", submit(run(1), Some(4))),
        ("complete", Command::Complete),
        ("retry-run", run_failed(run(1))),
        (
            "retry-stopped",
            Command::Retry {
                cause: RetryCause::Interrupted { run: run(1) },
                reason: reason("pidevops shut down"),
            },
        ),
        (
            "retry-ci",
            Command::Retry {
                cause: RetryCause::ChecksFailed,
                reason: reason("clippy failed"),
            },
        ),
        (
            "cancel",
            Command::Cancel {
                reason: reason("no longer needed"),
            },
        ),
        ("archive", Command::Archive),
        (
            "flag",
            Command::FlagNeedsHuman {
                reason: reason("unclear spec"),
            },
        ),
        ("clear", Command::ClearNeedsHuman),
        (
            "update-spec",
            Command::UpdateSpec {
                spec: Spec::new("Fix the logout redirect", "", "").expect("a valid spec"),
                ticket_version: None,
            },
        ),
        (
            "follow-up",
            Command::AttachFollowUp {
                text: FollowUpText::new("also check the mobile view").expect("valid text"),
                origin: None,
                send_back: true,
            },
        ),
        (
            "reprioritize",
            Command::Reprioritize {
                priority: Priority::Low,
            },
        ),
        (
            "links",
            Command::AttachLinks {
                links: Links::default().with(GITHUB_ISSUE, &pr(11)),
            },
        ),
        (
            "agent",
            Command::ChooseAgent {
                agent: Some(agent("codex")),
            },
        ),
        ("landed", landed(run(1))),
    ]
}

fn landed(run_id: RunId) -> Command {
    Command::RecordLanded {
        run: run_id,
        commit: CommitSha::new(&"a".repeat(40)).expect("a commit"),
        onto: CommitSha::new(&"b".repeat(40)).expect("a commit"),
        fast_forward: false,
    }
}

#[test]
fn landing_records_the_landed_commit_then_completes_and_only_for_the_reviewed_run() {
    let in_review = task_in(Column::InReview);
    assert_eq!(in_review.reviewed_run(), Some(run(1)));
    let (done, events) = step(Some(in_review.clone()), &landed(run(1)), 5);
    let kinds: Vec<&str> = events.iter().map(TaskEvent::kind).collect();
    assert_eq!(kinds, ["task.landed", "task.completed"]);
    assert_eq!(done.column(), Column::Done);
    // A commit of another run than the one in review is not what was reviewed.
    assert!(matches!(
        decide(Some(&in_review), &landed(run(2)), at(5)),
        Err(TaskError::StaleRun { .. })
    ));
    // Landed already: a retried request or a restart records nothing more.
    assert_eq!(decide(Some(&done), &landed(run(1)), at(6)), Ok(Vec::new()));
}

fn agent(name: &str) -> AgentName {
    name.parse().expect("a valid agent name")
}

/// Every column × every command. A column name: accepted, the task moves there. `=`: accepted, the column stays.
/// `noop`: accepted with no events (already so). `wrong`: refused, wrong column. `final`: refused, archived.
/// `exists`: refused, the task exists.
#[rustfmt::skip]
const TABLE: &[(&str, [&str; 7])] = &[
    //               triage       todo           in-progress  in-review    done        archived  cancelled
    ("create",       ["exists",   "exists",      "exists",    "exists",    "exists",   "exists", "exists"]),
    ("approve",      ["todo",     "noop",        "noop",      "noop",      "noop",     "final",  "wrong"]),
    ("reject",       ["cancelled", "wrong",      "wrong",     "wrong",     "wrong",    "final",  "noop"]),
    ("start",        ["wrong",    "in-progress", "wrong",     "wrong",     "wrong",    "final",  "wrong"]),
    ("submit",       ["wrong",    "wrong",       "in-review", "wrong",     "wrong",    "final",  "wrong"]),
    ("complete",     ["wrong",    "wrong",       "wrong",     "done",      "noop",     "final",  "wrong"]),
    ("retry-run",    ["wrong",    "wrong",       "todo",      "wrong",     "wrong",    "final",  "wrong"]),
    ("retry-stopped",["wrong",    "wrong",       "todo",      "wrong",     "wrong",    "final",  "wrong"]),
    ("retry-ci",     ["wrong",    "wrong",       "wrong",     "todo",      "wrong",    "final",  "wrong"]),
    ("cancel",       ["cancelled", "cancelled",  "cancelled", "cancelled", "wrong",    "final",  "noop"]),
    ("archive",      ["wrong",    "wrong",       "wrong",     "wrong",     "archived", "final",  "archived"]),
    ("flag",         ["=",        "=",           "=",         "=",         "wrong",    "final",  "wrong"]),
    ("clear",        ["noop",     "noop",        "noop",      "noop",      "noop",     "final",  "noop"]),
    ("update-spec",  ["=",        "=",           "wrong",     "wrong",     "wrong",    "final",  "wrong"]),
    ("follow-up",    ["=",        "=",           "=",         "todo",      "wrong",    "final",  "wrong"]),
    ("reprioritize", ["=",        "=",           "=",         "=",         "=",        "final",  "="]),
    ("links",        ["=",        "=",           "=",         "=",         "=",        "final",  "="]),
    ("agent",        ["=",        "=",           "wrong",     "=",         "wrong",    "final",  "wrong"]),
    ("landed",       ["wrong",    "wrong",       "wrong",     "done",      "noop",     "final",  "wrong"]),
];

#[test]
fn the_transition_table_holds_for_every_column_and_command() {
    let commands = every_command();
    assert_eq!(commands.len(), TABLE.len(), "one row per command");
    for ((name, command), (row, cells)) in commands.iter().zip(TABLE) {
        assert_eq!(name, row);
        for (column, cell) in Column::ALL.into_iter().zip(cells) {
            let task = task_in(column);
            let case = format!("{name} on {column}");
            let result = decide(Some(&task), command, at(9));
            match (*cell, result) {
                ("exists", Err(TaskError::AlreadyExists { id: got })) => {
                    assert_eq!(got, id(), "{case}")
                }
                ("final", Err(TaskError::Archived { command: c, .. })) => {
                    assert_eq!(c, command.name(), "{case}")
                }
                (
                    "wrong",
                    Err(TaskError::WrongColumn {
                        column: c,
                        allowed,
                        command: n,
                        ..
                    }),
                ) => {
                    assert_eq!((c, n), (column, command.name()), "{case}");
                    assert!(!allowed.contains(&column), "{case}: {allowed:?}");
                }
                ("noop", Ok(events)) => assert!(events.is_empty(), "{case}: {events:?}"),
                (cell, Ok(events))
                    if !events.is_empty()
                        && !["exists", "final", "wrong", "noop"].contains(&cell) =>
                {
                    let after = events
                        .iter()
                        .try_fold(Some(task.clone()), |s, e| evolve(s, e).map(Some))
                        .unwrap_or_else(|e| panic!("{case}: {e}"))
                        .expect("a task");
                    let expected = if cell == "=" {
                        column
                    } else {
                        cell.parse().expect("a column")
                    };
                    assert_eq!(after.column(), expected, "{case}");
                }
                (cell, other) => panic!("{case}: expected {cell}, got {other:?}"),
            }
        }
    }
}

#[test]
fn nothing_exists_before_create() {
    for (name, command) in every_command().into_iter().skip(1) {
        assert_eq!(
            decide(None, &command, at(0)),
            Err(TaskError::NotFound {
                command: command.name()
            }),
            "{name}"
        );
    }
    assert_eq!(
        TaskError::NotFound { command: "approve" }.to_string(),
        "no such task; approve needs an existing task"
    );
}

#[test]
fn refusals_say_what_and_why() {
    let message = |column, command: Command| {
        decide(Some(&task_in(column)), &command, at(1))
            .expect_err("refused")
            .to_string()
    };
    assert_eq!(
        message(
            Column::InReview,
            Command::Reject {
                reason: reason("x")
            }
        ),
        "T-7 is in-review; reject needs triage"
    );
    assert_eq!(
        message(
            Column::Done,
            Command::Cancel {
                reason: reason("x")
            }
        ),
        "T-7 is done; cancel needs triage or todo or in-progress or in-review"
    );
    assert_eq!(
        message(Column::Todo, Command::Archive),
        "T-7 is todo; archive needs done or cancelled"
    );
    assert_eq!(
        message(Column::Done, Command::Start { run: run(5) }),
        "T-7 is done; start needs todo"
    );
    assert_eq!(
        message(Column::Archived, Command::Start { run: run(5) }),
        "T-7 is archived; an archived task accepts no commands (start refused)"
    );
    assert_eq!(
        message(Column::InProgress, submit(run(2), None)),
        format!("T-7: run {} is not the live run ({})", run(2), run(1))
    );
    assert_eq!(
        message(Column::Todo, new_task(ApprovalPolicy::Auto, 3)),
        "T-7 already exists"
    );
}

#[test]
fn the_approval_policy_decides_where_a_new_task_waits() {
    let (manual, events) = step(None, &new_task(ApprovalPolicy::Manual, 3), 0);
    assert_eq!(manual.column(), Column::Triage);
    assert_eq!(events.len(), 1);
    let (auto, events) = step(None, &new_task(ApprovalPolicy::Auto, 3), 0);
    assert_eq!(auto.column(), Column::Todo);
    assert!(matches!(
        events.as_slice(),
        [
            TaskEvent::Created(_),
            TaskEvent::Approved {
                automatic: true,
                ..
            }
        ]
    ));
    assert_eq!(auto.approval(), ApprovalPolicy::Auto);
    assert_eq!(auto.priority(), Priority::High);
    assert_eq!(auto.title(), "Fix the login redirect");
}

/// Two approvers read the same triage state. Both decide "approve"; the stream's expected version lets only
/// the first append, and the second, re-deciding on the new state, gets a no-op. Approve racing reject gives
/// one approval and one clean refusal.
#[test]
fn racing_approvals_give_one_approval_and_one_no_op() {
    let triage = task_in(Column::Triage);
    let first = decide(Some(&triage), &Command::Approve, at(1)).expect("accepted");
    let second = decide(Some(&triage), &Command::Approve, at(1)).expect("accepted");
    assert_eq!(first, second, "decide is deterministic");
    let (approved, _) = step(Some(triage), &Command::Approve, 1);
    assert_eq!(
        decide(Some(&approved), &Command::Approve, at(2)),
        Ok(vec![])
    );
    assert_eq!(
        decide(
            Some(&approved),
            &Command::Reject {
                reason: reason("no")
            },
            at(2)
        )
        .expect_err("refused")
        .to_string(),
        "T-7 is todo; reject needs triage"
    );
}

/// A plan's item, made with the scope its plan gave it.
fn scoped_item(scope: &str) -> Command {
    let Command::Create(mut new) = new_task(ApprovalPolicy::Auto, 3) else {
        unreachable!("new_task makes a create")
    };
    let plan::ScopeText::Paths(scope) = plan::Scope::parse(scope) else {
        panic!("{scope} is paths")
    };
    new.family = Family {
        parent: Some("T-1".parse().expect("an id")),
        scope: Some(scope),
        ..Family::default()
    };
    Command::Create(new)
}

#[test]
fn an_items_scope_is_recorded_at_creation_and_no_spec_edit_changes_it() {
    let (task, events) = step(None, &scoped_item("src/api/**, docs/api.md"), 0);
    let globs = |task: &Task| -> Vec<String> {
        task.scope()
            .expect("a scope")
            .globs()
            .iter()
            .map(|g| g.to_string())
            .collect()
    };
    assert_eq!(globs(&task), ["src/api/**", "docs/api.md"]);
    let stored = serde_json::to_value(&events[0]).unwrap();
    assert_eq!(
        stored["scope"],
        serde_json::json!(["src/api/**", "docs/api.md"])
    );
    // The event read back from the log gives the same task.
    let read: TaskEvent = serde_json::from_value(stored).unwrap();
    assert_eq!(evolve(None, &read).unwrap().scope(), task.scope());
    let edited = then(
        task,
        Command::UpdateSpec {
            spec: Spec::new("Fix the login redirect", "n/a", "done").unwrap(),
            ticket_version: None,
        },
    );
    assert_eq!(edited.spec().scope(), "n/a");
    assert_eq!(globs(&edited), ["src/api/**", "docs/api.md"]);
}

#[test]
fn a_created_event_from_before_scopes_were_recorded_replays_without_one() {
    let (task, events) = step(None, &scoped_item("src/api/**"), 0);
    let mut old = serde_json::to_value(&events[0]).unwrap();
    old.as_object_mut().unwrap().remove("scope");
    let read: TaskEvent = serde_json::from_value(old).unwrap();
    let replayed = evolve(None, &read).unwrap();
    assert_eq!(replayed.scope(), None);
    assert_eq!(replayed.parent(), task.parent());
    // A stored scope that is not a scope (empty) fails loudly rather than reading as none.
    let mut broken = serde_json::to_value(&events[0]).unwrap();
    broken["scope"] = serde_json::json!([]);
    assert!(serde_json::from_value::<TaskEvent>(broken).is_err());
}

/// The log's event types are derived from the variants (`TaskEventKind`); stored logs name them, so the whole list
/// is written out here: renaming a variant fails this test before it orphans every stored event of that type.
#[test]
fn every_event_type_is_derived_and_none_changed() {
    use strum::IntoEnumIterator;
    let kinds: Vec<&'static str> = TaskEventKind::iter().map(Into::into).collect();
    assert_eq!(
        kinds,
        [
            "task.created",
            "task.approved",
            "task.rejected",
            "task.started",
            "task.resumed",
            "task.submitted_for_review",
            "task.completed",
            "task.retried",
            "task.cancelled",
            "task.archived",
            "task.flagged_needs_human",
            "task.needs_human_cleared",
            "task.spec_updated",
            "task.follow_up_attached",
            "task.follow_ups_delivered",
            "task.ticket_seen",
            "task.priority_changed",
            "task.links_attached",
            "task.attempt_returned",
            "task.agent_chosen",
            "task.triage_ended",
            "task.plan_proposed",
            "task.plan_approved",
            "task.plan_rejected",
            "task.children_created",
            "task.rolled_up",
            "task.check_passed",
            "task.review_approved",
            "task.approval_withdrawn",
            "task.combined",
            "task.landed",
            "task.refreshed",
            "task.merge_queued",
            "task.went_stale",
            "task.conflict_found",
            "task.conflict_unresolved",
            "task.refresh_check_due",
            "task.refresh_check_failed",
        ]
    );
}
