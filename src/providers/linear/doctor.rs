//! Linear's line in `doctor`: its API with `LINEAR_API_KEY`, and whom the key acts as. A read-only call, bounded.

use super::LinearClient;
use crate::config::Settings;
use crate::providers::{within_10s, CheckLine, CheckState};

/// Linear's API with `LINEAR_API_KEY`.
pub async fn check(settings: &Settings) -> Vec<CheckLine> {
    let label = "linear api";
    let linear = super::settings::LinearSettings::of(settings);
    let Some(key) = &linear.api_key else {
        return vec![CheckLine::new(
            label,
            CheckState::Disabled,
            "LINEAR_API_KEY is not set; Linear hears nothing back and is not polled",
        )];
    };
    let url = &linear.api_url;
    let checked = match LinearClient::new(url, key) {
        Err(e) => Err(e),
        Ok(client) => within_10s(client.viewer()).await,
    };
    vec![CheckLine::answered(
        label,
        url,
        checked.map(|name| format!("LINEAR_API_KEY acts as {name}")),
    )]
}
