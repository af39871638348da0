//! What every policy may need to know of the deployment, built by start-up from the configuration; what only one
//! provider's policy needs is that provider's settings (`providers/<name>/settings.rs`), handed to it alone.

use std::collections::BTreeMap;

use crate::tasks::RepoName;

/// What the policy needs to know of the deployment.
#[derive(Clone, Debug, Default)]
pub struct PolicyConfig {
    /// The branch each configured repository's pull requests go to (`[repos."o/n"] base`); others go to `main`.
    pub bases: BTreeMap<RepoName, String>,
    /// Whether pull requests are opened (the code host's effects loop runs): a ticket hears of a review when its
    /// pull request opens; without one, when the branch is pushed.
    pub pull_requests: bool,
    /// `[plans] land`: with `combined`, a plan's items open no pull request; the plan's combination opens one.
    pub plan_land: crate::tasks::PlanLand,
}

impl PolicyConfig {
    pub fn base_for(&self, repo: &RepoName) -> String {
        self.bases
            .get(repo)
            .cloned()
            .unwrap_or_else(|| "main".to_owned())
    }
}
