//! The `refresh` loop on GitLab (issue 33), through the real app, real git and real agent processes, only GitLab's
//! API faked (its branches, and its merge requests' heads, read from the real bare repository pidevops pushes to):
//! two tasks edit different lines of one file; once the first's merge request is merged (the base moves), GitLab's
//! Push Hook refreshes the second once, pushed once with a lease, and auto-land (the merge queue) merges only the
//! refreshed head, after its pipeline passed (the old head's pipeline counts no more). The Push Hook lost, `gitlab_poller` finds
//! the new base head and the tasks are refreshed once; a merge request GitLab finds `need_rebase` refreshes its
//! task alone, and one it finds in `conflict` goes to an agent (which leaves the markers: the task is flagged with
//! the file). A Push Hook naming another project, another branch, a GitHub repository, a deleted base, or lying
//! about its head, and a fork's merge request named like pidevops's branch, move nothing. Armed by `GITLAB_TOKEN`
//! alone, the loop skips a GitHub repository's task whose remote needs `GITHUB_TOKEN` and goes on. A merge request
//! GitLab finds `need_rebase` on a project with `refresh = "off"` is marked behind on the board and never
//! refreshed (no base read, nothing pushed, the refresh loop not armed). Per backend.

use std::path::Path;
use std::time::Duration;

use pidevops::domain::Source;
use pidevops::eventlog::EventStore;
use pidevops::projectors::runs::{self, Which};
use pidevops::tasks::{Column, TaskId, GITLAB_MR};
use serde_json::{json, Value};

use crate::common::agents::{agent, Remote};
use crate::common::{board, within, TestApp, TestDb, GITLAB_SECRET};
use crate::land::create_task;
use crate::providers::gitlab::fake::FakeGitlab;
use crate::providers::gitlab::gl_fixture;
use crate::refresh::{pushes, record_pushes, refresh, refreshes, shared};

per_backend!(
    a_merged_merge_request_moves_the_base_and_the_push_hook_refreshes_the_other_once_auto_land_waiting_for_its_pipeline,
    a_lost_push_hook_is_caught_by_the_gitlab_poller_and_need_rebase_or_conflict_refreshes_that_task_alone,
    strangers_push_hooks_a_lying_one_and_a_forks_merge_request_move_nothing,
    with_gitlab_s_token_only_a_github_repository_s_base_push_is_skipped_and_the_loop_goes_on,
    need_rebase_on_a_project_that_does_not_refresh_is_marked_behind_and_never_refreshed,
);

pub(crate) const PROJECT: &str = "acme/platform/api";
const TOKEN: &str = "glpat-refresh";
const POLLER: &str = "gitlab_poller";

/// Work: line 5 made T-1's own, line 25 any other task's: apart, so a refresh is clean.
const SCRIPT: &str = r#"task=$(grep -o 'pidevops/T-[0-9]*' "$1" | head -1 | cut -d/ -f2)
if [ "$task" = T-1 ]; then line=5; else line=25; fi
sed -i "s/^line $line\$/line $line by $task/" shared.txt"#;

/// The app: `PROJECT` on GitLab, cloned from `remote`, landed by pidevops once its pipeline passed (no approval),
/// its base refreshed by rebase (the default); the poller driven by the test only (its first tick done).
pub(crate) async fn app(
    db: &TestDb,
    gitlab: &FakeGitlab,
    remote: &Remote,
    scratch: &Path,
) -> TestApp {
    app_with(db, gitlab, remote, scratch, "").await
}

