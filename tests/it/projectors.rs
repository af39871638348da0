//! The projector runtime against real databases: incremental = rebuild = the log, whatever crashes, fails or
//! runs twice; and the `sources` read model as served by the real app.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{TestApp, TestDb, ADMIN_TOKEN};
use bytes::Bytes;
use pidevops::domain::{EventType, NewEvent, Source};
use pidevops::eventlog::{EventLog, EventStore};
use pidevops::projectors::sources::{self, SourcesProjector};
use pidevops::projectors::{Projection, ProjectionError, Step};
use tokio_util::sync::CancellationToken;

per_backend!(
    incremental_processing_equals_a_rebuild_and_the_log,
    a_crash_mid_batch_applies_nothing_and_loses_nothing,
    two_instances_never_apply_a_batch_twice,
    a_rebuild_reading_ahead_next_to_a_serving_instance_counts_every_event_once,
    a_version_bump_rebuilds_from_zero_and_a_newer_version_is_left_alone,
    a_failing_event_stops_the_projector_there_shows_in_health_and_is_retried,
    a_killed_replay_leaves_a_consistent_checkpoint_to_resume_from,
    an_idle_projector_at_zero_leaves_its_tables_alone_and_a_lost_row_still_empties_them,
);

const TYPES: [(Source, &str); 6] = [
    (Source::Github, "push"),
    (Source::Github, "pull_request"),
    (Source::Github, "issues"),
    (Source::Linear, "Issue"),
    (Source::Telegram, "message"),
    (Source::Pidevops, "task"),
];

async fn open(db: &TestDb) -> (EventStore, EventLog, CancellationToken) {
    let store = EventStore::connect(&db.url, 8).await.unwrap();
    store.migrate().await.unwrap();
    let stop = CancellationToken::new();
    let (log, _task) = EventLog::start(store.clone(), Duration::from_secs(30), stop.clone());
    (store, log, stop)
}

/// Appends `n` small events of mixed sources and types, `tag` keeping their keys unique.
async fn append(log: &EventLog, tag: &str, n: usize) {
    let mut pending = futures::stream::FuturesUnordered::new();
    for i in 0..n {
        let (source, kind) = TYPES[(i * 7 + i / 3) % TYPES.len()];
        let event = NewEvent::new(
            source,
            EventType::new(source, &[kind]),
            format!("{tag}-{i}"),
            "application/json",
            Bytes::from(format!("{{\"i\":{i}}}")),
        );
        let log = log.clone();
        pending.push(async move { log.append(event).await });
        if pending.len() >= 256 {
            use futures::StreamExt;
            pending.next().await.unwrap().unwrap();
        }
    }
    use futures::StreamExt;
    while let Some(result) = pending.next().await {
        result.unwrap();
    }
}

async fn checkpoint(store: &EventStore) -> (i64, i64) {
    pidevops::projectors::read_row(store, sources::NAME)
        .await
        .unwrap()
        .expect("the projector has a row")
}

async fn run_to_head(projection: &Projection) {
    let mut steps = 0;
    while !matches!(
        projection.step(10_000).await.unwrap(),
        Step::CaughtUp { .. }
    ) {
        steps += 1;
        assert!(steps < 10_000, "never caught up");
    }
}

async fn incremental_processing_equals_a_rebuild_and_the_log(db: TestDb) {
    let (store, log, stop) = open(&db).await;
    let projection = Projection::with_batch(store.clone(), Arc::new(SourcesProjector), 37);
    append(&log, "a", 700).await;
    // Small batches, interleaved with more appends: the incremental path.
    for round in 0..5 {
        projection.tick().await.unwrap();
        append(&log, &format!("b{round}"), 113).await;
    }
    projection.tick().await.unwrap();
    let incremental = sources::activity(&store).await.unwrap();
    let oracle = crate::common::sources_oracle(&store).await;
    assert_eq!(incremental.len(), TYPES.len());
    assert_eq!(incremental, oracle, "incremental != the log");
    assert_eq!(checkpoint(&store).await, (1, store.head().await.unwrap()));

    let rebuilt = Projection::with_batch(store.clone(), Arc::new(SourcesProjector), 10_000);
    let mut calls = 0;
    let done = rebuilt.rebuild(|_| calls += 1).await.unwrap();
    assert_eq!(done.events, 700 + 5 * 113);
    assert!(calls >= 2, "progress is reported");
    assert_eq!(
        sources::activity(&store).await.unwrap(),
        incremental,
        "rebuild from zero != incremental"
    );
    stop.cancel();
}

