//! A GitLab-hosted task's merge request, pure: opened once when the task goes to review (`gitlab:mr:<task>`),
//! linked to the task and pointed at from its GitLab issue once it is open, and merged by auto-land once the merge
//! queue chose its head (`task.merge_queued`) and [`landing::readiness`] still says so at that head
//! (`gitlab:merge:<task>:<sha>`). Nothing for a task of any other code host.

use crate::domain::Source;
use crate::effects::inert::inert;
use crate::effects::policy_config::PolicyConfig;
use crate::effects::Request;
use crate::tasks::{
    landing, CommitSha, LandConfig, Readiness, Task, TaskEvent, TaskId, GITLAB_ISSUE, GITLAB_MR,
};

use super::GitlabAction;

/// Whether `task`'s repository is GitLab-hosted: the only tasks this policy opens or merges anything for.
pub fn hosted_here(task: &Task, config: &PolicyConfig) -> bool {
    config.host_of(task.repo()) == Source::Gitlab
}

/// The merge request a GitLab-hosted task's submission for review asks for: from `pidevops/<task>` to the
/// repository's base, titled `<task>: <title>` (made inert), described by the shared writer, a draft when the
/// repository says `draft = true`, GitLab deleting its branch when it merges unless the repository says
/// `delete_branch = false`. One per task: a later attempt pushes to the same branch, which updates it.
pub fn merge_request(
    event: &TaskEvent,
    task: &Task,
    config: &PolicyConfig,
) -> Option<Request<GitlabAction>> {
    let TaskEvent::SubmittedForReview { branch, .. } = event else {
        return None;
    };
    if !hosted_here(task, config) || task.is_plan() {
        return None;
    }
    let title = format!("{}: {}", task.id(), inert(&task.title()));
    let draft = config.draft(task.repo());
    Some(Request {
        key: crate::domain::effect::merge_request_key(task.id()),
        task: Some(task.id()),
        action: GitlabAction::OpenMergeRequest {
            project: task.repo().clone(),
            source_branch: branch.clone(),
            target_branch: config.base_for(task.repo()),
            title: if draft {
                format!("Draft: {title}")
            } else {
                title
            },
            description: crate::effects::pull_request::task_body(task),
            draft,
            remove_source_branch: config.deletes_branches(task.repo()),
        },
    })
}

/// The key of the merge of `task`'s merge request at `sha`: once per task and head commit.
pub fn merge_key(task: TaskId, sha: &CommitSha) -> String {
    crate::domain::effect::gitlab_merge_key(task, sha)
}

/// Auto-land: the merge of a GitLab-hosted task's merge request when [`landing::readiness`] says it is ready.
pub fn land(
    task: &Task,
    rules: &LandConfig,
    config: &PolicyConfig,
) -> Option<Request<GitlabAction>> {
    if !hosted_here(task, config) {
        return None;
    }
    match landing::readiness(task, rules) {
        Readiness::Ready { sha, number } => Some(merge(task, &sha, number)),
        Readiness::Waiting(_) => None,
    }
}

/// The merge the merge queue chose (`task.merge_queued` of `sha` and merge request `iid`), for a GitLab-hosted
/// task whose merge request is the one pidevops recorded (in the task's own project).
pub fn queued(
    task: &Task,
    sha: &CommitSha,
    iid: u64,
    config: &PolicyConfig,
) -> Option<Request<GitlabAction>> {
    if !hosted_here(task, config) {
        return None;
    }
    let mr = task.links().get(GITLAB_MR)?;
    (mr.iid.get() == iid
        && mr
            .project
            .as_str()
            .eq_ignore_ascii_case(task.repo().as_str()))
    .then(|| merge(task, sha, iid))
}

fn merge(task: &Task, sha: &CommitSha, iid: u64) -> Request<GitlabAction> {
    Request {
        key: merge_key(task.id(), sha),
        task: Some(task.id()),
        action: GitlabAction::MergeMergeRequest {
            project: task.repo().clone(),
            iid,
            sha: sha.clone(),
        },
    }
}

