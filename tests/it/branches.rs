//! pidevops deletes its own branch (`[repos."o/n"] delete_branch`, default true) through the real app: a real
//! agent run pushes, effects:github opens the pull request on the fake GitHub, and once GitHub's webhook says it
//! merged (or the task is cancelled) `pidevops/<task>` is deleted with one `DELETE …/git/refs/heads/…`, keyed
//! `github:delete-branch:<task>`: once, however often the merge is delivered. A fork's pull request named like
//! ours deletes nothing; a branch whose head someone else pushed is kept and the effect says why; a repository
//! with `delete_branch = false` keeps its branches. Per backend.

use std::time::Duration;

use crate::common::agents::{agent, dispatch_file, Remote, REPO};
use crate::common::board;
use crate::common::{within, TestApp, TestDb, ADMIN_TOKEN, GITHUB_SECRET};
use crate::providers::github::fake::FakeGithub;
use crate::providers::github::gh_fixture as fixture;
use pidevops::eventlog::EventStore;
use pidevops::projectors::runs::{self, Which};
use pidevops::providers::github::webhook::sign_github;
use pidevops::tasks::{Column, TaskId, GITHUB_PR};
use serde_json::{json, Value};

per_backend!(
    a_merged_pull_request_deletes_its_branch_once_and_a_fork_s_deletes_nothing,
    a_cancelled_task_s_branch_is_deleted_a_moved_one_kept_and_delete_branch_false_keeps_it,
);

/// A second repository, whose branches are kept (`delete_branch = false`).
const KEEPS: &str = "acme/site";

/// `pidevops.toml`: dispatch to `remote` with an agent that changes a file each run, `REPO` on GitHub (the fake
/// API), and with `keeps` also `KEEPS` on GitHub with `delete_branch = false`.
fn config(remote: &Remote, script: &std::path::Path, keeps: Option<&Remote>) -> toml::Table {
    let mut file = dispatch_file(remote, script, "");
    let repos = file["repos"].as_table_mut().unwrap();
    // A local remote stands in for GitHub (the fake API opens the pull requests): said outright.
    repos[REPO]
        .as_table_mut()
        .unwrap()
        .insert("forge".into(), "github".into());
    if let Some(other) = keeps {
        let mut table = toml::Table::new();
        table.insert("url".into(), other.url().into());
        table.insert("scope".into(), "off".into());
        table.insert("forge".into(), "github".into());
        table.insert("delete_branch".into(), false.into());
        repos.insert(KEEPS.into(), table.into());
    }
    file
}

async fn app(
    db: &TestDb,
    fake: &FakeGithub,
    file: toml::Table,
    scratch: &std::path::Path,
) -> TestApp {
    TestApp::dispatching_github(db, file, &scratch.join("ws"), Some(fake)).await
}

/// A signed GitHub webhook; `delivery` names it.
async fn post(base: &str, event: &str, delivery: &str, body: &Value) {
    let bytes = body.to_string().into_bytes();
    let response = reqwest::Client::new()
        .post(format!("{base}/webhooks/github"))
        .header("content-type", "application/json")
        .header("x-github-event", event)
        .header("x-github-delivery", delivery)
        .header(
            "x-hub-signature-256",
            sign_github(GITHUB_SECRET.as_bytes(), &bytes),
        )
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{event}");
}

