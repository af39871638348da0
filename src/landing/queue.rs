//! The `merge_queue` loop: with `land = "auto"` on GitHub or GitLab, pidevops's pull requests (merge requests) on
//! a base land one at a time, each on top of the latest base. A merge decided by one pull request's facts alone
//! would land code nobody tested together: five plan items ready at once, merged at once, each passing on a main
//! that no longer exists.
//!
//! Each tick, for each repository with `land = "auto"` on a host the loop serves (GitHub with `GITHUB_TOKEN`,
//! GitLab with `GITLAB_TOKEN`), over its tasks in review:
//! - a merge in flight (a task whose head the queue chose, `task.merge_queued`, still in review, not flagged, its
//!   merge not failed for good, its effect not yet answered or merged directly) holds the base: nothing else is
//!   chosen until it is merged (and completed), fails, or its effect says the host queued it;
//! - a merge in the host's own queue (the effect's `produced.kind = "enqueued"`) does not hold the base: the host
//!   tests it on top of those ahead of it and merges them in order, so the next ready task is chosen meanwhile,
//!   and a base may have many there (`/health`: `in_host_queue`);
//! - otherwise the first ready task ([`landing::readiness`]: checks and approvals in on its head; a plan's item
//!   only once the items it depends on are done, so it waits for their merge; in task order) is brought up to
//!   date with the base by the `refresh` loop's own refresh: already current, it is chosen (`Command::QueueMerge`
//!   → `task.merge_queued`, which `effects:github` or `effects:gitlab` turns into the merge of that head, once);
//!   refreshed, its landing facts start over and it is chosen once its checks pass on the new head; a conflict
//!   (handed to an agent, `task.conflict_found`) or someone else's push (flagged) takes it out of the running,
//!   and the next one is looked at on the next tick. On a base with a merge in the host's queue it is chosen
//!   without that refresh: the host's queue tests it on top of the base and those ahead of it.
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
//! effect instead (`providers/github/client/queue.rs`); a GitLab project that runs merge trains gets the chosen
//! merge request put on its train (`providers/gitlab/client/trains.rs`). Which kind of base it is, the effect finds
//! out on each merge, so one chosen merge holds the base until its effect answers: enqueued, the next is chosen
//! (one a tick), each fed to the host's queue without waiting for the one before it to merge; merged directly (the
//! queue's rule was removed), it holds the base as any merge does. The `refresh` loop leaves a merge in the host's
//! queue alone (a push would take it out); GitHub's `dequeued` flags its task, which lets it go.
//!
//! The queue is kept in the log: what is in flight is read from the tasks' events each tick, so a restart, or a
//! second replica taking the loop over, continues where it was; the merge is an effect keyed by task and head, so
//! it is made once. A repository with `refresh = "off"` is queued without a refresh (GitHub refuses a merge that
//! conflicts, which flags the task). A combined plan's pull request is refreshed as one, like a task's.

use std::collections::BTreeMap;

use anyhow::Context;
use chrono::Utc;
use serde::Serialize;

use super::merges::{merge_outcome, Merge};
use super::refresh::{Ended, RefreshProgress, Refresher};
use crate::board::{Board, BoardError};
use crate::eventlog::EventLog;
use crate::projectors::tasks::{self as task_rows, TaskFilter};
use crate::tasks::{
    landing, Column, Command, CommitSha, LandMode, Readiness, RefreshMode, RepoName, Task, TaskId,
};

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
    /// Each base with a merge in flight that holds it (chosen, not yet in the host's queue nor merged and
    /// completed): the task whose merge it is.
    pub in_flight: BTreeMap<String, TaskId>,
    /// Each base with merges in the host's own queue (GitHub's merge queue, a GitLab merge train): how many.
    pub in_host_queue: BTreeMap<String, u64>,
}

/// What holds a base this tick: a merge being made, or one the host refused as behind or conflicting.
enum Held {
    Merging(TaskId),
    Unmerged {
        task: Box<Task>,
        sha: CommitSha,
        number: u64,
        state: String,
    },
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
        let lander = self.refresher.lander();
        let (mut held, mut next, mut in_host_queue) = (None, None, 0_u64);
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
            let merge = merge_outcome(lander, repo, task.id(), &sha).await?;
            if task.landing().queued() {
                match merge {
                    Merge::Pending => {
                        held.get_or_insert(Held::Merging(task.id()));
                        continue;
                    }
                    Merge::Enqueued => {
                        in_host_queue += 1;
                        continue;
                    }
                    Merge::Unmerged { state } => {
                        held.get_or_insert(Held::Unmerged {
                            task: Box::new(task),
                            sha,
                            number,
                            state,
                        });
                        continue;
                    }
                    Merge::Failed => {}
                }
            }
            let first = held.is_none() && next.is_none();
            if first && merge == Merge::Pending && self.dependencies_done(&task).await? {
                next = Some((task, sha, number));
            }
        }
        if in_host_queue > 0 {
            progress
                .in_host_queue
                .insert(repo.as_str().to_owned(), in_host_queue);
        }
        match held {
            Some(Held::Merging(id)) => {
                progress.in_flight.insert(repo.as_str().to_owned(), id);
                return Ok(());
            }
            Some(Held::Unmerged {
                task,
                sha,
                number,
                state,
            }) => return self.unmerged(&task, &sha, number, &state, progress).await,
            None => {}
        }
        let Some((task, sha, number)) = next else {
            return Ok(());
        };
        // A base whose merges went into the host's own queue is known to use it: the host tests each one on top
        // of those ahead of it, which a refresh onto today's base would only repeat (and push it out of step).
        let refresh = in_host_queue == 0
            && self.refreshes
            && rules.refresh != RefreshMode::Off
            && self.refresher.refreshes(&task);
        if refresh && !self.current(&task, progress).await? {
            return Ok(());
        }
        self.choose(repo, task.id(), sha, number, progress).await
    }

    /// Brings ready `task` up to date with its base first: whether it is current (chosen now); otherwise its
    /// new head is not chosen yet (pushed now, or once the repository's check passes), or it is out of the
    /// running (a conflict, someone else's push), and the next tick looks again.
    async fn current(&self, task: &Task, progress: &mut QueueProgress) -> anyhow::Result<bool> {
        let mut refreshing = RefreshProgress::default();
        // Not a base push's time: a restart between this refresh's push and its record finds the branch at the
        // commit its recorded intent named (`refresh.pushing`) and records that, whatever the new stamp.
        let stamp = Utc::now().timestamp();
        match self
            .refresher
            .refresh_counted(task.id(), stamp, &mut refreshing)
            .await?
        {
            Ended::Current => Ok(true),
            Ended::Refreshed | Ended::Checking => {
                progress.refreshed += 1;
                Ok(false)
            }
            Ended::Conflicted | Ended::Moved | Ended::Gone | Ended::Missing => {
                progress.stopped += 1;
                Ok(false)
            }
            Ended::Skipped => Ok(false),
        }
    }

    /// Chooses `id`'s merge at `sha` (`Command::QueueMerge`): its effect makes it, once.
    async fn choose(
        &self,
        repo: &RepoName,
        id: TaskId,
        sha: CommitSha,
        number: u64,
        progress: &mut QueueProgress,
    ) -> anyhow::Result<()> {
        let command = Command::QueueMerge { sha, number };
        match self.board().execute(id, &command, ACTOR).await {
            Ok(outcome) => {
                if !outcome.appended.is_empty() {
                    tracing::info!(task = %id, "merge queued");
                    progress.queued += 1;
                }
                // Until its effect answers, it holds the base: that answer says whether the host queues it.
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
