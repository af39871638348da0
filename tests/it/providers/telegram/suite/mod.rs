//! Telegram notifications through the real app and a fake Bot API on loopback: one message per chat for each
//! state change people act on (a needs-human episode once), HTML-escaped, paced to Telegram's limits, a 429
//! honoured. Per backend.

use std::time::Duration;

use crate::common::board::new_task;
use crate::common::{within, TestApp, TestDb};
use crate::providers::telegram::fake::FakeTelegram;
use pidevops::board::{Draft, Steer};
use pidevops::effects::EffectEvent;
use pidevops::tasks::{Command, Links, Reason, Spec};
use secrecy::SecretString;

mod allowed_users;
mod plans;

per_backend!(
    state_changes_reach_the_chats_once_escaped_and_paced,
    without_chats_or_a_token_the_loop_says_why,
    commands_from_allowed_chats_are_answered_once_and_strangers_are_refused,
    without_a_webhook_updates_are_long_polled_into_the_log_once,
    a_button_press_steers_the_task_and_every_press_is_answered,
    a_digest_schedule_sends_the_board_to_every_chat_once_per_slot,
);

const BOT_TOKEN: &str = "4242:fake-bot-secret";

async fn spawn(db: &TestDb, telegram: &FakeTelegram, chats: Option<&str>) -> TestApp {
    let mut settings = crate::common::settings(db);
    telegram.point_settings(&mut settings, BOT_TOKEN);
    settings
        .providers
        .set("TELEGRAM_ALLOWED_CHATS", chats)
        .unwrap();
    TestApp::spawn(settings).await
}

async fn state_changes_reach_the_chats_once_escaped_and_paced(db: TestDb) {
    let telegram = FakeTelegram::start().await;
    // The first message is refused with 429: it goes again after what Telegram asked.
    telegram.rate_limit_next(1);
    let app = spawn(&db, &telegram, Some("-100, 77")).await;
    let board = &app.state.board;
    let id = new_task("Fix <script> & the redirect")
        .done_when("")
        .key("test:telegram")
        .create_on(board)
        .await;
    within(
        Duration::from_secs(20),
        "the approval request in both chats",
        || async { telegram.sent().len() >= 2 },
    )
    .await;
    let sent = telegram.sent();
    assert_eq!(
        sent.iter().map(|s| s.chat).collect::<Vec<_>>(),
        [-100, 77],
        "{sent:?}"
    );
    for message in &sent {
        assert_eq!(message.bot, format!("bot{BOT_TOKEN}"));
        assert_eq!(message.parse_mode, "HTML");
        assert!(
            message.text.starts_with(&format!(
                "🆕 <b>{id}</b> Fix &lt;script&gt; &amp; the redirect <i>(acme/app)</i>\nwaits for approval"
            )),
            "{}",
            message.text
        );
    }
    let key = "telegram:notify:-100:";
    let streams: Vec<_> = app
        .all_events()
        .await
        .into_iter()
        .filter(|e| {
            e.stream
                .as_deref()
                .is_some_and(|s| s.starts_with(&format!("effect:{key}")))
        })
        .collect();
    let failed: Vec<EffectEvent> = streams
        .iter()
        .map(|e| serde_json::from_slice(&e.body).unwrap())
        .filter(|e| matches!(e, EffectEvent::Failed { .. }))
        .collect();
    assert_eq!(failed.len(), 1, "the 429 is recorded: {failed:?}");
    if let EffectEvent::Failed {
        at,
        retry_at,
        error,
        ..
    } = &failed[0]
    {
        let wait = (retry_at.unwrap() - *at).num_milliseconds();
        assert!(
            (900..=1100).contains(&wait),
            "waits what Telegram asked: {wait} ms"
        );
        assert!(error.contains("429"), "{error}");
    }

    // A needs-human episode: told once, however often it is flagged again while it lasts.
    board
        .steer(id, Steer::Approve, None, "test", "test")
        .await
        .unwrap();
    let flag = Command::FlagNeedsHuman {
        reason: Reason::new("the spec names no repository file").unwrap(),
    };
    board.execute(id, &flag, "test").await.unwrap();
    board.execute(id, &flag, "test").await.unwrap();
    within(
        Duration::from_secs(20),
        "the alert in both chats",
        || async { telegram.sent().len() >= 4 },
    )
    .await;
    // Driven to rest, not waited for: anything more it would send is sent by then.
    app.drive("effects:telegram").await;
    let sent = telegram.sent();
    assert_eq!(
        sent.len(),
        4,
        "one alert per chat for the episode: {sent:?}"
    );
    assert!(
        sent[2]
            .text
            .contains("needs a human: the spec names no repository file"),
        "{}",
        sent[2].text
    );
    // Paced: at most one message a second to a chat.
    let to_first: Vec<_> = sent.iter().filter(|s| s.chat == -100).collect();
    assert!(
        to_first[1].at.duration_since(to_first[0].at) >= Duration::from_millis(990),
        "two messages to one chat within a second"
    );
    // No event carries the bot token.
    for event in app.all_events().await {
        assert!(
            !String::from_utf8_lossy(&event.body).contains("fake-bot-secret"),
            "{event:?}"
        );
    }
    app.stop().await;
}

