//! The dispatcher: claims `todo` tasks within the concurrency limits and runs each attempt to exactly one
//! outcome; the watchdog declares silent runs lost; gc removes old worktrees.
//!
//! Correctness rests on the log, not on who holds which lease:
//! - **A claim is an append.** `task.started` is written at the task stream's next version; of two replicas
//!   claiming the same task, one append wins and the other meets a conflict, rereads, and finds the task in
//!   `in-progress`. So an attempt starts once.
//! - **One outcome per run.** The runner and the watchdog both write a run's terminal event with the version they
//!   expect and the run's end key; the loser adopts the winner's outcome. A runner whose heartbeat meets a
//!   conflict learns it was declared lost and kills its agent.
//! - **The task follows the outcome** (`submit-for-review` or `retry`), and the domain refuses a report naming a
//!   run that is no longer the live one, so applying an outcome twice (a crash between the two writes, then the
//!   watchdog's recovery) changes nothing the second time.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::config::{ContainmentPolicy, DispatchConfig, Executor};
use super::profiles::{AgentProfile, Profiles, RunInputs};
use super::runner::{self, ChildSetup, Ending, Launch};
use super::runs::{self, FailureKind, RunEvent};
use super::sandbox::{AgentView, Confinement, Containment};
use super::schedule::{self, Candidate};
use super::workspace::{Prepared, Workspaces};
use crate::board::{Board, BoardError};
use crate::config::Env;
use crate::domain::{EventType, NewEvent, Source};
use crate::eventlog::{AppendError, EventLog, EventStore};
use crate::projectors::runs::{self as run_rows, RunRow, Which};
use crate::projectors::tasks::{self as task_rows, TaskFilter, TaskRow};
use crate::tasks::{Column, Command, Reason, RepoName, RetryCause, RunId, Task, TaskError, TaskId};

pub const DISPATCHER: &str = "dispatcher";
pub const WATCHDOG: &str = "watchdog";
pub const GC: &str = "gc";
/// The stream of pause and resume commands.
pub const DISPATCH_STREAM: &str = "dispatch";
/// Most `todo` tasks one tick considers; the rest wait for the next (most urgent and oldest first).
const QUEUE_WINDOW: u32 = 1000;

/// What `/health` shows of the dispatcher.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DispatchStatus {
    pub paused: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused_reason: Option<String>,
    /// Tasks ready to start, waiting for a slot.
    pub queue: usize,
    /// Tasks in `todo` held back by their retry backoff.
    pub backing_off: usize,
    pub running: usize,
    pub slots: usize,
    pub started: usize,
    pub executor: &'static str,
    /// What contains agents here: `namespaces`, `landlock` or `none`.
    pub containment: &'static str,
    /// The same, in words.
    pub confinement: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct WatchdogStatus {
    pub running: usize,
    pub declared_lost: usize,
    pub recovered: usize,
}

/// Runs this process is executing.
#[derive(Default)]
struct Local {
    running: HashMap<TaskId, LocalRun>,
    /// Runs that ended here but that the tasks read model may still show in progress: their slots are free.
    finished: HashMap<TaskId, RunId>,
    /// Runs handed to workers that the read model may not show yet: their slots are taken.
    claimed: HashMap<TaskId, (RunId, RepoName, std::time::Instant)>,
}

struct LocalRun {
    run: RunId,
    repo: RepoName,
    /// A slot is an agent process: once the agent has exited, committing and pushing its work no longer holds
    /// one, so the next queued task starts while this one is being wrapped up.
    holds_slot: bool,
}

struct Inner {
    board: Board,
    log: EventLog,
    config: DispatchConfig,
    profiles: Profiles,
    workspaces: Workspaces,
    worker: String,
    env: Env,
    paused_by_env: bool,
    containment: Containment,
    local: Mutex<Local>,
    fill: tokio::sync::Mutex<()>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    work: Option<crate::bus::work::WorkQueue>,
}

/// Cheap to clone.
#[derive(Clone)]
pub struct Dispatcher {
    inner: Arc<Inner>,
}

/// What a `pidevops worker` is asked to run.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct RunRequest {
    pub task: TaskId,
    pub run: RunId,
    pub attempt: u32,
}

pub struct DispatcherParts {
    pub board: Board,
    pub log: EventLog,
    pub config: DispatchConfig,
    pub profiles: Profiles,
    pub workspaces: Workspaces,
    pub worker: String,
    pub env: Env,
    pub paused_by_env: bool,
    pub tracker: TaskTracker,
    pub shutdown: CancellationToken,
    pub work: Option<crate::bus::work::WorkQueue>,
}

impl Dispatcher {
    pub fn new(parts: DispatcherParts) -> Self {
        let containment = super::sandbox::detect_cached(&parts.config.bwrap, parts.env.get("PATH"));
        Self {
            inner: Arc::new(Inner {
                board: parts.board,
                log: parts.log,
                config: parts.config,
                profiles: parts.profiles,
                workspaces: parts.workspaces,
                worker: parts.worker,
                env: parts.env,
                paused_by_env: parts.paused_by_env,
                containment,
                local: Mutex::default(),
                fill: tokio::sync::Mutex::new(()),
                tracker: parts.tracker,
                shutdown: parts.shutdown,
                work: parts.work,
            }),
        }
    }

    fn store(&self) -> &EventStore {
        self.inner.log.store()
    }

    fn local(&self) -> std::sync::MutexGuard<'_, Local> {
        self.inner.local.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn confinement(&self) -> String {
        self.inner.containment.describe()
    }

    pub fn containment(&self) -> &Containment {
        &self.inner.containment
    }

    /// Whether new dispatch is paused, and why.
    pub async fn paused(&self) -> anyhow::Result<Option<String>> {
        if self.inner.paused_by_env {
            return Ok(Some("PIDEVOPS_PAUSED=1".into()));
        }
        pause_state(self.store()).await
    }

