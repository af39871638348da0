//! The event log: the only writer of the `events` table, and the source of truth everything else derives from.
//!
//! Appends go through the appender tasks of this process (three on Postgres, one on SQLite). Each drains whatever
//! requests are waiting into one transaction (group commit: one commit for many events, so throughput rises with
//! concurrency) and answers each caller only after that transaction committed. Inside the transaction a global lock
//! serialises writers, so positions become visible in commit order and a reader polling `position > last` never
//! skips an event that commits late.

mod envelope;
mod meta;
pub(crate) mod postgres;
pub mod sql;
pub(crate) mod sqlite;
pub mod url;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use envelope::Envelope;
pub use meta::Meta;
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

use crate::domain::{NewEvent, Source};
pub use url::DatabaseUrl;

/// Most events one transaction takes; bounds a batch's latency and memory (GitHub bodies reach 25 MiB).
const MAX_BATCH_EVENTS: usize = 256;
const MAX_BATCH_BYTES: usize = 32 * 1024 * 1024;

/// Which event bodies a reader wants. Bodies are most of the log's bytes (GitHub's reach 25 MiB), so a reader
/// that needs only some of them should not pay for detoasting and shipping the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bodies {
    /// No bodies: every event arrives with an empty one.
    None,
    All,
    /// Only events of `source` whose stream starts with `stream_prefix` (e.g. `pidevops`, `task:`); every other
    /// event arrives with an empty body.
    Streams {
        source: &'static str,
        stream_prefix: &'static str,
    },
}

/// What an append returns: the event's place in the log, or the place of the event it duplicates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Appended {
    pub event_id: Uuid,
    pub position: i64,
    pub duplicate: bool,
}

/// An event as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredEvent {
    pub position: i64,
    pub id: Uuid,
    pub source: String,
    pub event_type: String,
    pub dedup_key: String,
    pub stream: Option<String>,
    pub stream_version: Option<i64>,
    pub occurred_at: DateTime<Utc>,
    pub recorded_at: DateTime<Utc>,
    pub action: Option<String>,
    pub repository: Option<String>,
    pub number: Option<i64>,
    pub reference: Option<String>,
    pub content_type: String,
    /// The exact bytes received (for webhooks, the raw request body).
    pub body: Vec<u8>,
    pub meta: Meta,
}

impl StoredEvent {
    /// The record a policy appends when this event moved nothing: `<policy>.ignored`, keyed by this event so it
    /// is written once however often the policy sees it, naming the cause, the reason and `extra` fields.
    pub fn ignored_by(
        &self,
        policy: &str,
        reason: &str,
        extra: serde_json::Map<String, serde_json::Value>,
    ) -> NewEvent {
        let mut body = extra;
        body.insert("cause_event_id".to_owned(), serde_json::json!(self.id));
        body.insert("cause_position".to_owned(), self.position.into());
        body.insert("cause_type".to_owned(), self.event_type.clone().into());
        body.insert("reason".to_owned(), reason.into());
        let mut record = NewEvent::new(
            Source::Pidevops,
            crate::domain::EventType::from_stored(format!("{policy}.ignored")),
            format!("{policy}-ignored:{}", self.id),
            "application/json",
            bytes::Bytes::from(serde_json::Value::Object(body).to_string()),
        );
        record.meta.insert(
            "cause_event_id".to_owned(),
            serde_json::Value::from(self.id.to_string()),
        );
        record
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// The stream moved on since the caller read it; reread and decide again.
    #[error(
        "stream {stream} is at version {actual}, the event expected to write version {expected}"
    )]
    Conflict {
        stream: String,
        expected: i64,
        actual: i64,
    },
    /// A pinned key ([`NewEvent::pinned`]) already stored with another body: the same delivery id carrying
    /// other content is a lie, so it is refused rather than answered as a duplicate. Digests only, never bodies.
    #[error(
        "{provider} delivery {dedup_key} is already stored (position {position}) with a different body: \
         stored sha256 {stored}, received sha256 {received}"
    )]
    DifferentBody {
        provider: Source,
        dedup_key: String,
        event_id: Uuid,
        position: i64,
        stored: String,
        received: String,
    },
    #[error("the event log is unavailable: {0}")]
    Unavailable(String),
    #[error("the event log did not commit within {0:?}")]
    TimedOut(Duration),
    #[error("the event log is shutting down")]
    Closed,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("cannot prepare the embedded database directory {path}: {source}")]
    Directory {
        path: String,
        source: std::io::Error,
    },
    #[error("stored event {position} is corrupt: {reason}")]
    Corrupt { position: i64, reason: String },
}

