//! The Linear policy's pure request builders: what Linear hears of a task from one of its events (comments, state
//! moves, agent activities), and the session and pull request notices.

use serde_json::json;

use super::LinearAction;
use crate::domain::effect::LinearStates;
use crate::effects::policy_config::PolicyConfig;
use crate::effects::Request;
use crate::tasks::{Reason, RetryCause, RunId, Task, TaskEvent, GITHUB_PR, LINEAR_ISSUE};

/// Whether a task event is news for Linear (checked before the task is loaded).
pub fn linear_notifies(event: &TaskEvent) -> bool {
    match event {
        TaskEvent::Started { .. }
        | TaskEvent::SubmittedForReview { .. }
        | TaskEvent::Retried { .. }
        | TaskEvent::FlaggedNeedsHuman { .. }
        | TaskEvent::Completed { .. }
        | TaskEvent::Cancelled { .. }
        // A plan's proposal, approval and roll-up (and its items' news above) move its session's checklist.
        | TaskEvent::PlanProposed { .. }
        | TaskEvent::PlanApproved { .. }
        | TaskEvent::PlanRejected { .. }
        | TaskEvent::ChildrenCreated { .. }
        | TaskEvent::RolledUp { .. }
        | TaskEvent::WentStale { .. } => true,
        // The attempt goes on: Linear already shows it in progress.
        TaskEvent::Resumed { .. }
        | TaskEvent::Created(_)
        | TaskEvent::Approved { .. }
        | TaskEvent::Rejected { .. }
        | TaskEvent::Archived { .. }
        | TaskEvent::NeedsHumanCleared { .. }
        | TaskEvent::SpecUpdated { .. }
        | TaskEvent::FollowUpAttached { .. }
        | TaskEvent::FollowUpsDelivered { .. }
        | TaskEvent::TicketSeen { .. }
        | TaskEvent::PriorityChanged { .. }
        | TaskEvent::LinksAttached { .. }
        | TaskEvent::AttemptReturned { .. }
        | TaskEvent::AgentChosen { .. }
        | TaskEvent::TriageEnded { .. }
        | TaskEvent::CheckPassed { .. }
        | TaskEvent::ReviewApproved { .. }
        | TaskEvent::ApprovalWithdrawn { .. }
        | TaskEvent::Combined { .. }
        | TaskEvent::Landed { .. }
        | TaskEvent::Refreshed { .. }
        | TaskEvent::ConflictFound { .. }
        | TaskEvent::ConflictUnresolved { .. }
        | TaskEvent::RefreshCheckDue { .. }
        | TaskEvent::RefreshCheckFailed { .. }
        | TaskEvent::MergeQueued { .. } => false,
    }
}