    /// One dispatcher tick: start what fits. Also run when a local run ends, so a freed slot is filled at once.
    pub async fn tick(&self) -> anyhow::Result<DispatchStatus> {
        let selecting = std::time::Instant::now();
        let _one_at_a_time = self.inner.fill.lock().await;
        let paused = self.paused().await.context("reading the pause state")?;
        let store = self.store();
        let todo = task_rows::list(
            store,
            &TaskFilter {
                column: Some(Column::Todo),
                limit: Some(QUEUE_WINDOW),
                ..TaskFilter::default()
            },
        )
        .await
        .context("listing todo tasks")?;
        let in_progress = task_rows::list(
            store,
            &TaskFilter {
                column: Some(Column::InProgress),
                ..TaskFilter::default()
            },
        )
        .await
        .context("listing tasks in progress")?;

        let running = self.running_per_repo(&in_progress);
        let now = Utc::now();
        let mut backing_off = 0;
        let todo = self.refuse_unallowed(todo).await?;
        let candidates: Vec<Candidate> = todo
            .iter()
            .filter(|row| !row.needs_human && row.attempts < row.max_attempts)
            .filter(|row| !self.local().running.contains_key(&row.id))
            .filter(|row| {
                let ready = self.ready_at(row).is_none_or(|at| at <= now);
                backing_off += usize::from(!ready);
                ready
            })
            .filter_map(|row| {
                Some(Candidate {
                    id: row.id,
                    repo: row.repo.parse().ok()?,
                    priority: row.priority,
                    created_at: row.created_at,
                })
            })
            .collect();
        let slots = self.inner.config.limits.global;
        let mut status = DispatchStatus {
            paused: paused.is_some(),
            paused_reason: paused,
            queue: candidates.len(),
            backing_off,
            running: running.values().sum(),
            slots,
            started: 0,
            executor: match self.inner.config.executor {
                Executor::Local => "local",
                Executor::Workers => "workers",
            },
            containment: self.inner.containment.kind(),
            confinement: self.confinement(),
        };
        let mut started = HashSet::new();
        if !status.paused {
            let picked = schedule::pick(&candidates, &running, &self.inner.config.limits);
            if !picked.is_empty() {
                metrics::histogram!("pidevops_run_phase_seconds", "phase" => "select")
                    .record(selecting.elapsed().as_secs_f64());
            }
            for id in picked {
                let claiming = std::time::Instant::now();
                let claimed = self.claim_and_start(id).await?;
                metrics::histogram!("pidevops_run_phase_seconds", "phase" => "claim")
                    .record(claiming.elapsed().as_secs_f64());
                if claimed {
                    started.insert(id);
                    status.started += 1;
                    status.queue -= 1;
                    status.running += 1;
                }
            }
        }
        if self.inner.config.executor == Executor::Local {
            self.prepare_ahead(&candidates, &started);
        }
        metrics::gauge!("pidevops_dispatch_queue_depth").set(status.queue as f64);
        metrics::gauge!("pidevops_worktree_spares")
            .set(self.inner.workspaces.spares_ready() as f64);
        metrics::gauge!("pidevops_dispatch_slots_in_use").set(status.running as f64);
        metrics::gauge!("pidevops_dispatch_slots").set(slots as f64);
        metrics::gauge!("pidevops_dispatch_paused").set(if status.paused { 1.0 } else { 0.0 });
        Ok(status)
    }

    /// Drops the tasks whose repository the configuration does not allow (it may have changed since intake),
    /// flagging each needs-human with the reason, before anything is picked or cloned for them.
    async fn refuse_unallowed(&self, todo: Vec<TaskRow>) -> anyhow::Result<Vec<TaskRow>> {
        let allowed = &self.inner.board.config().allowed;
        let mut kept = Vec::with_capacity(todo.len());
        for row in todo {
            let refused = match row.repo.parse::<RepoName>() {
                Ok(repo) => allowed.check(&repo).err(),
                Err(_) => None,
            };
            let Some(refused) = refused else {
                kept.push(row);
                continue;
            };
            if !row.needs_human {
                let reason = Reason::summarize(&format!("not started: {refused}"));
                match self
                    .inner
                    .board
                    .execute(row.id, &Command::FlagNeedsHuman { reason }, DISPATCHER)
                    .await
                {
                    Ok(_) | Err(BoardError::Refused(_)) => {}
                    Err(error) => {
                        return Err(error).with_context(|| {
                            format!("flagging {}, whose repository is not allowed", row.id)
                        })
                    }
                }
                tracing::warn!(task = %row.id, %refused, "not started: repository not allowed");
            }
        }
        Ok(kept)
    }

    /// Checks out spare worktrees for what is still queued (up to each repository's limit), in the background,
    /// so the next runs start without waiting for a checkout.
    fn prepare_ahead(&self, candidates: &[Candidate], started: &HashSet<TaskId>) {
        let mut queued: BTreeMap<&RepoName, usize> = BTreeMap::new();
        for candidate in candidates.iter().filter(|c| !started.contains(&c.id)) {
            *queued.entry(&candidate.repo).or_insert(0) += 1;
        }
        for (repo, waiting) in queued {
            let limits = &self.inner.config.limits;
            let wanted = waiting.min(limits.for_repo(repo)).min(limits.global);
            let (this, repo) = (self.clone(), repo.clone());
            tokio::spawn(async move {
                let source = this.inner.config.source(&repo);
                if let Err(error) = this
                    .inner
                    .workspaces
                    .replenish(&repo, &source, wanted)
                    .await
                {
                    tracing::warn!(%repo, %error, "could not prepare spare worktrees");
                }
            });
        }
    }

