//! A fake GitLab REST API on loopback: the issue notes' list and create (`/api/v4/projects/:id/issues/:iid/notes`),
//! recording each note made with the project as the path decoded it and the `PRIVATE-TOKEN` it carried; and merge
//! requests (`merge_requests.rs` below): list by source branch and state, create (required fields checked), read,
//! update (a draft's title) and merge (the `sha` must be the head), each merge call recorded.

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
    merge_requests: Arc<Mutex<merge_requests::Store>>,
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
            .merge(merge_requests::routes())
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

// ---------------------------------------------------------------------------------------------------------------
// Merge requests.
// ---------------------------------------------------------------------------------------------------------------

pub mod merge_requests {
    use super::*;
    use axum::extract::Query;
    use axum::routing::put;

    /// The project ids the fake gives: the project itself, and a fork of it.
    pub const PROJECT_ID: u64 = 42;
    pub const FORK_ID: u64 = 77;

    #[derive(Clone, Debug)]
    pub struct MergeRequest {
        pub project: String,
        pub iid: u64,
        pub source_branch: String,
        pub target_branch: String,
        pub title: String,
        pub description: String,
        pub remove_source_branch: Option<bool>,
        pub state: String,
        /// Its head commit (`None` until a test says).
        pub sha: Option<String>,
        pub source_project_id: u64,
        pub token: String,
    }

    /// One merge call as it came.
    #[derive(Clone, Debug)]
    pub struct MergeCall {
        pub project: String,
        pub iid: u64,
        pub sha: Option<String>,
        pub when_pipeline_succeeds: Option<bool>,
        pub token: String,
    }

    #[derive(Default)]
    pub struct Store {
        pub open: Vec<MergeRequest>,
        pub merges: Vec<MergeCall>,
    }

    pub fn routes() -> Router<FakeGitlab> {
        Router::new()
            .route(
                "/api/v4/projects/{project}/merge_requests",
                get(list).post(create),
            )
            .route(
                "/api/v4/projects/{project}/merge_requests/{iid}",
                get(read).put(update),
            )
            .route(
                "/api/v4/projects/{project}/merge_requests/{iid}/merge",
                put(merge),
            )
    }

    impl FakeGitlab {
        pub fn merge_requests(&self) -> Vec<MergeRequest> {
            self.merge_requests.lock().unwrap().open.clone()
        }

        pub fn merges(&self) -> Vec<MergeCall> {
            self.merge_requests.lock().unwrap().merges.clone()
        }

        /// A merge request already there: from `source_branch` of the project (or, `fork`, of a fork of it).
        pub fn seed_merge_request(&self, project: &str, source_branch: &str, fork: bool) -> u64 {
            let mut state = self.merge_requests.lock().unwrap();
            let iid = state.open.len() as u64 + 1;
            state.open.push(MergeRequest {
                project: project.to_owned(),
                iid,
                source_branch: source_branch.to_owned(),
                target_branch: "main".to_owned(),
                title: "seeded".to_owned(),
                description: String::new(),
                remove_source_branch: None,
                state: "opened".to_owned(),
                sha: None,
                source_project_id: if fork { FORK_ID } else { PROJECT_ID },
                token: String::new(),
            });
            iid
        }

        /// The head commit of `project!iid` (what a push to its branch made it).
        pub fn set_head(&self, project: &str, iid: u64, sha: &str) {
            let mut state = self.merge_requests.lock().unwrap();
            let mr = state
                .open
                .iter_mut()
                .find(|m| m.project == project && m.iid == iid)
                .expect("the merge request");
            mr.sha = Some(sha.to_owned());
        }
    }

    fn token(headers: &HeaderMap) -> Option<String> {
        headers
            .get("private-token")
            .and_then(|v| v.to_str().ok())
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
    }

    fn unauthorized() -> (StatusCode, Json<Value>) {
        (
            StatusCode::UNAUTHORIZED,
            Json(json!({ "message": "401 Unauthorized" })),
        )
    }

    fn answer(fake: &FakeGitlab, mr: &MergeRequest) -> Value {
        json!({
            "id": 9000 + mr.iid,
            "iid": mr.iid,
            "project_id": PROJECT_ID,
            "source_project_id": mr.source_project_id,
            "target_project_id": PROJECT_ID,
            "source_branch": mr.source_branch,
            "target_branch": mr.target_branch,
            "title": mr.title,
            "description": mr.description,
            "state": mr.state,
            "draft": mr.title.starts_with("Draft:"),
            "sha": mr.sha,
            "merge_commit_sha": if mr.state == "merged" { json!("feedfacefeedfacefeedfacefeedfacefeedface") } else { Value::Null },
            "web_url": format!("{}/{}/-/merge_requests/{}", fake.url, mr.project, mr.iid),
        })
    }

    #[derive(serde::Deserialize)]
    struct ListQuery {
        source_branch: Option<String>,
        state: Option<String>,
    }