/// The outcome of one event within a batch, decided under the lock.
#[derive(Debug)]
pub(crate) enum BatchOutcome {
    Appended(Appended),
    /// The key is stored (or inserted earlier in the batch) with another pinned body: the stored event and its
    /// digest.
    DifferentBody {
        event_id: Uuid,
        position: i64,
        stored: [u8; 32],
    },
    Conflict {
        stream: String,
        expected: i64,
        actual: i64,
    },
}

/// A storage backend. A closed set: Postgres in production, SQLite as the embedded default; one conformance suite.
#[derive(Clone, Debug)]
pub enum EventStore {
    Postgres(PostgresStore),
    Sqlite(SqliteStore),
}

impl EventStore {
    /// Connects (creating the embedded database file if needed). Does not migrate.
    pub async fn connect(url: &DatabaseUrl, max_connections: u32) -> Result<Self, StoreError> {
        Ok(match url {
            DatabaseUrl::Postgres(url) => {
                Self::Postgres(PostgresStore::connect(url, max_connections).await?)
            }
            DatabaseUrl::Sqlite(url) => {
                Self::Sqlite(SqliteStore::connect(url, max_connections).await?)
            }
        })
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Self::Postgres(_) => "postgres",
            Self::Sqlite(_) => "sqlite",
        }
    }

    /// How many appender tasks feed this backend. Postgres: several, so batches' transfers overlap the locked
    /// work. SQLite: one, since it has a single writer anyway.
    fn appenders(&self) -> usize {
        match self {
            Self::Postgres(_) => postgres::APPENDERS,
            Self::Sqlite(_) => 1,
        }
    }

    /// Applies pending migrations. Safe when several replicas start at once: Postgres takes an advisory lock,
    /// SQLite a file lock.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        match self {
            Self::Postgres(s) => s.migrate().await,
            Self::Sqlite(s) => s.migrate().await,
        }
    }

    /// A real round trip to the database.
    pub async fn ping(&self) -> Result<(), StoreError> {
        match self {
            Self::Postgres(s) => s.ping().await,
            Self::Sqlite(s) => s.ping().await,
        }
    }

    pub(crate) async fn append_batch(
        &self,
        events: &[NewEvent],
    ) -> Result<Vec<BatchOutcome>, StoreError> {
        match self {
            Self::Postgres(s) => s.append_batch(events).await,
            Self::Sqlite(s) => s.append_batch(events).await,
        }
    }

    /// Events with `position > after`, in position order, at most `limit`.
    pub async fn read_after(&self, after: i64, limit: i64) -> Result<Vec<StoredEvent>, StoreError> {
        crate::on_store!(self, |pool, backend| {
            let sql = format!("SELECT {} {}", backend::COLUMNS, sql::EVENTS_AFTER);
            let rows = sqlx::query(&sql)
                .bind(after)
                .bind(limit)
                .fetch_all(pool)
                .await?;
            rows.iter().map(backend::decode).collect()
        })
    }

    /// Like [`Self::read_after`], with only the bodies asked for (a projector's read, outside its transaction).
    pub async fn read_after_with(
        &self,
        after: i64,
        limit: i64,
        bodies: Bodies,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        crate::on_store!(self, |pool, backend| {
            let mut conn = pool.acquire().await?;
            backend::read_after_on(&mut conn, after, limit, bodies).await
        })
    }

    pub async fn get(&self, id: Uuid) -> Result<Option<StoredEvent>, StoreError> {
        crate::on_store!(self, |pool, backend| {
            let sql = format!("SELECT {} {}", backend::COLUMNS, sql::EVENT_BY_ID);
            let row = sqlx::query(&sql)
                .bind(backend::id_param(id))
                .fetch_optional(pool)
                .await?;
            row.as_ref().map(backend::decode).transpose()
        })
    }

    /// A domain stream's events (`task:T-42`, say), in stream-version order.
    pub async fn read_stream(&self, stream: &str) -> Result<Vec<StoredEvent>, StoreError> {
        crate::on_store!(self, |pool, backend| {
            let sql = format!("SELECT {} {}", backend::COLUMNS, sql::STREAM_EVENTS);
            let rows = sqlx::query(&sql).bind(stream).fetch_all(pool).await?;
            rows.iter().map(backend::decode).collect()
        })
    }

    /// A domain stream's current version (its highest `stream_version`), 0 when it has no events.
    pub async fn stream_version(&self, stream: &str) -> Result<i64, StoreError> {
        crate::on_store!(self, |pool, backend| Ok(sqlx::query_scalar(
            sql::STREAM_VERSION
        )
        .bind(stream)
        .fetch_one(pool)
        .await?))
    }

    /// The highest committed position, 0 for an empty log.
    pub async fn head(&self) -> Result<i64, StoreError> {
        crate::on_store!(self, |pool, backend| Ok(sqlx::query_scalar(sql::HEAD)
            .fetch_one(pool)
            .await?))
    }

    /// A consumer's checkpoint: the last position it has fully handled, 0 if it never ran.
    pub async fn checkpoint(&self, name: &str) -> Result<i64, StoreError> {
        let position: Option<i64> = crate::on_store!(self, |pool, backend| {
            sqlx::query_scalar(sql::CHECKPOINT)
                .bind(name)
                .fetch_optional(pool)
                .await?
        });
        Ok(position.unwrap_or(0))
    }

    /// Moves a checkpoint forward to `position`; never back. Returns the checkpoint as stored afterwards.
    pub async fn advance_checkpoint(&self, name: &str, position: i64) -> Result<i64, StoreError> {
        crate::on_store!(self, |pool, backend| Ok(sqlx::query_scalar(
            sql::ADVANCE_CHECKPOINT
        )
        .bind(name)
        .bind(position)
        .bind(chrono::Utc::now())
        .fetch_one(pool)
        .await?))
    }

    /// The event stored under this `(source, dedup_key)`, if any (the unique constraint's index serves it).
    pub async fn find_by_key(
        &self,
        source: Source,
        dedup_key: &str,
    ) -> Result<Option<StoredEvent>, StoreError> {
        crate::on_store!(self, |pool, backend| {
            let sql = format!("SELECT {} {}", backend::COLUMNS, sql::EVENT_BY_KEY);
            let row = sqlx::query(&sql)
                .bind(source.as_str())
                .bind(dedup_key)
                .fetch_optional(pool)
                .await?;
            row.as_ref().map(backend::decode).transpose()
        })
    }

    /// How many events carry this `(source, dedup_key)`; the unique index makes it 0 or 1.
    pub async fn count_by_key(&self, source: Source, dedup_key: &str) -> Result<i64, StoreError> {
        crate::on_store!(self, |pool, backend| Ok(sqlx::query_scalar(
            sql::COUNT_BY_KEY
        )
        .bind(source.as_str())
        .bind(dedup_key)
        .fetch_one(pool)
        .await?))
    }
}

