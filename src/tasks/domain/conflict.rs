//! A refresh's conflict handed to an agent (issue 33): when the base moved and the task's pushed commit no longer
//! merges with it, the task gets an attempt of its own kind (`RunPurpose::Resolve`), not a failure and not a
//! bounce: `conflict_found` takes it from review to `todo` with one more attempt in its budget (so the conflict
//! attempt does not spend one the work had), and the dispatcher starts it on the recorded commit with the base
//! merged in. Once per (task, commit, base): the same conflict again (a redelivered push, a restart) is the one
//! already handed over, and one the agent could not resolve flags a person with the files named. A refresh that
//! merges cleanly but fails the repository's check comes the same way (`Conflict::failed_check`, from
//! `refresh_check.rs`): no files, the check's output for the agent to make pass.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::super::values::{Column, MaxAttempts, Reason, TaskKind};
use super::decision::wrong_column;
use super::evolution::{inapplicable, require};
use super::{Command, CommitSha, Task, TaskError, TaskEvent};

/// The most files a conflict names (the refresh counts the rest in `total`).
pub const MAX_FILES: usize = 20;
/// The most (commit, base) pairs remembered as handed over.
const MAX_TRIED: usize = 8;
/// The longest path kept, in characters.
const MAX_PATH_CHARS: usize = 512;
/// The most bytes of hunks kept (the refresh bounds them to this already; a stored event is held to it too).
pub const MAX_HUNK_BYTES: usize = 16 * 1024 + 64;

/// What the refresh found: the commit pidevops pushed (`from`) does not merge with the base at `base` in
/// `files` (at most [`MAX_FILES`] of `total`), the hunks as `git diff` shows them with their markers. The files and
/// hunks are repository content an agent or a stranger wrote: bounded here, and only ever shown as inert text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Conflict {
    pub from: CommitSha,
    pub base: CommitSha,
    pub files: Vec<String>,
    pub total: u32,
    pub hunks: String,
    /// Not a conflict git found: the refresh merged cleanly but the repository's `check` fails on it (its failure
    /// and the end of its output, at most [`MAX_HUNK_BYTES`]): the agent makes it pass (`refresh_check.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
}

impl Conflict {
    /// A conflict held to its bounds: at most [`MAX_FILES`] paths of at most 512 characters (control characters
    /// shown as `?`), at most [`MAX_HUNK_BYTES`] of hunks cut at a character boundary.
    pub fn new(
        from: CommitSha,
        base: CommitSha,
        files: &[String],
        total: usize,
        hunks: &str,
    ) -> Self {
        let files: Vec<String> = files
            .iter()
            .take(MAX_FILES)
            .map(|f| {
                f.chars()
                    .take(MAX_PATH_CHARS)
                    .map(|c| if c.is_control() { '?' } else { c })
                    .collect()
            })
            .collect();
        let total = u32::try_from(total.max(files.len())).unwrap_or(u32::MAX);
        let mut end = hunks.len().min(MAX_HUNK_BYTES);
        while !hunks.is_char_boundary(end) {
            end -= 1;
        }
        Self {
            from,
            base,
            files,
            total,
            hunks: hunks[..end].replace('\0', ""),
            check: None,
        }
    }

    /// The refresh of `from` onto `base` merged cleanly but fails the repository's check, which said `failure`
    /// (its end kept, at most [`MAX_HUNK_BYTES`] cut at a character boundary).
    pub fn failed_check(from: CommitSha, base: CommitSha, failure: &str) -> Self {
        let mut start = failure.len().saturating_sub(MAX_HUNK_BYTES);
        while !failure.is_char_boundary(start) {
            start += 1;
        }
        Self {
            check: Some(failure[start..].replace('\0', "")),
            ..Self::new(from, base, &[], 0, "")
        }
    }

    /// What is wrong, for a person: the files in conflict, or the check that fails.
    pub fn what(&self) -> String {
        match &self.check {
            Some(_) => "merges with it but fails the repository's check".to_owned(),
            None => format!("conflicts with it in {}", self.named()),
        }
    }

    /// The files named for a person: `a, b and 3 more`.
    pub fn named(&self) -> String {
        let mut named = self.files.join(", ");
        let more = (self.total as usize).saturating_sub(self.files.len());
        if more > 0 {
            named.push_str(&format!(" and {more} more"));
        }
        named
    }

    fn holds_bounds(&self) -> bool {
        self.files.len() <= MAX_FILES
            && self
                .files
                .iter()
                .all(|f| f.chars().count() <= MAX_PATH_CHARS)
            && self.hunks.len() <= MAX_HUNK_BYTES
            && self
                .check
                .as_ref()
                .is_none_or(|c| c.len() <= MAX_HUNK_BYTES)
    }
}

