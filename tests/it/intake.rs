//! Intake through the real server: signed webhooks in, tasks (or recorded refusals) out; one task per ticket
//! however often and in whatever order the ticket arrives. A repository the configuration does not allow is
//! refused at every door (GitHub, Linear, agent sessions, Telegram, the API, the dispatcher) and never cloned.

use std::time::Duration;

use crate::common::{TestApp, TestDb, ADMIN_TOKEN};
use pidevops::eventlog::StoredEvent;
use serde_json::{json, Value};

mod plans;
mod withdrawals;

per_backend!(
    a_labeled_github_issue_from_a_member_becomes_one_task,
    an_agent_label_picks_the_tasks_agent_profile,
    github_issues_from_strangers_or_our_own_bot_make_no_task_and_say_why,
    a_linear_issue_delivered_twice_and_updated_gives_one_task,
    a_linear_issue_with_a_skip_label_or_no_repository_makes_no_task,
    telegram_new_from_an_allowed_chat_creates_and_a_stranger_is_refused_and_audited,
    linear_edits_update_the_spec_and_removing_the_label_cancels_an_unstarted_task,
    a_linear_agent_session_links_to_the_issues_task_and_prompted_queues_a_follow_up,
    a_tick_stops_at_its_budget_with_its_checkpoint_on_the_last_event_handled,
    repositories_not_allowed_are_refused_at_every_door_and_never_cloned,
);

fn fixture(path: &str) -> Value {
    serde_json::from_slice(&std::fs::read(crate::common::fixtures_dir().join(path)).unwrap())
        .unwrap()
}

async fn app(db: &TestDb) -> TestApp {
    let mut settings = crate::common::settings(db);
    settings
        .providers
        .set("TELEGRAM_ALLOWED_CHATS", Some("111222333, -100200300"))
        .unwrap();
    settings.file = r#"
        [intake]
        allow_repos = ["acme/*", "Codertocat/Hello-World"]
        [intake.github]
        bot_login = "pidevops-bot"
        "#
    .parse()
    .unwrap();
    TestApp::spawn(settings).await
}

async fn events_of(app: &TestApp, event_type: &str) -> Vec<StoredEvent> {
    app.all_events()
        .await
        .into_iter()
        .filter(|e| e.event_type == event_type)
        .collect()
}

/// Intake has handled everything in the log, its own records too (driven to rest, not waited for), and the
/// read models are at the head.
async fn settle(app: &TestApp) {
    app.drive("intake").await;
    app.project().await;
}

