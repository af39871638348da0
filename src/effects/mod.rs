//! Effects: the outbound calls pidevops makes to GitHub, Linear and Telegram, each driven by an event
//! through a policy and recorded in the log, so a restart or a replayed event never calls twice.
//!
//! ```text
//! log ──► policy (pure: event → requests) ──► effect:<key> stream ──► provider call ──► effect.succeeded | failed
//!                                              requested, started…                      └─► commands (links, flags)
//! ```
//!
//! One runner (`runner/`) follows the log for every provider; what differs is the policy it holds (`provider.rs`:
//! which events concern the provider, what requests they produce, its calls), one each: `github/`, `linear/`,
//! `telegram.rs` with the bot (`bot.rs`). A policy never sees the runner: what it needs of the loop (the board,
//! the log, the loops; an effect requested or driven now) it asks the narrow `handle::Handle` it is handed, which
//! the runner implements. `handle.rs`, `provider.rs` and `policy_config.rs` (`PolicyConfig`: what the policies know
//! of the deployment) sit below both, so the runner builds the policies (`runner/policies.rs`) and no import goes
//! back up. Their request builders are pure (re-exported in `policy`). Both pull requests pidevops opens, a task's
//! (`github/`) and a combined plan's (`combined.rs`), are described by one writer (`pull_request.rs`), with every
//! untrusted text made inert (`inert.rs`).
//!
//! Each request has an idempotency key (`github:pr:T-7`) and its own stream `effect:<key>`:
//! `effect.requested` (version 1, deduplicated on the key), then per attempt `effect.started` and its outcome.
//! `started` is appended at the stream's next version before the call, so two executors (a split-brain between
//! replicas) never both make it. An attempt that started and has no outcome was cut off mid-call by a crash: it
//! is made again only when the action is safe to repeat (opening a pull request looks for the open one first);
//! otherwise it is recorded as failed, in doubt, never sent twice.
//!
//! Transient failures (5xx, timeouts, 429 and rate limits, honouring `Retry-After` and the reset time) are retried
//! with backoff, the wait recorded in `effect.failed{retry_at}`; a permanent failure is recorded, flags the task for
//! a human, and the loop moves on.
//!
//! A task's calls are capped (`cap.rs`: `[effects] max_per_task_per_hour`, counted from the log): past the cap an
//! effect is recorded as `effect.withheld` with the reason instead of being made, and the task is flagged.

pub mod bot;
pub mod cap;
mod combined;
mod github;
mod handle;
mod inert;
mod linear;
pub mod policy;
mod policy_config;
mod provider;
mod pull_request;
pub mod runner;
mod telegram;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::tasks::{BranchName, CommitSha, MergeMethod, RepoName, TaskId};

pub use crate::domain::effect::{stream, EFFECT_STREAM_PREFIX};
/// Attempts of one effect before it is recorded as failed for good.
pub const MAX_ATTEMPTS: u32 = 8;

/// Which API an effect calls; each has its own loop (`effects:github`, …), so one provider being down never holds
/// back another's calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    Github,
    Linear,
    Telegram,
}

impl Provider {
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Github => "github",
            Provider::Linear => "linear",
            Provider::Telegram => "telegram",
        }
    }

    /// The loop that makes this provider's calls.
    pub fn loop_name(self) -> String {
        format!("effects:{}", self.as_str())
    }
}

