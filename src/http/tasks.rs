//! `/api/tasks`: create a task, show one with its timeline, and the commands a person steers the board with.
//! Every refusal is precise: 400 bad input, 403 a repository the configuration does not allow, 404 unknown task,
//! 409 a transition the task's state does not allow.

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::{error, ApiError, AppState};
use crate::board::{BoardError, Draft, Loaded, Outcome, SpecEdit, Steer};
use crate::eventlog::Appended;
use crate::projectors::tasks::{TaskFilter, TaskRow};
use crate::tasks::{
    landing, AgentName, Column, Command, LandConfig, LandMode, Readiness, Task, TaskError, TaskId,
};

/// Longest `Idempotency-Key` accepted.
const MAX_IDEMPOTENCY_KEY: usize = 200;

/// `POST /api/tasks`: the task, and whether this request made it.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskCreation {
    pub task: Task,
    /// `false`: this `Idempotency-Key` made the task before; nothing was appended.
    pub created: bool,
}

/// Create a task. The same `Idempotency-Key` again returns the same task (`200`, `created: false`).
#[utoipa::path(
    post,
    path = "/api/tasks",
    operation_id = "create_task",
    tag = "tasks",
    params(("Idempotency-Key" = Option<String>, Header,
        description = "1 to 200 visible ASCII characters; a retry with the same key gets the same task")),
    request_body = Draft,
    responses(
        (status = 201, description = "Created", body = TaskCreation),
        (status = 200, description = "Made before by this `Idempotency-Key`", body = TaskCreation),
        (status = 400, description = "`bad_task`: not a valid draft; `bad_idempotency_key`; `bad_reason`",
            body = ApiError),
        (status = 403, description = "`repo_not_allowed`: the configuration does not allow this repository",
            body = ApiError),
        (status = 409, description = "`refused` or `contended`", body = ApiError),
        (status = 500, description = "`corrupt`: a task stream cannot be read back", body = ApiError),
        (status = 503, description = "`unavailable`: the store cannot be read or written", body = ApiError),
    )
)]
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
    let key = match idempotency_key(&headers) {
        Ok(key) => key,
        Err(refused) => return *refused,
    };
    created(
        state
            .board
            .create(draft, &format!("api:{key}"), "api", None)
            .await,
    )
}

/// The request's `Idempotency-Key`, or a fresh one: a client that retries sends the same key and gets the same
/// task; without one every request is new. `Err`: the `400` for a malformed key.
pub(super) fn idempotency_key(headers: &HeaderMap) -> Result<String, Box<Response>> {
    match headers.get("idempotency-key").map(|v| v.to_str()) {
        None => Ok(uuid::Uuid::new_v4().to_string()),
        Some(Ok(key))
            if !key.is_empty()
                && key.len() <= MAX_IDEMPOTENCY_KEY
                && key.chars().all(|c| c.is_ascii_graphic()) =>
        {
            Ok(key.to_owned())
        }
        Some(_) => Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            "bad_idempotency_key",
            format!("Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters"),
        ))),
    }
}

/// `201` with the task made, `200` when the key made it before, or the refusal.
pub(super) fn created(result: Result<(Outcome, bool), BoardError>) -> Response {
    match result {
        Ok((outcome, created)) => (
            if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            },
            Json(TaskCreation {
                task: outcome.task,
                created,
            }),
        )
            .into_response(),
        Err(e) => board_error(e),
    }
}

/// `GET /api/tasks/{id}`: the task, its stream version and its timeline.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskDetail {
    pub task: Task,
    pub version: i64,
    pub timeline: Vec<TimelineItem>,
    /// While the task is in review: whether pidevops merges its pull request now, and if not why (its facts
    /// are `task.landing`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub landing: Option<LandingStatus>,
}

/// Auto-land's verdict on a task in review, from its landing facts and its repository's rules.
#[derive(Debug, Serialize, ToSchema)]
pub struct LandingStatus {
    /// The repository's `land`: `manual` (people merge) or `auto` (pidevops merges).
    pub land: LandMode,
    /// Whether the rules are met: with `land = "auto"`, pidevops merges (or has asked to merge) the pull request.
    pub ready: bool,
    /// What it waits for when not ready ("1 of 2 approvals; check lint has not passed").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
}

