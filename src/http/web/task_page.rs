//! A task's page: its row, spec and timeline from the read models, and each attempt's diff and log from the
//! files the attempt left in its run directory (`<WORKSPACE_ROOT>/runs/<task>/<run>/`: `agent.log`, and
//! `diff.json` / `diff.patch` that the dispatcher recorded from commit ids it made itself). Those files are read only
//! under this machine's workspace root, each to a cap, so a giant log or patch costs a bounded read; a run on
//! another worker's machine says where its files are instead. Live while it runs: every heartbeat is an event, and
//! the page's script re-renders on events (`/live`), so the log shown grows as the agent writes.

use std::path::{Path, PathBuf};

use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use chrono::Utc;

use super::attempt::{Attempt, Diff, Files, Log};
use super::plan::Related;
use super::session::{Key, Session};
use super::triage::SpecDraft;
use super::{
    caught_up, field, frame, page, pages, parse_form, rendered_at, require_post, steered_response,
    unavailable, Access, AtQuery, SignedIn, SPEC_FORM_LIMIT,
};
use crate::board::{BoardError, SpecEdit, Steer};
use crate::dispatch::workspace::diff::{DiffRecord, DIFF_FILE, PATCH_CAP, PATCH_FILE};
use crate::http::AppState;
use crate::projectors::runs::{self, RunRow, Which};
use crate::projectors::tasks::{self as task_rows, TaskRow};
use crate::tasks::{Task, TaskId};

/// The most bytes of an attempt's log shown (its end); the page says how much came before.
pub const LOG_BYTES: u64 = 512 * 1024;
/// The latest attempts whose diff and log the page shows (each read to its cap, so the page stays bounded however
/// often a task is retried).
const SHOWN_IN_FULL: usize = 3;
/// `diff.json` is ours and small; past this it is not read.
const DIFF_JSON_BYTES: u64 = 2 * 1024 * 1024;

/// What a person may do to `task` now, as the domain decides it.
fn allowed_actions(task: &crate::tasks::Task) -> Vec<Steer> {
    let now = Utc::now();
    [
        Steer::Approve,
        Steer::Reject,
        Steer::Retry,
        Steer::Cancel,
        Steer::Archive,
        Steer::Done,
    ]
    .into_iter()
    .filter(|steer| {
        steer
            .command(task, None, "from the dashboard")
            .ok()
            .and_then(|command| crate::tasks::decide(Some(task), &command, now).ok())
            .is_some_and(|events| !events.is_empty())
    })
    .collect()
}

pub(super) async fn task_page(
    State(state): State<AppState>,
    SignedIn { key, session }: SignedIn,
    UrlPath(id): UrlPath<String>,
    Query(at): Query<AtQuery>,
) -> Response {
    caught_up(&state, at.at).await;
    let Ok(id) = id.parse::<TaskId>() else {
        return page(
            StatusCode::NOT_FOUND,
            pages::message("No such task", "Task ids look like T-42."),
        );
    };
    render(&state, &key, &session, id, StatusCode::OK, None).await
}

