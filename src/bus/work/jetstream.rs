//! The JetStream backend: the work stream and its durable pull consumer.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use bytes::Bytes;
use futures::StreamExt;
use tokio::time::Instant;

use super::{Handle, Raw, WorkError, WorkQueueConfig};
use crate::bus::Published;

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
    pub(super) inner: Arc<JetstreamInner>,
}

pub(super) struct JetstreamInner {
    pub(super) config: WorkQueueConfig,
    client: async_nats::Client,
    context: jetstream::Context,
    consumer: consumer::PullConsumer,
    /// The stream's creation time: sequences restart when a stream is re-created, so dead-letter keys carry it.
    pub(super) epoch: String,
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
        let (options, servers) = crate::bus::credentials::client_options(url);
        let client = options
            .name("pidevops-work")
            .connection_timeout(Duration::from_secs(3))
            .connect(servers.as_slice())
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

    pub(super) async fn held(&self) -> Result<u64, WorkError> {
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

    pub(super) async fn publish(
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
    pub(super) async fn pull(&self, max: usize, deadline: Instant) -> Result<Vec<Raw>, WorkError> {
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
