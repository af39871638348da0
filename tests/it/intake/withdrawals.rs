//! Tickets withdrawn from pidevops, through signed webhooks, the real dispatcher, real git and an agent that works
//! until it is stopped: a GitHub issue closed or a Linear issue cancelled while its agent works stops the run
//! (`run.failed` kind `stopped`), cancels the task and leaves no worktree on disk; a withdrawal older than a
//! re-labelling delivered before it changes nothing; pidevops's own move of a Linear issue to In Progress (and a
//! delegated issue, which never carried the label) withdraws nothing; a withdrawal naming another ticket (another
//! repository's issue with the same number, another Linear id with the same identifier) or badly signed changes
//! nothing.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::agents::REPO;
use crate::common::board;
use crate::common::{within, TestApp, TestDb};
use crate::providers::linear::fake::{default_states, FakeLinear, Issue};
use pidevops::projectors::runs::RunRow;
use pidevops::tasks::{Column, TaskId};
use serde_json::{json, Value};

per_backend!(
    an_issue_closed_or_cancelled_mid_run_stops_the_run_cancels_the_task_and_removes_its_worktree,
    an_old_withdrawal_delivered_after_a_newer_relabelling_changes_nothing,
    pidevops_moving_its_linear_issue_to_in_progress_does_not_cancel_its_task,
    a_withdrawal_naming_another_ticket_changes_nothing,
);

/// The `issue.create` fixture's issue.
const ISSUE: &str = "9c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f";
/// An issue delegated to pidevops (an agent session) that never carried the intake label.
const DELEGATED: &str = "4c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f";

/// The real app dispatching to a local git remote, with an agent that prints a line and works until stopped.
struct Rig {
    app: TestApp,
    _rig: crate::common::dispatching::Rig,
}

async fn rig(db: &TestDb, linear: Option<&FakeLinear>) -> Rig {
    let mut app = TestApp::with_agent("works.sh", "echo working; sleep 600")
        .config(&format!("intake.default_repo = \"{REPO}\""));
    if let Some(linear) = linear {
        app = app.linear(linear);
    }
    let (app, rig) = app.spawn(db).await;
    Rig { app, _rig: rig }
}

/// An intake-only app (no dispatch): tasks wait in triage.
async fn intake_app(db: &TestDb) -> TestApp {
    let mut settings = crate::common::settings(db);
    settings.file = format!("[intake]\nallow_repos = [\"acme/*\"]\ndefault_repo = \"{REPO}\"\n")
        .parse()
        .unwrap();
    TestApp::spawn(settings).await
}

fn names(labels: &[&str]) -> Value {
    json!(labels
        .iter()
        .map(|n| json!({ "name": n }))
        .collect::<Vec<_>>())
}

/// GitHub's `issues` webhook (`action`) for `repo#number`, by a member, as of `updated_at`.
fn github_issue(action: &str, repo: &str, number: u64, labels: &[&str], updated_at: &str) -> Value {
    let mut body = super::fixture("github/issues/opened.payload.json");
    body["action"] = json!(action);
    body["repository"]["full_name"] = json!(repo);
    body["issue"]["number"] = json!(number);
    body["issue"]["labels"] = crate::providers::github::gh_labels(labels);
    body["issue"]["author_association"] = json!("MEMBER");
    body["issue"]["updated_at"] = json!(updated_at);
    if action == "closed" {
        body["issue"]["state"] = json!("closed");
    }
    body
}

async fn post_github(app: &TestApp, delivery: &str, body: &Value) {
    let r = app
        .post_github("issues", delivery, body.to_string().as_bytes())
        .await;
    assert_eq!(r.status(), 200, "{delivery}");
}

/// Linear's `Issue` webhook for `id` in state (name, type), as of `updated_at`.
fn linear_issue(
    action: &str,
    id: &str,
    state: (&str, &str),
    labels: &[&str],
    updated_at: &str,
) -> Vec<u8> {
    let mut body = super::fixture("linear/issue.create.json");
    body["action"] = json!(action);
    body["data"]["id"] = json!(id);
    body["data"]["description"] = json!(format!("repo: {REPO}\n\nDone when: it retries"));
    body["data"]["state"] =
        json!({ "id": format!("st-{}", state.1), "name": state.0, "type": state.1 });
    body["data"]["labels"] = names(labels);
    super::linear(body, updated_at)
}

