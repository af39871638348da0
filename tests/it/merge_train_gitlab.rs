//! GitLab's merge trains and merged results pipelines under auto-land (issue 33), through the real app, real git
//! and real agent processes, only GitLab's API faked. A merge request GitLab takes off its train (no webhook; the
//! fake drops its car) is found by `gitlab_poller`: its task flagged once, naming the merge request and that it
//! left the train, however many ticks follow, and the base it held goes to the next ready task. One the train
//! merged (its car gone because merged) is completed, never flagged. A merged results pipeline's success counts
//! for the head GitLab's API says it was made from: the recorded head lands; one whose API answer names another
//! head, or another pipeline, lands nothing. Per backend.

use pidevops::tasks::{Column, TaskId};
use serde_json::{json, Value};

use crate::common::agents::Remote;
use crate::common::{board, TestApp, TestDb};
use crate::land::create_task;
use crate::merge_queue_gitlab::events;
use crate::providers::gitlab::fake::FakeGitlab;
use crate::providers::gitlab::gl_fixture;
use crate::refresh::{record_pushes, shared};
use crate::refresh_gitlab::{app, deliver, in_review, pipeline, settle, PROJECT};

per_backend!(
    a_merge_request_taken_off_the_train_flags_its_task_once_and_leaves_the_others_on_it,
    a_merge_request_merged_by_the_train_is_completed_not_flagged,
    a_merged_results_pipeline_lands_the_head_gitlab_says_it_was_made_from_and_no_other,
);

/// `count` tasks in review on `PROJECT` (GitLab, `land = "auto"`, the pipeline required): the app, each task's id,
/// merge request and head.
struct Rig {
    app: TestApp,
    tasks: Vec<(TaskId, u64, String)>,
    _remote: Remote,
    _scratch: tempfile::TempDir,
}

async fn in_review_on(db: &TestDb, gitlab: &FakeGitlab, count: usize) -> Rig {
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    record_pushes(&remote);
    let scratch = tempfile::tempdir().unwrap();
    let app = app(db, gitlab, &remote, scratch.path()).await;
    let (base, store) = (app.url(""), app.state.log.store().clone());
    let mut ids = Vec::new();
    for _ in 0..count {
        ids.push(create_task(&base, PROJECT).await);
    }
    let mut tasks = Vec::new();
    for id in ids {
        let (iid, sha) = in_review(&store, id).await;
        tasks.push((id, iid, sha));
    }
    Rig {
        app,
        tasks,
        _remote: remote,
        _scratch: scratch,
    }
}

/// The number of events in the log of `event_type`.
async fn count(app: &TestApp, event_type: &str) -> usize {
    app.all_events()
        .await
        .iter()
        .filter(|e| e.event_type == event_type)
        .count()
}

/// One `gitlab_poller` tick, then the loops that act on what it appended.
async fn poll(app: &TestApp) {
    app.tick("gitlab_poller").await;
    settle(app).await;
}