/// `Command::ResolveConflict`: in review, not waiting for a person, a task (not a plan): the conflict handed to
/// an agent, with one more attempt; the same (commit, base) handed over before, or no attempt to add, flags a
/// person with the files named instead. Waiting for a person already: nothing.
pub(super) fn decide(
    task: &Task,
    command: &Command,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    let Command::ResolveConflict { conflict } = command else {
        return Ok(Vec::new());
    };
    if task.column != Column::InReview {
        return Err(wrong_column(task, command, &[Column::InReview]));
    }
    if task.kind != TaskKind::Task || task.needs_human.is_some() {
        return Ok(Vec::new());
    }
    let conflict = match &conflict.check {
        Some(failure) => {
            Conflict::failed_check(conflict.from.clone(), conflict.base.clone(), failure)
        }
        None => Conflict::new(
            conflict.from.clone(),
            conflict.base.clone(),
            &conflict.files,
            conflict.total as usize,
            &conflict.hunks,
        ),
    };
    let tried = task
        .conflicts_tried
        .iter()
        .any(|(from, base)| *from == conflict.from && *base == conflict.base);
    let budget = MaxAttempts::new(task.max_attempts.get() + 1);
    match budget {
        Ok(max_attempts) if !tried => Ok(vec![TaskEvent::ConflictFound {
            at,
            conflict: Box::new(conflict),
            max_attempts,
        }]),
        _ => {
            let why = if tried {
                "an agent was given this conflict already and did not resolve it"
            } else {
                "the task has no attempt left for an agent to resolve it"
            };
            Ok(vec![TaskEvent::FlaggedNeedsHuman {
                at,
                reason: unresolved_reason(task, &conflict, why),
                question: false,
            }])
        }
    }
}

/// Why a person is needed for `conflict`: what happened, the files, what to do.
pub(super) fn unresolved_reason(task: &Task, conflict: &Conflict, why: &str) -> Reason {
    Reason::summarize(&format!(
        "the base moved (now {}) and {} at {} {}; {why}. Nothing was pushed. Resolve it on the branch by hand \
         and clear the flag, or send it back (retry) with what to keep",
        conflict.base.short(),
        task.id.branch(),
        conflict.from.short(),
        conflict.what(),
    ))
}

/// A conflict attempt that ended without a resolution pushed (its run failed, the agent left markers, the lease
/// refused): back in review as it was, flagged with the files and why.
pub(super) fn failed(task: &Task, reason: &Reason, at: DateTime<Utc>) -> Vec<TaskEvent> {
    let Some(conflict) = &task.conflict else {
        return Vec::new();
    };
    let mut events = vec![TaskEvent::ConflictUnresolved {
        at,
        reason: reason.clone(),
    }];
    if task.needs_human.is_none() {
        let why = format!("the agent's attempt to resolve it ended: {reason}");
        events.push(TaskEvent::FlaggedNeedsHuman {
            at,
            reason: unresolved_reason(task, conflict, &why),
            question: false,
        });
    }
    events
}

/// `conflict_found`: from review to `todo`, the conflict held for the next attempt, the budget one larger.
pub(super) fn found(task: &mut Task, event: &TaskEvent) -> Result<(), TaskError> {
    let TaskEvent::ConflictFound {
        conflict,
        max_attempts,
        ..
    } = event
    else {
        return Ok(());
    };
    let max_attempts = *max_attempts;
    require(task, event, &[Column::InReview])?;
    if !conflict.holds_bounds() || max_attempts < task.max_attempts {
        return Err(inapplicable(
            Some(task),
            event,
            "a conflict past its bounds, or a budget that would shrink".into(),
        ));
    }
    task.column = Column::Todo;
    task.max_attempts = max_attempts;
    // Only the last few: an older (commit, base) pair cannot come again once the branch moved on.
    if task.conflicts_tried.len() >= MAX_TRIED {
        task.conflicts_tried.remove(0);
    }
    task.conflicts_tried
        .push((conflict.from.clone(), conflict.base.clone()));
    task.conflict = Some((**conflict).clone());
    Ok(())
}

/// `conflict_unresolved`: the conflict attempt is over, the task back in review on the commit it had.
pub(super) fn unresolved(task: &mut Task, event: &TaskEvent) -> Result<(), TaskError> {
    require(task, event, &[Column::InProgress])?;
    if task.conflict.is_none() {
        return Err(inapplicable(
            Some(task),
            event,
            "it holds no conflict".into(),
        ));
    }
    task.column = Column::InReview;
    task.run = None;
    task.purpose = None;
    task.conflict = None;
    Ok(())
}
