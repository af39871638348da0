//! Telegram's line in `doctor`: the Bot API with `TELEGRAM_BOT_TOKEN`, the bot's name, and how updates arrive
//! (a registered webhook, or the long poll). Read-only calls, each bounded.

use super::TelegramClient;
use crate::config::Settings;
use crate::providers::{within_10s, CheckLine, CheckState};

/// The Bot API with `TELEGRAM_BOT_TOKEN`, and how updates arrive.
pub async fn check(settings: &Settings) -> Vec<CheckLine> {
    let label = "telegram api";
    let telegram = super::settings::TelegramSettings::of(settings);
    let Some(token) = &telegram.bot_token else {
        return vec![CheckLine::new(
            label,
            CheckState::Disabled,
            "TELEGRAM_BOT_TOKEN is not set; no bot",
        )];
    };
    let url = &telegram.api_url;
    let checked = match TelegramClient::new(url, token) {
        Err(e) => Err(e),
        Ok(client) => match within_10s(client.get_me()).await {
            Err(e) => Err(e),
            Ok(bot) => within_10s(client.webhook_url()).await.map(|registered| {
                let mode = match (registered.is_empty(), settings.webhook_secrets.is_set("telegram")) {
                    (true, false) => "no webhook: telegram_updates long-polls".to_owned(),
                    (true, true) => "no webhook registered, though TELEGRAM_WEBHOOK_SECRET is set: register one (setWebhook with the secret)".to_owned(),
                    (false, _) => format!("webhook registered at {registered}"),
                };
                format!("the bot is @{bot}; {mode}")
            }),
        },
    };
    vec![CheckLine::answered(label, url, checked)]
}
