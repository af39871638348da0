//! Attempts, budgets, runs and what a task keeps between them. (Links, specs, closing and the events' shape:
//! records.rs.)

use super::*;

#[test]
fn the_last_failed_attempt_flags_the_task_once_and_a_human_buys_one_more() {
    let mut task = step(None, &new_task(ApprovalPolicy::Auto, 3), 0).0;
    for attempt in 1..=3u32 {
        assert!(task.can_start());
        let r = run(attempt.into());
        let (started, events) = step(Some(task), &Command::Start { run: r }, 1);
        assert!(
            matches!(events.as_slice(), [TaskEvent::Started { attempt: a, .. }] if *a == attempt)
        );
        let (failed, events) = step(Some(started), &run_failed(r), 2);
        assert_eq!(failed.attempts(), attempt);
        assert_eq!(failed.column(), Column::Todo);
        assert_eq!(failed.last_failure().map(|f| f.attempt), Some(attempt));
        let flags = events
            .iter()
            .filter(|e| matches!(e, TaskEvent::FlaggedNeedsHuman { .. }))
            .count();
        assert_eq!(flags, usize::from(attempt == 3), "attempt {attempt}");
        task = failed;
    }
    let flag = task.needs_human().expect("flagged");
    assert_eq!(flag.reason.as_str(), "attempt 3 of 3 failed: exit status 1");
    assert!(!task.can_start());
    assert_eq!(
        decide(Some(&task), &Command::Start { run: run(4) }, at(3)),
        Err(TaskError::NeedsHuman {
            id: id(),
            reason: flag.reason.clone()
        })
    );
    // Flagging again in the same episode says nothing new.
    assert_eq!(
        decide(
            Some(&task),
            &Command::FlagNeedsHuman {
                reason: reason("again")
            },
            at(3)
        ),
        Ok(vec![])
    );

    let (cleared, events) = step(Some(task), &Command::ClearNeedsHuman, 4);
    assert!(matches!(
        events.as_slice(),
        [TaskEvent::NeedsHumanCleared { max_attempts, .. }] if max_attempts.get() == 4
    ));
    assert!(cleared.can_start());
    let started = then(cleared, Command::Start { run: run(4) });
    assert_eq!(started.attempts(), 4);
    let (failed, events) = step(Some(started), &run_failed(run(4)), 5);
    assert!(
        matches!(events.last(), Some(TaskEvent::FlaggedNeedsHuman { .. })),
        "a new episode, a new alert"
    );
    assert_eq!(failed.attempts(), 4);
    assert_eq!(failed.max_attempts().get(), 4);
}

/// Attempts that keep coming back fast are flagged before the budget is spent; a human clearing the flag starts
/// the count again, and attempts spread wider than the window never trip it.
#[test]
fn attempts_bouncing_back_fast_are_flagged_instead_of_looping() {
    let window = OSCILLATION_WINDOW_S;
    let bounce = |task: Task, n: u128, started: i64, failed: i64| {
        let task = step(Some(task), &Command::Start { run: run(n) }, started).0;
        step(Some(task), &run_failed(run(n)), failed)
    };
    let fresh = || step(None, &new_task(ApprovalPolicy::Auto, 10), 0).0;

    let mut task = fresh();
    for n in 1..OSCILLATION_STARTS as u128 {
        let (after, events) = bounce(task, n, 10 * n as i64, 10 * n as i64 + 5);
        assert!(
            matches!(events.as_slice(), [TaskEvent::Retried { .. }]),
            "attempt {n}: {events:?}"
        );
        task = after;
    }
    let n = OSCILLATION_STARTS as u128;
    let (task, events) = bounce(task, n, 10 * n as i64, 10 * n as i64 + 5);
    let flag = task
        .needs_human()
        .expect("flagged on the third fast bounce");
    assert!(matches!(
        events.last(),
        Some(TaskEvent::FlaggedNeedsHuman { .. })
    ));
    assert_eq!(
        flag.reason.as_str(),
        "bouncing between todo and in-progress: 3 attempts in 15 minutes came back (attempt 3 of 10), \
         flagged instead of starting another: exit status 1"
    );
    assert!(!task.can_start(), "budget left, but no fourth start");

    // A human looked: the next bounce alone does not flag again.
    let task = then(task, Command::ClearNeedsHuman);
    let (task, events) = bounce(task, 4, 100, 101);
    assert!(matches!(events.as_slice(), [TaskEvent::Retried { .. }]));
    assert!(task.needs_human().is_none());

    // The same failures spread wider than the window are just failures.
    let mut task = fresh();
    for n in 1..=4u128 {
        let started = n as i64 * (window / 2 + 1);
        let (after, events) = bounce(task, n, started, started + 5);
        assert!(
            matches!(events.as_slice(), [TaskEvent::Retried { .. }]),
            "attempt {n}: {events:?}"
        );
        task = after;
    }
    assert_eq!(task.attempts(), 4);
    assert!(task.can_start());
}