async fn task(app: &TestApp, id: &str) -> Option<Value> {
    let r = app
        .client
        .get(app.url(&format!("/api/tasks/{id}")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    match r.status().as_u16() {
        200 => Some(r.json().await.unwrap()),
        404 => None,
        other => panic!("GET /api/tasks/{id}: {other}"),
    }
}

async fn post_github(app: &TestApp, event: &str, delivery: &str, body: &Value) {
    let r = app
        .post_github(event, delivery, body.to_string().as_bytes())
        .await;
    assert_eq!(r.status(), 200);
}

fn labeled(mut body: Value, label: &str, association: &str) -> Value {
    body["issue"]["labels"] = crate::providers::github::gh_labels(&[label]);
    body["issue"]["author_association"] = json!(association);
    body
}

async fn a_labeled_github_issue_from_a_member_becomes_one_task(db: TestDb) {
    let app = app(&db).await;
    let opened = labeled(
        fixture("github/issues/opened.payload.json"),
        "pidevops",
        "MEMBER",
    );
    post_github(&app, "issues", "d-1", &opened).await;
    // Redelivered by GitHub (same delivery), delivered again as a new delivery, then labeled again.
    post_github(&app, "issues", "d-1", &opened).await;
    post_github(&app, "issues", "d-2", &opened).await;
    let mut again = labeled(
        fixture("github/issues/labeled.payload.json"),
        "pidevops",
        "MEMBER",
    );
    again["label"] = crate::providers::github::gh_label("pidevops");
    post_github(&app, "issues", "d-3", &again).await;
    settle(&app).await;

    let shown = task(&app, "T-1").await.expect("a task for the issue");
    let repo = opened["repository"]["full_name"].as_str().unwrap();
    assert_eq!(shown["task"]["repo"], repo);
    assert_eq!(shown["task"]["spec"]["task"], opened["issue"]["title"]);
    assert_eq!(shown["task"]["links"]["github_issue"]["repo"], repo);
    assert!(task(&app, "T-2").await.is_none(), "one ticket, one task");
    let created = events_of(&app, "task.created").await;
    assert_eq!(created.len(), 1);
    assert_eq!(created[0].meta.text("actor").as_deref(), Some("github"));
    let cause = created[0].meta.text("cause_event_id").unwrap();
    let first_webhook = &events_of(&app, "github.issues.opened").await[0];
    assert_eq!(
        cause,
        first_webhook.id.to_string(),
        "the task names the webhook that made it"
    );
    app.stop().await;
}

async fn github_issues_from_strangers_or_our_own_bot_make_no_task_and_say_why(db: TestDb) {
    let app = app(&db).await;
    let stranger = labeled(
        fixture("github/issues/opened.payload.json"),
        "pidevops",
        "NONE",
    );
    post_github(&app, "issues", "s-1", &stranger).await;
    let mut ours = labeled(
        fixture("github/issues/opened.payload.json"),
        "pidevops",
        "OWNER",
    );
    ours["issue"]["number"] = json!(77);
    ours["sender"]["login"] = json!("pidevops-bot");
    post_github(&app, "issues", "s-2", &ours).await;
    let unlabeled = labeled(fixture("github/issues/opened.payload.json"), "bug", "OWNER");
    post_github(&app, "issues", "s-3", &unlabeled).await;
    settle(&app).await;

    assert!(task(&app, "T-1").await.is_none());
    let ignored = events_of(&app, "intake.ignored").await;
    assert_eq!(
        ignored.len(),
        2,
        "the unlabeled issue is not a candidate at all"
    );
    let reasons: Vec<Value> = ignored
        .iter()
        .map(|e| serde_json::from_slice(&e.body).unwrap())
        .collect();
    assert!(
        reasons[0]["reason"].as_str().unwrap().contains("NONE"),
        "{}",
        reasons[0]
    );
    assert!(
        reasons[1]["reason"]
            .as_str()
            .unwrap()
            .contains("pidevops-bot"),
        "{}",
        reasons[1]
    );
    let webhooks = events_of(&app, "github.issues.opened").await;
    assert_eq!(reasons[0]["cause_event_id"], webhooks[0].id.to_string());
    app.stop().await;
}

/// An `agent:<name>` label picks the task's agent profile; a bad or ambiguous one makes no task and says why.
async fn an_agent_label_picks_the_tasks_agent_profile(db: TestDb) {
    let app = app(&db).await;
    let labels = crate::providers::github::gh_labels;
    let mut picked = labeled(
        fixture("github/issues/opened.payload.json"),
        "pidevops",
        "MEMBER",
    );
    picked["issue"]["labels"] = labels(&["pidevops", "agent:codex"]);
    post_github(&app, "issues", "a-1", &picked).await;
    let mut bad = picked.clone();
    bad["issue"]["number"] = json!(901);
    bad["issue"]["labels"] = labels(&["pidevops", "agent:Codex CLI"]);
    post_github(&app, "issues", "a-2", &bad).await;
    let mut two = picked.clone();
    two["issue"]["number"] = json!(902);
    two["issue"]["labels"] = labels(&["pidevops", "agent:codex", "agent:pi"]);
    post_github(&app, "issues", "a-3", &two).await;
    settle(&app).await;

    let shown = task(&app, "T-1")
        .await
        .expect("a task for the labeled issue");
    assert_eq!(shown["task"]["agent"], "codex");
    assert!(
        task(&app, "T-2").await.is_none(),
        "the bad labels make no task"
    );
    let reasons: Vec<String> = events_of(&app, "intake.ignored")
        .await
        .iter()
        .map(|e| {
            serde_json::from_slice::<Value>(&e.body).unwrap()["reason"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(
        reasons[0].contains("agent: label is not valid") && reasons[0].contains("Codex CLI"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].contains("2 agent: labels (codex, pi)"),
        "{reasons:?}"
    );
    app.stop().await;
}

fn linear(mut body: Value, updated_at: &str) -> Vec<u8> {
    body["data"]["updatedAt"] = json!(updated_at);
    body["webhookTimestamp"] = json!(chrono::Utc::now().timestamp_millis());
    body.to_string().into_bytes()
}

async fn a_linear_issue_delivered_twice_and_updated_gives_one_task(db: TestDb) {
    let app = app(&db).await;
    let issue = fixture("linear/issue.create.json");
    for updated_at in [
        "2026-11-29T10:15:03.120Z",
        "2026-11-29T10:15:03.120Z",
        "2026-11-29T10:16:00.000Z",
    ] {
        let r = app.post_linear(&linear(issue.clone(), updated_at)).await;
        assert_eq!(r.status(), 200);
    }
    // The same issue as a later update (as a poller would also see it).
    let mut update = issue.clone();
    update["action"] = json!("update");
    let r = app
        .post_linear(&linear(update, "2026-11-29T10:20:00.000Z"))
        .await;
    assert_eq!(r.status(), 200);
    settle(&app).await;

    let shown = task(&app, "T-1").await.expect("a task for ENG-412");
    assert_eq!(
        shown["task"]["repo"], "acme/billing",
        "from the description's repo: line"
    );
    assert_eq!(shown["task"]["priority"], "high");
    assert_eq!(
        shown["task"]["links"]["linear_issue"]["identifier"],
        "ENG-412"
    );
    assert!(
        shown["task"]["spec"]["done_when"]
            .as_str()
            .unwrap()
            .contains("retried 5 times"),
        "{shown}"
    );
    assert!(task(&app, "T-2").await.is_none());
    assert_eq!(events_of(&app, "task.created").await.len(), 1);
    app.stop().await;
}

async fn a_linear_issue_with_a_skip_label_or_no_repository_makes_no_task(db: TestDb) {
    let app = app(&db).await;
    let mut skipped = fixture("linear/issue.create.json");
    skipped["data"]["labels"] = json!([{ "name": "pi-dev:autonomous" }, { "name": "legal" }]);
    app.post_linear(&linear(skipped, "2026-11-29T10:15:03.120Z"))
        .await;
    let mut nowhere = fixture("linear/issue.create.json");
    nowhere["data"]["id"] = json!("1c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f");
    nowhere["data"]["description"] = json!("No repository named anywhere.");
    app.post_linear(&linear(nowhere, "2026-11-29T10:15:04.120Z"))
        .await;
    let mut not_ready = fixture("linear/issue.create.json");
    not_ready["data"]["id"] = json!("2c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f");
    not_ready["data"]["state"]["name"] = json!("Backlog");
    app.post_linear(&linear(not_ready, "2026-11-29T10:15:05.120Z"))
        .await;
    settle(&app).await;

    assert!(task(&app, "T-1").await.is_none());
    let reasons: Vec<String> = events_of(&app, "intake.ignored")
        .await
        .iter()
        .map(|e| {
            serde_json::from_slice::<Value>(&e.body).unwrap()["reason"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(reasons[0].contains("legal"), "{reasons:?}");
    assert!(reasons[1].contains("no repository"), "{reasons:?}");
    app.stop().await;
}

async fn telegram_new_from_an_allowed_chat_creates_and_a_stranger_is_refused_and_audited(
    db: TestDb,
) {
    let app = app(&db).await;
    let new =
        std::fs::read(crate::common::fixtures_dir().join("telegram/message.command.new.json"))
            .unwrap();
    let stranger =
        std::fs::read(crate::common::fixtures_dir().join("telegram/message.from_stranger.json"))
            .unwrap();
    for body in [&new, &stranger, &new] {
        let r = app
            .post_telegram(body, crate::common::TELEGRAM_SECRET)
            .await;
        assert_eq!(r.status(), 200);
    }
    settle(&app).await;

    let shown = task(&app, "T-1").await.expect("a task from /new");
    assert_eq!(shown["task"]["repo"], "acme/billing");
    assert_eq!(
        shown["task"]["spec"]["task"],
        "Add a health check for the Stripe client"
    );
    assert_eq!(shown["task"]["links"]["telegram"]["chat"], 111222333);
    assert!(
        task(&app, "T-2").await.is_none(),
        "the stranger's /new made nothing"
    );
    let ignored = events_of(&app, "intake.ignored").await;
    assert_eq!(ignored.len(), 1);
    let audit: Value = serde_json::from_slice(&ignored[0].body).unwrap();
    let reason = audit["reason"].as_str().unwrap();
    assert!(
        reason.contains("999888777") && reason.contains("TELEGRAM_ALLOWED_CHATS"),
        "{reason}"
    );
    app.stop().await;
}

async fn linear_edits_update_the_spec_and_removing_the_label_cancels_an_unstarted_task(db: TestDb) {
    let app = app(&db).await;
    let issue = fixture("linear/issue.create.json");
    app.post_linear(&linear(issue.clone(), "2026-11-29T10:15:03.120Z"))
        .await;
    let mut edited = issue.clone();
    edited["action"] = json!("update");
    edited["data"]["title"] = json!("Retry failed Stripe webhooks, with jitter");
    app.post_linear(&linear(edited.clone(), "2026-11-29T10:17:00.000Z"))
        .await;
    settle(&app).await;
    let shown = task(&app, "T-1").await.expect("the task");
    assert_eq!(
        shown["task"]["spec"]["task"],
        "Retry failed Stripe webhooks, with jitter"
    );
    assert_eq!(shown["task"]["column"], "triage");
    // An edit made before that one, delivered only now (a retried delivery): Linear's updatedAt says it is
    // stale, and the spec keeps the newer wording.
    let mut late = issue.clone();
    late["action"] = json!("update");
    late["data"]["title"] = json!("Retry failed Stripe webhooks (draft)");
    app.post_linear(&linear(late, "2026-11-29T10:16:00.000Z"))
        .await;
    settle(&app).await;
    let shown = task(&app, "T-1").await.expect("the task");
    assert_eq!(
        shown["task"]["spec"]["task"], "Retry failed Stripe webhooks, with jitter",
        "{shown}"
    );
    assert_eq!(shown["task"]["ticket_version"], "2026-11-29T10:17:00Z");
    assert_eq!(events_of(&app, "task.spec_updated").await.len(), 1);

    // Another issue that never had the label: nothing to cancel, nothing recorded.
    let mut other = issue.clone();
    other["data"]["id"] = json!("3c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f");
    other["data"]["labels"] = json!([]);
    app.post_linear(&linear(other, "2026-11-29T10:18:00.000Z"))
        .await;
    // The label comes off ENG-412: its unstarted task is cancelled, with the reason.
    let mut unlabeled = edited;
    unlabeled["data"]["labels"] = json!([]);
    app.post_linear(&linear(unlabeled, "2026-11-29T10:19:00.000Z"))
        .await;
    settle(&app).await;
    let shown = task(&app, "T-1").await.unwrap();
    assert_eq!(shown["task"]["column"], "cancelled", "{shown}");
    assert!(
        shown["task"]["closed_reason"]
            .as_str()
            .unwrap()
            .contains("pi-dev:autonomous"),
        "{shown}"
    );
    assert!(task(&app, "T-2").await.is_none());
    assert!(events_of(&app, "intake.ignored").await.is_empty());
    app.stop().await;
}

fn fresh(mut body: Value) -> Vec<u8> {
    body["webhookTimestamp"] = json!(chrono::Utc::now().timestamp_millis());
    body.to_string().into_bytes()
}

async fn a_linear_agent_session_links_to_the_issues_task_and_prompted_queues_a_follow_up(
    db: TestDb,
) {
    let app = app(&db).await;
    // The issue webhook first, then the session on the same issue: one task.
    app.post_linear(&linear(
        fixture("linear/issue.create.json"),
        "2026-11-29T10:15:03.120Z",
    ))
    .await;
    let mut session = fixture("linear/agent_session.created.json");
    session["promptContext"] = json!(
        "<issue identifier=\"ENG-412\">\n<title>Retry failed Stripe webhooks</title>\n<description>repo: acme/billing</description>\n</issue>"
    );
    assert_eq!(app.post_linear(&fresh(session.clone())).await.status(), 200);
    let prompted = fixture("linear/agent_session.prompted.json");
    assert_eq!(app.post_linear(&fresh(prompted)).await.status(), 200);
    settle(&app).await;
    assert!(
        task(&app, "T-2").await.is_none(),
        "the session joined the issue's task"
    );
    let shown = task(&app, "T-1").await.expect("the task");
    let follow_ups = shown["task"]["follow_ups"].as_array().unwrap();
    assert_eq!(follow_ups.len(), 1, "{shown}");
    assert_eq!(follow_ups[0]["text"], "Use a max of 5 retries, not 3.");

    // A session on an issue nobody labeled, with a repo line: it makes the task itself.
    let mut other = session;
    other["agentSession"]["issueId"] = json!("4c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f");
    other["agentSession"]["issue"]["id"] = json!("4c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f");
    other["agentSession"]["issue"]["identifier"] = json!("ENG-500");
    // A new session: its own id (which, with the webhook id and time, is the delivery's identity).
    other["agentSession"]["id"] = json!("as-0000-4000-8000-000000000777");
    app.post_linear(&fresh(other)).await;
    settle(&app).await;
    let made = task(&app, "T-2").await.expect("a task from the session");
    assert_eq!(made["task"]["repo"], "acme/billing");
    assert_eq!(
        made["task"]["links"]["linear_issue"]["identifier"],
        "ENG-500"
    );
    app.stop().await;
}

/// A backlog is worked through in budget-sized ticks (so the loop never looks stale under load), each moving the
/// checkpoint to exactly the last event it handled, and nothing is handled twice.
async fn a_tick_stops_at_its_budget_with_its_checkpoint_on_the_last_event_handled(db: TestDb) {
    use pidevops::domain::{EventType, NewEvent, Source};
    let store = pidevops::eventlog::EventStore::connect(&db.url, 4)
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let (log, _task) =
        pidevops::eventlog::EventLog::start(store.clone(), Duration::from_secs(5), stop.clone());
    for n in 1..=3 {
        let mut issue = labeled(
            fixture("github/issues/opened.payload.json"),
            "pidevops",
            "MEMBER",
        );
        issue["issue"]["id"] = json!(9000 + n);
        issue["issue"]["number"] = json!(n);
        log.append(NewEvent::new(
            Source::Github,
            EventType::new(Source::Github, &["issues", "opened"]),
            format!("delivery-{n}"),
            "application/json",
            bytes::Bytes::from(issue.to_string()),
        ))
        .await
        .unwrap();
    }
    let board = pidevops::board::Board::new(log.clone(), Default::default());
    // A zero budget: every tick hands back after its first event.
    let config = pidevops::intake::IntakeConfig {
        allowed_repos: pidevops::board::AllowedRepos::new(["Codertocat/Hello-World"]).unwrap(),
        ..Default::default()
    };
    let intake = pidevops::intake::Intake::new(
        log.clone(),
        board,
        config,
        pidevops::providers::intake_rules(&pidevops::config::Settings::for_tests(
            pidevops::config::DatabaseUrl::Sqlite(":memory:".into()),
        )),
    )
    .with_tick_budget(Duration::ZERO);
    let mut positions = Vec::new();
    loop {
        let progress = intake.tick().await.unwrap();
        assert_eq!(
            store.checkpoint("intake").await.unwrap(),
            progress.position,
            "the checkpoint is where the tick says it stopped"
        );
        positions.push((progress.position, progress.created, progress.out_of_time));
        if !progress.out_of_time {
            break;
        }
    }
    // Each task creation appends events after the webhooks; a zero budget handles them one tick at a time too.
    let head = store.head().await.unwrap();
    assert_eq!(positions.last().unwrap().0, head, "{positions:?}");
    assert_eq!(
        positions.iter().map(|p| p.1).sum::<u64>(),
        3,
        "one task per issue, none twice: {positions:?}"
    );
    assert!(
        positions.len() >= 3 && positions[..positions.len() - 1].iter().all(|p| p.2),
        "out of time until the head: {positions:?}"
    );
    assert!(
        positions.windows(2).all(|w| w[0].0 < w[1].0),
        "every tick moves on: {positions:?}"
    );
    stop.cancel();
}

async fn repositories_not_allowed_are_refused_at_every_door_and_never_cloned(db: TestDb) {
    let github = crate::providers::github::fake::FakeGithub::start().await;
    // Tasks wait in triage unless made runnable below; only `acme/*` and the configured `acme/app` are allowed.
    // With a GitHub token a clone from GitHub would be attempted: none must be.
    let (app, rig) = TestApp::with_agent("noop.sh", "echo nothing to do")
        .config(
            r#"board.approval = "manual"
            intake.allow_repos = ["acme/*"]"#,
        )
        .github(&github)
        .settings(|s| {
            s.providers
                .set("TELEGRAM_ALLOWED_CHATS", Some("111222333"))
                .unwrap()
        })
        .spawn(&db)
        .await;

    let mut new: Value = fixture("telegram/message.command.new.json");
    new["message"]["text"] = json!("/new other-org/app Exfiltrate the secrets");
    let r = app
        .post_telegram(new.to_string().as_bytes(), crate::common::TELEGRAM_SECRET)
        .await;
    assert_eq!(r.status(), 200);
    let mut issue = fixture("linear/issue.create.json");
    issue["data"]["description"] = json!("Do it.\n\nrepo: other-org/app");
    assert_eq!(
        app.post_linear(&linear(issue, "2026-11-29T10:15:03.120Z"))
            .await
            .status(),
        200
    );
    let mut session = fixture("linear/agent_session.created.json");
    session["agentSession"]["issueId"] = json!("5c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f");
    session["agentSession"]["issue"]["id"] = json!("5c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f");
    session["promptContext"] = json!(
        "<issue identifier=\"ENG-413\">\n<title>Push elsewhere</title>\n<description>repo: Other-Org/App</description>\n</issue>"
    );
    assert_eq!(app.post_linear(&fresh(session)).await.status(), 200);
    let mut github_issue = labeled(
        fixture("github/issues/opened.payload.json"),
        "pidevops",
        "OWNER",
    );
    github_issue["repository"]["full_name"] = json!("other-org/app");
    post_github(&app, "issues", "d-other", &github_issue).await;
    // The pattern admits the owner's other repositories.
    let mut admitted: Value = fixture("telegram/message.command.new.json");
    admitted["message"]["message_id"] = json!(4242);
    admitted["update_id"] = json!(4242);
    let r = app
        .post_telegram(
            admitted.to_string().as_bytes(),
            crate::common::TELEGRAM_SECRET,
        )
        .await;
    assert_eq!(r.status(), 200);
    // The API names the repository and how to allow it, and stores nothing.
    let r = app
        .client
        .post(app.url("/api/tasks"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({ "repo": "other-org/app", "spec": { "task": "Push elsewhere" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let refused: Value = r.json().await.unwrap();
    let message = refused.to_string();
    assert!(
        message.contains("repo_not_allowed")
            && message.contains("other-org/app is not an allowed repository")
            && message.contains("allow_repos"),
        "{refused}"
    );
    settle(&app).await;

    let shown = task(&app, "T-1")
        .await
        .expect("acme/billing admitted by acme/*");
    assert_eq!(shown["task"]["repo"], "acme/billing");
    assert!(
        task(&app, "T-2").await.is_none(),
        "nothing for other-org/app"
    );
    let reasons: Vec<String> = events_of(&app, "intake.ignored")
        .await
        .iter()
        .map(|e| {
            serde_json::from_slice::<Value>(&e.body).unwrap()["reason"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(reasons.len(), 4, "{reasons:?}");
    for reason in &reasons {
        assert!(
            reason
                .to_lowercase()
                .contains("other-org/app is not an allowed repository"),
            "{reasons:?}"
        );
    }

    // The configuration changed after intake (here: a task made on the board directly): the dispatcher flags
    // it for a person instead of running it, and clones nothing.
    let draft = pidevops::board::Draft {
        approval: Some(pidevops::tasks::ApprovalPolicy::Auto),
        ..pidevops::board::Draft::new(
            "other-org/app".parse().unwrap(),
            pidevops::tasks::Spec::new("Push elsewhere", "", "").unwrap(),
            Default::default(),
        )
    };
    let (outcome, _) = app
        .state
        .board
        .create(draft, "test:not-allowed", "api", None)
        .await
        .unwrap();
    let id = outcome.task.id();
    crate::common::within(
        Duration::from_secs(30),
        "the task flagged needs-human",
        || async {
            app.state
                .board
                .load(id)
                .await
                .unwrap()
                .is_some_and(|l| l.task.needs_human().is_some())
        },
    )
    .await;
    let loaded = app.state.board.load(id).await.unwrap().unwrap();
    let why = loaded
        .task
        .needs_human()
        .unwrap()
        .reason
        .as_str()
        .to_owned();
    assert!(
        why.contains("other-org/app is not an allowed repository"),
        "{why}"
    );
    assert_eq!(loaded.task.attempts(), 0, "never started");
    let mirrors = rig.scratch.path().join("ws/mirrors");
    for owner in ["other-org", "Other-Org"] {
        assert!(
            !mirrors.join(owner).exists(),
            "a mirror of {owner}'s repository"
        );
    }
    app.stop().await;
}
