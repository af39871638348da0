//! A refresh held for the repository's check: an attempt of its own kind (no agent) once per (commit, base), that
//! costs the work none of its budget and is no bounce; its success recorded as the refresh, its failure back in
//! review with a person flagged, its interruption round again.

use super::*;
use crate::tasks::domain::{RefreshCheck, RefreshMode};

fn sha(c: char) -> CommitSha {
    CommitSha::new(&c.to_string().repeat(40)).expect("a commit")
}

fn check(from: char, base: char) -> Command {
    Command::CheckRefresh {
        check: Box::new(RefreshCheck {
            from: sha(from),
            to: sha('e'),
            base: sha(base),
            strategy: RefreshMode::Rebase,
            stamp: 1_750_000_000,
        }),
    }
}

fn kinds(events: &[TaskEvent]) -> Vec<&'static str> {
    events.iter().map(TaskEvent::kind).collect()
}

#[test]
fn a_held_refresh_is_an_attempt_of_its_own_kind_and_its_success_is_the_refresh() {
    let review = task_in(Column::InReview);
    let (todo, events) = step(Some(review.clone()), &check('a', 'b'), 2);
    assert_eq!(kinds(&events), ["task.refresh_check_due"]);
    assert_eq!(todo.column(), Column::Todo);
    assert_eq!(todo.max_attempts().get(), review.max_attempts().get() + 1);
    assert_eq!(todo.next_purpose(), RunPurpose::Refresh);
    // A follow-up waiting is not handed to a run that has no agent.
    let todo = then(
        todo,
        Command::AttachFollowUp {
            text: FollowUpText::new("also fix the footer").expect("a follow-up"),
            origin: None,
            send_back: false,
        },
    );
    let (running, events) = step(Some(todo), &Command::Start { run: run(2) }, 3);
    assert_eq!(kinds(&events), ["task.started"]);
    assert_eq!(running.purpose(), Some(RunPurpose::Refresh));
    assert_eq!(running.pending_follow_ups().count(), 1);
    // Its push is the refresh: back in review on the refreshed commit, the review run unchanged; the follow-up
    // then sends it round for the work.
    let (back, events) = step(Some(running), &submit(run(2), None), 4);
    assert_eq!(kinds(&events)[0], "task.refreshed");
    assert_eq!(back.refreshed(), Some(&sha('e')));
    assert_eq!(back.reviewed_run(), Some(run(1)));
    assert!(back.refresh_check().is_none());
    assert_eq!(
        kinds(&events)[1..],
        ["task.retried"],
        "the follow-up sends it back"
    );
    assert_eq!(back.next_purpose(), RunPurpose::Work);
}

#[test]
fn a_failed_check_pushes_nothing_and_flags_a_person_once_per_refresh() {
    let (todo, _) = step(Some(task_in(Column::InReview)), &check('a', 'b'), 2);
    // A redelivered push while it waits: not in review, refused (the loop logs it and moves on).
    assert!(matches!(
        decide(Some(&todo), &check('a', 'b'), at(3)),
        Err(TaskError::WrongColumn { .. })
    ));
    let running = then(todo, Command::Start { run: run(2) });
    let (review, events) = step(
        Some(running),
        &Command::Retry {
            cause: RetryCause::RunFailed { run: run(2) },
            reason: reason(
                "run check (attempt 2): exited with status 1\nlast output:\nCHECK-SAYS: broken",
            ),
        },
        4,
    );
    assert_eq!(
        kinds(&events),
        ["task.refresh_check_failed", "task.flagged_needs_human"]
    );
    assert_eq!(review.column(), Column::InReview);
    assert!(review.refreshed().is_none(), "nothing was pushed");
    let flag = review
        .needs_human()
        .expect("flagged")
        .reason
        .as_str()
        .to_owned();
    assert!(flag.contains("CHECK-SAYS: broken"), "{flag}");
    assert!(flag.contains("was not pushed"), "{flag}");
    // Cleared, the same (commit, base) flags again; another base is another check.
    let cleared = then(review, Command::ClearNeedsHuman);
    let (again, events) = step(Some(cleared.clone()), &check('a', 'b'), 5);
    assert_eq!(kinds(&events), ["task.flagged_needs_human"]);
    assert_eq!(again.column(), Column::InReview);
    let (_, events) = step(Some(cleared), &check('a', 'c'), 6);
    assert_eq!(kinds(&events), ["task.refresh_check_due"]);
}

