//! The relay: the event log is the outbox. It reads committed events in position order and publishes them with up
//! to [`IN_FLIGHT`] acknowledgements outstanding, awaited in order; its checkpoint moves only past acknowledged
//! messages. Ingest never waits on it: with the bus down, webhooks are still committed and acknowledged, and the
//! relay catches up when the bus returns.
//!
//! Order and exactly-once with acks in flight: the relay is the stream's only writer, so it knows the sequence each
//! message will get, and each carries `Nats-Expected-Last-Sequence` = its predecessor's. When a publish in the
//! window is lost (a dropped connection), every later one is refused by the bus instead of stored after a gap;
//! the tick fails on the first bad ack and the next resumes from the bus's tail, as after any error. A duplicate
//! (the relay resumed behind the bus) or an ack with another sequence than the chain's ends the tick the same way.
//!
//! Where it resumes (at start, and after any publish error, whose outcome is unknown):
//! - the bus holds messages: after the last one's position. A crash between publishing and saving the
//!   checkpoint therefore republishes nothing, and a bus that lost its tail gets it again;
//! - the bus's messages all aged out: after the checkpoint;
//! - the bus is new (or was re-created empty): from the start of the log, which re-feeds it.
//!
//! Through a NATS outage the process keeps its client, which reconnects by itself; while it is down every tick
//! fails fast (so the loop never looks stale), and the resync after it re-creates the stream if the server lost it.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use tokio::sync::Mutex;

use std::collections::VecDeque;

use super::{Bus, BusConfig, BusMessage, MemoryBus, PendingAck, Tail};
use crate::eventlog::{EventStore, StoredEvent};
use crate::loops::follow::{Follow, Follower, Next, Prepare};

/// The relay's checkpoint name and loop name.
pub const RELAY: &str = "relay";

/// Where the relay publishes: an in-process bus, or JetStream, connected lazily so that a NATS that is down at
/// start-up never delays serving (or ingesting).
#[derive(Debug)]
pub enum BusTarget {
    Memory(MemoryBus),
    Nats { url: String, config: BusConfig },
}

/// What one tick did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelayProgress {
    pub published: u64,
    /// Publishes the bus answered as already held (expected 0; more means the resume point was behind).
    pub duplicates: u64,
    /// The last position published and acknowledged.
    pub position: i64,
    /// The log's head when the tick ended.
    pub head: i64,
    /// The tick stopped at its time budget with work left: the loop goes again without resting.
    pub out_of_time: bool,
}

#[derive(Debug)]
pub struct Relay {
    store: EventStore,
    target: BusTarget,
    state: Mutex<State>,
    /// Test hook: stop after publishing a page, before saving the checkpoint, as a crash there would.
    crash_before_checkpoint: AtomicBool,
    /// The lag the last tick saw, kept so `/health` can show it while ticks fail.
    lag: std::sync::Mutex<Option<Lag>>,
    /// Reads (and encodes) a page ahead while the tick publishes; see [`crate::loops::follow`].
    follow: Follow<BusMessage>,
    /// Publishes sent ahead of their acks ([`IN_FLIGHT`]; 1 = each ack awaited before the next publish).
    in_flight: usize,
}

/// How far the bus is behind the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lag {
    /// The last position known to be on the bus.
    pub position: i64,
    /// The log's head.
    pub head: i64,
}

impl Lag {
    pub fn behind(&self) -> i64 {
        (self.head - self.position).max(0)
    }
}

#[derive(Debug, Default)]
struct State {
    bus: Option<Bus>,
    /// The last position known published; `None` = find out from the bus and the checkpoint.
    after: Option<i64>,
    /// The bus's last sequence when `after` was learnt or last moved: the first publish expects it.
    sequence: u64,
}

impl Relay {
    pub fn new(store: EventStore, target: BusTarget) -> Self {
        Self {
            store,
            target,
            state: Mutex::new(State::default()),
            crash_before_checkpoint: AtomicBool::new(false),
            lag: std::sync::Mutex::new(None),
            follow: Follow::default(),
            in_flight: IN_FLIGHT,
        }
    }

    /// How many publishes may wait for their acks at once (at least 1). For the benchmark, which measures the
    /// relay with one (as it published until 2026-12-06) against the default, in the same run.
    pub fn with_in_flight(mut self, in_flight: usize) -> Self {
        self.in_flight = in_flight.max(1);
        self
    }

    /// How long one tick may run before it hands back (default `follow::TICK_BUDGET`). Tests that count what one
    /// tick publishes give it all the time it needs: a loaded machine must not end it early.
    pub fn with_tick_budget(mut self, budget: std::time::Duration) -> Self {
        self.follow = self.follow.with_budget(budget);
        self
    }

