//! A fake GitLab REST API on loopback: the notes' list and create on issues and merge requests
//! (`/api/v4/projects/:id/issues/:iid/notes`, `…/merge_requests/:iid/notes`), recording each note made with the
//! project as the path decoded it and the `PRIVATE-TOKEN` it carried; emoji awards on notes, refusing the same
//! award twice as GitLab does; a job's log (`/api/v4/projects/:id/jobs/:job_id/trace`, plain text) as a test
//! seeded it, each read recorded; and, in their own block below, a project's merge requests changed since a time
//! (keyset pagination: a `Link` rel=next, `updated_after` honoured), its webhooks (list, create, update) and its
//! members (`members/all`); and merge requests (`merge_requests` below): list by source branch and state, create
//! (required fields checked), read, update (a draft's title) and merge (the `sha` must be the head), each merge
//! call recorded, with `detailed_merge_status` as a test set it (`mergeable` until then; `need_rebase` and
//! `conflict` refuse the merge with 406 as GitLab does); a project's merge train settings (`GET /projects/:id`,
//! off until a test enables them) and its train (`merge_trains/merge_requests/:iid`: a car read, 404 when there is
//! none; added, `sha` the head, each add recorded, auto-merge set; taken off by a test, as GitLab does silently,
//! auto-merge cleared) and a merge request's `head_pipeline` as a test set it; and, in the last block, a
//! project's branches (`repository/branches/:branch`) read from a real bare repository a test serves, whose heads
//! are also the merge requests' `sha` unless a test set one.

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
    polled: Arc<Mutex<Polled>>,
    jobs: Jobs,
    merge_requests: Arc<Mutex<merge_requests::Store>>,
    repos: Arc<Mutex<Repos>>,
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
            .merge(poll_routes())
            .route(
                "/api/v4/projects/{project}/jobs/{job}/trace",
                get(job_trace),
            )
            .merge(merge_requests::routes())
            .route(
                "/api/v4/projects/{project}/repository/branches/{branch}",
                get(branch),
            )
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        fake.url = format!("http://{}", listener.local_addr().unwrap());
        // The router's copy was cloned before the address was known: its next-page links read it here.
        fake.polled.lock().unwrap().base = fake.url.clone();
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

// ---- Merge requests (keyset pagination), webhooks and members: what gitlab_poller, `init --gitlab` and doctor's
// access check call. Each refuses a request shaped unlike GitLab's API wants it (400), or without a token (401).

use std::collections::BTreeMap;

use axum::extract::{Query, RawQuery};
use axum::response::{IntoResponse, Response};

/// The token's user, as `/api/v4/user` answers.
pub const BOT_ID: u64 = 99;

#[derive(Default)]
struct Polled {
    base: String,
    merge_requests: BTreeMap<String, Vec<Value>>,
    /// The page size the fake serves (GitLab's `per_page`, capped here to force pages in a test).
    page: Option<usize>,
    /// Each list call's `updated_after` and whether it carried a cursor.
    calls: Vec<(String, bool)>,
    hooks: Vec<Hook>,
    issues: BTreeMap<(String, u64), Value>,
    members: BTreeMap<String, Vec<(u64, String, u32)>>,
}

/// A project's webhook as the fake keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct Hook {
    pub id: u64,
    pub project: String,
    pub url: String,
    pub token: String,
    pub events: Vec<String>,
    pub ssl: bool,
}

const HOOK_EVENTS: [&str; 6] = [
    "push_events",
    "issues_events",
    "note_events",
    "merge_requests_events",
    "pipeline_events",
    "job_events",
];

impl FakeGitlab {
    /// A merge request of `project` as the API lists it (`iid`, from `pidevops/<task>` unless `source_branch`
    /// says otherwise), in `state`, changed at `updated_at`; replaces one with the same iid.
    pub fn put_merge_request(
        &self,
        project: &str,
        iid: u64,
        source_branch: &str,
        state: &str,
        updated_at: &str,
        source_project_id: u64,
    ) {
        let mr = json!({
            "id": 10_000 + iid, "iid": iid, "project_id": 42, "source_project_id": source_project_id,
            "target_project_id": 42, "source_branch": source_branch, "target_branch": "main",
            "state": state, "updated_at": updated_at, "sha": format!("{iid:040}"), "merge_commit_sha": null,
            "title": format!("{source_branch}: the work"),
            "web_url": format!("{}/{project}/-/merge_requests/{iid}", self.url),
            "author": { "id": BOT_ID, "username": "pidevops-bot" },
            "merged_by": if state == "merged" { json!({ "id": 5, "username": "alice" }) } else { Value::Null },
            "closed_by": if state == "closed" { json!({ "id": 5, "username": "alice" }) } else { Value::Null },
        });
        let mut polled = self.polled.lock().unwrap();
        let list = polled.merge_requests.entry(project.to_owned()).or_default();
        list.retain(|m| m["iid"] != iid);
        list.push(mr);
    }

