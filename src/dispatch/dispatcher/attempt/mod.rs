//! One attempt, end to end: its start recorded, worktree, agent (with heartbeats), commit, push, and its one
//! outcome written by the run writer and applied to the task. The watchdog shares the writer and `apply`: a
//! run's fate is decided by whichever terminal append wins.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use chrono::Utc;
use tokio_util::sync::CancellationToken;

use super::ending::badly_ended;
use super::hooks::{Step, StepContext, StepFailed};
use super::launch::Access;
use super::limits::BudgetWatch;
use super::run_writer::{RunWriter, Written};
use super::Dispatcher;

mod heartbeat;
mod outcome;
mod refresh_check;
mod resolve;
use crate::config::profiles::{AgentProfile, LiveInput, OnFollowUp};
use crate::config::repo_env::RepoEnv;
use crate::dispatch::live;
use crate::dispatch::runner::{self, Ending};
use crate::dispatch::runs::{FailureKind, RunEvent};
use crate::dispatch::sessions::SessionPlan;
use crate::dispatch::workspace::Prepared;
use crate::domain::usage::RunUsage;
use crate::tasks::ReviewPolicy;
use crate::tasks::{AttemptReport, RunId, RunPurpose, Task, TaskId};
use heartbeat::Heartbeat;
use outcome::StoppedFor;

/// An attempt's worktree ready for its agent.
struct Ready {
    prepared: Prepared,
    prompt: String,
    /// How long the hand-over took.
    handed: std::time::Duration,
    /// A conflict attempt's conflicted paths.
    conflicted: Vec<String>,
    /// How a work run's CLI keeps (and resumes) its session.
    session: Option<SessionPlan>,
}

