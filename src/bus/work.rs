//! Work queues: the typed, durable hand-off of work (agent runs) from the dispatcher to `pidevops worker`
//! processes, possibly on other machines.
//!
//! Semantics, identical on both backends (`tests/it/work.rs` holds them to it):
//! - `publish(kind, key, &payload)` is idempotent by `key` within the duplicate window (`Nats-Msg-Id` on JetStream).
//! - `pull` hands each message to one consumer at a time; the holder must `ack`, `nak`, `term` or send `progress`
//!   (the heartbeat of a long run) within `ack_wait`, or the message is redelivered to whoever pulls next.
//! - Every delivery carries its 1-based attempt number. After `max_deliver` attempts the message is dead-lettered:
//!   recorded as a `work.dead_lettered` event in the log and terminated, so it is never delivered again. A payload
//!   that does not decode is dead-lettered at once with the decode error.
//!
//! Why the consumer, not the server, enforces `max_deliver`: the JetStream consumer has no delivery limit and
//! `pull` dead-letters any delivery whose attempt exceeds `max_deliver`. A server-side limit stops delivering
//! silently and only emits a core-NATS advisory, which is lost when no listener is up at that moment (every worker
//! crashed mid-run, a deploy) and cannot be retried when the event log is down. With the check on delivery the
//! message stays in the stream until its dead letter is committed: a crash or an append error before `term` only
//! means one more delivery, and the dedup key (stream, its epoch, sequence) makes the second record a no-op.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream, AckKind};
use bytes::Bytes;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::Published;
use crate::domain::{EventType, NewEvent, Source};
use crate::eventlog::{AppendError, Appended, EventLog};

/// The event type of a dead letter (source `pidevops`).
pub const DEAD_LETTERED: &str = "work.dead_lettered";
/// Longest idempotency key accepted; it travels as a header and inside the dead-letter dedup key.
pub const MAX_KEY_LEN: usize = 256;

/// Where work goes and how it is retried. Tests use their own stream, prefix and consumer names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkQueueConfig {
    pub stream: String,
    /// Subjects are `<prefix>.<kind>`.
    pub subject_prefix: String,
    /// The durable consumer every worker shares, so work is split between them, not copied.
    pub consumer: String,
    /// How long a delivery may go without `ack`, `nak`, `term` or `progress` before it is handed out again.
    pub ack_wait: Duration,
    /// Deliveries before a message is dead-lettered (at least 1).
    pub max_deliver: u32,
    /// The default `nak` delay by attempt (`backoff[attempt - 1]`, the last entry repeating). Empty = no delay.
    pub backoff: Vec<Duration>,
    /// Messages held at most; a publish beyond it fails with `WorkError::Full` rather than dropping work.
    pub max_messages: usize,
    /// A second publish with the same key within this window is a duplicate.
    pub duplicate_window: Duration,
}

impl Default for WorkQueueConfig {
    fn default() -> Self {
        Self {
            stream: "PIDEVOPS_WORK".to_owned(),
            subject_prefix: "pidevops.work".to_owned(),
            consumer: "pidevops-workers".to_owned(),
            ack_wait: Duration::from_secs(30),
            max_deliver: 5,
            backoff: [10, 60, 300, 900]
                .into_iter()
                .map(Duration::from_secs)
                .collect(),
            max_messages: 10_000,
            duplicate_window: Duration::from_secs(2 * 60),
        }
    }
}

impl WorkQueueConfig {
    /// `<prefix>.<kind>`; a kind is one NATS subject token so it can never widen a subscription.
    pub fn subject(&self, kind: &str) -> Result<String, WorkError> {
        let ok = !kind.is_empty()
            && kind.len() <= 64
            && kind
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !ok {
            return Err(WorkError::InvalidKind(kind.to_owned()));
        }
        Ok(format!("{}.{kind}", self.subject_prefix))
    }

    /// The `nak` delay after a failed attempt (1-based).
    pub fn backoff_for(&self, attempt: u32) -> Duration {
        let index = (attempt.max(1) - 1) as usize;
        self.backoff
            .get(index)
            .or(self.backoff.last())
            .copied()
            .unwrap_or(Duration::ZERO)
    }

