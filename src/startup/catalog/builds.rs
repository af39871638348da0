//! The build halves of the catalog's entries that take more than a line: a loop's job from the service's parts.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::future::BoxFuture;
use serde::Serialize;

use super::{rest, Built, LoopJob, Ticked};
use crate::eventlog::EventLog;
use crate::loops::Pace;

/// The relay: its lag is its detail, reported even when a tick fails; a replica that (re)gains its lease asks the
/// bus where to resume.
pub(super) struct RelayJob(pub(super) Arc<crate::bus::relay::Relay>);

impl LoopJob for RelayJob {
    fn tick(&self) -> BoxFuture<'_, Ticked> {
        Box::pin(async move {
            let result = self.0.tick().await.map(|p| Pace::again_if(p.out_of_time));
            let detail = self.0.lag().map(|lag| {
                serde_json::json!({
                    "position": lag.position,
                    "head": lag.head,
                    "behind": lag.behind(),
                })
            });
            (detail, result)
        })
    }

    fn on_acquired(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.0.resync())
    }
}

/// The `slack_socket` loop: its detail (connected, reconnecting, failing and why; envelopes by outcome) is reported
/// even when a tick fails, since then it says why.
pub(super) struct SlackSocketJob(pub(super) Arc<crate::providers::slack::socket::SlackSocket>);

impl LoopJob for SlackSocketJob {
    fn tick(&self) -> BoxFuture<'_, Ticked> {
        Box::pin(async move {
            // Each tick is one window of reading; the next one reads on at once.
            let result = self.0.tick().await.map(|()| Pace::Again);
            (serde_json::to_value(self.0.progress()).ok(), result)
        })
    }
}

/// An `effects:<provider>` loop: acts on news only.
pub(super) fn effects<P: crate::effects::ProviderPolicy + 'static>(
    worker: crate::effects::runner::Effects<P>,
) -> Built {
    let worker = Arc::new(worker);
    Built::ticking(
        move || {
            let worker = worker.clone();
            async move { worker.tick().await }
        },
        |p| Pace::again_if(p.out_of_time),
    )
    .at_head()
}

/// A poller's loop: built only with its credential (the plan arms it only then), from the poller `make` builds
/// with it; each run is one `tick`, whose progress is the loop's detail.
pub(super) fn poller_entry<P, T, F, Fut>(
    name: &str,
    variable: &str,
    credential: Option<&secrecy::SecretString>,
    make: impl FnOnce(&secrecy::SecretString) -> anyhow::Result<P>,
    tick: F,
) -> anyhow::Result<Built>
where
    P: Send + Sync + 'static,
    T: Serialize + 'static,
    F: Fn(Arc<P>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<T>> + Send + 'static,
{
    let credential =
        credential.with_context(|| format!("the loop plan arms {name} without {variable}"))?;
    let poller = Arc::new(make(credential)?);
    Ok(Built::ticking(move || tick(poller.clone()), rest))
}

/// The `gitlab_poller` loop, over the GitLab projects of `[repos]`.
pub(super) fn gitlab_poller(parts: &super::Parts<'_>) -> anyhow::Result<Built> {
    use crate::providers::gitlab::poller::{GitlabPoller, GITLAB_POLLER};
    let gitlab = crate::providers::gitlab::settings::GitlabSettings::of(parts.settings);
    poller_entry(
        GITLAB_POLLER,
        "GITLAB_TOKEN",
        gitlab.token.as_ref(),
        |token| {
            let client = crate::providers::gitlab::client::GitlabClient::new(&gitlab.url, token)
                .map_err(|e| anyhow::anyhow!(e))?;
            Ok(GitlabPoller::new(
                client,
                parts.log.clone(),
                parts.board.clone(),
                gitlab.projects.clone(),
                gitlab.intake.label.clone(),
                parts.settings.file.dispatch.clone(),
            ))
        },
        |poller| async move { poller.tick().await },
    )
}

pub(super) async fn heartbeat(log: &EventLog) -> anyhow::Result<()> {
    let started = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(5), log.store().ping()).await;
    let up = matches!(result, Ok(Ok(())));
    metrics::gauge!("pidevops_database_up").set(if up { 1.0 } else { 0.0 });
    match result {
        Ok(Ok(())) => {
            metrics::histogram!("pidevops_database_ping_seconds")
                .record(started.elapsed().as_secs_f64());
            log.probe_if_failing()
                .await
                .context("the database answers but appends still fail")
        }
        Ok(Err(e)) => Err(e).context("database round trip failed"),
        Err(_) => anyhow::bail!("database round trip took longer than 5 s"),
    }
}

/// The `stale_reviews` loop, judging ages by the service's clock.
pub(super) fn stale_reviews(
    parts: &super::Parts<'_>,
    _: &super::PlannedLoop,
) -> anyhow::Result<Built> {
    let stale = Arc::new(crate::landing::stale::StaleReviews::new(
        parts.board.clone(),
        parts.settings.clock.clone(),
    ));
    Ok(Built::ticking(
        move || {
            let stale = stale.clone();
            async move { stale.tick().await }
        },
        rest,
    ))
}

/// The `land` loop: its own Lander over the service's parts.
pub(super) fn land_loop(parts: &super::Parts<'_>, _: &super::PlannedLoop) -> anyhow::Result<Built> {
    let s = parts.settings;
    let lander = crate::landing::Lander::new(
        parts.board.clone(),
        parts.log.clone(),
        s.workspace_root.clone(),
        crate::startup::git_credentials(s),
        s.file.dispatch.clone(),
    );
    let land = Arc::new(crate::landing::auto::AutoLand::new(
        parts.log.clone(),
        lander,
    ));
    Ok(Built::ticking(
        move || {
            let land = land.clone();
            async move { land.tick().await }
        },
        |p| Pace::again_if(p.out_of_time),
    )
    .at_head())
}

/// The refresh both the `refresh` loop and the merge queue make.
fn refresher(parts: &super::Parts<'_>) -> crate::landing::refresh::Refresher {
    let s = parts.settings;
    let lander = crate::landing::Lander::new(
        parts.board.clone(),
        parts.log.clone(),
        s.workspace_root.clone(),
        crate::startup::git_credentials(s),
        s.file.dispatch.clone(),
    );
    let combined = s.file.plans.land == crate::tasks::PlanLand::Combined;
    crate::landing::refresh::Refresher::new(parts.log.clone(), lander, combined)
}

/// The `refresh` loop, a follower of the log.
pub(super) fn refresh_loop(
    parts: &super::Parts<'_>,
    _: &super::PlannedLoop,
) -> anyhow::Result<Built> {
    let refresh = Arc::new(refresher(parts));
    Ok(Built::ticking(
        move || {
            let refresh = refresh.clone();
            async move { refresh.tick().await }
        },
        |p| Pace::again_if(p.out_of_time),
    )
    .at_head())
}

/// The `merge_queue` loop: it refreshes only where pidevops has workspaces (dispatch on), and queues pull
/// requests as they stand otherwise; it serves the hosts whose token is set (`merge_queue_hosts`).
pub(super) fn merge_queue_loop(
    parts: &super::Parts<'_>,
    _: &super::PlannedLoop,
) -> anyhow::Result<Built> {
    let refreshes = parts.settings.file.dispatch.off.is_none();
    let queue = Arc::new(crate::landing::queue::MergeQueue::new(
        parts.log.clone(),
        refresher(parts),
        refreshes,
        super::plans::merge_queue_hosts(parts.settings),
    ));
    Ok(Built::ticking(
        move || {
            let queue = queue.clone();
            async move { queue.tick().await }
        },
        rest,
    ))
}
