//! The event log conformance suite: the same test bodies run against Postgres and SQLite.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use crate::common::TestDb;
use bytes::Bytes;
use pidevops::domain::{EventType, NewEvent, Source, Subject};
use pidevops::eventlog::{AppendError, EventLog, EventStore};
use tokio_util::sync::CancellationToken;

per_backend!(
    appends_get_consecutive_positions_and_keep_exact_bytes,
    a_duplicate_key_returns_the_original_event,
    racing_duplicates_store_exactly_one_event,
    readers_never_skip_an_event_under_concurrent_writers,
    concurrent_appends_are_group_committed,
    stream_versions_are_compare_and_set,
    racing_appends_at_a_streams_end_all_land_once_each_in_consecutive_versions,
    migrations_are_idempotent_and_safe_to_race,
    the_log_is_append_only,
    reads_page_in_position_order,
    a_pinned_key_with_the_same_body_is_a_duplicate_and_another_body_is_refused,
    keys_stored_unpinned_keep_deduplicating_on_the_key_alone,
    concurrent_mixed_batches_decide_as_one_at_a_time,
);

async fn open(db: &TestDb) -> (EventStore, EventLog, CancellationToken) {
    let store = EventStore::connect(&db.url, 8).await.expect("connect");
    store.migrate().await.expect("migrate");
    let stop = CancellationToken::new();
    let (log, _task) = EventLog::start(store.clone(), Duration::from_secs(20), stop.clone());
    (store, log, stop)
}

fn event(source: Source, key: &str, body: &[u8]) -> NewEvent {
    let mut e = NewEvent::new(
        source,
        EventType::new(source, &["test", "appended"]),
        key,
        "application/json",
        Bytes::copy_from_slice(body),
    );
    e.subject = Subject {
        action: Some("appended".into()),
        repository: Some("acme/billing".into()),
        number: Some(12),
        reference: Some("ENG-1".into()),
    };
    e.meta
        .insert("x-github-delivery".into(), serde_json::json!(key));
    e
}

fn sha256_hex(body: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(body))
}

fn streamed(stream: &str, version: i64) -> NewEvent {
    let mut e = event(Source::Pidevops, &format!("{stream}@{version}"), b"{}");
    e.stream = Some((stream.to_owned(), version));
    e
}

async fn appends_get_consecutive_positions_and_keep_exact_bytes(db: TestDb) {
    let (store, log, _stop) = open(&db).await;
    // Whitespace, key order and number formatting are part of the record.
    let body = br#"{ "b": 1.50,  "a" : [ ], "unicode": "\u00e9 \ud83d\ude80" }"#;
    let first = log
        .append(event(Source::Github, "d-1", body))
        .await
        .unwrap();
    let second = log
        .append(event(Source::Linear, "d-1", b"{}"))
        .await
        .unwrap();
    assert_eq!((first.position, first.duplicate), (1, false));
    assert_eq!(
        (second.position, second.duplicate),
        (2, false),
        "keys are per source"
    );
    assert_eq!(store.head().await.unwrap(), 2);

    let stored = store.get(first.event_id).await.unwrap().expect("stored");
    assert_eq!(stored.body, body.to_vec());
    assert_eq!(stored.data_json().get().as_bytes(), body);
    assert_eq!(stored.source, "github");
    assert_eq!(stored.event_type, "github.test.appended");
    assert_eq!(stored.repository.as_deref(), Some("acme/billing"));
    assert_eq!(stored.number, Some(12));
    assert_eq!(stored.reference.as_deref(), Some("ENG-1"));
    assert_eq!(
        stored.meta.text("x-github-delivery").as_deref(),
        Some("d-1")
    );
    assert_eq!(stored.id.get_version_num(), 7, "ids are UUIDv7");
    assert!(stored.recorded_at >= stored.occurred_at - chrono::Duration::seconds(1));
    assert!(store.get(uuid::Uuid::now_v7()).await.unwrap().is_none());
}

