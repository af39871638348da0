//! The `runs` read model: one row per agent run, from the `run:<id>` streams. The watchdog reads the running rows
//! whose last sign of life is too old; the API and `/health` read recent runs and their outcomes.

use anyhow::{anyhow, Context};
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde::Serialize;
use sqlx::Row;

use super::{Bodies, Projector, ProjectorTx};
use crate::domain::runs::{Proposal, RunEvent, RUN_STREAM_PREFIX};
use crate::eventlog::{EventStore, StoreError, StoredEvent};

pub const NAME: &str = "runs";
const SOURCE: &str = "pidevops";

#[derive(Clone, Copy, Debug, Default)]
pub struct RunsProjector;

/// A row of `runs`.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct RunRow {
    pub run_id: String,
    pub task_id: String,
    pub attempt: i64,
    /// `running`, `succeeded` or `failed`.
    pub state: String,
    pub worker: Option<String>,
    pub profile: Option<String>,
    pub log_path: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    pub last_seen_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    pub failure: Option<String>,
    pub detail: Option<String>,
    pub branch: Option<String>,
    pub commit_sha: Option<String>,
    pub duration_s: Option<f64>,
    pub output_bytes: i64,
    pub tail: Option<String>,
    pub version: i64,
    pub last_position: i64,
}

/// What one event writes; `None` leaves the stored value as it is.
#[derive(Default)]
struct Write {
    run_id: String,
    task_id: String,
    attempt: i64,
    state: &'static str,
    worker: Option<String>,
    profile: Option<String>,
    log_path: Option<String>,
    started_at: Option<DateTime<Utc>>,
    last_seen_at: DateTime<Utc>,
    ended_at: Option<DateTime<Utc>>,
    failure: Option<&'static str>,
    detail: Option<String>,
    branch: Option<String>,
    commit_sha: Option<String>,
    duration_s: Option<f64>,
    output_bytes: i64,
    tail: Option<String>,
    version: i64,
    last_position: i64,
}

fn is_run_event(event: &StoredEvent) -> bool {
    event.source == SOURCE
        && event
            .stream
            .as_deref()
            .is_some_and(|s| s.starts_with(RUN_STREAM_PREFIX))
}

/// Decodes a run event, checked against its envelope.
pub fn decode(event: &StoredEvent) -> anyhow::Result<RunEvent> {
    let stream = event.stream.as_deref().unwrap_or_default();
    let decoded: RunEvent = serde_json::from_slice(&event.body).with_context(|| {
        format!(
            "{stream}: the body of {} is not a run event",
            event.event_type
        )
    })?;
    if decoded.kind() != event.event_type {
        return Err(anyhow!(
            "{stream}: event type {} but the body is {}",
            event.event_type,
            decoded.kind()
        ));
    }
    if stream != crate::domain::runs::stream(decoded.run()) {
        return Err(anyhow!("{stream} holds an event of run {}", decoded.run()));
    }
    Ok(decoded)
}

fn write_for(event: &StoredEvent, decoded: RunEvent) -> Write {
    let base = Write {
        run_id: decoded.run().to_string(),
        task_id: decoded.task().to_string(),
        last_seen_at: decoded.at(),
        version: event.stream_version.unwrap_or_default(),
        last_position: event.position,
        state: "running",
        ..Write::default()
    };
    match decoded {
        RunEvent::Started {
            at,
            attempt,
            profile,
            worker,
            log,
            ..
        } => Write {
            attempt: attempt.into(),
            worker: Some(worker),
            profile: Some(profile),
            log_path: Some(log),
            started_at: Some(at),
            ..base
        },
        // On the run's record in the log; the row does not show it.
        RunEvent::EgressRefused { .. } | RunEvent::Checkpointed { .. } => base,
        RunEvent::Heartbeat { output_bytes, .. } => Write {
            output_bytes: i64::try_from(output_bytes).unwrap_or(i64::MAX),
            ..base
        },
        RunEvent::Succeeded {
            at,
            attempt,
            branch,
            commit,
            duration_s,
            tail,
            ..
        } => Write {
            attempt: attempt.into(),
            state: "succeeded",
            ended_at: Some(at),
            branch: Some(branch.to_string()),
            commit_sha: Some(commit),
            duration_s: Some(duration_s),
            tail: Some(tail),
            ..base
        },
        RunEvent::Failed {
            at,
            attempt,
            kind,
            detail,
            duration_s,
            tail,
            ..
        } => Write {
            attempt: attempt.into(),
            state: "failed",
            ended_at: Some(at),
            failure: Some(kind.as_str()),
            detail: Some(detail),
            duration_s: Some(duration_s),
            tail: Some(tail),
            ..base
        },
        RunEvent::Proposed {
            at,
            attempt,
            proposal,
            duration_s,
            tail,
            ..
        } => Write {
            attempt: attempt.into(),
            state: "proposed",
            ended_at: Some(at),
            detail: Some(match proposal {
                Proposal::Plan { plan } => {
                    format!("proposed a plan of {} items", plan.items().len())
                }
                Proposal::Spec { spec } => format!("proposed a spec: {}", spec.title()),
            }),
            duration_s: Some(duration_s),
            tail: Some(tail),
            ..base
        },
    }
}

