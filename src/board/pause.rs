//! Pausing new dispatch for every replica: `dispatch.paused` / `dispatch.resumed` events in the `dispatch` stream,
//! appended at the stream's next version (a race is retried), read back as the last of them.

use chrono::Utc;

use crate::domain::{EventType, NewEvent, Source};
use crate::eventlog::{AppendError, EventLog, EventStore};

/// The stream of pause and resume commands.
pub const DISPATCH_STREAM: &str = "dispatch";

/// Pauses or resumes dispatch for every replica: an event in the `dispatch` stream.
pub async fn set_paused(
    log: &EventLog,
    paused: bool,
    actor: &str,
    reason: Option<&str>,
) -> anyhow::Result<bool> {
    for _ in 0..8 {
        let store = log.store();
        let version = store.stream_version(DISPATCH_STREAM).await?;
        let current = pause_state(store).await?.is_some();
        if current == paused {
            return Ok(false);
        }
        let kind = if paused {
            "dispatch.paused"
        } else {
            "dispatch.resumed"
        };
        let body = serde_json::json!({
            "at": Utc::now(),
            "by": actor,
            "reason": reason,
        });
        let mut new = NewEvent::new(
            Source::Pidevops,
            EventType::from_stored(kind.to_owned()),
            format!("{DISPATCH_STREAM}:{}", version + 1),
            "application/json",
            bytes::Bytes::from(body.to_string()),
        );
        new.stream = Some((DISPATCH_STREAM.to_owned(), version + 1));
        new.meta
            .insert("actor".to_owned(), serde_json::Value::from(actor));
        match log.append(new).await {
            Ok(appended) if !appended.duplicate => return Ok(true),
            Ok(_) | Err(AppendError::Conflict { .. }) => continue,
            Err(error) => return Err(error.into()),
        }
    }
    anyhow::bail!("the pause state kept changing; try again")
}

/// `Some(reason)` when the last pause command paused dispatch.
pub async fn pause_state(store: &EventStore) -> anyhow::Result<Option<String>> {
    let events = store.read_stream(DISPATCH_STREAM).await?;
    let Some(last) = events.last() else {
        return Ok(None);
    };
    if last.event_type != "dispatch.paused" {
        return Ok(None);
    }
    let body: serde_json::Value = serde_json::from_slice(&last.body).unwrap_or_default();
    let by = body["by"].as_str().unwrap_or("someone");
    Ok(Some(match body["reason"].as_str() {
        Some(reason) => format!("paused by {by}: {reason}"),
        None => format!("paused by {by}"),
    }))
}
