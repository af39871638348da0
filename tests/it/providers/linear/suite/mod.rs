//! Linear hears back, through the real server and a fake Linear GraphQL API on loopback: comments and state moves
//! on an issue's task (start, review, needs a human, done), agent activities instead of comments for a task from
//! an agent session (a thought within 10 s of `created`, one `response` or `error` per attempt), a stop signal
//! that halts a real agent run, follow-ups, retries of 500 / 429 / RATELIMITED, and nothing posted twice when the
//! log is read again. Per backend.

use std::time::Duration;

use crate::common::{within, TestApp, TestDb};
use crate::providers::linear::fake::{default_states, FakeLinear, Issue, LINEAR_KEY};
use pidevops::effects::EffectEvent;
use pidevops::projectors::tasks as task_rows;
use pidevops::tasks::{Column, Command, Reason, RetryCause, RunId, TaskId};
use secrecy::SecretString;
use serde_json::{json, Value};

mod plans;

per_backend!(
    an_issue_hears_when_work_starts_goes_to_review_needs_a_human_and_is_done,
    an_agent_session_gets_a_thought_at_once_and_one_end_per_attempt,
    a_stop_signal_halts_the_running_agent_and_ends_the_attempt_once,
    linear_failures_are_retried_and_a_permanent_one_asks_a_human,
    an_agent_session_pidevops_cannot_take_ends_with_why,
);

/// The issue of the `issue.create` and `agent_session.*` fixtures.
const ISSUE: &str = "9c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f";
const SESSION: &str = "as-0000-4000-8000-000000000501";

fn issue_412() -> Issue {
    Issue {
        id: ISSUE.to_owned(),
        identifier: "ENG-412".to_owned(),
        title: "Retry failed Stripe webhooks with exponential backoff".to_owned(),
        description: "repo: acme/billing".to_owned(),
        labels: vec!["pi-dev:autonomous".to_owned()],
        state: "st-todo".to_owned(),
        states: default_states(),
        updated_at: "2026-11-29T10:15:03.120Z".to_owned(),
        team: "ENG".to_owned(),
    }
}

fn fixture(name: &str) -> std::path::PathBuf {
    crate::common::fixtures_dir().join("linear").join(name)
}

/// A Linear fixture as JSON with a fresh `webhookTimestamp`, changed by `edit`.
fn delivery(name: &str, edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut body: Value =
        serde_json::from_slice(&crate::common::linear_body_at(&fixture(name), 0)).unwrap();
    edit(&mut body);
    serde_json::to_vec(&body).unwrap()
}

async fn spawn(db: &TestDb, linear: &FakeLinear, file: toml::Table) -> TestApp {
    let mut settings = crate::common::settings(db);
    linear.point_settings(&mut settings, LINEAR_KEY);
    settings.file = pidevops::config::FileConfig::try_from(file).unwrap();
    TestApp::spawn(settings).await
}

fn auto_approval(default_repo: &str) -> toml::Table {
    format!(
        r#"
        [board]
        approval = "auto"
        [intake]
        default_repo = "{default_repo}"
        allow_repos = ["acme/*"]
        "#
    )
    .parse()
    .unwrap()
}

async fn task_for_issue(app: &TestApp) -> TaskId {
    task_for_key(app, &format!("linear:{ISSUE}")).await
}

/// The task of `key` once intake has handled every delivery: created and approved (these tests approve
/// automatically, and the approval is appended just after the creation: seen in CI, a start in between was
/// refused). Driven, not waited for.
async fn task_for_key(app: &TestApp, key: &str) -> TaskId {
    app.drive("intake").await;
    let id = app
        .state
        .board
        .task_for_key(key)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("the task of {key}"));
    let loaded = app.state.board.load(id).await.unwrap().unwrap();
    assert_ne!(loaded.task.column(), Column::Triage, "{key} approved");
    id
}

/// `text` among the task's follow-ups for its next run, once intake has handled every delivery.
async fn assert_follow_up(app: &TestApp, id: TaskId, text: &str) {
    app.drive("intake").await;
    let loaded = app.state.board.load(id).await.unwrap().unwrap();
    assert!(
        loaded
            .task
            .pending_follow_ups()
            .any(|f| f.text.as_str() == text),
        "the follow-up {text:?}"
    );
}

async fn execute(app: &TestApp, id: TaskId, command: Command) {
    app.state
        .board
        .execute(id, &command, "test")
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", command.name()));
}

