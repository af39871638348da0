//! A refresh's conflict: handed to an agent once per (commit, base), an attempt of its own kind that costs the
//! work none of its budget; its resolution back in review, an unresolved one flagged with the files named.

use super::*;

fn sha(c: char) -> CommitSha {
    CommitSha::new(&c.to_string().repeat(40)).expect("a commit")
}

fn conflict(from: char, base: char) -> Command {
    Command::ResolveConflict {
        conflict: Box::new(Conflict::new(
            sha(from),
            sha(base),
            &["src/auth/login.rs".to_owned()],
            1,
            "@@@ -1,3 -1,3 +1,7 @@@\n++<<<<<<< HEAD\n",
        )),
    }
}

fn kinds(events: &[TaskEvent]) -> Vec<&'static str> {
    events.iter().map(TaskEvent::kind).collect()
}

#[test]
fn a_conflict_in_review_becomes_an_attempt_of_its_own_kind_with_one_more_attempt() {
    let review = task_in(Column::InReview);
    let (todo, events) = step(Some(review.clone()), &conflict('a', 'b'), 2);
    assert_eq!(kinds(&events), ["task.conflict_found"]);
    assert_eq!(todo.column(), Column::Todo);
    assert_eq!(todo.max_attempts().get(), review.max_attempts().get() + 1);
    assert_eq!(todo.next_purpose(), RunPurpose::Resolve);
    assert!(todo.needs_human().is_none());
    let (running, events) = step(Some(todo), &Command::Start { run: run(2) }, 3);
    assert!(matches!(
        events[0],
        TaskEvent::Started {
            purpose: RunPurpose::Resolve,
            ..
        }
    ));
    assert_eq!(
        running.conflict().map(|c| c.files.clone()),
        Some(vec!["src/auth/login.rs".to_owned()])
    );
    // Its resolution, pushed, is submitted for review like any attempt's: the conflict is over.
    let (back, _) = step(Some(running), &submit(run(2), Some(3)), 4);
    assert_eq!(back.column(), Column::InReview);
    assert_eq!(back.reviewed_run(), Some(run(2)));
    assert!(back.conflict().is_none());
    assert_eq!(back.next_purpose(), RunPurpose::Work);
}

#[test]
fn the_same_conflict_again_is_never_a_second_attempt() {
    let review = task_in(Column::InReview);
    let (todo, _) = step(Some(review), &conflict('a', 'b'), 2);
    // A redelivered push while it waits: not in review, refused (the loop logs it and moves on).
    assert!(matches!(
        decide(Some(&todo), &conflict('a', 'b'), at(3)),
        Err(TaskError::WrongColumn { .. })
    ));
    let running = then(todo, Command::Start { run: run(2) });
    let (review, events) = step(
        Some(running),
        &Command::Retry {
            cause: RetryCause::RunFailed { run: run(2) },
            reason: reason("conflict markers left in src/auth/login.rs"),
        },
        4,
    );
    // Unresolved: back in review as it was, a person flagged with the file named.
    assert_eq!(
        kinds(&events),
        ["task.conflict_unresolved", "task.flagged_needs_human"]
    );
    assert_eq!(review.column(), Column::InReview);
    let flag = review
        .needs_human()
        .expect("flagged")
        .reason
        .as_str()
        .to_owned();
    assert!(flag.contains("src/auth/login.rs"), "{flag}");
    assert!(flag.contains("markers left"), "{flag}");
    // Flagged: a conflict changes nothing. Cleared, the same (commit, base) flags again, no second attempt.
    assert_eq!(
        decide(Some(&review), &conflict('a', 'b'), at(5)),
        Ok(Vec::new())
    );
    let cleared = then(review, Command::ClearNeedsHuman);
    let (again, events) = step(Some(cleared.clone()), &conflict('a', 'b'), 6);
    assert_eq!(kinds(&events), ["task.flagged_needs_human"]);
    assert_eq!(again.column(), Column::InReview);
    // Another base is another conflict: an agent may try it.
    let (_, events) = step(Some(cleared), &conflict('a', 'c'), 7);
    assert_eq!(kinds(&events), ["task.conflict_found"]);
}

#[test]
fn an_interrupted_conflict_attempt_goes_round_again_as_one() {
    let (todo, _) = step(Some(task_in(Column::InReview)), &conflict('a', 'b'), 2);
    let running = then(todo, Command::Start { run: run(2) });
    let (todo, events) = step(
        Some(running),
        &Command::Retry {
            cause: RetryCause::Interrupted { run: run(2) },
            reason: reason("pidevops shut down"),
        },
        3,
    );
    assert_eq!(kinds(&events), ["task.retried", "task.attempt_returned"]);
    assert_eq!(todo.column(), Column::Todo);
    assert_eq!(todo.next_purpose(), RunPurpose::Resolve);
}

#[test]
fn only_a_task_in_review_and_not_a_plan_gets_a_conflict_attempt() {
    for column in [
        Column::Triage,
        Column::Todo,
        Column::InProgress,
        Column::Done,
    ] {
        assert!(
            decide(Some(&task_in(column)), &conflict('a', 'b'), at(2)).is_err(),
            "{column}"
        );
    }
}

#[test]
fn a_conflict_is_bounded_whatever_the_refresh_handed_over() {
    let files: Vec<String> = (0..50)
        .map(|i| format!("f{i}\n{}", "x".repeat(900)))
        .collect();
    let hunks = "é".repeat(20_000);
    let conflict = Conflict::new(sha('a'), sha('b'), &files, 50, &hunks);
    assert_eq!(conflict.files.len(), 20);
    assert!(conflict
        .files
        .iter()
        .all(|f| !f.contains('\n') && f.chars().count() <= 512));
    assert!(conflict.hunks.len() <= 16 * 1024 + 64);
    assert_eq!(conflict.total, 50);
    assert!(conflict.named().ends_with(" and 30 more"));
}
