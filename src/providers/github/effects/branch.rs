//! pidevops's own branch deleted once its task is done (its pull request merged) or cancelled
//! (`[repos."o/n"] delete_branch`, default true): one effect per task, `github:delete-branch:<task>`, for the
//! task's own `pidevops/<task>` (`TaskId::branch`) in the task's own repository, never a branch a webhook named.
//! The call deletes it only while its head is a commit pidevops recorded for the task (its runs' pushes, a
//! combined plan's combinations); anything else on it is someone's work, kept, and the effect says why.
//! A combined plan's branch is the plan's own `pidevops/<plan>`, deleted the same way when the plan rolls up to
//! done or cancelled.

use anyhow::Context;

use super::GithubAction;
use crate::domain::{runs, Source};
use crate::effects::policy_config::PolicyConfig;
use crate::effects::Request;
use crate::eventlog::{EventLog, StoredEvent};
use crate::tasks::{Column, CommitSha, Task, TaskEvent, TaskId, GITHUB_PR};

/// The key of the deletion of `task`'s branch: once per task.
pub fn delete_branch_key(task: TaskId) -> String {
    format!("github:delete-branch:{task}")
}

/// Whether `event` of `task` may ask for its branch's deletion (before the commits are read): the task is done
/// or cancelled, its repository's branches live on GitHub (not GitLab, not a remote pidevops's git lands), and
/// the repository did not say `delete_branch = false`.
pub fn may_delete(event: &TaskEvent, task: &Task, config: &PolicyConfig) -> bool {
    ends_its_branch(event)
        && config.host_of(task.repo()) == Source::Github
        && !config.landed_by_git.contains(task.repo())
        && config.deletes_branches(task.repo())
}

/// Whether `event` leaves the task's branch with nothing more to do: the task done (its pull request merged, or
/// a person said so) or cancelled, or a plan rolled up to done or cancelled (its combined branch). A task archived
/// was one of those first.
pub fn ends_its_branch(event: &TaskEvent) -> bool {
    match event {
        TaskEvent::Completed { .. } | TaskEvent::Cancelled { .. } => true,
        TaskEvent::RolledUp { column, .. } => matches!(column, Column::Done | Column::Cancelled),
        TaskEvent::Created(_)
        | TaskEvent::Approved { .. }
        | TaskEvent::Rejected { .. }
        | TaskEvent::Started { .. }
        | TaskEvent::Resumed { .. }
        | TaskEvent::SubmittedForReview { .. }
        | TaskEvent::Retried { .. }
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
        | TaskEvent::RefreshCheckFailed { .. } => false,
    }
}

/// The deletion of `task`'s branch that `event` asks for, given `commits` (what pidevops recorded for the
/// task): none unless [`may_delete`], and none when pidevops never pushed for it (no commit, no pull request).
pub fn delete_branch(
    event: &TaskEvent,
    task: &Task,
    commits: Vec<CommitSha>,
    config: &PolicyConfig,
) -> Option<Request<GithubAction>> {
    if !may_delete(event, task, config) || (commits.is_empty() && !task.links().has(GITHUB_PR)) {
        return None;
    }
    Some(Request {
        key: delete_branch_key(task.id()),
        task: Some(task.id()),
        action: GithubAction::DeleteBranch {
            repo: task.repo().clone(),
            branch: task.id().branch(),
            commits,
        },
    })
}