struct AppendRequest {
    event: NewEvent,
    reply: oneshot::Sender<Result<Appended, AppendError>>,
}

/// Counters of the appender's work, for tests and diagnostics (metrics carry the same in histograms).
#[derive(Debug)]
pub struct AppenderStats {
    transactions: AtomicU64,
    events: AtomicU64,
    /// The highest position this process committed; live readers (SSE) wake on it instead of polling fast.
    committed: watch::Sender<i64>,
    /// Set when a batch fails in the store, cleared by the next batch that commits: while set, `/health` fails
    /// (a database that answers pings but cannot commit, a full disk, is not healthy).
    failing: std::sync::Mutex<Option<AppendFailure>>,
}

/// Appends are failing: since when (the first failure of this run of failures) and the latest error.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AppendFailure {
    pub since: DateTime<Utc>,
    pub error: String,
}

impl Default for AppenderStats {
    fn default() -> Self {
        Self {
            transactions: AtomicU64::default(),
            events: AtomicU64::default(),
            committed: watch::channel(0).0,
            failing: std::sync::Mutex::default(),
        }
    }
}

impl AppenderStats {
    /// Batches that committed.
    pub fn transactions(&self) -> u64 {
        self.transactions.load(Ordering::Relaxed)
    }

    /// Append requests answered from committed batches (new events and duplicates).
    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    /// `Some` while the latest batch failed in the store (none has committed since).
    pub fn failing(&self) -> Option<AppendFailure> {
        self.failing_slot().clone()
    }

