//! The `merge_queue` loop on GitLab (issue 33), through the real app, real git and real agent processes, only
//! GitLab's API faked: two merge requests ready at once on one base land one at a time, the second brought up to
//! date by the queue's own refresh (no Push Hook came) and merged only once its new pipeline passed, one merge
//! call each. A merge GitLab refuses because the merge request needs a rebase is the queue's to mend, not a
//! person's. A project that runs merge trains gets each merge request put on its train once (a redelivery, or an
//! answer lost mid-call, adds nothing twice), never merged directly, the next one put on it without waiting for
//! the first's merge. A fork's merge request named like pidevops's branch moves nothing in the queue. Per backend.

use pidevops::tasks::{Column, TaskId};
use serde_json::{json, Value};

use crate::common::agents::{git, Remote};
use crate::common::{board, TestApp, TestDb};
use crate::land::create_task;
use crate::providers::gitlab::fake::merge_requests::TrainAdd;
use crate::providers::gitlab::fake::FakeGitlab;
use crate::providers::gitlab::gl_fixture;
use crate::refresh::{pushes, record_pushes, refreshes, shared};
use crate::refresh_gitlab::{app, deliver, in_review, pipeline, settle, PROJECT};

per_backend!(
    two_merge_requests_ready_at_once_land_one_at_a_time_each_on_the_latest_base,
    a_merge_gitlab_refuses_as_needing_a_rebase_is_refreshed_and_merged_without_a_person,
    a_project_with_merge_trains_gets_each_merge_request_on_its_train_once,
    a_forks_merge_request_named_like_pidevops_s_branch_moves_nothing_in_the_queue,
);

/// The bodies of `id`'s events of type `kind`.
pub(crate) async fn events(app: &TestApp, id: TaskId, kind: &str) -> Vec<Value> {
    app.state
        .log
        .store()
        .read_stream(&format!("task:{id}"))
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event_type == kind)
        .map(|e| serde_json::from_slice(&e.body).unwrap())
        .collect()
}

/// GitLab's Merge Request Hook for `id`'s merge request `iid`, merged at `sha`.
fn merged_hook(id: TaskId, iid: u64, sha: &str) -> Value {
    let mut merged = gl_fixture("merge_request_merge");
    merged["object_attributes"]["source_branch"] = json!(id.branch().as_str());
    merged["object_attributes"]["iid"] = json!(iid);
    merged["object_attributes"]["last_commit"]["id"] = json!(sha);
    merged
}

/// GitLab merged `id`'s merge request `iid` at `sha`: its branch merged into main, and the hook.
async fn gitlab_merges(app: &TestApp, remote: &Remote, id: TaskId, iid: u64, sha: &str) {
    remote.merge_to_main(id.branch().as_str());
    deliver(app, "Merge Request Hook", &merged_hook(id, iid, sha)).await;
    settle(app).await;
}

/// The merge calls GitLab had for merge request `iid`.
fn merges_of(gitlab: &FakeGitlab, iid: u64) -> Vec<Option<String>> {
    gitlab
        .merges()
        .into_iter()
        .filter(|m| m.iid == iid)
        .map(|m| m.sha)
        .collect()
}

/// The rig: `PROJECT` on GitLab with `land = "auto"`, two tasks (T-1 edits line 5, T-2 line 25 of one file) in
/// review: the app, each task's id, merge request and head.
struct Rig {
    app: TestApp,
    remote: Remote,
    first: (TaskId, u64, String),
    second: (TaskId, u64, String),
    _scratch: tempfile::TempDir,
}

async fn two_in_review(db: &TestDb, gitlab: &FakeGitlab) -> Rig {
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    record_pushes(&remote);
    let scratch = tempfile::tempdir().unwrap();
    let app = app(db, gitlab, &remote, scratch.path()).await;
    let (base, store) = (app.url(""), app.state.log.store().clone());
    let first = create_task(&base, PROJECT).await;
    let second = create_task(&base, PROJECT).await;
    let (first_iid, first_sha) = in_review(&store, first).await;
    let (second_iid, second_sha) = in_review(&store, second).await;
    Rig {
        app,
        remote,
        first: (first, first_iid, first_sha),
        second: (second, second_iid, second_sha),
        _scratch: scratch,
    }
}

/// Both pipelines pass at once.
async fn both_pass(rig: &Rig) {
    for (id, iid, sha) in [&rig.first, &rig.second] {
        deliver(
            &rig.app,
            "Pipeline Hook",
            &pipeline(*id, *iid, sha, "success"),
        )
        .await;
    }
    settle(&rig.app).await;
    settle(&rig.app).await;
}