async fn without_chats_or_a_token_the_loop_says_why(db: TestDb) {
    let telegram = FakeTelegram::start().await;
    let app = spawn(&db, &telegram, None).await;
    let (_, health) = app.health().await;
    let state = &health["loops"][pidevops::effects::loop_name("telegram")];
    assert_eq!(state["state"], "disabled", "{health}");
    assert!(state["reason"]
        .as_str()
        .unwrap()
        .contains("TELEGRAM_ALLOWED_CHATS is not set"));
    app.stop().await;
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let (_, health) = app.health().await;
    let state = &health["loops"][pidevops::effects::loop_name("telegram")];
    assert!(
        state["reason"]
            .as_str()
            .unwrap()
            .contains("TELEGRAM_BOT_TOKEN is not set"),
        "{health}"
    );
    app.stop().await;
}

/// A command as Telegram delivers it: `update_id` per update, from `chat`.
fn command(update: i64, chat: i64, text: &str) -> Vec<u8> {
    serde_json::json!({
        "update_id": 900_000 + update,
        "message": {
            "message_id": 7000 + update,
            "from": { "id": 5, "is_bot": false, "first_name": "Ada", "username": "ada_l" },
            "chat": { "id": chat, "type": if chat < 0 { "group" } else { "private" } },
            "date": 1764411500,
            "text": text
        }
    })
    .to_string()
    .into_bytes()
}

