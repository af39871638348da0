//! The board's command side: a task's stream (`task:T-42`) is read from the log, the pure `tasks::decide` judges a
//! command against it, and the events it returns are appended with the stream versions they expect. A writer that
//! lost a race gets a conflict, rereads and decides again, so two racing approvals give one approval and one no-op.
//!
//! Ids are allocated by counting: `T-<n>` for the lowest `n` whose stream is empty, found by an index lookup per
//! probe; two creators racing for the same `n` meet as a stream conflict and the loser takes the next one. A
//! creation carries an intake key (`api:<Idempotency-Key>`, later `linear:<issue id>`, …) as the dedup key of its
//! first event, so one external ticket or one retried request makes at most one task.

pub mod allowed;
pub mod pause;

use std::sync::atomic::{AtomicU64, Ordering};

use chrono::Utc;
use serde::Deserialize;

use crate::domain::{EventType, NewEvent, Source};
use crate::eventlog::{AppendError, Appended, EventLog, StoreError, StoredEvent};
use crate::tasks::{
    decide, evolve, AgentName, ApprovalPolicy, Command, Family, LandConfig, Links, MaxAttempts,
    NewTask, Priority, Reason, RepoName, RetryCause, Spec, StaleRule, Task, TaskError, TaskEvent,
    TaskId,
};
pub use allowed::{AllowedRepos, NotAllowed};

/// How many times a command is re-decided after losing a race before the caller hears about it.
const MAX_RACES: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum BoardError {
    /// The domain refused the command (an invalid transition, an unknown task, …).
    #[error(transparent)]
    Refused(#[from] TaskError),
    #[error("the event log is unavailable: {0}")]
    Store(#[from] StoreError),
    #[error(transparent)]
    Append(AppendError),
    #[error("{id}: event at position {position} cannot be read back: {reason}")]
    Corrupt {
        id: TaskId,
        position: i64,
        reason: String,
    },
    /// The request carries a value the domain does not accept (an empty reason, say).
    #[error(transparent)]
    Invalid(crate::tasks::ValueError),
    #[error("{id} kept changing under this command ({MAX_RACES} races lost); try again")]
    Contended { id: TaskId },
}

/// A task as its stream says it is now.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub task: Task,
    pub version: i64,
    pub events: Vec<StoredEvent>,
}

/// What a command did.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub task: Task,
    /// Events it appended; empty when the task already was as asked (a no-op).
    pub appended: Vec<Appended>,
}

/// What intake (or the API) asks for; the id, approval and attempts are filled in from configuration here.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
pub struct Draft {
    pub repo: RepoName,
    pub spec: Spec,
    #[serde(default)]
    pub priority: Option<Priority>,
    // A caller's links: the known keys only, each read as its type (as when `Links` had a field per link).
    #[serde(default, deserialize_with = "Links::deserialize_given")]
    pub links: Links,
    #[serde(default)]
    pub approval: Option<ApprovalPolicy>,
    #[serde(default)]
    pub max_attempts: Option<MaxAttempts>,
    /// Set by intake from the ticket (Linear's `updatedAt`, GitHub's `updated_at`); not something an API caller can
    /// claim.
    #[serde(skip)]
    pub ticket_version: Option<chrono::DateTime<Utc>>,
    /// The agent profile to run it with (an `agent:<name>` label, the API); default: the repository's.
    #[serde(default)]
    pub agent: Option<AgentName>,
    /// A plan, or a plan's item: set by the plan routes and the plan follower, never by a task request.
    #[serde(skip)]
    pub family: Family,
}

impl Draft {
    /// A draft that takes priority, approval and attempts from configuration.
    pub fn new(repo: RepoName, spec: Spec, links: Links) -> Self {
        Self {
            repo,
            spec,
            priority: None,
            links,
            approval: None,
            max_attempts: None,
            ticket_version: None,
            agent: None,
            family: Family::default(),
        }
    }

    /// A plan's draft: `spec` is the goal its planner decomposes.
    pub fn plan(repo: RepoName, spec: Spec, links: Links) -> Self {
        Self {
            family: Family::plan(),
            ..Self::new(repo, spec, links)
        }
    }
}