impl LandingStatus {
    /// The verdict for `task` under `rules`; `None` outside review, where landing has nothing to say.
    pub fn of(task: &Task, rules: &LandConfig) -> Option<Self> {
        if task.column() != Column::InReview {
            return None;
        }
        let (ready, waiting_for) = match landing::readiness(task, rules) {
            Readiness::Ready { .. } => (true, None),
            Readiness::Waiting(why) => (false, Some(why)),
        };
        Some(Self {
            land: rules.mode,
            ready,
            waiting_for,
        })
    }
}

/// One event of a task's stream, as a person reads it.
#[derive(Debug, Serialize, ToSchema)]
pub struct TimelineItem {
    pub position: i64,
    pub stream_version: Option<i64>,
    #[serde(rename = "type")]
    pub event_type: String,
    pub at: DateTime<Utc>,
    pub recorded_at: DateTime<Utc>,
    /// From the event's `meta`, as stored.
    pub actor: Option<serde_json::Value>,
    pub cause_event_id: Option<serde_json::Value>,
    pub summary: Option<String>,
    pub event_id: Uuid,
}

/// One task with its timeline, read from its stream (not the read model).
#[utoipa::path(
    get,
    path = "/api/tasks/{id}",
    operation_id = "show_task",
    tag = "tasks",
    params(("id" = TaskId, Path)),
    responses(
        (status = 200, description = "The task", body = TaskDetail),
        (status = 400, description = "`bad_id`: not a task id", body = ApiError),
        (status = 404, description = "`not_found`: no such task", body = ApiError),
        (status = 500, description = "`corrupt`: the task's stream cannot be read back", body = ApiError),
        (status = 503, description = "`unavailable`: the store cannot be read", body = ApiError),
    )
)]
pub async fn show(State(state): State<AppState>, TaskIdPath(id): TaskIdPath) -> Response {
    match state.board.load(id).await {
        Ok(Some(loaded)) => {
            let rules = state.board.config().land_for(loaded.task.repo());
            Json(task_detail(loaded, &rules)).into_response()
        }
        Ok(None) => error(StatusCode::NOT_FOUND, "not_found", format!("no task {id}")),
        Err(e) => board_error(e),
    }
}

/// The body of a command: a reason where one is needed.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandBody {
    /// Why (reject, cancel, retry); a default naming the API when absent.
    reason: Option<String>,
}

/// Steer a task: approve, reject, retry, cancel, archive, or done (a task in review marked done without landing).
#[utoipa::path(
    post,
    path = "/api/tasks/{id}/{action}",
    operation_id = "steer_task",
    tag = "tasks",
    params(("id" = TaskId, Path), ("action" = Steer, Path)),
    request_body(content = Option<CommandBody>, description = "Optional; sent as `application/json`"),
    responses(
        (status = 200, description = "Done, or already so (`changed: false`)", body = Steered),
        // A body is read by axum's own `Option<Json>` extractor, whose refusals are plain text.
        (status = 400, description = "`bad_path`, `bad_id`, `bad_reason`; as plain text: a body that is not JSON",
            content((ApiError = "application/json"), (String = "text/plain"))),
        (status = 413, description = "As plain text: a body over 2 MiB", content_type = "text/plain", body = String),
        (status = 415, description = "As plain text: a body whose `Content-Type` is not JSON",
            content_type = "text/plain", body = String),
        (status = 422, description = "As plain text: a JSON body that is not a `CommandBody`",
            content_type = "text/plain", body = String),
        (status = 404, description = "`not_found`: no such task or action", body = ApiError),
        (status = 409, description = "`refused`: the task's state does not allow it; `contended`",
            body = ApiError),
        (status = 500, description = "`corrupt`: the task's stream cannot be read back", body = ApiError),
        (status = 503, description = "`unavailable`: the store cannot be read or written", body = ApiError),
    )
)]
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

/// What a command did to a task.
#[derive(Debug, Serialize, ToSchema)]
pub struct Steered {
    pub task: Task,
    /// `false`: the task already was so; nothing was appended.
    pub changed: bool,
    pub appended: Vec<Appended>,
}

/// `200 {"task", "changed", "appended"}` (`changed: false`: the task already was so), or the refusal.
fn outcome_response(outcome: Result<Outcome, BoardError>) -> Response {
    match outcome {
        Ok(outcome) => Json(Steered {
            task: outcome.task,
            changed: !outcome.appended.is_empty(),
            appended: outcome.appended,
        })
        .into_response(),
        Err(e) => board_error(e),
    }
}

/// The body of `POST /api/tasks/{id}/agent`: exactly this key. Only describes the body: the handler reads it by
/// hand, to refuse each wrong shape with its own message.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct AgentChoice {
    /// A profile name, or `null` for the repository's profile.
    #[schema(required = true)]
    agent: Option<AgentName>,
}

