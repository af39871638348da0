//! Repository webhooks on the fake GitHub, shaped like GitHub's REST API: `GET /repos/{o}/{r}/hooks`, `POST` one
//! (422 for a second with the same URL) and `PATCH /repos/{o}/{r}/hooks/{id}`; and pidevops's settings pointed at
//! the fake.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::{failure_response, validation_failed, FakeGithub};

/// A repository webhook as the fake keeps it: its secret as it was given (GitHub answers `********` instead).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hook {
    pub id: u64,
    pub repo: String,
    pub url: String,
    pub content_type: String,
    pub secret: Option<String>,
    pub events: Vec<String>,
    pub active: bool,
}

impl Hook {
    /// As GitHub's REST API shows it.
    fn json(&self) -> Value {
        let mut config =
            json!({ "url": self.url, "content_type": self.content_type, "insecure_ssl": "0" });
        if self.secret.is_some() {
            config["secret"] = json!("********");
        }
        json!({
            "type": "Repository",
            "id": self.id,
            "name": "web",
            "active": self.active,
            "events": self.events,
            "config": config,
            "url": format!("https://api.github.com/repos/{}/hooks/{}", self.repo, self.id),
        })
    }

    /// `config` and `events`/`active` of a create or update body, over what the hook had.
    fn apply(&mut self, body: &Value) {
        let config = &body["config"];
        if let Some(url) = config["url"].as_str() {
            self.url = url.to_owned();
        }
        if let Some(kind) = config["content_type"].as_str() {
            self.content_type = kind.to_owned();
        }
        if let Some(secret) = config["secret"].as_str() {
            self.secret = Some(secret.to_owned());
        }
        if let Some(events) = body["events"].as_array() {
            self.events = events
                .iter()
                .filter_map(|e| e.as_str().map(str::to_owned))
                .collect();
        }
        if let Some(active) = body["active"].as_bool() {
            self.active = active;
        }
    }
}

impl FakeGithub {
    /// The repository has a webhook delivering to `url` (every event, no secret).
    pub fn add_hook(&self, repo: &str, url: &str) {
        let mut inner = self.inner.lock().unwrap();
        let id = inner.hooks.len() as u64 + 1;
        inner.hooks.push(Hook {
            id,
            repo: repo.to_owned(),
            url: url.to_owned(),
            content_type: "form".to_owned(),
            secret: None,
            events: vec!["*".to_owned()],
            active: true,
        });
    }

    /// The repository's webhooks, as kept (secrets included).
    pub fn hooks(&self, repo: &str) -> Vec<Hook> {
        let inner = self.inner.lock().unwrap();
        inner
            .hooks
            .iter()
            .filter(|h| h.repo == repo)
            .cloned()
            .collect()
    }
}

/// `GET /repos/{o}/{r}/hooks`: the repository's webhooks.
pub(super) async fn list_hooks(
    State(fake): State<FakeGithub>,
    Path((owner, repo)): Path<(String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(failure) = fake.record(&method, &uri, &headers, Value::Null) {
        return failure_response(failure);
    }
    let full = format!("{owner}/{repo}");
    let inner = fake.inner.lock().unwrap();
    let hooks: Vec<Value> = inner
        .hooks
        .iter()
        .filter(|h| h.repo == full)
        .map(Hook::json)
        .collect();
    Json(Value::Array(hooks)).into_response()
}

/// `POST /repos/{o}/{r}/hooks`: a new webhook; like GitHub, 422 for a second one with the same URL.
pub(super) async fn create_hook(
    State(fake): State<FakeGithub>,
    Path((owner, repo)): Path<(String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if let Some(failure) = fake.record(&method, &uri, &headers, body.clone()) {
        return failure_response(failure);
    }
    let full = format!("{owner}/{repo}");
    let Some(url) = body["config"]["url"].as_str().filter(|u| !u.is_empty()) else {
        return validation_failed("config.url is missing");
    };
    if body["name"] != json!("web") {
        return validation_failed("name must be \"web\"");
    }
    let mut inner = fake.inner.lock().unwrap();
    if inner.hooks.iter().any(|h| h.repo == full && h.url == url) {
        return validation_failed("Hook already exists on this repository");
    }
    let mut hook = Hook {
        id: inner.hooks.len() as u64 + 1,
        repo: full,
        url: String::new(),
        content_type: "form".to_owned(),
        secret: None,
        events: vec!["push".to_owned()],
        active: true,
    };
    hook.apply(&body);
    let shown = hook.json();
    inner.hooks.push(hook);
    (StatusCode::CREATED, Json(shown)).into_response()
}

/// `PATCH /repos/{o}/{r}/hooks/{id}`: the given fields of one webhook of that repository, else 404.
pub(super) async fn update_hook(
    State(fake): State<FakeGithub>,
    Path((owner, repo, id)): Path<(String, String, u64)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if let Some(failure) = fake.record(&method, &uri, &headers, body.clone()) {
        return failure_response(failure);
    }
    let full = format!("{owner}/{repo}");
    let mut inner = fake.inner.lock().unwrap();
    let Some(hook) = inner
        .hooks
        .iter_mut()
        .find(|h| h.repo == full && h.id == id)
    else {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({ "message": "Not Found" })),
        )
            .into_response();
    };
    hook.apply(&body);
    Json(hook.json()).into_response()
}

impl FakeGithub {
    /// Points `settings` at this fake, with the token `token`: its two variables, set as an operator would.
    pub fn point_settings(&self, settings: &mut pidevops::config::Settings, token: &str) {
        settings.providers.set("GITHUB_TOKEN", Some(token)).unwrap();
        settings
            .providers
            .set("GITHUB_API_URL", Some(&self.url))
            .unwrap();
    }
}
