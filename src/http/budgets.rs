//! `/api/budgets`: what each budget has spent today and may spend, and a person's raise (an event, like every
//! other decision).

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::Utc;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{error, ApiError, AppState};
use crate::budgets::{self, RaiseRequest, Standing};
use crate::tasks::{RepoName, TaskId};

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct BudgetsQuery {
    /// The task whose budgets to show (its own, its repository's today, everyone's today).
    #[param(example = "T-1")]
    task: String,
}

/// `GET /api/budgets`.
#[derive(Debug, Serialize, ToSchema)]
pub struct BudgetsReport {
    /// Only the budgets `[budgets]` limits.
    pub standings: Vec<Standing>,
}

/// `GET /api/budgets?task=T-1`: each budget the task falls under, what it has spent and its limit in force.
#[utoipa::path(
    get,
    path = "/api/budgets",
    operation_id = "budgets",
    tag = "dispatch",
    params(BudgetsQuery),
    responses(
        (status = 200, description = "The task's budgets", body = BudgetsReport),
        (status = 400, description = "`bad_query`, `bad_task`", body = ApiError),
        (status = 404, description = "`not_found`: no such task", body = ApiError),
        (status = 503, description = "`store_unavailable`", body = ApiError),
    )
)]
pub async fn show(
    State(state): State<AppState>,
    query: Result<Query<BudgetsQuery>, QueryRejection>,
) -> Response {
    let Query(query) = match query {
        Ok(q) => q,
        Err(rejection) => {
            return error(StatusCode::BAD_REQUEST, "bad_query", rejection.body_text())
        }
    };
    let task: TaskId = match query.task.parse() {
        Ok(task) => task,
        Err(e) => return error(StatusCode::BAD_REQUEST, "bad_task", format!("{e}")),
    };
    let store = state.log.store();
    let row = match crate::projectors::tasks::get(store, task).await {
        Ok(Some(row)) => row,
        Ok(None) => {
            return error(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no task {task}"),
            )
        }
        Err(e) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                format!("{e:#}"),
            )
        }
    };
    let config = &state.settings.file.dispatch.budgets;
    match budgets::standings(store, config, task, &row.repo, Utc::now().date_naive()).await {
        Ok(standings) => Json(BudgetsReport { standings }).into_response(),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            format!("{e:#}"),
        ),
    }
}

/// `POST /api/budgets/raise`.
#[derive(Debug, Serialize, ToSchema)]
pub struct RaiseOutcome {
    /// `false`: a retry of a raise already on record (same `request_id`); nothing added.
    pub raised: bool,
    pub raise: budgets::Raised,
}

/// `POST /api/budgets/raise` with `{"scope": "task" | "repo" | "day", "task"?, "repo"?, "usd"?, "tokens"?,
/// "request_id"?}`: adds to that budget's limit (a day's budgets: today's). Tasks held back by it start again;
/// a task flagged for its own budget is retried by a person, as any flagged task.
#[utoipa::path(
    post,
    path = "/api/budgets/raise",
    operation_id = "raise_budget",
    tag = "dispatch",
    request_body = RaiseRequest,
    responses(
        (status = 200, description = "Raised (an event `budget.raised`)", body = RaiseOutcome),
        (status = 400, description = "`bad_json`, `bad_raise`: what is wrong; nothing raised", body = ApiError),
        (status = 503, description = "`store_unavailable`", body = ApiError),
    )
)]
pub async fn raise(
    State(state): State<AppState>,
    body: Result<Json<RaiseRequest>, JsonRejection>,
) -> Response {
    let Json(request) = match body {
        Ok(body) => body,
        Err(rejection) => return error(StatusCode::BAD_REQUEST, "bad_json", rejection.body_text()),
    };
    let config = &state.settings.file.dispatch.budgets;
    let raise = match budgets::raise_of_request(&request, config, Utc::now().date_naive(), "api") {
        Ok(raise) => raise,
        Err(why) => return error(StatusCode::BAD_REQUEST, "bad_raise", why),
    };
    if let budgets::Scope::Repo { repo, .. } = &raise.scope {
        // A repository the allow-list refuses has no budget to raise.
        if let Ok(name) = repo.parse::<RepoName>() {
            if let Err(refused) = state.board.config().allowed.check(&name) {
                return error(StatusCode::BAD_REQUEST, "bad_raise", refused.to_string());
            }
        }
    }
    match budgets::raise(&state.log, &raise, request.request_id.as_deref()).await {
        Ok(raised) => Json(RaiseOutcome { raised, raise }).into_response(),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            format!("{e:#}"),
        ),
    }
}
