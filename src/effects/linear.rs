//! The Linear policy: state moves and comments on a task's Linear issue, or agent activities when an agent
//! session has it; sessions opened on an issue are remembered and answered. The request builders are pure;
//! [`LinearPolicy`] is the `effects:linear` loop's side of [`ProviderPolicy`].

use anyhow::Context;
use serde_json::json;

use super::policy::PolicyConfig;
use super::provider::{not_mine, OpenedPullRequest, ProviderPolicy};
use super::runner::{Effects, EffectsProgress, Settled, ACTOR};
use super::{Action, Produced, Provider, Request};
use crate::board::Loaded;
use crate::domain::{EventType, NewEvent, Source};
use crate::eventlog::{AppendError, StoredEvent};
use crate::providers::linear::LinearClient;
use crate::providers::CallError;
use crate::tasks::{Reason, RetryCause, RunId, Task, TaskEvent};

/// The stream that lists the agent sessions opened on a Linear issue: `linear-session:<issue id>`.
pub const LINEAR_SESSION_PREFIX: &str = "linear-session:";

/// The `effects:linear` policy: comments, state moves and agent activities on the tasks' Linear issues.
#[derive(Clone, Debug)]
pub(crate) struct LinearPolicy {
    client: LinearClient,
    config: PolicyConfig,
}

impl LinearPolicy {
    pub(crate) fn new(client: LinearClient, config: PolicyConfig) -> Self {
        Self { client, config }
    }
}

impl ProviderPolicy for LinearPolicy {
    fn provider(&self) -> Provider {
        Provider::Linear
    }

