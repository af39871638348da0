//! Which effects an event asks for, in one place: what the policies need to know of the deployment
//! (`effects::PolicyConfig`), and the pure request builders of each provider's policy (`<name>/effects/`,
//! re-exported here). Each takes the event and the task as the log has it and answers with requests (each with its
//! idempotency key); none calls out. No policy imports this file: it is the façade for readers and tests.

pub use super::github::effects::combined::{
    after_plan_pull_request, lands_with_its_plan, plan_pull_request, plan_pull_request_body,
};
pub use super::github::effects::{
    after_pull_request, github, github_question, land, merge_key, pull_request_body,
};
pub use super::linear::effects::{
    linear, linear_notifies, linear_pull_request, linear_session_opened, linear_session_refused,
};
pub use super::slack::effects::{
    slack, slack_notifies, slack_proposal, slack_pull_request, slack_root, slack_seen, slack_status,
};
pub use super::telegram::effects::{
    digest, repeat_in_cooldown, telegram, telegram_notifies, telegram_proposal,
};
pub use crate::domain::effect::LinearStates;
pub use crate::effects::inert::inert;
pub use crate::effects::PolicyConfig;
