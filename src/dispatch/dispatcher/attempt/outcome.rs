//! A run's outcome applied to its task (a success submitted for review, a failure as its retry's cause, a
//! proposal), and an outcome another writer recorded recovered from the run's stream; a failed run's kind and
//! words where it was stopped rather than failing by itself.

use chrono::Utc;

use super::super::limits::MAX_LIMIT_WAIT_UNKNOWN;
use super::super::{Dispatcher, DISPATCHER};
use crate::board::BoardError;
use crate::dispatch::runs::{self, FailureKind, Proposal, RunEvent};
use crate::projectors::runs as run_rows;
use crate::tasks::{Command, Reason, RetryCause, RunId, RunPurpose, TaskError, TaskId};

impl Dispatcher {
    /// Moves the task on after a run's outcome. Idempotent: a second application names a run that is no longer
    /// live and the domain refuses it, which is the expected answer here.
    pub(in crate::dispatch::dispatcher) async fn apply(&self, outcome: &RunEvent) {
        // A refresh check runs no agent and is safe to run again: lost (its serve restarted, its worker gone), it
        // goes round again as one interrupted, and its successor records a push it made (`refresh_check.rs`). So
        // does a lost conflict attempt: its successor records the resolution it pushed, if it did (`resolve.rs`),
        // else the agent is given the conflict again; the conflict is not a person's matter for a restart.
        let purpose = match outcome {
            RunEvent::Failed {
                task,
                run,
                kind: FailureKind::Lost | FailureKind::Check,
                ..
            } => self.live_purpose(*task, *run).await,
            _ => None,
        };
        let refresh_check = purpose == Some(RunPurpose::Refresh);
        let goes_round = matches!(purpose, Some(RunPurpose::Refresh | RunPurpose::Resolve));
        let (task, command) = match outcome {
            // The repository's check fails on the refresh: an agent makes it pass, or a person looks.
            RunEvent::Failed {
                task,
                run,
                kind: FailureKind::Check,
                ..
            } if refresh_check => (
                *task,
                Command::FailRefreshCheck {
                    run: *run,
                    reason: outcome
                        .failure_reason()
                        .unwrap_or_else(|| Reason::summarize("the repository's check failed")),
                },
            ),
            RunEvent::Succeeded {
                task,
                run,
                branch,
                report,
                ..
            } => (
                *task,
                Command::SubmitForReview {
                    run: *run,
                    branch: branch.clone(),
                    pr: None,
                    report: report.clone(),
                },
            ),
            RunEvent::Failed {
                task,
                run,
                kind,
                until,
                ..
            } => (
                *task,
                Command::Retry {
                    cause: match kind {
                        FailureKind::Interrupted => RetryCause::Interrupted { run: *run },
                        FailureKind::Lost if goes_round => RetryCause::Interrupted { run: *run },
                        // Its process died: counted like a failure, unless it resumes from a checkpoint.
                        FailureKind::Lost => RetryCause::Lost { run: *run },
                        // The agent did not run: not its attempt (see `hooks.rs`). Nor is a reviewer's failure.
                        FailureKind::Setup | FailureKind::Reviewer => {
                            RetryCause::SetupFailed { run: *run }
                        }
                        FailureKind::NeedsHuman => RetryCause::AgentNeedsHuman { run: *run },
                        FailureKind::Asked => RetryCause::AgentAsked { run: *run },
                        // An output budget is a budget: an agent that floods once floods again, so a person looks.
                        FailureKind::Budget | FailureKind::Flooded => {
                            RetryCause::OverBudget { run: *run }
                        }
                        FailureKind::Restarted => RetryCause::Restarted { run: *run },
                        FailureKind::Limited => RetryCause::Limited {
                            run: *run,
                            until: until.unwrap_or_else(|| Utc::now() + MAX_LIMIT_WAIT_UNKNOWN),
                        },
                        _ => RetryCause::RunFailed { run: *run },
                    },
                    // A question is the task's reason as the agent wrote it: it is asked where the task came from.
                    reason: match (kind, outcome) {
                        (FailureKind::Asked, RunEvent::Failed { detail, .. }) => {
                            Reason::summarize(detail)
                        }
                        _ => outcome
                            .failure_reason()
                            .unwrap_or_else(|| Reason::summarize("the run failed")),
                    },
                },
            ),
            RunEvent::Proposed {
                task,
                run,
                proposal,
                ..
            } => (
                *task,
                match proposal {
                    Proposal::Plan { plan } => Command::ProposePlan {
                        run: *run,
                        plan: plan.clone(),
                    },
                    Proposal::Spec { spec } => Command::ProposeSpec {
                        run: *run,
                        spec: spec.clone(),
                    },
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

    /// A failed run's kind and words where it was stopped rather than failing by itself: a provider's limit (and
    /// until when), a follow-up's restart, a filling volume, a budget. An agent that finished first keeps its
    /// outcome.
    pub(super) fn stopped_why(
        &self,
        outcome: &mut RunEvent,
        limit: Option<&crate::domain::usage::Limit>,
        attempt: u32,
        stopped_for: StoppedFor,
    ) {
        if let RunEvent::Failed {
            kind: FailureKind::Limited,
            until,
            ..
        } = outcome
        {
            *until = Some(self.limit_lifts(limit, attempt, Utc::now()));
        }
        // Stopped to start again with a follow-up: given back (the task goes round again for the follow-up).
        if stopped_for.restarted {
            if let RunEvent::Failed { kind, detail, .. } = outcome {
                *kind = FailureKind::Restarted;
                *detail =
                    "stopped to start again with a follow-up that came while the agent ran".into();
            }
        }
        // Stopped on a filling volume: a person looks.
        if stopped_for.disk_full {
            if let RunEvent::Failed { kind, detail, .. } = outcome {
                *kind = FailureKind::Flooded;
                *detail = format!(
                    "stopped: the workspace volume fell below {} MiB free (half of dispatch.min_free_disk_mib) \
                     while the agent ran",
                    self.inner.config.bounds.min_free_disk >> 21
                );
            }
        }
        // Stopped for a budget: say so.
        if let Some(why) = stopped_for.budget {
            if let RunEvent::Failed { kind, detail, .. } = outcome {
                *kind = FailureKind::Budget;
                *detail = why;
            }
        }
    }

    /// What `run` is for, if it is the live run of `task`.
    async fn live_purpose(&self, task: TaskId, run: RunId) -> Option<RunPurpose> {
        match self.inner.board.load(task).await {
            Ok(Some(loaded)) if loaded.task.run() == Some(run) => loaded.task.purpose(),
            _ => None,
        }
    }

    /// Applies whatever outcome the run's stream holds (another writer's).
    pub(in crate::dispatch::dispatcher) async fn recover(&self, run: RunId) {
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
}

/// What stopped an attempt's agent besides itself, for `stopped_why`.
pub(super) struct StoppedFor {
    pub restarted: bool,
    pub disk_full: bool,
    /// A budget it went over, in words.
    pub budget: Option<String>,
}