/// What to do. Everything the call needs is in the request, so the call is the same whoever makes it, whenever.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Opens the task's pull request from `head` to `base`, or finds the one already open.
    GithubOpenPullRequest {
        repo: RepoName,
        head: BranchName,
        base: String,
        title: String,
        body: String,
    },
    /// Comments on an issue (or pull request). The body carries a hidden marker naming the effect, so a repeat
    /// finds the comment it made instead of posting it again.
    GithubComment {
        repo: RepoName,
        number: u64,
        body: String,
        /// Comments updated since this time are searched for the marker (the request's time, less a margin).
        since: DateTime<Utc>,
    },
    /// Reacts to an issue or pull request comment (`eyes`: pidevops has it). GitHub keeps one reaction per account
    /// and content, so a repeat changes nothing.
    GithubReaction {
        repo: RepoName,
        comment: u64,
        content: String,
    },
    /// Merges the task's pull request at commit `sha` (auto-land), with `method` or the repository's allowed one.
    GithubMergePullRequest {
        repo: RepoName,
        number: u64,
        sha: CommitSha,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        method: Option<MergeMethod>,
    },
    /// A comment on a Linear issue (Markdown), created under an id derived from the key so it is made once.
    LinearComment { issue: uuid::Uuid, body: String },
    /// Moves a Linear issue to the first of `states` its team has, else to its team's first state of type
    /// `fallback` (`started`, `completed`, …).
    LinearMoveIssue {
        issue: uuid::Uuid,
        states: Vec<String>,
        fallback: String,
    },
    /// An agent activity in a Linear agent session: `content` is Linear's (`{"type": "thought", "body": …}`).
    LinearActivity {
        session: String,
        content: serde_json::Value,
    },
    /// The links a Linear agent session shows (label, address).
    LinearSessionUrls {
        session: String,
        urls: Vec<(String, String)>,
    },
    /// The checklist a Linear agent session shows: a plan's items and where each stands (replaces the last).
    LinearSessionPlan {
        session: String,
        plan: Vec<crate::providers::linear::PlanStep>,
    },
    /// A message to a Telegram chat, in Telegram's HTML (escaped when it was built), with inline buttons (label,
    /// callback data of at most 64 bytes) in one row, or, with `reply_prompt`, a reply prompt instead (Telegram's
    /// `force_reply`, the prompt its input field's placeholder): a question whose reply is its answer.
    TelegramSend {
        chat: i64,
        html: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        buttons: Vec<(String, String)>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reply_prompt: Option<String>,
    },
    /// The answer every button press gets (Telegram shows it briefly; without one the button spins).
    TelegramAnswerCallback { callback: String, text: String },
    /// The bot's command menu (`setMyCommands`): name and description of each.
    TelegramSetCommands { commands: Vec<(String, String)> },
}

impl Action {
    pub fn provider(&self) -> Provider {
        match self {
            Action::GithubOpenPullRequest { .. }
            | Action::GithubComment { .. }
            | Action::GithubReaction { .. }
            | Action::GithubMergePullRequest { .. } => Provider::Github,
            Action::TelegramSend { .. }
            | Action::TelegramSetCommands { .. }
            | Action::TelegramAnswerCallback { .. } => Provider::Telegram,
            Action::LinearComment { .. }
            | Action::LinearMoveIssue { .. }
            | Action::LinearActivity { .. }
            | Action::LinearSessionUrls { .. }
            | Action::LinearSessionPlan { .. } => Provider::Linear,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Action::GithubOpenPullRequest { .. } => "github_open_pull_request",
            Action::GithubComment { .. } => "github_comment",
            Action::GithubReaction { .. } => "github_reaction",
            Action::GithubMergePullRequest { .. } => "github_merge_pull_request",
            Action::LinearComment { .. } => "linear_comment",
            Action::LinearMoveIssue { .. } => "linear_move_issue",
            Action::LinearActivity { .. } => "linear_activity",
            Action::LinearSessionUrls { .. } => "linear_session_urls",
            Action::LinearSessionPlan { .. } => "linear_session_plan",
            Action::TelegramSend { .. } => "telegram_send",
            Action::TelegramSetCommands { .. } => "telegram_set_commands",
            Action::TelegramAnswerCallback { .. } => "telegram_answer_callback",
        }
    }

    /// Whether an attempt cut off mid-call may be made again without a second visible result.
    pub fn safe_to_repeat(&self) -> bool {
        match self {
            // Looks for the open pull request of the branch before it opens one.
            Action::GithubOpenPullRequest { .. } => true,
            // Looks for its marker among the issue's recent comments before it posts.
            Action::GithubComment { .. } => true,
            // GitHub answers a repeated reaction with the one there.
            Action::GithubReaction { .. } => true,
            // Reads the pull request first: one already merged (by the attempt cut off) is a success, not a merge.
            Action::GithubMergePullRequest { .. } => true,
            // Created under an id derived from the key: a repeat finds the first.
            Action::LinearComment { .. } | Action::LinearActivity { .. } => true,
            // Moving to the state it is in, or setting the same links or checklist, changes nothing (and a
            // checklist's next state is asked for only once this one settled, so a repeat is never stale).
            Action::LinearMoveIssue { .. }
            | Action::LinearSessionUrls { .. }
            | Action::LinearSessionPlan { .. } => true,
            // Telegram cannot tell whether a message was delivered: one cut off is recorded, never sent twice.
            Action::TelegramSend { .. } => false,
            // Setting the same menu twice leaves one menu.
            Action::TelegramSetCommands { .. } => true,
            // A second answer to one press is refused by Telegram, not shown twice.
            Action::TelegramAnswerCallback { .. } => true,
        }
    }
}