impl Projector for RunsProjector {
    fn name(&self) -> &'static str {
        NAME
    }

    fn version(&self) -> i64 {
        1
    }

    fn bodies(&self) -> Bodies {
        Bodies::Streams {
            source: SOURCE,
            stream_prefix: RUN_STREAM_PREFIX,
        }
    }

    fn reset<'a>(&'a self, tx: &'a mut ProjectorTx) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            super::empty_tables(tx, &["runs"]).await?;
            Ok(())
        })
    }

    fn apply<'a>(
        &'a self,
        tx: &'a mut ProjectorTx,
        events: &'a [StoredEvent],
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            for event in events.iter().filter(|e| is_run_event(e)) {
                let decoded = decode(event)?;
                upsert(tx, write_for(event, decoded)).await?;
            }
            Ok(())
        })
    }
}

// A terminal state is sticky: nothing after the outcome (there is nothing, by the stream's versions) reopens it.
// `x = CASE WHEN excluded.x > runs.x ...`: the greater of the stored and the new value, written once for both
// backends (Postgres says GREATEST, SQLite MAX).
const UPSERT: &str = "INSERT INTO runs (run_id, task_id, attempt, state, worker, profile, log_path, started_at,
        last_seen_at, ended_at, failure, detail, branch, commit_sha, duration_s, output_bytes, tail, version,
        last_position)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)
    ON CONFLICT (run_id) DO UPDATE SET
        attempt = CASE WHEN excluded.attempt > runs.attempt THEN excluded.attempt ELSE runs.attempt END,
        state = CASE WHEN runs.state = 'running' THEN excluded.state ELSE runs.state END,
        worker = COALESCE(excluded.worker, runs.worker),
        profile = COALESCE(excluded.profile, runs.profile),
        log_path = COALESCE(excluded.log_path, runs.log_path),
        started_at = COALESCE(runs.started_at, excluded.started_at),
        last_seen_at = CASE WHEN excluded.last_seen_at > runs.last_seen_at
            THEN excluded.last_seen_at ELSE runs.last_seen_at END,
        ended_at = COALESCE(runs.ended_at, excluded.ended_at),
        failure = COALESCE(runs.failure, excluded.failure),
        detail = COALESCE(runs.detail, excluded.detail),
        branch = COALESCE(runs.branch, excluded.branch),
        commit_sha = COALESCE(runs.commit_sha, excluded.commit_sha),
        duration_s = COALESCE(runs.duration_s, excluded.duration_s),
        output_bytes = CASE WHEN excluded.output_bytes > runs.output_bytes
            THEN excluded.output_bytes ELSE runs.output_bytes END,
        tail = COALESCE(runs.tail, excluded.tail),
        version = CASE WHEN excluded.version > runs.version THEN excluded.version ELSE runs.version END,
        last_position = CASE WHEN excluded.last_position > runs.last_position
            THEN excluded.last_position ELSE runs.last_position END";

macro_rules! bind_write {
    ($query:expr, $w:expr) => {
        $query
            .bind(&$w.run_id)
            .bind(&$w.task_id)
            .bind($w.attempt)
            .bind($w.state)
            .bind(&$w.worker)
            .bind(&$w.profile)
            .bind(&$w.log_path)
            .bind($w.started_at)
            .bind($w.last_seen_at)
            .bind($w.ended_at)
            .bind($w.failure)
            .bind(&$w.detail)
            .bind(&$w.branch)
            .bind(&$w.commit_sha)
            .bind($w.duration_s)
            .bind($w.output_bytes)
            .bind(&$w.tail)
            .bind($w.version)
            .bind($w.last_position)
    };
}

