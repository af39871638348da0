//! Resuming an attempt where its work stopped. While an agent works, pidevops commits its worktree now and then
//! (a checkpoint: a commit on a private ref, made by pidevops's own git, recorded as `run.checkpointed`). An
//! attempt cut off by something that was not the work's fault — pidevops restarted, its worker died, its
//! provider's limit, a follow-up's restart — goes round again from its last checkpoint: the same attempt, not a
//! new one (`task.resumed`). Bounded: [`MAX_RESUMES`] per attempt, then the next start is a new attempt.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::super::values::{Column, RunId, RunPurpose, TaskKind};
use super::landing::CommitSha;
use super::{Command, RetryCause, Task, TaskError, TaskEvent};

/// The most times one attempt resumes; the next start after that is a new attempt (an agent whose provider
/// keeps saying "limit" cannot hold one attempt open for ever).
pub const MAX_RESUMES: u32 = 3;
/// The changed paths a checkpoint names (the rest are counted).
pub const MAX_CHECKPOINT_FILES: usize = 50;
/// The longest path a checkpoint names, in characters (a longer one is cut).
pub const MAX_CHECKPOINT_PATH_CHARS: usize = 200;

/// A worktree saved while its agent ran: pidevops's commit of everything in it, whose parent is the worktree's
/// HEAD then (the agent's own commits, or the base).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Checkpoint {
    /// The run that made it.
    #[schema(value_type = String)]
    pub run: RunId,
    /// pidevops's commit of the worktree (on `refs/pidevops/checkpoints/<task>`).
    pub commit: CommitSha,
    /// The worktree's HEAD when it was taken: the commit's parent.
    pub head: CommitSha,
    /// The base the attempt started from: an ancestor of `head`.
    pub base: CommitSha,
    /// The turns the agent's output had shown by then.
    pub turn: u32,
    pub at: DateTime<Utc>,
    /// The paths changed against the base, as git names them (the agent chose them: shown inert), the first
    /// [`MAX_CHECKPOINT_FILES`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// How many paths changed in all.
    pub changed: u32,
}

impl Checkpoint {
    /// Holds the agent's path names to the bounds: the first [`MAX_CHECKPOINT_FILES`], each cut to
    /// [`MAX_CHECKPOINT_PATH_CHARS`] with control characters replaced.
    pub fn bounded_files(paths: &[String]) -> (Vec<String>, u32) {
        let files = paths
            .iter()
            .take(MAX_CHECKPOINT_FILES)
            .map(|path| {
                path.chars()
                    .take(MAX_CHECKPOINT_PATH_CHARS)
                    .map(|c| if c.is_control() { '?' } else { c })
                    .collect()
            })
            .collect();
        (files, u32::try_from(paths.len()).unwrap_or(u32::MAX))
    }
}

/// The attempt in progress resumed `checkpoint` (task state, kept while the attempt lasts).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Resumption {
    /// The run that resumes it.
    #[schema(value_type = String)]
    pub run: RunId,
    pub checkpoint: Checkpoint,
}

impl Task {
    /// The run whose work the next start would resume: the last attempt was cut off by something not the work's
    /// fault, it was a work attempt, and it has resumed fewer than [`MAX_RESUMES`] times.
    pub fn resumable(&self) -> Option<RunId> {
        if self.column != Column::Todo
            || self.needs_human.is_some()
            || self.kind != TaskKind::Task
            || self.next_purpose() != RunPurpose::Work
            || self.resumes >= MAX_RESUMES
        {
            return None;
        }
        let failure = self.last_failure.as_ref()?;
        if failure.attempt != self.attempts || self.attempts == 0 {
            return None;
        }
        match failure.cause {
            RetryCause::Interrupted { run }
            | RetryCause::Lost { run }
            | RetryCause::Restarted { run }
            | RetryCause::Limited { run, .. } => Some(run),
            _ => None,
        }
    }

