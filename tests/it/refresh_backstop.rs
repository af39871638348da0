//! The refresh loop's backstop and its strangers, through the real app, real git and the fake GitHub: a base push
//! whose webhook was lost is caught by the GitHub poller (it reads the base branch's head) and refreshes the
//! task once; the webhook and the poller reporting the same head refresh it once. A push webhook that lies about
//! the base (the remote did not move) and a fork's pull request named like pidevops's branch move nothing. A pull
//! request GitHub finds `behind` (its `mergeable_state`) is refreshed; one it finds `dirty` flags its conflict, and
//! GitHub (the fake, as GitHub does) refuses to merge it. One GitHub finds `behind` while its branch holds the
//! base already (GitHub's word was stale) is recorded current, and the board's mark goes; one on a repository whose
//! `refresh` is `"off"` is marked on the board and never refreshed.
//! Per backend.

use pidevops::domain::Source;
use pidevops::eventlog::EventStore;
use pidevops::tasks::{Column, TaskId};
use serde_json::{json, Value};

use crate::common::agents::{Remote, REPO};
use crate::common::{board, within, TestApp, TestDb};
use crate::land::{app, create_task, in_review, post, settle};
use crate::providers::github::fake::FakeGithub;
use crate::providers::github::gh_fixture as fixture;
use crate::refresh::{file, push, pushes, record_pushes, refresh, refreshes, shared};

per_backend!(
    a_lost_base_push_is_caught_by_the_poller_and_a_head_told_twice_is_refreshed_once,
    a_lying_base_push_and_a_forks_pull_request_named_like_ours_move_nothing,
    a_pull_request_github_finds_behind_is_refreshed_and_one_it_finds_dirty_flags_its_conflict,
    a_pull_request_github_finds_behind_while_current_is_recorded_current_and_not_marked,
    a_pull_request_behind_on_a_repository_that_does_not_refresh_is_marked_and_never_refreshed,
);

const SCRIPT: &str = "sed -i 's/^line 25$/line 25 by the agent/' shared.txt";

/// One task in review on `REPO` whose pull request's head the fake GitHub knows, its branch
/// (`refs/heads/…`), and the app running on the test's file as `edit` leaves it.
struct Rig {
    fake: FakeGithub,
    remote: Remote,
    scratch: tempfile::TempDir,
    app: TestApp,
    base: String,
    store: EventStore,
    id: TaskId,
    number: u64,
    sha: String,
    branch: String,
}

async fn rig(db: &TestDb, edit: impl FnOnce(&mut toml::Table)) -> Rig {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    record_pushes(&remote);
    let scratch = tempfile::tempdir().unwrap();
    let mut file = file(&remote, scratch.path(), SCRIPT);
    edit(&mut file);
    let app = app(db, &fake, file, scratch.path()).await;
    let (base, store) = (app.url(""), app.state.log.store().clone());
    let id = create_task(&base, REPO).await;
    let (number, sha) = in_review(&store, id, 1).await;
    fake.set_head(REPO, number, &sha);
    let branch = format!("refs/heads/{}", id.branch());
    Rig {
        fake,
        remote,
        scratch,
        app,
        base,
        store,
        id,
        number,
        sha,
        branch,
    }
}

/// A GitHub `push` of `repo`'s main whose new head is `after`.
fn base_push(repo: &str, after: &str) -> Value {
    let mut body = push(repo, "refs/heads/main");
    body["after"] = json!(after);
    body
}