/// `POST /tasks/{id}/spec`: the approver's edit of the spec (`task`, `scope`, `done_when`; all three, as the form
/// sends them), then, with `then=approve`, the approval of the spec as edited. A refused edit shows the page again
/// with the form as it was sent and why; nothing is changed.
pub(super) async fn edit_spec(
    State(state): State<AppState>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
    body: bytes::Bytes,
) -> Response {
    let Some(form) = parse_form(&body, SPEC_FORM_LIMIT) else {
        return page(
            StatusCode::PAYLOAD_TOO_LARGE,
            pages::message(
                "Too large",
                &format!(
                    "The dashboard takes a spec of up to {} KiB as the browser sends it; edit a larger one with \
                     POST /api/tasks/{{id}}/spec or `pidevops task spec`.",
                    SPEC_FORM_LIMIT / 1024
                ),
            ),
        );
    };
    let (key, session) = match require_post(&state, &headers, &form).await {
        Access::Granted(key, session) => (key, session),
        Access::Denied(response) => return response,
    };
    let Ok(id) = id.parse::<TaskId>() else {
        return page(
            StatusCode::NOT_FOUND,
            pages::message("No such task", "Task ids look like T-42."),
        );
    };
    let (Some(task), Some(scope), Some(done_when)) = (
        field(&form, "task"),
        field(&form, "scope"),
        field(&form, "done_when"),
    ) else {
        return page(
            StatusCode::BAD_REQUEST,
            pages::message(
                "Not accepted",
                "The spec form sends task, scope and done_when; this one did not.",
            ),
        );
    };
    let edit = SpecEdit {
        task: Some(task.clone()),
        scope: Some(scope.clone()),
        done_when: Some(done_when.clone()),
    };
    let edited = match state.board.edit_spec(id, &edit, "dashboard").await {
        Ok(outcome) => outcome,
        Err(BoardError::Invalid(invalid)) => {
            let draft = SpecDraft {
                task,
                scope,
                done_when,
                error: invalid.to_string(),
            };
            return render(
                &state,
                &key,
                &session,
                id,
                StatusCode::BAD_REQUEST,
                Some(draft),
            )
            .await;
        }
        Err(error) => return steered_response(id, Err(error)),
    };
    if field(&form, "then").as_deref() != Some("approve") {
        return steered_response(id, Ok(edited));
    }
    match state
        .board
        .steer(id, Steer::Approve, None, "from the dashboard", "dashboard")
        .await
    {
        Ok(approved) if approved.appended.is_empty() => steered_response(id, Ok(edited)),
        Ok(approved) => steered_response(id, Ok(approved)),
        Err(BoardError::Refused(refused)) => page(
            StatusCode::CONFLICT,
            pages::message(
                "Saved, not approved",
                &format!(
                    "{id}: the spec was {}, but the approval was refused: {refused}",
                    if edited.appended.is_empty() {
                        "unchanged"
                    } else {
                        "saved"
                    }
                ),
            ),
        ),
        Err(error) => steered_response(id, Err(error)),
    }
}

/// `POST /tasks/{id}/land`: pidevops merges the task's recorded commit into its repository's base and pushes it
/// (repositories not on GitHub; see `crate::landing`). Back to the page once it is recorded; a refusal (a
/// conflict, a GitHub repository, not in review) is shown with why, and nothing changed.
pub(super) async fn land(
    State(state): State<AppState>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
    body: bytes::Bytes,
) -> Response {
    let Some(form) = parse_form(&body, SPEC_FORM_LIMIT) else {
        return page(
            StatusCode::PAYLOAD_TOO_LARGE,
            pages::message("Too large", "The Land form sends only its token."),
        );
    };
    if let Access::Denied(response) = require_post(&state, &headers, &form).await {
        return response;
    }
    let Ok(id) = id.parse::<TaskId>() else {
        return page(
            StatusCode::NOT_FOUND,
            pages::message("No such task", "Task ids look like T-42."),
        );
    };
    match state.lander.land(id, "dashboard").await {
        Ok(landed) => steered_response(id, Ok(landed.outcome)),
        Err(crate::landing::LandError::Board(error)) => steered_response(id, Err(error)),
        Err(error) => page(
            StatusCode::CONFLICT,
            pages::message("Not landed", &error.to_string()),
        ),
    }
}

