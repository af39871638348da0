//! The dashboard at `/`: server-rendered pages from the read models (`pages.rs`, pure), one stylesheet and one
//! small script (`assets.rs`), live through `/live` (the log as SSE, resumable). Signing in exchanges the admin
//! token for a signed cookie (`session.rs`); every state change is a POST carrying the session's CSRF token.
//! Without `PIDEVOPS_ADMIN_TOKEN` the dashboard is closed, like the API. Signing out records
//! `pidevops.dashboard.signed_out` for the session, and every request looks that record up (one indexed read), so a
//! copied cookie is refused on every replica from the moment the sign-out is answered.

pub mod assets;
pub mod attempt;
pub mod board;
pub mod follow_ups;
pub mod new_task;
pub mod pages;
pub mod plan;
pub mod refreshes;
pub mod report;
pub mod session;
mod sign_in;
pub mod spend;
mod spend_page;
mod task_page;
pub mod timeline;
pub mod transcript;
pub mod triage;
mod whatif_page;
mod words;

use sign_in::*;
pub use sign_in::{OneTimeSignIn, SignInThrottle};

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use chrono::Utc;
use futures::StreamExt;
use maud::Markup;
use secrecy::ExposeSecret;
use serde::Deserialize;

use crate::board::{BoardError, Steer};
use crate::domain::{EventType, NewEvent, Source};
use crate::eventlog::StoreError;
use crate::http::AppState;
use crate::projectors::runs::{self, Which};
use crate::projectors::tasks as task_rows;
use crate::tasks::TaskId;
use pages::{EventsFilter, Frame, Nav};
use session::{Key, Session, COOKIE};

/// Events per page of the events view.
const EVENTS_PER_PAGE: usize = 100;
/// The longest form body accepted (a token, a CSRF token, a path, a comment of 2,000 characters however encoded).
const FORM_LIMIT: usize = 32 * 1024;
/// The longest spec form accepted, as sent: far more than a spec a person types, less than the 3 × 65,536 characters
/// a spec may hold in any script once percent-encoded; larger specs are edited through the API or the CLI.
const SPEC_FORM_LIMIT: usize = 1024 * 1024;
/// The longest a page waits for the read models to catch up with what its reader just did.
const CATCH_UP: Duration = Duration::from_secs(3);
/// How long a wrong sign-in waits for its answer.
const FAILED_SIGN_IN_DELAY: Duration = Duration::from_secs(1);
/// Wrong sign-ins from one client address being answered at once, at most; more get 429 at once.
const MAX_FAILING_PER_ADDRESS: usize = 4;
/// Client addresses with wrong sign-ins being answered, at most; past it every wrong sign-in gets 429 at once.
const MAX_FAILING_ADDRESSES: usize = 4096;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(board::board_page))
        .route("/assets/style.css", get(style))
        .route("/assets/app.js", get(script))
        .route("/sign-in", get(sign_in_page).post(sign_in))
        .route("/sign-in/once", get(sign_in_once))
        .route("/sign-out", post(sign_out))
        .route(
            "/tasks/new",
            get(new_task::new_task_page).post(new_task::create),
        )
        .route("/tasks/{id}", get(task_page::task_page))
        .route("/tasks/{id}/spec", post(task_page::edit_spec))
        .route("/tasks/{id}/answer", post(task_page::answer))
        .route("/tasks/{id}/land", post(task_page::land))
        .route("/tasks/{id}/{action}", post(task_action))
        .route("/runs", get(runs_page))
        .route("/runs/limits/{profile}/lift", post(lift_limit))
        .route("/spend", get(spend_page::spend_page))
        .route("/spend/raise", post(spend_page::raise))
        .route(
            "/whatif",
            get(whatif_page::whatif_page).post(whatif_page::replay),
        )
        .route("/status", get(health_page))
        .route("/events", get(events_page))
        .route("/events/{position}", get(event_page))
        .route("/live", get(live))
}

/// Every page: no caching, no framing, and no script but our own file (a stored `<script>` could not run even if
/// escaping ever failed).
fn page(status: StatusCode, markup: Markup) -> Response {
    (
        status,
        [
            (header::CACHE_CONTROL, "no-store"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "same-origin"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                 frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
            ),
        ],
        Html(markup.into_string()),
    )
        .into_response()
}

/// Adds `Server-Timing: app;dur=<ms>` (reading the read models and rendering, after any `?at=` wait), which
/// browsers' developer tools show and the board benchmark reads.
fn timed(started: std::time::Instant, mut response: Response) -> Response {
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    if let Ok(value) = HeaderValue::from_str(&format!("app;dur={ms:.2}")) {
        response.headers_mut().insert("server-timing", value);
    }
    response
}

