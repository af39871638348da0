//! A fake GitLab REST API on loopback: the notes' list and create on issues and merge requests
//! (`/api/v4/projects/:id/issues/:iid/notes`, `…/merge_requests/:iid/notes`), recording each note made with the
//! project as the path decoded it and the `PRIVATE-TOKEN` it carried; emoji awards on notes, refusing the same
//! award twice as GitLab does.

use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

#[derive(Clone, Debug)]
pub struct Made {
    /// The project id as the route read it: a full path, its `/` decoded.
    pub project: String,
    /// `issues` or `merge_requests`: what the note is on.
    pub on: &'static str,
    pub iid: u64,
    pub token: String,
    pub body: String,
    pub id: u64,
}

/// An emoji awarded to a note: `(project, on, iid, note, name)`.
pub type Award = (String, String, u64, u64, String);

#[derive(Clone, Default)]
pub struct FakeGitlab {
    notes: Arc<Mutex<Vec<Made>>>,
    awards: Arc<Mutex<Vec<Award>>>,
    pub url: String,
}

impl FakeGitlab {
    pub async fn start() -> Self {
        let mut fake = FakeGitlab::default();
        let router = Router::new()
            .route(
                "/api/v4/projects/{project}/issues/{iid}/notes",
                get(list_on_issue).post(create_on_issue),
            )
            .route(
                "/api/v4/projects/{project}/merge_requests/{iid}/notes",
                get(list_on_merge_request).post(create_on_merge_request),
            )
            .route(
                "/api/v4/projects/{project}/{on}/{iid}/notes/{note}/award_emoji",
                axum::routing::post(award),
            )
            .route("/api/v4/user", get(user))
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        fake.url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        fake
    }

    /// A note already on `project#iid` (one a cut-off attempt made before its answer was recorded).
    pub fn seed(&self, project: &str, iid: u64, body: &str) {
        let mut notes = self.notes.lock().unwrap();
        let id = 5000 + notes.len() as u64;
        notes.push(Made {
            project: project.to_owned(),
            on: "issues",
            iid,
            token: String::new(),
            body: body.to_owned(),
            id,
        });
    }

    pub fn notes(&self) -> Vec<Made> {
        self.notes.lock().unwrap().clone()
    }

    pub fn awards(&self) -> Vec<Award> {
        self.awards.lock().unwrap().clone()
    }

    /// Points a test's settings at this fake, as an operator would: its token and address.
    pub fn point_settings(&self, settings: &mut pidevops::config::Settings, token: &str) {
        settings.providers.set("GITLAB_TOKEN", Some(token)).unwrap();
        settings
            .providers
            .set("GITLAB_URL", Some(&self.url))
            .unwrap();
    }
}

async fn user(headers: HeaderMap) -> (StatusCode, Json<Value>) {
    match headers.get("private-token") {
        Some(_) => (
            StatusCode::OK,
            Json(json!({ "id": 99, "username": "pidevops-bot" })),
        ),
        None => (
            StatusCode::UNAUTHORIZED,
            Json(json!({ "message": "401 Unauthorized" })),
        ),
    }
}

async fn list_on_issue(fake: State<FakeGitlab>, path: Path<(String, u64)>) -> Json<Value> {
    list(fake, path, "issues")
}

async fn list_on_merge_request(fake: State<FakeGitlab>, path: Path<(String, u64)>) -> Json<Value> {
    list(fake, path, "merge_requests")
}

fn list(
    State(fake): State<FakeGitlab>,
    Path((project, iid)): Path<(String, u64)>,
    on: &'static str,
) -> Json<Value> {
    let notes = fake.notes.lock().unwrap();
    Json(
        notes
            .iter()
            .rev()
            .filter(|n| n.project == project && n.iid == iid && n.on == on)
            .map(|n| json!({ "id": n.id, "body": n.body, "system": false }))
            .collect(),
    )
}

async fn create_on_issue(
    fake: State<FakeGitlab>,
    path: Path<(String, u64)>,
    headers: HeaderMap,
    body: Json<Value>,
) -> (StatusCode, Json<Value>) {
    create(fake, path, headers, body, "issues")
}

async fn create_on_merge_request(
    fake: State<FakeGitlab>,
    path: Path<(String, u64)>,
    headers: HeaderMap,
    body: Json<Value>,
) -> (StatusCode, Json<Value>) {
    create(fake, path, headers, body, "merge_requests")
}

fn create(
    State(fake): State<FakeGitlab>,
    Path((project, iid)): Path<(String, u64)>,
    headers: HeaderMap,
    Json(body): Json<Value>,
    on: &'static str,
) -> (StatusCode, Json<Value>) {
    let Some(text) = body["body"].as_str() else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"message": "body is missing"})),
        );
    };
    let mut notes = fake.notes.lock().unwrap();
    let id = 5000 + notes.len() as u64;
    notes.push(Made {
        project,
        on,
        iid,
        token: headers
            .get("private-token")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
        body: text.to_owned(),
        id,
    });
    (
        StatusCode::CREATED,
        Json(json!({ "id": id, "body": text, "system": false })),
    )
}

/// `POST …/<issues|merge_requests>/:iid/notes/:note/award_emoji {name}`: the same award twice is refused with
/// GitLab's words.
async fn award(
    State(fake): State<FakeGitlab>,
    Path((project, on, iid, note)): Path<(String, String, u64, u64)>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    if headers.get("private-token").is_none() {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({ "message": "401 Unauthorized" })),
        );
    }
    let (Some(name), true) = (
        body["name"].as_str(),
        matches!(on.as_str(), "issues" | "merge_requests"),
    ) else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"message": "name is missing"})),
        );
    };
    let mut awards = fake.awards.lock().unwrap();
    let given = (project, on, iid, note, name.to_owned());
    if awards.contains(&given) {
        return (
            StatusCode::BAD_REQUEST,
            Json(
                json!({"message": {"name": ["has already been taken"]}, "error": "Award Emoji has already been taken"}),
            ),
        );
    }
    awards.push(given);
    (StatusCode::CREATED, Json(json!({ "id": 1, "name": name })))
}
