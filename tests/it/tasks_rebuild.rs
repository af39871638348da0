//! A rebuild of the task board folds the log in memory and writes each row once (`projectors/fold.rs`, COPY on
//! Postgres): every row of `tasks`, `task_links` and `task_merges`, every column, must be what incremental
//! projection in small batches wrote, whether the fold takes the whole log or fills up and hands the rest to
//! batches; and a fold that dies before its commit leaves the projector at 0 with nothing written.

use std::sync::Arc;

use bytes::Bytes;
use pidevops::domain::{EventType, NewEvent, Source};
use pidevops::eventlog::{EventLog, EventStore};
use pidevops::projectors::tasks::{self, TasksProjector};
use pidevops::projectors::{Projection, ProjectionError};
use pidevops::tasks::{ApprovalPolicy, GithubRef, Links, Priority, GITHUB_ISSUE};
use sqlx::Row;

use crate::common::TestDb;
use crate::tasks_projectors::{
    id, new_task, open, part_one, part_three, part_two, run_to_head, Board,
};

per_backend!(
    a_folded_rebuild_writes_every_row_the_incremental_projector_does,
    a_fold_that_dies_before_its_commit_leaves_nothing,
    a_projector_that_moves_during_the_fold_wins_and_the_rebuild_goes_on_from_it,
);

const TASK_COLUMNS: [&str; 21] = [
    "task_id",
    "number",
    "board_column",
    "title",
    "repo",
    "priority",
    "priority_rank",
    "needs_human",
    "needs_human_reason",
    "attempts",
    "max_attempts",
    "source",
    "links",
    "created_at",
    "updated_at",
    "version",
    "last_position",
    "state",
    "search_text",
    "behind",
    "behind_head",
];

type Rows = Vec<Vec<Option<String>>>;

/// Every row of a table, every column as the database renders it as text.
async fn table(store: &EventStore, table: &str, columns: &[&str], order: &str) -> Rows {
    let select: Vec<String> = columns
        .iter()
        .map(|c| format!("CAST({c} AS TEXT)"))
        .collect();
    let sql = format!("SELECT {} FROM {table} ORDER BY {order}", select.join(", "));
    match store {
        EventStore::Postgres(s) => sqlx::query(&sql)
            .fetch_all(s.pool())
            .await
            .unwrap()
            .iter()
            .map(|r| (0..columns.len()).map(|i| r.get(i)).collect())
            .collect(),
        EventStore::Sqlite(s) => sqlx::query(&sql)
            .fetch_all(s.pool())
            .await
            .unwrap()
            .iter()
            .map(|r| (0..columns.len()).map(|i| r.get(i)).collect())
            .collect(),
    }
}

async fn read_models(store: &EventStore) -> [Rows; 3] {
    [
        table(store, "tasks", &TASK_COLUMNS, "task_id").await,
        table(
            store,
            "task_links",
            &["kind", "value", "task_id", "position"],
            "kind, value",
        )
        .await,
        table(
            store,
            "task_merges",
            &["task_id", "repo", "pull_request", "day", "merged_at"],
            "task_id",
        )
        .await,
    ]
}

/// A refresh event (`refresh.due`, `refresh.current`, `refresh.base_moved`): a behind mark, by its key.
async fn refresh(log: &EventLog, event_type: &str, key: String) {
    let event = NewEvent::new(
        Source::Pidevops,
        EventType::from_stored(event_type.to_owned()),
        key,
        "application/json",
        Bytes::from_static(b"{}"),
    );
    log.append(event).await.unwrap();
}

/// The scenario of `tasks_projectors` with behind marks set, cleared and dropped between its parts, and a ninth
/// task claiming a link the second holds.
async fn scenario(log: &EventLog) {
    let head = "c".repeat(40);
    let mut board = Board::default();
    part_one(&mut board, log).await;
    for (task, state) in [("T-1", "behind"), ("T-2", "dirty"), ("T-99", "behind")] {
        refresh(
            log,
            "refresh.due",
            format!("refresh-due:{task}:{head}:{state}"),
        )
        .await;
    }
    // T-2's submission (a push) clears its mark.
    part_two(&mut board, log).await;
    refresh(log, "refresh.due", format!("refresh-due:T-4:{head}:dirty")).await;
    refresh(log, "refresh.due", format!("refresh-due:T-5:{head}:behind")).await;
    refresh(
        log,
        "refresh.current",
        format!("refresh-current:T-5:{head}:{head}"),
    )
    .await;
    refresh(
        log,
        "refresh.base_moved",
        format!("refresh-moved:T-7:{head}:12"),
    )
    .await;
    part_three(&mut board, log).await;
    let taken = Links::default().with(
        GITHUB_ISSUE,
        &GithubRef::new("acme/web".parse().unwrap(), 2).unwrap(),
    );
    let create = new_task(9, Priority::Low, taken, ApprovalPolicy::Manual);
    board.run_as(log, id(9), create, 40, "github").await;
}

