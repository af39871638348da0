//! Checkpoints while an agent works, and the resume they make possible (`tasks::domain::resume`): the worktree
//! saved every `checkpoint_every_s` and at each turn's end the agent's output shows, each recorded as
//! `run.checkpointed`; at the claim, the checkpoint an interrupted attempt goes on from; at its start, the worktree
//! put back there.

use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::Dispatcher;
use crate::config::profiles::AgentProfile;
use crate::dispatch::runner::SharedMeter;
use crate::dispatch::runs::{self, RunEvent};
use crate::dispatch::sessions::{self, SessionPlan};
use crate::dispatch::workspace::Prepared;
use crate::tasks::landing::CommitSha;
use crate::tasks::{Checkpoint, RunId, Task, TaskId};

/// The shortest time between two checkpoints: an agent that prints a turn's usage line in a loop does not make
/// pidevops commit in a loop.
pub const MIN_GAP: Duration = Duration::from_secs(5);
/// The most checkpoints one run takes (each is an event in the log).
pub const MAX_PER_RUN: u32 = 200;
/// How often the checkpointer looks at the agent's turns.
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// When the next checkpoint is due: `every` since the last, or a new turn, never within [`MIN_GAP`], at most
/// [`MAX_PER_RUN`]. Pure.
#[derive(Clone, Debug)]
pub struct Pace {
    every: Duration,
    last: Instant,
    turns: u32,
    taken: u32,
}

impl Pace {
    pub fn new(every: Duration, now: Instant) -> Self {
        Self {
            every,
            last: now,
            turns: 0,
            taken: 0,
        }
    }

    /// Whether to look at the worktree now, the agent's output having shown `turns` turns.
    pub fn due(&self, now: Instant, turns: u32) -> bool {
        if self.taken >= MAX_PER_RUN {
            return false;
        }
        let since = now.saturating_duration_since(self.last);
        since >= MIN_GAP && (turns > self.turns || since >= self.every)
    }

    /// Looked at `now`, at `turns` turns; `saved`: a checkpoint was taken.
    pub fn looked(&mut self, now: Instant, turns: u32, saved: bool) {
        self.last = now;
        self.turns = self.turns.max(turns);
        self.taken += u32::from(saved);
    }
}

/// The running checkpointer of one attempt; [`finish`] stops it and waits for a checkpoint in progress.
pub(super) struct Checkpointer {
    stop: CancellationToken,
    /// Whether it took any checkpoint.
    handle: tokio::task::JoinHandle<bool>,
}

/// Stops `checkpointer` (if the attempt has one): whether it took any checkpoint.
pub(super) async fn finish(checkpointer: Option<Checkpointer>) -> bool {
    let Some(checkpointer) = checkpointer else {
        return false;
    };
    checkpointer.stop.cancel();
    checkpointer.handle.await.unwrap_or(true)
}

impl Dispatcher {
    /// Saves `prepared` while its agent works; each checkpoint goes to `notes`, which the run's heartbeat writes
    /// in its stream (one writer per stream).
    pub(super) fn checkpointer(
        &self,
        task: &Task,
        run: RunId,
        prepared: &Prepared,
        meter: SharedMeter,
        notes: UnboundedSender<RunEvent>,
        session: Option<&SessionPlan>,
    ) -> Checkpointer {
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        // A resumed attempt's turns go on from its checkpoint's.
        let turns_before = task.resuming(run).map_or(0, |c| c.turn);
        let task = task.id();
        let workspaces = self.inner.workspaces.clone();
        let prepared = prepared.clone();
        let every = self.inner.config.checkpoint_every;
        let keeper = session.map(|plan| SessionKeeper {
            store: plan.store,
            home: plan.home.clone(),
            cwd: prepared.dirs.worktree.clone(),
            root: workspaces.root().to_owned(),
            task,
        });
        let handle = tokio::spawn(async move {
            let mut pace = Pace::new(every, Instant::now());
            let mut last_tree: Option<String> = None;
            let mut publishing = crate::dispatch::workspace::Publishing::default();
            loop {
                tokio::select! {
                    () = stopped.cancelled() => break last_tree.is_some(),
                    () = tokio::time::sleep(LOOK_EVERY) => {}
                }
                let turns = meter
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .usage()
                    .turns;
                let now = Instant::now();
                if !pace.due(now, turns) {
                    continue;
                }
                let saved = workspaces
                    .checkpoint(&prepared, task, last_tree.as_deref(), &mut publishing)
                    .await;
                let saved = match saved {
                    Ok(saved) => saved,
                    Err(error) => {
                        metrics::counter!("pidevops_checkpoints_total", "outcome" => "failed")
                            .increment(1);
                        tracing::warn!(%task, %run, %error, "checkpoint not taken");
                        pace.looked(now, turns, false);
                        continue;
                    }
                };
                pace.looked(now, turns, saved.is_some());
                let Some(saved) = saved else {
                    continue;
                };
                if let Err(why) = &saved.published {
                    tracing::warn!(%task, %run, why, "checkpoint kept here only: the remote refused it");
                }
                match recorded(run, &prepared, turns_before.saturating_add(turns), &saved) {
                    Ok(checkpoint) => {
                        last_tree = Some(saved.tree.clone());
                        if let Some(keeper) = &keeper {
                            keeper.keep(run, &saved.commit).await;
                        }
                        metrics::counter!("pidevops_checkpoints_total", "outcome" => "taken")
                            .increment(1);
                        let _ = notes.send(RunEvent::Checkpointed {
                            at: checkpoint.at,
                            run,
                            task,
                            checkpoint: Box::new(checkpoint),
                        });
                    }
                    Err(error) => {
                        tracing::warn!(%task, %run, %error, "checkpoint not recorded");
                    }
                }
            }
        });
        Checkpointer { stop, handle }
    }

