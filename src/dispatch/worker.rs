//! `pidevops worker`: runs agents on another machine. It pulls run requests from the durable JetStream consumer
//! (`PIDEVOPS_RUNS` by default, named after the events stream: `startup::run_queue_config`; shared by every
//! worker of the deployment, so each request goes to one), runs each exactly as `serve` would
//! (same workspaces, runner and events, written to the same log over `DATABASE_URL`), and proves it is alive
//! with `progress` on the message as well as heartbeats in the log.
//!
//! A worker that dies mid-run stops sending `progress`; JetStream redelivers the request after `ack_wait`. The
//! run had started, so the new worker does not run it twice: it leaves the attempt to the watchdog, which
//! declares it lost (its heartbeats stopped too) and retries the task with a new run.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::dispatcher::{Dispatcher, RunRequest};
use super::runs;
use crate::bus::work::Delivery;
use crate::eventlog::EventStore;
use crate::tasks::Column;

/// One run request: run it unless it already started somewhere or its task moved on; `progress` keeps the
/// message while it runs.
pub async fn handle(
    delivery: Delivery<RunRequest>,
    dispatcher: &Dispatcher,
    board: &crate::board::Board,
    store: &EventStore,
    ack_wait: Duration,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let request = delivery.payload().clone();
    let recorded = store.read_stream(&runs::stream(request.run)).await?;
    if !recorded.is_empty() {
        // Started elsewhere (a worker that died, or one that is slow to say so): never run an attempt twice. If
        // it is dead, the watchdog declares it lost and the task gets a new run.
        tracing::info!(run = %request.run, "run already started elsewhere; leaving it to its runner or the watchdog");
        return Ok(delivery.ack().await?);
    }
    let Some(loaded) = board.load(request.task).await? else {
        return Ok(delivery.term().await?);
    };
    let task = loaded.task;
    if task.column() != Column::InProgress || task.run() != Some(request.run) {
        // Cancelled, or already given up on: nothing to run.
        return Ok(delivery.term().await?);
    }
    let alive = CancellationToken::new();
    let progress = {
        let alive = alive.clone();
        let delivery = &delivery;
        async move {
            loop {
                tokio::select! {
                    () = alive.cancelled() => return,
                    () = tokio::time::sleep(ack_wait / 3) => {}
                }
                if let Err(error) = delivery.progress().await {
                    tracing::warn!(%error, "progress on the run request failed");
                }
            }
        }
    };
    let run = async {
        dispatcher
            .execute(task, request.run, request.attempt, shutdown.child_token())
            .await;
        alive.cancel();
    };
    tokio::join!(progress, run);
    delivery.ack().await?;
    Ok(())
}
