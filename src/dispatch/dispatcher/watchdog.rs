//! The watchdog tick: runs silent past the bound (or orphaned by this process's restart) are declared lost, outcomes
//! recorded but not applied to their task are applied, claims whose run never recorded a start are declared lost.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::Context;
use chrono::Utc;
use serde::Serialize;

use super::run_writer::{RunWriter, Written};
use super::{run_of, Dispatcher};
use crate::config::dispatch::DispatchConfig;
use crate::dispatch::runs::{FailureKind, RunEvent};
use crate::projectors::runs::{self as run_rows, RunRow, Which};
use crate::projectors::tasks::{self as task_rows, TaskFilter};
use crate::tasks::{Column, RunId, TaskId};

#[derive(Clone, Debug, Default, Serialize)]
pub struct WatchdogStatus {
    pub running: usize,
    pub declared_lost: usize,
    pub recovered: usize,
}

impl Dispatcher {
    /// One watchdog tick: runs silent for longer than the bound are declared lost (and their tasks retried);
    /// outcomes recorded but not yet applied to their task are applied; claims that never started are released.
    pub async fn watchdog_tick(&self) -> anyhow::Result<WatchdogStatus> {
        let store = self.store();
        let lost_after = chrono::Duration::from_std(self.inner.config.lost_after())?;
        let now = Utc::now();
        let mut status = WatchdogStatus::default();
        let running = run_rows::query(store, Which::Running)
            .await
            .context("listing running runs")?;
        // This process's runs, looked at after the read model: a run is in `local` before its start is
        // recorded, so every run of ours the read shows is in it (or ended since, which its stream's version
        // tells `declare_lost`). Looked at before the read, a run started in between was taken for an orphan
        // of a restart and declared lost 50 ms into its life.
        let local: HashSet<RunId> = self.local().running.values().map(|r| r.run).collect();
        status.running = running.len();
        for row in &running {
            let Ok(run) = row.run_id.parse::<uuid::Uuid>().map(RunId) else {
                continue;
            };
            if local.contains(&run) {
                continue;
            }
            // A run this very process was running before a restart is gone, whatever its last heartbeat says.
            let orphan = row.worker.as_deref() == Some(self.inner.worker.as_str());
            if orphan || now - row.last_seen_at > lost_after {
                let why = if orphan {
                    format!("{} restarted while running it", self.inner.worker)
                } else {
                    format!(
                        "no heartbeat since {} (worker {})",
                        row.last_seen_at.to_rfc3339(),
                        row.worker.as_deref().unwrap_or("unknown")
                    )
                };
                if self.declare_lost(row, run, why).await? {
                    status.declared_lost += 1;
                }
            }
        }
        let in_progress = task_rows::list(
            store,
            &TaskFilter {
                column: Some(Column::InProgress),
                ..TaskFilter::default()
            },
        )
        .await
        .context("listing tasks in progress")?;
        for task in in_progress {
            let Some(run) = run_of(&task) else { continue };
            if local.contains(&run) {
                continue;
            }
            let rows = run_rows::query(store, Which::Run(&run.to_string())).await?;
            match rows.first() {
                Some(row) if row.state != "running" => {
                    self.recover(run).await;
                    status.recovered += 1;
                }
                Some(_) => {}
                None if now - task.updated_at > lost_after => {
                    // Claimed, but its run never recorded a start: the claimer died in between.
                    let row = RunRow {
                        run_id: run.to_string(),
                        task_id: task.id.to_string(),
                        attempt: task.attempts,
                        state: "running".into(),
                        worker: None,
                        profile: None,
                        log_path: None,
                        started_at: None,
                        last_seen_at: task.updated_at,
                        ended_at: None,
                        failure: None,
                        detail: None,
                        branch: None,
                        commit_sha: None,
                        duration_s: None,
                        output_bytes: 0,
                        tail: None,
                        version: 0,
                        last_position: 0,
                    };
                    let why = format!(
                        "claimed at {} but never started",
                        task.updated_at.to_rfc3339()
                    );
                    if self.declare_lost(&row, run, why).await? {
                        status.declared_lost += 1;
                    }
                }
                None => {}
            }
        }
        Ok(status)
    }

    async fn declare_lost(&self, row: &RunRow, run: RunId, why: String) -> anyhow::Result<bool> {
        let task: TaskId = row.task_id.parse().context("a run row names a bad task")?;
        let mut writer = RunWriter::new(self.inner.log.clone(), run, task, row.version);
        let lost = RunEvent::Failed {
            at: Utc::now(),
            run,
            task,
            attempt: u32::try_from(row.attempt).unwrap_or_default(),
            kind: FailureKind::Lost,
            detail: format!("the run was lost: {why}"),
            duration_s: row
                .started_at
                .map(|s| (Utc::now() - s).num_milliseconds() as f64 / 1000.0)
                .unwrap_or_default(),
            tail: String::new(),
            usage: None,
            until: None,
            reviewer_usage: None,
        };
        match writer.append(&lost).await {
            Ok(()) => {
                tracing::warn!(%task, %run, %why, "run declared lost");
                metrics::counter!("pidevops_runs_total", "outcome" => "lost").increment(1);
                self.apply(&lost).await;
                Ok(true)
            }
            // It spoke up (or ended) since the read model was written: alive after all, or already over.
            Err(Written::Taken) => Ok(false),
            Err(Written::Failed(error)) => Err(error),
        }
    }
}

/// The resolved dispatch duration bound, for `/health` interval reporting.
pub fn watchdog_interval(config: &DispatchConfig) -> Duration {
    config.heartbeat.max(Duration::from_millis(100))
}
