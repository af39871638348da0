//! A scripted model API on loopback, shaped like the real ones, for the real agent CLIs (tests/it/agent_clis.rs):
//! the Anthropic Messages API (`POST /v1/messages`, streamed as server-sent events: `message_start`,
//! `content_block_start` / `_delta` / `_stop`, `message_delta`, `message_stop`) and the OpenAI Responses API
//! (`POST /v1/responses`, streamed: `response.created`, `response.output_item.added` / `.done`,
//! `response.completed`). The script is a list of tool calls: a request that carries `n` tool results is answered
//! with call `n + 1` (a result the CLI made up for a call an earlier session never finished does not count: that
//! call is made again), and once every call has its result, with a final text and the end of the turn. A request
//! that offers no tools (a CLI asking for a session title) or does not stream gets a short text. Every request is
//! recorded (path, headers, body) for the test to assert on; any other path is recorded and answered 404.
//! [`FakeModel::refusing`] refuses every model call with the provider's error body instead.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};

/// What the fake says when every tool call has its result.
pub const FINAL_TEXT: &str = "Done: the change is written down.";

/// One tool call the model makes.
#[derive(Clone, Debug)]
pub enum ToolCall {
    /// A tool with JSON input: Anthropic `tool_use`, OpenAI `function_call`.
    Function { name: String, input: Value },
    /// An OpenAI freeform tool (`custom_tool_call`): its input is text (Codex's `exec` takes JavaScript).
    Custom { name: String, input: String },
}

impl ToolCall {
    pub fn function(name: &str, input: Value) -> Self {
        Self::Function {
            name: name.to_owned(),
            input,
        }
    }

    pub fn custom(name: &str, input: &str) -> Self {
        Self::Custom {
            name: name.to_owned(),
            input: input.to_owned(),
        }
    }
}

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
    /// The body as text, for searching (the prompt, a tool result).
    pub text: String,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

struct Inner {
    script: Vec<ToolCall>,
    /// Every model call is refused with the provider's error body ([`FakeModel::refusing`]).
    refuse: bool,
    received: Vec<Received>,
}

#[derive(Clone)]
pub struct FakeModel {
    inner: Arc<Mutex<Inner>>,
    /// `http://127.0.0.1:<port>`, without `/v1`.
    pub url: String,
}

impl FakeModel {
    pub async fn start(script: Vec<ToolCall>) -> Self {
        Self::serve(script, false).await
    }

    /// A model API that refuses the account: every model call is answered as Anthropic answers an account out of
    /// credit (400 `invalid_request_error`) and OpenAI a wrong key (401 `invalid_api_key`).
    pub async fn refusing() -> Self {
        Self::serve(Vec::new(), true).await
    }