    /// Runs per repository: the read model's `in-progress` tasks, less those this process just finished (their
    /// slot is free, the read model has not caught up), plus those it just started (likewise).
    fn running_per_repo(&self, in_progress: &[TaskRow]) -> BTreeMap<RepoName, usize> {
        let mut local = self.local();
        let shown: HashMap<TaskId, Option<RunId>> = in_progress
            .iter()
            .map(|row| (row.id, run_of(row)))
            .collect();
        local
            .finished
            .retain(|task, run| shown.get(task).is_some_and(|shown| *shown == Some(*run)));
        let mut seen = HashSet::new();
        let mut running = BTreeMap::new();
        for row in in_progress {
            let wrapping_up = local.running.get(&row.id).is_some_and(|r| !r.holds_slot);
            if local.finished.contains_key(&row.id) || wrapping_up {
                continue;
            }
            if let Ok(repo) = row.repo.parse::<RepoName>() {
                seen.insert(row.id);
                *running.entry(repo).or_insert(0) += 1;
            }
        }
        for (task, run) in local.running.iter().filter(|(_, run)| run.holds_slot) {
            if seen.insert(*task) {
                *running.entry(run.repo.clone()).or_insert(0) += 1;
            }
        }
        local.claimed.retain(|task, (run, _, at)| {
            shown.get(task) != Some(&Some(*run)) && at.elapsed() < Duration::from_secs(30)
        });
        for (task, (_, repo, _)) in &local.claimed {
            if seen.insert(*task) {
                *running.entry(repo.clone()).or_insert(0) += 1;
            }
        }
        running
    }

    /// When a task that failed may start again: its last failure plus the backoff for the next attempt, with a
    /// jitter derived from the task and attempt (the same on every replica and after every restart).
    fn ready_at(&self, row: &TaskRow) -> Option<DateTime<Utc>> {
        let failure = row.state.get("last_failure")?;
        // An interrupted attempt was not the task's failure: no backoff.
        if failure.get("cause")?.get("kind")?.as_str()? == "interrupted" {
            return None;
        }
        let failed_at: DateTime<Utc> = failure.get("at")?.as_str()?.parse().ok()?;
        self.after_backoff(row.id, u32::try_from(row.attempts).ok()?, failed_at)
    }

    /// When attempt `attempts + 1` of `task`, whose last attempt failed at `failed_at`, may start.
    fn after_backoff(
        &self,
        task: TaskId,
        attempts: u32,
        failed_at: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let next = attempts.saturating_add(1);
        let jitter = {
            use sha2::Digest;
            let digest = sha2::Sha256::digest(format!("{task}:{next}"));
            f64::from(digest[0]) / 255.0 * 0.2
        };
        let delay = self.inner.config.backoff(next, jitter);
        Some(failed_at + chrono::Duration::from_std(delay).ok()?)
    }

    /// Claims `id` (appends `task.started`) and starts its run. `false` when someone else got there first.
    async fn claim_and_start(&self, id: TaskId) -> anyhow::Result<bool> {
        // The backoff is checked again on the task as the log has it: the read model the queue came from may be
        // behind a failure that just happened.
        let loaded = self
            .inner
            .board
            .load(id)
            .await
            .with_context(|| format!("reading {id} before claiming it"))?;
        if let Some(loaded) = loaded {
            let task = &loaded.task;
            let waiting = task
                .last_failure()
                .filter(|failure| !matches!(failure.cause, RetryCause::Interrupted { .. }))
                .and_then(|failure| {
                    self.after_backoff(id, task.attempts(), failure.at)
                        .filter(|ready| *ready > Utc::now())
                });
            if waiting.is_some() {
                return Ok(false);
            }
            // A task that asks for an agent this service cannot run would only burn its attempts: a person
            // must pick another (or fix the configuration) first.
            if let Some(why) = self.unrunnable(task) {
                if task.can_start() {
                    let reason = Reason::summarize(&why);
                    self.inner
                        .board
                        .execute(id, &Command::FlagNeedsHuman { reason }, DISPATCHER)
                        .await
                        .with_context(|| format!("flagging {id}, whose agent cannot run"))?;
                    tracing::warn!(task = %id, why, "not started: its agent cannot run here");
                }
                return Ok(false);
            }
        }
        let run = RunId(uuid::Uuid::now_v7());
        let outcome = match self
            .inner
            .board
            .execute(id, &Command::Start { run }, DISPATCHER)
            .await
        {
            Ok(outcome) if !outcome.appended.is_empty() => outcome,
            Ok(_) => return Ok(false),
            Err(BoardError::Refused(refused)) => {
                tracing::debug!(task = %id, %refused, "not claimed: the task moved on");
                return Ok(false);
            }
            Err(error) => return Err(error).with_context(|| format!("claiming {id}")),
        };
        let task = outcome.task;
        let attempt = task.attempts();
        tracing::info!(task = %id, %run, attempt, "claimed");
        match self.inner.config.executor {
            Executor::Local => self.start_local(task, run, attempt),
            Executor::Workers => {
                let work = self
                    .inner
                    .work
                    .as_ref()
                    .context("executor = \"workers\" needs NATS_URL")?;
                let request = RunRequest {
                    task: id,
                    run,
                    attempt,
                };
                // Keyed by run: a re-published request is one message, so one run.
                work.publish("run", &run.to_string(), &request)
                    .await
                    .with_context(|| format!("queueing {id}'s run for a worker"))?;
                // Counted against the limits until the read model shows it in progress.
                self.local()
                    .claimed
                    .insert(id, (run, task.repo().clone(), std::time::Instant::now()));
            }
        }
        Ok(true)
    }

    /// Why `task` cannot run here, if it cannot: the agent profile it asks for does not exist, or (running
    /// locally) its program is not on PATH. The configured defaults are checked at start-up (`cannot_run`).
    fn unrunnable(&self, task: &Task) -> Option<String> {
        let profile = match self.inner.profiles.for_task(task) {
            Ok(profile) => profile,
            Err(why) => return Some(why),
        };
        let program = profile
            .command
            .first()
            .map(String::as_str)
            .unwrap_or_default();
        if self.inner.config.executor == Executor::Local
            && !resolves(program, self.inner.env.get("PATH"))
        {
            return Some(format!(
                "{} asks for the agent profile {:?}, which runs {program:?}, not an executable on PATH",
                task.id(),
                profile.name
            ));
        }
        // Every attempt would fail the same way (E2BIG): a person shortens the spec or changes the profile.
        profile.refuses_prompt(&super::prompt::build(task))
    }

