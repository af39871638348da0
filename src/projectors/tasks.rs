//! The task board's read models, from the `task:<id>` streams: `tasks` (one row per task, filterable by column,
//! repo, source and needs-human) and `task_links` (external id -> task), written by one projector (one decode
//! and `evolve`, one checkpoint, so a task's row and its links never disagree).
//!
//! A task's timeline is not copied: it is the task's stream, read through the log's `(stream, stream_version)`
//! index up to the version the task's row is at (so it agrees with the row) and summarised as it is read. A copy
//! was a million rows per million events for each rebuild to write (docs/benchmarks.md, "Tasks rebuild").
//!
//! State between batches: `evolve` needs the task as it was. The projector keeps the tasks it last wrote in
//! memory, tagged with their stream version, and trusts an entry only when the stored row has that same version
//! (a rolled-back batch or another instance leaves a different one). Otherwise it replays the task's stream from
//! the log: `evolve` stays the only way a `Task` is built.
//!
//! Nothing is skipped: a task event whose body does not decode, whose type or version does not fit, or that
//! `evolve` refuses fails the batch, and the runtime stops at that event.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Mutex;

use anyhow::{anyhow, bail, Context};
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use sqlx::Row;

use super::{Bodies, Projector, ProjectorTx};
use crate::eventlog::{EventStore, StoreError, StoredEvent};
use crate::tasks::{
    evolve, Column, Links, Priority, RetryCause, Task, TaskError, TaskEvent, TaskId,
};

pub const NAME: &str = "tasks";
/// The source of task events in the log.
pub const SOURCE: &str = "pidevops";
/// A task's stream is `task:<TaskId>`.
pub const STREAM_PREFIX: &str = crate::tasks::values::TASK_STREAM_PREFIX;
/// Tasks kept in memory between batches; past this the cache starts over (a miss costs one stream replay).
const CACHE_CAP: usize = 200_000;

#[derive(Debug, Default)]
pub struct TasksProjector {
    cache: Mutex<HashMap<TaskId, (i64, Task)>>,
}

/// A kind of external link; the value formats are those of [`link_keys`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkKind {
    /// Value: the Linear issue's id (a UUID; the identifier changes when the issue moves team).
    LinearIssue,
    /// Value: `owner/name#12`.
    GithubIssue,
    /// Value: `owner/name#12`.
    GithubPr,
    /// Value: `<chat>:<message>`.
    TelegramMessage,
}

impl LinkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkKind::LinearIssue => "linear_issue",
            LinkKind::GithubIssue => "github_issue",
            LinkKind::GithubPr => "github_pr",
            LinkKind::TelegramMessage => "telegram_message",
        }
    }
}

/// The lookup keys of a set of links, as `task_links` stores them.
pub fn link_keys(links: &Links) -> Vec<(LinkKind, String)> {
    let mut keys = Vec::new();
    if let Some(issue) = &links.linear_issue {
        keys.push((LinkKind::LinearIssue, issue.id().to_string()));
    }
    if let Some(issue) = &links.github_issue {
        keys.push((LinkKind::GithubIssue, issue.to_string()));
    }
    if let Some(pr) = &links.github_pr {
        keys.push((LinkKind::GithubPr, pr.to_string()));
    }
    if let Some(message) = &links.telegram {
        keys.push((
            LinkKind::TelegramMessage,
            format!("{}:{}", message.chat(), message.message()),
        ));
    }
    keys
}

/// A row of `tasks`, as the API returns it.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct TaskRow {
    pub id: TaskId,
    pub number: i64,
    pub column: Column,
    pub title: String,
    pub repo: String,
    pub priority: Priority,
    pub needs_human: bool,
    pub needs_human_reason: Option<String>,
    pub attempts: i64,
    pub max_attempts: i64,
    /// Where the task came from: `linear`, `github`, `telegram` or `api`.
    pub source: String,
    pub links: Links,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The stream version and log position of the last event applied.
    pub version: i64,
    pub last_position: i64,
    /// The whole task (spec, runs, failures, follow-ups) as `Task` serialises.
    #[schema(value_type = crate::tasks::Task)]
    pub state: serde_json::Value,
}

/// One event of a task's timeline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TimelineEntry {
    pub position: i64,
    pub stream_version: i64,
    pub event_type: String,
    pub at: DateTime<Utc>,
    pub summary: String,
    pub cause_event_id: Option<String>,
    pub actor: Option<String>,
}

/// What `list` returns; every field narrows, `None` does not.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TaskFilter {
    pub column: Option<Column>,
    /// `owner/name`.
    pub repo: Option<String>,
    /// Where tasks came from: `linear`, `github`, `telegram` or `api`.
    pub source: Option<String>,
    pub needs_human: Option<bool>,
    /// At most this many tasks (1 to 1000); all when absent.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum TasksError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the tasks read model holds a bad row for {task}: {why}")]
    Corrupt { task: String, why: String },
}

