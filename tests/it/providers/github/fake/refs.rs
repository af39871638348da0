//! Branches on the fake GitHub, shaped like GitHub's git refs API: `GET /repos/{o}/{r}/git/ref/heads/{branch}`
//! answers the ref (`ref`, `node_id`, `url`, `object: {type: "commit", sha, url}`) or 404 "Not Found", and
//! `DELETE /repos/{o}/{r}/git/refs/heads/{branch}` answers 204, or 422 "Reference does not exist" when there is
//! no such branch. Branches exist only as a test sets them ([`FakeGithub::set_branch`]): pidevops pushes to the
//! test's local remote, not here.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::{failure_response, FakeGithub};

impl FakeGithub {
    /// Branch `branch` of `repo` points at `sha` (pushed by pidevops, or by a person).
    pub fn set_branch(&self, repo: &str, branch: &str, sha: &str) {
        self.inner
            .lock()
            .unwrap()
            .branches
            .insert((repo.to_owned(), branch.to_owned()), sha.to_owned());
    }

    /// Whether `repo` has branch `branch`.
    pub fn has_branch(&self, repo: &str, branch: &str) -> bool {
        self.inner
            .lock()
            .unwrap()
            .branches
            .contains_key(&(repo.to_owned(), branch.to_owned()))
    }

    /// The calls that deleted a ref (`DELETE …/git/refs/…`), whatever they answered, in order.
    pub fn delete_ref_calls(&self) -> Vec<super::Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == "DELETE" && c.path.contains("/git/refs/"))
            .collect()
    }
}

fn not_found(message: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({ "message": message, "documentation_url": "https://docs.github.com/rest/git/refs" })),
    )
        .into_response()
}

/// `GET /repos/{o}/{r}/git/ref/{ref}`: `heads/<branch>` as it stands, else 404.
pub(super) async fn get_ref(
    State(fake): State<FakeGithub>,
    Path((owner, repo, reference)): Path<(String, String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(failure) = fake.record(&method, &uri, &headers, Value::Null) {
        return failure_response(failure);
    }
    let full = format!("{owner}/{repo}");
    let Some(branch) = reference.strip_prefix("heads/") else {
        return not_found("Not Found");
    };
    let inner = fake.inner.lock().unwrap();
    match inner.branches.get(&(full.clone(), branch.to_owned())) {
        Some(sha) => Json(json!({
            "ref": format!("refs/heads/{branch}"),
            "node_id": "REF_fake",
            "url": format!("https://api.github.com/repos/{full}/git/refs/heads/{branch}"),
            "object": {
                "type": "commit",
                "sha": sha,
                "url": format!("https://api.github.com/repos/{full}/git/commits/{sha}"),
            },
        }))
        .into_response(),
        None => not_found("Not Found"),
    }
}

/// `DELETE /repos/{o}/{r}/git/refs/{ref}`: 204, or 422 "Reference does not exist".
pub(super) async fn delete_ref(
    State(fake): State<FakeGithub>,
    Path((owner, repo, reference)): Path<(String, String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(failure) = fake.record(&method, &uri, &headers, Value::Null) {
        return failure_response(failure);
    }
    let full = format!("{owner}/{repo}");
    let removed = reference.strip_prefix("heads/").and_then(|branch| {
        fake.inner
            .lock()
            .unwrap()
            .branches
            .remove(&(full, branch.to_owned()))
    });
    match removed {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({ "message": "Reference does not exist", "documentation_url": "https://docs.github.com/rest/git/refs#delete-a-reference" })),
        )
            .into_response(),
    }
}