    fn start_local(&self, task: Task, run: RunId, attempt: u32) {
        let stop = self.inner.shutdown.child_token();
        self.local().running.insert(
            task.id(),
            LocalRun {
                run,
                repo: task.repo().clone(),
                holds_slot: true,
            },
        );
        let this = self.clone();
        self.inner.tracker.spawn(async move {
            let id = task.id();
            this.execute(task, run, attempt, stop).await;
            {
                let mut local = this.local();
                local.running.remove(&id);
                local.finished.insert(id, run);
            }
            // A slot is free: fill it now rather than at the next tick.
            if !this.inner.shutdown.is_cancelled() {
                if let Err(error) = this.tick().await {
                    tracing::warn!(
                        error = format!("{error:#}"),
                        "refilling a freed slot failed"
                    );
                }
            }
        });
    }

    /// Runs a claimed attempt to its one outcome and moves the task on. Used by `serve` and by workers.
    pub async fn execute(&self, task: Task, run: RunId, attempt: u32, stop: CancellationToken) {
        let id = task.id();
        let repo = task.repo().clone();
        // A worker's configuration may lack a profile the task asks for: that attempt fails saying so.
        let profile = self.inner.profiles.for_task(&task).cloned();
        let profile_name = match &profile {
            Ok(profile) => profile.name.clone(),
            Err(_) => task.agent().map(|a| a.to_string()).unwrap_or_default(),
        };
        let dirs = self.inner.workspaces.run_dirs(&repo, id, run);
        let mut writer = RunWriter::new(self.inner.log.clone(), run, id, 0);
        let started = RunEvent::Started {
            at: Utc::now(),
            run,
            task: id,
            attempt,
            profile: profile_name,
            worker: self.inner.worker.clone(),
            log: dirs.log.to_string_lossy().into_owned(),
        };
        let recording = std::time::Instant::now();
        let recorded = writer.append(&started).await;
        metrics::histogram!("pidevops_run_phase_seconds", "phase" => "record")
            .record(recording.elapsed().as_secs_f64());
        match recorded {
            Ok(()) => {}
            Err(Written::Taken) => {
                // The watchdog declared it lost before it began (a very slow start): that outcome stands.
                return self.recover(run).await;
            }
            Err(Written::Failed(error)) => {
                tracing::error!(task = %id, %run, error = format!("{error:#}"), "cannot record the run's start");
                return;
            }
        }
        let begun = std::time::Instant::now();
        let outcome = match &profile {
            Ok(profile) => {
                self.attempt(&task, run, attempt, profile, &mut writer, stop)
                    .await
            }
            Err(why) => Some(RunEvent::Failed {
                at: Utc::now(),
                run,
                task: id,
                attempt,
                kind: FailureKind::Workspace,
                detail: why.clone(),
                duration_s: 0.0,
                tail: String::new(),
            }),
        };
        let outcome = match outcome {
            Some(outcome) => outcome,
            None => return self.recover(run).await,
        };
        let duration = begun.elapsed();
        match writer.append(&outcome).await {
            Ok(()) => {
                let label = match &outcome {
                    RunEvent::Succeeded { .. } => "succeeded",
                    RunEvent::Failed { kind, .. } => kind.as_str(),
                    _ => "unknown",
                };
                metrics::counter!("pidevops_runs_total", "outcome" => label).increment(1);
                metrics::histogram!("pidevops_run_duration_seconds").record(duration.as_secs_f64());
                self.apply(&outcome).await;
            }
            Err(Written::Taken) => self.recover(run).await,
            Err(Written::Failed(error)) => {
                // The watchdog will find the run silent and declare it lost: the task is retried, not stuck.
                tracing::error!(task = %id, %run, error = format!("{error:#}"), "cannot record the run's outcome");
            }
        }
    }