async fn post_linear(app: &TestApp, body: &[u8]) {
    assert_eq!(app.post_linear(body).await.status(), 200);
}

const READY: (&str, &str) = ("Ready for Pi-Dev", "unstarted");
const LABEL: &str = "pi-dev:autonomous";

/// The task of `key`, once intake has handled every delivery.
async fn task_of(app: &TestApp, key: &str) -> TaskId {
    app.drive("intake").await;
    app.state
        .board
        .task_for_key(key)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("the task of {key}"))
}

/// Waits until the task's agent is at work (its run running, a line printed), and returns its worktree.
async fn at_work(app: &TestApp, id: TaskId) -> PathBuf {
    within(Duration::from_secs(60), "the agent at work", || async {
        board::runs_now(app, id)
            .await
            .first()
            .is_some_and(|r| r.state == "running" && r.output_bytes > 0)
    })
    .await;
    let runs = board::runs_now(app, id).await;
    let log = PathBuf::from(runs[0].log_path.clone().unwrap());
    let worktree = log.with_file_name("worktree");
    assert!(
        worktree.join("README.md").exists(),
        "{}",
        worktree.display()
    );
    worktree
}

/// Intake and the read models at the head of the log.
async fn settle(app: &TestApp) {
    app.drive("intake").await;
    app.project().await;
}

/// The run stopped for its withdrawn ticket: `run.failed` kind `stopped`, the task cancelled with `why`, and its
/// worktree gone from disk by the time the outcome is recorded.
async fn assert_stopped(app: &TestApp, id: TaskId, worktree: &std::path::Path, why: &str) {
    within(Duration::from_secs(30), "the run stopped", || async {
        app.project().await;
        board::runs_now(app, id)
            .await
            .iter()
            .all(|r| r.state == "failed")
    })
    .await;
    let runs = board::runs_now(app, id).await;
    assert_eq!(runs.len(), 1, "one attempt, stopped: {runs:#?}");
    assert_eq!(runs[0].failure.as_deref(), Some("stopped"), "{runs:#?}");
    let failed: Vec<Value> = app
        .all_events()
        .await
        .iter()
        .filter(|e| e.event_type == "run.failed")
        .map(|e| serde_json::from_slice(&e.body).unwrap())
        .filter(|body: &Value| body["task"] == id.to_string())
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["kind"], "stopped", "{}", failed[0]);
    let task = board::row_now(app, id).await.unwrap();
    assert_eq!(task.column, Column::Cancelled);
    let reason = task.state["closed_reason"].as_str().unwrap_or_default();
    assert!(reason.contains(why), "{reason}");
    assert!(
        !worktree.exists(),
        "the worktree is gone: {}",
        worktree.display()
    );
    // What the run left for its page stays.
    assert!(worktree.with_file_name("agent.log").exists());
}

async fn an_issue_closed_or_cancelled_mid_run_stops_the_run_cancels_the_task_and_removes_its_worktree(
    db: TestDb,
) {
    let rig = rig(&db, None).await;
    let app = &rig.app;
    post_github(
        app,
        "open-12",
        &github_issue("opened", REPO, 12, &["pidevops"], "2026-11-29T10:00:00Z"),
    )
    .await;
    post_linear(
        app,
        &linear_issue("create", ISSUE, READY, &[LABEL], "2026-11-29T10:00:00.000Z"),
    )
    .await;
    let github = task_of(app, &format!("github:{REPO}#12")).await;
    let linear = task_of(app, &format!("linear:{ISSUE}")).await;
    let github_worktree = at_work(app, github).await;
    let linear_worktree = at_work(app, linear).await;

    // Someone closes the GitHub issue, and cancels the Linear one, while their agents work.
    post_github(
        app,
        "close-12",
        &github_issue("closed", REPO, 12, &["pidevops"], "2026-11-29T10:05:00Z"),
    )
    .await;
    post_linear(
        app,
        &linear_issue(
            "update",
            ISSUE,
            ("Canceled", "canceled"),
            &[LABEL],
            "2026-11-29T10:05:00.000Z",
        ),
    )
    .await;
    settle(app).await;
    assert_stopped(
        app,
        github,
        &github_worktree,
        &format!("{REPO}#12 was closed on GitHub"),
    )
    .await;
    assert_stopped(
        app,
        linear,
        &linear_worktree,
        "ENG-412 was cancelled in Linear",
    )
    .await;
    // Nothing starts again for them.
    app.drive("dispatcher").await;
    assert_eq!(board::runs_now(app, github).await.len(), 1);
    assert_eq!(board::runs_now(app, linear).await.len(), 1);
    rig.app.stop().await;
}

