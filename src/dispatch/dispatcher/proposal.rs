//! The end of a planner's or a triage agent's run: its agent exited 0 and left `.pidevops/plan.json` or
//! `.pidevops/spec.json`, read as untrusted input (no symlink followed, size capped, strict schema). A file
//! missing or refused fails the run as `invalid`, every reason listed, so the next attempt's prompt says what to
//! fix. Nothing of the worktree is committed or pushed.

use chrono::Utc;

use super::attempt::Ended;
use super::ending::badly_ended;
use super::Dispatcher;
use crate::dispatch::agent_files::{read_agent_file, read_spec};
use crate::dispatch::runner;
use crate::dispatch::runs::{FailureKind, Proposal, RunEvent};
use crate::dispatch::workspace::Prepared;
use crate::tasks::plan::PlanDocument;
use crate::tasks::{RunPurpose, Task};

/// The planner's file.
const PLAN_FILE: &str = "plan.json";
/// The most bytes a plan file may have: a plan of 100 items with long task texts fits.
const MAX_PLAN_BYTES: usize = 1024 * 1024;

impl Dispatcher {
    pub(super) async fn proposal(
        &self,
        task: &Task,
        purpose: RunPurpose,
        prepared: &Prepared,
        finished: runner::Finished,
        ended: &Ended<'_>,
        fail: &impl Fn(FailureKind, String, String) -> RunEvent,
    ) -> RunEvent {
        if let Some(failure) = badly_ended(&finished, ended.profile, ended.stop, fail) {
            return failure;
        }
        let tail = finished.tail.clone();
        let invalid = |detail: String| fail(FailureKind::Invalid, detail, tail.clone());
        let worktree = prepared.dirs.worktree.clone();
        // The repository's `plans_may_name`: the protected paths this plan's items may be given.
        let limits = self.inner.plans.limits_for(task.repo());
        let read = tokio::task::spawn_blocking(move || match purpose {
            RunPurpose::Plan => {
                let bytes = read_agent_file(&worktree, PLAN_FILE, MAX_PLAN_BYTES)
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| {
                        format!("the agent exited 0 but left no .pidevops/{PLAN_FILE}")
                    })?;
                PlanDocument::parse(&bytes, &limits)
                    .map(|plan| Proposal::Plan {
                        plan: Box::new(plan),
                    })
                    .map_err(|errors| errors.retry_text())
            }
            RunPurpose::Triage | RunPurpose::Work | RunPurpose::Resolve | RunPurpose::Refresh => {
                read_spec(&worktree)
                    .map_err(|e| e.to_string())?
                    .map(|spec| Proposal::Spec { spec })
                    .ok_or_else(|| "the agent exited 0 but left no .pidevops/spec.json".to_owned())
            }
        })
        .await
        .unwrap_or_else(|e| Err(format!("reading the agent's file failed: {e}")));
        let proposal = match read {
            Ok(proposal) => proposal,
            Err(why) => return invalid(why),
        };
        RunEvent::Proposed {
            at: Utc::now(),
            run: ended.run,
            task: task.id(),
            attempt: ended.attempt,
            proposal,
            duration_s: ended.began.elapsed().as_secs_f64(),
            tail,
            usage: None,
        }
    }
}
