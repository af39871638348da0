//! Pollers through the real server, against fake Linear and GitHub APIs on loopback: what a missed webhook would
//! have said is found on the next tick and handled like a delivery; what did arrive is not appended again; a
//! failing tick is counted and the loop goes on; a poller asked for without its credential fails `/health`.
//! Per backend.

use std::time::Duration;

use crate::common::agents::REPO;
use crate::common::board::new_task;
use crate::common::{within, TestApp, TestDb};
use crate::providers::github::fake::FakeGithub;
use crate::providers::linear::fake::{default_states, FakeLinear, Issue, LINEAR_KEY};
use pidevops::projectors::runs::{self, Which};
use pidevops::projectors::tasks as task_rows;
use pidevops::tasks::{Column, TaskId, GITHUB_PR, LINEAR_ISSUE};
use serde_json::{json, Value};

per_backend!(
    a_missed_linear_issue_is_picked_up_once_and_a_delivered_one_is_not_appended_again,
    a_version_a_webhook_delivered_is_not_polled_again_whatever_the_tasks_column,
    a_merge_and_a_ci_failure_whose_webhooks_never_came_are_found_on_github,
    a_github_issue_closed_while_its_webhook_was_missed_stops_its_run,
);

const DELIVERED: &str = "9c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f";
const MISSED: &str = "2b2b2b2b-5b6a-4c7d-8e9f-0a1b2c3d4e5f";

fn issue(id: &str, identifier: &str, updated_at: &str) -> Issue {
    Issue {
        id: id.to_owned(),
        identifier: identifier.to_owned(),
        title: format!("{identifier}: retry failed Stripe webhooks"),
        description: "repo: acme/billing".to_owned(),
        labels: vec!["pi-dev:autonomous".to_owned()],
        state: "st-todo".to_owned(),
        states: default_states(),
        updated_at: updated_at.to_owned(),
        team: "ENG".to_owned(),
    }
}

async fn task_for(app: &TestApp, issue: &str) -> Option<TaskId> {
    app.state
        .board
        .task_for_key(&format!("linear:{issue}"))
        .await
        .unwrap()
}

async fn polled(app: &TestApp, issue: &str) -> usize {
    app.all_events()
        .await
        .iter()
        .filter(|e| e.event_type == "linear.Issue.polled")
        .filter(|e| {
            serde_json::from_slice::<Value>(&e.body).unwrap()["data"]["id"].as_str() == Some(issue)
        })
        .count()
}

async fn poller_health(app: &TestApp, name: &str) -> Value {
    app.health().await.1["loops"][name].clone()
}

