//! The source ticket's part of a task: the newest version of it seen, by the ticket's own clock
//! ([`Task::ticket_version`]), and what its withdrawal does. Deliveries and polls arrive in any order, so every
//! decision follows that clock: a withdrawal older than the version on record (say, a label removal delivered
//! after a later re-labelling) changes nothing, however often it is delivered.
//!
//! A withdrawal cancels a task while the ticket still governs it: waiting (`triage`, `todo`) or at work
//! (`in_progress`, whose running attempt the dispatcher then stops). A task in review has its pull request, which
//! decides its fate (a merge that closes its issue must not cancel it); a closed task stays closed. Either way the
//! version is recorded, so a poller does not append it again.

use chrono::{DateTime, Utc};

use super::super::values::{Column, Reason};
use super::evolution::require;
use super::{Task, TaskError, TaskEvent, NOT_ARCHIVED};

/// Where a withdrawn ticket cancels its task.
pub(super) const WITHDRAWN_FROM: &[Column] = &[Column::Triage, Column::Todo, Column::InProgress];

/// A ticket command's fields: `decide` routes the two here by variant, so nothing else can arrive.
pub(super) enum TicketCommand<'a> {
    /// `NoteTicketVersion`: the version seen.
    Seen(&'a DateTime<Utc>),
    /// `WithdrawTicket`: why, and the version withdrawn at when the source has one.
    Withdrawn(&'a Reason, &'a Option<DateTime<Utc>>),
}

/// `WithdrawTicket`, `NoteTicketVersion`: the events to record, or none (stale, or already so).
pub(super) fn decide(
    task: &Task,
    command: TicketCommand<'_>,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    Ok(match command {
        TicketCommand::Seen(ticket_version) => {
            seen(task, Some(*ticket_version), at).into_iter().collect()
        }
        TicketCommand::Withdrawn(reason, ticket_version) => {
            if is_stale(task, *ticket_version) {
                return Ok(Vec::new());
            }
            let mut events: Vec<TaskEvent> = seen(task, *ticket_version, at).into_iter().collect();
            if WITHDRAWN_FROM.contains(&task.column) {
                events.push(TaskEvent::Cancelled {
                    at,
                    reason: reason.clone(),
                });
            }
            events
        }
    })
}

/// Older than the version on record. An equal one is not: it is the version on record itself, or one that
/// GitHub's clock (whole seconds) cannot tell from it, and a withdrawal made in the same second as a label
/// applies.
fn is_stale(task: &Task, version: Option<DateTime<Utc>>) -> bool {
    matches!((version, task.ticket_version), (Some(version), Some(held)) if version < held)
}

/// `TicketSeen` when `version` is newer than the one on record.
fn seen(task: &Task, version: Option<DateTime<Utc>>, at: DateTime<Utc>) -> Option<TaskEvent> {
    let version = version?;
    task.ticket_version
        .is_none_or(|held| version > held)
        .then_some(TaskEvent::TicketSeen {
            at,
            ticket_version: version,
        })
}

/// Applies `TicketSeen`: the version on record never goes back.
pub(super) fn evolve(task: &mut Task, event: &TaskEvent) -> Result<(), TaskError> {
    if let TaskEvent::TicketSeen { ticket_version, .. } = event {
        require(task, event, NOT_ARCHIVED)?;
        task.ticket_version = task.ticket_version.max(Some(*ticket_version));
    }
    Ok(())
}

#[cfg(test)]
#[path = "tests/ticket.rs"]
mod tests;
