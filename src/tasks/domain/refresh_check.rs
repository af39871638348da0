//! A refresh held for the repository's `check` (issue 33): when the base moved and the task's repository has a
//! `check`, the `refresh` loop does not push the branch it brought up to date. It records the refresh as due for
//! its check (`Command::CheckRefresh` → `task.refresh_check_due`), and the dispatcher runs it as an attempt of its
//! own kind (`RunPurpose::Refresh`): no agent, the same refresh made again in a worktree (the same commit, dated by
//! the base push), the repository's `setup` then `check`, contained, and only then the push, leased on the commit
//! pidevops recorded.
//!
//! Like a conflict's attempt (`conflict.rs`) it is neither a failure nor a bounce: `refresh_check_due` takes the
//! task from review to `todo` with one more attempt in its budget, and its start is not counted by the bounce
//! rule. Once per (task, commit, base): the same refresh again (a redelivered push, a restart) is the one held
//! already. Its run succeeding records `task.refreshed` (back in review, the landing facts start over). The check
//! failing on it (`Command::FailRefreshCheck`) is `task.refresh_check_failed`, nothing pushed, then the failure
//! handed to an agent as a conflict attempt whose conflict is the check's (`conflict.rs`: it starts on the commit
//! with the base merged in, its prompt quotes the check's output, and its fix is checked and pushed leased), once
//! per (commit, base); any other end (a person pushed to the branch, setup failed) flags a person with why. A run
//! cut off (a restart, a stop) goes round again as one.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::super::values::{Column, MaxAttempts, Reason, RunPurpose, TaskKind};
use super::decision::{live_run, wrong_column};
use super::evolution::{inapplicable, require};
use super::{Command, CommitSha, Conflict, RefreshMode, Task, TaskError, TaskEvent};

/// The most (commit, base) pairs remembered as held for a check.
const MAX_TRIED: usize = 8;

/// A refresh the `refresh` loop made but did not push: the commit pidevops pushed (`from`) brought up to date with
/// the base at `base` is `to` (`strategy`), its commits dated `stamp` (seconds since the epoch), so the attempt that
/// checks it makes the very same commit again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RefreshCheck {
    pub from: CommitSha,
    pub to: CommitSha,
    pub base: CommitSha,
    pub strategy: RefreshMode,
    pub stamp: i64,
}

/// `Command::CheckRefresh`: in review, not waiting for a person, a task (not a plan): held for its check, with one
/// more attempt; the same (commit, base) held before, or no attempt to add, flags a person instead. Refreshed to
/// that commit already, or waiting for a person: nothing.
pub(super) fn decide(
    task: &Task,
    command: &Command,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    let Command::CheckRefresh { check } = command else {
        return Ok(Vec::new());
    };
    if task.column != Column::InReview {
        return Err(wrong_column(task, command, &[Column::InReview]));
    }
    if task.kind != TaskKind::Task
        || task.needs_human.is_some()
        || task.refreshed.as_ref() == Some(&check.to)
    {
        return Ok(Vec::new());
    }
    let tried = task
        .checks_tried
        .iter()
        .any(|(from, base)| *from == check.from && *base == check.base);
    match MaxAttempts::new(task.max_attempts.get() + 1) {
        Ok(max_attempts) if !tried => Ok(vec![TaskEvent::RefreshCheckDue {
            at,
            check: check.clone(),
            max_attempts,
        }]),
        _ => {
            let why = if tried {
                "its check ran on this refresh already and it was not pushed"
            } else {
                "the task has no attempt left to run the repository's check on it"
            };
            Ok(vec![TaskEvent::FlaggedNeedsHuman {
                at,
                reason: Reason::summarize(&format!(
                    "the base moved (now {}) and {} at {} was brought up to date with it, but {why}. Nothing was \
                     pushed. Bring the branch up to date by hand and clear the flag, or send it back (retry)",
                    check.base.short(),
                    task.id.branch(),
                    check.from.short(),
                )),
                question: false,
            }])
        }
    }
}

/// The refresh check's run succeeded (`SubmitForReview` of a `refresh` run): its push recorded as the refresh.
pub(super) fn passed(task: &Task, at: DateTime<Utc>) -> Vec<TaskEvent> {
    let Some(check) = &task.refresh_check else {
        return Vec::new();
    };
    vec![TaskEvent::Refreshed {
        at,
        from: check.from.clone(),
        to: check.to.clone(),
        base: check.base.clone(),
        strategy: check.strategy,
    }]
}