#[test]
fn an_interrupted_refresh_check_goes_round_again_and_is_no_bounce() {
    let mut task = task_in(Column::InReview);
    let budget = task.max_attempts().get();
    // Held and cut off more often than the bounce rule allows work attempts: never flagged for it.
    for n in 0..(OSCILLATION_STARTS as u128 + 1) {
        if task.column() == Column::InReview {
            task = then(task, check('a', 'b'));
        }
        let running = then(task, Command::Start { run: run(10 + n) });
        let (todo, events) = step(
            Some(running),
            &Command::Retry {
                cause: RetryCause::Interrupted { run: run(10 + n) },
                reason: reason("pidevops shut down"),
            },
            3,
        );
        assert_eq!(kinds(&events), ["task.retried", "task.attempt_returned"]);
        assert_eq!(todo.next_purpose(), RunPurpose::Refresh);
        assert!(todo.needs_human().is_none());
        task = todo;
    }
    assert!(task.max_attempts().get() > budget);
    // Only the work's own start counts for the bounce rule.
    assert_eq!(task.recent_starts.len(), 1);
}

#[test]
fn only_a_task_in_review_gets_its_refresh_checked_and_a_refreshed_one_not_twice() {
    for column in [
        Column::Triage,
        Column::Todo,
        Column::InProgress,
        Column::Done,
    ] {
        assert!(
            decide(Some(&task_in(column)), &check('a', 'b'), at(2)).is_err(),
            "{column}"
        );
    }
    let refreshed = then(
        task_in(Column::InReview),
        Command::RecordRefresh {
            from: sha('a'),
            to: sha('e'),
            base: sha('b'),
            strategy: RefreshMode::Rebase,
        },
    );
    assert_eq!(
        decide(Some(&refreshed), &check('a', 'b'), at(3)),
        Ok(Vec::new())
    );
}

#[test]
fn a_failing_check_goes_to_an_agent_once_with_its_output() {
    let failed_check = |run_id| Command::FailRefreshCheck {
        run: run_id,
        reason: reason(
            "run check (attempt 2): exited with status 3\nlast output:\nCHECK-SAYS: broken",
        ),
    };
    let (todo, _) = step(Some(task_in(Column::InReview)), &check('a', 'b'), 2);
    let running = then(todo, Command::Start { run: run(2) });
    // Only the live refresh check's run reports it.
    assert!(decide(Some(&running), &failed_check(run(9)), at(3)).is_err());
    let (todo, events) = step(Some(running), &failed_check(run(2)), 3);
    assert_eq!(
        kinds(&events),
        ["task.refresh_check_failed", "task.conflict_found"]
    );
    assert_eq!(todo.column(), Column::Todo);
    assert_eq!(todo.next_purpose(), RunPurpose::Resolve);
    assert!(todo.refreshed().is_none(), "nothing was pushed");
    let conflict = todo.conflict().expect("handed to an agent");
    assert!(conflict.files.is_empty());
    assert!(conflict
        .check
        .as_deref()
        .is_some_and(|c| c.contains("CHECK-SAYS: broken")));
    // The agent could not make it pass: a person is flagged, and the same refresh is never handed over again.
    let resolving = then(todo, Command::Start { run: run(3) });
    let review = then(
        resolving,
        Command::Retry {
            cause: RetryCause::RunFailed { run: run(3) },
            reason: reason("run check (attempt 3): exited with status 3"),
        },
    );
    let flag = review
        .needs_human()
        .expect("flagged")
        .reason
        .as_str()
        .to_owned();
    assert!(flag.contains("fails the repository's check"), "{flag}");
    let cleared = then(review, Command::ClearNeedsHuman);
    let (todo, _) = step(Some(cleared), &check('a', 'c'), 5);
    let running = then(todo, Command::Start { run: run(4) });
    let (_, events) = step(Some(running), &failed_check(run(4)), 6);
    assert_eq!(
        kinds(&events),
        ["task.refresh_check_failed", "task.conflict_found"]
    );
}
