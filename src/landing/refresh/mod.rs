//! The `refresh` loop: when a repository's base branch moves, pidevops's review requests on it (GitHub pull
//! requests, GitLab merge requests) are brought up to date by pidevops's own git (`[repos."o/n"] refresh =
//! "rebase" | "merge" | "off"`), so they stay mergeable and their checks run again on what would land.
//!
//! A singleton reads the log after its checkpoint. A push to a repository's configured base branch, GitHub's
//! `push` for a GitHub repository or GitLab's Push Hook for a GitLab-hosted project (`base_push.rs`: only the
//! configured repository on its own host, only its base; the webhook is only the signal: what the base holds is
//! fetched from the configured remote, never taken from the payload) refreshes each of its tasks in review,
//! one at a time (`dispatch::workspace::refresh`, the same git for both hosts):
//! - current already: nothing;
//! - brought up to date: the new commit pushed with a lease on the commit pidevops recorded, then
//!   `task.refreshed`, which starts the landing facts over (auto-land waits for the checks on the new head: on
//!   GitLab, the pipeline of the new head, and `gitlab:merge:<task>:<sha>` names that head);
//! - brought up to date on a repository with a `check`: not pushed here. The refresh is held for its check
//!   (`Command::CheckRefresh`, `tasks::domain::refresh_check`): the dispatcher runs the repository's setup and
//!   check on it, contained and without an agent, and pushes it leased on the recorded commit only once the check
//!   passed (then `task.refreshed`); a failing check pushes nothing and goes to an agent with its output (a
//!   person when it went to one already);
//! - a conflict: handed to an agent (`Command::ResolveConflict`: an attempt of its own kind that merges the base
//!   and resolves the markers, `tasks::domain::conflict`); the same conflict again, or one the agent could not
//!   resolve, flags a person with the files named;
//! - a branch someone else pushed to, a commit gone: the task is flagged for a person with what happened;
//!   nothing is pushed.
//!
//! A base push whose webhook was lost is caught by the host's poller (`github_poller`, `gitlab_poller`): it reads
//! the base branch's head of each repository with a task in review and, for a head this loop has not handled,
//! appends a push shaped like the webhook's (`github.push` / `gitlab.push`, `poll:push:<repo>:<base>:<sha>`). Once
//! a base push is handled, `refresh.base_handled` is recorded under a key naming its head
//! (`refresh-base:<repo>:<base>:<sha>`): a second report of the same head (the webhook and the poller both, in
//! either order) refreshes nothing again.
//!
//! The pollers also read what each host says of each review request: a pull request GitHub finds `behind` its base
//! or `dirty` (`mergeable_state`), a merge request GitLab finds `need_rebase` or `conflict`
//! (`detailed_merge_status`, recorded as `behind` / `dirty`), is appended as `refresh.due` for its task, which this
//! loop refreshes alone (a conflict then goes to an agent, as above); one it finds current already is recorded as
//! `refresh.current` (`refresh-current:<task>:<head>:<base>`), which clears the board's `behind` mark. A repository
//! whose `refresh` is `"off"` is never refreshed: its dues only mark the board (a person acts), and the pollers
//! record `refresh.current` themselves once the host finds a marked one up to date again.
//!
//! Exactly once: before its push, a refresh records what it is about to push (`refresh.pushing` in the stream
//! `refresh:<task>`); the commit it makes is the same when made again (dated by the base push). A restart
//! between the push and `task.refreshed` handles the same base push again and finds the branch at the commit it
//! recorded it would push: that is recorded, nothing is pushed twice.
//!
//! A plan whose items land as one pull request (`[plans] land = "combined"`) is refreshed as one: its combined
//! branch `pidevops/<plan>`, from the commit of its current combination (or its last refresh), the same way but
//! always by merging the base in (its merges of the items are kept); its items are never refreshed on their own. A conflict there flags the plan with the files named (no agent works
//! on a combination). A new combination (an item's new attempt) starts from the base again.

use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::base_push::{self, base_push, BasePush};
pub use super::base_push::{base_key, refreshed_base};
use super::merges::in_host_queue;
use super::Lander;