/// A person's edit of a task's spec (before work starts: `triage` or `todo`). A part left out keeps its current
/// value; the parts given replace theirs whole (`""` empties a scope or a done-when; the task must not be empty).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SpecEdit {
    /// What to do.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 65536)]
    pub task: Option<String>,
    /// What the work may touch.
    #[serde(default)]
    #[schema(max_length = 65536)]
    pub scope: Option<String>,
    /// How to tell it is done.
    #[serde(default)]
    #[schema(max_length = 65536)]
    pub done_when: Option<String>,
}

impl SpecEdit {
    pub fn is_empty(&self) -> bool {
        self.task.is_none() && self.scope.is_none() && self.done_when.is_none()
    }

    /// `spec` with this edit made, or why the result is not a spec.
    pub fn applied_to(&self, spec: &Spec) -> Result<Spec, crate::tasks::ValueError> {
        let part = |edit: &Option<String>, current: &str| {
            edit.clone().unwrap_or_else(|| current.to_owned())
        };
        Spec::new(
            part(&self.task, spec.task()),
            part(&self.scope, spec.scope()),
            part(&self.done_when, spec.done_when()),
        )
    }
}

/// The approval gate and attempt budget: global defaults, overridable per repository (`pidevops.toml`, read by
/// config).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoardConfig {
    pub approval: ApprovalPolicy,
    pub max_attempts: MaxAttempts,
    pub repos: std::collections::BTreeMap<RepoName, ApprovalPolicy>,
    /// The repositories tasks may be for; intake, the API, the CLI and the dispatcher each check it.
    pub allowed: AllowedRepos,
    /// Each configured repository's landing rules, by its name in lower case (GitHub's names ignore case).
    pub land: std::collections::BTreeMap<String, LandConfig>,
    /// The repositories with `stale_after_h`: their rule for a review left without activity, by name in lower
    /// case.
    pub stale: std::collections::BTreeMap<String, StaleRule>,
}

impl Default for BoardConfig {
    fn default() -> Self {
        Self {
            // A person sees a task before an agent spends money on it, unless the team says otherwise.
            approval: ApprovalPolicy::Manual,
            max_attempts: MaxAttempts::DEFAULT,
            repos: Default::default(),
            allowed: AllowedRepos::default(),
            land: Default::default(),
            stale: Default::default(),
        }
    }
}

impl BoardConfig {
    /// The repository's landing rules; a repository without a table is landed by people.
    pub fn land_for(&self, repo: &RepoName) -> LandConfig {
        self.land
            .get(&repo.as_str().to_ascii_lowercase())
            .cloned()
            .unwrap_or_default()
    }

    /// The repository's rule for a stale review; `None`: off (no `stale_after_h`, or 0).
    pub fn stale_for(&self, repo: &RepoName) -> Option<StaleRule> {
        self.stale.get(&repo.as_str().to_ascii_lowercase()).copied()
    }

    pub fn approval_for(&self, repo: &RepoName) -> ApprovalPolicy {
        self.repos.get(repo).copied().unwrap_or(self.approval)
    }
}

/// What a person can ask of a task from the API, the CLI (and later Telegram and the dashboard).
#[derive(Clone, Copy, Debug, PartialEq, Eq, utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum Steer {
    Approve,
    Reject,
    Retry,
    Cancel,
    Archive,
    /// Mark a task in review done without landing it (merged by hand, or not to be merged at all).
    Done,
}

impl std::str::FromStr for Steer {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "approve" => Self::Approve,
            "reject" => Self::Reject,
            "retry" => Self::Retry,
            "cancel" => Self::Cancel,
            "archive" => Self::Archive,
            "done" => Self::Done,
            other => {
                return Err(format!(
                "no action {other:?}; one of approve, reject, retry, cancel, archive, done, land"
            ))
            }
        })
    }
}