    fn validate(&self) -> Result<(), WorkError> {
        let bad = |what: &str| Err(WorkError::Config(what.to_owned()));
        if self.max_deliver == 0 {
            return bad("max_deliver must be at least 1");
        }
        if self.ack_wait.is_zero() {
            return bad("ack_wait must be positive");
        }
        if self.max_messages == 0 {
            return bad("max_messages must be at least 1");
        }
        let token = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        if !token(&self.stream) || !token(&self.consumer) {
            return bad("stream and consumer names must be non-empty [A-Za-z0-9_-]");
        }
        if self.subject_prefix.is_empty() || self.subject_prefix.split('.').any(|t| !token(t)) {
            return bad("subject_prefix must be dot-separated [A-Za-z0-9_-] tokens");
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    #[error("cannot reach NATS: {0}")]
    Connect(String),
    #[error("the work stream could not be set up: {0}")]
    Stream(String),
    #[error("the work consumer could not be set up: {0}")]
    Consumer(String),
    #[error("invalid work queue configuration: {0}")]
    Config(String),
    #[error("work kind {0:?} is not one subject token of 1-64 [A-Za-z0-9_-]")]
    InvalidKind(String),
    #[error("work key {0:?} must be 1-256 printable ASCII characters")]
    InvalidKey(String),
    #[error("the work payload could not be encoded: {0}")]
    Encode(String),
    #[error("work queue {stream} is full ({max} messages); nothing was stored")]
    Full { stream: String, max: usize },
    #[error("publish was not acknowledged: {0}")]
    Publish(String),
    #[error("cannot pull work: {0}")]
    Pull(String),
    #[error("{op} of work message {sequence} was not confirmed: {reason}")]
    Ack {
        op: &'static str,
        sequence: u64,
        reason: String,
    },
    #[error("the dead letter for work message {sequence} was not recorded: {source}")]
    DeadLetter { sequence: u64, source: AppendError },
}

/// Why a message was dead-lettered; stored in the event as `reason` (and `action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadReason {
    /// Delivered `max_deliver` times without an ack (workers crashed, timed out or nak'd).
    MaxDeliveries,
    /// The holder reported failure on its last attempt.
    Failed,
    /// The payload did not decode as the queue's type.
    Malformed,
}

impl DeadReason {
    fn as_str(self) -> &'static str {
        match self {
            Self::MaxDeliveries => "max_deliveries",
            Self::Failed => "failed",
            Self::Malformed => "malformed",
        }
    }
}

/// What `Delivery::fail` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failed {
    /// Handed back; redelivered no sooner than `after`.
    Retrying { after: Duration },
    /// That was the last attempt: recorded at this log position and terminated.
    DeadLettered(Appended),
}

/// A work queue: a backend plus the event log its dead letters go to. Cheap to clone; a clone shares the
/// backend's connection (JetStream) or state (in-process).
#[derive(Clone, Debug)]
pub struct WorkQueue {
    backend: WorkBackend,
    log: EventLog,
}

/// A closed set of backends, like the bus and the event store.
#[derive(Clone, Debug)]
pub enum WorkBackend {
    Jetstream(JetstreamWork),
    Memory(MemoryWork),
}

/// One message as a backend hands it out, before the queue decides whether it is live work.
struct Raw {
    sequence: u64,
    subject: String,
    key: String,
    attempt: u32,
    payload: Bytes,
    handle: Handle,
}

/// How to settle one delivery with its backend.
#[derive(Clone, Debug)]
enum Handle {
    Jetstream {
        client: async_nats::Client,
        reply: async_nats::Subject,
    },
    Memory(MemoryWork),
}

/// What to tell the backend about a delivery.
#[derive(Clone, Copy, Debug)]
enum Settle {
    Ack,
    Nak(Duration),
    Progress,
    Term,
}

impl Settle {
    fn name(self) -> &'static str {
        match self {
            Self::Ack => "ack",
            Self::Nak(_) => "nak",
            Self::Progress => "progress",
            Self::Term => "term",
        }
    }
}