mod commands;
mod marks;
use crate::dispatch::workspace::{RefreshRequest, RefreshResult, WorkspaceError, Workspaces};
use crate::domain::{EventType, NewEvent, Source};
use crate::eventlog::{EventLog, StoredEvent};
use crate::loops::follow::{AsStored, Follow, Follower, Next, Pick, Wanted};
use crate::projectors::tasks::{self as task_rows, TaskFilter};
use crate::tasks::{
    Column, CommitSha, Conflict, RefreshCheck, RefreshMode, RepoName, Task, TaskId,
};
pub use commands::Current;

/// The loop's name and its checkpoint's.
pub const REFRESH: &str = "refresh";
/// Who the loop's commands are from.
const ACTOR: &str = "refresh";
/// What a refresh is about to push, recorded before the push.
pub const PUSHING: &str = "refresh.pushing";
/// A base head handled: its webhook's or the poller's push refreshed every task in review.
pub const BASE_HANDLED: &str = "refresh.base_handled";
/// A task's review request its host finds behind its base or conflicting (GitHub's `behind` / `dirty`, GitLab's
/// `need_rebase` / `conflict`), read by the host's poller: the task is refreshed as on a base push.
pub const DUE: &str = crate::projectors::tasks::REFRESH_DUE;
/// A task a `refresh.due` asked to refresh holds its base already: the host's word was stale.
pub const CURRENT: &str = crate::projectors::tasks::REFRESH_CURRENT;
/// The longest one refresh may take (fetches, the rebase or merge, the push).
const REFRESH_TIMEOUT: Duration = Duration::from_secs(45);

/// The stream of task `id`'s refresh intents.
pub fn stream(id: TaskId) -> String {
    format!("refresh:{id}")
}

/// `refresh.base_handled`: the push of `head` to `repo`'s `base` was handled (event `position`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseHandled {
    pub repo: RepoName,
    pub base: String,
    pub head: String,
    pub position: i64,
}

/// `refresh.due`: the host said review request `number` of `task` (at `head`; a pull request's number, a merge
/// request's iid) is `state`: `behind` (GitLab's `need_rebase`) or `dirty` (GitLab's `conflict`). Keyed
/// `refresh-due:<task>:<head>:<state>` (once per head and state).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Due {
    pub task: TaskId,
    pub repo: RepoName,
    pub number: u64,
    pub head: String,
    pub state: String,
}

impl Due {
    /// `refresh-due:<task>:<head>:<state>`; the tasks projector reads the board's "behind" mark from it
    /// (`projectors::tasks::due_key_parts`).
    pub fn key(&self) -> String {
        format!(
            "refresh-due:{}:{}:{}",
            self.task,
            self.head.to_ascii_lowercase(),
            self.state
        )
    }

    /// The `refresh.due` event a host's poller appends, keyed [`Due::key`], naming the poller in its meta.
    pub fn event(&self, poller: &str) -> anyhow::Result<NewEvent> {
        let mut event = NewEvent::new(
            Source::Pidevops,
            EventType::from_stored(DUE.to_owned()),
            self.key(),
            "application/json",
            bytes::Bytes::from(serde_json::to_vec(self).context("encoding refresh.due")?),
        );
        event
            .meta
            .insert("poller".to_owned(), serde_json::Value::from(poller));
        Ok(event)
    }
}

/// `refresh.pushing`: the refresh of `task` from `from` onto `base` is about to push `to`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pushing {
    pub at: DateTime<Utc>,
    pub task: TaskId,
    pub from: CommitSha,
    pub to: CommitSha,
    pub base: CommitSha,
    pub strategy: RefreshMode,
}

/// What one tick did, for `/health`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RefreshProgress {
    pub position: i64,
    /// Branches brought up to date and recorded.
    pub refreshed: u64,
    /// Branches that were current already.
    pub current: u64,
    /// Tasks flagged: a conflict not for an agent, someone else's push, a commit gone.
    pub flagged: u64,
    /// Base pushes of a head handled already (its webhook and the poller both told of it): nothing done again.
    pub repeated: u64,
    /// Conflicts handed to an agent (a conflict attempt each).
    pub resolving: u64,
    /// Refreshes held for the repository's check (a refresh check each).
    pub checking: u64,
    #[serde(skip)]
    pub out_of_time: bool,
}