async fn two_merge_requests_ready_at_once_land_one_at_a_time_each_on_the_latest_base(db: TestDb) {
    let gitlab = FakeGitlab::start().await;
    let rig = two_in_review(&db, &gitlab).await;
    let (app, remote) = (&rig.app, &rig.remote);
    let ((first, first_iid, first_sha), (second, second_iid, second_sha)) =
        (rig.first.clone(), rig.second.clone());
    let second_branch = format!("refs/heads/{}", second.branch());

    // Both ready at once: the first (task order) is merged at its head; the second waits for it.
    both_pass(&rig).await;
    assert_eq!(merges_of(&gitlab, first_iid), [Some(first_sha.clone())]);
    assert!(
        merges_of(&gitlab, second_iid).is_empty(),
        "two merges in flight on one base"
    );
    assert_eq!(events(app, first, "task.merge_queued").await.len(), 1);
    assert!(events(app, second, "task.merge_queued").await.is_empty());

    // GitLab merges it (main moves; no Push Hook comes): the queue brings the second up to date itself, pushed
    // once with a lease, and its old head's pipeline no longer lands it.
    gitlab_merges(app, remote, first, first_iid, &first_sha).await;
    let store = app.state.log.store();
    assert_eq!(
        board::row_in(store, first).await.unwrap().column,
        Column::Done
    );
    let recorded = refreshes(store, second).await;
    assert_eq!(recorded.len(), 1, "{recorded:#?}");
    let to = remote.branch(second.branch().as_str()).unwrap();
    assert_ne!(to, second_sha);
    assert_eq!(recorded[0]["from"], json!(second_sha));
    assert_eq!(recorded[0]["to"], json!(to));
    assert_eq!(recorded[0]["base"], json!(remote.branch("main").unwrap()));
    assert_eq!(pushes(remote, &second_branch).len(), 2);
    settle(app).await;
    assert!(
        merges_of(&gitlab, second_iid).is_empty(),
        "merged before its new pipeline passed"
    );

    // Its new pipeline passes: that head is merged, once, and nobody was asked.
    deliver(
        app,
        "Pipeline Hook",
        &pipeline(second, second_iid, &to, "success"),
    )
    .await;
    settle(app).await;
    settle(app).await;
    assert_eq!(merges_of(&gitlab, second_iid), [Some(to.clone())]);
    gitlab_merges(app, remote, second, second_iid, &to).await;
    for id in [first, second] {
        let row = board::row_in(store, id).await.unwrap();
        assert_eq!(row.column, Column::Done, "{row:?}");
        assert!(!row.needs_human, "{row:?}");
    }
    assert_eq!(gitlab.merges().len(), 2, "one merge call each");
    rig.app.stop().await;
}

/// The queue chose the merge; just before GitLab answers it, a person pushes to main and GitLab finds the merge
/// request `need_rebase` (it refuses the merge, 406). Not a person's business: the merge is recorded unmerged,
/// the queue refreshes the branch, and its new head is merged once its pipeline passed.
async fn a_merge_gitlab_refuses_as_needing_a_rebase_is_refreshed_and_merged_without_a_person(
    db: TestDb,
) {
    let gitlab = FakeGitlab::start().await;
    let rig = two_in_review(&db, &gitlab).await;
    let (app, remote) = (&rig.app, &rig.remote);
    let (first, first_iid, first_sha) = rig.first.clone();
    let (fake, seed) = (gitlab.clone(), remote.dir.path().join("seed"));
    gitlab.before_next_merge(move || {
        std::fs::write(seed.join("person.md"), "a person's change\n").unwrap();
        git(&seed, &["add", "."]);
        git(&seed, &["commit", "--quiet", "-m", "a person's change"]);
        git(&seed, &["push", "--quiet", "../remote.git", "HEAD:main"]);
        fake.set_merge_status(PROJECT, first_iid, "need_rebase");
    });
    deliver(
        app,
        "Pipeline Hook",
        &pipeline(first, first_iid, &first_sha, "success"),
    )
    .await;
    let store = app.state.log.store();
    crate::common::within(
        std::time::Duration::from_secs(60),
        "the branch refreshed",
        || async {
            settle(app).await;
            !refreshes(store, first).await.is_empty()
        },
    )
    .await;
    assert_eq!(merges_of(&gitlab, first_iid), [Some(first_sha.clone())]);
    let recorded = refreshes(store, first).await;
    assert_eq!(recorded.len(), 1, "{recorded:#?}");
    let to = remote.branch(first.branch().as_str()).unwrap();
    assert_eq!(recorded[0]["from"], json!(first_sha));
    assert_eq!(recorded[0]["base"], json!(remote.branch("main").unwrap()));
    let row = board::row_in(store, first).await.unwrap();
    assert!(
        !row.needs_human,
        "a refusal the queue mends went to a person: {row:?}"
    );

    gitlab.set_merge_status(PROJECT, first_iid, "mergeable");
    deliver(
        app,
        "Pipeline Hook",
        &pipeline(first, first_iid, &to, "success"),
    )
    .await;
    settle(app).await;
    settle(app).await;
    assert_eq!(merges_of(&gitlab, first_iid), [Some(first_sha), Some(to)]);
    assert!(events(app, first, "task.flagged_needs_human")
        .await
        .is_empty());
    rig.app.stop().await;
}

