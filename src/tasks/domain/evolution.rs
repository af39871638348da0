//! `evolve(state, event)`: applies one fact, refusing an event that cannot follow the state; `replay` folds it.

use chrono::{DateTime, Utc};

use super::super::values::{
    AgentName, Column, FollowUpOrigin, FollowUpText, Links, MaxAttempts, Reason, RunId, RunPurpose,
    Spec, TaskKind, GITHUB_PR,
};
use super::decision::new_links;
use super::family::{self, FamilyEvent};
use super::landing::{self, LandingFact};
use super::{
    join, Failure, FollowUp, NeedsHuman, RetryCause, Task, TaskCreated, TaskError, TaskEvent,
    BEFORE_WORK, BETWEEN_ATTEMPTS, CLOSED, NOT_ARCHIVED, OPEN, OSCILLATION_STARTS,
};

/// Applies one event. Refuses events that cannot follow `state` (wrong column, a second `created`, an attempt
/// out of order), so replaying a damaged stream stops at the damage.
pub fn evolve(state: Option<Task>, event: &TaskEvent) -> Result<Task, TaskError> {
    let mut task = match (state, event) {
        (None, TaskEvent::Created(created)) => return Ok(Task::from_created(created)),
        (Some(task), TaskEvent::Created(_)) => {
            return Err(inapplicable(
                Some(&task),
                event,
                "the task already exists".into(),
            ))
        }
        (None, _) => {
            return Err(inapplicable(
                None,
                event,
                "the stream has no task.created".into(),
            ))
        }
        (Some(task), _) => task,
    };
    apply(&mut task, event)?;
    task.updated_at = event.at();
    Ok(task)
}

