//! Landing without GitHub (`POST /api/tasks/{id}/land`, the task page's Land button, `land = "auto"` on a local
//! remote), end to end: a real agent run pushes `pidevops/<task>` to a local bare repository, and pidevops's own
//! git merges the commit it recorded into `main` there: a fast-forward, a merge commit naming the task when `main`
//! moved, a conflict refused with nothing pushed, the button refused without its CSRF token, a second request (or
//! a base that holds the commit already, as after a crash between the push and its record) landing nothing twice,
//! a GitHub repository refused; `pidevops/<task>` deleted once landed, leased on the recorded commit, and kept
//! when someone pushed to it or the repository says `delete_branch = false`. Per backend.

use std::time::Duration;

use crate::common::agents::{agent, dispatch_file, Remote, REPO};
use crate::common::board;
use crate::common::dispatching::Rig;
use crate::common::{within, TestApp, TestDb, ADMIN_TOKEN};
use crate::dispatch::{create_task, in_review};
use pidevops::tasks::{Column, TaskId};
use serde_json::Value;

per_backend!(
    a_task_in_review_lands_by_fast_forward_and_a_second_request_lands_nothing,
    when_main_moved_a_merge_commit_naming_the_task_is_pushed,
    a_conflict_is_refused_nothing_is_pushed_and_the_task_stays_in_review,
    a_base_that_holds_the_commit_already_is_recorded_without_a_push,
    land_auto_lands_a_task_once_it_reaches_review,
    a_github_repository_is_refused,
    the_task_pages_land_button_needs_the_csrf_token_and_lands_it,
    a_base_moved_under_the_push_is_never_overwritten_and_the_landing_starts_again_from_it,
    a_landing_that_hangs_is_stopped_records_nothing_and_the_next_one_lands,
    a_branch_someone_pushed_to_is_kept_and_delete_branch_false_keeps_it,
);

