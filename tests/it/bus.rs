//! The bus conformance suite: the same test bodies against NATS JetStream and the in-process bus.

use std::time::Duration;

use crate::common::TestDb;
use bytes::Bytes;
use pidevops::bus::{Bus, BusMessage, JetstreamBus, Tail};
use pidevops::domain::{EventType, NewEvent, Source};
use pidevops::eventlog::{EventLog, EventStore};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// A bus with a stream of its own; the JetStream one is deleted afterwards.
struct TestBus {
    bus: Bus,
}

impl TestBus {
    fn memory() -> Self {
        Self {
            bus: Bus::Memory(pidevops::bus::MemoryBus::new(crate::common::bus_config())),
        }
    }

    async fn nats() -> Option<Self> {
        let url = crate::common::nats_url();
        match JetstreamBus::connect(&url, crate::common::bus_config()).await {
            Ok(bus) => Some(Self {
                bus: Bus::Jetstream(bus),
            }),
            Err(e) if crate::common::in_ci() => {
                panic!("CI is set and NATS JetStream is unreachable at {url}: {e}. Start it (see .ci/run).")
            }
            Err(e) => {
                eprintln!(
                    "\n*** SKIPPED a NATS-backed test: {e} at {url}.\n\
                     *** Start NATS with `docker compose -f deploy/docker-compose.yml up -d nats`\n\
                     *** or set PIDEVOPS_TEST_NATS_URL.\n"
                );
                None
            }
        }
    }

    async fn cleanup(self) {
        if let Bus::Jetstream(bus) = &self.bus {
            bus.delete_stream().await.expect("delete the test stream");
        }
    }
}

macro_rules! per_bus {
    ($($name:ident),* $(,)?) => {
        mod nats {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(bus) = super::TestBus::nats().await else { return };
                    super::$name(&bus.bus).await;
                    bus.cleanup().await;
                }
            )*
        }
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let bus = super::TestBus::memory();
                    super::$name(&bus.bus).await;
                    bus.cleanup().await;
                }
            )*
        }
    };
}

per_bus!(
    messages_keep_publish_order_and_identity,
    a_republished_event_is_a_duplicate,
    the_last_position_is_readable,
    stored_events_travel_as_their_envelope,
    a_publish_expecting_another_last_sequence_is_refused,
);

