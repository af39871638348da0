//! The `runs` read model on both backends: its one upsert statement merges a run's events the same way on
//! Postgres and SQLite (the greater of attempt, last sign of life, output and version; the first start; a sticky
//! outcome), incrementally across batches and in a rebuild.

use std::sync::Arc;
use std::time::Duration;

use crate::common::TestDb;
use bytes::Bytes;
use chrono::{DateTime, TimeZone, Utc};
use pidevops::domain::runs::{self, FailureKind, RunEvent};
use pidevops::domain::{EventType, NewEvent, Source};
use pidevops::eventlog::{EventLog, EventStore};
use pidevops::projectors::runs::{query, RunsProjector, Which};
use pidevops::projectors::{Projection, Step};
use pidevops::tasks::{RunId, TaskId};
use tokio_util::sync::CancellationToken;

per_backend!(a_runs_events_merge_alike_incrementally_and_in_a_rebuild);

fn at(second: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_790_000_000 + second, 0).unwrap()
}

async fn append(log: &EventLog, version: i64, event: &RunEvent) {
    let run = event.run();
    let mut new = NewEvent::new(
        Source::Pidevops,
        EventType::from_stored(event.kind().to_owned()),
        format!("run:{run}:{version}"),
        "application/json",
        Bytes::from(serde_json::to_vec(event).unwrap()),
    );
    new.stream = Some((runs::stream(run), version));
    new.occurred_at = event.at();
    assert!(!log.append(new).await.unwrap().duplicate);
}

async fn to_head(projection: &Projection) {
    let mut steps = 0;
    while !matches!(projection.step(2).await.unwrap(), Step::CaughtUp { .. }) {
        steps += 1;
        assert!(steps < 100, "never caught up");
    }
}

async fn a_runs_events_merge_alike_incrementally_and_in_a_rebuild(db: TestDb) {
    let store = EventStore::connect(&db.url, 4).await.unwrap();
    store.migrate().await.unwrap();
    let stop = CancellationToken::new();
    let (log, _appender) = EventLog::start(store.clone(), Duration::from_secs(30), stop.clone());
    let run = RunId(uuid::Uuid::new_v4());
    let task: TaskId = "T-7".parse().unwrap();
    let id = run.to_string();
    // Batches of two events, so every column meets the ON CONFLICT path at least once.
    let projection = Projection::with_batch(store.clone(), Arc::new(RunsProjector), 2);

    append(
        &log,
        1,
        &RunEvent::Started {
            at: at(0),
            run,
            task,
            attempt: 2,
            profile: "claude".into(),
            worker: "replica-a".into(),
            log: "/logs/run.log".into(),
        },
    )
    .await;
    append(
        &log,
        2,
        &RunEvent::Heartbeat {
            at: at(30),
            run,
            task,
            output_bytes: 900,
        },
    )
    .await;
    to_head(&projection).await;
    let running = query(&store, Which::Run(&id)).await.unwrap();
    assert_eq!(running.len(), 1);
    assert_eq!(
        (running[0].state.as_str(), running[0].attempt),
        ("running", 2)
    );
    assert_eq!(running[0].output_bytes, 900);
    assert_eq!(running[0].last_seen_at, at(30));

    // A heartbeat that reports less and earlier (a slow writer's) lowers nothing; a heartbeat carries no attempt.
    append(
        &log,
        3,
        &RunEvent::Heartbeat {
            at: at(20),
            run,
            task,
            output_bytes: 400,
        },
    )
    .await;
    append(
        &log,
        4,
        &RunEvent::Failed {
            at: at(60),
            run,
            task,
            attempt: 2,
            kind: FailureKind::Exit,
            detail: "exit status 1".into(),
            duration_s: 60.0,
            tail: "boom".into(),
            usage: None,
            until: None,
            reviewer_usage: None,
        },
    )
    .await;
    // Nothing follows an outcome in a real stream; if something did, the outcome would stay.
    append(
        &log,
        5,
        &RunEvent::Heartbeat {
            at: at(50),
            run,
            task,
            output_bytes: 100,
        },
    )
    .await;
    to_head(&projection).await;

    let incremental = query(&store, Which::Run(&id)).await.unwrap();
    assert_eq!(incremental.len(), 1);
    let row = &incremental[0];
    assert_eq!(row.state, "failed", "an outcome is sticky");
    assert_eq!(row.attempt, 2, "the greater attempt");
    assert_eq!(row.output_bytes, 900, "the greater output");
    assert_eq!(row.last_seen_at, at(60), "the latest sign of life");
    assert_eq!(row.started_at, Some(at(0)));
    assert_eq!(row.ended_at, Some(at(60)));
    assert_eq!(row.worker.as_deref(), Some("replica-a"));
    assert_eq!(row.failure.as_deref(), Some("exit"));
    assert_eq!(row.detail.as_deref(), Some("exit status 1"));
    assert_eq!(row.version, 5, "the greater version");

    // A rebuild applies all five events in one batch: the same row.
    let rebuilt = Projection::with_batch(store.clone(), Arc::new(RunsProjector), 10_000);
    rebuilt.rebuild(|_| ()).await.unwrap();
    assert_eq!(query(&store, Which::Run(&id)).await.unwrap(), incremental);
    stop.cancel();
}
