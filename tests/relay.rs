//! The relay: every committed event reaches the bus exactly once, in order, across crashes and outages.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::TestDb;
use pidevops::bus::relay::{BusTarget, Relay, RELAY};
use pidevops::bus::{Bus, JetstreamBus, MemoryBus};
use pidevops::domain::{EventType, NewEvent, Source};
use pidevops::eventlog::{EventLog, EventStore};
use tokio_util::sync::CancellationToken;

/// A bus to read back from, and how to make relays that publish to it.
struct Target {
    reader: Bus,
    url: Option<String>,
}

impl Target {
    fn memory() -> Self {
        Self {
            reader: Bus::Memory(MemoryBus::new(common::bus_config())),
            url: None,
        }
    }

    async fn nats() -> Option<Self> {
        match JetstreamBus::connect(&common::nats_url(), common::bus_config()).await {
            Ok(bus) => Some(Self {
                reader: Bus::Jetstream(bus),
                url: Some(common::nats_url()),
            }),
            Err(e) if common::in_ci() => panic!("CI is set and NATS is unreachable: {e}"),
            Err(e) => {
                eprintln!("\n*** SKIPPED a NATS-backed relay test: {e}\n");
                None
            }
        }
    }

    fn target(&self) -> BusTarget {
        match (&self.reader, &self.url) {
            (Bus::Memory(bus), _) => BusTarget::Memory(bus.clone()),
            (Bus::Jetstream(_), Some(url)) => BusTarget::Nats {
                url: url.clone(),
                config: self.reader.config().clone(),
            },
            (Bus::Jetstream(_), None) => unreachable!("a JetStream target has a URL"),
        }
    }

    async fn cleanup(self) {
        if let Bus::Jetstream(bus) = &self.reader {
            bus.delete_stream().await.unwrap();
        }
    }
}

macro_rules! per_bus {
    ($($name:ident),* $(,)?) => {
        mod nats {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(target) = super::Target::nats().await else { return };
                    super::$name(&target).await;
                    target.cleanup().await;
                }
            )*
        }
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let target = super::Target::memory();
                    super::$name(&target).await;
                    target.cleanup().await;
                }
            )*
        }
    };
}

per_bus!(
    every_committed_event_is_published_once_in_order,
    a_crash_between_publish_and_checkpoint_republishes_nothing,
);

async fn log(db: &TestDb) -> (EventStore, EventLog, CancellationToken) {
    let store = EventStore::connect(&db.url, 4).await.unwrap();
    store.migrate().await.unwrap();
    let stop = CancellationToken::new();
    let (log, _task) = EventLog::start(store.clone(), Duration::from_secs(10), stop.clone());
    (store, log, stop)
}

