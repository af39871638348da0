//! Projectors: read models derived from the log, each rebuildable from position 0.
//!
//! A projector has a name and a version. The runtime reads committed events from the log (never from the bus,
//! which is only fan-out), hands a batch to the projector inside a database transaction, and moves the
//! projector's row in `projections` in that same transaction under a compare-and-set on `(version, position)`.
//! So a batch is applied exactly once or not at all, whatever crashes, and a second instance (another replica,
//! or `pidevops replay` while serving) can never move a read model backwards or apply a batch twice.
//!
//! A projector that fails on an event stops at that event: the runtime narrows the failing batch down to the
//! one event, applies everything before it, reports the event in `/health` (`projector:<name>`) and retries it
//! with backoff. It never skips. A version bump (a changed read model) rebuilds from position 0.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde::Serialize;
use sqlx::{Postgres, Sqlite, Transaction};
use tokio::sync::Mutex;

pub use crate::eventlog::Bodies;
use crate::eventlog::{EventStore, StoreError, StoredEvent};

/// Events per transaction while serving: small enough that a batch commits quickly next to live appends.
pub const SERVE_BATCH: i64 = 1000;
/// Events per transaction in `pidevops replay`: bigger batches, fewer commits, and a task spanning fewer of them
/// is rewritten fewer times (tasksbench: 10,000 -> 50,000 took the rebuild from 0.20 to 0.27-0.30 of a scan).
/// Three pages are in memory at once (read ahead, waiting, applied); today's projectors read no bodies or only
/// their own streams' (tasks: ~1 KB each), so a page is tens of megabytes. A projector that reads webhook bodies
/// (`Bodies::All`) would want smaller replay pages.
pub const REPLAY_BATCH: i64 = 50_000;
/// A tick hands control back after this long, so `/health` sees progress during a long catch-up. Serve sets it
/// to the loop's interval: a tick longer than three intervals would make the loop look stale.
const TICK_BUDGET: Duration = Duration::from_secs(1);
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// The loop name of a projector: `projector:<name>`.
pub fn loop_name(projector: &str) -> String {
    format!("projector:{projector}")
}

/// Every projector this build knows, for `serve` and `replay --all`.
pub fn all() -> Vec<Arc<dyn Projector>> {
    vec![
        Arc::new(sources::SourcesProjector),
        Arc::new(tasks::TasksProjector::default()),
        Arc::new(runs::RunsProjector),
        Arc::new(usage::UsageProjector),
    ]
}