    /// Issue `project#iid` as the API answers it: in `state` (`opened`, `closed`) with `labels`, changed at
    /// `updated_at`, written by alice (id 51).
    pub fn put_issue(
        &self,
        project: &str,
        iid: u64,
        state: &str,
        labels: &[&str],
        updated_at: &str,
    ) {
        let issue = json!({
            "id": 300 + iid, "iid": iid, "project_id": 42, "title": "Paginate /v1/items past the last page",
            "description": "The endpoint answers 500.", "state": state, "labels": labels,
            "updated_at": updated_at, "confidential": false,
            "author": { "id": 51, "username": "alice" },
            "closed_by": if state == "closed" { json!({ "id": 51, "username": "alice" }) } else { Value::Null },
        });
        self.polled
            .lock()
            .unwrap()
            .issues
            .insert((project.to_owned(), iid), issue);
    }

    /// Serves at most `size` merge requests a page.
    pub fn page_size(&self, size: usize) {
        self.polled.lock().unwrap().page = Some(size);
    }

    /// Each merge request list call: its `updated_after`, and whether it followed a cursor.
    pub fn list_calls(&self) -> Vec<(String, bool)> {
        self.polled.lock().unwrap().calls.clone()
    }

    pub fn hooks(&self, project: &str) -> Vec<Hook> {
        let polled = self.polled.lock().unwrap();
        polled
            .hooks
            .iter()
            .filter(|h| h.project == project)
            .cloned()
            .collect()
    }

    /// `username` (id `id`) a member of `project` at `level` (30 Developer, 20 Reporter); replaces their level.
    pub fn add_member(&self, project: &str, id: u64, username: &str, level: u32) {
        let mut polled = self.polled.lock().unwrap();
        let members = polled.members.entry(project.to_owned()).or_default();
        members.retain(|(known, _, _)| *known != id);
        members.push((id, username.to_owned(), level));
    }

    /// A hook someone else made on `project`, delivering to `url`.
    pub fn add_hook(&self, project: &str, url: &str) {
        let mut polled = self.polled.lock().unwrap();
        let id = polled.hooks.len() as u64 + 1;
        polled.hooks.push(Hook {
            id,
            project: project.to_owned(),
            url: url.to_owned(),
            token: String::new(),
            events: vec!["push_events".to_owned()],
            ssl: true,
        });
    }
}

fn poll_routes() -> Router<FakeGitlab> {
    use axum::routing::put;
    Router::new()
        .route(
            "/api/v4/projects/{project}/hooks",
            get(list_hooks).post(create_hook),
        )
        .route("/api/v4/projects/{project}/hooks/{id}", put(update_hook))
        .route("/api/v4/projects/{project}/issues/{iid}", get(issue))
        .route("/api/v4/projects/{project}/members/all", get(members))
        .route("/api/v4/projects/{project}/members/all/{user}", get(member))
}

fn refused(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "message": message }))).into_response()
}

fn authorized(headers: &HeaderMap) -> bool {
    headers.get("private-token").is_some_and(|t| !t.is_empty())
}

