//! Why an attempt is being retried: what the next prompt says, whether the attempt counts, whether it resumes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::super::values::RunId;

/// Why an attempt is being retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RetryCause {
    /// The run itself failed (non-zero exit, timeout, no output, push refused). Names the run so a late report
    /// from an old run cannot fail the current one.
    RunFailed { run: RunId },
    /// The process running it died (pidevops killed or restarted, its worker gone) and the watchdog declared it
    /// lost: it counts like a failure, unless the attempt resumes from a checkpoint (`resume.rs`), which keeps it.
    Lost { run: RunId },
    /// pidevops itself stopped the run (a graceful shutdown, a deploy): not the task's fault, so the attempt is
    /// given back and it does not count as a bounce.
    Interrupted { run: RunId },
    /// The repository's own setup (`setup`, `before_run`, a missing secret) failed before the agent ran: not the
    /// agent's doing, so the attempt is given back; unlike an interruption it backs off and counts as a bounce,
    /// so a setup that keeps failing asks a human instead of looping.
    SetupFailed { run: RunId },
    /// The agent said it needs a person (`.pidevops/status.json`): the attempt counts, and the task is flagged at
    /// once with what it said.
    AgentNeedsHuman { run: RunId },
    /// The agent ran into its provider's usage or rate limit: not the work's fault, so the attempt is given back
    /// and it is no bounce; the task waits until `until` (the dispatcher's business).
    Limited { run: RunId, until: DateTime<Utc> },
    /// The run took a budget over its limit and was stopped: the attempt counts, and the task is flagged at once
    /// (a person raises the budget, or not).
    OverBudget { run: RunId },
    /// pidevops stopped the run to start it again with a follow-up that came while it ran (`on_follow_up =
    /// "restart"`): not the work's fault, so the attempt is given back and it is no bounce.
    Restarted { run: RunId },
    /// The agent asked a question (`.pidevops/question.md`) and exited: the attempt is given back, and the task
    /// waits for a person's answer (flagged at once with the question), which becomes the next run's follow-up.
    AgentAsked { run: RunId },
    /// A follow-up came for a task in review (a person asked for more on its pull request or ticket).
    FollowUp,
    /// CI failed on the pull request.
    ChecksFailed,
    /// A reviewer (or a human through the CLI) asked for another attempt.
    ChangesRequested,
}