/// The transaction a projector writes in: one per backend.
pub enum ProjectorTx {
    Postgres(Transaction<'static, Postgres>),
    Sqlite(Transaction<'static, Sqlite>),
}

/// Runs `$body` on the connection of a projector's transaction, whichever backend it is on: the statement is
/// written once (`$N` placeholders) and compiled once per driver. `$conn` is a `&mut` connection, used once.
macro_rules! on_tx {
    // `sql = $statement`: a statement of many placeholders, which SQLite gets through `sql::positional`.
    ($tx:expr, sql = $statement:ident, |$conn:ident| $body:expr) => {
        on_tx!(@arms $tx, |$conn| [let $statement = $crate::eventlog::sql::positional(&$statement)] $body)
    };
    ($tx:expr, |$conn:ident| $body:expr) => {
        on_tx!(@arms $tx, |$conn| [] $body)
    };
    // `$sqlite`: a statement run on SQLite only, before the body.
    (@arms $tx:expr, |$conn:ident| [$($sqlite:stmt)?] $body:expr) => {
        match $tx {
            ProjectorTx::Postgres(tx) => {
                let $conn = &mut **tx;
                $body
            }
            ProjectorTx::Sqlite(tx) => {
                let $conn = &mut **tx;
                $($sqlite)?
                $body
            }
        }
    };
}

// Declared after `on_tx!` so their statements can use the macro.
mod checkpoint;
mod fold;
mod read_ahead;
pub mod runs;
pub mod sources;
pub mod tasks;
pub mod usage;

/// Empties a read model's tables for a rebuild. The one statement that differs by backend: TRUNCATE empties a
/// Postgres table in no time where DELETE would visit each row, and SQLite has no TRUNCATE. But TRUNCATE is not
/// free on tables that are already empty (new files for each table, an exclusive lock, an fsync at commit), and a
/// projector at position 0 resets on every tick until the log has an event: so Postgres first looks whether any
/// table holds a row, and truncates only then. Whether any table held a row.
async fn empty_tables(tx: &mut ProjectorTx, tables: &[&str]) -> Result<bool, sqlx::Error> {
    match tx {
        ProjectorTx::Postgres(tx) => {
            let any_row = tables
                .iter()
                .map(|table| format!("EXISTS (SELECT 1 FROM {table})"))
                .collect::<Vec<_>>()
                .join(" OR ");
            let holds_rows: bool = sqlx::query_scalar(&format!("SELECT {any_row}"))
                .fetch_one(&mut **tx)
                .await?;
            if holds_rows {
                sqlx::query(&format!("TRUNCATE {}", tables.join(", ")))
                    .execute(&mut **tx)
                    .await?;
            }
            Ok(holds_rows)
        }
        ProjectorTx::Sqlite(tx) => {
            let mut deleted = 0;
            for table in tables {
                deleted += sqlx::query(&format!("DELETE FROM {table}"))
                    .execute(&mut **tx)
                    .await?
                    .rows_affected();
            }
            Ok(deleted > 0)
        }
    }
}

pub use checkpoint::read_row;
use checkpoint::{commit, compare_and_set, lock_or_create_row, move_row};
pub use fold::Fold;
use read_ahead::{read_ahead, AbortOnDrop, ReadAhead};

/// A read model. `apply` and `reset` write only through the transaction they are given, and never call out.
pub trait Projector: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    /// Bump when the read model's shape or meaning changes: the runtime rebuilds it from position 0.
    fn version(&self) -> i64;
    /// Whether `apply` reads event bodies; without them the log is read without detoasting a byte of them.
    fn needs_body(&self) -> bool {
        false
    }
    /// Which bodies `apply` reads. A projector of one domain's streams names them here, so the bodies of every
    /// other event (webhooks are most of the log's bytes) are never read for it.
    fn bodies(&self) -> Bodies {
        if self.needs_body() {
            Bodies::All
        } else {
            Bodies::None
        }
    }
    /// Empties the read model (before a rebuild).
    fn reset<'a>(&'a self, tx: &'a mut ProjectorTx) -> BoxFuture<'a, anyhow::Result<()>>;
    /// Applies events, in position order. An error rolls the whole batch back.
    fn apply<'a>(
        &'a self,
        tx: &'a mut ProjectorTx,
        events: &'a [StoredEvent],
    ) -> BoxFuture<'a, anyhow::Result<()>>;
    /// The part of `apply` that needs no database (decoding bodies, say). `replay` runs it on the page it reads
    /// ahead, on the reader's side, while the page before is being applied, and hands the result to
    /// `apply_prepared` with that same page. It must not fail: per-event errors belong in what it returns, for
    /// `apply_prepared` to report exactly as `apply` would.
    fn prepare(&self, _events: &[StoredEvent]) -> Option<Prepared> {
        None
    }
    /// A rebuild from position 0 folds the log into this in memory and writes the read model once
    /// (`projectors/fold.rs`); none: batch by batch, as incremental projection goes.
    fn fold(&self) -> Option<Box<dyn Fold>> {
        None
    }
    /// `apply`, given what `prepare` made of these very events.
    fn apply_prepared<'a>(
        &'a self,
        tx: &'a mut ProjectorTx,
        events: &'a [StoredEvent],
        _prepared: Prepared,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        self.apply(tx, events)
    }
}

/// What a projector's `prepare` made of a page; only that projector's `apply_prepared` opens it.
pub type Prepared = Box<dyn std::any::Any + Send>;

#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The projector failed on a batch; `first..=last` are the positions it held.
    #[error("projector {name} failed on events {first}..={last}: {error:#}")]
    Failed {
        name: &'static str,
        first: i64,
        last: i64,
        error: anyhow::Error,
    },
    #[error(
        "the read model of {name} was built by version {stored}, newer than this build's {ours}; \
         this replica leaves it alone until it is upgraded"
    )]
    NewerVersion {
        name: &'static str,
        stored: i64,
        ours: i64,
    },
    #[error("another instance moved {name} from position {expected}; this batch was rolled back")]
    Conflict { name: &'static str, expected: i64 },
    #[error("projector {name} could not reset its read model: {error:#}")]
    Reset {
        name: &'static str,
        error: anyhow::Error,
    },
    #[error("injected failure after applying events {first}..={last}, before commit")]
    Injected { first: i64, last: i64 },
}

/// What one transaction did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Events `from + 1 ..= to` applied and committed.
    Applied { from: i64, to: i64, events: usize },
    /// Nothing after `position` yet.
    CaughtUp { position: i64 },
}