/// Each task's pipeline passes, and the loops settle: the first is put on the train.
async fn all_pass(rig: &Rig) {
    for (id, iid, sha) in &rig.tasks {
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

async fn a_merge_request_taken_off_the_train_flags_its_task_once_and_leaves_the_others_on_it(
    db: TestDb,
) {
    let gitlab = FakeGitlab::start().await;
    gitlab.enable_merge_trains(PROJECT);
    let rig = in_review_on(&db, &gitlab, 2).await;
    let app = &rig.app;
    let ((first, first_iid, _), (second, second_iid, second_sha)) =
        (rig.tasks[0].clone(), rig.tasks[1].clone());
    all_pass(&rig).await;
    // The train is the host's own queue: both go on it, the second without waiting for the first.
    assert!(gitlab.on_train(PROJECT, first_iid));
    assert!(
        gitlab.on_train(PROJECT, second_iid),
        "the second on the train too"
    );

    // On the train: the poller reads its car and leaves it be.
    poll(app).await;
    let store = app.state.log.store();
    assert!(!board::row_in(store, first).await.unwrap().needs_human);

    // GitLab takes it off (its train pipeline failed), saying nothing: the poller finds it gone, the task is
    // flagged naming the merge request, and the second stays on the train, added once.
    gitlab.dropped_from_train(PROJECT, first_iid);
    poll(app).await;
    settle(app).await;
    let row = board::row_in(store, first).await.unwrap();
    assert_eq!(row.column, Column::InReview, "{row:?}");
    assert!(row.needs_human, "{row:?}");
    let reason = row.needs_human_reason.unwrap_or_default();
    assert!(
        reason.contains(&format!(
            "merge request !{first_iid} left GitLab's merge train"
        )),
        "{reason}"
    );
    assert_eq!(events(app, second, "task.merge_queued").await.len(), 1);
    assert!(
        gitlab.on_train(PROJECT, second_iid),
        "the second taken off too"
    );
    assert!(!board::row_in(store, second).await.unwrap().needs_human);
    let adds: Vec<_> = gitlab
        .train_adds()
        .into_iter()
        .filter(|add| add.iid == second_iid)
        .collect();
    assert_eq!(adds.len(), 1, "{adds:?}");
    assert_eq!(adds[0].sha.as_deref(), Some(&*second_sha));

    // Many ticks later: recorded once, flagged once.
    for _ in 0..3 {
        poll(app).await;
    }
    assert_eq!(count(app, "gitlab.merge_train.left").await, 1);
    assert_eq!(
        events(app, first, "task.flagged_needs_human").await.len(),
        1
    );
    assert!(gitlab.merges().is_empty(), "merged around the train");
    rig.app.stop().await;
}

async fn a_merge_request_merged_by_the_train_is_completed_not_flagged(db: TestDb) {
    let gitlab = FakeGitlab::start().await;
    gitlab.enable_merge_trains(PROJECT);
    let rig = in_review_on(&db, &gitlab, 1).await;
    let app = &rig.app;
    let (id, iid, sha) = rig.tasks[0].clone();
    all_pass(&rig).await;
    assert!(gitlab.on_train(PROJECT, iid));

    // The train merges it: its car is gone, because it merged. Before and after its hook, the poller flags
    // nothing, and the hook completes it.
    gitlab.merged_by_train(PROJECT, iid);
    poll(app).await;
    let mut merged = gl_fixture("merge_request_merge");
    merged["object_attributes"]["source_branch"] = json!(id.branch().as_str());
    merged["object_attributes"]["iid"] = json!(iid);
    merged["object_attributes"]["last_commit"]["id"] = json!(sha);
    deliver(app, "Merge Request Hook", &merged).await;
    settle(app).await;
    poll(app).await;
    let row = board::row_in(app.state.log.store(), id).await.unwrap();
    assert_eq!(row.column, Column::Done, "{row:?}");
    assert!(!row.needs_human, "{row:?}");
    assert_eq!(count(app, "gitlab.merge_train.left").await, 0);
    assert!(events(app, id, "task.flagged_needs_human").await.is_empty());
    rig.app.stop().await;
}

/// A merged results pipeline `id` of merge request `iid` (`task`'s), run on `merged` (the head merged into its
/// target), finished `status`.
fn merged_result(task: TaskId, iid: u64, id: u64, merged: &str, status: &str) -> Value {
    let mut body = pipeline(task, iid, merged, status);
    body["object_attributes"]["id"] = json!(id);
    body["object_attributes"]["ref"] = json!(format!("refs/merge-requests/{iid}/merge"));
    body
}

/// GitLab's `head_pipeline` for merge request `iid`: pipeline `id` on its merged result `merged`.
fn shown(iid: u64, id: u64, merged: &str, status: &str) -> Value {
    json!({
        "id": id, "iid": 40 + id, "project_id": 42, "sha": merged, "status": status,
        "ref": format!("refs/merge-requests/{iid}/merge"), "source": "merge_request_event",
    })
}

async fn a_merged_results_pipeline_lands_the_head_gitlab_says_it_was_made_from_and_no_other(
    db: TestDb,
) {
    let gitlab = FakeGitlab::start().await;
    let rig = in_review_on(&db, &gitlab, 1).await;
    let app = &rig.app;
    let (id, iid, sha) = rig.tasks[0].clone();
    let merged = "9".repeat(40);

    // GitLab's API names another head for the merge request (it moved, as GitLab sees it): the merged result's
    // success is of that head, which pidevops never pushed, and lands nothing.
    let other_head = "a".repeat(40);
    gitlab.set_head(PROJECT, iid, &other_head);
    gitlab.set_head_pipeline(PROJECT, iid, shown(iid, 3001, &merged, "success"));
    deliver(
        app,
        "Pipeline Hook",
        &merged_result(id, iid, 3001, &merged, "success"),
    )
    .await;
    settle(app).await;
    settle(app).await;
    assert!(gitlab.merges().is_empty(), "landed another head's result");
    assert!(events(app, id, "task.check_passed").await.is_empty());

    // The recorded head, but the API shows another pipeline as its head's: not confirmed, recorded as ignored.
    gitlab.set_head(PROJECT, iid, &sha);
    gitlab.set_head_pipeline(PROJECT, iid, shown(iid, 3005, &merged, "success"));
    deliver(
        app,
        "Pipeline Hook",
        &merged_result(id, iid, 3002, &merged, "success"),
    )
    .await;
    settle(app).await;
    settle(app).await;
    assert!(gitlab.merges().is_empty(), "landed an unconfirmed result");
    let ignored = app
        .all_events()
        .await
        .into_iter()
        .filter(|e| e.event_type == "reactions.ignored")
        .map(|e| String::from_utf8_lossy(&e.body).into_owned())
        .collect::<Vec<_>>();
    assert!(
        ignored.iter().any(|b| b.contains("pipeline #3002")),
        "{ignored:#?}"
    );

    // GitLab shows this very pipeline as the head's: the passing check counts for the recorded head, which lands.
    gitlab.set_head_pipeline(PROJECT, iid, shown(iid, 3003, &merged, "success"));
    deliver(
        app,
        "Pipeline Hook",
        &merged_result(id, iid, 3003, &merged, "success"),
    )
    .await;
    settle(app).await;
    settle(app).await;
    let checks = events(app, id, "task.check_passed").await;
    assert_eq!(checks.len(), 1, "{checks:#?}");
    assert_eq!(checks[0]["sha"], json!(sha));
    let merges: Vec<_> = gitlab.merges().into_iter().map(|m| m.sha).collect();
    assert_eq!(merges, [Some(sha.clone())]);
    rig.app.stop().await;
}