impl Steer {
    pub fn name(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Reject => "reject",
            Self::Retry => "retry",
            Self::Cancel => "cancel",
            Self::Archive => "archive",
            Self::Done => "done",
        }
    }

    /// The domain command this means for `task` now. "Retry" gives a flagged task another go, and sends any other
    /// task back for another attempt (the domain says whether its column allows that).
    pub fn command(
        self,
        task: &Task,
        reason: Option<String>,
        via: &str,
    ) -> Result<Command, crate::tasks::ValueError> {
        let reason =
            |verb: &str| Reason::new(reason.clone().unwrap_or_else(|| format!("{verb} {via}")));
        Ok(match self {
            Self::Approve => Command::Approve,
            Self::Archive => Command::Archive,
            Self::Done => Command::Complete,
            Self::Reject => Command::Reject {
                reason: reason("rejected")?,
            },
            Self::Cancel => Command::Cancel {
                reason: reason("cancelled")?,
            },
            Self::Retry if task.needs_human().is_some() => Command::ClearNeedsHuman,
            Self::Retry => Command::Retry {
                cause: RetryCause::ChangesRequested,
                reason: reason("retry requested")?,
            },
        })
    }
}

/// The command side of the board. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Board {
    log: EventLog,
    config: std::sync::Arc<BoardConfig>,
    /// A hint for the next free task number; the log decides.
    next: std::sync::Arc<AtomicU64>,
}

impl Board {
    pub fn new(log: EventLog, config: BoardConfig) -> Self {
        Self {
            log,
            config: std::sync::Arc::new(config),
            next: std::sync::Arc::new(AtomicU64::new(0)),
        }
    }

    pub fn config(&self) -> &BoardConfig {
        &self.config
    }

    pub fn store(&self) -> &crate::eventlog::EventStore {
        self.log.store()
    }

    /// The task with its stream, or `None` if it never existed.
    pub async fn load(&self, id: TaskId) -> Result<Option<Loaded>, BoardError> {
        let events = self.log.store().read_stream(&id.stream()).await?;
        if events.is_empty() {
            return Ok(None);
        }
        let mut task: Option<Task> = None;
        let mut version = 0;
        for stored in &events {
            let event: TaskEvent =
                serde_json::from_slice(&stored.body).map_err(|e| BoardError::Corrupt {
                    id,
                    position: stored.position,
                    reason: e.to_string(),
                })?;
            task = Some(evolve(task, &event).map_err(|e| BoardError::Corrupt {
                id,
                position: stored.position,
                reason: e.to_string(),
            })?);
            version = stored.stream_version.unwrap_or(version);
        }
        Ok(task.map(|task| Loaded {
            task,
            version,
            events,
        }))
    }

    /// Runs `command` on task `id`: decide on fresh state, append, and on a lost race decide again.
    pub async fn execute(
        &self,
        id: TaskId,
        command: &Command,
        actor: &str,
    ) -> Result<Outcome, BoardError> {
        self.execute_with(id, command.name(), actor, |_| Ok(command.clone()))
            .await
    }

    /// A person's request (`approve`, `retry`, …): what it means is decided on the task's state as read in each
    /// race, so "retry" on a task that a racing writer just flagged still means the right thing.
    pub async fn steer(
        &self,
        id: TaskId,
        steer: Steer,
        reason: Option<String>,
        via: &str,
        actor: &str,
    ) -> Result<Outcome, BoardError> {
        self.execute_with(id, steer.name(), actor, |task| {
            steer
                .command(task, reason.clone(), via)
                .map_err(BoardError::Invalid)
        })
        .await
    }

    /// A person's edit of `id`'s spec, made on the spec as read in each race (so a part left out keeps what is
    /// there when the edit lands, not what was there when it was asked for).
    pub async fn edit_spec(
        &self,
        id: TaskId,
        edit: &SpecEdit,
        actor: &str,
    ) -> Result<Outcome, BoardError> {
        self.execute_with(id, "update-spec", actor, |task| {
            Ok(Command::UpdateSpec {
                spec: edit.applied_to(task.spec()).map_err(BoardError::Invalid)?,
                ticket_version: None,
            })
        })
        .await
    }