impl From<sqlx::Error> for TasksError {
    fn from(e: sqlx::Error) -> Self {
        TasksError::Store(StoreError::Database(e))
    }
}

/// A task event as read from the log, checked against its envelope.
struct Decoded {
    position: i64,
    task: TaskId,
    version: i64,
    event: TaskEvent,
    actor: Option<String>,
}

/// Whether the runtime hands us this event as a task event.
fn is_task_event(event: &StoredEvent) -> bool {
    event.source == SOURCE
        && event
            .stream
            .as_deref()
            .is_some_and(|s| s.starts_with(STREAM_PREFIX))
}

fn decode(event: &StoredEvent) -> anyhow::Result<Decoded> {
    let stream = event.stream.as_deref().unwrap_or_default();
    let task = TaskId::from_str(&stream[STREAM_PREFIX.len()..])
        .with_context(|| format!("stream {stream:?} does not name a task"))?;
    let version = event
        .stream_version
        .ok_or_else(|| anyhow!("{stream} event has no stream version"))?;
    let decoded = decode_body(stream, &event.event_type, &event.body)?;
    Ok(Decoded {
        position: event.position,
        task,
        version,
        // Only a creation's actor is used (the task's source); meta is parsed only when read.
        actor: if matches!(decoded, TaskEvent::Created(_)) {
            event.meta.text("actor")
        } else {
            None
        },
        event: decoded,
    })
}

fn decode_body(stream: &str, event_type: &str, body: &[u8]) -> anyhow::Result<TaskEvent> {
    let event: TaskEvent = serde_json::from_slice(body)
        .with_context(|| format!("{stream}: the body of {event_type} is not a task event"))?;
    if event.kind() != event_type {
        bail!(
            "{stream}: event type {event_type} but the body is {}",
            event.kind()
        );
    }
    Ok(event)
}

/// Applies one decoded event to a task at `version`, checking the stream's order and the task's identity.
fn step(state: Option<Task>, version: i64, decoded: &Decoded) -> anyhow::Result<Task> {
    let Decoded {
        task, version: v, ..
    } = decoded;
    if *v != version + 1 {
        bail!("{task}: stream version {v} cannot follow {version}");
    }
    if let TaskEvent::Created(created) = &decoded.event {
        if created.id != *task {
            bail!("stream of {task} creates {}", created.id);
        }
    }
    evolve(state, &decoded.event).map_err(|e: TaskError| anyhow!(e))
}

/// One line a person can read: what happened.
pub fn summarize(event: &TaskEvent) -> String {
    match event {
        TaskEvent::Created(c) => format!("created in {}: {}", c.repo, c.spec.title()),
        TaskEvent::Approved { automatic, .. } => {
            if *automatic {
                "approved automatically".into()
            } else {
                "approved".into()
            }
        }
        TaskEvent::Rejected { reason, .. } => format!("rejected: {reason}"),
        TaskEvent::Started { attempt, run, .. } => format!("attempt {attempt} started (run {run})"),
        TaskEvent::SubmittedForReview { branch, pr, .. } => match pr {
            Some(pr) => format!("submitted for review: {} ({pr})", branch.as_str()),
            None => format!("submitted for review: {}", branch.as_str()),
        },
        TaskEvent::Completed { .. } => "completed".into(),
        TaskEvent::Retried {
            cause,
            reason,
            attempt,
            ..
        } => {
            let cause = match cause {
                RetryCause::RunFailed { .. } => "run failed",
                RetryCause::Interrupted { .. } => "interrupted",
                RetryCause::ChecksFailed => "checks failed",
                RetryCause::ChangesRequested => "changes requested",
            };
            format!("attempt {attempt} failed ({cause}): {reason}")
        }
        TaskEvent::Cancelled { reason, .. } => format!("cancelled: {reason}"),
        TaskEvent::Archived { .. } => "archived".into(),
        TaskEvent::FlaggedNeedsHuman { reason, .. } => format!("needs a human: {reason}"),
        TaskEvent::NeedsHumanCleared { max_attempts, .. } => format!(
            "needs-human cleared; budget {} attempts",
            max_attempts.get()
        ),
        TaskEvent::SpecUpdated { spec, .. } => format!("spec updated: {}", spec.title()),
        TaskEvent::FollowUpAttached { text, .. } => {
            format!("follow-up: {}", first_line(text.as_str()))
        }
        TaskEvent::PriorityChanged { priority, .. } => format!("priority {priority}"),
        TaskEvent::AttemptReturned { max_attempts, .. } => format!(
            "the interrupted attempt does not count; budget {} attempts",
            max_attempts.get()
        ),
        TaskEvent::AgentChosen { agent, .. } => match agent {
            Some(agent) => format!("agent profile {agent} chosen"),
            None => "agent profile back to the repository's".into(),
        },
        TaskEvent::LinksAttached { links, .. } => {
            let keys: Vec<String> = link_keys(links)
                .into_iter()
                .map(|(k, v)| format!("{} {v}", k.as_str()))
                .collect();
            format!("linked {}", keys.join(", "))
        }
    }
}

