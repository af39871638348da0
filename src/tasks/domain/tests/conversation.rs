//! Talking to a task: follow-ups keyed by their message (a redelivery or an edit attaches nothing twice), handed
//! over once and in order (in a prompt or live), a follow-up in review sending the task round again, a restart
//! for a follow-up given back, and a question answered once.

use super::*;
use crate::tasks::GITHUB_PR;

fn origin(key: &str) -> Option<FollowUpOrigin> {
    Some(FollowUpOrigin::new(key, "alice on GitHub").expect("a valid origin"))
}

fn follow_up(text: &str, key: Option<&str>) -> Command {
    Command::AttachFollowUp {
        text: FollowUpText::new(text).expect("valid"),
        origin: key.and_then(origin),
        send_back: true,
    }
}

fn answer(text: &str, key: &str) -> Command {
    Command::Answer {
        text: FollowUpText::new(text).expect("valid"),
        origin: origin(key),
    }
}

#[test]
fn a_message_seen_twice_attaches_once() {
    let task = then(
        task_in(Column::Todo),
        follow_up("also the empty list", Some("github:comment:1")),
    );
    let again = decide(
        Some(&task),
        &follow_up("also the empty list (edited)", Some("github:comment:1")),
        at(2),
    );
    assert_eq!(again, Ok(Vec::new()));
    let other = decide(
        Some(&task),
        &follow_up("and the docs", Some("github:comment:2")),
        at(2),
    )
    .expect("another message attaches");
    assert_eq!(other.len(), 1);
    assert_eq!(task.follow_ups()[0].origin, origin("github:comment:1"));
    // Without a key there is nothing to know it by: each attaches.
    let task = then(task, follow_up("a note", None));
    let task = then(task, follow_up("a note", None));
    assert_eq!(task.follow_ups().len(), 3);
}

#[test]
fn a_start_hands_over_every_waiting_follow_up_with_an_event() {
    let task = then(task_in(Column::Todo), follow_up("first", Some("k:1")));
    let task = then(task, follow_up("second", Some("k:2")));
    let events = decide(Some(&task), &Command::Start { run: run(2) }, at(3)).expect("starts");
    assert!(
        matches!(
            events.as_slice(),
            [TaskEvent::Started { .. }, TaskEvent::FollowUpsDelivered { indices, live: false, attempt: 1, .. }]
                if indices == &[0, 1]
        ),
        "{events:?}"
    );
    // Nothing waiting: no hand-over event.
    let events = decide(
        Some(&task_in(Column::Todo)),
        &Command::Start { run: run(2) },
        at(3),
    )
    .expect("starts");
    assert_eq!(events.len(), 1);
}

#[test]
fn live_hand_overs_keep_the_order_and_happen_once() {
    let task = task_in(Column::InProgress);
    let task = then(task, follow_up("first", Some("k:1")));
    let task = then(task, follow_up("second", Some("k:2")));
    assert_eq!(task.column(), Column::InProgress);
    assert_eq!(task.pending_follow_up_indices(), [0, 1]);
    let deliver = |indices: Vec<u32>| Command::DeliverFollowUps {
        run: run(1),
        indices,
    };
    // Out of order, or skipping the oldest: refused.
    for wrong in [vec![1], vec![1, 0]] {
        assert!(matches!(
            decide(Some(&task), &deliver(wrong), at(2)),
            Err(TaskError::FollowUpOrder { .. })
        ),);
    }
    // Another run's hand-over: refused.
    assert!(matches!(
        decide(
            Some(&task),
            &Command::DeliverFollowUps {
                run: run(9),
                indices: vec![0]
            },
            at(2)
        ),
        Err(TaskError::StaleRun { .. })
    ));
    let task = then(task, deliver(vec![0]));
    assert!(task.follow_ups()[0].live);
    assert_eq!(task.follow_ups()[0].delivered_to_attempt, Some(1));
    // The same hand-over again (a retried append) records nothing.
    assert_eq!(
        decide(Some(&task), &deliver(vec![0]), at(3)),
        Ok(Vec::new())
    );
    let task = then(task, deliver(vec![0, 1]));
    assert_eq!(task.pending_follow_ups().count(), 0);
    // Handed over live: the run submits and the task stays in review.
    let task = then(task, submit(run(1), Some(3)));
    assert_eq!(task.column(), Column::InReview);
    // Not while it waits: only a running agent takes follow-ups live.
    assert!(matches!(
        decide(Some(&task_in(Column::Todo)), &deliver(vec![0]), at(2)),
        Err(TaskError::WrongColumn { .. })
    ));
}

#[test]
fn a_follow_up_queued_during_a_run_sends_it_round_again_after_its_submission() {
    let task = then(
        task_in(Column::InProgress),
        follow_up("also handle the empty list", Some("k:1")),
    );
    let (task, events) = step(Some(task), &submit(run(1), Some(3)), 2);
    assert!(matches!(
        events.as_slice(),
        [
            TaskEvent::SubmittedForReview { .. },
            TaskEvent::Retried {
                cause: RetryCause::FollowUp,
                ..
            }
        ]
    ));
    assert_eq!(task.column(), Column::Todo);
    assert_eq!(
        task.links().get(GITHUB_PR),
        Some(pr(3)),
        "the pull request stays"
    );
    let task = then(task, Command::Start { run: run(2) });
    assert_eq!(task.follow_ups()[0].delivered_to_attempt, Some(2));
}

