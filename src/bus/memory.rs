//! The in-process bus: the embedded default and JetStream's twin in tests. Same semantics: idempotent by event id,
//! publish order kept, last position readable. It lives as long as the process, like the fan-out it stands in for.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use super::{BusConfig, BusMessage, Published};

#[derive(Clone, Debug)]
pub struct MemoryBus {
    config: BusConfig,
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    messages: Vec<BusMessage>,
    sequence_by_id: HashMap<Uuid, u64>,
}

impl MemoryBus {
    pub fn new(config: BusConfig) -> Self {
        Self {
            config,
            inner: Arc::default(),
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

    pub fn publish(&self, message: &BusMessage) -> Published {
        self.with(|inner| {
            if let Some(&sequence) = inner.sequence_by_id.get(&message.event_id) {
                return Published {
                    sequence,
                    duplicate: true,
                };
            }
            inner.messages.push(message.clone());
            let sequence = inner.messages.len() as u64;
            inner.sequence_by_id.insert(message.event_id, sequence);
            Published {
                sequence,
                duplicate: false,
            }
        })
    }

    pub fn last_position(&self) -> Option<i64> {
        self.with(|inner| inner.messages.last().map(|m| m.position))
    }

    pub fn read(&self, from: u64, limit: usize) -> Vec<BusMessage> {
        self.with(|inner| {
            let start = usize::try_from(from.max(1) - 1).unwrap_or(usize::MAX);
            inner
                .messages
                .iter()
                .skip(start)
                .take(limit)
                .cloned()
                .collect()
        })
    }
}