/// [`app`] with `extra` lines in `PROJECT`'s table.
async fn app_with(
    db: &TestDb,
    gitlab: &FakeGitlab,
    remote: &Remote,
    scratch: &Path,
    extra: &str,
) -> TestApp {
    gitlab.serve_repo(PROJECT, &remote.dir.path().join("remote.git"));
    let script = agent(scratch, "agent.sh", SCRIPT);
    let mut settings = crate::common::settings(db);
    settings.file = format!(
        r#"
        [board]
        approval = "auto"

        [dispatch]
        agent = "fake"
        max_concurrent = 4
        per_repo = 4
        heartbeat_s = 0.3
        retry_backoff_s = 0.05

        [agents.fake]
        command = ["{script}", "{{prompt_file}}"]

        [repos."{PROJECT}"]
        provider = "gitlab"
        url = "{url}"
        scope = "off"
        land = "auto"
        approvals = 0
        required_checks = ["pipeline"]
        {extra}

        # A GitHub repository: GitLab's hooks never name it.
        [repos."acme/app"]
        url = "file:///nowhere/acme/app.git"
        forge = "github"

        [intake.gitlab]
        trusted_users = ["alice"]
        bot_username = "pidevops-bot"

        [pollers.gitlab]
        interval_s = 3600
        "#,
        script = script.display(),
        url = remote.url(),
        extra = extra,
    )
    .parse()
    .unwrap();
    settings.workspace_root = scratch.join("ws");
    gitlab.point_settings(&mut settings, TOKEN);
    let app = TestApp::spawn(settings).await;
    crate::providers::gitlab::poller::first_tick_over(&app).await;
    app
}

/// A GitLab hook delivered as GitLab sends it (its token, a fresh event UUID).
pub(crate) async fn deliver(app: &TestApp, hook: &str, body: &Value) {
    let response = app
        .client
        .post(app.url("/webhooks/gitlab"))
        .header("content-type", "application/json")
        .header("x-gitlab-event", hook)
        .header("x-gitlab-event-uuid", uuid::Uuid::now_v7().to_string())
        .header("x-gitlab-token", GITLAB_SECRET)
        .body(body.to_string())
        .send()
        .await
        .expect("the delivery completes");
    assert_eq!(response.status().as_u16(), 200, "{hook} stored");
}

/// GitLab's Push Hook of `project`'s `reference` whose new head is `after`.
fn push_hook(project: &str, reference: &str, after: &str) -> Value {
    let mut body = gl_fixture("push");
    body["ref"] = json!(reference);
    body["after"] = json!(after);
    body["checkout_sha"] = json!(after);
    body["project"]["path_with_namespace"] = json!(project);
    body
}

/// A pipeline of `task`'s branch at `sha`, finished `status`, for its merge request `iid`.
pub(crate) fn pipeline(task: TaskId, iid: u64, sha: &str, status: &str) -> Value {
    let mut body = gl_fixture("pipeline_success");
    body["object_attributes"]["ref"] = json!(task.branch().as_str());
    body["object_attributes"]["sha"] = json!(sha);
    body["object_attributes"]["status"] = json!(status);
    body["merge_request"]["iid"] = json!(iid);
    body["merge_request"]["source_branch"] = json!(task.branch().as_str());
    body
}

/// Waits until `id` is in review after its first attempt with its merge request linked; returns the merge
/// request's iid and the commit the attempt pushed.
pub(crate) async fn in_review(store: &EventStore, id: TaskId) -> (u64, String) {
    within(
        Duration::from_secs(90),
        &format!("{id} in review, its merge request linked"),
        || async {
            let ended = runs::query(store, Which::Task(&id.to_string()))
                .await
                .unwrap()
                .iter()
                .filter(|r| r.state != "running")
                .count();
            board::row_in(store, id).await.is_some_and(|r| {
                r.column == Column::InReview && r.links.has(GITLAB_MR) && r.attempts == 1
            }) && ended == 1
        },
    )
    .await;
    let row = board::row_in(store, id).await.unwrap();
    let iid = row.links.get(GITLAB_MR).unwrap().iid.get();
    let runs = runs::query(store, Which::Task(&id.to_string()))
        .await
        .unwrap();
    let sha = runs
        .iter()
        .find_map(|r| r.commit_sha.clone())
        .expect("the attempt's commit");
    (iid, sha)
}

/// Reactions, the merge queue (it reads the tasks in review), then effects:gitlab, each until it has handled the
/// whole log.
pub(crate) async fn settle(app: &TestApp) {
    app.project().await;
    app.drive("reactions").await;
    app.project().await;
    app.drive("merge_queue").await;
    app.project().await;
    app.drive("effects:gitlab").await;
    app.project().await;
}