fn first_line(text: &str) -> String {
    const MAX: usize = 120;
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() > MAX {
        let cut: String = line.chars().take(MAX).collect();
        format!("{cut}…")
    } else {
        line.to_owned()
    }
}

/// The links an event brings, as lookup keys.
fn links_of(event: &TaskEvent) -> Vec<(LinkKind, String)> {
    match event {
        TaskEvent::Created(c) => link_keys(&c.links),
        TaskEvent::LinksAttached { links, .. } => link_keys(links),
        TaskEvent::SubmittedForReview { pr: Some(pr), .. } => {
            vec![(LinkKind::GithubPr, pr.to_string())]
        }
        _ => Vec::new(),
    }
}

/// Where a task came from: the creating actor when it names a channel, else its first link, else the API.
pub fn source_of(actor: Option<&str>, links: &Links) -> &'static str {
    match actor {
        Some("linear") => return "linear",
        Some("github") => return "github",
        Some("telegram") => return "telegram",
        Some("api") => return "api",
        _ => {}
    }
    if links.linear_issue.is_some() {
        "linear"
    } else if links.github_issue.is_some() {
        "github"
    } else if links.telegram.is_some() {
        "telegram"
    } else {
        "api"
    }
}

fn priority_rank(priority: Priority) -> i16 {
    match priority {
        Priority::Urgent => 0,
        Priority::High => 1,
        Priority::Normal => 2,
        Priority::Low => 3,
    }
}

/// A task's row as written: everything but `source` (fixed at creation) comes from the state.
struct Write {
    task: Task,
    version: i64,
    last_position: i64,
    /// Set when this batch created the task.
    source: Option<&'static str>,
}

struct LinkWrite {
    kind: LinkKind,
    value: String,
    task: TaskId,
    position: i64,
}

/// What a batch writes, folded in memory: one row per task however many of its events the batch holds.
#[derive(Default)]
struct BatchWrites {
    tasks: Vec<Write>,
    links: Vec<LinkWrite>,
}

impl Projector for TasksProjector {
    fn name(&self) -> &'static str {
        NAME
    }

    /// 2: the stored state carries the ticket version (`ticket_version`).
    fn version(&self) -> i64 {
        2
    }

    fn bodies(&self) -> Bodies {
        Bodies::Streams {
            source: SOURCE,
            stream_prefix: STREAM_PREFIX,
        }
    }

    fn reset<'a>(&'a self, tx: &'a mut ProjectorTx) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            match tx {
                // TRUNCATE: a rebuild empties the tables in no time, where DELETE would visit each row.
                ProjectorTx::Postgres(tx) => {
                    sqlx::query("TRUNCATE tasks, task_links")
                        .execute(&mut **tx)
                        .await?;
                }
                ProjectorTx::Sqlite(tx) => {
                    for table in ["tasks", "task_links"] {
                        sqlx::query(&format!("DELETE FROM {table}"))
                            .execute(&mut **tx)
                            .await?;
                    }
                }
            }
            Ok(())
        })
    }

    fn apply<'a>(
        &'a self,
        tx: &'a mut ProjectorTx,
        events: &'a [StoredEvent],
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move { self.apply_decoded(tx, decode_all(events)).await })
    }

    /// Decoding bodies is a fifth of applying a batch; `replay` does it on the page it reads ahead.
    fn prepare(&self, events: &[StoredEvent]) -> Option<super::Prepared> {
        Some(Box::new(decode_all(events)))
    }

    fn apply_prepared<'a>(
        &'a self,
        tx: &'a mut ProjectorTx,
        events: &'a [StoredEvent],
        prepared: super::Prepared,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let decoded = match prepared.downcast::<Vec<anyhow::Result<Decoded>>>() {
                Ok(decoded) => *decoded,
                // Not ours (cannot happen: only `prepare` above makes these); decode again.
                Err(_) => decode_all(events),
            };
            self.apply_decoded(tx, decoded).await
        })
    }
}

/// The task events of a page, decoded, each with its own result (the first error fails the batch there).
fn decode_all(events: &[StoredEvent]) -> Vec<anyhow::Result<Decoded>> {
    events
        .iter()
        .filter(|e| is_task_event(e))
        .map(|e| decode(e).with_context(|| format!("event at position {}", e.position)))
        .collect()
}

