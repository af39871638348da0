//! What a task event says, in one line a person can read, and which links and source it brings.

use super::{link_keys, LinkKind};
use crate::domain::registry;
use crate::tasks::{
    Column, CommitSha, Links, RetryCause, RunPurpose, TaskCreated, TaskEvent, TaskId, TaskKind,
    TriageOutcome,
};

/// One line a person can read: what happened.
pub fn summarize(event: &TaskEvent) -> String {
    match event {
        TaskEvent::Created(c) => created(c),
        TaskEvent::Approved { automatic, .. } => {
            if *automatic {
                "approved automatically".into()
            } else {
                "approved".into()
            }
        }
        TaskEvent::Rejected { reason, .. } => format!("rejected: {reason}"),
        TaskEvent::Started {
            attempt,
            run,
            purpose,
            ..
        } => started(*attempt, *run, *purpose),
        TaskEvent::Resumed { .. } => resumed(event),
        TaskEvent::SubmittedForReview { branch, pr, .. } => match pr {
            Some(pr) => format!("submitted for review: {} ({pr})", branch.as_str()),
            None => format!("submitted for review: {}", branch.as_str()),
        },
        TaskEvent::Completed { .. } => "completed".into(),
        TaskEvent::Retried {
            cause,
            reason,
            attempt,
            ..
        } => format!(
            "attempt {attempt} failed ({}): {reason}",
            retry_cause(cause)
        ),
        TaskEvent::Cancelled { reason, .. } => format!("cancelled: {reason}"),
        TaskEvent::Archived { .. } => "archived".into(),
        TaskEvent::FlaggedNeedsHuman {
            reason, question, ..
        } => {
            if *question {
                format!("the agent asks: {reason}")
            } else {
                format!("needs a human: {reason}")
            }
        }
        TaskEvent::NeedsHumanCleared { max_attempts, .. } => format!(
            "needs-human cleared; budget {} attempts",
            max_attempts.get()
        ),
        TaskEvent::SpecUpdated { spec, .. } => format!("spec updated: {}", spec.title()),
        TaskEvent::FollowUpAttached {
            text,
            origin,
            answer,
            ..
        } => {
            let what = if *answer { "answer" } else { "follow-up" };
            match origin {
                Some(origin) => format!(
                    "{what} from {}: {}",
                    origin.from(),
                    first_line(text.as_str())
                ),
                None => format!("{what}: {}", first_line(text.as_str())),
            }
        }
        TaskEvent::FollowUpsDelivered {
            indices,
            attempt,
            live,
            ..
        } => delivered(indices.len(), *attempt, *live),
        TaskEvent::PriorityChanged { priority, .. } => format!("priority {priority}"),
        TaskEvent::TicketSeen { ticket_version, .. } => format!(
            "source ticket seen as of {}",
            ticket_version.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        ),
        TaskEvent::AttemptReturned { max_attempts, .. } => format!(
            "the attempt does not count (interrupted, or its setup failed); budget {} attempts",
            max_attempts.get()
        ),
        TaskEvent::AgentChosen { agent, .. } => match agent {
            Some(agent) => format!("agent profile {agent} chosen"),
            None => "agent profile back to the repository's".into(),
        },
        TaskEvent::TriageEnded { outcome, .. } => match outcome {
            TriageOutcome::Proposed { spec } => {
                format!("triage agent proposed a spec: {}", spec.title())
            }
            TriageOutcome::Failed { reason } => format!("triage agent failed: {reason}"),
            TriageOutcome::Interrupted => "triage agent interrupted; it runs again".into(),
        },
        TaskEvent::PlanProposed { plan, .. } => {
            format!("plan proposed with {} items", plan.items().len())
        }
        TaskEvent::PlanApproved { automatic, .. } => {
            if *automatic {
                "plan approved automatically".into()
            } else {
                "plan approved".into()
            }
        }
        TaskEvent::PlanRejected { reason, .. } => format!("plan rejected: {reason}"),
        TaskEvent::ChildrenCreated { children, .. } => {
            let ids: Vec<String> = children.iter().map(ToString::to_string).collect();
            format!("items created: {}", ids.join(", "))
        }
        TaskEvent::RolledUp {
            column,
            needs_human,
            ..
        } => rolled_up(column, needs_human),
        TaskEvent::CheckPassed { sha, name, .. } => {
            format!("check {name} passed on {}", sha.short())
        }
        TaskEvent::ReviewApproved { sha, by, .. } => format!("approved by {by} at {}", sha.short()),
        TaskEvent::ApprovalWithdrawn { by, .. } => format!("{by}'s approval was dismissed"),
        TaskEvent::Combined { commit, items, .. } => {
            let ids: Vec<String> = items
                .iter()
                .map(|i| format!("{} ({})", i.task, i.commit.short()))
                .collect();
            format!("items combined at {}: {}", commit.short(), ids.join(", "))
        }
        TaskEvent::Landed {
            commit,
            onto,
            fast_forward,
            ..
        } => landed(commit, onto, *fast_forward),
        TaskEvent::Refreshed { .. } => refreshed(event),
        TaskEvent::ConflictFound { .. } | TaskEvent::ConflictUnresolved { .. } => conflict(event),
        TaskEvent::RefreshCheckDue { .. } | TaskEvent::RefreshCheckFailed { .. } => {
            refresh_check(event)
        }
        TaskEvent::MergeQueued { sha, number, .. } => {
            format!("merge queued: #{number} at {} is next to land", sha.short())
        }
        TaskEvent::WentStale {
            after_h, action, ..
        } => went_stale(*after_h, *action),
        TaskEvent::LinksAttached { links, .. } => {
            let keys: Vec<String> = link_keys(links)
                .into_iter()
                .map(|(k, v)| format!("{} {v}", k.as_str()))
                .collect();
            format!("linked {}", keys.join(", "))
        }
    }
}

