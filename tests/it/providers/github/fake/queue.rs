//! GitHub's merge queue on the fake, shaped like GitHub's APIs: `GET /repos/{o}/{r}/rules/branches/{branch}` lists
//! the rules on a branch (a `merge_queue` one where a test required the queue, [`FakeGithub::require_merge_queue`]),
//! and `POST /graphql` answers the two operations pidevops sends: reading a pull request (`id`, `isInMergeQueue`,
//! `headRefOid`) and `enqueuePullRequest`, refused as GitHub does (in `errors`) when `expectedHeadOid` is not the
//! head. A base that requires the queue refuses the REST merge (405), as GitHub does.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::{failure_response, pull_json, FakeGithub, Inner};

/// What the fake keeps of merge queues.
#[derive(Default)]
pub(super) struct Queues {
    /// Branches whose rules require the merge queue: (repo, branch).
    required: Vec<(String, String)>,
    /// Pull requests enqueued through `enqueuePullRequest`, in order: (repo, number, expected head).
    enqueued: Vec<(String, u64, String)>,
}

pub(super) fn routes(router: Router<FakeGithub>) -> Router<FakeGithub> {
    router
        .route("/repos/{owner}/{repo}/rules/branches/{*branch}", get(rules))
        .route("/graphql", post(graphql))
}

impl FakeGithub {
    /// `branch` of `repo` merges only through GitHub's merge queue (a ruleset's `merge_queue` rule).
    pub fn require_merge_queue(&self, repo: &str, branch: &str) {
        let mut inner = self.inner.lock().unwrap();
        inner
            .queues
            .required
            .push((repo.to_owned(), branch.to_owned()));
    }

    /// `branch` of `repo` no longer requires the merge queue (its rule removed): pull requests merge directly.
    pub fn stop_requiring_merge_queue(&self, repo: &str, branch: &str) {
        let mut inner = self.inner.lock().unwrap();
        inner
            .queues
            .required
            .retain(|(r, b)| !(r == repo && b == branch));
    }

    /// The pull requests put into a merge queue, in order: (repo, number, the head they were expected at).
    pub fn enqueued(&self) -> Vec<(String, u64, String)> {
        self.inner.lock().unwrap().queues.enqueued.clone()
    }
}

/// Whether pull request `number` of `repo` targets a base that requires the queue.
pub(super) fn queue_required(inner: &Inner, repo: &str, number: u64) -> bool {
    inner
        .pulls
        .iter()
        .find(|p| p.0 == repo && p.1 == number)
        .is_some_and(|pull| {
            inner
                .queues
                .required
                .iter()
                .any(|(r, b)| r == repo && *b == pull.3)
        })
}

/// The head commit of pull request `number` of `repo`, as the fake answers it.
fn head(inner: &Inner, repo: &str, number: u64) -> Option<String> {
    let pull = inner.pulls.iter().find(|p| p.0 == repo && p.1 == number)?;
    inner
        .heads
        .get(&(repo.to_owned(), number))
        .cloned()
        .or_else(|| {
            pull_json(&pull.0, pull.1, &pull.2, &pull.3, &pull.4, &pull.5)["head"]["sha"]
                .as_str()
                .map(str::to_owned)
        })
}

async fn rules(
    State(fake): State<FakeGithub>,
    Path((owner, repo, branch)): Path<(String, String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(failure) = fake.record(&method, &uri, &headers, Value::Null) {
        return failure_response(failure);
    }
    let full = format!("{owner}/{repo}");
    let inner = fake.inner.lock().unwrap();
    let queued = inner
        .queues
        .required
        .iter()
        .any(|(r, b)| *r == full && *b == branch);
    let mut rules =
        vec![json!({ "type": "deletion", "ruleset_source_type": "Repository", "ruleset_id": 1 })];
    if queued {
        rules.push(json!({
            "type": "merge_queue",
            "ruleset_source_type": "Repository",
            "ruleset_source": full,
            "ruleset_id": 2,
            "parameters": { "merge_method": "SQUASH", "grouping_strategy": "ALLGREEN", "max_entries_to_build": 5 },
        }));
    }
    Json(Value::Array(rules)).into_response()
}

fn graphql_errors(message: &str) -> Response {
    Json(json!({ "data": null, "errors": [{ "type": "UNPROCESSABLE", "message": message }] }))
        .into_response()
}

async fn graphql(
    State(fake): State<FakeGithub>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if let Some(failure) = fake.record(&method, &uri, &headers, body.clone()) {
        return failure_response(failure);
    }
    let query = body["query"].as_str().unwrap_or_default();
    let vars = &body["variables"];
    let mut inner = fake.inner.lock().unwrap();
    if query.contains("enqueuePullRequest") {
        // Node ids are `PR_<owner>/<name>#<number>`.
        let id = vars["id"].as_str().unwrap_or_default();
        let Some((repo, number)) = id
            .strip_prefix("PR_")
            .and_then(|rest| rest.rsplit_once('#'))
            .and_then(|(repo, n)| Some((repo.to_owned(), n.parse::<u64>().ok()?)))
        else {
            return graphql_errors(&format!(
                "Could not resolve to a node with the global id of '{id}'"
            ));
        };
        let expected = vars["sha"].as_str().unwrap_or_default().to_owned();
        if head(&inner, &repo, number).as_deref() != Some(expected.as_str()) {
            return graphql_errors("Expected head oid does not match the pull request's head");
        }
        let queues = &mut inner.queues;
        if queues
            .enqueued
            .iter()
            .any(|(r, n, _)| *r == repo && *n == number)
        {
            return graphql_errors("Pull request is already in the merge queue");
        }
        queues.enqueued.push((repo, number, expected));
        let position = queues.enqueued.len();
        return Json(
            json!({ "data": { "enqueuePullRequest": { "mergeQueueEntry": {
            "position": position, "state": "QUEUED" } } } }),
        )
        .into_response();
    }
    if query.contains("pullRequest(number") {
        let repo = format!(
            "{}/{}",
            vars["owner"].as_str().unwrap_or_default(),
            vars["name"].as_str().unwrap_or_default()
        );
        let number = vars["number"].as_u64().unwrap_or_default();
        let Some(head) = head(&inner, &repo, number) else {
            return Json(json!({ "data": { "repository": { "pullRequest": null } } }))
                .into_response();
        };
        let queued = inner
            .queues
            .enqueued
            .iter()
            .any(|(r, n, _)| *r == repo && *n == number);
        return Json(json!({ "data": { "repository": { "pullRequest": {
            "id": format!("PR_{repo}#{number}"), "isInMergeQueue": queued, "headRefOid": head } } } }))
        .into_response();
    }
    (
        StatusCode::BAD_REQUEST,
        Json(json!({ "message": "Problems parsing JSON" })),
    )
        .into_response()
}