/// pidevops stopping a run (a deploy) is not the task's failure: the attempt is given back, it is no bounce, and
/// only at the budget's cap does it count like any failure.
#[test]
fn an_interrupted_attempt_is_given_back() {
    let interrupted = |n: u128| Command::Retry {
        cause: RetryCause::Interrupted { run: run(n) },
        reason: reason("pidevops shut down"),
    };
    let mut task = step(None, &new_task(ApprovalPolicy::Auto, 1), 0).0;
    for n in 1..=5u128 {
        task = then(task, Command::Start { run: run(n) });
        let (after, events) = step(Some(task), &interrupted(n), 2);
        assert!(
            matches!(
                events.as_slice(),
                [TaskEvent::Retried { .. }, TaskEvent::AttemptReturned { max_attempts, .. }]
                    if max_attempts.get() == n as u32 + 1
            ),
            "{events:?}"
        );
        assert!(
            after.can_start(),
            "five restarts in a row: no flag, no bounce"
        );
        task = after;
    }
    assert_eq!((task.attempts(), task.max_attempts().get()), (5, 6));

    // At the cap the budget cannot grow: the interruption counts, and a spent budget asks a human.
    let capped = |max| step(None, &new_task(ApprovalPolicy::Auto, max), 0).0;
    let mut task = capped(MaxAttempts::CAP);
    for n in 1..=MaxAttempts::CAP as u128 {
        task = then(task, Command::Start { run: run(n) });
        let last = n == MaxAttempts::CAP as u128;
        let command = if last {
            interrupted(n)
        } else {
            run_failed(run(n))
        };
        task = step(Some(task), &command, 100_000 * n as i64).0;
    }
    assert_eq!(task.max_attempts().get(), MaxAttempts::CAP);
    assert!(task.needs_human().is_some());

    // Only after an interrupted attempt, and only by one.
    let failed = then(
        then(capped(3), Command::Start { run: run(1) }),
        run_failed(run(1)),
    );
    let returned = TaskEvent::AttemptReturned {
        at: at(3),
        max_attempts: MaxAttempts::new(4).unwrap(),
    };
    assert!(evolve(Some(failed), &returned).is_err());
}

/// A repository whose setup fails (`npm ci` against a registry that is down) did not let the agent try: the
/// attempt is given back. It still backs off and counts as a bounce, so a setup that keeps failing fast asks a
/// human after three instead of looping until the cap.
#[test]
fn a_failed_setup_is_given_back_but_a_setup_failing_fast_asks_a_human() {
    let setup_failed = |n: u128| Command::Retry {
        cause: RetryCause::SetupFailed { run: run(n) },
        reason: reason(
            "run setup (attempt 1): the repository's setup `npm ci` exited with status 1",
        ),
    };
    // Spread out (an hour apart): given back each time, never flagged, the budget untouched.
    let mut task = step(None, &new_task(ApprovalPolicy::Auto, 1), 0).0;
    for n in 1..=4u128 {
        task = then(task, Command::Start { run: run(n) });
        let (after, events) = step(Some(task), &setup_failed(n), 3600 * n as i64);
        assert!(
            matches!(
                events.as_slice(),
                [TaskEvent::Retried { .. }, TaskEvent::AttemptReturned { max_attempts, .. }]
                    if max_attempts.get() == n as u32 + 1
            ),
            "{events:?}"
        );
        assert!(after.can_start());
        assert!(matches!(
            after.last_failure().map(|f| f.cause),
            Some(RetryCause::SetupFailed { .. })
        ));
        task = after;
    }
    assert_eq!((task.attempts(), task.max_attempts().get()), (4, 5));
    // The agent's one real attempt (a budget of one) is still there, and it is the last.
    let task = then(task, Command::Start { run: run(5) });
    let (task, _) = step(Some(task), &run_failed(run(5)), 100_000);
    let flag = task.needs_human().unwrap().reason.as_str().to_owned();
    assert!(flag.starts_with("attempt 5 of 5 failed"), "{flag}");

    // Fast: the third setup failure within the window flags it, with the budget it has after the give-back.
    let mut task = step(None, &new_task(ApprovalPolicy::Auto, 3), 0).0;
    let mut last = Vec::new();
    for n in 1..=3u128 {
        task = then(task, Command::Start { run: run(n) });
        let (after, events) = step(Some(task), &setup_failed(n), 10 * n as i64);
        task = after;
        last = events;
    }
    assert!(
        matches!(
            last.as_slice(),
            [
                TaskEvent::Retried { .. },
                TaskEvent::AttemptReturned { .. },
                TaskEvent::FlaggedNeedsHuman { .. }
            ]
        ),
        "{last:?}"
    );
    let flag = task.needs_human().unwrap().reason.as_str().to_owned();
    assert!(
        flag.starts_with("bouncing between todo and in-progress: 3 attempts in 15 minutes came back (attempt 3 of 6)"),
        "{flag}"
    );
    assert!(flag.contains("npm ci"), "{flag}");
}

