//! `/api/tasks`: create a task, show one with its timeline, and the commands a person steers the board with.
//! Every refusal is precise: 400 bad input, 403 a repository the configuration does not allow, 404 unknown task,
//! 409 a transition the task's state does not allow.

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::{error, AppState};
use crate::board::{BoardError, Draft, Loaded, Outcome, Steer};
use crate::tasks::{AgentName, Command, TaskError, TaskId};

/// Longest `Idempotency-Key` accepted.
const MAX_IDEMPOTENCY_KEY: usize = 200;

pub async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    draft: Result<Json<Draft>, JsonRejection>,
) -> Response {
    let Json(draft) = match draft {
        Ok(d) => d,
        Err(rejection) => return error(StatusCode::BAD_REQUEST, "bad_task", rejection.body_text()),
    };
    if let Err(refused) = state.board.config().allowed.check(&draft.repo) {
        return error(
            StatusCode::FORBIDDEN,
            "repo_not_allowed",
            refused.to_string(),
        );
    }
    // A client that retries sends the same key and gets the same task; without one every request is new.
    let key = match headers.get("idempotency-key").map(|v| v.to_str()) {
        None => uuid::Uuid::new_v4().to_string(),
        Some(Ok(key))
            if !key.is_empty()
                && key.len() <= MAX_IDEMPOTENCY_KEY
                && key.chars().all(|c| c.is_ascii_graphic()) =>
        {
            key.to_owned()
        }
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_idempotency_key",
                format!(
                    "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters"
                ),
            )
        }
    };
    match state
        .board
        .create(draft, &format!("api:{key}"), "api", None)
        .await
    {
        Ok((outcome, created)) => (
            if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            },
            Json(json!({ "task": outcome.task, "created": created })),
        )
            .into_response(),
        Err(e) => board_error(e),
    }
}

pub async fn show(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Response {
    let id = match task_id(id) {
        Ok(id) => id,
        Err(why) => return error(StatusCode::BAD_REQUEST, "bad_id", why),
    };
    match state.board.load(id).await {
        Ok(Some(loaded)) => Json(task_json(&loaded)).into_response(),
        Ok(None) => error(StatusCode::NOT_FOUND, "not_found", format!("no task {id}")),
        Err(e) => board_error(e),
    }
}

/// The body of a command: a reason where one is needed.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandBody {
    reason: Option<String>,
}

pub async fn command(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    body: Option<Json<CommandBody>>,
) -> Response {
    let Ok(Path((id, action))) = path else {
        return error(
            StatusCode::BAD_REQUEST,
            "bad_path",
            "expected /api/tasks/{id}/{action}",
        );
    };
    let id = match id.parse::<TaskId>() {
        Ok(id) => id,
        Err(e) => return error(StatusCode::BAD_REQUEST, "bad_id", e.to_string()),
    };
    let body = body.map(|Json(b)| b).unwrap_or_default();
    let steer = match action.parse::<Steer>() {
        Ok(steer) => steer,
        Err(message) => return error(StatusCode::NOT_FOUND, "not_found", message),
    };
    let steered = state
        .board
        .steer(id, steer, body.reason, "through the API", "api")
        .await;
    outcome_response(steered)
}

/// `200 {"task", "changed", "appended"}` (`changed: false`: the task already was so), or the refusal.
fn outcome_response(outcome: Result<Outcome, BoardError>) -> Response {
    match outcome {
        Ok(outcome) => Json(json!({
            "task": outcome.task,
            "changed": !outcome.appended.is_empty(),
            "appended": outcome.appended,
        }))
        .into_response(),
        Err(e) => board_error(e),
    }
}