/// Where a projector is stuck: the event it fails on, and when it tries again.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stuck {
    pub position: i64,
    pub error: String,
    pub failures: u32,
    pub retry_at: DateTime<Utc>,
}

/// A projector's state for `/health` and the replay CLI.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProjectionStatus {
    pub version: i64,
    pub position: i64,
    pub head: i64,
    pub behind: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stuck: Option<Stuck>,
    /// The tick stopped at its time budget with work left: the loop goes again without resting.
    #[serde(skip)]
    pub out_of_time: bool,
}

#[derive(Debug, Default)]
struct RunState {
    stuck: Option<(Stuck, Instant)>,
    /// After a batch failed: go one event at a time up to this position, to find the exact failing event.
    narrow_until: Option<i64>,
}

/// The runtime for one projector over one store.
pub struct Projection {
    store: EventStore,
    projector: Arc<dyn Projector>,
    batch: i64,
    state: Mutex<RunState>,
    inject_failure: AtomicBool,
    tick_budget: Duration,
}

impl std::fmt::Debug for Projection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Projection")
            .field("name", &self.projector.name())
            .field("version", &self.projector.version())
            .finish()
    }
}

/// Progress of a rebuild, for the replay CLI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RebuildProgress {
    pub position: i64,
    pub head: i64,
    pub events: u64,
}

impl Projection {
    pub fn new(store: EventStore, projector: Arc<dyn Projector>) -> Self {
        Self::with_batch(store, projector, SERVE_BATCH)
    }

    pub fn with_batch(store: EventStore, projector: Arc<dyn Projector>, batch: i64) -> Self {
        Self {
            store,
            projector,
            batch: batch.max(1),
            state: Mutex::new(RunState::default()),
            inject_failure: AtomicBool::new(false),
            tick_budget: TICK_BUDGET,
        }
    }

    /// How long one tick may keep applying batches before it hands the loop back.
    pub fn with_tick_budget(mut self, budget: Duration) -> Self {
        self.tick_budget = budget;
        self
    }