/// How one task's refresh ended (the metric's `outcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ended {
    Refreshed,
    /// Brought up to date and held for the repository's check: pushed (or not) by the refresh check's run.
    Checking,
    Current,
    Conflicted,
    Moved,
    Gone,
    Missing,
    /// Not a task to refresh now (not in review, a plan, waiting for a person, landed by pidevops's git, its
    /// remote needing a token this process lacks).
    Skipped,
}

impl Ended {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Ended::Refreshed => "refreshed",
            Ended::Checking => "checking",
            Ended::Current => "current",
            Ended::Conflicted => "conflicted",
            Ended::Moved => "moved",
            Ended::Gone => "gone",
            Ended::Missing => "missing",
            Ended::Skipped => "skipped",
        }
    }
}

/// Whether an event is the poller's `refresh.due` (pidevops's own: no webhook can write one).
fn is_due(source: &str, event_type: &str) -> bool {
    source == Source::Pidevops.as_str() && event_type == DUE
}

/// The `refresh` loop (see the module doc).
#[derive(Clone, Debug)]
pub struct Refresher {
    log: EventLog,
    lander: Lander,
    /// `[plans] land = "combined"`: a plan's items land in the plan's pull request, not refreshed alone.
    combined_plans: bool,
    follow: Follow<StoredEvent>,
}

impl Refresher {
    pub fn new(log: EventLog, lander: Lander, combined_plans: bool) -> Self {
        Self {
            log,
            lander,
            combined_plans,
            follow: Follow::default(),
        }
    }

    pub(super) fn lander(&self) -> &Lander {
        &self.lander
    }

    /// Handles what was committed since the checkpoint (see [`crate::loops::follow`]).
    pub async fn tick(&self) -> anyhow::Result<RefreshProgress> {
        let followed = self.follow.tick(self.log.store(), self).await?;
        Ok(RefreshProgress {
            position: followed.position,
            out_of_time: followed.out_of_time,
            ..followed.tally
        })
    }

    async fn handle_event(
        &self,
        event: &StoredEvent,
        progress: &mut RefreshProgress,
    ) -> anyhow::Result<()> {
        if is_due(&event.source, &event.event_type) {
            // Only the poller writes it, from what GitHub said of the task's pull request: the task's own head
            // and base are what the refresh reads.
            let due: Due = serde_json::from_slice(&event.body).context("reading refresh.due")?;
            let ended = self
                .refresh(due.task, event.recorded_at.timestamp(), true, progress)
                .await?;
            metrics::counter!("pidevops_refreshes_total", "outcome" => ended.as_str()).increment(1);
            return Ok(());
        }
        let Some(BasePush { repo, base, head }) = base_push(
            &event.source,
            &event.event_type,
            &event.body,
            self.lander.board.config(),
            &self.lander.sources,
        ) else {
            return Ok(());
        };
        let key = head.as_deref().map(|head| base_key(&repo, &base, head));
        if let Some(key) = &key {
            let handled = self
                .log
                .store()
                .find_by_key(Source::Pidevops, key)
                .await
                .with_context(|| format!("reading {key}"))?;
            if handled.is_some() {
                progress.repeated += 1;
                return Ok(());
            }
        }
        let filter = TaskFilter {
            column: Some(Column::InReview),
            repo: Some(repo.as_str().to_owned()),
            ..TaskFilter::default()
        };
        let rows = task_rows::list(self.log.store(), &filter)
            .await
            .with_context(|| format!("listing {repo}'s tasks in review"))?;
        // The push's own time dates the commits a refresh makes (the same again after a restart).
        let stamp = event.recorded_at.timestamp();
        let ids: Vec<TaskId> = rows.iter().map(|row| row.id).collect();
        // Marked on the board first, all at once: each waits its turn below, possibly behind.
        let marked = self
            .mark_base_moved(&ids, &repo, &base, event.position)
            .await?;
        for id in ids {
            let ended = self
                .refresh(id, stamp, marked.contains(&id), progress)
                .await?;
            metrics::counter!("pidevops_refreshes_total", "outcome" => ended.as_str()).increment(1);
        }
        let lag = (Utc::now() - event.recorded_at)
            .to_std()
            .unwrap_or_default();
        metrics::histogram!("pidevops_refresh_catch_up_seconds").record(lag.as_secs_f64());
        if let (Some(key), Some(head)) = (key, head) {
            self.handled(key, repo, base, head, event.position).await?;
        }
        Ok(())
    }

