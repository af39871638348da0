//! `/api/dispatch` and `/api/runs`: pause and resume dispatch for every replica, and the runs read model.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::{error, AppState};
use crate::board::pause::{pause_state, set_paused};
use crate::projectors::runs::{self, Which};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PauseBody {
    reason: Option<String>,
}

/// `GET /api/dispatch`: whether new runs start, and why not.
pub async fn status(State(state): State<AppState>) -> Response {
    match pause_state(state.log.store()).await {
        Ok(paused) => {
            let by_env = state.settings.paused;
            Json(json!({
                "paused": by_env || paused.is_some(),
                "reason": if by_env { Some("PIDEVOPS_PAUSED=1".to_owned()) } else { paused },
            }))
            .into_response()
        }
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            format!("{e:#}"),
        ),
    }
}

/// `POST /api/dispatch/pause` with an optional `{"reason": "…"}`: no new runs start on any replica; running
/// ones finish.
pub async fn pause(State(state): State<AppState>, body: bytes::Bytes) -> Response {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        PauseBody::default()
    } else {
        match serde_json::from_slice::<PauseBody>(&body) {
            Ok(body) => body,
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "bad_body",
                    format!("expected {{\"reason\": \"…\"}}: {e}"),
                )
            }
        }
    };
    if let Some(reason) = &body.reason {
        if reason.trim().is_empty() || reason.len() > 500 {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_reason",
                "reason must be 1 to 500 characters",
            );
        }
    }
    change(&state, true, body.reason.as_deref()).await
}

/// `POST /api/dispatch/resume`.
pub async fn resume(State(state): State<AppState>) -> Response {
    change(&state, false, None).await
}

async fn change(state: &AppState, paused: bool, reason: Option<&str>) -> Response {
    match set_paused(&state.log, paused, "api", reason).await {
        Ok(changed) => Json(json!({ "paused": paused, "changed": changed })).into_response(),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            format!("{e:#}"),
        ),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    task: Option<String>,
    limit: Option<i64>,
}

/// `GET /api/runs?task=T-1` (a task's runs, oldest first) or `?limit=N` (the most recent, newest first).
pub async fn list(
    State(state): State<AppState>,
    query: Result<Query<RunsQuery>, QueryRejection>,
) -> Response {
    let Query(query) = match query {
        Ok(q) => q,
        Err(rejection) => {
            return error(StatusCode::BAD_REQUEST, "bad_query", rejection.body_text())
        }
    };
    let task = match query
        .task
        .as_deref()
        .map(str::parse::<crate::tasks::TaskId>)
    {
        None => None,
        Some(Ok(id)) => Some(id.to_string()),
        Some(Err(e)) => return error(StatusCode::BAD_REQUEST, "bad_task", e.to_string()),
    };
    let limit = query.limit.unwrap_or(50);
    if !(1..=1000).contains(&limit) {
        return error(
            StatusCode::BAD_REQUEST,
            "bad_limit",
            "limit must be from 1 to 1000",
        );
    }
    let which = match &task {
        Some(id) => Which::Task(id),
        None => Which::Recent(limit),
    };
    match runs::query(state.log.store(), which).await {
        Ok(rows) => Json(json!({ "runs": rows })).into_response(),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            e.to_string(),
        ),
    }
}
