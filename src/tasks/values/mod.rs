//! Typed values of the task board. Each one is parsed once, at the boundary, and is valid from then on: serde
//! goes through the same constructors, so a value read back from the log is checked like one typed by a user.

mod board;
mod ids;
mod link_key;
mod link_map;
mod links;
mod reports;
pub mod suggest;
mod text;

pub use board::{
    ApprovalPolicy, Column, MaxAttempts, Priority, ReviewPolicy, RunPurpose, ScopePolicy, TaskKind,
};
pub use ids::{AgentName, BranchName, RepoName, RunId, TaskId, TASK_STREAM_PREFIX};
pub use link_key::{KnownLink, LinkKey};
pub use link_map::{LinkConflict, Links};
// Whole: a link type or `LinkKey` declared there is `tasks::values::…` with no edit here.
pub use links::*;
pub use reports::*;
pub use text::{FollowUpOrigin, FollowUpText, Reason, Spec, SpecParts};

/// Why a value was refused. Each variant names the value and the rule it broke.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("task id {0:?} is not T-<n> with n a positive integer without leading zeros")]
    TaskId(String),
    #[error("repository {value:?} is not owner/name or group/…/name: {why}")]
    Repo { value: String, why: &'static str },
    #[error("branch name {value:?} is not a safe git branch name: {why}")]
    Branch { value: String, why: &'static str },
    #[error("Linear issue identifier {0:?} is not TEAM-<n>")]
    LinearIdentifier(String),
    #[error("GitHub issue or pull request number must be at least 1")]
    GithubNumber,
    #[error("a GitLab issue's iid must be at least 1")]
    GitlabIid,
    #[error("Telegram chat id must not be 0 and message id must be at least 1")]
    Telegram,
    #[error("a Slack conversation is a channel id (upper-case letters and digits) and, for a thread, its root message's ts (seconds.micros)")]
    Slack,
    #[error("{field} must not be empty")]
    Empty { field: &'static str },
    #[error("{field} is {chars} characters; at most {max} allowed")]
    TooLong {
        field: &'static str,
        chars: usize,
        max: usize,
    },
    #[error("{field} contains a NUL character, which Postgres cannot store")]
    Nul { field: &'static str },
    #[error("max attempts {value} is outside 1..={max}")]
    MaxAttempts { value: u32, max: u32 },
    #[error("unknown priority {0:?}; expected urgent, high, normal or low")]
    Priority(String),
    #[error("unknown approval policy {0:?}; expected auto or manual")]
    Approval(String),
    #[error("unknown column {0:?}")]
    Column(String),
    #[error("agent profile name {0:?} is not 1 to 40 of a-z, 0-9, '-' and '_', starting with a letter or digit")]
    Agent(String),
    #[error("{field} is not valid: {why}")]
    Invalid {
        field: &'static str,
        why: &'static str,
    },
}

#[cfg(test)]
mod tests;