/// `POST /tasks/{id}/answer` (`text`): a person's answer to the question the task waits on, as
/// `Command::Answer` from `dashboard:<uuid>`. The first answer from anywhere wins; a later one is refused and said
/// so.
pub(super) async fn answer(
    State(state): State<AppState>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
    body: bytes::Bytes,
) -> Response {
    let Some(form) = parse_form(&body, SPEC_FORM_LIMIT) else {
        return page(
            StatusCode::PAYLOAD_TOO_LARGE,
            pages::message(
                "Too large",
                "Answer at length with POST /api/tasks/{id}/answer or `pidevops task answer`.",
            ),
        );
    };
    if let Access::Denied(response) = require_post(&state, &headers, &form).await {
        return response;
    }
    let Ok(id) = id.parse::<TaskId>() else {
        return page(
            StatusCode::NOT_FOUND,
            pages::message("No such task", "Task ids look like T-42."),
        );
    };
    let text = match field(&form, "text").map(crate::tasks::FollowUpText::new) {
        Some(Ok(text)) => text,
        Some(Err(e)) => {
            return page(
                StatusCode::BAD_REQUEST,
                pages::message("Not accepted", &format!("{id}: {e}")),
            )
        }
        None => {
            return page(
                StatusCode::BAD_REQUEST,
                pages::message(
                    "Not accepted",
                    "The answer form sends text; this one did not.",
                ),
            )
        }
    };
    let origin = crate::tasks::FollowUpOrigin::new(
        format!("dashboard:{}", uuid::Uuid::new_v4()),
        "the dashboard",
    );
    let Ok(origin) = origin else {
        return page(
            StatusCode::INTERNAL_SERVER_ERROR,
            pages::message("Not accepted", "an answer's origin could not be made"),
        );
    };
    let answer = crate::tasks::Command::Answer {
        text,
        origin: Some(origin),
    };
    steered_response(id, state.board.execute(id, &answer, "dashboard").await)
}

/// The task's page, from its row, its stream and the rows it refers to; `draft`: a refused spec edit to show again.
async fn render(
    state: &AppState,
    key: &Key,
    session: &Session,
    id: TaskId,
    status: StatusCode,
    draft: Option<SpecDraft>,
) -> Response {
    let store = state.log.store();
    let head = match rendered_at(state).await {
        Ok(at) => at,
        Err(e) => return unavailable(e),
    };
    let row = match task_rows::get(store, id).await {
        Ok(Some(row)) => row,
        Ok(None) => {
            return page(
                StatusCode::NOT_FOUND,
                pages::layout(
                    &frame(key, session, "Not found", pages::Nav::Other, None),
                    pages::message("No such task", &format!("There is no task {id} (yet).")),
                ),
            )
        }
        Err(e) => return unavailable(e),
    };
    // The task's own stream (one indexed read, not a scan): its spec and what the domain allows now.
    let (task, events) = match state.board.load(id).await {
        Ok(Some(loaded)) => (Some(loaded.task), loaded.events),
        Ok(None) => (None, Vec::new()),
        Err(e) => return unavailable(e),
    };
    let (items, related) = match family(state, task.as_ref()).await {
        Ok(found) => found,
        Err(e) => return unavailable(e),
    };
    let (timeline, runs) = match (
        task_rows::timeline(store, id).await,
        runs::query(store, Which::Task(&id.to_string())).await,
    ) {
        (Ok(timeline), Ok(runs)) => (timeline, runs),
        (Err(e), _) => return unavailable(e),
        (_, Err(e)) => return unavailable(e),
    };
    // Its refreshes from the stream loaded above; their diffs as recorded on this machine.
    let refreshes = super::refreshes::of(&events);
    let refresh_diffs =
        super::refreshes::diffs(&state.settings.workspace_root, id, &refreshes, &runs).await;
    let here = Here::of(state).await;
    let open = runs
        .iter()
        .rposition(|r| r.state == "running")
        .or(runs.len().checked_sub(1));
    let mut attempts = Vec::with_capacity(runs.len());
    for (i, run) in runs.iter().enumerate() {
        let attempt = if i + SHOWN_IN_FULL >= runs.len() {
            let mut attempt = here.attempt(run.clone(), open == Some(i)).await;
            attempt.egress_refused = match egress_refused(store, run).await {
                Ok(refused) => refused,
                Err(e) => return unavailable(format!("{e:#}")),
            };
            attempt
        } else {
            Attempt::summarized(run.clone(), SHOWN_IN_FULL)
        };
        attempts.push(attempt);
    }
    let landable = task.as_ref().is_some_and(|task| {
        task.column() == crate::tasks::Column::InReview
            && !task.is_plan()
            && !state.lander.lands_by_review(task)
    });
    let compare = row
        .repo
        .parse::<crate::tasks::RepoName>()
        .ok()
        .and_then(|repo| {
            let gitlab = crate::providers::gitlab::settings::GitlabSettings::of(&state.settings);
            super::refreshes::compare_prefix(
                &state.settings.file.dispatch.source(&repo),
                repo.as_str(),
                &gitlab.url,
            )
        });
    let view = pages::TaskView {
        actions: task.as_ref().map(allowed_actions).unwrap_or_default(),
        landable,
        row,
        task,
        timeline,
        runs,
        attempts,
        items,
        related,
        draft,
        csrf: session.csrf(key),
        now: Utc::now(),
        refreshes,
        refresh_diffs,
        compare,
    };
    page(
        status,
        pages::layout(
            &frame(key, session, &id.to_string(), pages::Nav::Board, Some(head)),
            pages::task(&view),
        ),
    )
}

