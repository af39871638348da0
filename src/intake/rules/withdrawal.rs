//! When a ticket no longer asks for the work, and when it still does from where its work goes on. Pure, like the
//! rest of the rules: the follower turns a withdrawal into `Command::WithdrawTicket` on the ticket's task (the
//! domain decides what it does in each column, by the ticket's own clock) and a version seen into
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

use super::github_issue::IssuesEvent;
use super::{Decision, IntakeConfig};
use crate::tasks::RepoName;

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

/// Intake's record that an issue was delegated to pidevops (`intake.delegated`, keyed by the issue's id): written
/// when intake handles the agent session, so a withdrawal after it, in log order, knows.
pub const DELEGATED_KEY_PREFIX: &str = "intake:delegated:";

/// The stream `effects:linear` keeps an issue's agent sessions in (`linear-session:<issue id>`): the record of
/// delegations intake handled before it kept its own.
pub const SESSION_STREAM_PREFIX: &str = "linear-session:";

/// A ticket's own clock, from an RFC 3339 time.
pub(super) fn ticket_time(value: &Value) -> Option<DateTime<Utc>> {
    value
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// `github.issues.closed`, `deleted`, `unlabeled` (`action`): a withdrawal of the issue's task, keyed like the
/// task was made (`github:owner/name#n`), or not intake's business. An event that does not read as GitHub's is
/// refused, saying why: a withdrawal is never guessed from a payload that cannot be read.
pub(super) fn github_withdrawal(action: &str, data: &Value, config: &IntakeConfig) -> Decision {
    let event = match IssuesEvent::read(data) {
        Ok(event) => event,
        Err(reason) => return super::ignore(reason),
    };
    let Ok(repo) = event.repository.full_name.parse::<RepoName>() else {
        return Decision::NotIntake;
    };
    let number = event.issue.number;
    if number == 0 {
        return Decision::NotIntake;
    }
    let label = config.github_label.as_str();
    let (why, reason) = match action {
        "closed" => (
            Withdrawal::Closed,
            format!("{repo}#{number} was closed on GitHub"),
        ),
        "deleted" => (
            Withdrawal::Closed,
            format!("{repo}#{number} was deleted on GitHub"),
        ),
        "unlabeled" => {
            let removed = event.label.as_ref().map(|l| l.name.as_str());
            if event.labels().contains(&label) && removed != Some(label) {
                // Another label came off; the issue still asks for the work.
                return Decision::NotIntake;
            }
            (
                Withdrawal::Unasked,
                format!("{repo}#{number} no longer carries the {label:?} label"),
            )
        }
        _ => return Decision::NotIntake,
    };
    Decision::Withdraw {
        key: format!("github:{repo}#{number}"),
        reason,
        why,
        ticket_version: Some(event.issue.updated_at),
    }
}

/// `linear.Issue.remove`: the issue was deleted.
pub(super) fn linear_removed(data: &Value) -> Decision {
    let issue = &data["data"];
    let identifier = issue["identifier"].as_str().unwrap_or("the issue");
    match issue["id"].as_str() {
        Some(id) => Decision::Withdraw {
            key: format!("linear:{id}"),
            reason: format!("{identifier} was deleted in Linear"),
            why: Withdrawal::Closed,
            ticket_version: ticket_time(&issue["updatedAt"])
                .or_else(|| ticket_time(&issue["archivedAt"])),
        },
        None => Decision::NotIntake,
    }
}

/// Where a Linear issue out of the ready state stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WorkState {
    /// Where work goes on or ends: pidevops moves its issues there itself.
    AtWork,
    /// Before work, and not the ready state: the issue is no longer handed to pidevops.
    NotReady,
}

/// What `state` (a webhook's `state`: `name`, `type`) is, for an issue not in the ready state.
pub(super) fn work_state(state: &Value, config: &IntakeConfig) -> WorkState {
    let named = state["name"]
        .as_str()
        .is_some_and(|name| config.linear_work_states.contains(&normal(name)));
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