/// The number of events in the log of `event_type`.
async fn count(app: &TestApp, event_type: &str) -> usize {
    app.all_events()
        .await
        .iter()
        .filter(|e| e.event_type == event_type)
        .count()
}

async fn a_merged_merge_request_moves_the_base_and_the_push_hook_refreshes_the_other_once_auto_land_waiting_for_its_pipeline(
    db: TestDb,
) {
    let gitlab = FakeGitlab::start().await;
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    record_pushes(&remote);
    let scratch = tempfile::tempdir().unwrap();
    let app = app(&db, &gitlab, &remote, scratch.path()).await;
    let (base, store) = (app.url(""), app.state.log.store().clone());
    let first = create_task(&base, PROJECT).await;
    let second = create_task(&base, PROJECT).await;
    assert_eq!(first.to_string(), "T-1", "the agent edits line 5 for T-1");
    let (first_iid, first_sha) = in_review(&store, first).await;
    let (second_iid, second_sha) = in_review(&store, second).await;
    let second_branch = format!("refs/heads/{}", second.branch());
    assert_eq!(
        pushes(&remote, &second_branch).len(),
        1,
        "the attempt's push"
    );

    // The first's pipeline passes: auto-land merges its merge request at that head, and GitLab merges it into
    // main (the base moves) and says so.
    deliver(
        &app,
        "Pipeline Hook",
        &pipeline(first, first_iid, &first_sha, "success"),
    )
    .await;
    settle(&app).await;
    let merges = gitlab.merges();
    assert_eq!(merges.len(), 1, "{merges:?}");
    assert_eq!(
        (merges[0].iid, merges[0].sha.as_deref()),
        (first_iid, Some(first_sha.as_str()))
    );
    remote.merge_to_main(first.branch().as_str());
    let mut merged = gl_fixture("merge_request_merge");
    merged["object_attributes"]["source_branch"] = json!(first.branch().as_str());
    merged["object_attributes"]["iid"] = json!(first_iid);
    merged["object_attributes"]["last_commit"]["id"] = json!(first_sha);
    deliver(&app, "Merge Request Hook", &merged).await;
    settle(&app).await;
    assert_eq!(
        board::row_in(&store, first).await.unwrap().column,
        Column::Done
    );

    // GitLab's Push Hook of main: the second is rebased onto it and pushed once, leased on its recorded commit.
    let main = remote.branch("main").unwrap();
    let hook = push_hook(PROJECT, "refs/heads/main", &main);
    deliver(&app, "Push Hook", &hook).await;
    refresh(&app).await;
    let recorded = refreshes(&store, second).await;
    assert_eq!(recorded.len(), 1, "{recorded:#?}");
    let to = remote.branch(second.branch().as_str()).unwrap();
    assert_eq!(recorded[0]["from"], json!(second_sha));
    assert_eq!(recorded[0]["to"], json!(to));
    assert_eq!(recorded[0]["base"], json!(main));
    assert_eq!(recorded[0]["strategy"], json!("rebase"));
    let both = shared(&[
        (5, &format!("line 5 by {first}")),
        (25, &format!("line 25 by {second}")),
    ]);
    assert_eq!(
        remote
            .show(second.branch().as_str(), "shared.txt")
            .as_deref(),
        Some(both.as_str())
    );
    assert_eq!(
        pushes(&remote, &second_branch),
        [
            format!("{second_branch} {second_sha}"),
            format!("{second_branch} {to}")
        ]
    );
    assert!(
        refreshes(&store, first).await.is_empty(),
        "done: left alone"
    );
    // The task page compares the two commits on GitLab, not GitHub.
    let cookie = crate::web::sign_in(&app).await;
    let (status, page) = crate::web::get(&app, &format!("/tasks/{second}"), &cookie).await;
    assert_eq!(status, 200);
    let compare = format!("{}/{PROJECT}/-/compare/{second_sha}...{to}", gitlab.url);
    assert!(page.contains(&compare), "{compare} in the page");
    assert!(
        !page.contains(&format!("https://github.com/{PROJECT}/compare")),
        "no GitHub link"
    );
    let handled = format!("refresh-base:{PROJECT}:main:{main}");
    assert_eq!(
        store
            .count_by_key(Source::Pidevops, &handled)
            .await
            .unwrap(),
        1
    );

    // The same head told again (GitLab's "Resend request" is a new delivery): a repeat, nothing pushed.
    deliver(&app, "Push Hook", &hook).await;
    refresh(&app).await;
    assert_eq!(refreshes(&store, second).await.len(), 1);
    assert_eq!(pushes(&remote, &second_branch).len(), 2);

    // The old head's pipeline counts no more; the refreshed head's does, and that head is merged, once.
    deliver(
        &app,
        "Pipeline Hook",
        &pipeline(second, second_iid, &second_sha, "success"),
    )
    .await;
    settle(&app).await;
    assert_eq!(
        gitlab.merges().len(),
        1,
        "merged on the old head's pipeline"
    );
    deliver(
        &app,
        "Pipeline Hook",
        &pipeline(second, second_iid, &to, "success"),
    )
    .await;
    settle(&app).await;
    app.drive("effects:gitlab").await;
    let merges = gitlab.merges();
    assert_eq!(merges.len(), 2, "{merges:?}");
    assert_eq!(merges[1].iid, second_iid);
    assert_eq!(merges[1].sha.as_deref(), Some(to.as_str()));
    assert_eq!(merges[1].when_pipeline_succeeds, Some(true));
    let row = board::row_in(&store, second).await.unwrap();
    assert!(!row.needs_human, "no person involved: {row:?}");
    app.stop().await;
}

