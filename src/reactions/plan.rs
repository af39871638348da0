//! Reactions on a plan's pull request (`[plans] land = "combined"`, branch `pidevops/<plan>`), already admitted
//! (`HostRules::admit`: its repository, the plan's pull request, not a fork, a trusted reviewer).
//!
//! - merged: each item of the last combination is completed, and the plan follows them (the plans loop's
//!   roll-up); an item that could not be (sent back meanwhile) flags the plan, naming it.
//! - closed without merging: the plan is flagged for a person; its items are not cancelled behind their back.
//! - a failed check on the plan's last combined commit, or changes requested: the plan is flagged with what was
//!   said. Which item to send back is a person's call (`retry` on the item with what to change); the items are
//!   combined again when all are in review.
//! - a passing check and a trusted approval of the last combined commit are the plan's landing facts (auto-land),
//!   a dismissed review withdraws its approval. Line comments change nothing (they belong to an item's attempt,
//!   and which one is a person's call).
//!
//! A result counts only for the commit pidevops last combined and pushed for the plan (`task.combined`, or that
//! combination brought up to date with the base, `task.refreshed`, in its stream), never one somebody else pushed
//! to the branch.

use anyhow::Context;
use chrono::Utc;

use super::{HostRules, Reaction, Reactions, ReactionsProgress, UNKNOWN_COMMIT_GRACE};
use crate::board::{BoardError, Loaded};
use crate::eventlog::StoredEvent;
use crate::loops::follow::Next;
use crate::tasks::{Column, Command, CommitSha, FactName, Reason, Task, TaskEvent, TaskId};

/// Where a commit stands among those pidevops combined for the plan.
enum Combined {
    Latest,
    Earlier,
    Unknown,
}

impl Reactions {
    /// What `reaction` (admitted, about the plan `loaded`) does.
    pub(super) async fn plan_reaction(
        &self,
        event: &StoredEvent,
        loaded: &Loaded,
        reaction: Reaction,
        host: &dyn HostRules,
        progress: &mut ReactionsProgress,
    ) -> anyhow::Result<Next> {
        let actor = host.source().as_str();
        let plan = &loaded.task;
        let id = plan.id();
        let command = match reaction {
            Reaction::None | Reaction::Ignore { .. } | Reaction::ReviewComment { .. } => {
                progress.ignored += 1;
                return Ok(Next::Done);
            }
            Reaction::Merged { by, .. } => {
                return self.plan_merged(loaded, &by, actor, progress).await
            }
            Reaction::Dequeued { reason, .. } => flag(host.dequeued(&reason)),
            Reaction::ClosedUnmerged { by, .. } => flag(format!(
                "its pull request was closed without merging by {by}; its items wait in review. Reopen it, or \
                 cancel the plan (and its items with it)"
            )),
            Reaction::Reviewed {
                changes_requested: false,
                ..
            } => {
                progress.ignored += 1;
                return Ok(Next::Done);
            }
            Reaction::Reviewed { by, body, .. } => flag(format!(
                "{by} requested changes on its pull request: {body}. Which item to send back is a person's call: \
                 retry that item with what to change; the items are combined again when all are in review"
            )),
            Reaction::ChecksFailed { sha, summary, .. } => {
                let short = sha.get(..7).unwrap_or(&sha).to_owned();
                match combined(loaded, &sha) {
                    Combined::Latest => flag(format!(
                        "CI failed on its combined commit {short}: {summary}. Which item to send back is a \
                         person's call: retry that item with what to fix; the items are combined again when all \
                         are in review"
                    )),
                    Combined::Earlier => return self.nothing(progress),
                    Combined::Unknown => return self.unknown(event, plan, &short, progress),
                }
            }
            Reaction::ChecksPassed { sha, name, .. } => {
                match self.fact(event, loaded, &sha, progress, |sha| {
                    FactName::new("check name", &name)
                        .map(|name| Command::RecordCheckPassed { sha, name })
                })? {
                    Ok(command) => command,
                    Err(next) => return Ok(next),
                }
            }
            Reaction::Approved { by, sha, .. } => {
                match self.fact(event, loaded, &sha, progress, |sha| {
                    FactName::new("reviewer", &by).map(|by| Command::RecordApproval { by, sha })
                })? {
                    Ok(command) => command,
                    Err(next) => return Ok(next),
                }
            }
            Reaction::ReviewDismissed { by, .. } => match FactName::new("reviewer", &by) {
                Ok(by) => Command::WithdrawApproval { by },
                Err(error) => {
                    progress.ignored += 1;
                    self.record_ignored(event, id, &error.to_string()).await?;
                    return Ok(Next::Done);
                }
            },
        };
        self.run(id, &command, actor, progress).await?;
        Ok(Next::Done)
    }

