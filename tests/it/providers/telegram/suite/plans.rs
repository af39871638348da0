//! Plans through the Telegram bot, with the real app and the fake Bot API: `/plan` from an allowed chat makes a
//! plan and the reply names it (a stranger's and a repository not allowed make none, the latter saying why); each
//! proposal revision is one message listing its items, escaped, with Approve and Reject; Reject asks for a
//! comment, `/reject T-n <comment>` gives it to the planner, Approve approves; forged presses change nothing.

use std::time::Duration;

use crate::common::{within, TestApp, TestDb, TELEGRAM_SECRET};
use crate::providers::telegram::fake::FakeTelegram;
use pidevops::tasks::{Column, TaskId, TELEGRAM};
use secrecy::SecretString;
use serde_json::{json, Value};

per_backend!(a_plan_from_telegram_is_proposed_with_buttons_rejected_with_a_comment_and_approved);

async fn spawn(db: &TestDb, telegram: &FakeTelegram, file: &str) -> TestApp {
    let mut settings = crate::common::settings(db);
    telegram.point_settings(&mut settings, super::BOT_TOKEN);
    settings
        .providers
        .set("TELEGRAM_ALLOWED_CHATS", Some("-100"))
        .unwrap();
    settings.file = file.parse().unwrap();
    TestApp::spawn(settings).await
}

/// Plans wait for a person; no agent runs here (the planner's proposals are recorded by the test).
const PLANNER: &str = r#"
    [board]
    approval = "manual"
    [dispatch]
    enabled = false
    planner = "claude"
    [intake]
    allow_repos = ["acme/*"]
"#;

fn press(update: i64, chat: i64, query: &str, data: &str) -> Vec<u8> {
    json!({
        "update_id": 810_000 + update,
        "callback_query": {
            "id": query,
            "from": { "id": 5, "is_bot": false, "first_name": "Ada", "username": "ada_l" },
            "message": { "message_id": 1, "date": 1764411700, "chat": { "id": chat, "type": "group" }, "text": "…" },
            "chat_instance": "-1",
            "data": data
        }
    })
    .to_string()
    .into_bytes()
}

async fn post(app: &TestApp, body: &[u8]) {
    assert_eq!(app.post_telegram(body, TELEGRAM_SECRET).await.status(), 200);
}

/// Intake and the bot driven to rest, then the paced messages waited for until there are `n`.
async fn sent_to(app: &TestApp, telegram: &FakeTelegram, n: usize) -> Vec<String> {
    app.drive("intake").await;
    app.drive(&pidevops::effects::loop_name("telegram")).await;
    within(
        Duration::from_secs(30),
        &format!("{n} messages"),
        || async {
            app.drive(&pidevops::effects::loop_name("telegram")).await;
            telegram.sent().len() >= n
        },
    )
    .await;
    telegram.sent().into_iter().map(|m| m.text).collect()
}

