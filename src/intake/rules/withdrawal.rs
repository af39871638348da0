//! When a ticket no longer asks for the work, and when it still does from where its work goes on: the terms the
//! providers' rules decide in (`providers/github/intake/mod.rs`, `providers/linear/intake.rs`). Pure, like the rest
//! of the rules: the follower turns a withdrawal into `Command::WithdrawTicket` on the ticket's task (the domain
//! decides what it does in each column, by the ticket's own clock) and a version seen into
//! `Command::NoteTicketVersion`.
//!
//! - **GitHub**: an issue closed or deleted ([`Withdrawal::Closed`]), or the intake label taken off
//!   ([`Withdrawal::Unasked`]). Its clock: `issue.updated_at`.
//! - **Linear**: an issue cancelled (a state of type `canceled`) or deleted (`Closed`); the intake label taken off,
//!   or moved to a state before work other than the ready one, such as back to the backlog (`Unasked`). Its clock:
//!   `data.updatedAt` (a deletion without one: `archivedAt`).
//!
//! pidevops itself moves a Linear issue on (`effects:linear`: to `[linear.states]` by name, else to the team's
//! first state of type `started` or `completed`), and Linear's webhook does not say who moved it. So a state named
//! in `[linear.states]`, or of type `started` or `completed`, is where work goes on ([`WorkState::AtWork`]): never a
//! withdrawal, whoever moved it there, only a version seen. A state of type `canceled` is a cancellation, whatever
//! its name.

use chrono::{DateTime, Utc};
use serde_json::Value;

/// Why a ticket no longer asks for its work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Withdrawal {
    /// Closed, cancelled or deleted: the ticket is over, whatever handed it to pidevops.
    Closed,
    /// Still open, but no longer handed to pidevops: the intake label taken off, moved out of the ready state. A
    /// ticket delegated to pidevops (a Linear agent session) never had to carry either, so this does not withdraw
    /// its task: the session's stop signal does.
    Unasked,
}

impl Withdrawal {
    /// Whether this withdraws the task of a ticket that was delegated to pidevops (a Linear agent session).
    pub fn withdraws_delegated(self) -> bool {
        match self {
            Withdrawal::Closed => true,
            Withdrawal::Unasked => false,
        }
    }
}

/// Intake's record that an issue was delegated to pidevops (`intake.delegated`, keyed by the id): written
/// when intake handles the agent session, so a withdrawal after it, in log order, knows.
pub const DELEGATED_KEY_PREFIX: &str = "intake:delegated:";

/// The stream `effects:linear` keeps an issue's agent sessions in (`linear-session:<issue id>`): the record of
/// delegations intake handled before it kept its own.
pub const SESSION_STREAM_PREFIX: &str = "linear-session:";

/// A ticket's own clock, from an RFC 3339 time.
pub fn ticket_time(value: &Value) -> Option<DateTime<Utc>> {
    value
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// Where a Linear issue out of the ready state stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkState {
    /// Where work goes on or ends: pidevops moves its issues there itself.
    AtWork,
    /// Before work, and not the ready state: the issue is no longer handed to pidevops.
    NotReady,
}

/// What `state` (a webhook's `state`: `name`, `type`) is, for an issue not in the ready state.
pub fn work_state(state: &Value, work_states: &std::collections::BTreeSet<String>) -> WorkState {
    let named = state["name"]
        .as_str()
        .is_some_and(|name| work_states.contains(&normal(name)));
    let kind = state["type"].as_str().unwrap_or_default();
    if named || matches!(kind, "started" | "completed") {
        WorkState::AtWork
    } else {
        WorkState::NotReady
    }
}

/// Every state name of `[linear.states]`, as [`work_state`] compares them (Linear matches names so too).
pub fn work_states<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> std::collections::BTreeSet<String> {
    names.into_iter().map(normal).collect()
}

fn normal(name: &str) -> String {
    name.trim().to_lowercase()
}