    /// The attempt's work is pushed: its checkpoints are of no more use, here or on the remote (a failure to
    /// delete them is logged: the next attempt's overwrite them).
    pub(super) async fn forget_checkpoints(&self, task: TaskId, prepared: &Prepared) {
        let kept = sessions::tasks_dir(self.inner.workspaces.root(), task);
        if let Err(error) = tokio::fs::remove_dir_all(&kept).await {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(%task, %error, "the sessions kept for a pushed attempt not deleted");
            }
        }
        if let Err(error) = self
            .inner
            .workspaces
            .forget_checkpoints(prepared, task)
            .await
        {
            tracing::warn!(%task, %error, "checkpoints of a pushed attempt not deleted");
        }
    }

    /// The checkpoint `task`'s next start resumes, if it may resume: the interrupted run's last one, else the
    /// one that run itself resumed.
    pub(super) async fn resume_point(&self, task: &Task) -> anyhow::Result<Option<Checkpoint>> {
        let Some(interrupted) = task.resumable() else {
            return Ok(None);
        };
        let recorded = self
            .inner
            .log
            .store()
            .read_stream_of_type(&runs::stream(interrupted), runs::CHECKPOINTED)
            .await
            .with_context(|| format!("reading run {interrupted}'s checkpoints"))?;
        let last =
            recorded
                .iter()
                .rev()
                .find_map(|e| match serde_json::from_slice::<RunEvent>(&e.body) {
                    Ok(RunEvent::Checkpointed {
                        run, checkpoint, ..
                    }) if run == interrupted && checkpoint.run == interrupted => Some(*checkpoint),
                    _ => None,
                });
        Ok(last.or_else(|| task.resumed_from().cloned()))
    }

    /// How a work run of `profile` keeps its CLI's session, if its CLI keeps one (a preset's program, whose home
    /// variable the profile neither passes nor sets: a deployment that points the CLI elsewhere keeps its own):
    /// a fresh home in the run's directory, and for an attempt whose worktree was put back at `restored`, the
    /// session kept with that checkpoint put back in it. A session that cannot be put back is said and left out:
    /// the attempt resumes from its files alone.
    pub(super) async fn session_plan(
        &self,
        task: &Task,
        profile: &AgentProfile,
        prepared: &Prepared,
        restored: Option<&Checkpoint>,
    ) -> Option<SessionPlan> {
        let program = profile.command.first()?;
        let store = crate::config::presets::by_program(program)?.session?;
        let var = sessions::home_var(store);
        if profile.env.iter().any(|v| v == var) || profile.set_env.contains_key(var) {
            return None;
        }
        // A command of the profile's own the CLI's resume flag cannot be added to keeps no session.
        if let Err(why) = sessions::resume_argv(store, profile.command.clone(), uuid::Uuid::nil()) {
            tracing::debug!(profile = %profile.name, %why, "no CLI session kept");
            return None;
        }
        let home = sessions::home(&prepared.dirs.dir);
        let root = self.inner.workspaces.root().to_owned();
        let (id, cwd) = (task.id(), prepared.dirs.worktree.clone());
        let commit = restored.map(|c| c.commit.as_str().to_owned());
        let made = home.clone();
        let resumed = tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&made)
                .map_err(|e| format!("cannot make the CLI's home {}: {e}", made.display()))?;
            let Some(commit) = commit else {
                return Ok(None);
            };
            let Some(kept) = sessions::kept(&root, id, &commit).map_err(|e| e.to_string())? else {
                return Ok(None);
            };
            sessions::put_back(store, &kept, &made, &cwd).map_err(|e| e.to_string())?;
            Ok(Some(kept.id))
        })
        .await
        .unwrap_or_else(|e| Err(format!("putting the session back panicked: {e}")));
        let resume = match resumed {
            Ok(resume) => resume,
            Err(why) => {
                tracing::warn!(task = %task.id(), why, "the CLI's session is not resumed");
                None
            }
        };
        if restored.is_some() {
            let outcome = if resume.is_some() {
                "resumed"
            } else {
                "not_resumed"
            };
            metrics::counter!("pidevops_cli_sessions_total", "outcome" => outcome).increment(1);
        }
        Some(SessionPlan {
            store,
            home,
            resume,
        })
    }

    /// Puts a resumed attempt's worktree where its checkpoint left it. `Ok(Err(why))`: it could not, and the
    /// worktree is back at the base (the agent is told); `Err`: not even that.
    pub(super) async fn restore(
        &self,
        task: &Task,
        prepared: &mut Prepared,
        checkpoint: &Checkpoint,
    ) -> Result<Result<(), String>, String> {
        let workspaces = &self.inner.workspaces;
        match workspaces.restore(prepared, task.id(), checkpoint).await {
            Ok(()) => {
                metrics::counter!("pidevops_resumes_total", "outcome" => "restored").increment(1);
                tracing::info!(task = %task.id(), checkpoint = %checkpoint.commit, "resumed from its checkpoint");
                Ok(Ok(()))
            }
            Err(error) => {
                metrics::counter!("pidevops_resumes_total", "outcome" => "started_over")
                    .increment(1);
                tracing::warn!(task = %task.id(), %error, "the checkpoint cannot be restored: starting over from the base");
                workspaces
                    .start_over(prepared)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Err(error.to_string()))
            }
        }
    }
}

