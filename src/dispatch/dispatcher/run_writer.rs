//! A run's events, appended at consecutive versions of its stream (`run:<id>`): the attempt, its heartbeat and the
//! watchdog race to write a run's outcome, and the stream version decides which one stands.

use super::DISPATCHER;
use crate::dispatch::runs::{self, RunEvent};
use crate::domain::{EventType, NewEvent, Source};
use crate::eventlog::{AppendError, EventLog};
use crate::tasks::{RunId, TaskId};

/// Why a run event was not written.
pub(super) enum Written {
    /// The stream moved on or the end key is taken: someone else decided this run's fate.
    Taken,
    Failed(anyhow::Error),
}

/// Appends a run's events at consecutive stream versions.
#[derive(Clone)]
pub(super) struct RunWriter {
    log: EventLog,
    run: RunId,
    task: TaskId,
    /// The stream version last written; the attempt moves it past its heartbeat's beats.
    pub(super) version: i64,
}

impl RunWriter {
    pub(super) fn new(log: EventLog, run: RunId, task: TaskId, version: i64) -> Self {
        Self {
            log,
            run,
            task,
            version,
        }
    }

    pub(super) async fn append(&mut self, event: &RunEvent) -> Result<(), Written> {
        let key = if event.is_terminal() {
            runs::end_key(self.run)
        } else {
            format!("run:{}:{}", self.run, self.version + 1)
        };
        let body = serde_json::to_vec(event).map_err(|e| Written::Failed(e.into()))?;
        let mut new = NewEvent::new(
            Source::Pidevops,
            EventType::from_stored(event.kind().to_owned()),
            key,
            "application/json",
            bytes::Bytes::from(body),
        );
        new.stream = Some((runs::stream(self.run), self.version + 1));
        new.occurred_at = event.at();
        new.subject.reference = Some(self.task.to_string());
        new.meta
            .insert("actor".to_owned(), serde_json::Value::from(DISPATCHER));
        match self.log.append(new).await {
            Ok(appended) if !appended.duplicate => {
                self.version += 1;
                Ok(())
            }
            Ok(_) | Err(AppendError::Conflict { .. }) => Err(Written::Taken),
            Err(error) => Err(Written::Failed(error.into())),
        }
    }
}
