//! A fake GitHub REST API on loopback, the only stand-in the effects suites use: it records every call, keeps
//! the pull requests it opened and the issues a test set, and answers with scripted failures (500, 429 with
//! `Retry-After`) when told to.
//! Its pull request bodies are GitHub's own (the `pull_request.opened` fixture), so the real client parses them.
//! Merging (the repository's merge methods, the merge itself, a merge held until a test lets it answer) is in
//! `fake/merge.rs`; repository webhooks in `fake/hooks.rs`; branches (git refs: read, deleted) in `fake/refs.rs`.

pub mod hooks;
pub mod merge;
pub mod queue;
pub mod refs;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: Value,
    pub authorization: Option<String>,
}

/// What the next matching call answers instead of doing its work.
#[derive(Clone, Debug)]
pub enum Failure {
    Status(u16),
    RateLimited {
        retry_after_s: u64,
    },
    /// Does the work, then answers only after this long: a caller that gives up (or crashes) meanwhile never
    /// learns that it happened.
    AnswerLate(std::time::Duration),
}

#[derive(Default)]
pub(super) struct Inner {
    calls: Vec<Call>,
    /// (repo, number, head, base, title, body, open)
    pulls: Vec<(String, u64, String, String, String, String, bool)>,
    /// (repo, issue number, body)
    comments: Vec<(String, u64, String)>,
    /// Failures for the next calls whose method is this one, in order.
    failures: VecDeque<(Method, Failure)>,
    /// Pull requests merged (closed with `merged`) by whom: (repo, number) → login.
    merged: std::collections::BTreeMap<(String, u64), String>,
    /// A pull request's head commit, when a test set one.
    heads: std::collections::BTreeMap<(String, u64), String>,
    /// Check suites: (repo, sha, suite).
    suites: Vec<(String, String, Value)>,
    /// Repository webhooks, ids from 1 in creation order.
    hooks: Vec<hooks::Hook>,
    /// Repository settings a test changed (`allow_squash_merge`, …), by repository.
    repo_settings: std::collections::BTreeMap<String, serde_json::Map<String, Value>>,
    /// Merge commits of the pull requests merged through the API: (repo, number) → sha.
    merge_commits: std::collections::BTreeMap<(String, u64), String>,
    /// The next merge through the API holds its answer until the test lets it go.
    hold: Option<merge::Hold>,
    /// Runs when the next merge call arrives, before the fake decides on it (the world moving under it).
    before_merge: Option<Box<dyn FnOnce() + Send>>,
    queues: queue::Queues,
    /// Issues as `GET /repos/{o}/{r}/issues/{n}` answers them: (repo, number) → issue.
    issues: std::collections::BTreeMap<(String, u64), Value>,
    /// Reactions on issue comments: (repo, comment id, content), one per content as GitHub keeps them.
    reactions: Vec<(String, u64, String)>,
    /// Branches a test set: (repo, branch) → head commit.
    branches: std::collections::BTreeMap<(String, String), String>,
    /// A pull request's `mergeable_state` a test set (else `clean`): (repo, number) → state.
    mergeable: std::collections::BTreeMap<(String, u64), String>,
}

#[derive(Clone, Default)]
pub struct FakeGithub {
    inner: Arc<Mutex<Inner>>,
    pub url: String,
}

impl FakeGithub {
    pub async fn start() -> Self {
        let mut fake = FakeGithub::default();
        let router = Router::new()
            .route(
                "/repos/{owner}/{repo}/pulls",
                get(list_pulls).post(create_pull),
            )
            .route(
                "/repos/{owner}/{repo}/issues/{number}/comments",
                get(list_comments).post(create_comment),
            )
            .route(
                "/repos/{owner}/{repo}/issues/comments/{id}/reactions",
                axum::routing::post(create_reaction),
            )
            .route(
                "/repos/{owner}/{repo}/hooks",
                get(hooks::list_hooks).post(hooks::create_hook),
            )
            .route(
                "/repos/{owner}/{repo}/hooks/{id}",
                axum::routing::patch(hooks::update_hook),
            )
            .route(
                "/repos/{owner}/{repo}/pulls/{number}",
                get(get_pull).patch(update_pull),
            )
            .route("/repos/{owner}/{repo}/issues/{number}", get(get_issue))
            .route(
                "/repos/{owner}/{repo}/pulls/{number}/merge",
                axum::routing::put(merge::merge_pull),
            )
            .route("/repos/{owner}/{repo}", get(merge::get_repo))
            .route(
                "/repos/{owner}/{repo}/commits/{sha}/check-suites",
                get(check_suites),
            )
            .route(
                "/repos/{owner}/{repo}/git/ref/{*reference}",
                get(refs::get_ref),
            )
            .route(
                "/repos/{owner}/{repo}/git/refs/{*reference}",
                axum::routing::delete(refs::delete_ref),
            )
            .route("/user", get(current_user));
        let router = queue::routes(router).with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        fake.url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        fake
    }

