//! `decide(state, command, now)`: every rule of the board, one helper per command that has more than a line.

use chrono::{DateTime, Utc};

use super::super::values::{
    AgentName, ApprovalPolicy, BranchName, Column, GithubRef, Links, MaxAttempts, Priority, Reason,
    RunId, RunPurpose, Spec, TaskId, TaskKind,
};
use super::family;
use super::landing::{self, LandingCommand};
use super::ticket::{
    self,
    TicketCommand::{Seen, Withdrawn},
};

mod conversation;
mod retries;
use super::{
    AttemptReport, Command, NewTask, RetryCause, Task, TaskCreated, TaskError, TaskEvent,
    BEFORE_WORK, BETWEEN_ATTEMPTS, CLOSED, OPEN,
};
use conversation::{answer, attach_follow_up, deliver_follow_ups, known_origin};
use retries::retry;

/// Commands a task refuses whatever its column, for what it is doing: a triage agent rewriting its ticket, or
/// an approved plan's items doing its work.
fn not_now(task: &Task, command: &Command) -> Result<(), TaskError> {
    // While a triage agent rewrites the ticket, the approver waits for it (or cancels).
    if task.purpose == Some(RunPurpose::Triage) && waits_for_triage(command) {
        return Err(TaskError::Triaging {
            id: task.id,
            command: command.name(),
        });
    }
    // An approved plan's items do the work: the commands that report or ask for work are theirs.
    if task.is_approved_plan() && is_plan_work(command) {
        return Err(TaskError::PlanWork {
            id: task.id,
            command: command.name(),
        });
    }
    Ok(())
}