fn key(state: &AppState) -> Option<Key> {
    state
        .settings
        .admin_token
        .as_ref()
        .map(|t| Key::from_admin_token(t.expose_secret()))
}

/// The request's valid session, if it has one: signed by our key, not expired, and not signed out.
async fn session(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Option<(Key, Session)>, StoreError> {
    let Some(key) = key(state) else {
        return Ok(None);
    };
    let Some(session) = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|h| session::cookie(h, COOKIE))
        .and_then(|value| Session::verify(value, &key, Utc::now()))
    else {
        return Ok(None);
    };
    // Read from the log on every request (not cached), so no replica ever honours a signed-out cookie.
    let signed_out = state
        .log
        .store()
        .find_by_key(Source::Pidevops, &signed_out_key(&session))
        .await?;
    Ok(signed_out.is_none().then_some((key, session)))
}

/// The dedup key of a session's sign-out: by the session's id (a hash, so the log holds nothing a cookie needs).
fn signed_out_key(session: &Session) -> String {
    format!("dashboard:signed_out:{}", session.id())
}

/// A page for the signed-in, or the way to sign in.
enum Access {
    Granted(Key, Session),
    Denied(Response),
}

async fn require(state: &AppState, headers: &HeaderMap, uri: &Uri) -> Access {
    match session(state, headers).await {
        Err(e) => Access::Denied(unavailable(e)),
        Ok(Some((key, session))) => Access::Granted(key, session),
        Ok(None) => {
            let next = uri
                .path_and_query()
                .map_or("/".to_owned(), |p| p.as_str().to_owned());
            let to = format!(
                "/sign-in?next={}",
                form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
            );
            Access::Denied(Redirect::to(&to).into_response())
        }
    }
}

/// A signed-in reader: extracting one sends everybody else to sign in (and back here after).
struct SignedIn {
    key: Key,
    session: Session,
}

impl axum::extract::FromRequestParts<AppState> for SignedIn {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        match require(state, &parts.headers, &parts.uri).await {
            Access::Granted(key, session) => Ok(Self { key, session }),
            Access::Denied(response) => Err(response),
        }
    }
}

/// A state change: a session and its CSRF token, or a refusal that changes nothing.
async fn require_post(state: &AppState, headers: &HeaderMap, form: &[(String, String)]) -> Access {
    let found = match session(state, headers).await {
        Ok(found) => found,
        Err(e) => return Access::Denied(unavailable(e)),
    };
    let Some((key, session)) = found else {
        return Access::Denied(page(
            StatusCode::UNAUTHORIZED,
            pages::message("Not signed in", "Sign in to do that."),
        ));
    };
    let csrf = form
        .iter()
        .find(|(k, _)| k == "csrf")
        .map_or("", |(_, v)| v.as_str());
    if !session.csrf_matches(&key, csrf) {
        return Access::Denied(page(
            StatusCode::FORBIDDEN,
            pages::message(
                "Refused",
                "The form's CSRF token is missing or wrong: reload the page and try again.",
            ),
        ));
    }
    Access::Granted(key, session)
}

/// A form body's fields; `None` when it is larger than `limit` (answer [`too_large`]).
fn parse_form(body: &[u8], limit: usize) -> Option<Vec<(String, String)>> {
    (body.len() <= limit).then(|| form_urlencoded::parse(body).into_owned().collect())
}

/// A form's field by name. A textarea's lines arrive as CRLF (browsers send them so): they are kept as LF, the way
/// every other door stores text, so an untouched field reads back as it was.
fn field(form: &[(String, String)], name: &str) -> Option<String> {
    form.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.replace("\r\n", "\n"))
}

fn too_large() -> Response {
    page(
        StatusCode::PAYLOAD_TOO_LARGE,
        pages::message("Too large", "That form is larger than any of ours."),
    )
}

fn frame(key: &Key, session: &Session, title: &str, nav: Nav, after: Option<i64>) -> Frame {
    Frame {
        title: title.to_owned(),
        nav,
        csrf: session.csrf(key),
        after,
    }
}

