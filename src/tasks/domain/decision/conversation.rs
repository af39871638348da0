//! The conversation's rules: a follow-up attached (once, by its origin), follow-ups delivered to a run, and the
//! answer to an agent's question.

use chrono::{DateTime, Utc};

use crate::tasks::values::{Column, FollowUpOrigin, FollowUpText, RunId};

use super::super::{Command, Task, TaskError, TaskEvent, MAX_FOLLOW_UPS, OPEN};
use super::{clear_needs_human, live_run, then_send_back, wrong_column};

pub(super) fn attach_follow_up(
    task: &Task,
    command: &Command,
    text: &FollowUpText,
    origin: Option<&FollowUpOrigin>,
    send_back: bool,
    now: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    if !task.column.is_open() {
        return Err(wrong_column(task, command, OPEN));
    }
    if task.follow_ups.len() >= MAX_FOLLOW_UPS {
        return Err(TaskError::TooManyFollowUps { id: task.id });
    }
    let attached = vec![TaskEvent::FollowUpAttached {
        at: now,
        text: text.clone(),
        origin: origin.cloned(),
        answer: false,
    }];
    if send_back {
        then_send_back(task, attached, now)
    } else {
        Ok(attached)
    }
}

/// Whether a follow-up with this origin's key is on record (a redelivered or edited message).
pub(super) fn known_origin(task: &Task, origin: Option<&FollowUpOrigin>) -> bool {
    origin.is_some_and(|origin| {
        task.follow_ups
            .iter()
            .filter_map(|f| f.origin.as_ref())
            .any(|known| known.key() == origin.key())
    })
}

pub(super) fn deliver_follow_ups(
    task: &Task,
    command: &Command,
    run: RunId,
    indices: &[u32],
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    if task.column != Column::InProgress {
        return Err(wrong_column(task, command, &[Column::InProgress]));
    }
    live_run(task, run)?;
    let pending = task.pending_follow_up_indices();
    // Handed over already (a retried append): nothing to record again.
    let fresh: Vec<u32> = indices
        .iter()
        .copied()
        .filter(|i| {
            task.follow_ups
                .get(*i as usize)
                .is_none_or(|f| f.delivered_to_attempt != Some(task.attempts))
        })
        .collect();
    if fresh.is_empty() {
        return Ok(Vec::new());
    }
    if pending.get(..fresh.len()) != Some(fresh.as_slice()) {
        let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
        return Err(TaskError::FollowUpOrder {
            id: task.id,
            indices: list(&fresh),
            pending: list(&pending),
        });
    }
    Ok(vec![TaskEvent::FollowUpsDelivered {
        at,
        run,
        attempt: task.attempts,
        indices: fresh,
        live: true,
    }])
}

pub(super) fn answer(
    task: &Task,
    command: &Command,
    text: &FollowUpText,
    origin: Option<&FollowUpOrigin>,
    now: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    if known_origin(task, origin) {
        return Ok(Vec::new());
    }
    if task.needs_human.is_none() {
        return Err(TaskError::NoQuestion {
            id: task.id,
            command: command.name(),
        });
    }
    if !task.column.is_open() {
        return Err(wrong_column(task, command, OPEN));
    }
    if task.follow_ups.len() >= MAX_FOLLOW_UPS {
        return Err(TaskError::TooManyFollowUps { id: task.id });
    }
    let mut events = vec![TaskEvent::FollowUpAttached {
        at: now,
        text: text.clone(),
        origin: origin.cloned(),
        answer: true,
    }];
    events.extend(clear_needs_human(task, now)?);
    then_send_back(task, events, now)
}