async fn a_project_with_merge_trains_gets_each_merge_request_on_its_train_once(db: TestDb) {
    let gitlab = FakeGitlab::start().await;
    gitlab.enable_merge_trains(PROJECT);
    let rig = two_in_review(&db, &gitlab).await;
    let (app, remote) = (&rig.app, &rig.remote);
    let ((first, first_iid, first_sha), (second, second_iid, second_sha)) =
        (rig.first.clone(), rig.second.clone());
    let add = |iid: u64, sha: &str| TrainAdd {
        project: PROJECT.to_owned(),
        iid,
        sha: Some(sha.to_owned()),
    };

    // Both ready: the first goes on the train at its checked head. GitLab's answer is lost (a crash mid-call, as
    // far as pidevops knows): the effect's repeat finds it on the train and adds nothing.
    gitlab.lose_next_train_answer();
    both_pass(&rig).await;
    crate::common::within(
        std::time::Duration::from_secs(30),
        "the add settled",
        || async {
            settle(app).await;
            app.all_events().await.iter().any(|e| {
                e.event_type == "effect.succeeded"
                    && e.stream.as_deref()
                        == Some(&*format!("effect:gitlab:merge:{first}:{first_sha}"))
            })
        },
    )
    .await;
    assert_eq!(gitlab.train_adds()[0], add(first_iid, &first_sha));
    assert!(gitlab.merges().is_empty(), "merged around the train");
    let attempts: Vec<String> = app
        .state
        .log
        .store()
        .read_stream(&format!("effect:gitlab:merge:{first}:{first_sha}"))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .filter(|t| t == "effect.failed" || t == "effect.succeeded")
        .collect();
    assert_eq!(
        attempts,
        ["effect.failed", "effect.succeeded"],
        "the answer lost, then found on the train"
    );

    // The pipeline hook delivered again (a new delivery) and the loops driven again: still once each. The second
    // went on the train too, at its own head, without waiting for the first to merge (`merge_queue_host.rs`).
    deliver(
        app,
        "Pipeline Hook",
        &pipeline(first, first_iid, &first_sha, "success"),
    )
    .await;
    settle(app).await;
    settle(app).await;
    let both = [add(first_iid, &first_sha), add(second_iid, &second_sha)];
    assert_eq!(gitlab.train_adds(), both);
    let store = app.state.log.store();
    let row = board::row_in(store, first).await.unwrap();
    assert_eq!(row.column, Column::InReview, "{row:?}");
    assert!(!row.needs_human, "{row:?}");

    // The train merges the first: it completes; the second, on the train, is neither refreshed nor added again.
    gitlab.merged_by_train(PROJECT, first_iid);
    gitlab_merges(app, remote, first, first_iid, &first_sha).await;
    assert_eq!(
        board::row_in(store, first).await.unwrap().column,
        Column::Done
    );
    settle(app).await;
    assert!(refreshes(store, second).await.is_empty());
    assert_eq!(gitlab.train_adds(), both);
    assert!(gitlab.merges().is_empty(), "merged around the train");
    rig.app.stop().await;
}

async fn a_forks_merge_request_named_like_pidevops_s_branch_moves_nothing_in_the_queue(db: TestDb) {
    let gitlab = FakeGitlab::start().await;
    let rig = two_in_review(&db, &gitlab).await;
    let app = &rig.app;
    let ((first, first_iid, first_sha), (second, second_iid, _)) =
        (rig.first.clone(), rig.second.clone());
    both_pass(&rig).await;
    assert_eq!(merges_of(&gitlab, first_iid), [Some(first_sha.clone())]);
    let store = app.state.log.store();
    let before = board::row_in(store, second).await.unwrap();

    // A fork's merge request from a branch named like the first's, merged; and a fork's pipeline for one named
    // like the second's: neither is pidevops's, so the first still holds the base and the second waits.
    let fork = gitlab.seed_merge_request(PROJECT, first.branch().as_str(), true);
    let mut forked = gl_fixture("merge_request_fork_merge");
    forked["object_attributes"]["source_branch"] = json!(first.branch().as_str());
    forked["object_attributes"]["iid"] = json!(fork);
    deliver(app, "Merge Request Hook", &forked).await;
    let mut fork_pipeline = pipeline(second, second_iid, &"f".repeat(40), "success");
    fork_pipeline["merge_request"]["source_project_id"] = json!(88);
    deliver(app, "Pipeline Hook", &fork_pipeline).await;
    settle(app).await;
    settle(app).await;

    let row = board::row_in(store, first).await.unwrap();
    assert_eq!(row.column, Column::InReview, "a fork's merge completed it");
    assert!(!row.needs_human, "{row:?}");
    assert!(events(app, second, "task.merge_queued").await.is_empty());
    assert!(refreshes(store, second).await.is_empty());
    assert_eq!(gitlab.merges().len(), 1);
    assert_eq!(
        board::row_in(store, second).await.unwrap().version,
        before.version,
        "the second is untouched"
    );
    rig.app.stop().await;
}
