//! The `merge_queue` loop through the real app, real git and the fake GitHub: two pull requests of pidevops's
//! land one at a time. The one ready first is merged; the other, ready while that merge is in flight, waits,
//! then (its base having moved, though no push webhook ever came) is brought up to date by the queue's own
//! refresh, and merged only once its checks pass on the refreshed head, with no person involved. Per backend.

use pidevops::eventlog::EventStore;
use pidevops::tasks::{Column, TaskId};
use serde_json::{json, Value};

use crate::common::agents::{agent, Remote, REPO};
use crate::common::{board, TestApp, TestDb};
use crate::land::{app, check_run, config, create_task, in_review, merged, post, settle};
use crate::providers::github::fake::FakeGithub;

per_backend!(two_pull_requests_land_one_at_a_time_each_on_the_latest_base);

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

/// GitHub merged `id`'s pull request `number`: its branch merged into `main` on the remote, and the webhook.
async fn github_merges(app: &TestApp, remote: &Remote, id: TaskId, number: u64) {
    remote.merge_to_main(id.branch().as_str());
    post(
        &app.url(""),
        "pull_request",
        &format!("merged-{id}"),
        &merged(id, number),
    )
    .await;
    settle(app).await;
}

async fn two_pull_requests_land_one_at_a_time_each_on_the_latest_base(db: TestDb) {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    // Each run adds a file of its own: the two pull requests never conflict, but each lacks the other's.
    let script = agent(
        scratch.path(),
        "agent.sh",
        "date +%s%N > \"note-$(date +%s%N).md\"",
    );
    let mut file = config(&remote, &script, None);
    file["repos"][REPO]
        .as_table_mut()
        .unwrap()
        .insert("approvals".into(), 0.into());
    let app = app(&db, &fake, file, scratch.path()).await;
    let (base, store) = (app.url(""), app.state.log.store().clone());
    let first = create_task(&base, REPO).await;
    let second = create_task(&base, REPO).await;
    let (first_pr, first_sha) = in_review(&store, first, 1).await;
    let (second_pr, second_sha) = in_review(&store, second, 1).await;
    fake.set_head(REPO, first_pr, &first_sha);
    fake.set_head(REPO, second_pr, &second_sha);

    // The second is ready first: it is merged. The first, ready while that merge is in flight, waits.
    let check = check_run(REPO, second, &second_sha, "ci", "success");
    post(&base, "check_run", "ci-second", &check).await;
    settle(&app).await;
    let calls = fake.merge_calls();
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert_eq!(calls[0].body["sha"], json!(second_sha));
    let check = check_run(REPO, first, &first_sha, "ci", "success");
    post(&base, "check_run", "ci-first", &check).await;
    settle(&app).await;
    settle(&app).await;
    assert_eq!(
        fake.merge_calls().len(),
        1,
        "two merges in flight on one base"
    );
    assert_eq!(events(&store, second, "task.merge_queued").await.len(), 1);
    assert!(events(&store, first, "task.merge_queued").await.is_empty());

    // GitHub merges it (its push webhook lost): the first is behind the new base, so the queue brings it up
    // to date first, pushed with a lease; its old head's check no longer lands it.
    github_merges(&app, &remote, second, second_pr).await;
    assert_eq!(
        board::row_in(&store, second).await.unwrap().column,
        Column::Done
    );
    let refreshed = events(&store, first, "task.refreshed").await;
    assert_eq!(refreshed.len(), 1, "{refreshed:#?}");
    let to = remote.branch(first.branch().as_str()).unwrap();
    assert_ne!(to, first_sha);
    assert_eq!(refreshed[0]["from"], json!(first_sha));
    assert_eq!(refreshed[0]["to"], json!(to));
    assert_eq!(refreshed[0]["base"], json!(remote.branch("main").unwrap()));
    settle(&app).await;
    assert_eq!(
        fake.merge_calls().len(),
        1,
        "merged before its checks ran again"
    );

    // Its checks pass on the refreshed head: that head is merged, once, and no person was asked.
    fake.set_head(REPO, first_pr, &to);
    let check = check_run(REPO, first, &to, "ci", "success");
    post(&base, "check_run", "ci-refreshed", &check).await;
    settle(&app).await;
    settle(&app).await;
    let calls = fake.merge_calls();
    assert_eq!(calls.len(), 2, "{calls:#?}");
    assert_eq!(calls[1].body["sha"], json!(to));
    github_merges(&app, &remote, first, first_pr).await;
    for id in [first, second] {
        let row = board::row_in(&store, id).await.unwrap();
        assert_eq!(row.column, Column::Done, "{row:?}");
        assert!(!row.needs_human, "{row:?}");
    }
    assert_eq!(fake.merge_calls().len(), 2);
}
