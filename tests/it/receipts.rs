//! The `receipts` loop through the real app, per backend: a task whose work ends (merged, or cancelled) gets its
//! receipt recorded in the log once, right after its last event, in its `receipt:<task>` stream; the ending seen
//! again after a crash (the loop's checkpoint rewound) records nothing twice; a task still at work has none. Through
//! the real binary, `pidevops receipt --recorded` prints the recorded receipt and `pidevops verify --receipt` holds
//! it against the log.

use pidevops::eventlog::EventStore;
use pidevops::projectors::tasks::receipt::Receipt;
use pidevops::tasks::{Command, Reason, TaskId};

use crate::common::server::cli;
use crate::common::{TestApp, TestDb};
use crate::web_spend::{merge, new_run, start, task_in};

per_backend!(an_ended_tasks_receipt_is_recorded_once_after_its_last_event_and_verifies);

/// The `receipt.issued` events of `task`, in order.
async fn issued(store: &EventStore, task: TaskId) -> Vec<pidevops::eventlog::StoredEvent> {
    store
        .read_stream(&pidevops::receipts::stream(task))
        .await
        .unwrap()
}

/// The `receipts` checkpoint put back to 0, as a crash before its save would leave it.
async fn rewind(store: &EventStore) {
    let sql = "UPDATE checkpoints SET position = 0 WHERE name = 'receipts'";
    match store {
        EventStore::Postgres(pg) => {
            sqlx::query(sql).execute(pg.pool()).await.unwrap();
        }
        EventStore::Sqlite(lite) => {
            sqlx::query(sql).execute(lite.pool()).await.unwrap();
        }
    }
}

async fn an_ended_tasks_receipt_is_recorded_once_after_its_last_event_and_verifies(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let store = app.state.log.store().clone();
    let merged = task_in(&app, "acme/app", "merged task").await;
    let run = new_run();
    start(&app, merged, run).await;
    merge(&app, merged, run, "acme/app", 7).await;
    let cancelled = task_in(&app, "acme/app", "cancelled task").await;
    app.state
        .board
        .execute(
            cancelled,
            &Command::Cancel {
                reason: Reason::summarize("not needed"),
            },
            "test",
        )
        .await
        .unwrap();
    let working = task_in(&app, "acme/app", "still at work").await;
    start(&app, working, new_run()).await;

    app.drive("receipts").await;
    for task in [merged, cancelled] {
        let records = issued(&store, task).await;
        assert_eq!(records.len(), 1, "{task}: {records:?}");
        let record = &records[0];
        assert_eq!(record.event_type, "receipt.issued");
        let receipt: Receipt = serde_json::from_slice(&record.body).unwrap();
        assert_eq!(receipt.task, task);
        // Right after its last event: the receipt's lines end with the ending, and its head is at or past it.
        let own = store.read_stream(&task.stream()).await.unwrap();
        let last = own.last().unwrap();
        assert!(
            ["task.completed", "task.cancelled"].contains(&last.event_type.as_str()),
            "{last:?}"
        );
        let in_receipt: Vec<i64> = receipt.lines.iter().map(|l| l.position).collect();
        assert!(in_receipt.contains(&last.position), "{in_receipt:?}");
        assert!(receipt.head.position >= last.position);
        assert!(record.position > last.position);
    }
    assert!(
        issued(&store, working).await.is_empty(),
        "its work has not ended"
    );

    // Seen again after a crash: nothing twice.
    rewind(&store).await;
    app.drive("receipts").await;
    assert_eq!(issued(&store, merged).await.len(), 1);
    assert_eq!(issued(&store, cancelled).await.len(), 1);

    // The recorded receipt, through the real binary, holds against the log.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("pidevops.toml"),
        "[intake]\nallow_repos = [\"acme/*\"]\n",
    )
    .unwrap();
    let run_cli = |args: &[&str]| cli(&db.url_string(), dir.path(), args);
    let (code, printed, err) = run_cli(&["receipt", &merged.to_string(), "--recorded"]);
    assert_eq!(code, Some(0), "{err}");
    let printed: Receipt = serde_json::from_str(&printed).unwrap();
    let stored: Receipt = serde_json::from_slice(&issued(&store, merged).await[0].body).unwrap();
    assert_eq!(printed, stored);
    let file = dir.path().join("recorded.json");
    std::fs::write(&file, serde_json::to_string(&printed).unwrap()).unwrap();
    let (code, said, err) = run_cli(&["verify", "--receipt", file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{said}{err}");
    assert!(
        said.contains(&format!("receipt of {merged} holds")),
        "{said}"
    );
    let (code, _, err) = run_cli(&["receipt", &working.to_string(), "--recorded"]);
    assert_ne!(code, Some(0));
    assert!(
        err.contains("no receipt of") && err.contains("has not ended"),
        "{err}"
    );
    app.stop().await;
}
