//! `POST /api/tasks/{id}/land`: pidevops lands a task in review on a repository not on GitHub (see
//! `crate::landing`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::tasks::{board_error, TaskIdPath};
use super::{error, ApiError, AppState};
use crate::eventlog::Appended;
use crate::landing::LandError;
use crate::tasks::{CommitSha, Task, TaskId};

/// What landing a task did.
#[derive(Debug, Serialize, ToSchema)]
pub struct LandedTask {
    pub task: Task,
    /// `false`: it was landed (or done) already; nothing was appended.
    pub changed: bool,
    pub appended: Vec<Appended>,
    /// The base's commit that holds the task's commit; absent when the task was done already.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub onto: Option<CommitSha>,
    /// Whether this request pushed the base (else the base held the commit already).
    pub pushed: bool,
}

/// Land a task in review: its recorded commit merged into its repository's base (fast-forward, else a merge
/// commit) and pushed with a lease, then the task is done. Only for repositories not on GitHub; a retry is a no-op.
#[utoipa::path(
    post,
    path = "/api/tasks/{id}/land",
    operation_id = "land_task",
    tag = "tasks",
    params(("id" = TaskId, Path)),
    responses(
        (status = 200, description = "Landed, or landed already (`changed: false`)", body = LandedTask),
        (status = 400, description = "`bad_id`: not a task id", body = ApiError),
        (status = 404, description = "`not_found`: no such task", body = ApiError),
        (status = 409, description = "`on_github`: its pull request lands it; `on_gitlab`: its merge request lands \
            it; `conflict`: it does not merge with \
            the base (nothing pushed, still in review); `refused`: not in review, a plan, no recorded commit, or \
            its commit is gone; `contended`", body = ApiError),
        (status = 500, description = "`corrupt`: the task's stream cannot be read back", body = ApiError),
        (status = 502, description = "`git`: fetching or pushing failed (the base moved twice, the remote \
            refused); nothing was recorded", body = ApiError),
        (status = 503, description = "`unavailable`: the store cannot be read or written", body = ApiError),
        (status = 504, description = "`timeout`: fetching, merging and pushing took over 45 s and were stopped; \
            nothing was recorded (a push that got through is found and recorded by the next request)", body = ApiError),
    )
)]
pub async fn land(State(state): State<AppState>, TaskIdPath(id): TaskIdPath) -> Response {
    match state.lander.land(id, "api").await {
        Ok(landed) => {
            let (onto, pushed) = match landed.onto {
                Some((onto, pushed)) => (Some(onto), pushed),
                None => (None, false),
            };
            Json(LandedTask {
                changed: !landed.outcome.appended.is_empty(),
                task: landed.outcome.task,
                appended: landed.outcome.appended,
                onto,
                pushed,
            })
            .into_response()
        }
        Err(e) => {
            let message = e.to_string();
            let (status, code) = match e {
                LandError::Board(board) => return board_error(board),
                LandError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
                LandError::OnGithub { .. } => (StatusCode::CONFLICT, "on_github"),
                LandError::OnGitlab { .. } => (StatusCode::CONFLICT, "on_gitlab"),
                LandError::Conflict { .. } => (StatusCode::CONFLICT, "conflict"),
                LandError::Plan(_)
                | LandError::NotInReview { .. }
                | LandError::NoCommit(_)
                | LandError::Missing { .. } => (StatusCode::CONFLICT, "refused"),
                LandError::Git { .. } => (StatusCode::BAD_GATEWAY, "git"),
                LandError::Store { .. } => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
                LandError::TimedOut { .. } => (StatusCode::GATEWAY_TIMEOUT, "timeout"),
            };
            error(status, code, message)
        }
    }
}
