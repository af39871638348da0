//! The Telegram Bot API through a maintained crate's types (frankenstein): every update fixture reads as the Bot
//! API's `Update` and writes back the same, every request pidevops makes reads as its method's request type (the
//! fake Telegram refuses any that does not), and an error body's `retry_after` reaches the caller.

use std::time::Duration;

use frankenstein::methods::SendMessageParams;
use frankenstein::updates::Update;
use pidevops::effects::CallError;
use pidevops::providers::telegram::{message_params, TelegramClient};
use serde_json::{json, Value};

use crate::providers::telegram::fake::{fits_method, FakeTelegram};

#[test]
fn every_update_fixture_round_trips_through_the_bot_apis_update() {
    let dir = crate::common::fixtures_dir().join("telegram");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let original: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let update: Update = serde_json::from_value(original.clone())
            .unwrap_or_else(|e| panic!("{}: not a Bot API Update: {e}", path.display()));
        let back = serde_json::to_value(&update).unwrap();
        assert_eq!(back, original, "{} round-trips", path.display());
        seen += 1;
    }
    assert!(seen >= 7, "{seen} fixtures");
}

#[test]
fn every_message_pidevops_sends_reads_as_send_message_params() {
    let plain = message_params(-100, "<b>T-7</b> done", &[], None);
    let buttons = message_params(
        -100,
        "T-7 needs a human",
        &[
            ("Retry".into(), "retry:T-7".into()),
            ("Cancel".into(), "cancel:T-7".into()),
        ],
        None,
    );
    let question = message_params(-100, "T-7 asks", &[], Some(&"x".repeat(80)));
    for params in [&plain, &buttons, &question] {
        let json = serde_json::to_value(params).unwrap();
        fits_method("sendMessage", &json).unwrap();
        let back: SendMessageParams = serde_json::from_value(json).unwrap();
        assert_eq!(&back, params);
    }
    assert_eq!(
        serde_json::to_value(&plain).unwrap(),
        json!({
            "chat_id": -100, "text": "<b>T-7</b> done", "parse_mode": "HTML",
            "link_preview_options": { "is_disabled": true }
        })
    );
    assert_eq!(
        serde_json::to_value(&buttons).unwrap()["reply_markup"],
        json!({ "inline_keyboard": [[
            { "text": "Retry", "callback_data": "retry:T-7" },
            { "text": "Cancel", "callback_data": "cancel:T-7" }
        ]] })
    );
    let prompt = serde_json::to_value(&question).unwrap()["reply_markup"].clone();
    assert_eq!(prompt["force_reply"], true);
    assert_eq!(
        prompt["input_field_placeholder"]
            .as_str()
            .unwrap()
            .chars()
            .count(),
        64
    );
    // A misspelled field is what Telegram would refuse: the fake does too.
    assert!(fits_method("sendMessage", &json!({ "chat": -100, "text": "x" })).is_err());
    assert!(fits_method("answerCallbackQuery", &json!({ "callback_id": "1" })).is_err());
}

/// The client's every method against the fake: each request reads as its method's type, each answer as the Bot
/// API's, and a 429's `retry_after` is the wait the caller gets.
#[tokio::test]
async fn the_client_against_the_validating_fake() {
    let fake = FakeTelegram::start().await;
    let client = TelegramClient::new(&fake.url, &"123:token".to_owned().into()).unwrap();
    assert_eq!(client.get_me().await.unwrap(), "pidevops_test_bot");
    assert_eq!(client.webhook_url().await.unwrap(), "");
    client.delete_webhook().await.unwrap();
    client
        .send_message(-100, "hello", &[("Retry".into(), "retry:T-1".into())], None)
        .await
        .unwrap();
    client
        .send_message(-100, "a question", &[], Some("Your answer"))
        .await
        .unwrap();
    client
        .answer_callback("cb-1", "Retrying T-1")
        .await
        .unwrap();
    client
        .set_my_commands(&[("status".into(), "Where the tasks stand".into())])
        .await
        .unwrap();
    let update: Value = serde_json::from_slice(
        &std::fs::read(crate::common::fixtures_dir().join("telegram/message.command.new.json"))
            .unwrap(),
    )
    .unwrap();
    fake.queue_update(update.clone());
    let updates = client.get_updates(0, 0).await.unwrap();
    assert_eq!(updates, vec![update], "kept as Telegram sent it");
    fake.rate_limit_next(7);
    match client.send_message(-100, "again", &[], None).await {
        Err(CallError::Transient { retry_after, .. }) => {
            assert_eq!(retry_after, Some(Duration::from_secs(7)))
        }
        other => panic!("a 429 with retry_after: {other:?}"),
    }
    assert_eq!(fake.refused(), Vec::<String>::new());
    assert_eq!(fake.sent().len(), 2);
}
