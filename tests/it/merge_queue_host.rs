//! The `merge_queue` loop feeding the host's own queue (issue 33, point 4), through the real app, real git and real
//! agent processes, only GitHub's and GitLab's APIs faked. A base that requires GitHub's merge queue with three
//! pull requests ready at once: all three enqueued, once each, at their checked heads, without waiting for the
//! first to merge, none merged by pidevops and none refreshed by it (a base push while they wait in GitHub's queue
//! refreshes none of them); GitHub's merges complete them. A base whose queue rule was removed: the next merge,
//! made directly, holds the base again. A GitLab project with merge trains and two merge
//! requests ready at once: both put on the train, once each, the same way. Per backend.

use std::time::Duration;

use pidevops::eventlog::EventStore;
use pidevops::tasks::{Column, TaskId};
use serde_json::{json, Value};

use crate::common::agents::{agent, Remote, REPO};
use crate::common::{board, within, TestApp, TestDb};
use crate::land::{app, check_run, config, create_task, in_review, merged, post, settle};
use crate::providers::github::fake::FakeGithub;
use crate::providers::gitlab::fake::merge_requests::TrainAdd;
use crate::providers::gitlab::fake::FakeGitlab;
use crate::providers::gitlab::gl_fixture;
use crate::refresh::{push, pushes, record_pushes, refresh, refreshes, shared};
use crate::refresh_gitlab as gitlab_rig;

per_backend!(
    three_pull_requests_ready_at_once_all_go_into_githubs_merge_queue_without_waiting,
    a_base_whose_merge_queue_rule_was_removed_holds_the_base_again_on_its_next_merge,
    two_merge_requests_ready_at_once_both_go_on_the_merge_train_without_waiting,
);

/// The bodies of `id`'s events of type `kind`.
async fn events(store: &EventStore, id: TaskId, kind: &str) -> Vec<Value> {
    store
        .read_stream(&format!("task:{id}"))
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event_type == kind)
        .map(|e| serde_json::from_slice(&e.body).unwrap())
        .collect()
}

/// `/health`'s word on the merge queue's last tick: how many of `repo`'s merges are in the host's queue.
async fn in_host_queue(app: &TestApp, repo: &str) -> Value {
    let (_, health) = app.health().await;
    health["loops"]["merge_queue"]["detail"]["in_host_queue"][repo].clone()
}

/// GitHub's merge queue merged `id`'s pull request `number`: its branch merged into `main`, and the webhook.
async fn github_merges(app: &TestApp, remote: &Remote, id: TaskId, number: u64) {
    remote.merge_to_main(id.branch().as_str());
    let body = merged(id, number);
    post(&app.url(""), "pull_request", &format!("merged-{id}"), &body).await;
    settle(app).await;
}

/// Three tasks of `REPO` (`land = "auto"`, no approvals, the `ci` check) in review on a base that requires GitHub's
/// merge queue, none ready yet: the app, and each task's id, pull request and head. Each run adds a file of its
/// own: the pull requests never conflict, but each lacks the others'.
async fn three_in_review(
    db: &TestDb,
    fake: &FakeGithub,
    remote: &Remote,
    scratch: &std::path::Path,
) -> (TestApp, Vec<(TaskId, u64, String)>) {
    fake.require_merge_queue(REPO, "main");
    record_pushes(remote);
    let script = agent(
        scratch,
        "agent.sh",
        "date +%s%N > \"note-$(date +%s%N).md\"",
    );
    let mut file = config(remote, &script, None);
    file["repos"][REPO]
        .as_table_mut()
        .unwrap()
        .insert("approvals".into(), 0.into());
    let app = app(db, fake, file, scratch).await;
    let mut tasks = Vec::new();
    for _ in 0..3 {
        tasks.push(create_task(&app.url(""), REPO).await);
    }
    let mut ready = Vec::new();
    for id in tasks {
        let (number, sha) = in_review(app.state.log.store(), id, 1).await;
        fake.set_head(REPO, number, &sha);
        ready.push((id, number, sha));
    }
    (app, ready)
}