    pub fn name(&self) -> &'static str {
        self.projector.name()
    }

    /// Test hook: the next batch is applied, then the transaction is abandoned before commit, as a crash
    /// mid-batch would leave it.
    pub fn inject_failure_before_commit(&self) {
        self.inject_failure.store(true, Ordering::SeqCst);
    }

    /// One transaction: up to `limit` events applied and the checkpoint moved, or nothing at all.
    pub async fn step(&self, limit: i64) -> Result<Step, ProjectionError> {
        self.step_with(limit, None, false).await
    }

    /// [`Self::step`], applying `ahead` when it was read from exactly where the projector stands under its lock
    /// (otherwise the page is dropped and the batch read in the transaction). Events are immutable and commit
    /// in position order (the log's writer lock), so such a page is what the transaction would have read.
    /// `just_reset`: the caller emptied the read model in a transaction it committed a moment ago, so finding it
    /// at position 0 needs no second reset (on Postgres a second TRUNCATE of every table).
    async fn step_with(
        &self,
        limit: i64,
        ahead: Option<ReadAhead>,
        just_reset: bool,
    ) -> Result<Step, ProjectionError> {
        let name = self.projector.name();
        let ours = self.projector.version();
        let mut tx = self.begin().await?;
        let (version, position) = lock_or_create_row(&mut tx, name, ours).await?;
        if version == ours && position == 0 && !just_reset {
            // At position 0 the read model must be empty; it may not be after a dropped row or a half-finished
            // manual cleanup. Cheap when it already is.
            self.reset_in(&mut tx).await?;
        }
        if version > ours {
            return Err(ProjectionError::NewerVersion {
                name,
                stored: version,
                ours,
            });
        }
        let position = if version < ours {
            tracing::info!(
                projector = name,
                from = version,
                to = ours,
                "projector version changed; rebuilding from position 0"
            );
            self.reset_in(&mut tx).await?;
            move_row(&mut tx, name, ours, 0).await?;
            0
        } else {
            position
        };

        let (events, prepared) = match (ahead, &mut tx) {
            (Some(page), _) if page.after == position && !page.events.is_empty() => {
                (page.events, page.prepared)
            }
            (_, ProjectorTx::Postgres(tx)) => (
                crate::eventlog::postgres::read_after_on(
                    tx,
                    position,
                    limit,
                    self.projector.bodies(),
                )
                .await?,
                None,
            ),
            (_, ProjectorTx::Sqlite(tx)) => (
                crate::eventlog::sqlite::read_after_on(
                    tx,
                    position,
                    limit,
                    self.projector.bodies(),
                )
                .await?,
                None,
            ),
        };
        let (Some(first), Some(last)) = (events.first(), events.last()) else {
            commit(tx).await?;
            return Ok(Step::CaughtUp { position });
        };
        let (first, last) = (first.position, last.position);
        let applied = match prepared {
            Some(prepared) => {
                self.projector
                    .apply_prepared(&mut tx, &events, prepared)
                    .await
            }
            None => self.projector.apply(&mut tx, &events).await,
        };
        if let Err(error) = applied {
            return Err(ProjectionError::Failed {
                name,
                first,
                last,
                error,
            });
        }
        if !compare_and_set(&mut tx, name, ours, position, last).await? {
            return Err(ProjectionError::Conflict {
                name,
                expected: position,
            });
        }
        if self.inject_failure.swap(false, Ordering::SeqCst) {
            // Dropping the transaction rolls it back: the writes above and the checkpoint vanish together.
            drop(tx);
            return Err(ProjectionError::Injected { first, last });
        }
        commit(tx).await?;
        metrics::counter!("pidevops_projector_events_total", "projector" => name)
            .increment(events.len() as u64);
        Ok(Step::Applied {
            from: position,
            to: last,
            events: events.len(),
        })
    }

    /// The loop body: catch up (within a time budget), narrowing a failing batch to its event and backing off
    /// on a stuck one. Errors when stuck, so the loop reports the event in `/health`.
    pub async fn tick(&self) -> anyhow::Result<ProjectionStatus> {
        let name = self.projector.name();
        let mut state = self.state.lock().await;
        if let Some((stuck, retry_at)) = &state.stuck {
            if Instant::now() < *retry_at {
                anyhow::bail!(
                    "stuck at position {} ({}), retry {} at {}",
                    stuck.position,
                    stuck.error,
                    stuck.failures + 1,
                    stuck.retry_at.to_rfc3339()
                );
            }
        }
        let started = Instant::now();
        let mut out_of_time = false;
        loop {
            let limit = if state.stuck.is_some() || state.narrow_until.is_some() {
                1
            } else {
                self.batch
            };
            match self.step(limit).await {
                Ok(Step::CaughtUp { .. }) => break,
                Ok(Step::Applied { to, .. }) => {
                    if state.stuck.take().is_some() {
                        tracing::info!(projector = name, position = to, "projector unstuck");
                    }
                    if state.narrow_until.is_some_and(|until| to >= until) {
                        state.narrow_until = None;
                    }
                }
                Err(ProjectionError::Failed { first, last, .. }) if limit > 1 => {
                    // Apply what precedes the bad event, one at a time, and find it.
                    tracing::warn!(
                        projector = name,
                        first,
                        last,
                        "a batch failed; narrowing it to the failing event"
                    );
                    state.narrow_until = Some(last);
                }
                Err(ProjectionError::Failed {
                    first: position,
                    error,
                    ..
                }) => {
                    let failures = state.stuck.as_ref().map_or(0, |(s, _)| s.failures) + 1;
                    let backoff = backoff(failures);
                    let stuck = Stuck {
                        position,
                        error: format!("{error:#}"),
                        failures,
                        retry_at: Utc::now()
                            + chrono::Duration::from_std(backoff).unwrap_or_default(),
                    };
                    metrics::gauge!("pidevops_projector_stuck_position", "projector" => name)
                        .set(position as f64);
                    let message = format!(
                        "stuck at position {position}: {} (attempt {failures}; next in {:?})",
                        stuck.error, backoff
                    );
                    state.stuck = Some((stuck, Instant::now() + backoff));
                    anyhow::bail!(message);
                }
                Err(other) => return Err(other).context(format!("projector {name}")),
            }
            if started.elapsed() > self.tick_budget {
                out_of_time = true;
                break;
            }
        }
        metrics::gauge!("pidevops_projector_stuck_position", "projector" => name).set(0.0);
        let stuck = state.stuck.as_ref().map(|(s, _)| s.clone());
        drop(state);
        let mut status = self.read_status(stuck).await?;
        status.out_of_time = out_of_time;
        metrics::gauge!("pidevops_projector_position", "projector" => name)
            .set(status.position as f64);
        metrics::gauge!("pidevops_projector_lag_events", "projector" => name)
            .set(status.behind as f64);
        Ok(status)
    }

    /// Where this projector stands, from the database.
    pub async fn status(&self) -> anyhow::Result<ProjectionStatus> {
        let stuck = self
            .state
            .lock()
            .await
            .stuck
            .as_ref()
            .map(|(s, _)| s.clone());
        self.read_status(stuck).await
    }

    async fn read_status(&self, stuck: Option<Stuck>) -> anyhow::Result<ProjectionStatus> {
        let (version, position) = read_row(&self.store, self.projector.name())
            .await?
            .unwrap_or((self.projector.version(), 0));
        let head = self.store.head().await?;
        Ok(ProjectionStatus {
            version,
            position,
            head,
            behind: (head - position).max(0),
            stuck,
            out_of_time: false,
        })
    }

    /// Empties the read model and moves its checkpoint to 0, in one transaction.
    pub async fn reset(&self) -> Result<(), ProjectionError> {
        let name = self.projector.name();
        let mut tx = self.begin().await?;
        lock_or_create_row(&mut tx, name, self.projector.version()).await?;
        self.reset_in(&mut tx).await?;
        move_row(&mut tx, name, self.projector.version(), 0).await?;
        commit(tx).await?;
        Ok(())
    }

    /// Rebuilds from position 0 up to the head as it is when the rebuild reaches it. `progress` is called after
    /// every committed batch. A failing event stops the rebuild with its error: replay never skips.
    ///
    /// The next batch is read (on another connection) while the current one is applied: reading is about half
    /// of a rebuild's time (docs/benchmarks.md, "Tasks rebuild"). A projector with a [`Fold`] has the pages folded
    /// in memory and its read model written once (`fold.rs`); what the fold leaves goes batch by batch.
    pub async fn rebuild(
        &self,
        mut progress: impl FnMut(RebuildProgress),
    ) -> Result<RebuildProgress, ProjectionError> {
        // The first page is read while the read model is emptied.
        let (pages, mut ahead) = tokio::sync::mpsc::channel(1);
        let reader = tokio::spawn(read_ahead(
            self.store.clone(),
            self.projector.clone(),
            self.batch,
            pages,
        ));
        let _stop_reader = AbortOnDrop(reader.abort_handle());
        self.reset().await?;
        let mut just_reset = true;
        let mut done = RebuildProgress {
            position: 0,
            head: self.store.head().await?,
            events: 0,
        };
        progress(done);
        if let Some(fold) = self.projector.fold() {
            self.fold_from_zero(fold, &mut ahead, &mut done, &mut progress)
                .await?;
        }
        let mut head = done.head;
        loop {
            let page = match ahead.recv().await {
                Some(page) => Some(page?),
                // The reader saw the head; from here each transaction reads for itself.
                None => None,
            };
            let step = self.step_with(self.batch, page, just_reset).await?;
            just_reset = false;
            match step {
                Step::Applied { to, events, .. } => {
                    done.position = to;
                    done.events += events as u64;
                    if to > head {
                        head = to;
                    }
                    done.head = head;
                    progress(done);
                }
                Step::CaughtUp { position } => {
                    done.position = position;
                    done.head = done.head.max(position);
                    progress(done);
                    return Ok(done);
                }
            }
        }
    }

    async fn begin(&self) -> Result<ProjectorTx, ProjectionError> {
        Ok(match &self.store {
            EventStore::Postgres(s) => {
                let mut tx = s.pool().begin().await?;
                // A read model and its checkpoint commit together, so a commit lost in a database crash is lost
                // whole and simply applied again: no need to wait for the WAL flush.
                sqlx::query("SET LOCAL synchronous_commit = off")
                    .execute(&mut *tx)
                    .await?;
                ProjectorTx::Postgres(tx)
            }
            // IMMEDIATE: take the write lock up front, so two writers queue rather than fail on upgrade.
            EventStore::Sqlite(s) => {
                ProjectorTx::Sqlite(s.pool().begin_with("BEGIN IMMEDIATE").await?)
            }
        })
    }

    async fn reset_in(&self, tx: &mut ProjectorTx) -> Result<(), ProjectionError> {
        let name = self.projector.name();
        self.projector
            .reset(tx)
            .await
            .map_err(|error| ProjectionError::Reset { name, error })
    }
}

fn backoff(failures: u32) -> Duration {
    crate::domain::backoff::Backoff {
        first: FIRST_BACKOFF,
        max_doublings: 16,
        cap: MAX_BACKOFF,
    }
    .after(failures)
}

#[cfg(test)]
mod tests;
