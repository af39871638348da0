//! `/api/plans`: state a goal for a planner, and read a plan with its items. A plan is a task (its stream, its
//! timeline, its commands): it is approved or rejected (with a comment, which the planner gets) through
//! `/api/tasks/{id}/approve` and `/reject`.

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::tasks::{board_error, created, idempotency_key, TaskCreation, TaskIdPath};
use super::{error, ApiError, AppState};
use crate::board::Draft;
use crate::projectors::tasks::TaskRow;
use crate::tasks::{ApprovalPolicy, MaxAttempts, Priority, RepoName, Spec, Task};

/// What a plan is asked for: a goal in a repository.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanDraft {
    pub repo: RepoName,
    /// What the plan as a whole achieves; the planner decomposes it.
    #[schema(min_length = 1, max_length = 65536)]
    pub goal: String,
    /// Limits on what the plan's tasks may touch, for the planner.
    #[serde(default)]
    pub scope: String,
    /// How to tell the whole plan is done.
    #[serde(default)]
    pub done_when: String,
    #[serde(default)]
    pub priority: Option<Priority>,
    /// Whether the proposed plan waits for a person (`manual`) or is approved as proposed (`auto`); default: the
    /// repository's approval policy.
    #[serde(default)]
    pub approval: Option<ApprovalPolicy>,
    /// The planner's attempts before the plan needs a human.
    #[serde(default)]
    pub max_attempts: Option<MaxAttempts>,
}

/// Ask for a plan. The planner (`[dispatch] planner`) runs, its plan waits for approval as a whole, and each item
/// then becomes a task. The same `Idempotency-Key` again returns the same plan (`200`, `created: false`).
#[utoipa::path(
    post,
    path = "/api/plans",
    operation_id = "create_plan",
    tag = "plans",
    params(("Idempotency-Key" = Option<String>, Header,
        description = "1 to 200 visible ASCII characters; a retry with the same key gets the same plan")),
    request_body = PlanDraft,
    responses(
        (status = 201, description = "Created", body = TaskCreation),
        (status = 200, description = "Made before by this `Idempotency-Key`", body = TaskCreation),
        (status = 400, description = "`bad_plan`: not a valid plan request; `bad_idempotency_key`", body = ApiError),
        (status = 403, description = "`repo_not_allowed`: the configuration does not allow this repository",
            body = ApiError),
        (status = 409, description = "`no_planner`: no planner profile is configured; `refused`, `contended`",
            body = ApiError),
        (status = 503, description = "`unavailable`: the store cannot be read or written", body = ApiError),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    draft: Result<Json<PlanDraft>, JsonRejection>,
) -> Response {
    let Json(draft) = match draft {
        Ok(d) => d,
        Err(rejection) => return error(StatusCode::BAD_REQUEST, "bad_plan", rejection.body_text()),
    };
    if state.settings.file.profiles.planner().is_none() {
        return error(
            StatusCode::CONFLICT,
            "no_planner",
            "no planner profile is configured: set [dispatch] planner in pidevops.toml",
        );
    }
    if let Err(refused) = state.board.config().allowed.check(&draft.repo) {
        return error(
            StatusCode::FORBIDDEN,
            "repo_not_allowed",
            refused.to_string(),
        );
    }
    let spec = match Spec::new(draft.goal, draft.scope, draft.done_when) {
        Ok(spec) => spec,
        Err(e) => return error(StatusCode::BAD_REQUEST, "bad_plan", e.to_string()),
    };
    let key = match idempotency_key(&headers) {
        Ok(key) => key,
        Err(refused) => return *refused,
    };
    let draft = Draft {
        priority: draft.priority,
        approval: draft.approval,
        max_attempts: draft.max_attempts,
        ..Draft::plan(draft.repo, spec, Default::default())
    };
    created(
        state
            .board
            .create(draft, &format!("api:{key}"), "api", None)
            .await,
    )
}

/// `GET /api/plans/{id}`: the plan and its items as the board shows them.
#[derive(Debug, Serialize, ToSchema)]
pub struct PlanDetail {
    pub plan: Task,
    /// The items as tasks, in the plan's order (dependencies first); empty until the plan is approved.
    pub items: Vec<TaskRow>,
}

/// A plan with its items.
#[utoipa::path(
    get,
    path = "/api/plans/{id}",
    operation_id = "show_plan",
    tag = "plans",
    params(("id" = crate::tasks::TaskId, Path)),
    responses(
        (status = 200, description = "The plan", body = PlanDetail),
        (status = 400, description = "`bad_id`: not a task id", body = ApiError),
        (status = 404, description = "`not_found`: no such task, or it is not a plan", body = ApiError),
        (status = 503, description = "`unavailable`: the store cannot be read", body = ApiError),
    )
)]
pub async fn show(State(state): State<AppState>, TaskIdPath(id): TaskIdPath) -> Response {
    let loaded = match state.board.load(id).await {
        Ok(Some(loaded)) => loaded,
        Ok(None) => return error(StatusCode::NOT_FOUND, "not_found", format!("no task {id}")),
        Err(e) => return board_error(e),
    };
    let Some(plan) = loaded.task.plan() else {
        return error(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{id} is a task, not a plan"),
        );
    };
    let mut items = Vec::with_capacity(plan.children.len());
    for child in &plan.children {
        match crate::projectors::tasks::get(state.log.store(), *child).await {
            Ok(Some(row)) => items.push(row),
            // Made, but not on the board yet: the read model is a tick behind the log.
            Ok(None) => {}
            Err(e) => {
                return error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    e.to_string(),
                )
            }
        }
    }
    Json(PlanDetail {
        plan: loaded.task,
        items,
    })
    .into_response()
}
