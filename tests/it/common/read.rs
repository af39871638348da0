//! What tests read back from a running app, shared by the areas: the reasons a loop recorded for what it refused,
//! a task's runs once they ended and the prompt each was given, a task now and reaching a column. Each waits on the
//! condition itself, never for a fixed time.

use std::time::Duration;

use pidevops::projectors::runs::{self, RunRow, Which};
use pidevops::tasks::{Column, Task, TaskId};
use serde_json::Value;

use super::TestApp;

/// The `reason` of every `event_type` record (`intake.ignored`, `reactions.ignored`), in log order.
pub async fn reasons(app: &TestApp, event_type: &str) -> Vec<String> {
    app.all_events()
        .await
        .into_iter()
        .filter(|e| e.event_type == event_type)
        .map(|e| {
            let body: Value = serde_json::from_slice(&e.body).unwrap();
            body["reason"].as_str().unwrap_or_default().to_owned()
        })
        .collect()
}

/// The task's runs once the runs read model shows `n` of them, none running.
pub async fn ended_runs(app: &TestApp, id: TaskId, n: usize) -> Vec<RunRow> {
    let query = || async {
        runs::query(app.state.log.store(), Which::Task(&id.to_string()))
            .await
            .unwrap()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let runs = query().await;
        if runs.len() == n && runs.iter().all(|r| r.state != "running") {
            return runs;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "timed out after 60s waiting for {n} runs of {id} ended; {}",
                explain(app, id).await
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The prompt a run was given (`prompt.md` beside its log).
pub fn prompt_of(run: &RunRow) -> String {
    let log = std::path::Path::new(run.log_path.as_deref().unwrap());
    std::fs::read_to_string(log.with_file_name("prompt.md")).unwrap()
}

/// The task as its stream has it now.
pub async fn task(app: &TestApp, id: TaskId) -> Task {
    app.state.board.load(id).await.unwrap().unwrap().task
}

/// Waits until the task, as its stream has it, is in `want`; if it never is, says where it is and why.
pub async fn wait_column(app: &TestApp, id: TaskId, want: Column, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while task(app, id).await.column() != want {
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "timed out after 60s waiting for: {what} ({id} in {want:?}); {}",
                explain(app, id).await
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What a task's runs and stream say, for a wait on it that timed out to explain itself.
async fn explain(app: &TestApp, id: TaskId) -> String {
    let runs: Vec<String> = runs::query(app.state.log.store(), Which::Task(&id.to_string()))
        .await
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "attempt {} {} {}: {:?} {:?}",
                r.attempt, r.run_id, r.state, r.failure, r.detail
            )
        })
        .collect();
    let stream: Vec<String> = app
        .all_events()
        .await
        .into_iter()
        .filter(|e| e.stream.as_deref() == Some(id.stream().as_str()))
        .map(|e| {
            format!(
                "{} {} {}",
                e.position,
                e.recorded_at.format("%H:%M:%S%.3f"),
                e.event_type
            )
        })
        .collect();
    format!("runs: {runs:#?}\ntask stream: {stream:#?}")
}