/// An app dispatching to a local remote with an agent that writes CHANGES.md; `land` sets the repository's `land`.
async fn app_with(db: &TestDb, land: Option<&str>) -> (TestApp, Rig) {
    let mut app = TestApp::with_agent("edits.sh", r#"printf 'done by the agent\n' > CHANGES.md"#);
    if let Some(land) = land {
        app = app.config(&format!("repos.\"{REPO}\".land = \"{land}\""));
    }
    app.spawn(db).await
}

async fn land(app: &TestApp, id: TaskId) -> (u16, Value) {
    let response = app
        .client
        .post(app.url(&format!("/api/tasks/{id}/land")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// `git` in the remote, its output.
fn in_remote(remote: &Remote, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(remote.dir.path().join("remote.git"))
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The event types of `id`'s stream, in order.
async fn task_events(app: &TestApp, id: TaskId) -> Vec<String> {
    app.all_events()
        .await
        .into_iter()
        .filter(|e| e.stream.as_deref() == Some(id.stream().as_str()))
        .map(|e| e.event_type)
        .collect()
}

async fn in_review_pushed(app: &TestApp, remote: &Remote, id: TaskId) -> String {
    in_review(app, id).await;
    remote
        .branch(&format!("pidevops/{id}"))
        .expect("the branch is pushed")
}

async fn a_task_in_review_lands_by_fast_forward_and_a_second_request_lands_nothing(db: TestDb) {
    let (app, rig) = app_with(&db, None).await;
    let remote = &rig.remote;
    let id = create_task(&app, "Write the change down").await;
    let pushed = in_review_pushed(&app, remote, id).await;

    let (status, body) = land(&app, id).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["changed"], true);
    assert_eq!(body["pushed"], true);
    assert_eq!(body["task"]["column"], "done");
    assert_eq!(body["onto"], pushed.as_str());
    assert_eq!(remote.branch("main").as_deref(), Some(pushed.as_str()));
    assert_eq!(
        remote.show("main", "CHANGES.md").as_deref(),
        Some("done by the agent\n")
    );
    assert_eq!(
        remote.branch(&format!("pidevops/{id}")),
        None,
        "the landed branch is deleted"
    );

    // Again: nothing more is merged, pushed or recorded.
    let (status, again) = land(&app, id).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["changed"], false);
    assert_eq!(again["pushed"], false);
    assert_eq!(remote.branch("main").as_deref(), Some(pushed.as_str()));
    let events = task_events(&app, id).await;
    assert_eq!(
        events.iter().filter(|e| *e == "task.landed").count(),
        1,
        "{events:?}"
    );
    assert_eq!(events.last().map(String::as_str), Some("task.completed"));
    app.project().await;
    assert_eq!(board::row_now(&app, id).await.unwrap().column, Column::Done);
}

async fn when_main_moved_a_merge_commit_naming_the_task_is_pushed(db: TestDb) {
    let (app, rig) = app_with(&db, None).await;
    let remote = &rig.remote;
    let id = create_task(&app, "Write the change down").await;
    let pushed = in_review_pushed(&app, remote, id).await;
    remote.commit_to_main("OTHER.md", "a teammate's change\n");
    let moved = remote.branch("main").unwrap();

    let (status, body) = land(&app, id).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["pushed"], true);
    let main = remote.branch("main").unwrap();
    assert_eq!(body["onto"], main.as_str());
    let parents = in_remote(remote, &["rev-list", "--parents", "-n", "1", &main]);
    assert_eq!(parents, format!("{main} {moved} {pushed}"));
    let message = in_remote(remote, &["log", "-1", "--format=%s%n%b", &main]);
    assert!(message.starts_with(&format!("Land {id}")), "{message}");
    assert!(
        !message.contains("Write the change down"),
        "no ticket text in a commit message: {message}"
    );
    let who = in_remote(remote, &["log", "-1", "--format=%an %ae / %cn", &main]);
    assert_eq!(who, "pidevops pidevops@localhost / pidevops");
    assert_eq!(
        remote.show("main", "OTHER.md").as_deref(),
        Some("a teammate's change\n")
    );
    assert_eq!(
        remote.show("main", "CHANGES.md").as_deref(),
        Some("done by the agent\n")
    );
    assert_eq!(body["task"]["column"], "done");
}

async fn a_conflict_is_refused_nothing_is_pushed_and_the_task_stays_in_review(db: TestDb) {
    let (app, rig) = app_with(&db, None).await;
    let remote = &rig.remote;
    let id = create_task(&app, "Write the change down").await;
    in_review_pushed(&app, remote, id).await;
    remote.commit_to_main("CHANGES.md", "someone else's words\n");
    let before = remote.branch("main").unwrap();

    let (status, body) = land(&app, id).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"], "conflict");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("CHANGES.md") && message.contains("nothing was pushed"),
        "{message}"
    );
    assert_eq!(remote.branch("main").as_deref(), Some(before.as_str()));
    let events = task_events(&app, id).await;
    assert!(!events.iter().any(|e| e == "task.landed"), "{events:?}");
    app.project().await;
    assert_eq!(
        board::row_now(&app, id).await.unwrap().column,
        Column::InReview
    );
    // Nothing of the clean room is left behind.
    let land_dir = rig.scratch.path().join("ws").join("land");
    assert!(
        !land_dir.exists() || std::fs::read_dir(&land_dir).unwrap().next().is_none(),
        "the landing's clean room is removed"
    );
}

async fn a_base_that_holds_the_commit_already_is_recorded_without_a_push(db: TestDb) {
    let (app, rig) = app_with(&db, None).await;
    let remote = &rig.remote;
    let id = create_task(&app, "Write the change down").await;
    let pushed = in_review_pushed(&app, remote, id).await;
    // As if pidevops had pushed and died before recording it.
    in_remote(remote, &["update-ref", "refs/heads/main", &pushed]);

    let (status, body) = land(&app, id).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["changed"], true);
    assert_eq!(body["pushed"], false);
    assert_eq!(body["task"]["column"], "done");
    assert_eq!(remote.branch("main").as_deref(), Some(pushed.as_str()));
}

async fn land_auto_lands_a_task_once_it_reaches_review(db: TestDb) {
    let (app, rig) = app_with(&db, Some("auto")).await;
    let remote = &rig.remote;
    let (_, health) = app.health().await;
    assert_eq!(health["loops"]["land"]["state"], "armed", "{health}");
    let id = create_task(&app, "Write the change down").await;

    within(Duration::from_secs(60), "the task landed", || async {
        app.project().await;
        board::row_now(&app, id)
            .await
            .is_some_and(|row| row.column == Column::Done)
    })
    .await;
    assert_eq!(
        remote.show("main", "CHANGES.md").as_deref(),
        Some("done by the agent\n")
    );
    // Deleted after the landing is recorded: it may come just after the task is done.
    within(
        Duration::from_secs(30),
        "its branch deleted after the landing",
        || async { remote.branch(&format!("pidevops/{id}")).is_none() },
    )
    .await;
    let events = task_events(&app, id).await;
    assert_eq!(
        events.iter().filter(|e| *e == "task.landed").count(),
        1,
        "{events:?}"
    );
}