/// Keeps the CLI's session with each checkpoint of a run (see `dispatch::sessions`).
struct SessionKeeper {
    store: sessions::SessionStore,
    home: std::path::PathBuf,
    cwd: std::path::PathBuf,
    root: std::path::PathBuf,
    task: crate::tasks::TaskId,
}

impl SessionKeeper {
    /// The session as it stands, kept as checkpoint `commit`'s; none found, or refused, is said and skipped (a
    /// resume from this checkpoint then starts a new session).
    async fn keep(&self, run: RunId, commit: &str) {
        let (store, home, cwd, root, task) = (
            self.store,
            self.home.clone(),
            self.cwd.clone(),
            self.root.clone(),
            self.task,
        );
        let commit = commit.to_owned();
        let kept = tokio::task::spawn_blocking(move || {
            let Some(transcript) = sessions::find(store, &home, &cwd)? else {
                return Ok(false);
            };
            sessions::keep(&root, task, &commit, &transcript).map(|()| true)
        })
        .await
        .unwrap_or_else(|e| {
            Err(sessions::SessionError::Io {
                what: "keep the session".into(),
                why: e.to_string(),
            })
        });
        let outcome = match kept {
            Ok(true) => "kept",
            Ok(false) => "none",
            Err(error) => {
                tracing::warn!(%task, %run, %error, "the CLI's session is not kept with the checkpoint");
                "refused"
            }
        };
        metrics::counter!("pidevops_cli_sessions_total", "outcome" => outcome).increment(1);
    }
}

/// The checkpoint as the log records it, from what git said (checked to be commit ids).
fn recorded(
    run: RunId,
    prepared: &Prepared,
    turns: u32,
    saved: &crate::dispatch::workspace::Saved,
) -> anyhow::Result<Checkpoint> {
    let (files, changed) = Checkpoint::bounded_files(&saved.files);
    Ok(Checkpoint {
        run,
        commit: CommitSha::new(&saved.commit).context("the checkpoint's commit")?,
        head: CommitSha::new(&saved.head).context("the checkpoint's parent")?,
        base: CommitSha::new(&prepared.base_commit).context("the attempt's base")?,
        turn: turns,
        at: Utc::now(),
        files,
        changed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_is_due_every_interval_and_at_each_new_turn_never_within_the_gap() {
        let start = Instant::now();
        let mut pace = Pace::new(Duration::from_secs(60), start);
        // Nothing yet: no turn, the interval not over.
        assert!(!pace.due(start + Duration::from_secs(10), 0));
        // A turn ended, but within the gap of the start.
        assert!(!pace.due(start + Duration::from_secs(1), 1));
        assert!(pace.due(start + MIN_GAP, 1));
        pace.looked(start + MIN_GAP, 1, true);
        // The same turn again is not a new one; the interval is.
        assert!(!pace.due(start + Duration::from_secs(30), 1));
        assert!(pace.due(start + MIN_GAP + Duration::from_secs(60), 1));
        // An agent printing turns in a loop: one look per gap.
        let at = start + Duration::from_secs(100);
        pace.looked(at, 2, false);
        assert!(!pace.due(at + Duration::from_secs(1), 50));
        assert!(pace.due(at + MIN_GAP, 50));
    }

    #[test]
    fn a_run_takes_at_most_its_share_of_checkpoints() {
        let start = Instant::now();
        let mut pace = Pace::new(Duration::from_secs(1), start);
        let mut at = start;
        for turn in 0..MAX_PER_RUN {
            at += MIN_GAP;
            assert!(pace.due(at, turn + 1));
            pace.looked(at, turn + 1, true);
        }
        assert!(!pace.due(at + MIN_GAP, MAX_PER_RUN + 1));
        // Looks that saved nothing do not count.
        let mut idle = Pace::new(Duration::from_secs(1), start);
        for i in 1..=(MAX_PER_RUN + 10) {
            idle.looked(start + MIN_GAP * i, i, false);
        }
        assert!(idle.due(start + MIN_GAP * (MAX_PER_RUN + 11), MAX_PER_RUN + 11));
    }
}
