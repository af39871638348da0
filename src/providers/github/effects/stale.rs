//! A stale review on GitHub (`tasks::stale`): under `remind`, one comment on the issue the task came from; under
//! `close`, one comment on its pull request saying why, then the pull request closed. Keyed by the `went_stale`
//! event, so a replay or a redelivery sends nothing twice.

use chrono::{DateTime, Utc};

use super::GithubAction;
use crate::domain::Source;
use crate::effects::policy_config::PolicyConfig;
use crate::effects::Request;
use crate::tasks::{stale, StaleAction, Task, GITHUB_ISSUE, GITHUB_PR};

/// What `went_stale` (its event `event_id`, recorded at `now`) asks of GitHub for `task`.
pub fn github_stale(
    task: &Task,
    after_h: u32,
    action: StaleAction,
    event_id: &str,
    config: &PolicyConfig,
    now: DateTime<Utc>,
) -> Vec<Request<GithubAction>> {
    let id = task.id();
    let since = now - chrono::Duration::minutes(10);
    match action {
        StaleAction::Remind => {
            let Some(issue) = task.links().get(GITHUB_ISSUE) else {
                return Vec::new();
            };
            let key = format!("github:comment:{id}:stale:{event_id}");
            let pr = task
                .review_request()
                .map_or_else(|| "its review".to_owned(), |n| format!("#{n}"));
            vec![Request {
                key: key.clone(),
                task: Some(id),
                action: GithubAction::Comment {
                    repo: issue.repo.clone(),
                    number: issue.number.get(),
                    body: format!(
                        "{id} has waited in review for {after_h} h without activity: {pr} needs a reviewer, or a \
                         comment on what to change.\n\n{}",
                        crate::effects::marker(&key)
                    ),
                    since,
                },
            }]
        }
        StaleAction::Close => {
            // Only the task's own pull request, on GitHub: a link to another repository's is not the task's.
            let Some(pr) = task
                .links()
                .get(GITHUB_PR)
                .filter(|pr| pr.repo.as_str().eq_ignore_ascii_case(task.repo().as_str()))
                .filter(|_| config.host_of(task.repo()) == Source::Github)
            else {
                return Vec::new();
            };
            let number = pr.number.get();
            let key = format!("github:comment:{id}:stale-close:{event_id}");
            vec![
                Request {
                    key: key.clone(),
                    task: Some(id),
                    action: GithubAction::Comment {
                        repo: pr.repo.clone(),
                        number,
                        body: format!(
                            "pidevops closed this: {}. {id} is cancelled; reopen the work with a new task.\n\n{}",
                            stale::close_reason(task, after_h).as_str(),
                            crate::effects::marker(&key)
                        ),
                        since,
                    },
                },
                Request {
                    key: format!("github:close:{id}:{event_id}"),
                    task: Some(id),
                    action: GithubAction::ClosePullRequest {
                        repo: pr.repo.clone(),
                        number,
                    },
                },
            ]
        }
    }
}
