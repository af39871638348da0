//! GitLab's line in `doctor`: its REST API with `GITLAB_TOKEN`, and whose the token is. A read-only call, bounded.

use super::client::GitlabClient;
use crate::config::Settings;
use crate::providers::{within_10s, CheckLine, CheckState};

/// GitLab's REST API at `GITLAB_URL` with `GITLAB_TOKEN`.
pub async fn check(settings: &Settings) -> Vec<CheckLine> {
    let label = "gitlab api";
    let gitlab = super::settings::GitlabSettings::of(settings);
    let Some(token) = &gitlab.token else {
        return vec![CheckLine::new(
            label,
            CheckState::Disabled,
            "GITLAB_TOKEN is not set; GitLab hears nothing back",
        )];
    };
    let url = &gitlab.url;
    let checked = match GitlabClient::new(url, token) {
        Err(e) => Err(e),
        Ok(client) => within_10s(client.username())
            .await
            .map(|user| format!("the token is @{user}'s")),
    };
    vec![CheckLine::answered(label, url, checked)]
}