impl TasksProjector {
    async fn apply_decoded(
        &self,
        tx: &mut ProjectorTx,
        decoded: Vec<anyhow::Result<Decoded>>,
    ) -> anyhow::Result<()> {
        let decoded = decoded.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
        let Some(first) = decoded.first() else {
            return Ok(());
        };
        let before = first.position;
        // Touched tasks in first-seen order, so rows are written in a stable order.
        let mut order: Vec<TaskId> = Vec::new();
        let mut seen: HashMap<TaskId, usize> = HashMap::new();
        for d in &decoded {
            seen.entry(d.task).or_insert_with(|| {
                order.push(d.task);
                order.len() - 1
            });
        }
        let stored = stored_versions(tx, &order).await?;
        let mut states: HashMap<TaskId, (i64, Option<Task>)> = HashMap::new();
        let mut misses: Vec<(TaskId, i64)> = Vec::new();
        {
            let mut cache = self
                .cache
                .lock()
                .map_err(|_| anyhow!("the task cache lock is poisoned"))?;
            for id in &order {
                match stored.get(id) {
                    None => {
                        states.insert(*id, (0, None));
                    }
                    Some(&version) => match cache.remove(id) {
                        Some((v, task)) if v == version => {
                            states.insert(*id, (version, Some(task)));
                        }
                        _ => misses.push((*id, version)),
                    },
                }
            }
        }
        if !misses.is_empty() {
            for (id, version, task) in replay_streams(tx, &misses, before).await? {
                states.insert(id, (version, Some(task)));
            }
        }

        let mut writes = BatchWrites::default();
        let mut sources: HashMap<TaskId, &'static str> = HashMap::new();
        let mut last_positions: HashMap<TaskId, i64> = HashMap::new();
        for d in &decoded {
            let (version, state) = states
                .remove(&d.task)
                .ok_or_else(|| anyhow!("{}: no state loaded", d.task))?;
            let task = step(state, version, d)
                .with_context(|| format!("event at position {}", d.position))?;
            if let TaskEvent::Created(created) = &d.event {
                sources.insert(d.task, source_of(d.actor.as_deref(), &created.links));
            }
            for (kind, value) in links_of(&d.event) {
                writes.links.push(LinkWrite {
                    kind,
                    value,
                    task: d.task,
                    position: d.position,
                });
            }
            last_positions.insert(d.task, d.position);
            states.insert(d.task, (d.version, Some(task)));
        }
        for id in &order {
            if let Some((version, Some(task))) = states.remove(id) {
                writes.tasks.push(Write {
                    task,
                    version,
                    last_position: last_positions.get(id).copied().unwrap_or_default(),
                    source: sources.get(id).copied(),
                });
            }
        }
        write(tx, &writes).await?;
        let mut cache = self
            .cache
            .lock()
            .map_err(|_| anyhow!("the task cache lock is poisoned"))?;
        if cache.len() + writes.tasks.len() > CACHE_CAP {
            cache.clear();
        }
        for w in writes.tasks {
            cache.insert(w.task.id(), (w.version, w.task));
        }
        Ok(())
    }
}

/// The stored stream version of each task that has a row.
async fn stored_versions(
    tx: &mut ProjectorTx,
    ids: &[TaskId],
) -> anyhow::Result<HashMap<TaskId, i64>> {
    let mut out = HashMap::new();
    match tx {
        ProjectorTx::Postgres(tx) => {
            let keys: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
            let rows: Vec<(String, i64)> =
                sqlx::query_as("SELECT task_id, version FROM tasks WHERE task_id = ANY($1)")
                    .bind(&keys)
                    .fetch_all(&mut **tx)
                    .await?;
            for (id, version) in rows {
                out.insert(TaskId::from_str(&id)?, version);
            }
        }
        ProjectorTx::Sqlite(tx) => {
            for id in ids {
                let version: Option<i64> =
                    sqlx::query_scalar("SELECT version FROM tasks WHERE task_id = ?1")
                        .bind(id.to_string())
                        .fetch_optional(&mut **tx)
                        .await?;
                if let Some(version) = version {
                    out.insert(*id, version);
                }
            }
        }
    }
    Ok(out)
}

