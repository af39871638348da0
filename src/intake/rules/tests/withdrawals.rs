//! Withdrawals and versions seen: every GitHub action and every kind of Linear state, with and without the intake
//! label, through `decide` as the follower calls it.

use std::collections::BTreeSet;

use super::*;
use chrono::TimeZone;
use serde_json::json;

fn stored(event_type: &str, body: Value) -> StoredEvent {
    let at = chrono::Utc
        .timestamp_opt(1_700_000_000, 0)
        .single()
        .unwrap();
    StoredEvent {
        position: 1,
        id: uuid::Uuid::now_v7(),
        source: event_type.split('.').next().unwrap().to_owned(),
        event_type: event_type.to_owned(),
        dedup_key: "d-1".to_owned(),
        stream: None,
        stream_version: None,
        occurred_at: at,
        recorded_at: at,
        action: None,
        repository: None,
        number: None,
        reference: None,
        content_type: "application/json".to_owned(),
        body: serde_json::to_vec(&body).unwrap(),
        meta: Default::default(),
    }
}

fn time(text: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&chrono::Utc)
}

fn allowed() -> Rig {
    config("[intake]\nallow_repos = [\"acme/*\"]\ndefault_repo = \"acme/billing\"").unwrap()
}

fn github(action: &str, labels: &[&str], removed: Option<&str>) -> StoredEvent {
    let mut body = github_payload(action, "acme/app", 12, labels, "MEMBER");
    if let Some(label) = removed {
        // What the GitHub poller writes: the label by its name only.
        body["label"] = json!({ "name": label });
    }
    stored(&format!("github.issues.{action}"), body)
}

fn withdrawal(
    decision: Decision,
) -> (
    String,
    String,
    Withdrawal,
    Option<chrono::DateTime<chrono::Utc>>,
) {
    match decision {
        Decision::Withdraw {
            key,
            reason,
            why,
            ticket_version,
        } => (key, reason, why, ticket_version),
        other => panic!("not a withdrawal: {other:?}"),
    }
}

#[test]
fn github_issues_closed_deleted_or_unlabeled_are_withdrawals_by_the_issues_clock() {
    let config = allowed();
    let version = Some(time("2026-11-29T10:15:03Z"));
    for (action, labels, removed, why, says) in [
        (
            "closed",
            &["pidevops"][..],
            None,
            Withdrawal::Closed,
            "was closed on GitHub",
        ),
        // Closed without the label (taken off before): still the same ticket's withdrawal.
        (
            "closed",
            &[][..],
            None,
            Withdrawal::Closed,
            "was closed on GitHub",
        ),
        (
            "deleted",
            &["pidevops"][..],
            None,
            Withdrawal::Closed,
            "was deleted on GitHub",
        ),
        (
            "unlabeled",
            &["bug"][..],
            Some("pidevops"),
            Withdrawal::Unasked,
            "no longer carries the \"pidevops\" label",
        ),
        // Another label came off an issue that lost ours before: not asked either.
        (
            "unlabeled",
            &[][..],
            Some("bug"),
            Withdrawal::Unasked,
            "no longer carries",
        ),
    ] {
        let (key, reason, got, ticket_version) =
            withdrawal(decide(&github(action, labels, removed), &config));
        assert_eq!(key, "github:acme/app#12", "{action}");
        assert_eq!(got, why, "{action}");
        assert!(
            reason.starts_with("acme/app#12 ") && reason.contains(says),
            "{reason}"
        );
        assert_eq!(ticket_version, version, "{action}");
    }
    // Another label came off; ours is still there: nothing withdrawn.
    assert_eq!(
        decide(&github("unlabeled", &["pidevops"], Some("bug")), &config),
        Decision::NotIntake
    );
    // A payload whose repository or number names no ticket: nothing.
    let mut nameless = github("closed", &["pidevops"], None);
    let mut body: Value = serde_json::from_slice(&nameless.body).unwrap();
    body["repository"]["full_name"] = json!("not a repository");
    nameless.body = serde_json::to_vec(&body).unwrap();
    assert_eq!(decide(&nameless, &config), Decision::NotIntake);
    let mut numberless = github("closed", &["pidevops"], None);
    let mut body: Value = serde_json::from_slice(&numberless.body).unwrap();
    body["issue"]["number"] = json!(0);
    numberless.body = serde_json::to_vec(&body).unwrap();
    assert_eq!(decide(&numberless, &config), Decision::NotIntake);
    // The other actions are not withdrawals (an edit, an assignment, a transfer).
    for action in ["edited", "assigned", "transferred", "locked"] {
        assert_eq!(
            decide(&github(action, &["pidevops"], None), &config),
            Decision::NotIntake,
            "{action}"
        );
    }
    // A task made from an issue carries the issue's version.
    let (_, draft) = created(decide(
        &github("labeled", &["pidevops"], Some("pidevops")),
        &config,
    ));
    assert_eq!(draft.ticket_version, version);
}

