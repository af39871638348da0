//! Telegram notifications through the real app and a fake Bot API on loopback: one message per chat for each
//! state change people act on (a needs-human episode once), HTML-escaped, paced to Telegram's limits, a 429
//! honoured. Per backend.

mod common;

use std::time::Duration;

use common::fake_telegram::FakeTelegram;
use common::{within, TestApp, TestDb};
use pidevops::board::{Draft, Steer};
use pidevops::effects::{EffectEvent, Provider};
use pidevops::tasks::{Command, Links, Reason, Spec};
use secrecy::SecretString;

per_backend!(
    state_changes_reach_the_chats_once_escaped_and_paced,
    without_chats_or_a_token_the_loop_says_why,
);

const BOT_TOKEN: &str = "4242:fake-bot-secret";

async fn spawn(db: &TestDb, telegram: &FakeTelegram, chats: Option<&str>) -> TestApp {
    let mut settings = common::settings(db);
    settings.telegram_bot_token = Some(SecretString::from(BOT_TOKEN));
    settings.telegram_api_url = telegram.url.clone();
    settings.telegram_allowed_chats = chats.map(str::to_owned);
    TestApp::spawn(settings).await
}

async fn state_changes_reach_the_chats_once_escaped_and_paced(db: TestDb) {
    let telegram = FakeTelegram::start().await;
    // The first message is refused with 429: it goes again after what Telegram asked.
    telegram.rate_limit_next(1);
    let app = spawn(&db, &telegram, Some("-100, 77")).await;
    let board = &app.state.board;
    let draft = Draft::new(
        "acme/app".parse().unwrap(),
        Spec::new("Fix <script> & the redirect", "", "").unwrap(),
        Links::default(),
    );
    let (outcome, _) = board
        .create(draft, "test:telegram", "api", None)
        .await
        .unwrap();
    let id = outcome.task.id();
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
    tokio::time::sleep(Duration::from_millis(1500)).await;
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
    let state = &health["loops"][Provider::Telegram.loop_name()];
    assert_eq!(state["state"], "disabled", "{health}");
    assert!(state["reason"]
        .as_str()
        .unwrap()
        .contains("TELEGRAM_ALLOWED_CHATS is not set"));
    app.stop().await;
    let app = TestApp::spawn(common::settings(&db)).await;
    let (_, health) = app.health().await;
    let state = &health["loops"][Provider::Telegram.loop_name()];
    assert!(
        state["reason"]
            .as_str()
            .unwrap()
            .contains("TELEGRAM_BOT_TOKEN is not set"),
        "{health}"
    );
    app.stop().await;
}
