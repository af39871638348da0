//! The GitLab policy: a note on a task's GitLab issue when the task is made and when it is done. The request
//! builder is pure; [`GitlabPolicy`] is the `effects:gitlab` loop's side of [`ProviderPolicy`]. Merge requests,
//! pipelines and auto-land are not built yet.

mod action;

use crate::board::Loaded;
use crate::effects::handle::Handle;
use crate::effects::provider::ProviderPolicy;
use crate::effects::{CallError, Produced, Request};
use crate::eventlog::StoredEvent;
use crate::providers::gitlab::client::GitlabClient;
use crate::tasks::{Task, TaskEvent, GITLAB_ISSUE};

pub use action::GitlabAction;

/// The `effects:gitlab` policy.
#[derive(Clone, Debug)]
pub struct GitlabPolicy {
    client: GitlabClient,
}

impl GitlabPolicy {
    pub fn new(client: GitlabClient) -> Self {
        Self { client }
    }
}

impl ProviderPolicy for GitlabPolicy {
    type Action = GitlabAction;

    fn provider(&self) -> &'static str {
        "gitlab"
    }

    fn notifies(&self, event: &TaskEvent) -> bool {
        matches!(event, TaskEvent::Created(_)) || matches!(event, TaskEvent::Completed { .. })
    }

    async fn requests(
        &self,
        _fx: &impl Handle<Action = GitlabAction>,
        _event: &StoredEvent,
        task_event: &TaskEvent,
        loaded: &Loaded,
    ) -> anyhow::Result<Vec<Request<GitlabAction>>> {
        Ok(gitlab(task_event, &loaded.task))
    }

    async fn call(&self, key: &str, action: &GitlabAction) -> Result<Produced, CallError> {
        match action {
            GitlabAction::Note { project, iid, body } => {
                self.client.note(key, project, *iid, body).await
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
        let GitlabAction::Note { project, iid, body } = &made[0].action;
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