    async fn list(
        State(fake): State<FakeGitlab>,
        Path(project): Path<String>,
        Query(query): Query<ListQuery>,
        headers: HeaderMap,
    ) -> (StatusCode, Json<Value>) {
        if token(&headers).is_none() {
            return unauthorized();
        }
        let state = fake.merge_requests.lock().unwrap();
        let found: Vec<Value> = state
            .open
            .iter()
            .filter(|m| m.project == project)
            .filter(|m| {
                query
                    .source_branch
                    .as_ref()
                    .is_none_or(|b| &m.source_branch == b)
            })
            .filter(|m| {
                query
                    .state
                    .as_ref()
                    .is_none_or(|s| s == "all" || &m.state == s)
            })
            .map(|m| answer(&fake, m))
            .collect();
        (StatusCode::OK, Json(Value::Array(found)))
    }

    async fn create(
        State(fake): State<FakeGitlab>,
        Path(project): Path<String>,
        headers: HeaderMap,
        Json(body): Json<Value>,
    ) -> (StatusCode, Json<Value>) {
        let Some(token) = token(&headers) else {
            return unauthorized();
        };
        let text = |field: &str| {
            body[field]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let (Some(source_branch), Some(target_branch), Some(title)) =
            (text("source_branch"), text("target_branch"), text("title"))
        else {
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({ "error": "source_branch, target_branch, title are missing" })),
            );
        };
        let mut state = fake.merge_requests.lock().unwrap();
        if state.open.iter().any(|m| {
            m.project == project
                && m.source_branch == source_branch
                && m.state == "opened"
                && m.source_project_id == PROJECT_ID
        }) {
            // GitLab refuses a second open merge request from the same branch.
            return (
                StatusCode::CONFLICT,
                Json(
                    json!({ "message": ["Another open merge request already exists for this source branch"] }),
                ),
            );
        }
        let iid = state.open.len() as u64 + 1;
        let mr = MergeRequest {
            project,
            iid,
            source_branch,
            target_branch,
            title,
            description: text("description").unwrap_or_default(),
            remove_source_branch: body["remove_source_branch"].as_bool(),
            state: "opened".to_owned(),
            sha: None,
            source_project_id: PROJECT_ID,
            token,
        };
        let answered = answer(&fake, &mr);
        state.open.push(mr);
        (StatusCode::CREATED, Json(answered))
    }

    async fn read(
        State(fake): State<FakeGitlab>,
        Path((project, iid)): Path<(String, u64)>,
        headers: HeaderMap,
    ) -> (StatusCode, Json<Value>) {
        if token(&headers).is_none() {
            return unauthorized();
        }
        let state = fake.merge_requests.lock().unwrap();
        match state
            .open
            .iter()
            .find(|m| m.project == project && m.iid == iid)
        {
            Some(mr) => (StatusCode::OK, Json(answer(&fake, mr))),
            None => (
                StatusCode::NOT_FOUND,
                Json(json!({ "message": "404 Not found" })),
            ),
        }
    }

    async fn update(
        State(fake): State<FakeGitlab>,
        Path((project, iid)): Path<(String, u64)>,
        headers: HeaderMap,
        Json(body): Json<Value>,
    ) -> (StatusCode, Json<Value>) {
        if token(&headers).is_none() {
            return unauthorized();
        }
        let mut state = fake.merge_requests.lock().unwrap();
        let Some(mr) = state
            .open
            .iter_mut()
            .find(|m| m.project == project && m.iid == iid)
        else {
            return (
                StatusCode::NOT_FOUND,
                Json(json!({ "message": "404 Not found" })),
            );
        };
        if let Some(title) = body["title"].as_str() {
            mr.title = title.to_owned();
        }
        let answered = answer(&fake, mr);
        (StatusCode::OK, Json(answered))
    }

    async fn merge(
        State(fake): State<FakeGitlab>,
        Path((project, iid)): Path<(String, u64)>,
        headers: HeaderMap,
        Json(body): Json<Value>,
    ) -> (StatusCode, Json<Value>) {
        let Some(token) = token(&headers) else {
            return unauthorized();
        };
        let mut state = fake.merge_requests.lock().unwrap();
        state.merges.push(MergeCall {
            project: project.clone(),
            iid,
            sha: body["sha"].as_str().map(str::to_owned),
            when_pipeline_succeeds: body["merge_when_pipeline_succeeds"].as_bool(),
            token,
        });
        let Some(mr) = state
            .open
            .iter_mut()
            .find(|m| m.project == project && m.iid == iid)
        else {
            return (
                StatusCode::NOT_FOUND,
                Json(json!({ "message": "404 Not found" })),
            );
        };
        if mr.state != "opened" || mr.title.starts_with("Draft:") {
            return (
                StatusCode::METHOD_NOT_ALLOWED,
                Json(json!({ "message": "405 Method Not Allowed" })),
            );
        }
        if let Some(sha) = body["sha"].as_str() {
            if mr.sha.as_deref() != Some(sha) {
                return (
                    StatusCode::CONFLICT,
                    Json(json!({ "message": "SHA does not match HEAD of source branch" })),
                );
            }
        }
        mr.state = "merged".to_owned();
        let answered = answer(&fake, mr);
        (StatusCode::OK, Json(answered))
    }
}
