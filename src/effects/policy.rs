//! Which effects an event asks for, in one place: what the policies need to know of the deployment, and the pure
//! request builders of each provider's policy (`github.rs`, `linear.rs`, `telegram.rs`, re-exported here). Each
//! takes the event and the task as the log has it and answers with requests (each with its idempotency key); none
//! calls out.

use std::collections::BTreeMap;

pub use super::combined::{
    after_plan_pull_request, lands_with_its_plan, plan_pull_request, plan_pull_request_body,
};
pub use super::github::{
    after_pull_request, github, github_question, inert, land, merge_key, pull_request_body,
};
pub use super::linear::{
    linear, linear_notifies, linear_pull_request, linear_session_opened, linear_session_refused,
};
pub use super::telegram::{
    digest, repeat_in_cooldown, telegram, telegram_notifies, telegram_proposal,
};
pub use crate::domain::effect::LinearStates;
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