/// What Linear hears of a task from one of its events: comments and state moves on the issue, or, when an agent
/// session (`session`) has the issue, agent activities instead of comments. Every attempt ends in exactly one
/// terminal activity (`response` or `error`, keyed by its run, so whichever of its causes comes first posts it),
/// since a `response` closes the session in Linear. `event_id` keys what happens once per event.
/// `last_run`: the run of the task's latest start (the attempt a pull request or a cancel belongs to).
pub fn linear(
    event: &TaskEvent,
    task: &Task,
    session: Option<&str>,
    last_run: Option<RunId>,
    event_id: &str,
    config: &PolicyConfig,
    states: &LinearStates,
) -> Vec<Request<LinearAction>> {
    let Some(issue) = task.links().get(LINEAR_ISSUE).map(|l| l.id()) else {
        return Vec::new();
    };
    let news = IssueNews {
        task,
        issue,
        session,
        event_id,
    };
    match event {
        TaskEvent::Started {
            run,
            attempt,
            purpose: crate::tasks::RunPurpose::Plan,
            ..
        } => news.planning(*run, *attempt, &states.in_progress),
        TaskEvent::Started { run, attempt, .. } => {
            news.started(*run, *attempt, &states.in_progress)
        }
        TaskEvent::PlanProposed { run, plan, .. } => news
            .proposed(*run, plan.items().len())
            .into_iter()
            .collect(),
        TaskEvent::PlanRejected { reason, .. } => news.replanning(reason).into_iter().collect(),
        TaskEvent::RolledUp { column, .. } => news.rolled_up(*column, states),
        TaskEvent::SubmittedForReview {
            run, branch, pr, ..
        } => {
            let mut requests = vec![news.move_to(&states.in_review, "started")];
            // The pull request was known when it was submitted (an earlier attempt opened it: the policy reads
            // that from the task's history, not its links now), or none will be opened: this attempt's end is
            // now. Otherwise it is when the pull request opens (see `linear_pull_request`).
            let known = pr.clone();
            if known.is_some() || !config.pull_requests {
                let place = known.map_or_else(
                    || format!("branch `{branch}`"),
                    |pr| format!("pull request {pr}"),
                );
                let of = format!("{} of {}", task.attempts(), task.max_attempts().get());
                requests.extend(review_notice(task, session, *run, &place, &of));
            }
            requests
        }
        TaskEvent::Retried {
            cause,
            reason,
            attempt,
            ..
        } => news.retried(cause, reason, *attempt).into_iter().collect(),
        TaskEvent::FlaggedNeedsHuman {
            reason, question, ..
        } => news.flagged(reason, *question, &states.blocked),
        TaskEvent::Completed { .. } => news.completed(&states.done),
        TaskEvent::Cancelled { reason, .. } => {
            // A plan's last planner run ended with its proposal: the cancellation is news of its own.
            let proposed = task.plan().is_some_and(|p| p.proposal.is_some());
            vec![news.cancelled(reason, last_run.filter(|_| !proposed))]
        }
        TaskEvent::WentStale {
            after_h,
            action: crate::tasks::StaleAction::Remind,
            ..
        } => vec![news.comment(
            format!("linear:comment:{event_id}"),
            format!(
                "**{}** has waited in review for {after_h} h without activity: its pull request needs a reviewer.",
                task.id()
            ),
        )],
        // Closed: its cancellation, which follows, says why.
        TaskEvent::WentStale { .. } => Vec::new(),
        // Its flag (when the conflict needs a person) is the news.
        TaskEvent::ConflictFound { .. }
        | TaskEvent::ConflictUnresolved { .. }
        | TaskEvent::RefreshCheckDue { .. }
        | TaskEvent::RefreshCheckFailed { .. } => Vec::new(),
        // The checklist's news (see `linear_notifies`) is `plan.rs`'s; the rest is not told to Linear.
        TaskEvent::Created(_)
        | TaskEvent::Resumed { .. }
        | TaskEvent::Approved { .. }
        | TaskEvent::Rejected { .. }
        | TaskEvent::Archived { .. }
        | TaskEvent::NeedsHumanCleared { .. }
        | TaskEvent::SpecUpdated { .. }
        | TaskEvent::FollowUpAttached { .. }
        | TaskEvent::FollowUpsDelivered { .. }
        | TaskEvent::TicketSeen { .. }
        | TaskEvent::PriorityChanged { .. }
        | TaskEvent::LinksAttached { .. }
        | TaskEvent::AttemptReturned { .. }
        | TaskEvent::AgentChosen { .. }
        | TaskEvent::TriageEnded { .. }
        | TaskEvent::PlanApproved { .. }
        | TaskEvent::ChildrenCreated { .. }
        | TaskEvent::CheckPassed { .. }
        | TaskEvent::ReviewApproved { .. }
        | TaskEvent::ApprovalWithdrawn { .. }
        | TaskEvent::Combined { .. }
        | TaskEvent::Landed { .. }
        | TaskEvent::MergeQueued { .. }
        | TaskEvent::Refreshed { .. } => Vec::new(),
    }
}

/// One task event's news for the task's Linear issue: the requests [`linear`] builds, keyed by the event.
struct IssueNews<'a> {
    task: &'a Task,
    issue: uuid::Uuid,
    session: Option<&'a str>,
    event_id: &'a str,
}

