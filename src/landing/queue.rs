//! The `merge_queue` loop: with `land = "auto"` on GitHub or GitLab, pidevops's pull requests (merge requests) on
//! a base land one at a time, each on top of the latest base. A merge decided by one pull request's facts alone
//! would land code nobody tested together: five plan items ready at once, merged at once, each passing on a main
//! that no longer exists.
//!
//! Each tick, for each repository with `land = "auto"` on a host the loop serves (GitHub with `GITHUB_TOKEN`,
//! GitLab with `GITLAB_TOKEN`), over its tasks in review:
//! - a merge in flight (a task whose head the queue chose, `task.merge_queued`, still in review, not flagged, its
//!   merge not failed for good) holds the base: nothing else is chosen until it is merged (and completed) or fails;
//! - otherwise the first ready task ([`landing::readiness`]: checks and approvals in on its head; a plan's item
//!   only once the items it depends on are done; in task order) is brought up to date with the base by the
//!   `refresh` loop's own refresh: already current, it is chosen (`Command::QueueMerge` → `task.merge_queued`,
//!   which `effects:github` or `effects:gitlab` turns into the merge of that head, once); refreshed, its landing
//!   facts start over and it is chosen once its checks pass on the new head; a conflict (handed to an agent,
//!   `task.conflict_found`) or someone else's push (flagged) takes it out of the running, and the next one is
//!   looked at on the next tick.
//!
//! GitHub may still refuse the chosen merge (405) when the base moved after the queue's refresh (a person's push):
//! the merge effect then reads the pull request's `mergeable_state` and, `behind` or `dirty`, records the merge as
//! unmerged (`Produced::Unmerged`) instead of failing it for a person. The queue brings that task up to date on its
//! next tick (refreshed: its checks run again and its new head is chosen; a conflict goes to an agent); a repository
//! that does not refresh, or a branch that holds the base already, flags the task saying what GitHub answered.
//!
//! GitLab's refusal of the chosen merge reads the same way: a merge request GitLab then finds `need_rebase` or in
//! `conflict` is recorded unmerged and brought up to date here (`providers/gitlab/client/merge_requests.rs`).
//!
//! A base whose rules require GitHub's own merge queue gets the chosen pull request enqueued there by the merge
//! effect instead (`providers/github/client/queue.rs`); it holds this queue until GitHub merges it, or takes it
//! out (`dequeued` flags the task). A GitLab project that runs merge trains gets the chosen merge request put on
//! its train instead (`providers/gitlab/client/trains.rs`), which holds this queue the same way until GitLab
//! merges it.
//!
//! The queue is kept in the log: what is in flight is read from the tasks' events each tick, so a restart, or a
//! second replica taking the loop over, continues where it was; the merge is an effect keyed by task and head, so
//! it is made once. A repository with `refresh = "off"` is queued without a refresh (GitHub refuses a merge that
//! conflicts, which flags the task). A combined plan's pull request is refreshed as one, like a task's.

use std::collections::BTreeMap;

use anyhow::Context;
use chrono::Utc;
use serde::Serialize;

use super::refresh::{Ended, RefreshProgress, Refresher};
use crate::board::{Board, BoardError};
use crate::domain::effect::{github_merge_key, gitlab_merge_key};
use crate::eventlog::EventLog;
use crate::projectors::tasks::{self as task_rows, TaskFilter};
use crate::tasks::{
    landing, Column, Command, CommitSha, LandMode, Readiness, RefreshMode, RepoName, Task, TaskId,
};

/// What became of a queued merge (its effect's stream).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Merge {
    /// Not made yet, being made, or made (the task completes once the host's merge is seen).
    Pending,
    /// Failed for good (the host refused it otherwise; the task was flagged then): that head is not chosen
    /// again, nor does it hold the base.
    Failed,
    /// The host refused it because the pull request is `state` (GitHub's `behind`, `dirty`; GitLab's
    /// `need_rebase`, `conflict`): see [`MergeQueue::unmerged`].
    Unmerged { state: String },
}

/// The loop's name.
pub const MERGE_QUEUE: &str = "merge_queue";
/// Who the loop's commands are from.
const ACTOR: &str = "merge_queue";

