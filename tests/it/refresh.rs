//! The `refresh` loop through the real app, real git and the fake GitHub: a push to the repository's base brings
//! pidevops's pull requests on it up to date by its own git, pushed once with a lease on the commit pidevops
//! recorded; auto-land then waits for the checks on the refreshed head and merges that head. A conflict goes to
//! an agent (refresh_conflict.rs); one whose markers it leaves flags a person with the files named and pushes
//! nothing; a person's push to the branch is never overwritten; a fork's
//! push or a push to another branch moves nothing. Per backend.

use std::path::Path;

use pidevops::eventlog::EventStore;
use pidevops::tasks::{Column, TaskId};
use serde_json::{json, Value};

use crate::common::agents::{agent, git, Remote, REPO};
use crate::common::killed::{kill_on_push, killed, Serve};
use crate::common::{board, within, TestApp, TestDb};
use crate::land::{app, check_run, config, create_task, in_review, merged, post, settle};
use crate::providers::github::fake::FakeGithub;
use crate::providers::github::gh_fixture as fixture;

per_backend!(
    a_moved_base_refreshes_the_branch_once_and_auto_land_merges_the_refreshed_head_after_its_checks,
    a_conflict_flags_the_task_with_its_files_and_a_persons_push_is_never_overwritten,
    sigkill_between_a_refreshs_push_and_its_record_pushes_once_and_records_it,
    a_base_push_marks_each_task_behind_before_any_refresh_and_each_mark_ends_with_its_refresh,
);

/// Thirty numbered lines: the file both the agent and a teammate edit, in different places or the same.
pub(crate) fn shared(changed: &[(usize, &str)]) -> String {
    (1..=30)
        .map(|n| {
            changed
                .iter()
                .find(|(line, _)| *line == n)
                .map_or_else(|| format!("line {n}\n"), |(_, text)| format!("{text}\n"))
        })
        .collect()
}

/// A GitHub `push` of `reference` in `repo`.
pub(crate) fn push(repo: &str, reference: &str) -> Value {
    let mut body = fixture("push/payload.json");
    body["ref"] = json!(reference);
    body["deleted"] = json!(false);
    body["repository"]["full_name"] = json!(repo);
    body
}

/// Every ref update the remote received, as `<ref> <new commit>` lines (its `post-receive` hook's record).
pub(crate) fn pushes(remote: &Remote, reference: &str) -> Vec<String> {
    let log = remote.dir.path().join("pushes.log");
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.starts_with(reference))
        .map(str::to_owned)
        .collect()
}

/// Makes the remote record every ref update it receives.
pub(crate) fn record_pushes(remote: &Remote) {
    use std::os::unix::fs::PermissionsExt;
    let hook = remote.dir.path().join("remote.git/hooks/post-receive");
    let log = remote.dir.path().join("pushes.log");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\nwhile read old new ref; do echo \"$ref $new\" >> '{}'; done\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The bodies of `id`'s `task.refreshed` events.
pub(crate) async fn refreshes(store: &EventStore, id: TaskId) -> Vec<Value> {
    store
        .read_stream(&format!("task:{id}"))
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event_type == "task.refreshed")
        .map(|e| serde_json::from_slice(&e.body).unwrap())
        .collect()
}

/// Every `refresh` loop's tick until it has handled the whole log.
pub(crate) async fn refresh(app: &TestApp) {
    app.project().await;
    app.drive("refresh").await;
    app.project().await;
}

/// `land = "auto"` on `REPO` with no approvals needed (the `ci` check only), an agent running `script`.
pub(crate) fn file(remote: &Remote, scratch: &Path, script: &str) -> toml::Table {
    let agent = agent(scratch, "agent.sh", script);
    let mut file = config(remote, &agent, None);
    let repo = file["repos"][REPO].as_table_mut().unwrap();
    repo.insert("approvals".into(), 0.into());
    file
}