/// A task made: as what, where, its title, and what it waits for.
fn created(c: &TaskCreated) -> String {
    let what = match (c.family.kind, c.family.parent) {
        (TaskKind::Plan, _) => "plan created".to_owned(),
        (TaskKind::Task, Some(parent)) => format!("created as an item of plan {parent}"),
        (TaskKind::Task, None) => "created".to_owned(),
    };
    let mut line = format!("{what} in {}: {}", c.repo, c.spec.title());
    if !c.family.depends_on.is_empty() {
        let ids: Vec<String> = c
            .family
            .depends_on
            .iter()
            .map(ToString::to_string)
            .collect();
        line.push_str(&format!(" (after {})", ids.join(", ")));
    }
    line
}

/// Why an attempt was retried, in a few words.
fn retry_cause(cause: &RetryCause) -> &'static str {
    match cause {
        RetryCause::RunFailed { .. } => "run failed",
        RetryCause::Lost { .. } => "lost",
        RetryCause::Interrupted { .. } => "interrupted",
        RetryCause::SetupFailed { .. } => "setup failed",
        RetryCause::AgentNeedsHuman { .. } => "the agent asked for a person",
        RetryCause::Limited { .. } => "its provider's limit",
        RetryCause::OverBudget { .. } => "over budget",
        RetryCause::ChecksFailed => "checks failed",
        RetryCause::ChangesRequested => "changes requested",
        RetryCause::Restarted { .. } => "restarted for a follow-up",
        RetryCause::AgentAsked { .. } => "the agent asked a question",
        RetryCause::FollowUp => "a follow-up came",
    }
}

/// `n` follow-ups handed over: live to the running agent, or in the attempt's prompt.
fn delivered(n: usize, attempt: u32, live: bool) -> String {
    let plural = if n == 1 { "" } else { "s" };
    if live {
        format!("{n} follow-up{plural} handed to the running agent (attempt {attempt})")
    } else {
        format!("{n} follow-up{plural} in attempt {attempt}'s prompt")
    }
}

/// A plan rolled up from its items: its column, and the items waiting for a person.
fn rolled_up(column: &Column, needs_human: &[TaskId]) -> String {
    if needs_human.is_empty() {
        format!("plan {column} with its items")
    } else {
        let ids: Vec<String> = needs_human.iter().map(ToString::to_string).collect();
        format!(
            "plan {column} with its items; waiting for a human: {}",
            ids.join(", ")
        )
    }
}

/// A task's commit landed: fast-forwarded, or merged as another commit.
fn landed(commit: &CommitSha, onto: &CommitSha, fast_forward: bool) -> String {
    if fast_forward {
        format!("landed: the base fast-forwarded to {}", commit.short())
    } else {
        format!(
            "landed: {} merged into the base as {}",
            commit.short(),
            onto.short()
        )
    }
}

fn refreshed(event: &TaskEvent) -> String {
    let TaskEvent::Refreshed {
        from,
        to,
        base,
        strategy,
        ..
    } = event
    else {
        return String::new();
    };
    format!(
        "refreshed: {} brought onto the base at {} by {} as {}",
        from.short(),
        base.short(),
        strategy.as_str(),
        to.short()
    )
}

fn first_line(text: &str) -> String {
    const MAX: usize = 120;
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() > MAX {
        let cut: String = line.chars().take(MAX).collect();
        format!("{cut}…")
    } else {
        line.to_owned()
    }
}

/// A review left without activity: reminded, or closed.
fn went_stale(after_h: u32, action: crate::tasks::StaleAction) -> String {
    match action {
        crate::tasks::StaleAction::Remind => {
            format!("no activity in review for {after_h} h: a reminder sent where it came from")
        }
        crate::tasks::StaleAction::Close => {
            format!("no activity in review for {after_h} h: its pull request closed")
        }
    }
}