async fn commands_from_allowed_chats_are_answered_once_and_strangers_are_refused(db: TestDb) {
    let telegram = FakeTelegram::start().await;
    let app = spawn(&db, &telegram, Some("-100")).await;
    let board = &app.state.board;
    let draft = Draft::new(
        "acme/app".parse().unwrap(),
        Spec::new("Fix the login redirect", "", "").unwrap(),
        Links::default(),
    );
    let (outcome, _) = board.create(draft, "test:bot", "api", None).await.unwrap();
    let id = outcome.task.id();
    // The first message to the chat, so not held back by the pacing: driven, not waited for.
    app.drive(&pidevops::effects::loop_name("telegram")).await;
    assert!(!telegram.sent().is_empty(), "the approval request");

    let script: [(&str, i64); 9] = [
        ("/help", -100),
        ("/tasks triage", -100),
        ("/approve@pidevops_bot T-1", -100),
        ("/task T-1", -100),
        ("/pause", -100),
        ("/status", -100),
        ("/frobnicate", -100),
        ("/approve T-1", 31337),
        ("/resume", -100),
    ];
    // The bot answers from the read models, which trail the log by up to a projector interval: each command is
    // sent once the read model shows what the command before it did, as a person typing would see it.
    let column = |app: &TestApp| {
        let store = app.state.log.store().clone();
        async move {
            pidevops::projectors::tasks::get(&store, id)
                .await
                .unwrap()
                .map(|row| row.column)
        }
    };
    app.project().await;
    assert!(column(&app).await.is_some(), "the task on the board");
    for (n, (text, chat)) in script.iter().enumerate() {
        let r = app
            .post_telegram(
                &command(n as i64, *chat, text),
                crate::common::TELEGRAM_SECRET,
            )
            .await;
        assert_eq!(r.status(), 200, "{text}");
        if text.starts_with("/approve@") {
            within(
                Duration::from_secs(10),
                "the approval on the board",
                || async { column(&app).await == Some(pidevops::tasks::Column::Todo) },
            )
            .await;
        }
    }
    // Eight answers to the allowed chat (the stranger gets none), after the approval request.
    within(
        Duration::from_secs(30),
        "every command answered",
        || async { telegram.sent().len() >= 9 },
    )
    .await;
    // Driven to rest, not waited for: anything more it would send is sent by then.
    app.drive("effects:telegram").await;
    let sent = telegram.sent();
    assert_eq!(sent.len(), 9, "{sent:#?}");
    let menu = telegram.menu().expect("setMyCommands at start-up");
    assert_eq!(menu[0]["command"], "help");
    assert!(
        menu.as_array()
            .unwrap()
            .iter()
            .any(|c| c["command"] == "approve"),
        "{menu}"
    );
    assert!(
        sent.iter().all(|s| s.chat == -100),
        "nothing to the stranger: {sent:#?}"
    );
    let replies: Vec<&str> = sent[1..].iter().map(|s| s.text.as_str()).collect();
    assert!(replies[0].contains("/tasks [column]"), "{}", replies[0]);
    assert!(
        replies[1].contains(&format!("<b>{id}</b> triage Fix the login redirect")),
        "{}",
        replies[1]
    );
    assert_eq!(replies[2], format!("{id}: approve — now todo."));
    assert!(
        replies[3].contains("todo · attempt 0 of 3"),
        "{}",
        replies[3]
    );
    assert!(replies[4].starts_with("Paused"), "{}", replies[4]);
    assert!(
        replies[5].contains("<b>paused</b> (paused by telegram: from Telegram by ada_l)")
            && replies[5].contains("loops armed"),
        "{}",
        replies[5]
    );
    assert_eq!(replies[6], "unknown command /frobnicate; /help lists them");
    assert!(replies[7].starts_with("Resumed"), "{}", replies[7]);
    let approved = board.load(id).await.unwrap().unwrap();
    assert_eq!(approved.task.column(), pidevops::tasks::Column::Todo);
    assert_eq!(
        approved
            .events
            .iter()
            .filter(|e| e.event_type == "task.approved")
            .count(),
        1,
        "the stranger's /approve did nothing"
    );
    let refused: Vec<_> = app
        .all_events()
        .await
        .into_iter()
        .filter(|e| e.event_type == "telegram.command_refused")
        .collect();
    assert_eq!(refused.len(), 1);
    let body: serde_json::Value = serde_json::from_slice(&refused[0].body).unwrap();
    assert_eq!(
        (body["chat"].as_i64(), body["command"].as_str()),
        (Some(31337), Some("/approve"))
    );

    // Replaying the log (a second reader from position 0) answers nothing again and steers nothing.
    let replay = pidevops::effects::runner::Effects::new(
        pidevops::providers::telegram::effects::TelegramPolicy::new(
            pidevops::providers::telegram::TelegramClient::new(
                &telegram.url,
                &SecretString::from(BOT_TOKEN),
            )
            .unwrap(),
            pidevops::providers::telegram::settings::TelegramSettings::of(&app.state.settings),
        ),
        app.state.log.clone(),
        app.state.board.clone(),
    )
    .with_checkpoint("effects:telegram:replay")
    .with_tick_budget(crate::common::WHOLE_TICK);
    let calls = telegram.calls();
    let events_before = app.all_events().await.len();
    replay.tick().await.unwrap();
    assert_eq!(telegram.calls(), calls, "a replay sent something");
    assert_eq!(
        app.all_events().await.len(),
        events_before,
        "a replay acted again (/pause, /resume, /approve)"
    );
    app.stop().await;
}

