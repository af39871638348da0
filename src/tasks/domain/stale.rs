//! A task in review that nobody has touched for its repository's age (`[repos."o/n"] stale_after_h`): its source
//! is reminded once, or its pull request is closed and the task cancelled (`stale_action`), once per review
//! episode. An episode starts with each submission for review (a new push); `went_stale` ends it.
//!
//! "Touched" is the task's own stream: its last event's time ([`Task::updated_at`]). Everything pidevops records
//! about a task in review is there: a passing check, an approval, a comment addressed to pidevops, a follow-up,
//! a link. What a code host says that pidevops does not record (a stranger's comment, a push by hand) is not.
//!
//! `decide` records it (`Command::MarkStale`, `decision/mod.rs`) and `evolve` ends the episode; this module names
//! no other part of the aggregate, so it closes no cycle among them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::super::values::{Column, Reason, TaskKind};
use super::{Command, Task};

/// The longest age a repository may set: a year.
pub const MAX_STALE_AFTER_H: u32 = 24 * 366;

/// What a stale review gets (`[repos."o/n"] stale_action`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum StaleAction {
    /// One message where the task came from (its Telegram chat, Slack thread, Linear or GitHub issue).
    #[default]
    Remind,
    /// Its pull request closed with a comment saying why, and the task cancelled with the same reason.
    Close,
}

impl StaleAction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Remind => "remind",
            Self::Close => "close",
        }
    }
}

/// A repository's rule: after `after_h` hours (1 to [`MAX_STALE_AFTER_H`]) without activity, `action`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaleRule {
    pub after_h: u32,
    pub action: StaleAction,
}

impl StaleRule {
    /// Whether `task` is due under this rule at `now`: a task (not a plan) in review with a review request,
    /// not flagged stale since its last submission, its last event `after_h` hours old or older.
    pub fn is_due(&self, task: &Task, now: DateTime<Utc>) -> bool {
        task.column == Column::InReview
            && task.kind == TaskKind::Task
            && task.stale_since.is_none()
            && match self.action {
                StaleAction::Remind => task.review_request().is_some(),
                // Only `effects:github` closes: a GitLab merge request is left open, so its task is not cancelled.
                StaleAction::Close => task
                    .links
                    .get(super::super::values::GITHUB_PR)
                    .is_some_and(|pr| pr.repo.as_str().eq_ignore_ascii_case(task.repo.as_str())),
            }
            && now.signed_duration_since(task.updated_at)
                >= chrono::Duration::hours(i64::from(self.after_h))
    }

    /// The command that records it, for the task as seen (its last activity, so a later one makes it a no-op).
    pub fn command(&self, task: &Task) -> Command {
        Command::MarkStale {
            after_h: self.after_h,
            action: self.action,
            last_activity: task.updated_at,
        }
    }
}

/// Why a stale task was cancelled: on its page, in its source's notice and in its pull request's comment.
pub fn close_reason(task: &Task, after_h: u32) -> Reason {
    let what = task
        .review_request()
        .map_or_else(|| "its review".to_owned(), |n| format!("pull request #{n}"));
    Reason::summarize(&format!(
        "no activity in review for {after_h} h: {what} closed (stale_action = \"close\")"
    ))
}

#[cfg(test)]
#[path = "tests/stale.rs"]
mod tests;
