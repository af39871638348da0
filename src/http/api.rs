//! The admin API behind `PIDEVOPS_ADMIN_TOKEN`. With no token configured every request is refused (fail closed).
//! Only its OpenAPI document (`openapi.rs`, `GET /api/openapi.json`, mounted by openapi.rs's own router) is public.

use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::{error, ApiError, AppState};
use crate::eventlog::Envelope;

pub const MAX_PAGE: i64 = 1000;
const DEFAULT_PAGE: i64 = 100;

/// Declares `admin_routes()`: every route behind the admin token as `(method, path, handler)`. The one list:
/// `router` mounts exactly these, and `routes()` hands them to the test that checks each one is documented.
macro_rules! admin_routes {
    ($($method:ident $path:literal => $handler:path),* $(,)?) => {
        fn admin_routes() -> Vec<(Method, &'static str, MethodRouter<AppState>)> {
            vec![$((Method::$method, $path, on(MethodFilter::$method, $handler))),*]
        }
    };
}

admin_routes! {
    GET "/api/events" => list_events,
    GET "/api/events/{id}" => show_event,
    GET "/api/events/{id}/body" => event_body,
    GET "/api/events/stream" => super::stream::events_stream,
    GET "/api/sources" => list_sources,
    POST "/api/tasks" => super::tasks::create,
    GET "/api/tasks" => super::tasks::list,
    GET "/api/tasks/{id}" => super::tasks::show,
    GET "/api/tasks/{id}/receipt" => super::receipts::receipt,
    POST "/api/tasks/{id}/agent" => super::tasks::choose_agent,
    POST "/api/tasks/{id}/spec" => super::tasks::edit_spec,
    POST "/api/tasks/{id}/answer" => super::tasks::answer,
    POST "/api/tasks/{id}/land" => super::landing::land,
    POST "/api/tasks/{id}/{action}" => super::tasks::command,
    POST "/api/plans" => super::plans::create,
    GET "/api/plans/{id}" => super::plans::show,
    GET "/api/dispatch" => super::dispatch::status,
    POST "/api/dispatch/pause" => super::dispatch::pause,
    POST "/api/dispatch/resume" => super::dispatch::resume,
    POST "/api/dispatch/limits/{profile}/lift" => super::dispatch::lift_limit,
    GET "/api/runs" => super::dispatch::list,
    GET "/api/usage" => super::usage::report,
    GET "/api/budgets" => super::budgets::show,
    POST "/api/budgets/raise" => super::budgets::raise,
}

pub fn router(state: AppState) -> Router<AppState> {
    admin_routes()
        .into_iter()
        .fold(Router::new(), |router, (_, path, handler)| {
            router.route(path, handler)
        })
        .route_layer(middleware::from_fn_with_state(state, require_admin))
}

/// Every route behind the admin token, as (method, path template); `openapi::routes` adds the public document.
pub fn admin_route_list() -> Vec<(Method, &'static str)> {
    admin_routes()
        .into_iter()
        .map(|(method, path, _)| (method, path))
        .collect()
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

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Events after this position (exclusive); 0 for the start of the log.
    #[serde(default)]
    #[param(minimum = 0)]
    after: i64,
    /// At most this many events (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// A page of the log, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventPage {
    pub events: Vec<Envelope>,
    /// The position to ask `after` next: the last event's, or `after` itself when the page is empty.
    pub next_after: i64,
}

/// Read the log in position order, a page at a time.
#[utoipa::path(
    get,
    path = "/api/events",
    operation_id = "list_events",
    tag = "events",
    params(EventsQuery),
    responses(
        (status = 200, description = "A page of events", body = EventPage),
        (status = 400, description = "`bad_query`: unknown parameter, `after` below 0, `limit` out of range",
            body = ApiError),
        (status = 503, description = "`unavailable`: the store cannot be read", body = ApiError),
    )
)]
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
            Json(EventPage {
                events: envelopes,
                next_after,
            })
            .into_response()
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

