//! A project's webhook, for `pidevops init --gitlab`: made once, or put right. A hook already delivering to our
//! URL is updated in place (its events and secret token), never duplicated; hooks to other URLs are left alone.

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::json;

use super::GitlabClient;
use crate::effects::CallError;
use crate::tasks::RepoName;

/// A hook as GitLab lists it: what finding ours reads.
#[derive(Debug, Deserialize)]
struct Hook {
    id: u64,
    url: String,
}

/// The hook `ensure_webhook` left in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnsuredHook {
    pub id: u64,
    pub created: bool,
}

/// The events pidevops acts on, as the hook API names them (`push_events`: the base's pushes, which the `refresh`
/// loop brings the merge requests up to date on; the other branches' pushes are stored and change nothing).
pub const EVENTS: &[&str] = &[
    "push_events",
    "issues_events",
    "note_events",
    "merge_requests_events",
    "pipeline_events",
    "job_events",
];

impl GitlabClient {
    /// `project`'s hook delivering to `url` with `secret` as its token, the [`EVENTS`] on and SSL verification
    /// on: the one already there updated (`PUT`), else one made (`POST`).
    pub async fn ensure_webhook(
        &self,
        project: &RepoName,
        url: &str,
        secret: &SecretString,
    ) -> Result<EnsuredHook, CallError> {
        let hooks_url = format!("{}/hooks", self.project_url(project));
        let hooks: Vec<Hook> = self
            .send(
                "listing the project's webhooks",
                self.http.get(&hooks_url).query(&[("per_page", "100")]),
            )
            .await?;
        let mut body = json!({
            "url": url,
            "token": secret.expose_secret(),
            "enable_ssl_verification": true,
        });
        for event in EVENTS {
            body[*event] = json!(true);
        }
        match hooks.iter().find(|h| h.url == url) {
            Some(ours) => {
                let updated: Hook = self
                    .send(
                        "updating the webhook",
                        self.http
                            .put(format!("{hooks_url}/{}", ours.id))
                            .json(&body),
                    )
                    .await?;
                Ok(EnsuredHook {
                    id: updated.id,
                    created: false,
                })
            }
            None => {
                let made: Hook = self
                    .send("making the webhook", self.http.post(&hooks_url).json(&body))
                    .await?;
                Ok(EnsuredHook {
                    id: made.id,
                    created: true,
                })
            }
        }
    }
}
