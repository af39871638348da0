//! Telegram's settings, whole: its variables (`TELEGRAM_BOT_TOKEN`, `TELEGRAM_API_URL`,
//! `TELEGRAM_ALLOWED_CHATS`, `TELEGRAM_ALLOWED_USERS`, declared in its entry of `domain::registry::PROVIDERS`,
//! read and checked by config) and its part of `pidevops.toml` (`[telegram]`), as the values its parts are built
//! with: who may command is decided here, once.

use std::collections::BTreeSet;

use secrecy::{ExposeSecret, SecretString};

use crate::config::{ProviderEnv, Settings};
use crate::domain::registry::{id_list, telegram_bot_id};

/// The bot pidevops speaks as (`<bot id>:<secret>`).
pub const BOT_TOKEN: &str = "TELEGRAM_BOT_TOKEN";
/// The Bot API (or a test's fake).
pub const API_URL: &str = "TELEGRAM_API_URL";
/// The chats whose `/new` makes tasks and that are told about them.
pub const ALLOWED_CHATS: &str = "TELEGRAM_ALLOWED_CHATS";
/// When set, only these users may command, in any allowed chat.
pub const ALLOWED_USERS: &str = "TELEGRAM_ALLOWED_USERS";

/// What Telegram's parts are built with.
#[derive(Clone, Debug)]
pub struct TelegramSettings {
    pub bot_token: Option<SecretString>,
    /// The numeric id of the bot (its token's part before `:`), scoping `update_id` dedup.
    pub bot_id: Option<String>,
    pub api_url: String,
    pub allowed_chats: BTreeSet<i64>,
    /// Unset: anyone in an allowed chat may command.
    pub allowed_users: Option<BTreeSet<i64>>,
    /// A task's review or needs-human notice again within this long of the last one is not sent
    /// (`[telegram] cooldown_s`).
    pub cooldown: chrono::Duration,
}

impl TelegramSettings {
    pub fn of(settings: &Settings) -> Self {
        let vars = &settings.providers;
        Self {
            bot_token: vars.secret(BOT_TOKEN).cloned(),
            bot_id: bot_id(vars),
            api_url: vars.get(API_URL).unwrap_or_default().to_owned(),
            // Config checked both lists when it read them, so they parse; an empty list allows no one.
            allowed_chats: ids(vars, ALLOWED_CHATS, "chat").unwrap_or_default(),
            allowed_users: ids(vars, ALLOWED_USERS, "user"),
            cooldown: settings.file.telegram_cooldown,
        }
    }
}

/// The bot's id from its token, as checked by config.
pub fn bot_id(vars: &ProviderEnv) -> Option<String> {
    let token = vars.secret(BOT_TOKEN)?;
    telegram_bot_id(token.expose_secret())
        .ok()
        .map(str::to_owned)
}

fn ids(vars: &ProviderEnv, name: &str, what: &str) -> Option<BTreeSet<i64>> {
    vars.get(name).and_then(|list| id_list(list, what).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_may_command_is_read_from_its_variables() {
        for name in [BOT_TOKEN, API_URL, ALLOWED_CHATS, ALLOWED_USERS] {
            let (provider, _) = crate::domain::registry::variable(name).expect(name);
            assert_eq!(provider.name, "telegram");
        }
        let mut settings =
            Settings::for_tests(crate::config::DatabaseUrl::Sqlite(":memory:".into()));
        let none = TelegramSettings::of(&settings);
        assert!(none.allowed_chats.is_empty() && none.allowed_users.is_none());
        assert_eq!(none.bot_id, None);
        settings
            .providers
            .set(BOT_TOKEN, Some("4242:sekrit"))
            .unwrap();
        settings
            .providers
            .set(ALLOWED_CHATS, Some("-100, 7"))
            .unwrap();
        settings.providers.set(ALLOWED_USERS, Some("5")).unwrap();
        let some = TelegramSettings::of(&settings);
        assert_eq!(some.bot_id.as_deref(), Some("4242"));
        assert_eq!(some.allowed_chats, BTreeSet::from([-100, 7]));
        assert_eq!(some.allowed_users, Some(BTreeSet::from([5])));
    }
}