/// Rebuilds tasks from their streams in the log (events before position `before`), checking each reaches the
/// version its row says.
async fn replay_streams(
    tx: &mut ProjectorTx,
    tasks: &[(TaskId, i64)],
    before: i64,
) -> anyhow::Result<Vec<(TaskId, i64, Task)>> {
    let streams: Vec<String> = tasks.iter().map(|(id, _)| id.stream()).collect();
    let rows: Vec<(String, i64, i64, String, Vec<u8>)> = match tx {
        ProjectorTx::Postgres(tx) => {
            sqlx::query_as(
                "SELECT stream, stream_version, position, event_type, body FROM events
                 WHERE stream = ANY($1) AND source = $2 AND position < $3
                 ORDER BY stream, stream_version",
            )
            .bind(&streams)
            .bind(SOURCE)
            .bind(before)
            .fetch_all(&mut **tx)
            .await?
        }
        ProjectorTx::Sqlite(tx) => {
            let mut rows = Vec::new();
            for stream in &streams {
                let mut some: Vec<(String, i64, i64, String, Vec<u8>)> = sqlx::query_as(
                    "SELECT stream, stream_version, position, event_type, body FROM events
                     WHERE stream = ?1 AND source = ?2 AND position < ?3
                     ORDER BY stream_version",
                )
                .bind(stream)
                .bind(SOURCE)
                .bind(before)
                .fetch_all(&mut **tx)
                .await?;
                rows.append(&mut some);
            }
            rows
        }
    };
    let mut states: HashMap<TaskId, (i64, Option<Task>)> =
        tasks.iter().map(|(id, _)| (*id, (0, None))).collect();
    for (stream, version, position, event_type, body) in rows {
        let task = TaskId::from_str(&stream[STREAM_PREFIX.len()..])?;
        let d = Decoded {
            position,
            task,
            version,
            event: decode_body(&stream, &event_type, &body)
                .with_context(|| format!("replaying event at position {position}"))?,
            actor: None,
        };
        let (at, state) = states.remove(&task).unwrap_or((0, None));
        let next = step(state, at, &d)
            .with_context(|| format!("replaying event at position {position}"))?;
        states.insert(task, (version, Some(next)));
    }
    tasks
        .iter()
        .map(|(id, expected)| match states.remove(id) {
            Some((version, Some(task))) if version == *expected => Ok((*id, version, task)),
            Some((version, _)) => Err(anyhow!(
                "{id}: its row is at version {expected} but the log holds {version} events before position {before}"
            )),
            None => Err(anyhow!("{id}: not replayed")),
        })
        .collect()
}

async fn write(tx: &mut ProjectorTx, w: &BatchWrites) -> anyhow::Result<()> {
    match tx {
        ProjectorTx::Postgres(tx) => write_postgres(tx, w).await,
        ProjectorTx::Sqlite(tx) => write_sqlite(tx, w).await,
    }
}

/// The columns of a task row that come from its state.
struct RowValues {
    id: String,
    number: i64,
    column: &'static str,
    title: String,
    repo: String,
    priority: &'static str,
    rank: i16,
    needs_human: bool,
    reason: Option<String>,
    attempts: i64,
    max_attempts: i64,
    links: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    state: String,
}

fn row_values(task: &Task) -> anyhow::Result<RowValues> {
    Ok(RowValues {
        id: task.id().to_string(),
        number: i64::try_from(task.id().number()).context("task number out of range")?,
        column: task.column().as_str(),
        title: task.title(),
        repo: task.repo().as_str().to_owned(),
        priority: task.priority().as_str(),
        rank: priority_rank(task.priority()),
        needs_human: task.needs_human().is_some(),
        reason: task.needs_human().map(|n| n.reason.as_str().to_owned()),
        attempts: i64::from(task.attempts()),
        max_attempts: i64::from(task.max_attempts().get()),
        links: serde_json::to_string(task.links())?,
        created_at: task.created_at(),
        updated_at: task.updated_at(),
        state: serde_json::to_string(task)?,
    })
}

/// `source`, `number` and `created_at` are fixed at creation, so an update leaves them.
const UPSERT_SET: &str = "ON CONFLICT (task_id) DO UPDATE SET
    board_column = excluded.board_column, title = excluded.title, repo = excluded.repo,
    priority = excluded.priority, priority_rank = excluded.priority_rank, needs_human = excluded.needs_human,
    needs_human_reason = excluded.needs_human_reason, attempts = excluded.attempts,
    max_attempts = excluded.max_attempts, links = excluded.links, updated_at = excluded.updated_at,
    version = excluded.version, last_position = excluded.last_position, state = excluded.state";