async fn a_lost_base_push_is_caught_by_the_poller_and_a_head_told_twice_is_refreshed_once(
    db: TestDb,
) {
    let Rig {
        fake,
        remote,
        scratch,
        app,
        base,
        store,
        id,
        number: _,
        sha,
        branch,
    } = rig(&db, |_| {}).await;
    fake.set_branch(REPO, "main", &remote.branch("main").unwrap());
    // The base where the task started: the poller's first look finds the branch current, nothing pushed.
    app.drive("github_poller").await;
    refresh(&app).await;
    assert!(refreshes(&store, id).await.is_empty());
    assert_eq!(pushes(&remote, &branch).len(), 1, "the attempt's push");

    // The base moves and its webhook is lost: the poller reads the new head and the task is refreshed onto it.
    remote.commit_to_main("shared.txt", &shared(&[(2, "line 2 by a teammate")]));
    let main_1 = remote.branch("main").unwrap();
    fake.set_branch(REPO, "main", &main_1);
    app.drive("github_poller").await;
    refresh(&app).await;
    let recorded = refreshes(&store, id).await;
    assert_eq!(recorded.len(), 1, "{recorded:#?}");
    assert_eq!(recorded[0]["from"], json!(sha));
    assert_eq!(recorded[0]["base"], json!(main_1));
    assert_eq!(pushes(&remote, &branch).len(), 2);
    // The task page lists the refresh: from → to, onto which base, how, and GitHub's comparison of the two.
    let to = recorded[0]["to"].as_str().unwrap().to_owned();
    let cookie = crate::web::sign_in(&app).await;
    let (status, page) = crate::web::get(&app, &format!("/tasks/{id}"), &cookie).await;
    assert_eq!(status, 200);
    let section = &page[page
        .find("<h2>Refreshes</h2>")
        .expect("a Refreshes section")..];
    for shown in [
        format!("<code>{}</code> → <code>{}</code>", &sha[..7], &to[..7]),
        format!("<td><code>{}</code></td><td>rebase</td>", &main_1[..7]),
        format!("https://github.com/{REPO}/compare/{sha}...{to}"),
        // A clean rebase: its outcome, and what it changed on the pull request's own diff (nothing), inline.
        "<tr data-outcome=\"refreshed\"><td>".to_owned(),
        "<td class=\"outcome\">refreshed</td>".to_owned(),
        "No change to the pull request".to_owned(),
    ] {
        assert!(section.contains(&shown), "{shown} in {section}");
    }
    // Its recorded diff gone (made on another machine, say): the row says so, the page still answers.
    std::fs::remove_dir_all(scratch.path().join("ws/refresh-diffs")).unwrap();
    let (status, page) = crate::web::get(&app, &format!("/tasks/{id}"), &cookie).await;
    assert_eq!(status, 200);
    let missing = format!("No diff of {} is recorded on this machine", &to[..7]);
    assert!(page.contains(&missing), "{missing} in {page}");
    // The base moves and its webhook comes and is handled: the poller appends nothing for that head.
    remote.commit_to_main("elsewhere.txt", "apart\n");
    let main_2 = remote.branch("main").unwrap();
    fake.set_branch(REPO, "main", &main_2);
    post(&base, "push", "main-2", &base_push(REPO, &main_2)).await;
    refresh(&app).await;
    app.drive("github_poller").await;
    let key = format!("poll:push:{REPO}:main:{main_2}");
    assert_eq!(store.count_by_key(Source::Github, &key).await.unwrap(), 0);
    assert_eq!(refreshes(&store, id).await.len(), 2);
    assert_eq!(pushes(&remote, &branch).len(), 3);

    // The base moves and both tell of it, the poller first: the head is refreshed once, pushed once.
    remote.commit_to_main("later.txt", "apart\n");
    let main_3 = remote.branch("main").unwrap();
    fake.set_branch(REPO, "main", &main_3);
    app.drive("github_poller").await;
    post(&base, "push", "main-3", &base_push(REPO, &main_3)).await;
    refresh(&app).await;
    let key = format!("poll:push:{REPO}:main:{main_3}");
    assert_eq!(store.count_by_key(Source::Github, &key).await.unwrap(), 1);
    let handled = format!("refresh-base:{REPO}:main:{main_3}");
    assert_eq!(
        store
            .count_by_key(Source::Pidevops, &handled)
            .await
            .unwrap(),
        1
    );
    let recorded = refreshes(&store, id).await;
    assert_eq!(recorded.len(), 3, "{recorded:#?}");
    assert_eq!(recorded[2]["base"], json!(main_3));
    assert_eq!(pushes(&remote, &branch).len(), 4, "one push per head");
    // Either report handled again (a replay, a lost checkpoint) is a repeat: no refresh runs, not even one that
    // would find the branch current.
    let again = pidevops::landing::refresh::Refresher::new(
        app.state.log.clone(),
        app.state.lander.clone(),
        false,
    );
    let webhook = store
        .find_by_key(Source::Github, "main-3")
        .await
        .unwrap()
        .unwrap();
    let polled = store
        .find_by_key(Source::Github, &key)
        .await
        .unwrap()
        .unwrap();
    let mut tally = pidevops::landing::refresh::RefreshProgress::default();
    for event in [&webhook, &polled] {
        pidevops::loops::follow::Follower::handle(&again, event, &mut tally)
            .await
            .unwrap();
    }
    assert_eq!((tally.current, tally.refreshed, tally.repeated), (0, 0, 2));
    let row = board::row_in(&store, id).await.unwrap();
    assert!(!row.needs_human, "{row:?}");
}

