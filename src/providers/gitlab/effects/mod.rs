//! The GitLab policy: a note on a task's GitLab issue when the task is made, when it needs a human (its question,
//! `question.rs`) and when it is done; the answer to a note addressed to pidevops (👀 on it, then a reply saying
//! what came of it); a GitLab-hosted task's merge request, opened when it goes to review, linked and pointed at
//! from its issue, and merged under `land = "auto"` once the merge queue chose its head (`task.merge_queued`) and
//! `tasks::landing` still says it is ready there, or put on GitLab's merge train where the project runs one
//! (`merge_request.rs`).
//! The request builders are pure; [`GitlabPolicy`] is the `effects:gitlab` loop's side of [`ProviderPolicy`].

mod action;
pub mod merge_request;
mod question;

use crate::board::Loaded;
use crate::domain::Source;
use crate::effects::handle::{link_review_request, EffectsProgress, Handle, Settled};
use crate::effects::policy_config::PolicyConfig;
use crate::effects::provider::{OpenedPullRequest, ProviderPolicy};
use crate::effects::reply::comment_reply;
use crate::effects::{CallError, Produced, Request};
use crate::eventlog::{Bodies, StoredEvent};
use crate::intake::CommentRecord;
use crate::providers::gitlab::client::GitlabClient;
use crate::providers::gitlab::intake::HOST;
use crate::tasks::{GitlabMrRef, Links, Task, TaskEvent, GITLAB_ISSUE, GITLAB_MR};

pub use action::{GitlabAction, Noteable};
pub use question::gitlab_question;

/// The `effects:gitlab` policy.
#[derive(Clone, Debug)]
pub struct GitlabPolicy {
    client: GitlabClient,
    config: PolicyConfig,
    /// pidevops's own GitLab account (`[intake.gitlab] bot_username`): a question on an issue says to mention it.
    bot: Option<String>,
}

impl GitlabPolicy {
    pub fn new(client: GitlabClient, config: PolicyConfig) -> Self {
        Self {
            client,
            config,
            bot: None,
        }
    }

    pub fn with_bot(mut self, bot: Option<String>) -> Self {
        self.bot = bot;
        self
    }
}

impl ProviderPolicy for GitlabPolicy {
    type Action = GitlabAction;

