//! Loops: every background activity runs here and reports here, so `/health` can tell the truth about it.
//!
//! The runner is do-while: a short startup delay, a tick at once, then one every interval (with jitter so replicas
//! do not tick in lockstep). A tick's error or panic is caught, counted and reported, and the loop goes on. A loop
//! with no *successful* tick within its threshold turns `stale` and `/health` fails: hung, its task gone, or ticking
//! and failing every time (a poller whose provider answers 500 for hours is doing no work, however often it ticks).
//! The threshold is 3 × the interval, at least a minute, or `[loops.<name>] fail_after_s`.
//! A loop with a backlog works through it in ticks bounded by a time budget ([`follow::TICK_BUDGET`] for the loops
//! that follow the log, one interval for projectors) and says so ([`Pace::Again`]): it goes again without resting,
//! and each finished tick keeps it fresh in `/health`. Every loop is declared once, in `startup::catalog`.

pub mod follow;
pub mod lease;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rand::Rng;
use serde::Serialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// By default a loop is stale when it has had no successful tick for this many intervals...
pub const STALE_AFTER_INTERVALS: u32 = 3;
/// ...and never sooner than this, so a fast loop's brief hiccup (a database failover, a deploy) only warns.
/// Every outbound call a loop makes has a timeout shorter than this (tested per client).
pub const MIN_FAIL_AFTER: Duration = Duration::from_secs(60);

/// How long a loop may go without a successful tick before it is stale, unless configured otherwise.
pub fn default_fail_after(interval: Duration) -> Duration {
    (interval * STALE_AFTER_INTERVALS).max(MIN_FAIL_AFTER)
}

/// `[loops.<name>] fail_after_s` from pidevops.toml (each loop's name and its value, if set): per-loop stale
/// thresholds, in seconds (fractions allowed).
pub fn fail_after_overrides<'a>(
    entries: impl IntoIterator<Item = (&'a String, Option<f64>)>,
) -> Result<BTreeMap<String, Duration>, String> {
    let mut overrides = BTreeMap::new();
    for (name, secs) in entries {
        let Some(secs) = secs else {
            continue;
        };
        if !(secs.is_finite() && secs > 0.0) {
            return Err(format!(
                "[loops.{name}] fail_after_s: expected a positive number of seconds"
            ));
        }
        overrides.insert(name.clone(), Duration::from_secs_f64(secs));
    }
    Ok(overrides)
}

/// What a finished tick asks of the runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// Caught up (or nothing to do): rest one interval, plus jitter.
    Rest,
    /// Stopped at its time budget with work left: tick again at once.
    Again,
}

impl Pace {
    pub fn again_if(out_of_time: bool) -> Self {
        if out_of_time {
            Self::Again
        } else {
            Self::Rest
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LoopState {
    /// Configured and running.
    Armed,
    /// Nothing is configured for it; not a failure.
    Disabled,
    /// It should run but cannot (a missing credential, say); `/health` fails.
    Unarmed,
}

impl LoopState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Armed => "armed",
            Self::Disabled => "disabled",
            Self::Unarmed => "unarmed",
        }
    }
}

#[derive(Clone, Debug)]
struct LoopRecord {
    state: LoopState,
    reason: Option<String>,
    interval: Option<Duration>,
    /// Stale when no tick has succeeded for this long (armed loops).
    fail_after: Option<Duration>,
    /// No tick is expected before this instant (startup delay plus grace).
    due_from: Instant,
    last_tick_at: Option<DateTime<Utc>>,
    last_ok_at: Option<DateTime<Utc>>,
    last_ok_instant: Option<Instant>,
    last_error: Option<String>,
    last_tick_failed: bool,
    ticks: u64,
    errors: u64,
    detail: Option<serde_json::Value>,
}

/// What `/health` shows for one loop.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LoopReport {
    pub state: LoopState,
    pub reason: Option<String>,
    pub interval_s: Option<f64>,
    /// Stale after this long without a successful tick.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail_after_s: Option<f64>,
    pub last_tick_at: Option<DateTime<Utc>>,
    pub last_ok_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub ticks: u64,
    pub errors: u64,
    pub stale: bool,
    /// Loop-specific facts (the relay's lag, say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
    /// For a singleton loop: who holds its lease, and until when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<lease::LeaseView>,
    /// The most recent tick failed (the loop still runs; health warns).
    #[serde(skip)]
    pub failing: bool,
}

/// The shared record of every loop. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct LoopRegistry {
    inner: Arc<Mutex<BTreeMap<String, LoopRecord>>>,
    /// Configured stale thresholds (`[loops.<name>] fail_after_s`), by loop name.
    fail_after: Arc<BTreeMap<String, Duration>>,
}