    pub fn bus_kind(&self) -> &'static str {
        match self.target {
            BusTarget::Memory(_) => "memory",
            BusTarget::Nats { .. } => "nats",
        }
    }

    /// Makes the next page end as a crash between publishing and checkpointing would (for fault tests).
    pub fn inject_crash_before_checkpoint(&self) {
        self.crash_before_checkpoint.store(true, Ordering::SeqCst);
    }

    /// Forgets where the relay was; the next tick asks the bus. For a replica that (re)gains the relay's lease:
    /// another replica may have published since.
    pub async fn resync(&self) {
        self.state.lock().await.after = None;
    }

    /// The lag measured at the end of the last tick, whether it succeeded or not.
    pub fn lag(&self) -> Option<Lag> {
        *self.lag.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes everything committed since the last tick, in order. Errors leave the relay to resynchronise on
    /// the next tick.
    pub async fn tick(&self) -> anyhow::Result<RelayProgress> {
        let mut state = self.state.lock().await;
        let result = self.run(&mut state).await;
        if result.is_err() {
            // After a failed publish nobody knows whether the bus stored it: ask the bus next time.
            state.after = None;
        }
        self.report_lag(state.after).await;
        result
    }

    async fn run(&self, state: &mut State) -> anyhow::Result<RelayProgress> {
        if state.bus.is_none() {
            state.bus = Some(match &self.target {
                BusTarget::Memory(bus) => Bus::Memory(bus.clone()),
                BusTarget::Nats { url, config } => Bus::Jetstream(
                    super::JetstreamBus::connect(url, config.clone())
                        .await
                        .context("connecting the relay to NATS")?,
                ),
            });
        }
        let bus = state.bus.clone().context("the bus is connected above")?;
        let after = match state.after {
            Some(after) => after,
            None => {
                let (after, sequence) = self.resume_point(&bus).await?;
                state.sequence = sequence;
                after
            }
        };
        state.after = Some(after);

        // The driver reads and encodes ahead while this tick publishes: up to IN_FLIGHT messages sent ahead of
        // their acks, in position order, each expecting the sequence its predecessor gets, the acks awaited in
        // order, and the checkpoint saved only once every ack of its page is in.
        let publishing = Publishing {
            relay: self,
            bus: &bus,
            from: after,
            window: std::sync::Mutex::new(Window {
                in_flight: VecDeque::new(),
                last: state.sequence,
                published: Published::default(),
            }),
        };
        let followed = self.follow.tick(&self.store, &publishing).await?;
        // Every successful tick ends with a save, which drained the window; this keeps it so if that changes.
        publishing.drain().await?;
        let (last, published) = {
            let window = publishing.lock();
            (window.last, window.published)
        };
        state.after = Some(followed.position);
        state.sequence = last;
        Ok(RelayProgress {
            published: published.published,
            duplicates: published.duplicates,
            position: followed.position,
            head: self.store.head().await.context("reading the log head")?,
            out_of_time: followed.out_of_time,
        })
    }

    async fn save_checkpoint(&self, after: i64) -> anyhow::Result<()> {
        if self.crash_before_checkpoint.swap(false, Ordering::SeqCst) {
            anyhow::bail!("injected crash after publishing up to {after}, before the checkpoint");
        }
        self.store
            .advance_checkpoint(RELAY, after)
            .await
            .context("saving the relay checkpoint")?;
        Ok(())
    }

    /// Where to resume, and the bus's last sequence then.
    async fn resume_point(&self, bus: &Bus) -> anyhow::Result<(i64, u64)> {
        // The connection is kept across errors (the client reconnects by itself, and a publish queued in it
        // reaches the server before anything sent after it), but the server may have come back without its store.
        bus.ensure_stream()
            .await
            .context("making sure the stream exists")?;
        let checkpoint = self
            .store
            .checkpoint(RELAY)
            .await
            .context("reading the relay checkpoint")?;
        let (tail, sequence) = bus.end().await.context("reading the end of the bus")?;
        let resume = match tail {
            Tail::Last(position) => position,
            Tail::Expired => checkpoint,
            Tail::Fresh => 0,
        };
        if resume != checkpoint {
            tracing::info!(
                checkpoint,
                ?tail,
                resume,
                "relay resumes from the bus, not its checkpoint"
            );
        }
        Ok((resume, sequence))
    }

    /// Lag gauges: how many committed events are not on the bus yet, and how old the oldest of them is.
    async fn report_lag(&self, after: Option<i64>) {
        let after = match after {
            Some(after) => after,
            None => match self.store.checkpoint(RELAY).await {
                Ok(checkpoint) => checkpoint,
                Err(_) => return,
            },
        };
        let Ok(head) = self.store.head().await else {
            return;
        };
        let lag = Lag {
            position: after,
            head,
        };
        *self.lag.lock().unwrap_or_else(|p| p.into_inner()) = Some(lag);
        let behind = lag.behind();
        let seconds = if behind == 0 {
            0.0
        } else {
            match self.store.read_after(after, 1).await {
                Ok(oldest) => oldest.first().map_or(0.0, |e| {
                    (chrono::Utc::now() - e.recorded_at)
                        .num_milliseconds()
                        .max(0) as f64
                        / 1000.0
                }),
                Err(_) => return,
            }
        };
        metrics::gauge!("pidevops_relay_lag_events").set(behind as f64);
        metrics::gauge!("pidevops_relay_lag_seconds").set(seconds);
    }
}