    /// Records that the push of `head` to `repo`'s `base` was handled (after its refreshes: a restart before this
    /// handles the push again, which finds each branch current or its push recorded).
    async fn handled(
        &self,
        key: String,
        repo: RepoName,
        base: String,
        head: String,
        position: i64,
    ) -> anyhow::Result<()> {
        let body = BaseHandled {
            repo,
            base,
            head,
            position,
        };
        let new = NewEvent::new(
            Source::Pidevops,
            EventType::from_stored(BASE_HANDLED.to_owned()),
            key.clone(),
            "application/json",
            bytes::Bytes::from(serde_json::to_vec(&body)?),
        );
        self.log
            .append(new)
            .await
            .with_context(|| format!("recording {key}"))?;
        Ok(())
    }

    /// Refreshes task `id` now (see [`Self::refresh`]), counted in `pidevops_refreshes_total`; the merge queue's
    /// way in, before it merges a task whose head may be behind its base.
    pub(super) async fn refresh_counted(
        &self,
        id: TaskId,
        stamp: i64,
        progress: &mut RefreshProgress,
    ) -> anyhow::Result<Ended> {
        let ended = self.refresh(id, stamp, false, progress).await?;
        metrics::counter!("pidevops_refreshes_total", "outcome" => ended.as_str()).increment(1);
        Ok(ended)
    }

