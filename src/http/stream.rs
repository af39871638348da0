//! `GET /api/events/stream`: the log as Server-Sent Events, live and resumable.
//!
//! Each event is sent with `id: <position>`, `event: <type>` and the envelope as `data`. A client that reconnects
//! sends `Last-Event-ID` (browsers do it by themselves) and resumes right after the last event it saw, so a live
//! view never misses or repeats one. Without it the stream starts at `?after=N`, or at the current head (live
//! only). It wakes as soon as this process commits, and polls every second for what other replicas commit.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, Stream, StreamExt};
use serde::Deserialize;
use utoipa::IntoParams;

use super::{error, ApiError, AppState};
use crate::eventlog::StoredEvent;

const PAGE: i64 = 200;
/// How often to look for events committed by other replicas (this process's own commits wake the stream at once).
const POLL: Duration = Duration::from_secs(1);

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// Start after this position; without it (and without `Last-Event-ID`) at the current head: live only.
    #[param(minimum = 0)]
    after: Option<i64>,
    /// Only events from this source (`github`, `linear`, `telegram`, `pidevops`).
    source: Option<String>,
}

/// The log as Server-Sent Events: `id:` the position, `event:` the type, `data:` the event as `/api/events/{id}`
/// serves it. Resumes after `Last-Event-ID`; ends with a comment when the server shuts down.
#[utoipa::path(
    get,
    path = "/api/events/stream",
    operation_id = "stream_events",
    tag = "events",
    params(
        StreamQuery,
        ("Last-Event-ID" = Option<i64>, Header,
            description = "Resume right after this position (browsers send it on reconnect); wins over `after`"),
    ),
    responses(
        (status = 200, description = "An endless stream of events; each `data:` is an `Envelope`",
            content_type = "text/event-stream", body = String),
        (status = 400, description = "`bad_query`, `bad_last_event_id`", body = ApiError),
        (status = 503, description = "`unavailable`: the store cannot be read", body = ApiError),
    )
)]
pub async fn events_stream(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<StreamQuery>, QueryRejection>,
) -> Response {
    let Query(query) = match query {
        Ok(q) => q,
        Err(rejection) => {
            return error(StatusCode::BAD_REQUEST, "bad_query", rejection.body_text())
        }
    };
    if let Some(source) = &query.source {
        if !crate::domain::Source::ALL
            .iter()
            .any(|s| s.as_str() == source)
        {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_query",
                format!("unknown source {source:?}"),
            );
        }
    }
    let resume = match headers.get("last-event-id").map(|v| v.to_str()) {
        None => None,
        Some(Ok(text)) => match text.trim().parse::<i64>() {
            Ok(position) if position >= 0 => Some(position),
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "bad_last_event_id",
                    "Last-Event-ID must be an event position (a whole number, 0 or more)",
                )
            }
        },
        Some(Err(_)) => {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_last_event_id",
                "Last-Event-ID must be an event position",
            )
        }
    };
    let after = match (resume, query.after) {
        (Some(position), _) => position,
        (None, Some(after)) if after >= 0 => after,
        (None, Some(_)) => {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_query",
                "after must be 0 or more",
            )
        }
        (None, None) => match state.log.store().head().await {
            Ok(head) => head,
            Err(e) => {
                return error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    e.to_string(),
                )
            }
        },
    };
    // Ends at shutdown, so a graceful stop never waits on a client that would listen forever.
    let events = live(state.clone(), after, query.source, true)
        .take_until(state.shutdown.clone().cancelled_owned());
    Sse::new(events.chain(stream::once(async {
        Ok(Event::default().comment("server shutting down"))
    })))
    .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
    .into_response()
}

/// Counts connected stream clients; dropped with the stream, however it ends.
struct ClientGauge;

impl ClientGauge {
    fn new() -> Self {
        metrics::gauge!("pidevops_sse_clients").increment(1.0);
        Self
    }
}

impl Drop for ClientGauge {
    fn drop(&mut self) {
        metrics::gauge!("pidevops_sse_clients").decrement(1.0);
    }
}

struct Cursor {
    _client: ClientGauge,
    state: AppState,
    after: i64,
    source: Option<String>,
    typed: bool,
    buffered: VecDeque<StoredEvent>,
    committed: tokio::sync::watch::Receiver<i64>,
}

/// Events after `after`, forever: pages from the store, then waits for the next commit (or the poll).
/// `typed`: each SSE event carries the event's type as its `event:` name and the envelope as data (the API);
/// untyped ones carry only the position and the type, and arrive at a browser's `onmessage` (the dashboard, which
/// only needs to know that something happened).
pub(crate) fn live(
    state: AppState,
    after: i64,
    source: Option<String>,
    typed: bool,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let committed = state.log.committed();
    let cursor = Cursor {
        _client: ClientGauge::new(),
        state,
        after,
        source,
        typed,
        buffered: VecDeque::new(),
        committed,
    };
    stream::unfold(cursor, |mut cursor| async move {
        loop {
            while let Some(event) = cursor.buffered.pop_front() {
                cursor.after = event.position;
                if cursor.source.as_deref().is_some_and(|s| s != event.source) {
                    continue;
                }
                return Some((Ok(to_sse(&event, cursor.typed)), cursor));
            }
            // Marked seen before reading: a commit landing after the read still wakes the wait below.
            cursor.committed.borrow_and_update();
            match cursor
                .state
                .log
                .store()
                .read_after(cursor.after, PAGE)
                .await
            {
                Ok(page) if !page.is_empty() => cursor.buffered.extend(page),
                Ok(_) => {
                    tokio::select! {
                        _ = cursor.committed.changed() => {}
                        _ = tokio::time::sleep(POLL) => {}
                    }
                }
                Err(error) => {
                    // The database is down: keep the connection and try again; /health says what is wrong.
                    tracing::debug!(%error, "event stream read failed; retrying");
                    tokio::time::sleep(POLL).await;
                }
            }
        }
    })
}

fn to_sse(event: &StoredEvent, typed: bool) -> Event {
    if !typed {
        // A page only needs to know that something happened, and where: not a 25 MiB webhook body.
        return Event::default()
            .id(event.position.to_string())
            .data(&event.event_type);
    }
    let data = serde_json::to_string(&event.to_envelope()).unwrap_or_else(|e| {
        format!(
            "{{\"error\":\"cannot encode event {}: {e}\"}}",
            event.position
        )
    });
    Event::default()
        .id(event.position.to_string())
        .event(&event.event_type)
        .data(data)
}
