//! Three `pidevops serve` processes sharing one Postgres and one NATS: exactly one runs each singleton loop; the
//! holder SIGKILLed under webhook load is replaced within the lease TTL; and afterwards the JetStream stream and
//! the projections are exactly what a single replica would have produced.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::server::Server;
use crate::common::{within, TestDb, GITHUB_SECRET};
use pidevops::bus::{Bus, BusConfig, JetstreamBus};
use pidevops::eventlog::EventStore;
use pidevops::projectors::sources;
use pidevops::providers::github::webhook::sign_github;
use serde_json::Value;

const TTL_S: u64 = 6;
const SINGLETONS: [&str; 2] = ["relay", "projector:sources"];

async fn health(client: &reqwest::Client, base: &str) -> Option<Value> {
    let response = client.get(format!("{base}/health")).send().await.ok()?;
    response.json().await.ok()
}

/// Which replica (by index) each singleton loop's holder is, as every live replica reports it; `None` until
/// they all agree and the holder itself says it holds it.
async fn holders(
    client: &reqwest::Client,
    servers: &[Option<Server>],
) -> Option<BTreeMap<&'static str, usize>> {
    let mut agreed = BTreeMap::new();
    for name in SINGLETONS {
        let mut holder_seen: Option<String> = None;
        let mut held_here = Vec::new();
        for (i, server) in servers.iter().enumerate() {
            let Some(server) = server else { continue };
            let health = health(client, &server.base).await?;
            let lease = &health["loops"][name]["lease"];
            let holder = lease["holder"].as_str()?.to_owned();
            if holder_seen.get_or_insert(holder.clone()) != &holder {
                return None;
            }
            if lease["held_here"] == true {
                assert_eq!(
                    health["instance"].as_str(),
                    Some(holder.as_str()),
                    "a replica claims a lease held by another"
                );
                held_here.push(i);
            }
        }
        assert!(
            held_here.len() <= 1,
            "{name} held by replicas {held_here:?} at once"
        );
        agreed.insert(name, *held_here.first()?);
    }
    Some(agreed)
}

