//! The `merge_queue` loop through the real app, real git and the fake GitHub: two pull requests of pidevops's
//! land one at a time. The one ready first is merged; the other, ready while that merge is in flight, waits,
//! then (its base having moved, though no push webhook ever came) is brought up to date by the queue's own
//! refresh, and merged only once its checks pass on the refreshed head, with no person involved. And a merge GitHub
//! refuses (405) because the base moved after the queue chose it: refreshed and merged, not a person's. A base
//! that merges only through GitHub's own merge queue: detected, and the pull request enqueued there. Per backend.

use pidevops::eventlog::EventStore;
use pidevops::tasks::{Column, TaskId};
use serde_json::{json, Value};

use std::time::Duration;

use crate::common::agents::{agent, git, Remote, REPO};
use crate::common::{board, within, TestApp, TestDb};
use crate::land::{app, check_run, config, create_task, in_review, merged, post, settle};
use crate::providers::github::fake::FakeGithub;

per_backend!(
    two_pull_requests_land_one_at_a_time_each_on_the_latest_base,
    a_merge_github_refuses_as_behind_is_refreshed_and_merged_without_a_person,
    a_merge_github_refuses_as_behind_on_a_current_branch_flags_a_person_saying_so,
    a_base_with_githubs_merge_queue_gets_the_pull_request_enqueued_once_never_merged_by_pidevops,
    a_pull_request_githubs_merge_queue_dequeues_is_flagged_with_the_reason_and_a_forks_changes_nothing
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

/// One task of a repository with `land = "auto"` and no approvals required, in review: (app, its id, its pull
/// request, its head).
async fn in_review_alone(
    db: &TestDb,
    fake: &FakeGithub,
    remote: &Remote,
    scratch: &std::path::Path,
) -> (TestApp, TaskId, u64, String) {
    let script = agent(scratch, "agent.sh", "echo work > work.md");
    let mut file = config(remote, &script, None);
    file["repos"][REPO]
        .as_table_mut()
        .unwrap()
        .insert("approvals".into(), 0.into());
    let app = app(db, fake, file, scratch).await;
    let id = create_task(&app.url(""), REPO).await;
    let (number, sha) = in_review(app.state.log.store(), id, 1).await;
    fake.set_head(REPO, number, &sha);
    (app, id, number, sha)
}

/// A passing check on `sha`, and the loops driven until GitHub was asked to merge.
async fn merge_asked(app: &TestApp, fake: &FakeGithub, id: TaskId, sha: &str, asked: usize) {
    let check = check_run(REPO, id, sha, "ci", "success");
    post(&app.url(""), "check_run", &format!("ci-{sha}"), &check).await;
    within(Duration::from_secs(60), "GitHub asked to merge", || async {
        settle(app).await;
        fake.merge_calls().len() >= asked
    })
    .await;
}

/// GitHub refuses the chosen merge: a person pushed to the base just before it (no webhook yet) and the base's
/// protection requires branches to be up to date, so GitHub finds it `behind` (405). That is not a person's
/// business: the queue refreshes the branch onto the new base, waits for its checks on the new head, and merges
/// that, once.
async fn a_merge_github_refuses_as_behind_is_refreshed_and_merged_without_a_person(db: TestDb) {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let (app, id, number, sha) = in_review_alone(&db, &fake, &remote, scratch.path()).await;
    let store = app.state.log.store().clone();
    let (github, seed) = (fake.clone(), remote.dir.path().join("seed"));
    fake.before_next_merge(move || {
        std::fs::write(seed.join("person.md"), "a person's change\n").unwrap();
        git(&seed, &["add", "."]);
        git(&seed, &["commit", "--quiet", "-m", "a person's change"]);
        git(&seed, &["push", "--quiet", "../remote.git", "HEAD:main"]);
        github.set_mergeable_state(REPO, number, "behind");
    });
    merge_asked(&app, &fake, id, &sha, 1).await;

    // The queue brings it up to date (no push webhook came) and does not merge the old head again.
    within(Duration::from_secs(60), "the branch refreshed", || async {
        settle(&app).await;
        !events(&store, id, "task.refreshed").await.is_empty()
    })
    .await;
    let refreshed = events(&store, id, "task.refreshed").await;
    assert_eq!(refreshed.len(), 1, "{refreshed:#?}");
    let to = remote.branch(id.branch().as_str()).unwrap();
    assert_ne!(to, sha);
    assert_eq!(refreshed[0]["from"], json!(sha));
    assert_eq!(refreshed[0]["to"], json!(to));
    assert_eq!(refreshed[0]["base"], json!(remote.branch("main").unwrap()));
    settle(&app).await;
    assert_eq!(
        fake.merge_calls().len(),
        1,
        "merged before its checks ran again"
    );
    assert!(
        !board::row_in(&store, id).await.unwrap().needs_human,
        "a refusal the queue mends went to a person"
    );

    // Its check passes on the refreshed head: that head is merged, once, and nobody was asked.
    fake.set_head(REPO, number, &to);
    fake.set_mergeable_state(REPO, number, "clean");
    merge_asked(&app, &fake, id, &to, 2).await;
    let calls = fake.merge_calls();
    assert_eq!(calls.len(), 2, "{calls:#?}");
    assert_eq!(calls[0].body["sha"], json!(sha));
    assert_eq!(calls[1].body["sha"], json!(to));
    github_merges(&app, &remote, id, number).await;
    let row = board::row_in(&store, id).await.unwrap();
    assert_eq!(row.column, Column::Done, "{row:?}");
    assert!(!row.needs_human, "{row:?}");
    assert!(events(&store, id, "task.flagged_needs_human")
        .await
        .is_empty());
}

/// GitHub says `behind`, but the branch already holds the base pidevops fetches from the remote: nothing to
/// refresh, so the queue must not spin on it. The task is flagged, saying what GitHub answered, nothing is pushed,
/// and its old head is not merged again.
async fn a_merge_github_refuses_as_behind_on_a_current_branch_flags_a_person_saying_so(db: TestDb) {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let (app, id, number, sha) = in_review_alone(&db, &fake, &remote, scratch.path()).await;
    let store = app.state.log.store().clone();
    let github = fake.clone();
    fake.before_next_merge(move || github.set_mergeable_state(REPO, number, "behind"));
    merge_asked(&app, &fake, id, &sha, 1).await;
    within(Duration::from_secs(60), "the task flagged", || async {
        settle(&app).await;
        board::row_in(&store, id).await.unwrap().needs_human
    })
    .await;
    settle(&app).await;
    assert_eq!(fake.merge_calls().len(), 1);
    assert!(events(&store, id, "task.refreshed").await.is_empty());
    assert_eq!(remote.branch(id.branch().as_str()).unwrap(), sha, "pushed");
    let flags = events(&store, id, "task.flagged_needs_human").await;
    assert_eq!(flags.len(), 1, "{flags:#?}");
    let reason = flags[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("pull request #{number}")) && reason.contains("behind"),
        "{reason}"
    );
    assert!(reason.contains("already holds the base"), "{reason}");
}