/// Applies `event` to an existing task, one helper per event that does more than move a column.
fn apply(task: &mut Task, event: &TaskEvent) -> Result<(), TaskError> {
    match event {
        TaskEvent::Created(_) => {
            return Err(inapplicable(
                Some(task),
                event,
                "the task already exists".into(),
            ))
        }
        TaskEvent::Approved { .. } => {
            require(task, event, &[Column::Triage])?;
            task.column = Column::Todo;
        }
        TaskEvent::Rejected { reason, .. } => {
            require(task, event, &[Column::Triage])?;
            task.close(Column::Cancelled, Some(reason.clone()));
        }
        TaskEvent::Started {
            at,
            run,
            attempt,
            purpose,
        } => started(task, event, *at, *run, *attempt, *purpose)?,
        TaskEvent::Resumed {
            run,
            attempt,
            checkpoint,
            ..
        } => super::resume::evolve(task, event, *run, *attempt, checkpoint)?,
        TaskEvent::SubmittedForReview { .. } => submitted(task, event)?,
        TaskEvent::Completed { .. } => {
            require(task, event, &[Column::InReview])?;
            task.close(Column::Done, None);
        }
        TaskEvent::Retried {
            at,
            cause,
            reason,
            attempt,
        } => retried(task, event, *at, cause, reason, *attempt)?,
        TaskEvent::Cancelled { reason, .. } => {
            require(task, event, OPEN)?;
            task.close(Column::Cancelled, Some(reason.clone()));
        }
        TaskEvent::Archived { .. } => {
            require(task, event, CLOSED)?;
            task.column = Column::Archived;
        }
        TaskEvent::FlaggedNeedsHuman {
            at,
            reason,
            question,
        } => flagged(task, event, *at, reason, *question)?,
        TaskEvent::NeedsHumanCleared { max_attempts, .. } => cleared(task, event, *max_attempts)?,
        TaskEvent::SpecUpdated {
            spec,
            ticket_version,
            ..
        } => spec_updated(task, event, spec, *ticket_version)?,
        TaskEvent::FollowUpAttached {
            at, text, origin, ..
        } => follow_up_attached(task, event, *at, text, origin)?,
        TaskEvent::FollowUpsDelivered {
            run,
            attempt,
            indices,
            live,
            ..
        } => follow_ups_delivered(task, event, *run, *attempt, indices, *live)?,
        TaskEvent::TicketSeen { .. } => super::ticket::evolve(task, event)?,
        TaskEvent::PriorityChanged { priority, .. } => {
            require(task, event, NOT_ARCHIVED)?;
            task.priority = *priority;
        }
        TaskEvent::LinksAttached { links, .. } => links_attached(task, event, links)?,
        TaskEvent::AgentChosen { agent, .. } => agent_chosen(task, event, agent)?,
        TaskEvent::AttemptReturned { max_attempts, .. } => {
            attempt_returned(task, event, *max_attempts)?
        }
        TaskEvent::TriageEnded { at, run, outcome } => family::apply(
            task,
            event,
            FamilyEvent::TriageEnded {
                at: *at,
                run: *run,
                outcome,
            },
        )?,
        TaskEvent::PlanProposed { run, plan, .. } => {
            family::apply(task, event, FamilyEvent::PlanProposed { run: *run, plan })?
        }
        TaskEvent::PlanApproved { at, .. } => {
            family::apply(task, event, FamilyEvent::PlanApproved { at: *at })?
        }
        TaskEvent::PlanRejected {
            reason,
            max_attempts,
            ..
        } => family::apply(
            task,
            event,
            FamilyEvent::PlanRejected {
                reason,
                max_attempts: *max_attempts,
            },
        )?,
        TaskEvent::ChildrenCreated { children, .. } => {
            family::apply(task, event, FamilyEvent::ChildrenCreated { children })?
        }
        TaskEvent::RolledUp {
            column,
            needs_human,
            ..
        } => family::apply(
            task,
            event,
            FamilyEvent::RolledUp {
                column: *column,
                needs_human,
            },
        )?,
        TaskEvent::CheckPassed { sha, name, .. } => {
            landing::evolve(task, event, LandingFact::CheckPassed { sha, name })?
        }
        TaskEvent::ReviewApproved { sha, by, .. } => {
            landing::evolve(task, event, LandingFact::Approved { sha, by })?
        }
        TaskEvent::ApprovalWithdrawn { by, .. } => {
            landing::evolve(task, event, LandingFact::Withdrawn { by })?
        }
        TaskEvent::Combined { .. } => super::combined::apply(task, event)?,
        TaskEvent::Landed { .. } => require(task, event, &[Column::InReview])?, // `completed` follows
        TaskEvent::Refreshed { to, .. } => refreshed(task, event, to)?,
        TaskEvent::MergeQueued { sha, .. } => queued(task, event, sha)?,
        TaskEvent::WentStale { at, .. } => went_stale(task, event, *at)?,
        TaskEvent::ConflictFound { .. } => super::conflict::found(task, event)?,
        TaskEvent::ConflictUnresolved { .. } => super::conflict::unresolved(task, event)?,
        TaskEvent::RefreshCheckDue { .. } => super::refresh_check::due(task, event)?,
        TaskEvent::RefreshCheckFailed { .. } => super::refresh_check::ended(task, event)?,
    }
    Ok(())
}

/// A submission for review: the run's push is what is reviewed now.
fn submitted(task: &mut Task, event: &TaskEvent) -> Result<(), TaskError> {
    let TaskEvent::SubmittedForReview {
        run,
        branch,
        pr,
        report,
        ..
    } = event
    else {
        return Ok(());
    };
    require(task, event, &[Column::InProgress])?;
    task.column = Column::InReview;
    task.run = None;
    task.purpose = None;
    task.report = (**report).clone();
    task.branch = Some(branch.clone());
    task.reviewed_run = Some(*run);
    task.stale_since = None;
    // A conflict attempt's resolution is pushed: its conflict is over.
    task.conflict = None;
    // A new push: approvals and checks of the code before it do not count.
    landing::evolve(task, event, LandingFact::NewPush)?;
    // A newer pull request supersedes the old one; no submission removes a link.
    if let Some(pr) = pr {
        // GITHUB_PR is replaceable: setting it never conflicts.
        task.links
            .set(GITHUB_PR, pr)
            .map_err(|conflict| TaskError::link_conflict(task.id, conflict))?;
    }
    Ok(())
}

