//! What a provider's call answers the effects runner: how it failed ([`CallError`]: transient, worth another
//! attempt, or permanent), or what it produced ([`Produced`], recorded in `effect.succeeded` for the policies that
//! act on it). The providers' clients answer in these terms; the runner decides retries from them.

use serde::{Deserialize, Serialize};

use crate::tasks::RepoName;

/// Why a call failed, as the provider client sees it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// Worth another attempt: 5xx, a timeout, a refused connection, 429 or a rate limit. `retry_after`: what
    /// the provider asked for.
    #[error("{message}")]
    Transient {
        message: String,
        retry_after: Option<std::time::Duration>,
    },
    /// Another attempt would fail the same way: a 4xx other than 429, a missing credential.
    #[error("{message}")]
    Permanent { message: String },
}

/// What a successful call produced, for the policies that act on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Produced {
    PullRequest {
        repo: RepoName,
        number: u64,
        url: String,
        /// False when it was already open (a repeat, or a human opened it).
        opened: bool,
    },
    Comment {
        url: String,
        /// False when a repeat found the comment already there.
        posted: bool,
    },
    Message {
        chat: i64,
        message_id: i64,
    },
    /// A pull request merged: `merged` false when it already was (a repeat after a crash, or a person merged
    /// it first); `sha` the merge commit, when GitHub names one.
    Merge {
        number: u64,
        merged: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sha: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        method: Option<String>,
    },
    /// A merge the provider refused because the pull request is `behind` its base or `dirty` (conflicting with
    /// it; GitLab's words: `need_rebase`, `conflict`), as the provider said after the refusal: not merged, and not
    /// a person's business yet: the merge queue brings it up to date and merges its new head (`landing::queue`).
    Unmerged {
        number: u64,
        state: String,
        message: String,
    },
    /// A pull request put into its base's merge queue (GitHub's own; GitLab's merge train), which merges it:
    /// `enqueued` false when it was in the queue already (a repeat after a crash); `position` the provider's, when
    /// it said.
    Enqueued {
        number: u64,
        enqueued: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        position: Option<u64>,
    },
    /// A message posted where a provider names it by its conversation and its own id (Slack: the channel and
    /// the message's `ts`, which a thread's replies name as their root).
    Posted {
        conversation: String,
        message: String,
    },
    /// A Linear issue's state after the call; `moved` false when it was there already.
    State {
        name: String,
        moved: bool,
    },
    /// A branch of pidevops's (`pidevops/<task>`) after its deletion was asked for: `deleted` false when it was
    /// gone already, or kept (`kept` says why: its head is not a commit pidevops pushed, so someone else's work
    /// is on it).
    Branch {
        branch: String,
        deleted: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kept: Option<String>,
    },
    Done,
}