async fn a_lost_push_hook_is_caught_by_the_gitlab_poller_and_need_rebase_or_conflict_refreshes_that_task_alone(
    db: TestDb,
) {
    let gitlab = FakeGitlab::start().await;
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    record_pushes(&remote);
    let scratch = tempfile::tempdir().unwrap();
    let app = app(&db, &gitlab, &remote, scratch.path()).await;
    let (base, store) = (app.url(""), app.state.log.store().clone());
    let first = create_task(&base, PROJECT).await;
    let second = create_task(&base, PROJECT).await;
    let (first_iid, _) = in_review(&store, first).await;
    in_review(&store, second).await;
    let branches = [first, second].map(|id| format!("refs/heads/{}", id.branch()));

    // The base where the tasks started: the poller's first look finds both current, nothing pushed.
    app.drive(POLLER).await;
    refresh(&app).await;
    for (id, branch) in [first, second].iter().zip(&branches) {
        assert!(refreshes(&store, *id).await.is_empty());
        assert_eq!(pushes(&remote, branch).len(), 1, "the attempt's push");
    }
    assert!(
        gitlab
            .branch_reads()
            .contains(&(PROJECT.to_owned(), "main".to_owned())),
        "{:?}",
        gitlab.branch_reads()
    );

    // main moves and its Push Hook is lost: the poller reads the new head, appends it as the hook's push, and
    // each task is refreshed onto it once, however often the poller looks again.
    remote.commit_to_main("elsewhere.txt", "apart\n");
    let main_1 = remote.branch("main").unwrap();
    app.drive(POLLER).await;
    refresh(&app).await;
    app.drive(POLLER).await;
    refresh(&app).await;
    let key = format!("poll:push:{PROJECT}:main:{main_1}");
    let polled = store
        .find_by_key(Source::Gitlab, &key)
        .await
        .unwrap()
        .expect("the poller's push");
    assert_eq!(polled.event_type, "gitlab.push");
    assert_eq!(polled.repository.as_deref(), Some(PROJECT));
    assert_eq!(polled.meta.text("poller").as_deref(), Some(POLLER));
    assert_eq!(count(&app, "gitlab.push").await, 2, "one per head");
    for (id, branch) in [first, second].iter().zip(&branches) {
        let recorded = refreshes(&store, *id).await;
        assert_eq!(recorded.len(), 1, "{id}: {recorded:#?}");
        assert_eq!(recorded[0]["base"], json!(main_1));
        assert_eq!(pushes(&remote, branch).len(), 2, "{id}");
    }

    // main moves again, but GitLab's branch answer still names the head handled; it finds the first's merge
    // request `need_rebase` (the second's mergeable): the first alone is refreshed, once.
    gitlab.pin_branch(PROJECT, "main", &main_1);
    remote.commit_to_main("later.txt", "apart\n");
    let main_2 = remote.branch("main").unwrap();
    gitlab.set_merge_status(PROJECT, first_iid, "need_rebase");
    let head = remote.branch(first.branch().as_str()).unwrap();
    app.drive(POLLER).await;
    app.drive(POLLER).await;
    refresh(&app).await;
    let due = format!("refresh-due:{first}:{head}:behind");
    assert_eq!(store.count_by_key(Source::Pidevops, &due).await.unwrap(), 1);
    assert_eq!(count(&app, "refresh.due").await, 1);
    let recorded = refreshes(&store, first).await;
    assert_eq!(recorded.len(), 2, "{recorded:#?}");
    assert_eq!(recorded[1]["from"], json!(head));
    assert_eq!(recorded[1]["base"], json!(main_2));
    assert_eq!(pushes(&remote, &branches[0]).len(), 3);
    assert_eq!(refreshes(&store, second).await.len(), 1, "the second alone");
    assert_eq!(pushes(&remote, &branches[1]).len(), 2);
    for id in [first, second] {
        let row = board::row_in(&store, id).await.unwrap();
        assert!(!row.needs_human, "{row:?}");
        assert_eq!(row.column, Column::InReview);
    }

    // A teammate changes the second's line; GitLab finds its merge request in `conflict`: the refresh meets the
    // conflict and an agent gets it, which leaves the markers (its edit finds no such line), so the task is
    // flagged with the file; nothing is pushed.
    gitlab.set_merge_status(PROJECT, first_iid, "mergeable");
    remote.commit_to_main("shared.txt", &shared(&[(25, "line 25 by a teammate")]));
    let second_iid = board::row_in(&store, second)
        .await
        .unwrap()
        .links
        .get(GITLAB_MR)
        .unwrap()
        .iid
        .get();
    gitlab.set_merge_status(PROJECT, second_iid, "conflict");
    let second_head = remote.branch(second.branch().as_str()).unwrap();
    app.drive(POLLER).await;
    refresh(&app).await;
    let due = format!("refresh-due:{second}:{second_head}:dirty");
    assert_eq!(store.count_by_key(Source::Pidevops, &due).await.unwrap(), 1);
    within(
        Duration::from_secs(90),
        "the conflict attempt refused",
        || async {
            board::row_in(&store, second)
                .await
                .is_some_and(|r| r.needs_human)
        },
    )
    .await;
    let row = board::row_in(&store, second).await.unwrap();
    let flag = row.needs_human_reason.clone().expect("flagged");
    assert!(
        flag.contains("conflicts") && flag.contains("shared.txt"),
        "{flag}"
    );
    assert!(flag.contains("markers"), "the agent's attempt: {flag}");
    assert_eq!(row.attempts, 2, "the conflict attempt");
    assert_eq!(row.column, Column::InReview);
    assert_eq!(refreshes(&store, second).await.len(), 1);
    assert_eq!(pushes(&remote, &branches[1]).len(), 2, "nothing pushed");
    assert_eq!(
        refreshes(&store, first).await.len(),
        2,
        "the first is not touched"
    );
    app.stop().await;
}

