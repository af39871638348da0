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

/// A run's follow-up watcher: whether it stopped the agent to restart, the token that ends it, and its task.
pub(super) struct FollowUpWatch {
    restarted: Arc<AtomicBool>,
    done: CancellationToken,
    watching: Option<tokio::task::JoinHandle<()>>,
}

/// How long the end of a run waits for a hand-over in progress to be recorded.
const FINISH_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl FollowUpWatch {
    fn start(steer: Steer, agent_stop: &CancellationToken) -> Self {
        let restarted = Arc::new(AtomicBool::new(false));
        let done = CancellationToken::new();
        let watching =
            tokio::spawn(steer.watch(agent_stop.clone(), done.clone(), restarted.clone()));
        Self {
            restarted,
            done,
            watching: Some(watching),
        }
    }

    /// Ends the watch once a hand-over in progress is recorded; whether it stopped the agent for a follow-up.
    /// Waited for: a follow-up written to the agent but recorded after the run submits would be found pending,
    /// and send the task round again for work its agent already did.
    pub(super) async fn finish(mut self) -> bool {
        self.done.cancel();
        if let Some(mut watching) = self.watching.take() {
            if tokio::time::timeout(FINISH_WAIT, &mut watching)
                .await
                .is_err()
            {
                // A database that does not answer: what is unrecorded goes to the next attempt's prompt.
                watching.abort();
                tracing::warn!("the follow-up watch did not end in time; stopped");
            }
        }
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
        FollowUpWatch::start(steer, agent_stop)
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
                () = done.cancelled() => {
                    // A hand-over whose record failed is tried once more before the run's end is decided.
                    if let Err(error) = self.record().await {
                        tracing::warn!(task = %self.id, run = %self.run, error = format!("{error:#}"), "follow-ups handed over, not recorded: the next attempt has them again");
                    }
                    return;
                }
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
        self.record().await?;
        Ok(Look::Going)
    }

    /// Records what was written to the agent and is not recorded yet.
    async fn record(&mut self) -> anyhow::Result<()> {
        if self.unrecorded.is_empty() {
            return Ok(());
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
        Ok(())
    }
}

enum Look {
    Going,
    Restart,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::Draft;
    use crate::config::profiles::LiveInput;
    use crate::tasks::{FollowUpText, Spec};

    /// A board on a fresh SQLite log, and a task on it started by run `run`.
    async fn started(dir: &std::path::Path, run: RunId) -> (Board, TaskId) {
        let log = crate::eventlog::sqlite_log_in(dir).await;
        let board = Board::new(log, crate::board::BoardConfig::default());
        let spec = Spec::new("Write it down", "CHANGES.md", "written").expect("a spec");
        let draft = Draft {
            approval: Some(crate::tasks::ApprovalPolicy::Auto),
            ..Draft::new(
                "acme/app".parse().expect("a repo"),
                spec,
                Default::default(),
            )
        };
        let (created, _) = board
            .create(draft, "test:steer", "test", None)
            .await
            .expect("created");
        let id = created.task.id();
        board
            .execute(id, &Command::Start { run }, "test")
            .await
            .expect("started");
        (board, id)
    }

    #[tokio::test]
    async fn a_runs_end_waits_for_a_hand_over_in_progress_to_be_recorded() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let run = RunId(uuid::Uuid::now_v7());
        let (board, id) = started(dir.path(), run).await;
        let (sender, mut live) = crate::dispatch::live::channel(LiveInput::ClaudeStreamJson, "go");
        let steer = Steer {
            board: board.clone(),
            id,
            run,
            restart: false,
            live: Some(sender),
            sent: BTreeSet::new(),
            unrecorded: Vec::new(),
        };
        let watch = FollowUpWatch::start(steer, &CancellationToken::new());
        let follow_up = Command::AttachFollowUp {
            text: FollowUpText::new("and log it").expect("text"),
            origin: None,
            send_back: false,
        };
        board
            .execute(id, &follow_up, "test")
            .await
            .expect("attached");

        // The watch writes the follow-up; the agent's input takes it only after the run has begun to end.
        let message = live.next_message().await.expect("handed over");
        assert!(message.text().contains("and log it"), "{}", message.text());
        let finishing = watch.finish();
        tokio::pin!(finishing);
        let early =
            tokio::time::timeout(std::time::Duration::from_millis(300), &mut finishing).await;
        assert!(
            early.is_err(),
            "the run ended before its hand-over was recorded"
        );
        message.answer(true);
        assert!(!finishing.await, "no restart for a live agent");

        // Recorded by the time the run's end is decided: handed to attempt 1, live, not pending.
        let task = board
            .load(id)
            .await
            .expect("loaded")
            .expect("the task")
            .task;
        assert!(
            task.pending_follow_up_indices().is_empty(),
            "{:?}",
            task.follow_ups()
        );
        let handed = &task.follow_ups()[0];
        assert!(
            handed.live && handed.delivered_to_attempt == Some(1),
            "{handed:?}"
        );
    }
}
