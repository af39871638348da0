//! The bus: replayable fan-out of the event log. Postgres stays the system of record; the bus only ever carries
//! what the log already committed, so it can always be re-fed from the log.
//!
//! Two backends, one conformance suite (`tests/it/bus.rs`): NATS JetStream when `NATS_URL` is set, and an in-process
//! twin with the same semantics (publish is idempotent by event id, messages keep publish order, the last
//! message's position is readable) for the embedded default and for tests.

pub mod credentials;
mod jetstream;
mod memory;
pub mod relay;
pub mod work;

use bytes::Bytes;
use uuid::Uuid;

pub use jetstream::{JetstreamBus, Pending as JetstreamPending};

/// The JetStream stream settings, for operators and tests.
pub mod jetstream_settings {
    pub use super::jetstream::{stream_config, DUPLICATE_WINDOW, MAX_AGE};
}
pub use memory::MemoryBus;

use crate::eventlog::StoredEvent;

/// Header carrying the event's position in the log.
pub const POSITION_HEADER: &str = "Pidevops-Position";

/// Where messages go: the stream and its subject prefix. Tests use their own so they never share state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BusConfig {
    pub stream: String,
    /// Subjects are `<prefix>.<source>.<type without the source>`.
    pub subject_prefix: String,
}

impl Default for BusConfig {
    fn default() -> Self {
        Self {
            stream: "PIDEVOPS_EVENTS".to_owned(),
            subject_prefix: "pidevops.events".to_owned(),
        }
    }
}

impl BusConfig {
    /// `pidevops.events.github.pull_request.opened` for the event type `github.pull_request.opened` from GitHub:
    /// the type already starts with its source, which is not repeated.
    pub fn subject(&self, source: &str, event_type: &str) -> String {
        let rest = match event_type.strip_prefix(source) {
            Some("") => "",
            Some(r) if r.starts_with('.') => &r[1..],
            _ => event_type,
        };
        if rest.is_empty() {
            format!("{}.{source}", self.subject_prefix)
        } else {
            format!("{}.{source}.{rest}", self.subject_prefix)
        }
    }
}

/// One event as published: its subject, identity, position and the envelope JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct BusMessage {
    pub subject: String,
    pub event_id: Uuid,
    pub position: i64,
    pub payload: Bytes,
}

impl BusMessage {
    pub fn from_event(config: &BusConfig, event: &StoredEvent) -> Result<Self, BusError> {
        // Sized up front: growing a Vec to a 28 KB envelope would copy it several times.
        let mut payload = Vec::with_capacity(event.body.len() + 1024);
        event
            .write_envelope(&mut payload)
            .map_err(|e| BusError::Encode(e.to_string()))?;
        Ok(Self {
            subject: config.subject(&event.source, &event.event_type),
            event_id: event.id,
            position: event.position,
            payload: Bytes::from(payload),
        })
    }
}

/// The end of the bus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tail {
    /// The last message held carries this position.
    Last(i64),
    /// Messages were published but none is held any more (they aged out).
    Expired,
    /// Nothing was ever published (a new or re-created stream).
    Fresh,
}

/// What the bus answered for one publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Published {
    /// The bus's own sequence number for the message.
    pub sequence: u64,
    /// The bus already held a message with this event id (within its dedup window) and stored nothing new.
    pub duplicate: bool,
}

/// A message sent to the bus whose acknowledgement has not been awaited yet.
pub enum PendingAck {
    Jetstream(JetstreamPending),
    /// The in-process bus answers at once.
    Ready(Result<Published, BusError>),
}

impl std::fmt::Debug for PendingAck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Jetstream(_) => "PendingAck::Jetstream",
            Self::Ready(_) => "PendingAck::Ready",
        })
    }
}

impl PendingAck {
    /// Waits for the bus's answer: stored (or a duplicate), or refused, or unknown (an error).
    pub async fn ack(self) -> Result<Published, BusError> {
        match self {
            Self::Jetstream(pending) => pending.ack().await,
            Self::Ready(answer) => answer,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("cannot reach NATS: {0}")]
    Connect(String),
    #[error("the JetStream stream could not be set up: {0}")]
    Stream(String),
    #[error("publish was not acknowledged: {0}")]
    Publish(String),
    #[error("cannot read the stream: {0}")]
    Read(String),
    #[error("the event could not be encoded: {0}")]
    Encode(String),
    #[error("message {sequence} in the stream is not a pidevops event: {reason}")]
    Foreign { sequence: u64, reason: String },
}

/// A bus backend. A closed set, like the event store.
#[derive(Clone, Debug)]
pub enum Bus {
    Jetstream(JetstreamBus),
    Memory(MemoryBus),
}

impl Bus {
    /// JetStream at `nats_url` (creating or updating the stream), or the in-process bus when there is none.
    pub async fn connect(nats_url: Option<&str>, config: BusConfig) -> Result<Self, BusError> {
        Ok(match nats_url {
            Some(url) => Self::Jetstream(JetstreamBus::connect(url, config).await?),
            None => Self::Memory(MemoryBus::new(config)),
        })
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Self::Jetstream(_) => "nats",
            Self::Memory(_) => "memory",
        }
    }

