//! GitHub's webhook payloads through octocrab's models: every fixture of the event families pidevops reads
//! (issues, issue comments, pull requests, reviews, review comments, check suites and runs, workflow runs)
//! deserializes as its family's typed event, and what pidevops's own reading of a payload takes from it agrees with
//! the typed model's fields. octocrab models check suites, check runs and workflow runs' bodies as free JSON, so
//! pidevops reads those fields by name (`providers::github::reactions`).

use octocrab::models::webhook_events::{WebhookEvent, WebhookEventPayload};
use pidevops::providers::github::reactions::decide;
use pidevops::reactions::Reaction;
use serde_json::{json, Value};

use crate::providers::github::fake::{Failure, FakeGithub};

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

/// `method` `path` on the fake (with `body`), its answer read as `T` the way octocrab reads it, and its status.
async fn answer<T: serde::de::DeserializeOwned>(
    fake: &FakeGithub,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, T) {
    let mut request = reqwest::Client::new()
        .request(method.clone(), format!("{}{path}", fake.url))
        .header("authorization", "Bearer test-token")
        .header("user-agent", "pidevops-test");
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let json: Value = response.json().await.unwrap();
    let typed = serde_path_to_error::deserialize(&json).unwrap_or_else(|e| {
        panic!(
            "{method} {path} answers what octocrab's {} does not read: {e}\n{json:#}",
            std::any::type_name::<T>()
        )
    });
    (status, typed)
}