async fn an_old_withdrawal_delivered_after_a_newer_relabelling_changes_nothing(db: TestDb) {
    let app = intake_app(&db).await;
    // GitHub: labelled at 10:00, unlabelled at 10:01, labelled again at 10:02; the unlabelling is delivered last,
    // then redelivered (the same delivery, and again as a new one).
    post_github(
        &app,
        "g-1",
        &github_issue("labeled", REPO, 12, &["pidevops"], "2026-11-29T10:00:00Z"),
    )
    .await;
    let mut relabelled = github_issue("labeled", REPO, 12, &["pidevops"], "2026-11-29T10:02:00Z");
    relabelled["label"] = crate::providers::github::gh_label("pidevops");
    post_github(&app, "g-3", &relabelled).await;
    let mut unlabelled = github_issue("unlabeled", REPO, 12, &[], "2026-11-29T10:01:00Z");
    unlabelled["label"] = crate::providers::github::gh_label("pidevops");
    post_github(&app, "g-2", &unlabelled).await;
    post_github(&app, "g-2", &unlabelled).await;
    post_github(&app, "g-2-again", &unlabelled).await;
    // An old close, too (closed at 10:01:30 and reopened since, its reopening delivered first).
    post_github(
        &app,
        "g-reopened",
        &github_issue("reopened", REPO, 12, &["pidevops"], "2026-11-29T10:02:00Z"),
    )
    .await;
    post_github(
        &app,
        "g-closed",
        &github_issue("closed", REPO, 12, &["pidevops"], "2026-11-29T10:01:30Z"),
    )
    .await;

    // Linear: made at 10:00, unlabelled at 10:01 and cancelled at 10:01:30, re-labelled and back in the ready
    // state at 10:02, delivered in the order 10:00, 10:02, 10:01, 10:01:30.
    post_linear(
        &app,
        &linear_issue("create", ISSUE, READY, &[LABEL], "2026-11-29T10:00:00.000Z"),
    )
    .await;
    post_linear(
        &app,
        &linear_issue("update", ISSUE, READY, &[LABEL], "2026-11-29T10:02:00.000Z"),
    )
    .await;
    post_linear(
        &app,
        &linear_issue("update", ISSUE, READY, &[], "2026-11-29T10:01:00.000Z"),
    )
    .await;
    post_linear(
        &app,
        &linear_issue(
            "update",
            ISSUE,
            ("Canceled", "canceled"),
            &[LABEL],
            "2026-11-29T10:01:30.000Z",
        ),
    )
    .await;
    settle(&app).await;
    let github = task_of(&app, &format!("github:{REPO}#12")).await;
    let linear = task_of(&app, &format!("linear:{ISSUE}")).await;
    for id in [github, linear] {
        let task = board::row_now(&app, id).await.unwrap();
        assert_eq!(task.column, Column::Triage, "{id}: {task:#?}");
    }
    let loaded = app.state.board.load(github).await.unwrap().unwrap();
    assert_eq!(
        loaded.task.ticket_version(),
        Some("2026-11-29T10:02:00Z".parse().unwrap()),
        "the re-labelling is the version on record"
    );
    assert!(
        app.all_events()
            .await
            .iter()
            .all(|e| e.event_type != "task.cancelled"),
        "nothing cancelled"
    );

    // A withdrawal newer than the re-labelling does withdraw.
    unlabelled["issue"]["updated_at"] = json!("2026-11-29T10:03:00Z");
    post_github(&app, "g-4", &unlabelled).await;
    post_linear(
        &app,
        &linear_issue("update", ISSUE, READY, &[], "2026-11-29T10:03:00.000Z"),
    )
    .await;
    settle(&app).await;
    assert_eq!(
        board::row_now(&app, github).await.unwrap().column,
        Column::Cancelled
    );
    assert_eq!(
        board::row_now(&app, linear).await.unwrap().column,
        Column::Cancelled
    );
    app.stop().await;
}

