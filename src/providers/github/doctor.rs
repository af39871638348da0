//! GitHub's lines in `doctor`: its API with `GITHUB_TOKEN`, then whether each configured repository's webhook
//! delivers here. Read-only calls, each bounded.

use secrecy::SecretString;

use super::GithubClient;
use crate::config::Settings;
use crate::providers::{within_10s, CheckLine, CheckState};

/// GitHub's API with `GITHUB_TOKEN`, and then the repositories' webhooks.
pub async fn check(settings: &Settings) -> Vec<CheckLine> {
    let label = "github api";
    let github = super::settings::GithubSettings::of(settings);
    let Some(token) = &github.token else {
        return vec![CheckLine::new(
            label,
            CheckState::Disabled,
            "GITHUB_TOKEN is not set; no pull requests or comments",
        )];
    };
    let url = &github.api_url;
    let checked = match GithubClient::new(url, token) {
        Err(e) => Err(e),
        Ok(client) => within_10s(client.whoami()).await,
    };
    match checked {
        Ok(login) => {
            let mut lines = vec![CheckLine::answered(
                label,
                url,
                Ok(format!("GITHUB_TOKEN is {login}'s")),
            )];
            lines.extend(webhooks(settings, token).await);
            lines
        }
        Err(e) => vec![CheckLine::answered(label, url, Err(e))],
    }
}

/// For each configured repository, whether a webhook delivers to `/webhooks/github`. Reported, never failed: without
/// one, `github_poller` still finds merges and CI failures, only later.
async fn webhooks(settings: &Settings, token: &SecretString) -> Vec<CheckLine> {
    let api_url = super::settings::GithubSettings::of(settings).api_url;
    let Ok(client) = GithubClient::new(&api_url, token) else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    // Every configured repository, an empty `[repos."o/n"]` (as `init` writes it) too.
    for repo in settings.file.board.allowed.repositories() {
        let (state, detail) = match within_10s(client.webhook_urls(repo)).await {
            Ok(urls) => match urls.iter().find(|u| u.ends_with("/webhooks/github")) {
                Some(url) => (CheckState::Pass, format!("delivers to {url}")),
                None => (
                    CheckState::Warn,
                    "no webhook delivers to …/webhooks/github: GitHub events arrive only through github_poller"
                        .to_owned(),
                ),
            },
            Err(e) => (
                CheckState::Warn,
                format!("cannot list webhooks ({e}); the token needs Webhooks: read"),
            ),
        };
        lines.push(CheckLine::new(
            format!("github webhook {repo}"),
            state,
            detail,
        ));
    }
    lines
}
