//! The Linear policy: state moves and comments on a task's Linear issue, or agent activities when an agent
//! session has it; sessions opened on an issue are remembered and answered. The request builders are pure;
//! [`LinearPolicy`] is the `effects:linear` loop's side of [`ProviderPolicy`].

use anyhow::Context;
use serde_json::json;

use crate::board::Loaded;
use crate::domain::effect::LinearStates;
use crate::domain::{EventType, NewEvent, Source};
use crate::effects::handle::{EffectsProgress, Handle, Settled, ACTOR};
use crate::effects::policy_config::PolicyConfig;
use crate::effects::provider::{OpenedPullRequest, ProviderPolicy};
use crate::effects::CallError;
use crate::effects::{Produced, Request};
use crate::eventlog::{AppendError, StoredEvent};
use crate::providers::linear::LinearClient;
use crate::tasks::{RunId, Task, TaskEvent, GITHUB_PR, LINEAR_ISSUE};

pub use action::LinearAction;

/// The stream that lists the agent sessions opened on a Linear issue: `linear-session:<issue id>`.
pub const LINEAR_SESSION_PREFIX: &str = "linear-session:";

/// The `effects:linear` policy: comments, state moves and agent activities on the tasks' Linear issues.
#[derive(Clone, Debug)]
pub struct LinearPolicy {
    client: LinearClient,
    config: PolicyConfig,
    /// Where its issues move (`[linear.states]`).
    states: LinearStates,
}

impl LinearPolicy {
    pub fn new(client: LinearClient, config: PolicyConfig, states: LinearStates) -> Self {
        Self {
            client,
            config,
            states,
        }
    }
}

impl ProviderPolicy for LinearPolicy {
    type Action = LinearAction;

    fn provider(&self) -> &'static str {
        "linear"
    }

    async fn own_event(
        &self,
        fx: &impl Handle<Action = LinearAction>,
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
        fx: &impl Handle<Action = LinearAction>,
        event: &StoredEvent,
        task_event: &TaskEvent,
        loaded: &Loaded,
    ) -> anyhow::Result<Vec<Request<LinearAction>>> {
        let session = session_of(fx, &loaded.task).await?;
        let task_event = as_submitted(task_event, &loaded.events, event.position);
        let mut requests = linear(
            &task_event,
            &loaded.task,
            session.as_deref(),
            last_run(&loaded.events),
            &event.id.to_string(),
            &self.config,
            &self.states,
        );
        requests.extend(plan::checklist(fx, &loaded.task).await?);
        Ok(requests)
    }

    /// The attempt's end, now that its pull request is open.
    async fn pull_request_opened(
        &self,
        fx: &impl Handle<Action = LinearAction>,
        opened: &OpenedPullRequest<'_>,
    ) -> anyhow::Result<Vec<Request<LinearAction>>> {
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

    async fn call(&self, key: &str, action: &LinearAction) -> Result<Produced, CallError> {
        match action {
            LinearAction::Comment { issue, body } => self.client.comment(key, *issue, body).await,
            LinearAction::Activity { session, content } => {
                self.client.activity(key, session, content).await
            }
            LinearAction::MoveIssue {
                issue,
                states,
                fallback,
            } => self.client.move_issue(*issue, states, fallback).await,
            LinearAction::SessionUrls { session, urls } => {
                self.client.session_urls(session, urls).await
            }
            LinearAction::SessionPlan { session, plan } => {
                self.client.session_plan(session, plan).await
            }
        }
    }
}

/// A Linear agent session opened on an issue (someone delegated it to pidevops): remembered as the issue's
/// current session (`linear-session:<issue id>`, newest last: re-delegating opens a new one), and answered
/// at once with a thought, as Linear expects within 10 s.
async fn session_opened(
    fx: &impl Handle<Action = LinearAction>,
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
    fx: &impl Handle<Action = LinearAction>,
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
    fx: &impl Handle<Action = LinearAction>,
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
    fx: &impl Handle<Action = LinearAction>,
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
    let Some(issue) = loaded.task.links().get(LINEAR_ISSUE).map(|l| l.id()) else {
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
            action: LinearAction::Activity {
                session,
                content: json!({ "type": "thought", "body": body }),
            },
        },
        None => Request {
            key,
            task: Some(id),
            action: LinearAction::Comment { issue, body },
        },
    };
    fx.ask(&request, event.position, progress).await
}

