//! The GitLab client effects call through: its REST API (`<GITLAB_URL>/api/v4`) with `GITLAB_TOKEN` in
//! `PRIVATE-TOKEN`, every call bounded. It only makes calls and says how they failed; what to call, when, and what
//! it means is the policy's: here, a note on an issue or a merge request, made once (its marker looked for first),
//! and an emoji award on a note; each other area of the API in its own file: `poll.rs` (merge requests changed
//! since a time, for `gitlab_poller`), `hooks.rs` (a project's webhook, for `init --gitlab`), `members.rs` (a
//! member's access level, for `doctor`), `merge_requests.rs` (a task's merge request, opened and merged),
//! `trains.rs` (a project's merge trains: whether it runs them, a merge request put on one), `jobs.rs` (a CI job's
//! log tail, for reactions), `branches.rs` (a branch's head and one merge request's `detailed_merge_status`, for
//! `gitlab_poller`'s refresh backstop).

mod branches;
mod hooks;
mod jobs;
mod members;
mod merge_requests;
mod poll;
mod trains;

pub use branches::MergeStatus;
pub use hooks::{EnsuredHook, EVENTS as HOOK_EVENTS};
pub use members::{Access, DEVELOPER};
pub use merge_requests::{HeadPipeline, MergeRequestNow};
pub use poll::{Issue, MergeRequest, MergeRequestPage};
pub use trains::CarStatus;

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use crate::effects::{marker, CallError, Produced};
use crate::tasks::RepoName;

/// What a note is on: the part of its API path (`issues`, `merge_requests`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Noteable {
    #[default]
    Issue,
    MergeRequest,
}

impl Noteable {
    pub fn path(self) -> &'static str {
        match self {
            Noteable::Issue => "issues",
            Noteable::MergeRequest => "merge_requests",
        }
    }
}

pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct GitlabClient {
    http: reqwest::Client,
    /// The instance, no trailing `/` (config drops it).
    url: String,
    token: SecretString,
}

impl std::fmt::Debug for GitlabClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GitlabClient")
    }
}

/// A note as GitLab answers one: what the repeat's lookup reads.
#[derive(Debug, Deserialize)]
struct Note {
    id: u64,
    body: String,
}

impl GitlabClient {
    pub fn new(url: &str, token: &SecretString) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(READ_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot build the GitLab client: {e}"))?;
        Ok(Self {
            http,
            url: url.trim_end_matches('/').to_owned(),
            token: token.clone(),
        })
    }

    /// `…/api/v4/projects/<path, its '/' encoded>`. A [`RepoName`]'s segments hold only letters, digits, `.`,
    /// `_` and `-`, so `/` is all there is to encode.
    pub(crate) fn project_url(&self, project: &RepoName) -> String {
        format!(
            "{}/api/v4/projects/{}",
            self.url,
            project.as_str().replace('/', "%2F")
        )
    }

    /// `…/projects/<path>/<issues|merge_requests>/<iid>/notes`.
    fn notes_url(&self, project: &RepoName, on: Noteable, iid: u64) -> String {
        format!("{}/{}/{iid}/notes", self.project_url(project), on.path())
    }

    /// A note on `project`'s issue or merge request `iid` saying `body`, made once for `key`: a note already
    /// carrying the key's marker (a repeat after a crash mid-call) is found first and not made again.
    pub async fn note(
        &self,
        key: &str,
        project: &RepoName,
        on: Noteable,
        iid: u64,
        body: &str,
    ) -> Result<Produced, CallError> {
        let url = self.notes_url(project, on, iid);
        let marker = marker(key);
        let recent: Vec<Note> = self
            .send(
                "reading the notes",
                self.http.get(&url).query(&[
                    ("sort", "desc"),
                    ("order_by", "created_at"),
                    ("per_page", "100"),
                ]),
            )
            .await?;
        let page = |id: u64| {
            let kind = match on {
                Noteable::Issue => "issues",
                Noteable::MergeRequest => "merge_requests",
            };
            format!("{}/{project}/-/{kind}/{iid}#note_{id}", self.url)
        };
        if let Some(found) = recent.iter().find(|n| n.body.contains(&marker)) {
            return Ok(Produced::Comment {
                url: page(found.id),
                posted: false,
            });
        }
        let made: Note = self
            .send(
                "making the note",
                self.http.post(&url).json(&serde_json::json!({
                    "body": format!("{}\n\n{marker}", without_quick_actions(body)),
                })),
            )
            .await?;
        Ok(Produced::Comment {
            url: page(made.id),
            posted: true,
        })
    }

