//! The `combine` loop (`[plans] land = "combined"`): when every open item of a plan is in review, their work is
//! merged into one branch `pidevops/<plan>` and recorded on the plan (`task.combined`), from which `effects:github`
//! opens the plan's one pull request.
//!
//! A singleton loop reads the log after its checkpoint and looks at a plan again on:
//! - `task.rolled_up` to in review (every open item is in review; an item sent back and in review again rolls the
//!   plan out of review and back, so a new attempt means combining again);
//! - `task.cancelled` of an item (the set of open items changed);
//! - `task.needs_human_cleared` on a plan (a person resolved a conflict, or wants a failed push tried again).
//!
//! It acts on the plan as it stands when handled, never on the event's snapshot: the plan must be in review with
//! every open item in review. Each item contributes the commit pidevops recorded for the run that put it in
//! review (its `run.succeeded`), never the remote branch's head. Nothing is done when the plan's current
//! combination already has these commits, so the event seen again (a crash before the checkpoint moved) redoes
//! nothing; a crash between the push and the record redoes the merges and the push, and records once. The git
//! work is the dispatcher's workspaces' ([`Combiner`], a narrow handle); a conflict, a recorded commit gone from
//! the remote, or a failed fetch or push flags the plan for a person with what happened, and the loop moves on
//! (a person clears the flag to have it tried again).

use std::time::Duration;

use anyhow::Context;

use crate::board::{Board, BoardError, Loaded};
use crate::dispatch::runs::{self, RunEvent};
use crate::dispatch::workspace::{CombineRequest, Combined, Combiner};
use crate::domain::Source;
use crate::eventlog::{EventLog, StoredEvent};
use crate::loops::follow::{AsStored, Follow, Follower, Next, Wanted};
use crate::tasks::{Column, CombinedItem, Command, CommitSha, Reason, TaskEvent, TaskId};

/// The loop's name and its checkpoint's.
pub const COMBINE: &str = "combine";
/// Who the loop's commands are from.
const ACTOR: &str = "combine";
/// The longest one combination may take (fetch, merges, push): well inside the loop's stale threshold (60 s).
pub const COMBINE_TIMEOUT: Duration = Duration::from_secs(45);

/// What one tick did, for `/health`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CombineProgress {
    pub position: i64,
    /// Combinations pushed and recorded.
    pub combined: u64,
    /// Plans flagged: a conflict, a missing commit, a failed push.
    pub flagged: u64,
    #[serde(skip)]
    pub out_of_time: bool,
}

#[derive(Clone, Debug)]
pub struct Combine {
    log: EventLog,
    board: Board,
    combiner: Combiner,
    follow: Follow<StoredEvent>,
}

/// Where a plan stands for combining.
enum Ready {
    /// Not now (not in review, an item not in review, already combined at these commits).
    No,
    /// Combine these items at these commits.
    Items(Vec<CombinedItem>),
    /// A person must look first, and why.
    Flag(String),
}

impl Combine {
    pub fn new(log: EventLog, board: Board, combiner: Combiner) -> Self {
        Self {
            log,
            board,
            combiner,
            follow: Follow::default(),
        }
    }

    /// Handles what was committed since the checkpoint (see [`crate::loops::follow`]).
    pub async fn tick(&self) -> anyhow::Result<CombineProgress> {
        let followed = self.follow.tick(self.log.store(), self).await?;
        Ok(CombineProgress {
            position: followed.position,
            out_of_time: followed.out_of_time,
            ..followed.tally
        })
    }

