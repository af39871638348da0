//! The appender tasks: every writer's requests, drained into one transaction per batch (group commit), each
//! caller answered only after that transaction committed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{AppendError, Appended, BatchOutcome, EventStore, MAX_BATCH_BYTES, MAX_BATCH_EVENTS};
use crate::domain::{NewEvent, Source};

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

/// How many times [`EventLog::append_at_end`] reads a stream's end again after another writer took it.
pub const AT_END_ATTEMPTS: usize = 8;

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

    /// Appends `event` at the end of `stream`: at the version after the last one read, the stream's version read
    /// again and the append retried when another writer took that version first. After [`AT_END_ATTEMPTS`]
    /// conflicts in a row, the last one is the answer (the stream kept changing).
    pub async fn append_at_end(
        &self,
        stream: &str,
        mut event: NewEvent,
    ) -> Result<Appended, AppendError> {
        let mut conflict = None;
        for _ in 0..AT_END_ATTEMPTS {
            let version = self
                .store
                .stream_version(stream)
                .await
                .map_err(|error| AppendError::Unavailable(error.to_string()))?;
            event.stream = Some((stream.to_owned(), version + 1));
            match self.append(event.clone()).await {
                Err(error @ AppendError::Conflict { .. }) => conflict = Some(error),
                answer => return answer,
            }
        }
        Err(conflict.unwrap_or(AppendError::Closed))
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