    fn provider(&self) -> &'static str {
        "gitlab"
    }

    /// pidevops's own records only: what it does follows from task and effect events and intake's comment
    /// records, never from a webhook's body.
    fn bodies(&self) -> Bodies {
        Bodies::Source(Source::Pidevops.as_str())
    }

    /// A note addressed to pidevops, as intake recorded it: its award, then its reply.
    async fn own_event(
        &self,
        fx: &impl Handle<Action = GitlabAction>,
        event: &StoredEvent,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Option<Settled>> {
        if event.event_type != HOST.record || event.source != Source::Pidevops.as_str() {
            return Ok(None);
        }
        let record: CommentRecord = match serde_json::from_slice(&event.body) {
            Ok(record) => record,
            Err(e) => {
                tracing::warn!(position = event.position, error = %e, "a note record that cannot be read");
                return Ok(Some(Settled::Yes));
            }
        };
        for request in note_answered(&record) {
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
            TaskEvent::Created(_)
            | TaskEvent::Completed { .. }
            | TaskEvent::FlaggedNeedsHuman { .. }
            // Its merge request, opened when it goes to review.
            | TaskEvent::SubmittedForReview { .. }
            // Auto-land: the merge the queue chose (`landing::queue`).
            | TaskEvent::MergeQueued { .. } => true,
            TaskEvent::Approved { .. }
            | TaskEvent::Rejected { .. }
            | TaskEvent::Started { .. }
            | TaskEvent::Resumed { .. }
            | TaskEvent::Retried { .. }
            | TaskEvent::Cancelled { .. }
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
            | TaskEvent::RolledUp { .. }
            | TaskEvent::CheckPassed { .. }
            | TaskEvent::ReviewApproved { .. }
            | TaskEvent::ApprovalWithdrawn { .. }
            | TaskEvent::Combined { .. }
            | TaskEvent::Landed { .. }
            | TaskEvent::Refreshed { .. }
            | TaskEvent::WentStale { .. }
            | TaskEvent::ConflictFound { .. }
            | TaskEvent::ConflictUnresolved { .. }
            | TaskEvent::RefreshCheckDue { .. }
            | TaskEvent::RefreshCheckFailed { .. } => false,
        }
    }

    async fn requests(
        &self,
        fx: &impl Handle<Action = GitlabAction>,
        event: &StoredEvent,
        task_event: &TaskEvent,
        loaded: &Loaded,
    ) -> anyhow::Result<Vec<Request<GitlabAction>>> {
        let task = &loaded.task;
        let mut requests = gitlab(task_event, task);
        requests.extend(merge_request::merge_request(task_event, task, &self.config));
        if let TaskEvent::FlaggedNeedsHuman {
            reason, question, ..
        } = task_event
        {
            requests.extend(gitlab_question(
                task,
                reason,
                *question,
                &event.id.to_string(),
                self.bot.as_deref(),
            ));
        }
        // Auto-land: the merge queue chose this head (one merge in flight per base, each on the latest base).
        if let TaskEvent::MergeQueued { sha, number, .. } = task_event {
            if let Some(merge) = merge_request::queued(task, sha, *number, &self.config) {
                let rules = fx.board().config().land_for(task.repo());
                if merge_request::land(task, &rules, &self.config)
                    .is_some_and(|ready| ready.key == merge.key)
                    || fx.requested(&merge.key).await?
                {
                    // Still ready at that head; or it moved on since (a merge hook, a flag) but this merge was
                    // asked for: an attempt cut off by a crash still has to be settled (asking again is a no-op).
                    requests.push(merge);
                }
            }
        }
        Ok(requests)
    }

    /// A GitLab merge request becomes the task's link, and the GitLab issue it came from hears of it.
    async fn pull_request_opened(
        &self,
        fx: &impl Handle<Action = GitlabAction>,
        opened: &OpenedPullRequest<'_>,
    ) -> anyhow::Result<Vec<Request<GitlabAction>>> {
        if opened.host != Source::Gitlab {
            return Ok(Vec::new());
        }
        let links = Links::default().with(
            GITLAB_MR,
            &GitlabMrRef::new(opened.repo.clone(), opened.number)?,
        );
        let Some(task) = link_review_request(fx.board(), opened.task, links).await? else {
            return Ok(Vec::new());
        };
        Ok(
            merge_request::after_merge_request(&task, opened.number, opened.url)
                .into_iter()
                .collect(),
        )
    }

    async fn call(&self, key: &str, action: &GitlabAction) -> Result<Produced, CallError> {
        match action {
            GitlabAction::Note {
                project,
                on,
                iid,
                body,
            } => self.client.note(key, project, *on, *iid, body).await,
            GitlabAction::Award {
                project,
                on,
                iid,
                note,
                name,
            } => self.client.award(project, *on, *iid, *note, name).await,
            GitlabAction::OpenMergeRequest {
                project,
                source_branch,
                target_branch,
                title,
                description,
                draft: _,
                remove_source_branch,
            } => {
                self.client
                    .open_merge_request(
                        project,
                        source_branch,
                        target_branch,
                        title,
                        description,
                        *remove_source_branch,
                    )
                    .await
            }
            GitlabAction::MergeMergeRequest { project, iid, sha } => {
                self.client
                    .merge_merge_request(project, *iid, sha.as_str())
                    .await
            }
        }
    }
}

/// What a task event asks of GitLab, pure: a note on the task's GitLab issue when the task is made
/// (`gitlab:note:<task>:created`) and when it is done (`gitlab:note:<task>:done`); nothing for a task from
/// elsewhere. Only pidevops's own words: no text of the issue is echoed back.
pub fn gitlab(event: &TaskEvent, task: &Task) -> Vec<Request<GitlabAction>> {
    let Some(issue) = task.links().get(GITLAB_ISSUE) else {
        return Vec::new();
    };
    let id = task.id();
    let (suffix, body) = if let TaskEvent::Created(_) = event {
        (
            "created",
            format!("pidevops made this issue its task {id}."),
        )
    } else if let TaskEvent::Completed { .. } = event {
        (
            "done",
            format!("pidevops's task {id} for this issue is done."),
        )
    } else {
        return Vec::new();
    };
    vec![Request {
        key: format!("gitlab:note:{id}:{suffix}"),
        task: Some(id),
        action: GitlabAction::Note {
            project: issue.project.clone(),
            on: Noteable::Issue,
            iid: issue.iid.get(),
            body,
        },
    }]
}