/// Three statements per batch whatever its size: arrays in, `unnest` out.
async fn write_postgres(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    w: &BatchWrites,
) -> anyhow::Result<()> {
    if !w.tasks.is_empty() {
        let n = w.tasks.len();
        let mut id = Vec::with_capacity(n);
        let mut number = Vec::with_capacity(n);
        let mut column = Vec::with_capacity(n);
        let mut title = Vec::with_capacity(n);
        let mut repo = Vec::with_capacity(n);
        let mut priority = Vec::with_capacity(n);
        let mut rank = Vec::with_capacity(n);
        let mut needs_human = Vec::with_capacity(n);
        let mut reason = Vec::with_capacity(n);
        let mut attempts = Vec::with_capacity(n);
        let mut max_attempts = Vec::with_capacity(n);
        let mut source = Vec::with_capacity(n);
        let mut links = Vec::with_capacity(n);
        let mut created_at = Vec::with_capacity(n);
        let mut updated_at = Vec::with_capacity(n);
        let mut version = Vec::with_capacity(n);
        let mut last_position = Vec::with_capacity(n);
        let mut state = Vec::with_capacity(n);
        for t in &w.tasks {
            let r = row_values(&t.task)?;
            id.push(r.id);
            number.push(r.number);
            column.push(r.column);
            title.push(r.title);
            repo.push(r.repo);
            priority.push(r.priority);
            rank.push(r.rank);
            needs_human.push(r.needs_human);
            reason.push(r.reason);
            attempts.push(r.attempts);
            max_attempts.push(r.max_attempts);
            // An update never writes it (UPSERT_SET); a new row always has it.
            source.push(t.source.unwrap_or("api"));
            links.push(r.links);
            created_at.push(r.created_at);
            updated_at.push(r.updated_at);
            version.push(t.version);
            last_position.push(t.last_position);
            state.push(r.state);
        }
        sqlx::query(&format!(
            "INSERT INTO tasks (task_id, number, board_column, title, repo, priority, priority_rank,
                needs_human, needs_human_reason, attempts, max_attempts, source, links, created_at,
                updated_at, version, last_position, state)
             SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::text[], $5::text[], $6::text[],
                $7::int2[], $8::bool[], $9::text[], $10::int8[], $11::int8[], $12::text[], $13::text[],
                $14::timestamptz[], $15::timestamptz[], $16::int8[], $17::int8[], $18::text[])
             {UPSERT_SET}"
        ))
        .bind(id)
        .bind(number)
        .bind(column)
        .bind(title)
        .bind(repo)
        .bind(priority)
        .bind(rank)
        .bind(needs_human)
        .bind(reason)
        .bind(attempts)
        .bind(max_attempts)
        .bind(source)
        .bind(links)
        .bind(created_at)
        .bind(updated_at)
        .bind(version)
        .bind(last_position)
        .bind(state)
        .execute(&mut **tx)
        .await
        .context("writing tasks")?;
    }
    if !w.links.is_empty() {
        let n = w.links.len();
        let mut kind = Vec::with_capacity(n);
        let mut value = Vec::with_capacity(n);
        let mut task = Vec::with_capacity(n);
        let mut position = Vec::with_capacity(n);
        // A value may repeat within a batch (one INSERT cannot touch a row twice): links are in log order, so
        // the first one seen is its first claim, which ON CONFLICT keeps across batches too.
        let mut seen = std::collections::HashSet::with_capacity(n);
        for l in w
            .links
            .iter()
            .filter(|l| seen.insert((l.kind, l.value.as_str())))
        {
            kind.push(l.kind.as_str());
            value.push(l.value.as_str());
            task.push(l.task.to_string());
            position.push(l.position);
        }
        sqlx::query(
            "INSERT INTO task_links (kind, value, task_id, position)
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[])
             ON CONFLICT (kind, value) DO NOTHING",
        )
        .bind(kind)
        .bind(value)
        .bind(task)
        .bind(position)
        .execute(&mut **tx)
        .await
        .context("writing links")?;
    }
    Ok(())
}

async fn write_sqlite(
    tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
    w: &BatchWrites,
) -> anyhow::Result<()> {
    let upsert = format!(
        "INSERT INTO tasks (task_id, number, board_column, title, repo, priority, priority_rank,
            needs_human, needs_human_reason, attempts, max_attempts, source, links, created_at,
            updated_at, version, last_position, state)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)
         {UPSERT_SET}"
    );
    for t in &w.tasks {
        let r = row_values(&t.task)?;
        sqlx::query(&upsert)
            .bind(r.id)
            .bind(r.number)
            .bind(r.column)
            .bind(r.title)
            .bind(r.repo)
            .bind(r.priority)
            .bind(r.rank)
            .bind(r.needs_human)
            .bind(r.reason)
            .bind(r.attempts)
            .bind(r.max_attempts)
            .bind(t.source.unwrap_or("api"))
            .bind(r.links)
            .bind(r.created_at)
            .bind(r.updated_at)
            .bind(t.version)
            .bind(t.last_position)
            .bind(r.state)
            .execute(&mut **tx)
            .await
            .context("writing tasks")?;
    }
    for l in &w.links {
        sqlx::query(
            "INSERT INTO task_links (kind, value, task_id, position) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (kind, value) DO NOTHING",
        )
        .bind(l.kind.as_str())
        .bind(&l.value)
        .bind(l.task.to_string())
        .bind(l.position)
        .execute(&mut **tx)
        .await
        .context("writing links")?;
    }
    Ok(())
}