fn linear_issue_412(id: &str, identifier: &str, labels: &[&str]) -> Issue {
    Issue {
        id: id.to_owned(),
        identifier: identifier.to_owned(),
        title: "Retry failed Stripe webhooks with exponential backoff".to_owned(),
        description: format!("repo: {REPO}"),
        labels: labels.iter().map(|l| (*l).to_owned()).collect(),
        state: "st-todo".to_owned(),
        states: default_states(),
        updated_at: "2026-11-29T10:00:00.000Z".to_owned(),
        team: "ENG".to_owned(),
    }
}

/// The webhook Linear sends once `issue` was moved: its state and version as the fake Linear holds them now.
fn moved(issue: &Issue, labels: &[&str]) -> Vec<u8> {
    let (id, name, kind) = issue
        .states
        .iter()
        .find(|s| s.0 == issue.state)
        .unwrap()
        .clone();
    let mut body = super::fixture("linear/issue.create.json");
    body["action"] = json!("update");
    body["data"]["id"] = json!(issue.id);
    body["data"]["identifier"] = json!(issue.identifier);
    body["data"]["description"] = json!(issue.description);
    body["data"]["state"] = json!({ "id": id, "name": name, "type": kind });
    body["data"]["labels"] = names(labels);
    super::linear(body, &issue.updated_at)
}

async fn pidevops_moving_its_linear_issue_to_in_progress_does_not_cancel_its_task(db: TestDb) {
    let linear = FakeLinear::start().await;
    linear.add_issue(linear_issue_412(ISSUE, "ENG-412", &[LABEL]));
    linear.add_issue(linear_issue_412(DELEGATED, "ENG-500", &[]));
    let rig = rig(&db, Some(&linear)).await;
    let app = &rig.app;
    // One issue labelled and ready; another delegated to pidevops (an agent session), without the label.
    post_linear(
        app,
        &linear_issue("create", ISSUE, READY, &[LABEL], "2026-11-29T10:00:00.000Z"),
    )
    .await;
    let mut session = super::fixture("linear/agent_session.created.json");
    session["agentSession"]["issueId"] = json!(DELEGATED);
    session["agentSession"]["issue"]["id"] = json!(DELEGATED);
    session["agentSession"]["issue"]["identifier"] = json!("ENG-500");
    session["agentSession"]["id"] = json!("as-0000-4000-8000-000000000777");
    session["promptContext"] = json!(format!(
        "<issue identifier=\"ENG-500\">\n<title>Retry failed Stripe webhooks</title>\n<description>repo: {REPO}</description>\n</issue>"
    ));
    post_linear(app, &super::fresh(session)).await;
    let labelled = task_of(app, &format!("linear:{ISSUE}")).await;
    let delegated = task_of(app, &format!("linear:{DELEGATED}")).await;
    at_work(app, labelled).await;
    at_work(app, delegated).await;
    // pidevops moves both issues to In Progress (effects:linear, driven), and Linear tells it so.
    within(
        Duration::from_secs(30),
        "both issues in progress",
        || async {
            app.drive("effects:linear").await;
            [ISSUE, DELEGATED]
                .iter()
                .all(|id| linear.state_of(id).as_deref() == Some("Pi-Dev: In Progress"))
        },
    )
    .await;
    post_linear(app, &moved(&linear.issue(ISSUE).unwrap(), &[LABEL])).await;
    post_linear(app, &moved(&linear.issue(DELEGATED).unwrap(), &[])).await;
    settle(app).await;
    for (id, issue) in [(labelled, ISSUE), (delegated, DELEGATED)] {
        let task = board::row_now(app, id).await.unwrap();
        assert_eq!(task.column, Column::InProgress, "{issue}: {task:#?}");
        let loaded = app.state.board.load(id).await.unwrap().unwrap();
        let version: chrono::DateTime<chrono::Utc> =
            linear.issue(issue).unwrap().updated_at.parse().unwrap();
        assert_eq!(
            loaded.task.ticket_version(),
            Some(version),
            "{issue}: the move is the version on record"
        );
    }
    // The agents go on: still running after the next heartbeats, never stopped.
    let beats = |runs: Vec<RunRow>| runs[0].last_seen_at;
    let seen = beats(board::runs_now(app, labelled).await);
    within(Duration::from_secs(30), "another heartbeat", || async {
        app.project().await;
        beats(board::runs_now(app, labelled).await) > seen
    })
    .await;
    for id in [labelled, delegated] {
        let runs = board::runs_now(app, id).await;
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].state, "running", "{runs:#?}");
    }
    rig.app.stop().await;
}

