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
            // A beat reported failed (the append timed out) may have committed all the same; the next beat, keyed
            // by the same version, meets it. Not someone else's decision: the writer moves past it.
            Ok(appended) if self.own_beat(event, appended.position).await => {
                self.version += 1;
                Ok(())
            }
            Ok(_) | Err(AppendError::Conflict { .. }) => Err(Written::Taken),
            Err(error) => Err(Written::Failed(error.into())),
        }
    }

    /// Whether the event stored at `position` is a heartbeat at this writer's next version: only this run's
    /// heartbeat writes those, so it is one of its own beats.
    async fn own_beat(&self, event: &RunEvent, position: i64) -> bool {
        if !matches!(event, RunEvent::Heartbeat { .. }) {
            return false;
        }
        let Ok(stored) = self.log.store().read_stream(&runs::stream(self.run)).await else {
            return false;
        };
        stored.iter().any(|e| {
            e.position == position
                && e.event_type == event.kind()
                && e.stream_version == Some(self.version + 1)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn beat(run: RunId, task: TaskId) -> RunEvent {
        RunEvent::Heartbeat {
            at: Utc::now(),
            run,
            task,
            output_bytes: 0,
        }
    }

    #[tokio::test]
    async fn a_beat_that_committed_after_its_append_failed_is_the_writers_own_not_a_lost_run() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let log = crate::eventlog::sqlite_log_in(dir.path()).await;
        let (run, task) = (RunId(uuid::Uuid::now_v7()), "T-1".parse().expect("an id"));
        let mut attempt = RunWriter::new(log.clone(), run, task, 0);
        let started = RunEvent::Started {
            at: Utc::now(),
            run,
            task,
            attempt: 1,
            profile: "fake".into(),
            worker: "here".into(),
            log: "/tmp/agent.log".into(),
        };
        assert!(attempt.append(&started).await.is_ok());

        // A beat at version 2 committed, but its writer heard a failure (its version stayed at 1).
        let mut committed = attempt.clone();
        assert!(committed.append(&beat(run, task)).await.is_ok());
        let mut beats = attempt.clone();
        assert!(
            beats.append(&beat(run, task)).await.is_ok(),
            "its own earlier beat taken for another writer's"
        );
        assert_eq!(beats.version, 2);
        assert!(beats.append(&beat(run, task)).await.is_ok());
        assert_eq!(beats.version, 3);

        // Anything else at a version taken stays someone else's decision.
        let mut late = attempt.clone();
        late.version = 2;
        assert!(matches!(late.append(&started).await, Err(Written::Taken)));
        // The watchdog's verdict after the beats: the next beat meets it, and the run is lost.
        let mut watchdog = beats.clone();
        let lost = RunEvent::Failed {
            at: Utc::now(),
            run,
            task,
            attempt: 1,
            kind: crate::dispatch::runs::FailureKind::Lost,
            detail: "no heartbeat".into(),
            duration_s: 0.0,
            tail: String::new(),
            usage: None,
            until: None,
            reviewer_usage: None,
        };
        assert!(watchdog.append(&lost).await.is_ok());
        assert!(matches!(
            beats.append(&beat(run, task)).await,
            Err(Written::Taken)
        ));
    }
}