/// One event by its id.
#[utoipa::path(
    get,
    path = "/api/events/{id}",
    operation_id = "show_event",
    tag = "events",
    params(("id" = Uuid, Path, description = "The event's id")),
    responses(
        (status = 200, description = "The event", body = Envelope),
        (status = 400, description = "`bad_id`: not a UUID", body = ApiError),
        (status = 404, description = "`not_found`: no such event", body = ApiError),
        (status = 503, description = "`unavailable`: the store cannot be read", body = ApiError),
    )
)]
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
#[utoipa::path(
    get,
    path = "/api/events/{id}/body",
    operation_id = "event_body",
    tag = "events",
    params(("id" = Uuid, Path, description = "The event's id")),
    responses(
        (status = 200, description = "The body as received, served with the `Content-Type` it arrived with",
            content_type = "*/*"),
        (status = 400, description = "`bad_id`: not a UUID", body = ApiError),
        (status = 404, description = "`not_found`: no such event", body = ApiError),
        (status = 503, description = "`unavailable`: the store cannot be read", body = ApiError),
    )
)]
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

/// `GET /api/sources`: per source its totals and last delivery, and how far the projector has got.
#[derive(Debug, Serialize, ToSchema)]
pub struct SourcesView {
    pub sources: Vec<SourceView>,
    pub projector: SourcesProgress,
}

/// One source's totals over its event types.
#[derive(Debug, Serialize, ToSchema)]
pub struct SourceView {
    pub source: String,
    pub events: i64,
    pub last_delivery_at: DateTime<Utc>,
    /// Seconds since the last delivery (0 or more).
    pub last_delivery_ago_s: i64,
    pub last_type: String,
    pub types: Vec<SourceTypeView>,
}

/// One event type of a source.
#[derive(Debug, Serialize, ToSchema)]
pub struct SourceTypeView {
    #[serde(rename = "type")]
    pub event_type: String,
    pub events: i64,
    pub first_at: DateTime<Utc>,
    pub last_at: DateTime<Utc>,
    pub last_position: i64,
}

/// How current the `sources` read model is: it lags the log's `head` by `behind` events.
#[derive(Debug, Serialize, ToSchema)]
pub struct SourcesProgress {
    pub name: String,
    pub version: i64,
    pub position: i64,
    pub head: i64,
    pub behind: i64,
}

/// The `sources` read model: per source its totals and last delivery, and per event type the same, plus how far
/// the projector has got (so a reader knows how current it is).
#[utoipa::path(
    get,
    path = "/api/sources",
    operation_id = "list_sources",
    tag = "events",
    responses(
        (status = 200, description = "Per source and event type: counts and deliveries", body = SourcesView),
        (status = 503, description = "`unavailable`: the store cannot be read", body = ApiError),
    )
)]
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
            let per_source = summaries
                .iter()
                .map(|summary| SourceView {
                    source: summary.source.clone(),
                    events: summary.events,
                    last_delivery_at: summary.last_at,
                    last_delivery_ago_s: (now - summary.last_at).num_seconds().max(0),
                    last_type: summary.last_type.clone(),
                    types: rows
                        .iter()
                        .filter(|r| r.source == summary.source)
                        .map(|r| SourceTypeView {
                            event_type: r.event_type.clone(),
                            events: r.events,
                            first_at: r.first_at,
                            last_at: r.last_at,
                            last_position: r.last_position,
                        })
                        .collect(),
                })
                .collect();
            let (version, position) = projected.unwrap_or((0, 0));
            Json(SourcesView {
                sources: per_source,
                projector: SourcesProgress {
                    name: sources::NAME.to_owned(),
                    version,
                    position,
                    head,
                    behind: (head - position).max(0),
                },
            })
            .into_response()
        }
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            e.to_string(),
        ),
    }
}