const ROW_COLUMNS: &str = "task_id, number, board_column, title, repo, priority, needs_human,
    needs_human_reason, attempts, max_attempts, source, links, created_at, updated_at, version, last_position,
    state";

fn task_row<R>(row: &R) -> Result<TaskRow, TasksError>
where
    R: Row,
    for<'r> &'r str: sqlx::ColumnIndex<R>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<String>: sqlx::Decode<'r, R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> bool: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> DateTime<Utc>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let id: String = row.try_get("task_id")?;
    let corrupt = |why: String| TasksError::Corrupt {
        task: id.clone(),
        why,
    };
    let column: String = row.try_get("board_column")?;
    let priority: String = row.try_get("priority")?;
    let links: String = row.try_get("links")?;
    let state: String = row.try_get("state")?;
    Ok(TaskRow {
        id: TaskId::from_str(&id).map_err(|e| corrupt(e.to_string()))?,
        number: row.try_get("number")?,
        column: Column::from_str(&column).map_err(|e| corrupt(e.to_string()))?,
        title: row.try_get("title")?,
        repo: row.try_get("repo")?,
        priority: Priority::from_str(&priority).map_err(|e| corrupt(e.to_string()))?,
        needs_human: row.try_get("needs_human")?,
        needs_human_reason: row.try_get("needs_human_reason")?,
        attempts: row.try_get("attempts")?,
        max_attempts: row.try_get("max_attempts")?,
        source: row.try_get("source")?,
        links: serde_json::from_str(&links).map_err(|e| corrupt(e.to_string()))?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        version: row.try_get("version")?,
        last_position: row.try_get("last_position")?,
        state: serde_json::from_str(&state).map_err(|e| corrupt(e.to_string()))?,
    })
}

/// Tasks matching `filter`, most urgent first, then oldest first.
pub async fn list(store: &EventStore, filter: &TaskFilter) -> Result<Vec<TaskRow>, TasksError> {
    let column = filter.column.map(|c| c.as_str());
    // CAST(... AS text) rather than `$1::text`: the one spelling both accept, so a NULL filter matches all.
    let sql = format!(
        "SELECT {ROW_COLUMNS} FROM tasks
         WHERE (CAST($1 AS text) IS NULL OR board_column = $1) AND (CAST($2 AS text) IS NULL OR repo = $2)
           AND (CAST($3 AS text) IS NULL OR source = $3) AND (CAST($4 AS boolean) IS NULL OR needs_human = $4)
         ORDER BY priority_rank, created_at, number {}",
        if filter.limit.is_some() { "LIMIT $5" } else { "" }
    );
    crate::on_store!(store, |pool, backend| {
        let query = sqlx::query(&sql)
            .bind(column)
            .bind(&filter.repo)
            .bind(&filter.source)
            .bind(filter.needs_human);
        let query = match filter.limit {
            Some(limit) => query.bind(i64::from(limit)),
            None => query,
        };
        query.fetch_all(pool).await?.iter().map(task_row).collect()
    })
}

/// How many tasks each column holds under `filter` (its `column` and `limit` ignored): one grouped query, for the
/// dashboard's column headers.
pub async fn counts(
    store: &EventStore,
    filter: &TaskFilter,
) -> Result<std::collections::BTreeMap<Column, usize>, TasksError> {
    let rows: Vec<(String, i64)> = crate::on_store!(store, |pool, backend| {
        sqlx::query_as(
            "SELECT board_column, COUNT(*) FROM tasks
             WHERE (CAST($1 AS text) IS NULL OR repo = $1) AND (CAST($2 AS text) IS NULL OR source = $2)
               AND (CAST($3 AS boolean) IS NULL OR needs_human = $3)
             GROUP BY board_column",
        )
        .bind(&filter.repo)
        .bind(&filter.source)
        .bind(filter.needs_human)
        .fetch_all(pool)
        .await?
    });
    rows.into_iter()
        .map(|(column, n)| {
            let column = Column::ALL
                .into_iter()
                .find(|c| c.as_str() == column)
                .ok_or_else(|| TasksError::Corrupt {
                    task: "?".to_owned(),
                    why: format!("unknown column {column:?}"),
                })?;
            Ok((column, usize::try_from(n).unwrap_or(0)))
        })
        .collect()
}

/// The repositories that have tasks, sorted.
pub async fn repos(store: &EventStore) -> Result<Vec<String>, TasksError> {
    let sql = "SELECT DISTINCT repo FROM tasks ORDER BY repo";
    Ok(crate::on_store!(store, |pool, backend| sqlx::query_scalar(
        sql
    )
    .fetch_all(pool)
    .await?))
}