    /// The issue `repo#number` as GitHub holds it now: `state` (`open`, `closed`), its labels and its version.
    pub fn set_issue(
        &self,
        repo: &str,
        number: u64,
        state: &str,
        labels: &[&str],
        updated_at: &str,
    ) {
        // GitHub's issue (the `issues.labeled` fixture's, every field octocrab's `Issue` reads), as set.
        let fixture = fixture("issues/labeled.payload.json");
        let mut issue = fixture["issue"].clone();
        issue["number"] = json!(number);
        issue["title"] = json!("Fix the login redirect");
        issue["state"] = json!(state);
        issue["updated_at"] = json!(updated_at);
        issue["author_association"] = json!("MEMBER");
        issue["user"] = user_json(&fixture["issue"]["user"], "ada");
        issue["closed_by"] = if state == "closed" {
            user_json(&fixture["issue"]["user"], "ada")
        } else {
            Value::Null
        };
        issue["url"] = json!(format!(
            "https://api.github.com/repos/{repo}/issues/{number}"
        ));
        issue["html_url"] = json!(format!("https://github.com/{repo}/issues/{number}"));
        issue["labels"] = super::gh_labels(labels);
        self.inner
            .lock()
            .unwrap()
            .issues
            .insert((repo.to_owned(), number), issue);
    }

    /// The next call with `method` fails so.
    pub fn fail_next(&self, method: Method, failure: Failure) {
        self.inner
            .lock()
            .unwrap()
            .failures
            .push_back((method, failure));
    }

    /// The pull request is merged by `by` on GitHub (its webhook is for the test to send, or not).
    pub fn merge(&self, repo: &str, number: u64, by: &str) {
        let mut inner = self.inner.lock().unwrap();
        for pull in inner.pulls.iter_mut() {
            if pull.0 == repo && pull.1 == number {
                pull.6 = false;
            }
        }
        inner
            .merged
            .insert((repo.to_owned(), number), by.to_owned());
    }

    /// The pull request's head commit is `sha`.
    pub fn set_head(&self, repo: &str, number: u64, sha: &str) {
        self.inner
            .lock()
            .unwrap()
            .heads
            .insert((repo.to_owned(), number), sha.to_owned());
    }

    /// A completed check suite on `sha` of `branch` with `conclusion`.
    pub fn add_check_suite(&self, repo: &str, sha: &str, branch: &str, id: u64, conclusion: &str) {
        // As `GET …/commits/{sha}/check-suites` has one: the webhook fixture's suite, with its repository.
        let fixture = fixture("check_suite/completed.payload.json");
        let mut suite = fixture["check_suite"].clone();
        suite["id"] = json!(id);
        suite["head_branch"] = json!(branch);
        suite["head_sha"] = json!(sha);
        suite["head_commit"]["id"] = json!(sha);
        suite["status"] = json!("completed");
        suite["conclusion"] = json!(conclusion);
        suite["app"]["name"] = json!("GitHub Actions");
        suite["app"]["slug"] = json!("github-actions");
        suite["pull_requests"] = json!([]);
        let mut repository = fixture["repository"].clone();
        repository["full_name"] = json!(repo);
        suite["repository"] = repository;
        self.inner
            .lock()
            .unwrap()
            .suites
            .push((repo.to_owned(), sha.to_owned(), suite));
    }