    fn failing_slot(&self) -> std::sync::MutexGuard<'_, Option<AppendFailure>> {
        // Only ever assigned whole, so a panic elsewhere cannot leave it half written.
        self.failing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn record_commit(&self) {
        let mut failing = self.failing_slot();
        if let Some(failure) = failing.take() {
            tracing::info!(since = %failure.since, "appends commit again");
        }
    }

    fn record_failure(&self, error: String) {
        let mut failing = self.failing_slot();
        let since = failing.as_ref().map_or_else(Utc::now, |f| f.since);
        *failing = Some(AppendFailure { since, error });
    }
}

/// The handle every writer uses. Cheap to clone; all clones feed the same appender tasks.
#[derive(Clone, Debug)]
pub struct EventLog {
    store: EventStore,
    requests: mpsc::Sender<AppendRequest>,
    timeout: Duration,
    stats: Arc<AppenderStats>,
}

impl std::fmt::Debug for AppendRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppendRequest")
            .field("source", &self.event.source)
            .field("dedup_key", &self.event.dedup_key)
            .finish()
    }
}

impl EventLog {
    /// Starts the appender tasks. They stop when `shutdown` is cancelled, after answering every request already
    /// queued, so a graceful shutdown loses nothing that a caller is waiting on. The returned task ends when they
    /// all have stopped, or as soon as one panics.
    pub fn start(
        store: EventStore,
        timeout: Duration,
        shutdown: CancellationToken,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (requests, receiver) = mpsc::channel(4096);
        let receiver = Arc::new(tokio::sync::Mutex::new(receiver));
        let stats = Arc::new(AppenderStats::default());
        let mut appenders = tokio::task::JoinSet::new();
        for _ in 0..store.appenders() {
            appenders.spawn(run_appender(
                store.clone(),
                receiver.clone(),
                shutdown.clone(),
                timeout,
                stats.clone(),
            ));
        }
        // Ends when every appender has stopped, or as soon as one panics: the caller treats an early end as fatal.
        let task = tokio::spawn(async move {
            while let Some(joined) = appenders.join_next().await {
                if let Err(error) = joined {
                    tracing::error!(%error, "an appender died");
                    return;
                }
            }
        });
        (
            Self {
                store,
                requests,
                timeout,
                stats,
            },
            task,
        )
    }

    pub fn store(&self) -> &EventStore {
        &self.store
    }

    pub fn stats(&self) -> &AppenderStats {
        &self.stats
    }

    /// Changes whenever this process commits new events (to the highest committed position). Events appended
    /// by other replicas do not show here: readers also poll, more slowly.
    pub fn committed(&self) -> watch::Receiver<i64> {
        self.stats.committed.subscribe()
    }

    /// While appends are failing, tries one small real append (an `eventlog.recovered` record naming when the
    /// failures began), so a quiet service learns by itself that the store commits again and `/health` recovers
    /// without waiting for traffic. Does nothing while appends succeed. The heartbeat calls it.
    pub async fn probe_if_failing(&self) -> Result<(), AppendError> {
        let Some(failure) = self.stats.failing() else {
            return Ok(());
        };
        let body = serde_json::json!({ "failing_since": failure.since });
        let record = NewEvent::new(
            Source::Pidevops,
            crate::domain::EventType::from_stored("eventlog.recovered".to_owned()),
            format!("eventlog-recovered:{}", Uuid::now_v7()),
            "application/json",
            bytes::Bytes::from(body.to_string()),
        );
        self.append(record).await.map(|_| ())
    }

    /// Appends one event and returns only once it is durably committed (or known to be a duplicate).
    pub async fn append(&self, event: NewEvent) -> Result<Appended, AppendError> {
        let (reply, answer) = oneshot::channel();
        let request = AppendRequest { event, reply };
        let deadline = Instant::now() + self.timeout;
        tokio::time::timeout_at(deadline.into(), self.requests.send(request))
            .await
            .map_err(|_| AppendError::TimedOut(self.timeout))?
            .map_err(|_| AppendError::Closed)?;
        match tokio::time::timeout_at(deadline.into(), answer).await {
            Err(_) => Err(AppendError::TimedOut(self.timeout)),
            Ok(Err(_)) => Err(AppendError::Closed),
            Ok(Ok(result)) => result,
        }
    }
}