async fn a_withdrawal_naming_another_ticket_changes_nothing(db: TestDb) {
    let rig = rig(&db, None).await;
    let app = &rig.app;
    post_github(
        app,
        "open-12",
        &github_issue("opened", REPO, 12, &["pidevops"], "2026-11-29T10:00:00Z"),
    )
    .await;
    post_linear(
        app,
        &linear_issue("create", ISSUE, READY, &[LABEL], "2026-11-29T10:00:00.000Z"),
    )
    .await;
    let github = task_of(app, &format!("github:{REPO}#12")).await;
    let linear = task_of(app, &format!("linear:{ISSUE}")).await;
    at_work(app, github).await;
    at_work(app, linear).await;

    // Another repository's issue #12 closed, another issue of ours closed, and another label taken off #12.
    post_github(
        app,
        "other-repo",
        &github_issue(
            "closed",
            "acme/other",
            12,
            &["pidevops"],
            "2026-11-29T10:05:00Z",
        ),
    )
    .await;
    post_github(
        app,
        "other-number",
        &github_issue("closed", REPO, 13, &["pidevops"], "2026-11-29T10:05:00Z"),
    )
    .await;
    let mut other_label =
        github_issue("unlabeled", REPO, 12, &["pidevops"], "2026-11-29T10:05:00Z");
    other_label["label"] = crate::providers::github::gh_label("bug");
    post_github(app, "other-label", &other_label).await;
    // The right issue closed, but not signed by GitHub's secret: refused, never stored.
    let forged =
        github_issue("closed", REPO, 12, &["pidevops"], "2026-11-29T10:06:00Z").to_string();
    let r = app
        .post_github_signed(
            "issues",
            "forged",
            forged.as_bytes(),
            &pidevops::providers::github::webhook::sign_github(
                b"not the secret",
                forged.as_bytes(),
            ),
        )
        .await;
    assert_eq!(r.status(), 401);
    // Linear: another id under the same identifier cancelled and deleted; our id in another case (not ours).
    for id in [
        "8c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f",
        "9C2D1F3E-5B6A-4C7D-8E9F-0A1B2C3D4E5F",
    ] {
        post_linear(
            app,
            &linear_issue(
                "update",
                id,
                ("Canceled", "canceled"),
                &[LABEL],
                "2026-11-29T10:05:00.000Z",
            ),
        )
        .await;
    }
    let mut removed = super::fixture("linear/issue.remove.json");
    removed["data"]["id"] = json!("8c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f");
    removed["data"]["identifier"] = json!("ENG-412");
    post_linear(app, &super::fresh(removed)).await;
    settle(app).await;

    for id in [github, linear] {
        assert_eq!(
            board::row_now(app, id).await.unwrap().column,
            Column::InProgress,
            "{id}"
        );
        let runs = board::runs_now(app, id).await;
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].state, "running", "{runs:#?}");
    }
    assert!(
        app.all_events()
            .await
            .iter()
            .all(|e| e.event_type != "task.cancelled" && e.dedup_key != "forged"),
        "nothing cancelled, the forgery not stored"
    );
    rig.app.stop().await;
}
