//! The GitHub policy: a task in review gets one pull request, and the issue it came from hears of it; with
//! `land = "auto"` its pull request is merged once the checks and approvals are in (`tasks::landing` decides).
//! Under `[plans] land = "combined"` a plan's items open none: the plan's combination opens the plan's one pull
//! request (`combined.rs`), merged by auto-land the same way once the facts about its combined commit are in.
//! The request builders are pure; [`GithubPolicy`] is the `effects:github` loop's side of [`ProviderPolicy`].

use chrono::Utc;

use crate::board::Loaded;
use crate::domain::Source;
use crate::effects::handle::{link_review_request, EffectsProgress, Handle, Settled};
use crate::effects::inert::inert;
use crate::effects::policy_config::PolicyConfig;
use crate::effects::provider::{OpenedPullRequest, ProviderPolicy};
pub use crate::effects::reply::comment_reply;
use crate::effects::CallError;
use crate::effects::{Produced, Request};
use crate::eventlog::{Bodies, StoredEvent};
use crate::intake::CommentRecord;
use crate::providers::github::intake::comment::HOST;
use crate::providers::github::GithubClient;
use crate::tasks::{
    landing, CommitSha, GithubRef, LandConfig, Links, Readiness, Task, TaskEvent, TaskId,
    GITHUB_ISSUE, GITHUB_PR,
};
use combined::{after_plan_pull_request, lands_with_its_plan, plan_pull_request};

pub use action::GithubAction;

mod action;
pub mod branch;
pub mod combined;
pub mod stale;

/// The `effects:github` policy: pull requests and issue comments.
#[derive(Clone, Debug)]
pub struct GithubPolicy {
    client: GithubClient,
    config: PolicyConfig,
    /// pidevops's own GitHub account (`[intake.github] bot_login`): a question on an issue says to mention it.
    bot_login: Option<String>,
}

impl GithubPolicy {
    pub fn new(client: GithubClient, config: PolicyConfig, bot_login: Option<String>) -> Self {
        Self {
            client,
            config,
            bot_login,
        }
    }
}

impl ProviderPolicy for GithubPolicy {
    type Action = GithubAction;