async fn three_pull_requests_ready_at_once_all_go_into_githubs_merge_queue_without_waiting(
    db: TestDb,
) {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let (app, ready) = three_in_review(&db, &fake, &remote, scratch.path()).await;
    let (base, store) = (app.url(""), app.state.log.store().clone());

    // All three pass at once: each goes into GitHub's queue at its checked head as soon as the one before it is
    // there, none waiting for a merge.
    checks_pass(&app, &ready).await;
    within(Duration::from_secs(60), "all three enqueued", || async {
        settle(&app).await;
        fake.enqueued().len() >= 3
    })
    .await;
    settle(&app).await;
    let expected: Vec<(String, u64, String)> = ready
        .iter()
        .map(|(_, number, sha)| (REPO.to_owned(), *number, sha.clone()))
        .collect();
    assert_eq!(fake.enqueued(), expected, "once each, in task order");
    assert!(fake.merge_calls().is_empty(), "merged around the queue");
    for (id, _, sha) in &ready {
        assert_eq!(events(&store, *id, "task.merge_queued").await.len(), 1);
        assert!(events(&store, *id, "task.refreshed").await.is_empty());
        assert_eq!(remote.branch(id.branch().as_str()).unwrap(), *sha);
        let row = board::row_in(&store, *id).await.unwrap();
        assert_eq!(row.column, Column::InReview, "{row:?}");
        assert!(!row.needs_human, "{row:?}");
    }
    assert_eq!(in_host_queue(&app, REPO).await, json!(3));

    // GitHub merges the first, and main's push comes: the other two wait in GitHub's queue, which tests them on
    // top of it; pidevops pushes to neither (a push would take it out of GitHub's queue).
    let (first, first_pr, _) = ready[0].clone();
    github_merges(&app, &remote, first, first_pr).await;
    post(&base, "push", "main-moved", &push(REPO, "refs/heads/main")).await;
    refresh(&app).await;
    settle(&app).await;
    for (id, _, sha) in &ready[1..] {
        assert!(refreshes(&store, *id).await.is_empty(), "{id} refreshed");
        assert_eq!(remote.branch(id.branch().as_str()).unwrap(), *sha);
        let branch = format!("refs/heads/{}", id.branch());
        assert_eq!(pushes(&remote, &branch), [format!("{branch} {sha}")]);
        // Not marked behind either: no refresh of pidevops's is to come for it.
        let row = board::row_in(&store, *id).await.unwrap();
        assert_eq!(row.behind, None, "{row:?}");
    }
    assert_eq!(fake.enqueued().len(), 3);
    assert_eq!(in_host_queue(&app, REPO).await, json!(2));

    for (id, number, _) in &ready[1..] {
        github_merges(&app, &remote, *id, *number).await;
    }
    for (id, _, _) in &ready {
        let row = board::row_in(&store, *id).await.unwrap();
        assert_eq!(row.column, Column::Done, "{row:?}");
        assert!(!row.needs_human, "{row:?}");
    }
    assert_eq!(fake.enqueued().len(), 3);
    assert!(fake.merge_calls().is_empty());
}

/// A passing `ci` check on each of `ready`'s heads.
async fn checks_pass(app: &TestApp, ready: &[(TaskId, u64, String)]) {
    for (id, _, sha) in ready {
        let check = check_run(REPO, *id, sha, "ci", "success");
        post(&app.url(""), "check_run", &format!("ci-{id}"), &check).await;
    }
}

/// The first pull request goes into GitHub's queue; then the base's queue rule is removed. The next one chosen is
/// merged directly by pidevops (the effect reads the rules on each merge), and that merge holds the base again: the
/// third is chosen only once GitHub merged the second.
async fn a_base_whose_merge_queue_rule_was_removed_holds_the_base_again_on_its_next_merge(
    db: TestDb,
) {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let (app, ready) = three_in_review(&db, &fake, &remote, scratch.path()).await;
    let store = app.state.log.store().clone();
    checks_pass(&app, &ready[..1]).await;
    within(Duration::from_secs(60), "the first enqueued", || async {
        settle(&app).await;
        !fake.enqueued().is_empty()
    })
    .await;

    fake.stop_requiring_merge_queue(REPO, "main");
    checks_pass(&app, &ready[1..]).await;
    within(Duration::from_secs(60), "the second merged", || async {
        settle(&app).await;
        !fake.merge_calls().is_empty()
    })
    .await;
    settle(&app).await;
    settle(&app).await;
    let (second, second_pr, second_sha) = ready[1].clone();
    let calls = fake.merge_calls();
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert_eq!(calls[0].body["sha"], json!(second_sha));
    let third = ready[2].0;
    assert!(
        events(&store, third, "task.merge_queued").await.is_empty(),
        "chosen while a direct merge held the base"
    );
    assert_eq!(fake.enqueued().len(), 1);

    github_merges(&app, &remote, second, second_pr).await;
    within(Duration::from_secs(60), "the third chosen", || async {
        settle(&app).await;
        !events(&store, third, "task.merge_queued").await.is_empty()
    })
    .await;
    assert_eq!(
        board::row_in(&store, second).await.unwrap().column,
        Column::Done
    );
    assert_eq!(fake.enqueued().len(), 1);
}