/// Decides what `command` means for `state` at `now`: the events to record, none (already so), or why not.
pub fn decide(
    state: Option<&Task>,
    command: &Command,
    now: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    let task = match (state, command) {
        (None, Command::Create(new)) => return Ok(create(new, now)),
        (Some(task), Command::Create(_)) => return Err(TaskError::AlreadyExists { id: task.id }),
        (None, other) => {
            return Err(TaskError::NotFound {
                command: other.name(),
            })
        }
        (Some(task), _) => task,
    };
    if task.column == Column::Archived {
        return Err(TaskError::Archived {
            id: task.id,
            command: command.name(),
        });
    }
    let wrong = |allowed: &'static [Column]| wrong_column(task, command, allowed);
    let column = task.column;
    let at = now;
    let none = Ok(Vec::new());
    not_now(task, command)?;
    match command {
        Command::Create(_) => Err(TaskError::AlreadyExists { id: task.id }),

        Command::Approve if task.kind == TaskKind::Plan => family::approve_plan(task, command, at),

        Command::Reject { reason } if task.kind == TaskKind::Plan => {
            family::reject_plan(task, command, reason, at)
        }

        Command::Approve => match column {
            Column::Triage => Ok(vec![TaskEvent::Approved {
                at,
                automatic: false,
            }]),
            // Approved already: the second of two racing approvals is a no-op, not an error.
            Column::Todo | Column::InProgress | Column::InReview | Column::Done => none,
            _ => Err(wrong(&[Column::Triage])),
        },

        Command::Reject { reason } => match column {
            Column::Triage => Ok(vec![TaskEvent::Rejected {
                at,
                reason: reason.clone(),
            }]),
            Column::Cancelled => none,
            _ => Err(wrong(&[Column::Triage])),
        },

        Command::Start { run } => start(task, command, *run, at),
        Command::Resume { run, checkpoint } => {
            super::resume::decide(task, command, *run, checkpoint, at)
        }

        Command::SubmitForReview {
            run,
            branch,
            pr,
            report,
        } => submit_for_review(task, command, *run, branch, pr, report, at),

        Command::Complete => match column {
            Column::InReview => Ok(vec![TaskEvent::Completed { at }]),
            Column::Done => none,
            _ => Err(wrong(&[Column::InReview])),
        },

        Command::Retry { cause, reason } => retry(task, command, cause, reason, now),

        Command::Cancel { reason } => match column {
            Column::Triage | Column::Todo | Column::InProgress | Column::InReview => {
                Ok(vec![TaskEvent::Cancelled {
                    at,
                    reason: reason.clone(),
                }])
            }
            Column::Cancelled => none,
            _ => Err(wrong(OPEN)),
        },

        Command::Archive => match column {
            Column::Done | Column::Cancelled => Ok(vec![TaskEvent::Archived { at }]),
            _ => Err(wrong(CLOSED)),
        },

        Command::FlagNeedsHuman { reason } => flag_needs_human(task, command, reason, at),

        // A closed task carries no flag, so "clear it" already holds there.
        Command::ClearNeedsHuman => clear_needs_human(task, at),

        Command::UpdateSpec {
            spec,
            ticket_version,
        } => update_spec(task, command, spec, *ticket_version, at),

        Command::AttachFollowUp {
            text,
            origin,
            send_back,
        } => {
            if known_origin(task, origin.as_ref()) {
                return Ok(Vec::new());
            }
            attach_follow_up(task, command, text, origin.as_ref(), *send_back, now)
        }

        Command::DeliverFollowUps { run, indices } => {
            deliver_follow_ups(task, command, *run, indices, at)
        }

        Command::Answer { text, origin } => answer(task, command, text, origin.as_ref(), now),

        Command::WithdrawTicket {
            reason,
            ticket_version,
        } => ticket::decide(task, Withdrawn(reason, ticket_version), at),
        Command::NoteTicketVersion { ticket_version } => {
            ticket::decide(task, Seen(ticket_version), at)
        }

        Command::Reprioritize { priority } => reprioritize(task, *priority, at),

        Command::AttachLinks { links } => attach_links(task, links, at),

        Command::ChooseAgent { agent } => choose_agent(task, command, agent, at),

        Command::StartTriage { run } => family::start_triage(task, command, *run, at),

        Command::ProposeSpec { run, spec } => family::propose_spec(task, command, *run, spec, at),

        Command::ProposePlan { run, plan } => family::propose_plan(task, command, *run, plan, at),

        Command::AdoptChildren { children } => family::adopt_children(task, command, children, at),

        Command::RollUp {
            column,
            needs_human,
        } => family::roll_up_plan(task, command, *column, needs_human, at),
        Command::RecordCheckPassed { sha, name } => {
            landing::decide(task, command, LandingCommand::CheckPassed { sha, name }, at)
        }
        Command::RecordApproval { by, sha } => {
            landing::decide(task, command, LandingCommand::Approval { by, sha }, at)
        }
        Command::WithdrawApproval { by } => {
            landing::decide(task, command, LandingCommand::Withdrawal { by }, at)
        }
        Command::RecordCombined {
            commit,
            base,
            items,
        } => super::combined::decide(task, command, commit, base, items, at),
        Command::RecordLanded { .. } => record_landed(task, command, at),
        Command::RecordRefresh { .. } => landing::decide_refresh(task, command, at),
        Command::QueueMerge { .. } => landing::decide_queue(task, command, at),
        Command::MarkStale { .. } => mark_stale(task, command, at),
        Command::ResolveConflict { .. } => super::conflict::decide(task, command, at),
        Command::CheckRefresh { .. } => super::refresh_check::decide(task, command, at),
        Command::FailRefreshCheck { .. } => super::refresh_check::check_failed(task, command, at),
    }
}

/// `Command::RecordLanded`: `task.landed` then `task.completed` for the run in review; nothing when done already.
fn record_landed(
    task: &Task,
    command: &Command,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    let Command::RecordLanded {
        run,
        commit,
        onto,
        fast_forward,
    } = command
    else {
        return Ok(Vec::new());
    };
    match task.column {
        Column::InReview if task.reviewed_run == Some(*run) => Ok(vec![
            TaskEvent::Landed {
                at,
                run: *run,
                commit: commit.clone(),
                onto: onto.clone(),
                fast_forward: *fast_forward,
            },
            TaskEvent::Completed { at },
        ]),
        Column::InReview => Err(TaskError::StaleRun {
            id: task.id,
            run: *run,
            current: task.reviewed_run,
        }),
        // Landed already (a retried request, a restart between the push and the record), or done by a person.
        Column::Done => Ok(Vec::new()),
        _ => Err(wrong_column(task, command, &[Column::InReview])),
    }
}