    async fn execute_with(
        &self,
        id: TaskId,
        name: &'static str,
        actor: &str,
        command_for: impl Fn(&Task) -> Result<Command, BoardError>,
    ) -> Result<Outcome, BoardError> {
        for _ in 0..MAX_RACES {
            let Some(loaded) = self.load(id).await? else {
                return Err(TaskError::NotFound { command: name }.into());
            };
            let (current, version) = (loaded.task, loaded.version);
            let command = command_for(&current)?;
            let events = decide(Some(&current), &command, Utc::now())?;
            if events.is_empty() {
                return Ok(Outcome {
                    task: current,
                    appended: Vec::new(),
                });
            }
            match self.append(id, version, &events, actor, None, None).await {
                Ok(appended) => {
                    let mut task = current;
                    for event in &events {
                        task = evolve(Some(task), event)?;
                    }
                    return Ok(Outcome { task, appended });
                }
                Err(AppendError::Conflict { .. }) => continue,
                Err(error) => return Err(BoardError::Append(error)),
            }
        }
        Err(BoardError::Contended { id })
    }

    /// Creates a task from `draft`, once per `intake_key`: a repeated key returns the task it created first
    /// (`created == false`).
    /// `cause` is the event (a webhook) that asked for it, recorded in the task's first event's `meta`.
    pub async fn create(
        &self,
        draft: Draft,
        intake_key: &str,
        actor: &str,
        cause: Option<uuid::Uuid>,
    ) -> Result<(Outcome, bool), BoardError> {
        // One spelling per repository from here on: the read models, streams and paths compare strings.
        let mut draft = draft;
        draft.repo = self.config.allowed.spelling(&draft.repo);
        let approval = draft
            .approval
            .unwrap_or_else(|| self.config.approval_for(&draft.repo));
        let mut number = self.next_free_number().await?;
        for _ in 0..MAX_RACES * 4 {
            let id =
                TaskId::new(std::num::NonZeroU64::new(number).unwrap_or(std::num::NonZeroU64::MIN));
            let new = NewTask {
                id,
                repo: draft.repo.clone(),
                spec: draft.spec.clone(),
                priority: draft.priority.unwrap_or(Priority::Normal),
                links: draft.links.clone(),
                approval,
                max_attempts: draft.max_attempts.unwrap_or(self.config.max_attempts),
                ticket_version: draft.ticket_version,
                agent: draft.agent.clone(),
                family: draft.family.clone(),
            };
            let events = decide(None, &Command::Create(Box::new(new)), Utc::now())?;
            let Some((first, rest)) = events.split_first() else {
                return Err(TaskError::Inapplicable {
                    task: id.to_string(),
                    event: "task.created",
                    why: "create decided nothing".to_owned(),
                }
                .into());
            };
            match self
                .append(
                    id,
                    0,
                    std::slice::from_ref(first),
                    actor,
                    Some(intake_key),
                    cause,
                )
                .await
            {
                Ok(appended) if appended.first().is_some_and(|a| a.duplicate) => {
                    // Created before under this key: that task, whatever its number.
                    let existing = self.task_for_key(intake_key).await?.ok_or_else(|| {
                        BoardError::Store(StoreError::Corrupt {
                            position: appended.first().map_or(0, |a| a.position),
                            reason: format!("intake key {intake_key:?} is taken by an event outside a task stream"),
                        })
                    })?;
                    let outcome = self.finish_auto_approval(existing, actor).await?;
                    return Ok((outcome, false));
                }
                Ok(mut appended) => {
                    self.next.fetch_max(number + 1, Ordering::Relaxed);
                    let mut task = evolve(None, first)?;
                    if !rest.is_empty() {
                        // The auto approval. A crash before it leaves the task in triage with `approval: auto`;
                        // a retry of the same creation finishes it (see `finish_auto_approval`).
                        appended.extend(
                            self.append(id, 1, rest, actor, None, cause)
                                .await
                                .map_err(BoardError::Append)?,
                        );
                        for event in rest {
                            task = evolve(Some(task), event)?;
                        }
                    }
                    return Ok((Outcome { task, appended }, true));
                }
                Err(AppendError::Conflict { .. }) => {
                    // Someone took this number first.
                    number += 1;
                }
                Err(error) => return Err(BoardError::Append(error)),
            }
        }
        Err(BoardError::Contended {
            id: TaskId::new(std::num::NonZeroU64::new(number).unwrap_or(std::num::NonZeroU64::MIN)),
        })
    }

