//! What a log-following loop asks of the store, on both backends: the bodies it picked, by position, and its
//! checkpoint moved without waiting for a flush (forward only, as a flushed move).

use std::time::Duration;

use crate::common::TestDb;
use bytes::Bytes;
use pidevops::domain::{EventType, NewEvent, Source};
use pidevops::eventlog::{EventLog, EventStore};
use tokio_util::sync::CancellationToken;

per_backend!(
    picked_bodies_come_back_byte_for_byte_and_no_others,
    an_unflushed_checkpoint_moves_forward_never_back_like_a_flushed_one,
);

async fn open(db: &TestDb) -> EventStore {
    let store = EventStore::connect(&db.url, 4).await.expect("connect");
    store.migrate().await.expect("migrate");
    store
}

async fn picked_bodies_come_back_byte_for_byte_and_no_others(db: TestDb) {
    let store = open(&db).await;
    let stop = CancellationToken::new();
    let (log, _appender) = EventLog::start(store.clone(), Duration::from_secs(20), stop.clone());
    // A large body, one with every byte value, and small ones.
    let large = "x".repeat(40_000).into_bytes();
    let binary: Vec<u8> = (0..=255).collect();
    let bodies = [
        b"{}".to_vec(),
        large,
        b"{\"n\":2}".to_vec(),
        binary,
        b"[]".to_vec(),
    ];
    let mut positions = Vec::new();
    for (n, body) in bodies.iter().enumerate() {
        let appended = log
            .append(NewEvent::new(
                Source::Github,
                EventType::new(Source::Github, &["push"]),
                format!("d-{n}"),
                "application/octet-stream",
                Bytes::from(body.clone()),
            ))
            .await
            .expect("appended");
        positions.push(appended.position);
    }
    stop.cancel();

    let mut picked = store
        .bodies_at(&[positions[3], positions[1], positions[4] + 1_000])
        .await
        .expect("bodies");
    picked.sort();
    assert_eq!(
        picked,
        [
            (positions[1], bodies[1].clone()),
            (positions[3], bodies[3].clone())
        ],
        "the picked bodies, exactly; a position with no event gives nothing"
    );
    assert!(store.bodies_at(&[]).await.expect("no read").is_empty());
}

async fn an_unflushed_checkpoint_moves_forward_never_back_like_a_flushed_one(db: TestDb) {
    let store = open(&db).await;
    assert_eq!(store.checkpoint("unflushed").await.expect("read"), 0);
    let moves = [(5, 5), (3, 5), (9, 9), (9, 9), (0, 9)];
    for (to, stored) in moves {
        let unflushed = store
            .advance_checkpoint_unflushed("unflushed", to)
            .await
            .expect("moved");
        let flushed = store
            .advance_checkpoint("flushed", to)
            .await
            .expect("moved");
        assert_eq!((unflushed, flushed), (stored, stored), "a move to {to}");
        assert_eq!(store.checkpoint("unflushed").await.expect("read"), stored);
    }
}
