//! A fake Slack Web API on loopback: every request must carry the bot token (`Authorization: Bearer`) and read
//! as slack-morphism's request type for its method, or it is refused as Slack would (`invalid_auth`,
//! `invalid_arguments`); posts are answered with their channel and a fresh `ts`, as Slack does; it answers 429
//! with `Retry-After` or an `ok: false` code when told, and records every request.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use slack_morphism::api::{
    SlackApiAuthTestResponse, SlackApiChatPostEphemeralRequest, SlackApiChatPostMessageRequest,
    SlackApiChatPostMessageResponse, SlackApiChatUpdateRequest, SlackApiChatUpdateResponse,
    SlackApiReactionsAddRequest,
};

/// One request as it arrived.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    pub body: Value,
    pub at: Instant,
    /// The `ts` a post was given.
    pub ts: Option<String>,
}

/// What the next call of a method is answered instead of success.
#[derive(Clone, Debug)]
enum Trouble {
    /// 429 with `Retry-After: <seconds>`.
    TooMany(u64),
    /// 200 with `ok: false` and this code (`Retry-After` too when given).
    Refuse(String, Option<u64>),
}

#[derive(Default)]
struct Inner {
    calls: Vec<Call>,
    /// Requests refused for not reading as Slack's type, or without the token.
    refused: Vec<String>,
    /// Per method, answered in order before success.
    troubles: Vec<(String, Trouble)>,
    next_ts: u64,
}

#[derive(Clone, Default)]
pub struct FakeSlack {
    inner: Arc<Mutex<Inner>>,
    token: Arc<Mutex<String>>,
    pub url: String,
}

impl FakeSlack {
    /// A fake that takes `token` as its bot's.
    pub async fn start(token: &str) -> Self {
        let mut fake = FakeSlack {
            token: Arc::new(Mutex::new(token.to_owned())),
            ..FakeSlack::default()
        };
        let router = Router::new()
            .route("/{method}", post(call))
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        fake.url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        fake
    }

    /// The next call of `method` is answered 429 with `Retry-After: seconds`.
    pub fn rate_limit_next(&self, method: &str, seconds: u64) {
        self.inner
            .lock()
            .unwrap()
            .troubles
            .push((method.to_owned(), Trouble::TooMany(seconds)));
    }

    /// The next call of `method` is answered `ok: false` with `code` (and `Retry-After` when given).
    pub fn refuse_next(&self, method: &str, code: &str, retry_after: Option<u64>) {
        self.inner.lock().unwrap().troubles.push((
            method.to_owned(),
            Trouble::Refuse(code.to_owned(), retry_after),
        ));
    }

    /// Every call answered (refused ones too, but not those that did not read).
    pub fn calls(&self) -> Vec<Call> {
        self.inner.lock().unwrap().calls.clone()
    }

    /// The calls of `method`.
    pub fn calls_of(&self, method: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method)
            .collect()
    }

    /// Requests refused because they did not read as Slack's type, or came without the token.
    pub fn refused(&self) -> Vec<String> {
        self.inner.lock().unwrap().refused.clone()
    }

    /// Points `settings` at this fake, with the bot `token`: its two variables, set as an operator would.
    pub fn point_settings(&self, settings: &mut pidevops::config::Settings, token: &str) {
        *self.token.lock().unwrap() = token.to_owned();
        settings
            .providers
            .set("SLACK_BOT_TOKEN", Some(token))
            .unwrap();
        settings
            .providers
            .set("SLACK_API_URL", Some(&self.url))
            .unwrap();
    }
}

fn slack_ok(mut answer: Value) -> Response {
    answer["ok"] = json!(true);
    Json(answer).into_response()
}

fn slack_error(code: &str) -> Response {
    Json(json!({ "ok": false, "error": code })).into_response()
}