async fn a_github_repository_is_refused(db: TestDb) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let script = agent(scratch.path(), "idle.sh", "true");
    // Dispatch cannot run here (no GITHUB_TOKEN): the task waits in todo, and landing is refused before its column.
    let mut file = dispatch_file(&remote, &script, "");
    file["repos"][REPO]
        .as_table_mut()
        .unwrap()
        .insert("url".into(), "https://github.com/acme/app.git".into());
    let app = TestApp::dispatching(&db, file, &scratch.path().join("ws")).await;
    let id = create_task(&app, "Write the change down").await;

    let (status, body) = land(&app, id).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"], "on_github");
    assert!(
        body["message"].as_str().unwrap().contains("pull request"),
        "{body}"
    );
}

async fn the_task_pages_land_button_needs_the_csrf_token_and_lands_it(db: TestDb) {
    use crate::web::{client, csrf, get, sign_in};
    let (app, rig) = app_with(&db, None).await;
    let remote = &rig.remote;
    let id = create_task(&app, "Write the change down").await;
    let pushed = in_review_pushed(&app, remote, id).await;
    let before = remote.branch("main").unwrap();
    app.project().await;
    let cookie = sign_in(&app).await;
    let (status, html) = get(&app, &format!("/tasks/{id}"), &cookie).await;
    assert_eq!(status, 200);
    assert!(
        html.contains(&format!("action=\"/tasks/{id}/land\"")),
        "the Land button"
    );
    assert!(
        html.contains("data-action=\"done\""),
        "the Mark done button"
    );
    let url = app.url(&format!("/tasks/{id}/land"));

    let no_token = client()
        .post(&url)
        .header("cookie", &cookie)
        .form(&[("other", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(no_token.status(), 403);
    assert_eq!(remote.branch("main").as_deref(), Some(before.as_str()));

    let token = csrf(&html);
    let landed = client()
        .post(&url)
        .header("cookie", &cookie)
        .form(&[("csrf", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(landed.status(), 303);
    assert_eq!(remote.branch("main").as_deref(), Some(pushed.as_str()));
    app.project().await;
    assert_eq!(board::row_now(&app, id).await.unwrap().column, Column::Done);
    // Done: no Land button any more.
    let (_, html) = get(&app, &format!("/tasks/{id}"), &cookie).await;
    assert!(!html.contains(&format!("action=\"/tasks/{id}/land\"")));
}

async fn a_base_moved_under_the_push_is_never_overwritten_and_the_landing_starts_again_from_it(
    db: TestDb,
) {
    use std::os::unix::fs::PermissionsExt;
    let (app, rig) = app_with(&db, None).await;
    let remote = &rig.remote;
    let id = create_task(&app, "Write the change down").await;
    let pushed = in_review_pushed(&app, remote, id).await;
    // A teammate's commit on main, waiting on a side branch: the remote's hook puts it on main while refusing
    // pidevops's first push, as if the teammate had pushed between pidevops's fetch and its push.
    let seed = remote.dir.path().join("seed");
    crate::common::agents::git(&seed, &["checkout", "--quiet", "-b", "teammate", "main"]);
    std::fs::write(seed.join("OTHER.md"), "a teammate's change\n").unwrap();
    crate::common::agents::git(&seed, &["add", "."]);
    crate::common::agents::git(&seed, &["commit", "--quiet", "-m", "teammate"]);
    crate::common::agents::git(&seed, &["push", "--quiet", "../remote.git", "teammate"]);
    let teammate = remote.branch("teammate").unwrap();
    let hook = remote.dir.path().join("remote.git/hooks/pre-receive");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\ncat >/dev/null\n[ -e moved ] && exit 0\ntouch moved\n\
             env -u GIT_QUARANTINE_PATH git update-ref refs/heads/main {teammate}\nexit 1\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();

    let (status, body) = land(&app, id).await;
    assert_eq!(status, 200, "{body}");
    let main = remote.branch("main").unwrap();
    let parents = in_remote(remote, &["rev-list", "--parents", "-n", "1", &main]);
    assert_eq!(
        parents,
        format!("{main} {teammate} {pushed}"),
        "merged onto the teammate's push, which stays"
    );
    assert_eq!(body["onto"], main.as_str());
}

/// A remote whose push hangs (a pre-receive hook waiting for the test): the landing is stopped at its timeout with
/// its git killed, nothing is recorded, and once the remote answers again the next landing lands it, once.
async fn a_landing_that_hangs_is_stopped_records_nothing_and_the_next_one_lands(db: TestDb) {
    use pidevops::landing::LandError;
    use std::os::unix::fs::PermissionsExt;

    let (app, rig) = app_with(&db, None).await;
    let remote = &rig.remote;
    let id = create_task(&app, "Write the change down").await;
    let pushed = in_review_pushed(&app, remote, id).await;
    let before = remote.branch("main").unwrap();

    // The hook holds the push (for 30 s at most, so code without the timeout fails instead of hanging) and then
    // refuses it, so nothing it held ever reaches the base.
    let signals = rig.scratch.path().join("signals");
    std::fs::create_dir(&signals).unwrap();
    let hook = remote.dir.path().join("remote.git/hooks/pre-receive");
    std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\ncd '{dir}' || exit 1\ntouch entered\nn=0\nwhile [ ! -e release ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done\ntouch left\nexit 1\n",
            dir = signals.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();

    let lander = app
        .state
        .lander
        .clone()
        .with_timeout(Duration::from_secs(2));
    let stopped = lander.land(id, "test").await;
    assert!(
        matches!(stopped, Err(LandError::TimedOut { .. })),
        "{stopped:?}"
    );
    assert!(
        !signals.join("left").exists(),
        "the landing was stopped while the push hung, not after the remote answered"
    );
    let message = stopped.unwrap_err().to_string();
    assert!(
        message.contains("took over 2 s") && message.contains("nothing was recorded"),
        "{message}"
    );
    assert_eq!(remote.branch("main").as_deref(), Some(before.as_str()));
    let events = task_events(&app, id).await;
    assert!(!events.iter().any(|e| e == "task.landed"), "{events:?}");

    // The remote answers again: the next landing lands it, and only once.
    std::fs::write(signals.join("release"), "").unwrap();
    std::fs::remove_file(&hook).unwrap();
    let (status, body) = land(&app, id).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["task"]["column"], "done");
    assert_eq!(remote.branch("main").as_deref(), Some(pushed.as_str()));
    let events = task_events(&app, id).await;
    assert_eq!(
        events.iter().filter(|e| *e == "task.landed").count(),
        1,
        "{events:?}"
    );
}

async fn a_branch_someone_pushed_to_is_kept_and_delete_branch_false_keeps_it(db: TestDb) {
    let (app, rig) = app_with(&db, None).await;
    let remote = &rig.remote;
    let id = create_task(&app, "Write the change down").await;
    let pushed = in_review_pushed(&app, remote, id).await;
    // A teammate pushes a commit on top of pidevops's to its branch.
    let branch = format!("pidevops/{id}");
    let theirs = in_remote(
        remote,
        &[
            "-c",
            "user.name=teammate",
            "-c",
            "user.email=t@example.com",
            "commit-tree",
            &format!("{pushed}^{{tree}}"),
            "-p",
            &pushed,
            "-m",
            "a teammate's commit",
        ],
    );
    in_remote(
        remote,
        &["update-ref", &format!("refs/heads/{branch}"), &theirs],
    );

    let (status, body) = land(&app, id).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(remote.branch("main").as_deref(), Some(pushed.as_str()));
    assert_eq!(
        remote.branch(&branch).as_deref(),
        Some(theirs.as_str()),
        "someone else's push is never deleted"
    );
    app.stop().await;

    // Another app on the same log, its repository keeping its branches.
    let (app, rig) =
        TestApp::with_agent("edits.sh", r#"printf 'done by the agent\n' > CHANGES.md"#)
            .config(&format!("repos.\"{REPO}\".delete_branch = false"))
            .spawn(&db)
            .await;
    let remote = &rig.remote;
    let id = create_task(&app, "Write the change down").await;
    let pushed = in_review_pushed(&app, remote, id).await;
    let (status, body) = land(&app, id).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(remote.branch("main").as_deref(), Some(pushed.as_str()));
    assert_eq!(
        remote.branch(&format!("pidevops/{id}")).as_deref(),
        Some(pushed.as_str()),
        "delete_branch = false keeps it"
    );
}
