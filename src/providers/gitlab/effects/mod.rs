//! The GitLab policy: a note on a task's GitLab issue when the task is made and when it is done; a GitLab-hosted
//! task's merge request, opened when it goes to review, linked and pointed at from its issue, and merged under
//! `land = "auto"` once `tasks::landing` says it is ready (`merge_request.rs`). The request builders are pure;
//! [`GitlabPolicy`] is the `effects:gitlab` loop's side of [`ProviderPolicy`].

mod action;
pub mod merge_request;

use anyhow::Context;

use crate::board::{BoardError, Loaded};
use crate::domain::Source;
use crate::effects::handle::{Handle, ACTOR};
use crate::effects::policy_config::PolicyConfig;
use crate::effects::provider::{OpenedPullRequest, ProviderPolicy};
use crate::effects::{CallError, Produced, Request};
use crate::eventlog::StoredEvent;
use crate::providers::gitlab::client::GitlabClient;
use crate::tasks::{Command, GitlabMrRef, Links, Task, TaskEvent, GITLAB_ISSUE, GITLAB_MR};

pub use action::GitlabAction;

/// The `effects:gitlab` policy.
#[derive(Clone, Debug)]
pub struct GitlabPolicy {
    client: GitlabClient,
    config: PolicyConfig,
}

impl GitlabPolicy {
    pub fn new(client: GitlabClient, config: PolicyConfig) -> Self {
        Self { client, config }
    }
}

impl ProviderPolicy for GitlabPolicy {
    type Action = GitlabAction;

    fn provider(&self) -> &'static str {
        "gitlab"
    }

    fn notifies(&self, event: &TaskEvent) -> bool {
        matches!(event, TaskEvent::Created(_))
            || matches!(event, TaskEvent::Completed { .. })
            || crate::tasks::landing::may_land(event)
    }

    async fn requests(
        &self,
        fx: &impl Handle<Action = GitlabAction>,
        _event: &StoredEvent,
        task_event: &TaskEvent,
        loaded: &Loaded,
    ) -> anyhow::Result<Vec<Request<GitlabAction>>> {
        let task = &loaded.task;
        let mut requests = gitlab(task_event, task);
        requests.extend(merge_request::merge_request(task_event, task, &self.config));
        if crate::tasks::landing::may_land(task_event)
            && merge_request::hosted_here(task, &self.config)
        {
            let rules = fx.board().config().land_for(task.repo());
            if let Some(merge) = merge_request::land(task, &rules, &self.config) {
                requests.push(merge);
            } else if let Some(merge) = merge_request::merge_asked_before(task, &self.config) {
                // The task moved on since (a merge, a flag), but a merge of this head was asked for: an attempt cut
                // off by a crash still has to be settled (asking again is a no-op for its key).
                if fx.requested(&merge.key).await? {
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
        let task = match fx
            .board()
            .execute(opened.task, &Command::AttachLinks { links }, ACTOR)
            .await
        {
            Ok(outcome) => outcome.task,
            // Closed and archived tasks, and a task already linked to another merge request, keep what they have.
            Err(BoardError::Refused(refused)) => {
                tracing::info!(task = %opened.task, %refused, "merge request not linked");
                match fx.board().load(opened.task).await? {
                    Some(loaded) => loaded.task,
                    None => return Ok(Vec::new()),
                }
            }
            Err(error) => return Err(error).context("linking the merge request to its task"),
        };
        Ok(
            merge_request::after_merge_request(&task, opened.number, opened.url)
                .into_iter()
                .collect(),
        )
    }

    async fn call(&self, key: &str, action: &GitlabAction) -> Result<Produced, CallError> {
        match action {
            GitlabAction::Note { project, iid, body } => {
                self.client.note(key, project, *iid, body).await
            }
            GitlabAction::OpenMergeRequest {
                project,
                source_branch,
                target_branch,
                title,
                description,
                draft: _,
            } => {
                self.client
                    .open_merge_request(project, source_branch, target_branch, title, description)
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
            iid: issue.iid.get(),
            body,
        },
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::{
        decide, evolve, Command, GitlabIssueRef, Links, MaxAttempts, NewTask, Priority, Spec,
    };

    fn task(links: Links) -> (Task, Vec<TaskEvent>) {
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
        let GitlabAction::Note { project, iid, body } = &made[0].action else {
            panic!("a note: {:?}", made[0].action);
        };
        assert_eq!((project.as_str(), *iid), ("acme/platform/api", 23));
        assert!(body.contains("T-4"));
        let done = TaskEvent::Completed {
            at: chrono::Utc::now(),
        };
        assert_eq!(gitlab(&done, &ours)[0].key, "gitlab:note:T-4:done");
        let started_elsewhere = task(Links::default());
        assert!(gitlab(&events[0], &started_elsewhere.0).is_empty());
    }
}