/// The merge queue chose the head the facts are about: its merge is in flight.
fn queued(task: &mut Task, event: &TaskEvent, sha: &super::CommitSha) -> Result<(), TaskError> {
    landing::evolve(task, event, LandingFact::Queued { sha })
}

/// A refresh is a new push: the landing facts start over, and so does the review episode for staleness.
fn refreshed(task: &mut Task, event: &TaskEvent, to: &super::CommitSha) -> Result<(), TaskError> {
    // A refresh check's run pushed it: that run is over, the task back in review.
    if task.column == Column::InProgress {
        super::refresh_check::ended(task, event)?;
    }
    task.stale_since = None;
    landing::evolve(task, event, LandingFact::Refreshed { to })
}

/// `went_stale` ends the review episode until the next submission (`stale.rs`).
fn went_stale(task: &mut Task, event: &TaskEvent, at: DateTime<Utc>) -> Result<(), TaskError> {
    require(task, event, &[Column::InReview])?;
    task.stale_since = Some(at);
    Ok(())
}

/// `event` needs the task in one of `allowed`.
pub(super) fn require(task: &Task, event: &TaskEvent, allowed: &[Column]) -> Result<(), TaskError> {
    if allowed.contains(&task.column) {
        Ok(())
    } else {
        Err(inapplicable(
            Some(task),
            event,
            format!("it is {}, not {}", task.column, join(allowed)),
        ))
    }
}

fn started(
    task: &mut Task,
    event: &TaskEvent,
    at: DateTime<Utc>,
    run: RunId,
    attempt: u32,
    purpose: RunPurpose,
) -> Result<(), TaskError> {
    let fits = match purpose {
        RunPurpose::Work => task.kind == TaskKind::Task,
        RunPurpose::Plan => task.kind == TaskKind::Plan && !task.is_approved_plan(),
        RunPurpose::Triage => task.kind == TaskKind::Task,
        RunPurpose::Resolve => task.kind == TaskKind::Task && task.conflict.is_some(),
        RunPurpose::Refresh => task.kind == TaskKind::Task && task.refresh_check.is_some(),
    };
    if !fits {
        return Err(inapplicable(
            Some(task),
            event,
            format!("a {purpose} run cannot start on a {}", task.kind),
        ));
    }
    if purpose == RunPurpose::Triage {
        // Not an attempt: no count, no bounce, no follow-up handed over.
        require(task, event, &[Column::Triage])?;
        if attempt != 0 || task.triage.is_some() {
            return Err(inapplicable(
                Some(task),
                event,
                "a triage run is attempt 0, once".into(),
            ));
        }
        task.column = Column::InProgress;
        task.run = Some(run);
        task.purpose = Some(purpose);
        return Ok(());
    }
    require(task, event, &[Column::Todo])?;
    if attempt != task.attempts + 1 || attempt > task.max_attempts.get() {
        return Err(inapplicable(
            Some(task),
            event,
            format!(
                "attempt {attempt} cannot follow {} of {}",
                task.attempts,
                task.max_attempts.get()
            ),
        ));
    }
    task.column = Column::InProgress;
    task.attempts = attempt;
    task.run = Some(run);
    task.purpose = Some(purpose);
    // A new attempt: whatever an earlier one resumed is behind it.
    task.resumes = 0;
    task.resumption = None;
    task.given_back = false;
    // A refresh check runs no agent: not a bounce, and no follow-up is handed to it.
    if purpose == RunPurpose::Refresh {
        return Ok(());
    }
    if task.recent_starts.len() >= OSCILLATION_STARTS {
        task.recent_starts.remove(0);
    }
    task.recent_starts.push(at);
    for follow_up in &mut task.follow_ups {
        follow_up.delivered_to_attempt.get_or_insert(attempt);
    }
    Ok(())
}