    /// The attempt itself: worktree, agent, commit, push. `None` when it was declared lost meanwhile.
    async fn attempt(
        &self,
        task: &Task,
        run: RunId,
        attempt: u32,
        profile: &AgentProfile,
        writer: &mut RunWriter,
        stop: CancellationToken,
    ) -> Option<RunEvent> {
        let id = task.id();
        let started = std::time::Instant::now();
        let fail = |kind: FailureKind, detail: String, tail: String| RunEvent::Failed {
            at: Utc::now(),
            run,
            task: id,
            attempt,
            kind,
            detail,
            duration_s: started.elapsed().as_secs_f64(),
            tail,
        };
        let source = self.inner.config.source(task.repo());
        let phase = std::time::Instant::now();
        let prepared = self
            .inner
            .workspaces
            .prepare(task.repo(), &source, id, run)
            .await;
        metrics::histogram!("pidevops_run_phase_seconds", "phase" => "prepare")
            .record(phase.elapsed().as_secs_f64());
        let prepared = match prepared {
            Ok(prepared) => prepared,
            Err(error) => {
                return Some(fail(
                    FailureKind::Workspace,
                    error.to_string(),
                    String::new(),
                ))
            }
        };
        let launching = std::time::Instant::now();
        if let Err(error) = self.inner.workspaces.hand_to_agent(&prepared).await {
            self.inner.workspaces.finished(&prepared);
            return Some(fail(
                FailureKind::Workspace,
                error.to_string(),
                String::new(),
            ));
        }
        let prompt = super::prompt::build(task);
        if let Err(error) = tokio::fs::write(&prepared.dirs.prompt, &prompt).await {
            return Some(fail(
                FailureKind::Workspace,
                format!("cannot write the prompt file: {error}"),
                String::new(),
            ));
        }
        let launch = match self.launch(task, run, profile, &prepared, &prompt) {
            Ok(launch) => {
                metrics::histogram!("pidevops_run_phase_seconds", "phase" => "launch")
                    .record(launching.elapsed().as_secs_f64());
                launch
            }
            Err(error) => {
                return Some(fail(
                    FailureKind::Workspace,
                    format!("{error:#}"),
                    String::new(),
                ))
            }
        };

        // Heartbeats while the agent runs; a heartbeat that meets a conflict means the run was declared lost.
        let output = Arc::new(AtomicU64::new(0));
        let beats = CancellationToken::new();
        let lost = CancellationToken::new();
        let agent_stop = CancellationToken::new();
        let heartbeat = {
            let (mut beat_writer, output, beats, lost, agent_stop, stop) = (
                writer.clone(),
                output.clone(),
                beats.clone(),
                lost.clone(),
                agent_stop.clone(),
                stop.clone(),
            );
            let interval = self.inner.config.heartbeat;
            let board = self.inner.board.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        () = beats.cancelled() => break,
                        () = stop.cancelled() => { agent_stop.cancel(); break; }
                        () = tokio::time::sleep(interval) => {}
                    }
                    let beat = RunEvent::Heartbeat {
                        at: Utc::now(),
                        run,
                        task: id,
                        output_bytes: output.load(std::sync::atomic::Ordering::Relaxed),
                    };
                    match beat_writer.append(&beat).await {
                        Ok(()) => {}
                        Err(Written::Taken) => {
                            lost.cancel();
                            agent_stop.cancel();
                            break;
                        }
                        Err(Written::Failed(error)) => {
                            tracing::warn!(task = %id, %run, error = format!("{error:#}"), "heartbeat not recorded");
                        }
                    }
                    // A task cancelled (or otherwise moved on) while its agent works: stop spending on it. The
                    // read model may not show the claim yet (it lags the log), so only what can only come after
                    // the claim counts: a closed task, or another run in progress.
                    if let Ok(Some(row)) = task_rows::get(board.store(), id).await {
                        let closed = matches!(
                            row.column,
                            Column::Cancelled | Column::Done | Column::Archived
                        );
                        let superseded = row.column == Column::InProgress
                            && run_of(&row).is_some_and(|r| r != run);
                        if closed || superseded {
                            agent_stop.cancel();
                            break;
                        }
                    }
                }
                beat_writer.version
            })
        };
        let finished = runner::run(launch, output, agent_stop.clone()).await;
        self.release_slot(id);
        // Heartbeats go on while the work is committed and pushed (a big push can take a while).
        let outcome = self
            .wrap_up(
                task, run, attempt, profile, &prepared, finished, &stop, started, fail,
            )
            .await;
        // Its work is pushed (or its failure about to be recorded): the worktree may serve a queued task.
        self.inner.workspaces.finished(&prepared);
        beats.cancel();
        if let Ok(version) = heartbeat.await {
            writer.version = writer.version.max(version);
        }
        if lost.is_cancelled() {
            return None;
        }
        Some(outcome)
    }

    /// The agent has exited: its slot goes to the next queued task at once.
    fn release_slot(&self, task: TaskId) {
        if let Some(run) = self.local().running.get_mut(&task) {
            run.holds_slot = false;
        } else {
            return;
        }
        if self.inner.shutdown.is_cancelled() {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(error) = this.tick().await {
                tracing::warn!(
                    error = format!("{error:#}"),
                    "refilling a freed slot failed"
                );
            }
        });
    }

    /// The outcome of an attempt whose agent has ended: its exit judged, its work committed and pushed.
    #[allow(clippy::too_many_arguments)]
    async fn wrap_up(
        &self,
        task: &Task,
        run: RunId,
        attempt: u32,
        profile: &AgentProfile,
        prepared: &Prepared,
        finished: runner::Finished,
        stop: &CancellationToken,
        began: std::time::Instant,
        fail: impl Fn(FailureKind, String, String) -> RunEvent,
    ) -> RunEvent {
        let id = task.id();
        let tail = finished.tail.clone();
        let failed = |kind, detail: String| fail(kind, detail, tail.clone());
        match finished.ending {
            Ending::Exited(0) => {}
            Ending::Exited(code) => {
                return failed(
                    FailureKind::Exit,
                    format!("the agent exited with status {code}"),
                )
            }
            Ending::Signaled(signal) => {
                return failed(
                    FailureKind::Exit,
                    format!("the agent was killed by signal {signal}"),
                )
            }
            Ending::TimedOut => {
                return failed(
                    FailureKind::Timeout,
                    format!(
                        "the agent ran longer than {} s and was killed",
                        profile.timeout.as_secs_f64()
                    ),
                )
            }
            Ending::Stalled => {
                return failed(
                    FailureKind::Stalled,
                    format!(
                        "the agent printed nothing for {} s and was killed",
                        profile.no_output_timeout.as_secs_f64()
                    ),
                )
            }
            Ending::Stopped if stop.is_cancelled() => {
                return failed(
                    FailureKind::Interrupted,
                    "interrupted: pidevops shut down while the agent ran".into(),
                )
            }
            Ending::Stopped => {
                return failed(
                    FailureKind::Stopped,
                    "stopped: the task was cancelled or moved on while the agent ran".into(),
                )
            }
            Ending::CannotStart(why) => return failed(FailureKind::Workspace, why),
        }
        let message = format!(
            "{id}: {}\n\nWritten by the {} agent, attempt {attempt} (pidevops run {run}).",
            task.title(),
            profile.name
        );
        let phase = std::time::Instant::now();
        let committed = self.inner.workspaces.commit(prepared, &message).await;
        metrics::histogram!("pidevops_run_phase_seconds", "phase" => "commit")
            .record(phase.elapsed().as_secs_f64());
        let commit = match committed {
            Ok(Some(commit)) => commit,
            Ok(None) => {
                return failed(
                    FailureKind::NoChanges,
                    "the agent exited 0 but changed nothing in the worktree".into(),
                )
            }
            Err(error) => return failed(FailureKind::Workspace, error.to_string()),
        };
        let phase = std::time::Instant::now();
        let pushed = self.inner.workspaces.push(prepared, &commit).await;
        metrics::histogram!("pidevops_run_phase_seconds", "phase" => "push")
            .record(phase.elapsed().as_secs_f64());
        if let Err(error) = pushed {
            return failed(FailureKind::PushFailed, error.to_string());
        }
        RunEvent::Succeeded {
            at: Utc::now(),
            run,
            task: id,
            attempt,
            branch: prepared.branch.clone(),
            commit,
            duration_s: began.elapsed().as_secs_f64(),
            tail,
        }
    }

    /// The agent's command line and environment. The environment is built from nothing: a few neutral variables,
    /// the run's own HOME and TMPDIR, and the variables the profile names (never a pidevops secret: `profiles`
    /// refuses those at start-up).
    fn launch(
        &self,
        task: &Task,
        run: RunId,
        profile: &AgentProfile,
        prepared: &Prepared,
        prompt: &str,
    ) -> anyhow::Result<Launch> {
        let dirs = &prepared.dirs;
        let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
        let argv = profile.argv(&RunInputs {
            prompt,
            prompt_file: &path(&dirs.prompt),
            workspace: &path(&dirs.worktree),
            task_id: &task.id().to_string(),
        });
        let mut env = vec![
            (
                "PATH".to_owned(),
                self.inner
                    .env
                    .get("PATH")
                    .unwrap_or("/usr/local/bin:/usr/bin:/bin")
                    .to_owned(),
            ),
            ("HOME".to_owned(), path(&dirs.home)),
            ("TMPDIR".to_owned(), path(&dirs.tmp)),
            (
                "LANG".to_owned(),
                self.inner.env.get("LANG").unwrap_or("C.UTF-8").to_owned(),
            ),
            ("TERM".to_owned(), "dumb".to_owned()),
        ];
        for name in &profile.env {
            if let Some(value) = self.inner.env.get(name) {
                env.push((name.clone(), value.to_owned()));
            }
        }
        let (argv, child) = self.contain(profile, prepared, argv, &env)?;
        tracing::info!(task = %task.id(), %run, profile = %profile.name, program = %argv.first().map(String::as_str).unwrap_or(""), "starting the agent");
        Ok(Launch {
            argv,
            env,
            cwd: dirs.worktree.clone(),
            log: dirs.log.clone(),
            timeout: profile.timeout,
            no_output_timeout: profile.no_output_timeout,
            stdin: profile.prompt_on_stdin.then(|| dirs.prompt.clone()),
            child,
        })
    }

    /// The agent's view of the machine (its own directories, the prompt, its program, the read-only system) and
    /// how it is held to it here: the argv wrapped in bubblewrap, or Landlock rules and a reaper for the child.
    fn contain(
        &self,
        profile: &AgentProfile,
        prepared: &Prepared,
        argv: Vec<String>,
        env: &[(String, String)],
    ) -> anyhow::Result<(Vec<String>, ChildSetup)> {
        let dirs = &prepared.dirs;
        let root = self.inner.workspaces.root();
        let agent_path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str());
        let mut readable = AgentView::system_readable();
        readable.push(dirs.prompt.clone());
        // Its own repository's history, borrowed read-only by the repository `hand_to_agent` made.
        readable.push(dirs.mirror.join("objects"));
        // Its program (a script anywhere, or a CLI under /usr), and what its PATH names, but never anything
        // that holds the workspaces or lies inside them.
        let outside_root = |p: &std::path::Path| !root.starts_with(p) && !p.starts_with(root);
        if let Some(program) = argv
            .first()
            .and_then(|p| super::sandbox::find_program(p, agent_path))
        {
            let canonical = program.canonicalize().ok();
            readable.extend(
                [Some(program), canonical]
                    .into_iter()
                    .flatten()
                    .filter(|p| outside_root(p)),
            );
        }
        readable.extend(
            agent_path
                .unwrap_or_default()
                .split(':')
                .map(std::path::PathBuf::from)
                .filter(|p| p.is_absolute() && p.is_dir() && outside_root(p)),
        );
        readable.extend(
            self.inner
                .config
                .readable
                .iter()
                .filter(|p| outside_root(p))
                .cloned(),
        );
        let view = AgentView {
            writable: vec![dirs.worktree.clone(), dirs.home.clone(), dirs.tmp.clone()],
            readable,
            // SAFETY: geteuid has no preconditions and cannot fail.
            drop_capabilities: unsafe { nix::libc::geteuid() } == 0,
        };
        match &self.inner.containment {
            Containment::Namespaces { bwrap } => Ok((
                super::sandbox::bwrap_argv(bwrap, &view, &dirs.worktree, &argv),
                ChildSetup::default(),
            )),
            Containment::Landlock { .. } => {
                let confinement = Confinement::new(&view)
                    .context("preparing the agent's Landlock rules")?
                    .map(Arc::new);
                Ok((
                    argv,
                    ChildSetup {
                        confinement,
                        reaper: true,
                        drop_capabilities: view.drop_capabilities,
                    },
                ))
            }
            Containment::None { why } => {
                anyhow::ensure!(
                    self.inner.config.containment == ContainmentPolicy::BestEffort,
                    "no containment for the agent ({why}) and dispatch.containment is \"required\""
                );
                tracing::warn!(profile = %profile.name, "running an agent uncontained (dispatch.containment = \"best-effort\")");
                Ok((
                    argv,
                    ChildSetup {
                        drop_capabilities: view.drop_capabilities,
                        ..ChildSetup::default()
                    },
                ))
            }
        }
    }

    /// Moves the task on after a run's outcome. Idempotent: a second application names a run that is no longer
    /// live and the domain refuses it, which is the expected answer here.
    async fn apply(&self, outcome: &RunEvent) {
        let (task, command) = match outcome {
            RunEvent::Succeeded {
                task, run, branch, ..
            } => (
                *task,
                Command::SubmitForReview {
                    run: *run,
                    branch: branch.clone(),
                    pr: None,
                },
            ),
            RunEvent::Failed {
                task, run, kind, ..
            } => (
                *task,
                Command::Retry {
                    cause: if *kind == FailureKind::Interrupted {
                        RetryCause::Interrupted { run: *run }
                    } else {
                        RetryCause::RunFailed { run: *run }
                    },
                    reason: outcome
                        .failure_reason()
                        .unwrap_or_else(|| Reason::summarize("the run failed")),
                },
            ),
            _ => return,
        };
        match self.inner.board.execute(task, &command, DISPATCHER).await {
            Ok(_) => {}
            Err(BoardError::Refused(
                TaskError::StaleRun { .. }
                | TaskError::WrongColumn { .. }
                | TaskError::Archived { .. },
            )) => {}
            Err(error) => {
                // Left for the watchdog, which applies a recorded outcome to a task still in progress.
                tracing::warn!(%task, error = %error, "could not move the task on after its run");
            }
        }
    }

    /// Applies whatever outcome the run's stream holds (another writer's).
    async fn recover(&self, run: RunId) {
        match self.store().read_stream(&runs::stream(run)).await {
            Ok(events) => {
                if let Some(outcome) = events
                    .iter()
                    .filter_map(|e| run_rows::decode(e).ok())
                    .find(RunEvent::is_terminal)
                {
                    self.apply(&outcome).await;
                }
            }
            Err(error) => tracing::warn!(%run, %error, "cannot read the run's outcome"),
        }
    }

    /// One watchdog tick: runs silent for longer than the bound are declared lost (and their tasks retried);
    /// outcomes recorded but not yet applied to their task are applied; claims that never started are released.
    pub async fn watchdog_tick(&self) -> anyhow::Result<WatchdogStatus> {
        let store = self.store();
        let lost_after = chrono::Duration::from_std(self.inner.config.lost_after())?;
        let now = Utc::now();
        let mut status = WatchdogStatus::default();
        let local: HashSet<RunId> = self.local().running.values().map(|r| r.run).collect();
        let running = run_rows::query(store, Which::Running)
            .await
            .context("listing running runs")?;
        status.running = running.len();
        for row in &running {
            let Ok(run) = row.run_id.parse::<uuid::Uuid>().map(RunId) else {
                continue;
            };
            if local.contains(&run) {
                continue;
            }
            // A run this very process was running before a restart is gone, whatever its last heartbeat says.
            let orphan = row.worker.as_deref() == Some(self.inner.worker.as_str());
            if orphan || now - row.last_seen_at > lost_after {
                let why = if orphan {
                    format!("{} restarted while running it", self.inner.worker)
                } else {
                    format!(
                        "no heartbeat since {} (worker {})",
                        row.last_seen_at.to_rfc3339(),
                        row.worker.as_deref().unwrap_or("unknown")
                    )
                };
                if self.declare_lost(row, run, why).await? {
                    status.declared_lost += 1;
                }
            }
        }
        let in_progress = task_rows::list(
            store,
            &TaskFilter {
                column: Some(Column::InProgress),
                ..TaskFilter::default()
            },
        )
        .await
        .context("listing tasks in progress")?;
        for task in in_progress {
            let Some(run) = run_of(&task) else { continue };
            if local.contains(&run) {
                continue;
            }
            let rows = run_rows::query(store, Which::Run(&run.to_string())).await?;
            match rows.first() {
                Some(row) if row.state != "running" => {
                    self.recover(run).await;
                    status.recovered += 1;
                }
                Some(_) => {}
                None if now - task.updated_at > lost_after => {
                    // Claimed, but its run never recorded a start: the claimer died in between.
                    let row = RunRow {
                        run_id: run.to_string(),
                        task_id: task.id.to_string(),
                        attempt: task.attempts,
                        state: "running".into(),
                        worker: None,
                        profile: None,
                        log_path: None,
                        started_at: None,
                        last_seen_at: task.updated_at,
                        ended_at: None,
                        failure: None,
                        detail: None,
                        branch: None,
                        commit_sha: None,
                        duration_s: None,
                        output_bytes: 0,
                        tail: None,
                        version: 0,
                        last_position: 0,
                    };
                    let why = format!(
                        "claimed at {} but never started",
                        task.updated_at.to_rfc3339()
                    );
                    if self.declare_lost(&row, run, why).await? {
                        status.declared_lost += 1;
                    }
                }
                None => {}
            }
        }
        Ok(status)
    }

    async fn declare_lost(&self, row: &RunRow, run: RunId, why: String) -> anyhow::Result<bool> {
        let task: TaskId = row.task_id.parse().context("a run row names a bad task")?;
        let mut writer = RunWriter::new(self.inner.log.clone(), run, task, row.version);
        let lost = RunEvent::Failed {
            at: Utc::now(),
            run,
            task,
            attempt: u32::try_from(row.attempt).unwrap_or_default(),
            kind: FailureKind::Lost,
            detail: format!("the run was lost: {why}"),
            duration_s: row
                .started_at
                .map(|s| (Utc::now() - s).num_milliseconds() as f64 / 1000.0)
                .unwrap_or_default(),
            tail: String::new(),
        };
        match writer.append(&lost).await {
            Ok(()) => {
                tracing::warn!(%task, %run, %why, "run declared lost");
                metrics::counter!("pidevops_runs_total", "outcome" => "lost").increment(1);
                self.apply(&lost).await;
                Ok(true)
            }
            // It spoke up (or ended) since the read model was written: alive after all, or already over.
            Err(Written::Taken) => Ok(false),
            Err(Written::Failed(error)) => Err(error),
        }
    }

    /// One gc tick: run directories older than the TTL whose runs are over (or unknown) are removed.
    pub async fn gc_tick(&self) -> anyhow::Result<super::workspace::GcReport> {
        let running: HashSet<String> = run_rows::query(self.store(), Which::Running)
            .await
            .context("listing running runs")?
            .into_iter()
            .map(|r| r.run_id)
            .collect();
        let local: HashSet<RunId> = self.local().running.values().map(|r| r.run).collect();
        let keep = move |_task: TaskId, run: RunId| {
            local.contains(&run) || running.contains(&run.to_string())
        };
        Ok(self
            .inner
            .workspaces
            .gc(self.inner.config.worktree_ttl, &keep)
            .await?)
    }
}