/// One appender: takes whatever is queued (up to a batch) and commits it, until shutdown.
///
/// Several appenders may share the queue. Only one at a time holds the database's writer lock, but while it
/// does, another can gather, encode and ship its batch, so the serial part is just the locked work.
async fn run_appender(
    store: EventStore,
    receiver: Arc<tokio::sync::Mutex<mpsc::Receiver<AppendRequest>>>,
    shutdown: CancellationToken,
    timeout: Duration,
    stats: Arc<AppenderStats>,
) {
    loop {
        let batch = {
            let mut receiver = receiver.lock().await;
            let first = tokio::select! {
                biased;
                request = receiver.recv() => match request {
                    Some(request) => request,
                    None => return,
                },
                _ = shutdown.cancelled() => {
                    // Stop taking new requests, but answer every one already queued.
                    receiver.close();
                    match receiver.recv().await {
                        Some(request) => request,
                        None => return,
                    }
                }
            };
            let mut batch = vec![first];
            let mut bytes = batch[0].event.body.len();
            while batch.len() < MAX_BATCH_EVENTS && bytes < MAX_BATCH_BYTES {
                match receiver.try_recv() {
                    Ok(request) => {
                        bytes += request.event.body.len();
                        batch.push(request);
                    }
                    Err(_) => break,
                }
            }
            batch
        };
        commit_batch(&store, batch, timeout, &stats).await;
    }
}

async fn commit_batch(
    store: &EventStore,
    batch: Vec<AppendRequest>,
    timeout: Duration,
    stats: &AppenderStats,
) {
    let (events, replies): (Vec<NewEvent>, Vec<_>) =
        batch.into_iter().map(|r| (r.event, r.reply)).unzip();
    let started = Instant::now();
    let result = tokio::time::timeout(timeout, store.append_batch(&events)).await;
    let elapsed = started.elapsed();
    metrics::histogram!("pidevops_append_duration_seconds").record(elapsed.as_secs_f64());
    metrics::histogram!("pidevops_append_batch_size").record(events.len() as f64);
    match result {
        Ok(Ok(outcomes)) => {
            stats.record_commit();
            stats.transactions.fetch_add(1, Ordering::Relaxed);
            stats
                .events
                .fetch_add(events.len() as u64, Ordering::Relaxed);
            let highest = outcomes
                .iter()
                .filter_map(|o| match o {
                    BatchOutcome::Appended(a) if !a.duplicate => Some(a.position),
                    _ => None,
                })
                .max();
            if let Some(highest) = highest {
                stats.committed.send_if_modified(|head| {
                    let newer = highest > *head;
                    if newer {
                        *head = highest;
                    }
                    newer
                });
            }
            for ((event, reply), outcome) in events.iter().zip(replies).zip(outcomes) {
                let answer = match outcome {
                    BatchOutcome::Appended(appended) => {
                        if !appended.duplicate {
                            metrics::counter!("pidevops_events_appended_total", "source" => event.source.as_str())
                                .increment(1);
                        }
                        Ok(appended)
                    }
                    BatchOutcome::Conflict {
                        stream,
                        expected,
                        actual,
                    } => Err(AppendError::Conflict {
                        stream,
                        expected,
                        actual,
                    }),
                    BatchOutcome::DifferentBody {
                        event_id,
                        position,
                        stored,
                    } => Err(AppendError::DifferentBody {
                        provider: event.source,
                        dedup_key: event.dedup_key.clone(),
                        event_id,
                        position,
                        stored: hex::encode(stored),
                        received: event.body_digest.map(hex::encode).unwrap_or_default(),
                    }),
                };
                let _ = reply.send(answer);
            }
        }
        Ok(Err(error)) => {
            tracing::warn!(error = %error, events = events.len(), "append batch failed; nothing was committed");
            metrics::counter!("pidevops_append_failures_total").increment(1);
            stats.record_failure(error.to_string());
            for reply in replies {
                let _ = reply.send(Err(AppendError::Unavailable(error.to_string())));
            }
        }
        Err(_) => {
            // The commit may still land; callers get 503 and their retry is answered as a duplicate.
            tracing::warn!(events = events.len(), ?timeout, "append batch timed out");
            metrics::counter!("pidevops_append_failures_total").increment(1);
            for reply in replies {
                let _ = reply.send(Err(AppendError::TimedOut(timeout)));
            }
        }
    }
}

