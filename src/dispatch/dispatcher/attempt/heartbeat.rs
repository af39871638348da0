//! An attempt's heartbeat: beats in the run's stream while the agent works and its work is wrapped up, the
//! stop of its agent when the run was declared lost, the service stops, the disk fills or the task moved on; and
//! the one writer of what else the run records meanwhile (its checkpoints).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use chrono::Utc;
use tokio_util::sync::CancellationToken;

use super::super::run_writer::{RunWriter, Written};
use super::super::{run_of, Dispatcher};
use crate::dispatch::runs::RunEvent;
use crate::projectors::tasks as task_rows;
use crate::tasks::{Column, RunId, TaskId};

impl Dispatcher {
    /// Heartbeats while the agent runs, and on while its work is wrapped up, until `beats` is cancelled. A heartbeat
    /// that meets a conflict means the run was declared lost (`lost`); that, the service stopping (`stop`) or the
    /// task closed or superseded stops the agent (`agent_stop`).
    pub(super) fn heartbeat(
        &self,
        id: TaskId,
        run: RunId,
        mut beat_writer: RunWriter,
        output: Arc<AtomicU64>,
        stop: CancellationToken,
    ) -> Heartbeat {
        let beats = CancellationToken::new();
        let (notes, mut noted) = tokio::sync::mpsc::unbounded_channel();
        let lost = CancellationToken::new();
        let agent_stop = CancellationToken::new();
        let disk_full = CancellationToken::new();
        let (beating, declared_lost, stopping, filled) = (
            beats.clone(),
            lost.clone(),
            agent_stop.clone(),
            disk_full.clone(),
        );
        let interval = self.inner.config.heartbeat;
        let board = self.inner.board.clone();
        // A run that takes the workspace volume below half the claim's threshold is stopped: the claim keeps new
        // runs off a filling volume, this keeps a running one from filling it (and the log beside it).
        let root = self.inner.workspaces.root().to_owned();
        let floor = self.inner.config.bounds.min_free_disk / 2;
        let version = tokio::spawn(async move {
            let mut sent = 0;
            loop {
                let last = tokio::select! {
                    () = beats.cancelled() => true,
                    () = stop.cancelled() => { agent_stop.cancel(); break; }
                    // What else the run records while it works (its checkpoints), through this one writer.
                    Some(note) = noted.recv() => {
                        match beat_writer.append(&note).await {
                            Ok(()) => {}
                            Err(Written::Taken) => {
                                lost.cancel();
                                agent_stop.cancel();
                                break;
                            }
                            Err(Written::Failed(error)) => {
                                tracing::warn!(task = %id, %run, error = format!("{error:#}"), "{} not recorded", note.kind());
                            }
                        }
                        continue;
                    }
                    () = tokio::time::sleep(interval) => false,
                };
                let bytes = output.load(std::sync::atomic::Ordering::Relaxed);
                // The last beat, right before the outcome, carries what the agent printed since the one before:
                // a run shorter than one interval would otherwise show 0 bytes on /api/runs.
                if last && bytes == sent {
                    break;
                }
                let beat = RunEvent::Heartbeat {
                    at: Utc::now(),
                    run,
                    task: id,
                    output_bytes: bytes,
                };
                match beat_writer.append(&beat).await {
                    Ok(()) => sent = bytes,
                    Err(Written::Taken) => {
                        lost.cancel();
                        agent_stop.cancel();
                        break;
                    }
                    Err(Written::Failed(error)) => {
                        tracing::warn!(task = %id, %run, error = format!("{error:#}"), "heartbeat not recorded");
                    }
                }
                if last {
                    break;
                }
                if floor > 0
                    && crate::dispatch::disk::free_bytes(&root).is_ok_and(|free| free < floor)
                {
                    disk_full.cancel();
                    agent_stop.cancel();
                    break;
                }
                // A task cancelled (or otherwise moved on) while its agent works: stop spending on it. The
                // read model may not show the claim yet (it lags the log), so only what can only come after
                // the claim counts: a closed task, or another run in progress.
                if let Ok(Some(row)) = task_rows::get(board.store(), id).await {
                    let closed = matches!(
                        row.column,
                        Column::Cancelled | Column::Done | Column::Archived
                    );
                    let superseded =
                        row.column == Column::InProgress && run_of(&row).is_some_and(|r| r != run);
                    if closed || superseded {
                        agent_stop.cancel();
                        break;
                    }
                }
            }
            beat_writer.version
        });
        Heartbeat {
            beats: beating,
            lost: declared_lost,
            agent_stop: stopping,
            disk_full: filled,
            version,
            notes,
        }
    }
}

/// An attempt's heartbeat task and the tokens between the two (see `Dispatcher::heartbeat`).
pub(super) struct Heartbeat {
    /// Cancelled by the attempt once it has its outcome: no more beats.
    pub(super) beats: CancellationToken,
    /// Cancelled by the heartbeat when a beat met a conflict: the run was declared lost.
    pub(super) lost: CancellationToken,
    /// Stops the agent.
    pub(super) agent_stop: CancellationToken,
    /// Cancelled by the heartbeat when the workspace volume fell below half of `min_free_disk_mib`.
    pub(super) disk_full: CancellationToken,
    /// The stream version the beats reached.
    pub(super) version: tokio::task::JoinHandle<i64>,
    /// What else the run records while it works (its checkpoints), written by the heartbeat: one writer.
    pub(super) notes: tokio::sync::mpsc::UnboundedSender<RunEvent>,
}

impl Heartbeat {
    /// No more beats (one last with the output counted since the one before): the run's writer goes on from the
    /// version they reached. Called once, when the attempt has its outcome.
    pub(super) async fn end(&mut self, writer: &mut RunWriter) {
        self.beats.cancel();
        if let Ok(version) = (&mut self.version).await {
            writer.version = writer.version.max(version);
        }
    }
}