async fn a_crash_mid_batch_applies_nothing_and_loses_nothing(db: TestDb) {
    let (store, log, stop) = open(&db).await;
    append(&log, "a", 400).await;
    let projection = Projection::with_batch(store.clone(), Arc::new(SourcesProjector), 50);
    assert_eq!(
        projection.step(50).await.unwrap(),
        Step::Applied {
            from: 0,
            to: 50,
            events: 50
        }
    );
    let before = sources::activity(&store).await.unwrap();

    projection.inject_failure_before_commit();
    match projection.step(50).await {
        Err(ProjectionError::Injected { first, last }) => assert_eq!((first, last), (51, 100)),
        other => panic!("expected the injected failure, got {other:?}"),
    }
    assert_eq!(
        sources::activity(&store).await.unwrap(),
        before,
        "a batch that did not commit left writes behind"
    );
    assert_eq!(
        checkpoint(&store).await,
        (1, 50),
        "the checkpoint moved without its writes"
    );

    // The next tick redoes the batch: nothing lost, nothing twice.
    append(&log, "b", 100).await;
    projection.tick().await.unwrap();
    assert_eq!(
        sources::activity(&store).await.unwrap(),
        crate::common::sources_oracle(&store).await
    );
    let total: i64 = sources::activity(&store)
        .await
        .unwrap()
        .iter()
        .map(|r| r.events)
        .sum();
    assert_eq!(total, 500);
    stop.cancel();
}