async fn a_moved_base_refreshes_the_branch_once_and_auto_land_merges_the_refreshed_head_after_its_checks(
    db: TestDb,
) {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    record_pushes(&remote);
    let scratch = tempfile::tempdir().unwrap();
    // The agent edits line 25; a teammate's merge edits line 2: apart, so the refresh is clean.
    let script = "sed -i 's/^line 25$/line 25 by the agent/' shared.txt; date +%s%N > \"note-$(date +%s%N).md\"";
    let app = app(
        &db,
        &fake,
        file(&remote, scratch.path(), script),
        scratch.path(),
    )
    .await;
    let (base, store) = (app.url(""), app.state.log.store().clone());
    let id = create_task(&base, REPO).await;
    let (number, sha) = in_review(&store, id, 1).await;
    fake.set_head(REPO, number, &sha);
    let branch = format!("refs/heads/{}", id.branch());
    assert_eq!(pushes(&remote, &branch).len(), 1, "the attempt's push");

    // Strangers' signals move nothing: a fork's push to its main, a push to another branch of ours.
    remote.commit_to_main("shared.txt", &shared(&[(2, "line 2 by a teammate")]));
    post(
        &base,
        "push",
        "fork",
        &push("stranger/app", "refs/heads/main"),
    )
    .await;
    post(&base, "push", "other", &push(REPO, "refs/heads/feature")).await;
    post(&base, "push", "ours", &push(REPO, &branch)).await;
    refresh(&app).await;
    assert!(refreshes(&store, id).await.is_empty());
    assert_eq!(pushes(&remote, &branch).len(), 1, "no refresh pushed");

    // The base moved: the branch is rebased onto it and pushed once, with a lease on the recorded commit.
    post(&base, "push", "main-1", &push(REPO, "refs/heads/main")).await;
    refresh(&app).await;
    let recorded = refreshes(&store, id).await;
    assert_eq!(recorded.len(), 1, "{recorded:#?}");
    let to = remote.branch(id.branch().as_str()).unwrap();
    let main = remote.branch("main").unwrap();
    assert_eq!(recorded[0]["from"], json!(sha));
    assert_eq!(recorded[0]["to"], json!(to));
    assert_eq!(recorded[0]["base"], json!(main));
    assert_eq!(recorded[0]["strategy"], json!("rebase"));
    let both = shared(&[(2, "line 2 by a teammate"), (25, "line 25 by the agent")]);
    assert_eq!(
        remote.show(id.branch().as_str(), "shared.txt").as_deref(),
        Some(both.as_str())
    );
    let pushed = pushes(&remote, &branch);
    assert_eq!(
        pushed,
        [format!("{branch} {sha}"), format!("{branch} {to}")]
    );

    // Told again (a redelivery, a second push with nothing new): current, nothing pushed, nothing recorded.
    post(&base, "push", "main-1", &push(REPO, "refs/heads/main")).await;
    post(&base, "push", "main-2", &push(REPO, "refs/heads/main")).await;
    refresh(&app).await;
    assert_eq!(refreshes(&store, id).await.len(), 1);
    assert_eq!(pushes(&remote, &branch).len(), 2);

    // The old head's check counts no more; the refreshed head's does, and that head is merged, once.
    fake.set_head(REPO, number, &to);
    post(
        &base,
        "check_run",
        "ci-old",
        &check_run(REPO, id, &sha, "ci", "success"),
    )
    .await;
    settle(&app).await;
    assert!(
        fake.merge_calls().is_empty(),
        "merged on the old head's check"
    );
    post(
        &base,
        "check_run",
        "ci-new",
        &check_run(REPO, id, &to, "ci", "success"),
    )
    .await;
    settle(&app).await;
    let calls = fake.merge_calls();
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert_eq!(calls[0].body["sha"], json!(to));
    let row = board::row_in(&store, id).await.unwrap();
    assert!(!row.needs_human, "no person involved: {row:?}");

    // Merged: done, and its branch, at the refreshed head pidevops pushed, deleted once.
    fake.set_branch(REPO, id.branch().as_str(), &to);
    post(&base, "pull_request", "merged", &merged(id, number)).await;
    settle(&app).await;
    assert_eq!(
        board::row_in(&store, id).await.unwrap().column,
        Column::Done
    );
    assert_eq!(fake.delete_ref_calls().len(), 1);
    assert!(!fake.has_branch(REPO, id.branch().as_str()));
}

