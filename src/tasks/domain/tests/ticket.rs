//! A ticket's versions and withdrawals, over every column and every order of versions.

use super::super::tests::{at, reason, task_in, then};
use super::super::{decide as decide_task, evolve, Command};
use super::*;

const COLUMNS: [Column; 7] = [
    Column::Triage,
    Column::Todo,
    Column::InProgress,
    Column::InReview,
    Column::Done,
    Column::Cancelled,
    Column::Archived,
];

fn withdraw(version: Option<i64>) -> Command {
    Command::WithdrawTicket {
        reason: reason("ENG-12 was cancelled in Linear"),
        ticket_version: version.map(at),
    }
}

fn note(version: i64) -> Command {
    Command::NoteTicketVersion {
        ticket_version: at(version),
    }
}

/// `task` with the ticket's version `version` on record (a task not yet closed).
fn at_version(task: Task, version: i64) -> Task {
    then(task, note(version))
}

/// Decides and applies: the task after, and the kinds of the events recorded.
fn apply(task: &Task, command: &Command) -> Result<(Task, Vec<&'static str>), TaskError> {
    let events = decide_task(Some(task), command, at(100))?;
    let kinds = events.iter().map(TaskEvent::kind).collect();
    let after = events
        .iter()
        .try_fold(Some(task.clone()), |t, e| evolve(t, e).map(Some))?
        .expect("a task");
    Ok((after, kinds))
}

#[test]
fn a_withdrawal_cancels_a_task_before_or_at_work_and_records_its_version_everywhere_else() {
    for column in COLUMNS {
        let task = task_in(column);
        let outcome = apply(&task, &withdraw(Some(50)));
        if column == Column::Archived {
            assert!(
                matches!(outcome, Err(TaskError::Archived { .. })),
                "{outcome:?}"
            );
            continue;
        }
        let (after, kinds) = outcome.expect("decided");
        if WITHDRAWN_FROM.contains(&column) {
            assert_eq!(kinds, ["task.ticket_seen", "task.cancelled"], "{column}");
            assert_eq!(after.column(), Column::Cancelled);
            assert_eq!(
                after.closed_reason().map(|r| r.as_str()),
                Some("ENG-12 was cancelled in Linear")
            );
            assert_eq!(
                after.run(),
                None,
                "the running attempt is no longer the task's"
            );
        } else {
            assert_eq!(kinds, ["task.ticket_seen"], "{column}: left as it is");
            assert_eq!(after.column(), column);
        }
        assert_eq!(after.ticket_version(), Some(at(50)), "{column}");
        // Delivered again: nothing more.
        assert_eq!(
            apply(&after, &withdraw(Some(50))).expect("decided").1.len(),
            0
        );
    }
}

#[test]
fn a_withdrawal_older_than_the_version_on_record_changes_nothing_in_any_column() {
    for column in [
        Column::Triage,
        Column::Todo,
        Column::InProgress,
        Column::InReview,
    ] {
        let task = at_version(task_in(column), 30);
        // Older: a label removal delivered after the re-labelling that followed it.
        assert_eq!(
            apply(&task, &withdraw(Some(29))).expect("decided").1,
            Vec::<&str>::new(),
            "{column}"
        );
        // The same second (GitHub's clock) or newer: it applies.
        for version in [30, 31] {
            let (after, kinds) = apply(&task, &withdraw(Some(version))).expect("decided");
            let cancels = WITHDRAWN_FROM.contains(&column);
            assert_eq!(after.column() == Column::Cancelled, cancels, "{column}");
            assert_eq!(kinds.contains(&"task.ticket_seen"), version > 30);
        }
        // Without a version (a ticket with no clock), it cannot be ordered: it applies.
        let (after, _) = apply(&task, &withdraw(None)).expect("decided");
        assert_eq!(
            after.column() == Column::Cancelled,
            WITHDRAWN_FROM.contains(&column)
        );
        assert_eq!(after.ticket_version(), Some(at(30)), "never backwards");
    }
}

#[test]
fn a_ticket_version_is_noted_once_only_forwards_and_in_every_column_but_archived() {
    for column in COLUMNS {
        let task = task_in(column);
        if column == Column::Archived {
            assert!(apply(&task, &note(5)).is_err());
            continue;
        }
        let (task, kinds) = apply(&task, &note(20)).expect("decided");
        assert_eq!(kinds, ["task.ticket_seen"]);
        assert_eq!(task.column(), column, "noting changes nothing else");
        for older_or_same in [10, 20] {
            assert!(apply(&task, &note(older_or_same))
                .expect("decided")
                .1
                .is_empty());
        }
        let (task, _) = apply(&task, &note(21)).expect("decided");
        assert_eq!(task.ticket_version(), Some(at(21)));
    }
}

#[test]
fn a_noted_version_makes_an_older_edit_stale_too() {
    let task = at_version(task_in(Column::Todo), 40);
    let edit = Command::UpdateSpec {
        spec: crate::tasks::values::Spec::new("Older wording", "", "").expect("valid"),
        ticket_version: Some(at(39)),
    };
    assert!(apply(&task, &edit).expect("decided").1.is_empty());
}

#[test]
fn a_ticket_seen_never_applies_to_an_archived_task_on_replay() {
    let archived = task_in(Column::Archived);
    let event = TaskEvent::TicketSeen {
        at: at(1),
        ticket_version: at(1),
    };
    assert!(evolve(Some(archived), &event).is_err());
    let _ = then; // the helpers above build every other column through commands
}