impl IssueNews<'_> {
    fn request(&self, key: String, action: LinearAction) -> Request<LinearAction> {
        Request {
            key,
            task: Some(self.task.id()),
            action,
        }
    }

    fn move_to(&self, names: &[String], fallback: &str) -> Request<LinearAction> {
        self.request(
            format!("linear:state:{}", self.event_id),
            LinearAction::MoveIssue {
                issue: self.issue,
                states: names.to_vec(),
                fallback: fallback.to_owned(),
            },
        )
    }

    fn comment(&self, key: String, body: String) -> Request<LinearAction> {
        let issue = self.issue;
        self.request(key, LinearAction::Comment { issue, body })
    }

    /// An activity in the issue's agent session; `None` when no session has the issue.
    fn activity(&self, key: String, content: serde_json::Value) -> Option<Request<LinearAction>> {
        self.session.map(|session| {
            self.request(
                key,
                LinearAction::Activity {
                    session: session.to_owned(),
                    content,
                },
            )
        })
    }

    fn started(
        &self,
        run: RunId,
        attempt: u32,
        in_progress: &[String],
    ) -> Vec<Request<LinearAction>> {
        let (task, id) = (self.task, self.task.id());
        let mut requests = vec![self.move_to(in_progress, "started")];
        let agent = task
            .agent()
            .map_or_else(|| "the repository's agent".to_owned(), |a| a.to_string());
        match self.activity(
            format!("linear:activity:{run}:started"),
            json!({
                "type": "action",
                "action": "Working",
                "parameter": format!("attempt {attempt} of {} on pidevops/{id} with {agent}", task.max_attempts().get()),
            }),
        ) {
            Some(action) => requests.push(action),
            // People hear once that work started; later attempts show in the state and the end of each.
            None if attempt == 1 => requests.push(self.comment(
                format!("linear:comment:{id}:started"),
                format!(
                    "pidevops started work on this as **{id}** in `{}` on branch `pidevops/{id}` with {agent}.",
                    task.repo()
                ),
            )),
            None => {}
        }
        requests
    }

    /// A plan's planner at work: the issue in progress, and the session told it is planning (not coding).
    fn planning(
        &self,
        run: RunId,
        attempt: u32,
        in_progress: &[String],
    ) -> Vec<Request<LinearAction>> {
        let mut requests = vec![self.move_to(in_progress, "started")];
        requests.extend(self.activity(
            format!("linear:activity:{run}:started"),
            json!({
                "type": "action",
                "action": "Planning",
                "parameter": format!("attempt {attempt} of {}: splitting the goal into tasks", self.task.max_attempts().get()),
            }),
        ));
        requests
    }

    /// The planner's run ended with a plan: it waits for a person (the session asks, or a comment on a plain
    /// issue), or was approved as proposed. In a session its checklist is the session's `plan` (`plan.rs`).
    fn proposed(&self, run: RunId, items: usize) -> Option<Request<LinearAction>> {
        let id = self.task.id();
        if self.task.approval() != crate::tasks::ApprovalPolicy::Manual {
            let body = format!("**{id}**: a plan of {items} task(s), approved as proposed.");
            return self.activity(
                format!("linear:activity:{run}:end"),
                json!({ "type": "thought", "body": body }),
            );
        }
        let text = format!(
            "**{id}** proposes a plan of {items} task(s) and waits for approval: `pidevops plan show {id}`, then \
             `pidevops plan approve {id}` or `pidevops plan reject {id} --comment …` (or from Telegram)."
        );
        Some(
            match self.activity(
                format!("linear:activity:{run}:end"),
                json!({ "type": "elicitation", "body": text }),
            ) {
                Some(ask) => ask,
                None => self.comment(format!("linear:comment:{}", self.event_id), text),
            },
        )
    }

    /// A person rejected the plan with a comment: the planner runs again with it.
    fn replanning(&self, reason: &Reason) -> Option<Request<LinearAction>> {
        self.activity(
            format!("linear:activity:{}", self.event_id),
            json!({
                "type": "thought",
                "body": format!("The plan was rejected; planning again: {}", reason.as_str()),
            }),
        )
    }

    /// An approved plan follows its items: in review when all are, done when all are done (the session ends with
    /// a `response`), cancelled when all were.
    fn rolled_up(
        &self,
        column: crate::tasks::Column,
        states: &crate::domain::effect::LinearStates,
    ) -> Vec<Request<LinearAction>> {
        use crate::tasks::Column;
        let id = self.task.id();
        let (text, mut requests) = match column {
            Column::InProgress => return vec![self.move_to(&states.in_progress, "started")],
            Column::InReview => return vec![self.move_to(&states.in_review, "started")],
            Column::Done => (
                format!("**{id}** is done: every task of its plan is done."),
                vec![self.move_to(&states.done, "completed")],
            ),
            Column::Cancelled => (
                format!("**{id}** ended: every task of its plan was cancelled."),
                Vec::new(),
            ),
            _ => return Vec::new(),
        };
        let key = format!("linear:activity:{}", self.event_id);
        requests.push(
            match self.activity(key, json!({ "type": "response", "body": text })) {
                Some(end) => end,
                None => self.comment(format!("linear:comment:{}", self.event_id), text),
            },
        );
        requests
    }

    fn retried(
        &self,
        cause: &RetryCause,
        reason: &Reason,
        attempt: u32,
    ) -> Option<Request<LinearAction>> {
        match cause {
            // A thought, not an error: Linear ends a session at an error, and a failed attempt either goes again
            // or flags the task, whose elicitation then asks a person (the session waits for the answer).
            RetryCause::RunFailed { run }
            | RetryCause::Lost { run }
            | RetryCause::SetupFailed { run }
            | RetryCause::OverBudget { run }
            | RetryCause::AgentNeedsHuman { run } => self.activity(
                format!("linear:activity:{run}:end"),
                json!({
                    "type": "thought",
                    "body": format!("Attempt {attempt} failed: {}", reason.as_str()),
                }),
            ),
            RetryCause::ChecksFailed | RetryCause::ChangesRequested | RetryCause::FollowUp => self
                .activity(
                    format!("linear:activity:{}", self.event_id),
                    json!({
                        "type": "thought",
                        "body": format!("Going again: {}", reason.as_str()),
                    }),
                ),
            // A thought, not an error: the session goes on once the limit lifts.
            RetryCause::Limited { run, until } => self.activity(
                format!("linear:activity:{run}:end"),
                json!({
                    "type": "thought",
                    "body": format!(
                        "Waiting for the model provider's limit to lift (until {} UTC): {}",
                        until.format("%Y-%m-%d %H:%M"),
                        reason.as_str()
                    ),
                }),
            ),
            // The question itself is asked by the flag that follows (an elicitation); a restart is no news.
            RetryCause::Interrupted { .. }
            | RetryCause::Restarted { .. }
            | RetryCause::AgentAsked { .. } => None,
        }
    }

    /// A needs-human episode asks its question where the task lives: an `elicitation` in the session (it waits
    /// for the person's reply without ending; the reply is the answer), else a comment on the issue. Once per
    /// episode: the domain records one flag per episode, and the key is that event's.
    fn flagged(
        &self,
        reason: &Reason,
        question: bool,
        blocked: &[String],
    ) -> Vec<Request<LinearAction>> {
        let id = self.task.id();
        let event_id = self.event_id;
        let asked = if question {
            format!("**{id}**: the agent asks:\n\n{}", quoted(reason.as_str()))
        } else {
            format!("**{id}** needs a human: {}", reason.as_str())
        };
        let ask = match self.session {
            Some(_) => format!(
                "{asked}\n\nReply in this session to answer: your reply goes to the next attempt. Or retry or \
                 cancel it from Telegram (`/retry {id}`, `/cancel {id}`) or the CLI."
            ),
            None => format!(
                "{asked}\n\nAnswer on pidevops's dashboard (the task's page), with `pidevops task answer {id} \"…\"`, \
                 or by replying to its Telegram message: the answer goes to the next attempt. Or retry or cancel \
                 it (`/retry {id}`, `/cancel {id}`)."
            ),
        };
        let ask = match self.activity(
            format!("linear:activity:{event_id}"),
            // Asks the person for input (the session waits for them) without ending it.
            json!({ "type": "elicitation", "body": ask }),
        ) {
            Some(ask) => ask,
            None => self.comment(format!("linear:comment:{event_id}"), ask),
        };
        vec![self.move_to(blocked, "started"), ask]
    }

    fn completed(&self, done: &[String]) -> Vec<Request<LinearAction>> {
        let id = self.task.id();
        let mut requests = vec![self.move_to(done, "completed")];
        // A session already ended with its last attempt's response; another activity would reopen it.
        if self.session.is_none() {
            let pr = self
                .task
                .links()
                .get(GITHUB_PR)
                .map_or_else(String::new, |pr| format!(": {pr} was merged"));
            requests.push(self.comment(
                format!("linear:comment:{}", self.event_id),
                format!("**{id}** is done{pr}."),
            ));
        }
        requests
    }

    fn cancelled(&self, reason: &Reason, last_run: Option<RunId>) -> Request<LinearAction> {
        let event_id = self.event_id;
        let text = format!("**{}** was cancelled: {}", self.task.id(), reason.as_str());
        // The attempt under way (a stop signal) ends here; one that ended already keeps its end (same key).
        let key = last_run.map_or_else(
            || format!("linear:activity:{event_id}"),
            |run| format!("linear:activity:{run}:end"),
        );
        let ended = json!({ "type": "response", "body": text });
        match self.activity(key, ended) {
            Some(end) => end,
            None => self.comment(format!("linear:comment:{event_id}"), text),
        }
    }
}