async fn a_duplicate_key_returns_the_original_event(db: TestDb) {
    let (store, log, _stop) = open(&db).await;
    let original = log
        .append(event(Source::Github, "same", b"{\"n\":1}"))
        .await
        .unwrap();
    log.append(event(Source::Github, "other", b"{}"))
        .await
        .unwrap();
    let again = log
        .append(event(Source::Github, "same", b"{\"n\":2}"))
        .await
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(again.event_id, original.event_id);
    assert_eq!(again.position, original.position);
    assert_eq!(store.count_by_key(Source::Github, "same").await.unwrap(), 1);
    let stored = store.get(original.event_id).await.unwrap().unwrap();
    assert_eq!(
        stored.body,
        b"{\"n\":1}".to_vec(),
        "the first body is the record"
    );
    assert_eq!(
        store.head().await.unwrap(),
        2,
        "a duplicate takes no position"
    );
}

async fn racing_duplicates_store_exactly_one_event(db: TestDb) {
    let (store, log, _stop) = open(&db).await;
    // A second appender (another replica) races the first on the same keys.
    let (_store2, log2, _stop2) = open(&db).await;
    for round in 0..5 {
        let key = format!("race-{round}");
        let mut tasks = Vec::new();
        for i in 0..24 {
            let log = if i % 2 == 0 {
                log.clone()
            } else {
                log2.clone()
            };
            let key = key.clone();
            tasks.push(tokio::spawn(async move {
                log.append(event(Source::Github, &key, b"{}")).await
            }));
        }
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await.unwrap().expect("every racer gets an answer"));
        }
        let ids: HashSet<_> = results.iter().map(|r| (r.event_id, r.position)).collect();
        assert_eq!(ids.len(), 1, "every racer sees the same event: {results:?}");
        assert_eq!(
            results.iter().filter(|r| !r.duplicate).count(),
            1,
            "exactly one racer wrote it"
        );
        assert_eq!(store.count_by_key(Source::Github, &key).await.unwrap(), 1);
    }
}

async fn readers_never_skip_an_event_under_concurrent_writers(db: TestDb) {
    const WRITERS: usize = 4;
    const TASKS_PER_WRITER: usize = 8;
    const EVENTS_PER_TASK: usize = 40;
    const TOTAL: usize = WRITERS * TASKS_PER_WRITER * EVENTS_PER_TASK;

    // Several appenders with their own pools stand in for several replicas writing at once.
    let mut logs = Vec::new();
    for _ in 0..WRITERS {
        logs.push(open(&db).await);
    }
    let reader_store = logs[0].0.clone();
    let done = CancellationToken::new();
    let reader_done = done.clone();
    let reader = tokio::spawn(async move {
        let mut seen: Vec<(i64, uuid::Uuid)> = Vec::new();
        let mut last = 0;
        loop {
            let finished = reader_done.is_cancelled();
            let page = reader_store.read_after(last, 37).await.expect("read");
            for e in &page {
                assert!(e.position > last, "positions only go up");
                seen.push((e.position, e.id));
                last = e.position;
            }
            if page.is_empty() {
                if finished {
                    return seen;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    });

    let mut writers = Vec::new();
    for (w, (_, log, _)) in logs.iter().enumerate() {
        for t in 0..TASKS_PER_WRITER {
            let log = log.clone();
            writers.push(tokio::spawn(async move {
                let mut appended = Vec::new();
                for n in 0..EVENTS_PER_TASK {
                    let key = format!("w{w}-t{t}-n{n}");
                    let a = log
                        .append(event(Source::Github, &key, b"{}"))
                        .await
                        .expect("append");
                    assert!(!a.duplicate);
                    appended.push((a.position, a.event_id));
                }
                appended
            }));
        }
    }
    let mut appended = BTreeSet::new();
    for w in writers {
        appended.extend(w.await.unwrap());
    }
    done.cancel();
    let seen = reader.await.unwrap();
    assert_eq!(appended.len(), TOTAL);
    assert_eq!(seen.len(), TOTAL, "the reader saw every event exactly once");
    let seen_set: BTreeSet<_> = seen.iter().copied().collect();
    assert_eq!(
        seen_set, appended,
        "the reader saw exactly the acknowledged events"
    );
    let positions: Vec<i64> = seen.iter().map(|(p, _)| *p).collect();
    assert_eq!(
        positions,
        (1..=TOTAL as i64).collect::<Vec<_>>(),
        "gap-free and in order"
    );
}

async fn concurrent_appends_are_group_committed(db: TestDb) {
    let (store, log, _stop) = open(&db).await;
    const N: usize = 400;
    let mut tasks = Vec::new();
    for i in 0..N {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            log.append(event(Source::Github, &format!("g-{i}"), b"{}"))
                .await
        }));
    }
    for t in tasks {
        t.await.unwrap().expect("append");
    }
    assert_eq!(log.stats().events(), N as u64);
    let transactions = log.stats().transactions();
    assert!(
        transactions <= (N / 4) as u64,
        "{N} concurrent appends took {transactions} transactions; expected batching"
    );
    assert_eq!(store.head().await.unwrap(), N as i64);
}

