//! What became of a merge the `merge_queue` loop chose, read from its effect's stream (`github:merge:<task>:<sha>`
//! or `gitlab:merge:<task>:<sha>`): the queue reads it to know what holds a base, the `refresh` loop to leave a
//! merge in the host's own queue alone.

use anyhow::Context;

use super::Lander;
use crate::domain::effect::{github_merge_key, gitlab_merge_key};
use crate::tasks::{CommitSha, RepoName, Task, TaskId};

/// What became of a queued merge (its effect's stream).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Merge {
    /// Not made yet, being made, or made (the task completes once the host's merge is seen).
    Pending,
    /// Put into the host's own queue for the base (GitHub's merge queue, a GitLab merge train), which tests it on
    /// top of what is ahead of it and merges it: it does not hold this queue's base.
    Enqueued,
    /// Failed for good (the host refused it otherwise; the task was flagged then): that head is not chosen
    /// again, nor does it hold the base.
    Failed,
    /// The host refused it because the pull request is `state` (GitHub's `behind`, `dirty`; GitLab's
    /// `need_rebase`, `conflict`): the queue brings it up to date (`queue.rs`, `unmerged`).
    Unmerged { state: String },
}

/// The key of the merge of `task` at `sha` on `repo`'s host.
fn merge_key(lander: &Lander, repo: &RepoName, task: TaskId, sha: &CommitSha) -> String {
    if lander.sources.source(repo).on_gitlab() {
        gitlab_merge_key(task, sha)
    } else {
        github_merge_key(task, sha)
    }
}

/// What became of the merge of `task` at `sha`, from its effect's stream.
pub(super) async fn merge_outcome(
    lander: &Lander,
    repo: &RepoName,
    task: TaskId,
    sha: &CommitSha,
) -> anyhow::Result<Merge> {
    let stream = crate::domain::effect::stream(&merge_key(lander, repo, task, sha));
    let events = lander
        .log
        .store()
        .read_stream(&stream)
        .await
        .with_context(|| format!("reading {stream}"))?;
    let Some(last) = events.last() else {
        return Ok(Merge::Pending);
    };
    let body = || serde_json::from_slice::<serde_json::Value>(&last.body).unwrap_or_default();
    Ok(match last.event_type.as_str() {
        "effect.withheld" => Merge::Failed,
        "effect.failed" if body()["retry_at"].is_null() => Merge::Failed,
        "effect.succeeded" => {
            let body = body();
            let produced = &body["produced"];
            match (produced["kind"].as_str(), produced["state"].as_str()) {
                (Some("unmerged"), Some(state)) => Merge::Unmerged {
                    state: state.to_owned(),
                },
                (Some("enqueued"), _) => Merge::Enqueued,
                _ => Merge::Pending,
            }
        }
        _ => Merge::Pending,
    })
}

/// Whether the merge the queue chose for `task` is in the host's own queue (GitHub's merge queue, a GitLab merge
/// train): the `refresh` loop leaves it alone, as a push to its branch would take it out of that queue.
pub(super) async fn in_host_queue(lander: &Lander, task: &Task) -> anyhow::Result<bool> {
    let Some(sha) = task.landing().head().filter(|_| task.landing().queued()) else {
        return Ok(false);
    };
    let merge = merge_outcome(lander, task.repo(), task.id(), sha).await?;
    Ok(merge == Merge::Enqueued)
}