/// The fake GitHub answers what GitHub's API does, as octocrab's models read it: every endpoint pidevops calls
/// (pull requests opened, listed, read, merged; the repository's merge settings; issues; comments listed and
/// posted; reactions; webhooks listed, created and updated; a commit's check suites; the token's account)
/// deserializes into octocrab's type for it.
#[tokio::test]
async fn the_fake_githubs_answers_round_trip_through_octocrabs_models() {
    use octocrab::models::{checks, hooks, issues, pulls, reactions, Author, Repository};
    use reqwest::Method;
    let fake = FakeGithub::start().await;

    let (status, opened) = answer::<pulls::PullRequest>(
        &fake,
        Method::POST,
        "/repos/acme/app/pulls",
        Some(json!({ "title": "Fix it", "head": "pidevops/T-1", "base": "main", "body": "b" })),
    )
    .await;
    assert_eq!((status, opened.number), (201, 1));
    let (_, listed) = answer::<Vec<pulls::PullRequest>>(
        &fake,
        Method::GET,
        "/repos/acme/app/pulls?state=open&head=acme:pidevops/T-1&per_page=1",
        None,
    )
    .await;
    assert_eq!(listed.len(), 1);
    let sha = "a".repeat(40);
    fake.set_head("acme/app", 1, &sha);
    let (_, open) =
        answer::<pulls::PullRequest>(&fake, Method::GET, "/repos/acme/app/pulls/1", None).await;
    assert_eq!(open.state, Some(octocrab::models::IssueState::Open));
    assert_eq!(open.head.sha, sha);
    let (_, repository) = answer::<Repository>(&fake, Method::GET, "/repos/acme/app", None).await;
    assert_eq!(repository.allow_squash_merge, Some(true));
    let (_, merge) = answer::<pulls::Merge>(
        &fake,
        Method::PUT,
        "/repos/acme/app/pulls/1/merge",
        Some(json!({ "sha": sha, "merge_method": "squash" })),
    )
    .await;
    assert!(merge.merged && merge.sha.is_some());
    let (_, merged) =
        answer::<pulls::PullRequest>(&fake, Method::GET, "/repos/acme/app/pulls/1", None).await;
    assert_eq!(merged.merged, Some(true));
    assert_eq!(merged.merge_commit_sha, merge.sha);
    assert_eq!(
        merged.merged_by.map(|a| a.login),
        Some(crate::providers::github::fake::merge::MERGER.to_owned())
    );
    // One merged by a person on GitHub.
    answer::<pulls::PullRequest>(
        &fake,
        Method::POST,
        "/repos/acme/app/pulls",
        Some(json!({ "title": "Two", "head": "pidevops/T-2", "base": "main", "body": "b" })),
    )
    .await;
    fake.merge("acme/app", 2, "alice");
    let (_, by_alice) =
        answer::<pulls::PullRequest>(&fake, Method::GET, "/repos/acme/app/pulls/2", None).await;
    assert_eq!(
        by_alice.merged_by.map(|a| a.login),
        Some("alice".to_owned())
    );

    for state in ["open", "closed"] {
        fake.set_issue("acme/app", 12, state, &["pidevops"], "2026-11-29T10:05:00Z");
        let (_, issue) =
            answer::<issues::Issue>(&fake, Method::GET, "/repos/acme/app/issues/12", None).await;
        assert_eq!(issue.number, 12);
        assert_eq!(issue.labels[0].name, "pidevops");
        assert_eq!(issue.closed_by.is_some(), state == "closed");
    }

    let (status, posted) = answer::<issues::Comment>(
        &fake,
        Method::POST,
        "/repos/acme/app/issues/12/comments",
        Some(json!({ "body": "On it." })),
    )
    .await;
    assert_eq!((status, posted.body.as_deref()), (201, Some("On it.")));
    let (_, comments) = answer::<Vec<issues::Comment>>(
        &fake,
        Method::GET,
        "/repos/acme/app/issues/12/comments?since=2026-01-01T00:00:00Z&per_page=100",
        None,
    )
    .await;
    assert_eq!(comments, vec![posted.clone()]);
    let reactions_path = format!("/repos/acme/app/issues/comments/{}/reactions", posted.id);
    for expected in [201, 200] {
        let (status, reaction) = answer::<reactions::Reaction>(
            &fake,
            Method::POST,
            &reactions_path,
            Some(json!({ "content": "eyes" })),
        )
        .await;
        assert_eq!(status, expected);
        assert_eq!(reaction.content, reactions::ReactionContent::Eyes);
    }

    fake.add_hook("acme/app", "https://elsewhere.example/hook");
    let (status, created) = answer::<hooks::Hook>(
        &fake,
        Method::POST,
        "/repos/acme/app/hooks",
        Some(json!({
            "name": "web", "active": true, "events": ["issues", "pull_request"],
            "config": { "url": "https://pidevops.example/webhooks/github", "content_type": "json",
                        "insecure_ssl": "0", "secret": "s3cret" },
        })),
    )
    .await;
    assert_eq!(status, 201);
    assert_eq!(created.config.secret.as_deref(), Some("********"));
    let (_, updated) = answer::<hooks::Hook>(
        &fake,
        Method::PATCH,
        &format!("/repos/acme/app/hooks/{}", created.id),
        Some(json!({ "active": false })),
    )
    .await;
    assert!(!updated.active);
    let (_, listed) = answer::<Vec<hooks::Hook>>(
        &fake,
        Method::GET,
        "/repos/acme/app/hooks?per_page=100",
        None,
    )
    .await;
    assert_eq!(listed.len(), 2);

    fake.add_check_suite("acme/app", &sha, "pidevops/T-1", 77, "failure");
    let (_, suites) = answer::<checks::ListCheckSuites>(
        &fake,
        Method::GET,
        &format!("/repos/acme/app/commits/{sha}/check-suites"),
        None,
    )
    .await;
    assert_eq!(suites.total_count, 1);
    assert_eq!(
        suites.check_suites[0].conclusion.as_deref(),
        Some("failure")
    );
    assert_eq!(suites.check_suites[0].head_sha, sha);

    answer::<Author>(&fake, Method::GET, "/user", None).await;

    fake.set_branch("acme/app", "pidevops/T-1", &sha);
    let (status, branch) = answer::<octocrab::models::repos::Ref>(
        &fake,
        Method::GET,
        "/repos/acme/app/git/ref/heads/pidevops/T-1",
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(branch.ref_field, "refs/heads/pidevops/T-1");
    assert!(
        matches!(&branch.object, octocrab::models::repos::Object::Commit { sha: at, .. } if *at == sha),
        "{branch:?}"
    );
    let deleted = reqwest::Client::new()
        .delete(format!(
            "{}/repos/acme/app/git/refs/heads/pidevops/T-1",
            fake.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    let (status, gone) = answer::<Value>(
        &fake,
        Method::DELETE,
        "/repos/acme/app/git/refs/heads/pidevops/T-1",
        None,
    )
    .await;
    assert_eq!(
        (status, gone["message"].as_str()),
        (422, Some("Reference does not exist"))
    );
    let (status, _) = answer::<Value>(
        &fake,
        Method::GET,
        "/repos/acme/app/git/ref/heads/pidevops/T-1",
        None,
    )
    .await;
    assert_eq!(status, 404);
}

/// pidevops's GitHub client against the fake: every call reads its answer through octocrab's model, and the
/// JSON kept beside it is GitHub's answer as it came.
#[tokio::test]
async fn the_client_reads_every_answer_of_the_fake_through_octocrabs_models() {
    use pidevops::effects::Produced;
    use pidevops::providers::github::GithubClient;
    use pidevops::tasks::{BranchName, MergeMethod, RepoName};
    let fake = FakeGithub::start().await;
    let client = GithubClient::new(&fake.url, &"test-token".to_owned().into()).unwrap();
    let repo: RepoName = "acme/app".parse().unwrap();
    let head = BranchName::try_from("pidevops/T-1".to_owned()).unwrap();

    assert!(!client.whoami().await.unwrap().is_empty());
    let Produced::PullRequest { number, opened, .. } = client
        .open_pull_request(&repo, &head, "main", "T-1: fix", "body")
        .await
        .unwrap()
    else {
        panic!("not a pull request");
    };
    assert!(opened);
    let sha = "b".repeat(40);
    fake.set_head("acme/app", number, &sha);
    let pull = client.pull(&repo, number).await.unwrap();
    assert_eq!(pull.model.head.sha, sha);
    assert_eq!(pull.json["head"]["sha"], json!(sha), "the JSON as it came");

    fake.add_check_suite("acme/app", &sha, "pidevops/T-1", 77, "failure");
    let suites = client.check_suites(&repo, &sha).await.unwrap();
    assert_eq!(suites.len(), 1);
    assert_eq!(suites[0].model.conclusion.as_deref(), Some("failure"));
    // What octocrab keeps private (the app) is in the JSON, for the event the poller appends.
    assert_eq!(suites[0].json["app"]["slug"], "github-actions");

    fake.set_issue("acme/app", 12, "closed", &[], "2026-11-29T10:05:00Z");
    let issue = client.issue(&repo, 12).await.unwrap();
    assert_eq!(issue.model.state, octocrab::models::IssueState::Closed);
    assert_eq!(issue.json["number"], 12);

    let since = chrono::Utc::now() - chrono::Duration::hours(1);
    let Produced::Comment { posted, .. } = client
        .comment(&repo, 12, "On it.\n<!-- m -->", "<!-- m -->", since)
        .await
        .unwrap()
    else {
        panic!("not a comment");
    };
    assert!(posted);
    assert_eq!(
        client.react_to_comment(&repo, 5000, "eyes").await.unwrap(),
        Produced::Done
    );
    let refused = client.react_to_comment(&repo, 5000, "shrug").await;
    assert!(
        matches!(&refused, Err(pidevops::effects::CallError::Permanent { message }) if message.contains("shrug")),
        "{refused:?}"
    );
    assert_eq!(
        fake.reactions(),
        vec![("acme/app".to_owned(), 5000, "eyes".to_owned())]
    );

    let secret = "s3cret".to_owned().into();
    let url = "https://pidevops.example/webhooks/github";
    let made = client
        .ensure_webhook(&repo, url, &secret, &["issues"])
        .await
        .unwrap();
    assert!(made.created && made.id > 0);
    let again = client
        .ensure_webhook(&repo, url, &secret, &["issues", "pull_request"])
        .await
        .unwrap();
    assert_eq!((again.id, again.created), (made.id, false));
    assert_eq!(
        client.webhook_urls(&repo).await.unwrap(),
        vec![url.to_owned()]
    );

    let merged = client
        .merge_pull_request(&repo, number, &sha, Some(MergeMethod::Squash))
        .await
        .unwrap();
    let Produced::Merge {
        merged: true,
        sha: Some(_),
        ..
    } = merged
    else {
        panic!("{merged:?}");
    };
    // A repeat reads the pull request, merged, and merges nothing.
    let Produced::Merge { merged: false, .. } = client
        .merge_pull_request(&repo, number, &sha, None)
        .await
        .unwrap()
    else {
        panic!("merged twice");
    };
    assert_eq!(fake.merge_calls().len(), 1);

    // pidevops's branch: kept while its head is not ours, deleted when it is, gone on a repeat.
    let ours = pidevops::tasks::CommitSha::new(&sha).unwrap();
    fake.set_branch("acme/app", "pidevops/T-1", &"c".repeat(40));
    let kept = client
        .delete_branch(&repo, &head, std::slice::from_ref(&ours))
        .await
        .unwrap();
    let Produced::Branch {
        deleted: false,
        kept: Some(why),
        ..
    } = &kept
    else {
        panic!("{kept:?}");
    };
    assert!(why.contains("ccccccc"), "{why}");
    assert!(fake.has_branch("acme/app", "pidevops/T-1"));
    fake.set_branch("acme/app", "pidevops/T-1", &sha);
    for deleted in [true, false] {
        let answered = client
            .delete_branch(&repo, &head, std::slice::from_ref(&ours))
            .await
            .unwrap();
        assert_eq!(
            answered,
            Produced::Branch {
                branch: "pidevops/T-1".to_owned(),
                deleted,
                kept: None
            }
        );
    }
    assert!(!fake.has_branch("acme/app", "pidevops/T-1"));
    assert_eq!(fake.delete_ref_calls().len(), 1);
    // Gone between the read and the delete (a person, GitHub's own "delete head branches"): GitHub's 422
    // "Reference does not exist" is a success, not a failure.
    fake.set_branch("acme/app", "pidevops/T-1", &sha);
    fake.fail_next(axum::http::Method::DELETE, Failure::Status(422));
    let raced = client
        .delete_branch(&repo, &head, std::slice::from_ref(&ours))
        .await;
    assert!(
        matches!(
            raced,
            Ok(Produced::Branch {
                deleted: false,
                kept: None,
                ..
            })
        ),
        "{raced:?}"
    );
}
