//! Linear's settings, whole: its variables (`LINEAR_API_KEY`, `LINEAR_API_URL`, declared in its entry of
//! `domain::registry::PROVIDERS`, read and checked by config) and its part of `pidevops.toml`
//! (`[linear.states]`, `[intake.linear]`, `[pollers.linear]`), as the values its parts are built with.

use std::collections::{BTreeMap, BTreeSet};

use secrecy::SecretString;

use crate::config::file::Tables;
use crate::config::Settings;
use crate::domain::effect::LinearStates;
use crate::tasks::RepoName;

/// The API key: comments, states, agent activities, the poller.
pub const API_KEY: &str = "LINEAR_API_KEY";
/// The GraphQL endpoint itself (or a test's fake).
pub const API_URL: &str = "LINEAR_API_URL";

/// What Linear's parts are built with.
#[derive(Clone, Debug)]
pub struct LinearSettings {
    pub api_key: Option<SecretString>,
    pub api_url: String,
    /// Where its issues move (`[linear.states]`).
    pub states: LinearStates,
    /// Which issues it takes (`[intake.linear]`).
    pub intake: LinearIntake,
}

/// Which Linear issues make work (`[intake.linear]`, checked by config when it read the file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinearIntake {
    /// The state an issue is ready in.
    pub state: String,
    /// The label that asks pidevops for an issue.
    pub label: String,
    /// The states pidevops moves issues to (`[linear.states]`, every name, trimmed and lower case): an issue
    /// there has not been withdrawn, whoever moved it.
    pub work_states: BTreeSet<String>,
    /// Labels that keep an issue from pidevops.
    pub skip_labels: BTreeSet<String>,
    /// Team key → repository.
    pub teams: BTreeMap<String, RepoName>,
}

impl LinearIntake {
    pub fn from_tables(tables: &Tables, states: &LinearStates) -> Self {
        let table = &tables.intake.linear;
        Self {
            state: table.state.clone(),
            label: table.label.clone(),
            work_states: crate::intake::rules::work_states(states.names()),
            skip_labels: table.skip_labels.iter().cloned().collect(),
            // Config refused a team whose repository does not parse.
            teams: table
                .teams
                .iter()
                .filter_map(|(team, repo)| Some((team.clone(), repo.trim().parse().ok()?)))
                .collect(),
        }
    }
}

/// The defaults of `[intake.linear]` and `[linear.states]`.
impl Default for LinearIntake {
    fn default() -> Self {
        Self::from_tables(&Tables::default(), &LinearStates::default())
    }
}

impl LinearSettings {
    pub fn of(settings: &Settings) -> Self {
        let vars = &settings.providers;
        let states = settings.file.linear_states.clone();
        Self {
            api_key: vars.secret(API_KEY).cloned(),
            api_url: vars.get(API_URL).unwrap_or_default().to_owned(),
            intake: LinearIntake::from_tables(settings.file.tables(), &states),
            states,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_variables_are_the_ones_its_table_entry_declares() {
        for name in [API_KEY, API_URL] {
            let (provider, _) = crate::domain::registry::variable(name).expect(name);
            assert_eq!(provider.name, "linear");
        }
        let settings = LinearSettings::of(&Settings::for_tests(
            crate::config::DatabaseUrl::Sqlite(":memory:".into()),
        ));
        assert_eq!(settings.api_url, "https://api.linear.app/graphql");
    }
}
