//! A task's page: its row, spec and timeline from the read models, and each attempt's diff and log from the
//! files the attempt left in its run directory (`<WORKSPACE_ROOT>/runs/<task>/<run>/`: `agent.log`, and
//! `diff.json` / `diff.patch` that the dispatcher recorded from commit ids it made itself). Those files are read only
//! under this machine's workspace root, each to a cap, so a giant log or patch costs a bounded read; a run on
//! another worker's machine says where its files are instead. Live while it runs: every heartbeat is an event, and
//! the page's script re-renders on events (`/live`), so the log shown grows as the agent writes.

use std::path::{Path, PathBuf};

use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use chrono::Utc;

use super::attempt::{Attempt, Diff, Files, Log};
use super::{caught_up, frame, page, pages, unavailable, AtQuery, SignedIn};
use crate::board::Steer;
use crate::dispatch::workspace::diff::{DiffRecord, DIFF_FILE, PATCH_CAP, PATCH_FILE};
use crate::http::AppState;
use crate::projectors::runs::{self, RunRow, Which};
use crate::projectors::tasks as task_rows;
use crate::tasks::TaskId;

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
    let store = state.log.store();
    let head = match store.head().await {
        Ok(head) => head,
        Err(e) => return unavailable(e),
    };
    let row = match task_rows::get(store, id).await {
        Ok(Some(row)) => row,
        Ok(None) => {
            return page(
                StatusCode::NOT_FOUND,
                pages::layout(
                    &frame(&key, &session, "Not found", pages::Nav::Other, None),
                    pages::message("No such task", &format!("There is no task {id} (yet).")),
                ),
            )
        }
        Err(e) => return unavailable(e),
    };
    // The task's own stream (one indexed read, not a scan): its spec and what the domain allows now.
    let task = match state.board.load(id).await {
        Ok(loaded) => loaded.map(|l| l.task),
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
    let here = Here::of(&state).await;
    let open = runs
        .iter()
        .rposition(|r| r.state == "running")
        .or(runs.len().checked_sub(1));
    let mut attempts = Vec::with_capacity(runs.len());
    for (i, run) in runs.iter().enumerate() {
        let attempt = if i + SHOWN_IN_FULL >= runs.len() {
            here.attempt(run.clone(), open == Some(i)).await
        } else {
            Attempt::summarized(run.clone(), SHOWN_IN_FULL)
        };
        attempts.push(attempt);
    }
    let view = pages::TaskView {
        actions: task.as_ref().map(allowed_actions).unwrap_or_default(),
        row,
        task,
        timeline,
        runs,
        attempts,
        csrf: session.csrf(&key),
        now: Utc::now(),
    };
    page(
        StatusCode::OK,
        pages::layout(
            &frame(
                &key,
                &session,
                &id.to_string(),
                pages::Nav::Board,
                Some(head),
            ),
            pages::task(&view),
        ),
    )
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