async fn wait_for_holders(
    client: &reqwest::Client,
    servers: &[Option<Server>],
    within: Duration,
) -> BTreeMap<&'static str, usize> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(h) = holders(client, servers).await {
            return h;
        }
        assert!(
            Instant::now() < deadline,
            "no agreed holder within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_one_holder_failover_within_the_ttl_and_exactly_once_results() {
    let _cores = crate::common::heavy().await;
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let config = crate::common::bus_config();
    let reader = match JetstreamBus::connect(&crate::common::nats_url(), config.clone()).await {
        Ok(bus) => Bus::Jetstream(bus),
        Err(e) if crate::common::in_ci() => panic!("CI is set and NATS is unreachable: {e}"),
        Err(e) => {
            eprintln!("\n*** SKIPPED the three-replica test: NATS is unreachable: {e}\n");
            return;
        }
    };
    let BusConfig {
        stream,
        subject_prefix,
    } = config.clone();
    let url = db.url_string();
    let nats = crate::common::nats_url();
    let ttl = TTL_S.to_string();
    let mut servers: Vec<Option<Server>> = Vec::new();
    for i in 0..3 {
        let id = format!("replica-{i}");
        servers.push(Some(
            Server::start_with(
                &url,
                &[
                    ("NATS_URL", nats.as_str()),
                    ("PIDEVOPS_NATS_STREAM", stream.as_str()),
                    ("PIDEVOPS_NATS_SUBJECT_PREFIX", subject_prefix.as_str()),
                    ("PIDEVOPS_LEASE_TTL_S", ttl.as_str()),
                    ("PIDEVOPS_INSTANCE_ID", id.as_str()),
                    ("PIDEVOPS_RELAY_INTERVAL_S", "0.2"),
                    ("PIDEVOPS_PROJECTOR_INTERVAL_S", "0.2"),
                    ("PIDEVOPS_LOOP_STARTUP_DELAY_S", "0.05"),
                ],
            )
            .await,
        ));
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let before = wait_for_holders(&client, &servers, Duration::from_secs(TTL_S * 2)).await;

    // Webhook load spread over all three replicas; a 2xx is a promise.
    let body = Arc::new(
        std::fs::read(
            crate::common::fixtures_dir().join("github/pull_request/opened.payload.json"),
        )
        .unwrap(),
    );
    let signature = sign_github(GITHUB_SECRET.as_bytes(), &body);
    let bases: Vec<String> = servers.iter().flatten().map(|s| s.base.clone()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let senders: Vec<_> = (0..6)
        .map(|s| {
            let (body, signature, client, stop, acked) = (
                body.clone(),
                signature.clone(),
                client.clone(),
                stop.clone(),
                acked.clone(),
            );
            let bases = bases.clone();
            tokio::spawn(async move {
                for n in 0.. {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let delivery = format!("s{s}-{n}");
                    let base = &bases[(s + n) % bases.len()];
                    let sent = client
                        .post(format!("{base}/webhooks/github"))
                        .header("content-type", "application/json")
                        .header("x-github-event", "pull_request")
                        .header("x-github-delivery", &delivery)
                        .header("x-hub-signature-256", &signature)
                        .body(body.as_ref().clone())
                        .send()
                        .await;
                    if matches!(&sent, Ok(r) if r.status().is_success()) {
                        acked.lock().unwrap().insert(delivery);
                    }
                }
            })
        })
        .collect();
    // Mid-load: deliveries are being acknowledged by the replicas.
    let acked_at_least = |n: usize| {
        let acked = acked.clone();
        within(
            Duration::from_secs(60),
            "deliveries acknowledged",
            move || {
                let acked = acked.clone();
                async move { acked.lock().unwrap().len() >= n }
            },
        )
    };
    acked_at_least(50).await;

    // SIGKILL the relay's holder mid-load. The failover is timed by the database's clock, which stamps each
    // lease's `acquired_at`: from just before the kill to the takeover, without the latency of watching it happen
    // through `/health` on a machine this busy.
    let victim = before["relay"];
    let leases = sqlx::PgPool::connect(&url).await.unwrap();
    let before_kill: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(&leases)
        .await
        .unwrap();
    let mut killed = servers[victim].take().expect("the holder is running");
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    let after = wait_for_holders(&client, &servers, Duration::from_secs(TTL_S * 3)).await;
    for name in SINGLETONS {
        assert_ne!(
            after[name], victim,
            "{name} still claimed by the dead replica"
        );
        if before[name] != victim {
            continue;
        }
        let acquired_at: chrono::DateTime<chrono::Utc> =
            sqlx::query_scalar("SELECT acquired_at FROM leases WHERE name = $1")
                .bind(name)
                .fetch_one(&leases)
                .await
                .unwrap();
        let failover = (acquired_at - before_kill)
            .to_std()
            .expect("taken over after the kill");
        eprintln!("{name}: failover in {failover:?} by the database's clock");
        assert!(
            failover <= Duration::from_secs(TTL_S),
            "{name}: failover took {failover:?}, longer than the {TTL_S} s TTL"
        );
    }
    // The survivors go on acknowledging under the same load before it stops.
    let before_stop = acked.lock().unwrap().len();
    acked_at_least(before_stop + 50).await;
    stop.store(true, Ordering::SeqCst);
    for s in senders {
        s.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > 50, "the load was real: {} acked", acked.len());

    // Every acknowledged delivery is in the log exactly once.
    let store = EventStore::connect(&db.url, 2).await.unwrap();
    let events = store.read_after(0, 1_000_000).await.unwrap();
    let keys: BTreeSet<String> = events.iter().map(|e| e.dedup_key.clone()).collect();
    assert_eq!(keys.len(), events.len(), "a delivery stored twice");
    for delivery in &acked {
        assert!(
            keys.contains(delivery),
            "acknowledged {delivery} is not in the log"
        );
    }
    let head = store.head().await.unwrap();
    assert_eq!(head as usize, events.len(), "positions have holes");

    // The survivors catch up: the stream and the projection are what one replica would have produced.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let messages = reader.read(1, 1_000_000).await.unwrap();
        let projected = pidevops::projectors::read_row(&store, sources::NAME)
            .await
            .unwrap()
            .map_or(0, |(_, p)| p);
        if messages.len() >= events.len() && projected == head {
            assert_eq!(
                messages.len(),
                events.len(),
                "one message per event, no more"
            );
            let mut ids = BTreeSet::new();
            for (m, e) in messages.iter().zip(&events) {
                assert_eq!((m.position, m.event_id), (e.position, e.id), "in log order");
                assert!(ids.insert(m.event_id), "Nats-Msg-Id {} twice", m.event_id);
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no catch-up: {} messages and projection at {projected} for {} events",
            messages.len(),
            events.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        sources::activity(&store).await.unwrap(),
        crate::common::sources_oracle(&store).await,
        "the projection differs from the log's"
    );
    drop(servers);
    if let Bus::Jetstream(bus) = &reader {
        bus.delete_stream().await.unwrap();
    }
}