/// An effect a policy asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub key: String,
    /// The task it is about; `None` for a bot reply to a command about no task.
    pub task: Option<TaskId>,
    pub action: Action,
}

/// What a call produced: the providers' answers, kept here under their old path.
pub use crate::providers::Produced;

/// The hidden line that marks a comment as effect `key`'s.
pub fn marker(key: &str) -> String {
    format!("<!-- pidevops:{key} -->")
}

/// One fact about an effect, in its stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EffectEvent {
    Requested {
        at: DateTime<Utc>,
        key: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task: Option<TaskId>,
        #[serde(flatten)]
        action: Action,
        /// The event whose handling asked for it.
        cause_position: i64,
    },
    Started {
        at: DateTime<Utc>,
        key: String,
        attempt: u32,
    },
    Succeeded {
        at: DateTime<Utc>,
        key: String,
        attempt: u32,
        produced: Produced,
    },
    Failed {
        at: DateTime<Utc>,
        key: String,
        attempt: u32,
        error: String,
        /// When the next attempt may be made; `None`: failed for good.
        retry_at: Option<DateTime<Utc>>,
    },
    /// Not made, and never will be: its task reached the cap on outbound calls (`cap.rs`), which says why.
    Withheld {
        at: DateTime<Utc>,
        key: String,
        reason: String,
    },
}

impl EffectEvent {
    pub fn kind(&self) -> &'static str {
        match self {
            EffectEvent::Requested { .. } => "effect.requested",
            EffectEvent::Started { .. } => "effect.started",
            EffectEvent::Succeeded { .. } => "effect.succeeded",
            EffectEvent::Failed { .. } => "effect.failed",
            EffectEvent::Withheld { .. } => "effect.withheld",
        }
    }

    pub fn at(&self) -> DateTime<Utc> {
        match self {
            EffectEvent::Requested { at, .. }
            | EffectEvent::Started { at, .. }
            | EffectEvent::Succeeded { at, .. }
            | EffectEvent::Failed { at, .. }
            | EffectEvent::Withheld { at, .. } => *at,
        }
    }
}

/// Where an effect stands, from its stream.
#[derive(Clone, Debug, PartialEq)]
pub enum State {
    /// Never requested.
    Unknown,
    /// Requested; the next attempt may be made at `due` (`None`: now).
    Pending {
        attempts: u32,
        due: Option<DateTime<Utc>>,
    },
    /// An attempt started and has no outcome: its caller was cut off mid-call.
    InDoubt {
        attempt: u32,
    },
    Succeeded,
    Failed,
    /// Held back by the cap on its task's outbound calls: settled, never made.
    Withheld,
}

/// Folds an effect's events into its state. Pure.
pub fn state(events: &[EffectEvent]) -> State {
    let mut state = State::Unknown;
    for event in events {
        state = match (state, event) {
            (State::Unknown, EffectEvent::Requested { .. }) => State::Pending {
                attempts: 0,
                due: None,
            },
            (_, EffectEvent::Started { attempt, .. }) => State::InDoubt { attempt: *attempt },
            (_, EffectEvent::Succeeded { .. }) => State::Succeeded,
            (
                _,
                EffectEvent::Failed {
                    attempt,
                    retry_at: Some(at),
                    ..
                },
            ) => State::Pending {
                attempts: *attempt,
                due: Some(*at),
            },
            (_, EffectEvent::Failed { retry_at: None, .. }) => State::Failed,
            (_, EffectEvent::Withheld { .. }) => State::Withheld,
            (other, EffectEvent::Requested { .. }) => other,
        };
    }
    state
}

/// When attempt `attempts + 1` may be made after a transient failure: what the provider asked for, else 2 s
/// doubling per attempt up to 10 minutes. `None`: no attempts left.
pub fn retry_at(
    now: DateTime<Utc>,
    attempts: u32,
    retry_after: Option<std::time::Duration>,
) -> Option<DateTime<Utc>> {
    if attempts >= MAX_ATTEMPTS {
        return None;
    }
    let backoff = crate::domain::backoff::Backoff {
        first: std::time::Duration::from_secs(2),
        max_doublings: 9,
        cap: std::time::Duration::from_secs(600),
    }
    .after(attempts);
    let wait = retry_after.unwrap_or(backoff);
    Some(now + chrono::Duration::from_std(wait).ok()?)
}

#[cfg(test)]
mod tests;