async fn append(log: &EventLog, from: usize, to: usize) {
    for i in from..to {
        log.append(NewEvent::new(
            Source::Github,
            EventType::new(Source::Github, &["push"]),
            format!("d-{i}"),
            "application/json",
            Bytes::from(format!(r#"{{"n":{i}}}"#)),
        ))
        .await
        .unwrap();
    }
}

/// Every message on the bus, checked to be positions 1..=n in order with the log's ids, each once.
async fn assert_bus_matches_log(bus: &Bus, store: &EventStore, n: usize) {
    let messages = bus.read(1, 10_000).await.unwrap();
    let events = store.read_after(0, 10_000).await.unwrap();
    assert_eq!(events.len(), n);
    assert_eq!(messages.len(), n, "exactly one message per event");
    for (m, e) in messages.iter().zip(&events) {
        assert_eq!(
            (m.position, m.event_id),
            (e.position, e.id),
            "in position order, with the event's id"
        );
    }
}

async fn every_committed_event_is_published_once_in_order(target: &Target) {
    let db = TestDb::sqlite();
    let (store, log, _stop) = log(&db).await;
    append(&log, 0, 120).await;
    let relay = Relay::new(store.clone(), target.target());
    let progress = relay.tick().await.unwrap();
    assert_eq!(
        (
            progress.published,
            progress.duplicates,
            progress.position,
            progress.head
        ),
        (120, 0, 120, 120)
    );
    assert_eq!(store.checkpoint(RELAY).await.unwrap(), 120);
    assert_eq!(
        relay.tick().await.unwrap().published,
        0,
        "nothing new, nothing sent"
    );
    append(&log, 120, 130).await;
    assert_eq!(relay.tick().await.unwrap().published, 10);
    assert_bus_matches_log(&target.reader, &store, 130).await;
}

async fn a_crash_between_publish_and_checkpoint_republishes_nothing(target: &Target) {
    let db = TestDb::sqlite();
    let (store, log, _stop) = log(&db).await;
    append(&log, 0, 50).await;
    let first = Relay::new(store.clone(), target.target());
    first.inject_crash_before_checkpoint();
    let crashed = first.tick().await;
    assert!(
        crashed.is_err(),
        "the injected crash surfaces as a tick error"
    );
    assert_eq!(
        store.checkpoint(RELAY).await.unwrap(),
        0,
        "the checkpoint never saw the published page"
    );
    drop(first);

    // The restarted relay resumes from what the bus holds, not from its stale checkpoint.
    append(&log, 50, 60).await;
    let restarted = Relay::new(store.clone(), target.target());
    let progress = restarted.tick().await.unwrap();
    assert_eq!(
        progress.published, 10,
        "only the events the bus did not hold"
    );
    assert_eq!(
        progress.duplicates, 0,
        "no publish was answered as a duplicate: none was attempted"
    );
    assert_eq!(store.checkpoint(RELAY).await.unwrap(), 60);
    assert_bus_matches_log(&target.reader, &store, 60).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_goes_on_while_nats_is_down_and_the_relay_catches_up() {
    let Some(target) = Target::nats().await else {
        return;
    };
    let db = TestDb::sqlite();
    let (store, log, _stop) = log(&db).await;
    let dead = Relay::new(
        store.clone(),
        BusTarget::Nats {
            url: "nats://127.0.0.1:1".into(),
            config: target.reader.config().clone(),
        },
    );
    append(&log, 0, 30).await;
    let err = dead.tick().await.unwrap_err();
    assert!(format!("{err:#}").contains("NATS"), "{err:#}");
    append(&log, 30, 40).await;
    assert_eq!(
        store.head().await.unwrap(),
        40,
        "every append committed while the bus was down"
    );
    assert_eq!(store.checkpoint(RELAY).await.unwrap(), 0);

    // NATS is back (here: the relay restarts pointing at a live server); it catches up with no gaps.
    let live = Relay::new(store.clone(), target.target());
    assert_eq!(live.tick().await.unwrap().published, 40);
    assert_bus_matches_log(&target.reader, &store, 40).await;
    target.cleanup().await;
}

/// The running service: a webhook's event reaches JetStream through the relay loop, and /health says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_reaches_jetstream_through_the_running_service() {
    let Some(target) = Target::nats().await else {
        return;
    };
    let db = TestDb::sqlite();
    let mut settings = common::settings(&db);
    settings.nats_url = Some(common::nats_url());
    settings.bus = target.reader.config().clone();
    let app = common::TestApp::spawn(settings).await;
    let body =
        std::fs::read(common::fixtures_dir().join("github/issues/opened.payload.json")).unwrap();
    assert_eq!(
        app.post_github("issues", "e2e-1", &body)
            .await
            .status()
            .as_u16(),
        200
    );
    common::eventually("the event is on the stream", || async {
        target
            .reader
            .read(1, 10)
            .await
            .map(|m| m.len() == 1)
            .unwrap_or(false)
    })
    .await;
    let message = target.reader.read(1, 10).await.unwrap().remove(0);
    assert_eq!(
        message.subject,
        format!(
            "{}.github.issues.opened",
            target.reader.config().subject_prefix
        )
    );
    common::eventually("health reports the relay caught up", || async {
        app.health().await.1["checks"]["bus"]["relay"]["behind"] == 0
    })
    .await;
    let (status, health) = app.health().await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["checks"]["bus"]["kind"], "nats");
    assert_eq!(health["loops"]["relay"]["state"], "armed");
    app.stop().await;
    target.cleanup().await;
}

/// NATS configured but down: webhooks still 200, /health warns (not fails) and names the relay's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_nats_down_webhooks_succeed_and_health_warns() {
    let db = TestDb::sqlite();
    let mut settings = common::settings(&db);
    settings.nats_url = Some("nats://127.0.0.1:1".into());
    settings.bus = common::bus_config();
    let app = common::TestApp::spawn(settings).await;
    for i in 0..5 {
        let r = app
            .post_github("ping", &format!("down-{i}"), br#"{"zen":"z"}"#)
            .await;
        assert_eq!(r.status().as_u16(), 200);
    }
    common::eventually("the relay reports its error", || async {
        app.health().await.1["loops"]["relay"]["errors"]
            .as_u64()
            .unwrap_or(0)
            >= 1
    })
    .await;
    let (status, health) = app.health().await;
    assert_eq!(
        status, 200,
        "the bus is fan-out; its outage warns: {health}"
    );
    assert_eq!(health["status"], "warn");
    assert_eq!(health["checks"]["bus"]["status"], "warn");
    assert!(
        health["loops"]["relay"]["last_error"]
            .as_str()
            .unwrap()
            .contains("NATS"),
        "{health}"
    );
    assert_eq!(app.all_events().await.len(), 5);
    let metrics = app.metrics().await;
    assert!(metrics.contains("pidevops_relay_lag_events"), "{metrics}");
    app.stop().await;
}