    /// The pull requests closed through the API (`PATCH … state=closed`), in order: (repo, number).
    pub fn pulls_closed(&self) -> Vec<(String, u64)> {
        self.calls()
            .iter()
            .filter(|c| {
                c.method == "PATCH" && c.path.contains("/pulls/") && c.body["state"] == "closed"
            })
            .filter_map(|c| {
                let mut parts = c.path.trim_start_matches("/repos/").splitn(4, '/');
                let (owner, repo, _, number) =
                    (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
                Some((format!("{owner}/{repo}"), number.parse().ok()?))
            })
            .collect()
    }

    /// The comments posted: (repo, issue number, body).
    pub fn comments(&self) -> Vec<(String, u64, String)> {
        self.inner.lock().unwrap().comments.clone()
    }

    /// The reactions made on issue comments: (repo, comment id, content).
    pub fn reactions(&self) -> Vec<(String, u64, String)> {
        self.inner.lock().unwrap().reactions.clone()
    }

    pub fn calls(&self) -> Vec<Call> {
        self.inner.lock().unwrap().calls.clone()
    }

    /// The calls that opened a pull request (answered 201).
    pub fn pulls_opened(&self) -> Vec<(String, u64, String, String, String, String)> {
        self.inner
            .lock()
            .unwrap()
            .pulls
            .iter()
            .map(|(r, n, h, b, t, body, _)| {
                (r.clone(), *n, h.clone(), b.clone(), t.clone(), body.clone())
            })
            .collect()
    }

    fn record(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: Value,
    ) -> Option<Failure> {
        let mut inner = self.inner.lock().unwrap();
        inner.calls.push(Call {
            method: method.to_string(),
            path: uri.path().to_owned(),
            query: uri.query().unwrap_or_default().to_owned(),
            body,
            authorization: headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        });
        let next = inner.failures.iter().position(|(m, _)| m == method)?;
        inner.failures.remove(next).map(|(_, failure)| failure)
    }
}

fn failure_response(failure: Failure) -> Response {
    match failure {
        Failure::Status(status) => (
            StatusCode::from_u16(status).unwrap(),
            Json(json!({ "message": format!("fake failure {status}"), "documentation_url": "https://docs.github.com" })),
        )
            .into_response(),
        Failure::AnswerLate(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        Failure::RateLimited { retry_after_s } => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", retry_after_s.to_string())],
            Json(json!({ "message": "API rate limit exceeded", "documentation_url": "https://docs.github.com" })),
        )
            .into_response(),
    }
}

pub use super::gh_fixture as fixture;

/// A GitHub user as the API sends one (every field octocrab's `Author` reads): `like`'s, named `login`.
pub fn user_json(like: &Value, login: &str) -> Value {
    let mut user = like.clone();
    user["login"] = json!(login);
    user["html_url"] = json!(format!("https://github.com/{login}"));
    user
}

fn pull_json(repo: &str, number: u64, head: &str, base: &str, title: &str, body: &str) -> Value {
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/github/pull_request/opened.payload.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let mut pr = fixture["pull_request"].clone();
    pr["number"] = json!(number);
    pr["id"] = json!(1000 + number);
    pr["title"] = json!(title);
    pr["body"] = json!(body);
    pr["url"] = json!(format!(
        "https://api.github.com/repos/{repo}/pulls/{number}"
    ));
    pr["html_url"] = json!(format!("https://github.com/{repo}/pull/{number}"));
    pr["head"]["ref"] = json!(head);
    pr["base"]["ref"] = json!(base);
    // pidevops pushes its branch to the repository itself: head and base are the same repository.
    pr["head"]["repo"]["full_name"] = json!(repo);
    pr["base"]["repo"]["full_name"] = json!(repo);
    pr
}

async fn list_pulls(
    State(fake): State<FakeGithub>,
    Path((owner, repo)): Path<(String, String)>,
    Query(query): Query<std::collections::HashMap<String, String>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(failure) = fake.record(&method, &uri, &headers, Value::Null) {
        return failure_response(failure);
    }
    let full = format!("{owner}/{repo}");
    let head = query.get("head").cloned().unwrap_or_default();
    let inner = fake.inner.lock().unwrap();
    let found: Vec<Value> = inner
        .pulls
        .iter()
        .filter(|(r, _, h, _, _, _, open)| *r == full && *open && format!("{owner}:{h}") == head)
        .map(|(r, n, h, b, t, body, _)| pull_json(r, *n, h, b, t, body))
        .collect();
    Json(Value::Array(found)).into_response()
}

async fn create_pull(
    State(fake): State<FakeGithub>,
    Path((owner, repo)): Path<(String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let late = match fake.record(&method, &uri, &headers, body.clone()) {
        Some(Failure::AnswerLate(delay)) => Some(delay),
        Some(failure) => return failure_response(failure),
        None => None,
    };
    let full = format!("{owner}/{repo}");
    let field = |name: &str| body[name].as_str().unwrap_or_default().to_owned();
    let (head, base, title, text) = (field("head"), field("base"), field("title"), field("body"));
    let opened = {
        let mut inner = fake.inner.lock().unwrap();
        if inner
            .pulls
            .iter()
            .any(|(r, _, h, _, _, _, open)| *r == full && *h == head && *open)
        {
            None
        } else {
            let number = inner.pulls.len() as u64 + 1;
            inner.pulls.push((
                full.clone(),
                number,
                head.clone(),
                base.clone(),
                title.clone(),
                text.clone(),
                true,
            ));
            Some(number)
        }
    };
    let Some(number) = opened else {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({ "message": "Validation Failed", "errors": [{ "message": format!("A pull request already exists for {owner}:{head}.") }] })),
        )
            .into_response();
    };
    if let Some(delay) = late {
        tokio::time::sleep(delay).await;
    }
    (
        StatusCode::CREATED,
        Json(pull_json(&full, number, &head, &base, &title, &text)),
    )
        .into_response()
}