    fn provider(&self) -> &'static str {
        "github"
    }

    /// pidevops's own records only: what it does follows from task and effect events and intake's comment
    /// records, never from a webhook's body.
    fn bodies(&self) -> Bodies {
        Bodies::Source(Source::Pidevops.as_str())
    }

    /// A comment addressed to pidevops, as intake recorded it: its reaction, then its reply.
    async fn own_event(
        &self,
        fx: &impl Handle<Action = GithubAction>,
        event: &StoredEvent,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Option<Settled>> {
        if event.event_type != HOST.record || event.source != Source::Pidevops.as_str() {
            return Ok(None);
        }
        let record: CommentRecord = match serde_json::from_slice(&event.body) {
            Ok(record) => record,
            Err(e) => {
                tracing::warn!(position = event.position, error = %e, "a comment record that cannot be read");
                return Ok(Some(Settled::Yes));
            }
        };
        for request in comment_answered(&record, Utc::now()) {
            if let waiting @ Settled::Waiting(_) =
                fx.ask(&request, event.position, progress).await?
            {
                return Ok(Some(waiting));
            }
        }
        Ok(Some(Settled::Yes))
    }

    fn notifies(&self, event: &TaskEvent) -> bool {
        match event {
            TaskEvent::SubmittedForReview { .. }
            | TaskEvent::Combined { .. }
            | TaskEvent::FlaggedNeedsHuman { .. }
            // Its branch, deleted once the task is done or cancelled, a plan's once it rolls up so (`branch.rs`).
            | TaskEvent::Completed { .. }
            | TaskEvent::Cancelled { .. }
            | TaskEvent::RolledUp { .. }
            | TaskEvent::WentStale { .. }
            // Auto-land: the merge the queue chose (`landing::queue`).
            | TaskEvent::MergeQueued { .. } => true,
            TaskEvent::Created(_)
            | TaskEvent::Approved { .. }
            | TaskEvent::Rejected { .. }
            | TaskEvent::Started { .. }
            | TaskEvent::Resumed { .. }
            | TaskEvent::Retried { .. }
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
            | TaskEvent::PlanProposed { .. }
            | TaskEvent::PlanApproved { .. }
            | TaskEvent::PlanRejected { .. }
            | TaskEvent::ChildrenCreated { .. }
            | TaskEvent::CheckPassed { .. }
            | TaskEvent::ReviewApproved { .. }
            | TaskEvent::ApprovalWithdrawn { .. }
            | TaskEvent::Landed { .. }
            | TaskEvent::Refreshed { .. }
            | TaskEvent::ConflictFound { .. }
            | TaskEvent::ConflictUnresolved { .. }
            | TaskEvent::RefreshCheckDue { .. }
            | TaskEvent::RefreshCheckFailed { .. } => false,
        }
    }

    async fn requests(
        &self,
        fx: &impl Handle<Action = GithubAction>,
        event: &StoredEvent,
        task_event: &TaskEvent,
        loaded: &Loaded,
    ) -> anyhow::Result<Vec<Request<GithubAction>>> {
        let task = &loaded.task;
        let mut requests = github(task_event, task, &self.config);
        if let TaskEvent::FlaggedNeedsHuman {
            reason, question, ..
        } = task_event
        {
            requests.extend(github_question(
                task,
                reason,
                *question,
                &event.id.to_string(),
                self.bot_login.as_deref(),
                event.occurred_at,
            ));
        }
        if let TaskEvent::WentStale {
            after_h, action, ..
        } = task_event
        {
            requests.extend(stale::github_stale(
                task,
                *after_h,
                *action,
                &event.id.to_string(),
                &self.config,
                event.occurred_at,
            ));
        }
        if let (TaskEvent::Combined { .. }, Some(combination), Source::Github) = (
            task_event,
            task.plan().and_then(|p| p.combined.as_ref()),
            self.config.host_of(task.repo()),
        ) {
            // The plan's one pull request, described with its items as they are now.
            let mut items = Vec::with_capacity(combination.items.len());
            for item in &combination.items {
                if let Some(item) = fx.board().load(item.task).await? {
                    items.push(item.task);
                }
            }
            requests.push(plan_pull_request(task, combination, &items, &self.config));
        }
        if branch::may_delete(task_event, task, &self.config) {
            let commits = branch::recorded_commits(fx.log(), &loaded.events).await?;
            requests.extend(branch::delete_branch(
                task_event,
                task,
                commits,
                &self.config,
            ));
        }
        // Auto-land: the merge queue chose this head (a GitLab-hosted repository's task lands through its merge
        // request: nothing of GitHub's to merge).
        if let TaskEvent::MergeQueued { sha, number, .. } = task_event {
            if self.config.host_of(task.repo()) == Source::Github {
                let rules = fx.board().config().land_for(task.repo());
                let merge = merge_request(task, sha, *number, &rules);
                if land(task, &rules).is_some_and(|ready| ready.key == merge.key)
                    || fx.requested(&merge.key).await?
                {
                    // Still ready at that head; or it moved on since (a merge webhook, a flag) but this merge was
                    // asked for: an attempt cut off by a crash still has to be settled (asking again is a no-op).
                    requests.push(merge);
                }
            }
        }
        Ok(requests)
    }

    /// The pull request becomes the task's link, and the issue it came from hears of it.
    async fn pull_request_opened(
        &self,
        fx: &impl Handle<Action = GithubAction>,
        opened: &OpenedPullRequest<'_>,
    ) -> anyhow::Result<Vec<Request<GithubAction>>> {
        // A GitLab merge request is GitLab's policy's to link.
        if opened.host != Source::Github {
            return Ok(Vec::new());
        }
        let task = opened.task;
        let links = Links::default().with(
            GITHUB_PR,
            &GithubRef::new(opened.repo.clone(), opened.number)?,
        );
        let Some(linked) = link_review_request(fx.board(), task, links).await? else {
            return Ok(Vec::new());
        };
        Ok(if linked.is_plan() {
            after_plan_pull_request(&linked, opened.number, opened.url, Utc::now())
        } else {
            after_pull_request(&linked, opened.number, opened.url, Utc::now())
        })
    }

    async fn call(&self, _key: &str, action: &GithubAction) -> Result<Produced, CallError> {
        match action {
            GithubAction::OpenPullRequest {
                repo,
                head,
                base,
                title,
                body,
            } => {
                self.client
                    .open_pull_request(repo, head, base, title, body)
                    .await
            }
            GithubAction::Comment {
                repo,
                number,
                body,
                since,
            } => {
                let marker = body.lines().last().unwrap_or_default();
                self.client
                    .comment(repo, *number, body, marker, *since)
                    .await
            }
            GithubAction::Reaction {
                repo,
                comment,
                content,
            } => self.client.react_to_comment(repo, *comment, content).await,
            GithubAction::MergePullRequest {
                repo,
                number,
                sha,
                method,
            } => {
                self.client
                    .merge_pull_request(repo, *number, sha.as_str(), *method)
                    .await
            }
            GithubAction::DeleteBranch {
                repo,
                branch,
                commits,
            } => self.client.delete_branch(repo, branch, commits).await,
            GithubAction::ClosePullRequest { repo, number } => {
                self.client.close_pull_request(repo, *number).await
            }
        }
    }
}