/// A task for `repo` through the API (`[board] approval = "auto"`: straight to the dispatcher).
async fn create_task(base: &str, repo: &str) -> TaskId {
    let body = json!({ "repo": repo, "spec": { "task": "Fix the login redirect", "scope": "src/auth", "done_when": "CI is green" } });
    let response = reqwest::Client::new()
        .post(format!("{base}/api/tasks"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let created: Value = response.json().await.unwrap();
    created["task"]["id"].as_str().unwrap().parse().unwrap()
}

/// GitHub's `pull_request.closed` for pull request `number` of `task`'s branch in `repo`, merged, its head in
/// `head_repo` (a fork when that is not `repo`).
fn merged(repo: &str, task: TaskId, number: u64, head_repo: &str) -> Value {
    let mut body = fixture("pull_request/closed.payload.json");
    let by = body["sender"].clone();
    let pr = &mut body["pull_request"];
    pr["number"] = json!(number);
    pr["merged"] = json!(true);
    pr["merged_by"] = by;
    pr["head"]["ref"] = json!(task.branch().as_str());
    pr["head"]["repo"]["full_name"] = json!(head_repo);
    pr["base"]["repo"]["full_name"] = json!(repo);
    body["repository"]["full_name"] = json!(repo);
    body
}

/// Waits until `id` is in review with its pull request linked and its run ended; returns the pull request's
/// number and the commit the run pushed.
async fn in_review(store: &EventStore, id: TaskId) -> (u64, String) {
    within(
        Duration::from_secs(90),
        &format!("{id} in review, its pull request linked"),
        || async {
            let ended = runs::query(store, Which::Task(&id.to_string()))
                .await
                .unwrap()
                .iter()
                .any(|r| r.state != "running");
            ended
                && board::row_in(store, id)
                    .await
                    .is_some_and(|r| r.column == Column::InReview && r.links.has(GITHUB_PR))
        },
    )
    .await;
    let row = board::row_in(store, id).await.unwrap();
    let number = row.links.get(GITHUB_PR).unwrap().number.get();
    let runs = runs::query(store, Which::Task(&id.to_string()))
        .await
        .unwrap();
    let sha = runs
        .iter()
        .max_by_key(|r| r.attempt)
        .and_then(|r| r.commit_sha.clone())
        .unwrap();
    (number, sha)
}

use crate::land::settle;

/// The bodies of the events of the effect `key`, each with its type.
async fn effect(store: &EventStore, key: &str) -> Vec<Value> {
    store
        .read_stream(&format!("effect:{key}"))
        .await
        .unwrap()
        .iter()
        .map(|e| {
            let mut body: Value = serde_json::from_slice(&e.body).unwrap();
            body["event_type"] = json!(e.event_type);
            body
        })
        .collect()
}

/// The calls that touched `repo`'s branch `branch` (read or deleted).
fn branch_calls(fake: &FakeGithub, repo: &str, branch: &str) -> Vec<String> {
    fake.calls()
        .into_iter()
        .filter(|c| {
            c.path.contains("/git/ref") && c.path.contains(repo) && c.path.ends_with(branch)
        })
        .map(|c| format!("{} {}", c.method, c.path))
        .collect()
}

async fn a_merged_pull_request_deletes_its_branch_once_and_a_fork_s_deletes_nothing(db: TestDb) {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let script = agent(scratch.path(), "edits.sh", "date +%s%N > CHANGES.md");
    let app = app(&db, &fake, config(&remote, &script, None), scratch.path()).await;
    let (base, store) = (app.url(""), app.state.log.store().clone());
    let id = create_task(&base, REPO).await;
    let (number, sha) = in_review(&store, id).await;
    let branch = id.branch();
    fake.set_branch(REPO, branch.as_str(), &sha);
    // A fork's branch of the same name: never ours, never touched.
    fake.set_branch("mallory/app", branch.as_str(), &sha);

    // A fork's pull request named like ours, merged: the task stays in review and nothing is deleted.
    post(
        &base,
        "pull_request",
        "fork-closed",
        &merged(REPO, id, number, "mallory/app"),
    )
    .await;
    settle(&app).await;
    assert_eq!(
        board::row_in(&store, id).await.unwrap().column,
        Column::InReview
    );
    assert!(
        fake.delete_ref_calls().is_empty(),
        "{:#?}",
        fake.delete_ref_calls()
    );
    assert!(fake.has_branch(REPO, branch.as_str()));

    // Our pull request merged: the task is done and its branch deleted, once.
    post(
        &base,
        "pull_request",
        "closed-1",
        &merged(REPO, id, number, REPO),
    )
    .await;
    settle(&app).await;
    assert_eq!(
        board::row_in(&store, id).await.unwrap().column,
        Column::Done
    );
    assert!(
        !fake.has_branch(REPO, branch.as_str()),
        "the branch is gone"
    );
    assert!(
        fake.has_branch("mallory/app", branch.as_str()),
        "the fork's is not ours"
    );
    let deleted = fake.delete_ref_calls();
    assert_eq!(deleted.len(), 1, "{deleted:#?}");
    assert_eq!(
        deleted[0].path,
        format!("/repos/{REPO}/git/refs/heads/{}", branch.as_str())
    );
    let key = format!("github:delete-branch:{id}");
    let recorded = effect(&store, &key).await;
    let kinds: Vec<&str> = recorded
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["effect.requested", "effect.started", "effect.succeeded"]
    );
    assert_eq!(
        recorded[2]["produced"]["deleted"],
        json!(true),
        "{recorded:#?}"
    );
    assert_eq!(recorded[0]["commits"], json!([sha]), "{recorded:#?}");

    // The merge delivered again (a redelivery under a new id, as a missed-webhook poll would append it):
    // nothing more is asked or deleted.
    post(
        &base,
        "pull_request",
        "closed-2",
        &merged(REPO, id, number, REPO),
    )
    .await;
    settle(&app).await;
    assert_eq!(fake.delete_ref_calls().len(), 1);
    assert_eq!(effect(&store, &key).await.len(), 3);
    assert!(branch_calls(&fake, "mallory/app", branch.as_str()).is_empty());
    app.stop().await;
}

async fn a_cancelled_task_s_branch_is_deleted_a_moved_one_kept_and_delete_branch_false_keeps_it(
    db: TestDb,
) {
    let fake = FakeGithub::start().await;
    let (remote, other) = (Remote::new(), Remote::new());
    let scratch = tempfile::tempdir().unwrap();
    let script = agent(scratch.path(), "edits.sh", "date +%s%N > CHANGES.md");
    let app = app(
        &db,
        &fake,
        config(&remote, &script, Some(&other)),
        scratch.path(),
    )
    .await;
    let (base, store) = (app.url(""), app.state.log.store().clone());
    let cancelled = create_task(&base, REPO).await;
    let moved = create_task(&base, REPO).await;
    let kept = create_task(&base, KEEPS).await;
    let (_, cancelled_sha) = in_review(&store, cancelled).await;
    let (moved_pr, _) = in_review(&store, moved).await;
    let (kept_pr, kept_sha) = in_review(&store, kept).await;
    fake.set_branch(REPO, cancelled.branch().as_str(), &cancelled_sha);
    // Someone pushed to the branch after pidevops: its head is no commit pidevops recorded.
    let theirs = "f".repeat(40);
    fake.set_branch(REPO, moved.branch().as_str(), &theirs);
    fake.set_branch(KEEPS, kept.branch().as_str(), &kept_sha);

    // Cancelled in review: its branch is deleted.
    let response = reqwest::Client::new()
        .post(format!("{base}/api/tasks/{cancelled}/cancel"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({ "reason": "not wanted any more" }))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    // The other two merged on GitHub.
    post(
        &base,
        "pull_request",
        "moved-closed",
        &merged(REPO, moved, moved_pr, REPO),
    )
    .await;
    post(
        &base,
        "pull_request",
        "kept-closed",
        &merged(KEEPS, kept, kept_pr, KEEPS),
    )
    .await;
    settle(&app).await;
    for id in [cancelled, moved, kept] {
        let column = board::row_in(&store, id).await.unwrap().column;
        assert!(
            matches!(column, Column::Done | Column::Cancelled),
            "{id}: {column:?}"
        );
    }

    assert!(
        !fake.has_branch(REPO, cancelled.branch().as_str()),
        "the cancelled task's branch is gone"
    );
    let deleted = fake.delete_ref_calls();
    assert_eq!(deleted.len(), 1, "{deleted:#?}");
    assert!(deleted[0].path.ends_with(cancelled.branch().as_str()));

    // The moved branch: read, kept, and the effect says why.
    assert!(fake.has_branch(REPO, moved.branch().as_str()));
    let recorded = effect(&store, &format!("github:delete-branch:{moved}")).await;
    let succeeded = recorded.last().unwrap();
    assert_eq!(
        succeeded["event_type"],
        json!("effect.succeeded"),
        "{recorded:#?}"
    );
    assert_eq!(succeeded["produced"]["deleted"], json!(false));
    let why = succeeded["produced"]["kept"].as_str().unwrap();
    assert!(
        why.contains("fffffff") && why.contains("not a commit pidevops pushed"),
        "{why}"
    );

    // `delete_branch = false`: never asked, never read.
    assert!(fake.has_branch(KEEPS, kept.branch().as_str()));
    assert!(effect(&store, &format!("github:delete-branch:{kept}"))
        .await
        .is_empty());
    assert!(branch_calls(&fake, KEEPS, kept.branch().as_str()).is_empty());
    app.stop().await;
}