fn retried(
    task: &mut Task,
    event: &TaskEvent,
    at: DateTime<Utc>,
    cause: &RetryCause,
    reason: &Reason,
    attempt: u32,
) -> Result<(), TaskError> {
    require(task, event, &[Column::InProgress, Column::InReview])?;
    if attempt != task.attempts {
        return Err(inapplicable(
            Some(task),
            event,
            format!("attempt {attempt} is not the last one ({})", task.attempts),
        ));
    }
    // A refresh check's start was never counted (`started`): nothing to take back.
    let counted = task.purpose != Some(RunPurpose::Refresh);
    task.column = Column::Todo;
    task.run = None;
    task.purpose = None;
    task.given_back = false;
    if matches!(cause, RetryCause::Interrupted { .. }) && counted {
        task.recent_starts.pop();
    }
    task.last_failure = Some(Failure {
        attempt,
        cause: *cause,
        reason: reason.clone(),
        at,
    });
    Ok(())
}

fn flagged(
    task: &mut Task,
    event: &TaskEvent,
    at: DateTime<Utc>,
    reason: &Reason,
    question: bool,
) -> Result<(), TaskError> {
    require(task, event, OPEN)?;
    if task.needs_human.is_some() {
        return Err(inapplicable(
            Some(task),
            event,
            "it is already flagged".into(),
        ));
    }
    task.needs_human = Some(NeedsHuman {
        reason: reason.clone(),
        since: at,
        question,
    });
    // A merge the queue chose is no longer in flight: what flagged it stopped it (or it failed). Once cleared,
    // the queue chooses again.
    task.landing.unqueue();
    Ok(())
}

fn cleared(task: &mut Task, event: &TaskEvent, max_attempts: MaxAttempts) -> Result<(), TaskError> {
    require(task, event, OPEN)?;
    if task.needs_human.is_none() || max_attempts < task.max_attempts {
        return Err(inapplicable(
            Some(task),
            event,
            "it is not flagged, or the budget would shrink".into(),
        ));
    }
    task.needs_human = None;
    task.max_attempts = max_attempts;
    // A human looked: earlier bounces no longer count against the next attempts.
    task.recent_starts.clear();
    Ok(())
}

fn spec_updated(
    task: &mut Task,
    event: &TaskEvent,
    spec: &Spec,
    ticket_version: Option<DateTime<Utc>>,
) -> Result<(), TaskError> {
    require(task, event, BEFORE_WORK)?;
    task.spec = spec.clone();
    // Never backwards: an edit without a version (from a person) keeps the ticket's.
    task.ticket_version = task.ticket_version.max(ticket_version);
    Ok(())
}

fn follow_up_attached(
    task: &mut Task,
    event: &TaskEvent,
    at: DateTime<Utc>,
    text: &FollowUpText,
    origin: &Option<FollowUpOrigin>,
) -> Result<(), TaskError> {
    require(task, event, OPEN)?;
    task.follow_ups.push(FollowUp {
        text: text.clone(),
        at,
        delivered_to_attempt: None,
        origin: origin.clone(),
        live: false,
    });
    Ok(())
}

/// Marks follow-ups handed to `attempt`. A run's start already marks every follow-up waiting (the events before
/// this one existed say no more), so one marked for this very attempt is the same fact again.
fn follow_ups_delivered(
    task: &mut Task,
    event: &TaskEvent,
    run: RunId,
    attempt: u32,
    indices: &[u32],
    live: bool,
) -> Result<(), TaskError> {
    require(task, event, &[Column::InProgress])?;
    if task.run != Some(run) || attempt != task.attempts {
        return Err(inapplicable(
            Some(task),
            event,
            format!("run {run} (attempt {attempt}) is not the live run"),
        ));
    }
    for index in indices {
        let Some(follow_up) = task.follow_ups.get_mut(*index as usize) else {
            return Err(inapplicable(
                Some(task),
                event,
                format!("there is no follow-up {index}"),
            ));
        };
        match follow_up.delivered_to_attempt {
            Some(to) if to != attempt => {
                return Err(inapplicable(
                    Some(task),
                    event,
                    format!("follow-up {index} went to attempt {to} already"),
                ))
            }
            _ => {
                follow_up.delivered_to_attempt = Some(attempt);
                follow_up.live = live;
            }
        }
    }
    Ok(())
}

