//! Slack's line in `doctor`: the Web API with `SLACK_BOT_TOKEN` (`auth.test`: who the bot is, and where), a
//! read-only call, bounded.

use super::SlackClient;
use crate::config::Settings;
use crate::providers::{within_10s, CheckLine, CheckState};

/// The Web API with `SLACK_BOT_TOKEN`.
pub async fn check(settings: &Settings) -> Vec<CheckLine> {
    let label = "slack api";
    let slack = super::settings::SlackSettings::of(settings);
    let Some(token) = &slack.bot_token else {
        return vec![CheckLine::new(
            label,
            CheckState::Disabled,
            "SLACK_BOT_TOKEN is not set; Slack hears nothing back",
        )];
    };
    let url = &slack.api_url;
    let checked = match SlackClient::new(url, token) {
        Err(e) => Err(e),
        Ok(client) => within_10s(client.auth_test()).await,
    };
    vec![CheckLine::answered(label, url, checked)]
}