impl Handle {
    async fn settle(&self, sequence: u64, how: Settle) -> Result<(), WorkError> {
        match self {
            Self::Jetstream { client, reply } => {
                let kind = match how {
                    Settle::Ack => AckKind::Ack,
                    Settle::Nak(delay) => AckKind::Nak(Some(delay)),
                    Settle::Progress => AckKind::Progress,
                    Settle::Term => AckKind::Term,
                };
                // A request, not a plain publish: the server answers once it has applied the ack, so `ack()`
                // returning Ok means the work will not come back.
                client
                    .request(reply.clone(), Bytes::from(kind))
                    .await
                    .map(|_| ())
                    .map_err(|e| WorkError::Ack {
                        op: how.name(),
                        sequence,
                        reason: e.to_string(),
                    })
            }
            Self::Memory(queue) => {
                queue.settle(sequence, how);
                Ok(())
            }
        }
    }
}

impl WorkQueue {
    /// JetStream at `nats_url` (stream and consumer created or updated), or the in-process queue when there is none.
    pub async fn connect(
        nats_url: Option<&str>,
        config: WorkQueueConfig,
        log: EventLog,
    ) -> Result<Self, WorkError> {
        let backend = match nats_url {
            Some(url) => WorkBackend::Jetstream(JetstreamWork::connect(url, config).await?),
            None => WorkBackend::Memory(MemoryWork::new(config)?),
        };
        Ok(Self::new(backend, log))
    }

    pub fn new(backend: WorkBackend, log: EventLog) -> Self {
        Self { backend, log }
    }

    pub fn backend(&self) -> &WorkBackend {
        &self.backend
    }