/// Read-your-writes for the pages: waits (at most [`CATCH_UP`]) until the tasks and runs read models have applied
/// the log up to `at` (an action's event, or the live event that asked for a refresh), so a page never shows the
/// state from before what its reader just did or was just told of.
async fn caught_up(state: &AppState, at: Option<i64>) {
    let Some(at) = at else {
        return;
    };
    let deadline = tokio::time::Instant::now() + CATCH_UP;
    loop {
        let mut behind = false;
        for name in [task_rows::NAME, runs::NAME] {
            match crate::projectors::read_row(state.log.store(), name).await {
                Ok(Some((_, position))) if position >= at => {}
                _ => behind = true,
            }
        }
        if !behind || tokio::time::Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The log position a page of the read models is rendered at, for its live updates: the lowest position the tasks
/// and runs read models have applied, read before the page's rows. Not the log's head: an event the models have not
/// applied yet (a plan's items made while its page renders) then still comes to the page through `/live`, and the
/// refresh it asks for waits for the models to apply it, instead of the page missing it until something else happens.
async fn rendered_at(state: &AppState) -> Result<i64, StoreError> {
    let mut at = i64::MAX;
    for name in [task_rows::NAME, runs::NAME] {
        let applied = crate::projectors::read_row(state.log.store(), name)
            .await
            .map_err(StoreError::Database)?;
        at = at.min(applied.map_or(0, |(_, position)| position));
    }
    Ok(at)
}

#[derive(Debug, Default, Deserialize)]
struct AtQuery {
    at: Option<i64>,
}

fn unavailable(error: impl std::fmt::Display) -> Response {
    page(
        StatusCode::SERVICE_UNAVAILABLE,
        pages::message(
            "The store did not answer",
            &format!("{error}. /health says more."),
        ),
    )
}

async fn style() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        assets::STYLE,
    )
        .into_response()
}

async fn script() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        assets::SCRIPT,
    )
        .into_response()
}

async fn task_action(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    body: bytes::Bytes,
) -> Response {
    let Some(form) = parse_form(&body, FORM_LIMIT) else {
        return too_large();
    };
    if let Access::Denied(response) = require_post(&state, &headers, &form).await {
        return response;
    }
    let (Ok(id), Ok(steer)) = (id.parse::<TaskId>(), action.parse::<Steer>()) else {
        return page(
            StatusCode::NOT_FOUND,
            pages::message(
                "No such action",
                "Tasks take approve, reject, retry, cancel, archive, done or land.",
            ),
        );
    };
    // A comment, where the form has one (a plan's rejection: its planner plans again with it).
    let reason = field(&form, "reason").filter(|r| !r.trim().is_empty());
    if steer == Steer::Reject && reason.is_none() {
        match state.board.load(id).await {
            Ok(Some(loaded)) if loaded.task.is_plan() => {
                return page(
                    StatusCode::BAD_REQUEST,
                    pages::message(
                        "A comment is needed",
                        &format!(
                            "{id} is a plan: it is rejected with a comment, which its planner plans again with. \
                             Say what to change."
                        ),
                    ),
                )
            }
            Ok(_) => {}
            Err(e) => return unavailable(e),
        }
    }
    let steered = state
        .board
        .steer(id, steer, reason, "from the dashboard", "dashboard")
        .await;
    steered_response(id, steered)
}

/// Back to the task's page once the read models show what was done, or why nothing was.
fn steered_response(id: TaskId, steered: Result<crate::board::Outcome, BoardError>) -> Response {
    match steered {
        Ok(outcome) => match outcome.appended.last() {
            Some(last) => {
                Redirect::to(&format!("/tasks/{id}?at={}", last.position)).into_response()
            }
            None => Redirect::to(&format!("/tasks/{id}")).into_response(),
        },
        Err(BoardError::Refused(refused)) => page(
            StatusCode::CONFLICT,
            pages::message("Not now", &format!("{id}: {refused}")),
        ),
        Err(BoardError::Invalid(invalid)) => page(
            StatusCode::BAD_REQUEST,
            pages::message("Not accepted", &format!("{id}: {invalid}")),
        ),
        Err(e) => unavailable(e),
    }
}

async fn runs_page(
    State(state): State<AppState>,
    SignedIn { key, session }: SignedIn,
    Query(at): Query<AtQuery>,
) -> Response {
    caught_up(&state, at.at).await;
    let store = state.log.store();
    let (head, running, recent) = match (
        rendered_at(&state).await,
        runs::query(store, Which::Running).await,
        runs::query(store, Which::Recent(50)).await,
    ) {
        (Ok(h), Ok(running), Ok(recent)) => (h, running, recent),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return unavailable(e),
    };
    let dispatcher = state
        .loops
        .report()
        .get(crate::dispatch::dispatcher::DISPATCHER)
        .and_then(|r| crate::dispatch::dispatcher::DispatchStatus::of(r.detail.as_ref()));
    page(
        StatusCode::OK,
        pages::layout(
            &frame(&key, &session, "Runs", Nav::Runs, Some(head)),
            pages::runs(&pages::RunsView {
                running,
                recent,
                dispatcher,
                csrf: session.csrf(&key),
                now: Utc::now(),
            }),
        ),
    )
}

