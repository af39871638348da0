//! The gc tick: run directories past the TTL whose runs are over (or unknown) are removed.

use std::collections::HashSet;

use anyhow::Context;

use super::Dispatcher;
use crate::dispatch::workspace::GcReport;
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
}