fn links_attached(task: &mut Task, event: &TaskEvent, links: &Links) -> Result<(), TaskError> {
    require(task, event, NOT_ARCHIVED)?;
    let added = new_links(task.id, &task.links, links)?;
    task.links.add_missing(added);
    Ok(())
}

fn agent_chosen(
    task: &mut Task,
    event: &TaskEvent,
    agent: &Option<AgentName>,
) -> Result<(), TaskError> {
    require(task, event, BETWEEN_ATTEMPTS)?;
    task.agent = agent.clone();
    Ok(())
}

fn attempt_returned(
    task: &mut Task,
    event: &TaskEvent,
    max_attempts: MaxAttempts,
) -> Result<(), TaskError> {
    require(task, event, &[Column::Todo])?;
    let given_back = matches!(
        task.last_failure.as_ref().map(|f| f.cause),
        Some(
            RetryCause::Interrupted { .. }
                | RetryCause::SetupFailed { .. }
                | RetryCause::Limited { .. }
                | RetryCause::Restarted { .. }
                | RetryCause::AgentAsked { .. }
        )
    );
    if !given_back || max_attempts.get() != task.max_attempts.get() + 1 {
        return Err(inapplicable(
            Some(task),
            event,
            "it must follow an interrupted or restarted attempt, a failed setup, a provider's limit or a question, and raise the budget by one"
                .into(),
        ));
    }
    task.max_attempts = max_attempts;
    // Taken back if the attempt resumes (`resume.rs`): resuming is not another attempt.
    task.given_back = true;
    Ok(())
}

/// Replays a whole stream.
pub fn replay<'a>(
    events: impl IntoIterator<Item = &'a TaskEvent>,
) -> Result<Option<Task>, TaskError> {
    events
        .into_iter()
        .try_fold(None, |state, event| evolve(state, event).map(Some))
}

impl Task {
    fn from_created(created: &TaskCreated) -> Self {
        let plan = created.family.kind == TaskKind::Plan;
        Task {
            id: created.id,
            repo: created.repo.clone(),
            spec: created.spec.clone(),
            priority: created.priority,
            links: created.links.clone(),
            // A plan's goal was stated by someone trusted: its planner may run; the plan it proposes waits.
            column: if plan { Column::Todo } else { Column::Triage },
            approval: created.approval,
            needs_human: None,
            attempts: 0,
            max_attempts: created.max_attempts,
            run: None,
            branch: None,
            reviewed_run: None,
            refreshed: None,
            stale_since: None,
            conflict: None,
            conflicts_tried: Vec::new(),
            refresh_check: None,
            checks_tried: Vec::new(),
            last_failure: None,
            closed_reason: None,
            follow_ups: Vec::new(),
            created_at: created.at,
            updated_at: created.at,
            ticket_version: created.ticket_version,
            agent: created.agent.clone(),
            recent_starts: Vec::new(),
            resumes: 0,
            resumption: None,
            given_back: false,
            kind: created.family.kind,
            parent: created.family.parent,
            depends_on: created.family.depends_on.clone(),
            scope: created.family.scope.clone(),
            purpose: None,
            plan: plan.then(super::PlanState::default),
            triage: None,
            report: Default::default(),
            landing: Default::default(),
        }
    }

    /// Leaving the open columns ends any run and any needs-human episode: nobody is working or waiting on it.
    pub(super) fn close(&mut self, column: Column, reason: Option<Reason>) {
        self.column = column;
        self.run = None;
        self.purpose = None;
        self.needs_human = None;
        self.closed_reason = reason;
    }
}

pub(super) fn inapplicable(task: Option<&Task>, event: &TaskEvent, why: String) -> TaskError {
    TaskError::Inapplicable {
        task: task.map_or_else(|| "an empty stream".to_owned(), |t| t.id.to_string()),
        event: event.kind(),
        why,
    }
}