    pub fn kind(&self) -> &'static str {
        match &self.backend {
            WorkBackend::Jetstream(_) => "nats",
            WorkBackend::Memory(_) => "memory",
        }
    }

    pub fn config(&self) -> &WorkQueueConfig {
        match &self.backend {
            WorkBackend::Jetstream(b) => &b.inner.config,
            WorkBackend::Memory(b) => &b.config,
        }
    }

    /// Messages the queue holds: waiting, in flight, or handed back with a delay.
    pub async fn held(&self) -> Result<u64, WorkError> {
        match &self.backend {
            WorkBackend::Jetstream(b) => b.held().await,
            WorkBackend::Memory(b) => Ok(b.len() as u64),
        }
    }

    /// Enqueues `payload` as JSON under `kind`, idempotent by `key` within the duplicate window.
    pub async fn publish<T: Serialize>(
        &self,
        kind: &str,
        key: &str,
        payload: &T,
    ) -> Result<Published, WorkError> {
        let subject = self.config().subject(kind)?;
        let valid_key = !key.is_empty()
            && key.len() <= MAX_KEY_LEN
            && key.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
        if !valid_key {
            return Err(WorkError::InvalidKey(key.to_owned()));
        }
        let body =
            Bytes::from(serde_json::to_vec(payload).map_err(|e| WorkError::Encode(e.to_string()))?);
        match &self.backend {
            WorkBackend::Jetstream(b) => b.publish(subject, key, body).await,
            WorkBackend::Memory(b) => b.publish(subject, key, body),
        }
    }

    /// Up to `max` deliveries, waiting at most `wait` for the first. Dead-letters (and skips) deliveries past
    /// `max_deliver` and payloads that do not decode as `T`, so an empty result means no live work arrived.
    pub async fn pull<T: DeserializeOwned>(
        &self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery<T>>, WorkError> {
        let deadline = Instant::now() + wait;
        let max = max.max(1);
        loop {
            let raws = match &self.backend {
                WorkBackend::Jetstream(b) => b.pull(max, deadline).await?,
                WorkBackend::Memory(b) => b.pull(max, deadline).await,
            };
            let mut out = Vec::new();
            let empty = raws.is_empty();
            for raw in raws {
                if raw.attempt > self.config().max_deliver {
                    let attempts = raw.attempt - 1;
                    self.bury(raw, attempts, DeadReason::MaxDeliveries, None)
                        .await;
                    continue;
                }
                match serde_json::from_slice::<T>(&raw.payload) {
                    Ok(payload) => out.push(Delivery {
                        payload,
                        raw,
                        queue: self.clone(),
                    }),
                    Err(e) => {
                        let error =
                            format!("payload is not a valid {}: {e}", std::any::type_name::<T>());
                        let attempts = raw.attempt;
                        self.bury(raw, attempts, DeadReason::Malformed, Some(error))
                            .await;
                    }
                }
            }
            // Everything pulled may have been dead letters; keep waiting for live work until the deadline.
            if !out.is_empty() || empty || Instant::now() >= deadline {
                return Ok(out);
            }
        }
    }

    /// Dead-letters a delivery the caller cannot return; on failure it is handed back to be tried again later,
    /// since losing work silently is worse than one more delivery.
    async fn bury(&self, raw: Raw, attempts: u32, reason: DeadReason, last_error: Option<String>) {
        if let Err(error) = self.dead_letter(&raw, attempts, reason, last_error).await {
            tracing::warn!(%error, sequence = raw.sequence, "dead letter not recorded; the message will be redelivered");
            let delay = self.config().backoff_for(raw.attempt);
            if let Err(error) = raw.handle.settle(raw.sequence, Settle::Nak(delay)).await {
                tracing::warn!(%error, "nak after a failed dead letter");
            }
        }
    }

    /// Records the dead letter, then terminates the message. The dedup key makes a second record (after a crash
    /// between the two steps) return the first.
    async fn dead_letter(
        &self,
        raw: &Raw,
        attempts: u32,
        reason: DeadReason,
        last_error: Option<String>,
    ) -> Result<Appended, WorkError> {
        let config = self.config();
        let epoch = match &self.backend {
            WorkBackend::Jetstream(b) => &b.inner.epoch,
            WorkBackend::Memory(b) => &b.epoch,
        };
        let payload =
            serde_json::from_slice::<serde_json::Value>(&raw.payload).unwrap_or_else(|_| {
                serde_json::Value::String(String::from_utf8_lossy(&raw.payload).into_owned())
            });
        let body = serde_json::json!({
            "stream": config.stream,
            "sequence": raw.sequence,
            "subject": raw.subject,
            "key": raw.key,
            "attempts": attempts,
            "reason": reason,
            "last_error": last_error,
            "payload": payload,
        });
        let body = serde_json::to_vec(&body).map_err(|e| WorkError::Encode(e.to_string()))?;
        let mut event = NewEvent::new(
            Source::Pidevops,
            // A constant, already a valid NATS-safe name; pidevops' own types carry no source prefix.
            EventType::from_stored(DEAD_LETTERED.to_owned()),
            format!("{DEAD_LETTERED}:{}:{epoch}:{}", config.stream, raw.sequence),
            "application/json",
            Bytes::from(body),
        );
        event.subject.action = Some(reason.as_str().to_owned());
        event.subject.reference = Some(raw.key.clone());
        let appended = self
            .log
            .append(event)
            .await
            .map_err(|source| WorkError::DeadLetter {
                sequence: raw.sequence,
                source,
            })?;
        if !appended.duplicate {
            metrics::counter!("pidevops_work_dead_lettered_total", "reason" => reason.as_str())
                .increment(1);
        }
        raw.handle.settle(raw.sequence, Settle::Term).await?;
        Ok(appended)
    }
}

/// One delivery of a message: the decoded payload, which attempt this is, and how to settle it. Settling consumes
/// the delivery; dropping it unsettled means it comes back after `ack_wait`.
pub struct Delivery<T> {
    payload: T,
    raw: Raw,
    queue: WorkQueue,
}

impl<T: std::fmt::Debug> std::fmt::Debug for Delivery<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("subject", &self.raw.subject)
            .field("key", &self.raw.key)
            .field("sequence", &self.raw.sequence)
            .field("attempt", &self.raw.attempt)
            .field("payload", &self.payload)
            .finish()
    }
}

impl<T> Delivery<T> {
    pub fn payload(&self) -> &T {
        &self.payload
    }

    /// 1-based: 1 on first delivery, `max_deliver` on the last one a worker gets.
    pub fn attempt(&self) -> u32 {
        self.raw.attempt
    }

    pub fn is_last_attempt(&self) -> bool {
        self.raw.attempt >= self.queue.config().max_deliver
    }

    /// The idempotency key it was published with.
    pub fn key(&self) -> &str {
        &self.raw.key
    }