async fn a_missed_linear_issue_is_picked_up_once_and_a_delivered_one_is_not_appended_again(
    db: TestDb,
) {
    let recent = (chrono::Utc::now() - chrono::Duration::minutes(5))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let linear = FakeLinear::start().await;
    linear.add_issue(issue(DELIVERED, "ENG-412", &recent));
    linear.add_issue(issue(MISSED, "ENG-413", &recent));
    // Linear is down at first: every poll fails.
    linear.fail_issue_queries(Some(500));
    let mut settings = crate::common::settings(&db);
    linear.point_settings(&mut settings, LINEAR_KEY);
    settings.file = r#"
        [board]
        approval = "auto"
        [intake]
        allow_repos = ["acme/*"]
        [pollers.linear]
        interval_s = 0.5
    "#
    .parse()
    .unwrap();
    let app = TestApp::spawn(settings).await;

    // ENG-412's webhook arrives (the version Linear has now).
    let mut body: Value = serde_json::from_slice(&crate::common::linear_body_at(
        &crate::common::fixtures_dir().join("linear/issue.create.json"),
        0,
    ))
    .unwrap();
    body["data"]["updatedAt"] = json!(recent);
    let r = app.post_linear(&serde_json::to_vec(&body).unwrap()).await;
    assert_eq!(r.status(), 200);
    app.drive("intake").await;
    assert!(task_for(&app, DELIVERED).await.is_some(), "ENG-412's task");

    // The failing poller keeps ticking and says why; within its threshold (a minute here) it only warns.
    within(Duration::from_secs(10), "three failed polls", || async {
        poller_health(&app, "linear_poller").await["errors"]
            .as_u64()
            .unwrap_or(0)
            >= 3
    })
    .await;
    let loop_health = poller_health(&app, "linear_poller").await;
    assert_eq!(loop_health["state"], "armed", "{loop_health}");
    assert!(
        loop_health["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("500")),
        "{loop_health}"
    );
    let failed_at = loop_health["last_tick_at"].as_str().unwrap().to_owned();
    assert_eq!(task_for(&app, MISSED).await, None);

    // Linear is back: the next tick finds ENG-413, whose webhook never came (driven, then intake).
    linear.fail_issue_queries(None);
    app.drive("linear_poller").await;
    app.drive("intake").await;
    assert!(task_for(&app, MISSED).await.is_some(), "ENG-413's task");
    within(Duration::from_secs(10), "a successful poll", || async {
        poller_health(&app, "linear_poller").await["last_ok_at"]
            .as_str()
            .is_some_and(|ok| ok > failed_at.as_str())
    })
    .await;
    // A few more polls: nothing new is appended, no task is made twice.
    for _ in 0..3 {
        app.tick("linear_poller").await;
    }
    app.drive("intake").await;
    app.project().await;
    assert_eq!(polled(&app, MISSED).await, 1, "the missed version, once");
    assert_eq!(
        polled(&app, DELIVERED).await,
        0,
        "the delivered version is not appended again"
    );
    let tasks = task_rows::list(app.state.log.store(), &Default::default())
        .await
        .unwrap();
    assert_eq!(tasks.len(), 2, "{tasks:#?}");
    let row = task_rows::get(app.state.log.store(), task_for(&app, MISSED).await.unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.repo, "acme/billing");
    assert_eq!(row.links.get(LINEAR_ISSUE).unwrap().identifier(), "ENG-413");
    // Since the last success, less an overlap: never the whole history again.
    let issue_queries: Vec<Value> = linear
        .calls()
        .into_iter()
        .filter(|c| c.op == "issues")
        .map(|c| c.variables)
        .collect();
    let last = issue_queries.last().unwrap();
    let since = chrono::DateTime::parse_from_rfc3339(last["since"].as_str().unwrap()).unwrap();
    assert!(
        chrono::Utc::now().signed_duration_since(since) < chrono::Duration::minutes(3),
        "{last}"
    );
    assert_eq!(last["label"], "pi-dev:autonomous");
    app.stop().await;
}

/// The `issue.create` fixture as Linear would send `issue` now: its state, title and version.
fn webhook_of(issue: &Issue, action: &str) -> Vec<u8> {
    let mut body: Value = serde_json::from_slice(&crate::common::linear_body_at(
        &crate::common::fixtures_dir().join("linear/issue.create.json"),
        0,
    ))
    .unwrap();
    let (_, name, kind) = issue.states.iter().find(|s| s.0 == issue.state).unwrap();
    body["action"] = json!(action);
    body["data"]["id"] = json!(issue.id);
    body["data"]["title"] = json!(issue.title);
    body["data"]["updatedAt"] = json!(issue.updated_at);
    body["data"]["state"] = json!({ "id": issue.state, "name": name, "type": kind });
    serde_json::to_vec(&body).unwrap()
}

/// Seconds ago, as Linear writes times.
fn seconds_ago(seconds: i64) -> String {
    (chrono::Utc::now() - chrono::Duration::seconds(seconds))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A version of an issue delivered by webhook while its task is at work (an edit, pidevops's own move to In
/// Progress) is on record on the task, and the poller does not append it again.
async fn a_version_a_webhook_delivered_is_not_polled_again_whatever_the_tasks_column(db: TestDb) {
    let linear = FakeLinear::start().await;
    // Versions within the poll's overlap (two minutes), so every poll asks for them.
    let mut ticket = issue(DELIVERED, "ENG-412", &seconds_ago(90));
    linear.add_issue(ticket.clone());
    let mut settings = crate::common::settings(&db);
    linear.point_settings(&mut settings, LINEAR_KEY);
    // A long interval: after its first tick the poller runs when the test drives it.
    settings.file = r#"
        [board]
        approval = "auto"
        [intake]
        allow_repos = ["acme/*"]
        [pollers.linear]
        interval_s = 3600
    "#
    .parse()
    .unwrap();
    let app = TestApp::spawn(settings).await;
    // The poller's first tick (at start, by itself) is over before anything is edited: a late one, on a loaded
    // machine, would find an edit before its webhook came, which is the poller doing its job.
    within(
        Duration::from_secs(30),
        "the poller's first tick",
        || async {
            app.health().await.1["loops"]["linear_poller"]["ticks"]
                .as_u64()
                .is_some_and(|ticks| ticks >= 1)
        },
    )
    .await;
    assert_eq!(
        app.post_linear(&webhook_of(&ticket, "create"))
            .await
            .status(),
        200
    );
    app.drive("intake").await;
    let id = task_for(&app, DELIVERED).await.expect("ENG-412's task");
    let run = pidevops::tasks::RunId(uuid::Uuid::now_v7());
    app.state
        .board
        .execute(id, &pidevops::tasks::Command::Start { run }, "test")
        .await
        .unwrap();

    // Edited while its task is at work, then moved to In Progress (as pidevops does): each delivered by webhook,
    // and each what the poll finds next.
    for (title, state, seconds) in [
        (
            "ENG-412: retry failed Stripe webhooks, with jitter",
            "st-todo",
            60,
        ),
        (
            "ENG-412: retry failed Stripe webhooks, with jitter",
            "st-progress",
            30,
        ),
    ] {
        ticket.title = title.to_owned();
        ticket.state = state.to_owned();
        ticket.updated_at = seconds_ago(seconds);
        linear.add_issue(ticket.clone());
        assert_eq!(
            app.post_linear(&webhook_of(&ticket, "update"))
                .await
                .status(),
            200
        );
        app.drive("intake").await;
        app.tick("linear_poller").await;
        app.drive("intake").await;
        // (The poller's first tick, at start, may have found the first version before its webhook came.)
        let again = app
            .all_events()
            .await
            .into_iter()
            .filter(|e| e.event_type == "linear.Issue.polled")
            .filter(|e| {
                serde_json::from_slice::<Value>(&e.body).unwrap()["data"]["updatedAt"].as_str()
                    == Some(ticket.updated_at.as_str())
            })
            .count();
        assert_eq!(
            again, 0,
            "the version delivered in {state} is not appended again"
        );
    }
    // Delivered, and polled before intake's next tick reads it (its task does not hold it yet): the log has it, so
    // the poll does not append it a second time.
    ticket.title = "ENG-412: retry failed Stripe webhooks, with jitter and a cap".to_owned();
    ticket.updated_at = seconds_ago(10);
    linear.add_issue(ticket.clone());
    assert_eq!(
        app.post_linear(&webhook_of(&ticket, "update"))
            .await
            .status(),
        200
    );
    app.tick("linear_poller").await;
    app.drive("intake").await;
    let versions = app
        .all_events()
        .await
        .into_iter()
        .filter(|e| e.event_type.starts_with("linear.Issue."))
        .filter(|e| {
            serde_json::from_slice::<Value>(&e.body).unwrap()["data"]["updatedAt"].as_str()
                == Some(ticket.updated_at.as_str())
        })
        .map(|e| e.event_type)
        .collect::<Vec<_>>();
    assert_eq!(versions, ["linear.Issue.update"], "one event per version");
    app.project().await;
    let row = task_rows::get(app.state.log.store(), id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.column, Column::InProgress, "{row:#?}");
    app.stop().await;
}

async fn a_merge_and_a_ci_failure_whose_webhooks_never_came_are_found_on_github(db: TestDb) {
    let github = FakeGithub::start().await;
    let (app, _rig) = TestApp::with_agent("edits.sh", "date +%s%N > CHANGES.md")
        .config("[pollers.github]\ninterval_s = 0.5")
        .github(&github)
        .spawn(&db)
        .await;
    let id = new_task("Fix the login redirect")
        .scope("src/auth")
        .done_when("CI is green")
        .key("test:poller")
        .create(&app)
        .await;
    let branch = id.branch().as_str().to_owned();
    within(
        Duration::from_secs(60),
        "the pull request linked",
        || async {
            // Two read models, each with its own projector: the run's commit may come after the row.
            let ran = runs::query(app.state.log.store(), Which::Task(&id.to_string()))
                .await
                .unwrap()
                .first()
                .is_some_and(|run| run.commit_sha.is_some());
            ran && task_rows::get(app.state.log.store(), id)
                .await
                .unwrap()
                .is_some_and(|row| row.column == Column::InReview && row.links.has(GITHUB_PR))
        },
    )
    .await;
    let first = runs::query(app.state.log.store(), Which::Task(&id.to_string()))
        .await
        .unwrap();
    let sha = first[0].commit_sha.clone().unwrap();

    // CI fails on the pushed commit; the webhook never comes.
    github.set_head(REPO, 1, &sha);
    github.add_check_suite(REPO, &sha, &branch, 77, "failure");
    within(
        Duration::from_secs(60),
        "the second attempt ended",
        || async {
            let runs = runs::query(app.state.log.store(), Which::Task(&id.to_string()))
                .await
                .unwrap();
            runs.len() == 2 && runs.iter().all(|r| r.state != "running")
        },
    )
    .await;
    let runs = runs::query(app.state.log.store(), Which::Task(&id.to_string()))
        .await
        .unwrap();
    let log = std::path::Path::new(runs[1].log_path.as_deref().unwrap());
    let prompt = std::fs::read_to_string(log.with_file_name("prompt.md")).unwrap();
    assert!(
        prompt.contains(&format!(
            "CI failed on {}: GitHub Actions check suite concluded failure",
            &sha[..7]
        )),
        "{prompt}"
    );

    // Merged on GitHub; that webhook never comes either.
    within(
        Duration::from_secs(30),
        "the second attempt in review",
        || async {
            task_rows::get(app.state.log.store(), id)
                .await
                .unwrap()
                .is_some_and(|row| row.column == Column::InReview)
        },
    )
    .await;
    // A few polls of the second attempt: the old failure (still on the pull request's head here) is not news.
    for _ in 0..3 {
        app.tick("github_poller").await;
    }
    github.merge(REPO, 1, "octocat");
    // The poll that finds the merge, reactions and the board: driven, not waited for.
    app.drive("github_poller").await;
    app.drive("reactions").await;
    app.project().await;
    let done = task_rows::get(app.state.log.store(), id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.column, Column::Done, "the task done");
    let appended: Vec<String> = app
        .all_events()
        .await
        .iter()
        .filter(|e| e.meta.get("poller").is_some())
        .map(|e| e.event_type.clone())
        .collect();
    assert_eq!(
        appended,
        ["github.check_suite.completed", "github.pull_request.closed"],
        "each missed fact once"
    );
    let row = task_rows::get(app.state.log.store(), id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.attempts, 2);
    app.stop().await;
}

/// An issue closed on GitHub while its agent works, whose webhook never came: the next poll finds it, and intake
/// withdraws the task as on the webhook (the run stopped, the worktree gone). An open issue with the label, and a
/// task already cancelled, are not appended.
async fn a_github_issue_closed_while_its_webhook_was_missed_stops_its_run(db: TestDb) {
    let github = FakeGithub::start().await;
    github.set_issue(REPO, 12, "open", &["pidevops"], "2026-11-29T10:00:00Z");
    // A long interval: after its first tick the poller runs when the test drives it.
    let (app, _rig) = TestApp::with_agent("works.sh", "echo working; sleep 600")
        .config("[pollers.github]\ninterval_s = 3600")
        .github(&github)
        .spawn(&db)
        .await;
    let mut opened: Value = serde_json::from_slice(
        &std::fs::read(crate::common::fixtures_dir().join("github/issues/opened.payload.json"))
            .unwrap(),
    )
    .unwrap();
    opened["repository"]["full_name"] = json!(REPO);
    opened["issue"]["number"] = json!(12);
    opened["issue"]["labels"] = crate::providers::github::gh_labels(&["pidevops"]);
    opened["issue"]["author_association"] = json!("MEMBER");
    opened["issue"]["updated_at"] = json!("2026-11-29T10:00:00Z");
    let r = app
        .post_github("issues", "open-12", opened.to_string().as_bytes())
        .await;
    assert_eq!(r.status(), 200);
    app.drive("intake").await;
    let id = app
        .state
        .board
        .task_for_key(&format!("github:{REPO}#12"))
        .await
        .unwrap()
        .expect("the issue's task");
    within(Duration::from_secs(60), "the agent at work", || async {
        runs::query(app.state.log.store(), Which::Task(&id.to_string()))
            .await
            .unwrap()
            .first()
            .is_some_and(|r| r.state == "running" && r.output_bytes > 0)
    })
    .await;
    let log = runs::query(app.state.log.store(), Which::Task(&id.to_string()))
        .await
        .unwrap()[0]
        .log_path
        .clone()
        .unwrap();
    let worktree = std::path::Path::new(&log).with_file_name("worktree");
    assert!(worktree.exists());
    let polled_issues = || async {
        app.all_events()
            .await
            .into_iter()
            .filter(|e| e.dedup_key.starts_with("poll:issues:"))
            .map(|e| e.event_type)
            .collect::<Vec<_>>()
    };
    // Open, with the label: nothing to say.
    app.tick("github_poller").await;
    assert!(polled_issues().await.is_empty());

    // Closed on GitHub; the webhook never comes. The poll that finds it, intake and the board: driven.
    github.set_issue(REPO, 12, "closed", &["pidevops"], "2026-11-29T10:05:00Z");
    app.drive("github_poller").await;
    app.drive("intake").await;
    within(Duration::from_secs(30), "the run stopped", || async {
        app.project().await;
        runs::query(app.state.log.store(), Which::Task(&id.to_string()))
            .await
            .unwrap()
            .iter()
            .all(|r| r.state == "failed")
    })
    .await;
    let run = &runs::query(app.state.log.store(), Which::Task(&id.to_string()))
        .await
        .unwrap()[0];
    assert_eq!(run.failure.as_deref(), Some("stopped"), "{run:#?}");
    let row = task_rows::get(app.state.log.store(), id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.column, Column::Cancelled);
    assert!(
        row.state["closed_reason"]
            .as_str()
            .is_some_and(|r| r.contains("acme/app#12 was closed on GitHub")),
        "{row:#?}"
    );
    assert!(!worktree.exists(), "the worktree is gone");
    // Further polls: the task is cancelled, its issue no longer read; the close was appended once.
    for _ in 0..2 {
        app.tick("github_poller").await;
    }
    assert_eq!(polled_issues().await, ["github.issues.closed"]);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poller_that_fails_every_tick_fails_health_after_its_threshold_and_recovers() {
    let db = TestDb::sqlite();
    let linear = FakeLinear::start().await;
    linear.fail_issue_queries(Some(500));
    let mut settings = crate::common::settings(&db);
    linear.point_settings(&mut settings, LINEAR_KEY);
    settings.file = r#"
        [pollers.linear]
        interval_s = 0.2
        [loops.linear_poller]
        fail_after_s = 1.5
    "#
    .parse()
    .unwrap();
    let app = TestApp::spawn(settings).await;
    // The 16-hour dead poller: it ticks, every tick fails, and /health must not stay green. Health may fail
    // before the second failing tick (its threshold runs from the start on a loaded machine), so the wait is for
    // both: failing health, and a loop that kept ticking.
    within(
        Duration::from_secs(30),
        "health fails and the poller failed twice",
        || async {
            let (status, health) = app.health().await;
            status == 503 && health["loops"]["linear_poller"]["errors"].as_u64() >= Some(2)
        },
    )
    .await;
    let (status, health) = app.health().await;
    assert_eq!(status, 503, "{health}");
    let poller = &health["loops"]["linear_poller"];
    assert_eq!(poller["stale"], true, "{health}");
    assert_eq!(poller["fail_after_s"], 1.5, "{health}");
    assert_eq!(poller["last_ok_at"], Value::Null, "{health}");
    let problems = health["problems"].to_string();
    assert!(
        problems
            .contains("loop linear_poller is stale: no successful tick within 1.5 s; last error:")
            && problems.contains("500"),
        "the loop and its last error are named: {health}"
    );

    // Linear is back: one successful poll and the loop is fresh again.
    linear.fail_issue_queries(None);
    within(Duration::from_secs(30), "health recovers", || async {
        app.health().await.0 == 200
    })
    .await;
    let (_, health) = app.health().await;
    assert_eq!(health["loops"]["linear_poller"]["stale"], false, "{health}");
    app.stop().await;
}

#[tokio::test]
async fn a_poller_asked_for_without_its_credential_fails_health() {
    let db = TestDb::sqlite();
    let mut settings = crate::common::settings(&db);
    settings.file = r#"
        [pollers.linear]
        interval_s = 60
        [pollers.github]
    "#
    .parse()
    .unwrap();
    let app = TestApp::spawn(settings).await;
    let (status, health) = app.health().await;
    assert_eq!(status, 503, "{health}");
    for (name, variable) in [
        ("linear_poller", "LINEAR_API_KEY"),
        ("github_poller", "GITHUB_TOKEN"),
    ] {
        let state = &health["loops"][name];
        assert_eq!(state["state"], "unarmed", "{state}");
        assert!(
            state["reason"]
                .as_str()
                .is_some_and(|r| r.contains(variable)),
            "{state}"
        );
    }
    app.stop().await;

    // Not asked for and no credential: disabled, and health passes.
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let (status, health) = app.health().await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["loops"]["linear_poller"]["state"], "disabled");
    assert_eq!(health["loops"]["github_poller"]["state"], "disabled");
    app.stop().await;
}