async fn strangers_push_hooks_a_lying_one_and_a_forks_merge_request_move_nothing(db: TestDb) {
    let gitlab = FakeGitlab::start().await;
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    record_pushes(&remote);
    let scratch = tempfile::tempdir().unwrap();
    let app = app(&db, &gitlab, &remote, scratch.path()).await;
    let (base, store) = (app.url(""), app.state.log.store().clone());
    let id = create_task(&base, PROJECT).await;
    let (_, sha) = in_review(&store, id).await;
    let branch = format!("refs/heads/{}", id.branch());
    // The base where the task started, handled: what follows is all strangers'.
    app.drive(POLLER).await;
    refresh(&app).await;
    let before = board::row_in(&store, id).await.unwrap();

    // main does not move. None of these names the configured project's base on GitLab; each is nothing.
    let lie_head = "b".repeat(40);
    let mut lie = push_hook(PROJECT, "refs/heads/main", &lie_head);
    lie["commits"][0]["id"] = json!(lie_head);
    lie["commits"][0]["message"] = json!("trust me");
    let mut disagreeing = push_hook(PROJECT, "refs/heads/main", &"c".repeat(40));
    disagreeing["project_id"] = json!(77);
    for (why, body) in [
        (
            "another project",
            push_hook("stranger/api", "refs/heads/main", &"d".repeat(40)),
        ),
        (
            "another branch",
            push_hook(PROJECT, "refs/heads/feature", &"e".repeat(40)),
        ),
        (
            "its own branch",
            push_hook(PROJECT, &branch, &"f".repeat(40)),
        ),
        (
            "a GitHub repository",
            push_hook("acme/app", "refs/heads/main", &"a".repeat(40)),
        ),
        (
            "the base deleted",
            push_hook(PROJECT, "refs/heads/main", &"0".repeat(40)),
        ),
        ("project ids that disagree", disagreeing),
    ] {
        deliver(&app, "Push Hook", &body).await;
        refresh(&app).await;
        assert!(refreshes(&store, id).await.is_empty(), "{why}");
    }
    for stranger in [
        format!("refresh-base:stranger/api:main:{}", "d".repeat(40)),
        format!("refresh-base:acme/app:main:{}", "a".repeat(40)),
        format!("refresh-base:{PROJECT}:main:{}", "c".repeat(40)),
    ] {
        assert_eq!(
            store
                .count_by_key(Source::Pidevops, &stranger)
                .await
                .unwrap(),
            0,
            "{stranger}"
        );
    }
    // One names the base and lies about its head (and its commits): what the base holds is read from the remote,
    // found where the task stands, and nothing is pushed.
    deliver(&app, "Push Hook", &lie).await;
    refresh(&app).await;

    // A fork's merge request from a branch named like the task's, which GitLab finds `need_rebase`: not the
    // merge request pidevops recorded, so the poller never reads it for the task.
    let fork = gitlab.seed_merge_request(PROJECT, id.branch().as_str(), true);
    gitlab.set_merge_status(PROJECT, fork, "need_rebase");
    let mut forked = gl_fixture("merge_request_fork_merge");
    forked["object_attributes"]["source_branch"] = json!(id.branch().as_str());
    forked["object_attributes"]["iid"] = json!(fork);
    deliver(&app, "Merge Request Hook", &forked).await;
    app.drive(POLLER).await;
    refresh(&app).await;
    settle(&app).await;

    assert!(refreshes(&store, id).await.is_empty());
    assert_eq!(count(&app, "refresh.due").await, 0);
    assert_eq!(pushes(&remote, &branch).len(), 1, "only the attempt's push");
    assert_eq!(remote.branch(id.branch().as_str()), Some(sha));
    assert!(gitlab.merges().is_empty());
    let row = board::row_in(&store, id).await.unwrap();
    assert_eq!(row.column, Column::InReview);
    assert!(!row.needs_human, "{row:?}");
    assert_eq!(row.version, before.version, "the task is untouched");
    app.stop().await;
}