/// Messages sent before the oldest one's ack is awaited. Acks come back in order; the window hides the round trip
/// (and the server's write) that a publish-and-wait loop pays once per message.
pub const IN_FLIGHT: usize = 64;

/// One tick's publishing, as a follower of the log: it starts where the bus says (see the module doc), and its
/// checkpoint is saved only after the acks.
struct Publishing<'a> {
    relay: &'a Relay,
    bus: &'a Bus,
    from: i64,
    window: std::sync::Mutex<Window>,
}

/// The publishes sent and not yet acknowledged, oldest first.
struct Window {
    in_flight: VecDeque<(i64, u64, PendingAck)>,
    /// The bus's last sequence once everything sent is stored: what the next message expects.
    last: u64,
    /// What the acks said so far.
    published: Published,
}

impl Publishing<'_> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Window> {
        // Held only to push or pop, never across an await, and every change leaves it whole.
        self.window.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Awaits the ack of the oldest message in flight, if any. The bus must have stored it under the sequence its
    /// place in the chain gives it; anything else (an error, a duplicate, another sequence) ends the tick, and
    /// the next one resynchronises from the bus's tail. The messages sent after it are refused by the bus rather
    /// than stored after a gap, since each expects its predecessor's sequence.
    async fn settle_oldest(&self) -> anyhow::Result<bool> {
        let Some((position, sequence, pending)) = self.lock().in_flight.pop_front() else {
            return Ok(false);
        };
        let published = pending
            .ack()
            .await
            .with_context(|| format!("publishing event at position {position}"))?;
        if published.duplicate {
            self.lock().published.duplicates += 1;
            metrics::counter!("pidevops_relay_duplicates_total").increment(1);
            anyhow::bail!(
                "the bus already held the event at position {position} (its sequence {}): the relay resumed \
                 behind the bus, and resynchronises from its tail",
                published.sequence
            );
        }
        anyhow::ensure!(
            published.sequence == sequence,
            "the event at position {position} was stored as bus sequence {}, not {sequence}: another writer",
            published.sequence
        );
        self.lock().published.published += 1;
        metrics::counter!("pidevops_relay_published_total").increment(1);
        Ok(true)
    }

    /// Awaits every ack in flight.
    async fn drain(&self) -> anyhow::Result<()> {
        while self.settle_oldest().await? {}
        Ok(())
    }
}

/// What a tick published.
#[derive(Clone, Copy, Default)]
struct Published {
    published: u64,
    duplicates: u64,
}

/// Encodes on the reader's side: the relay's CPU goes mostly to encoding 28 KB envelopes (docs/benchmarks.md).
#[derive(Clone)]
struct Encode(BusConfig);

impl Prepare for Encode {
    type Item = BusMessage;
    fn prepare(&self, event: StoredEvent) -> anyhow::Result<BusMessage> {
        BusMessage::from_event(&self.0, &event)
            .with_context(|| format!("encoding event at position {}", event.position))
    }
}

impl Follower for Publishing<'_> {
    type Prepare = Encode;
    /// Counted in the window, as the acks come in (the save that drains it has no tally).
    type Tally = ();

    fn checkpoint(&self) -> &str {
        RELAY
    }

    fn prepare(&self) -> Encode {
        Encode(self.bus.config().clone())
    }

    async fn start(&self, _store: &EventStore) -> anyhow::Result<i64> {
        Ok(self.from)
    }

    async fn save(&self, _store: &EventStore, position: i64) -> anyhow::Result<()> {
        // The checkpoint never passes a message whose ack is not in.
        self.drain().await?;
        self.relay.save_checkpoint(position).await
    }

    async fn handle(&self, message: &BusMessage, _tally: &mut ()) -> anyhow::Result<Next> {
        if self.lock().in_flight.len() >= self.relay.in_flight {
            self.settle_oldest().await?;
        }
        let expected = self.lock().last;
        let pending = self
            .bus
            .send(message, Some(expected))
            .await
            .with_context(|| format!("publishing event at position {}", message.position))?;
        let mut window = self.lock();
        window.last = expected + 1;
        window
            .in_flight
            .push_back((message.position, expected + 1, pending));
        Ok(Next::Done)
    }
}