/// What one tick did, for `/health`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct QueueProgress {
    /// Merges chosen this tick.
    pub queued: u64,
    /// Ready tasks brought up to date first (their checks run again before they are chosen).
    pub refreshed: u64,
    /// Ready tasks a refresh took out of the running: a conflict handed to an agent, someone else's push flagged.
    pub stopped: u64,
    /// Each base with a merge in flight: the task whose merge holds it.
    pub in_flight: BTreeMap<String, TaskId>,
}

/// The `merge_queue` loop (see the module doc).
#[derive(Clone, Debug)]
pub struct MergeQueue {
    log: EventLog,
    refresher: Refresher,
    /// Whether pidevops has workspaces to refresh in (dispatch is on); queued as they stand otherwise.
    refreshes: bool,
    /// The code hosts whose repositories the queue lands: those pidevops can merge on.
    hosts: QueueHosts,
}

/// The code hosts the queue serves: the ones whose token is set (start-up decides).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueHosts {
    pub github: bool,
    pub gitlab: bool,
}

impl MergeQueue {
    pub fn new(log: EventLog, refresher: Refresher, refreshes: bool, hosts: QueueHosts) -> Self {
        Self {
            log,
            refresher,
            refreshes,
            hosts,
        }
    }

    fn board(&self) -> &Board {
        &self.refresher.lander().board
    }

    /// The repositories whose pull requests the queue lands: `land = "auto"`, on a host it serves.
    fn repositories(&self) -> Vec<RepoName> {
        let lander = self.refresher.lander();
        self.board()
            .config()
            .land
            .iter()
            .filter(|(_, rules)| rules.mode == LandMode::Auto)
            .filter_map(|(repo, _)| repo.parse::<RepoName>().ok())
            .filter(|repo| {
                let source = lander.sources.source(repo);
                (self.hosts.github && source.on_github())
                    || (self.hosts.gitlab && source.on_gitlab())
            })
            .collect()
    }

    /// The key of the merge of `task` at `sha` on `repo`'s host.
    fn merge_key(&self, repo: &RepoName, task: TaskId, sha: &CommitSha) -> String {
        if self.refresher.lander().sources.source(repo).on_gitlab() {
            gitlab_merge_key(task, sha)
        } else {
            github_merge_key(task, sha)
        }
    }

    /// One pass over every queued repository (see the module doc).
    pub async fn tick(&self) -> anyhow::Result<QueueProgress> {
        let mut progress = QueueProgress::default();
        for repo in self.repositories() {
            self.advance(&repo, &mut progress)
                .await
                .with_context(|| format!("the merge queue of {repo}"))?;
        }
        Ok(progress)
    }

    /// Moves `repo`'s queue on by at most one step.
    async fn advance(&self, repo: &RepoName, progress: &mut QueueProgress) -> anyhow::Result<()> {
        let filter = TaskFilter {
            column: Some(Column::InReview),
            repo: Some(repo.as_str().to_owned()),
            ..TaskFilter::default()
        };
        let mut rows = task_rows::list(self.log.store(), &filter)
            .await
            .with_context(|| format!("listing {repo}'s tasks in review"))?;
        rows.sort_by_key(|row| row.id);
        let rules = self.board().config().land_for(repo);
        let mut ready = Vec::new();
        for row in rows {
            let Some(loaded) = self.board().load(row.id).await? else {
                continue;
            };
            let task = loaded.task;
            // The read model may lag the log: what counts is the task as its events say now.
            if task.column() != Column::InReview || task.needs_human().is_some() {
                continue;
            }
            let Readiness::Ready { sha, number } = landing::readiness(&task, &rules) else {
                continue;
            };
            let merge = self.merge_outcome(repo, task.id(), &sha).await?;
            if task.landing().queued() {
                match merge {
                    Merge::Pending => {
                        progress
                            .in_flight
                            .insert(repo.as_str().to_owned(), task.id());
                        return Ok(());
                    }
                    Merge::Unmerged { state } => {
                        return self.unmerged(&task, &sha, number, &state, progress).await;
                    }
                    Merge::Failed => {}
                }
            }
            if merge == Merge::Pending && self.dependencies_done(&task).await? {
                ready.push((task, sha, number));
            }
        }
        let Some((task, sha, number)) = ready.into_iter().next() else {
            return Ok(());
        };
        let id = task.id();
        if self.refreshes && rules.refresh != RefreshMode::Off && self.refresher.refreshes(&task) {
            let mut refreshing = RefreshProgress::default();
            // Not a base push's time: a restart between this refresh's push and its record finds the branch at
            // the commit its recorded intent named (`refresh.pushing`) and records that, whatever the new stamp.
            let stamp = Utc::now().timestamp();
            match self
                .refresher
                .refresh_counted(id, stamp, &mut refreshing)
                .await?
            {
                Ended::Current => {}
                // Its new head is not chosen yet (pushed now, or once the repository's check passes): wait.
                Ended::Refreshed | Ended::Checking => {
                    progress.refreshed += 1;
                    return Ok(());
                }
                Ended::Conflicted | Ended::Moved | Ended::Gone | Ended::Missing => {
                    progress.stopped += 1;
                    return Ok(());
                }
                Ended::Skipped => return Ok(()),
            }
        }
        let command = Command::QueueMerge { sha, number };
        match self.board().execute(id, &command, ACTOR).await {
            Ok(outcome) => {
                if !outcome.appended.is_empty() {
                    tracing::info!(task = %id, "merge queued");
                    progress.queued += 1;
                }
                progress.in_flight.insert(repo.as_str().to_owned(), id);
                Ok(())
            }
            // It moved on meanwhile (a new push, a flag, a merge): the next tick looks again.
            Err(BoardError::Refused(refused)) => {
                tracing::info!(task = %id, %refused, "merge not queued");
                Ok(())
            }
            Err(error) => Err(error).with_context(|| format!("queueing {id}'s merge")),
        }
    }