async fn a_conflict_flags_the_task_with_its_files_and_a_persons_push_is_never_overwritten(
    db: TestDb,
) {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    record_pushes(&remote);
    let scratch = tempfile::tempdir().unwrap();
    let script = "sed -i 's/^line 25$/line 25 by the agent/' shared.txt; date +%s%N > \"note-$(date +%s%N).md\"";
    let app = app(
        &db,
        &fake,
        file(&remote, scratch.path(), script),
        scratch.path(),
    )
    .await;
    let (base, store) = (app.url(""), app.state.log.store().clone());
    let first = create_task(&base, REPO).await;
    let (_, first_sha) = in_review(&store, first, 1).await;

    // A teammate changed the same line: the refresh conflicts and an agent gets it; this one leaves the markers
    // (its edit of line 25 finds no such line), so its resolution is refused and the task flagged with the file.
    remote.commit_to_main("shared.txt", &shared(&[(25, "line 25 by a teammate")]));
    post(&base, "push", "main-1", &push(REPO, "refs/heads/main")).await;
    refresh(&app).await;
    within(
        std::time::Duration::from_secs(90),
        "the conflict attempt refused",
        || async {
            board::row_in(&store, first)
                .await
                .is_some_and(|r| r.needs_human)
        },
    )
    .await;
    let row = board::row_in(&store, first).await.unwrap();
    let flag = row.needs_human_reason.clone().expect("flagged");
    assert!(
        flag.contains("conflicts") && flag.contains("shared.txt"),
        "{flag}"
    );
    assert!(
        flag.contains("markers") && flag.contains("left in shared.txt"),
        "{flag}"
    );
    assert_eq!(row.attempts, 2, "the conflict attempt");
    assert_eq!(
        row.behind.as_deref(),
        Some("base_moved"),
        "nothing brought it up to date: the board still marks it"
    );
    assert_eq!(
        row.max_attempts, 4,
        "given, not taken from the work's budget"
    );
    assert_eq!(row.column, Column::InReview);
    assert_eq!(remote.branch(first.branch().as_str()), Some(first_sha));
    assert!(refreshes(&store, first).await.is_empty());
    let first_branch = format!("refs/heads/{}", first.branch());
    assert_eq!(
        pushes(&remote, &first_branch).len(),
        1,
        "only the attempt's"
    );

    // A second task whose branch a person pushed to after pidevops: the lease refuses, the person's push stays.
    let second = create_task(&base, REPO).await;
    let (_, second_sha) = in_review(&store, second, 1).await;
    let clone = remote.dir.path().join("person");
    git(
        remote.dir.path(),
        &["clone", "--quiet", "remote.git", clone.to_str().unwrap()],
    );
    git(&clone, &["checkout", "--quiet", second.branch().as_str()]);
    std::fs::write(clone.join("theirs.txt"), "a person's change\n").unwrap();
    git(&clone, &["add", "."]);
    git(&clone, &["commit", "--quiet", "-m", "a person's change"]);
    git(
        &clone,
        &["push", "--quiet", "origin", second.branch().as_str()],
    );
    let theirs = remote.branch(second.branch().as_str()).unwrap();
    assert_ne!(theirs, second_sha);
    remote.commit_to_main("elsewhere.txt", "apart\n");
    post(&base, "push", "main-2", &push(REPO, "refs/heads/main")).await;
    refresh(&app).await;
    let row = board::row_in(&store, second).await.unwrap();
    let flag = row.needs_human_reason.clone().expect("flagged");
    assert!(flag.contains("someone else pushed"), "{flag}");
    assert_eq!(remote.branch(second.branch().as_str()), Some(theirs));
    assert!(refreshes(&store, second).await.is_empty());

    // A third whose branch a person deleted: flagged, never pushed again, and the loop goes on (not stuck on it).
    let third = create_task(&base, REPO).await;
    in_review(&store, third, 1).await;
    git(
        &clone,
        &[
            "push",
            "--quiet",
            "origin",
            "--delete",
            third.branch().as_str(),
        ],
    );
    remote.commit_to_main("later.txt", "apart\n");
    post(&base, "push", "main-3", &push(REPO, "refs/heads/main")).await;
    refresh(&app).await;
    let row = board::row_in(&store, third).await.unwrap();
    let flag = row.needs_human_reason.clone().expect("flagged");
    assert!(flag.contains("is gone"), "{flag}");
    assert_eq!(remote.branch(third.branch().as_str()), None);
}