/// `POST /runs/limits/{profile}/lift`: a person lifts a profile's pause by its provider's limit from the runs
/// page — the same `limits.lifted` event as the API's and the CLI's.
async fn lift_limit(
    State(state): State<AppState>,
    Path(profile): Path<String>,
    headers: HeaderMap,
    body: bytes::Bytes,
) -> Response {
    let Some(form) = parse_form(&body, FORM_LIMIT) else {
        return too_large();
    };
    if let Access::Denied(response) = require_post(&state, &headers, &form).await {
        return response;
    }
    if state.settings.file.profiles.get(&profile).is_none() {
        return page(
            StatusCode::NOT_FOUND,
            pages::message("Not lifted", "There is no agent profile of that name."),
        );
    }
    match crate::board::pause::lift_limit(&state.log, &profile, "dashboard").await {
        Ok(_) => axum::response::Redirect::to("/runs").into_response(),
        Err(e) => unavailable(format!("{e:#}")),
    }
}

async fn health_page(
    State(state): State<AppState>,
    SignedIn { key, session }: SignedIn,
) -> Response {
    let body = crate::http::health::snapshot(&state).await;
    let head = state.log.store().head().await.ok();
    page(
        StatusCode::OK,
        pages::layout(
            &frame(&key, &session, "Health", Nav::Health, head),
            pages::health(&body, Utc::now()),
        ),
    )
}

#[derive(Debug, Default, Deserialize)]
struct EventsQuery {
    before: Option<i64>,
    source: Option<String>,
    #[serde(rename = "type")]
    event_type: Option<String>,
}

async fn events_page(
    State(state): State<AppState>,
    SignedIn { key, session }: SignedIn,
    Query(query): Query<EventsQuery>,
) -> Response {
    let nonempty = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
    let filter = EventsFilter {
        source: nonempty(query.source),
        event_type: nonempty(query.event_type),
    };
    let store = state.log.store();
    let head = match store.head().await {
        Ok(head) => head,
        Err(e) => return unavailable(e),
    };
    // Newest first, a page at a time backwards from `before`; a filter reads at most 20 pages per view.
    let mut before = query.before.unwrap_or(head + 1).clamp(1, head + 1);
    let mut shown = Vec::new();
    for _ in 0..20 {
        if before <= 1 || shown.len() >= EVENTS_PER_PAGE {
            break;
        }
        let from = (before - 1 - 200).max(0);
        let page_events = match store.read_after(from, before - 1 - from).await {
            Ok(events) => events,
            Err(e) => return unavailable(e),
        };
        let mut filled = false;
        for event in page_events.into_iter().rev() {
            before = event.position;
            let source_ok = filter.source.as_deref().is_none_or(|s| s == event.source);
            let type_ok = filter
                .event_type
                .as_deref()
                .is_none_or(|t| event.event_type.starts_with(t));
            if source_ok && type_ok {
                shown.push(event);
                if shown.len() >= EVENTS_PER_PAGE {
                    filled = true;
                    break;
                }
            }
        }
        // Read down to the log's start: nothing older, unless the page filled up before its end (then the
        // events under the last one shown are still to page back to).
        if from == 0 && !filled {
            before = 1;
        }
    }
    let older = (before > 1).then_some(before);
    page(
        StatusCode::OK,
        pages::layout(
            &frame(&key, &session, "Events", Nav::Events, None),
            pages::events(&shown, &filter, older, Utc::now()),
        ),
    )
}

async fn event_page(
    State(state): State<AppState>,
    SignedIn { key, session }: SignedIn,
    Path(position): Path<i64>,
) -> Response {
    let found = match state.log.store().read_after(position - 1, 1).await {
        Ok(events) => events.into_iter().find(|e| e.position == position),
        Err(e) => return unavailable(e),
    };
    let frame = frame(
        &key,
        &session,
        &format!("Event {position}"),
        Nav::Events,
        None,
    );
    match found {
        Some(event) => page(StatusCode::OK, pages::layout(&frame, pages::event(&event))),
        None => page(
            StatusCode::NOT_FOUND,
            pages::layout(
                &frame,
                pages::message("No such event", &format!("Nothing at position {position}.")),
            ),
        ),
    }
}

#[derive(Debug, Default, Deserialize)]
struct LiveQuery {
    after: Option<i64>,
}

/// The log as SSE for the signed-in pages: from `Last-Event-ID` after a reconnect, else from `after` (the position
/// the page was rendered at), else from now.
async fn live(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<LiveQuery>,
) -> Response {
    match session(&state, &headers).await {
        Ok(Some(_)) => {}
        Ok(None) => return StatusCode::UNAUTHORIZED.into_response(),
        Err(_) => return StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<i64>().ok());
    let after = match resume.or(query.after.filter(|a| *a >= 0)) {
        Some(after) => after,
        None => match state.log.store().head().await {
            Ok(head) => head,
            Err(_) => return StatusCode::SERVICE_UNAVAILABLE.into_response(),
        },
    };
    let events = crate::http::stream::live(state.clone(), after, None, false)
        .take_until(state.shutdown.clone().cancelled_owned());
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}