async fn call(
    State(fake): State<FakeSlack>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let token = fake.token.lock().unwrap().clone();
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let mut inner = fake.inner.lock().unwrap();
    if bearer != format!("Bearer {token}") {
        inner.refused.push(format!("{method}: no bot token"));
        return slack_error("invalid_auth");
    }
    let json_body = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    let parsed = serde_json::from_slice::<Value>(&body).map_err(|e| e.to_string());
    let body = match parsed.and_then(|body| fits_method(&method, &body).map(|()| body)) {
        Ok(body) if json_body => body,
        Ok(_) => {
            inner.refused.push(format!("{method}: not JSON"));
            return slack_error("invalid_arguments");
        }
        Err(why) => {
            inner.refused.push(format!("{method}: {why}"));
            return slack_error("invalid_arguments");
        }
    };
    let mut record = Call {
        method: method.clone(),
        body: body.clone(),
        at: Instant::now(),
        ts: None,
    };
    if let Some(i) = inner.troubles.iter().position(|(m, _)| *m == method) {
        let (_, trouble) = inner.troubles.remove(i);
        inner.calls.push(record);
        return match trouble {
            Trouble::TooMany(seconds) => (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", seconds.to_string())],
                Json(json!({ "ok": false, "error": "ratelimited" })),
            )
                .into_response(),
            Trouble::Refuse(code, Some(seconds)) => (
                [("retry-after", seconds.to_string())],
                Json(json!({ "ok": false, "error": code })),
            )
                .into_response(),
            Trouble::Refuse(code, None) => slack_error(&code),
        };
    }
    let answer = match method.as_str() {
        "chat.postMessage" => {
            inner.next_ts += 1;
            let ts = format!("1764400000.{:06}", inner.next_ts);
            record.ts = Some(ts.clone());
            let mut message =
                json!({ "ts": ts, "text": body["text"], "bot_id": "B1", "type": "message" });
            if let Some(blocks) = body.get("blocks") {
                message["blocks"] = blocks.clone();
            }
            if let Some(thread) = body.get("thread_ts") {
                message["thread_ts"] = thread.clone();
            }
            typed::<SlackApiChatPostMessageResponse>(json!({
                "channel": body["channel"], "ts": ts, "message": message
            }))
        }
        "chat.update" => typed::<SlackApiChatUpdateResponse>(json!({
            "channel": body["channel"], "ts": body["ts"], "text": body["text"],
            "message": { "text": body["text"], "bot_id": "B1" }
        })),
        "chat.postEphemeral" => json!({ "message_ts": "1764400000.999999" }),
        "reactions.add" => json!({}),
        "auth.test" => typed::<SlackApiAuthTestResponse>(json!({
            "url": "https://acme.slack.com/", "team": "Acme", "user": "pidevops",
            "team_id": "T1", "user_id": "U0BOT", "bot_id": "B1"
        })),
        other => {
            drop(inner);
            return slack_error(&format!("unknown_method:{other}"));
        }
    };
    inner.calls.push(record);
    slack_ok(answer)
}

/// `value` as the response type `T` and back: what the fake answers is what the crate's types read.
fn typed<T: serde::Serialize + serde::de::DeserializeOwned>(value: Value) -> Value {
    let typed: T = serde_json::from_value(value.clone()).unwrap_or_else(|e| {
        panic!("the fake Slack's answer {value} does not fit the Web API: {e}")
    });
    serde_json::to_value(typed).expect("serializes")
}

/// Whether `body` reads as the request type of `method` (slack-morphism's), for the methods pidevops calls.
pub fn fits_method(method: &str, body: &Value) -> Result<(), String> {
    fn parse<T: serde::de::DeserializeOwned>(body: &Value) -> Result<(), String> {
        serde_json::from_value::<T>(body.clone())
            .map(drop)
            .map_err(|e| e.to_string())
    }
    let has_text = body
        .get("text")
        .is_some_and(|t| t.as_str().is_some_and(|t| !t.is_empty()))
        || body.get("blocks").is_some();
    if method.starts_with("chat.") && !has_text {
        // Slack's `no_text`: a message with neither text nor blocks.
        return Err("no_text".to_owned());
    }
    match method {
        "chat.postMessage" => parse::<SlackApiChatPostMessageRequest>(body),
        "chat.update" => parse::<SlackApiChatUpdateRequest>(body),
        "chat.postEphemeral" => parse::<SlackApiChatPostEphemeralRequest>(body),
        "reactions.add" => parse::<SlackApiReactionsAddRequest>(body),
        "auth.test" => match body.as_object() {
            Some(map) if map.is_empty() => Ok(()),
            _ => Err(format!("auth.test takes no arguments: {body}")),
        },
        other => Err(format!("{other} is not a method pidevops calls")),
    }
}
