//! Why a command was refused or an event could not be applied.

use super::super::values::{Column, LinkConflict, Reason, RunId, RunPurpose, TaskId, TaskKind};
use super::MAX_FOLLOW_UPS;

/// Why a command was refused or an event could not be applied. Each message names the task, what was asked and
/// what would have been needed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    #[error("no such task; {command} needs an existing task")]
    NotFound { command: &'static str },
    #[error("{id} already exists")]
    AlreadyExists { id: TaskId },
    #[error("{id} is {column}; {command} needs {}", join(allowed))]
    WrongColumn {
        id: TaskId,
        column: Column,
        command: &'static str,
        allowed: &'static [Column],
    },
    #[error("{id} is archived; an archived task accepts no commands ({command} refused)")]
    Archived { id: TaskId, command: &'static str },
    #[error("{id} needs a human ({reason}); clear the flag before it can start")]
    NeedsHuman { id: TaskId, reason: Reason },
    #[error("{id} cannot resume: {why}")]
    NotResumable { id: TaskId, why: &'static str },
    #[error("{id} has used {attempts} of {max} attempts")]
    AttemptsExhausted { id: TaskId, attempts: u32, max: u32 },
    #[error("{id} has used {attempts} attempts, the most a task may have")]
    AttemptCap { id: TaskId, attempts: u32 },
    #[error("{id}: run {run} is not the live run ({})", current.map_or("none".to_owned(), |r| r.to_string()))]
    StaleRun {
        id: TaskId,
        run: RunId,
        current: Option<RunId>,
    },
    #[error("{id} is already linked to {link} {existing}; refusing {proposed}")]
    LinkConflict {
        id: TaskId,
        link: String,
        existing: String,
        proposed: String,
    },
    #[error("{id} has {MAX_FOLLOW_UPS} follow-ups, the most a task may have")]
    TooManyFollowUps { id: TaskId },
    #[error("{id} waits on no question (it does not need a human); {command} refused")]
    NoQuestion { id: TaskId, command: &'static str },
    #[error("{id}: follow-ups {indices} are not the oldest ones waiting ({pending}), each once, in order")]
    FollowUpOrder {
        id: TaskId,
        indices: String,
        pending: String,
    },
    #[error("{id} is a plan approved as a whole: its tasks do the work ({command} refused)")]
    PlanWork { id: TaskId, command: &'static str },
    #[error("{id} is not a plan with a proposal waiting; {command} needs one")]
    NoProposal { id: TaskId, command: &'static str },
    #[error(
        "{id}: a triage agent is rewriting it; {command} must wait until it is back in triage"
    )]
    Triaging { id: TaskId, command: &'static str },
    #[error("{id}: run {run} is a {purpose} run; {command} needs a {needs} run")]
    WrongPurpose {
        id: TaskId,
        run: RunId,
        purpose: RunPurpose,
        command: &'static str,
        needs: RunPurpose,
    },
    #[error("{id} is a {kind}; {command} is for a {needs}")]
    WrongKind {
        id: TaskId,
        kind: TaskKind,
        command: &'static str,
        needs: TaskKind,
    },
    #[error("{id}: {items} are not its items, each once")]
    NotItems { id: TaskId, items: String },
    #[error("{id} already has its tasks ({existing}); refusing {proposed}")]
    ChildrenConflict {
        id: TaskId,
        existing: String,
        proposed: String,
    },
    #[error("{id}'s merge is not queued: {why}")]
    NotQueued { id: TaskId, why: String },
    #[error("cannot apply {event} to {task}: {why}")]
    Inapplicable {
        task: String,
        event: &'static str,
        why: String,
    },
}

pub(super) fn join(columns: &[Column]) -> String {
    let names: Vec<&str> = columns.iter().map(|c| c.as_str()).collect();
    names.join(" or ")
}

impl TaskError {
    /// A link of task `id` refused a different value.
    pub fn link_conflict(id: TaskId, conflict: LinkConflict) -> Self {
        TaskError::LinkConflict {
            id,
            existing: conflict.existing_shown(),
            proposed: conflict.proposed_shown(),
            link: conflict.link,
        }
    }
}