/// A plan's items' rows in the plan's order (one not on the board yet left out), and the rows the page names: the
/// items (whose dependencies are their siblings), or an item's dependencies.
async fn family(
    state: &AppState,
    task: Option<&Task>,
) -> Result<(Vec<TaskRow>, Related), task_rows::TasksError> {
    let mut related = Related::default();
    let Some(task) = task else {
        return Ok((Vec::new(), related));
    };
    let store = state.log.store();
    let children = task
        .plan()
        .map(|p| p.children.as_slice())
        .unwrap_or_default();
    let mut items = Vec::new();
    if !children.is_empty() {
        let mut found = task_rows::get_many(store, children).await?;
        found.sort_by_key(|row| children.iter().position(|id| *id == row.id));
        related.add(&found);
        let missing = related.missing(&found);
        if !missing.is_empty() {
            related.add(&task_rows::get_many(store, &missing).await?);
        }
        items = found;
    }
    if !task.depends_on().is_empty() {
        related.add(&task_rows::get_many(store, task.depends_on()).await?);
    }
    Ok((items, related))
}

/// This machine: its instance name and its runs directory, where run files are read from (nowhere else).
struct Here {
    instance: String,
    runs: Option<PathBuf>,
}

impl Here {
    async fn of(state: &AppState) -> Self {
        Self {
            instance: state.settings.instance_id.clone(),
            runs: tokio::fs::canonicalize(state.settings.workspace_root.join("runs"))
                .await
                .ok(),
        }
    }

    /// The run's directory on this machine, if it is one of ours and still there; else why not.
    async fn run_dir(&self, run: &RunRow) -> Result<PathBuf, String> {
        let worker = run.worker.as_deref().unwrap_or("an unknown worker");
        let Some(log) = &run.log_path else {
            return Err("the attempt did not start".to_owned());
        };
        let dir = Path::new(log).parent().unwrap_or(Path::new(""));
        match (tokio::fs::canonicalize(dir).await, &self.runs) {
            (Ok(dir), Some(runs)) if is_run_dir(&dir, runs, run) => Ok(dir),
            (Ok(_), _) => Err(format!(
                "{} is not under this machine's workspace root; not read",
                dir.display()
            )),
            (Err(_), _) if worker != self.instance => Err(format!(
                "the attempt ran on {worker}; its files are on that machine ({})",
                dir.display()
            )),
            (Err(_), _) => Err(
                "its run directory is gone (run directories are removed after [dispatch] worktree_ttl_h)"
                    .to_owned(),
            ),
        }
    }

