//! NATS JetStream: the stream `PIDEVOPS_EVENTS` on subjects `pidevops.events.>`, each message carrying
//! `Nats-Msg-Id` = event id (so JetStream drops a re-publish inside its duplicate window) and `Pidevops-Position`
//! (so a relay can resume from the last message the stream actually holds, whatever the window).
//!
//! The settings below are the ones both Debian's nats-server 2.9 and the official 2.10+ images accept.

use std::future::IntoFuture;
use std::time::Duration;

use async_nats::jetstream::{self, stream};

use super::{parse_identity, BusConfig, BusError, BusMessage, Published, Tail, POSITION_HEADER};

/// How long the stream keeps events. Postgres keeps them forever; the stream is fan-out and can be re-fed.
pub const MAX_AGE: Duration = Duration::from_secs(30 * 24 * 60 * 60);
/// JetStream drops a message whose `Nats-Msg-Id` it saw within this window.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(2 * 60);

#[derive(Clone)]
pub struct JetstreamBus {
    config: BusConfig,
    /// Kept for its connection state; boxed so the `Bus` enum's variants stay close in size.
    client: Box<async_nats::Client>,
    context: jetstream::Context,
}

impl std::fmt::Debug for JetstreamBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetstreamBus")
            .field("config", &self.config)
            .finish()
    }
}

/// A publish sent, its ack not awaited yet.
pub struct Pending {
    pending: async_nats::jetstream::context::PublishAckFuture,
    /// To notice a lost connection while waiting.
    client: async_nats::Client,
}

impl Pending {
    pub async fn ack(self) -> Result<Published, BusError> {
        // A lost connection never answers: stop waiting then rather than after the 5 s timeout, which would
        // leave the relay's loop looking stale (and /health failing) for a mere bus outage.
        let ack = tokio::select! {
            ack = self.pending.into_future() => ack.map_err(|e| BusError::Publish(e.to_string()))?,
            () = disconnected(&self.client) => {
                return Err(BusError::Connect(
                    "the connection to NATS dropped while waiting for the ack".to_owned(),
                ))
            }
        };
        Ok(Published {
            sequence: ack.sequence,
            duplicate: ack.duplicate,
        })
    }
}

/// Resolves once the client has lost its connection (the client offers no notification to await).
async fn disconnected(client: &async_nats::Client) {
    while client.connection_state() == async_nats::connection::State::Connected {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A header's first value by name, compared as text: headers parsed from a stored message do not always match
/// the client's standard-header constants by key.
fn header<'a>(headers: &'a async_nats::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(key, _)| AsRef::<str>::as_ref(*key).eq_ignore_ascii_case(name))
        .and_then(|(_, values)| values.first())
        .map(|v| v.as_str())
}

/// The stream's explicit configuration; applied at start-up (created, or updated to match).
pub fn stream_config(config: &BusConfig) -> stream::Config {
    stream::Config {
        name: config.stream.clone(),
        subjects: vec![format!("{}.>", config.subject_prefix)],
        retention: stream::RetentionPolicy::Limits,
        storage: stream::StorageType::File,
        discard: stream::DiscardPolicy::Old,
        max_age: MAX_AGE,
        max_bytes: -1,
        max_messages: -1,
        duplicate_window: DUPLICATE_WINDOW,
        num_replicas: 1,
        allow_direct: true,
        ..Default::default()
    }
}

impl JetstreamBus {
    pub async fn connect(url: &str, config: BusConfig) -> Result<Self, BusError> {
        let (options, servers) = crate::bus::credentials::client_options(url);
        let client = options
            .name("pidevops")
            .connection_timeout(Duration::from_secs(3))
            .connect(servers.as_slice())
            .await
            .map_err(|e| BusError::Connect(e.to_string()))?;
        let context = jetstream::new(client.clone());
        let bus = Self {
            config,
            client: Box::new(client),
            context,
        };
        bus.ensure_stream().await?;
        Ok(bus)
    }

