//! Steering a running agent: while a work run's agent runs, its task is watched for follow-ups (read through the
//! Board, the task's own stream). Pending ones, oldest first, are written to the agent's live input and then
//! recorded (`Command::DeliverFollowUps`): written first, so a crash between the two hands them to the next
//! attempt's fresh agent again, which is right. Without live input the profile's `on_follow_up` decides:
//! `restart` stops the agent (the run ends `restarted`, given back, and the next run's prompt has the follow-up);
//! `queue` does nothing here (the domain sends the task round again after the run submits).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{Dispatcher, DISPATCHER};
use crate::board::{Board, BoardError};
use crate::config::profiles::{AgentProfile, OnFollowUp};
use crate::dispatch::live::LiveSender;
use crate::tasks::{Column, Command, RunId, TaskError, TaskId};

/// How often a running agent's task is read for follow-ups.
const FOLLOW_UP_WATCH: std::time::Duration = std::time::Duration::from_millis(200);

/// A run's follow-up watcher: whether it stopped the agent to restart, and the token that ends it.
pub(super) struct FollowUpWatch {
    restarted: Arc<AtomicBool>,
    done: CancellationToken,
}

impl FollowUpWatch {
    /// Ends the watch; whether it stopped the agent for a follow-up.
    pub(super) fn restarted(&self) -> bool {
        self.done.cancel();
        self.restarted.load(Ordering::SeqCst)
    }
}

impl Drop for FollowUpWatch {
    fn drop(&mut self) {
        self.done.cancel();
    }
}

impl Dispatcher {
    /// Watches run `run` of task `id` for follow-ups until the watch is ended (after the agent and the
    /// repository's commands around it). `live`: the agent's live input, when its profile has one.
    pub(super) fn watch_follow_ups(
        &self,
        id: TaskId,
        run: RunId,
        profile: &AgentProfile,
        live: Option<LiveSender>,
        agent_stop: &CancellationToken,
    ) -> FollowUpWatch {
        let restarted = Arc::new(AtomicBool::new(false));
        let done = CancellationToken::new();
        let steer = Steer {
            board: self.inner.board.clone(),
            id,
            run,
            // A live agent is handed its follow-ups; once its input closes (its turn ended), the task goes round
            // again rather than stopping a finished agent.
            restart: live.is_none() && profile.on_follow_up == OnFollowUp::Restart,
            live,
            sent: BTreeSet::new(),
            unrecorded: Vec::new(),
        };
        tokio::spawn(steer.watch(agent_stop.clone(), done.clone(), restarted.clone()));
        FollowUpWatch { restarted, done }
    }
}

struct Steer {
    board: Board,
    id: TaskId,
    run: RunId,
    /// `None`: no live input, or it closed (the agent's turn ended, or it died).
    live: Option<LiveSender>,
    restart: bool,
    /// Written to the agent: never written twice, whatever the log says meanwhile.
    sent: BTreeSet<u32>,
    /// Written, not yet recorded (the append failed): recorded first on the next look.
    unrecorded: Vec<u32>,
}

impl Steer {
    async fn watch(
        mut self,
        stop: CancellationToken,
        done: CancellationToken,
        restarted: Arc<AtomicBool>,
    ) {
        loop {
            tokio::select! {
                () = done.cancelled() => return,
                () = stop.cancelled() => return,
                () = tokio::time::sleep(FOLLOW_UP_WATCH) => {}
            }
            match self.look().await {
                Ok(Look::Going) => {}
                Ok(Look::Restart) => {
                    tracing::info!(task = %self.id, run = %self.run, "stopping the agent to start again with a follow-up");
                    restarted.store(true, Ordering::SeqCst);
                    stop.cancel();
                    return;
                }
                Err(error) => {
                    tracing::warn!(task = %self.id, run = %self.run, error = format!("{error:#}"), "follow-ups not handed over (tried again)");
                }
            }
        }
    }

    /// One look at the task: its pending follow-ups written and recorded, or the run to restart.
    async fn look(&mut self) -> anyhow::Result<Look> {
        let Some(loaded) = self.board.load(self.id).await? else {
            return Ok(Look::Going);
        };
        let task = loaded.task;
        // Moved on (cancelled, another run): the heartbeat stops the agent.
        if task.column() != Column::InProgress || task.run() != Some(self.run) {
            return Ok(Look::Going);
        }
        let pending = task.pending_follow_up_indices();
        self.unrecorded.retain(|i| pending.contains(i));
        if pending.is_empty() {
            return Ok(Look::Going);
        }
        if self.restart {
            return Ok(Look::Restart);
        }
        let Some(live) = self.live.clone() else {
            return Ok(Look::Going);
        };
        for index in pending {
            if self.sent.contains(&index) {
                continue;
            }
            let Some(follow_up) = task.follow_ups().get(index as usize) else {
                break;
            };
            if !live
                .send(&crate::dispatch::prompt::follow_up_line(follow_up))
                .await
            {
                // Its input is closed: what is left stays pending, for the next attempt.
                self.live = None;
                break;
            }
            self.sent.insert(index);
            self.unrecorded.push(index);
        }
        if self.unrecorded.is_empty() {
            return Ok(Look::Going);
        }
        let command = Command::DeliverFollowUps {
            run: self.run,
            indices: self.unrecorded.clone(),
        };
        match self.board.execute(self.id, &command, DISPATCHER).await {
            Ok(_) => {}
            // The run ended meanwhile: what it was handed stays pending for the next attempt.
            Err(BoardError::Refused(
                TaskError::StaleRun { .. } | TaskError::WrongColumn { .. },
            )) => {}
            Err(error) => return Err(error.into()),
        }
        self.unrecorded.clear();
        Ok(Look::Going)
    }
}

enum Look {
    Going,
    Restart,
}
