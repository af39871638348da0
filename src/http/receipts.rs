//! `GET /api/tasks/{id}/receipt`: a task's receipt (`projectors::tasks::receipt`), issued from the log as it is
//! now, for `pidevops verify --receipt` to check anywhere.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::tasks::TaskIdPath;
use super::{error, ApiError, AppState};
use crate::projectors::tasks::receipt::{issue, Receipt, ReceiptError};
use crate::tasks::TaskId;

/// A task's receipt: its events, the deliveries that caused them and its runs' events, each line with its event's
/// position, content hash and chain hash, and the log's head when issued.
#[utoipa::path(
    get,
    path = "/api/tasks/{id}/receipt",
    operation_id = "task_receipt",
    tag = "tasks",
    params(("id" = TaskId, Path)),
    responses(
        (status = 200, description = "The receipt", body = Receipt),
        (status = 400, description = "`bad_id`: not a task id", body = ApiError),
        (status = 404, description = "`not_found`: no such task", body = ApiError),
        (status = 409, description = "`unchained`: the log's newest event is from before the hash chain", body = ApiError),
        (status = 503, description = "`unavailable`: the store cannot be read", body = ApiError),
    )
)]
pub async fn receipt(State(state): State<AppState>, TaskIdPath(id): TaskIdPath) -> Response {
    match issue(state.log.store(), id).await {
        Ok(receipt) => Json(receipt).into_response(),
        Err(e @ ReceiptError::NoTask(_)) => {
            error(StatusCode::NOT_FOUND, "not_found", e.to_string())
        }
        Err(e @ ReceiptError::Unchained) => error(StatusCode::CONFLICT, "unchained", e.to_string()),
        Err(e) => {
            tracing::warn!(error = %e, task = %id, "issuing a receipt failed");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                e.to_string(),
            )
        }
    }
}