fn comment_json(repo: &str, issue: u64, id: usize, body: &str) -> Value {
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/github/issue_comment/created.payload.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let mut comment = fixture["comment"].clone();
    comment["id"] = json!(5000 + id);
    comment["body"] = json!(body);
    comment["html_url"] = json!(format!(
        "https://github.com/{repo}/issues/{issue}#issuecomment-{}",
        5000 + id
    ));
    comment
}

async fn list_comments(
    State(fake): State<FakeGithub>,
    Path((owner, repo, number)): Path<(String, String, u64)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(failure) = fake.record(&method, &uri, &headers, Value::Null) {
        return failure_response(failure);
    }
    let full = format!("{owner}/{repo}");
    let found: Vec<Value> = {
        let inner = fake.inner.lock().unwrap();
        inner
            .comments
            .iter()
            .enumerate()
            .filter(|(_, (r, n, _))| *r == full && *n == number)
            .map(|(i, (r, n, body))| comment_json(r, *n, i, body))
            .collect()
    };
    Json(Value::Array(found)).into_response()
}

async fn create_comment(
    State(fake): State<FakeGithub>,
    Path((owner, repo, number)): Path<(String, String, u64)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if let Some(failure) = fake.record(&method, &uri, &headers, body.clone()) {
        return failure_response(failure);
    }
    let full = format!("{owner}/{repo}");
    let text = body["body"].as_str().unwrap_or_default().to_owned();
    let id = {
        let mut inner = fake.inner.lock().unwrap();
        inner.comments.push((full.clone(), number, text.clone()));
        inner.comments.len() - 1
    };
    (
        StatusCode::CREATED,
        Json(comment_json(&full, number, id, &text)),
    )
        .into_response()
}

/// `POST /repos/{o}/{r}/issues/comments/{id}/reactions`: 201 with the reaction, or 200 with the one there when
/// this account already reacted so (GitHub's answer to a repeat).
async fn create_reaction(
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
    let content = body["content"].as_str().unwrap_or_default().to_owned();
    const CONTENTS: [&str; 8] = [
        "+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes",
    ];
    if !CONTENTS.contains(&content.as_str()) {
        return validation_failed("content is not a reaction");
    }
    let full = format!("{owner}/{repo}");
    let user = user_json(
        &fixture("issue_comment/created.payload.json")["comment"]["user"],
        merge::MERGER,
    );
    let (status, n) = {
        let mut inner = fake.inner.lock().unwrap();
        let reaction = (full, id, content.clone());
        match inner.reactions.iter().position(|r| *r == reaction) {
            Some(at) => (StatusCode::OK, at),
            None => {
                inner.reactions.push(reaction);
                (StatusCode::CREATED, inner.reactions.len() - 1)
            }
        }
    };
    (
        status,
        Json(json!({
            "id": 9000 + n,
            "node_id": "REA_fake",
            "user": user,
            "content": content,
            "created_at": "2026-12-02T12:00:00Z",
        })),
    )
        .into_response()
}