async fn upsert(tx: &mut ProjectorTx, w: Write) -> Result<(), sqlx::Error> {
    on_tx!(tx, |conn| bind_write!(sqlx::query(UPSERT), w)
        .execute(conn)
        .await
        .map(|_| ()))?;
    Ok(())
}

const COLUMNS: &str = "run_id, task_id, attempt, state, worker, profile, log_path, started_at, last_seen_at,
    ended_at, failure, detail, branch, commit_sha, duration_s, output_bytes, tail, version, last_position";

fn run_row<R>(row: &R) -> Result<RunRow, sqlx::Error>
where
    R: Row,
    for<'r> &'r str: sqlx::ColumnIndex<R>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<String>: sqlx::Decode<'r, R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<f64>: sqlx::Decode<'r, R::Database>,
    for<'r> f64: sqlx::Type<R::Database>,
    for<'r> DateTime<Utc>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<DateTime<Utc>>: sqlx::Decode<'r, R::Database>,
{
    Ok(RunRow {
        run_id: row.try_get("run_id")?,
        task_id: row.try_get("task_id")?,
        attempt: row.try_get("attempt")?,
        state: row.try_get("state")?,
        worker: row.try_get("worker")?,
        profile: row.try_get("profile")?,
        log_path: row.try_get("log_path")?,
        started_at: row.try_get("started_at")?,
        last_seen_at: row.try_get("last_seen_at")?,
        ended_at: row.try_get("ended_at")?,
        failure: row.try_get("failure")?,
        detail: row.try_get("detail")?,
        branch: row.try_get("branch")?,
        commit_sha: row.try_get("commit_sha")?,
        duration_s: row.try_get("duration_s")?,
        output_bytes: row.try_get("output_bytes")?,
        tail: row.try_get("tail")?,
        version: row.try_get("version")?,
        last_position: row.try_get("last_position")?,
    })
}

/// Which runs a query returns.
#[derive(Clone, Copy, Debug)]
pub enum Which<'a> {
    /// Every running run.
    Running,
    /// One run.
    Run(&'a str),
    /// A task's runs, oldest attempt first.
    Task(&'a str),
    /// The most recent runs, newest first.
    Recent(i64),
}

pub async fn query(store: &EventStore, which: Which<'_>) -> Result<Vec<RunRow>, StoreError> {
    let (filter, order) = match which {
        Which::Running => ("state = 'running'", "last_seen_at"),
        Which::Run(_) => ("run_id = $1", "run_id"),
        Which::Task(_) => ("task_id = $1", "attempt, last_position"),
        Which::Recent(_) => ("TRUE", "last_position DESC LIMIT $1"),
    };
    let sql = format!("SELECT {COLUMNS} FROM runs WHERE {filter} ORDER BY {order}");
    crate::on_store!(store, |pool, backend| {
        let query = sqlx::query(&sql);
        let query = match which {
            Which::Running => query,
            Which::Run(id) | Which::Task(id) => query.bind(id),
            Which::Recent(limit) => query.bind(limit),
        };
        let rows = query.fetch_all(pool).await?;
        Ok(rows.iter().map(run_row).collect::<Result<_, _>>()?)
    })
}

/// The runs that ended on their provider's limit since `since` and that no later success of the same profile
/// has answered (a run of that profile that started after it and succeeded), newest first.
pub async fn unanswered_limits(
    store: &EventStore,
    since: DateTime<Utc>,
) -> Result<Vec<LimitedRun>, StoreError> {
    let sql = "SELECT r.profile, r.run_id, r.task_id, r.ended_at FROM runs r
        WHERE r.failure = 'limited' AND r.ended_at > $1 AND r.profile IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM runs s WHERE s.profile = r.profile AND s.state = 'succeeded'
                          AND s.started_at > r.ended_at)
        ORDER BY r.ended_at DESC";
    crate::on_store!(store, |pool, backend| {
        let rows = sqlx::query(sql).bind(since).fetch_all(pool).await?;
        Ok(rows
            .iter()
            .map(|row| {
                Ok(LimitedRun {
                    profile: row.try_get("profile")?,
                    run_id: row.try_get("run_id")?,
                    task_id: row.try_get("task_id")?,
                    ended_at: row.try_get("ended_at")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()?)
    })
}

/// A run that ended on its provider's limit (`unanswered_limits`).
#[derive(Clone, Debug)]
pub struct LimitedRun {
    pub profile: String,
    pub run_id: String,
    pub task_id: String,
    pub ended_at: DateTime<Utc>,
}