    /// The `kind` it was published under.
    pub fn kind(&self) -> &str {
        self.raw
            .subject
            .rsplit_once('.')
            .map_or(self.raw.subject.as_str(), |(_, kind)| kind)
    }

    /// The backend's sequence number of the message (stable across redeliveries).
    pub fn sequence(&self) -> u64 {
        self.raw.sequence
    }

    /// Done: the message is removed and never delivered again.
    pub async fn ack(self) -> Result<(), WorkError> {
        self.raw.handle.settle(self.raw.sequence, Settle::Ack).await
    }

    /// Hands the message back, to be redelivered no sooner than `delay` (default: the backoff for this attempt).
    pub async fn nak(self, delay: Option<Duration>) -> Result<(), WorkError> {
        let delay = delay.unwrap_or_else(|| self.queue.config().backoff_for(self.raw.attempt));
        self.raw
            .handle
            .settle(self.raw.sequence, Settle::Nak(delay))
            .await
    }

    /// Still working: restarts the `ack_wait` clock. A long run sends this well inside every `ack_wait`.
    pub async fn progress(&self) -> Result<(), WorkError> {
        self.raw
            .handle
            .settle(self.raw.sequence, Settle::Progress)
            .await
    }

    /// Never deliver again, without recording anything (for work that became moot).
    pub async fn term(self) -> Result<(), WorkError> {
        self.raw
            .handle
            .settle(self.raw.sequence, Settle::Term)
            .await
    }

    /// The attempt failed with `error`: retry after the backoff, or on the last attempt dead-letter it with the
    /// error recorded (the one case where the last error is known). If that record cannot be written, the
    /// message comes back after `ack_wait` and is dead-lettered then, without the error.
    pub async fn fail(self, error: &str) -> Result<Failed, WorkError> {
        if self.is_last_attempt() {
            let appended = self
                .queue
                .dead_letter(
                    &self.raw,
                    self.raw.attempt,
                    DeadReason::Failed,
                    Some(error.to_owned()),
                )
                .await?;
            Ok(Failed::DeadLettered(appended))
        } else {
            let after = self.queue.config().backoff_for(self.raw.attempt);
            self.nak(Some(after)).await?;
            Ok(Failed::Retrying { after })
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// JetStream

/// The work stream's explicit configuration; applied at start-up (created, or updated to match). Accepted by
/// nats-server 2.9 and 2.10+.
pub fn stream_config(config: &WorkQueueConfig) -> stream::Config {
    stream::Config {
        name: config.stream.clone(),
        subjects: vec![format!("{}.>", config.subject_prefix)],
        // A message lives until it is acked or terminated; one consumer group owns it.
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        // Refuse new work when full rather than drop queued work.
        discard: stream::DiscardPolicy::New,
        max_messages: i64::try_from(config.max_messages).unwrap_or(i64::MAX),
        max_bytes: -1,
        // Work never ages out silently; it is acked, terminated or dead-lettered.
        max_age: Duration::ZERO,
        duplicate_window: config.duplicate_window,
        num_replicas: 1,
        ..Default::default()
    }
}

/// The durable pull consumer every worker shares.
pub fn consumer_config(config: &WorkQueueConfig) -> consumer::pull::Config {
    consumer::pull::Config {
        durable_name: Some(config.consumer.clone()),
        description: Some("pidevops workers".to_owned()),
        deliver_policy: consumer::DeliverPolicy::All,
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait: config.ack_wait,
        // Unlimited on the server: `pull` enforces `max_deliver` and dead-letters (see the module comment).
        max_deliver: -1,
        // No server-side backoff: it would replace `ack_wait` as the heartbeat deadline. `nak` applies the backoff.
        backoff: Vec::new(),
        replay_policy: consumer::ReplayPolicy::Instant,
        ..Default::default()
    }
}

#[derive(Clone)]
pub struct JetstreamWork {
    /// Shared by clones: the consumer handle caches its (large) info, and every delivery carries a queue.
    inner: Arc<JetstreamInner>,
}

struct JetstreamInner {
    config: WorkQueueConfig,
    client: async_nats::Client,
    context: jetstream::Context,
    consumer: consumer::PullConsumer,
    /// The stream's creation time: sequences restart when a stream is re-created, so dead-letter keys carry it.
    epoch: String,
}

impl std::fmt::Debug for JetstreamWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetstreamWork")
            .field("config", &self.inner.config)
            .finish()
    }
}

/// A header's first value by name, compared as text (see `jetstream.rs`).
fn header<'a>(headers: Option<&'a async_nats::HeaderMap>, name: &str) -> Option<&'a str> {
    headers?
        .iter()
        .find(|(key, _)| AsRef::<str>::as_ref(*key).eq_ignore_ascii_case(name))
        .and_then(|(_, values)| values.first())
        .map(|v| v.as_str())
}

