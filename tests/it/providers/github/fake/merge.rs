//! Merging on the fake GitHub, shaped like GitHub's REST API: `GET /repos/{o}/{r}` with the repository's
//! `allow_*` merge settings, and `PUT /repos/{o}/{r}/pulls/{n}/merge`, which answers 200
//! `{sha, merged, message}`, 405 for a pull request that cannot be merged (merged or closed already, a method
//! the repository does not allow, one GitHub finds `dirty`: it conflicts with its base, or `behind` it, as on a
//! base whose protection requires branches to be up to date) and 409 when `sha` is
//! not the head. A pull request says `mergeable` / `mergeable_state` as GitHub does: `clean` unless a test set
//! another ([`FakeGithub::set_mergeable_state`]: `behind`, `dirty`, `blocked`, `unknown`, …). A test can hold the next merge's answer
//! after the merge is made ([`FakeGithub::hold_next_merge`]), to kill its caller in between, or move the world just
//! before the next merge is decided ([`FakeGithub::before_next_merge`]).

use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::{failure_response, pull_json, FakeGithub};

/// The account the fake merges as (GitHub's `merged_by`: the token's).
pub const MERGER: &str = "pidevops-bot";

/// A merge waiting to answer: the fake tells `merged` once the pull request is merged, then answers only after
/// `release` fires (or is dropped).
pub(super) struct Hold {
    merged: oneshot::Sender<()>,
    release: oneshot::Receiver<()>,
}

/// The test's side of a held merge.
pub struct HeldMerge {
    /// Fires once the fake has merged the pull request; its answer is then held.
    pub merged: oneshot::Receiver<()>,
    /// Lets the held answer go.
    pub release: oneshot::Sender<()>,
}

impl FakeGithub {
    /// The repository's merge settings (`allow_squash_merge`, `allow_merge_commit`, `allow_rebase_merge`) are
    /// these; unset ones are GitHub's defaults (all allowed).
    pub fn set_merge_methods(&self, repo: &str, squash: bool, merge: bool, rebase: bool) {
        let mut inner = self.inner.lock().unwrap();
        let settings = inner.repo_settings.entry(repo.to_owned()).or_default();
        settings.insert("allow_squash_merge".into(), json!(squash));
        settings.insert("allow_merge_commit".into(), json!(merge));
        settings.insert("allow_rebase_merge".into(), json!(rebase));
    }

    /// GitHub finds pull request `number` of `repo` `state` (`clean`, `behind`, `dirty`, `blocked`, `unknown`).
    pub fn set_mergeable_state(&self, repo: &str, number: u64, state: &str) {
        self.inner
            .lock()
            .unwrap()
            .mergeable
            .insert((repo.to_owned(), number), state.to_owned());
    }

    /// The next merge through the API merges, says so on `merged`, and answers only once `release` fires.
    pub fn hold_next_merge(&self) -> HeldMerge {
        let (merged_tx, merged_rx) = oneshot::channel();
        let (release_tx, release_rx) = oneshot::channel();
        self.inner.lock().unwrap().hold = Some(Hold {
            merged: merged_tx,
            release: release_rx,
        });
        HeldMerge {
            merged: merged_rx,
            release: release_tx,
        }
    }

    /// When the next merge call arrives, `moved` runs first, then the fake answers it as things stand after:
    /// a person's push to the base between pidevops's choice and GitHub's merge, whoever makes the call and
    /// whenever.
    pub fn before_next_merge(&self, moved: impl FnOnce() + Send + 'static) {
        self.inner.lock().unwrap().before_merge = Some(Box::new(moved));
    }

    /// The merge calls received (`PUT …/pulls/{n}/merge`), whatever they answered, in order.
    pub fn merge_calls(&self) -> Vec<super::Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == "PUT" && c.path.ends_with("/merge"))
            .collect()
    }

    /// Whether pull request `number` of `repo` is merged (through the API or by [`FakeGithub::merge`]).
    pub fn is_merged(&self, repo: &str, number: u64) -> bool {
        self.inner
            .lock()
            .unwrap()
            .merged
            .contains_key(&(repo.to_owned(), number))
    }
}

/// `mergeable` and `mergeable_state` of pull request `number` of `repo` as GitHub answers them: an open one is
/// `clean` unless a test said otherwise; `dirty` cannot merge, `unknown` is not computed yet (`mergeable: null`); a
/// closed one is neither.
pub(super) fn mergeable(
    states: &std::collections::BTreeMap<(String, u64), String>,
    repo: &str,
    number: u64,
    open: bool,
    pr: &mut Value,
) {
    let state = match states.get(&(repo.to_owned(), number)) {
        Some(state) => state.as_str(),
        None if open => "clean",
        None => "unknown",
    };
    pr["mergeable_state"] = json!(state);
    pr["mergeable"] = match state {
        "unknown" => Value::Null,
        "dirty" => json!(false),
        _ => json!(true),
    };
}

