//! The task board's read models, from the `task:<id>` streams: `tasks` (one row per task, filterable by column,
//! repo, source and needs-human), `task_links` (external id -> task) and `task_merges` (each task whose pull
//! request was merged, with the day: what the spend page's cost per merged pull request counts), written by one
//! projector (one decode and `evolve`, one checkpoint, so a task's row, its links and its merge never disagree).
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
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, Context};
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

mod behind;
mod copy;
mod fold;
mod read;
pub mod receipt;
mod summary;
mod write;

pub use behind::{due_key_parts, BASE_MOVED, REFRESH_BASE_MOVED, REFRESH_CURRENT, REFRESH_DUE};
pub use read::{
    counts, get, get_many, list, merged_by_profile, merged_pull_requests, repos, task_for_link,
    timeline, timeline_entry,
};
use summary::links_of;
pub use summary::{source_of, summarize};
use write::write;

use super::{Bodies, Projector, ProjectorTx};
use crate::eventlog::{sql, StoreError, StoredEvent};
use crate::tasks::{
    evolve, Column, GithubRef, Links, Priority, Task, TaskError, TaskEvent, TaskId, GITHUB_ISSUE,
    GITHUB_PR, GITLAB_MR, LINEAR_ISSUE, TELEGRAM,
};

pub const NAME: &str = "tasks";
/// The source of task events in the log.
pub const SOURCE: &str = "pidevops";
/// A task's stream is `task:<TaskId>`.
pub const STREAM_PREFIX: &str = crate::tasks::values::TASK_STREAM_PREFIX;
/// The bodies of task events only: what a reader that acts on task events alone (this projector, the plans
/// loops) asks the log for, so webhook bodies are never shipped to it.
pub const TASK_EVENT_BODIES: Bodies = Bodies::Streams {
    source: SOURCE,
    stream_prefix: STREAM_PREFIX,
};
/// Tasks kept in memory between batches; past this the cache starts over (a miss costs one stream replay).
const CACHE_CAP: usize = 200_000;

/// The tasks a rebuild's fold holds in memory at most before it writes them (`fold.rs`): the cache's cap, the memory
/// the projector allows itself already.
const FOLD_CAP: usize = CACHE_CAP;

/// Tasks by id, each with the stream version it is at.
type Cache = Arc<Mutex<HashMap<TaskId, (i64, Task)>>>;

#[derive(Debug)]
pub struct TasksProjector {
    cache: Cache,
    fold_cap: usize,
}

impl Default for TasksProjector {
    fn default() -> Self {
        Self {
            cache: Cache::default(),
            fold_cap: FOLD_CAP,
        }
    }
}

impl TasksProjector {
    /// A rebuild folds at most `tasks` tasks in memory, writes them, and goes on batch by batch (tests).
    pub fn with_fold_cap(tasks: usize) -> Self {
        Self {
            fold_cap: tasks.max(1),
            ..Self::default()
        }
    }
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
    /// Value: `group/sub/name#7` (the merge request's iid, written as the pull request's number is).
    GitlabMr,
}

impl LinkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkKind::LinearIssue => "linear_issue",
            LinkKind::GithubIssue => "github_issue",
            LinkKind::GithubPr => "github_pr",
            LinkKind::TelegramMessage => "telegram_message",
            LinkKind::GitlabMr => "gitlab_mr",
        }
    }
}