/// A stored `body_digest` column: NULL, or exactly 32 bytes.
pub(crate) fn parse_digest(
    position: i64,
    bytes: Option<Vec<u8>>,
) -> Result<Option<[u8; 32]>, StoreError> {
    bytes
        .map(|b| {
            <[u8; 32]>::try_from(b.as_slice()).map_err(|_| StoreError::Corrupt {
                position,
                reason: format!("body_digest is {} bytes, not 32", b.len()),
            })
        })
        .transpose()
}

/// A key's stored event as `plan_batch` needs it: id, position and body digest (if pinned).
pub(crate) type KeyHolder = (Uuid, i64, Option<[u8; 32]>);

/// Decides, under the writer lock, the outcome of each event exactly as if the events were appended one at a time,
/// in order: a key already stored (in the log or earlier in this batch) is a duplicate of that event, unless both
/// carry a body digest and the digests differ (then it is refused as a different body, and nothing is written for
/// it); an event on a stream must carry the stream's version + 1; anything else takes the next position.
///
/// `existing(i)` is the stored `(id, position, body digest)` for event i's key, `stream_head(name)` the stream's
/// version in the log. Returns the outcomes and the events to insert with their positions, in order. The Postgres
/// backend does the same in `pidevops_append`; the conformance suite holds both to it.
pub(crate) fn plan_batch(
    events: &[NewEvent],
    mut existing: impl FnMut(usize) -> Option<KeyHolder>,
    mut stream_head: impl FnMut(&str) -> i64,
    head: i64,
) -> (Vec<BatchOutcome>, Vec<(usize, i64)>) {
    use std::collections::HashMap;
    let mut outcomes = Vec::with_capacity(events.len());
    let mut inserts = Vec::new();
    let mut next = head;
    let mut inserted: HashMap<(Source, &str), KeyHolder> = HashMap::new();
    let mut heads: HashMap<&str, i64> = HashMap::new();
    for (i, event) in events.iter().enumerate() {
        let key = (event.source, event.dedup_key.as_str());
        if let Some((event_id, position, digest)) =
            inserted.get(&key).copied().or_else(|| existing(i))
        {
            outcomes.push(match (digest, event.body_digest) {
                // Rows without a digest (older ones, unpinned keys) keep deduplicating as they always did.
                (Some(stored), Some(received)) if stored != received => {
                    BatchOutcome::DifferentBody {
                        event_id,
                        position,
                        stored,
                    }
                }
                _ => BatchOutcome::Appended(Appended {
                    event_id,
                    position,
                    duplicate: true,
                }),
            });
            continue;
        }
        if let Some((stream, version)) = &event.stream {
            let current = *heads
                .entry(stream.as_str())
                .or_insert_with(|| stream_head(stream));
            if *version != current + 1 {
                outcomes.push(BatchOutcome::Conflict {
                    stream: stream.clone(),
                    expected: *version,
                    actual: current,
                });
                continue;
            }
            heads.insert(stream.as_str(), *version);
        }
        next += 1;
        inserts.push((i, next));
        inserted.insert(key, (event.id, next, event.body_digest));
        outcomes.push(BatchOutcome::Appended(Appended {
            event_id: event.id,
            position: next,
            duplicate: false,
        }));
    }
    (outcomes, inserts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::EventType;
    use bytes::Bytes;

    fn event(key: &str) -> NewEvent {
        NewEvent::new(
            Source::Github,
            EventType::new(Source::Github, &["push"]),
            key,
            "application/json",
            Bytes::from_static(b"{}"),
        )
    }

    fn streamed(key: &str, stream: &str, version: i64) -> NewEvent {
        let mut e = event(key);
        e.source = Source::Pidevops;
        e.stream = Some((stream.into(), version));
        e
    }

    fn positions(outcomes: &[BatchOutcome]) -> Vec<(i64, bool)> {
        outcomes
            .iter()
            .map(|o| match o {
                BatchOutcome::Appended(a) => (a.position, a.duplicate),
                BatchOutcome::Conflict { .. } => (-1, false),
                BatchOutcome::DifferentBody { .. } => (-2, false),
            })
            .collect()
    }

    #[test]
    fn new_events_take_consecutive_positions_after_the_head() {
        let events = vec![event("a"), event("b"), event("c")];
        let (outcomes, inserts) = plan_batch(&events, |_| None, |_| 0, 41);
        assert_eq!(
            positions(&outcomes),
            vec![(42, false), (43, false), (44, false)]
        );
        assert_eq!(inserts, vec![(0, 42), (1, 43), (2, 44)]);
    }

    #[test]
    fn a_key_repeated_within_a_batch_is_stored_once() {
        let events = vec![event("a"), event("a"), event("b")];
        let (outcomes, inserts) = plan_batch(&events, |_| None, |_| 0, 0);
        assert_eq!(
            positions(&outcomes),
            vec![(1, false), (1, true), (2, false)]
        );
        assert_eq!(inserts.len(), 2);
        let (BatchOutcome::Appended(a), BatchOutcome::Appended(b)) = (&outcomes[0], &outcomes[1])
        else {
            panic!("both appended");
        };
        assert_eq!(
            a.event_id, b.event_id,
            "the duplicate reports the original id"
        );
    }

    #[test]
    fn a_key_already_stored_returns_the_original() {
        let original = Uuid::now_v7();
        let events = vec![event("old"), event("new")];
        let (outcomes, inserts) = plan_batch(
            &events,
            |i| (i == 0).then_some((original, 7, None)),
            |_| 0,
            10,
        );
        assert_eq!(positions(&outcomes), vec![(7, true), (11, false)]);
        assert_eq!(inserts, vec![(1, 11)]);
    }

    #[test]
    fn stream_versions_must_follow_the_head() {
        let events = vec![
            streamed("k1", "task:T-1", 3),
            streamed("k2", "task:T-1", 4),
            streamed("k3", "task:T-1", 4),
            streamed("k4", "task:T-2", 2),
        ];
        let (outcomes, inserts) = plan_batch(
            &events,
            |_| None,
            |s| if s == "task:T-1" { 2 } else { 0 },
            0,
        );
        assert_eq!(
            positions(&outcomes),
            vec![(1, false), (2, false), (-1, false), (-1, false)]
        );
        assert_eq!(inserts, vec![(0, 1), (1, 2)]);
        match &outcomes[2] {
            BatchOutcome::Conflict {
                expected, actual, ..
            } => assert_eq!((*expected, *actual), (4, 4)),
            other => panic!("{other:?}"),
        }
    }

    fn pinned(key: &str, body: &'static [u8]) -> NewEvent {
        let mut e = event(key);
        e.body = Bytes::from_static(body);
        e.pinned()
    }

    #[test]
    fn a_pinned_key_with_another_body_is_refused_not_a_duplicate() {
        let events = vec![
            pinned("a", b"1"),
            pinned("a", b"1"),
            pinned("a", b"2"),
            pinned("b", b"3"),
        ];
        let (outcomes, inserts) = plan_batch(&events, |_| None, |_| 0, 0);
        assert_eq!(
            positions(&outcomes),
            vec![(1, false), (1, true), (-2, false), (2, false)]
        );
        assert_eq!(inserts, vec![(0, 1), (3, 2)]);
        let BatchOutcome::DifferentBody {
            event_id,
            position,
            stored,
        } = &outcomes[2]
        else {
            panic!("{:?}", outcomes[2]);
        };
        assert_eq!((*event_id, *position), (events[0].id, 1));
        assert_eq!(Some(*stored), events[0].body_digest);
    }

    #[test]
    fn a_key_stored_without_a_digest_or_appended_unpinned_stays_a_duplicate() {
        let original = Uuid::now_v7();
        let digest = pinned("x", b"1").body_digest;
        let events = vec![
            pinned("legacy", b"2"),
            event("unpinned"),
            pinned("same", b"1"),
        ];
        let (outcomes, inserts) = plan_batch(
            &events,
            |i| match i {
                0 => Some((original, 3, None)),
                1 => Some((original, 4, digest)),
                _ => Some((original, 5, digest)),
            },
            |_| 0,
            10,
        );
        assert_eq!(positions(&outcomes), vec![(3, true), (4, true), (5, true)]);
        assert!(inserts.is_empty());
    }
}