    async fn handle_event(
        &self,
        event: &StoredEvent,
        progress: &mut CombineProgress,
    ) -> anyhow::Result<()> {
        if event.source != Source::Pidevops.as_str() {
            return Ok(());
        }
        let Some(id) = event.stream.as_deref().and_then(TaskId::from_stream) else {
            return Ok(());
        };
        let plan = match event.event_type.as_str() {
            "task.rolled_up" | "task.needs_human_cleared" | "task.cancelled" => {
                let task_event = TaskEvent::from_stored(&event.event_type, &event.body)
                    .with_context(|| format!("task:{id}"))?;
                match task_event {
                    TaskEvent::RolledUp {
                        column: Column::InReview,
                        ..
                    }
                    | TaskEvent::NeedsHumanCleared { .. } => id,
                    TaskEvent::Cancelled { .. } => match self.board.load(id).await? {
                        Some(item) => match item.task.parent() {
                            Some(plan) => plan,
                            None => return Ok(()),
                        },
                        None => return Ok(()),
                    },
                    TaskEvent::RolledUp { .. } => return Ok(()),
                    TaskEvent::Created(_)
                    | TaskEvent::Approved { .. }
                    | TaskEvent::Rejected { .. }
                    | TaskEvent::Started { .. }
                    | TaskEvent::Resumed { .. }
                    | TaskEvent::SubmittedForReview { .. }
                    | TaskEvent::Completed { .. }
                    | TaskEvent::Retried { .. }
                    | TaskEvent::Archived { .. }
                    | TaskEvent::FlaggedNeedsHuman { .. }
                    | TaskEvent::SpecUpdated { .. }
                    | TaskEvent::FollowUpAttached { .. }
                    | TaskEvent::FollowUpsDelivered { .. }
                    | TaskEvent::TicketSeen { .. }
                    | TaskEvent::PriorityChanged { .. }
                    | TaskEvent::LinksAttached { .. }
                    | TaskEvent::AttemptReturned { .. }
                    | TaskEvent::AgentChosen { .. }
                    | TaskEvent::TriageEnded { .. }
                    | TaskEvent::PlanProposed { .. }
                    | TaskEvent::PlanApproved { .. }
                    | TaskEvent::PlanRejected { .. }
                    | TaskEvent::ChildrenCreated { .. }
                    | TaskEvent::CheckPassed { .. }
                    | TaskEvent::ReviewApproved { .. }
                    | TaskEvent::ApprovalWithdrawn { .. }
                    | TaskEvent::Combined { .. }
                    | TaskEvent::Landed { .. }
                    | TaskEvent::MergeQueued { .. }
                    | TaskEvent::Refreshed { .. }
                    | TaskEvent::WentStale { .. }
                    | TaskEvent::ConflictFound { .. }
                    | TaskEvent::ConflictUnresolved { .. }
                    | TaskEvent::RefreshCheckDue { .. }
                    | TaskEvent::RefreshCheckFailed { .. } => return Ok(()),
                }
            }
            _ => return Ok(()),
        };
        self.combine(plan, progress).await
    }