/// The lookup keys of a set of links, as `task_links` stores them.
pub fn link_keys(links: &Links) -> Vec<(LinkKind, String)> {
    let mut keys = Vec::new();
    if let Some(issue) = links.get(LINEAR_ISSUE) {
        keys.push((LinkKind::LinearIssue, issue.id().to_string()));
    }
    if let Some(issue) = links.get(GITHUB_ISSUE) {
        keys.push((LinkKind::GithubIssue, issue.to_string()));
    }
    if let Some(pr) = links.get(GITHUB_PR) {
        keys.push((LinkKind::GithubPr, pr.to_string()));
    }
    if let Some(mr) = links.get(GITLAB_MR) {
        keys.push((LinkKind::GitlabMr, format!("{}#{}", mr.project, mr.iid)));
    }
    if let Some(message) = links.get(TELEGRAM) {
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
    /// In review, its review request found by its host `behind` its base or `dirty` (in conflict with it) since
    /// its last push (`refresh.due`), or `base_moved`: its base was pushed to and its refresh is still to come
    /// (`refresh.base_moved`); cleared by its next refresh or submission, or by its branch found current.
    pub behind: Option<String>,
}

/// What the row's `state` says of the task's family: read from the state as stored, so a page or the dispatcher
/// needs no replay. A value the state does not hold (an older row, another kind) reads as none.
impl TaskRow {
    fn ids_at(&self, pointer: &str) -> Vec<TaskId> {
        self.state
            .pointer(pointer)
            .and_then(|ids| ids.as_array())
            .map(|ids| {
                ids.iter()
                    .filter_map(|id| id.as_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether the board marks it behind its base: in review and [`TaskRow::behind`].
    pub fn is_behind(&self) -> bool {
        self.column == Column::InReview && self.behind.is_some()
    }

    /// When its review went stale (`task.went_stale`), until its next push (a submission or a refresh).
    pub fn stale_since(&self) -> Option<DateTime<Utc>> {
        self.state.get("stale_since")?.as_str()?.parse().ok()
    }

    /// The tasks that must be done before this one may start.
    pub fn depends_on(&self) -> Vec<TaskId> {
        self.ids_at("/depends_on")
    }

    /// The plan this task is an item of.
    pub fn parent(&self) -> Option<TaskId> {
        self.state.get("parent")?.as_str()?.parse().ok()
    }

    pub fn is_plan(&self) -> bool {
        self.state.get("kind").and_then(|k| k.as_str()) == Some("plan")
    }

    /// A plan's items, in the plan's order (none before it is approved).
    pub fn children(&self) -> Vec<TaskId> {
        self.ids_at("/plan/children")
    }

    /// Whether a plan's proposal waits for a person.
    pub fn has_proposal(&self) -> bool {
        self.state
            .pointer("/plan/proposal")
            .is_some_and(|p| !p.is_null())
    }

    /// Done as a dependency counts it: in `done`, or archived after it was done (a cancelled one kept its reason).
    pub fn is_done(&self) -> bool {
        match self.column {
            Column::Done => true,
            Column::Archived => self.state.get("closed_reason").is_none_or(|r| r.is_null()),
            _ => false,
        }
    }
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

/// The longest search (`TaskFilter::q`) taken, in characters.
pub const MAX_SEARCH: usize = 200;

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
    /// Text in the title or the spec (task, scope, done when), ignoring case; at most 200 characters.
    #[param(max_length = 200)]
    pub q: Option<String>,
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
    TaskEvent::from_stored(event_type, body).with_context(|| stream.to_owned())
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

/// Applies one event to its task (`step`), adding the links and the merge it brings to `writes`, and returns the
/// task and, for a creation, its source. The one place an event is applied: by a batch (`apply_decoded`) and by a
/// rebuild's fold (`fold.rs`) alike.
fn apply_event(
    state: Option<Task>,
    version: i64,
    d: &Decoded,
    writes: &mut BatchWrites,
) -> anyhow::Result<(Task, Option<&'static str>)> {
    let task =
        step(state, version, d).with_context(|| format!("event at position {}", d.position))?;
    for (kind, value) in links_of(&d.event) {
        writes.links.push(LinkWrite {
            kind,
            value,
            task: d.task,
            position: d.position,
        });
    }
    if let TaskEvent::Completed { at } = &d.event {
        writes.merges.push(MergeWrite {
            task: d.task,
            repo: task.repo().as_str().to_owned(),
            pull_request: merged_pull_request(
                task.links().get(GITHUB_PR).as_ref(),
                task.parent(),
                task.id(),
            ),
            at: *at,
        });
    }
    let source = if let TaskEvent::Created(created) = &d.event {
        Some(source_of(d.actor.as_deref(), &created.links))
    } else {
        None
    };
    Ok((task, source))
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

/// A task completed: its pull request (or its combined plan's) was merged.
struct MergeWrite {
    task: TaskId,
    repo: String,
    pull_request: String,
    at: DateTime<Utc>,
}

/// What `task_merges` records as the pull request a completed task was merged by: its own (`owner/name#12`), else,
/// for an item of a plan (a combined plan's items open none: the plan's one pull request completes them all),
/// `plan:<plan>`, so that pull request counts once; else the task itself (merged before its link was recorded).
pub fn merged_pull_request(own: Option<&GithubRef>, plan: Option<TaskId>, task: TaskId) -> String {
    match (own, plan) {
        (Some(pr), _) => pr.to_string(),
        (None, Some(plan)) => format!("plan:{plan}"),
        (None, None) => format!("task:{task}"),
    }
}

/// What a batch writes, folded in memory: one row per task however many of its events the batch holds.
#[derive(Default)]
struct BatchWrites {
    tasks: Vec<Write>,
    links: Vec<LinkWrite>,
    merges: Vec<MergeWrite>,
}

impl Projector for TasksProjector {
    fn name(&self) -> &'static str {
        NAME
    }

    /// 2: the stored state carries the ticket version (`ticket_version`). 3: `task_merges`. 4: `search_text`.
    fn version(&self) -> i64 {
        // 5: a stale review's `stale_since` is in the row's state. 6: `behind` (`refresh.due`). 7: `behind`
        // cleared by `refresh.current`. 8: `behind` = `base_moved` (`refresh.base_moved`) while a base push's
        // refresh is to come.
        8
    }

    fn bodies(&self) -> Bodies {
        TASK_EVENT_BODIES
    }

    fn reset<'a>(&'a self, tx: &'a mut ProjectorTx) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            super::empty_tables(tx, &["tasks", "task_links", "task_merges"]).await?;
            Ok(())
        })
    }

    fn apply<'a>(
        &'a self,
        tx: &'a mut ProjectorTx,
        events: &'a [StoredEvent],
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            self.apply_decoded(tx, decode_all(events)).await?;
            behind::write(tx, &behind::marks(events)).await
        })
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
            self.apply_decoded(tx, decoded).await?;
            behind::write(tx, &behind::marks(events)).await
        })
    }

    /// A rebuild folds every task in memory and writes each row once (`fold.rs`).
    fn fold(&self) -> Option<Box<dyn super::Fold>> {
        Some(Box::new(fold::TaskFold::new(
            self.cache.clone(),
            self.fold_cap,
        )))
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
            let (task, source) = apply_event(state, version, d, &mut writes)?;
            if let Some(source) = source {
                sources.insert(d.task, source);
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
    let keys: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
    for chunk in keys.chunks(sql::MAX_PARAMS) {
        let statement = format!(
            "SELECT task_id, version FROM tasks WHERE task_id IN ({})",
            sql::list(1, chunk.len())
        );
        let rows: Vec<(String, i64)> = on_tx!(tx, sql = statement, |conn| {
            let mut query = sqlx::query_as(&statement).persistent(false);
            for key in chunk {
                query = query.bind(key.as_str());
            }
            query.fetch_all(conn).await
        })?;
        for (id, version) in rows {
            out.insert(TaskId::from_str(&id)?, version);
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
    let mut rows: Vec<(String, i64, i64, String, Vec<u8>)> = Vec::new();
    // Two parameters follow the list.
    for chunk in streams.chunks(sql::MAX_PARAMS - 2) {
        let n = chunk.len();
        let statement = format!(
            "SELECT stream, stream_version, position, event_type, body FROM events
             WHERE stream IN ({}) AND source = ${} AND position < ${}
             ORDER BY stream, stream_version",
            sql::list(1, n),
            n + 1,
            n + 2
        );
        let mut some: Vec<(String, i64, i64, String, Vec<u8>)> =
            on_tx!(tx, sql = statement, |conn| {
                let mut query = sqlx::query_as(&statement).persistent(false);
                for stream in chunk {
                    query = query.bind(stream.as_str());
                }
                query.bind(SOURCE).bind(before).fetch_all(conn).await
            })?;
        rows.append(&mut some);
    }
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

#[cfg(test)]
mod tests;