    /// The checkpoint `run` resumes, when `run` is the live run and it resumes one.
    pub fn resuming(&self, run: RunId) -> Option<&Checkpoint> {
        self.resumption
            .as_ref()
            .filter(|r| r.run == run && self.run == Some(run))
            .map(|r| &r.checkpoint)
    }

    /// The checkpoint this attempt last resumed from (what the next resume starts from when the run that
    /// resumed it made none of its own).
    pub fn resumed_from(&self) -> Option<&Checkpoint> {
        self.resumption.as_ref().map(|r| &r.checkpoint)
    }

    /// How many times the attempt in progress (or the last one) resumed.
    pub fn resumes(&self) -> u32 {
        self.resumes
    }
}

/// `Command::Resume`: the same attempt again, from `checkpoint`, which a run of this attempt made.
pub(super) fn decide(
    task: &Task,
    command: &Command,
    run: RunId,
    checkpoint: &Checkpoint,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    if task.column != Column::Todo {
        return Err(super::decision::wrong_column(
            task,
            command,
            &[Column::Todo],
        ));
    }
    if let Some(flag) = &task.needs_human {
        return Err(TaskError::NeedsHuman {
            id: task.id,
            reason: flag.reason.clone(),
        });
    }
    check(task, checkpoint).map_err(|why| TaskError::NotResumable { id: task.id, why })?;
    let mut events = vec![TaskEvent::Resumed {
        at,
        run,
        attempt: task.attempts,
        checkpoint: Box::new(checkpoint.clone()),
    }];
    let pending = task.pending_follow_up_indices();
    if !pending.is_empty() {
        events.push(TaskEvent::FollowUpsDelivered {
            at,
            run,
            attempt: task.attempts,
            indices: pending,
            live: false,
        });
    }
    Ok(events)
}

/// Whether `checkpoint` may be resumed now: the task is resumable, and the checkpoint is the interrupted run's
/// own or the one this attempt resumed before.
fn check(task: &Task, checkpoint: &Checkpoint) -> Result<(), &'static str> {
    let Some(interrupted) = task.resumable() else {
        return Err(if task.resumes >= MAX_RESUMES {
            "its attempt has resumed as often as one may"
        } else {
            "its last attempt was not cut off by a restart, a lost worker, a limit or a follow-up's restart"
        });
    };
    let ours = checkpoint.run == interrupted || task.resumed_from() == Some(checkpoint);
    if !ours {
        return Err("the checkpoint is not one its interrupted attempt made or resumed");
    }
    Ok(())
}

/// `task.resumed`: the attempt in progress again, its count unchanged. An attempt given back when it was cut off
/// is taken back: resuming it is not another attempt.
pub(super) fn evolve(
    task: &mut Task,
    event: &TaskEvent,
    run: RunId,
    attempt: u32,
    checkpoint: &Checkpoint,
) -> Result<(), TaskError> {
    super::evolution::require(task, event, &[Column::Todo])?;
    if attempt != task.attempts {
        return Err(super::evolution::inapplicable(
            Some(task),
            event,
            format!(
                "a resumed attempt is the last one ({}), not {attempt}",
                task.attempts
            ),
        ));
    }
    if let Err(why) = check(task, checkpoint) {
        return Err(super::evolution::inapplicable(
            Some(task),
            event,
            why.to_owned(),
        ));
    }
    task.column = Column::InProgress;
    task.run = Some(run);
    task.purpose = Some(RunPurpose::Work);
    task.resumes += 1;
    if task.given_back {
        if let Ok(max) = super::super::values::MaxAttempts::new(task.max_attempts.get() - 1) {
            task.max_attempts = max;
        }
        task.given_back = false;
    }
    task.resumption = Some(Resumption {
        run,
        checkpoint: checkpoint.clone(),
    });
    for follow_up in &mut task.follow_ups {
        follow_up.delivered_to_attempt.get_or_insert(attempt);
    }
    Ok(())
}