/// `Command::MarkStale`: nothing unless the task is still in review, not marked in this episode, and untouched
/// since `last_activity` (what the loop saw when it judged the age); then `went_stale`, and under `close` its
/// cancellation with the reason a person reads on its page.
fn mark_stale(
    task: &Task,
    command: &Command,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    let Command::MarkStale {
        after_h,
        action,
        last_activity,
    } = *command
    else {
        return Ok(Vec::new());
    };
    if task.column != Column::InReview
        || task.kind != TaskKind::Task
        || task.stale_since.is_some()
        || task.updated_at != last_activity
    {
        return Ok(Vec::new());
    }
    let mut events = vec![TaskEvent::WentStale {
        at,
        after_h,
        action,
    }];
    if action == super::stale::StaleAction::Close {
        events.push(TaskEvent::Cancelled {
            at,
            reason: super::stale::close_reason(task, after_h),
        });
    }
    Ok(events)
}

/// `command` needs the task in one of `allowed`, and it is not.
pub(super) fn wrong_column(
    task: &Task,
    command: &Command,
    allowed: &'static [Column],
) -> TaskError {
    TaskError::WrongColumn {
        id: task.id,
        column: task.column,
        command: command.name(),
        allowed,
    }
}

fn start(
    task: &Task,
    command: &Command,
    run: RunId,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    if task.column != Column::Todo {
        return Err(wrong_column(task, command, &[Column::Todo]));
    }
    if let Some(flag) = &task.needs_human {
        return Err(TaskError::NeedsHuman {
            id: task.id,
            reason: flag.reason.clone(),
        });
    }
    if task.attempts >= task.max_attempts.get() {
        return Err(TaskError::AttemptsExhausted {
            id: task.id,
            attempts: task.attempts,
            max: task.max_attempts.get(),
        });
    }
    let purpose = task.next_purpose();
    let mut events = vec![TaskEvent::Started {
        at,
        run,
        attempt: task.attempts + 1,
        purpose,
    }];
    // The run's prompt carries every follow-up waiting, so they are handed over now, in order (a refresh check
    // runs no agent: they wait for the next attempt that does).
    let pending = task.pending_follow_up_indices();
    if !pending.is_empty() && purpose != RunPurpose::Refresh {
        events.push(TaskEvent::FollowUpsDelivered {
            at,
            run,
            attempt: task.attempts + 1,
            indices: pending,
            live: false,
        });
    }
    Ok(events)
}

fn submit_for_review(
    task: &Task,
    command: &Command,
    run: RunId,
    branch: &BranchName,
    pr: &Option<GithubRef>,
    report: &AttemptReport,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    if task.column != Column::InProgress {
        return Err(wrong_column(task, command, &[Column::InProgress]));
    }
    live_run(task, run)?;
    let purpose = task.purpose.unwrap_or_default();
    // A refresh check's run pushed the refresh it checked: that is what it records.
    if purpose == RunPurpose::Refresh {
        return then_send_back(task, super::refresh_check::passed(task, at), at);
    }
    // A conflict attempt's resolution is the task's work again, pushed for review like any attempt's.
    if !matches!(purpose, RunPurpose::Work | RunPurpose::Resolve) {
        return Err(TaskError::WrongPurpose {
            id: task.id,
            run,
            purpose,
            command: command.name(),
            needs: RunPurpose::Work,
        });
    }
    let submitted = vec![TaskEvent::SubmittedForReview {
        at,
        run,
        branch: branch.clone(),
        pr: pr.clone(),
        report: Box::new(report.clone()),
    }];
    // Follow-ups that came while it ran and were queued (not handed to it live) send it round again.
    then_send_back(task, submitted, at)
}