/// `POST /api/tasks/{id}/agent` with `{"agent": "codex"}`, or `{"agent": null}` for the repository's profile:
/// the agent of the task's next attempt.
pub async fn choose_agent(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
    body: Result<Json<serde_json::Value>, JsonRejection>,
) -> Response {
    let id = match task_id(id) {
        Ok(id) => id,
        Err(why) => return error(StatusCode::BAD_REQUEST, "bad_id", why),
    };
    let usage =
        "expected {\"agent\": \"<profile>\"} or {\"agent\": null} for the repository's profile";
    let body = match body {
        Ok(Json(body)) => body,
        Err(rejection) => {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_agent",
                format!("{}; {usage}", rejection.body_text()),
            )
        }
    };
    let agent = match body
        .as_object()
        .filter(|o| o.len() == 1)
        .and_then(|o| o.get("agent"))
    {
        Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(name)) => match name.parse::<AgentName>() {
            Ok(name) => Some(name),
            Err(e) => return error(StatusCode::BAD_REQUEST, "bad_agent", e.to_string()),
        },
        _ => return error(StatusCode::BAD_REQUEST, "bad_agent", usage),
    };
    let chosen = state
        .board
        .execute(id, &Command::ChooseAgent { agent }, "api")
        .await;
    outcome_response(chosen)
}

/// The task id in the path, or what is wrong with it (a `400 bad_id`).
fn task_id(id: Result<Path<String>, PathRejection>) -> Result<TaskId, String> {
    let Ok(Path(id)) = id else {
        return Err("missing task id".to_owned());
    };
    id.parse::<TaskId>().map_err(|e| e.to_string())
}

fn task_json(loaded: &Loaded) -> serde_json::Value {
    let timeline: Vec<_> = loaded
        .events
        .iter()
        .map(|e| {
            json!({
                "position": e.position,
                "stream_version": e.stream_version,
                "type": e.event_type,
                "at": e.occurred_at,
                "recorded_at": e.recorded_at,
                "actor": e.meta.get("actor"),
                "cause_event_id": e.meta.get("cause_event_id"),
                // `load` has decoded every event already; a summary is what a person reads.
                "summary": crate::projectors::tasks::timeline_entry(e).ok().map(|t| t.summary),
                "event_id": e.id,
            })
        })
        .collect();
    json!({ "task": loaded.task, "version": loaded.version, "timeline": timeline })
}

fn board_error(e: BoardError) -> Response {
    match &e {
        BoardError::Refused(TaskError::NotFound { .. }) => {
            error(StatusCode::NOT_FOUND, "not_found", e.to_string())
        }
        BoardError::Refused(_) => error(StatusCode::CONFLICT, "refused", e.to_string()),
        BoardError::Invalid(_) => error(StatusCode::BAD_REQUEST, "bad_reason", e.to_string()),
        BoardError::Contended { .. } => error(StatusCode::CONFLICT, "contended", e.to_string()),
        BoardError::Store(_) | BoardError::Append(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            e.to_string(),
        ),
        BoardError::Corrupt { .. } => {
            tracing::error!(error = %e, "a task stream cannot be read back");
            error(StatusCode::INTERNAL_SERVER_ERROR, "corrupt", e.to_string())
        }
    }
}

/// The board from the `tasks` read model: `?column=todo&repo=acme/api&source=linear&needs_human=true&limit=50`.
/// Ordered by priority, then age. Also counts per column (over the same filter, without `column`).
pub async fn list(
    State(state): State<AppState>,
    query: Result<
        axum::extract::Query<crate::projectors::tasks::TaskFilter>,
        axum::extract::rejection::QueryRejection,
    >,
) -> Response {
    use crate::projectors::tasks;
    let axum::extract::Query(filter) = match query {
        Ok(q) => q,
        Err(rejection) => {
            return error(StatusCode::BAD_REQUEST, "bad_query", rejection.body_text())
        }
    };
    if filter.limit.is_some_and(|l| !(1..=1000).contains(&l)) {
        return error(
            StatusCode::BAD_REQUEST,
            "bad_query",
            "limit must be between 1 and 1000",
        );
    }
    let store = state.log.store();
    let rows = match tasks::list(store, &filter).await {
        Ok(rows) => rows,
        Err(e) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                e.to_string(),
            )
        }
    };
    let projected = crate::projectors::read_row(store, "tasks")
        .await
        .ok()
        .flatten();
    let head = store.head().await.unwrap_or_default();
    let position = projected.map_or(0, |(_, p)| p);
    Json(json!({
        "tasks": rows,
        // How current the board is: a read model lags the log by a tick.
        "projector": { "position": position, "head": head, "behind": (head - position).max(0) },
    }))
    .into_response()
}
