use std::time::Duration;

use chrono::{TimeZone, Utc};

use super::*;
// The providers' policies, tested here beside the runner's rules they rely on.
use crate::providers::github::effects::GithubAction;
use crate::providers::linear::effects::LinearAction;
use crate::providers::policy;
use crate::providers::telegram::effects::TelegramAction;

// By topic: what reaches GitHub (pull requests, merges, comments), and what reaches people in Telegram and
// Linear (messages, questions, plans).
mod messages;
mod pull_requests;

fn at(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_750_000_000 + seconds, 0)
        .single()
        .expect("a valid time")
}

fn requested() -> EffectEvent<GithubAction> {
    EffectEvent::Requested {
        at: at(0),
        key: "github:pr:T-1".into(),
        task: Some("T-1".parse().unwrap()),
        action: GithubAction::OpenPullRequest {
            repo: "acme/app".parse().unwrap(),
            head: "pidevops/T-1".parse().unwrap(),
            base: "main".into(),
            title: "T-1: Fix it".into(),
            body: "## Task\nFix it\n".into(),
        },
        cause_position: 42,
    }
}

fn started(attempt: u32) -> EffectEvent<GithubAction> {
    EffectEvent::Started {
        at: at(1),
        key: "github:pr:T-1".into(),
        attempt,
    }
}

fn failed(attempt: u32, retry_at: Option<DateTime<Utc>>) -> EffectEvent<GithubAction> {
    EffectEvent::Failed {
        at: at(2),
        key: "github:pr:T-1".into(),
        attempt,
        error: "GitHub answered 502".into(),
        retry_at,
    }
}

/// The task after `command`, and the events it recorded.
fn apply(
    task: Option<crate::tasks::Task>,
    command: crate::tasks::Command,
) -> (crate::tasks::Task, Vec<crate::tasks::TaskEvent>) {
    let events = crate::tasks::decide(task.as_ref(), &command, at(0)).unwrap();
    let mut task = task;
    for event in &events {
        task = Some(crate::tasks::evolve(task, event).unwrap());
    }
    (task.unwrap(), events)
}

/// Task `id` on `acme/app` as intake makes one (normal priority, auto approval, three attempts), then started by
/// run `run` (`RunId(Uuid::from_u128(run))`): the task and the events of its start.
fn started_task(
    id: &str,
    spec: crate::tasks::Spec,
    links: crate::tasks::Links,
    run: u128,
) -> (crate::tasks::Task, Vec<crate::tasks::TaskEvent>) {
    use crate::tasks::{ApprovalPolicy, Command, MaxAttempts, NewTask, Priority, RunId};
    let new = NewTask {
        id: id.parse().unwrap(),
        repo: "acme/app".parse().unwrap(),
        spec,
        priority: Priority::Normal,
        links,
        approval: ApprovalPolicy::Auto,
        max_attempts: MaxAttempts::new(3).unwrap(),
        ticket_version: None,
        agent: None,
        family: Default::default(),
    };
    let (task, _) = apply(None, Command::Create(Box::new(new)));
    let run = RunId(uuid::Uuid::from_u128(run));
    apply(Some(task), Command::Start { run })
}

#[test]
fn an_effects_state_follows_its_stream() {
    assert_eq!(state::<GithubAction>(&[]), State::Unknown);
    assert_eq!(
        state(&[requested()]),
        State::Pending {
            attempts: 0,
            due: None
        }
    );
    assert_eq!(
        state(&[requested(), started(1)]),
        State::InDoubt { attempt: 1 },
        "started without an outcome: cut off mid-call"
    );
    assert_eq!(
        state(&[requested(), started(1), failed(1, Some(at(60)))]),
        State::Pending {
            attempts: 1,
            due: Some(at(60))
        }
    );
    assert_eq!(
        state(&[requested(), started(1), failed(1, None)]),
        State::Failed
    );
    let succeeded = EffectEvent::Succeeded {
        at: at(3),
        key: "github:pr:T-1".into(),
        attempt: 2,
        produced: Produced::PullRequest {
            repo: "acme/app".parse().unwrap(),
            number: 7,
            url: "https://github.com/acme/app/pull/7".into(),
            opened: true,
        },
    };
    assert_eq!(
        state(&[
            requested(),
            started(1),
            failed(1, Some(at(60))),
            started(2),
            succeeded.clone()
        ]),
        State::Succeeded
    );
    let withheld = EffectEvent::Withheld {
        at: at(4),
        key: "github:pr:T-1".into(),
        reason: "effect cap: 20 outbound calls for T-1 in the last hour".into(),
    };
    assert_eq!(state(&[requested(), withheld.clone()]), State::Withheld);
    // Held back after a transient failure: settled, its retry time no longer matters.
    assert_eq!(
        state(&[
            requested(),
            started(1),
            failed(1, Some(at(60))),
            withheld.clone()
        ]),
        State::Withheld
    );
    // Every event round-trips through the log's JSON, with the action's fields beside the request's.
    for event in [
        requested(),
        started(1),
        failed(1, Some(at(60))),
        succeeded,
        withheld,
    ] {
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["type"], event.kind().trim_start_matches("effect."));
        assert_eq!(
            serde_json::from_value::<EffectEvent<GithubAction>>(json.clone()).unwrap(),
            event
        );
        // Read as any provider's (the cap, the pages): the same value back.
        let stored = serde_json::from_value::<EffectEvent>(json.clone()).unwrap();
        assert_eq!(serde_json::to_value(&stored).unwrap(), json);
    }
    // The bytes the log holds, as they were when every provider's actions were one enum.
    assert_eq!(
        serde_json::to_string(&requested()).unwrap(),
        r###"{"type":"requested","at":"2025-06-15T15:06:40Z","key":"github:pr:T-1","task":"T-1","action":"github_open_pull_request","repo":"acme/app","head":"pidevops/T-1","base":"main","title":"T-1: Fix it","body":"## Task\nFix it\n","cause_position":42}"###
    );
    let EffectEvent::Requested { action, .. } =
        serde_json::from_value::<EffectEvent>(serde_json::to_value(requested()).unwrap()).unwrap()
    else {
        panic!("a request reads as one");
    };
    assert_eq!(action.name(), "github_open_pull_request");
    let json = serde_json::to_value(requested()).unwrap();
    assert_eq!(json["action"], "github_open_pull_request");
    assert_eq!(json["head"], "pidevops/T-1");
}

#[test]
fn retries_back_off_honour_the_provider_and_stop() {
    let now = at(0);
    assert_eq!(retry_at(now, 1, None), Some(at(2)));
    assert_eq!(retry_at(now, 2, None), Some(at(4)));
    assert_eq!(retry_at(now, 5, None), Some(at(32)));
    assert_eq!(
        retry_at(now, 3, Some(Duration::from_secs(90))),
        Some(at(90)),
        "Retry-After wins"
    );
    assert_eq!(retry_at(now, MAX_ATTEMPTS, None), None, "no attempts left");
    assert!(retry_at(now, MAX_ATTEMPTS - 1, None).unwrap() <= at(600));
}