/// The run a task row says is live.
fn run_of(row: &TaskRow) -> Option<RunId> {
    row.state
        .get("run")?
        .as_str()?
        .parse::<uuid::Uuid>()
        .ok()
        .map(RunId)
}

/// Why a run event was not written.
enum Written {
    /// The stream moved on or the end key is taken: someone else decided this run's fate.
    Taken,
    Failed(anyhow::Error),
}

/// Appends a run's events at consecutive stream versions.
#[derive(Clone)]
struct RunWriter {
    log: EventLog,
    run: RunId,
    task: TaskId,
    version: i64,
}

impl RunWriter {
    fn new(log: EventLog, run: RunId, task: TaskId, version: i64) -> Self {
        Self {
            log,
            run,
            task,
            version,
        }
    }

    async fn append(&mut self, event: &RunEvent) -> Result<(), Written> {
        let key = if event.is_terminal() {
            runs::end_key(self.run)
        } else {
            format!("run:{}:{}", self.run, self.version + 1)
        };
        let body = serde_json::to_vec(event).map_err(|e| Written::Failed(e.into()))?;
        let mut new = NewEvent::new(
            Source::Pidevops,
            EventType::from_stored(event.kind().to_owned()),
            key,
            "application/json",
            bytes::Bytes::from(body),
        );
        new.stream = Some((runs::stream(self.run), self.version + 1));
        new.occurred_at = event.at();
        new.subject.reference = Some(self.task.to_string());
        new.meta
            .insert("actor".to_owned(), serde_json::Value::from(DISPATCHER));
        match self.log.append(new).await {
            Ok(appended) if !appended.duplicate => {
                self.version += 1;
                Ok(())
            }
            Ok(_) | Err(AppendError::Conflict { .. }) => Err(Written::Taken),
            Err(error) => Err(Written::Failed(error.into())),
        }
    }
}