/// A note addressed to pidevops: `eyes` awarded to it (pidevops has it), then a reply saying what came of it
/// (`effects::reply`'s words), each once per note (keyed by its project and id). Pure.
pub fn note_answered(record: &CommentRecord) -> Vec<Request<GitlabAction>> {
    let at = format!(
        "{}:{}",
        record.repo.as_str().to_ascii_lowercase(),
        record.comment
    );
    let on = if record.pull_request {
        Noteable::MergeRequest
    } else {
        Noteable::Issue
    };
    vec![
        Request {
            key: format!("gitlab:award:{at}"),
            task: record.task,
            action: GitlabAction::Award {
                project: record.repo.clone(),
                on,
                iid: record.number,
                note: record.comment,
                name: "eyes".to_owned(),
            },
        },
        Request {
            key: format!("gitlab:reply:{at}"),
            task: record.task,
            action: GitlabAction::Note {
                project: record.repo.clone(),
                on,
                iid: record.number,
                body: comment_reply(record, "Merge request"),
            },
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::{
        decide, evolve, Command, GitlabIssueRef, Links, MaxAttempts, NewTask, Priority, Spec,
    };

    pub(super) fn task(links: Links) -> (Task, Vec<TaskEvent>) {
        let events = decide(
            None,
            &Command::Create(Box::new(NewTask {
                id: "T-4".parse().expect("an id"),
                repo: "acme/platform/api".parse().expect("a repo"),
                spec: Spec::new("Paginate", "", "").expect("a spec"),
                priority: Priority::Normal,
                links,
                approval: crate::tasks::ApprovalPolicy::Auto,
                max_attempts: MaxAttempts::new(3).expect("a budget"),
                ticket_version: None,
                agent: None,
                family: Default::default(),
            })),
            chrono::Utc::now(),
        )
        .expect("created");
        let task = events
            .iter()
            .try_fold(None, |t, e| evolve(t, e).map(Some))
            .expect("applied")
            .expect("a task");
        (task, events)
    }

    #[test]
    fn a_task_of_a_gitlab_issue_is_noted_on_it_when_made_and_done_and_no_other_is() {
        let issue = GitlabIssueRef::new("acme/platform/api".parse().unwrap(), 23).unwrap();
        let (ours, events) = task(Links::default().with(GITLAB_ISSUE, &issue));
        let made = gitlab(&events[0], &ours);
        assert_eq!(made.len(), 1);
        assert_eq!(made[0].key, "gitlab:note:T-4:created");
        let GitlabAction::Note {
            project,
            on,
            iid,
            body,
        } = &made[0].action
        else {
            panic!("a note: {:?}", made[0].action)
        };
        assert_eq!(
            (project.as_str(), *on, *iid),
            ("acme/platform/api", Noteable::Issue, 23)
        );
        assert!(body.contains("T-4"));
        let done = TaskEvent::Completed {
            at: chrono::Utc::now(),
        };
        assert_eq!(gitlab(&done, &ours)[0].key, "gitlab:note:T-4:done");
        let started_elsewhere = task(Links::default());
        assert!(gitlab(&events[0], &started_elsewhere.0).is_empty());
    }

    #[test]
    fn a_note_for_pidevops_gets_eyes_then_one_reply_on_what_it_is_on() {
        use crate::intake::CommentOutcome;
        let record = CommentRecord {
            repo: "Acme/Platform/API".parse().unwrap(),
            number: 7,
            pull_request: true,
            comment: 1300,
            login: "alice".into(),
            task: Some("T-4".parse().unwrap()),
            outcome: CommentOutcome::Status {
                column: crate::tasks::Column::InReview,
                attempts: 1,
                max_attempts: 3,
                needs_human: None,
                pull_request: Some("acme/platform/api!7".into()),
            },
            cause_event_id: uuid::Uuid::nil(),
        };
        let asked = note_answered(&record);
        let keys: Vec<&str> = asked.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "gitlab:award:acme/platform/api:1300",
                "gitlab:reply:acme/platform/api:1300"
            ]
        );
        assert_eq!(
            asked[0].action,
            GitlabAction::Award {
                project: record.repo.clone(),
                on: Noteable::MergeRequest,
                iid: 7,
                note: 1300,
                name: "eyes".into(),
            }
        );
        let GitlabAction::Note { on, iid, body, .. } = &asked[1].action else {
            panic!("a reply: {:?}", asked[1].action)
        };
        assert_eq!((*on, *iid), (Noteable::MergeRequest, 7));
        assert!(
            body.contains("T-4 is in review, attempt 1 of 3. Merge request: acme/platform/api!7."),
            "{body}"
        );
        let on_issue = CommentRecord {
            pull_request: false,
            ..record
        };
        assert!(matches!(
            note_answered(&on_issue)[1].action,
            GitlabAction::Note {
                on: Noteable::Issue,
                ..
            }
        ));
    }

    #[test]
    fn a_note_recorded_before_merge_requests_were_noted_on_reads_as_an_issue_s() {
        let stored = serde_json::json!({
            "action": "gitlab_note", "project": "acme/platform/api", "iid": 23, "body": "made"
        });
        let action: GitlabAction = serde_json::from_value(stored).unwrap();
        assert!(matches!(
            action,
            GitlabAction::Note {
                on: Noteable::Issue,
                iid: 23,
                ..
            }
        ));
    }
}