/// `GET /user`: the token's account (the issue fixture's author), or the scripted failure (401 for a bad token).
async fn current_user(
    State(fake): State<FakeGithub>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(failure) = fake.record(&method, &uri, &headers, Value::Null) {
        return failure_response(failure);
    }
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/github/issue_comment/created.payload.json"
        ))
        .unwrap(),
    )
    .unwrap();
    Json(fixture["comment"]["user"].clone()).into_response()
}

/// `GET /repos/{o}/{r}/issues/{n}`: the issue a test set, else 404.
async fn get_issue(
    State(fake): State<FakeGithub>,
    Path((owner, repo, number)): Path<(String, String, u64)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(failure) = fake.record(&method, &uri, &headers, Value::Null) {
        return failure_response(failure);
    }
    let inner = fake.inner.lock().unwrap();
    match inner.issues.get(&(format!("{owner}/{repo}"), number)) {
        Some(issue) => Json(issue.clone()).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({ "message": "Not Found" })),
        )
            .into_response(),
    }
}

/// `GET /repos/{o}/{r}/pulls/{n}`: the pull request as it stands (open, closed, merged), with its head commit.
async fn get_pull(
    State(fake): State<FakeGithub>,
    Path((owner, repo, number)): Path<(String, String, u64)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(failure) = fake.record(&method, &uri, &headers, Value::Null) {
        return failure_response(failure);
    }
    let full = format!("{owner}/{repo}");
    let inner = fake.inner.lock().unwrap();
    let Some((r, n, h, b, t, body, open)) = inner
        .pulls
        .iter()
        .find(|p| p.0 == full && p.1 == number)
        .cloned()
    else {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({ "message": "Not Found" })),
        )
            .into_response();
    };
    let mut pr = pull_json(&r, n, &h, &b, &t, &body);
    pr["state"] = json!(if open { "open" } else { "closed" });
    let merged_by = inner.merged.get(&(full.clone(), number));
    pr["merged"] = json!(merged_by.is_some());
    pr["merged_by"] = merged_by.map_or(Value::Null, |by| user_json(&pr["user"], by));
    pr["merge_commit_sha"] = inner
        .merge_commits
        .get(&(full.clone(), number))
        .map_or(Value::Null, |sha| json!(sha));
    merge::mergeable(&inner.mergeable, &full, number, open, &mut pr);
    if let Some(sha) = inner.heads.get(&(full, number)) {
        pr["head"]["sha"] = json!(sha);
    }
    Json(pr).into_response()
}

/// `PATCH /repos/{o}/{r}/pulls/{n}`: `state` (`closed`, `open`) changes it; the pull request as it is after.
async fn update_pull(
    State(fake): State<FakeGithub>,
    Path((owner, repo, number)): Path<(String, String, u64)>,
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
    let Some(pull) = inner
        .pulls
        .iter_mut()
        .find(|p| p.0 == full && p.1 == number)
    else {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({ "message": "Not Found" })),
        )
            .into_response();
    };
    match body["state"].as_str() {
        Some("closed") => pull.6 = false,
        Some("open") => pull.6 = true,
        _ => {}
    }
    let (r, n, h, b, t, text, open) = pull.clone();
    let mut pr = pull_json(&r, n, &h, &b, &t, &text);
    pr["state"] = json!(if open { "open" } else { "closed" });
    Json(pr).into_response()
}

/// `GET /repos/{o}/{r}/commits/{sha}/check-suites`.
async fn check_suites(
    State(fake): State<FakeGithub>,
    Path((owner, repo, sha)): Path<(String, String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(failure) = fake.record(&method, &uri, &headers, Value::Null) {
        return failure_response(failure);
    }
    let full = format!("{owner}/{repo}");
    let inner = fake.inner.lock().unwrap();
    let suites: Vec<Value> = inner
        .suites
        .iter()
        .filter(|(r, s, _)| *r == full && *s == sha)
        .map(|(_, _, suite)| suite.clone())
        .collect();
    Json(json!({ "total_count": suites.len(), "check_suites": suites })).into_response()
}

fn validation_failed(message: &str) -> Response {
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        Json(json!({ "message": "Validation Failed", "errors": [{ "resource": "Hook", "code": "custom", "message": message }] })),
    )
        .into_response()
}