    /// A task created under `auto` approval whose approval never landed (a crash between the two appends) is
    /// approved now.
    async fn finish_auto_approval(&self, id: TaskId, actor: &str) -> Result<Outcome, BoardError> {
        let loaded = self
            .load(id)
            .await?
            .ok_or(TaskError::NotFound { command: "create" })?;
        if loaded.task.approval() == ApprovalPolicy::Auto
            && loaded.task.column() == crate::tasks::Column::Triage
        {
            return self.execute(id, &Command::Approve, actor).await;
        }
        Ok(Outcome {
            task: loaded.task,
            appended: Vec::new(),
        })
    }

    /// The task made for an intake key, if one was.
    pub async fn task_for_key(&self, intake_key: &str) -> Result<Option<TaskId>, BoardError> {
        let found = self
            .log
            .store()
            .find_by_key(Source::Pidevops, &format!("intake:{intake_key}"))
            .await?;
        Ok(found
            .and_then(|e| e.stream)
            .and_then(|s| TaskId::from_stream(&s)))
    }

    /// The lowest task number whose stream is empty, assuming numbers are used densely from 1 (they are: each is
    /// taken by counting). Galloping then bisecting costs a few index lookups even with many tasks.
    async fn next_free_number(&self) -> Result<u64, BoardError> {
        let hint = self.next.load(Ordering::Relaxed).max(1);
        let used = |n: u64| async move {
            let id = TaskId::new(std::num::NonZeroU64::new(n).unwrap_or(std::num::NonZeroU64::MIN));
            self.log
                .store()
                .stream_version(&id.stream())
                .await
                .map(|v| v > 0)
        };
        // The hint is right when it is free and its predecessor is used; never trust it further than that.
        if !used(hint).await? && (hint == 1 || used(hint - 1).await?) {
            return Ok(hint);
        }
        let (mut low, mut high) = (0u64, 1u64);
        while used(high).await? {
            low = high;
            high = high.saturating_mul(2);
        }
        // `low` is used (or 0), `high` is free: bisect to the first free number.
        while high - low > 1 {
            let mid = low + (high - low) / 2;
            if used(mid).await? {
                low = mid;
            } else {
                high = mid;
            }
        }
        self.next.fetch_max(high, Ordering::Relaxed);
        Ok(high)
    }

    /// Appends `events` to task `id`'s stream after `version`, one at a time (the domain rarely returns more than
    /// two), each carrying the version it expects.
    async fn append(
        &self,
        id: TaskId,
        version: i64,
        events: &[TaskEvent],
        actor: &str,
        intake_key: Option<&str>,
        cause: Option<uuid::Uuid>,
    ) -> Result<Vec<Appended>, AppendError> {
        let stream = id.stream();
        let mut appended = Vec::with_capacity(events.len());
        for (i, event) in events.iter().enumerate() {
            let at_version = version + 1 + i as i64;
            let body = serde_json::to_vec(event).map_err(|e| {
                AppendError::Unavailable(format!("cannot encode {}: {e}", event.kind()))
            })?;
            // A fresh key per write: a racing writer must meet a stream conflict, never a "duplicate" of
            // someone else's event. Only a creation's intake key is meant to repeat.
            let dedup_key = match (i, intake_key) {
                (0, Some(key)) => format!("intake:{key}"),
                _ => format!("{stream}:{}", uuid::Uuid::now_v7()),
            };
            let mut new = NewEvent::new(
                Source::Pidevops,
                EventType::from_stored(event.kind().to_owned()),
                dedup_key,
                "application/json",
                bytes::Bytes::from(body),
            );
            new.stream = Some((stream.clone(), at_version));
            new.occurred_at = event.at();
            new.meta
                .insert("actor".to_owned(), serde_json::Value::from(actor));
            if let Some(cause) = cause {
                new.meta.insert(
                    "cause_event_id".to_owned(),
                    serde_json::Value::from(cause.to_string()),
                );
            }
            new.subject.reference = Some(id.to_string());
            let result = self.log.append(new).await?;
            appended.push(result);
            if result.duplicate {
                // Only a creation's intake key repeats: that task exists already.
                break;
            }
        }
        Ok(appended)
    }
}