const ISSUE: &str = "9c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f";

fn linear(state: Option<(&str, &str)>, labels: &[&str], updated_at: Option<&str>) -> StoredEvent {
    let mut data = json!({
        "id": ISSUE, "identifier": "ENG-412", "title": "Retry failed Stripe webhooks",
        "description": "repo: acme/billing", "priority": 2,
        "labels": labels.iter().map(|l| json!({ "name": l })).collect::<Vec<_>>(),
        "team": { "key": "ENG" },
    });
    if let Some((name, kind)) = state {
        data["state"] = json!({ "name": name, "type": kind });
    }
    if let Some(at) = updated_at {
        data["updatedAt"] = json!(at);
    }
    stored(
        "linear.Issue.update",
        json!({ "action": "update", "type": "Issue", "data": data }),
    )
}

/// What a Linear issue in each kind of state is, with and without the intake label: a candidate in the ready
/// state, a version seen where work goes on (pidevops's own states, by name or by type), a withdrawal anywhere else
/// or without the label, a cancellation in a `canceled` state whatever its name or labels.
#[test]
fn every_kind_of_linear_state_with_and_without_the_label() {
    let config = allowed();
    let at = "2026-11-29T10:20:00.000Z";
    let version = time(at);
    #[derive(Debug, PartialEq)]
    enum Is {
        Candidate,
        Seen,
        Unasked,
        Cancelled,
    }
    let states = [
        (("Ready for Pi-Dev", "unstarted"), Is::Candidate),
        (("Pi-Dev: In Progress", "started"), Is::Seen),
        // Names are pidevops's own whatever their type, matched as Linear matches them.
        (("pi-dev: in progress ", "unstarted"), Is::Seen),
        (("In Review", "started"), Is::Seen),
        (("Done", "completed"), Is::Seen),
        (("Pi-Dev: Blocked", "started"), Is::Seen),
        // A team without pidevops's names: it falls back to the first state of these types.
        (("Doing", "started"), Is::Seen),
        (("Shipped", "completed"), Is::Seen),
        (("Backlog", "backlog"), Is::Unasked),
        (("Todo", "unstarted"), Is::Unasked),
        (("Triage", "triage"), Is::Unasked),
        (("Canceled", "canceled"), Is::Cancelled),
        (("Duplicate", "canceled"), Is::Cancelled),
        // A cancelled state named like one of pidevops's: still a cancellation.
        (("Done", "canceled"), Is::Cancelled),
    ];
    for ((name, kind), is) in states {
        for labelled in [true, false] {
            let labels: &[&str] = if labelled {
                &["pi-dev:autonomous", "bug"]
            } else {
                &["bug"]
            };
            let decision = decide(&linear(Some((name, kind)), labels, Some(at)), &config);
            let expected = match (&is, labelled) {
                (Is::Cancelled, _) => Is::Cancelled,
                (_, false) => Is::Unasked,
                (is, true) => match is {
                    Is::Candidate => Is::Candidate,
                    Is::Seen => Is::Seen,
                    _ => Is::Unasked,
                },
            };
            let got = match &decision {
                Decision::Create { key, draft } => {
                    assert_eq!(key, &format!("linear:{ISSUE}"));
                    assert_eq!(draft.ticket_version, Some(version));
                    Is::Candidate
                }
                Decision::Seen {
                    key,
                    ticket_version,
                } => {
                    assert_eq!(key, &format!("linear:{ISSUE}"));
                    assert_eq!(*ticket_version, version);
                    Is::Seen
                }
                Decision::Withdraw {
                    key,
                    reason,
                    why,
                    ticket_version,
                } => {
                    assert_eq!(key, &format!("linear:{ISSUE}"));
                    assert_eq!(*ticket_version, Some(version));
                    assert!(reason.starts_with("ENG-412 "), "{reason}");
                    match why {
                        Withdrawal::Closed => {
                            assert!(reason.contains("was cancelled in Linear"), "{reason}");
                            Is::Cancelled
                        }
                        Withdrawal::Unasked => {
                            assert!(
                                reason
                                    .contains("no longer carries the \"pi-dev:autonomous\" label")
                                    || reason.contains(&format!(
                                        "was moved to {name:?}, out of \"Ready for Pi-Dev\""
                                    )),
                                "{reason}"
                            );
                            Is::Unasked
                        }
                    }
                }
                other => panic!("{name} ({kind}), labelled {labelled}: {other:?}"),
            };
            assert_eq!(got, expected, "{name} ({kind}), labelled {labelled}");
        }
    }
}

