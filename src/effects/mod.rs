//! Effects: the outbound calls pidevops makes to GitHub, Linear and Telegram, each driven by an event
//! through a policy and recorded in the log, so a restart or a replayed event never calls twice.
//!
//! ```text
//! log ──► policy (pure: event → requests) ──► effect:<key> stream ──► provider call ──► effect.succeeded | failed
//!                                              requested, started…                      └─► commands (links, flags)
//! ```
//!
//! One runner (`runner/`, `Effects<P>`) follows the log for every provider; what differs is the policy `P` it
//! is built with (`provider.rs`, `ProviderPolicy`: which events concern the provider, what requests they produce,
//! its own action type, its calls), one each: `github/` (with a combined plan's pull request, `combined.rs`),
//! `linear/`, `telegram/` (with the bot, `bot.rs`). The runner names none of them: start-up builds each loop with
//! its policy. A policy never sees the runner: what it needs of the loop (the board, the log, the loops; an effect
//! requested or driven now) it asks the narrow `handle::Handle` it is handed. Each provider's actions are its own
//! enum, stored tagged (`"action": "github_comment"`); what reads effects without making them reads any
//! provider's as a `StoredAction`. Their request builders are pure (re-exported in `policy`). Both pull requests
//! pidevops opens are described by one writer (`pull_request.rs`), with every untrusted text made inert
//! (`inert.rs`); a comment addressed to pidevops on either code host is answered in one set of words (`reply.rs`).
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

mod call;
pub mod cap;
pub mod handle;
pub(crate) mod inert;
pub mod policy_config;
pub mod provider;
pub(crate) mod pull_request;
pub mod reply;
pub mod runner;

use chrono::{DateTime, Utc};

use serde::{Deserialize, Serialize};

use crate::tasks::TaskId;

pub use crate::domain::effect::{stream, EFFECT_STREAM_PREFIX};
pub use policy_config::PolicyConfig;
pub use provider::{loop_name, ProviderPolicy};
/// Attempts of one effect before it is recorded as failed for good.
pub const MAX_ATTEMPTS: u32 = 8;

/// What every provider's action says of itself. Each provider's actions are its own enum (`GithubAction`, …),
/// tagged `action` with names that start with the provider's (`github_comment`): the runner of that provider's
/// loop reads them back typed, and everything else reads any of them as a [`StoredAction`].
pub trait ProviderAction:
    Clone
    + std::fmt::Debug
    + PartialEq
    + Serialize
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// Its name in the log and in `/metrics` (`github_open_pull_request`).
    fn name(&self) -> &'static str;

    /// Whether an attempt cut off mid-call may be made again without a second visible result.
    fn safe_to_repeat(&self) -> bool;
}

/// An action as the log holds it, whichever provider's: its fields, `action` naming it. What reads effects
/// without making them (the cap, the pages, a replay) reads this.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StoredAction(serde_json::Map<String, serde_json::Value>);

impl StoredAction {
    /// Its name (`github_comment`); empty when the stored object has none.
    pub fn name(&self) -> &str {
        self.0
            .get("action")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
    }
}

/// An effect a policy asks for: one of its provider's actions (`A`), under an idempotency key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request<A> {
    pub key: String,
    /// The task it is about; `None` for a bot reply to a command about no task.
    pub task: Option<TaskId>,
    pub action: A,
}

/// What a call produced: the providers' answers, kept here under their old path.
pub use call::{CallError, Produced};

/// The hidden line that marks a comment as effect `key`'s.
pub fn marker(key: &str) -> String {
    format!("<!-- pidevops:{key} -->")
}

/// One fact about an effect, in its stream. `A`: its action as the provider's loop reads it, or any provider's
/// as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EffectEvent<A = StoredAction> {
    Requested {
        at: DateTime<Utc>,
        key: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task: Option<TaskId>,
        #[serde(flatten)]
        action: A,
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

impl<A> EffectEvent<A> {
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
pub fn state<A>(events: &[EffectEvent<A>]) -> State {
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
