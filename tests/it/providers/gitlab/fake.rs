//! A fake GitLab REST API on loopback: the issue notes' list and create (`/api/v4/projects/:id/issues/:iid/notes`),
//! recording each note made with the project as the path decoded it and the `PRIVATE-TOKEN` it carried; a job's
//! log (`/api/v4/projects/:id/jobs/:job_id/trace`, plain text) as a test seeded it, each read recorded.

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
    pub iid: u64,
    pub token: String,
    pub body: String,
    pub id: u64,
}

#[derive(Clone, Default)]
pub struct FakeGitlab {
    notes: Arc<Mutex<Vec<Made>>>,
    jobs: Jobs,
    pub url: String,
}

impl FakeGitlab {
    pub async fn start() -> Self {
        let mut fake = FakeGitlab::default();
        let router = Router::new()
            .route(
                "/api/v4/projects/{project}/issues/{iid}/notes",
                get(list).post(create),
            )
            .route("/api/v4/user", get(user))
            .route(
                "/api/v4/projects/{project}/jobs/{job}/trace",
                get(job_trace),
            )
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
            iid,
            token: String::new(),
            body: body.to_owned(),
            id,
        });
    }

    pub fn notes(&self) -> Vec<Made> {
        self.notes.lock().unwrap().clone()
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

async fn list(
    State(fake): State<FakeGitlab>,
    Path((project, iid)): Path<(String, u64)>,
) -> Json<Value> {
    let notes = fake.notes.lock().unwrap();
    Json(
        notes
            .iter()
            .rev()
            .filter(|n| n.project == project && n.iid == iid)
            .map(|n| json!({ "id": n.id, "body": n.body, "system": false }))
            .collect(),
    )
}

async fn create(
    State(fake): State<FakeGitlab>,
    Path((project, iid)): Path<(String, u64)>,
    headers: HeaderMap,
    Json(body): Json<Value>,
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
        Json(json!({ "id": id, "body": text, "noteable_type": "Issue", "system": false })),
    )
}

// Jobs' logs: what reactions read of a failed pipeline.

/// The logs a test seeded, by job id, and each read: the project as the path decoded it, the job.
#[derive(Clone, Default)]
struct Jobs {
    logs: Arc<Mutex<std::collections::HashMap<u64, String>>>,
    reads: Arc<Mutex<Vec<(String, u64)>>>,
}

impl FakeGitlab {
    /// Job `job`'s log, as GitLab's runner wrote it (escapes and all).
    pub fn seed_log(&self, job: u64, log: &str) {
        self.jobs.logs.lock().unwrap().insert(job, log.to_owned());
    }

    /// Each log read, in order: the project as the path decoded it, and the job.
    pub fn log_reads(&self) -> Vec<(String, u64)> {
        self.jobs.reads.lock().unwrap().clone()
    }
}

/// `GET …/jobs/:job_id/trace`: the seeded log as plain text; 401 without `PRIVATE-TOKEN`, 404 for a job never
/// seeded, 400 for a job id that is not a number (as GitLab answers).
async fn job_trace(
    State(fake): State<FakeGitlab>,
    Path((project, job)): Path<(String, String)>,
    headers: HeaderMap,
) -> (StatusCode, String) {
    if headers.get("private-token").is_none() {
        return (StatusCode::UNAUTHORIZED, "401 Unauthorized".into());
    }
    let Ok(job) = job.parse::<u64>() else {
        return (StatusCode::BAD_REQUEST, "job_id is invalid".into());
    };
    fake.jobs.reads.lock().unwrap().push((project, job));
    match fake.jobs.logs.lock().unwrap().get(&job) {
        Some(log) => (StatusCode::OK, log.clone()),
        None => (StatusCode::NOT_FOUND, "404 Not found".into()),
    }
}