async fn a_plan_from_telegram_is_proposed_with_buttons_rejected_with_a_comment_and_approved(
    db: TestDb,
) {
    let telegram = FakeTelegram::start().await;
    let app = spawn(&db, &telegram, PLANNER).await;
    let board = &app.state.board;
    post(
        &app,
        &super::command(
            1,
            -100,
            "/plan@pidevops_bot acme/app Split the app into three services",
        ),
    )
    .await;
    post(
        &app,
        &super::command(2, 31337, "/plan acme/app Delete the audit log"),
    )
    .await;
    post(
        &app,
        &super::command(3, -100, "/plan other-org/app Push elsewhere"),
    )
    .await;
    // The plan's notice may come before or after the refusal's reply: live intake may make the plan before the
    // third message is even delivered.
    let sent = sent_to(&app, &telegram, 3).await;
    assert_eq!(
        sent[0],
        "Plan <b>T-1</b> made: its planner splits the goal into tasks, and the plan comes here for approval."
    );
    let refusal = sent
        .iter()
        .find(|m| m.starts_with("No plan:"))
        .expect("the refusal");
    assert!(
        refusal.starts_with("No plan: /plan refused: other-org/app is not an allowed repository"),
        "{refusal}"
    );
    let notice = telegram
        .sent()
        .into_iter()
        .find(|m| m.text.starts_with("🗺"))
        .expect("the plan's notice");
    assert!(
        notice
            .text
            .starts_with("🗺 <b>T-1</b> Split the app into three services <i>(acme/app)</i>"),
        "{}",
        notice.text
    );
    assert!(
        notice.buttons.is_null(),
        "nothing to approve before a proposal"
    );
    let plan: TaskId = "T-1".parse().unwrap();
    let loaded = board.load(plan).await.unwrap().unwrap();
    assert!(loaded.task.is_plan());
    assert_eq!(
        loaded.task.links().get(TELEGRAM).map(|t| t.chat()),
        Some(-100)
    );
    assert!(
        board.load("T-2".parse().unwrap()).await.unwrap().is_none(),
        "the stranger made nothing"
    );
    assert!(
        telegram.sent().iter().all(|m| m.chat == -100),
        "nothing to the stranger"
    );
    let ignored: Vec<Value> = app
        .all_events()
        .await
        .into_iter()
        .filter(|e| e.event_type == "intake.ignored")
        .map(|e| serde_json::from_slice(&e.body).unwrap())
        .collect();
    assert_eq!(ignored.len(), 2, "{ignored:?}");
    assert!(
        ignored[0]["reason"]
            .as_str()
            .unwrap()
            .contains("/plan from ada_l: chat 31337 is not in TELEGRAM_ALLOWED_CHATS"),
        "{ignored:?}"
    );

    // The planner proposes: one message, its items escaped (a planner agent wrote them), with the two buttons.
    let mut proposal = crate::plans::three_items();
    proposal["items"][0]["title"] = json!("Part <A> & co");
    crate::plans::propose(board, plan, &proposal).await;
    let sent = sent_to(&app, &telegram, 4).await;
    let message = &sent[3];
    for expected in [
        "📋 <b>T-1</b> Split the app into three services <i>(acme/app)</i>\nplan revision 1: 3 tasks, waiting for approval",
        "<i>three parts</i>",
        "• <code>a</code> <b>Part &lt;A&gt; &amp; co</b> — scope: a/**",
        "• <code>c</code> <b>Part C</b> — scope: c/** — after: a, b",
        "/reject T-1 &lt;what to change&gt;",
    ] {
        assert!(message.contains(expected), "{expected:?} in:\n{message}");
    }
    assert_eq!(
        telegram.sent()[3].buttons,
        json!([[
            { "text": "Approve", "callback_data": "approve:T-1" },
            { "text": "Reject", "callback_data": "reject:T-1" }
        ]])
    );

    // Reject asks for the comment; forged presses (a stranger's, data no keyboard of ours carries) do nothing.
    for (n, chat, query, data) in [
        (1, -100, "q-reject", "reject:T-1"),
        (2, 31337, "q-stranger", "approve:T-1"),
        (3, -100, "q-forged", "approve:T-1 now"),
        (4, -100, "q-other", "approve:T-1;cancel:T-1"),
    ] {
        post(&app, &press(n, chat, query, data)).await;
    }
    app.drive(&pidevops::effects::loop_name("telegram")).await;
    let answers = telegram.answers();
    assert_eq!(
        answers,
        [
            (
                "q-reject".to_owned(),
                "Say what to change: /reject T-1 <comment>. The planner gets your comment."
                    .to_owned()
            ),
            (
                "q-stranger".to_owned(),
                "Not allowed from this chat.".to_owned()
            ),
            (
                "q-forged".to_owned(),
                "Unknown button \"approve:T-1 now\".".to_owned()
            ),
            (
                "q-other".to_owned(),
                "Unknown button \"approve:T-1;cancel:T-1\".".to_owned()
            ),
        ]
    );
    let loaded = board.load(plan).await.unwrap().unwrap();
    assert_eq!(
        loaded.task.column(),
        Column::Triage,
        "the proposal still waits"
    );
    assert!(loaded.task.plan().unwrap().proposal.is_some());

    // `/reject T-1` alone asks too, and a comment longer than a reason may be is refused saying so; with a
    // comment it rejects, and the planner's next prompt carries it.
    post(&app, &super::command(4, -100, "/reject T-1")).await;
    let long = format!("/reject T-1 {}", "x".repeat(2_100));
    post(&app, &super::command(5, -100, &long)).await;
    post(
        &app,
        &super::command(6, -100, "/reject T-1 Merge A and B into one item"),
    )
    .await;
    let sent = sent_to(&app, &telegram, 7).await;
    assert_eq!(
        sent[4],
        "Say what to change: /reject T-1 &lt;comment&gt;. The planner gets your comment."
    );
    assert!(sent[5].contains("2000"), "{}", sent[5]);
    assert_eq!(sent[6], "T-1: reject — now todo.");
    let loaded = board.load(plan).await.unwrap().unwrap();
    assert_eq!(
        loaded
            .task
            .plan()
            .unwrap()
            .rejection
            .as_ref()
            .map(|r| r.as_str()),
        Some("Merge A and B into one item")
    );

    // The next proposal is its own message; Approve approves it.
    crate::plans::propose(board, plan, &crate::plans::three_items()).await;
    let sent = sent_to(&app, &telegram, 8).await;
    assert!(
        sent[7].contains("plan revision 2: 3 tasks, waiting for approval"),
        "{}",
        sent[7]
    );
    post(&app, &press(5, -100, "q-approve", "approve:T-1")).await;
    app.drive(&pidevops::effects::loop_name("telegram")).await;
    assert_eq!(
        telegram.answers()[4],
        (
            "q-approve".to_owned(),
            "T-1: approve — now in-progress.".to_owned()
        )
    );
    let loaded = board.load(plan).await.unwrap().unwrap();
    assert!(loaded.task.is_approved_plan());
    assert_eq!(
        loaded
            .events
            .iter()
            .filter(|e| e.event_type == "task.plan_approved")
            .count(),
        1
    );

    // Read again from the start (the plans loop's items made first, so nothing else appends meanwhile): every
    // message and answer is settled, nothing is sent or steered twice.
    app.drive("plans").await;
    app.drive(&pidevops::effects::loop_name("telegram")).await;
    let replay = pidevops::effects::runner::Effects::new(
        pidevops::providers::telegram::effects::TelegramPolicy::new(
            pidevops::providers::telegram::TelegramClient::new(
                &telegram.url,
                &SecretString::from(super::BOT_TOKEN),
            )
            .unwrap(),
            pidevops::providers::telegram::settings::TelegramSettings::of(&app.state.settings),
        ),
        app.state.log.clone(),
        app.state.board.clone(),
    )
    .with_checkpoint("effects:telegram:replay")
    .with_tick_budget(crate::common::WHOLE_TICK);
    let (calls, events) = (telegram.calls(), app.all_events().await.len());
    replay.tick().await.unwrap();
    assert_eq!(telegram.calls(), calls, "a replay called Telegram");
    assert_eq!(app.all_events().await.len(), events, "a replay acted again");
    app.stop().await;
}

/// No planner configured: `/plan` makes nothing, and the reply says why and what to set.
#[tokio::test]
async fn without_a_planner_plan_is_refused_saying_why() {
    let db = TestDb::sqlite();
    let telegram = FakeTelegram::start().await;
    let app = spawn(&db, &telegram, "[intake]\nallow_repos = [\"acme/*\"]").await;
    post(
        &app,
        &super::command(1, -100, "/plan acme/app Split the app"),
    )
    .await;
    let sent = sent_to(&app, &telegram, 1).await;
    assert_eq!(
        sent[0],
        "No plan: /plan refused: it asks for a plan, and no planner profile is configured (set [dispatch] \
         planner in pidevops.toml)"
    );
    assert!(app
        .state
        .board
        .load("T-1".parse().unwrap())
        .await
        .unwrap()
        .is_none());
    app.stop().await;
}