#[test]
fn a_linear_payload_that_cannot_be_placed_neither_creates_nor_withdraws() {
    let config = allowed();
    let labels = ["pi-dev:autonomous"];
    // No state: where the issue is, it does not say.
    assert_eq!(
        decide(
            &linear(None, &labels, Some("2026-11-29T10:20:00Z")),
            &config
        ),
        Decision::NotIntake
    );
    // At work without a clock: nothing to note.
    assert_eq!(
        decide(
            &linear(Some(("In Review", "started")), &labels, None),
            &config
        ),
        Decision::NotIntake
    );
    // A withdrawal without a clock still withdraws (it cannot be ordered, so it applies).
    let (_, _, why, version) = withdrawal(decide(
        &linear(Some(("Backlog", "backlog")), &labels, None),
        &config,
    ));
    assert_eq!((why, version), (Withdrawal::Unasked, None));
    // No id: no ticket to name.
    let mut anonymous = linear(Some(("Backlog", "backlog")), &labels, None);
    let mut body: Value = serde_json::from_slice(&anonymous.body).unwrap();
    body["data"].as_object_mut().unwrap().remove("id");
    anonymous.body = serde_json::to_vec(&body).unwrap();
    assert_eq!(decide(&anonymous, &config), Decision::NotIntake);
}

#[test]
fn a_deleted_linear_issue_is_closed_by_its_update_time_else_its_archive_time() {
    let config = allowed();
    let removed = |data: Value| {
        stored(
            "linear.Issue.remove",
            json!({ "action": "remove", "type": "Issue", "data": data }),
        )
    };
    let (key, reason, why, version) = withdrawal(decide(
        &removed(
            json!({ "id": ISSUE, "identifier": "ENG-412", "archivedAt": "2026-11-29T12:00:00.000Z" }),
        ),
        &config,
    ));
    assert_eq!(key, format!("linear:{ISSUE}"));
    assert_eq!(reason, "ENG-412 was deleted in Linear");
    assert_eq!(why, Withdrawal::Closed);
    assert_eq!(version, Some(time("2026-11-29T12:00:00Z")));
    let (_, _, _, version) = withdrawal(decide(
        &removed(
            json!({ "id": ISSUE, "updatedAt": "2026-11-29T12:00:01.000Z", "archivedAt": "2026-11-29T12:00:00.000Z" }),
        ),
        &config,
    ));
    assert_eq!(version, Some(time("2026-11-29T12:00:01Z")));
    assert_eq!(decide(&removed(json!({})), &config), Decision::NotIntake);
}

#[test]
fn only_a_closed_ticket_withdraws_a_delegated_task() {
    assert!(Withdrawal::Closed.withdraws_delegated());
    assert!(!Withdrawal::Unasked.withdraws_delegated());
}

#[test]
fn the_states_pidevops_moves_issues_to_come_from_linear_states() {
    let config = config(
        "[linear.states]\nin_progress = \"Building\"\nin_review = [\"QA\", \"Review\"]\nblocked = \"Waiting\"",
    )
    .unwrap();
    let expected: BTreeSet<String> = ["building", "qa", "review", "done", "waiting"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(config.linear.work_states, expected);
    // An own state of a type before work ("Waiting", unstarted) is not a withdrawal.
    assert!(matches!(
        decide(
            &linear(
                Some(("Waiting", "unstarted")),
                &["pi-dev:autonomous"],
                Some("2026-11-29T10:20:00Z")
            ),
            &config
        ),
        Decision::Seen { .. }
    ));
    // The defaults name the states `effects:linear` moves to by default.
    assert!([
        "pi-dev: in progress",
        "in progress",
        "in review",
        "done",
        "pi-dev: blocked",
        "blocked"
    ]
    .iter()
    .all(|s| Rig::default().linear.work_states.contains(*s)));
}