/// Pauses or resumes dispatch for every replica: an event in the `dispatch` stream.
pub async fn set_paused(
    log: &EventLog,
    paused: bool,
    actor: &str,
    reason: Option<&str>,
) -> anyhow::Result<bool> {
    for _ in 0..8 {
        let store = log.store();
        let version = store.stream_version(DISPATCH_STREAM).await?;
        let current = pause_state(store).await?.is_some();
        if current == paused {
            return Ok(false);
        }
        let kind = if paused {
            "dispatch.paused"
        } else {
            "dispatch.resumed"
        };
        let body = serde_json::json!({
            "at": Utc::now(),
            "by": actor,
            "reason": reason,
        });
        let mut new = NewEvent::new(
            Source::Pidevops,
            EventType::from_stored(kind.to_owned()),
            format!("{DISPATCH_STREAM}:{}", version + 1),
            "application/json",
            bytes::Bytes::from(body.to_string()),
        );
        new.stream = Some((DISPATCH_STREAM.to_owned(), version + 1));
        new.meta
            .insert("actor".to_owned(), serde_json::Value::from(actor));
        match log.append(new).await {
            Ok(appended) if !appended.duplicate => return Ok(true),
            Ok(_) | Err(AppendError::Conflict { .. }) => continue,
            Err(error) => return Err(error.into()),
        }
    }
    anyhow::bail!("the pause state kept changing; try again")
}

