//! The `land` loop: `land = "auto"` on a repository that is not on GitHub. A singleton reads the log after its
//! checkpoint and lands a task on:
//! - `task.submitted_for_review` (the dispatcher pushes only after the repository's `check` passed, so a task in
//!   review has passed it);
//! - `task.needs_human_cleared` (a person resolved what stopped an earlier landing and wants it tried again).
//!
//! It acts on the task as it stands when handled: in review, not waiting for a person, its repository `auto` and
//! not on GitHub. Landing is idempotent (see the parent module), so an event seen again after a crash lands nothing
//! twice. A conflict, a missing commit or a failed fetch or push flags the task for a person with what happened
//! (it stays in review); a person lands it by hand, sends it back, or clears the flag to have it tried again.

use anyhow::Context;

use super::{LandError, Lander};
use crate::board::BoardError;
use crate::domain::Source;
use crate::eventlog::{Bodies, EventLog, StoredEvent};
use crate::loops::follow::{AsStored, Follow, Follower, Next, Wanted};
use crate::tasks::{Column, Command, LandMode, Reason, TaskId};

/// The loop's name and its checkpoint's.
pub const LAND: &str = "land";
/// Who the loop's commands are from.
const ACTOR: &str = "land";

/// What one tick did, for `/health`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LandProgress {
    pub position: i64,
    /// Tasks landed and recorded.
    pub landed: u64,
    /// Tasks flagged: a conflict, a missing commit, a failed fetch or push.
    pub flagged: u64,
    #[serde(skip)]
    pub out_of_time: bool,
}

#[derive(Clone, Debug)]
pub struct AutoLand {
    log: EventLog,
    lander: Lander,
    follow: Follow<StoredEvent>,
}

impl AutoLand {
    pub fn new(log: EventLog, lander: Lander) -> Self {
        Self {
            log,
            lander,
            follow: Follow::default(),
        }
    }

    /// Handles what was committed since the checkpoint (see [`crate::loops::follow`]).
    pub async fn tick(&self) -> anyhow::Result<LandProgress> {
        let followed = self.follow.tick(self.log.store(), self).await?;
        Ok(LandProgress {
            position: followed.position,
            out_of_time: followed.out_of_time,
            ..followed.tally
        })
    }

    async fn handle_event(
        &self,
        event: &StoredEvent,
        progress: &mut LandProgress,
    ) -> anyhow::Result<()> {
        if event.source != Source::Pidevops.as_str()
            || !matches!(
                event.event_type.as_str(),
                "task.submitted_for_review" | "task.needs_human_cleared"
            )
        {
            return Ok(());
        }
        let Some(id) = event.stream.as_deref().and_then(TaskId::from_stream) else {
            return Ok(());
        };
        let board = &self.lander.board;
        let Some(loaded) = board.load(id).await? else {
            return Ok(());
        };
        let task = &loaded.task;
        let auto = board.config().land_for(task.repo()).mode == LandMode::Auto;
        if !auto
            || self.lander.lands_by_review(task)
            || task.is_plan()
            || task.column() != Column::InReview
            || task.needs_human().is_some()
        {
            return Ok(());
        }
        let why = match self.lander.land(id, ACTOR).await {
            Ok(landed) => {
                if !landed.outcome.appended.is_empty() {
                    progress.landed += 1;
                }
                return Ok(());
            }
            // The task moved on meanwhile (sent back, cancelled): nothing to land now.
            Err(LandError::Board(BoardError::Refused(refused))) => {
                tracing::info!(task = %id, %refused, "landing not recorded");
                return Ok(());
            }
            Err(LandError::Board(error)) => {
                return Err(error).with_context(|| format!("landing {id}"))
            }
            Err(error) => format!("land = \"auto\" could not land it: {error}"),
        };
        tracing::warn!(task = %id, why, "a landing needs a person");
        let command = Command::FlagNeedsHuman {
            reason: Reason::summarize(&why),
        };
        match board.execute(id, &command, ACTOR).await {
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

impl Follower for AutoLand {
    type Prepare = AsStored;
    type Tally = LandProgress;

    fn checkpoint(&self) -> &str {
        LAND
    }

    fn prepare(&self) -> AsStored {
        AsStored
    }

    /// None: a submitted or cleared task is read from the board, never from the event's body.
    fn bodies(&self) -> Wanted {
        Bodies::None.into()
    }

    async fn handle(
        &self,
        event: &StoredEvent,
        progress: &mut LandProgress,
    ) -> anyhow::Result<Next> {
        self.handle_event(event, progress)
            .await
            .with_context(|| format!("land: event {} ({})", event.position, event.event_type))?;
        Ok(Next::Done)
    }
}