    /// A landing fact about `sha`: the command when `sha` is the plan's last combined commit and it is in review;
    /// otherwise what the event comes to (`Err`: the next step for the follower).
    fn fact(
        &self,
        event: &StoredEvent,
        loaded: &Loaded,
        sha: &str,
        progress: &mut ReactionsProgress,
        command: impl FnOnce(CommitSha) -> Result<Command, crate::tasks::landing::FactError>,
    ) -> anyhow::Result<Result<Command, Next>> {
        let plan = &loaded.task;
        let parsed = CommitSha::new(sha).and_then(command);
        let command = match parsed {
            Ok(command) => command,
            Err(error) => {
                progress.ignored += 1;
                tracing::info!(plan = %plan.id(), %error, "a landing fact that cannot be recorded");
                return Ok(Err(Next::Done));
            }
        };
        let short = sha.get(..7).unwrap_or(sha);
        Ok(match combined(loaded, sha) {
            Combined::Latest if plan.column() == Column::InReview => Ok(command),
            Combined::Latest | Combined::Earlier => Err(self.nothing(progress)?),
            Combined::Unknown => Err(self.unknown(event, plan, short, progress)?),
        })
    }

    /// The plan's pull request merged: its combined items are done (the commands by `actor`, its host).
    async fn plan_merged(
        &self,
        loaded: &Loaded,
        by: &str,
        actor: &str,
        progress: &mut ReactionsProgress,
    ) -> anyhow::Result<Next> {
        let plan = &loaded.task;
        let Some(combination) = plan.plan().and_then(|p| p.combined.as_ref()) else {
            let command = flag(format!(
                "its pull request was merged by {by}, but pidevops recorded no combination of its items: a person \
                 completes or cancels them"
            ));
            self.run(plan.id(), &command, actor, progress).await?;
            return Ok(Next::Done);
        };
        let mut not_done: Vec<TaskId> = Vec::new();
        for item in &combination.items {
            match self
                .board
                .execute(item.task, &Command::Complete, actor)
                .await
            {
                Ok(outcome) => {
                    if !outcome.appended.is_empty() {
                        progress.applied += 1;
                        tracing::info!(task = %item.task, plan = %plan.id(), "completed with its plan");
                    }
                }
                Err(BoardError::Refused(refused)) => {
                    tracing::info!(task = %item.task, %refused, "not completed with its plan");
                    not_done.push(item.task);
                }
                Err(error) => {
                    return Err(error).with_context(|| format!("completing {}", item.task))
                }
            }
        }
        if !not_done.is_empty() {
            let ids: Vec<String> = not_done.iter().map(ToString::to_string).collect();
            let command = flag(format!(
                "its pull request was merged by {by} while {} had moved on (sent back or closed since it was \
                 combined): a person decides what is left to do",
                ids.join(", ")
            ));
            self.run(plan.id(), &command, actor, progress).await?;
        }
        Ok(Next::Done)
    }

    /// Runs `command` on `id` as `actor` (the event's host); a refusal (the plan moved on) is not an error.
    async fn run(
        &self,
        id: TaskId,
        command: &Command,
        actor: &str,
        progress: &mut ReactionsProgress,
    ) -> anyhow::Result<()> {
        match self.board.execute(id, command, actor).await {
            Ok(outcome) => {
                if !outcome.appended.is_empty() {
                    progress.applied += 1;
                    tracing::info!(plan = %id, command = command.name(), source = actor, "reacted to a code host");
                } else {
                    progress.ignored += 1;
                }
                Ok(())
            }
            Err(BoardError::Refused(refused)) => {
                tracing::info!(plan = %id, %refused, source = actor, "a code host's event changes nothing");
                progress.ignored += 1;
                Ok(())
            }
            Err(error) => Err(error).context("applying a reaction to a plan"),
        }
    }

    fn nothing(&self, progress: &mut ReactionsProgress) -> anyhow::Result<Next> {
        progress.ignored += 1;
        Ok(Next::Done)
    }

    /// A result for a commit pidevops never combined: while the plan waits for its combination to be recorded (in
    /// review, the last one stale or none) it may be that push, so the next tick looks again, for a while.
    fn unknown(
        &self,
        event: &StoredEvent,
        plan: &Task,
        short: &str,
        progress: &mut ReactionsProgress,
    ) -> anyhow::Result<Next> {
        let combining = plan.column() == Column::InReview
            && !plan
                .plan()
                .and_then(|p| p.combined.as_ref())
                .is_some_and(|c| c.current);
        if combining && Utc::now() - event.recorded_at < UNKNOWN_COMMIT_GRACE {
            return Ok(Next::Wait(format!(
                "a result for {short} waits while {}'s items are combined",
                plan.id()
            )));
        }
        tracing::info!(plan = %plan.id(), sha = short, "a result for a commit pidevops did not combine: ignored");
        self.nothing(progress)
    }
}

fn flag(why: String) -> Command {
    Command::FlagNeedsHuman {
        reason: Reason::summarize(&why),
    }
}

/// Where `sha` stands among the commits pidevops pushed as the plan's branch (combined, or refreshed), from its
/// stream.
fn combined(loaded: &Loaded, sha: &str) -> Combined {
    let commits: Vec<CommitSha> = loaded
        .events
        .iter()
        .filter_map(|e| match TaskEvent::from_stored(&e.event_type, &e.body) {
            Ok(TaskEvent::Combined { commit, .. }) => Some(commit),
            // Its combination brought up to date with the base by pidevops's refresh: the branch's head now.
            Ok(TaskEvent::Refreshed { to, .. }) => Some(to),
            _ => None,
        })
        .collect();
    let matches = |c: &CommitSha| c.as_str().eq_ignore_ascii_case(sha);
    match commits.last() {
        Some(last) if matches(last) => Combined::Latest,
        _ if commits.iter().any(matches) => Combined::Earlier,
        _ => Combined::Unknown,
    }
}
