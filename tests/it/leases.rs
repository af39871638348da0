//! Leases against real databases: one holder at a time, takeover after expiry within the TTL, the holder stops
//! at once when it loses its lease, and a graceful release hands over immediately.

use std::time::{Duration, Instant};

use crate::common::TestDb;
use pidevops::eventlog::EventStore;
use pidevops::loops::lease::{while_held, Leases};

per_backend!(
    one_holder_at_a_time_and_a_silent_holder_is_replaced_within_the_ttl,
    a_holder_that_loses_its_lease_stops_its_work_at_once,
    a_holder_that_cannot_renew_lets_go_before_anyone_can_take_over,
    a_released_lease_is_taken_over_at_the_next_attempt,
    a_relay_that_regains_its_lease_resumes_from_the_bus_not_its_memory,
);

const TTL: Duration = Duration::from_secs(3);

async fn store(db: &TestDb) -> EventStore {
    let store = EventStore::connect(&db.url, 4).await.unwrap();
    store.migrate().await.unwrap();
    store
}

async fn one_holder_at_a_time_and_a_silent_holder_is_replaced_within_the_ttl(db: TestDb) {
    let _cores = crate::common::timed().await;
    let store = store(&db).await;
    let a = Leases::new(store.clone(), "replica-a", TTL);
    let b = Leases::new(store.clone(), "replica-b", TTL);
    let (la, lb) = (a.register("relay"), b.register("relay"));
    a.tick().await.unwrap();
    b.tick().await.unwrap();
    assert!(la.is_held());
    assert!(!lb.is_held(), "two holders at once");
    let seen_by_b = &b.views()["relay"];
    assert_eq!(seen_by_b.holder.as_deref(), Some("replica-a"));
    assert!(!seen_by_b.held_here);
    assert_eq!(seen_by_b.token, Some(1));

    // a renews for a while: b never gets it.
    for _ in 0..4 {
        tokio::time::sleep(a.attempt_interval()).await;
        a.tick().await.unwrap();
        b.tick().await.unwrap();
        assert!(la.is_held() && !lb.is_held());
    }

    // a goes silent (as if SIGKILLed right after renewing): b, trying every attempt interval, takes over
    // within the TTL.
    let silent_since = Instant::now();
    while !lb.is_held() {
        assert!(
            silent_since.elapsed() < TTL,
            "no takeover within the TTL ({:?})",
            silent_since.elapsed()
        );
        tokio::time::sleep(b.attempt_interval()).await;
        b.tick().await.unwrap();
    }
    assert!(!la.is_held(), "the silent holder's own clock ran out first");
    assert_eq!(
        b.views()["relay"].token,
        Some(2),
        "a new holder, a new fencing token"
    );
    // a comes back: it sees b and stays a standby.
    a.tick().await.unwrap();
    assert!(!la.is_held());
    assert_eq!(a.views()["relay"].holder.as_deref(), Some("replica-b"));
}

