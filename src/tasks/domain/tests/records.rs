//! Links, specs, closing, and the events' shape: what a task's record keeps and how it is written.

use super::*;
use crate::tasks::{GITHUB_ISSUE, GITHUB_PR, LINEAR_ISSUE};

#[test]
fn links_only_grow_and_a_newer_pull_request_supersedes() {
    let task = task_in(Column::InReview);
    assert_eq!(task.links().get(GITHUB_PR), Some(pr(3)));
    let before = task.links().clone();
    let task = then(
        task,
        Command::Retry {
            cause: RetryCause::ChangesRequested,
            reason: reason("rename it"),
        },
    );
    let task = then(task, Command::Start { run: run(2) });
    let task = then(task, submit(run(2), None));
    assert_eq!(
        task.links(),
        &before,
        "a submission without a PR keeps the old one"
    );
    let task = then(task, run_failed_in_review());
    let task = then(task, Command::Start { run: run(3) });
    let task = then(task, submit(run(3), Some(8)));
    assert_eq!(task.links().get(GITHUB_PR), Some(pr(8)));
    assert_eq!(task.links().get(LINEAR_ISSUE), before.get(LINEAR_ISSUE));

    let other_issue = LinearIssue::new(Uuid::from_u128(1), "ENG-99").expect("valid");
    let conflict = decide(
        Some(&task),
        &Command::AttachLinks {
            links: Links::default().with(LINEAR_ISSUE, &other_issue),
        },
        at(5),
    )
    .expect_err("conflict");
    assert!(
        conflict
            .to_string()
            .starts_with("T-7 is already linked to linear_issue ENG-12"),
        "{conflict}"
    );
    assert_eq!(
        decide(
            Some(&task),
            &Command::AttachLinks {
                links: task.links().clone()
            },
            at(5)
        ),
        Ok(vec![]),
        "links already there are a no-op"
    );
}

fn run_failed_in_review() -> Command {
    Command::Retry {
        cause: RetryCause::ChecksFailed,
        reason: reason("CI red"),
    }
}

#[test]
fn the_spec_changes_only_before_work_and_only_when_different() {
    let task = task_in(Column::Todo);
    let same = Command::UpdateSpec {
        spec: task.spec().clone(),
        ticket_version: None,
    };
    assert_eq!(decide(Some(&task), &same, at(1)), Ok(vec![]));
    // After a failed attempt the task is back in todo, and a human may sharpen the spec for the next run.
    let task = then(task, Command::Start { run: run(1) });
    let task = then(task, run_failed(run(1)));
    let spec = Spec::new("Fix it properly", "", "").expect("valid");
    let task = then(
        task,
        Command::UpdateSpec {
            spec: spec.clone(),
            ticket_version: None,
        },
    );
    assert_eq!(task.spec(), &spec);
}

#[test]
fn a_ticket_edit_older_than_the_spec_on_record_changes_nothing() {
    let version = |second: i64| Some(at(second));
    let edit = |title: &str, second: i64| Command::UpdateSpec {
        spec: Spec::new(title, "", "").expect("valid"),
        ticket_version: version(second),
    };
    let task = task_in(Column::Todo);
    assert_eq!(task.ticket_version(), None);
    // The newer edit arrives first, then the older one (a retried delivery, a slow poll).
    let task = then(task, edit("Second wording", 20));
    assert_eq!(task.ticket_version(), version(20));
    assert_eq!(
        decide(Some(&task), &edit("First wording", 10), at(30)),
        Ok(vec![])
    );
    assert_eq!(
        decide(Some(&task), &edit("Other, same time", 20), at(30)),
        Ok(vec![])
    );
    let task = then(task, edit("Third wording", 25));
    assert_eq!(task.spec().title(), "Third wording");
    // A person's edit (no ticket version) applies and keeps the ticket's version.
    let task = then(
        task,
        Command::UpdateSpec {
            spec: Spec::new("By hand", "", "").expect("valid"),
            ticket_version: None,
        },
    );
    assert_eq!(task.spec().title(), "By hand");
    assert_eq!(task.ticket_version(), version(25));
}

#[test]
fn closing_ends_the_run_and_the_needs_human_episode() {
    let task = then(
        task_in(Column::InProgress),
        Command::FlagNeedsHuman {
            reason: reason("stuck"),
        },
    );
    let task = then(
        task,
        Command::Cancel {
            reason: reason("wontfix"),
        },
    );
    assert_eq!(task.column(), Column::Cancelled);
    assert_eq!(task.run(), None);
    assert_eq!(task.needs_human(), None);
    assert_eq!(task.closed_reason().map(Reason::as_str), Some("wontfix"));
    assert_eq!(task.attempts(), 1, "attempts are history, not undone");
}

