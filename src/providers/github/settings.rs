//! GitHub's settings, whole: its variables (`GITHUB_TOKEN`, `GITHUB_API_URL`, declared in its entry of
//! `domain::registry::PROVIDERS`, read and checked by config) and its part of `pidevops.toml` (`[intake.github]`,
//! `[pollers.github]`), as the values its parts are built with. The token is also the code host's credential that
//! start-up hands to dispatch and landing for git over https.

use std::collections::BTreeSet;

use secrecy::SecretString;

use crate::config::file::Tables;
use crate::config::Settings;

/// The API token: pull requests, comments, the poller, and git over https.
pub const TOKEN: &str = "GITHUB_TOKEN";
/// GitHub's API (an Enterprise server's, or a test's fake).
pub const API_URL: &str = "GITHUB_API_URL";

/// What GitHub's parts are built with.
#[derive(Clone, Debug)]
pub struct GithubSettings {
    pub token: Option<SecretString>,
    pub api_url: String,
    /// Whose issues and comments it takes, and by which label (`[intake.github]`).
    pub intake: GithubIntake,
}

/// Who and what may make work from GitHub (`[intake.github]`, checked by config when it read the file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GithubIntake {
    /// The label that asks pidevops for an issue.
    pub label: String,
    /// The author associations trusted to ask (upper case: `OWNER`, `MEMBER`, `COLLABORATOR`).
    pub associations: BTreeSet<String>,
    /// pidevops's own GitHub account: what it causes never creates work, and a question on an issue says to
    /// mention it.
    pub bot_login: Option<String>,
}

impl GithubIntake {
    pub fn from_tables(tables: &Tables) -> Self {
        let table = &tables.intake.github;
        Self {
            label: table.label.clone(),
            associations: table
                .associations
                .iter()
                .map(|s| s.to_ascii_uppercase())
                .collect(),
            bot_login: table.bot_login.clone(),
        }
    }
}

/// The defaults of `[intake.github]`.
impl Default for GithubIntake {
    fn default() -> Self {
        Self::from_tables(&Tables::default())
    }
}

impl GithubSettings {
    pub fn of(settings: &Settings) -> Self {
        Self {
            intake: GithubIntake::from_tables(settings.file.tables()),
            ..Self::from_vars(&settings.providers)
        }
    }

    /// From the variables alone, the file's defaults for the rest (`init`, which reads no file of settings).
    pub fn from_vars(vars: &crate::config::ProviderEnv) -> Self {
        Self {
            token: vars.secret(TOKEN).cloned(),
            api_url: vars.get(API_URL).unwrap_or_default().to_owned(),
            intake: GithubIntake::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_variables_are_the_ones_its_table_entry_declares() {
        for name in [TOKEN, API_URL] {
            let (provider, _) = crate::domain::registry::variable(name).expect(name);
            assert_eq!(provider.name, "github");
        }
        let settings = GithubSettings::of(&Settings::for_tests(
            crate::config::DatabaseUrl::Sqlite(":memory:".into()),
        ));
        assert_eq!(settings.api_url, "https://api.github.com");
        assert!(settings.token.is_none());
    }
}