fn github_error(status: StatusCode, message: &str) -> Response {
    (
        status,
        Json(json!({
            "message": message,
            "documentation_url": "https://docs.github.com/rest/pulls/pulls#merge-a-pull-request",
            "status": status.as_u16().to_string(),
        })),
    )
        .into_response()
}

/// `GET /repos/{o}/{r}`: the repository (the pull request fixture's base repository, renamed), with its merge
/// settings.
pub(super) async fn get_repo(
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
    let mut body = pull_json(&full, 1, "main", "main", "", "")["base"]["repo"].clone();
    body["name"] = json!(repo);
    body["full_name"] = json!(full);
    body["owner"]["login"] = json!(owner);
    for flag in [
        "allow_squash_merge",
        "allow_merge_commit",
        "allow_rebase_merge",
    ] {
        body[flag] = json!(true);
    }
    if let Some(settings) = fake.inner.lock().unwrap().repo_settings.get(&full) {
        for (flag, value) in settings {
            body[flag.as_str()] = value.clone();
        }
    }
    Json(body).into_response()
}

/// `PUT /repos/{o}/{r}/pulls/{n}/merge`: merges an open pull request whose head is `sha` (when given) with
/// `merge_method` (GitHub's default: `merge`) if the repository allows it.
pub(super) async fn merge_pull(
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
    let before = fake.inner.lock().unwrap().before_merge.take();
    if let Some(moved) = before {
        moved();
    }
    let full = format!("{owner}/{repo}");
    let (merge_sha, hold) = {
        let mut inner = fake.inner.lock().unwrap();
        let Some(pull) = inner
            .pulls
            .iter()
            .find(|p| p.0 == full && p.1 == number)
            .cloned()
        else {
            return github_error(StatusCode::NOT_FOUND, "Not Found");
        };
        let key = (full.clone(), number);
        if inner.merged.contains_key(&key) || !pull.6 {
            return github_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "Pull Request is not mergeable",
            );
        }
        if super::queue::queue_required(&inner, &full, number) {
            return github_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "Changes must be made through the merge queue",
            );
        }
        match inner.mergeable.get(&key).map(String::as_str) {
            Some("dirty") => {
                return github_error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "Pull Request is not mergeable",
                )
            }
            // A protected base that requires branches to be up to date before merging.
            Some("behind") => {
                return github_error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "Head branch is not up to date with the base branch",
                )
            }
            _ => {}
        }
        let head = inner.heads.get(&key).cloned().unwrap_or_else(|| {
            pull_json(&pull.0, pull.1, &pull.2, &pull.3, &pull.4, &pull.5)["head"]["sha"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        });
        if let Some(sha) = body["sha"].as_str() {
            if sha != head {
                return github_error(
                    StatusCode::CONFLICT,
                    "Head branch was modified. Review and try the merge again.",
                );
            }
        }
        let chosen = body["merge_method"].as_str().unwrap_or("merge");
        let (flag, refusal) = match chosen {
            "squash" => (
                "allow_squash_merge",
                "Squash merges are not allowed on this repository.",
            ),
            "rebase" => (
                "allow_rebase_merge",
                "Rebase merges are not allowed on this repository.",
            ),
            "merge" => (
                "allow_merge_commit",
                "Merge commits are not allowed on this repository.",
            ),
            _ => {
                return (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    Json(json!({ "message": "Validation Failed", "errors": [{ "resource": "PullRequest", "field": "merge_method", "code": "invalid" }] })),
                )
                    .into_response()
            }
        };
        let allowed = inner
            .repo_settings
            .get(&full)
            .and_then(|s| s.get(flag))
            .and_then(Value::as_bool)
            .unwrap_or(true);
        if !allowed {
            return github_error(StatusCode::METHOD_NOT_ALLOWED, refusal);
        }
        for pull in inner.pulls.iter_mut() {
            if pull.0 == full && pull.1 == number {
                pull.6 = false;
            }
        }
        inner.merged.insert(key.clone(), MERGER.to_owned());
        let merge_sha = format!("{:040x}", 0xfeed_0000_u64 + number);
        inner.merge_commits.insert(key, merge_sha.clone());
        (merge_sha, inner.hold.take())
    };
    if let Some(hold) = hold {
        let _ = hold.merged.send(());
        // Dropped or fired, the answer goes: a test that lost interest never hangs the fake.
        let _ = hold.release.await;
    }
    Json(json!({ "sha": merge_sha, "merged": true, "message": "Pull Request successfully merged" }))
        .into_response()
}