/// `Command::FailRefreshCheck`: the repository's check fails on the refresh: back in review on the commit it had,
/// and the failure handed to an agent (`conflict_found` of a conflict that is the check's: it starts on the commit
/// with the base merged in, and makes the check pass), once per (commit, base); else a person is flagged.
pub(super) fn check_failed(
    task: &Task,
    command: &Command,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    let Command::FailRefreshCheck { run, reason } = command else {
        return Ok(Vec::new());
    };
    if task.column != Column::InProgress {
        return Err(wrong_column(task, command, &[Column::InProgress]));
    }
    live_run(task, *run)?;
    let (Some(check), Some(RunPurpose::Refresh)) = (&task.refresh_check, task.purpose) else {
        return Err(TaskError::WrongPurpose {
            id: task.id,
            run: *run,
            purpose: task.purpose.unwrap_or_default(),
            command: command.name(),
            needs: RunPurpose::Refresh,
        });
    };
    let tried = task
        .conflicts_tried
        .iter()
        .any(|(from, base)| *from == check.from && *base == check.base);
    match MaxAttempts::new(task.max_attempts.get() + 1) {
        Ok(max_attempts) if !tried && task.needs_human.is_none() => Ok(vec![
            TaskEvent::RefreshCheckFailed {
                at,
                reason: reason.clone(),
            },
            TaskEvent::ConflictFound {
                at,
                conflict: Box::new(Conflict::failed_check(
                    check.from.clone(),
                    check.base.clone(),
                    reason.as_str(),
                )),
                max_attempts,
            },
        ]),
        _ => Ok(failed(task, reason, at)),
    }
}

/// A refresh check's run that ended without its push (the check failed, the lease refused, setup failed): back in
/// review on the commit it had, a person flagged with why (the run's failure, the check's output in it).
pub(super) fn failed(task: &Task, reason: &Reason, at: DateTime<Utc>) -> Vec<TaskEvent> {
    let Some(check) = &task.refresh_check else {
        return Vec::new();
    };
    let mut events = vec![TaskEvent::RefreshCheckFailed {
        at,
        reason: reason.clone(),
    }];
    if task.needs_human.is_none() {
        events.push(TaskEvent::FlaggedNeedsHuman {
            at,
            reason: Reason::summarize(&format!(
                "the base moved (now {}) and {} at {}, brought up to date with it as {}, was not pushed: {reason}. \
                 Fix it on the branch by hand and clear the flag, or send it back (retry) with what to change",
                check.base.short(),
                task.id.branch(),
                check.from.short(),
                check.to.short(),
            )),
            question: false,
        });
    }
    events
}

/// `refresh_check_due`: from review to `todo`, the refresh held for the next attempt, the budget one larger.
pub(super) fn due(task: &mut Task, event: &TaskEvent) -> Result<(), TaskError> {
    let TaskEvent::RefreshCheckDue {
        check,
        max_attempts,
        ..
    } = event
    else {
        return Ok(());
    };
    require(task, event, &[Column::InReview])?;
    if *max_attempts < task.max_attempts {
        return Err(inapplicable(
            Some(task),
            event,
            "a budget that would shrink".into(),
        ));
    }
    task.column = Column::Todo;
    task.max_attempts = *max_attempts;
    // Only the last few: an older (commit, base) pair cannot come again once the branch moved on.
    if task.checks_tried.len() >= MAX_TRIED {
        task.checks_tried.remove(0);
    }
    task.checks_tried
        .push((check.from.clone(), check.base.clone()));
    task.refresh_check = Some((**check).clone());
    Ok(())
}

/// The refresh check's run is over, its push recorded (`task.refreshed`) or not (`refresh_check_failed`): back in
/// review.
pub(super) fn ended(task: &mut Task, event: &TaskEvent) -> Result<(), TaskError> {
    require(task, event, &[Column::InProgress])?;
    if task.refresh_check.is_none() || task.purpose != Some(RunPurpose::Refresh) {
        return Err(inapplicable(
            Some(task),
            event,
            "it holds no refresh being checked".into(),
        ));
    }
    task.column = Column::InReview;
    task.run = None;
    task.purpose = None;
    task.refresh_check = None;
    Ok(())
}