impl JetstreamWork {
    pub async fn connect(url: &str, config: WorkQueueConfig) -> Result<Self, WorkError> {
        config.validate()?;
        let client = async_nats::ConnectOptions::new()
            .name("pidevops-work")
            .connection_timeout(Duration::from_secs(3))
            .connect(url)
            .await
            .map_err(|e| WorkError::Connect(e.to_string()))?;
        let context = jetstream::new(client.clone());
        let wanted = stream_config(&config);
        let created = match context.get_stream(&config.stream).await {
            Ok(_) => {
                context
                    .update_stream(wanted)
                    .await
                    .map_err(|e| WorkError::Stream(format!("updating {}: {e}", config.stream)))?
                    .created
            }
            Err(_) => {
                context
                    .create_stream(wanted)
                    .await
                    .map_err(|e| WorkError::Stream(format!("creating {}: {e}", config.stream)))?
                    .cached_info()
                    .created
            }
        };
        let consumer = context
            .create_consumer_on_stream(consumer_config(&config), &config.stream)
            .await
            .map_err(|e| WorkError::Consumer(format!("{}: {e}", config.consumer)))?;
        Ok(Self {
            inner: Arc::new(JetstreamInner {
                config,
                client,
                context,
                consumer,
                epoch: created.unix_timestamp_nanos().to_string(),
            }),
        })
    }

    /// Removes the stream (and its consumer); for tests that make their own.
    pub async fn delete_stream(&self) -> Result<(), WorkError> {
        self.inner
            .context
            .delete_stream(&self.inner.config.stream)
            .await
            .map(|_| ())
            .map_err(|e| WorkError::Stream(e.to_string()))
    }

    async fn held(&self) -> Result<u64, WorkError> {
        let mut stream = self
            .inner
            .context
            .get_stream(&self.inner.config.stream)
            .await
            .map_err(|e| WorkError::Stream(e.to_string()))?;
        let info = stream
            .info()
            .await
            .map_err(|e| WorkError::Stream(e.to_string()))?;
        Ok(info.state.messages)
    }

    async fn publish(
        &self,
        subject: String,
        key: &str,
        body: Bytes,
    ) -> Result<Published, WorkError> {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", key);
        let full = |e: &dyn std::fmt::Display| {
            let text = e.to_string();
            if text.contains("maximum messages") {
                WorkError::Full {
                    stream: self.inner.config.stream.clone(),
                    max: self.inner.config.max_messages,
                }
            } else {
                WorkError::Publish(text)
            }
        };
        let ack = self
            .inner
            .context
            .publish_with_headers(subject, headers, body)
            .await
            .map_err(|e| full(&e))?
            .await
            .map_err(|e| full(&e))?;
        Ok(Published {
            sequence: ack.sequence,
            duplicate: ack.duplicate,
        })
    }

    /// Takes what is ready at once; if nothing is, waits for one message until `deadline`, then takes whatever
    /// else is ready. Every pull request is fully drained, so no message is delivered to a request nobody reads
    /// (which would burn one of its attempts).
    async fn pull(&self, max: usize, deadline: Instant) -> Result<Vec<Raw>, WorkError> {
        let mut out = self.fetch_ready(max).await?;
        if out.is_empty() {
            let wait = deadline.saturating_duration_since(Instant::now());
            if wait < Duration::from_millis(10) {
                return Ok(out);
            }
            let mut batch = self
                .inner
                .consumer
                .batch()
                .max_messages(1)
                .expires(wait)
                .messages()
                .await
                .map_err(|e| WorkError::Pull(e.to_string()))?;
            while let Some(message) = batch.next().await {
                let message = message.map_err(|e| WorkError::Pull(e.to_string()))?;
                out.push(self.raw(message)?);
            }
            if !out.is_empty() && max > 1 {
                out.extend(self.fetch_ready(max - 1).await?);
            }
        }
        Ok(out)
    }

