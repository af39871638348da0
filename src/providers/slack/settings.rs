//! Slack's settings, whole: its variables (`SLACK_BOT_TOKEN`, `SLACK_APP_TOKEN`, `SLACK_API_URL`,
//! `SLACK_ALLOWED_USERS`, `SLACK_ALLOWED_CHANNELS`, declared in its entry of `domain::registry::PROVIDERS`, read
//! and checked by config) and its part of `pidevops.toml` (`[slack.channels."C…"] repo`), as the values its parts
//! are built with: who may command, and where, is decided here once.

use std::collections::{BTreeMap, BTreeSet};

use secrecy::SecretString;

use crate::config::file::Tables;
use crate::config::{ProviderEnv, Settings};
use crate::domain::registry::slack_id_list;
use crate::tasks::RepoName;

/// The bot pidevops posts as (`xoxb-…`).
pub const BOT_TOKEN: &str = "SLACK_BOT_TOKEN";
/// Socket Mode's app-level token (`xapp-…`).
pub const APP_TOKEN: &str = "SLACK_APP_TOKEN";
/// The Web API (or a test's fake).
pub const API_URL: &str = "SLACK_API_URL";
/// Who may command. Unset: no one (a workspace has guests and strangers in shared channels).
pub const ALLOWED_USERS: &str = "SLACK_ALLOWED_USERS";
/// Where a mention makes work, besides `[slack.channels]`'s channels.
pub const ALLOWED_CHANNELS: &str = "SLACK_ALLOWED_CHANNELS";

/// What Slack's parts are built with.
#[derive(Clone, Debug)]
pub struct SlackSettings {
    pub bot_token: Option<SecretString>,
    pub app_token: Option<SecretString>,
    pub api_url: String,
    pub intake: SlackIntake,
}

/// Who may command pidevops from Slack, and where; what the rules and the buttons read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlackIntake {
    /// `SLACK_ALLOWED_USERS`; empty: no one.
    pub allowed_users: BTreeSet<String>,
    /// `SLACK_ALLOWED_CHANNELS` and every channel of `[slack.channels]`. A direct message to the bot needs no
    /// entry: who may command is the user's allow-list.
    pub allowed_channels: BTreeSet<String>,
    /// `[slack.channels."C…"] repo`: the repository of a channel's tasks when a mention names none.
    pub channel_repos: BTreeMap<String, RepoName>,
}

impl SlackIntake {
    pub fn new(vars: &ProviderEnv, tables: &Tables) -> Self {
        // Config checked the lists and the tables when it read them, so they parse.
        let ids = |name: &str, what: &str| {
            vars.get(name)
                .and_then(|list| slack_id_list(list, what).ok())
                .unwrap_or_default()
        };
        let mut allowed_channels = ids(ALLOWED_CHANNELS, "channel");
        allowed_channels.extend(tables.slack.channels.keys().cloned());
        let channel_repos = tables
            .slack
            .channels
            .iter()
            .filter_map(|(channel, table)| {
                let repo = table.repo.as_deref()?.parse().ok()?;
                Some((channel.clone(), repo))
            })
            .collect();
        Self {
            allowed_users: ids(ALLOWED_USERS, "user"),
            allowed_channels,
            channel_repos,
        }
    }

    /// Who may command from `channel` (`direct`: a direct message to the bot): `None` when `user` may; else why
    /// not, naming what to change.
    pub fn refusal(&self, channel: &str, direct: bool, user: Option<&str>) -> Option<String> {
        let Some(user) = user else {
            return Some("a message without a user (a bot's, or a workflow's)".to_owned());
        };
        if !self.allowed_users.contains(user) {
            return Some(if self.allowed_users.is_empty() {
                format!(
                    "user {user} may not command: SLACK_ALLOWED_USERS is not set, so no one may"
                )
            } else {
                format!("user {user} is not in SLACK_ALLOWED_USERS")
            });
        }
        if !direct && !self.allowed_channels.contains(channel) {
            return Some(format!(
                "channel {channel} is not in SLACK_ALLOWED_CHANNELS or [slack.channels]"
            ));
        }
        None
    }
}

impl SlackSettings {
    pub fn of(settings: &Settings) -> Self {
        let vars = &settings.providers;
        Self {
            bot_token: vars.secret(BOT_TOKEN).cloned(),
            app_token: vars.secret(APP_TOKEN).cloned(),
            api_url: vars.get(API_URL).unwrap_or_default().to_owned(),
            intake: SlackIntake::new(vars, settings.file.tables()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_may_command_and_where_is_read_from_its_variables_and_tables() {
        for name in [
            BOT_TOKEN,
            APP_TOKEN,
            API_URL,
            ALLOWED_USERS,
            ALLOWED_CHANNELS,
        ] {
            let (provider, _) = crate::domain::registry::variable(name).expect(name);
            assert_eq!(provider.name, "slack");
        }
        let mut settings =
            Settings::for_tests(crate::config::DatabaseUrl::Sqlite(":memory:".into()));
        let none = SlackSettings::of(&settings);
        assert!(none.intake.allowed_users.is_empty());
        assert_eq!(
            none.intake.refusal("C1", true, Some("U1")).as_deref(),
            Some("user U1 may not command: SLACK_ALLOWED_USERS is not set, so no one may")
        );
        settings
            .providers
            .set(ALLOWED_USERS, Some("U1, U2"))
            .unwrap();
        settings
            .providers
            .set(ALLOWED_CHANNELS, Some("C1"))
            .unwrap();
        let table: toml::Table =
            toml::from_str("[repos.\"o/n\"]\n[slack.channels.C2]\nrepo = \"o/n\"\n").unwrap();
        settings.file = crate::config::file::FileConfig::from_table(&table).unwrap();
        let some = SlackSettings::of(&settings).intake;
        assert_eq!(
            some.allowed_channels,
            BTreeSet::from(["C1".into(), "C2".into()])
        );
        assert_eq!(some.channel_repos["C2"].as_str(), "o/n");
        assert_eq!(some.refusal("C1", false, Some("U2")), None);
        assert_eq!(some.refusal("D9", true, Some("U1")), None);
        assert_eq!(
            some.refusal("C3", false, Some("U1")).as_deref(),
            Some("channel C3 is not in SLACK_ALLOWED_CHANNELS or [slack.channels]")
        );
        assert_eq!(
            some.refusal("C1", false, Some("U3")).as_deref(),
            Some("user U3 is not in SLACK_ALLOWED_USERS")
        );
        assert!(some.refusal("C1", false, None).is_some());
        assert!(settings.providers.set(ALLOWED_USERS, Some("u1")).is_err());
        assert!(settings.providers.set(BOT_TOKEN, Some("xapp-1")).is_err());
    }
}