fn kinds(activities: &[(String, Value)]) -> Vec<String> {
    activities
        .iter()
        .map(|(_, c)| c["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn calls_of(linear: &FakeLinear, op: &str) -> usize {
    linear.calls().iter().filter(|c| c.op == op).count()
}

async fn an_issue_hears_when_work_starts_goes_to_review_needs_a_human_and_is_done(db: TestDb) {
    let linear = FakeLinear::start().await;
    linear.add_issue(issue_412());
    let app = spawn(&db, &linear, auto_approval("acme/billing")).await;
    let r = app
        .post_linear(&crate::common::linear_body_at(
            &fixture("issue.create.json"),
            0,
        ))
        .await;
    assert_eq!(r.status(), 200);
    let id = task_for_issue(&app).await;

    let run = RunId(uuid::Uuid::now_v7());
    execute(&app, id, Command::Start { run }).await;
    app.drive("effects:linear").await;
    assert_eq!(
        linear.state_of(ISSUE).as_deref(),
        Some("Pi-Dev: In Progress")
    );
    assert_eq!(linear.comments().len(), 1, "In Progress and a comment");
    let (on, body) = &linear.comments()[0];
    assert_eq!(on, ISSUE);
    assert!(
        body.contains(&format!(
            "started work on this as **{id}** in `acme/billing`"
        )),
        "{body}"
    );

    // No GitHub token here, so no pull request: the review is announced with the branch.
    execute(
        &app,
        id,
        Command::SubmitForReview {
            run,
            branch: id.branch(),
            pr: None,
            report: Default::default(),
        },
    )
    .await;
    app.drive("effects:linear").await;
    assert_eq!(linear.state_of(ISSUE).as_deref(), Some("In Review"));
    assert_eq!(linear.comments().len(), 2, "In Review and a comment");
    assert!(linear
        .comments()
        .iter()
        .any(|(_, b)| b.contains(&format!("ready for review in branch `pidevops/{id}`"))));

    execute(
        &app,
        id,
        Command::FlagNeedsHuman {
            reason: Reason::new("the tests need a database".to_owned()).unwrap(),
        },
    )
    .await;
    app.drive("effects:linear").await;
    assert_eq!(linear.state_of(ISSUE).as_deref(), Some("Pi-Dev: Blocked"));
    assert_eq!(linear.comments().len(), 3, "Blocked and a comment");
    assert!(linear
        .comments()
        .iter()
        .any(|(_, b)| b.contains("needs a human: the tests need a database")));

    execute(&app, id, Command::ClearNeedsHuman).await;
    execute(&app, id, Command::Complete).await;
    app.drive("effects:linear").await;
    assert_eq!(linear.state_of(ISSUE).as_deref(), Some("Done"));
    assert_eq!(linear.comments().len(), 4, "Done and a comment");
    assert!(linear
        .comments()
        .iter()
        .any(|(_, b)| b.contains(&format!("**{id}** is done"))));

    // Read the whole log again from the start: every effect is settled, nothing is called again.
    let calls = linear.calls().len();
    let replay = pidevops::effects::runner::Effects::new(
        pidevops::providers::linear::effects::LinearPolicy::new(
            pidevops::providers::linear::LinearClient::new(
                &linear.url,
                &SecretString::from(LINEAR_KEY),
            )
            .unwrap(),
            Default::default(),
            Default::default(),
        ),
        app.state.log.clone(),
        app.state.board.clone(),
    )
    .with_checkpoint("effects:linear:replay")
    .with_tick_budget(crate::common::WHOLE_TICK);
    replay.tick().await.unwrap();
    assert_eq!(linear.calls().len(), calls, "a replay called Linear");
    assert_eq!(calls_of(&linear, "commentCreate"), 4);
    assert!(
        linear.activities().is_empty(),
        "no agent session: comments only"
    );
    let (status, health) = app.health().await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(
        health["loops"][pidevops::effects::loop_name("linear")]["state"],
        "armed"
    );
    app.stop().await;
}

async fn an_agent_session_gets_a_thought_at_once_and_one_end_per_attempt(db: TestDb) {
    let linear = FakeLinear::start().await;
    linear.add_issue(issue_412());
    let app = spawn(&db, &linear, auto_approval("acme/billing")).await;
    let sent = std::time::Instant::now();
    let r = app
        .post_linear(&delivery("agent_session.created.json", |_| {}))
        .await;
    assert_eq!(r.status(), 200);
    within(Duration::from_secs(10), "the first thought", || async {
        linear.activities().len() == 1
    })
    .await;
    assert!(sent.elapsed() < Duration::from_secs(10));
    let (session, thought) = &linear.activities()[0];
    assert_eq!(session, SESSION);
    assert_eq!(thought["type"], "thought");
    assert!(thought["body"].as_str().unwrap().contains("ENG-412"));
    let id = task_for_issue(&app).await;

    // Attempt 1 fails; attempt 2 goes to review; CI fails; attempt 3 goes to review.
    let run1 = RunId(uuid::Uuid::now_v7());
    execute(&app, id, Command::Start { run: run1 }).await;
    execute(
        &app,
        id,
        Command::Retry {
            cause: RetryCause::RunFailed { run: run1 },
            reason: Reason::new("the agent exited with status 1".to_owned()).unwrap(),
        },
    )
    .await;
    let run2 = RunId(uuid::Uuid::now_v7());
    execute(&app, id, Command::Start { run: run2 }).await;
    execute(
        &app,
        id,
        Command::SubmitForReview {
            run: run2,
            branch: id.branch(),
            pr: None,
            report: Default::default(),
        },
    )
    .await;
    execute(
        &app,
        id,
        Command::Retry {
            cause: RetryCause::ChecksFailed,
            reason: Reason::new("CI failed on 0123abc: lint".to_owned()).unwrap(),
        },
    )
    .await;
    let run3 = RunId(uuid::Uuid::now_v7());
    execute(&app, id, Command::Start { run: run3 }).await;
    execute(
        &app,
        id,
        Command::SubmitForReview {
            run: run3,
            branch: id.branch(),
            pr: None,
            report: Default::default(),
        },
    )
    .await;
    let want = [
        "thought", "action", "thought", "action", "response", "thought", "action", "response",
    ];
    app.drive("effects:linear").await;
    let activities = linear.activities();
    assert_eq!(kinds(&activities), want, "{activities:#?}");
    assert!(activities.iter().all(|(s, _)| s == SESSION));
    assert!(activities[2].1["body"]
        .as_str()
        .unwrap()
        .contains("Attempt 1 failed: the agent exited with status 1"));
    assert!(activities[5].1["body"]
        .as_str()
        .unwrap()
        .contains("CI failed on 0123abc: lint"));
    assert!(
        linear.comments().is_empty(),
        "an agent session gets activities, not comments"
    );
    assert_eq!(linear.state_of(ISSUE).as_deref(), Some("In Review"));

    // A follow-up in the session is queued for the task's next run.
    let r = app
        .post_linear(&delivery("agent_session.prompted.json", |_| {}))
        .await;
    assert_eq!(r.status(), 200);
    assert_follow_up(&app, id, "Use a max of 5 retries, not 3.").await;
    // One that names only its session reaches the same task (the session is mapped to its issue).
    let by_session = delivery("agent_session.prompted.json", |body| {
        body["agentSession"]
            .as_object_mut()
            .unwrap()
            .remove("issueId");
        body["agentActivity"]["id"] = json!("aa-0000-4000-8000-000000000603");
        body["agentActivity"]["content"]["body"] = json!("And log each retry.");
    });
    assert_eq!(app.post_linear(&by_session).await.status(), 200);
    assert_follow_up(&app, id, "And log each retry.").await;
    app.stop().await;
}

async fn a_stop_signal_halts_the_running_agent_and_ends_the_attempt_once(db: TestDb) {
    let linear = FakeLinear::start().await;
    linear.add_issue(issue_412());
    let (app, _rig) = TestApp::with_agent("slow.sh", "echo working; sleep 600")
        .config(r#"intake.default_repo = "acme/app""#)
        .linear(&linear)
        .spawn(&db)
        .await;
    let r = app
        .post_linear(&delivery("agent_session.created.json", |_| {}))
        .await;
    assert_eq!(r.status(), 200);
    let id = task_for_issue(&app).await;
    within(Duration::from_secs(30), "the agent at work", || async {
        kinds(&linear.activities()) == ["thought", "action"]
    })
    .await;
    assert_eq!(
        linear.state_of(ISSUE).as_deref(),
        Some("Pi-Dev: In Progress")
    );

    let stop = delivery("agent_session.prompted.json", |body| {
        body["agentActivity"]["id"] = json!("aa-0000-4000-8000-000000000602");
        body["agentActivity"]["signal"] = json!("stop");
        body["agentActivity"]["content"]["body"] = json!("Stop");
    });
    assert_eq!(app.post_linear(&stop).await.status(), 200);
    within(Duration::from_secs(30), "the run stopped", || async {
        let runs = pidevops::projectors::runs::query(
            app.state.log.store(),
            pidevops::projectors::runs::Which::Task(&id.to_string()),
        )
        .await
        .unwrap();
        !runs.is_empty() && runs.iter().all(|r| r.state == "failed")
    })
    .await;
    let row = task_rows::get(app.state.log.store(), id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.column, Column::Cancelled);
    // The run's end is in the log (the runs read model shows it): effects is driven to it, not waited for.
    app.drive("effects:linear").await;
    let activities = linear.activities();
    assert_eq!(
        kinds(&activities),
        ["thought", "action", "response"],
        "{activities:#?}"
    );
    assert!(activities[2].1["body"]
        .as_str()
        .unwrap()
        .contains("stopped from Linear"));
    app.stop().await;
}

async fn linear_failures_are_retried_and_a_permanent_one_asks_a_human(db: TestDb) {
    let linear = FakeLinear::start().await;
    linear.add_issue(issue_412());
    // The failures below are the state move's alone (`fail_next_op`): the poller, asking Linear for changed
    // issues (`issues`) on its own schedule, cannot take one of them (it did once in CI when they were any call's).
    let app = spawn(&db, &linear, auto_approval("acme/billing")).await;
    let r = app
        .post_linear(&crate::common::linear_body_at(
            &fixture("issue.create.json"),
            0,
        ))
        .await;
    assert_eq!(r.status(), 200);
    let id = task_for_issue(&app).await;
    // Whatever the task's creation asks of Linear is done first (on a loaded machine the loop's first tick may
    // come late): the failures below are the start's alone.
    app.drive("effects:linear").await;
    // The state move of the start (its look-up of the issue's states, `issue`) meets a 500, a 429
    // (Retry-After: 1) and RATELIMITED; the comment's calls answer as usual.
    linear.fail_next_op("issue", &[500, 429, 400]);
    let run = RunId(uuid::Uuid::now_v7());
    execute(&app, id, Command::Start { run }).await;
    within(
        Duration::from_secs(40),
        "the comment made after all",
        || async {
            linear.comments().len() == 1
                && linear.state_of(ISSUE).as_deref() == Some("Pi-Dev: In Progress")
        },
    )
    .await;
    let failures: Vec<EffectEvent> = app
        .all_events()
        .await
        .iter()
        .filter(|e| {
            e.event_type == "effect.failed"
                && e.stream
                    .as_deref()
                    .is_some_and(|s| s.starts_with("effect:linear:"))
        })
        .map(|e| serde_json::from_slice(&e.body).unwrap())
        .collect();
    assert_eq!(
        failures.len(),
        3,
        "three refusals, each recorded: {failures:#?}\ncalls: {:#?}",
        linear
            .calls()
            .iter()
            .map(|c| c.op.clone())
            .collect::<Vec<_>>()
    );
    for failure in &failures {
        let EffectEvent::Failed { retry_at, .. } = failure else {
            unreachable!("only effect.failed events were kept")
        };
        assert!(retry_at.is_some(), "transient, so retried: {failure:?}");
    }
    assert_eq!(
        calls_of(&linear, "commentCreate"),
        1,
        "the comment made once"
    );

    // An issue Linear does not know: a permanent failure, surfaced on the task.
    let gone = delivery("issue.create.json", |body| {
        body["data"]["id"] = json!("11111111-2222-4333-8444-555555555555");
        body["data"]["identifier"] = json!("ENG-999");
    });
    assert_eq!(app.post_linear(&gone).await.status(), 200);
    let other = task_for_key(&app, "linear:11111111-2222-4333-8444-555555555555").await;
    let run = RunId(uuid::Uuid::now_v7());
    execute(&app, other, Command::Start { run }).await;
    app.drive("effects:linear").await;
    app.project().await;
    let row = task_rows::get(app.state.log.store(), other)
        .await
        .unwrap()
        .unwrap();
    assert!(
        row.needs_human
            && row
                .needs_human_reason
                .as_deref()
                .is_some_and(|r| r.contains("not visible with LINEAR_API_KEY")),
        "the task flagged: {row:?}"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_comment_or_activity_repeated_after_a_crash_is_found_not_made_twice() {
    let linear = FakeLinear::start().await;
    linear.add_issue(issue_412());
    let client = pidevops::providers::linear::LinearClient::new(
        &linear.url,
        &SecretString::from(LINEAR_KEY),
    )
    .unwrap();
    let issue: uuid::Uuid = ISSUE.parse().unwrap();
    let first = client
        .comment("linear:comment:T-1:started", issue, "hello")
        .await;
    let again = client
        .comment("linear:comment:T-1:started", issue, "hello")
        .await;
    assert!(matches!(
        first,
        Ok(pidevops::effects::Produced::Comment { posted: true, .. })
    ));
    assert!(
        matches!(
            again,
            Ok(pidevops::effects::Produced::Comment { posted: false, .. })
        ),
        "{again:?}"
    );
    assert_eq!(linear.comments().len(), 1);
    let content = json!({ "type": "thought", "body": "thinking" });
    client.activity("k", SESSION, &content).await.unwrap();
    client.activity("k", SESSION, &content).await.unwrap();
    assert_eq!(linear.activities().len(), 1);

    // A wrong key is a permanent failure that names no secret.
    let wrong = pidevops::providers::linear::LinearClient::new(
        &linear.url,
        &SecretString::from("lin_api_wrong"),
    )
    .unwrap();
    let refused = wrong.viewer().await.unwrap_err();
    assert!(matches!(
        refused,
        pidevops::effects::CallError::Permanent { .. }
    ));
    assert!(!refused.to_string().contains("lin_api_wrong"));
    assert_eq!(client.viewer().await.unwrap(), "pidevops bot");
}

/// `doctor` proves the Linear key and the Telegram bot with read-only calls, says whether a Telegram webhook is
/// registered, and fails on a refused key; neither secret appears in the report.
#[tokio::test]
async fn doctor_checks_linear_and_the_telegram_bot_with_read_only_calls() {
    let db = TestDb::sqlite();
    let linear = FakeLinear::start().await;
    let telegram = crate::providers::telegram::fake::FakeTelegram::start().await;
    let bot_token = "4242:doctor-bot-secret";
    let mut settings = crate::common::settings(&db);
    linear.point_settings(&mut settings, LINEAR_KEY);
    telegram.point_settings(&mut settings, bot_token);
    let (report, ok) = pidevops::doctor::diagnose(&settings).await;
    let line = |name: &str| {
        report
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{report}"))
            .to_owned()
    };
    assert!(
        line("linear api").contains("pass") && line("linear api").contains("acts as pidevops bot"),
        "{report}"
    );
    let bot = line("telegram api");
    assert!(
        bot.contains("pass") && bot.contains("the bot is @pidevops_test_bot"),
        "{bot}"
    );
    // The test settings carry TELEGRAM_WEBHOOK_SECRET, and the fake has no webhook registered: said plainly.
    assert!(bot.contains("no webhook registered"), "{bot}");
    assert!(ok, "{report}");
    assert!(!report.contains(LINEAR_KEY) && !report.contains(bot_token));
    assert_eq!(calls_of(&linear, "viewer"), 1);
    assert_eq!(telegram.methods(), ["getMe", "getWebhookInfo"]);

    settings
        .providers
        .set("LINEAR_API_KEY", Some("lin_api_refused"))
        .unwrap();
    let (report, ok) = pidevops::doctor::diagnose(&settings).await;
    assert!(!ok, "a refused key fails doctor: {report}");
    let refused = report
        .lines()
        .find(|l| l.starts_with("linear api"))
        .unwrap();
    assert!(
        refused.contains("FAIL") && refused.contains("Authentication required"),
        "{refused}"
    );
    assert!(!report.contains("lin_api_refused"));
}

async fn an_agent_session_pidevops_cannot_take_ends_with_why(db: TestDb) {
    let linear = FakeLinear::start().await;
    linear.add_issue(issue_412());
    // No default repository, and the session's issue names none: intake refuses it.
    let app = spawn(
        &db,
        &linear,
        "[board]\napproval = \"auto\"".parse().unwrap(),
    )
    .await;
    let r = app
        .post_linear(&delivery("agent_session.created.json", |_| {}))
        .await;
    assert_eq!(r.status(), 200);
    // Intake refuses it, then effects answers the session: both driven to rest.
    app.drive("intake").await;
    app.drive("effects:linear").await;
    let activities = linear.activities();
    assert_eq!(kinds(&activities), ["thought", "error"], "{activities:#?}");
    let why = activities[1].1["body"].as_str().unwrap();
    assert!(
        why.starts_with(
            "pidevops cannot take this on: agent session on ENG-412: its issue names no repository"
        ),
        "{why}"
    );
    assert!(app
        .state
        .board
        .task_for_key(&format!("linear:{ISSUE}"))
        .await
        .unwrap()
        .is_none());
    app.stop().await;
}
