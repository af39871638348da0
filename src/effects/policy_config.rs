//! What the policies need to know of the deployment, built by start-up from the configuration. Below every policy
//! and the runner (each names it here); `policy.rs` re-exports it with the pure request builders.

use std::collections::BTreeMap;

use crate::domain::effect::LinearStates;
use crate::tasks::RepoName;

/// What the policy needs to know of the deployment.
#[derive(Clone, Debug, Default)]
pub struct PolicyConfig {
    /// The branch each configured repository's pull requests go to (`[repos."o/n"] base`); others go to `main`.
    pub bases: BTreeMap<RepoName, String>,
    /// The Telegram chats told about tasks (`TELEGRAM_ALLOWED_CHATS`).
    pub telegram_chats: Vec<i64>,
    /// `TELEGRAM_ALLOWED_USERS`: when set, only these users may command or press buttons.
    pub telegram_users: Option<std::collections::BTreeSet<i64>>,
    /// A task's review or needs-human notice again within this long of the last one sent is not sent
    /// (`[telegram] cooldown_s`, default 10 minutes; 0 sends every one).
    pub telegram_cooldown: chrono::Duration,
    /// Where Linear issues move (`[linear.states]`).
    pub linear_states: LinearStates,
    /// Whether pull requests are opened (`effects:github` runs): Linear hears of a review when its pull request
    /// opens; without one, when the branch is pushed.
    pub github_prs: bool,
    /// pidevops's own GitHub account (`[intake.github] bot_login`): a question on an issue says to mention it.
    pub github_bot_login: Option<String>,
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