async fn merge_requests(
    State(fake): State<FakeGitlab>,
    Path(project): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return refused(StatusCode::UNAUTHORIZED, "401 Unauthorized");
    }
    for (key, wanted) in [
        ("order_by", "updated_at"),
        ("sort", "asc"),
        ("pagination", "keyset"),
    ] {
        if query.get(key).map(String::as_str) != Some(wanted) {
            return refused(StatusCode::BAD_REQUEST, &format!("{key} must be {wanted}"));
        }
    }
    let Some(after) = query
        .get("updated_after")
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
    else {
        return refused(
            StatusCode::BAD_REQUEST,
            "updated_after is missing or not a time",
        );
    };
    let Some(per_page) = query
        .get("per_page")
        .and_then(|p| p.parse::<usize>().ok())
        .filter(|p| (1..=100).contains(p))
    else {
        return refused(StatusCode::BAD_REQUEST, "per_page must be 1 to 100");
    };
    let cursor = match query.get("cursor").map(|c| c.parse::<usize>()) {
        None => 0,
        Some(Ok(c)) => c,
        Some(Err(_)) => return refused(StatusCode::BAD_REQUEST, "cursor is not one of ours"),
    };
    let mut polled = fake.polled.lock().unwrap();
    polled
        .calls
        .push((query["updated_after"].clone(), query.contains_key("cursor")));
    let size = polled.page.unwrap_or(per_page).min(per_page);
    let mut changed: Vec<Value> = polled
        .merge_requests
        .get(&project)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| {
            chrono::DateTime::parse_from_rfc3339(m["updated_at"].as_str().unwrap()).unwrap() > after
        })
        .collect();
    changed.sort_by_key(|m| m["updated_at"].as_str().unwrap().to_owned());
    let page: Vec<Value> = changed.iter().skip(cursor).take(size).cloned().collect();
    let mut response = Json(Value::from(page)).into_response();
    if cursor + size < changed.len() {
        let rest: Vec<&str> = raw
            .as_deref()
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.starts_with("cursor="))
            .collect();
        let link = format!(
            "<{}/api/v4/projects/{}/merge_requests?cursor={}&{}>; rel=\"next\"",
            polled.base,
            project.replace('/', "%2F"),
            cursor + size,
            rest.join("&")
        );
        response.headers_mut().insert("link", link.parse().unwrap());
    }
    response
}

fn hook_json(hook: &Hook) -> Value {
    let mut out = json!({ "id": hook.id, "url": hook.url, "enable_ssl_verification": hook.ssl });
    for event in HOOK_EVENTS {
        out[event] = json!(hook.events.iter().any(|e| e == event));
    }
    out
}

async fn list_hooks(
    State(fake): State<FakeGitlab>,
    Path(project): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return refused(StatusCode::UNAUTHORIZED, "401 Unauthorized");
    }
    let polled = fake.polled.lock().unwrap();
    let hooks: Vec<Value> = polled
        .hooks
        .iter()
        .filter(|h| h.project == project)
        .map(hook_json)
        .collect();
    Json(Value::from(hooks)).into_response()
}

/// A hook's fields from a create or update body (url, token, events, SSL verification); `None` without a URL and
/// a token, which the fake refuses.
fn hook_fields(body: &Value) -> Option<(String, String, Vec<String>, bool)> {
    let (Some(url), Some(token)) = (body["url"].as_str(), body["token"].as_str()) else {
        return None;
    };
    let events = HOOK_EVENTS
        .iter()
        .filter(|e| body[**e].as_bool() == Some(true))
        .map(|e| (*e).to_owned())
        .collect();
    Some((
        url.to_owned(),
        token.to_owned(),
        events,
        body["enable_ssl_verification"].as_bool().unwrap_or(true),
    ))
}

const HOOK_REFUSED: &str = "url and token are required here";

async fn create_hook(
    State(fake): State<FakeGitlab>,
    Path(project): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if !authorized(&headers) {
        return refused(StatusCode::UNAUTHORIZED, "401 Unauthorized");
    }
    let Some((url, token, events, ssl)) = hook_fields(&body) else {
        return refused(StatusCode::BAD_REQUEST, HOOK_REFUSED);
    };
    let mut polled = fake.polled.lock().unwrap();
    let hook = Hook {
        id: polled.hooks.len() as u64 + 1,
        project,
        url,
        token,
        events,
        ssl,
    };
    polled.hooks.push(hook.clone());
    (StatusCode::CREATED, Json(hook_json(&hook))).into_response()
}

async fn update_hook(
    State(fake): State<FakeGitlab>,
    Path((project, id)): Path<(String, u64)>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if !authorized(&headers) {
        return refused(StatusCode::UNAUTHORIZED, "401 Unauthorized");
    }
    let Some((url, token, events, ssl)) = hook_fields(&body) else {
        return refused(StatusCode::BAD_REQUEST, HOOK_REFUSED);
    };
    let mut polled = fake.polled.lock().unwrap();
    let Some(hook) = polled
        .hooks
        .iter_mut()
        .find(|h| h.id == id && h.project == project)
    else {
        return refused(StatusCode::NOT_FOUND, "404 Not Found");
    };
    *hook = Hook {
        id,
        project,
        url,
        token,
        events,
        ssl,
    };
    Json(hook_json(hook)).into_response()
}