/// `events`, then, if they leave the task in review with follow-ups waiting, the retry that takes those to a run
/// (a follow-up must never wait for a next attempt that nothing would start).
fn then_send_back(
    task: &Task,
    mut events: Vec<TaskEvent>,
    now: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    let mut after = task.clone();
    for event in &events {
        after = super::evolution::evolve(Some(after), event)?;
    }
    let pending: Vec<_> = after.pending_follow_ups().collect();
    let Some(last) = pending.last() else {
        return Ok(events);
    };
    // An approved plan in review is its items' roll-up: its items hold the work and take their own follow-ups, so
    // the plan keeps the note and is not sent back (its `Retry` is refused for the same reason).
    if after.column != Column::InReview || after.is_approved_plan() {
        return Ok(events);
    }
    let reason = Reason::summarize(&format!(
        "{} follow-up{} came for it, the last: {}",
        pending.len(),
        if pending.len() == 1 { "" } else { "s" },
        last.text.as_str()
    ));
    let cause = RetryCause::FollowUp;
    let command = Command::Retry {
        cause,
        reason: reason.clone(),
    };
    events.extend(retry(&after, &command, &cause, &reason, now)?);
    Ok(events)
}

fn flag_needs_human(
    task: &Task,
    command: &Command,
    reason: &Reason,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    if !task.column.is_open() {
        return Err(wrong_column(task, command, OPEN));
    }
    if task.needs_human.is_some() {
        return Ok(Vec::new());
    }
    Ok(vec![TaskEvent::FlaggedNeedsHuman {
        at,
        reason: reason.clone(),
        question: false,
    }])
}

fn clear_needs_human(task: &Task, at: DateTime<Utc>) -> Result<Vec<TaskEvent>, TaskError> {
    if task.needs_human.is_none() {
        return Ok(Vec::new());
    }
    let max_attempts = if task.attempts >= task.max_attempts.get() {
        MaxAttempts::new(task.attempts + 1).map_err(|_| TaskError::AttemptCap {
            id: task.id,
            attempts: task.attempts,
        })?
    } else {
        task.max_attempts
    };
    Ok(vec![TaskEvent::NeedsHumanCleared { at, max_attempts }])
}

fn update_spec(
    task: &Task,
    command: &Command,
    spec: &Spec,
    ticket_version: Option<DateTime<Utc>>,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    if !BEFORE_WORK.contains(&task.column) {
        return Err(wrong_column(task, command, BEFORE_WORK));
    }
    let stale = matches!(
        (ticket_version, task.ticket_version),
        (Some(edit), Some(held)) if edit <= held
    );
    if stale || *spec == task.spec {
        return Ok(Vec::new());
    }
    Ok(vec![TaskEvent::SpecUpdated {
        at,
        spec: spec.clone(),
        ticket_version,
    }])
}

fn reprioritize(
    task: &Task,
    priority: Priority,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    if priority == task.priority {
        return Ok(Vec::new());
    }
    Ok(vec![TaskEvent::PriorityChanged { at, priority }])
}

fn attach_links(
    task: &Task,
    links: &Links,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    let added = new_links(task.id, &task.links, links)?;
    if added.is_empty() {
        return Ok(Vec::new());
    }
    Ok(vec![TaskEvent::LinksAttached { at, links: added }])
}

fn choose_agent(
    task: &Task,
    command: &Command,
    agent: &Option<AgentName>,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    if !BETWEEN_ATTEMPTS.contains(&task.column) {
        return Err(wrong_column(task, command, BETWEEN_ATTEMPTS));
    }
    if *agent == task.agent {
        return Ok(Vec::new());
    }
    Ok(vec![TaskEvent::AgentChosen {
        at,
        agent: agent.clone(),
    }])
}

fn create(new: &NewTask, at: DateTime<Utc>) -> Vec<TaskEvent> {
    let mut events = vec![TaskEvent::Created(Box::new(TaskCreated {
        at,
        id: new.id,
        repo: new.repo.clone(),
        spec: new.spec.clone(),
        priority: new.priority,
        links: new.links.clone(),
        approval: new.approval,
        max_attempts: new.max_attempts,
        ticket_version: new.ticket_version,
        agent: new.agent.clone(),
        family: new.family.clone(),
    }))];
    // Auto approval is recorded as an approval, so everything downstream sees one path into `todo`. A plan starts
    // in `todo` (its planner may run); its approval policy is for the plan it proposes.
    if new.approval == ApprovalPolicy::Auto && new.family.kind == TaskKind::Task {
        events.push(TaskEvent::Approved {
            at,
            automatic: true,
        });
    }
    events
}