    async fn fetch_ready(&self, max: usize) -> Result<Vec<Raw>, WorkError> {
        let mut fetched = self
            .inner
            .consumer
            .fetch()
            .max_messages(max)
            .messages()
            .await
            .map_err(|e| WorkError::Pull(e.to_string()))?;
        let mut out = Vec::new();
        while let Some(message) = fetched.next().await {
            let message = message.map_err(|e| WorkError::Pull(e.to_string()))?;
            out.push(self.raw(message)?);
        }
        Ok(out)
    }

    fn raw(&self, message: jetstream::Message) -> Result<Raw, WorkError> {
        let info = message
            .info()
            .map_err(|e| WorkError::Pull(format!("not a JetStream delivery: {e}")))?;
        let (sequence, delivered) = (info.stream_sequence, info.delivered);
        let reply = message
            .message
            .reply
            .clone()
            .ok_or_else(|| WorkError::Pull(format!("message {sequence} has no ack subject")))?;
        Ok(Raw {
            sequence,
            subject: message.message.subject.to_string(),
            key: header(message.message.headers.as_ref(), "Nats-Msg-Id")
                .unwrap_or_default()
                .to_owned(),
            attempt: u32::try_from(delivered.max(1)).unwrap_or(u32::MAX),
            payload: message.message.payload.clone(),
            handle: Handle::Jetstream {
                client: self.inner.client.clone(),
                reply,
            },
        })
    }
}

// ---------------------------------------------------------------------------------------------------------------
// In-process

/// The in-process twin: the embedded default and JetStream's stand-in in tests. Same semantics, real clocks.
/// Clones share the queue, like workers sharing the durable consumer.
#[derive(Clone)]
pub struct MemoryWork {
    config: WorkQueueConfig,
    epoch: String,
    inner: Arc<Mutex<MemoryInner>>,
    /// Woken on publish and nak so a waiting `pull` need not poll.
    changed: Arc<Notify>,
}

impl std::fmt::Debug for MemoryWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryWork")
            .field("config", &self.config)
            .finish()
    }
}

#[derive(Debug, Default)]
struct MemoryInner {
    last_sequence: u64,
    messages: BTreeMap<u64, MemoryMessage>,
    /// Keys seen within the duplicate window, with their sequence and when they were published.
    recent: HashMap<String, (u64, Instant)>,
}

#[derive(Debug)]
struct MemoryMessage {
    subject: String,
    key: String,
    payload: Bytes,
    delivered: u32,
    /// Ready at this instant when not held; held until it when `held`.
    due: Instant,
    held: bool,
}

impl MemoryWork {
    pub fn new(config: WorkQueueConfig) -> Result<Self, WorkError> {
        config.validate()?;
        Ok(Self {
            config,
            epoch: uuid::Uuid::now_v7().simple().to_string(),
            inner: Arc::new(Mutex::new(MemoryInner::default())),
            changed: Arc::new(Notify::new()),
        })
    }