    async fn attempt(&self, run: RunRow, open: bool) -> Attempt {
        let dir = self.run_dir(&run).await;
        let log = match &dir {
            Ok(dir) => match read_end(&dir.join("agent.log"), LOG_BYTES).await {
                Some((text, skipped)) => Files::Here(Log { text, skipped }),
                None => Files::Away("the agent has printed nothing yet".to_owned()),
            },
            Err(why) => Files::Away(why.clone()),
        };
        let diff = if run.commit_sha.is_none() {
            None
        } else {
            Some(match &dir {
                Ok(dir) => match read_diff(dir).await {
                    Some(diff) => Files::Here(diff),
                    None => Files::Away("none was recorded for this attempt".to_owned()),
                },
                Err(why) => Files::Away(why.clone()),
            })
        };
        Attempt {
            run,
            log,
            diff,
            open,
            egress_refused: Vec::new(),
        }
    }
}

/// Exactly `<runs>/<task>/<run>` for this run: not the root, not a task's directory, and not anything beneath a run
/// directory (its worktree, HOME and TMPDIR are the agent's, so a `diff.json` there would be the agent's word).
fn is_run_dir(dir: &Path, runs: &Path, run: &RunRow) -> bool {
    let Ok(inside) = dir.strip_prefix(runs) else {
        return false;
    };
    let parts: Vec<_> = inside.components().collect();
    matches!(parts.as_slice(), [task, id]
        if task.as_os_str() == run.task_id.as_str() && id.as_os_str() == run.run_id.as_str())
}

/// The last `cap` bytes of a file, from the first whole line, and how many bytes came before them.
async fn read_end(path: &Path, cap: u64) -> Option<(String, u64)> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let mut file = tokio::fs::File::open(path).await.ok()?;
    let length = file.metadata().await.ok()?.len();
    let mut skipped = length.saturating_sub(cap);
    file.seek(std::io::SeekFrom::Start(skipped)).await.ok()?;
    let mut bytes = Vec::new();
    file.take(cap).read_to_end(&mut bytes).await.ok()?;
    if skipped > 0 {
        // The first line is cut: start at the next whole one.
        let start = bytes.iter().position(|b| *b == b'\n').map_or(0, |i| i + 1);
        skipped += start as u64;
        bytes.drain(..start);
    }
    Some((String::from_utf8_lossy(&bytes).into_owned(), skipped))
}

/// What an attempt's egress proxies refused: its run's `run.egress_refused` events in the log (the record, on
/// every machine and after its run directory is gone), merged per destination.
async fn egress_refused(
    store: &crate::eventlog::EventStore,
    run: &RunRow,
) -> anyhow::Result<Vec<crate::domain::runs::RefusedEgress>> {
    use crate::domain::runs::{RefusedEgress, RunEvent, EGRESS_REFUSED, RUN_STREAM_PREFIX};
    let stream = format!("{RUN_STREAM_PREFIX}{}", run.run_id);
    let mut lists = Vec::new();
    for stored in store.read_stream_of_type(&stream, EGRESS_REFUSED).await? {
        if let RunEvent::EgressRefused { refused, .. } = runs::decode(&stored)? {
            lists.push(refused);
        }
    }
    Ok(RefusedEgress::merged(lists.iter().map(Vec::as_slice)))
}

/// The recorded diff of an attempt, if it has one.
async fn read_diff(dir: &Path) -> Option<Diff> {
    use tokio::io::AsyncReadExt;
    let mut json = Vec::new();
    tokio::fs::File::open(dir.join(DIFF_FILE))
        .await
        .ok()?
        .take(DIFF_JSON_BYTES)
        .read_to_end(&mut json)
        .await
        .ok()?;
    let record: DiffRecord = serde_json::from_slice(&json).ok()?;
    let mut patch = Vec::new();
    tokio::fs::File::open(dir.join(PATCH_FILE))
        .await
        .ok()?
        .take(PATCH_CAP as u64)
        .read_to_end(&mut patch)
        .await
        .ok()?;
    Some(Diff {
        record,
        patch: String::from_utf8_lossy(&patch).into_owned(),
    })
}
