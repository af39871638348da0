//! `pidevops worker`: runs agents on another machine. It pulls run requests from the durable JetStream consumer
//! (`PIDEVOPS_RUNS`, shared by every worker, so each request goes to one), runs each exactly as `serve` would
//! (same workspaces, runner and events, written to the same log over `DATABASE_URL`), and proves it is alive
//! with `progress` on the message as well as heartbeats in the log.
//!
//! A worker that dies mid-run stops sending `progress`; JetStream redelivers the request after `ack_wait`. The
//! run had started, so the new worker does not run it twice: it leaves the attempt to the watchdog, which
//! declares it lost (its heartbeats stopped too) and retries the task with a new run.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::dispatcher::{Dispatcher, RunRequest};
use super::runs;
use crate::bus::work::{Delivery, WorkQueue};
use crate::config::Settings;
use crate::eventlog::EventStore;
use crate::tasks::Column;

/// Serves run requests until `shutdown`; runs in flight are stopped with it (their requests come back).
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let nats = settings
        .nats_url
        .clone()
        .context("pidevops worker pulls runs from NATS JetStream: set NATS_URL")?;
    let core = crate::startup::Core::open(settings).await?;
    let (settings, log) = (&core.settings, core.log.clone());
    let config = settings.file.dispatch.clone();
    let profiles = settings.file.profiles.clone();
    if let Some(why) = super::dispatcher::cannot_run(
        &super::DispatchConfig {
            executor: super::config::Executor::Local,
            ..config.clone()
        },
        &profiles,
        &settings.env,
        settings.github_token.is_some(),
        true,
    ) {
        anyhow::bail!("this worker cannot run agents: {why}");
    }
    let slots = config.limits.global;
    let board = crate::board::Board::new(log.clone(), settings.file.board.clone());
    let tracker = TaskTracker::new();
    let dispatcher = crate::startup::dispatcher(
        settings, &board, &log, config, profiles, &tracker, &shutdown,
    )
    .await?;
    let queue = WorkQueue::connect(Some(&nats), crate::startup::run_queue_config(), log.clone())
        .await
        .context("connecting to the JetStream run queue")?;
    tracing::info!(worker = %settings.instance_id, slots, "worker ready");

    let permits = Arc::new(Semaphore::new(slots));
    loop {
        let permit = tokio::select! {
            () = shutdown.cancelled() => break,
            permit = permits.clone().acquire_owned() => permit.context("the slot semaphore closed")?,
        };
        let pulled = tokio::select! {
            () = shutdown.cancelled() => break,
            pulled = queue.pull::<RunRequest>(1, Duration::from_secs(5)) => pulled,
        };
        let deliveries = match pulled {
            Ok(deliveries) => deliveries,
            Err(error) => {
                tracing::warn!(%error, "pulling run requests failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        // One delivery per pull, so the slot goes with it and returns when its run ends.
        let mut permit = Some(permit);
        for delivery in deliveries {
            let slot = permit.take();
            let (dispatcher, board, store, shutdown) = (
                dispatcher.clone(),
                board.clone(),
                log.store().clone(),
                shutdown.clone(),
            );
            let ack_wait = queue.config().ack_wait;
            tracker.spawn(async move {
                if let Err(error) =
                    handle(delivery, &dispatcher, &board, &store, ack_wait, shutdown).await
                {
                    tracing::warn!(error = format!("{error:#}"), "run request not handled");
                }
                drop(slot);
            });
        }
    }
    tracker.close();
    let _ = tokio::time::timeout(crate::startup::SHUTDOWN_GRACE, tracker.wait()).await;
    core.close().await;
    Ok(())
}

async fn handle(
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
