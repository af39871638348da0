//! The test's own handle on a database `serve` processes share: a board to create tasks, the log and the read
//! models to watch (for the tests that run the real binary).

use std::time::Duration;

use pidevops::board::{Board, BoardConfig};
use pidevops::dispatch::runs::{self as run_events, RunEvent};
use pidevops::eventlog::{EventLog, EventStore};
use pidevops::projectors::runs::{self, RunRow, Which};
use pidevops::projectors::tasks as task_rows;
use pidevops::tasks::{Checkpoint, Column, RunId, TaskEvent, TaskId};
use tokio_util::sync::CancellationToken;

use super::{within, TestDb};

/// The log, the board and the runs read model of a database `serve` processes share, read from the test.
pub(crate) struct Observer {
    pub(crate) store: EventStore,
    pub(crate) board: Board,
    _stop: CancellationToken,
}

impl Observer {
    pub(crate) async fn new(db: &TestDb) -> Self {
        let store = EventStore::connect(&db.url, 4).await.unwrap();
        store.migrate().await.unwrap();
        let stop = CancellationToken::new();
        let (log, _appender) = EventLog::start(store.clone(), Duration::from_secs(5), stop.clone());
        let board = Board::new(log, BoardConfig::default());
        Self {
            store,
            board,
            _stop: stop,
        }
    }

    /// A task on the shared board, approved as it is made, scoped to `scope`.
    pub(crate) async fn create(&self, title: &str, scope: &str) -> TaskId {
        super::board::new_task(title)
            .scope(scope)
            .done_when("written down")
            .approval(pidevops::tasks::ApprovalPolicy::Auto)
            .key(&format!("test:{title}"))
            .create_on(&self.board)
            .await
    }

    pub(crate) async fn column(&self, id: TaskId) -> Option<Column> {
        task_rows::get(&self.store, id)
            .await
            .unwrap()
            .map(|r| r.column)
    }

    pub(crate) async fn runs(&self, id: TaskId) -> Vec<RunRow> {
        runs::query(&self.store, Which::Task(&id.to_string()))
            .await
            .unwrap()
    }

    /// The checkpoints a run recorded, from the log.
    pub(crate) async fn checkpoints(&self, run: &str) -> Vec<Checkpoint> {
        let run = RunId(run.parse().unwrap());
        self.store
            .read_stream_of_type(&run_events::stream(run), run_events::CHECKPOINTED)
            .await
            .unwrap()
            .iter()
            .filter_map(|e| match serde_json::from_slice::<RunEvent>(&e.body) {
                Ok(RunEvent::Checkpointed { checkpoint, .. }) => Some(*checkpoint),
                _ => None,
            })
            .collect()
    }

    /// The checkpoints the task's attempts resumed (`task.resumed`), from its stream.
    pub(crate) async fn resumed(&self, id: TaskId) -> Vec<Checkpoint> {
        self.board
            .load(id)
            .await
            .unwrap()
            .unwrap()
            .events
            .iter()
            .filter_map(
                |e| match TaskEvent::from_stored(&e.event_type, &e.body).unwrap() {
                    TaskEvent::Resumed { checkpoint, .. } => Some(*checkpoint),
                    _ => None,
                },
            )
            .collect()
    }

    /// Waits up to `limit` for the task to be in review.
    pub(crate) async fn until_in_review(&self, id: TaskId, limit: Duration) {
        within(limit, &format!("{id} in review"), || async {
            self.column(id).await == Some(Column::InReview)
        })
        .await;
    }

    /// The two runs of an attempt cut off and resumed, once both ended: the first lost, the second succeeded, both
    /// the same attempt (`logs`: the server's, for the messages).
    pub(crate) async fn lost_then_resumed(&self, id: TaskId, logs: &str) -> Vec<RunRow> {
        self.both_outcomes(id).await;
        let runs = self.runs(id).await;
        assert_eq!(runs.len(), 2, "{runs:?}\n{logs}");
        assert_eq!(runs[0].failure.as_deref(), Some("lost"), "{runs:?}");
        assert_eq!(runs[1].state, "succeeded", "{runs:?}\n{logs}");
        // The same attempt, resumed: the counter did not move.
        assert_eq!((runs[0].attempt, runs[1].attempt), (1, 1), "{runs:?}");
        runs
    }

    /// Waits for both runs' outcomes in the runs read model (it follows the board's at its own pace).
    pub(crate) async fn both_outcomes(&self, id: TaskId) {
        within(Duration::from_secs(10), "both runs' outcomes", || async {
            let runs = self.runs(id).await;
            runs.len() == 2 && runs.iter().all(|r| r.state != "running")
        })
        .await;
    }
}
