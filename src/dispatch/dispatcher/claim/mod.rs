//! The dispatcher tick: which `todo` tasks may start now (not paused, within the limits, past their retry
//! backoff, runnable here), the claim itself (an append of `task.started`), and the start: a local run, or a
//! request on the work queue for a worker.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{run_of, Dispatcher, LocalRun, RunRequest, DISPATCHER};

mod ready;
use crate::board::BoardError;
use crate::config::dispatch::Executor;
use crate::dispatch::schedule::{self, Candidate};
use crate::projectors::tasks::{self as task_rows, TaskFilter, TaskRow};
use crate::tasks::{Column, Command, Reason, RepoName, RunId, RunPurpose, Task, TaskId};
use ready::lifted;

/// How long a task sent back for a follow-up waits before it starts: GitHub sends a review and each of its line
/// comments as separate webhooks in no promised order, and a person often writes twice in a row, so one run gets
/// them all rather than the first alone.
pub const FOLLOW_UP_SETTLE: chrono::Duration = chrono::Duration::seconds(5);

/// Most `todo` tasks one tick considers; the rest wait for the next (most urgent and oldest first).
const QUEUE_WINDOW: u32 = 1000;

/// What `/health` shows of the dispatcher. It is the loop's detail (JSON) and is read back typed
/// (`DispatchStatus::of`) by `/health`'s warnings and the Runs page, so a renamed field is a compile error there.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DispatchStatus {
    pub paused: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_reason: Option<String>,
    /// Tasks ready to start, waiting for a slot.
    pub queue: usize,
    /// Tasks in `todo` held back by their retry backoff.
    pub backing_off: usize,
    /// Tasks in `todo` waiting for the tasks they depend on to be done.
    pub waiting_on_dependencies: usize,
    /// Profiles whose provider's usage or rate limit stopped an attempt, and when it lifts: nothing starts on
    /// them meanwhile (their tasks count in `limited`, not in `queue`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limited_profiles: BTreeMap<String, DateTime<Utc>>,
    /// What holds each of those profiles back, and whose word it is (`domain::limits`); a profile on probation
    /// (one probe run may start) is here and not in `limited_profiles`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limit_holds: BTreeMap<String, crate::domain::limits::Hold>,
    /// Tasks in `todo` waiting for their profile's limit to lift.
    pub limited: usize,
    /// Profiles that cannot run here, and why (their preflight: `dispatch::preflight`): the configured ones and
    /// those a waiting task asks for. Nothing starts on them; their tasks count in `unready`, not in `queue`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unready_profiles: BTreeMap<String, String>,
    /// Tasks in `todo` waiting for their profile (or their repository's reviewer) to pass its preflight.
    pub unready: usize,
    /// Tasks in `todo` held back because a budget they fall under is spent.
    pub over_budget: usize,
    /// Each budget spent (nothing starts in it) or past its soft limit, in words.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<String>,
    pub running: usize,
    pub slots: usize,
    pub started: usize,
    pub executor: String,
    /// What contains agents here: `namespaces`, `landlock` or `none`.
    pub containment: String,
    /// The same, in words.
    pub confinement: String,
    /// Why nothing is claimed now for lack of disk: the workspace volume has less free than
    /// `dispatch.min_free_disk_mib` (a local executor's only; workers' volumes are their own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_low: Option<String>,
    /// Bytes free on the workspace volume at this tick, where it could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_free_bytes: Option<u64>,
    /// What bounds each agent's memory here: a cgroup v2 limit, or "not bounded, because …".
    pub memory: String,
    /// What bounds each agent's HOME, TMPDIR and /tmp here: sized tmpfs, or "not bounded, because …".
    pub scratch: String,
}

impl DispatchStatus {
    /// The dispatcher's status from its loop's detail; `None` for another loop's detail (or none).
    pub fn of(detail: Option<&serde_json::Value>) -> Option<Self> {
        serde_json::from_value(detail?.clone()).ok()
    }
}