impl LoopRegistry {
    /// A registry whose loops use the configured thresholds where one is given.
    pub fn with_fail_after(fail_after: BTreeMap<String, Duration>) -> Self {
        Self {
            inner: Arc::default(),
            fail_after: Arc::new(fail_after),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut BTreeMap<String, LoopRecord>) -> R) -> R {
        // A panic while holding this lock cannot leave a record half-written (each update is a plain field
        // assignment), so a poisoned lock is safe to keep using.
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    fn set(
        &self,
        name: &str,
        state: LoopState,
        reason: Option<String>,
        interval: Option<Duration>,
        due_from: Instant,
    ) {
        // The configured threshold, else the default; a spec's own is applied over this by `spawn`.
        let fail_after = interval.map(|interval| {
            self.fail_after
                .get(name)
                .copied()
                .unwrap_or_else(|| default_fail_after(interval))
        });
        self.with(|loops| {
            loops.insert(
                name.to_owned(),
                LoopRecord {
                    state,
                    reason,
                    interval,
                    fail_after,
                    due_from,
                    last_tick_at: None,
                    last_ok_at: None,
                    last_ok_instant: None,
                    last_error: None,
                    last_tick_failed: false,
                    ticks: 0,
                    errors: 0,
                    detail: None,
                },
            );
        });
    }

    /// Records a loop that will run; its first successful tick is expected within `grace` plus its threshold.
    pub fn arm(&self, name: &str, interval: Duration, grace: Duration) {
        self.set(
            name,
            LoopState::Armed,
            None,
            Some(interval),
            Instant::now() + grace,
        );
    }

    /// Overrides an armed loop's stale threshold (a loop whose spec sets one).
    fn set_fail_after(&self, name: &str, fail_after: Duration) {
        self.with(|loops| {
            if let Some(record) = loops.get_mut(name) {
                record.fail_after = Some(fail_after);
            }
        });
    }

    /// Records a loop that is off because nothing is configured for it.
    pub fn disable(&self, name: &str, reason: impl Into<String>) {
        self.set(
            name,
            LoopState::Disabled,
            Some(reason.into()),
            None,
            Instant::now(),
        );
    }

    /// Records a loop that should run but cannot.
    pub fn unarm(&self, name: &str, reason: impl Into<String>) {
        self.set(
            name,
            LoopState::Unarmed,
            Some(reason.into()),
            None,
            Instant::now(),
        );
    }

    fn tick_finished(&self, name: &str, result: Result<(), String>) {
        let now = Utc::now();
        metrics::counter!("pidevops_loop_ticks_total", "loop" => name.to_owned()).increment(1);
        metrics::gauge!("pidevops_loop_last_tick_timestamp_seconds", "loop" => name.to_owned())
            .set(now.timestamp_millis() as f64 / 1000.0);
        if result.is_err() {
            metrics::counter!("pidevops_loop_errors_total", "loop" => name.to_owned()).increment(1);
        }
        self.with(|loops| {
            if let Some(record) = loops.get_mut(name) {
                record.ticks += 1;
                record.last_tick_at = Some(now);
                match result {
                    Ok(()) => {
                        record.last_ok_at = Some(now);
                        record.last_ok_instant = Some(Instant::now());
                        record.last_tick_failed = false;
                    }
                    Err(error) => {
                        record.errors += 1;
                        record.last_error = Some(error);
                        record.last_tick_failed = true;
                    }
                }
            }
        });
    }

    /// Attaches loop-specific facts to a loop's report.
    pub fn set_detail(&self, name: &str, detail: serde_json::Value) {
        self.with(|loops| {
            if let Some(record) = loops.get_mut(name) {
                record.detail = Some(detail);
            }
        });
    }

    /// Removes a loop's loop-specific facts (they described a role it no longer has).
    pub fn clear_detail(&self, name: &str) {
        self.with(|loops| {
            if let Some(record) = loops.get_mut(name) {
                record.detail = None;
            }
        });
    }

    /// Every loop's state as of now. Pure memory: no I/O, so `/metrics` can call it at scrape time.
    pub fn report(&self) -> BTreeMap<String, LoopReport> {
        let now = Instant::now();
        self.with(|loops| {
            loops
                .iter()
                .map(|(name, r)| {
                    let stale = match (r.state, r.fail_after) {
                        (LoopState::Armed, Some(fail_after)) => {
                            let since = r.last_ok_instant.unwrap_or(r.due_from);
                            now > since && now - since > fail_after
                        }
                        _ => false,
                    };
                    (
                        name.clone(),
                        LoopReport {
                            state: r.state,
                            reason: r.reason.clone(),
                            interval_s: r.interval.map(|i| i.as_secs_f64()),
                            fail_after_s: r.fail_after.map(|d| d.as_secs_f64()),
                            last_tick_at: r.last_tick_at,
                            last_ok_at: r.last_ok_at,
                            last_error: r.last_error.clone(),
                            ticks: r.ticks,
                            errors: r.errors,
                            stale,
                            detail: r.detail.clone(),
                            lease: None,
                            failing: r.last_tick_failed,
                        },
                    )
                })
                .collect()
        })
    }

    /// Sets the gauges that describe loop state; called at scrape time from memory.
    pub fn publish_gauges(&self) {
        for (name, report) in self.report() {
            metrics::gauge!("pidevops_loop_stale", "loop" => name.clone())
                .set(f64::from(u8::from(report.stale)));
            for state in [LoopState::Armed, LoopState::Disabled, LoopState::Unarmed] {
                metrics::gauge!("pidevops_loop_state", "loop" => name.clone(), "state" => state.as_str())
                    .set(f64::from(u8::from(report.state == state)));
            }
        }
    }
}

/// How one loop runs.
#[derive(Clone, Debug)]
pub struct LoopSpec {
    pub name: String,
    pub interval: Duration,
    pub startup_delay: Duration,
    /// Up to this fraction of the interval is added at random to each wait.
    pub jitter: f64,
    /// Stale after this long without a successful tick; `None`: the configured or default threshold.
    pub fail_after: Option<Duration>,
    /// A loop that follows the log rests until this process commits something new (or its interval passes):
    /// a mention reaches intake and then its thread in milliseconds, not one interval per hop.
    pub wake: Option<watch::Receiver<i64>>,
}

/// After a commit wakes a resting loop, how long it waits for the commits that come with it: a burst is read as
/// one page, not one tick per event.
pub const WAKE_COALESCE: Duration = Duration::from_millis(20);

impl LoopSpec {
    pub fn new(name: impl Into<String>, interval: Duration, startup_delay: Duration) -> Self {
        Self {
            name: name.into(),
            interval,
            startup_delay,
            jitter: 0.1,
            fail_after: None,
            wake: None,
        }
    }

