//! GitLab's settings, whole: its variables (`GITLAB_TOKEN`, `GITLAB_URL`, declared in its entry of
//! `domain::registry::PROVIDERS`, read and checked by config) and its part of `pidevops.toml` (`[intake.gitlab]`),
//! as the values its parts are built with.

use std::collections::BTreeSet;

use secrecy::SecretString;

use crate::config::file::Tables;
use crate::config::Settings;

/// The API token: `effects:gitlab`'s notes and merge requests, and pidevops's own git's push to `GITLAB_URL`.
pub const TOKEN: &str = "GITLAB_TOKEN";
/// The instance: gitlab.com or a self-managed one (or a test's fake).
pub const URL: &str = "GITLAB_URL";

/// What GitLab's parts are built with.
#[derive(Clone, Debug)]
pub struct GitlabSettings {
    pub token: Option<SecretString>,
    pub url: String,
    pub intake: GitlabIntake,
    /// The `[repos]` entries with `provider = "gitlab"`: the projects pidevops works on there.
    pub projects: Vec<crate::tasks::RepoName>,
}

/// Who and what may make work from GitLab (`[intake.gitlab]`, checked by config when it read the file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitlabIntake {
    /// The label that asks pidevops for an issue.
    pub label: String,
    /// Usernames trusted to ask, lower case (GitLab's usernames ignore case). GitLab's hooks carry no access
    /// level, so trust is named here; `doctor` warns of a name without Developer access to a project.
    pub trusted_users: BTreeSet<String>,
    /// pidevops's own GitLab account: a note mentioning it is for pidevops; its own notes make nothing.
    pub bot_username: Option<String>,
}

impl GitlabIntake {
    pub fn from_tables(tables: &Tables) -> Self {
        let table = &tables.intake.gitlab;
        Self {
            label: table.label.clone(),
            trusted_users: table
                .trusted_users
                .iter()
                .map(|u| u.to_ascii_lowercase())
                .collect(),
            bot_username: table.bot_username.clone(),
        }
    }

    /// Whether `username` is trusted to ask.
    pub fn trusts(&self, username: &str) -> bool {
        self.trusted_users.contains(&username.to_ascii_lowercase())
    }

    /// Whether `username` is pidevops's own account.
    pub fn is_bot(&self, username: &str) -> bool {
        self.bot_username
            .as_deref()
            .is_some_and(|bot| bot.eq_ignore_ascii_case(username))
    }
}

/// The defaults of `[intake.gitlab]`: the `pidevops` label, no one trusted.
impl Default for GitlabIntake {
    fn default() -> Self {
        Self::from_tables(&Tables::default())
    }
}

impl GitlabSettings {
    pub fn of(settings: &Settings) -> Self {
        let vars = &settings.providers;
        Self {
            token: vars.secret(TOKEN).cloned(),
            url: vars.get(URL).unwrap_or_default().to_owned(),
            intake: GitlabIntake::from_tables(settings.file.tables()),
            projects: settings
                .file
                .intake
                .code_hosts
                .iter()
                .filter(|(_, host)| **host == crate::domain::Source::Gitlab)
                .map(|(repo, _)| repo.clone())
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_variables_are_its_table_entry_s_and_trust_is_named() {
        for name in [TOKEN, URL] {
            let (provider, _) = crate::domain::registry::variable(name).expect(name);
            assert_eq!(provider.name, "gitlab");
        }
        let mut settings =
            Settings::for_tests(crate::config::DatabaseUrl::Sqlite(":memory:".into()));
        let none = GitlabSettings::of(&settings);
        assert_eq!(none.url, "https://gitlab.com");
        assert!(none.token.is_none());
        assert_eq!(none.intake.label, "pidevops");
        assert!(!none.intake.trusts("alice"), "no one until named");
        let table: toml::Table = toml::from_str(
            "[intake.gitlab]\nlabel = \"agent\"\ntrusted_users = [\"Alice\"]\nbot_username = \"pidevops-bot\"\n",
        )
        .unwrap();
        settings.file = crate::config::file::FileConfig::from_table(&table).unwrap();
        settings
            .providers
            .set(URL, Some("https://gitlab.corp.example/"))
            .unwrap();
        let some = GitlabSettings::of(&settings);
        assert_eq!(some.url, "https://gitlab.corp.example");
        assert_eq!(some.intake.label, "agent");
        assert!(some.intake.trusts("alice") && some.intake.trusts("ALICE"));
        assert!(!some.intake.trusts("mallory"));
        assert!(some.intake.is_bot("PIDEVOPS-BOT"));
    }
}
