//! Retries: another attempt after a failure, failed checks or a reviewer's request, or a person flagged when
//! attempts run out or the task bounces.

use chrono::{DateTime, Utc};

use crate::tasks::values::{Column, MaxAttempts, Reason, RunPurpose};

use super::super::family;
use super::super::{
    Command, RetryCause, Task, TaskError, TaskEvent, OSCILLATION_STARTS, OSCILLATION_WINDOW_S,
};
use super::{live_run, wrong_column};

pub(super) fn retry(
    task: &Task,
    command: &Command,
    cause: &RetryCause,
    reason: &Reason,
    now: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    let at = now;
    match cause {
        RetryCause::RunFailed { run }
        | RetryCause::Lost { run }
        | RetryCause::Interrupted { run }
        | RetryCause::SetupFailed { run }
        | RetryCause::AgentNeedsHuman { run }
        | RetryCause::OverBudget { run }
        | RetryCause::Restarted { run }
        | RetryCause::AgentAsked { run }
        | RetryCause::Limited { run, .. } => {
            if task.column != Column::InProgress {
                return Err(wrong_column(task, command, &[Column::InProgress]));
            }
            live_run(task, *run)?;
            if task.purpose == Some(RunPurpose::Triage) {
                let interrupted = matches!(
                    cause,
                    RetryCause::Interrupted { .. }
                        | RetryCause::Limited { .. }
                        | RetryCause::Restarted { .. }
                );
                return Ok(family::triage_failed(task, *run, interrupted, reason, now));
            }
            // A conflict attempt that did not end by itself (a stop, a limit, a restart) goes round again as one;
            // any other end is the conflict unresolved: back in review, a person flagged with the files.
            let comes_back = matches!(
                cause,
                RetryCause::Interrupted { .. }
                    | RetryCause::Limited { .. }
                    | RetryCause::Restarted { .. }
            );
            if task.purpose == Some(RunPurpose::Resolve) && !comes_back {
                return Ok(super::super::conflict::failed(task, reason, now));
            }
            // A refresh check likewise: cut off, it runs again; otherwise nothing was pushed and a person looks.
            if task.purpose == Some(RunPurpose::Refresh) && !comes_back {
                return Ok(super::super::refresh_check::failed(task, reason, now));
            }
        }
        RetryCause::ChecksFailed | RetryCause::ChangesRequested | RetryCause::FollowUp => {
            if task.column != Column::InReview {
                return Err(wrong_column(task, command, &[Column::InReview]));
            }
        }
    }
    let mut events = vec![TaskEvent::Retried {
        at,
        cause: *cause,
        reason: reason.clone(),
        attempt: task.attempts,
    }];
    let mut given_back = false;
    if matches!(
        cause,
        RetryCause::Interrupted { .. }
            | RetryCause::SetupFailed { .. }
            | RetryCause::Limited { .. }
            | RetryCause::Restarted { .. }
            | RetryCause::AgentAsked { .. }
    ) {
        // Given back when the budget can grow; at the cap it counts like any failure (so an agent that fakes its
        // provider's limit forever still ends with a person).
        if let Ok(max_attempts) = MaxAttempts::new(task.max_attempts.get() + 1) {
            events.push(TaskEvent::AttemptReturned { at, max_attempts });
            if matches!(
                cause,
                RetryCause::Interrupted { .. }
                    | RetryCause::Limited { .. }
                    | RetryCause::Restarted { .. }
            ) {
                return Ok(events);
            }
            given_back = true;
        }
    }
    // The agent asked a question: it waits for a person's answer, whatever attempts remain.
    if matches!(cause, RetryCause::AgentAsked { .. }) {
        if task.needs_human.is_none() {
            events.push(TaskEvent::FlaggedNeedsHuman {
                at,
                reason: reason.clone(),
                question: true,
            });
        }
        return Ok(events);
    }
    // The agent itself asked for a person, or a budget ran out: flagged at once, with why, whatever attempts remain.
    if matches!(
        cause,
        RetryCause::AgentNeedsHuman { .. } | RetryCause::OverBudget { .. }
    ) {
        if task.needs_human.is_none() {
            events.push(TaskEvent::FlaggedNeedsHuman {
                at,
                reason: reason.clone(),
                question: false,
            });
        }
        return Ok(events);
    }
    // The last attempt failed, or attempts keep bouncing back fast: a human must look. If one is already
    // looking, this is the same episode. A setup failure's attempt was given back, so only the bounce rule
    // applies to it: a setup that keeps failing is stopped there.
    if task.needs_human.is_none() {
        let why = if given_back {
            bounced(task, task.max_attempts.get() + 1, reason, now)
        } else {
            needs_human_after_failure(task, reason, now)
        };
        if let Some(why) = why {
            events.push(TaskEvent::FlaggedNeedsHuman {
                at,
                reason: Reason::summarize(&why),
                question: false,
            });
        }
    }
    Ok(events)
}

/// Why a failed attempt needs a human: the budget is spent, or attempts keep bouncing back fast. `None`: retry.
pub(super) fn needs_human_after_failure(
    task: &Task,
    reason: &Reason,
    now: DateTime<Utc>,
) -> Option<String> {
    if task.attempts >= task.max_attempts.get() {
        Some(format!(
            "attempt {} of {} failed: {reason}",
            task.attempts,
            task.max_attempts.get()
        ))
    } else {
        bounced(task, task.max_attempts.get(), reason, now)
    }
}

/// Why attempts that keep coming back fast need a human (`max`: the budget after this failure). `None`: retry.
fn bounced(task: &Task, max: u32, reason: &Reason, now: DateTime<Utc>) -> Option<String> {
    let bounced = task.starts_within_window(now);
    (bounced >= OSCILLATION_STARTS).then(|| {
        format!(
            "bouncing between todo and in-progress: {bounced} attempts in {} minutes came back \
             (attempt {} of {max}), flagged instead of starting another: {reason}",
            OSCILLATION_WINDOW_S / 60,
            task.attempts,
        )
    })
}