impl Dispatcher {
    /// One dispatcher tick: start what fits. Also run when a local run ends, so a freed slot is filled at once.
    pub async fn tick(&self) -> anyhow::Result<DispatchStatus> {
        let selecting = std::time::Instant::now();
        let _one_at_a_time = self.inner.fill.lock().await;
        let (todo, in_progress) = self.todo_and_in_progress().await?;
        // After the listing, not before: a task created after a pause was committed is listed only if that pause
        // is seen here too (read first, a tick could miss the pause and still list the task: seen starting it).
        let paused = self.paused().await.context("reading the pause state")?;

        let running = self.running_per_repo(&in_progress);
        let now = Utc::now();
        let mut backing_off = 0;
        let mut todo = self.refuse_unallowed(todo).await?;
        let blocked = self.blocked_by_dependencies(&todo).await?;
        let waiting_on_dependencies = blocked.len();
        todo.retain(|row| !blocked.contains(&row.id));
        todo.extend(self.waiting_for_triage().await?);
        let holds = self.limit_holds(now).await?;
        let (limited_profiles, lifts) = (holds.paused(), holds.lifts.clone());
        // The profiles on probation with a run going (here or on the board) start no other.
        let mut probes: HashSet<String> = in_progress
            .iter()
            .chain(
                todo.iter()
                    .filter(|row| self.local().running.contains_key(&row.id)),
            )
            .map(|row| self.profile_name_of(row))
            .filter(|profile| holds.probing(profile))
            .map(str::to_owned)
            .collect();
        let (mut limited, mut on_probation, mut unready) = (0, 0, 0);
        let mut unready_profiles = self.unready_used();
        let candidates: Vec<Candidate> = todo
            .iter()
            .filter(|row| !row.needs_human && row.attempts < row.max_attempts)
            .filter(|row| !self.local().running.contains_key(&row.id))
            // A profile that cannot run here would only fail: its tasks wait, with no attempt spent.
            .filter(|row| {
                let blocked = self.unready_for(row);
                let waits = !blocked.is_empty();
                unready += usize::from(waits);
                unready_profiles.extend(blocked);
                !waits
            })
            .filter(|row| {
                let profile = self.profile_name_of(row);
                let waits = limited_profiles.contains_key(profile)
                    && self
                        .inner
                        .profiles
                        .fallback_for(profile, &limited_profiles)
                        .is_none();
                limited += usize::from(waits);
                !waits
            })
            .filter(|row| {
                let ready = self
                    .ready_at(row, &limited_profiles, &lifts)
                    .is_none_or(|at| at <= now);
                backing_off += usize::from(!ready);
                ready
            })
            // A profile on probation (one run's unverified limit, past its window): one run at a time.
            .filter(|row| {
                let profile = self.profile_name_of(row);
                let waits = holds.probing(profile) && !probes.insert(profile.to_owned());
                on_probation += usize::from(waits);
                !waits
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
        let limited = limited + on_probation;
        let (candidates, over_budget, budgets) = self.within_budgets(candidates).await?;
        let slots = self.inner.config.limits.global;
        let mut status = DispatchStatus {
            paused: paused.is_some(),
            paused_reason: paused,
            queue: candidates.len(),
            backing_off,
            waiting_on_dependencies,
            limited_profiles,
            limit_holds: holds.holds,
            limited,
            unready_profiles,
            unready,
            over_budget,
            budgets,
            running: running.values().sum(),
            slots,
            started: 0,
            executor: match self.inner.config.executor {
                Executor::Local => "local".to_owned(),
                Executor::Workers => "workers".to_owned(),
            },
            containment: self.inner.containment.kind().to_owned(),
            confinement: self.confinement(),
            disk_low: None,
            workspace_free_bytes: None,
            memory: self.memory(),
            scratch: self.scratch(),
        };
        if self.inner.config.executor == Executor::Local {
            (status.workspace_free_bytes, status.disk_low) = self.disk_room();
        }
        let mut started = HashSet::new();
        if !status.paused && status.disk_low.is_none() {
            let picked = schedule::pick(&candidates, &running, &self.inner.config.limits);
            if !picked.is_empty() {
                metrics::histogram!("pidevops_run_phase_seconds", "phase" => "select")
                    .record(selecting.elapsed().as_secs_f64());
            }
            for id in picked {
                let claiming = std::time::Instant::now();
                let claimed = self
                    .claim_and_start(id, &status.limited_profiles, &lifts)
                    .await?;
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
        // A worktree checked out ahead takes disk too: none while claims wait for it.
        if self.inner.config.executor == Executor::Local && status.disk_low.is_none() {
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

    /// The board's todo column (its first `QUEUE_WINDOW` rows) and the tasks in progress.
    async fn todo_and_in_progress(&self) -> anyhow::Result<(Vec<TaskRow>, Vec<TaskRow>)> {
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
        Ok((todo, in_progress))
    }

    /// The workspace volume's free bytes, and why nothing may be claimed on it, if nothing may. A volume whose
    /// space cannot be read holds nothing back: the claim's own writes will say what is wrong.
    fn disk_room(&self) -> (Option<u64>, Option<String>) {
        let root = self.inner.workspaces.root();
        match crate::dispatch::disk::free_bytes(root) {
            Ok(free) => (
                Some(free),
                crate::dispatch::disk::too_full(root, free, self.inner.config.bounds.min_free_disk),
            ),
            Err(error) => {
                tracing::warn!(root = %root.display(), %error, "cannot read the workspace volume's free space");
                (None, None)
            }
        }
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

    /// The `todo` tasks that depend on a task not done yet: they wait, visibly, and never start before it is.
    /// The read model may lag the log, never lead it, and `done` is final: a dependency it shows done is done.
    async fn blocked_by_dependencies(&self, todo: &[TaskRow]) -> anyhow::Result<HashSet<TaskId>> {
        let mut done: HashMap<TaskId, bool> = HashMap::new();
        let mut blocked = HashSet::new();
        for row in todo {
            for dependency in row.depends_on() {
                let satisfied = match done.get(&dependency) {
                    Some(satisfied) => *satisfied,
                    None => {
                        let row = task_rows::get(self.store(), dependency)
                            .await
                            .with_context(|| format!("reading {dependency}, a dependency"))?;
                        let satisfied = row.as_ref().is_some_and(TaskRow::is_done);
                        done.insert(dependency, satisfied);
                        satisfied
                    }
                };
                if !satisfied {
                    blocked.insert(row.id);
                }
            }
        }
        Ok(blocked)
    }

    /// Tasks waiting in triage that a triage agent has not seen, when one is configured.
    async fn waiting_for_triage(&self) -> anyhow::Result<Vec<TaskRow>> {
        if self.inner.profiles.triager().is_none() {
            return Ok(Vec::new());
        }
        let triage = task_rows::list(
            self.store(),
            &TaskFilter {
                column: Some(Column::Triage),
                limit: Some(QUEUE_WINDOW),
                ..TaskFilter::default()
            },
        )
        .await
        .context("listing tasks in triage")?;
        let triage = self.refuse_unallowed(triage).await?;
        Ok(triage
            .into_iter()
            .filter(|row| {
                row.state.get("kind").is_none()
                    && row.state.get("triage").is_none()
                    && !row.needs_human
            })
            .collect())
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
            // An approved plan is in progress with no run: its items hold the slots.
            if run_of(row).is_none() {
                continue;
            }
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

    /// Claims `id` (appends `task.started`) and starts its run. `false` when someone else got there first.
    async fn claim_and_start(
        &self,
        id: TaskId,
        limited_profiles: &BTreeMap<String, DateTime<Utc>>,
        lifts: &BTreeMap<String, DateTime<Utc>>,
    ) -> anyhow::Result<bool> {
        // The backoff is checked again on the task as the log has it: the read model the queue came from may be
        // behind a failure that just happened.
        let loaded = self
            .inner
            .board
            .load(id)
            .await
            .with_context(|| format!("reading {id} before claiming it"))?;
        if let Some(loaded) = &loaded {
            let task = &loaded.task;
            let purpose = if task.column() == Column::Triage {
                RunPurpose::Triage
            } else {
                task.next_purpose()
            };
            let profile = self
                .inner
                .profiles
                .for_run(task, purpose)
                .ok()
                .map(|p| p.name.clone());
            // A profile paused by its provider's limit, with a fallback that is not: the fallback runs the work.
            let fallback = profile
                .as_deref()
                .filter(|p| limited_profiles.contains_key(*p) && purpose == RunPurpose::Work)
                .and_then(|p| self.inner.profiles.fallback_for(p, limited_profiles));
            let waiting = task.last_failure().and_then(|failure| {
                if lifted(failure, profile.as_ref().and_then(|p| lifts.get(p))) {
                    return None;
                }
                self.failure_ready_at(id, task.attempts(), failure, fallback.is_some())
                    .filter(|ready| *ready > Utc::now())
            });
            if waiting.is_some() {
                return Ok(false);
            }
            // Its profile hit its provider's limit (on this task or another): this attempt would hit the same
            // wall. With a fallback, the task is moved to it (an event, on its timeline) and runs.
            if let Some(profile) = profile.as_deref() {
                if limited_profiles.contains_key(profile) {
                    let Some(fallback) = fallback else {
                        return Ok(false);
                    };
                    let agent = fallback
                        .name
                        .parse()
                        .context("a fallback profile's name is a profile name")?;
                    let chosen = Command::ChooseAgent { agent: Some(agent) };
                    match self.inner.board.execute(id, &chosen, DISPATCHER).await {
                        Ok(_) => {}
                        Err(BoardError::Refused(_)) => return Ok(false),
                        Err(error) => {
                            return Err(error).with_context(|| {
                                format!(
                                    "moving {id} to {}, the fallback of {profile}",
                                    fallback.name
                                )
                            })
                        }
                    }
                    tracing::info!(task = %id, from = profile, to = %fallback.name, "its profile is limited: the fallback runs it");
                }
            }
            // Its profile fails its preflight (the read model's row may have named another): it waits.
            if let Ok(profile) = self.inner.profiles.for_run(task, purpose) {
                if self.unready(profile).is_some() {
                    return Ok(false);
                }
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
        // A task waiting in triage is claimed for its triage run; any other for its next attempt.
        let triage = loaded
            .as_ref()
            .is_some_and(|l| l.task.column() == Column::Triage);
        // An attempt cut off by a restart, a lost worker, a limit or a follow-up's restart goes on from its last
        // checkpoint, as the same attempt.
        let resume = match loaded.as_ref() {
            Some(loaded) if !triage => self.resume_point(&loaded.task).await?,
            _ => None,
        };
        let start = match resume {
            _ if triage => Command::StartTriage { run },
            Some(checkpoint) => Command::Resume {
                run,
                checkpoint: Box::new(checkpoint),
            },
            None => Command::Start { run },
        };
        let outcome = match self.inner.board.execute(id, &start, DISPATCHER).await {
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

    /// Why `task` cannot run here until a person acts, if it cannot: the agent profile it asks for does not
    /// exist, or its prompt cannot fit its command line. A profile that exists but cannot run here (its
    /// preflight) holds the task without flagging it: fixing the machine un-blocks it.
    fn unrunnable(&self, task: &Task) -> Option<String> {
        let purpose = if task.column() == Column::Triage {
            RunPurpose::Triage
        } else {
            // A plan's planner, a conflict's attempt, else the work.
            task.next_purpose()
        };
        let profile = match self.inner.profiles.for_run(task, purpose) {
            Ok(profile) => profile,
            Err(why) => return Some(why),
        };
        // Every attempt would fail the same way (E2BIG): a person shortens the spec or changes the profile.
        profile.refuses_prompt(&crate::dispatch::prompt::for_run(
            task,
            purpose,
            self.inner.plans.max_items,
        ))
    }

    /// The configured profiles that fail their preflight, by name, with why.
    fn unready_used(&self) -> BTreeMap<String, String> {
        crate::dispatch::preflight::used_profiles(&self.inner.config, &self.inner.profiles)
            .into_iter()
            .filter_map(|(_, profile)| Some((profile.name.clone(), self.unready(profile)?)))
            .collect()
    }

    /// The profiles `row` needs that fail their preflight: its own and, for work in a repository reviewed by an
    /// agent, its reviewer.
    fn unready_for(&self, row: &TaskRow) -> BTreeMap<String, String> {
        let profiles = &self.inner.profiles;
        let mut needed: Vec<&crate::config::profiles::AgentProfile> = Vec::new();
        needed.extend(profiles.get(self.profile_name_of(row)));
        if row.column != Column::Triage && !row.is_plan() {
            if let Ok(repo) = row.repo.parse::<RepoName>() {
                if self.inner.config.review_policy(&repo) == crate::tasks::ReviewPolicy::Agent {
                    needed.extend(profiles.reviewer_for(&repo));
                }
            }
        }
        needed
            .into_iter()
            .filter_map(|profile| Some((profile.name.clone(), self.unready(profile)?)))
            .collect()
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
}