/// No public URL (no webhook secret): the bot pulls its updates, after deleting any webhook, and they land in the
/// log like deliveries (each once, across a restart), so commands work the same.
async fn without_a_webhook_updates_are_long_polled_into_the_log_once(db: TestDb) {
    let telegram = FakeTelegram::start().await;
    let update = |n: i64, text: &str| -> serde_json::Value {
        serde_json::from_slice(&command(n, -100, text)).unwrap()
    };
    telegram.queue_update(update(1, "/help"));
    telegram.queue_update(update(2, "/runs"));
    let mut settings = crate::common::settings(&db);
    telegram.point_settings(&mut settings, BOT_TOKEN);
    settings
        .providers
        .set("TELEGRAM_ALLOWED_CHATS", Some("-100"))
        .unwrap();
    assert!(settings.webhook_secrets.set("telegram", None));
    let app = TestApp::spawn(settings.clone()).await;
    // The poll is the loop's own (a long poll in the background); the answers are driven, so a loaded machine
    // only makes the wait longer. It timed out twice in CI: the poller, spawned first, appended both messages
    // before `effects:telegram` (built later) read the head it starts at on its first start, so it never saw
    // them. Start-up now reads that head once, before any loop runs (a 2 s pause before the effects loops are
    // built failed this test every time before, and passes since). What the fake was asked is in the message.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        app.drive("effects:telegram").await;
        if telegram.sent().len() >= 2 {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            let (_, health) = app.health().await;
            panic!(
                "both commands not answered in 60 s: Telegram was asked {:?}\nthe log: {:?}\nloops: {:#}",
                telegram.methods(),
                app.all_events()
                    .await
                    .iter()
                    .map(|e| e.event_type.clone())
                    .collect::<Vec<_>>(),
                health["loops"]
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let methods = telegram.methods();
    let deleted = methods.iter().position(|m| m == "deleteWebhook");
    let first_poll = methods.iter().position(|m| m.starts_with("getUpdates"));
    assert!(
        deleted.is_some() && deleted < first_poll,
        "the webhook goes first: {methods:?}"
    );
    assert!(methods.iter().any(|m| m == "getUpdates:0"), "{methods:?}");
    within(
        Duration::from_secs(30),
        "the next poll asks after update 900002",
        || async { telegram.methods().iter().any(|m| m == "getUpdates:900003") },
    )
    .await;
    let received = |app: &TestApp| {
        let app = app.state.log.clone();
        async move {
            app.store()
                .read_after(0, 10_000)
                .await
                .unwrap()
                .into_iter()
                .filter(|e| e.event_type == "telegram.message")
                .count()
        }
    };
    assert_eq!(received(&app).await, 2);
    let (_, health) = app.health().await;
    assert_eq!(
        health["loops"]["telegram_updates"]["state"], "armed",
        "{health}"
    );
    app.stop().await;

    // A restart polls on from the offset: nothing is appended or answered twice.
    let app = TestApp::spawn(settings).await;
    telegram.queue_update(update(3, "/help"));
    within(
        Duration::from_secs(60),
        "the third command answered",
        || async {
            app.drive("effects:telegram").await;
            telegram.sent().len() >= 3
        },
    )
    .await;
    // Nothing late is left to count once the poller has asked past update 3 (a redelivery would have come before)
    // and the announcements are driven to the log's head.
    within(
        Duration::from_secs(30),
        "the next poll asks after update 900003",
        || async { telegram.methods().iter().any(|m| m == "getUpdates:900004") },
    )
    .await;
    app.drive("effects:telegram").await;
    assert_eq!(received(&app).await, 3);
    assert_eq!(telegram.sent().len(), 3);
    app.stop().await;
}

/// The approval request carries Approve / Reject; a press from an allowed chat approves, every press is answered
/// (a stranger's too, with a refusal that changes nothing).
async fn a_button_press_steers_the_task_and_every_press_is_answered(db: TestDb) {
    let telegram = FakeTelegram::start().await;
    let app = spawn(&db, &telegram, Some("-100")).await;
    let board = &app.state.board;
    let id = new_task("Retry failed Stripe webhooks")
        .done_when("")
        .key("test:button")
        .create_on(board)
        .await;
    // The first message to the chat, so not held back by the pacing: driven, not waited for.
    app.drive(&pidevops::effects::loop_name("telegram")).await;
    assert!(!telegram.sent().is_empty(), "the approval request");
    let request = &telegram.sent()[0];
    assert_eq!(
        request.buttons,
        serde_json::json!([[
            { "text": "Approve", "callback_data": format!("approve:{id}") },
            { "text": "Reject", "callback_data": format!("reject:{id}") }
        ]])
    );
    let press = |update: i64, chat: i64, query: &str| {
        serde_json::json!({
            "update_id": 800_000 + update,
            "callback_query": {
                "id": query,
                "from": { "id": 5, "is_bot": false, "first_name": "Ada", "username": "ada_l" },
                "message": { "message_id": 1, "date": 1764411700, "chat": { "id": chat, "type": "group" }, "text": "…" },
                "chat_instance": "-1",
                "data": format!("approve:{id}")
            }
        })
        .to_string()
        .into_bytes()
    };
    for (n, chat, query) in [(1, 31337, "q-stranger"), (2, -100, "q-ada")] {
        let r = app
            .post_telegram(&press(n, chat, query), crate::common::TELEGRAM_SECRET)
            .await;
        assert_eq!(r.status(), 200);
    }
    // Answers to presses are not paced: driven, not waited for.
    app.drive(&pidevops::effects::loop_name("telegram")).await;
    let answers = telegram.answers();
    assert_eq!(
        answers[0],
        ("q-stranger".into(), "Not allowed from this chat.".into())
    );
    assert_eq!(
        answers[1],
        ("q-ada".into(), format!("{id}: approve — now todo."))
    );
    let loaded = board.load(id).await.unwrap().unwrap();
    assert_eq!(loaded.task.column(), pidevops::tasks::Column::Todo);
    assert_eq!(
        loaded
            .events
            .iter()
            .filter(|e| e.event_type == "task.approved")
            .count(),
        1
    );
    app.stop().await;
}

async fn a_digest_schedule_sends_the_board_to_every_chat_once_per_slot(db: TestDb) {
    let telegram = FakeTelegram::start().await;
    let mut settings = crate::common::settings(&db);
    telegram.point_settings(&mut settings, BOT_TOKEN);
    settings
        .providers
        .set("TELEGRAM_ALLOWED_CHATS", Some("-100,-200"))
        .unwrap();
    settings.file = r#"
        [board]
        approval = "auto"
        [[schedules]]
        name = "board"
        cron = "*/2 * * * * *"
        digest = true
    "#
    .parse()
    .unwrap();
    let app = TestApp::spawn(settings).await;
    let id = new_task("Tame <the> flaky test")
        .done_when("")
        .key("test:digest")
        .create(&app)
        .await;
    app.state
        .board
        .execute(
            id,
            &Command::FlagNeedsHuman {
                reason: Reason::new("the test needs a database".to_owned()).unwrap(),
            },
            "test",
        )
        .await
        .unwrap();
    let digests = || {
        telegram
            .sent()
            .into_iter()
            .filter(|m| m.text.contains("<b>Digest</b>"))
            .collect::<Vec<_>>()
    };
    within(
        Duration::from_secs(20),
        "a digest naming the flagged task",
        || async {
            digests().iter().any(|m| {
                m.text
                    .contains(&format!("<b>{id}</b> Tame &lt;the&gt; flaky test"))
                    && m.text.contains("needs a human")
            })
        },
    )
    .await;
    within(Duration::from_secs(20), "three digests fired", || async {
        app.state
            .log
            .store()
            .read_stream("cron:board")
            .await
            .unwrap()
            .iter()
            .filter(|e| e.event_type == "cron.fired")
            .count()
            >= 3
    })
    .await;
    app.stop().await;
    let fired = crate::common::TestApp::spawn(crate::common::settings(&db)).await;
    let slots = fired
        .state
        .log
        .store()
        .read_stream("cron:board")
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event_type == "cron.fired")
        .count();
    fired.stop().await;
    // Every slot that fired reached both chats once (the last may not have been sent before the stop).
    let sent = digests();
    for chat in [-100, -200] {
        let n = sent.iter().filter(|m| m.chat == chat).count();
        assert!(
            n + 1 >= slots && n <= slots,
            "{chat}: {n} digests for {slots} slots"
        );
    }
}

#[tokio::test]
async fn a_digest_schedule_without_telegram_fails_health() {
    let db = TestDb::sqlite();
    let mut settings = crate::common::settings(&db);
    settings.file = "[digest]\nenabled = true\ntime = \"07:00\""
        .parse()
        .unwrap();
    let app = TestApp::spawn(settings).await;
    let (status, health) = app.health().await;
    assert_eq!(status, 503, "{health}");
    let cron = &health["loops"]["cron"];
    assert_eq!(cron["state"], "unarmed", "{cron}");
    assert!(
        cron["reason"].as_str().is_some_and(|r| r.contains(
            "\"daily-digest\" sends a digest to Telegram, but TELEGRAM_BOT_TOKEN is not set"
        )),
        "{cron}"
    );
    app.stop().await;
}