    /// Combines the plan's items if it is ready for it (see the module doc).
    async fn combine(&self, plan: TaskId, progress: &mut CombineProgress) -> anyhow::Result<()> {
        let Some(loaded) = self.board.load(plan).await? else {
            return Ok(());
        };
        let items = match self.ready(&loaded).await? {
            Ready::No => return Ok(()),
            Ready::Flag(why) => return self.flag(plan, &why, progress).await,
            Ready::Items(items) => items,
        };
        let request = CombineRequest {
            repo: loaded.task.repo().clone(),
            plan,
            branch: plan.branch(),
            items: items
                .iter()
                .map(|i| (i.task, i.commit.as_str().to_owned()))
                .collect(),
        };
        let combining = tokio::time::timeout(COMBINE_TIMEOUT, self.combiner.combine(&request));
        let combined = match combining.await {
            Ok(Ok(combined)) => combined,
            Ok(Err(error)) => {
                let why = format!("combining its items failed: {error}");
                return self.flag(plan, &why, progress).await;
            }
            Err(_) => {
                let secs = COMBINE_TIMEOUT.as_secs();
                let why = format!(
                    "combining its items took over {secs} s (fetch, merges, push): stopped"
                );
                return self.flag(plan, &why, progress).await;
            }
        };
        match combined {
            Combined::Pushed { commit, base } => {
                let command = Command::RecordCombined {
                    commit: CommitSha::new(&commit).context("the combined commit")?,
                    base: CommitSha::new(&base).context("the base commit")?,
                    items,
                };
                match self.board.execute(plan, &command, ACTOR).await {
                    Ok(outcome) => {
                        if !outcome.appended.is_empty() {
                            progress.combined += 1;
                            tracing::info!(%plan, commit = &commit[..7], "plan combined");
                        }
                        Ok(())
                    }
                    // The plan moved on meanwhile (an item sent back): it is combined again when it is back.
                    Err(BoardError::Refused(refused)) => {
                        tracing::info!(%plan, %refused, "combination not recorded");
                        Ok(())
                    }
                    Err(error) => {
                        Err(error).with_context(|| format!("recording {plan}'s combination"))
                    }
                }
            }
            Combined::Conflict {
                item,
                files,
                total,
                with,
            } => {
                let mut named = files.join(", ");
                if total > files.len() {
                    named.push_str(&format!(" and {} more", total - files.len()));
                }
                let against = if with.is_empty() {
                    "the items merged before it".to_owned()
                } else {
                    with.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let why = format!(
                    "its items conflict: {item} does not merge with {against} in {named}; nothing was pushed. \
                     Send one of them back with what to change (retry), or cancel one; the items are combined \
                     again when all are in review"
                );
                self.flag(plan, &why, progress).await
            }
            Combined::Missing { item, commit } => {
                let why = format!(
                    "{item}'s recorded commit {} is neither in pidevops's mirror nor on the remote (its branch was \
                     moved); nothing was pushed. Send {item} back (retry) for a new attempt",
                    &commit[..7]
                );
                self.flag(plan, &why, progress).await
            }
        }
    }

    /// Whether the plan is to be combined now, with which commits.
    async fn ready(&self, loaded: &Loaded) -> anyhow::Result<Ready> {
        let task = &loaded.task;
        let Some(state) = task.plan().filter(|_| task.is_approved_plan()) else {
            return Ok(Ready::No);
        };
        if task.column() != Column::InReview {
            return Ok(Ready::No);
        }
        let mut items = Vec::new();
        for child in &state.children {
            let Some(item) = self.board.load(*child).await? else {
                continue;
            };
            match item.task.column() {
                Column::InReview => {}
                column if column.is_open() => return Ok(Ready::No),
                _ => continue,
            }
            match self.recorded_commit(&item).await? {
                Some(commit) => items.push(CombinedItem {
                    task: *child,
                    commit,
                }),
                None => {
                    return Ok(Ready::Flag(format!(
                        "{child} is in review but pidevops recorded no pushed commit for it; it cannot be combined"
                    )))
                }
            }
        }
        if items.is_empty() {
            return Ok(Ready::No);
        }
        let done = state
            .combined
            .as_ref()
            .is_some_and(|c| c.current && c.items == items);
        Ok(if done { Ready::No } else { Ready::Items(items) })
    }

    /// The commit pidevops recorded for the run that put the item in review (its `run.succeeded`), from the log.
    async fn recorded_commit(&self, item: &Loaded) -> anyhow::Result<Option<CommitSha>> {
        let submitted = item.events.iter().rev().find_map(|e| {
            match TaskEvent::from_stored(&e.event_type, &e.body) {
                Ok(TaskEvent::SubmittedForReview { run, .. }) => Some(run),
                _ => None,
            }
        });
        let Some(run) = submitted else {
            return Ok(None);
        };
        let stream = self
            .log
            .store()
            .read_stream(&runs::stream(run))
            .await
            .with_context(|| format!("reading run {run}"))?;
        Ok(stream.iter().rev().find_map(|recorded| {
            match serde_json::from_slice::<RunEvent>(&recorded.body) {
                Ok(RunEvent::Succeeded { commit, .. }) => CommitSha::new(&commit).ok(),
                _ => None,
            }
        }))
    }

    async fn flag(
        &self,
        plan: TaskId,
        why: &str,
        progress: &mut CombineProgress,
    ) -> anyhow::Result<()> {
        tracing::warn!(%plan, why, "a plan's combination needs a person");
        let command = Command::FlagNeedsHuman {
            reason: Reason::summarize(why),
        };
        match self.board.execute(plan, &command, ACTOR).await {
            Ok(outcome) => {
                if !outcome.appended.is_empty() {
                    progress.flagged += 1;
                }
                Ok(())
            }
            Err(BoardError::Refused(refused)) => {
                tracing::info!(%plan, %refused, "plan not flagged");
                Ok(())
            }
            Err(error) => Err(error).with_context(|| format!("flagging {plan}")),
        }
    }
}

impl Follower for Combine {
    type Prepare = AsStored;
    type Tally = CombineProgress;

    fn checkpoint(&self) -> &str {
        COMBINE
    }

    fn prepare(&self) -> AsStored {
        AsStored
    }

    /// Only task events: every other event is passed over before its body is read.
    fn bodies(&self) -> Wanted {
        crate::projectors::tasks::TASK_EVENT_BODIES.into()
    }

    async fn handle(
        &self,
        event: &StoredEvent,
        progress: &mut CombineProgress,
    ) -> anyhow::Result<Next> {
        self.handle_event(event, progress)
            .await
            .with_context(|| format!("combine: event {} ({})", event.position, event.event_type))?;
        Ok(Next::Done)
    }
}
