//! A fake Telegram Bot API on loopback: records every `sendMessage` (with the time it arrived and the bot path),
//! answers like Telegram, and answers 429 with `parameters.retry_after` when told to.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

#[derive(Clone, Debug)]
pub struct Sent {
    pub bot: String,
    pub chat: i64,
    pub text: String,
    pub parse_mode: String,
    pub at: Instant,
    /// The inline keyboard, if the message had one.
    pub buttons: Value,
    /// The whole `reply_markup` (a reply prompt: `force_reply`), `null` without one.
    pub reply_markup: Value,
    /// The id Telegram gave the message.
    pub message_id: i64,
}

#[derive(Default)]
struct Inner {
    sent: Vec<Sent>,
    /// `sendMessage` calls answered 429 with this retry_after, in order.
    rate_limits: Vec<u64>,
    calls: usize,
    /// The last command menu set (`setMyCommands`).
    menu: Option<Value>,
    /// Updates `getUpdates` hands out (those at or after the asked offset).
    updates: Vec<Value>,
    /// Every method called, in order (`deleteWebhook`, `getUpdates:<offset>`, …).
    methods: Vec<String>,
    /// Button presses answered: (callback id, text).
    answers: Vec<(String, String)>,
    /// Requests that did not read as the Bot API's type for their method.
    refused: Vec<String>,
}

#[derive(Clone, Default)]
pub struct FakeTelegram {
    inner: Arc<Mutex<Inner>>,
    pub url: String,
}

impl FakeTelegram {
    pub async fn start() -> Self {
        let mut fake = FakeTelegram::default();
        let router = Router::new()
            .route("/{bot}/{method}", post(call))
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        fake.url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        fake
    }

    /// An update for `getUpdates` to hand out.
    pub fn queue_update(&self, update: Value) {
        self.inner.lock().unwrap().updates.push(update);
    }

    /// The button presses answered: (callback id, text).
    pub fn answers(&self) -> Vec<(String, String)> {
        self.inner.lock().unwrap().answers.clone()
    }

    /// The methods called, in order; `getUpdates` with its offset.
    pub fn methods(&self) -> Vec<String> {
        self.inner.lock().unwrap().methods.clone()
    }

    /// The command menu the bot set, if it did.
    pub fn menu(&self) -> Option<Value> {
        self.inner.lock().unwrap().menu.clone()
    }

    /// The next `sendMessage` is refused with 429 and `retry_after` seconds.
    pub fn rate_limit_next(&self, retry_after: u64) {
        self.inner.lock().unwrap().rate_limits.push(retry_after);
    }

    /// Messages delivered (not the refused calls).
    pub fn sent(&self) -> Vec<Sent> {
        self.inner.lock().unwrap().sent.clone()
    }

    /// Requests refused because they do not read as the Bot API's request type for their method.
    pub fn refused(&self) -> Vec<String> {
        self.inner.lock().unwrap().refused.clone()
    }

    pub fn calls(&self) -> usize {
        self.inner.lock().unwrap().calls
    }
}