async fn a_lying_base_push_and_a_forks_pull_request_named_like_ours_move_nothing(db: TestDb) {
    let Rig {
        fake,
        remote,
        scratch: _scratch,
        app,
        base,
        store,
        id,
        number,
        sha,
        branch,
    } = rig(&db, |_| {}).await;
    let before = board::row_in(&store, id).await.unwrap();

    // A push of the configured base whose payload lies (a new head, commits): the remote did not move.
    let mut lie = base_push(REPO, &"b".repeat(40));
    lie["head_commit"]["id"] = json!("b".repeat(40));
    lie["head_commit"]["message"] = json!("trust me");
    post(&base, "push", "lie", &lie).await;
    // A push of a branch named like the base in another repository.
    post(
        &base,
        "push",
        "elsewhere",
        &base_push("stranger/app", &"c".repeat(40)),
    )
    .await;
    // A fork's pull request from a branch named like pidevops's, on the repository, numbered apart from the
    // task's and as the task's own: opened, updated, then closed as merged.
    for n in [number + 50, number] {
        for action in ["opened", "synchronize", "closed"] {
            let mut fork = fixture("pull_request/opened.payload.json");
            fork["action"] = json!(action);
            let pr = &mut fork["pull_request"];
            pr["number"] = json!(n);
            pr["head"]["ref"] = json!(id.branch().as_str());
            pr["head"]["sha"] = json!("d".repeat(40));
            pr["head"]["repo"]["full_name"] = json!("stranger/app");
            pr["base"]["repo"]["full_name"] = json!(REPO);
            if action == "closed" {
                pr["state"] = json!("closed");
                pr["merged"] = json!(true);
            }
            fork["repository"]["full_name"] = json!(REPO);
            post(&base, "pull_request", &format!("fork-{n}-{action}"), &fork).await;
        }
    }
    refresh(&app).await;
    settle(&app).await;

    assert!(refreshes(&store, id).await.is_empty());
    assert_eq!(pushes(&remote, &branch).len(), 1, "only the attempt's push");
    assert_eq!(remote.branch(id.branch().as_str()), Some(sha));
    assert!(fake.merge_calls().is_empty());
    let row = board::row_in(&store, id).await.unwrap();
    assert_eq!(row.column, Column::InReview);
    assert!(!row.needs_human, "{row:?}");
    assert_eq!(row.version, before.version, "the task is untouched");
}

/// Whether task `id`'s card on the board, and its page, are marked behind its base.
async fn behind(
    app: &crate::common::TestApp,
    id: pidevops::tasks::TaskId,
    cookie: &str,
) -> (bool, bool) {
    let (status, board) = crate::web::get(app, "/", cookie).await;
    assert_eq!(status, 200);
    let card = &board[board
        .find(&format!("data-task=\"{id}\""))
        .unwrap_or_else(|| panic!("{id} on the board: {board}"))..];
    let card = &card[..card.find("</article>").unwrap_or(card.len())];
    let (status, page) = crate::web::get(app, &format!("/tasks/{id}"), cookie).await;
    assert_eq!(status, 200);
    (
        card.contains("data-behind=\"1\""),
        page.contains("data-behind=\"1\""),
    )
}

