//! `/api/dispatch` and `/api/runs`: pause and resume dispatch for every replica, and the runs read model.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{error, ApiError, AppState};
use crate::board::pause::{pause_state, set_paused};
use crate::projectors::runs::{self, RunRow, Which};

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PauseBody {
    /// Why, for the people who see dispatch paused.
    #[schema(min_length = 1, max_length = 500)]
    reason: Option<String>,
}

/// `GET /api/dispatch`.
#[derive(Debug, Serialize, ToSchema)]
pub struct DispatchStatus {
    /// `true`: no new runs start on any replica.
    pub paused: bool,
    /// Why, when paused: the reason given, or `PIDEVOPS_PAUSED=1`.
    pub reason: Option<String>,
}

/// `POST /api/dispatch/pause` and `/resume`.
#[derive(Debug, Serialize, ToSchema)]
pub struct DispatchChange {
    pub paused: bool,
    /// `false`: dispatch already was so; nothing was appended.
    pub changed: bool,
}

/// `GET /api/dispatch`: whether new runs start, and why not.
#[utoipa::path(
    get,
    path = "/api/dispatch",
    operation_id = "dispatch_status",
    tag = "dispatch",
    responses(
        (status = 200, description = "Whether dispatch is paused", body = DispatchStatus),
        (status = 503, description = "`store_unavailable`", body = ApiError),
    )
)]
pub async fn status(State(state): State<AppState>) -> Response {
    match pause_state(state.log.store()).await {
        Ok(paused) => {
            let by_env = state.settings.paused;
            Json(DispatchStatus {
                paused: by_env || paused.is_some(),
                reason: if by_env {
                    Some("PIDEVOPS_PAUSED=1".to_owned())
                } else {
                    paused
                },
            })
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
#[utoipa::path(
    post,
    path = "/api/dispatch/pause",
    operation_id = "pause_dispatch",
    tag = "dispatch",
    request_body(content = Option<PauseBody>, description = "Optional (an empty body is no reason)"),
    responses(
        (status = 200, description = "Paused, or already so (`changed: false`)", body = DispatchChange),
        (status = 400, description = "`bad_body`, `bad_reason`", body = ApiError),
        // Read by axum's `Bytes` extractor, whose refusal is plain text.
        (status = 413, description = "As plain text: a body over 2 MiB", content_type = "text/plain", body = String),
        (status = 503, description = "`store_unavailable`", body = ApiError),
    )
)]
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
#[utoipa::path(
    post,
    path = "/api/dispatch/resume",
    operation_id = "resume_dispatch",
    tag = "dispatch",
    responses(
        (status = 200, description = "Resumed, or already so (`changed: false`)", body = DispatchChange),
        (status = 503, description = "`store_unavailable`", body = ApiError),
    )
)]
pub async fn resume(State(state): State<AppState>) -> Response {
    change(&state, false, None).await
}

/// `POST /api/dispatch/limits/{profile}/lift`: a person lifts a profile's pause by its provider's limit.
#[utoipa::path(
    post,
    path = "/api/dispatch/limits/{profile}/lift",
    operation_id = "lift_limit",
    tag = "dispatch",
    params(("profile" = String, Path, description = "An agent profile's name (`[agents.<name>]`)")),
    responses(
        (status = 200, description = "Lifted: the reports of a limit before it count no more (`limits.lifted` in the stream `limits`)", body = crate::domain::limits::Lifted),
        (status = 404, description = "`unknown_profile`", body = ApiError),
        (status = 503, description = "`store_unavailable`", body = ApiError),
    )
)]
pub async fn lift_limit(
    State(state): State<AppState>,
    profile: Result<axum::extract::Path<String>, axum::extract::rejection::PathRejection>,
) -> Response {
    let Ok(axum::extract::Path(profile)) = profile else {
        return error(StatusCode::BAD_REQUEST, "bad_profile", "missing profile");
    };
    if state.settings.file.profiles.get(&profile).is_none() {
        return error(
            StatusCode::NOT_FOUND,
            "unknown_profile",
            "no agent profile of that name",
        );
    }
    match crate::board::pause::lift_limit(&state.log, &profile, "api").await {
        Ok(lifted) => Json(lifted).into_response(),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            format!("{e:#}"),
        ),
    }
}

async fn change(state: &AppState, paused: bool, reason: Option<&str>) -> Response {
    match set_paused(&state.log, paused, "api", reason).await {
        Ok(changed) => Json(DispatchChange { paused, changed }).into_response(),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            format!("{e:#}"),
        ),
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RunsQuery {
    /// A task's runs, oldest first (`limit` then does not apply).
    #[param(example = "T-1")]
    task: Option<String>,
    /// The most recent runs, newest first (default 50).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// `GET /api/runs`.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunList {
    pub runs: Vec<RunRow>,
}

/// `GET /api/runs?task=T-1` (a task's runs, oldest first) or `?limit=N` (the most recent, newest first).
#[utoipa::path(
    get,
    path = "/api/runs",
    operation_id = "list_runs",
    tag = "dispatch",
    params(RunsQuery),
    responses(
        (status = 200, description = "Runs from the `runs` read model", body = RunList),
        (status = 400, description = "`bad_query`, `bad_task`, `bad_limit`", body = ApiError),
        (status = 503, description = "`store_unavailable`", body = ApiError),
    )
)]
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
        Ok(rows) => Json(RunList { runs: rows }).into_response(),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            e.to_string(),
        ),
    }
}