async fn two_instances_never_apply_a_batch_twice(db: TestDb) {
    let (store, log, stop) = open(&db).await;
    append(&log, "seed", 300).await;
    let a = Arc::new(Projection::with_batch(
        store.clone(),
        Arc::new(SourcesProjector),
        23,
    ));
    let b = Arc::new(Projection::with_batch(
        store.clone(),
        Arc::new(SourcesProjector),
        41,
    ));
    let writer = {
        let log = log.clone();
        tokio::spawn(async move {
            for round in 0..6 {
                append(&log, &format!("w{round}"), 50).await;
            }
        })
    };
    let racer = |p: Arc<Projection>| {
        tokio::spawn(async move {
            for _ in 0..40 {
                // A conflict is the other instance winning; the next step rereads.
                match p.step(30).await {
                    Ok(_) | Err(ProjectionError::Conflict { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        })
    };
    let (ra, rb) = (racer(a.clone()), racer(b.clone()));
    writer.await.unwrap();
    ra.await.unwrap();
    rb.await.unwrap();
    run_to_head(&a).await;
    assert_every_event_counted_once(&store, 600).await;
    stop.cancel();
}

/// The read model equals the SQL oracle, and its counts add up to exactly the events appended.
async fn assert_every_event_counted_once(store: &EventStore, appended: i64) {
    let activity = sources::activity(store).await.unwrap();
    assert_eq!(activity, crate::common::sources_oracle(store).await);
    let total: i64 = activity.iter().map(|r| r.events).sum();
    assert_eq!(total, appended, "every event counted exactly once");
}

/// `replay` reads its next page ahead of the transaction that applies it; a serving instance moving the same
/// projector in between (and appends going on) must make it drop that page, never apply it twice or skip.
async fn a_rebuild_reading_ahead_next_to_a_serving_instance_counts_every_event_once(db: TestDb) {
    let (store, log, stop) = open(&db).await;
    append(&log, "seed", 400).await;
    let replay = Projection::with_batch(store.clone(), Arc::new(SourcesProjector), 17);
    let writer = {
        let log = log.clone();
        tokio::spawn(async move {
            for round in 0..4 {
                append(&log, &format!("w{round}"), 50).await;
            }
        })
    };
    // The serving instance runs on a thread of its own, and steps exactly when the rebuild has committed a
    // batch (its progress callback waits for it): by then the rebuild's next page is read or being read from
    // where it stood, and that page must be dropped. It has its own runtime and its own connections: a
    // connection's socket belongs to the runtime that opened it, and this test's runtime is blocked meanwhile.
    let (asks, asked) = std::sync::mpsc::channel::<()>();
    let (answers, answered) = std::sync::mpsc::channel::<bool>();
    let url = db.url.clone();
    let server = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let store = runtime.block_on(EventStore::connect(&url, 2)).unwrap();
        let serving = Projection::with_batch(store, Arc::new(SourcesProjector), 13);
        let mut applied = 0;
        while asked.recv().is_ok() {
            let step = runtime.block_on(serving.step(13)).unwrap();
            let moved = matches!(step, Step::Applied { .. });
            applied += usize::from(moved);
            answers.send(moved).unwrap();
        }
        applied
    });
    let mut batches = 0;
    let done = replay
        .rebuild(|progress| {
            batches += 1;
            if progress.events > 0 && batches % 3 == 0 {
                asks.send(()).unwrap();
                answered.recv().unwrap();
            }
        })
        .await
        .unwrap();
    drop(asks);
    let served = server.join().unwrap();
    writer.await.unwrap();
    assert!(
        served > 0,
        "the serving instance took batches during the rebuild"
    );
    assert!(done.position >= 400, "{done:?}");
    run_to_head(&replay).await;
    assert_every_event_counted_once(&store, 600).await;
    stop.cancel();
}

async fn a_version_bump_rebuilds_from_zero_and_a_newer_version_is_left_alone(db: TestDb) {
    let (store, log, stop) = open(&db).await;
    append(&log, "a", 120).await;
    let projection = Projection::new(store.clone(), Arc::new(SourcesProjector));
    run_to_head(&projection).await;

    // As if the stored read model had been built by version 0 of the code, and held rows it no longer would.
    crate::common::execute(
        &store,
        "UPDATE projections SET version = 0 WHERE name = 'sources';
         UPDATE source_activity SET events = events + 1000;",
    )
    .await;
    run_to_head(&projection).await;
    assert_eq!(checkpoint(&store).await, (1, 120));
    assert_eq!(
        sources::activity(&store).await.unwrap(),
        crate::common::sources_oracle(&store).await
    );

    // A newer build owns it (a rolling deploy): this one must not touch it.
    crate::common::execute(
        &store,
        "UPDATE projections SET version = 99 WHERE name = 'sources'",
    )
    .await;
    append(&log, "b", 5).await;
    match projection.step(100).await {
        Err(ProjectionError::NewerVersion { stored, ours, .. }) => {
            assert_eq!((stored, ours), (99, 1))
        }
        other => panic!("expected NewerVersion, got {other:?}"),
    }
    assert_eq!(checkpoint(&store).await, (99, 120));
    stop.cancel();
}

/// A real failure inside the real app: a trigger refuses one event type. The projector applies everything
/// before the bad event, stops there, says so in /health, retries with backoff, and goes on once it can.
async fn a_failing_event_stops_the_projector_there_shows_in_health_and_is_retried(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let store = app.state.log.store().clone();
    let poison = if db.is_postgres() {
        "CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'poisoned event type %', NEW.event_type; END $$;
         CREATE TRIGGER poison BEFORE INSERT OR UPDATE ON source_activity
         FOR EACH ROW WHEN (NEW.event_type = 'github.issues.opened') EXECUTE FUNCTION poison();"
    } else {
        "CREATE TRIGGER poison BEFORE INSERT ON source_activity WHEN NEW.event_type = 'github.issues.opened'
         BEGIN SELECT RAISE(ABORT, 'poisoned event type'); END;
         CREATE TRIGGER poison_update BEFORE UPDATE ON source_activity WHEN NEW.event_type = 'github.issues.opened'
         BEGIN SELECT RAISE(ABORT, 'poisoned event type'); END;"
    };
    crate::common::execute(&store, poison).await;

    let ping = br#"{"zen":"ok","hook_id":1}"#;
    for i in 0..20 {
        assert_eq!(
            app.post_github("ping", &format!("p{i}"), ping)
                .await
                .status(),
            200
        );
    }
    assert_eq!(
        app.post_github("issues", "bad", br#"{"action":"opened"}"#)
            .await
            .status(),
        200
    );
    for i in 20..30 {
        assert_eq!(
            app.post_github("ping", &format!("p{i}"), ping)
                .await
                .status(),
            200
        );
    }

    let report = Arc::new(std::sync::Mutex::new(serde_json::Value::Null));
    crate::common::eventually("the projector reports the event it is stuck on", || {
        let (app, report) = (&app, report.clone());
        async move {
            let (_, health) = app.health().await;
            let this = health["loops"]["projector:sources"].clone();
            let stuck = this["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("stuck at position 21"));
            *report.lock().unwrap() = this;
            stuck
        }
    })
    .await;
    let report = report.lock().unwrap().clone();
    let (code, health) = app.health().await;
    assert_eq!(
        code, 200,
        "a stuck projector warns, it does not take the replica out"
    );
    assert_eq!(health["status"], "warn", "{health}");
    assert!(
        report["last_error"].as_str().unwrap().contains("poisoned"),
        "the cause is shown: {report}"
    );
    // Everything before the bad event is applied, nothing after it.
    assert_eq!(checkpoint(&store).await, (1, 20));
    let rows = sources::activity(&store).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].event_type.as_str(), rows[0].events),
        ("github.ping", 20)
    );

    crate::common::execute(
        &store,
        if db.is_postgres() {
            "DROP TRIGGER poison ON source_activity"
        } else {
            "DROP TRIGGER poison; DROP TRIGGER poison_update;"
        },
    )
    .await;
    crate::common::eventually("the projector gets past the event once it can", || {
        let store = store.clone();
        async move { checkpoint(&store).await.1 == 31 }
    })
    .await;
    assert_eq!(
        sources::activity(&store).await.unwrap(),
        crate::common::sources_oracle(&store).await
    );

    let listed: serde_json::Value = app
        .client
        .get(app.url("/api/sources"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["sources"][0]["source"], "github");
    assert_eq!(listed["sources"][0]["events"], 31);
    assert_eq!(listed["sources"][0]["last_type"], "github.ping");
    assert_eq!(listed["projector"]["behind"], 0);
    let (_, health) = app.health().await;
    assert_eq!(
        health["checks"]["sources"]["sources"]["github"]["events"],
        31
    );
    assert!(health["checks"]["sources"]["sources"]["github"]["last_delivery_ago_s"].is_i64());
    app.stop().await;
}

/// `pidevops replay` SIGKILLed mid-rebuild: what it committed is consistent (read model = its checkpoint), and
/// both a new replay and the incremental path finish at the log's exact read model.
async fn a_killed_replay_leaves_a_consistent_checkpoint_to_resume_from(db: TestDb) {
    let _cores = crate::common::heavy().await;
    let (store, log, stop) = open(&db).await;
    append(&log, "a", 60_000).await;
    let head = store.head().await.unwrap();
    let workdir = tempfile::tempdir().unwrap();
    let replay = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_pidevops"))
            .args(["replay", "sources"])
            .env_clear()
            .env("DATABASE_URL", db.url_string())
            .env("RUST_LOG", "warn")
            .current_dir(workdir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut child = replay();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let killed_at = loop {
        if let Ok(Some((_, position))) = pidevops::projectors::read_row(&store, sources::NAME).await
        {
            if position > 0 {
                child.kill().unwrap();
                child.wait().unwrap();
                break position;
            }
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "replay finished before it could be killed"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "replay made no progress"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(
        killed_at < head,
        "killed mid-replay ({killed_at} of {head})"
    );
    // Consistent at the kill: the read model holds exactly the events up to the checkpoint.
    let (_, position) = checkpoint(&store).await;
    let counted: i64 = sources::activity(&store)
        .await
        .unwrap()
        .iter()
        .map(|r| r.events)
        .sum();
    assert_eq!(
        counted, position,
        "read model and checkpoint disagree after a crash"
    );

    // The incremental path resumes from that checkpoint...
    let projection = Projection::new(store.clone(), Arc::new(SourcesProjector));
    run_to_head(&projection).await;
    let oracle = crate::common::sources_oracle(&store).await;
    assert_eq!(sources::activity(&store).await.unwrap(), oracle);
    // ...and a full replay gives the same.
    let status = replay().wait().unwrap();
    assert!(status.success());
    assert_eq!(sources::activity(&store).await.unwrap(), oracle);
    assert_eq!(checkpoint(&store).await, (1, head));
    stop.cancel();
}

/// Where Postgres keeps `table`'s rows: a TRUNCATE gives it new files (SQLite has no TRUNCATE: `None`).
async fn storage_of(store: &EventStore, table: &str) -> Option<i64> {
    match store {
        EventStore::Postgres(s) => Some(
            sqlx::query_scalar::<_, i64>(&format!(
                "SELECT pg_relation_filenode('{table}')::bigint"
            ))
            .fetch_one(s.pool())
            .await
            .unwrap(),
        ),
        EventStore::Sqlite(_) => None,
    }
}

/// A projector at position 0 resets its read model on every tick until the log has an event (it must be empty
/// there). Already empty, its tables are left alone: no TRUNCATE each tick. Not empty (its row in `projections`
/// was lost, the read model kept), the reset still empties it before the rebuild, so nothing is counted twice.
async fn an_idle_projector_at_zero_leaves_its_tables_alone_and_a_lost_row_still_empties_them(
    db: TestDb,
) {
    let (store, log, stop) = open(&db).await;
    let projection = Projection::new(store.clone(), Arc::new(SourcesProjector));
    run_to_head(&projection).await;
    let idle = storage_of(&store, "source_activity").await;
    for _ in 0..5 {
        run_to_head(&projection).await;
    }
    assert_eq!(
        storage_of(&store, "source_activity").await,
        idle,
        "idle ticks at position 0 truncated an empty read model"
    );

    append(&log, "a", 300).await;
    run_to_head(&projection).await;
    let oracle = crate::common::sources_oracle(&store).await;
    assert_eq!(sources::activity(&store).await.unwrap(), oracle);
    match &store {
        EventStore::Postgres(s) => {
            sqlx::query("DELETE FROM projections WHERE name = $1")
                .bind(sources::NAME)
                .execute(s.pool())
                .await
                .unwrap();
        }
        EventStore::Sqlite(s) => {
            sqlx::query("DELETE FROM projections WHERE name = $1")
                .bind(sources::NAME)
                .execute(s.pool())
                .await
                .unwrap();
        }
    }
    run_to_head(&projection).await;
    assert_eq!(
        sources::activity(&store).await.unwrap(),
        oracle,
        "a read model found at position 0 with rows in it was not emptied before the rebuild"
    );
    stop.cancel();
}