fn message(bus: &Bus, position: i64, event_type: &str) -> BusMessage {
    BusMessage {
        subject: bus.config().subject("github", event_type),
        event_id: Uuid::now_v7(),
        position,
        payload: Bytes::from(format!(r#"{{"position":{position}}}"#)),
    }
}

async fn messages_keep_publish_order_and_identity(bus: &Bus) {
    let sent: Vec<BusMessage> = (1..=25).map(|p| message(bus, p, "github.push")).collect();
    for (i, m) in sent.iter().enumerate() {
        let published = bus.publish(m).await.expect("publish");
        assert!(!published.duplicate);
        assert_eq!(published.sequence, i as u64 + 1);
    }
    let read = bus.read(1, 100).await.unwrap();
    assert_eq!(
        read, sent,
        "same subjects, ids, positions and bytes, in order"
    );
    assert_eq!(bus.read(24, 100).await.unwrap(), sent[23..].to_vec());
    assert_eq!(bus.read(3, 2).await.unwrap(), sent[2..4].to_vec());
    assert!(bus.read(26, 10).await.unwrap().is_empty());
    assert!(
        read[0].subject.ends_with(".events.github.push"),
        "{}",
        read[0].subject
    );
}

async fn a_republished_event_is_a_duplicate(bus: &Bus) {
    let first = message(bus, 1, "github.ping");
    let a = bus.publish(&first).await.unwrap();
    let b = bus.publish(&first).await.unwrap();
    assert!(!a.duplicate);
    assert!(b.duplicate, "the same event id twice is stored once");
    assert_eq!(a.sequence, b.sequence);
    let second = message(bus, 2, "github.ping");
    assert_eq!(bus.publish(&second).await.unwrap().sequence, 2);
    assert_eq!(bus.read(1, 10).await.unwrap(), vec![first, second]);
}

/// What the relay's window rests on: a message stored only if the bus's last sequence is the one it expects (0:
/// unchecked), several sent before any ack is awaited, and a duplicate answered as one before that check.
async fn a_publish_expecting_another_last_sequence_is_refused(bus: &Bus) {
    let sent = |m: BusMessage, expected: u64| async move {
        bus.send(&m, Some(expected)).await.unwrap().ack().await
    };
    let first = message(bus, 1, "github.push");
    assert_eq!(sent(first.clone(), 0).await.unwrap().sequence, 1);
    let second = message(bus, 2, "github.push");
    assert!(
        sent(second.clone(), 7).await.is_err(),
        "a message whose predecessor is missing is refused"
    );
    assert_eq!(
        bus.end().await.unwrap(),
        (Tail::Last(1), 1),
        "and not stored"
    );
    let again = sent(first.clone(), 5).await.unwrap();
    assert!(
        again.duplicate && again.sequence == 1,
        "a duplicate is answered as one, whatever it expected: {again:?}"
    );

    // A window: three sent, then their acks awaited in order.
    let window: Vec<BusMessage> = (2..=4).map(|p| message(bus, p, "github.push")).collect();
    let mut pending = Vec::new();
    for (i, m) in window.iter().enumerate() {
        pending.push(bus.send(m, Some(i as u64 + 1)).await.unwrap());
    }
    let mut sequences = Vec::new();
    for p in pending {
        sequences.push(p.ack().await.unwrap().sequence);
    }
    assert_eq!(sequences, [2, 3, 4]);
    let mut held = vec![first];
    held.extend(window);
    assert_eq!(bus.read(1, 10).await.unwrap(), held);
}

async fn the_last_position_is_readable(bus: &Bus) {
    assert_eq!(bus.last_position().await.unwrap(), None);
    for p in [3, 4, 9] {
        bus.publish(&message(bus, p, "github.push")).await.unwrap();
    }
    assert_eq!(bus.last_position().await.unwrap(), Some(9));
}

async fn stored_events_travel_as_their_envelope(bus: &Bus) {
    let db = TestDb::sqlite();
    let store = EventStore::connect(&db.url, 4).await.unwrap();
    store.migrate().await.unwrap();
    let stop = CancellationToken::new();
    let (log, _task) = EventLog::start(store.clone(), Duration::from_secs(5), stop.clone());
    let body = std::fs::read(
        crate::common::fixtures_dir().join("github/pull_request/opened.payload.json"),
    )
    .unwrap();
    log.append(NewEvent::new(
        Source::Github,
        EventType::new(Source::Github, &["pull_request", "opened"]),
        "delivery-1",
        "application/json",
        Bytes::from(body),
    ))
    .await
    .unwrap();
    let stored = store.read_after(0, 1).await.unwrap().remove(0);
    let outgoing = BusMessage::from_event(bus.config(), &stored).unwrap();
    bus.publish(&outgoing).await.unwrap();
    let received = bus.read(1, 1).await.unwrap().remove(0);
    assert_eq!(
        received.subject,
        format!("{}.github.pull_request.opened", bus.config().subject_prefix)
    );
    assert_eq!((received.event_id, received.position), (stored.id, 1));
    let envelope: serde_json::Value = serde_json::from_slice(&received.payload).unwrap();
    assert_eq!(envelope["id"], stored.id.to_string());
    assert_eq!(envelope["type"], "github.pull_request.opened");
    assert_eq!(envelope["data"]["action"], "opened");
    stop.cancel();
}

#[tokio::test]
async fn the_stream_is_created_with_its_explicit_settings_and_updates_idempotently() {
    let Some(test) = TestBus::nats().await else {
        return;
    };
    let config = test.bus.config().clone();
    // A second start-up against the same stream updates it to the same settings.
    let again = JetstreamBus::connect(&crate::common::nats_url(), config.clone())
        .await
        .expect("idempotent set-up");
    let client = crate::common::nats_client().await.unwrap();
    let js = async_nats::jetstream::new(client);
    let mut stream = js.get_stream(&config.stream).await.unwrap();
    let info = stream.info().await.unwrap().config.clone();
    assert_eq!(info.subjects, vec![format!("{}.>", config.subject_prefix)]);
    assert_eq!(
        info.storage,
        async_nats::jetstream::stream::StorageType::File
    );
    assert_eq!(
        info.retention,
        async_nats::jetstream::stream::RetentionPolicy::Limits
    );
    assert_eq!(
        info.duplicate_window,
        pidevops::bus::jetstream_settings::DUPLICATE_WINDOW
    );
    assert_eq!(info.max_age, pidevops::bus::jetstream_settings::MAX_AGE);
    drop(again);
    test.cleanup().await;
}

#[tokio::test]
async fn an_unreachable_nats_is_a_prompt_connect_error() {
    let started = std::time::Instant::now();
    let err = JetstreamBus::connect("nats://127.0.0.1:1", crate::common::bus_config())
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with("cannot reach NATS"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
}