/// The loop armed by `GITLAB_TOKEN` alone: a base push of a GitHub repository whose https remote needs
/// `GITHUB_TOKEN` skips its task (a refresh could only fail) and is handled, so the loop is not held on it.
async fn with_gitlab_s_token_only_a_github_repository_s_base_push_is_skipped_and_the_loop_goes_on(
    db: TestDb,
) {
    let gitlab = FakeGitlab::start().await;
    let mut settings = crate::common::settings(&db);
    settings.file = format!(
        "[dispatch]\n[repos.\"{PROJECT}\"]\nprovider = \"gitlab\"\n\
         url = \"https://gitlab.example.com/{PROJECT}.git\"\n\
         [repos.\"acme/app\"]\nurl = \"https://github.com/acme/app.git\"\n\
         [pollers.gitlab]\ninterval_s = 3600\n"
    )
    .parse()
    .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    settings.workspace_root = scratch.path().join("ws");
    gitlab.point_settings(&mut settings, TOKEN);
    let app = TestApp::spawn(settings).await;
    let id = board::new_task("Fix the header")
        .repo("acme/app")
        .approval(pidevops::tasks::ApprovalPolicy::Auto)
        .create(&app)
        .await;
    let run = board::to_review(&app, id, None).await;
    board::pushed(&app, id, run, "0123456789abcdef0123456789abcdef01234567").await;
    let mut push = crate::refresh::push("acme/app", "refs/heads/main");
    let after = "9".repeat(40);
    push["after"] = json!(after);
    crate::land::post(&app.url(""), "push", "main-1", &push).await;
    // A tick that failed would panic here: the push is handled, its task skipped.
    refresh(&app).await;
    let handled = format!("refresh-base:acme/app:main:{after}");
    assert_eq!(
        store_count(&app, &handled).await,
        1,
        "the push is handled, not retried forever"
    );
    assert!(refreshes(app.state.log.store(), id).await.is_empty());
    let row = board::row_in(app.state.log.store(), id).await.unwrap();
    assert_eq!(row.column, Column::InReview);
    app.stop().await;
}