async fn a_holder_that_loses_its_lease_stops_its_work_at_once(db: TestDb) {
    let _cores = crate::common::timed().await;
    let store = store(&db).await;
    let a = Leases::new(store.clone(), "replica-a", TTL);
    let lease = a.register("projector:sources");
    a.tick().await.unwrap();
    assert!(lease.is_held());

    let work = {
        let lease = lease.clone();
        tokio::spawn(async move {
            while_held(&lease, async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(())
            })
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Another replica holds it now (an operator's hand, or a split brain healed in its favour).
    let sql = if db.is_postgres() {
        "UPDATE leases SET holder = 'replica-z', token = token + 1,
                expires_at = clock_timestamp() + interval '1 hour'"
    } else {
        "UPDATE leases SET holder = 'replica-z', token = token + 1, expires_at = 99999999999999"
    };
    crate::common::execute(&store, sql).await;
    let renewed = Instant::now();
    a.tick().await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(2), work)
        .await
        .expect("the work stopped when the lease was lost")
        .unwrap();
    assert!(renewed.elapsed() < Duration::from_secs(2));
    let error = outcome.expect_err("work cut short is an error, not a success");
    assert!(
        error
            .to_string()
            .contains("lost the projector:sources lease"),
        "{error}"
    );
    assert!(!lease.is_held());
    // Not held: work does not even start.
    let ran = while_held(&lease, async { Ok(()) }).await.unwrap();
    assert_eq!(ran, None);
}

async fn a_holder_that_cannot_renew_lets_go_before_anyone_can_take_over(db: TestDb) {
    let _cores = crate::common::timed().await;
    let store = store(&db).await;
    let a = Leases::new(store.clone(), "replica-a", TTL);
    let lease = a.register("relay");
    let sent = Instant::now();
    a.tick().await.unwrap();
    assert!(lease.is_held());
    // No more renewals (the database is unreachable from a, say): a's own clock must let go no later than the
    // row expires, which is when another replica may take over.
    tokio::time::timeout(TTL, lease.lost())
        .await
        .expect("the lease ran out locally");
    assert!(
        sent.elapsed() <= a.row_lifetime() + Duration::from_millis(50),
        "held past the row's lifetime: {:?}",
        sent.elapsed()
    );
    let b = Leases::new(store.clone(), "replica-b", TTL);
    let lb = b.register("relay");
    b.tick().await.unwrap();
    // Whether b got it right away depends on the database's clock vs. ours; it gets it within the attempt interval.
    if !lb.is_held() {
        tokio::time::sleep(b.attempt_interval()).await;
        b.tick().await.unwrap();
    }
    assert!(lb.is_held());
}

async fn a_released_lease_is_taken_over_at_the_next_attempt(db: TestDb) {
    let store = store(&db).await;
    let a = Leases::new(store.clone(), "replica-a", TTL);
    let b = Leases::new(store.clone(), "replica-b", TTL);
    let (la, lb) = (a.register("relay"), b.register("relay"));
    a.tick().await.unwrap();
    b.tick().await.unwrap();
    assert!(la.is_held() && !lb.is_held());
    a.release_all().await;
    assert!(!la.is_held(), "released means not held here");
    b.tick().await.unwrap();
    assert!(
        lb.is_held(),
        "no waiting for the expiry after a graceful release"
    );
    assert_eq!(b.views()["relay"].token, Some(2));
}

/// Replica A relays, loses the lease, B relays more, A regains it: A must resume after B's last message (what
/// the startup wiring's `resync` on acquiring does), not after its own, or it would publish B's events again.
async fn a_relay_that_regains_its_lease_resumes_from_the_bus_not_its_memory(db: TestDb) {
    use bytes::Bytes;
    use pidevops::bus::relay::{BusTarget, Relay};
    use pidevops::bus::MemoryBus;
    use pidevops::domain::{EventType, NewEvent, Source};
    use pidevops::eventlog::EventLog;

    let store = store(&db).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let (log, _task) = EventLog::start(store.clone(), Duration::from_secs(10), stop.clone());
    let append = |from: usize, to: usize| {
        let log = log.clone();
        async move {
            for i in from..to {
                log.append(NewEvent::new(
                    Source::Github,
                    EventType::new(Source::Github, &["push"]),
                    format!("d-{i}"),
                    "application/json",
                    Bytes::from_static(b"{}"),
                ))
                .await
                .unwrap();
            }
        }
    };
    let bus = MemoryBus::new(crate::common::bus_config());
    let a = Relay::new(store.clone(), BusTarget::Memory(bus.clone()))
        .with_tick_budget(crate::common::WHOLE_TICK);
    let b = Relay::new(store.clone(), BusTarget::Memory(bus.clone()))
        .with_tick_budget(crate::common::WHOLE_TICK);
    append(0, 10).await;
    assert_eq!(a.tick().await.unwrap().published, 10);
    append(10, 20).await;
    assert_eq!(
        b.tick().await.unwrap().published,
        10,
        "B resumed from the bus"
    );
    append(20, 25).await;
    a.resync().await;
    let progress = a.tick().await.unwrap();
    assert_eq!(
        (progress.published, progress.duplicates, progress.position),
        (5, 0, 25),
        "A republished what B had published"
    );
    stop.cancel();
}