/// The real binary, SIGKILLed by the remote the moment its refresh's push lands (before `task.refreshed`), and the
/// base moved again while it was down: the restarted serve finds its own push by the intent it recorded, records
/// it, and refreshes once more onto the new base; nothing is pushed twice and no person is asked.
async fn sigkill_between_a_refreshs_push_and_its_record_pushes_once_and_records_it(db: TestDb) {
    use std::time::Duration;
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    let scratch = tempfile::tempdir().unwrap();
    let script = "sed -i 's/^line 25$/line 25 by the agent/' shared.txt";
    let table = file(&remote, scratch.path(), script);
    let serve = Serve::new(&db, &fake.url, scratch.path(), &table);
    let store = &EventStore::connect(&db.url, 4).await.unwrap();
    let mut first = serve.start().await;
    let id = create_task(&first.base, REPO).await;
    let (_, sha) = in_review(store, id, 1).await;
    let branch = format!("refs/heads/{}", id.branch());

    // The remote records each push and, once armed, SIGKILLs serve as soon as the branch's update is in.
    kill_on_push(&remote, &first, &branch);

    remote.commit_to_main("shared.txt", &shared(&[(2, "line 2 by a teammate")]));
    post(
        &first.base,
        "push",
        "main-1",
        &push(REPO, "refs/heads/main"),
    )
    .await;
    killed(&mut first, "the refresh's push").await;
    let killed_at = remote.branch(id.branch().as_str()).unwrap();
    assert_ne!(killed_at, sha, "the push landed before the kill");
    assert!(
        refreshes(store, id).await.is_empty(),
        "cut off before its record"
    );

    // While serve is down the base moves again; the restarted serve handles both pushes.
    remote.commit_to_main("elsewhere.txt", "apart\n");
    let second = serve.start().await;
    post(
        &second.base,
        "push",
        "main-2",
        &push(REPO, "refs/heads/main"),
    )
    .await;
    within(
        Duration::from_secs(90),
        "both refreshes recorded",
        || async { refreshes(store, id).await.len() == 2 },
    )
    .await;
    let recorded = refreshes(store, id).await;
    assert_eq!(recorded[0]["from"], json!(sha));
    assert_eq!(
        recorded[0]["to"],
        json!(killed_at),
        "its own push, found and recorded"
    );
    let now = remote.branch(id.branch().as_str()).unwrap();
    assert_eq!(recorded[1]["from"], json!(killed_at));
    assert_eq!(recorded[1]["to"], json!(now));
    assert_eq!(recorded[1]["base"], json!(remote.branch("main").unwrap()));
    let pushed = pushes(&remote, &branch);
    assert_eq!(
        pushed,
        [format!("{branch} {killed_at}"), format!("{branch} {now}")],
        "each refresh pushed once"
    );
    let row = board::row_in(store, id).await.unwrap();
    assert!(!row.needs_human, "{row:?}");
    assert_eq!(row.column, Column::InReview);
    drop(second);
}