    /// Refreshes task `id` (see the module doc): once, and once more when a refresh cut off by a restart is
    /// found pushed and recorded first. `marked`: asked by a `refresh.due`, or marked `refresh.base_moved` (a
    /// branch current already is recorded, which clears the board's mark).
    async fn refresh(
        &self,
        id: TaskId,
        stamp: i64,
        marked: bool,
        progress: &mut RefreshProgress,
    ) -> anyhow::Result<Ended> {
        for _ in 0..2 {
            let board = &self.lander.board;
            let Some(loaded) = board.load(id).await? else {
                return Ok(Ended::Skipped);
            };
            let task = &loaded.task;
            // `refresh = "off"`: its dues only mark the board. In the host's own queue: the host tests it on top
            // of the base already, and a push would take it out of that queue.
            let off = board.config().land_for(task.repo()).refresh == RefreshMode::Off;
            if off || !self.refreshes(task) || in_host_queue(&self.lander, task).await? {
                return Ok(Ended::Skipped);
            }
            let Some(commit) = self.head(task).await? else {
                return Ok(Ended::Skipped);
            };
            let source = self.lander.sources.source(task.repo());
            let (mode, hold) = self.how(task);
            let request = RefreshRequest {
                repo: task.repo().clone(),
                task: id,
                branch: id.branch(),
                commit: commit.as_str().to_owned(),
                mode,
                stamp,
                hold,
            };
            let workspaces = Workspaces::new(&self.lander.root, self.lander.credentials.clone())
                .context("the workspace root")?;
            let intent = |to: String, base: String| self.intend(id, &commit, to, base, mode);
            let result = match tokio::time::timeout(
                REFRESH_TIMEOUT,
                workspaces.refresh(&request, &source, intent),
            )
            .await
            .with_context(|| format!("refreshing {id} took over {REFRESH_TIMEOUT:?}"))?
            {
                Ok(result) => result,
                // Its remote needs a token this process was not given (the loop runs with one host's token and
                // not the other's): the refresh could only fail, so it is not held on this push.
                Err(WorkspaceError::NoToken { variable, .. }) => {
                    tracing::warn!(task = %id, variable, "not refreshed: its remote needs a token that is not set");
                    return Ok(Ended::Skipped);
                }
                Err(error) => return Err(error).with_context(|| format!("refreshing {id}")),
            };
            match result {
                RefreshResult::Current { base } => {
                    if marked {
                        self.current(id, &commit, &base).await?;
                    }
                    progress.current += 1;
                    return Ok(Ended::Current);
                }
                RefreshResult::Refreshed { base, to, pushed } => {
                    if pushed {
                        tracing::info!(task = %id, from = commit.short(), to = &to[..7], "branch refreshed");
                    }
                    self.record(id, &commit, &to, &base, mode, progress).await?;
                    return Ok(Ended::Refreshed);
                }
                RefreshResult::Held { base, to } => {
                    let check = RefreshCheck {
                        from: commit.clone(),
                        to: CommitSha::new(&to).context("git named the refreshed commit")?,
                        base: CommitSha::new(&base).context("git named the base")?,
                        strategy: mode,
                        stamp,
                    };
                    self.hold(id, check, progress).await?;
                    return Ok(Ended::Checking);
                }
                RefreshResult::Moved { found } => {
                    // Ours, pushed before a restart cut off its record: recorded now, then refreshed again.
                    if let Some(pushing) = self.intended(id, &commit, &found).await? {
                        self.record(
                            id,
                            &pushing.from,
                            pushing.to.as_str(),
                            pushing.base.as_str(),
                            pushing.strategy,
                            progress,
                        )
                        .await?;
                        continue;
                    }
                    let why = format!(
                        "someone else pushed to {} (it is at {}, not at {} that pidevops pushed); pidevops did not \
                         push over it, so its pull request is not brought up to date with the base. Send it back \
                         (retry), or bring the branch up to date by hand",
                        id.branch(),
                        short(&found),
                        commit.short()
                    );
                    self.flag(id, &why, progress).await?;
                    return Ok(Ended::Moved);
                }
                RefreshResult::Conflict {
                    base, files, total, ..
                } if task.is_plan() => {
                    // No agent works on a plan's combination: its items' attempts made it.
                    let mut named = files.join(", ");
                    if total > files.len() {
                        named.push_str(&format!(" and {} more", total - files.len()));
                    }
                    let why = format!(
                        "the base moved to {}, and {}'s combined branch {} no longer merges with it, in {named}; \
                         nothing was pushed. Send the item that touches them back (retry) with what to change, or \
                         bring the branch up to date by hand",
                        short(&base),
                        id,
                        id.branch()
                    );
                    self.flag(id, &why, progress).await?;
                    return Ok(Ended::Conflicted);
                }
                RefreshResult::Conflict {
                    base,
                    files,
                    total,
                    hunks,
                } => {
                    let conflict = Conflict::new(
                        commit.clone(),
                        CommitSha::new(&base).context("git named the base")?,
                        &files,
                        total,
                        &hunks,
                    );
                    self.hand_over(id, conflict, progress).await?;
                    return Ok(Ended::Conflicted);
                }
                RefreshResult::Gone => {
                    let why = format!(
                        "the base moved, and {}'s branch {} is gone from the remote (deleted by someone); pidevops \
                         did not push it again. Send it back (retry) for a new attempt, or cancel it",
                        id,
                        id.branch()
                    );
                    self.flag(id, &why, progress).await?;
                    return Ok(Ended::Gone);
                }
                RefreshResult::Missing => {
                    let why = format!(
                        "the base moved, and the commit pidevops pushed for {} ({}) is neither on its branch nor \
                         on the remote; nothing was pushed. Send it back (retry) for a new attempt",
                        id,
                        commit.short()
                    );
                    self.flag(id, &why, progress).await?;
                    return Ok(Ended::Missing);
                }
            }
        }
        Ok(Ended::Refreshed)
    }

    /// Whether `task` is one this loop refreshes now.
    /// How `task` is refreshed, and whether the refresh is held for the repository's check.
    fn how(&self, task: &Task) -> (RefreshMode, bool) {
        let board = &self.lander.board;
        let mode = match board.config().land_for(task.repo()).refresh {
            // A combination's merges of its items are kept: the base is merged into it, never rebased under it.
            RefreshMode::Rebase if task.is_plan() => RefreshMode::Merge,
            mode => mode,
        };
        // The repository's check runs on the refresh before it is pushed: the dispatcher's, not this loop's. Not
        // a plan's combination (no attempt runs on a plan; its combining ran no check either): its pull
        // request's CI on the new head is what auto-land waits for.
        let hold = !task.is_plan()
            && self
                .lander
                .sources
                .environment(task.repo())
                .is_some_and(|env| env.check.is_some());
        (mode, hold)
    }