/// `POST /api/tasks/{id}/agent` with `{"agent": "codex"}`, or `{"agent": null}` for the repository's profile:
/// the agent of the task's next attempt.
#[utoipa::path(
    post,
    path = "/api/tasks/{id}/agent",
    operation_id = "choose_agent",
    tag = "tasks",
    params(("id" = TaskId, Path)),
    request_body = AgentChoice,
    responses(
        (status = 200, description = "Chosen, or already so (`changed: false`)", body = Steered),
        (status = 400, description = "`bad_id`, `bad_agent`", body = ApiError),
        (status = 404, description = "`not_found`: no such task", body = ApiError),
        (status = 409, description = "`refused`: the task's state does not allow it; `contended`",
            body = ApiError),
        (status = 500, description = "`corrupt`: the task's stream cannot be read back", body = ApiError),
        (status = 503, description = "`unavailable`: the store cannot be read or written", body = ApiError),
    )
)]
pub async fn choose_agent(
    State(state): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    body: Result<Json<serde_json::Value>, JsonRejection>,
) -> Response {
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

/// `POST /api/tasks/{id}/spec` with `{"task", "scope", "done_when"}` (each optional, at least one): a person's edit
/// of the spec before work starts, as a triage approver makes it (a triage agent's rewrite included).
#[utoipa::path(
    post,
    path = "/api/tasks/{id}/spec",
    operation_id = "edit_spec",
    tag = "tasks",
    params(("id" = TaskId, Path)),
    request_body = SpecEdit,
    responses(
        (status = 200, description = "Updated, or already so (`changed: false`)", body = Steered),
        (status = 400, description = "`bad_id`; `bad_spec`: not a `SpecEdit`, no part given, or the spec it \
            makes is not valid (an empty task, a part over 65,536 characters, a NUL)", body = ApiError),
        (status = 404, description = "`not_found`: no such task", body = ApiError),
        (status = 409, description = "`refused`: the task is not in triage or todo, or a triage agent is \
            rewriting it; `contended`", body = ApiError),
        (status = 500, description = "`corrupt`: the task's stream cannot be read back", body = ApiError),
        (status = 503, description = "`unavailable`: the store cannot be read or written", body = ApiError),
    )
)]
pub async fn edit_spec(
    State(state): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    body: Result<Json<SpecEdit>, JsonRejection>,
) -> Response {
    let edit = match body {
        Ok(Json(edit)) => edit,
        Err(rejection) => return error(StatusCode::BAD_REQUEST, "bad_spec", rejection.body_text()),
    };
    if edit.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "bad_spec",
            "nothing to change: give at least one of task, scope, done_when",
        );
    }
    match state.board.edit_spec(id, &edit, "api").await {
        Err(BoardError::Invalid(invalid)) => {
            error(StatusCode::BAD_REQUEST, "bad_spec", invalid.to_string())
        }
        edited => outcome_response(edited),
    }
}

/// The body of `POST /api/tasks/{id}/answer`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerBody {
    /// The answer, for the next attempt (1 to 65,536 characters, no NUL).
    text: String,
    /// Names this answer, so a retried request answers once: 1 to 100 visible ASCII characters. Without one, each
    /// request is a new answer (and a second one is refused).
    #[serde(default)]
    request_id: Option<String>,
}