async fn store_count(app: &TestApp, key: &str) -> i64 {
    app.state
        .log
        .store()
        .count_by_key(Source::Pidevops, key)
        .await
        .unwrap()
}

async fn need_rebase_on_a_project_that_does_not_refresh_is_marked_behind_and_never_refreshed(
    db: TestDb,
) {
    let gitlab = FakeGitlab::start().await;
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    record_pushes(&remote);
    let scratch = tempfile::tempdir().unwrap();
    let app = app_with(&db, &gitlab, &remote, scratch.path(), r#"refresh = "off""#).await;
    let (base, store) = (app.url(""), app.state.log.store().clone());
    let id = create_task(&base, PROJECT).await;
    let (iid, _) = in_review(&store, id).await;
    let branch = format!("refs/heads/{}", id.branch());
    // main moves (a refresh would push) and GitLab finds the merge request `need_rebase`.
    remote.commit_to_main("elsewhere.txt", "apart\n");
    gitlab.set_merge_status(PROJECT, iid, "need_rebase");
    let head = remote.branch(id.branch().as_str()).unwrap();
    app.drive(POLLER).await;
    let due = format!("refresh-due:{id}:{head}:behind");
    assert_eq!(store_count(&app, &due).await, 1);
    // Marked for a person; nothing refreshed, nothing pushed, the base not read (no project refreshes here: the
    // refresh loop is not even armed).
    app.project().await;
    let row = board::row_in(&store, id).await.unwrap();
    assert!(row.is_behind(), "{row:?}");
    assert!(!row.needs_human, "{row:?}");
    assert!(refreshes(&store, id).await.is_empty());
    assert_eq!(pushes(&remote, &branch).len(), 1, "only the attempt's push");
    assert!(
        !gitlab
            .branch_reads()
            .contains(&(PROJECT.to_owned(), "main".to_owned())),
        "{:?}",
        gitlab.branch_reads()
    );
    // A person rebases it by hand. GitLab's `not_approved` may hide `need_rebase`: the mark stays. Then
    // `mergeable`: the mark goes, and pidevops still refreshed and pushed nothing.
    gitlab.set_merge_status(PROJECT, iid, "not_approved");
    app.drive(POLLER).await;
    app.project().await;
    let row = board::row_in(&store, id).await.unwrap();
    assert!(row.is_behind(), "not_approved: {row:?}");
    gitlab.set_merge_status(PROJECT, iid, "mergeable");
    app.drive(POLLER).await;
    app.project().await;
    let row = board::row_in(&store, id).await.unwrap();
    assert!(!row.is_behind(), "mergeable: {row:?}");
    assert!(refreshes(&store, id).await.is_empty());
    assert_eq!(pushes(&remote, &branch).len(), 1, "only the attempt's push");
    app.stop().await;
}