/// The GitHub requests `event` (one of `task`'s events) asks for.
pub fn github(event: &TaskEvent, task: &Task, config: &PolicyConfig) -> Vec<Request<GithubAction>> {
    match event {
        // A combined plan's item lands with its plan: the plan's combination opens one pull request for all.
        TaskEvent::SubmittedForReview { .. } if lands_with_its_plan(task, config) => Vec::new(),
        // A GitLab-hosted repository's task opens a merge request there (GitLab's policy), no pull request here.
        TaskEvent::SubmittedForReview { .. } if config.host_of(task.repo()) != Source::Github => {
            Vec::new()
        }
        // One pull request per task: a later attempt pushes to the same branch, which updates it.
        TaskEvent::SubmittedForReview { branch, .. } => vec![Request {
            key: crate::domain::effect::pull_request_key(task.id()),
            task: Some(task.id()),
            action: GithubAction::OpenPullRequest {
                repo: task.repo().clone(),
                head: branch.clone(),
                base: config.base_for(task.repo()),
                title: format!("{}: {}", task.id(), inert(&task.title())),
                body: pull_request_body(task),
            },
        }],
        // Nothing else is GitHub's to announce: its pull request is the task's story there.
        TaskEvent::Created(_)
        | TaskEvent::Approved { .. }
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
        | TaskEvent::LinksAttached { .. }
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

/// The key of the merge of `task`'s pull request at `sha`: once per task and head commit.
pub fn merge_key(task: TaskId, sha: &CommitSha) -> String {
    crate::domain::effect::github_merge_key(task, sha)
}

/// Auto-land: the merge of the task's pull request when [`landing::readiness`] says it is ready under `rules`.
pub fn land(task: &Task, rules: &LandConfig) -> Option<Request<GithubAction>> {
    match landing::readiness(task, rules) {
        Readiness::Ready { sha, number } => Some(merge_request(task, &sha, number, rules)),
        Readiness::Waiting(_) => None,
    }
}

fn merge_request(
    task: &Task,
    sha: &CommitSha,
    number: u64,
    rules: &LandConfig,
) -> Request<GithubAction> {
    Request {
        key: merge_key(task.id(), sha),
        task: Some(task.id()),
        action: GithubAction::MergePullRequest {
            repo: task.repo().clone(),
            number,
            sha: sha.clone(),
            method: rules.merge_method,
        },
    }
}

/// Once the task's pull request is open: a comment on the GitHub issue it came from, pointing at it (once per
/// task; the marker on its last line lets a repeat find it).
pub fn after_pull_request(
    task: &Task,
    number: u64,
    url: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<Request<GithubAction>> {
    let Some(issue) = task.links().get(GITHUB_ISSUE) else {
        return Vec::new();
    };
    let key = format!("github:comment:{}:pull-request", task.id());
    let pull = if &issue.repo == task.repo() {
        format!("#{number}")
    } else {
        url.to_owned()
    };
    vec![Request {
        key: key.clone(),
        task: Some(task.id()),
        action: GithubAction::Comment {
            repo: issue.repo.clone(),
            number: issue.number.get(),
            body: format!(
                "pidevops worked on this as {} and opened {pull} for review (attempt {} of {}).\n\n{}",
                task.id(),
                task.attempts(),
                task.max_attempts().get(),
                crate::effects::marker(&key)
            ),
            since: now - chrono::Duration::minutes(10),
        },
    }]
}

/// A comment addressed to pidevops: `eyes` on it (pidevops has it), then a reply saying what came of it, each
/// once per comment (keyed by its repository and id).
pub fn comment_answered(
    record: &CommentRecord,
    now: chrono::DateTime<Utc>,
) -> Vec<Request<GithubAction>> {
    let at = format!(
        "{}:{}",
        record.repo.as_str().to_ascii_lowercase(),
        record.comment
    );
    let reply_key = format!("github:reply:{at}");
    vec![
        Request {
            key: format!("github:reaction:{at}"),
            task: record.task,
            action: GithubAction::Reaction {
                repo: record.repo.clone(),
                comment: record.comment,
                content: "eyes".to_owned(),
            },
        },
        Request {
            key: reply_key.clone(),
            task: record.task,
            action: GithubAction::Comment {
                repo: record.repo.clone(),
                number: record.number,
                body: format!(
                    "{}\n\n{}",
                    comment_reply(record, "Pull request"),
                    crate::effects::marker(&reply_key)
                ),
                since: now - chrono::Duration::minutes(10),
            },
        },
    ]
}

/// A needs-human episode of a task that came from a GitHub issue: its question (the agent's words, or pidevops's
/// reason) as a comment on that issue, with how to answer there (a comment mentioning the bot, or starting with
/// `/pidevops`, from a trusted account: the first answer goes to the next attempt). Once per episode: keyed by the
/// flag's event. The reason is made inert (an agent wrote it).
pub fn github_question(
    task: &Task,
    reason: &crate::tasks::Reason,
    question: bool,
    event_id: &str,
    bot_login: Option<&str>,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<Request<GithubAction>> {
    let issue = task.links().get(GITHUB_ISSUE)?;
    let id = task.id();
    let key = format!("github:comment:{id}:ask:{event_id}");
    let asked = if question {
        let quoted: Vec<String> = inert(reason.as_str())
            .lines()
            .map(|line| format!("> {line}"))
            .collect();
        format!(
            "The agent working on this as {id} asks:\n\n{}",
            quoted.join("\n")
        )
    } else {
        format!("{id} needs a human: {}", inert(reason.as_str()))
    };
    let how = match bot_login {
        Some(login) => format!("reply here mentioning @{login} (or starting with `/pidevops`)"),
        None => "reply here with a comment starting with `/pidevops`".to_owned(),
    };
    Some(Request {
        key: key.clone(),
        task: Some(id),
        action: GithubAction::Comment {
            repo: issue.repo.clone(),
            number: issue.number.get(),
            body: format!(
                "{asked}\n\nTo answer, {how}: the first answer from a maintainer goes to the next attempt. The \
                 dashboard and `pidevops task answer {id} \"…\"` answer too.\n\n{}",
                crate::effects::marker(&key)
            ),
            since: now - chrono::Duration::minutes(10),
        },
    })
}

/// The pull request's description: the shared writer's (`effects::pull_request::task_body`), as a GitLab merge
/// request's is.
pub fn pull_request_body(task: &Task) -> String {
    crate::effects::pull_request::task_body(task)
}