#[test]
fn a_task_picks_its_agent_between_attempts_and_keeps_it() {
    let (task, events) = step(
        None,
        &Command::Create(Box::new(NewTask {
            agent: Some(agent("codex")),
            ..match new_task(ApprovalPolicy::Auto, 3) {
                Command::Create(new) => *new,
                _ => unreachable!("new_task builds a create"),
            }
        })),
        0,
    );
    assert!(matches!(&events[0], TaskEvent::Created(c) if c.agent == Some(agent("codex"))));
    assert_eq!(task.agent(), Some(&agent("codex")));
    let same = Command::ChooseAgent {
        agent: Some(agent("codex")),
    };
    assert_eq!(decide(Some(&task), &same, at(1)), Ok(vec![]));
    let (task, events) = step(Some(task), &Command::ChooseAgent { agent: None }, 2);
    assert_eq!(events.len(), 1);
    assert_eq!(task.agent(), None);
    let running = then(
        then(
            task,
            Command::ChooseAgent {
                agent: Some(agent("pi")),
            },
        ),
        Command::Start { run: run(1) },
    );
    assert_eq!(running.agent(), Some(&agent("pi")));
    assert_eq!(
        decide(Some(&running), &same, at(3))
            .expect_err("refused while running")
            .to_string(),
        "T-7 is in-progress; choose-agent needs triage or todo or in-review"
    );
    // The event round-trips through the log's JSON, and a created event without the field still reads.
    let json = serde_json::to_string(&events[0]).expect("serializes");
    assert_eq!(
        json,
        format!(
            r#"{{"type":"agent_chosen","at":{:?},"agent":null}}"#,
            at(2).to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
        )
    );
}

#[test]
fn a_failure_while_a_human_is_already_needed_opens_no_second_episode() {
    let task = step(None, &new_task(ApprovalPolicy::Auto, 1), 0).0;
    let task = then(task, Command::Start { run: run(1) });
    let task = then(
        task,
        Command::FlagNeedsHuman {
            reason: reason("agent asked a question"),
        },
    );
    let (task, events) = step(Some(task), &run_failed(run(1)), 2);
    assert!(matches!(events.as_slice(), [TaskEvent::Retried { .. }]));
    assert_eq!(
        task.needs_human().map(|f| f.reason.as_str()),
        Some("agent asked a question")
    );
}

#[test]
fn ci_failures_and_requested_changes_count_attempts_too() {
    let task = task_in(Column::InReview);
    for cause in [RetryCause::ChecksFailed, RetryCause::ChangesRequested] {
        let (after, events) = step(
            Some(task.clone()),
            &Command::Retry {
                cause,
                reason: reason("red"),
            },
            3,
        );
        assert_eq!(after.column(), Column::Todo);
        assert_eq!(after.attempts(), 1);
        assert!(matches!(
            events.as_slice(),
            [TaskEvent::Retried { attempt: 1, .. }]
        ));
        assert_eq!(
            after.branch(),
            task.branch(),
            "the branch is kept for the next run"
        );
    }
}

