//! The end of a planner's or a triage agent's run: its agent exited 0 and left `.pidevops/plan.json` or
//! `.pidevops/spec.json`, read as untrusted input (no symlink followed, size capped, strict schema). A file
//! missing or refused fails the run as `invalid`, every reason listed, so the next attempt's prompt says what to
//! fix. Nothing of the worktree is committed or pushed.

use chrono::Utc;

use super::attempt::{badly_ended, Ended};
use super::Dispatcher;
use crate::dispatch::agent_files::read_agent_file;
use crate::dispatch::runner;
use crate::dispatch::runs::{FailureKind, Proposal, RunEvent};
use crate::dispatch::workspace::Prepared;
use crate::tasks::plan::PlanDocument;
use crate::tasks::{RunPurpose, Spec, SpecParts, Task};

/// The most bytes a plan or spec file may have: a plan of 100 items with long task texts fits.
const MAX_FILE_BYTES: usize = 1024 * 1024;

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
        let name = match purpose {
            RunPurpose::Plan => "plan.json",
            RunPurpose::Triage | RunPurpose::Work => "spec.json",
        };
        let worktree = prepared.dirs.worktree.clone();
        let read = tokio::task::spawn_blocking(move || {
            read_agent_file(&worktree, name, MAX_FILE_BYTES).map_err(|e| e.to_string())
        })
        .await
        .unwrap_or_else(|e| Err(format!("reading .pidevops/{name} failed: {e}")));
        let bytes = match read {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return invalid(format!("the agent exited 0 but left no .pidevops/{name}")),
            Err(why) => return invalid(why),
        };
        let proposal = match purpose {
            RunPurpose::Plan => match PlanDocument::parse(&bytes, &self.inner.plans.limits()) {
                Ok(plan) => Proposal::Plan {
                    plan: Box::new(plan),
                },
                Err(errors) => return invalid(errors.retry_text()),
            },
            RunPurpose::Triage | RunPurpose::Work => match parse_spec(&bytes) {
                Ok(spec) => Proposal::Spec { spec },
                Err(why) => return invalid(why),
            },
        };
        RunEvent::Proposed {
            at: Utc::now(),
            run: ended.run,
            task: task.id(),
            attempt: ended.attempt,
            proposal,
            duration_s: ended.began.elapsed().as_secs_f64(),
            tail,
        }
    }
}

fn parse_spec(bytes: &[u8]) -> Result<Spec, String> {
    let parts: SpecParts = serde_json::from_slice(bytes)
        .map_err(|e| format!("The spec in .pidevops/spec.json was refused: {e}"))?;
    Spec::try_from(parts).map_err(|e| format!("The spec in .pidevops/spec.json was refused: {e}"))
}