impl Dispatcher {
    /// Runs a claimed attempt to its one outcome and moves the task on. Used by `serve` and by workers.
    pub async fn execute(&self, task: Task, run: RunId, attempt: u32, stop: CancellationToken) {
        let id = task.id();
        let repo = task.repo().clone();
        // A worker's configuration may lack a profile the task asks for: that attempt fails saying so.
        let purpose = task.purpose().unwrap_or_default();
        let profile = self.inner.profiles.for_run(&task, purpose).cloned();
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
            // No agent: the refresh made again, the repository's setup and check, the push.
            Ok(_) if purpose == RunPurpose::Refresh => {
                self.check_refresh(&task, run, attempt, &mut writer, stop)
                    .await
            }
            Ok(profile) => {
                // A conflict attempt cut off after its push: the resolution on the branch is its outcome.
                let pushed = match purpose {
                    RunPurpose::Resolve => self.resolution_pushed(&task, run, attempt).await,
                    _ => None,
                };
                match pushed {
                    Some(pushed) => Some(pushed),
                    None => {
                        self.attempt(&task, run, attempt, profile, &mut writer, stop)
                            .await
                    }
                }
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
                usage: None,
                until: None,
                reviewer_usage: None,
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
                    // A planner's or triage agent's run ends in what it proposed, not in "unknown".
                    RunEvent::Proposed { .. } => "proposed",
                    RunEvent::Started { .. }
                    | RunEvent::Heartbeat { .. }
                    | RunEvent::Checkpointed { .. }
                    | RunEvent::EgressRefused { .. } => "unknown",
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
            usage: None,
            until: None,
            reviewer_usage: None,
        };
        let purpose = task.purpose().unwrap_or_default();
        let output = Arc::new(AtomicU64::new(0));
        // Beats from the start: a worker's run has no other sign of life, and preparing its worktree (a first
        // clone of a big repository) or the repository's setup (an `npm ci`) may outlast the watchdog's bound.
        let mut heartbeat = self.heartbeat(id, run, writer.clone(), output.clone(), stop.clone());
        let Ready {
            prepared,
            prompt,
            handed,
            conflicted,
            session,
        } = match self.worktree_for(task, run, purpose, profile).await {
            Ok(ready) => ready,
            Err(detail) => {
                heartbeat.end(writer).await;
                return Some(fail(FailureKind::Workspace, detail, String::new()));
            }
        };
        let repo_env = self.repo_env_for(task, purpose);
        let meter = runner::meter(profile.usage.clone());
        // A work attempt's worktree is saved while its agent works: an interruption resumes from there.
        let notes = heartbeat.notes.clone();
        let checkpointer = (purpose == RunPurpose::Work).then(|| {
            self.checkpointer(task, run, &prepared, meter.clone(), notes, session.as_ref())
        });
        let budget = self.watch_budget(task, &meter, &heartbeat.agent_stop).await;
        // A work run is steered by follow-ups: live where its profile takes live input, else by `on_follow_up`.
        let (live_sender, live) = match profile.live_input {
            LiveInput::None => (None, None),
            format => {
                let (sender, live) = live::channel(format, &prompt);
                (Some(sender), Some(live))
            }
        };
        // Nothing to watch for a profile that queues (the domain sends the task round again after the run).
        let steered = live_sender.is_some() || profile.on_follow_up == OnFollowUp::Restart;
        let steering = (purpose == RunPurpose::Work && steered)
            .then(|| self.watch_follow_ups(id, run, profile, live_sender, &heartbeat.agent_stop));
        let around = self
            .around_agent(
                task,
                run,
                profile,
                &prepared,
                &prompt,
                repo_env.as_ref(),
                (&output, &heartbeat.agent_stop, &stop),
                (handed, &meter, live, session.as_ref()),
            )
            .await;
        let restarted = match steering {
            Some(watch) => watch.finish().await,
            None => false,
        };
        let checkpointed =
            super::checkpoints::finish(checkpointer).await || task.resuming(run).is_some();
        self.forget_hook_dirs(&prepared).await;
        // Committing and pushing hold no slot (the repository's check did: it is as heavy as the agent). A
        // reviewer agent is as heavy too: where one reads the work, the slot is let go after it.
        let reviewed = purpose == RunPurpose::Work
            && self.inner.config.review_policy(task.repo()) == ReviewPolicy::Agent;
        if !reviewed {
            self.release_slot(id);
        }
        let reviewer_usage = std::sync::Mutex::new(None);
        let ended = Ended {
            run,
            attempt,
            profile,
            stop: &stop,
            began: started,
            output: &output,
            agent_stop: &heartbeat.agent_stop,
            reviewer_usage: &reviewer_usage,
        };
        // Heartbeats go on while the work is committed and pushed (a big push can take a while).
        let outcome = match (around, purpose) {
            (Ok(finished), RunPurpose::Work) => {
                self.wrap_up(task, &prepared, finished, &ended, &fail).await
            }
            (Ok(finished), RunPurpose::Resolve) => {
                self.wrap_up_resolution(task, &prepared, finished, &ended, &fail, &conflicted)
                    .await
            }
            (Ok(finished), RunPurpose::Plan | RunPurpose::Triage) => {
                self.proposal(task, purpose, &prepared, finished, &ended, &fail)
                    .await
            }
            // Never here: `execute` runs a refresh check without an agent (`refresh_check.rs`).
            (Ok(finished), RunPurpose::Refresh) => fail(
                FailureKind::Workspace,
                "a refresh check runs no agent".into(),
                finished.tail,
            ),
            (Err(failed), _) => fail(failed.kind, failed.detail, failed.tail),
        };
        if reviewed {
            self.release_slot(id);
        }
        if checkpointed && matches!(outcome, RunEvent::Succeeded { .. }) {
            self.forget_checkpoints(id, &prepared).await;
        }
        // Its work is pushed (or its failure about to be recorded): the worktree may serve a queued task, unless
        // the run was stopped for its task (closed, or taken by another run): then it goes.
        let stopped = heartbeat.agent_stop.is_cancelled()
            && !stop.is_cancelled()
            && !heartbeat.lost.is_cancelled();
        self.done_with_worktree(&prepared, stopped).await;
        heartbeat.end(writer).await;
        if heartbeat.lost.is_cancelled() {
            return None;
        }
        if !self.record_refusals(writer, run, id, &prepared).await {
            return None;
        }
        let (usage, limit, refused, ran) = {
            let meter = meter.lock().unwrap_or_else(|e| e.into_inner());
            (
                meter.usage(),
                meter.limit().cloned(),
                meter.refused().map(str::to_owned),
                meter.ran(),
            )
        };
        let mut outcome = outcome;
        let stopped_for = StoppedFor {
            restarted,
            disk_full: heartbeat.disk_full.is_cancelled(),
            budget: budget.as_ref().and_then(BudgetWatch::exceeded),
        };
        self.stopped_why(&mut outcome, limit.as_ref(), attempt, stopped_for);
        let reviewer_usage = reviewer_usage
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let outcome = outcome.with_reviewer_usage(reviewer_usage);
        // Every run whose agent ran is counted, a run that reported nothing too (its cost unknown); one whose
        // agent never started (its setup failed) is not.
        let spent = (ran || !usage.is_empty() || refused.is_some()).then(|| RunUsage {
            repo: task.repo().to_string(),
            profile: profile.name.clone(),
            usage,
            refused,
        });
        Some(outcome.with_usage(spent))
    }

