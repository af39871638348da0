//! `pidevops worker`'s start-up: its core, its dispatcher and the run queue it pulls from; each request is handled
//! by `dispatch::worker::handle`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::bus::work::WorkQueue;
use crate::config::Settings;
use crate::dispatch::dispatcher::RunRequest;

/// Serves run requests until `shutdown`; runs in flight are stopped with it (their requests come back).
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let nats = settings
        .nats_url
        .clone()
        .context("pidevops worker pulls runs from NATS JetStream: set NATS_URL")?;
    let core = super::Core::open(settings).await?;
    let (settings, log) = (&core.settings, core.log.clone());
    let config = settings.file.dispatch.clone();
    let profiles = settings.file.profiles.clone();
    if let Some(why) = crate::dispatch::dispatcher::cannot_run(
        &crate::config::dispatch::DispatchConfig {
            executor: crate::config::dispatch::Executor::Local,
            ..config.clone()
        },
        &profiles,
        &settings.env,
        crate::providers::github::settings::GithubSettings::of(settings)
            .token
            .is_some(),
        true,
    ) {
        anyhow::bail!("this worker cannot run agents: {why}");
    }
    // The dispatcher on `serve` cannot see this machine: a profile that cannot run here stops the worker at once
    // rather than failing each run it pulls.
    if let Some((whose, why)) = crate::dispatch::preflight::unready_used(
        &config,
        &profiles,
        &settings.env,
        &settings.workspace_root,
    )
    .into_iter()
    .next()
    {
        anyhow::bail!("this worker cannot run agents: {whose}: {}", why.join("; "));
    }
    let slots = config.limits.global;
    let board = crate::board::Board::new(log.clone(), settings.file.board.clone());
    let tracker = TaskTracker::new();
    let dispatcher = super::dispatcher(
        settings, &board, &log, config, profiles, &tracker, &shutdown,
    )
    .await?;
    let queue = WorkQueue::connect(
        Some(&nats),
        super::run_queue_config(&settings.bus),
        log.clone(),
    )
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
                if let Err(error) = crate::dispatch::worker::handle(
                    delivery,
                    &dispatcher,
                    &board,
                    &store,
                    ack_wait,
                    shutdown,
                )
                .await
                {
                    tracing::warn!(error = format!("{error:#}"), "run request not handled");
                }
                drop(slot);
            });
        }
    }
    tracker.close();
    let _ = tokio::time::timeout(super::SHUTDOWN_GRACE, tracker.wait()).await;
    core.close().await;
    Ok(())
}