    /// What became of the merge of `task` at `sha`, from its effect's stream.
    async fn merge_outcome(
        &self,
        repo: &RepoName,
        task: TaskId,
        sha: &CommitSha,
    ) -> anyhow::Result<Merge> {
        let stream = crate::domain::effect::stream(&self.merge_key(repo, task, sha));
        let events = self
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
                    _ => Merge::Pending,
                }
            }
            _ => Merge::Pending,
        })
    }

    /// The host refused the queued merge of `task` at `sha` because the pull request is `state` (`behind` its
    /// base or `dirty`: conflicting with it; on GitLab `need_rebase`, `conflict`): the base moved after the queue's
    /// refresh. It is brought up to date now
    /// (refreshed, its checks run again and the queue chooses its new head; a conflict goes to an agent). A
    /// repository that does not refresh, or a branch that already holds the base (GitHub and the remote disagree),
    /// is a person's: the task is flagged saying so. Either way it no longer holds the base.
    async fn unmerged(
        &self,
        task: &Task,
        sha: &CommitSha,
        number: u64,
        state: &str,
        progress: &mut QueueProgress,
    ) -> anyhow::Result<()> {
        let id = task.id();
        let mut refreshing = RefreshProgress::default();
        let why = if !self.refreshes
            || self.board().config().land_for(task.repo()).refresh == RefreshMode::Off
        {
            "pidevops does not refresh this repository's pull requests (refresh = \"off\", or no workspaces): \
             bring the branch up to date, then merge it"
        } else {
            let stamp = Utc::now().timestamp();
            match self
                .refresher
                .refresh_counted(id, stamp, &mut refreshing)
                .await?
            {
                Ended::Refreshed | Ended::Checking => {
                    progress.refreshed += 1;
                    return Ok(());
                }
                Ended::Conflicted | Ended::Moved | Ended::Gone | Ended::Missing => {
                    progress.stopped += 1;
                    return Ok(());
                }
                Ended::Skipped => {
                    "pidevops does not refresh this pull request on its own: bring the branch up to date, then \
                     merge it"
                }
                Ended::Current => {
                    "yet its branch already holds the base pidevops fetched: the host and the remote disagree, \
                     look at the pull request"
                }
            }
        };
        progress.stopped += 1;
        let what = if self
            .refresher
            .lander()
            .sources
            .source(task.repo())
            .on_gitlab()
        {
            format!("GitLab refused to merge merge request !{number}")
        } else {
            format!("GitHub refused to merge pull request #{number}")
        };
        let why = format!("{what} at {}: it finds it {state}; {why}", sha.short());
        self.refresher.flag(id, &why, &mut refreshing).await
    }

    /// Whether every task a plan's item depends on is done (it lands after them).
    async fn dependencies_done(&self, task: &Task) -> anyhow::Result<bool> {
        for dependency in task.depends_on() {
            let done = self
                .board()
                .load(*dependency)
                .await?
                .is_some_and(|loaded| loaded.task.column() == Column::Done);
            if !done {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