    fn with<R>(&self, f: impl FnOnce(&mut MemoryInner) -> R) -> R {
        // Every update below leaves the state consistent before it could panic, so a poisoned lock is usable.
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    fn publish(&self, subject: String, key: &str, payload: Bytes) -> Result<Published, WorkError> {
        let now = Instant::now();
        let window = self.config.duplicate_window;
        let result = self.with(|inner| {
            inner
                .recent
                .retain(|_, (_, at)| now.duration_since(*at) < window);
            if let Some(&(sequence, _)) = inner.recent.get(key) {
                return Ok(Published {
                    sequence,
                    duplicate: true,
                });
            }
            if inner.messages.len() >= self.config.max_messages {
                return Err(WorkError::Full {
                    stream: self.config.stream.clone(),
                    max: self.config.max_messages,
                });
            }
            inner.last_sequence += 1;
            let sequence = inner.last_sequence;
            inner.messages.insert(
                sequence,
                MemoryMessage {
                    subject,
                    key: key.to_owned(),
                    payload,
                    delivered: 0,
                    due: now,
                    held: false,
                },
            );
            inner.recent.insert(key.to_owned(), (sequence, now));
            Ok(Published {
                sequence,
                duplicate: false,
            })
        });
        self.changed.notify_waiters();
        result
    }

    /// Hands out up to `max` messages that are ready or whose holder missed `ack_wait`, oldest first.
    fn take(&self, max: usize, now: Instant) -> (Vec<Raw>, Option<Instant>) {
        let ack_wait = self.config.ack_wait;
        self.with(|inner| {
            let mut out = Vec::new();
            let mut next_due: Option<Instant> = None;
            for (&sequence, m) in inner.messages.iter_mut() {
                if m.due > now {
                    next_due = Some(next_due.map_or(m.due, |d| d.min(m.due)));
                    continue;
                }
                if out.len() >= max {
                    break;
                }
                m.delivered = m.delivered.saturating_add(1);
                m.held = true;
                m.due = now + ack_wait;
                out.push(Raw {
                    sequence,
                    subject: m.subject.clone(),
                    key: m.key.clone(),
                    attempt: m.delivered,
                    payload: m.payload.clone(),
                    handle: Handle::Memory(self.clone()),
                });
            }
            (out, next_due)
        })
    }

    async fn pull(&self, max: usize, deadline: Instant) -> Vec<Raw> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before looking, so a publish between the look and the wait still wakes us.
            changed.as_mut().enable();
            let now = Instant::now();
            let (out, next_due) = self.take(max, now);
            if !out.is_empty() || now >= deadline {
                return out;
            }
            let wake = next_due.map_or(deadline, |d| d.min(deadline));
            let _ = tokio::time::timeout_at(wake, changed).await;
        }
    }

    /// By sequence, whichever delivery holds the message now, as JetStream does: a late ack from a worker that
    /// overran `ack_wait` still completes the work.
    fn settle(&self, sequence: u64, how: Settle) {
        let now = Instant::now();
        self.with(|inner| match how {
            Settle::Ack | Settle::Term => {
                inner.messages.remove(&sequence);
            }
            Settle::Nak(delay) => {
                if let Some(m) = inner.messages.get_mut(&sequence) {
                    m.held = false;
                    m.due = now + delay;
                }
            }
            Settle::Progress => {
                if let Some(m) = inner.messages.get_mut(&sequence) {
                    if m.held {
                        m.due = now + self.config.ack_wait;
                    }
                }
            }
        });
        self.changed.notify_waiters();
    }

    /// Messages held (queued or in flight).
    pub fn len(&self) -> usize {
        self.with(|inner| inner.messages.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_repeats_its_last_step_and_defaults_to_none() {
        let mut c = WorkQueueConfig {
            backoff: vec![Duration::from_secs(1), Duration::from_secs(5)],
            ..WorkQueueConfig::default()
        };
        assert_eq!(c.backoff_for(1), Duration::from_secs(1));
        assert_eq!(c.backoff_for(2), Duration::from_secs(5));
        assert_eq!(c.backoff_for(9), Duration::from_secs(5));
        c.backoff.clear();
        assert_eq!(c.backoff_for(3), Duration::ZERO);
    }

    #[test]
    fn kinds_are_single_subject_tokens() {
        let c = WorkQueueConfig::default();
        assert_eq!(c.subject("run").unwrap(), "pidevops.work.run");
        for bad in ["", "a.b", "*", ">", "a b", &"x".repeat(65)] {
            assert!(c.subject(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn configs_are_validated() {
        let ok = WorkQueueConfig::default();
        assert!(ok.validate().is_ok());
        for bad in [
            WorkQueueConfig {
                max_deliver: 0,
                ..ok.clone()
            },
            WorkQueueConfig {
                ack_wait: Duration::ZERO,
                ..ok.clone()
            },
            WorkQueueConfig {
                stream: "A.B".into(),
                ..ok.clone()
            },
            WorkQueueConfig {
                subject_prefix: "a.>".into(),
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
