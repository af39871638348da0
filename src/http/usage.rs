//! `/api/usage`: what agents spent, from the `usage` read model (per UTC day, repository and profile; per task).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::Utc;
use serde::Deserialize;
use utoipa::IntoParams;

use super::{error, ApiError, AppState};
use crate::projectors::usage::{self, filter, UsageReport};

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct UsageQuery {
    /// Days back from today (UTC), today included (default 30).
    #[param(minimum = 1, maximum = 366)]
    days: Option<i64>,
    /// One repository's usage.
    #[param(example = "acme/api")]
    repo: Option<String>,
    /// How many of the tasks that spent most (default 10, at most 100).
    #[param(minimum = 0, maximum = 100)]
    tasks: Option<i64>,
}

/// `GET /api/usage?days=30&repo=o/n&tasks=10`: tokens and cost per day, repository and profile, their total, and
/// the tasks that spent most.
#[utoipa::path(
    get,
    path = "/api/usage",
    operation_id = "usage",
    tag = "dispatch",
    params(UsageQuery),
    responses(
        (status = 200, description = "Usage from the `usage` read model", body = UsageReport),
        (status = 400, description = "`bad_query`, `bad_days`, `bad_repo`, `bad_tasks`", body = ApiError),
        (status = 503, description = "`store_unavailable`", body = ApiError),
    )
)]
pub async fn report(
    State(state): State<AppState>,
    query: Result<Query<UsageQuery>, QueryRejection>,
) -> Response {
    let Query(query) = match query {
        Ok(q) => q,
        Err(rejection) => {
            return error(StatusCode::BAD_REQUEST, "bad_query", rejection.body_text())
        }
    };
    let filter = match filter(query.days, query.repo.as_deref(), Utc::now().date_naive()) {
        Ok(filter) => filter,
        Err((code, message)) => return error(StatusCode::BAD_REQUEST, code, message),
    };
    let top = query.tasks.unwrap_or(10);
    if !(0..=100).contains(&top) {
        return error(
            StatusCode::BAD_REQUEST,
            "bad_tasks",
            "tasks must be from 0 to 100",
        );
    }
    let store = state.log.store();
    let read = async {
        let days = usage::days(store, &filter).await?;
        let tasks = usage::top_tasks(store, filter.repo.as_deref(), top).await?;
        Ok::<_, crate::eventlog::StoreError>((days, tasks))
    };
    match read.await {
        Ok((days, tasks)) => Json(UsageReport {
            since: filter.since.unwrap_or_default(),
            total: usage::total(days.iter().map(|d| &d.spent)),
            days,
            tasks,
        })
        .into_response(),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            format!("{e:#}"),
        ),
    }
}