/// One task's row.
pub async fn get(store: &EventStore, id: TaskId) -> Result<Option<TaskRow>, TasksError> {
    let sql = format!("SELECT {ROW_COLUMNS} FROM tasks WHERE task_id = $1");
    let row = crate::on_store!(store, |pool, backend| sqlx::query(&sql)
        .bind(id.to_string())
        .fetch_optional(pool)
        .await?
        .map(|r| task_row(&r)));
    row.transpose()
}

/// Every event of a task, in log order, up to the version its row is at (so the timeline and the row agree);
/// empty for a task without a row. Read from the task's stream in the log, summarised here.
pub async fn timeline(store: &EventStore, id: TaskId) -> Result<Vec<TimelineEntry>, TasksError> {
    let Some(row) = get(store, id).await? else {
        return Ok(Vec::new());
    };
    store
        .read_stream(&id.stream())
        .await?
        .iter()
        .take_while(|e| e.stream_version.is_some_and(|v| v <= row.version))
        .map(|e| {
            timeline_entry(e).map_err(|e| TasksError::Corrupt {
                task: id.to_string(),
                why: format!("{e:#}"),
            })
        })
        .collect()
}

/// One task event as a timeline entry: what happened, when, who did it and what caused it.
pub fn timeline_entry(event: &StoredEvent) -> anyhow::Result<TimelineEntry> {
    let stream = event.stream.as_deref().unwrap_or_default();
    let stream_version = event
        .stream_version
        .ok_or_else(|| anyhow!("event at position {} is in no stream", event.position))?;
    let decoded = decode_body(stream, &event.event_type, &event.body)
        .with_context(|| format!("event at position {}", event.position))?;
    Ok(TimelineEntry {
        position: event.position,
        stream_version,
        event_type: event.event_type.clone(),
        at: decoded.at(),
        summary: summarize(&decoded),
        cause_event_id: event.meta.text("cause_event_id"),
        actor: event.meta.text("actor"),
    })
}

/// The task an external id belongs to (the first task that claimed it).
pub async fn task_for_link(
    store: &EventStore,
    kind: LinkKind,
    value: &str,
) -> Result<Option<TaskId>, TasksError> {
    let id: Option<String> = match store {
        EventStore::Postgres(s) => {
            sqlx::query_scalar("SELECT task_id FROM task_links WHERE kind = $1 AND value = $2")
                .bind(kind.as_str())
                .bind(value)
                .fetch_optional(s.pool())
                .await?
        }
        EventStore::Sqlite(s) => {
            sqlx::query_scalar("SELECT task_id FROM task_links WHERE kind = ?1 AND value = ?2")
                .bind(kind.as_str())
                .bind(value)
                .fetch_optional(s.pool())
                .await?
        }
    };
    id.map(|id| {
        TaskId::from_str(&id).map_err(|e| TasksError::Corrupt {
            task: id.clone(),
            why: e.to_string(),
        })
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::{GithubRef, LinearIssue, RepoName, TelegramMessage};

    #[test]
    fn link_keys_are_stable_strings() {
        let repo: RepoName = "acme/api".parse().unwrap();
        let id = uuid::Uuid::nil();
        let links = Links {
            linear_issue: Some(LinearIssue::new(id, "ENG-1").unwrap()),
            github_issue: Some(GithubRef::new(repo.clone(), 7).unwrap()),
            github_pr: Some(GithubRef::new(repo, 9).unwrap()),
            telegram: Some(TelegramMessage::new(-100, 5).unwrap()),
        };
        let keys: Vec<(&str, String)> = link_keys(&links)
            .into_iter()
            .map(|(k, v)| (k.as_str(), v))
            .collect();
        assert_eq!(
            keys,
            vec![
                ("linear_issue", id.to_string()),
                ("github_issue", "acme/api#7".into()),
                ("github_pr", "acme/api#9".into()),
                ("telegram_message", "-100:5".into()),
            ]
        );
    }

    #[test]
    fn the_source_is_the_creating_channel_else_the_first_link() {
        let mut links = Links::default();
        assert_eq!(source_of(None, &links), "api");
        assert_eq!(source_of(Some("cli"), &links), "api");
        links.telegram = Some(TelegramMessage::new(1, 1).unwrap());
        assert_eq!(source_of(None, &links), "telegram");
        assert_eq!(source_of(Some("github"), &links), "github");
    }

    #[test]
    fn priority_rank_sorts_urgent_first() {
        let mut all = Priority::ALL;
        all.sort_by_key(|p| priority_rank(*p));
        assert_eq!(
            all,
            [
                Priority::Urgent,
                Priority::High,
                Priority::Normal,
                Priority::Low
            ]
        );
    }
}