    async fn serve(script: Vec<ToolCall>, refuse: bool) -> Self {
        let inner = Arc::new(Mutex::new(Inner {
            script,
            refuse,
            received: Vec::new(),
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let fake = Self { inner, url };
        let router = Router::new().fallback(any).with_state(fake.clone());
        tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        fake
    }

    /// Every request, in order of arrival.
    pub fn received(&self) -> Vec<Received> {
        self.inner.lock().unwrap().received.clone()
    }

    /// The model calls (`POST /v1/messages` or `POST /v1/responses`).
    pub fn model_calls(&self) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| {
                r.method == "POST" && (r.path == "/v1/messages" || r.path == "/v1/responses")
            })
            .collect()
    }
}

async fn any(
    State(fake): State<FakeModel>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let text = String::from_utf8_lossy(&body).into_owned();
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let path = uri.path().to_owned();
    let (script, refuse) = {
        let mut inner = fake.inner.lock().unwrap();
        inner.received.push(Received {
            method: method.to_string(),
            path: path.clone(),
            headers,
            body: parsed.clone(),
            text,
        });
        (inner.script.clone(), inner.refuse)
    };
    match (method, path.as_str()) {
        // Not 401, which Claude Code retries for about three minutes (measured: 175 s) before it exits 1.
        (Method::POST, "/v1/messages") if refuse => (
            StatusCode::BAD_REQUEST,
            axum::Json(
                json!({ "type": "error", "error": { "type": "invalid_request_error",
                "message": "Your credit balance is too low to access the Anthropic API." } }),
            ),
        )
            .into_response(),
        (Method::POST, "/v1/responses") if refuse => (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({ "error": {
                "message": "Incorrect API key provided", "type": "invalid_request_error",
                "param": null, "code": "invalid_api_key" } })),
        )
            .into_response(),
        (Method::POST, "/v1/messages") => anthropic(&parsed, &script),
        (Method::POST, "/v1/responses") => responses(&parsed, &script),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

fn offers_tools(request: &Value) -> bool {
    request["tools"].as_array().is_some_and(|t| !t.is_empty())
        || request["input"]
            .as_array()
            .is_some_and(|items| items.iter().any(|i| i["type"] == "additional_tools"))
}

fn sse(events: &[(&str, Value)]) -> Response {
    let body: String = events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect();
    ([("content-type", "text/event-stream")], body).into_response()
}

/// A result a CLI made up for a call its earlier session never finished, resuming a session cut off mid-call
/// (Claude Code: an error saying so; Codex: `aborted`): that call was not made, so the model makes it again, as a
/// real one reading it would.
fn interrupted(result: &Value) -> bool {
    (result["is_error"] == true && result["content"].to_string().contains("interrupted"))
        || result["output"] == "aborted"
}

/// The Anthropic Messages API.
fn anthropic(request: &Value, script: &[ToolCall]) -> Response {
    let model = request["model"].as_str().unwrap_or("claude").to_owned();
    let results = request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter(|block| block["type"] == "tool_result" && !interrupted(block))
        .count();
    let next = script.get(results).filter(|_| offers_tools(request));
    // Each call's id is new, as a real model's is: a call made again is not the earlier one.
    let calls = request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter(|block| block["type"] == "tool_use")
        .count();
    if request["stream"] != true {
        return axum::Json(json!({
            "id": "msg_fake", "type": "message", "role": "assistant", "model": model,
            "content": [{ "type": "text", "text": FINAL_TEXT }],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": { "input_tokens": 10, "output_tokens": 5 }
        }))
        .into_response();
    }
    let mut events = vec![(
        "message_start",
        json!({ "type": "message_start", "message": {
            "id": format!("msg_fake_{results}"), "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": { "input_tokens": 10, "output_tokens": 1 }
        }}),
    )];
    let stop_reason = match next {
        Some(ToolCall::Function { name, input }) => {
            events.extend([
                (
                    "content_block_start",
                    json!({ "type": "content_block_start", "index": 0, "content_block": {
                        "type": "tool_use", "id": format!("toolu_fake_{}", calls + 1), "name": name, "input": {}
                    }}),
                ),
                (
                    "content_block_delta",
                    json!({ "type": "content_block_delta", "index": 0, "delta": {
                        "type": "input_json_delta", "partial_json": input.to_string()
                    }}),
                ),
            ]);
            "tool_use"
        }
        Some(ToolCall::Custom { .. }) => panic!("the Anthropic API has no freeform tools"),
        None => {
            events.extend([
                (
                    "content_block_start",
                    json!({ "type": "content_block_start", "index": 0,
                            "content_block": { "type": "text", "text": "" } }),
                ),
                (
                    "content_block_delta",
                    json!({ "type": "content_block_delta", "index": 0,
                            "delta": { "type": "text_delta", "text": FINAL_TEXT } }),
                ),
            ]);
            "end_turn"
        }
    };
    events.extend([
        (
            "content_block_stop",
            json!({ "type": "content_block_stop", "index": 0 }),
        ),
        (
            "message_delta",
            json!({ "type": "message_delta", "delta": { "stop_reason": stop_reason, "stop_sequence": null },
                    "usage": { "output_tokens": 5 } }),
        ),
        ("message_stop", json!({ "type": "message_stop" })),
    ]);
    sse(&events)
}

/// The OpenAI Responses API.
fn responses(request: &Value, script: &[ToolCall]) -> Response {
    let results = request["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| {
            item["type"]
                .as_str()
                .is_some_and(|t| t.ends_with("_call_output"))
                && !interrupted(item)
        })
        .count();
    // Each call's id is new, as a real model's is: a call made again is not the earlier one.
    let n = request["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| item["type"].as_str().is_some_and(|t| t.ends_with("_call")))
        .count()
        + 1;
    let item = match script.get(results).filter(|_| offers_tools(request)) {
        Some(ToolCall::Function { name, input }) => json!({
            "type": "function_call", "id": format!("fc_fake_{n}"), "call_id": format!("call_fake_{n}"),
            "name": name, "arguments": input.to_string(), "status": "completed"
        }),
        Some(ToolCall::Custom { name, input }) => json!({
            "type": "custom_tool_call", "id": format!("ctc_fake_{n}"), "call_id": format!("call_fake_{n}"),
            "name": name, "input": input, "status": "completed"
        }),
        None => json!({
            "type": "message", "id": format!("msg_fake_{n}"), "role": "assistant", "status": "completed",
            "content": [{ "type": "output_text", "text": FINAL_TEXT, "annotations": [] }]
        }),
    };
    let id = format!("resp_fake_{n}");
    sse(&[
        (
            "response.created",
            json!({ "type": "response.created", "response": { "id": id, "status": "in_progress" } }),
        ),
        (
            "response.output_item.added",
            json!({ "type": "response.output_item.added", "output_index": 0, "item": item }),
        ),
        (
            "response.output_item.done",
            json!({ "type": "response.output_item.done", "output_index": 0, "item": item }),
        ),
        (
            "response.completed",
            json!({ "type": "response.completed", "response": { "id": id, "status": "completed",
                "usage": { "input_tokens": 10, "input_tokens_details": null, "output_tokens": 5,
                           "output_tokens_details": null, "total_tokens": 15 } } }),
        ),
    ])
}