    async fn own_event(
        &self,
        fx: &Effects,
        event: &StoredEvent,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Option<Settled>> {
        match event.event_type.as_str() {
            "linear.AgentSessionEvent.created" => {
                session_opened(fx, event, progress).await.map(Some)
            }
            "intake.ignored" => session_refused(fx, event, progress).await.map(Some),
            crate::budgets::NOTICE => budget_notice(fx, event, progress).await.map(Some),
            _ => Ok(None),
        }
    }

    fn notifies(&self, event: &TaskEvent) -> bool {
        linear_notifies(event)
    }

    async fn requests(
        &self,
        fx: &Effects,
        event: &StoredEvent,
        task_event: &TaskEvent,
        loaded: &Loaded,
    ) -> anyhow::Result<Vec<Request>> {
        let session = session_of(fx, &loaded.task).await?;
        let mut requests = linear(
            task_event,
            &loaded.task,
            session.as_deref(),
            last_run(&loaded.events),
            &event.id.to_string(),
            &self.config,
        );
        requests.extend(super::linear_plan::checklist(fx, &loaded.task).await?);
        Ok(requests)
    }

    /// The attempt's end, now that its pull request is open.
    async fn pull_request_opened(
        &self,
        fx: &Effects,
        opened: &OpenedPullRequest<'_>,
    ) -> anyhow::Result<Vec<Request>> {
        let Some(loaded) = fx.board().load(opened.task).await? else {
            return Ok(Vec::new());
        };
        let session = session_of(fx, &loaded.task).await?;
        Ok(linear_pull_request(
            &loaded.task,
            session.as_deref(),
            last_run(&loaded.events),
            opened.url,
        ))
    }

    async fn call(&self, key: &str, action: &Action) -> Result<Produced, CallError> {
        match action {
            Action::LinearComment { issue, body } => self.client.comment(key, *issue, body).await,
            Action::LinearActivity { session, content } => {
                self.client.activity(key, session, content).await
            }
            Action::LinearMoveIssue {
                issue,
                states,
                fallback,
            } => self.client.move_issue(*issue, states, fallback).await,
            Action::LinearSessionUrls { session, urls } => {
                self.client.session_urls(session, urls).await
            }
            Action::LinearSessionPlan { session, plan } => {
                self.client.session_plan(session, plan).await
            }
            other => Err(not_mine(Provider::Linear, other)),
        }
    }
}

/// A Linear agent session opened on an issue (someone delegated it to pidevops): remembered as the issue's
/// current session (`linear-session:<issue id>`, newest last: re-delegating opens a new one), and answered
/// at once with a thought, as Linear expects within 10 s.
async fn session_opened(
    fx: &Effects,
    event: &StoredEvent,
    progress: &mut EffectsProgress,
) -> anyhow::Result<Settled> {
    let payload: serde_json::Value =
        serde_json::from_str(event.data_json().get()).unwrap_or_default();
    let session = &payload["agentSession"];
    let (Some(id), Some(issue)) = (
        session["id"].as_str(),
        session["issueId"]
            .as_str()
            .or(session["issue"]["id"].as_str()),
    ) else {
        return Ok(Settled::Yes);
    };
    remember_session(fx, event, id, issue).await?;
    let identifier = session["issue"]["identifier"]
        .as_str()
        .unwrap_or("this issue");
    let request = linear_session_opened(id, identifier);
    fx.ask(&request, event.position, progress).await
}

/// Appends `linear.session_opened` to the issue's session stream, unless that session is there already.
async fn remember_session(
    fx: &Effects,
    event: &StoredEvent,
    id: &str,
    issue: &str,
) -> anyhow::Result<()> {
    let stream_name = format!("{LINEAR_SESSION_PREFIX}{issue}");
    let known = fx
        .log()
        .store()
        .read_stream(&stream_name)
        .await
        .with_context(|| format!("reading {stream_name}"))?;
    if known.iter().any(|e| session_in(e).as_deref() == Some(id)) {
        return Ok(());
    }
    let body = serde_json::json!({ "session": id, "issue": issue, "cause_event_id": event.id });
    let mut new = NewEvent::new(
        Source::Pidevops,
        EventType::from_stored("linear.session_opened".to_owned()),
        format!("{}{id}", crate::intake::rules::SESSION_KEY_PREFIX),
        "application/json",
        bytes::Bytes::from(serde_json::to_vec(&body)?),
    );
    new.stream = Some((
        stream_name.clone(),
        i64::try_from(known.len()).unwrap_or(i64::MAX) + 1,
    ));
    new.meta
        .insert("actor".to_owned(), serde_json::Value::from(ACTOR));
    match fx.log().append(new).await {
        Ok(_) | Err(AppendError::Conflict { .. }) => Ok(()),
        Err(error) => Err(error).context("remembering the agent session"),
    }
}

/// Intake refused an agent session (no repository, a skip label, …): the session ends with an `error` saying
/// why, instead of waiting for work that will never start.
async fn session_refused(
    fx: &Effects,
    event: &StoredEvent,
    progress: &mut EffectsProgress,
) -> anyhow::Result<Settled> {
    let record: serde_json::Value = serde_json::from_slice(&event.body).unwrap_or_default();
    if record["cause_type"] != "linear.AgentSessionEvent.created" {
        return Ok(Settled::Yes);
    }
    let (Some(cause), Some(reason)) = (
        record["cause_event_id"]
            .as_str()
            .and_then(|id| id.parse::<uuid::Uuid>().ok()),
        record["reason"].as_str(),
    ) else {
        return Ok(Settled::Yes);
    };
    let Some(cause) = fx
        .log()
        .store()
        .get(cause)
        .await
        .context("reading the refused agent session's event")?
    else {
        return Ok(Settled::Yes);
    };
    let payload: serde_json::Value =
        serde_json::from_str(cause.data_json().get()).unwrap_or_default();
    let Some(session) = payload["agentSession"]["id"].as_str() else {
        return Ok(Settled::Yes);
    };
    let request = linear_session_refused(session, reason);
    fx.ask(&request, event.position, progress).await
}

/// A task's budget notice (its soft limit reached, or spent), once, where the task came from Linear: a thought in
/// its agent session, else a comment on its issue. A repository's or a day's budget has no issue: Telegram's.
async fn budget_notice(
    fx: &Effects,
    event: &StoredEvent,
    progress: &mut EffectsProgress,
) -> anyhow::Result<Settled> {
    let Ok(notice) = serde_json::from_slice::<crate::budgets::Notice>(&event.body) else {
        return Ok(Settled::Yes);
    };
    let crate::budgets::Scope::Task { task } = &notice.scope else {
        return Ok(Settled::Yes);
    };
    let Ok(id) = task.parse::<crate::tasks::TaskId>() else {
        return Ok(Settled::Yes);
    };
    let Some(loaded) = fx
        .board()
        .load(id)
        .await
        .with_context(|| format!("loading {id} for its budget notice"))?
    else {
        return Ok(Settled::Yes);
    };
    let Some(issue) = loaded.task.links().linear_issue.as_ref().map(|l| l.id()) else {
        return Ok(Settled::Yes);
    };
    let body = format!(
        "**{id}**: {} (raise it with `pidevops budget raise --task {id}`, the API or the Spend page).",
        notice.words
    );
    let key = format!("linear:budget:{}:{id}", notice.level);
    let request = match session_of(fx, &loaded.task).await? {
        Some(session) => Request {
            key,
            task: Some(id),
            action: Action::LinearActivity {
                session,
                content: json!({ "type": "thought", "body": body }),
            },
        },
        None => Request {
            key,
            task: Some(id),
            action: Action::LinearComment { issue, body },
        },
    };
    fx.ask(&request, event.position, progress).await
}

/// The agent session that has the task's Linear issue now, if one does.
pub(super) async fn session_of(fx: &Effects, task: &Task) -> anyhow::Result<Option<String>> {
    let Some(issue) = &task.links().linear_issue else {
        return Ok(None);
    };
    let stream_name = format!("{LINEAR_SESSION_PREFIX}{}", issue.id());
    let events = fx
        .log()
        .store()
        .read_stream(&stream_name)
        .await
        .with_context(|| format!("reading {stream_name}"))?;
    Ok(events.last().and_then(session_in))
}

fn session_in(event: &StoredEvent) -> Option<String> {
    serde_json::from_slice::<serde_json::Value>(&event.body)
        .ok()?
        .get("session")?
        .as_str()
        .map(str::to_owned)
}

/// The run of a task's latest start, from its events.
fn last_run(events: &[StoredEvent]) -> Option<RunId> {
    events.iter().rev().find_map(
        |e| match serde_json::from_slice::<TaskEvent>(&e.body).ok()? {
            TaskEvent::Started { run, .. } => Some(run),
            _ => None,
        },
    )
}

/// Whether a task event is news for Linear (checked before the task is loaded).
pub fn linear_notifies(event: &TaskEvent) -> bool {
    matches!(
        event,
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
    )
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
) -> Vec<Request> {
    let Some(issue) = task.links().linear_issue.as_ref().map(|l| l.id()) else {
        return Vec::new();
    };
    let news = IssueNews {
        task,
        issue,
        session,
        event_id,
    };
    let states = &config.linear_states;
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
            // The pull request is known (an earlier attempt opened it), or none will be opened: this attempt's
            // end is now. Otherwise it is when the pull request opens (see `linear_pull_request`).
            let known = pr.clone().or_else(|| task.links().github_pr.clone());
            if known.is_some() || !config.github_prs {
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
        _ => Vec::new(),
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
    fn request(&self, key: String, action: Action) -> Request {
        Request {
            key,
            task: Some(self.task.id()),
            action,
        }
    }

    fn move_to(&self, names: &[String], fallback: &str) -> Request {
        self.request(
            format!("linear:state:{}", self.event_id),
            Action::LinearMoveIssue {
                issue: self.issue,
                states: names.to_vec(),
                fallback: fallback.to_owned(),
            },
        )
    }

    fn comment(&self, key: String, body: String) -> Request {
        let issue = self.issue;
        self.request(key, Action::LinearComment { issue, body })
    }

    /// An activity in the issue's agent session; `None` when no session has the issue.
    fn activity(&self, key: String, content: serde_json::Value) -> Option<Request> {
        self.session.map(|session| {
            self.request(
                key,
                Action::LinearActivity {
                    session: session.to_owned(),
                    content,
                },
            )
        })
    }

    fn started(&self, run: RunId, attempt: u32, in_progress: &[String]) -> Vec<Request> {
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
    fn planning(&self, run: RunId, attempt: u32, in_progress: &[String]) -> Vec<Request> {
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
    /// issue), or was approved as proposed. In a session its checklist is the session's `plan` (`linear_plan`).
    fn proposed(&self, run: RunId, items: usize) -> Option<Request> {
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
    fn replanning(&self, reason: &Reason) -> Option<Request> {
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
        states: &super::policy::LinearStates,
    ) -> Vec<Request> {
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

    fn retried(&self, cause: &RetryCause, reason: &Reason, attempt: u32) -> Option<Request> {
        match cause {
            // A thought, not an error: Linear ends a session at an error, and a failed attempt either goes again
            // or flags the task, whose elicitation then asks a person (the session waits for the answer).
            RetryCause::RunFailed { run }
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
    fn flagged(&self, reason: &Reason, question: bool, blocked: &[String]) -> Vec<Request> {
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

    fn completed(&self, done: &[String]) -> Vec<Request> {
        let id = self.task.id();
        let mut requests = vec![self.move_to(done, "completed")];
        // A session already ended with its last attempt's response; another activity would reopen it.
        if self.session.is_none() {
            let pr = self
                .task
                .links()
                .github_pr
                .as_ref()
                .map_or_else(String::new, |pr| format!(": {pr} was merged"));
            requests.push(self.comment(
                format!("linear:comment:{}", self.event_id),
                format!("**{id}** is done{pr}."),
            ));
        }
        requests
    }

    fn cancelled(&self, reason: &Reason, last_run: Option<RunId>) -> Request {
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
) -> Vec<Request> {
    let Some(issue) = task.links().linear_issue.as_ref().map(|l| l.id()) else {
        return Vec::new();
    };
    let id = task.id();
    let text = format!("**{id}** is ready for review in {place} (attempt {of}).");
    match session {
        Some(session) => vec![Request {
            key: format!("linear:activity:{run}:end"),
            task: Some(id),
            action: Action::LinearActivity {
                session: session.to_owned(),
                content: json!({ "type": "response", "body": text }),
            },
        }],
        None => vec![Request {
            key: format!("linear:comment:{id}:review"),
            task: Some(id),
            action: Action::LinearComment { issue, body: text },
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
) -> Vec<Request> {
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
            action: Action::LinearSessionUrls {
                session: session.to_owned(),
                urls: vec![("Pull request".to_owned(), url.to_owned())],
            },
        });
    }
    requests
}

/// An agent session pidevops will not work on (intake said why): ended with an `error` naming the reason.
pub fn linear_session_refused(session: &str, reason: &str) -> Request {
    Request {
        key: format!("linear:activity:{session}:refused"),
        task: None,
        action: Action::LinearActivity {
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
pub fn linear_session_opened(session: &str, identifier: &str) -> Request {
    Request {
        key: format!("linear:activity:{session}:ack"),
        task: None,
        action: Action::LinearActivity {
            session: session.to_owned(),
            content: json!({
                "type": "thought",
                "body": format!("pidevops received {identifier}; its progress shows here."),
            }),
        },
    }
}