    /// Awards `name` (an emoji, `eyes`) to note `note` on `project`'s issue or merge request `iid`. GitLab refuses
    /// the same award twice; that answer is the award already given (a repeat after a crash), so done.
    pub async fn award(
        &self,
        project: &RepoName,
        on: Noteable,
        iid: u64,
        note: u64,
        name: &str,
    ) -> Result<Produced, CallError> {
        let url = format!("{}/{note}/award_emoji", self.notes_url(project, on, iid));
        let response = self
            .http
            .post(&url)
            .header("PRIVATE-TOKEN", self.token.expose_secret())
            .json(&serde_json::json!({ "name": name }))
            .send()
            .await
            .map_err(|e| CallError::Transient {
                message: format!(
                    "awarding {name}: no answer from GitLab: {}",
                    e.without_url()
                ),
                retry_after: None,
            })?;
        let status = response.status();
        if status.is_success() {
            return Ok(Produced::Done);
        }
        // Bounded: the answer is only searched for GitLab's words.
        let text = response.text().await.unwrap_or_default();
        let text = text.get(..2000).unwrap_or(&text);
        if matches!(status.as_u16(), 400 | 404 | 409 | 422) && text.contains("already been taken") {
            return Ok(Produced::Done);
        }
        Err(refusal(&format!("awarding {name}"), status, None))
    }

    async fn send<T: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<T, CallError> {
        read_json(what, self.answer(what, request).await?).await
    }

    /// The response to `request` with the token, if GitLab answered it with a success; else how it failed.
    async fn answer(
        &self,
        what: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, CallError> {
        self.attempt(what, request)
            .await
            .map_err(|refused| refused.error)
    }

    /// [`GitlabClient::answer`], a refusal keeping GitLab's status (a caller that reads what a 404 or a 405
    /// means).
    async fn attempt(
        &self,
        what: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, Refused> {
        let response = request
            .header("PRIVATE-TOKEN", self.token.expose_secret())
            .send()
            .await
            .map_err(|e| Refused {
                status: None,
                error: CallError::Transient {
                    message: format!("{what}: no answer from GitLab: {}", e.without_url()),
                    retry_after: None,
                },
            })?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .map(|s| Duration::from_secs(s.min(3600)));
        Err(Refused {
            status: Some(status.as_u16()),
            error: refusal(what, status, retry_after),
        })
    }
}

/// A call that did not succeed: GitLab's status when it answered, and the failure as effects read it.
#[derive(Debug)]
struct Refused {
    status: Option<u16>,
    error: CallError,
}

/// A successful answer's body as `T`.
async fn read_json<T: serde::de::DeserializeOwned>(
    what: &str,
    response: reqwest::Response,
) -> Result<T, CallError> {
    response
        .json::<T>()
        .await
        .map_err(|e| CallError::Transient {
            message: format!("{what}: GitLab's answer does not read: {}", e.without_url()),
            retry_after: None,
        })
}

/// `text` with no line GitLab would run as a quick action: GitLab runs `/close`, `/merge`, `/approve`, … at the
/// start of a line of a note or a new merge request's description, as the account that posted it (pidevops's,
/// with Developer access), and what pidevops posts quotes agents and people it has never met. A zero-width space
/// before such a line's `/` keeps it readable and inert.
pub(crate) fn without_quick_actions(text: &str) -> String {
    text.split('\n')
        .map(|line| {
            let indent = line.len() - line.trim_start().len();
            if line[indent..].starts_with('/') {
                format!("{}\u{200B}{}", &line[..indent], &line[indent..])
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A call GitLab answered with `status`: worth trying again (5xx, 429, after `retry_after`) or not.
fn refusal(what: &str, status: reqwest::StatusCode, retry_after: Option<Duration>) -> CallError {
    let message = format!("{what}: GitLab answered {status}");
    if status.is_server_error() || status.as_u16() == 429 {
        CallError::Transient {
            message,
            retry_after,
        }
    } else {
        CallError::Permanent { message }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_line_pidevops_posts_runs_as_a_quick_action() {
        let said = without_quick_actions("Done.\n/close\n  /merge\n> /approve\nsee a/b");
        assert_eq!(
            said,
            "Done.\n\u{200B}/close\n  \u{200B}/merge\n> /approve\nsee a/b"
        );
        assert!(said.lines().all(|l| !l.trim_start().starts_with('/')));
    }

    #[test]
    fn a_nested_project_is_one_encoded_path_segment() {
        let client =
            GitlabClient::new("https://gitlab.example.com/", &SecretString::from("t")).unwrap();
        let project: RepoName = "acme/platform/api".parse().unwrap();
        assert_eq!(
            client.notes_url(&project, Noteable::Issue, 23),
            "https://gitlab.example.com/api/v4/projects/acme%2Fplatform%2Fapi/issues/23/notes"
        );
    }
}
