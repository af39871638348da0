//! The gc tick: run directories past the TTL whose runs are over (or unknown) are removed. And at once, a
//! stopped run's worktree.

use std::collections::HashSet;

use anyhow::Context;

use super::Dispatcher;
use crate::dispatch::workspace::{GcReport, Prepared};
use crate::projectors::runs::{self as run_rows, Which};
use crate::tasks::{RunId, TaskId};

impl Dispatcher {
    /// One gc tick: run directories older than the TTL whose runs are over (or unknown) are removed.
    pub async fn gc_tick(&self) -> anyhow::Result<GcReport> {
        let running: HashSet<String> = run_rows::query(self.store(), Which::Running)
            .await
            .context("listing running runs")?
            .into_iter()
            .map(|r| r.run_id)
            .collect();
        let local: HashSet<RunId> = self.local().running.values().map(|r| r.run).collect();
        let keep = move |_task: TaskId, run: RunId| {
            local.contains(&run) || running.contains(&run.to_string())
        };
        Ok(self
            .inner
            .workspaces
            .gc(self.inner.config.worktree_ttl, &keep)
            .await?)
    }

    /// An attempt is over with its worktree: offered for reuse, or, for a run stopped because its task was closed
    /// (cancelled: its ticket withdrawn, a person) or taken by another run, removed now. Gone from disk is what a
    /// cancelled task leaves; a removal that fails is left to the TTL.
    pub(super) async fn done_with_worktree(&self, prepared: &Prepared, stopped: bool) {
        if !stopped {
            self.inner.workspaces.finished(prepared);
            return;
        }
        if let Err(error) = self.inner.workspaces.discard(prepared).await {
            tracing::warn!(worktree = %prepared.dirs.worktree.display(), %error, "a stopped run's worktree was not removed");
        }
    }
}
