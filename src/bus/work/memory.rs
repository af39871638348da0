//! The in-process backend: the embedded default and JetStream's stand-in in tests. Same semantics, real clocks.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{Handle, Raw, Settle, WorkError, WorkQueueConfig};
use crate::bus::Published;

/// The in-process twin: the embedded default and JetStream's stand-in in tests. Same semantics, real clocks.
/// Clones share the queue, like workers sharing the durable consumer.
#[derive(Clone)]
pub struct MemoryWork {
    pub(super) config: WorkQueueConfig,
    pub(super) epoch: String,
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

    pub(super) fn publish(
        &self,
        subject: String,
        key: &str,
        payload: Bytes,
    ) -> Result<Published, WorkError> {
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

    pub(super) async fn pull(&self, max: usize, deadline: Instant) -> Vec<Raw> {
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
    pub(super) fn settle(&self, sequence: u64, how: Settle) {
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