/// `Some(reason)` when the last pause command paused dispatch.
pub async fn pause_state(store: &EventStore) -> anyhow::Result<Option<String>> {
    let events = store.read_stream(DISPATCH_STREAM).await?;
    let Some(last) = events.last() else {
        return Ok(None);
    };
    if last.event_type != "dispatch.paused" {
        return Ok(None);
    }
    let body: serde_json::Value = serde_json::from_slice(&last.body).unwrap_or_default();
    let by = body["by"].as_str().unwrap_or("someone");
    Ok(Some(match body["reason"].as_str() {
        Some(reason) => format!("paused by {by}: {reason}"),
        None => format!("paused by {by}"),
    }))
}

/// Whether `program` resolves to an executable file, the way the runner will look for it.
pub fn resolves(program: &str, path: Option<&str>) -> bool {
    super::sandbox::find_program(program, path).is_some()
}

/// Why runs cannot happen under this configuration, if they cannot: the dispatcher is then `unarmed`.
pub fn cannot_run(
    config: &DispatchConfig,
    profiles: &Profiles,
    env: &Env,
    has_github_token: bool,
    has_nats: bool,
) -> Option<String> {
    if config.executor == Executor::Workers && !has_nats {
        return Some("dispatch.executor = \"workers\" needs NATS_URL".into());
    }
    if config.executor == Executor::Local && config.containment == ContainmentPolicy::Required {
        if let Containment::None { why } =
            super::sandbox::detect_cached(&config.bwrap, env.get("PATH"))
        {
            return Some(format!(
                "nothing can contain agents here ({why}); install bubblewrap, or set dispatch.containment = \"best-effort\" to run them uncontained"
            ));
        }
    }
    let mut used: Vec<(&str, &AgentProfile)> = Vec::new();
    for repo in config.repos.keys() {
        used.push((repo.as_str(), profiles.for_repo(repo)));
    }
    let default = profiles.default_profile();
    used.push(("the default", default));
    if config.executor == Executor::Local {
        for (whose, profile) in &used {
            let program = profile
                .command
                .first()
                .map(String::as_str)
                .unwrap_or_default();
            if !resolves(program, env.get("PATH")) {
                return Some(format!(
                    "agent profile {:?} ({whose} profile) runs {program:?}, which is not an executable on PATH",
                    profile.name
                ));
            }
        }
    }
    if !has_github_token {
        if config.repos.is_empty() {
            return Some(
                "no [repos] are configured, so every repository is cloned from GitHub, and GITHUB_TOKEN is not set"
                    .into(),
            );
        }
        if let Some((repo, source)) = config
            .repos
            .iter()
            .find(|(_, source)| source.needs_github_token())
        {
            return Some(format!(
                "{repo} is cloned from {}, which needs GITHUB_TOKEN, and it is not set",
                source.url
            ));
        }
    }
    None
}

/// The resolved dispatch duration bound, for `/health` interval reporting.
pub fn watchdog_interval(config: &DispatchConfig) -> Duration {
    config.heartbeat.max(Duration::from_millis(100))
}