/// A run started, in the words of what it is for.
fn started(attempt: u32, run: crate::tasks::RunId, purpose: RunPurpose) -> String {
    match purpose {
        RunPurpose::Work => format!("attempt {attempt} started (run {run})"),
        RunPurpose::Plan => format!("planner attempt {attempt} started (run {run})"),
        RunPurpose::Triage => format!("triage agent started (run {run})"),
        RunPurpose::Resolve => format!("conflict attempt {attempt} started (run {run})"),
        RunPurpose::Refresh => {
            format!("the repository's check started on the refreshed branch (run {run})")
        }
    }
}

/// A refresh's conflict handed to an agent, or not resolved.
fn conflict(event: &TaskEvent) -> String {
    if let TaskEvent::ConflictFound { conflict, .. } = event {
        return format!(
            "the base moved (now {}) and {} {}: an agent resolves it",
            conflict.base.short(),
            conflict.from.short(),
            conflict.what()
        );
    }
    let TaskEvent::ConflictUnresolved { reason, .. } = event else {
        return String::new();
    };
    format!("the conflict was not resolved: {reason}")
}

/// A refresh held for the repository's check, or not pushed after it.
fn refresh_check(event: &TaskEvent) -> String {
    if let TaskEvent::RefreshCheckDue { check, .. } = event {
        return format!(
            "the base moved (now {}) and {} was brought up to date with it as {}: the repository's check runs \
             on it before it is pushed",
            check.base.short(),
            check.from.short(),
            check.to.short()
        );
    }
    let TaskEvent::RefreshCheckFailed { reason, .. } = event else {
        return String::new();
    };
    format!("the refreshed branch was not pushed: {reason}")
}

/// The links an event brings, as lookup keys.
pub(super) fn links_of(event: &TaskEvent) -> Vec<(LinkKind, String)> {
    match event {
        TaskEvent::Created(c) => link_keys(&c.links),
        TaskEvent::LinksAttached { links, .. } => link_keys(links),
        TaskEvent::SubmittedForReview { pr: Some(pr), .. } => {
            vec![(LinkKind::GithubPr, pr.to_string())]
        }
        TaskEvent::SubmittedForReview { pr: None, .. } => Vec::new(),
        TaskEvent::Approved { .. }
        | TaskEvent::Rejected { .. }
        | TaskEvent::Started { .. }
        | TaskEvent::Resumed { .. }
        | TaskEvent::Completed { .. }
        | TaskEvent::Retried { .. }
        | TaskEvent::Cancelled { .. }
        | TaskEvent::Archived { .. }
        | TaskEvent::FlaggedNeedsHuman { .. }
        | TaskEvent::NeedsHumanCleared { .. }
        | TaskEvent::SpecUpdated { .. }
        | TaskEvent::FollowUpAttached { .. }
        | TaskEvent::FollowUpsDelivered { .. }
        | TaskEvent::TicketSeen { .. }
        | TaskEvent::PriorityChanged { .. }
        | TaskEvent::AttemptReturned { .. }
        | TaskEvent::AgentChosen { .. }
        | TaskEvent::TriageEnded { .. }
        | TaskEvent::PlanProposed { .. }
        | TaskEvent::PlanApproved { .. }
        | TaskEvent::PlanRejected { .. }
        | TaskEvent::ChildrenCreated { .. }
        | TaskEvent::RolledUp { .. }
        | TaskEvent::CheckPassed { .. }
        | TaskEvent::ReviewApproved { .. }
        | TaskEvent::ApprovalWithdrawn { .. }
        | TaskEvent::Combined { .. }
        | TaskEvent::Landed { .. }
        | TaskEvent::MergeQueued { .. }
        | TaskEvent::Refreshed { .. }
        | TaskEvent::WentStale { .. }
        | TaskEvent::ConflictFound { .. }
        | TaskEvent::ConflictUnresolved { .. }
        | TaskEvent::RefreshCheckDue { .. }
        | TaskEvent::RefreshCheckFailed { .. } => Vec::new(),
    }
}

/// Where a task came from: the creating actor when it names a channel, else its first link, else the API.
pub fn source_of(actor: Option<&str>, links: &Links) -> &'static str {
    if let Some(provider) = actor.and_then(registry::provider) {
        return provider.name;
    }
    if actor == Some("api") {
        return "api";
    }
    registry::origin(links).map_or("api", |provider| provider.name)
}

fn resumed(event: &TaskEvent) -> String {
    let TaskEvent::Resumed {
        attempt,
        run,
        checkpoint,
        ..
    } = event
    else {
        return String::new();
    };
    format!(
        "attempt {attempt} resumed (run {run}) from checkpoint {} of run {}, after {} turn(s)",
        checkpoint.commit.short(),
        checkpoint.run,
        checkpoint.turn
    )
}