fn member_json((id, username, level): &(u64, String, u32)) -> Value {
    json!({ "id": id, "username": username, "access_level": level, "state": "active" })
}

async fn members(
    State(fake): State<FakeGitlab>,
    Path(project): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return refused(StatusCode::UNAUTHORIZED, "401 Unauthorized");
    }
    let needle = query
        .get("query")
        .map(|q| q.to_ascii_lowercase())
        .unwrap_or_default();
    let polled = fake.polled.lock().unwrap();
    let found: Vec<Value> = polled
        .members
        .get(&project)
        .into_iter()
        .flatten()
        .filter(|(_, name, _)| name.to_ascii_lowercase().contains(&needle))
        .map(member_json)
        .collect();
    Json(Value::from(found)).into_response()
}

async fn member(
    State(fake): State<FakeGitlab>,
    Path((project, user)): Path<(String, u64)>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return refused(StatusCode::UNAUTHORIZED, "401 Unauthorized");
    }
    let polled = fake.polled.lock().unwrap();
    match polled
        .members
        .get(&project)
        .into_iter()
        .flatten()
        .find(|(id, _, _)| *id == user)
    {
        Some(found) => Json(member_json(found)).into_response(),
        None => refused(StatusCode::NOT_FOUND, "404 Not Found"),
    }
}

async fn issue(
    State(fake): State<FakeGitlab>,
    Path((project, iid)): Path<(String, u64)>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return refused(StatusCode::UNAUTHORIZED, "401 Unauthorized");
    }
    match fake.polled.lock().unwrap().issues.get(&(project, iid)) {
        Some(issue) => Json(issue.clone()).into_response(),
        None => refused(StatusCode::NOT_FOUND, "404 Issue Not Found"),
    }
}