/// GitHub's `dequeued` of `id`'s pull request `number`, with `reason`.
fn dequeued(id: TaskId, number: u64, reason: &str) -> Value {
    let mut body = merged(id, number);
    body["action"] = json!("dequeued");
    body["reason"] = json!(reason);
    let pr = &mut body["pull_request"];
    pr["merged"] = json!(false);
    pr["merged_by"] = Value::Null;
    pr["state"] = json!("open");
    body
}

/// The base requires GitHub's merge queue (a ruleset's `merge_queue` rule): pidevops reads that, and puts the
/// ready pull request into the queue at the head whose check passed (GraphQL `enqueuePullRequest` with
/// `expectedHeadOid`), once, never through the REST merge GitHub would refuse. GitHub's merge completes the task,
/// with nobody asked.
async fn a_base_with_githubs_merge_queue_gets_the_pull_request_enqueued_once_never_merged_by_pidevops(
    db: TestDb,
) {
    let fake = FakeGithub::start().await;
    fake.require_merge_queue(REPO, "main");
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let (app, id, number, sha) = in_review_alone(&db, &fake, &remote, scratch.path()).await;
    let store = app.state.log.store().clone();
    let check = check_run(REPO, id, &sha, "ci", "success");
    post(&app.url(""), "check_run", "ci", &check).await;
    within(
        Duration::from_secs(60),
        "the pull request enqueued",
        || async {
            settle(&app).await;
            !fake.enqueued().is_empty()
        },
    )
    .await;
    settle(&app).await;
    settle(&app).await;
    assert_eq!(
        fake.enqueued(),
        vec![(REPO.to_owned(), number, sha.clone())]
    );
    assert!(fake.merge_calls().is_empty(), "merged around the queue");
    let row = board::row_in(&store, id).await.unwrap();
    assert_eq!(row.column, Column::InReview, "{row:?}");
    assert!(!row.needs_human, "{row:?}");

    github_merges(&app, &remote, id, number).await;
    let row = board::row_in(&store, id).await.unwrap();
    assert_eq!(row.column, Column::Done, "{row:?}");
    assert!(!row.needs_human, "{row:?}");
    assert_eq!(fake.enqueued().len(), 1);
}

/// GitHub's merge queue takes the pull request out (its merge group failed CI): the task is flagged with GitHub's
/// reason, so it no longer holds the base. The same `dequeued` for a fork's pull request named like pidevops's
/// branch moves nothing.
async fn a_pull_request_githubs_merge_queue_dequeues_is_flagged_with_the_reason_and_a_forks_changes_nothing(
    db: TestDb,
) {
    let fake = FakeGithub::start().await;
    fake.require_merge_queue(REPO, "main");
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let (app, id, number, sha) = in_review_alone(&db, &fake, &remote, scratch.path()).await;
    let store = app.state.log.store().clone();
    let check = check_run(REPO, id, &sha, "ci", "success");
    post(&app.url(""), "check_run", "ci", &check).await;
    within(
        Duration::from_secs(60),
        "the pull request enqueued",
        || async {
            settle(&app).await;
            !fake.enqueued().is_empty()
        },
    )
    .await;

    let mut fork = dequeued(id, number, "CI_FAILURE");
    fork["pull_request"]["head"]["repo"]["full_name"] = json!("stranger/app");
    post(&app.url(""), "pull_request", "dequeued-fork", &fork).await;
    settle(&app).await;
    assert!(
        !board::row_in(&store, id).await.unwrap().needs_human,
        "a fork's event moved it"
    );

    post(
        &app.url(""),
        "pull_request",
        "dequeued",
        &dequeued(id, number, "CI_FAILURE"),
    )
    .await;
    settle(&app).await;
    let row = board::row_in(&store, id).await.unwrap();
    assert!(row.needs_human, "{row:?}");
    let flags = events(&store, id, "task.flagged_needs_human").await;
    assert_eq!(flags.len(), 1, "{flags:#?}");
    let reason = flags[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("merge queue") && reason.contains("CI_FAILURE"),
        "{reason}"
    );
    assert_eq!(fake.enqueued().len(), 1);
    assert!(fake.merge_calls().is_empty());
}