    /// The repository's setup, hooks and check for a run of `purpose`: a planner or a triage agent reads the code
    /// and leaves a file, and the repository's hooks and check are for work that is pushed.
    fn repo_env_for(&self, task: &Task, purpose: RunPurpose) -> Option<RepoEnv> {
        match purpose {
            RunPurpose::Work | RunPurpose::Resolve | RunPurpose::Refresh => {
                self.inner.config.environment(task.repo()).cloned()
            }
            RunPurpose::Plan | RunPurpose::Triage => None,
        }
    }

    /// The attempt's worktree prepared and handed to the agent, with its prompt written. `Err`: why not (a
    /// workspace failure).
    async fn worktree_for(
        &self,
        task: &Task,
        run: RunId,
        purpose: RunPurpose,
        profile: &AgentProfile,
    ) -> Result<Ready, String> {
        let source = self.inner.config.source(task.repo());
        let phase = std::time::Instant::now();
        let prepared = self
            .inner
            .workspaces
            .prepare(task.repo(), &source, task.id(), run)
            .await;
        metrics::histogram!("pidevops_run_phase_seconds", "phase" => "prepare")
            .record(phase.elapsed().as_secs_f64());
        let mut prepared = prepared.map_err(|error| error.to_string())?;
        // A conflict attempt starts on the commit pidevops pushed with the base merged in, markers and all.
        let mut resolution = None;
        if purpose == RunPurpose::Resolve {
            match self.start_resolution(task, &mut prepared).await {
                Ok(started) => resolution = Some(started),
                Err(error) => {
                    self.inner.workspaces.finished(&prepared);
                    return Err(error);
                }
            }
        }
        // A resumed attempt starts where its checkpoint left it (or, that failing, from the base, and is told so).
        let restored = match task.resuming(run) {
            Some(checkpoint) if purpose == RunPurpose::Work => {
                match self.restore(task, &mut prepared, checkpoint).await {
                    Ok(restored) => Some((restored, checkpoint)),
                    Err(error) => {
                        self.inner.workspaces.finished(&prepared);
                        return Err(error);
                    }
                }
            }
            _ => None,
        };
        // A work run's CLI session: resumed with the worktree, from the same checkpoint.
        let session = match purpose {
            RunPurpose::Work => {
                let at = restored.as_ref().and_then(|(r, c)| r.is_ok().then_some(*c));
                self.session_plan(task, profile, &prepared, at).await
            }
            _ => None,
        };
        let launching = std::time::Instant::now();
        if let Err(error) = self.inner.workspaces.hand_to_agent(&prepared).await {
            self.inner.workspaces.finished(&prepared);
            return Err(error.to_string());
        }
        // A planner or a triage agent loads no agent CLI configuration a merged change could have brought.
        if !matches!(purpose, RunPurpose::Work | RunPurpose::Resolve) {
            if let Err(error) = self.set_aside_agent_config(&prepared).await {
                self.inner.workspaces.finished(&prepared);
                return Err(error);
            }
        }
        let (conflicted, prompt) = resolution.unwrap_or_else(|| {
            let mut prompt =
                crate::dispatch::prompt::for_run(task, purpose, self.inner.plans.max_items);
            if let Some((restored, _)) = &restored {
                prompt.push_str(&crate::dispatch::prompt::resumed(task, run, restored));
            }
            if session.as_ref().is_some_and(|s| s.resume.is_some()) {
                prompt.push_str(crate::dispatch::prompt::SESSION_RESUMED);
            }
            (Vec::new(), prompt)
        });
        if let Err(error) = tokio::fs::write(&prepared.dirs.prompt, &prompt).await {
            return Err(format!("cannot write the prompt file: {error}"));
        }
        Ok(Ready {
            prepared,
            prompt,
            handed: launching.elapsed(),
            conflicted,
            session,
        })
    }