// ---- Jobs' logs: what reactions read of a failed pipeline.

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
        /// GitLab's `detailed_merge_status` (`mergeable`, `need_rebase`, `conflict`, …).
        pub merge_status: String,
        /// GitLab's auto-merge (`merge_when_pipeline_succeeds`): set on joining a train, cleared on leaving it.
        pub auto_merge: bool,
        /// Its `head_pipeline` as a test set it (none until then).
        pub head_pipeline: Option<Value>,
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

    /// One call adding a merge request to a merge train, as it came.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct TrainAdd {
        pub project: String,
        pub iid: u64,
        pub sha: Option<String>,
    }

    #[derive(Default)]
    pub struct Store {
        pub open: Vec<MergeRequest>,
        pub merges: Vec<MergeCall>,
        /// Projects that run merge trains (`merge_trains_enabled` and `merge_pipelines_enabled`).
        pub trains: std::collections::BTreeSet<String>,
        /// The merge requests on a train now, in order: (project, iid).
        pub cars: Vec<(String, u64)>,
        /// Each add to a train, as it came (refused ones too).
        pub train_adds: Vec<TrainAdd>,
        /// The next add's answer is lost after the merge request went on the train (a 502, `Retry-After: 0`).
        pub lose_next_add: bool,
        /// What happens just before the next merge call is answered (a person's push to the base).
        pub before_merge: Option<Box<dyn FnOnce() + Send>>,
    }

    pub fn routes() -> Router<FakeGitlab> {
        Router::new()
            .route(
                "/api/v4/projects/{project}/merge_requests",
                get(list_either).post(create),
            )
            .route(
                "/api/v4/projects/{project}/merge_requests/{iid}",
                get(read).put(update),
            )
            .route(
                "/api/v4/projects/{project}/merge_requests/{iid}/merge",
                put(merge),
            )
            .route("/api/v4/projects/{project}", get(project))
            .route(
                "/api/v4/projects/{project}/merge_trains/merge_requests/{iid}",
                get(car).post(add_to_train),
            )
    }

    impl FakeGitlab {
        pub fn merge_requests(&self) -> Vec<MergeRequest> {
            self.merge_requests.lock().unwrap().open.clone()
        }

        pub fn merges(&self) -> Vec<MergeCall> {
            self.merge_requests.lock().unwrap().merges.clone()
        }

        /// `project` runs merge trains from now on (both of its settings on).
        pub fn enable_merge_trains(&self, project: &str) {
            self.merge_requests
                .lock()
                .unwrap()
                .trains
                .insert(project.to_owned());
        }

        /// Runs `then` when the next merge call comes, before it is answered (the loops run on their own too: a
        /// test cannot step in between the queue's choice and the merge otherwise).
        pub fn before_next_merge(&self, then: impl FnOnce() + Send + 'static) {
            self.merge_requests.lock().unwrap().before_merge = Some(Box::new(then));
        }

        /// The next add to a train puts the merge request on it, and its answer is lost (502): a repeat must
        /// find it there.
        pub fn lose_next_train_answer(&self) {
            self.merge_requests.lock().unwrap().lose_next_add = true;
        }

        /// Each call that added a merge request to a train.
        pub fn train_adds(&self) -> Vec<TrainAdd> {
            self.merge_requests.lock().unwrap().train_adds.clone()
        }

        /// The train merged `project!iid`: it leaves the train, merged.
        pub fn merged_by_train(&self, project: &str, iid: u64) {
            let mut state = self.merge_requests.lock().unwrap();
            state.cars.retain(|(p, i)| !(p == project && *i == iid));
            let mr = state
                .open
                .iter_mut()
                .find(|m| m.project == project && m.iid == iid)
                .expect("the merge request");
            mr.state = "merged".to_owned();
            mr.auto_merge = false;
        }

        /// GitLab took `project!iid` off its train unmerged (its train pipeline failed, a person removed it):
        /// its car is gone and its auto-merge cleared; no webhook says so.
        pub fn dropped_from_train(&self, project: &str, iid: u64) {
            let mut state = self.merge_requests.lock().unwrap();
            state.cars.retain(|(p, i)| !(p == project && *i == iid));
            let mr = state
                .open
                .iter_mut()
                .find(|m| m.project == project && m.iid == iid)
                .expect("the merge request");
            mr.auto_merge = false;
        }

        /// Whether `project!iid` has a car on a train now.
        pub fn on_train(&self, project: &str, iid: u64) -> bool {
            let state = self.merge_requests.lock().unwrap();
            state.cars.iter().any(|(p, i)| p == project && *i == iid)
        }

        /// The pipeline GitLab shows for `project!iid`'s head (`head_pipeline`).
        pub fn set_head_pipeline(&self, project: &str, iid: u64, pipeline: Value) {
            let mut state = self.merge_requests.lock().unwrap();
            let mr = state
                .open
                .iter_mut()
                .find(|m| m.project == project && m.iid == iid)
                .expect("the merge request");
            mr.head_pipeline = Some(pipeline);
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
                merge_status: "mergeable".to_owned(),
                auto_merge: false,
                head_pipeline: None,
            });
            iid
        }

        /// What GitLab says of `project!iid`'s mergeability (`detailed_merge_status`).
        pub fn set_merge_status(&self, project: &str, iid: u64, status: &str) {
            let mut state = self.merge_requests.lock().unwrap();
            let mr = state
                .open
                .iter_mut()
                .find(|m| m.project == project && m.iid == iid)
                .expect("the merge request");
            mr.merge_status = status.to_owned();
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

    /// `mr`'s head: the one a test set, else its branch's in the served repository (a fork's branch is not
    /// there).
    fn head(fake: &FakeGitlab, mr: &MergeRequest) -> Option<String> {
        mr.sha.clone().or_else(|| {
            (mr.source_project_id == PROJECT_ID)
                .then(|| fake.head_of(&mr.project, &mr.source_branch))
                .flatten()
        })
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
            "sha": head(fake, mr),
            "detailed_merge_status": mr.merge_status,
            "merge_when_pipeline_succeeds": mr.auto_merge,
            "head_pipeline": mr.head_pipeline,
            // `start_sha`: the target branch's head the diff was made against (read now, as GitLab recomputes it).
            "diff_refs": {
                "base_sha": Value::Null,
                "head_sha": head(fake, mr),
                "start_sha": fake.head_of(&mr.project, &mr.target_branch),
            },
            "merge_commit_sha": if mr.state == "merged" { json!("feedfacefeedfacefeedfacefeedfacefeedface") } else { Value::Null },
            "web_url": format!("{}/{}/-/merge_requests/{}", fake.url, mr.project, mr.iid),
        })
    }

    #[derive(serde::Deserialize)]
    struct ListQuery {
        source_branch: Option<String>,
        state: Option<String>,
    }

    /// GitLab's one list of a project's merge requests, as each caller asks it: the poller's, changed since a
    /// time in keyset pages (`updated_after`), is the block above's; by `source_branch` and `state` is this one's.
    async fn list_either(
        fake: State<FakeGitlab>,
        path: Path<String>,
        uri: axum::http::Uri,
        headers: HeaderMap,
    ) -> axum::response::Response {
        use axum::response::IntoResponse;
        let raw = uri.query().map(str::to_owned);
        if raw.as_deref().is_some_and(|q| q.contains("updated_after")) {
            return match Query::try_from_uri(&uri) {
                Ok(query) => {
                    super::merge_requests(fake, path, query, axum::extract::RawQuery(raw), headers)
                        .await
                }
                Err(e) => (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
            };
        }
        match Query::try_from_uri(&uri) {
            Ok(query) => list(fake, path, query, headers).await.into_response(),
            Err(e) => (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
        }
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
            merge_status: "mergeable".to_owned(),
            auto_merge: false,
            head_pipeline: None,
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
        let before = fake.merge_requests.lock().unwrap().before_merge.take();
        if let Some(then) = before {
            then();
        }
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
        // GitLab merges nothing that needs a rebase or conflicts with its base.
        if matches!(mr.merge_status.as_str(), "need_rebase" | "conflict") {
            return (
                StatusCode::NOT_ACCEPTABLE,
                Json(json!({ "message": "Branch cannot be merged" })),
            );
        }
        if let Some(sha) = body["sha"].as_str() {
            if head(&fake, mr).as_deref() != Some(sha) {
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

    /// `GET /projects/:id`: the project's merge train settings, as GitLab Premium answers them.
    async fn project(
        State(fake): State<FakeGitlab>,
        Path(project): Path<String>,
        headers: HeaderMap,
    ) -> (StatusCode, Json<Value>) {
        if token(&headers).is_none() {
            return unauthorized();
        }
        let trains = fake
            .merge_requests
            .lock()
            .unwrap()
            .trains
            .contains(&project);
        (
            StatusCode::OK,
            Json(json!({
                "id": PROJECT_ID,
                "path_with_namespace": project,
                "merge_pipelines_enabled": trains,
                "merge_trains_enabled": trains,
            })),
        )
    }

    /// A merge request's car on the train, as GitLab answers one.
    fn car_json(fake: &FakeGitlab, mr: &MergeRequest) -> Value {
        json!({
            "id": 5000 + mr.iid,
            "merge_request": answer(fake, mr),
            "target_branch": mr.target_branch,
            "status": "fresh",
            "pipeline": null,
        })
    }

    /// `GET /projects/:id/merge_trains/merge_requests/:iid`: its car; 404 when it is on no train.
    async fn car(
        State(fake): State<FakeGitlab>,
        Path((project, iid)): Path<(String, u64)>,
        headers: HeaderMap,
    ) -> (StatusCode, Json<Value>) {
        if token(&headers).is_none() {
            return unauthorized();
        }
        let state = fake.merge_requests.lock().unwrap();
        let on = state.cars.iter().any(|(p, i)| p == &project && *i == iid);
        match state
            .open
            .iter()
            .find(|m| on && m.project == project && m.iid == iid)
        {
            Some(mr) => (StatusCode::OK, Json(car_json(&fake, mr))),
            None => (
                StatusCode::NOT_FOUND,
                Json(json!({ "message": "404 Merge Train Not Found" })),
            ),
        }
    }

    /// `POST /projects/:id/merge_trains/merge_requests/:iid`: on the train (`sha` must be the head); 403 where
    /// the project runs no trains, 400 for one already on it. Answers the train, its cars in order.
    async fn add_to_train(
        State(fake): State<FakeGitlab>,
        Path((project, iid)): Path<(String, u64)>,
        headers: HeaderMap,
        Json(body): Json<Value>,
    ) -> axum::response::Response {
        use axum::response::IntoResponse;
        if token(&headers).is_none() {
            return unauthorized().into_response();
        }
        let mut state = fake.merge_requests.lock().unwrap();
        state.train_adds.push(TrainAdd {
            project: project.clone(),
            iid,
            sha: body["sha"].as_str().map(str::to_owned),
        });
        if !state.trains.contains(&project) {
            return (
                StatusCode::FORBIDDEN,
                Json(json!({ "message": "403 Forbidden" })),
            )
                .into_response();
        }
        if state.cars.iter().any(|(p, i)| p == &project && *i == iid) {
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({ "message": "The merge request is already on the merge train" })),
            )
                .into_response();
        }
        let Some(mr) = state
            .open
            .iter()
            .find(|m| m.project == project && m.iid == iid && m.state == "opened")
        else {
            return (
                StatusCode::NOT_FOUND,
                Json(json!({ "message": "404 Not found" })),
            )
                .into_response();
        };
        if body["sha"]
            .as_str()
            .is_some_and(|sha| head(&fake, mr).as_deref() != Some(sha))
        {
            return (
                StatusCode::CONFLICT,
                Json(json!({ "message": "SHA does not match HEAD of source branch" })),
            )
                .into_response();
        }
        state.cars.push((project.clone(), iid));
        if let Some(mr) = state
            .open
            .iter_mut()
            .find(|m| m.project == project && m.iid == iid)
        {
            mr.auto_merge = true;
        }
        if std::mem::take(&mut state.lose_next_add) {
            return (
                StatusCode::BAD_GATEWAY,
                [("retry-after", "0")],
                "502 Bad Gateway",
            )
                .into_response();
        }
        let train: Vec<Value> = state
            .cars
            .iter()
            .filter(|(p, _)| p == &project)
            .filter_map(|(p, i)| state.open.iter().find(|m| &m.project == p && m.iid == *i))
            .map(|m| car_json(&fake, m))
            .collect();
        (StatusCode::CREATED, Json(Value::Array(train))).into_response()
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Branches, read from a real bare repository.
// ---------------------------------------------------------------------------------------------------------------

/// The bare repositories a test serves, by project, and branch heads it pinned (GitLab's answer lagging the
/// repository: the head it last knew).
#[derive(Default)]
struct Repos {
    served: BTreeMap<String, std::path::PathBuf>,
    pinned: BTreeMap<(String, String), String>,
    /// Each branch read: the project as the path decoded it, the branch.
    reads: Vec<(String, String)>,
}

impl FakeGitlab {
    /// Serves `project`'s branches from the bare repository `bare` (what pidevops's git pushes to).
    pub fn serve_repo(&self, project: &str, bare: &std::path::Path) {
        self.repos
            .lock()
            .unwrap()
            .served
            .insert(project.to_owned(), bare.to_owned());
    }

    /// Answers `sha` for `project`'s `branch`, whatever the repository holds.
    pub fn pin_branch(&self, project: &str, branch: &str, sha: &str) {
        self.repos
            .lock()
            .unwrap()
            .pinned
            .insert((project.to_owned(), branch.to_owned()), sha.to_owned());
    }

    /// Each branch read, in order.
    pub fn branch_reads(&self) -> Vec<(String, String)> {
        self.repos.lock().unwrap().reads.clone()
    }

    /// `project`'s `branch` head: pinned, else the served repository's.
    fn head_of(&self, project: &str, branch: &str) -> Option<String> {
        let repos = self.repos.lock().unwrap();
        if let Some(sha) = repos.pinned.get(&(project.to_owned(), branch.to_owned())) {
            return Some(sha.clone());
        }
        let bare = repos.served.get(project)?;
        let out = std::process::Command::new("git")
            .args([
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("refs/heads/{branch}"),
            ])
            .current_dir(bare)
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }
}

/// `GET …/repository/branches/:branch`: the branch with its head commit; 401 without a token, 404 for a branch
/// (or project) the fake does not know.
async fn branch(
    State(fake): State<FakeGitlab>,
    Path((project, branch)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return refused(StatusCode::UNAUTHORIZED, "401 Unauthorized");
    }
    fake.repos
        .lock()
        .unwrap()
        .reads
        .push((project.clone(), branch.clone()));
    match fake.head_of(&project, &branch) {
        Some(sha) => Json(json!({
            "name": branch,
            "merged": false,
            "protected": true,
            "default": branch == "main",
            "commit": {
                "id": sha,
                "short_id": &sha[..8],
                "title": "the branch's head",
            },
        }))
        .into_response(),
        None => refused(StatusCode::NOT_FOUND, "404 Branch Not Found"),
    }
}