#[test]
fn a_follow_up_in_review_sends_the_task_back_for_it() {
    let (task, events) = step(
        Some(task_in(Column::InReview)),
        &follow_up("also the empty list", Some("k:1")),
        2,
    );
    assert!(matches!(
        events.as_slice(),
        [TaskEvent::FollowUpAttached { .. }, TaskEvent::Retried { cause: RetryCause::FollowUp, reason, .. }]
            if reason.as_str().contains("also the empty list")
    ));
    assert_eq!(task.column(), Column::Todo);
    assert_eq!(task.pending_follow_ups().count(), 1);
}

#[test]
fn a_line_comment_waits_in_review_for_its_review() {
    let quiet = Command::AttachFollowUp {
        text: FollowUpText::new("src/a.rs:3: use a match").expect("valid"),
        origin: origin("github:review-comment:1"),
        send_back: false,
    };
    let (task, events) = step(Some(task_in(Column::InReview)), &quiet, 2);
    assert!(matches!(
        events.as_slice(),
        [TaskEvent::FollowUpAttached { .. }]
    ));
    assert_eq!(task.column(), Column::InReview);
    assert_eq!(task.pending_follow_ups().count(), 1);
}

#[test]
fn a_restart_for_a_follow_up_is_given_back() {
    let task = task_in(Column::InProgress);
    let budget = task.max_attempts().get();
    let (task, events) = step(
        Some(task),
        &Command::Retry {
            cause: RetryCause::Restarted { run: run(1) },
            reason: reason("a follow-up came while it ran"),
        },
        2,
    );
    assert!(matches!(
        events.as_slice(),
        [TaskEvent::Retried { .. }, TaskEvent::AttemptReturned { .. }]
    ));
    assert_eq!(task.max_attempts().get(), budget + 1);
    assert!(task.needs_human().is_none());
    assert!(task.can_start());
}

#[test]
fn a_question_waits_for_the_first_answer_which_the_next_run_gets() {
    let task = task_in(Column::InProgress);
    let (task, events) = step(
        Some(task),
        &Command::Retry {
            cause: RetryCause::AgentAsked { run: run(1) },
            reason: reason("Should the empty list return 404 or []?"),
        },
        2,
    );
    assert!(matches!(
        events.as_slice(),
        [
            TaskEvent::Retried { .. },
            TaskEvent::AttemptReturned { .. },
            TaskEvent::FlaggedNeedsHuman { question: true, .. }
        ]
    ));
    let flag = task.needs_human().expect("waits for a person");
    assert!(flag.question);
    assert_eq!(
        flag.reason.as_str(),
        "Should the empty list return 404 or []?"
    );
    assert!(!task.can_start());

    let (answered, events) = step(
        Some(task.clone()),
        &answer("Return []", "linear:activity:a1"),
        3,
    );
    assert!(matches!(
        events.as_slice(),
        [
            TaskEvent::FollowUpAttached { answer: true, .. },
            TaskEvent::NeedsHumanCleared { .. }
        ]
    ));
    assert!(answered.needs_human().is_none());
    assert!(answered.can_start());
    // The same answer again (a redelivery) changes nothing; a second answer finds no question.
    assert_eq!(
        decide(
            Some(&answered),
            &answer("Return []", "linear:activity:a1"),
            at(4)
        ),
        Ok(Vec::new())
    );
    assert_eq!(
        decide(Some(&answered), &answer("404", "telegram:1:9"), at(4)),
        Err(TaskError::NoQuestion {
            id: id(),
            command: "answer"
        })
    );
    let started = then(answered, Command::Start { run: run(2) });
    assert_eq!(started.follow_ups()[0].delivered_to_attempt, Some(2));
}

#[test]
fn any_needs_human_takes_an_answer_and_one_in_review_goes_round_again() {
    let task = then(
        task_in(Column::InReview),
        Command::FlagNeedsHuman {
            reason: reason("merge conflict"),
        },
    );
    let (task, events) = step(Some(task), &answer("rebase on main", "github:comment:5"), 2);
    assert!(matches!(
        events.as_slice(),
        [
            TaskEvent::FollowUpAttached { .. },
            TaskEvent::NeedsHumanCleared { .. },
            TaskEvent::Retried {
                cause: RetryCause::FollowUp,
                ..
            }
        ]
    ));
    assert_eq!(task.column(), Column::Todo);
}

#[test]
fn origins_are_checked() {
    assert!(FollowUpOrigin::new("", "alice").is_err());
    assert!(FollowUpOrigin::new("github:comment:1", "").is_err());
    assert!(FollowUpOrigin::new("has space", "alice").is_err());
    assert!(FollowUpOrigin::new("k", "a\u{7}lice").is_err());
    assert!(FollowUpOrigin::new("k".repeat(201), "alice").is_err());
    let json = serde_json::to_value(origin("github:comment:1")).expect("serializes");
    assert_eq!(
        json,
        serde_json::json!({"key": "github:comment:1", "from": "alice on GitHub"})
    );
    assert!(serde_json::from_value::<FollowUpOrigin>(
        serde_json::json!({"key": "a b", "from": "x"})
    )
    .is_err());
}