async fn a_pull_request_github_finds_behind_is_refreshed_and_one_it_finds_dirty_flags_its_conflict(
    db: TestDb,
) {
    let Rig {
        fake,
        remote,
        scratch: _scratch,
        app,
        base: _,
        store,
        id,
        number,
        sha,
        branch,
    } = rig(&db, |_| {}).await;
    // The base moves; neither its webhook nor the base's head on GitHub (the fake has no main) tells of it.
    remote.commit_to_main("shared.txt", &shared(&[(2, "line 2 by a teammate")]));

    // What GitHub says that asks for nothing: clean, blocked, unknown.
    for state in ["clean", "blocked", "unknown"] {
        fake.set_mergeable_state(REPO, number, state);
        app.drive("github_poller").await;
        refresh(&app).await;
    }
    assert!(refreshes(&store, id).await.is_empty());
    assert_eq!(pushes(&remote, &branch).len(), 1);

    // Behind: the task is refreshed onto the base, once, however often the poller reads it.
    fake.set_mergeable_state(REPO, number, "behind");
    app.drive("github_poller").await;
    app.drive("github_poller").await;
    refresh(&app).await;
    let recorded = refreshes(&store, id).await;
    assert_eq!(recorded.len(), 1, "{recorded:#?}");
    assert_eq!(recorded[0]["base"], json!(remote.branch("main").unwrap()));
    let to = remote.branch(id.branch().as_str()).unwrap();
    assert_eq!(pushes(&remote, &branch).len(), 2);
    let due = format!("refresh-due:{id}:{sha}:behind");
    assert_eq!(store.count_by_key(Source::Pidevops, &due).await.unwrap(), 1);
    // GitHub found it behind (`refresh.due`), and the refresh landed since: the board does not mark it behind.
    let cookie = crate::web::sign_in(&app).await;
    app.project().await;
    assert_eq!(behind(&app, id, &cookie).await, (false, false));

    // A teammate changes the agent's line; GitHub finds the refreshed head dirty: the refresh conflicts and an
    // agent gets it, which leaves the markers (its edit finds no such line), so the task is flagged with the
    // file, nothing pushed; and GitHub refuses to merge it (405), as it refuses a sha that is not the head (409).
    remote.commit_to_main(
        "shared.txt",
        &shared(&[(2, "line 2 by a teammate"), (25, "line 25 by a teammate")]),
    );
    fake.set_head(REPO, number, &to);
    fake.set_mergeable_state(REPO, number, "dirty");
    app.drive("github_poller").await;
    refresh(&app).await;
    within(
        std::time::Duration::from_secs(90),
        "the conflict attempt refused",
        || async {
            board::row_in(&store, id)
                .await
                .is_some_and(|r| r.needs_human)
        },
    )
    .await;
    let row = board::row_in(&store, id).await.unwrap();
    let flag = row.needs_human_reason.clone().expect("flagged");
    assert!(
        flag.contains("conflicts") && flag.contains("shared.txt"),
        "{flag}"
    );
    assert_eq!(refreshes(&store, id).await.len(), 1);
    assert_eq!(pushes(&remote, &branch).len(), 2);
    // Back in review on a head GitHub finds dirty, not refreshed since: the board and its page mark it behind.
    app.project().await;
    assert_eq!(behind(&app, id, &cookie).await, (true, true));
    let merge = |sha: String| {
        let url = format!("{}/repos/{REPO}/pulls/{number}/merge", fake.url);
        async move {
            let answer = reqwest::Client::new()
                .put(url)
                .json(&json!({ "sha": sha }))
                .send()
                .await
                .unwrap();
            let status = answer.status().as_u16();
            let body: Value = answer.json().await.unwrap();
            (
                status,
                body["message"].as_str().unwrap_or_default().to_owned(),
            )
        }
    };
    assert_eq!(
        merge(to.clone()).await,
        (405, "Pull Request is not mergeable".to_owned())
    );
    fake.set_mergeable_state(REPO, number, "clean");
    assert_eq!(
        merge(sha.clone()).await,
        (
            409,
            "Head branch was modified. Review and try the merge again.".to_owned()
        )
    );
}

