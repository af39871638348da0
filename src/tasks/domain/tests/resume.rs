//! Resuming an attempt from a checkpoint: the same attempt, only after a cut that was not the work's fault, only
//! from a checkpoint the attempt made, and at most `MAX_RESUMES` times.

use super::*;
use crate::tasks::{Checkpoint, CommitSha, MAX_RESUMES};

fn checkpoint(of: RunId) -> Checkpoint {
    let sha = |c: char| CommitSha::new(&c.to_string().repeat(40)).unwrap();
    Checkpoint {
        run: of,
        commit: sha('c'),
        head: sha('b'),
        base: sha('a'),
        turn: 2,
        at: at(5),
        files: vec!["notes.md".into()],
        changed: 1,
    }
}

fn interrupted(of: RunId) -> Command {
    Command::Retry {
        cause: RetryCause::Interrupted { run: of },
        reason: reason("pidevops restarted"),
    }
}

fn resume(run_id: RunId, from: &Checkpoint) -> Command {
    Command::Resume {
        run: run_id,
        checkpoint: Box::new(from.clone()),
    }
}

#[test]
fn an_interrupted_attempt_resumes_as_the_same_attempt_and_its_given_back_attempt_is_taken_back() {
    let task = step(None, &new_task(ApprovalPolicy::Auto, 3), 0).0;
    let task = then(task, Command::Start { run: run(1) });
    let task = then(task, interrupted(run(1)));
    assert_eq!(task.max_attempts().get(), 4, "given back when cut off");
    assert_eq!(task.resumable(), Some(run(1)));
    let saved = checkpoint(run(1));
    let (resumed, events) = step(Some(task), &resume(run(2), &saved), 6);
    assert!(
        matches!(events.as_slice(), [TaskEvent::Resumed { attempt: 1, run: r, checkpoint, .. }]
            if *r == run(2) && **checkpoint == saved),
        "{events:?}"
    );
    assert_eq!(resumed.column(), Column::InProgress);
    assert_eq!(resumed.attempts(), 1, "the counter does not move");
    assert_eq!(resumed.max_attempts().get(), 3, "nor does the budget grow");
    assert_eq!(resumed.resuming(run(2)), Some(&saved));
    assert_eq!(
        resumed.resuming(run(1)),
        None,
        "only the live run resumes it"
    );
    assert_eq!(resumed.resumes(), 1);
    // It ends like any attempt: submitted for review from the resuming run.
    let reviewed = then(resumed, submit(run(2), Some(7)));
    assert_eq!(reviewed.column(), Column::InReview);
    assert_eq!(reviewed.attempts(), 1);
}

#[test]
fn a_resume_is_refused_after_the_works_own_failure_or_from_another_attempts_checkpoint() {
    let task = step(None, &new_task(ApprovalPolicy::Auto, 3), 0).0;
    let started = then(task, Command::Start { run: run(1) });
    let failed = then(started.clone(), run_failed(run(1)));
    assert_eq!(failed.resumable(), None);
    let refused = decide(Some(&failed), &resume(run(2), &checkpoint(run(1))), at(6));
    assert!(
        matches!(refused, Err(TaskError::NotResumable { .. })),
        "{refused:?}"
    );
    // Cut off, but the checkpoint is some other run's: refused, whoever asks.
    let cut = then(started, interrupted(run(1)));
    let refused = decide(Some(&cut), &resume(run(2), &checkpoint(run(9))), at(6));
    assert!(
        matches!(refused, Err(TaskError::NotResumable { .. })),
        "{refused:?}"
    );
    // An event that claims otherwise does not apply either.
    let forged = TaskEvent::Resumed {
        at: at(6),
        run: run(2),
        attempt: 1,
        checkpoint: Box::new(checkpoint(run(9))),
    };
    assert!(evolve(Some(cut.clone()), &forged).is_err());
    let wrong_attempt = TaskEvent::Resumed {
        at: at(6),
        run: run(2),
        attempt: 2,
        checkpoint: Box::new(checkpoint(run(1))),
    };
    assert!(evolve(Some(cut), &wrong_attempt).is_err());
}

#[test]
fn a_run_that_resumed_and_was_cut_off_before_saving_resumes_the_same_checkpoint() {
    let task = step(None, &new_task(ApprovalPolicy::Auto, 3), 0).0;
    let task = then(task, Command::Start { run: run(1) });
    let task = then(task, interrupted(run(1)));
    let saved = checkpoint(run(1));
    let task = then(task, resume(run(2), &saved));
    let task = then(task, interrupted(run(2)));
    assert_eq!(task.resumable(), Some(run(2)));
    assert_eq!(task.resumed_from(), Some(&saved));
    let task = then(task, resume(run(3), &saved));
    assert_eq!(task.attempts(), 1);
    assert_eq!(task.resuming(run(3)), Some(&saved));
}

#[test]
fn an_attempt_resumes_at_most_max_resumes_times_then_the_next_start_is_a_new_attempt() {
    let mut task = step(None, &new_task(ApprovalPolicy::Auto, 3), 0).0;
    task = then(task, Command::Start { run: run(1) });
    let limited = |of: RunId| Command::Retry {
        cause: RetryCause::Limited {
            run: of,
            until: at(100),
        },
        reason: reason("rate limited"),
    };
    let mut last = run(1);
    for n in 0..MAX_RESUMES {
        task = then(task, limited(last));
        let next = run(10 + u128::from(n));
        task = then(task, resume(next, &checkpoint(last)));
        assert_eq!(task.attempts(), 1);
        last = next;
    }
    task = then(task, limited(last));
    assert_eq!(task.resumable(), None, "resumed as often as one may");
    let refused = decide(Some(&task), &resume(run(50), &checkpoint(last)), at(7));
    assert!(
        matches!(refused, Err(TaskError::NotResumable { .. })),
        "{refused:?}"
    );
    let (fresh, events) = step(Some(task), &Command::Start { run: run(51) }, 8);
    assert!(matches!(
        events.as_slice(),
        [TaskEvent::Started { attempt: 2, .. }]
    ));
    assert_eq!(fresh.resumes(), 0, "a new attempt starts its own count");
    assert_eq!(fresh.resuming(run(51)), None);
}