pub(super) fn live_run(task: &Task, run: RunId) -> Result<(), TaskError> {
    if task.run == Some(run) {
        Ok(())
    } else {
        Err(TaskError::StaleRun {
            id: task.id,
            run,
            current: task.run,
        })
    }
}

/// The links in `proposed` that `existing` lacks; a different value for a set link is a conflict.
pub(super) fn new_links(
    id: TaskId,
    existing: &Links,
    proposed: &Links,
) -> Result<Links, TaskError> {
    existing
        .missing_from(proposed)
        .map_err(|conflict| TaskError::link_conflict(id, conflict))
}

/// The commands that wait while a triage agent rewrites the ticket (the approver waits for it, or cancels).
fn waits_for_triage(command: &Command) -> bool {
    match command {
        Command::Approve | Command::Reject { .. } | Command::UpdateSpec { .. } => true,
        Command::Create(_)
        | Command::Start { .. }
        | Command::Resume { .. }
        | Command::SubmitForReview { .. }
        | Command::Complete
        | Command::Retry { .. }
        | Command::Cancel { .. }
        | Command::Archive
        | Command::FlagNeedsHuman { .. }
        | Command::ClearNeedsHuman
        | Command::AttachFollowUp { .. }
        | Command::DeliverFollowUps { .. }
        | Command::Answer { .. }
        | Command::WithdrawTicket { .. }
        | Command::NoteTicketVersion { .. }
        | Command::Reprioritize { .. }
        | Command::AttachLinks { .. }
        | Command::ChooseAgent { .. }
        | Command::StartTriage { .. }
        | Command::ProposeSpec { .. }
        | Command::ProposePlan { .. }
        | Command::AdoptChildren { .. }
        | Command::RollUp { .. }
        | Command::RecordCheckPassed { .. }
        | Command::RecordApproval { .. }
        | Command::WithdrawApproval { .. }
        | Command::RecordCombined { .. }
        | Command::RecordLanded { .. }
        | Command::RecordRefresh { .. }
        | Command::MarkStale { .. }
        | Command::ResolveConflict { .. }
        | Command::CheckRefresh { .. }
        | Command::FailRefreshCheck { .. }
        | Command::QueueMerge { .. } => false,
    }
}

/// The commands that report or ask for work: an approved plan's items take them, not the plan.
fn is_plan_work(command: &Command) -> bool {
    match command {
        Command::Start { .. }
        | Command::Resume { .. }
        | Command::SubmitForReview { .. }
        | Command::Complete
        | Command::Retry { .. }
        | Command::ChooseAgent { .. } => true,
        Command::Create(_)
        | Command::Approve
        | Command::Reject { .. }
        | Command::Cancel { .. }
        | Command::Archive
        | Command::FlagNeedsHuman { .. }
        | Command::ClearNeedsHuman
        | Command::UpdateSpec { .. }
        | Command::AttachFollowUp { .. }
        | Command::DeliverFollowUps { .. }
        | Command::Answer { .. }
        | Command::WithdrawTicket { .. }
        | Command::NoteTicketVersion { .. }
        | Command::Reprioritize { .. }
        | Command::AttachLinks { .. }
        | Command::StartTriage { .. }
        | Command::ProposeSpec { .. }
        | Command::ProposePlan { .. }
        | Command::AdoptChildren { .. }
        | Command::RollUp { .. }
        | Command::RecordCheckPassed { .. }
        | Command::RecordApproval { .. }
        | Command::WithdrawApproval { .. }
        | Command::RecordCombined { .. }
        | Command::RecordLanded { .. }
        | Command::RecordRefresh { .. }
        | Command::MarkStale { .. }
        | Command::ResolveConflict { .. }
        | Command::CheckRefresh { .. }
        | Command::FailRefreshCheck { .. }
        | Command::QueueMerge { .. } => false,
    }
}
