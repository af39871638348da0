//! What every policy may need to know of the deployment, built by start-up from the configuration; what only one
//! provider's policy needs is that provider's settings (`providers/<name>/settings.rs`), handed to it alone.

use std::collections::{BTreeMap, BTreeSet};

use crate::domain::Source;
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
    /// `[repos."…"] provider` where it names a code host other than GitHub (`IntakeConfig::code_hosts`): where
    /// each repository's review requests go. GitHub's policy opens and merges nothing for a GitLab-hosted
    /// repository, and GitLab's nothing for any other.
    pub hosts: BTreeMap<RepoName, Source>,
    /// `[repos."…"] draft = true`: the repositories whose merge requests open as drafts.
    pub drafts: BTreeSet<RepoName>,
    /// `[repos."…"] delete_branch = false`: the repositories whose `pidevops/<task>` branches pidevops keeps once
    /// their task is done or cancelled (every other repository's are deleted, while ours).
    pub kept_branches: BTreeSet<RepoName>,
    /// The repositories landed by pidevops's own git (neither on GitHub nor GitLab-hosted: `forge = "git"`, a
    /// path, another host): no code host's API holds their branches.
    pub landed_by_git: BTreeSet<RepoName>,
}

impl PolicyConfig {
    pub fn base_for(&self, repo: &RepoName) -> String {
        self.bases
            .get(repo)
            .cloned()
            .unwrap_or_else(|| "main".to_owned())
    }

    /// The code host `repo`'s reviews go to: its `[repos] provider`, GitHub when it names none.
    pub fn host_of(&self, repo: &RepoName) -> Source {
        self.hosts.get(repo).copied().unwrap_or(Source::Github)
    }

    /// Whether pidevops deletes `repo`'s `pidevops/<task>` branches once their task is done or cancelled
    /// (`[repos."…"] delete_branch`, default true).
    pub fn deletes_branches(&self, repo: &RepoName) -> bool {
        !self.kept_branches.contains(repo)
    }

    /// Whether `repo`'s merge requests open as drafts.
    pub fn draft(&self, repo: &RepoName) -> bool {
        self.drafts.contains(repo)
    }
}