/// The log's `refresh.base_moved` marks, as (task, position).
async fn base_moved_marks(store: &EventStore) -> Vec<(String, i64)> {
    store
        .read_after(0, 100_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.event_type == "refresh.base_moved")
        .map(|e| {
            (
                e.dedup_key.split(':').nth(1).unwrap().to_owned(),
                e.position,
            )
        })
        .collect()
}

/// The log position of each of `ids`' `task.refreshed` events.
async fn refreshed_at(store: &EventStore, ids: &[TaskId]) -> Vec<i64> {
    let mut at = Vec::new();
    for id in ids {
        let stream = store.read_stream(&format!("task:{id}")).await.unwrap();
        at.extend(
            stream
                .iter()
                .filter(|e| e.event_type == "task.refreshed")
                .map(|e| e.position),
        );
    }
    at
}

/// A push to the base marks every task the refresh loop will refresh as possibly behind, all of them before the
/// first is refreshed (they are refreshed one at a time, and the board shows the ones waiting), and each mark ends
/// with its own refresh: a push, or the branch found current already (`refresh.current`).
async fn a_base_push_marks_each_task_behind_before_any_refresh_and_each_mark_ends_with_its_refresh(
    db: TestDb,
) {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    let scratch = tempfile::tempdir().unwrap();
    let script = "date +%s%N > \"note-$(date +%s%N).md\"";
    let app = app(
        &db,
        &fake,
        file(&remote, scratch.path(), script),
        scratch.path(),
    )
    .await;
    let (base, store) = (app.url(""), app.state.log.store().clone());
    let first = create_task(&base, REPO).await;
    in_review(&store, first, 1).await;
    let second = create_task(&base, REPO).await;
    in_review(&store, second, 1).await;

    remote.commit_to_main("shared.txt", &shared(&[(2, "line 2 by a teammate")]));
    let mut main_1 = push(REPO, "refs/heads/main");
    main_1["after"] = json!("a".repeat(40));
    post(&base, "push", "main-1", &main_1).await;
    refresh(&app).await;
    let marks = base_moved_marks(&store).await;
    let marked: Vec<&str> = marks.iter().map(|(task, _)| task.as_str()).collect();
    assert_eq!(marked, [first.to_string(), second.to_string()], "{marks:?}");
    let refreshed = refreshed_at(&store, &[first, second]).await;
    assert_eq!(refreshed.len(), 2, "each refreshed once");
    let last_mark = marks.iter().map(|(_, at)| *at).max().unwrap();
    assert!(
        refreshed.iter().all(|at| *at > last_mark),
        "every mark before the first refresh: marks {marks:?}, refreshes {refreshed:?}"
    );
    for id in [first, second] {
        let row = board::row_in(&store, id).await.unwrap();
        assert_eq!(row.behind, None, "its refresh ended the mark: {row:?}");
    }

    // The same push told again marks nothing more; a new one on a base they hold already marks each, finds each
    // current, and that ends each mark.
    post(&base, "push", "main-1-again", &main_1).await;
    refresh(&app).await;
    assert_eq!(base_moved_marks(&store).await.len(), 2);
    let mut next = push(REPO, "refs/heads/main");
    next["after"] = json!("f".repeat(40));
    post(&base, "push", "main-2", &next).await;
    refresh(&app).await;
    assert_eq!(base_moved_marks(&store).await.len(), 4);
    assert_eq!(
        refreshed_at(&store, &[first, second]).await.len(),
        2,
        "nothing pushed again"
    );
    for id in [first, second] {
        let row = board::row_in(&store, id).await.unwrap();
        assert_eq!(row.behind, None, "found current: {row:?}");
    }
}