async fn a_folded_rebuild_writes_every_row_the_incremental_projector_does(db: TestDb) {
    let (store, log, stop) = open(&db).await;
    scenario(&log).await;
    let incremental = Projection::with_batch(store.clone(), Arc::new(TasksProjector::default()), 7);
    run_to_head(&incremental).await;
    let expected = read_models(&store).await;
    let [tasks_rows, links, merges] = &expected;
    assert_eq!(tasks_rows.len(), 9);
    let behind: Vec<_> = tasks_rows.iter().filter_map(|r| r[19].clone()).collect();
    assert_eq!(
        behind,
        ["behind", "dirty", "base_moved"],
        "the marks the scenario leaves"
    );
    assert!(links.iter().any(|l| l[1].as_deref() == Some("acme/web#2")));
    assert_eq!(merges.len(), 1);
    let head = store.head().await.unwrap();

    // The whole log in one fold (pages of 10 events), then two folds of 3 tasks each with batches after them.
    for (cap, what) in [(usize::MAX, "one fold"), (3, "a full fold, then batches")] {
        let rebuilt = Projection::with_batch(
            store.clone(),
            Arc::new(TasksProjector::with_fold_cap(cap)),
            10,
        );
        let done = rebuilt.rebuild(|_| {}).await.unwrap();
        assert_eq!(done.position, head, "{what}");
        let (_, position) = pidevops::projectors::read_row(&store, tasks::NAME)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(position, head, "{what}");
        let actual = read_models(&store).await;
        for (i, name) in ["tasks", "task_links", "task_merges"].iter().enumerate() {
            assert_eq!(actual[i].len(), expected[i].len(), "{what}: {name} rows");
            for (a, e) in actual[i].iter().zip(&expected[i]) {
                assert_eq!(a, e, "{what}: a row of {name}");
            }
        }
    }
    stop.cancel();
}

async fn a_fold_that_dies_before_its_commit_leaves_nothing(db: TestDb) {
    let (store, log, stop) = open(&db).await;
    scenario(&log).await;
    let rebuilt = Projection::with_batch(store.clone(), Arc::new(TasksProjector::default()), 10);
    rebuilt.inject_failure_before_commit();
    let error = rebuilt.rebuild(|_| {}).await.unwrap_err();
    assert!(matches!(error, ProjectionError::Injected { .. }), "{error}");
    let (_, position) = pidevops::projectors::read_row(&store, tasks::NAME)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(position, 0, "the checkpoint never passes rows not written");
    assert!(read_models(&store).await.iter().all(Vec::is_empty));
    // The next rebuild starts over and finishes.
    let done = rebuilt.rebuild(|_| {}).await.unwrap();
    assert_eq!(done.position, store.head().await.unwrap());
    stop.cancel();
}

/// `replay tasks` beside a running `serve`: the service's projector loop applies batches while the rebuild folds.
/// Seen in CI as `Conflict { expected: 0 }` out of a rebuild. Now the fold gives way to the batches already
/// committed and the rebuild goes on from their checkpoint to the head, with the same read model as a lone rebuild.
async fn a_projector_that_moves_during_the_fold_wins_and_the_rebuild_goes_on_from_it(db: TestDb) {
    let (store, log, stop) = open(&db).await;
    scenario(&log).await;
    let rebuilt = Projection::with_batch(store.clone(), Arc::new(TasksProjector::default()), 10);
    let beside = Projection::with_batch(store.clone(), Arc::new(TasksProjector::default()), 10);
    let mut raced = false;
    let done = rebuilt
        .rebuild(|progress| {
            if progress.position > 0 && !raced {
                raced = true;
                // The fold has pages in memory and nothing written: the other instance applies a batch now.
                tokio::task::block_in_place(|| {
                    tokio::runtime::Handle::current()
                        .block_on(beside.step(5))
                        .expect("the running projector's batch")
                });
            }
        })
        .await
        .expect("the rebuild goes on from the other instance's batch");
    assert!(raced, "the race was run");
    assert_eq!(done.position, store.head().await.unwrap());
    let raced_models = read_models(&store).await;
    assert!(raced_models.iter().any(|rows| !rows.is_empty()));
    let lone = rebuilt.rebuild(|_| {}).await.unwrap();
    assert_eq!(lone.position, done.position);
    assert_eq!(
        read_models(&store).await,
        raced_models,
        "the same read model as a lone rebuild"
    );
    stop.cancel();
}