/// The commits pidevops recorded for the task whose stream is `events`, oldest first: each run's
/// `run.succeeded` commit (from the runs' streams) and each combination of a plan's items.
pub async fn recorded_commits(
    log: &EventLog,
    events: &[StoredEvent],
) -> anyhow::Result<Vec<CommitSha>> {
    let mut commits: Vec<CommitSha> = Vec::new();
    for event in events {
        match serde_json::from_slice(&event.body) {
            Ok(TaskEvent::Started { run, .. }) => {
                let stream = log
                    .store()
                    .read_stream(&runs::stream(run))
                    .await
                    .with_context(|| format!("reading run {run}"))?;
                for recorded in stream {
                    if let Ok(runs::RunEvent::Succeeded { commit, .. }) =
                        serde_json::from_slice(&recorded.body)
                    {
                        // A commit that is no sha was never pushed as one: nothing of ours to match.
                        commits.extend(CommitSha::new(&commit).ok());
                    }
                }
            }
            Ok(TaskEvent::Combined { commit, .. }) => commits.push(commit),
            // Its refresh's push: the branch's head after it.
            Ok(TaskEvent::Refreshed { to, .. }) => commits.push(to),
            _ => {}
        }
    }
    Ok(commits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::{
        decide, evolve, ApprovalPolicy, Command, GithubRef, Links, MaxAttempts, NewTask, Priority,
        Reason, RepoName, RunId, Spec,
    };

    const REPO: &str = "acme/app";

    fn apply(task: Option<Task>, command: Command) -> (Task, Vec<TaskEvent>) {
        let events = decide(task.as_ref(), &command, chrono::Utc::now()).expect("decided");
        let mut task = task;
        for event in &events {
            task = Some(evolve(task, event).expect("applied"));
        }
        (task.expect("a task"), events)
    }

    /// Task T-4 on REPO, started once, then cancelled (with its pull request linked when `pr`): the task and
    /// its cancellation.
    fn cancelled(pr: bool) -> (Task, TaskEvent) {
        let links = if pr {
            Links::default().with(
                GITHUB_PR,
                &GithubRef::new(REPO.parse().unwrap(), 9).unwrap(),
            )
        } else {
            Links::default()
        };
        let (task, _) = apply(
            None,
            Command::Create(Box::new(NewTask {
                id: "T-4".parse().unwrap(),
                repo: REPO.parse().unwrap(),
                spec: Spec::new("Fix the redirect", "src/auth", "it redirects").unwrap(),
                priority: Priority::Normal,
                links,
                approval: ApprovalPolicy::Auto,
                max_attempts: MaxAttempts::new(3).unwrap(),
                ticket_version: None,
                agent: None,
                family: Default::default(),
            })),
        );
        let run = RunId(uuid::Uuid::from_u128(1));
        let (task, _) = apply(Some(task), Command::Start { run });
        let (task, events) = apply(
            Some(task),
            Command::Cancel {
                reason: Reason::new("not wanted").unwrap(),
            },
        );
        let event = events
            .into_iter()
            .find(|e| matches!(e, TaskEvent::Cancelled { .. }))
            .expect("cancelled");
        (task, event)
    }

    fn sha(n: u8) -> CommitSha {
        CommitSha::new(&format!("{n:040x}")).unwrap()
    }

    #[test]
    fn a_cancelled_github_task_asks_once_for_its_own_branch_in_its_own_repository() {
        let (task, event) = cancelled(false);
        let asked = delete_branch(&event, &task, vec![sha(1)], &PolicyConfig::default())
            .expect("a deletion");
        assert_eq!(asked.key, "github:delete-branch:T-4");
        assert_eq!(
            asked.action,
            GithubAction::DeleteBranch {
                repo: REPO.parse().unwrap(),
                branch: "pidevops/T-4".parse().unwrap(),
                commits: vec![sha(1)],
            }
        );
        // A pull request linked is a push too, even with no commit read back (the call then keeps the branch).
        let (linked, event) = cancelled(true);
        assert!(delete_branch(&event, &linked, Vec::new(), &PolicyConfig::default()).is_some());
    }

    #[test]
    fn nothing_is_asked_when_the_repository_keeps_its_branches_or_they_are_not_github_s_or_never_pushed(
    ) {
        let (task, event) = cancelled(false);
        let repo: RepoName = REPO.parse().unwrap();
        let kept = PolicyConfig {
            kept_branches: [repo.clone()].into(),
            ..Default::default()
        };
        assert!(delete_branch(&event, &task, vec![sha(1)], &kept).is_none());
        let gitlab = PolicyConfig {
            hosts: [(repo.clone(), Source::Gitlab)].into(),
            ..Default::default()
        };
        assert!(delete_branch(&event, &task, vec![sha(1)], &gitlab).is_none());
        let by_git = PolicyConfig {
            landed_by_git: [repo].into(),
            ..Default::default()
        };
        assert!(delete_branch(&event, &task, vec![sha(1)], &by_git).is_none());
        assert!(delete_branch(&event, &task, Vec::new(), &PolicyConfig::default()).is_none());
        let started = TaskEvent::Started {
            at: chrono::Utc::now(),
            run: RunId(uuid::Uuid::from_u128(2)),
            attempt: 2,
            purpose: Default::default(),
        };
        assert!(delete_branch(&started, &task, vec![sha(1)], &PolicyConfig::default()).is_none());
    }

    #[test]
    fn a_plan_s_branch_ends_when_it_rolls_up_done_or_cancelled_only() {
        let rolled = |column| TaskEvent::RolledUp {
            at: chrono::Utc::now(),
            column,
            needs_human: Vec::new(),
        };
        assert!(ends_its_branch(&rolled(Column::Done)));
        assert!(ends_its_branch(&rolled(Column::Cancelled)));
        assert!(!ends_its_branch(&rolled(Column::InReview)));
        assert!(!ends_its_branch(&rolled(Column::InProgress)));
    }
}
