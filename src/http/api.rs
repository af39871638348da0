//! The admin API behind `PIDEVOPS_ADMIN_TOKEN`. With no token configured every request is refused (fail closed).

use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;

use super::{error, AppState};

pub const MAX_PAGE: i64 = 1000;
const DEFAULT_PAGE: i64 = 100;

pub fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/api/events", get(list_events))
        .route("/api/events/{id}", get(show_event))
        .route("/api/events/{id}/body", get(event_body))
        .route("/api/sources", get(list_sources))
        .route("/api/events/stream", get(super::stream::events_stream))
        .route(
            "/api/tasks",
            axum::routing::post(super::tasks::create).get(super::tasks::list),
        )
        .route("/api/tasks/{id}", get(super::tasks::show))
        .route(
            "/api/tasks/{id}/agent",
            axum::routing::post(super::tasks::choose_agent),
        )
        .route(
            "/api/tasks/{id}/{action}",
            axum::routing::post(super::tasks::command),
        )
        .route("/api/dispatch", get(super::dispatch::status))
        .route(
            "/api/dispatch/pause",
            axum::routing::post(super::dispatch::pause),
        )
        .route(
            "/api/dispatch/resume",
            axum::routing::post(super::dispatch::resume),
        )
        .route("/api/runs", get(super::dispatch::list))
        .route_layer(middleware::from_fn_with_state(state, require_admin))
}

async fn require_admin(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if state.settings.admin_token.is_none() {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_configured",
            "PIDEVOPS_ADMIN_TOKEN is not set, so the admin API refuses every request",
        );
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        // The scheme is case-insensitive (RFC 9110); the token is not.
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token);
    match presented {
        Some(token) if state.settings.admin_token_matches(token.trim()) => next.run(request).await,
        _ => {
            let mut response = error(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "send Authorization: Bearer <PIDEVOPS_ADMIN_TOKEN>",
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            response
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    #[serde(default)]
    after: i64,
    limit: Option<i64>,
}

async fn list_events(
    State(state): State<AppState>,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Response {
    let Query(query) = match query {
        Ok(q) => q,
        Err(rejection) => {
            return error(StatusCode::BAD_REQUEST, "bad_query", rejection.body_text())
        }
    };
    if query.after < 0 {
        return error(
            StatusCode::BAD_REQUEST,
            "bad_query",
            "after must be 0 or more",
        );
    }
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return error(
            StatusCode::BAD_REQUEST,
            "bad_query",
            format!("limit must be between 1 and {MAX_PAGE}"),
        );
    }
    match state.log.store().read_after(query.after, limit).await {
        Ok(events) => {
            let next_after = events.last().map_or(query.after, |e| e.position);
            let envelopes: Vec<_> = events.iter().map(|e| e.to_envelope()).collect();
            Json(json!({ "events": envelopes, "next_after": next_after })).into_response()
        }
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            e.to_string(),
        ),
    }
}

/// The event named in the path, or the response that says why there is none.
async fn find_event(
    state: &AppState,
    id: Result<Path<Uuid>, PathRejection>,
) -> Result<crate::eventlog::StoredEvent, Response> {
    let Ok(Path(id)) = id else {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "bad_id",
            "the event id must be a UUID",
        ));
    };
    match state.log.store().get(id).await {
        Ok(Some(event)) => Ok(event),
        Ok(None) => Err(error(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no event {id}"),
        )),
        Err(e) => Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            e.to_string(),
        )),
    }
}

async fn show_event(
    State(state): State<AppState>,
    id: Result<Path<Uuid>, PathRejection>,
) -> Response {
    match find_event(&state, id).await {
        Ok(event) => Json(event.to_envelope()).into_response(),
        Err(response) => response,
    }
}

/// The exact bytes received, with the content type they arrived with.
async fn event_body(
    State(state): State<AppState>,
    id: Result<Path<Uuid>, PathRejection>,
) -> Response {
    match find_event(&state, id).await {
        Ok(event) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, event.content_type.clone())],
            Body::from(event.body),
        )
            .into_response(),
        Err(response) => response,
    }
}

/// The `sources` read model: per source its totals and last delivery, and per event type the same, plus how far
/// the projector has got (so a reader knows how current it is).
async fn list_sources(State(state): State<AppState>) -> Response {
    use crate::projectors::{read_row, sources};
    let store = state.log.store();
    let read = async {
        let rows = sources::activity(store).await?;
        let projected = read_row(store, sources::NAME).await?;
        let head = store.head().await?;
        Ok::<_, crate::eventlog::StoreError>((rows, projected, head))
    };
    match read.await {
        Ok((rows, projected, head)) => {
            let now = chrono::Utc::now();
            let summaries = sources::summarize(&rows);
            let body: Vec<_> = summaries
                .iter()
                .map(|summary| {
                    let types: Vec<_> = rows
                        .iter()
                        .filter(|r| r.source == summary.source)
                        .map(|r| {
                            json!({ "type": r.event_type, "events": r.events, "first_at": r.first_at,
                                    "last_at": r.last_at, "last_position": r.last_position })
                        })
                        .collect();
                    json!({
                        "source": summary.source,
                        "events": summary.events,
                        "last_delivery_at": summary.last_at,
                        "last_delivery_ago_s": (now - summary.last_at).num_seconds().max(0),
                        "last_type": summary.last_type,
                        "types": types,
                    })
                })
                .collect();
            let (version, position) = projected.unwrap_or((0, 0));
            Json(json!({
                "sources": body,
                "projector": { "name": sources::NAME, "version": version, "position": position,
                               "head": head, "behind": (head - position).max(0) },
            }))
            .into_response()
        }
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            e.to_string(),
        ),
    }
}