/// `POST /api/tasks/{id}/answer` with `{"text", "request_id"?}`: the answer to the question the task waits on
/// (it needs a human, for any reason). The first answer from anywhere (Linear, GitHub, Telegram, the dashboard,
/// here) becomes the next attempt's follow-up and clears the flag; a later one is refused (`409`), and the same
/// `request_id` again changes nothing (`changed: false`).
#[utoipa::path(
    post,
    path = "/api/tasks/{id}/answer",
    operation_id = "answer_task",
    tag = "tasks",
    params(("id" = TaskId, Path)),
    request_body = AnswerBody,
    responses(
        (status = 200, description = "Answered, or this `request_id` answered before (`changed: false`)",
            body = Steered),
        (status = 400, description = "`bad_id`; `bad_answer`: not an `AnswerBody`, an empty or oversized text, \
            a bad `request_id`", body = ApiError),
        (status = 404, description = "`not_found`: no such task", body = ApiError),
        (status = 409, description = "`refused`: the task waits on no question (never asked, or answered \
            already), or is closed; `contended`", body = ApiError),
        (status = 500, description = "`corrupt`: the task's stream cannot be read back", body = ApiError),
        (status = 503, description = "`unavailable`: the store cannot be read or written", body = ApiError),
    )
)]
pub async fn answer(
    State(state): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    body: Result<Json<AnswerBody>, JsonRejection>,
) -> Response {
    let body = match body {
        Ok(Json(body)) => body,
        Err(rejection) => {
            return error(StatusCode::BAD_REQUEST, "bad_answer", rejection.body_text())
        }
    };
    let request = match body.request_id {
        Some(request)
            if (1..=100).contains(&request.len())
                && request.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            request
        }
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "bad_answer",
                "request_id must be 1 to 100 visible ASCII characters",
            )
        }
        None => Uuid::new_v4().to_string(),
    };
    let text = match crate::tasks::FollowUpText::new(body.text) {
        Ok(text) => text,
        Err(e) => return error(StatusCode::BAD_REQUEST, "bad_answer", e.to_string()),
    };
    let origin = match crate::tasks::FollowUpOrigin::new(format!("api:{request}"), "the API") {
        Ok(origin) => origin,
        Err(e) => return error(StatusCode::BAD_REQUEST, "bad_answer", e.to_string()),
    };
    let answer = Command::Answer {
        text,
        origin: Some(origin),
    };
    outcome_response(state.board.execute(id, &answer, "api").await)
}

/// The task id in the path, or what is wrong with it (a `400 bad_id`).
/// The task id in a route's path (`/api/tasks/{id}`…), or `400 bad_id` saying what is wrong with it.
pub(super) struct TaskIdPath(pub TaskId);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for TaskIdPath {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Response> {
        let Ok(Path(id)) = Path::<String>::from_request_parts(parts, state).await else {
            return Err(error(StatusCode::BAD_REQUEST, "bad_id", "missing task id"));
        };
        id.parse::<TaskId>()
            .map(TaskIdPath)
            .map_err(|e| error(StatusCode::BAD_REQUEST, "bad_id", e.to_string()))
    }
}

fn task_detail(loaded: Loaded, rules: &LandConfig) -> TaskDetail {
    let timeline = loaded
        .events
        .iter()
        .map(|e| TimelineItem {
            position: e.position,
            stream_version: e.stream_version,
            event_type: e.event_type.clone(),
            at: e.occurred_at,
            recorded_at: e.recorded_at,
            actor: e.meta.get("actor"),
            cause_event_id: e.meta.get("cause_event_id"),
            // `load` has decoded every event already; a summary is what a person reads.
            summary: crate::projectors::tasks::timeline_entry(e)
                .ok()
                .map(|t| t.summary),
            event_id: e.id,
        })
        .collect();
    TaskDetail {
        landing: LandingStatus::of(&loaded.task, rules),
        task: loaded.task,
        version: loaded.version,
        timeline,
    }
}

pub(super) fn board_error(e: BoardError) -> Response {
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

/// `GET /api/tasks`: the board's rows, and how current the read model is.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskList {
    pub tasks: Vec<TaskRow>,
    pub projector: BoardProgress,
}

/// How current the board is: the `tasks` read model lags the log's `head` by `behind` events.
#[derive(Debug, Serialize, ToSchema)]
pub struct BoardProgress {
    pub position: i64,
    pub head: i64,
    pub behind: i64,
}

/// The board from the `tasks` read model: `?column=todo&repo=acme/api&source=linear&needs_human=true&limit=50`.
/// Ordered by priority, then age.
#[utoipa::path(
    get,
    path = "/api/tasks",
    operation_id = "list_tasks",
    tag = "tasks",
    params(TaskFilter),
    responses(
        (status = 200, description = "Tasks, most urgent first, then oldest first", body = TaskList),
        (status = 400, description = "`bad_query`: unknown parameter or value, `limit` out of range, `q` over \
            200 characters", body = ApiError),
        (status = 503, description = "`unavailable`: the store cannot be read", body = ApiError),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    query: Result<axum::extract::Query<TaskFilter>, axum::extract::rejection::QueryRejection>,
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
    if let Some(too_long) = filter
        .q
        .as_deref()
        .filter(|q| q.chars().count() > tasks::MAX_SEARCH)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "bad_query",
            format!(
                "q is {} characters; a search takes at most {}",
                too_long.chars().count(),
                tasks::MAX_SEARCH
            ),
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
    Json(TaskList {
        tasks: rows,
        // How current the board is: a read model lags the log by a tick.
        projector: BoardProgress {
            position,
            head,
            behind: (head - position).max(0),
        },
    })
    .into_response()
}
