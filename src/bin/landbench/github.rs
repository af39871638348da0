//! The benchmark's GitHub, on loopback: the few REST calls `effects:github` makes for a pull request and its merge,
//! answered from a real bare repository (a pull request's head is its branch there, a merge is a real `git merge`
//! pushed to `main`), and GitHub's webhooks for what follows (the merged pull request, the push to `main`), signed
//! and sent to the app. Bodies are GitHub's own (the repository's fixtures), so the real client parses them.

use std::path::{Path as FsPath, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use pidevops::bench::git;
use serde_json::{json, Value};

/// Where GitHub's webhooks go, and the secret they are signed with.
#[derive(Clone)]
pub struct Hooks {
    /// The app's webhook route, known once the app is bound (after the fake, whose address the app needs).
    pub url: Arc<std::sync::OnceLock<String>>,
    pub secret: String,
    pub client: reqwest::Client,
}

impl Hooks {
    /// Sends `body` as GitHub's `event`, signed; fails unless the app accepted it.
    pub async fn send(&self, event: &str, body: &Value) -> anyhow::Result<()> {
        let bytes = serde_json::to_vec(body)?;
        let signature =
            pidevops::providers::github::webhook::sign_github(self.secret.as_bytes(), &bytes);
        let response = self
            .client
            .post(
                self.url
                    .get()
                    .context("the app's address is not known yet")?,
            )
            .header("content-type", "application/json")
            .header("x-github-event", event)
            .header("x-github-delivery", uuid::Uuid::now_v7().to_string())
            .header("x-hub-signature-256", signature)
            .body(bytes)
            .send()
            .await
            .with_context(|| format!("sending {event}"))?;
        anyhow::ensure!(
            response.status().is_success(),
            "{event}: {}",
            response.status()
        );
        Ok(())
    }
}

/// One pull request the fake opened.
#[derive(Clone)]
struct Pull {
    number: u64,
    head: String,
    base: String,
    title: String,
    merged: Option<String>,
}

struct Inner {
    repo: String,
    /// The bare repository standing in for GitHub's copy.
    remote: PathBuf,
    /// A clone of it where merges are made.
    work: PathBuf,
    pulls: Vec<Pull>,
    merges: u64,
}

#[derive(Clone)]
pub struct FakeGithub {
    inner: Arc<Mutex<Inner>>,
    /// One merge at a time, as GitHub serializes merges into a branch.
    merging: Arc<tokio::sync::Mutex<()>>,
    hooks: Hooks,
}

/// A fixture of GitHub's, as the repository keeps it.
pub fn fixture(path: &str) -> anyhow::Result<Value> {
    let file = FsPath::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/github")
        .join(path);
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    Ok(serde_json::from_str(&text)?)
}

impl FakeGithub {
    /// Serves on loopback; returns the fake and its base URL.
    pub async fn start(
        repo: &str,
        remote: PathBuf,
        work: PathBuf,
        hooks: Hooks,
    ) -> anyhow::Result<(Self, String)> {
        let fake = FakeGithub {
            inner: Arc::new(Mutex::new(Inner {
                repo: repo.to_owned(),
                remote,
                work,
                pulls: Vec::new(),
                merges: 0,
            })),
            merging: Arc::default(),
            hooks,
        };
        let router = Router::new()
            .route(
                "/repos/{owner}/{repo}/pulls",
                get(list_pulls).post(create_pull),
            )
            .route(
                "/repos/{owner}/{repo}/pulls/{number}",
                get(get_pull).patch(get_pull),
            )
            .route(
                "/repos/{owner}/{repo}/pulls/{number}/merge",
                put(merge_pull),
            )
            .fallback(|| async { (StatusCode::NOT_FOUND, Json(json!({"message": "Not Found"}))) })
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        tokio::spawn(async move { axum::serve(listener, router).await });
        Ok((fake, url))
    }

    /// Merges made through the API.
    pub fn merges(&self) -> u64 {
        self.lock().merges
    }

    /// The open pull requests' numbers by branch.
    pub fn opened(&self) -> Vec<(String, u64)> {
        self.lock()
            .pulls
            .iter()
            .map(|p| (p.head.clone(), p.number))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A branch's head in the remote.
    fn head(&self, branch: &str) -> Option<String> {
        let remote = self.lock().remote.clone();
        git(
            &remote,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("refs/heads/{branch}"),
            ],
        )
        .ok()
    }

    fn pull_json(&self, pull: &Pull) -> anyhow::Result<Value> {
        let repo = self.lock().repo.clone();
        let mut pr = fixture("pull_request/opened.payload.json")?["pull_request"].clone();
        let number = pull.number;
        pr["number"] = json!(number);
        pr["id"] = json!(1000 + number);
        pr["title"] = json!(pull.title);
        pr["url"] = json!(format!(
            "https://api.github.com/repos/{repo}/pulls/{number}"
        ));
        pr["html_url"] = json!(format!("https://github.com/{repo}/pull/{number}"));
        pr["head"]["ref"] = json!(pull.head);
        pr["head"]["sha"] = json!(self.head(&pull.head).unwrap_or_default());
        pr["base"]["ref"] = json!(pull.base);
        pr["head"]["repo"]["full_name"] = json!(repo);
        pr["base"]["repo"]["full_name"] = json!(repo);
        pr["state"] = json!(if pull.merged.is_some() {
            "closed"
        } else {
            "open"
        });
        pr["merged"] = json!(pull.merged.is_some());
        pr["merge_commit_sha"] = json!(pull.merged);
        Ok(pr)
    }

    /// GitHub's merge: `sha` must be the branch's head; a real merge commit pushed to the base; then the webhooks.
    async fn merge(
        &self,
        number: u64,
        sha: &str,
    ) -> anyhow::Result<Result<String, (StatusCode, &'static str)>> {
        let _one = self.merging.lock().await;
        let Some(pull) = self
            .lock()
            .pulls
            .iter()
            .find(|p| p.number == number)
            .cloned()
        else {
            return Ok(Err((StatusCode::NOT_FOUND, "Not Found")));
        };
        if pull.merged.is_some() {
            return Ok(Err((
                StatusCode::METHOD_NOT_ALLOWED,
                "Pull Request is not mergeable",
            )));
        }
        if self.head(&pull.head).as_deref() != Some(sha) {
            return Ok(Err((
                StatusCode::CONFLICT,
                "Head branch was modified. Review and try the merge again.",
            )));
        }
        let work = self.lock().work.clone();
        let base = format!("+refs/heads/{0}:refs/remotes/origin/{0}", pull.base);
        let head = format!("+refs/heads/{0}:refs/remotes/origin/{0}", pull.head);
        git(&work, &["fetch", "--quiet", "origin", &base, &head])?;
        git(
            &work,
            &[
                "checkout",
                "--quiet",
                "-B",
                &pull.base,
                &format!("origin/{}", pull.base),
            ],
        )?;
        let message = format!("Merge pull request #{number} from {}", pull.head);
        if git(&work, &["merge", "--quiet", "--no-ff", "-m", &message, sha]).is_err() {
            git(&work, &["merge", "--abort"])?;
            return Ok(Err((
                StatusCode::METHOD_NOT_ALLOWED,
                "Pull Request is not mergeable",
            )));
        }
        git(
            &work,
            &["push", "--quiet", "origin", &format!("HEAD:{}", pull.base)],
        )?;
        let merged = git(&work, &["rev-parse", "HEAD"])?;
        {
            let mut inner = self.lock();
            inner.merges += 1;
            if let Some(p) = inner.pulls.iter_mut().find(|p| p.number == number) {
                p.merged = Some(merged.clone());
            }
        }
        let closed = self.closed_payload(&pull)?;
        let push = self.push_payload(&pull.base)?;
        let hooks = self.hooks.clone();
        tokio::spawn(async move {
            for (event, body) in [("pull_request", closed), ("push", push)] {
                if let Err(e) = hooks.send(event, &body).await {
                    eprintln!("landbench: {e:#}");
                }
            }
        });
        Ok(Ok(merged))
    }

    fn closed_payload(&self, pull: &Pull) -> anyhow::Result<Value> {
        let repo = self.lock().repo.clone();
        let mut body = fixture("pull_request/closed.payload.json")?;
        let by = body["sender"].clone();
        let pr = &mut body["pull_request"];
        pr["number"] = json!(pull.number);
        pr["merged"] = json!(true);
        pr["merged_by"] = by;
        pr["head"]["ref"] = json!(pull.head);
        pr["head"]["repo"]["full_name"] = json!(repo);
        pr["base"]["repo"]["full_name"] = json!(repo);
        body["repository"]["full_name"] = json!(repo);
        Ok(body)
    }

    fn push_payload(&self, branch: &str) -> anyhow::Result<Value> {
        let mut body = fixture("push/payload.json")?;
        body["ref"] = json!(format!("refs/heads/{branch}"));
        body["deleted"] = json!(false);
        body["repository"]["full_name"] = json!(self.lock().repo.clone());
        Ok(body)
    }

    /// GitHub's `check_run.completed` with `success` for `sha` on `branch`: the scripted CI's verdict.
    pub fn check_passed(&self, branch: &str, sha: &str) -> anyhow::Result<Value> {
        let mut body = fixture("check_run/completed.payload.json")?;
        let run = &mut body["check_run"];
        run["check_suite"]["head_branch"] = json!(branch);
        run["check_suite"]["head_sha"] = json!(sha);
        run["head_sha"] = json!(sha);
        run["name"] = json!("ci");
        run["conclusion"] = json!("success");
        body["repository"]["full_name"] = json!(self.lock().repo.clone());
        Ok(body)
    }

    pub fn hooks(&self) -> &Hooks {
        &self.hooks
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    (
        status,
        Json(json!({"message": message, "documentation_url": "https://docs.github.com/rest"})),
    )
        .into_response()
}

fn internal(e: &anyhow::Error) -> Response {
    error(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e:#}"))
}

async fn list_pulls(
    State(fake): State<FakeGithub>,
    Path((owner, _repo)): Path<(String, String)>,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let head = query.get("head").cloned().unwrap_or_default();
    let pulls: Vec<Pull> = fake
        .lock()
        .pulls
        .iter()
        .filter(|p| p.merged.is_none() && format!("{owner}:{}", p.head) == head)
        .cloned()
        .collect();
    match pulls
        .iter()
        .map(|p| fake.pull_json(p))
        .collect::<anyhow::Result<Vec<_>>>()
    {
        Ok(found) => Json(Value::Array(found)).into_response(),
        Err(e) => internal(&e),
    }
}

async fn create_pull(State(fake): State<FakeGithub>, Json(body): Json<Value>) -> Response {
    let field = |name: &str| body[name].as_str().unwrap_or_default().to_owned();
    let pull = {
        let mut inner = fake.lock();
        if inner
            .pulls
            .iter()
            .any(|p| p.head == field("head") && p.merged.is_none())
        {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Validation Failed: a pull request already exists",
            );
        }
        let pull = Pull {
            number: inner.pulls.len() as u64 + 1,
            head: field("head"),
            base: field("base"),
            title: field("title"),
            merged: None,
        };
        inner.pulls.push(pull.clone());
        pull
    };
    match fake.pull_json(&pull) {
        Ok(json) => (StatusCode::CREATED, Json(json)).into_response(),
        Err(e) => internal(&e),
    }
}

async fn get_pull(
    State(fake): State<FakeGithub>,
    Path((_owner, _repo, number)): Path<(String, String, u64)>,
) -> Response {
    let Some(pull) = fake
        .lock()
        .pulls
        .iter()
        .find(|p| p.number == number)
        .cloned()
    else {
        return error(StatusCode::NOT_FOUND, "Not Found");
    };
    match fake.pull_json(&pull) {
        Ok(json) => Json(json).into_response(),
        Err(e) => internal(&e),
    }
}

async fn merge_pull(
    State(fake): State<FakeGithub>,
    Path((_owner, _repo, number)): Path<(String, String, u64)>,
    Json(body): Json<Value>,
) -> Response {
    let sha = body["sha"].as_str().unwrap_or_default().to_owned();
    match fake.merge(number, &sha).await {
        Ok(Ok(merged)) => Json(
            json!({"sha": merged, "merged": true, "message": "Pull Request successfully merged"}),
        )
        .into_response(),
        Ok(Err((status, message))) => error(status, message),
        Err(e) => internal(&e),
    }
}