#[test]
fn reports_from_a_run_that_is_not_live_are_refused() {
    let task = task_in(Column::InProgress);
    let stale = TaskError::StaleRun {
        id: id(),
        run: run(9),
        current: Some(run(1)),
    };
    assert_eq!(
        decide(Some(&task), &submit(run(9), None), at(2)),
        Err(stale.clone())
    );
    assert_eq!(decide(Some(&task), &run_failed(run(9)), at(2)), Err(stale));
    // Run 1 failed and run 2 started; run 1's report arriving again cannot fail run 2.
    let task = then(task, run_failed(run(1)));
    let task = then(task, Command::Start { run: run(2) });
    assert_eq!(
        decide(Some(&task), &run_failed(run(1)), at(3)),
        Err(TaskError::StaleRun {
            id: id(),
            run: run(1),
            current: Some(run(2))
        })
    );
}

#[test]
fn the_budget_is_enforced_even_without_a_flag() {
    // Not reachable through decide (the last failure always flags), so build the stream by hand.
    let created = decide(None, &new_task(ApprovalPolicy::Auto, 1), at(0)).expect("created");
    let mut events = created;
    events.push(TaskEvent::Started {
        at: at(1),
        run: run(1),
        attempt: 1,
        purpose: Default::default(),
    });
    events.push(TaskEvent::Retried {
        at: at(2),
        cause: RetryCause::RunFailed { run: run(1) },
        reason: reason("boom"),
        attempt: 1,
    });
    let task = replay(&events).expect("applies").expect("a task");
    assert_eq!(
        decide(Some(&task), &Command::Start { run: run(2) }, at(3)),
        Err(TaskError::AttemptsExhausted {
            id: id(),
            attempts: 1,
            max: 1
        })
    );
    assert_eq!(
        TaskError::AttemptsExhausted {
            id: id(),
            attempts: 1,
            max: 1
        }
        .to_string(),
        "T-7 has used 1 of 1 attempts"
    );
}

#[test]
fn follow_ups_wait_for_the_next_run() {
    let text = |s: &str| Command::AttachFollowUp {
        text: FollowUpText::new(s).expect("valid"),
        origin: None,
        send_back: true,
    };
    let task = then(task_in(Column::Todo), text("before the first run"));
    assert_eq!(task.pending_follow_ups().count(), 1);
    let task = then(task, Command::Start { run: run(1) });
    assert_eq!(task.pending_follow_ups().count(), 0);
    let task = then(task, text("during the first run"));
    let task = then(task, run_failed(run(1)));
    let task = then(task, Command::Start { run: run(2) });
    let delivered: Vec<_> = task
        .follow_ups()
        .iter()
        .map(|f| (f.text.as_str(), f.delivered_to_attempt))
        .collect();
    assert_eq!(
        delivered,
        [
            ("before the first run", Some(1)),
            ("during the first run", Some(2))
        ]
    );

    let mut task = task_in(Column::Todo);
    for _ in 0..MAX_FOLLOW_UPS {
        task = then(task, text("more"));
    }
    assert_eq!(
        decide(Some(&task), &text("one too many"), at(2)),
        Err(TaskError::TooManyFollowUps { id: id() })
    );
}

#[test]
fn a_providers_limit_gives_the_attempt_back_even_in_quick_succession_and_is_the_last_failure() {
    let until = chrono::DateTime::<chrono::Utc>::from_timestamp(1_800_000_000, 0).unwrap();
    let limited = |n: u128| Command::Retry {
        cause: RetryCause::Limited { run: run(n), until },
        reason: reason("run limited (attempt 1): the agent ran into its provider's usage limit"),
    };
    // Ten limits seconds apart: each given back, never a bounce, never a person asked for.
    let mut task = step(None, &new_task(ApprovalPolicy::Auto, 1), 0).0;
    for n in 1..=10u128 {
        task = then(task, Command::Start { run: run(n) });
        let (after, events) = step(Some(task), &limited(n), n as i64);
        assert!(
            matches!(
                events.as_slice(),
                [TaskEvent::Retried { .. }, TaskEvent::AttemptReturned { max_attempts, .. }]
                    if max_attempts.get() == n as u32 + 1
            ),
            "{events:?}"
        );
        assert!(after.needs_human().is_none());
        assert!(after.can_start());
        assert_eq!(
            after.last_failure().map(|f| f.cause),
            Some(RetryCause::Limited { run: run(n), until })
        );
        task = after;
    }
    // A stale report of a limit (another run) changes nothing.
    let task = then(task, Command::Start { run: run(11) });
    assert!(matches!(
        decide(Some(&task), &limited(3), at(20)),
        Err(TaskError::StaleRun { .. })
    ));
}
