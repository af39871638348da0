//! GitHub's webhook payloads through octocrab's models: every fixture of the event families pidevops reads
//! (issues, issue comments, pull requests, reviews, review comments, check suites and runs, workflow runs)
//! deserializes as its family's typed event, and what pidevops's own reading of a payload takes from it agrees with
//! the typed model's fields. octocrab models check suites, check runs and workflow runs' bodies as free JSON, so
//! pidevops reads those fields by name (`reactions::rules`).

use octocrab::models::webhook_events::{WebhookEvent, WebhookEventPayload};
use pidevops::reactions::rules::{decide, Reaction};
use serde_json::{json, Value};

const FAMILIES: [&str; 8] = [
    "issues",
    "issue_comment",
    "pull_request",
    "pull_request_review",
    "pull_request_review_comment",
    "check_suite",
    "check_run",
    "workflow_run",
];

fn fixtures(family: &str) -> Vec<(String, Vec<u8>)> {
    let dir = crate::common::fixtures_dir().join("github").join(family);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

fn is_family(family: &str, payload: &WebhookEventPayload) -> bool {
    matches!(
        (family, payload),
        ("issues", WebhookEventPayload::Issues(_))
            | ("issue_comment", WebhookEventPayload::IssueComment(_))
            | ("pull_request", WebhookEventPayload::PullRequest(_))
            | (
                "pull_request_review",
                WebhookEventPayload::PullRequestReview(_)
            )
            | (
                "pull_request_review_comment",
                WebhookEventPayload::PullRequestReviewComment(_)
            )
            | ("check_suite", WebhookEventPayload::CheckSuite(_))
            | ("check_run", WebhookEventPayload::CheckRun(_))
            | ("workflow_run", WebhookEventPayload::WorkflowRun(_))
    )
}

/// Real payloads octocrab's model does not read: GitHub sends a pinned or unpinned issue without its `state`,
/// which octocrab requires. pidevops takes nothing from those events, and its own reading does not require the field.
const OCTOCRAB_MISFITS: [&str; 2] = ["issues/pinned.payload.json", "issues/unpinned.payload.json"];

#[test]
fn every_fixture_of_the_families_pidevops_reads_deserializes_through_octocrab() {
    let mut seen = 0;
    let mut misfits = Vec::new();
    for family in FAMILIES {
        let files = fixtures(family);
        assert!(!files.is_empty(), "fixtures of {family}");
        for (name, body) in files {
            let event = match WebhookEvent::try_from_header_and_body(family, &body) {
                Ok(event) => event,
                Err(e) => {
                    misfits.push(format!("{family}/{name}"));
                    eprintln!("{family}/{name} does not fit octocrab's model: {e}");
                    continue;
                }
            };
            assert!(
                is_family(family, &event.specific),
                "{family}/{name} is read as another event: {:?}",
                std::mem::discriminant(&event.specific)
            );
            assert!(
                event.repository.is_some(),
                "{family}/{name} names its repository"
            );
            seen += 1;
        }
    }
    assert!(seen >= 60, "{seen} fixtures");
    assert_eq!(misfits, OCTOCRAB_MISFITS, "only the known misfits");
    // pidevops's own reading takes them as what they are: nothing to react to.
    for misfit in OCTOCRAB_MISFITS {
        let body: Value = serde_json::from_slice(
            &std::fs::read(crate::common::fixtures_dir().join("github").join(misfit)).unwrap(),
        )
        .unwrap();
        let action = body["action"].as_str().unwrap();
        assert_eq!(
            decide(&format!("github.issues.{action}"), &body, None),
            Reaction::None
        );
    }
}

/// What pidevops's reading takes from reviews, review comments and closed pull requests is what octocrab's
/// typed model says, fixture by fixture (branch, ids, author, lines, body).
#[test]
fn what_pidevops_reads_of_reviews_and_pull_requests_agrees_with_the_typed_model() {
    for (name, body) in fixtures("pull_request_review_comment") {
        let mut value: Value = serde_json::from_slice(&body).unwrap();
        value["pull_request"]["head"]["ref"] = json!("pidevops/T-7");
        let typed = WebhookEvent::try_from_header_and_body(
            "pull_request_review_comment",
            &serde_json::to_vec(&value).unwrap(),
        )
        .unwrap();
        let WebhookEventPayload::PullRequestReviewComment(typed) = typed.specific else {
            panic!("{name}");
        };
        let event_type = format!(
            "github.pull_request_review_comment.{}",
            value["action"].as_str().unwrap()
        );
        match decide(&event_type, &value, None) {
            Reaction::ReviewComment { comment, .. } => {
                assert_eq!(comment.id, typed.comment.id.0, "{name}");
                assert_eq!(
                    comment.review,
                    typed.comment.pull_request_review_id.map(|r| r.0),
                    "{name}"
                );
                assert_eq!(comment.path, typed.comment.path, "{name}");
                assert_eq!(
                    comment.lines.map(|(_, end)| end),
                    typed.comment.line,
                    "{name}"
                );
                assert_eq!(comment.body, typed.comment.body, "{name}");
                assert_eq!(
                    Some(comment.by.as_str()),
                    typed.comment.user.as_ref().map(|u| u.login.as_str()),
                    "{name}"
                );
            }
            Reaction::None => assert_ne!(
                value["action"], "created",
                "{name}: a created comment is read"
            ),
            other => panic!("{name}: {other:?}"),
        }
    }
    for (name, body) in fixtures("pull_request_review") {
        let mut value: Value = serde_json::from_slice(&body).unwrap();
        value["pull_request"]["head"]["ref"] = json!("pidevops/T-7");
        let typed = WebhookEvent::try_from_header_and_body(
            "pull_request_review",
            &serde_json::to_vec(&value).unwrap(),
        )
        .unwrap();
        let WebhookEventPayload::PullRequestReview(typed) = typed.specific else {
            panic!("{name}");
        };
        let event_type = format!(
            "github.pull_request_review.{}",
            value["action"].as_str().unwrap()
        );
        let login = typed
            .review
            .user
            .as_ref()
            .map(|u| u.login.clone())
            .unwrap_or_default();
        match decide(&event_type, &value, None) {
            Reaction::Reviewed { review, by, .. } => {
                assert_eq!(review, typed.review.id.0, "{name}");
                assert_eq!(by, login, "{name}");
            }
            Reaction::Approved { by, sha, .. } => {
                assert_eq!(by, login, "{name}");
                assert_eq!(Some(sha), typed.review.commit_id.clone(), "{name}");
            }
            Reaction::ReviewDismissed { by, .. } => assert_eq!(by, login, "{name}"),
            Reaction::Ignore { .. } => {}
            other => panic!("{name}: {other:?}"),
        }
    }
    for (name, body) in fixtures("pull_request") {
        let mut value: Value = serde_json::from_slice(&body).unwrap();
        if value["action"] != "closed" {
            continue;
        }
        value["pull_request"]["head"]["ref"] = json!("pidevops/T-7");
        let typed = WebhookEvent::try_from_header_and_body(
            "pull_request",
            &serde_json::to_vec(&value).unwrap(),
        )
        .unwrap();
        let WebhookEventPayload::PullRequest(typed) = typed.specific else {
            panic!("{name}");
        };
        let merged =
            typed.pull_request.merged_at.is_some() || typed.pull_request.merged == Some(true);
        match decide("github.pull_request.closed", &value, None) {
            Reaction::Merged { .. } => assert!(merged, "{name}"),
            Reaction::ClosedUnmerged { .. } => assert!(!merged, "{name}"),
            other => panic!("{name}: {other:?}"),
        }
    }
}

/// The fake GitHub answers what GitHub's API does, as octocrab's models read it: a pull request it opened, then
/// merged (`merged_by` a whole user), and an issue, each deserializes into octocrab's types.
#[tokio::test]
async fn the_fake_githubs_answers_round_trip_through_octocrabs_models() {
    let fake = crate::common::fake_github::FakeGithub::start().await;
    let http = reqwest::Client::new();
    let opened: Value = http
        .post(format!("{}/repos/acme/app/pulls", fake.url))
        .header("authorization", "Bearer test-token")
        .header("user-agent", "pidevops-test")
        .json(&json!({ "title": "Fix it", "head": "pidevops/T-1", "base": "main", "body": "b" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let opened: octocrab::models::pulls::PullRequest =
        serde_json::from_value(opened).expect("an opened pull request octocrab reads");
    fake.merge("acme/app", opened.number, "alice");
    let merged: Value = http
        .get(format!(
            "{}/repos/acme/app/pulls/{}",
            fake.url, opened.number
        ))
        .header("authorization", "Bearer test-token")
        .header("user-agent", "pidevops-test")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let merged: octocrab::models::pulls::PullRequest =
        serde_json::from_value(merged).expect("a merged pull request octocrab reads");
    assert_eq!(merged.merged, Some(true));
    assert_eq!(merged.merged_by.map(|a| a.login), Some("alice".to_owned()));
}