/// Once the task's merge request is open: a note on the GitLab issue it came from, pointing at it (once per task:
/// its key's marker lets a repeat find it). `!7` in the issue's own project, the merge request's address in
/// another's.
pub fn after_merge_request(task: &Task, iid: u64, url: &str) -> Option<Request<GitlabAction>> {
    let issue = task.links().get(GITLAB_ISSUE)?;
    let id = task.id();
    let mr = if issue
        .project
        .as_str()
        .eq_ignore_ascii_case(task.repo().as_str())
    {
        format!("!{iid}")
    } else {
        url.to_owned()
    };
    Some(Request {
        key: format!("gitlab:note:{id}:merge-request"),
        task: Some(id),
        action: GitlabAction::Note {
            project: issue.project.clone(),
            on: super::Noteable::Issue,
            iid: issue.iid.get(),
            body: format!(
                "pidevops worked on this as {id} and opened {mr} for review (attempt {} of {}).",
                task.attempts(),
                task.max_attempts().get()
            ),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::{
        decide, evolve, ApprovalPolicy, Command, FactName, GitlabIssueRef, GitlabMrRef, LandMode,
        Links, MaxAttempts, NewTask, Priority, RepoName, RunId, Spec,
    };

    const PROJECT: &str = "acme/platform/api";

    fn apply(task: Option<Task>, command: Command) -> (Task, Vec<TaskEvent>) {
        let events = decide(task.as_ref(), &command, chrono::Utc::now()).expect("decided");
        let mut task = task;
        for event in &events {
            task = Some(evolve(task, event).expect("applied"));
        }
        (task.expect("a task"), events)
    }

    /// Task T-4 on `repo`, from GitLab issue 23 of PROJECT, submitted for review: the task and the submission.
    fn in_review(repo: &str) -> (Task, TaskEvent) {
        let issue = GitlabIssueRef::new(PROJECT.parse().unwrap(), 23).unwrap();
        let (task, _) = apply(
            None,
            Command::Create(Box::new(NewTask {
                id: "T-4".parse().unwrap(),
                repo: repo.parse().unwrap(),
                spec: Spec::new("Paginate @everyone", "src/list", "pages of 50").unwrap(),
                priority: Priority::Normal,
                links: Links::default().with(GITLAB_ISSUE, &issue),
                approval: ApprovalPolicy::Auto,
                max_attempts: MaxAttempts::new(3).unwrap(),
                ticket_version: None,
                agent: None,
                family: Default::default(),
            })),
        );
        let run = RunId(uuid::Uuid::from_u128(1));
        let (task, _) = apply(Some(task), Command::Start { run });
        let (task, submitted) = apply(
            Some(task),
            Command::SubmitForReview {
                run,
                branch: "pidevops/T-4".parse().unwrap(),
                pr: None,
                report: Default::default(),
            },
        );
        let event = submitted
            .into_iter()
            .find(|e| matches!(e, TaskEvent::SubmittedForReview { .. }))
            .expect("submitted");
        (task, event)
    }

    fn config(draft: bool) -> PolicyConfig {
        let project: RepoName = PROJECT.parse().unwrap();
        PolicyConfig {
            bases: [(project.clone(), "develop".to_owned())].into(),
            hosts: [(project.clone(), Source::Gitlab)].into(),
            drafts: if draft {
                [project].into()
            } else {
                Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_gitlab_task_s_submission_asks_for_one_merge_request_and_github_s_policy_for_nothing() {
        let (task, submitted) = in_review(PROJECT);
        let asked = merge_request(&submitted, &task, &config(false)).expect("a merge request");
        assert_eq!(asked.key, "gitlab:mr:T-4");
        let GitlabAction::OpenMergeRequest {
            project,
            source_branch,
            target_branch,
            title,
            description,
            draft,
            remove_source_branch,
        } = &asked.action
        else {
            panic!("{asked:?}");
        };
        assert!(remove_source_branch, "delete_branch is on by default");
        assert_eq!(project.as_str(), PROJECT);
        assert_eq!(
            (source_branch.as_str(), target_branch.as_str()),
            ("pidevops/T-4", "develop")
        );
        assert!(!draft);
        assert!(title.starts_with("T-4: Paginate "), "{title}");
        assert!(!title.contains("@everyone"), "made inert: {title}");
        assert!(description.contains("## Scope\nsrc/list"), "{description}");
        // GitHub's policy opens no pull request and merges nothing for it.
        assert!(crate::providers::policy::github(&submitted, &task, &config(false)).is_empty());
        // A GitHub task is GitHub's: nothing of GitLab's, and GitHub's pull request as before.
        let (github_task, github_submitted) = in_review("acme/app");
        assert!(merge_request(&github_submitted, &github_task, &config(false)).is_none());
        assert_eq!(
            crate::providers::policy::github(&github_submitted, &github_task, &config(false))[0]
                .key,
            "github:pr:T-4"
        );
        // Any other event asks for no merge request.
        let done = TaskEvent::Completed {
            at: chrono::Utc::now(),
        };
        assert!(merge_request(&done, &task, &config(false)).is_none());
    }

    #[test]
    fn draft_on_config_opens_a_draft() {
        let (task, submitted) = in_review(PROJECT);
        let asked = merge_request(&submitted, &task, &config(true)).expect("a merge request");
        let GitlabAction::OpenMergeRequest { title, draft, .. } = &asked.action else {
            panic!("{asked:?}");
        };
        assert!(draft);
        assert!(title.starts_with("Draft: T-4: "), "{title}");
    }

    #[test]
    fn delete_branch_false_keeps_the_source_branch() {
        let (task, submitted) = in_review(PROJECT);
        let keeps = PolicyConfig {
            kept_branches: [PROJECT.parse().unwrap()].into(),
            ..config(false)
        };
        let asked = merge_request(&submitted, &task, &keeps).expect("a merge request");
        let GitlabAction::OpenMergeRequest {
            remove_source_branch,
            ..
        } = &asked.action
        else {
            panic!("{asked:?}");
        };
        assert!(!remove_source_branch);
    }

    #[test]
    fn auto_land_merges_the_merge_request_at_the_checked_head_once_ready() {
        let (task, _) = in_review(PROJECT);
        let rules = LandConfig {
            mode: LandMode::Auto,
            approvals: 1,
            ..Default::default()
        };
        assert!(
            land(&task, &rules, &config(false)).is_none(),
            "no merge request yet"
        );
        let mr = GitlabMrRef::new(PROJECT.parse().unwrap(), 7).unwrap();
        let (task, _) = apply(
            Some(task),
            Command::AttachLinks {
                links: Links::default().with(GITLAB_MR, &mr),
            },
        );
        let sha = CommitSha::new(&"a".repeat(40)).unwrap();
        let (task, _) = apply(
            Some(task),
            Command::RecordCheckPassed {
                sha: sha.clone(),
                name: FactName::new("check", "test").unwrap(),
            },
        );
        assert!(
            land(&task, &rules, &config(false)).is_none(),
            "0 of 1 approvals"
        );
        let (task, _) = apply(
            Some(task),
            Command::RecordApproval {
                by: FactName::new("login", "alice").unwrap(),
                sha: sha.clone(),
            },
        );
        let merge = land(&task, &rules, &config(false)).expect("ready");
        assert_eq!(merge.key, format!("gitlab:merge:T-4:{sha}"));
        assert_eq!(
            merge.action,
            GitlabAction::MergeMergeRequest {
                project: PROJECT.parse().unwrap(),
                iid: 7,
                sha: sha.clone(),
            }
        );
        // Not GitLab-hosted: not GitLab's to merge.
        assert!(land(&task, &rules, &PolicyConfig::default()).is_none());
        // The queue's choice is merged for the recorded merge request only, and only on GitLab.
        let chosen = queued(&task, &sha, 7, &config(false)).expect("the recorded merge request");
        assert_eq!(chosen, merge);
        assert!(
            queued(&task, &sha, 8, &config(false)).is_none(),
            "another merge request"
        );
        assert!(queued(&task, &sha, 7, &PolicyConfig::default()).is_none());
        // Once open, the issue hears of it: `!7` in its own project.
        let note = after_merge_request(&task, 7, "https://gitlab.example.com/x").expect("a note");
        assert_eq!(note.key, "gitlab:note:T-4:merge-request");
        let GitlabAction::Note { iid, body, .. } = &note.action else {
            panic!("{note:?}");
        };
        assert_eq!(*iid, 23);
        assert!(body.contains("opened !7 for review"), "{body}");
    }
}
