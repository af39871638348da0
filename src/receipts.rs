//! The `receipts` loop: when a task's work ends (`task.completed`, `task.cancelled`), its receipt
//! (`projectors::tasks::receipt`) is issued from the log and recorded in it, as `receipt.issued` in the stream
//! `receipt:<task>`, right after the task's last event. The receipt then sits in the hash chain itself: what
//! pidevops said about the task when it ended can be read back and checked (`pidevops verify --receipt`) however
//! the task or the log go on, and a receipt altered later no longer matches the one recorded.
//!
//! Once per ending: the record is keyed by the ending event's position, so an event seen again after a crash
//! appends nothing twice, and a task that ends again (reopened by a follow-up, completed once more) gets another.

use anyhow::Context;

use crate::domain::{EventType, NewEvent, Source};
use crate::eventlog::{Bodies, EventLog, StoredEvent};
use crate::loops::follow::{AsStored, Follow, Follower, Next, Wanted};
use crate::projectors::tasks::receipt::{self, Receipt};
use crate::tasks::TaskId;

/// The loop's name and its checkpoint's.
pub const RECEIPTS: &str = "receipts";
/// The record's type.
pub const ISSUED: &str = "receipt.issued";
/// A task's recorded receipts: `receipt:T-42`.
pub const STREAM_PREFIX: &str = "receipt:";
/// The task events after which its work has ended.
const ENDINGS: [&str; 2] = ["task.completed", "task.cancelled"];

pub fn stream(task: TaskId) -> String {
    format!("{STREAM_PREFIX}{task}")
}

/// What one tick did, for `/health`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReceiptsProgress {
    pub position: i64,
    /// Receipts recorded.
    pub issued: u64,
    #[serde(skip)]
    pub out_of_time: bool,
}

#[derive(Clone, Debug)]
pub struct Receipts {
    log: EventLog,
    follow: Follow<StoredEvent>,
}

impl Receipts {
    pub fn new(log: EventLog) -> Self {
        Self {
            log,
            follow: Follow::default(),
        }
    }

    /// Handles what was committed since the checkpoint (see [`crate::loops::follow`]).
    pub async fn tick(&self) -> anyhow::Result<ReceiptsProgress> {
        let followed = self.follow.tick(self.log.store(), self).await?;
        Ok(ReceiptsProgress {
            position: followed.position,
            out_of_time: followed.out_of_time,
            ..followed.tally
        })
    }

    async fn handle_event(
        &self,
        event: &StoredEvent,
        progress: &mut ReceiptsProgress,
    ) -> anyhow::Result<()> {
        if event.source != Source::Pidevops.as_str()
            || !ENDINGS.contains(&event.event_type.as_str())
        {
            return Ok(());
        }
        let Some(task) = event.stream.as_deref().and_then(TaskId::from_stream) else {
            return Ok(());
        };
        let store = self.log.store();
        let key = format!("{}:{}", stream(task), event.position);
        if store.find_by_key(Source::Pidevops, &key).await?.is_some() {
            return Ok(());
        }
        let receipt = receipt::issue(store, task)
            .await
            .with_context(|| format!("issuing the receipt of {task}"))?;
        let name = stream(task);
        let version = store.stream_version(&name).await?;
        let mut new = NewEvent::new(
            Source::Pidevops,
            EventType::from_stored(ISSUED.to_owned()),
            key,
            "application/json",
            bytes::Bytes::from(serde_json::to_vec(&receipt)?),
        );
        new.stream = Some((name, version + 1));
        new.meta
            .insert("actor".to_owned(), serde_json::Value::from(RECEIPTS));
        let appended = self
            .log
            .append(new)
            .await
            .with_context(|| format!("recording the receipt of {task}"))?;
        if !appended.duplicate {
            progress.issued += 1;
        }
        Ok(())
    }
}

/// The receipts recorded for `task`, oldest first.
pub async fn recorded(
    store: &crate::eventlog::EventStore,
    task: TaskId,
) -> anyhow::Result<Vec<Receipt>> {
    store
        .read_stream(&stream(task))
        .await?
        .iter()
        .filter(|e| e.event_type == ISSUED)
        .map(|e| {
            serde_json::from_slice(&e.body)
                .with_context(|| format!("event {} is not a receipt", e.position))
        })
        .collect()
}

impl Follower for Receipts {
    type Prepare = AsStored;
    type Tally = ReceiptsProgress;

    fn checkpoint(&self) -> &str {
        RECEIPTS
    }

    fn prepare(&self) -> AsStored {
        AsStored
    }

    /// None: the receipt is issued from the task's streams, never from the ending event's body.
    fn bodies(&self) -> Wanted {
        Bodies::None.into()
    }

    async fn handle(
        &self,
        event: &StoredEvent,
        progress: &mut ReceiptsProgress,
    ) -> anyhow::Result<Next> {
        self.handle_event(event, progress).await.with_context(|| {
            format!("receipts: event {} ({})", event.position, event.event_type)
        })?;
        Ok(Next::Done)
    }
}