/// GitLab merged `id`'s merge request `iid` at `sha` by its train: its branch merged into main, and the hook.
async fn train_merges(app: &TestApp, gitlab: &FakeGitlab, remote: &Remote, id: TaskId, iid: u64) {
    gitlab.merged_by_train(gitlab_rig::PROJECT, iid);
    remote.merge_to_main(id.branch().as_str());
    let sha = remote.branch(id.branch().as_str()).unwrap();
    let mut hook = gl_fixture("merge_request_merge");
    hook["object_attributes"]["source_branch"] = json!(id.branch().as_str());
    hook["object_attributes"]["iid"] = json!(iid);
    hook["object_attributes"]["last_commit"]["id"] = json!(sha);
    gitlab_rig::deliver(app, "Merge Request Hook", &hook).await;
    gitlab_rig::settle(app).await;
}

async fn two_merge_requests_ready_at_once_both_go_on_the_merge_train_without_waiting(db: TestDb) {
    let gitlab = FakeGitlab::start().await;
    gitlab.enable_merge_trains(gitlab_rig::PROJECT);
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    record_pushes(&remote);
    let scratch = tempfile::tempdir().unwrap();
    let app = gitlab_rig::app(&db, &gitlab, &remote, scratch.path()).await;
    let store = app.state.log.store().clone();
    let mut ready = Vec::new();
    for _ in 0..2 {
        ready.push(create_task(&app.url(""), gitlab_rig::PROJECT).await);
    }
    let mut ready_at = Vec::new();
    for id in ready {
        let (iid, sha) = gitlab_rig::in_review(&store, id).await;
        ready_at.push((id, iid, sha));
    }

    // Both pipelines pass at once: both go on the train at their checked heads, once each, neither refreshed.
    for (id, iid, sha) in &ready_at {
        let hook = gitlab_rig::pipeline(*id, *iid, sha, "success");
        gitlab_rig::deliver(&app, "Pipeline Hook", &hook).await;
    }
    within(Duration::from_secs(60), "both on the train", || async {
        gitlab_rig::settle(&app).await;
        gitlab.train_adds().len() >= 2
    })
    .await;
    gitlab_rig::settle(&app).await;
    let expected: Vec<TrainAdd> = ready_at
        .iter()
        .map(|(_, iid, sha)| TrainAdd {
            project: gitlab_rig::PROJECT.to_owned(),
            iid: *iid,
            sha: Some(sha.clone()),
        })
        .collect();
    assert_eq!(gitlab.train_adds(), expected);
    assert!(gitlab.merges().is_empty(), "merged around the train");
    for (id, _, sha) in &ready_at {
        assert!(refreshes(&store, *id).await.is_empty(), "{id} refreshed");
        assert_eq!(remote.branch(id.branch().as_str()).unwrap(), *sha);
    }
    assert_eq!(in_host_queue(&app, gitlab_rig::PROJECT).await, json!(2));

    // The train merges both: each completes, nothing is added twice, nobody was asked.
    for (id, iid, _) in &ready_at {
        train_merges(&app, &gitlab, &remote, *id, *iid).await;
    }
    for (id, _, _) in &ready_at {
        let row = board::row_in(&store, *id).await.unwrap();
        assert_eq!(row.column, Column::Done, "{row:?}");
        assert!(!row.needs_human, "{row:?}");
    }
    assert_eq!(gitlab.train_adds(), expected);
    assert!(gitlab.merges().is_empty());
    app.stop().await;
}