#[test]
fn evolve_refuses_events_that_cannot_follow() {
    let created = decide(None, &new_task(ApprovalPolicy::Manual, 3), at(0)).expect("created");
    let triage = replay(&created).expect("applies").expect("a task");
    let refused = |state: Option<Task>, event: TaskEvent| {
        evolve(state, &event).expect_err("refused").to_string()
    };
    assert_eq!(
        refused(
            None,
            TaskEvent::Approved {
                at: at(1),
                automatic: false
            }
        ),
        "cannot apply task.approved to an empty stream: the stream has no task.created"
    );
    assert_eq!(
        refused(Some(triage.clone()), created[0].clone()),
        "cannot apply task.created to T-7: the task already exists"
    );
    assert_eq!(
        refused(
            Some(triage.clone()),
            TaskEvent::Started {
                at: at(1),
                run: run(1),
                attempt: 1,
                purpose: Default::default(),
            }
        ),
        "cannot apply task.started to T-7: it is triage, not todo"
    );
    let todo = evolve(
        Some(triage.clone()),
        &TaskEvent::Approved {
            at: at(1),
            automatic: false,
        },
    )
    .expect("applies");
    assert_eq!(
        refused(
            Some(todo.clone()),
            TaskEvent::Started {
                at: at(1),
                run: run(1),
                attempt: 2,
                purpose: Default::default(),
            }
        ),
        "cannot apply task.started to T-7: attempt 2 cannot follow 0 of 3"
    );
    assert_eq!(
        refused(
            Some(todo.clone()),
            TaskEvent::NeedsHumanCleared { at: at(1), max_attempts: MaxAttempts::DEFAULT }
        ),
        "cannot apply task.needs_human_cleared to T-7: it is not flagged, or the budget would shrink"
    );
    let flagged = evolve(
        Some(todo),
        &TaskEvent::FlaggedNeedsHuman {
            at: at(2),
            reason: reason("x"),
            question: false,
        },
    )
    .expect("applies");
    assert_eq!(
        refused(
            Some(flagged),
            TaskEvent::FlaggedNeedsHuman {
                at: at(3),
                reason: reason("y"),
                question: false,
            }
        ),
        "cannot apply task.flagged_needs_human to T-7: it is already flagged"
    );
}

#[test]
fn events_serialize_tagged_and_their_kind_matches_the_tag() {
    let mut task = None;
    let mut all = Vec::new();
    let script = [
        new_task(ApprovalPolicy::Manual, 1),
        Command::AttachLinks {
            links: Links::default().with(GITHUB_ISSUE, &pr(2)),
        },
        Command::Reprioritize {
            priority: Priority::Urgent,
        },
        Command::UpdateSpec {
            spec: Spec::new("Do it", "", "").expect("valid"),
            ticket_version: None,
        },
        Command::AttachFollowUp {
            text: FollowUpText::new("and this").expect("valid"),
            origin: None,
            send_back: true,
        },
        Command::Approve,
        Command::Start { run: run(1) },
        submit(run(1), Some(3)),
        run_failed_in_review(),
        Command::ClearNeedsHuman,
        Command::Start { run: run(2) },
        submit(run(2), None),
        Command::Complete,
        Command::Archive,
    ];
    for command in &script {
        let (next, events) = step(task, command, 1);
        task = Some(next);
        all.extend(events);
    }
    let reject = decide(
        Some(&task_in(Column::Triage)),
        &Command::Reject {
            reason: reason("no"),
        },
        at(1),
    )
    .expect("rejected");
    let cancel = decide(
        Some(&task_in(Column::Todo)),
        &Command::Cancel {
            reason: reason("no"),
        },
        at(1),
    )
    .expect("cancelled");
    all.extend(reject);
    all.extend(cancel);
    let mut kinds: Vec<_> = all.iter().map(TaskEvent::kind).collect();
    kinds.sort_unstable();
    kinds.dedup();
    assert_eq!(kinds.len(), 16, "every event variant is covered: {kinds:?}");
    for event in &all {
        let json = serde_json::to_value(event).expect("serializes");
        assert_eq!(
            format!("task.{}", json["type"].as_str().unwrap_or("?")),
            event.kind()
        );
        assert_eq!(
            &serde_json::from_value::<TaskEvent>(json).expect("round trips"),
            event
        );
    }
    let approved = serde_json::to_value(TaskEvent::Approved {
        at: at(0),
        automatic: true,
    })
    .expect("json");
    assert_eq!(
        approved,
        serde_json::json!({"type": "approved", "at": "2025-06-15T15:06:40Z", "automatic": true})
    );
    let retried = all
        .iter()
        .find(|e| {
            matches!(
                e,
                TaskEvent::Retried {
                    cause: RetryCause::ChecksFailed,
                    ..
                }
            )
        })
        .expect("a CI retry in the script");
    let retried = serde_json::to_value(retried).expect("json");
    assert_eq!(
        retried["cause"],
        serde_json::json!({"kind": "checks_failed"})
    );
}