    pub fn config(&self) -> &BusConfig {
        match self {
            Self::Jetstream(b) => b.config(),
            Self::Memory(b) => b.config(),
        }
    }

    /// Makes sure the stream exists with the wanted settings (JetStream); nothing to do in memory.
    pub async fn ensure_stream(&self) -> Result<(), BusError> {
        match self {
            Self::Jetstream(b) => b.ensure_stream().await,
            Self::Memory(_) => Ok(()),
        }
    }

    /// Publishes and waits for the bus to acknowledge it durably. Idempotent by event id.
    pub async fn publish(&self, message: &BusMessage) -> Result<Published, BusError> {
        self.send(message, None).await?.ack().await
    }

    /// Sends without waiting for the acknowledgement, so that several can be in flight. With `expected_last`, the
    /// bus stores the message only if its last sequence is that one (JetStream's `Nats-Expected-Last-Sequence`;
    /// 0, an empty stream, is not checked): a writer that numbers a window of messages this way never gets one
    /// stored after a predecessor that was lost. A duplicate event id is answered as a duplicate before that check.
    pub async fn send(
        &self,
        message: &BusMessage,
        expected_last: Option<u64>,
    ) -> Result<PendingAck, BusError> {
        match self {
            Self::Jetstream(b) => Ok(PendingAck::Jetstream(b.send(message, expected_last).await?)),
            Self::Memory(b) => Ok(PendingAck::Ready(b.send(message, expected_last))),
        }
    }

    /// The position of the last message the bus holds, if any: where a relay resumes after a crash between
    /// publishing and saving its checkpoint, or after the bus lost its tail.
    pub async fn last_position(&self) -> Result<Option<i64>, BusError> {
        Ok(match self.tail().await? {
            Tail::Last(position) => Some(position),
            Tail::Expired | Tail::Fresh => None,
        })
    }

    /// What the end of the bus looks like, for a relay deciding where to resume.
    pub async fn tail(&self) -> Result<Tail, BusError> {
        Ok(self.end().await?.0)
    }

    /// The tail and the last sequence the bus assigned (0: none), read together.
    pub async fn end(&self) -> Result<(Tail, u64), BusError> {
        match self {
            Self::Jetstream(b) => b.end().await,
            Self::Memory(b) => Ok(b.end()),
        }
    }

    /// Up to `limit` messages from bus sequence `from` (1-based), in order.
    pub async fn read(&self, from: u64, limit: usize) -> Result<Vec<BusMessage>, BusError> {
        match self {
            Self::Jetstream(b) => b.read(from, limit).await,
            Self::Memory(b) => Ok(b.read(from, limit)),
        }
    }
}

/// Reads the event id and position a pidevops message carries in its headers.
pub(crate) fn parse_identity(
    sequence: u64,
    msg_id: Option<&str>,
    position: Option<&str>,
) -> Result<(Uuid, i64), BusError> {
    let foreign = |reason: &str| BusError::Foreign {
        sequence,
        reason: reason.to_owned(),
    };
    let id = msg_id
        .ok_or_else(|| foreign("no Nats-Msg-Id header"))?
        .parse::<Uuid>()
        .map_err(|_| foreign("Nats-Msg-Id is not a UUID"))?;
    let position = position
        .ok_or_else(|| foreign("no Pidevops-Position header"))?
        .parse::<i64>()
        .map_err(|_| foreign("Pidevops-Position is not an integer"))?;
    Ok((id, position))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_do_not_repeat_the_source() {
        let c = BusConfig::default();
        assert_eq!(
            c.subject("github", "github.pull_request.opened"),
            "pidevops.events.github.pull_request.opened"
        );
        assert_eq!(
            c.subject("github", "github.ping"),
            "pidevops.events.github.ping"
        );
        assert_eq!(
            c.subject("pidevops", "task.created"),
            "pidevops.events.pidevops.task.created"
        );
        assert_eq!(
            c.subject("telegram", "telegram"),
            "pidevops.events.telegram"
        );
    }

    #[test]
    fn identities_must_be_complete() {
        let id = Uuid::now_v7().to_string();
        assert_eq!(parse_identity(1, Some(&id), Some("7")).unwrap().1, 7);
        assert!(parse_identity(1, None, Some("7")).is_err());
        assert!(parse_identity(1, Some("x"), Some("7")).is_err());
        assert!(parse_identity(1, Some(&id), Some("seven")).is_err());
    }
}
