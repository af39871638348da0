//! Pausing new dispatch for every replica: `dispatch.paused` / `dispatch.resumed` events in the `dispatch` stream,
//! appended at the stream's next version (a race is retried), read back as the last of them. And a person's lift
//! of one profile's pause by its provider's limit: `limits.lifted` in the stream `limits` (`domain::limits`).

use anyhow::Context;
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

/// Lifts `profile`'s pause by its provider's limit, as a person asks (`by`: api, cli, dashboard): every report
/// of a limit on record before it counts no more, and the tasks those runs held may start.
pub async fn lift_limit(
    log: &EventLog,
    profile: &str,
    by: &str,
) -> anyhow::Result<crate::domain::limits::Lifted> {
    use crate::domain::limits::{Lifted, LIFTED, STREAM};
    let lifted = Lifted {
        at: Utc::now(),
        profile: profile.to_owned(),
        by: by.to_owned(),
    };
    let mut new = NewEvent::new(
        Source::Pidevops,
        EventType::from_stored(LIFTED.to_owned()),
        format!("{STREAM}:lift:{}", uuid::Uuid::now_v7()),
        "application/json",
        bytes::Bytes::from(serde_json::to_vec(&lifted)?),
    );
    new.meta
        .insert("actor".to_owned(), serde_json::Value::from(by));
    log.append_at_end(STREAM, new)
        .await
        .context("recording the lift (try again)")?;
    Ok(lifted)
}

/// The latest lift of each profile's pause.
pub async fn limit_lifts(
    store: &EventStore,
) -> anyhow::Result<std::collections::BTreeMap<String, chrono::DateTime<Utc>>> {
    use crate::domain::limits::{Lifted, LIFTED, STREAM};
    let mut lifts = std::collections::BTreeMap::new();
    for event in store.read_stream(STREAM).await? {
        if event.event_type != LIFTED {
            continue;
        }
        if let Ok(lifted) = serde_json::from_slice::<Lifted>(&event.body) {
            let at = lifts.entry(lifted.profile).or_insert(lifted.at);
            *at = (*at).max(lifted.at);
        }
    }
    Ok(lifts)
}
