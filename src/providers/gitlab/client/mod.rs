//! The GitLab client effects call through: its REST API (`<GITLAB_URL>/api/v4`) with `GITLAB_TOKEN` in
//! `PRIVATE-TOKEN`, every call bounded. It only makes calls and says how they failed; what to call, when, and what
//! it means is the policy's: a note on an issue, made once (its marker looked for first); merge requests, opened
//! and merged (`merge_requests.rs`).

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

mod merge_requests;

use crate::effects::{marker, CallError, Produced};
use crate::tasks::RepoName;

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

    /// `…/api/v4/projects/<path, its '/' encoded>/issues/<iid>/notes`. A [`RepoName`]'s segments hold only
    /// letters, digits, `.`, `_` and `-`, so `/` is all there is to encode.
    fn notes_url(&self, project: &RepoName, iid: u64) -> String {
        format!(
            "{}/api/v4/projects/{}/issues/{iid}/notes",
            self.url,
            project.as_str().replace('/', "%2F")
        )
    }

    /// A note on `project#iid` saying `body`, made once for `key`: a note already carrying the key's marker (a
    /// repeat after a crash mid-call) is found first and not made again.
    pub async fn note(
        &self,
        key: &str,
        project: &RepoName,
        iid: u64,
        body: &str,
    ) -> Result<Produced, CallError> {
        let url = self.notes_url(project, iid);
        let marker = marker(key);
        let recent: Vec<Note> = self
            .send(
                "reading the issue's notes",
                self.http.get(&url).query(&[
                    ("sort", "desc"),
                    ("order_by", "created_at"),
                    ("per_page", "100"),
                ]),
            )
            .await?;
        let page = |id: u64| format!("{}/{project}/-/issues/{iid}#note_{id}", self.url);
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
                    "body": format!("{body}\n\n{marker}"),
                })),
            )
            .await?;
        Ok(Produced::Comment {
            url: page(made.id),
            posted: true,
        })
    }

    /// Who `GITLAB_TOKEN` is (`GET /api/v4/user`): `doctor`'s read-only proof that the API answers it.
    pub async fn username(&self) -> Result<String, CallError> {
        #[derive(Deserialize)]
        struct User {
            username: String,
        }
        let user: User = self
            .send(
                "reading the token's user",
                self.http.get(format!("{}/api/v4/user", self.url)),
            )
            .await?;
        Ok(user.username)
    }

    async fn send<T: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<T, CallError> {
        let response = request
            .header("PRIVATE-TOKEN", self.token.expose_secret())
            .send()
            .await
            .map_err(|e| CallError::Transient {
                message: format!("{what}: no answer from GitLab: {}", e.without_url()),
                retry_after: None,
            })?;
        let status = response.status();
        if status.is_success() {
            return response
                .json::<T>()
                .await
                .map_err(|e| CallError::Transient {
                    message: format!("{what}: GitLab's answer does not read: {}", e.without_url()),
                    retry_after: None,
                });
        }
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .map(|s| Duration::from_secs(s.min(3600)));
        let message = format!("{what}: GitLab answered {status}");
        if status.is_server_error() || status.as_u16() == 429 {
            Err(CallError::Transient {
                message,
                retry_after,
            })
        } else {
            Err(CallError::Permanent { message })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nested_project_is_one_encoded_path_segment() {
        let client =
            GitlabClient::new("https://gitlab.example.com/", &SecretString::from("t")).unwrap();
        let project: RepoName = "acme/platform/api".parse().unwrap();
        assert_eq!(
            client.notes_url(&project, 23),
            "https://gitlab.example.com/api/v4/projects/acme%2Fplatform%2Fapi/issues/23/notes"
        );
    }
}
