//! The in-process bus: the embedded default and JetStream's twin in tests. Same semantics: idempotent by event id
//! (for the messages it still holds), publish order kept, the last position readable. Bounded like a JetStream
//! stream with a message limit and `discard: old`, so a long-running process does not keep every body in memory.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use super::{BusConfig, BusError, BusMessage, Published, Tail};

/// How many messages the in-process bus keeps before dropping the oldest.
pub const DEFAULT_MAX_MESSAGES: usize = 10_000;

#[derive(Clone, Debug)]
pub struct MemoryBus {
    config: BusConfig,
    max_messages: usize,
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    messages: VecDeque<BusMessage>,
    /// The sequence of `messages[0]` (sequences start at 1).
    first_sequence: u64,
    /// The last sequence ever assigned; 0 = nothing was ever published.
    last_sequence: u64,
    sequence_by_id: HashMap<Uuid, u64>,
    /// Test hook: the next publish of this position is lost on its way (see [`MemoryBus::inject_lost_publish`]).
    lose: Option<i64>,
}

impl MemoryBus {
    pub fn new(config: BusConfig) -> Self {
        Self::with_limit(config, DEFAULT_MAX_MESSAGES)
    }

    pub fn with_limit(config: BusConfig, max_messages: usize) -> Self {
        Self {
            config,
            max_messages: max_messages.max(1),
            inner: Arc::new(Mutex::new(Inner {
                first_sequence: 1,
                ..Inner::default()
            })),
        }
    }

    pub fn config(&self) -> &BusConfig {
        &self.config
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        // Every update below leaves Inner consistent before it could panic, so a poisoned lock is still usable.
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    /// Makes the next publish of the event at `position` vanish as one lost with a dropped connection would:
    /// nothing stored, and its ack an error. What was sent after it meets the bus as JetStream would meet it.
    pub fn inject_lost_publish(&self, position: i64) {
        self.with(|inner| inner.lose = Some(position));
    }

    /// Publishes as JetStream does: a duplicate id is answered as such first, then `expected_last` (when given
    /// and not 0) must be the last sequence assigned, or nothing is stored.
    pub fn send(
        &self,
        message: &BusMessage,
        expected_last: Option<u64>,
    ) -> Result<Published, BusError> {
        let max = self.max_messages;
        self.with(|inner| {
            if inner.lose == Some(message.position) {
                inner.lose = None;
                return Err(BusError::Connect(format!(
                    "injected: the publish of position {} was lost",
                    message.position
                )));
            }
            if let Some(&sequence) = inner.sequence_by_id.get(&message.event_id) {
                return Ok(Published {
                    sequence,
                    duplicate: true,
                });
            }
            if let Some(expected) = expected_last.filter(|&e| e > 0) {
                if expected != inner.last_sequence {
                    return Err(BusError::Publish(format!(
                        "wrong last sequence: expected {expected}, the stream is at {}",
                        inner.last_sequence
                    )));
                }
            }
            inner.last_sequence += 1;
            let sequence = inner.last_sequence;
            inner.messages.push_back(message.clone());
            inner.sequence_by_id.insert(message.event_id, sequence);
            while inner.messages.len() > max {
                if let Some(old) = inner.messages.pop_front() {
                    inner.sequence_by_id.remove(&old.event_id);
                    inner.first_sequence += 1;
                }
            }
            Ok(Published {
                sequence,
                duplicate: false,
            })
        })
    }

    pub fn tail(&self) -> Tail {
        self.end().0
    }

    /// The tail and the last sequence assigned.
    pub fn end(&self) -> (Tail, u64) {
        self.with(|inner| {
            let tail = match inner.messages.back() {
                Some(last) => Tail::Last(last.position),
                None if inner.last_sequence > 0 => Tail::Expired,
                None => Tail::Fresh,
            };
            (tail, inner.last_sequence)
        })
    }

    pub fn read(&self, from: u64, limit: usize) -> Vec<BusMessage> {
        self.with(|inner| {
            let skip = from.max(inner.first_sequence) - inner.first_sequence;
            let skip = usize::try_from(skip).unwrap_or(usize::MAX);
            inner
                .messages
                .iter()
                .skip(skip)
                .take(limit)
                .cloned()
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn message(position: i64) -> BusMessage {
        BusMessage {
            subject: "s".into(),
            event_id: Uuid::now_v7(),
            position,
            payload: Bytes::new(),
        }
    }

    #[test]
    fn the_oldest_messages_go_first_and_sequences_keep_counting() {
        let bus = MemoryBus::with_limit(BusConfig::default(), 3);
        assert_eq!(bus.tail(), Tail::Fresh);
        let sent: Vec<_> = (1..=5).map(message).collect();
        for m in &sent {
            bus.send(m, None).unwrap();
        }
        assert_eq!(
            bus.read(1, 10),
            sent[2..].to_vec(),
            "only the last three are held"
        );
        assert_eq!(bus.read(5, 10), sent[4..].to_vec());
        assert_eq!(bus.tail(), Tail::Last(5));
        assert!(bus.send(&sent[4], None).unwrap().duplicate);
        assert_eq!(bus.send(&message(6), None).unwrap().sequence, 6);
    }
}