async fn call(
    State(fake): State<FakeTelegram>,
    Path((bot, method)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Response {
    // Every request must read as the Bot API's own type for its method, as Telegram would parse it.
    if let Err(why) = fits_method(&method, &body) {
        fake.inner
            .lock()
            .unwrap()
            .refused
            .push(format!("{method}: {why}"));
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({ "ok": false, "error_code": 400, "description": format!("Bad Request: {why}") })),
        )
            .into_response();
    }
    if method == "getUpdates" {
        let offset = body["offset"].as_i64().unwrap_or_default();
        let found: Vec<Value> = {
            let mut inner = fake.inner.lock().unwrap();
            inner.calls += 1;
            inner.methods.push(format!("getUpdates:{offset}"));
            inner
                .updates
                .iter()
                .filter(|u| u["update_id"].as_i64().unwrap_or_default() >= offset)
                .cloned()
                .collect()
        };
        if found.is_empty() {
            // A long poll, shortened: nothing new for a moment.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        return ok(found);
    }
    let mut inner = fake.inner.lock().unwrap();
    inner.calls += 1;
    inner.methods.push(method.clone());
    if method == "answerCallbackQuery" {
        let answer = (
            body["callback_query_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            body["text"].as_str().unwrap_or_default().to_owned(),
        );
        inner.answers.push(answer);
        return Json(json!({ "ok": true, "result": true })).into_response();
    }
    if method == "getMe" {
        return ok(typed::<frankenstein::types::User>(json!({
            "id": 123456, "is_bot": true, "first_name": "pidevops", "username": "pidevops_test_bot"
        })));
    }
    if method == "getWebhookInfo" {
        return ok(typed::<frankenstein::updates::WebhookInfo>(json!({
            "url": "", "has_custom_certificate": false, "pending_update_count": 0
        })));
    }
    if method == "deleteWebhook" {
        return Json(json!({ "ok": true, "result": true })).into_response();
    }
    if method == "setMyCommands" {
        inner.menu = Some(body["commands"].clone());
        return Json(json!({ "ok": true, "result": true })).into_response();
    }
    if method == "sendMessage" && !inner.rate_limits.is_empty() {
        let retry_after = inner.rate_limits.remove(0);
        return (
            StatusCode::TOO_MANY_REQUESTS,
            Json(json!({
                "ok": false,
                "error_code": 429,
                "description": format!("Too Many Requests: retry after {retry_after}"),
                "parameters": { "retry_after": retry_after }
            })),
        )
            .into_response();
    }
    if method != "sendMessage" {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({ "ok": false, "error_code": 404, "description": "Not Found" })),
        )
            .into_response();
    }
    let message_id = inner.sent.len() as i64 + 1;
    inner.sent.push(Sent {
        bot,
        chat: body["chat_id"].as_i64().unwrap_or_default(),
        text: body["text"].as_str().unwrap_or_default().to_owned(),
        parse_mode: body["parse_mode"].as_str().unwrap_or_default().to_owned(),
        at: Instant::now(),
        buttons: body["reply_markup"]["inline_keyboard"].clone(),
        reply_markup: body["reply_markup"].clone(),
        message_id,
    });
    ok(typed::<frankenstein::types::Message>(json!({
        "message_id": message_id,
        "date": 0,
        "chat": { "id": body["chat_id"], "type": "group", "title": "pidevops" },
        "text": body["text"],
    })))
}

/// A successful answer with `result`.
fn ok(result: impl serde::Serialize) -> Response {
    Json(json!({ "ok": true, "result": result })).into_response()
}

/// `value` as the Bot API type `T` and back: what the fake answers is what the crate's types read (a field the
/// Bot API requires and the fake left out fails here, in the fake, not in production).
fn typed<T: serde::Serialize + serde::de::DeserializeOwned>(value: Value) -> Value {
    let typed: T = serde_json::from_value(value.clone()).unwrap_or_else(|e| {
        panic!("the fake Telegram's answer {value} does not fit the Bot API: {e}")
    });
    serde_json::to_value(typed).expect("serializes")
}

/// Whether `body` reads as the request type of `method` (frankenstein's), for the methods pidevops calls.
pub fn fits_method(method: &str, body: &Value) -> Result<(), String> {
    use frankenstein::methods::*;
    fn parse<T: serde::de::DeserializeOwned>(body: &Value) -> Result<(), String> {
        serde_json::from_value::<T>(body.clone())
            .map(drop)
            .map_err(|e| e.to_string())
    }
    match method {
        "sendMessage" => parse::<SendMessageParams>(body),
        "answerCallbackQuery" => parse::<AnswerCallbackQueryParams>(body),
        "setMyCommands" => parse::<SetMyCommandsParams>(body),
        "getUpdates" => parse::<GetUpdatesParams>(body),
        "deleteWebhook" => parse::<DeleteWebhookParams>(body),
        "getMe" | "getWebhookInfo" => match body.as_object() {
            Some(map) if map.is_empty() => Ok(()),
            _ => Err(format!("{method} takes no parameters: {body}")),
        },
        other => Err(format!("{other} is not a method pidevops calls")),
    }
}

impl FakeTelegram {
    /// Points `settings` at this fake, with the bot `token` (`<id>:<secret>`): its two variables, set as an operator would.
    pub fn point_settings(&self, settings: &mut pidevops::config::Settings, token: &str) {
        settings
            .providers
            .set("TELEGRAM_BOT_TOKEN", Some(token))
            .unwrap();
        settings
            .providers
            .set("TELEGRAM_API_URL", Some(&self.url))
            .unwrap();
    }
}