/// The end of an attempt that went to review: the session's `response` (with the pull request among its links),
/// or a comment on the issue when its pull request opens (once per task).
fn review_notice(
    task: &Task,
    session: Option<&str>,
    run: RunId,
    place: &str,
    of: &str,
) -> Vec<Request<LinearAction>> {
    let Some(issue) = task.links().get(LINEAR_ISSUE).map(|l| l.id()) else {
        return Vec::new();
    };
    let id = task.id();
    let text = format!("**{id}** is ready for review in {place} (attempt {of}).");
    match session {
        Some(session) => vec![Request {
            key: format!("linear:activity:{run}:end"),
            task: Some(id),
            action: LinearAction::Activity {
                session: session.to_owned(),
                content: json!({ "type": "response", "body": text }),
            },
        }],
        None => vec![Request {
            key: format!("linear:comment:{id}:review"),
            task: Some(id),
            action: LinearAction::Comment { issue, body: text },
        }],
    }
}

/// `text` as a Markdown quote, line by line (the agent's words, shown as theirs).
fn quoted(text: &str) -> String {
    text.lines()
        .map(|line| format!("> {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// When the task's pull request opens: the attempt's end for Linear (see [`linear`]), and the pull request among
/// the session's links.
pub fn linear_pull_request(
    task: &Task,
    session: Option<&str>,
    last_run: Option<RunId>,
    url: &str,
) -> Vec<Request<LinearAction>> {
    let Some(run) = last_run else {
        return Vec::new();
    };
    let of = format!("{} of {}", task.attempts(), task.max_attempts().get());
    let mut requests = review_notice(
        task,
        session,
        run,
        &format!("[the pull request]({url})"),
        &of,
    );
    if let Some(session) = session {
        requests.push(Request {
            key: format!("linear:session-urls:{session}:{}", task.id()),
            task: Some(task.id()),
            action: LinearAction::SessionUrls {
                session: session.to_owned(),
                urls: vec![("Pull request".to_owned(), url.to_owned())],
            },
        });
    }
    requests
}

/// An agent session pidevops will not work on (intake said why): ended with an `error` naming the reason.
pub fn linear_session_refused(session: &str, reason: &str) -> Request<LinearAction> {
    Request {
        key: format!("linear:activity:{session}:refused"),
        task: None,
        action: LinearAction::Activity {
            session: session.to_owned(),
            content: json!({
                "type": "error",
                "body": format!("pidevops cannot take this on: {reason}"),
            }),
        },
    }
}

/// The first word in a newly opened agent session, so Linear shows it is being handled (it expects one within
/// 10 s of `created`).
pub fn linear_session_opened(session: &str, identifier: &str) -> Request<LinearAction> {
    Request {
        key: format!("linear:activity:{session}:ack"),
        task: None,
        action: LinearAction::Activity {
            session: session.to_owned(),
            content: json!({
                "type": "thought",
                "body": format!("pidevops received {identifier}; its progress shows here."),
            }),
        },
    }
}
