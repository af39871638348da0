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

use std::time::Duration;

use async_nats::jetstream::AckKind;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::time::Instant;

mod jetstream;
mod memory;

pub use jetstream::{consumer_config, stream_config, JetstreamWork};
pub use memory::MemoryWork;

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

#[cfg(test)]
mod tests;
