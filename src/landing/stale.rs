//! The `stale_reviews` loop: a task in review that nobody has touched for its repository's `stale_after_h` gets
//! its `stale_action` once per review episode (`tasks::stale`: the rule and what "touched" means).
//!
//! Each tick reads the tasks in review from the board's read model, loads each one whose repository sets the
//! age, and judges it on its own stream by this loop's clock ([`Clock`], which only tests move). The command names
//! the last activity it judged, so one touched meanwhile records nothing; the episode's mark makes a second tick,
//! a restart or another replica record nothing either. What follows is the effects loops': the reminder where the
//! task came from, or the pull request closed (`effects:github`), each keyed by the `went_stale` event.

use anyhow::Context;

use crate::board::{Board, BoardError};
use crate::domain::clock::Clock;
use crate::projectors::tasks::{self as task_rows, TaskFilter};
use crate::tasks::{Column, RepoName, StaleAction};

/// The loop's name.
pub const STALE_REVIEWS: &str = "stale_reviews";
/// Who the loop's commands are from.
const ACTOR: &str = "stale_reviews";

/// What one tick did, for `/health`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StaleProgress {
    /// Tasks in review on a repository with `stale_after_h`.
    pub watched: u64,
    pub reminded: u64,
    pub closed: u64,
}

#[derive(Clone, Debug)]
pub struct StaleReviews {
    board: Board,
    clock: Clock,
}

impl StaleReviews {
    pub fn new(board: Board, clock: Clock) -> Self {
        Self { board, clock }
    }

    pub async fn tick(&self) -> anyhow::Result<StaleProgress> {
        let mut progress = StaleProgress::default();
        let config = self.board.config();
        if config.stale.is_empty() {
            return Ok(progress);
        }
        let filter = TaskFilter {
            column: Some(Column::InReview),
            ..TaskFilter::default()
        };
        let rows = task_rows::list(self.board.store(), &filter)
            .await
            .context("reading the tasks in review")?;
        for row in rows {
            let Some(rule) = row
                .repo
                .parse::<RepoName>()
                .ok()
                .and_then(|repo| config.stale_for(&repo))
            else {
                continue;
            };
            progress.watched += 1;
            let Some(loaded) = self.board.load(row.id).await? else {
                continue;
            };
            if !rule.is_due(&loaded.task, self.clock.now()) {
                continue;
            }
            let command = rule.command(&loaded.task);
            match self.board.execute(row.id, &command, ACTOR).await {
                Ok(outcome) if outcome.appended.is_empty() => {}
                Ok(_) => {
                    tracing::info!(task = %row.id, after_h = rule.after_h, action = rule.action.as_str(), "a review went stale");
                    match rule.action {
                        StaleAction::Remind => progress.reminded += 1,
                        StaleAction::Close => progress.closed += 1,
                    }
                }
                Err(BoardError::Refused(refused)) => {
                    tracing::info!(task = %row.id, %refused, "staleness not recorded");
                }
                Err(error) => {
                    return Err(error).with_context(|| format!("marking {} stale", row.id))
                }
            }
        }
        Ok(progress)
    }
}
