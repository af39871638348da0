//! The relay: every committed event reaches the bus exactly once, in order, across crashes and outages.

use std::time::Duration;

use crate::common::nats_server::NatsServer;
use crate::common::{within, TestDb, WHOLE_TICK};
use bytes::Bytes;
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
            reader: Bus::Memory(MemoryBus::new(crate::common::bus_config())),
            url: None,
        }
    }

    async fn nats() -> Option<Self> {
        match JetstreamBus::connect(&crate::common::nats_url(), crate::common::bus_config()).await {
            Ok(bus) => Some(Self {
                reader: Bus::Jetstream(bus),
                url: Some(crate::common::nats_url()),
            }),
            Err(e) if crate::common::in_ci() => panic!("CI is set and NATS is unreachable: {e}"),
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
    let relay = Relay::new(store.clone(), target.target()).with_tick_budget(WHOLE_TICK);
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
    let first = Relay::new(store.clone(), target.target()).with_tick_budget(WHOLE_TICK);
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
    let restarted = Relay::new(store.clone(), target.target()).with_tick_budget(WHOLE_TICK);
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

/// A publish lost in the middle of the relay's window (as one is when the connection drops): what was sent after it
/// is refused by the bus rather than stored behind the gap, the checkpoint stays before it, and the next tick
/// resumes from the bus's tail and fills it, each event once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_lost_mid_window_leaves_no_gap_and_the_next_tick_fills_it() {
    let target = Target::memory();
    let Bus::Memory(bus) = &target.reader else {
        unreachable!("a memory target")
    };
    let db = TestDb::sqlite();
    let (store, log, _stop) = log(&db).await;
    append(&log, 0, 150).await;
    bus.inject_lost_publish(30);
    let relay = Relay::new(store.clone(), target.target()).with_tick_budget(WHOLE_TICK);
    let failed = relay.tick().await;
    assert!(failed.is_err(), "the lost publish fails the tick");
    let held: Vec<i64> = target
        .reader
        .read(1, 10_000)
        .await
        .unwrap()
        .iter()
        .map(|m| m.position)
        .collect();
    assert_eq!(
        held,
        (1..30).collect::<Vec<i64>>(),
        "nothing sent after the lost publish was stored"
    );
    assert_eq!(store.checkpoint(RELAY).await.unwrap(), 0);

    let progress = relay.tick().await.unwrap();
    assert_eq!(
        (progress.published, progress.duplicates, progress.position),
        (121, 0, 150),
        "the next tick resumed after the bus's last message"
    );
    assert_eq!(store.checkpoint(RELAY).await.unwrap(), 150);
    assert_bus_matches_log(&target.reader, &store, 150).await;
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
    let live = Relay::new(store.clone(), target.target()).with_tick_budget(WHOLE_TICK);
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
    let mut settings = crate::common::settings(&db);
    settings.nats_url = Some(crate::common::nats_url());
    settings.bus = target.reader.config().clone();
    let app = crate::common::TestApp::spawn(settings).await;
    let body =
        std::fs::read(crate::common::fixtures_dir().join("github/issues/opened.payload.json"))
            .unwrap();
    assert_eq!(
        app.post_github("issues", "e2e-1", &body)
            .await
            .status()
            .as_u16(),
        200
    );
    // Relayed by a driven tick, not waited for.
    app.drive("relay").await;
    let messages = target.reader.read(1, 10).await.unwrap();
    assert_eq!(messages.len(), 1, "the event is on the stream");
    let message = messages.into_iter().next().unwrap();
    assert_eq!(
        message.subject,
        format!(
            "{}.github.issues.opened",
            target.reader.config().subject_prefix
        )
    );
    crate::common::eventually("health reports the relay caught up", || async {
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
    let mut settings = crate::common::settings(&db);
    settings.nats_url = Some("nats://127.0.0.1:1".into());
    settings.bus = crate::common::bus_config();
    let app = crate::common::TestApp::spawn(settings).await;
    for i in 0..5 {
        let r = app
            .post_github("ping", &format!("down-{i}"), br#"{"zen":"z"}"#)
            .await;
        assert_eq!(r.status().as_u16(), 200);
    }
    crate::common::eventually("the relay reports its error", || async {
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
    assert_eq!(app.webhook_events().await.len(), 5);
    let metrics = app.metrics().await;
    assert!(metrics.contains("pidevops_relay_lag_events"), "{metrics}");
    app.stop().await;
}

/// Webhook senders that keep posting until told to stop, remembering every delivery and its status.
struct Senders {
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<Vec<(String, u16)>>>,
}

impl Senders {
    fn start(app: &crate::common::TestApp, concurrency: usize, body: Bytes) -> Self {
        let stop = CancellationToken::new();
        let signature = pidevops::providers::github::webhook::sign_github(
            crate::common::GITHUB_SECRET.as_bytes(),
            &body,
        );
        let tasks = (0..concurrency)
            .map(|worker| {
                let (stop, client, url) = (
                    stop.clone(),
                    app.client.clone(),
                    app.url("/webhooks/github"),
                );
                let (body, signature) = (body.clone(), signature.clone());
                tokio::spawn(async move {
                    let mut sent = Vec::new();
                    while !stop.is_cancelled() {
                        let delivery = format!("outage-{worker}-{}", sent.len());
                        let status = client
                            .post(&url)
                            .header("content-type", "application/json")
                            .header("x-github-event", "pull_request")
                            .header("x-github-delivery", &delivery)
                            .header("x-hub-signature-256", &signature)
                            .body(body.clone())
                            .send()
                            .await
                            .map_or(0, |r| r.status().as_u16());
                        sent.push((delivery, status));
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    sent
                })
            })
            .collect();
        Self { stop, tasks }
    }

    async fn finish(self) -> Vec<(String, u16)> {
        self.stop.cancel();
        let mut all = Vec::new();
        for task in self.tasks {
            all.extend(task.await.unwrap());
        }
        all
    }
}

/// The issue's outage: NATS dies while webhooks arrive and comes back with its store; the same process catches
/// up with no gap and no duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nats_outage_under_load_ends_with_the_stream_caught_up_in_the_same_process() {
    let _cores = crate::common::heavy().await;
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let mut nats = NatsServer::start().await;
    let mut settings = crate::common::settings(&db);
    settings.nats_url = Some(nats.url());
    settings.bus = crate::common::bus_config();
    // The production interval (stale after 3 s): 200 ms would make a loaded debug build look stale under load.
    settings.relay_interval = Duration::from_secs(1);
    let bus_config = settings.bus.clone();
    let app = crate::common::TestApp::spawn(settings).await;
    let body = Bytes::from(
        std::fs::read(
            crate::common::fixtures_dir().join("github/pull_request/opened.payload.json"),
        )
        .unwrap(),
    );
    let senders = Senders::start(&app, 8, body);

    let reader = JetstreamBus::connect(&nats.url(), bus_config.clone())
        .await
        .unwrap();
    within(
        Duration::from_secs(20),
        "the relay publishes before the outage",
        || async { matches!(reader.tail().await, Ok(pidevops::bus::Tail::Last(p)) if p >= 20) },
    )
    .await;
    drop(reader);

    let errors_before = app.health().await.1["loops"]["relay"]["errors"]
        .as_u64()
        .unwrap_or(0);
    nats.kill();
    // From the kill on, health never fails (the bus is fan-out and ingest goes on) and soon names the error.
    within(
        Duration::from_secs(30),
        "health reports the relay's error and its lag",
        || async {
            let (status, h) = app.health().await;
            assert_eq!(status, 200, "a NATS outage must not fail health: {h}");
            h["loops"]["relay"]["errors"].as_u64().unwrap_or(0) > errors_before
                && h["checks"]["bus"]["relay"]["behind"].as_i64().unwrap_or(0) > 0
        },
    )
    .await;
    for _ in 0..20 {
        let (status, h) = app.health().await;
        assert_eq!(status, 200, "a NATS outage must not fail health: {h}");
        assert_eq!(h["status"], "warn", "{h}");
        assert_eq!(h["checks"]["bus"]["status"], "warn", "{h}");
        assert!(h["loops"]["relay"]["last_error"].is_string(), "{h}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The lag is read from /health, which is this app's own: the metrics recorder is shared by every test here.
    nats.restart().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sent = senders.finish().await;
    let refused: Vec<_> = sent.iter().filter(|(_, status)| *status != 200).collect();
    assert!(refused.is_empty(), "every webhook gets 200: {refused:?}");

    let store = app.state.log.store().clone();
    let webhooks = app.webhook_events().await;
    assert_eq!(
        webhooks.len(),
        sent.len(),
        "every acknowledged webhook is in the log"
    );
    let keys: std::collections::HashSet<_> =
        webhooks.iter().map(|e| e.dedup_key.as_str()).collect();
    assert!(sent
        .iter()
        .all(|(delivery, _)| keys.contains(delivery.as_str())));
    let head = store.head().await.unwrap();
    // The stream carries the whole log (pidevops's own events too, should there be any).
    let events = app.all_events().await;

    // The same process, never restarted, catches up.
    let reader = JetstreamBus::connect(&nats.url(), bus_config)
        .await
        .unwrap();
    within(
        Duration::from_secs(60),
        "the stream catches up with the log",
        || async { matches!(reader.tail().await, Ok(pidevops::bus::Tail::Last(p)) if p == head) },
    )
    .await;
    let messages = Bus::Jetstream(reader.clone())
        .read(1, events.len() + 10)
        .await
        .unwrap();
    assert_eq!(
        messages.len(),
        events.len(),
        "exactly one message per event, no duplicate stored"
    );
    let ids: std::collections::HashSet<_> = messages.iter().map(|m| m.event_id).collect();
    assert_eq!(ids.len(), messages.len(), "each Nats-Msg-Id once");
    for (i, (m, e)) in messages.iter().zip(&events).enumerate() {
        assert_eq!(
            m.position,
            i as i64 + 1,
            "Pidevops-Position runs 1..N with no gap"
        );
        assert_eq!(
            (m.position, m.event_id),
            (e.position, e.id),
            "in the log's order"
        );
    }
    within(
        Duration::from_secs(20),
        "health is back to pass",
        || async {
            let (status, h) = app.health().await;
            status == 200
                && h["checks"]["bus"]["status"] == "pass"
                && h["checks"]["bus"]["relay"]["behind"] == 0
        },
    )
    .await;
    app.stop().await;
    reader.delete_stream().await.unwrap();
}

/// NATS comes back without its store (a lost volume): the relay, still the same process, re-creates the stream
/// and re-feeds it from the start of the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nats_that_comes_back_empty_is_refed_from_the_log() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let mut nats = NatsServer::start().await;
    let mut settings = crate::common::settings(&db);
    settings.nats_url = Some(nats.url());
    settings.bus = crate::common::bus_config();
    let bus_config = settings.bus.clone();
    let app = crate::common::TestApp::spawn(settings).await;
    let body = br#"{"zen":"z"}"#;
    for i in 0..30 {
        assert_eq!(
            app.post_github("ping", &format!("lost-{i}"), body)
                .await
                .status(),
            200
        );
    }
    let reader = JetstreamBus::connect(&nats.url(), bus_config.clone())
        .await
        .unwrap();
    app.drive("relay").await;
    assert!(
        matches!(reader.tail().await, Ok(pidevops::bus::Tail::Last(30))),
        "the first 30 are on the stream"
    );
    drop(reader);

    let errors_before = app.health().await.1["loops"]["relay"]["errors"]
        .as_u64()
        .unwrap_or(0);
    nats.kill();
    nats.lose_store();
    for i in 30..40 {
        assert_eq!(
            app.post_github("ping", &format!("lost-{i}"), body)
                .await
                .status(),
            200
        );
    }
    within(
        Duration::from_secs(20),
        "the relay notices the outage",
        || async {
            app.health().await.1["loops"]["relay"]["errors"]
                .as_u64()
                .unwrap_or(0)
                > errors_before
        },
    )
    .await;
    nats.restart().await;
    // Watched through a bare client: a JetstreamBus would create the stream itself and hide the relay's part.
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    within(
        Duration::from_secs(30),
        "the relay re-creates the stream and re-feeds the whole log",
        || async {
            match js.get_stream(&bus_config.stream).await {
                Ok(mut stream) => stream
                    .info()
                    .await
                    .is_ok_and(|i| i.state.messages == 40 && i.state.last_sequence == 40),
                Err(_) => false,
            }
        },
    )
    .await;
    let reader = Bus::Jetstream(
        JetstreamBus::connect(&nats.url(), bus_config)
            .await
            .unwrap(),
    );
    let store = app.state.log.store().clone();
    assert_bus_matches_log(&reader, &store, 40).await;
    app.stop().await;
    if let Bus::Jetstream(bus) = reader {
        bus.delete_stream().await.unwrap();
    }
}