    /// Woken early by each change of `committed` (the log's commits), besides its interval.
    pub fn woken_by(mut self, committed: watch::Receiver<i64>) -> Self {
        self.wake = Some(committed);
        self
    }

    /// A threshold of its own (tests use short ones).
    pub fn with_fail_after(mut self, fail_after: Duration) -> Self {
        self.fail_after = Some(fail_after);
        self
    }
}

/// Runs `tick` as a do-while loop until `cancel` fires, reporting every tick to `registry`.
pub fn spawn<F, Fut>(
    registry: &LoopRegistry,
    tracker: &TaskTracker,
    cancel: CancellationToken,
    spec: LoopSpec,
    tick: F,
) where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<Pace>> + Send + 'static,
{
    registry.arm(&spec.name, spec.interval, spec.startup_delay);
    if let Some(fail_after) = spec.fail_after {
        registry.set_fail_after(&spec.name, fail_after);
    }
    let registry = registry.clone();
    let mut wake = spec.wake.clone();
    tracker.spawn(async move {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(spec.startup_delay) => {}
        }
        loop {
            // What is committed from here on is news to this tick or wakes the rest after it.
            if let Some(committed) = wake.as_mut() {
                committed.borrow_and_update();
            }
            // The tick runs in its own task so a panic is caught here and the loop goes on.
            let handle = tokio::spawn(tick());
            let abort = handle.abort_handle();
            let outcome = tokio::select! {
                joined = handle => joined,
                _ = cancel.cancelled() => {
                    abort.abort();
                    return;
                }
            };
            let (result, pace) = match outcome {
                Ok(Ok(pace)) => (Ok(()), pace),
                Ok(Err(error)) => (Err(format!("{error:#}")), Pace::Rest),
                Err(join_error) => (Err(panic_message(join_error)), Pace::Rest),
            };
            if let Err(error) = &result {
                tracing::warn!(r#loop = %spec.name, %error, "loop tick failed");
            }
            registry.tick_finished(&spec.name, result);
            if pace == Pace::Again {
                // Still give way to the runtime (and to a shutdown) between two ticks.
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::task::yield_now() => continue,
                }
            }

            let jitter = if spec.jitter > 0.0 {
                spec.interval
                    .mul_f64(rand::rng().random_range(0.0..spec.jitter))
            } else {
                Duration::ZERO
            };
            let woken = tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(spec.interval + jitter) => false,
                _ = committed_since(wake.as_mut()) => true,
            };
            if !woken {
                continue;
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(WAKE_COALESCE) => {}
            }
        }
    });
}

/// Resolves when something is committed after the last look; never when there is nothing to watch or the log's
/// writer is gone (shutting down: the interval alone wakes the loop then).
async fn committed_since(wake: Option<&mut watch::Receiver<i64>>) {
    if let Some(committed) = wake {
        if committed.changed().await.is_ok() {
            return;
        }
    }
    std::future::pending::<()>().await;
}

fn panic_message(error: tokio::task::JoinError) -> String {
    if error.is_cancelled() {
        return "tick was cancelled".to_owned();
    }
    let payload = error.into_panic();
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic payload".to_owned());
    format!("tick panicked: {text}")
}

#[cfg(test)]
mod tests;