async fn stream_versions_are_compare_and_set(db: TestDb) {
    let (store, log, _stop) = open(&db).await;
    log.append(streamed("task:T-1", 1)).await.unwrap();
    log.append(streamed("task:T-1", 2)).await.unwrap();
    match log.append(streamed("task:T-1", 2)).await {
        Err(AppendError::Conflict {
            stream,
            expected,
            actual,
        }) => {
            assert_eq!((stream.as_str(), expected, actual), ("task:T-1", 2, 2));
        }
        // Same dedup key as the stored version 2, so it may also be answered as that duplicate.
        Ok(a) => assert!(a.duplicate),
        Err(e) => panic!("{e}"),
    }
    let mut gap = streamed("task:T-1", 9);
    gap.dedup_key = "gap".into();
    assert!(matches!(
        log.append(gap).await,
        Err(AppendError::Conflict { actual: 2, .. })
    ));

    // Racing writers for the next version: exactly one wins.
    let (_s2, log2, _stop2) = open(&db).await;
    let mut tasks = Vec::new();
    for i in 0..10 {
        let log = if i % 2 == 0 {
            log.clone()
        } else {
            log2.clone()
        };
        tasks.push(tokio::spawn(async move {
            let mut e = streamed("task:T-1", 3);
            e.dedup_key = format!("writer-{i}");
            log.append(e).await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(a) => {
                assert!(!a.duplicate);
                wins += 1;
            }
            Err(AppendError::Conflict { actual: 3, .. }) => {}
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!(wins, 1);
    assert_eq!(store.head().await.unwrap(), 3);
}

/// `append_at_end` reads the stream's end again when another writer took it: racing writers on two appenders all
/// land, each once, at consecutive versions; a repeat of a stored key is its duplicate, not a new version.
async fn racing_appends_at_a_streams_end_all_land_once_each_in_consecutive_versions(db: TestDb) {
    let (store, log, _stop) = open(&db).await;
    let (_s2, log2, _stop2) = open(&db).await;
    let writers = 6;
    let mut tasks = Vec::new();
    for i in 0..writers {
        let log = if i % 2 == 0 {
            log.clone()
        } else {
            log2.clone()
        };
        tasks.push(tokio::spawn(async move {
            let mut e = streamed("budget", 0);
            e.dedup_key = format!("raise-{i}");
            log.append_at_end("budget", e).await
        }));
    }
    for t in tasks {
        let appended = t.await.unwrap().expect("each writer lands");
        assert!(!appended.duplicate);
    }
    let stored = store.read_stream("budget").await.unwrap();
    let versions: Vec<i64> = stored.iter().filter_map(|e| e.stream_version).collect();
    assert_eq!(versions, (1..=writers as i64).collect::<Vec<_>>());
    let mut keys: Vec<&str> = stored.iter().map(|e| e.dedup_key.as_str()).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["raise-0", "raise-1", "raise-2", "raise-3", "raise-4", "raise-5"]
    );

    let mut again = streamed("budget", 0);
    again.dedup_key = "raise-3".into();
    assert!(log.append_at_end("budget", again).await.unwrap().duplicate);
    assert_eq!(
        store.stream_version("budget").await.unwrap(),
        writers as i64
    );
}

async fn migrations_are_idempotent_and_safe_to_race(db: TestDb) {
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let url = db.url.clone();
        tasks.push(tokio::spawn(async move {
            let store = EventStore::connect(&url, 2).await.expect("connect");
            store.migrate().await
        }));
    }
    for t in tasks {
        t.await
            .unwrap()
            .expect("every racing replica migrates cleanly");
    }
    let store = EventStore::connect(&db.url, 2).await.unwrap();
    store.migrate().await.expect("a second run is a no-op");
    assert_eq!(store.head().await.unwrap(), 0);
}

async fn the_log_is_append_only(db: TestDb) {
    let (store, log, _stop) = open(&db).await;
    log.append(event(Source::Github, "k", b"{}")).await.unwrap();
    let update = "UPDATE events SET body = x'00'";
    let delete = "DELETE FROM events";
    match &store {
        EventStore::Postgres(pg) => {
            let update = update.replace("x'00'", "'\\x00'::bytea");
            assert!(sqlx::query(&update).execute(pg.pool()).await.is_err());
            assert!(sqlx::query(delete).execute(pg.pool()).await.is_err());
        }
        EventStore::Sqlite(lite) => {
            assert!(sqlx::query(update).execute(lite.pool()).await.is_err());
            assert!(sqlx::query(delete).execute(lite.pool()).await.is_err());
        }
    }
    assert_eq!(
        store.read_after(0, 10).await.unwrap()[0].body,
        b"{}".to_vec()
    );
}

async fn reads_page_in_position_order(db: TestDb) {
    let (store, log, _stop) = open(&db).await;
    for i in 0..25 {
        log.append(event(Source::Telegram, &format!("bot:{i}"), b"{}"))
            .await
            .unwrap();
    }
    let page = store.read_after(0, 10).await.unwrap();
    assert_eq!(
        page.iter().map(|e| e.position).collect::<Vec<_>>(),
        (1..=10).collect::<Vec<_>>()
    );
    let page = store.read_after(20, 10).await.unwrap();
    assert_eq!(
        page.iter().map(|e| e.position).collect::<Vec<_>>(),
        (21..=25).collect::<Vec<_>>()
    );
    assert!(store.read_after(25, 10).await.unwrap().is_empty());
    assert_eq!(page[0].dedup_key, "bot:20");
}

#[tokio::test]
async fn a_shut_down_appender_answers_closed_not_lost() {
    let db = TestDb::sqlite();
    let store = EventStore::connect(&db.url, 4).await.unwrap();
    store.migrate().await.unwrap();
    let stop = CancellationToken::new();
    let (log, task) = EventLog::start(store.clone(), Duration::from_secs(5), stop.clone());
    let appended = log
        .append(event(Source::Github, "before", b"{}"))
        .await
        .unwrap();
    stop.cancel();
    task.await.unwrap();
    let after = log.append(event(Source::Github, "after", b"{}")).await;
    assert!(matches!(after, Err(AppendError::Closed)), "{after:?}");
    assert_eq!(store.head().await.unwrap(), appended.position);
}

/// A connection handed back to the pool inside a transaction (a task cancelled between sqlx's `BEGIN IMMEDIATE`
/// and the transaction it would have returned, as a shutdown's aborted tick can be) held SQLite's one write lock
/// until the pool next handed that very connection out: every other writer waited out the 30 s busy timeout and
/// failed with `database is locked` (seen: shutdowns releasing their leases one 30 s wait at a time). Now the pool
/// closes such a connection as it comes back, which rolls its transaction back, and the next writer goes at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_returned_inside_a_transaction_does_not_keep_the_write_lock() {
    use sqlx::Connection;
    let db = TestDb::sqlite();
    let store = EventStore::connect(&db.url, 4).await.unwrap();
    store.migrate().await.unwrap();
    let EventStore::Sqlite(sqlite) = &store else {
        unreachable!("TestDb::sqlite() is SQLite")
    };
    let mut stranded = sqlite.pool().acquire().await.unwrap();
    let other = sqlite.pool().acquire().await.unwrap();
    // The transaction's guard never runs: the connection keeps its open write transaction, as when the future
    // that would have built the guard is dropped.
    std::mem::forget(stranded.begin_with("BEGIN IMMEDIATE").await.unwrap());
    assert!(stranded.is_in_transaction());
    // `other` goes back first, so the next writer is handed `other`, not the stranded connection.
    drop(other);
    drop(stranded);
    let stop = CancellationToken::new();
    let (log, _task) = EventLog::start(store.clone(), Duration::from_secs(60), stop.clone());
    let appended = tokio::time::timeout(
        Duration::from_secs(20),
        log.append(event(Source::Github, "after-a-stranded-transaction", b"{}")),
    )
    .await
    .expect("the append waits for no stranded transaction")
    .expect("the append lands");
    assert_eq!(store.head().await.unwrap(), appended.position);
    stop.cancel();
}

/// A plan cached while the log was empty must not scan the whole log forever after (this machine's Postgres runs
/// with autovacuum off, so nothing would ever re-plan it). The worst case is forced: generic plans for everything
/// this database runs, cached on the first appends into an empty log. After 400 appends and duplicates through
/// the same connections, Postgres must report no sequential scan of `events`. (Reads use custom plans by design,
/// which may rightly scan a one-page table, so they stay out of this count.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_appends_and_reads_never_scan_the_whole_log() {
    use sqlx::{Connection, Executor, Row};
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let url = db.url_string();
    let name = url.rsplit('/').next().unwrap().to_owned();
    let mut admin = sqlx::PgConnection::connect(&crate::common::postgres_admin_url())
        .await
        .unwrap();
    admin
        .execute(format!("ALTER DATABASE {name} SET plan_cache_mode = force_generic_plan").as_str())
        .await
        .unwrap();

    let stats = |url: String| async move {
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        let row = conn
            .fetch_one(
                "SELECT seq_scan, idx_scan FROM pg_stat_user_tables WHERE relname = 'events'",
            )
            .await
            .unwrap();
        (
            row.get::<i64, _>("seq_scan"),
            row.get::<Option<i64>, _>("idx_scan").unwrap_or(0),
        )
    };
    // Building the indexes scans the table once each; those scans are the baseline.
    {
        let migrator = EventStore::connect(&db.url, 2).await.unwrap();
        migrator.migrate().await.unwrap();
        let EventStore::Postgres(pg) = &migrator else {
            unreachable!()
        };
        pg.close().await;
    }
    // Generous caps: each loop ends as soon as the statistics have arrived.
    let mut baseline = stats(url.clone()).await;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = stats(url.clone()).await;
        if now == baseline && now.0 > 0 {
            break;
        }
        baseline = now;
    }

    let (store, log, _stop) = open(&db).await;
    for round in 0..10 {
        let mut tasks = Vec::new();
        for i in 0..40 {
            let log = log.clone();
            // Every fourth key repeats an earlier round's key: duplicates take the lookup path too.
            let key = if i % 4 == 0 && round > 0 {
                format!("k-{}-{i}", round - 1)
            } else {
                format!("k-{round}-{i}")
            };
            tasks.push(tokio::spawn(async move {
                log.append(event(Source::Github, &key, b"{}")).await
            }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
    }
    let EventStore::Postgres(pg) = &store else {
        unreachable!()
    };
    // Backends flush their statistics when they exit.
    pg.close().await;

    let mut last = baseline;
    for _ in 0..300 {
        last = stats(url.clone()).await;
        if last.1 >= baseline.1 + 400 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        last.1 >= baseline.1 + 400,
        "the lookups went through an index: {baseline:?} -> {last:?}"
    );
    assert_eq!(
        last.0, baseline.0,
        "no sequential scan of events: {baseline:?} -> {last:?}"
    );
}

async fn a_pinned_key_with_the_same_body_is_a_duplicate_and_another_body_is_refused(db: TestDb) {
    let (store, log, _stop) = open(&db).await;
    let original = log
        .append(event(Source::Github, "d-1", b"{\"n\":1}").pinned())
        .await
        .unwrap();
    let again = log
        .append(event(Source::Github, "d-1", b"{\"n\":1}").pinned())
        .await
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(
        (again.event_id, again.position),
        (original.event_id, original.position)
    );

    let refused = log
        .append(event(Source::Github, "d-1", b"{\"n\":2}").pinned())
        .await;
    match refused {
        Err(AppendError::DifferentBody {
            provider,
            dedup_key,
            event_id,
            position,
            stored,
            received,
        }) => {
            assert_eq!((provider, dedup_key.as_str()), (Source::Github, "d-1"));
            assert_eq!((event_id, position), (original.event_id, original.position));
            assert_eq!(stored, sha256_hex(b"{\"n\":1}"));
            assert_eq!(received, sha256_hex(b"{\"n\":2}"));
        }
        other => panic!("a different body under a stored delivery id is refused: {other:?}"),
    }
    // Refused, and nothing else changed: one event, the first body, no position taken.
    assert_eq!(store.count_by_key(Source::Github, "d-1").await.unwrap(), 1);
    assert_eq!(store.head().await.unwrap(), 1);
    let stored = store.get(original.event_id).await.unwrap().unwrap();
    assert_eq!(stored.body, b"{\"n\":1}".to_vec());
    // Another source's same key is another key.
    let other_source = log
        .append(event(Source::Telegram, "d-1", b"{\"n\":2}").pinned())
        .await
        .unwrap();
    assert_eq!((other_source.position, other_source.duplicate), (2, false));
    // An unpinned append under a pinned key is first-writer-wins, as internal keys always were.
    let unpinned = log
        .append(event(Source::Github, "d-1", b"{\"n\":3}"))
        .await
        .unwrap();
    assert!(unpinned.duplicate);
    assert_eq!(unpinned.event_id, original.event_id);
}

async fn keys_stored_unpinned_keep_deduplicating_on_the_key_alone(db: TestDb) {
    let (store, log, _stop) = open(&db).await;
    // Rows written before digests existed have none, exactly like an unpinned append's.
    let legacy = log
        .append(event(Source::Github, "legacy", b"{\"n\":1}"))
        .await
        .unwrap();
    let pinned_later = log
        .append(event(Source::Github, "legacy", b"{\"n\":2}").pinned())
        .await
        .unwrap();
    assert!(pinned_later.duplicate);
    assert_eq!(pinned_later.event_id, legacy.event_id);
    assert_eq!(store.head().await.unwrap(), 1);
}

/// Many writers on two appenders (two replicas) send pinned same-body, pinned other-body and unpinned appends
/// under a few keys, and stream appends racing for the same versions. Whatever batches form, each answer must be
/// what appending one at a time would give against the event that won its key.
async fn concurrent_mixed_batches_decide_as_one_at_a_time(db: TestDb) {
    let (store, log, _stop) = open(&db).await;
    let (_store2, log2, _stop2) = open(&db).await;
    // Several rounds: how the requests fall into batches varies, and each round is another chance for a key's
    // rivals to meet inside one batch (decided in memory) rather than across batches (decided against the log).
    let mut head = 0;
    for round in 0..5 {
        head = mixed_round(&store, &log, &log2, round, head).await;
    }
}

async fn mixed_round(
    store: &EventStore,
    log: &EventLog,
    log2: &EventLog,
    round: usize,
    head_before: i64,
) -> i64 {
    const KEYS: usize = 6;
    let bodies: [&[u8]; 2] = [b"{\"body\":\"a\"}", b"{\"body\":\"b\"}"];
    let mut tasks = Vec::new();
    for i in 0..96usize {
        let log = if i % 2 == 0 {
            log.clone()
        } else {
            log2.clone()
        };
        let key = format!("mixed-{round}-{}", i % KEYS);
        // 0: pinned body a, 1: pinned body b, 2: unpinned body b, 3: a stream append.
        let kind = (i / KEYS) % 4;
        let e = match kind {
            0 => event(Source::Github, &key, bodies[0]).pinned(),
            1 => event(Source::Github, &key, bodies[1]).pinned(),
            2 => event(Source::Github, &key, bodies[1]),
            _ => {
                let mut e = streamed(&format!("task:T-mixed-{round}"), 1 + (i % 3) as i64);
                e.dedup_key = format!("stream-{round}-{i}");
                e
            }
        };
        tasks.push(tokio::spawn(async move {
            let pinned = kind < 2;
            let body = e.body.to_vec();
            let id = e.id;
            let key = e.dedup_key.clone();
            (key, kind, pinned, body, id, log.append(e).await)
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }

    let mut winners = std::collections::HashMap::new();
    for (key, kind, pinned, body, id, answer) in &answers {
        if *kind == 3 {
            continue;
        }
        if let Ok(a) = answer {
            if !a.duplicate {
                assert_eq!(a.event_id, *id);
                assert!(
                    winners
                        .insert(key.clone(), (*id, a.position, *pinned, body.clone()))
                        .is_none(),
                    "one new event per key: {key}"
                );
            }
        }
    }
    assert_eq!(winners.len(), KEYS, "every key stored once");
    for (key, kind, pinned, body, _id, answer) in &answers {
        if *kind == 3 {
            continue;
        }
        let (won_id, won_position, won_pinned, won_body) = &winners[key];
        assert_eq!(store.count_by_key(Source::Github, key).await.unwrap(), 1);
        let stored = store.get(*won_id).await.unwrap().unwrap();
        assert_eq!(&stored.body, won_body, "the winner's body is the record");
        let differs = *won_pinned && *pinned && won_body != body;
        match answer {
            Ok(a) => {
                assert!(!differs, "{key}: another pinned body answered as {a:?}");
                assert_eq!((a.event_id, a.position), (*won_id, *won_position));
            }
            Err(AppendError::DifferentBody {
                event_id,
                position,
                stored,
                received,
                ..
            }) => {
                assert!(differs, "{key}: refused without a difference");
                assert_eq!((*event_id, *position), (*won_id, *won_position));
                assert_eq!(stored, &sha256_hex(won_body));
                assert_eq!(received, &sha256_hex(body));
            }
            Err(other) => panic!("{key}: {other:?}"),
        }
    }
    // Stream appends: exactly one per version wins, in order, and each loser was told the version it met.
    let stream = store
        .read_stream(&format!("task:T-mixed-{round}"))
        .await
        .unwrap();
    let versions: Vec<i64> = stream.iter().filter_map(|e| e.stream_version).collect();
    assert_eq!(versions, (1..=versions.len() as i64).collect::<Vec<_>>());
    assert!(!versions.is_empty());
    for (_, kind, _, _, _, answer) in &answers {
        if *kind == 3 {
            assert!(
                matches!(answer, Ok(a) if !a.duplicate)
                    || matches!(answer, Err(AppendError::Conflict { .. })),
                "{answer:?}"
            );
        }
    }
    // Gap-free: the head moved by exactly the keys and stream events stored.
    let head = store.head().await.unwrap();
    assert_eq!(head, head_before + (KEYS + versions.len()) as i64);
    head
}