/// The agent session that has the task's Linear issue now, if one does.
async fn session_of(
    fx: &impl Handle<Action = LinearAction>,
    task: &Task,
) -> anyhow::Result<Option<String>> {
    let Some(issue) = task.links().get(LINEAR_ISSUE) else {
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
/// A submission as it stood when it was made: its pull request is the one linked before it (an earlier attempt
/// opened it), never one linked since. What Linear is told then does not depend on how far behind this loop
/// reads: a pull request this attempt opens is told when it opens (`pull_request_opened`), with its address.
fn as_submitted(task_event: &TaskEvent, events: &[StoredEvent], position: i64) -> TaskEvent {
    let mut task_event = task_event.clone();
    if let TaskEvent::SubmittedForReview { pr: pr @ None, .. } = &mut task_event {
        *pr = events
            .iter()
            .filter(|e| e.position < position)
            .filter_map(|e| TaskEvent::from_stored(&e.event_type, &e.body).ok())
            .fold(None, |known, earlier| {
                // Only a link or an earlier submission's pull request says which one it was.
                if let TaskEvent::LinksAttached { links, .. } = &earlier {
                    return links.get(GITHUB_PR).or(known);
                }
                if let TaskEvent::SubmittedForReview { pr: Some(pr), .. } = earlier {
                    return Some(pr);
                }
                known
            });
    }
    task_event
}

fn last_run(events: &[StoredEvent]) -> Option<RunId> {
    events.iter().rev().find_map(|e| {
        let TaskEvent::Started { run, .. } = TaskEvent::from_stored(&e.event_type, &e.body).ok()?
        else {
            return None;
        };
        Some(run)
    })
}

mod action;
mod plan;
mod requests;
pub use requests::{
    linear, linear_notifies, linear_pull_request, linear_session_opened, linear_session_refused,
};

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::tasks::{BranchName, GithubRef, Links};

    fn stored(position: i64, event: &TaskEvent) -> StoredEvent {
        StoredEvent {
            position,
            id: uuid::Uuid::now_v7(),
            source: "pidevops".into(),
            event_type: event.kind().into(),
            dedup_key: position.to_string(),
            stream: Some("task:T-1".into()),
            stream_version: Some(position),
            occurred_at: Utc::now(),
            recorded_at: Utc::now(),
            action: None,
            repository: None,
            number: None,
            reference: None,
            content_type: "application/json".into(),
            body: serde_json::to_vec(event).unwrap(),
            meta: Default::default(),
        }
    }

    /// Whether Linear hears of a review at the submission or when the pull request opens follows from the
    /// task's history up to the submission, not from a link attached after it (the loop reading late): the
    /// full flow failed on a loop that read the submission after the new pull request was linked.
    #[test]
    fn a_submission_knows_only_the_pull_request_linked_before_it() {
        let pr = GithubRef::new("acme/app".parse().unwrap(), 7).unwrap();
        let submitted = TaskEvent::SubmittedForReview {
            at: Utc::now(),
            run: RunId(uuid::Uuid::from_u128(1)),
            branch: "pidevops/T-1".parse::<BranchName>().unwrap(),
            pr: None,
            report: Default::default(),
        };
        let linked = TaskEvent::LinksAttached {
            at: Utc::now(),
            links: Links::default().with(GITHUB_PR, &pr),
        };
        let known = |event: &TaskEvent| match event {
            TaskEvent::SubmittedForReview { pr, .. } => pr.clone(),
            _ => None,
        };
        let after = [stored(5, &submitted), stored(6, &linked)];
        assert_eq!(known(&as_submitted(&submitted, &after, 5)), None);
        let before = [stored(3, &linked), stored(5, &submitted)];
        assert_eq!(
            known(&as_submitted(&submitted, &before, 5)),
            Some(pr.clone())
        );
        let mut earlier_submission = submitted.clone();
        if let TaskEvent::SubmittedForReview { pr: known, .. } = &mut earlier_submission {
            *known = Some(pr.clone());
        }
        let resubmitted = [stored(2, &earlier_submission), stored(5, &submitted)];
        assert_eq!(known(&as_submitted(&submitted, &resubmitted, 5)), Some(pr));
    }

    /// A stale review is one comment on its issue, keyed by the event; a close is told by its cancellation.
    #[test]
    fn a_stale_review_is_one_comment_on_its_issue() {
        use crate::tasks::{
            Command, LinearIssue, MaxAttempts, NewTask, Priority, Spec, StaleAction,
        };
        let issue = LinearIssue::new(uuid::Uuid::from_u128(9), "ENG-9").unwrap();
        let new = NewTask {
            id: "T-1".parse().unwrap(),
            repo: "acme/app".parse().unwrap(),
            spec: Spec::new("Fix the redirect", "", "").unwrap(),
            priority: Priority::Normal,
            links: Links::default().with(LINEAR_ISSUE, &issue),
            approval: crate::tasks::ApprovalPolicy::Auto,
            max_attempts: MaxAttempts::new(3).unwrap(),
            ticket_version: None,
            agent: None,
            family: Default::default(),
        };
        let events =
            crate::tasks::decide(None, &Command::Create(Box::new(new)), Utc::now()).unwrap();
        let task = events
            .iter()
            .try_fold(None, |t, e| crate::tasks::evolve(t, e).map(Some))
            .unwrap()
            .unwrap();
        let (config, states) = (PolicyConfig::default(), LinearStates::default());
        let went = |action| TaskEvent::WentStale {
            at: Utc::now(),
            after_h: 48,
            action,
        };
        assert!(linear_notifies(&went(StaleAction::Remind)));
        let requests = linear(
            &went(StaleAction::Remind),
            &task,
            None,
            None,
            "e-4",
            &config,
            &states,
        );
        assert_eq!(requests.len(), 1, "{requests:?}");
        assert_eq!(requests[0].key, "linear:comment:e-4");
        let LinearAction::Comment { issue: to, body } = &requests[0].action else {
            panic!("a comment: {requests:?}");
        };
        assert_eq!(*to, issue.id());
        assert!(
            body.contains("has waited in review for 48 h without activity"),
            "{body}"
        );
        assert!(linear(
            &went(StaleAction::Close),
            &task,
            None,
            None,
            "e-5",
            &config,
            &states
        )
        .is_empty());
    }
}