    /// The hosts the agent's egress proxy refused, recorded on its run. `false`: the run was declared lost
    /// meanwhile (its recorded outcome stands).
    async fn record_refusals(
        &self,
        writer: &mut RunWriter,
        run: RunId,
        id: TaskId,
        prepared: &Prepared,
    ) -> bool {
        let refused = self.take_refusals(prepared);
        if refused.is_empty() {
            return true;
        }
        let event = RunEvent::EgressRefused {
            at: Utc::now(),
            run,
            task: id,
            refused,
        };
        match writer.append(&event).await {
            Ok(()) => true,
            Err(Written::Taken) => false,
            Err(Written::Failed(error)) => {
                tracing::warn!(task = %id, %run, error = format!("{error:#}"), "egress refusals not recorded");
                true
            }
        }
    }

    /// The agent and the repository's commands around it: setup and before_run, the agent, then after_run and
    /// check when it exited 0 (see `hooks.rs`). `Ok`: how the agent ended, its work checked; `Err`: a step failed.
    #[allow(clippy::too_many_arguments)]
    async fn around_agent(
        &self,
        task: &Task,
        run: RunId,
        profile: &AgentProfile,
        prepared: &Prepared,
        prompt: &str,
        repo_env: Option<&RepoEnv>,
        (output, agent_stop, stop): (&Arc<AtomicU64>, &CancellationToken, &CancellationToken),
        (handed, meter, live, session): (
            std::time::Duration,
            &runner::SharedMeter,
            Option<live::Live>,
            Option<&SessionPlan>,
        ),
    ) -> Result<runner::Finished, StepFailed> {
        let none = RepoEnv::default();
        let env = repo_env.unwrap_or(&none);
        let secrets = self.hook_secrets(env)?;
        let cx = StepContext {
            prepared,
            env,
            secrets: &secrets,
            output,
            stop: agent_stop,
            shutdown: stop,
        };
        // Every attempt's worktree is fresh (a checkout, a spare, or a finished one reset and cleaned), so setup
        // runs once in it, before anything else.
        self.run_step(Step::Setup, &cx).await?;
        self.run_step(Step::BeforeRun, &cx).await?;
        let launching = std::time::Instant::now();
        let mut launch = self
            .launch(
                task,
                run,
                profile,
                prepared,
                prompt,
                Access::Worktree,
                session,
            )
            .map_err(|error| StepFailed {
                kind: FailureKind::Workspace,
                detail: format!("{error:#}"),
                tail: String::new(),
            })?;
        metrics::histogram!("pidevops_run_phase_seconds", "phase" => "launch")
            .record((handed + launching.elapsed()).as_secs_f64());
        launch.meter = Some(meter.clone());
        if live.is_some() {
            launch.live = live;
        }
        let finished = runner::run(launch, output.clone(), agent_stop.clone()).await;
        // A question ends the attempt whatever the exit status (a CLI may exit 1 once it stops to ask), before the
        // repository's after_run and check, which would judge work the agent left half done on purpose. A
        // provider's limit, a timeout or a stop says more about the attempt than a file left behind.
        // A triage agent rewrites a ticket for a person who reviews it anyway: its question is not asked.
        let asks = task.purpose() != Some(RunPurpose::Triage);
        if asks && matches!(finished.ending, Ending::Exited(_)) && finished.said.limit.is_none() {
            if let Err((kind, detail)) = self.question_verdict(prepared).await {
                return Err(StepFailed {
                    kind,
                    detail,
                    tail: finished.tail.clone(),
                });
            }
        }
        if finished.ending == Ending::Exited(0) {
            self.run_step(Step::AfterRun, &cx).await?;
            // The agent's claim that its work is done, checked: the run pushes nothing unless this passes.
            self.run_step(Step::Check, &cx).await?;
        }
        Ok(finished)
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

    /// The outcome of an attempt whose agent has ended: its exit judged, its own verdict read, its work committed,
    /// held to its scope, reviewed where a reviewer is configured, and pushed. Nothing is pushed unless each says
    /// yes (`verdicts.rs`).
    async fn wrap_up(
        &self,
        task: &Task,
        prepared: &Prepared,
        finished: runner::Finished,
        ended: &Ended<'_>,
        fail: &impl Fn(FailureKind, String, String) -> RunEvent,
    ) -> RunEvent {
        let (id, run, attempt) = (task.id(), ended.run, ended.attempt);
        let tail = finished.tail.clone();
        let failed = |kind, detail: String| fail(kind, detail, tail.clone());
        if let Some(failure) = badly_ended(&finished, ended.profile, ended.stop, fail) {
            return failure;
        }
        let summary = match self.agent_verdict(prepared).await {
            Ok(summary) => summary,
            Err((kind, detail)) => return failed(kind, detail),
        };
        let message = super::commit_message(id, &ended.profile.name, attempt, run);
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
        let scoped = match self.scope_verdict(task, prepared, &commit).await {
            Ok(scoped) => scoped,
            Err((kind, detail)) => return failed(kind, detail),
        };
        // What the attempt changed, for its page: from ids we recorded, by our git, capped; never fatal to the run.
        let phase = std::time::Instant::now();
        if let Err(error) = self.inner.workspaces.record_diff(prepared, &commit).await {
            tracing::warn!(task = %id, %run, %error, "the attempt's diff was not recorded");
        }
        metrics::histogram!("pidevops_run_phase_seconds", "phase" => "diff")
            .record(phase.elapsed().as_secs_f64());
        let review = match self.review_verdict(task, prepared, &commit, ended).await {
            Ok(review) => review,
            Err((kind, detail)) => return failed(kind, detail),
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
            duration_s: ended.began.elapsed().as_secs_f64(),
            tail,
            report: Box::new(AttemptReport {
                summary,
                review,
                outside_scope: scoped.outside,
                agent_config: scoped.agent_config,
            }),
            usage: None,
            reviewer_usage: None,
        }
    }
}

/// What a run that has ended needs to say how it ended.
pub(super) struct Ended<'a> {
    pub run: RunId,
    pub attempt: u32,
    pub profile: &'a AgentProfile,
    /// The service stopping.
    pub stop: &'a CancellationToken,
    pub began: std::time::Instant,
    /// The run's output counter and the token that stops its agents (a reviewer's too).
    pub output: &'a Arc<AtomicU64>,
    pub agent_stop: &'a CancellationToken,
    /// What the reviewer spent, once it ran.
    pub reviewer_usage: &'a std::sync::Mutex<Option<RunUsage>>,
}