async fn a_pull_request_github_finds_behind_while_current_is_recorded_current_and_not_marked(
    db: TestDb,
) {
    let Rig {
        fake,
        remote,
        scratch: _scratch,
        app,
        base: _,
        store,
        id,
        number,
        sha,
        branch,
    } = rig(&db, |_| {}).await;
    // GitHub says behind, but the base has not moved: the branch holds it already.
    fake.set_mergeable_state(REPO, number, "behind");
    app.drive("github_poller").await;
    refresh(&app).await;
    let due = format!("refresh-due:{id}:{sha}:behind");
    assert_eq!(store.count_by_key(Source::Pidevops, &due).await.unwrap(), 1);
    let main = remote.branch("main").unwrap();
    let current = format!("refresh-current:{id}:{sha}:{main}");
    assert_eq!(
        store
            .count_by_key(Source::Pidevops, &current)
            .await
            .unwrap(),
        1
    );
    assert!(refreshes(&store, id).await.is_empty());
    assert_eq!(pushes(&remote, &branch).len(), 1, "only the attempt's push");
    // The poller reads the same stale word again: nothing new, and the board does not mark it behind.
    app.drive("github_poller").await;
    refresh(&app).await;
    assert_eq!(store.count_by_key(Source::Pidevops, &due).await.unwrap(), 1);
    let cookie = crate::web::sign_in(&app).await;
    app.project().await;
    assert_eq!(behind(&app, id, &cookie).await, (false, false));
}

async fn a_pull_request_behind_on_a_repository_that_does_not_refresh_is_marked_and_never_refreshed(
    db: TestDb,
) {
    // Another repository refreshes: the refresh loop runs, and leaves `REPO` alone.
    let other = Remote::new();
    other.commit_to_main("README.md", "other\n");
    let Rig {
        fake,
        remote,
        scratch: _scratch,
        app,
        base: _,
        store,
        id,
        number,
        sha,
        branch,
    } = rig(&db, |file| {
        let repos = file["repos"].as_table_mut().unwrap();
        let mut refreshed = repos[REPO].as_table().unwrap().clone();
        refreshed.insert("url".into(), other.url().into());
        repos.insert("acme/other".into(), refreshed.into());
        repos[REPO]
            .as_table_mut()
            .unwrap()
            .insert("refresh".into(), "off".into());
    })
    .await;
    // The base moves (a refresh would push), and GitHub finds the pull request behind it, then in conflict.
    remote.commit_to_main("shared.txt", &shared(&[(2, "line 2 by a teammate")]));
    fake.set_branch(REPO, "main", &remote.branch("main").unwrap());
    let cookie = crate::web::sign_in(&app).await;
    for state in ["behind", "dirty"] {
        fake.set_mergeable_state(REPO, number, state);
        app.drive("github_poller").await;
        refresh(&app).await;
        let due = format!("refresh-due:{id}:{sha}:{state}");
        assert_eq!(store.count_by_key(Source::Pidevops, &due).await.unwrap(), 1);
        // Marked for a person, on the board and the task page; nothing refreshed, nothing pushed.
        app.project().await;
        assert_eq!(behind(&app, id, &cookie).await, (true, true), "{state}");
        assert!(refreshes(&store, id).await.is_empty());
        assert_eq!(pushes(&remote, &branch).len(), 1, "only the attempt's push");
    }
    // A person brings the pull request up to date by hand. GitHub's `blocked` may hide `behind`: the mark stays.
    // Then `clean` (told twice): the mark goes, and pidevops still refreshed and pushed nothing.
    fake.set_head(REPO, number, "1234567890abcdef1234567890abcdef12345678");
    fake.set_mergeable_state(REPO, number, "blocked");
    app.drive("github_poller").await;
    app.project().await;
    assert_eq!(behind(&app, id, &cookie).await, (true, true), "blocked");
    fake.set_mergeable_state(REPO, number, "clean");
    for _ in 0..2 {
        app.drive("github_poller").await;
        app.project().await;
        assert_eq!(behind(&app, id, &cookie).await, (false, false), "clean");
    }
    assert!(refreshes(&store, id).await.is_empty());
    assert_eq!(pushes(&remote, &branch).len(), 1, "only the attempt's push");
    let key = format!("poll:push:{REPO}:main:{}", remote.branch("main").unwrap());
    assert_eq!(store.count_by_key(Source::Github, &key).await.unwrap(), 0);
    let row = board::row_in(&store, id).await.unwrap();
    assert_eq!(row.column, Column::InReview);
    assert!(!row.needs_human, "{row:?}");
}