    /// Creates the stream, or updates it to the wanted settings. Also after an outage: a server that came back
    /// without its store no longer has the stream, and every publish would go unanswered.
    pub async fn ensure_stream(&self) -> Result<(), BusError> {
        self.connected()?;
        let name = &self.config.stream;
        let wanted = stream_config(&self.config);
        match self.context.get_stream(name).await {
            Ok(_) => {
                self.context
                    .update_stream(wanted)
                    .await
                    .map_err(|e| BusError::Stream(format!("updating {name}: {e}")))?;
            }
            Err(_) => {
                self.context
                    .create_stream(wanted)
                    .await
                    .map_err(|e| BusError::Stream(format!("creating {name}: {e}")))?;
            }
        }
        Ok(())
    }

    /// Fails at once while the client is reconnecting. Otherwise a request would wait out its 5 s timeout, and
    /// it would stay queued in the client and reach the server later, outside the caller's control.
    fn connected(&self) -> Result<(), BusError> {
        match self.client.connection_state() {
            async_nats::connection::State::Connected => Ok(()),
            state => Err(BusError::Connect(format!(
                "the connection to NATS is {state:?}; the client keeps reconnecting"
            ))),
        }
    }

    pub fn config(&self) -> &BusConfig {
        &self.config
    }

    /// Removes the stream; for tests that make their own.
    pub async fn delete_stream(&self) -> Result<(), BusError> {
        self.context
            .delete_stream(&self.config.stream)
            .await
            .map(|_| ())
            .map_err(|e| BusError::Stream(e.to_string()))
    }

    /// Sends one message; its ack is awaited later, through [`Pending::ack`].
    pub async fn send(
        &self,
        message: &BusMessage,
        expected_last: Option<u64>,
    ) -> Result<Pending, BusError> {
        self.connected()?;
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", message.event_id.to_string().as_str());
        headers.insert(POSITION_HEADER, message.position.to_string().as_str());
        if let Some(sequence) = expected_last {
            headers.insert(
                async_nats::header::NATS_EXPECTED_LAST_SEQUENCE,
                sequence.to_string().as_str(),
            );
        }
        // `Bytes`: the payload is shared with the client's write buffer, not copied here.
        let pending = self
            .context
            .publish_with_headers(message.subject.clone(), headers, message.payload.clone())
            .await
            .map_err(|e| BusError::Publish(e.to_string()))?;
        Ok(Pending {
            pending,
            client: (*self.client).clone(),
        })
    }

    async fn stream(&self) -> Result<stream::Stream, BusError> {
        self.connected()?;
        self.context
            .get_stream(&self.config.stream)
            .await
            .map_err(|e| BusError::Read(e.to_string()))
    }

    /// The stream handle and its current state (message count, first and last sequence).
    async fn state(&self) -> Result<(stream::Stream, stream::State), BusError> {
        let mut stream = self.stream().await?;
        let state = stream
            .info()
            .await
            .map_err(|e| BusError::Read(e.to_string()))?
            .state
            .clone();
        Ok((stream, state))
    }

    pub async fn tail(&self) -> Result<Tail, BusError> {
        Ok(self.end().await?.0)
    }

    /// The tail and the stream's last sequence, from one read of its state.
    pub async fn end(&self) -> Result<(Tail, u64), BusError> {
        let (stream, state) = self.state().await?;
        let tail = if state.messages > 0 {
            let message = self.get(&stream, state.last_sequence).await?;
            Tail::Last(message.position)
        } else if state.last_sequence > 0 {
            Tail::Expired
        } else {
            Tail::Fresh
        };
        Ok((tail, state.last_sequence))
    }

    pub async fn read(&self, from: u64, limit: usize) -> Result<Vec<BusMessage>, BusError> {
        let (stream, state) = self.state().await?;
        let mut out = Vec::new();
        let mut sequence = from.max(state.first_sequence).max(1);
        while out.len() < limit && state.messages > 0 && sequence <= state.last_sequence {
            out.push(self.get(&stream, sequence).await?);
            sequence += 1;
        }
        Ok(out)
    }

    async fn get(&self, stream: &stream::Stream, sequence: u64) -> Result<BusMessage, BusError> {
        let raw = stream
            .get_raw_message(sequence)
            .await
            .map_err(|e| BusError::Read(format!("message {sequence}: {e}")))?;
        let (event_id, position) = parse_identity(
            sequence,
            header(&raw.headers, "Nats-Msg-Id"),
            header(&raw.headers, POSITION_HEADER),
        )?;
        Ok(BusMessage {
            subject: raw.subject.to_string(),
            event_id,
            position,
            payload: raw.payload,
        })
    }
}