    /// A plan is refreshed as one: its combined pull request, while its combination is current (`land =
    /// "combined"`); its items, then, never on their own.
    pub(super) fn refreshes(&self, task: &Task) -> bool {
        task.column() == Column::InReview
            && task.needs_human().is_none()
            && (!task.is_plan() || (self.combined_plans && task.combined_head().is_some()))
            && !(self.combined_plans && task.parent().is_some())
            && self.lander.lands_by_review(task)
    }

    /// The commit pidevops last pushed for the review in progress: its last refresh's, else the reviewed run's
    /// (a plan's: its current combination's).
    async fn head(&self, task: &Task) -> anyhow::Result<Option<CommitSha>> {
        if task.is_plan() {
            return Ok(task.combined_head().cloned());
        }
        if let Some(refreshed) = task.refreshed() {
            return Ok(Some(refreshed.clone()));
        }
        let Some(run) = task.reviewed_run() else {
            return Ok(None);
        };
        self.lander.recorded_commit(run).await
    }

    /// Records that the refresh of `id` from `from` onto `base` is about to push `to` (before the push).
    async fn intend(
        &self,
        id: TaskId,
        from: &CommitSha,
        to: String,
        base: String,
        strategy: RefreshMode,
    ) -> Result<(), String> {
        let pushing = Pushing {
            at: Utc::now(),
            task: id,
            from: from.clone(),
            to: CommitSha::new(&to).map_err(|e| e.to_string())?,
            base: CommitSha::new(&base).map_err(|e| e.to_string())?,
            strategy,
        };
        let body = serde_json::to_vec(&pushing).map_err(|e| e.to_string())?;
        let stream = stream(id);
        let new = NewEvent::new(
            Source::Pidevops,
            EventType::from_stored(PUSHING.to_owned()),
            format!("{stream}:{from}:{to}"),
            "application/json",
            bytes::Bytes::from(body),
        );
        self.log
            .append_at_end(&stream, new)
            .await
            .map(|_| ())
            .map_err(|error| error.to_string())
    }

    /// The intent recorded for a refresh of `id` from `from` that pushed `found`, if any.
    async fn intended(
        &self,
        id: TaskId,
        from: &CommitSha,
        found: &str,
    ) -> anyhow::Result<Option<Pushing>> {
        let recorded = self
            .log
            .store()
            .read_stream(&stream(id))
            .await
            .with_context(|| format!("reading {id}'s refreshes"))?;
        Ok(recorded.iter().rev().find_map(|event| {
            let pushing = serde_json::from_slice::<Pushing>(&event.body).ok()?;
            (pushing.from == *from && pushing.to.as_str().eq_ignore_ascii_case(found))
                .then_some(pushing)
        }))
    }
}

fn short(sha: &str) -> &str {
    sha.get(..7).unwrap_or(sha)
}

impl Follower for Refresher {
    type Prepare = AsStored;
    type Tally = RefreshProgress;

    fn checkpoint(&self) -> &str {
        REFRESH
    }

    fn prepare(&self) -> AsStored {
        AsStored
    }

    /// The bodies of `refresh.due` and of pushes ([`base_push::reads`]); no other is shipped.
    fn bodies(&self) -> Wanted {
        let pick: Pick = std::sync::Arc::new(|source, event_type| {
            is_due(source, event_type) || base_push::reads(source, event_type)
        });
        Wanted::Picked(pick)
    }

    async fn handle(
        &self,
        event: &StoredEvent,
        progress: &mut RefreshProgress,
    ) -> anyhow::Result<Next> {
        self.handle_event(event, progress)
            .await
            .with_context(|| format!("refresh: event {} ({})", event.position, event.event_type))?;
        Ok(Next::Done)
    }
}

#[cfg(test)]
mod due_tests {
    use super::*;

    #[test]
    fn the_board_reads_a_dues_task_head_and_state_from_its_key() {
        let due = Due {
            task: "T-9".parse().unwrap(),
            repo: "acme/app".parse().unwrap(),
            number: 4,
            head: "AB".repeat(20),
            state: "behind".to_owned(),
        };
        let key = due.key();
        let (task, head, state) = crate::projectors::tasks::due_key_parts(&key).unwrap();
        assert_eq!(
            (task, head, state),
            (due.task, "ab".repeat(20).as_str(), "behind")
        );
    }
}
