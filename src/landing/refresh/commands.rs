//! The board commands a refresh ends in: its push recorded (`task.refreshed`), held for the repository's check,
//! a conflict handed to an agent, or a person flagged; and a due branch found current already (`refresh.current`).
//! A command the task refuses now (it moved on meanwhile) is logged, not an error.

use anyhow::Context;

use serde::{Deserialize, Serialize};

use super::{RefreshProgress, Refresher, ACTOR, CURRENT};
use crate::board::BoardError;
use crate::domain::{EventType, NewEvent, Source};
use crate::eventlog::EventLog;
use crate::tasks::{Command, CommitSha, Conflict, Reason, RefreshCheck, RefreshMode, TaskId};

/// `refresh.current`: task `task`'s branch at `head` holds `base` already (a `refresh.due` asked for it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Current {
    pub task: TaskId,
    pub head: String,
    pub base: String,
}

impl Current {
    /// `refresh-current:<task>:<head>:<base>`: once per head and base (the tasks projector reads the task from it).
    pub fn key(&self) -> String {
        format!(
            "refresh-current:{}:{}:{}",
            self.task,
            self.head.to_ascii_lowercase(),
            self.base.to_ascii_lowercase()
        )
    }

    /// Appends it to `log` (once per key); whether it was new.
    pub async fn record(&self, log: &EventLog, poller: Option<&str>) -> anyhow::Result<bool> {
        let key = self.key();
        let appended = log
            .append(self.event(poller)?)
            .await
            .with_context(|| format!("recording {key}"))?;
        Ok(!appended.duplicate)
    }

    /// The event, pidevops's own: the refresh loop's (its git found the branch holding the base), or a host's
    /// `poller`'s (the host no longer finds the review request behind or in conflict: a person brought it up to
    /// date, on a repository pidevops does not refresh).
    fn event(&self, poller: Option<&str>) -> anyhow::Result<NewEvent> {
        let mut event = NewEvent::new(
            Source::Pidevops,
            EventType::from_stored(CURRENT.to_owned()),
            self.key(),
            "application/json",
            bytes::Bytes::from(serde_json::to_vec(self).context("encoding refresh.current")?),
        );
        if let Some(poller) = poller {
            event
                .meta
                .insert("poller".to_owned(), serde_json::Value::from(poller));
        }
        Ok(event)
    }
}

impl Refresher {
    /// Records that `id`'s branch at `head` holds `base` already: the board's `behind` mark is cleared.
    pub(super) async fn current(
        &self,
        id: TaskId,
        head: &CommitSha,
        base: &str,
    ) -> anyhow::Result<()> {
        let current = Current {
            task: id,
            head: head.as_str().to_owned(),
            base: base.to_owned(),
        };
        current.record(&self.log, None).await?;
        Ok(())
    }

    pub(super) async fn record(
        &self,
        id: TaskId,
        from: &CommitSha,
        to: &str,
        base: &str,
        strategy: RefreshMode,
        progress: &mut RefreshProgress,
    ) -> anyhow::Result<()> {
        let command = Command::RecordRefresh {
            from: from.clone(),
            to: CommitSha::new(to).context("git named the refreshed commit")?,
            base: CommitSha::new(base).context("git named the base")?,
            strategy,
        };
        match self.lander.board.execute(id, &command, ACTOR).await {
            Ok(outcome) => {
                if !outcome.appended.is_empty() {
                    progress.refreshed += 1;
                }
                Ok(())
            }
            // The task moved on meanwhile (merged, sent back, cancelled): its refreshed branch is not recorded.
            Err(BoardError::Refused(refused)) => {
                tracing::info!(task = %id, %refused, "refresh not recorded");
                Ok(())
            }
            Err(error) => Err(error).with_context(|| format!("recording {id}'s refresh")),
        }
    }

    /// A conflict handed to an agent (`Command::ResolveConflict`): an attempt of its own kind, or, when this very
    /// conflict was handed over before or no attempt can be added, a person flagged with the files named.
    pub(super) async fn hand_over(
        &self,
        id: TaskId,
        conflict: Conflict,
        progress: &mut RefreshProgress,
    ) -> anyhow::Result<()> {
        let command = Command::ResolveConflict {
            conflict: Box::new(conflict),
        };
        match self.lander.board.execute(id, &command, ACTOR).await {
            Ok(outcome) if outcome.appended.is_empty() => Ok(()),
            Ok(outcome) => {
                if outcome.task.conflict().is_some() {
                    tracing::info!(task = %id, "a refresh conflicted: an agent resolves it");
                    progress.resolving += 1;
                } else if let Some(flag) = outcome.task.needs_human() {
                    tracing::warn!(task = %id, why = flag.reason.as_str(), "a refresh needs a person");
                    progress.flagged += 1;
                }
                Ok(())
            }
            Err(BoardError::Refused(refused)) => {
                tracing::info!(task = %id, %refused, "conflict not handed over");
                Ok(())
            }
            Err(error) => Err(error).with_context(|| format!("handing {id}'s conflict over")),
        }
    }

    /// A refresh held for the repository's check (`Command::CheckRefresh`): an attempt of its own kind runs it and
    /// pushes, or, when this very refresh was held before or no attempt can be added, a person is flagged.
    pub(super) async fn hold(
        &self,
        id: TaskId,
        check: RefreshCheck,
        progress: &mut RefreshProgress,
    ) -> anyhow::Result<()> {
        let command = Command::CheckRefresh {
            check: Box::new(check),
        };
        match self.lander.board.execute(id, &command, ACTOR).await {
            Ok(outcome) if outcome.appended.is_empty() => Ok(()),
            Ok(outcome) => {
                if outcome.task.refresh_check().is_some() {
                    tracing::info!(task = %id, "a refresh waits for the repository's check");
                    progress.checking += 1;
                } else if let Some(flag) = outcome.task.needs_human() {
                    tracing::warn!(task = %id, why = flag.reason.as_str(), "a refresh needs a person");
                    progress.flagged += 1;
                }
                Ok(())
            }
            Err(BoardError::Refused(refused)) => {
                tracing::info!(task = %id, %refused, "refresh not held for its check");
                Ok(())
            }
            Err(error) => {
                Err(error).with_context(|| format!("holding {id}'s refresh for its check"))
            }
        }
    }

    pub(in crate::landing) async fn flag(
        &self,
        id: TaskId,
        why: &str,
        progress: &mut RefreshProgress,
    ) -> anyhow::Result<()> {
        tracing::warn!(task = %id, why, "a refresh needs a person");
        let command = Command::FlagNeedsHuman {
            reason: Reason::summarize(why),
        };
        match self.lander.board.execute(id, &command, ACTOR).await {
            Ok(outcome) => {
                if !outcome.appended.is_empty() {
                    progress.flagged += 1;
                }
                Ok(())
            }
            Err(BoardError::Refused(refused)) => {
                tracing::info!(task = %id, %refused, "task not flagged");
                Ok(())
            }
            Err(error) => Err(error).with_context(|| format!("flagging {id}")),
        }
    }
}
