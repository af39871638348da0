//! A conflict attempt (`RunPurpose::Resolve`): its worktree on the commit pidevops pushed with the base merged in
//! and the markers left, its prompt naming the files, hunks and the base's commits there; afterwards it is checked
//! like any attempt (its status, the repository's `check` in `around_agent`, its scope) and for markers left, then
//! committed as the merge and pushed leased on that commit, so a person's push in between is never overwritten.

use chrono::Utc;

use super::super::ending::badly_ended;
use super::super::Dispatcher;
use super::Ended;
use crate::dispatch::prompt;
use crate::dispatch::runner;
use crate::dispatch::runs::{FailureKind, RunEvent};
use crate::dispatch::workspace::{LeasedPush, Prepared};
use crate::tasks::{AttemptReport, Task};

impl Dispatcher {
    /// The conflict attempt's worktree set up (see `Workspaces::start_merge`) and its prompt: every conflicted
    /// path (for the marker check afterwards) and the prompt. `Err`: why not, a workspace failure.
    pub(super) async fn start_resolution(
        &self,
        task: &Task,
        prepared: &mut Prepared,
    ) -> Result<(Vec<String>, String), String> {
        let conflict = task
            .conflict()
            .ok_or_else(|| format!("{} holds no conflict to resolve", task.id()))?;
        let (from, base) = (conflict.from.as_str(), conflict.base.as_str());
        let files = self
            .inner
            .workspaces
            .start_merge(prepared, from, base)
            .await
            .map_err(|e| e.to_string())?;
        let commits = self
            .inner
            .workspaces
            .base_commits(prepared, from, base, &files)
            .await;
        Ok((files, prompt::resolve(task, &commits)))
    }

    /// The outcome of a conflict attempt whose agent has ended (see the module doc). Nothing is pushed unless
    /// every check says yes; a refused lease is a failure saying someone else pushed.
    pub(super) async fn wrap_up_resolution(
        &self,
        task: &Task,
        prepared: &Prepared,
        finished: runner::Finished,
        ended: &Ended<'_>,
        fail: &impl Fn(FailureKind, String, String) -> RunEvent,
        conflicted: &[String],
    ) -> RunEvent {
        let (id, run, attempt) = (task.id(), ended.run, ended.attempt);
        let tail = finished.tail.clone();
        let failed = |kind, detail: String| fail(kind, detail, tail.clone());
        let Some(conflict) = task.conflict() else {
            return failed(
                FailureKind::Workspace,
                format!("{id} holds no conflict to resolve"),
            );
        };
        let (from, base) = (conflict.from.as_str(), conflict.base.as_str());
        if let Some(failure) = badly_ended(&finished, ended.profile, ended.stop, fail) {
            return failure;
        }
        let summary = match self.agent_verdict(prepared).await {
            Ok(summary) => summary,
            Err((kind, detail)) => return failed(kind, detail),
        };
        let message = format!(
            "{id}: merge {} into the work\n\n{}",
            &base[..12],
            super::super::commit_message(id, &ended.profile.name, attempt, run)
        );
        let workspaces = &self.inner.workspaces;
        let commit = match workspaces.commit(prepared, &message).await {
            Ok(Some(commit)) => commit,
            Ok(None) => return failed(
                FailureKind::NoChanges,
                "the resolution is the commit pidevops pushed, unchanged: the base is not merged"
                    .into(),
            ),
            Err(error) => return failed(FailureKind::Workspace, error.to_string()),
        };
        match workspaces
            .unresolved(prepared, &commit, from, base, conflicted)
            .await
        {
            Ok(None) => {}
            Ok(Some(why)) => return failed(FailureKind::Unresolved, why),
            Err(error) => return failed(FailureKind::Workspace, error.to_string()),
        }
        // What the task changes is what its pull request shows: the merge against the base it merged.
        let against_base = Prepared {
            base_commit: base.to_owned(),
            ..prepared.clone()
        };
        let scoped = match self.scope_verdict(task, &against_base, &commit).await {
            Ok(scoped) => scoped,
            Err((kind, detail)) => return failed(kind, detail),
        };
        if let Err(error) = workspaces.record_diff(&against_base, &commit).await {
            tracing::warn!(task = %id, %run, %error, "the resolution's diff was not recorded");
        }
        // What the resolution changed against the plain merge, for the task page's refreshes.
        if let Err(error) = workspaces
            .record_remerge(&prepared.dirs.mirror, id, base, from, &commit)
            .await
        {
            tracing::warn!(task = %id, %run, %error, "the resolution's refresh diff was not recorded");
        }
        match workspaces.push_leased(prepared, &commit, from).await {
            Ok(LeasedPush::Pushed) => {}
            Ok(LeasedPush::Refused { found }) => {
                let now = found.as_deref().map_or_else(
                    || "gone".to_owned(),
                    |f| format!("at {}", f.get(..7).unwrap_or(f)),
                );
                return failed(
                    FailureKind::PushFailed,
                    format!(
                        "someone else pushed to {} (it is {now}, not at {} that pidevops pushed); not \
                         overwritten: the resolution was not pushed",
                        prepared.branch.as_str(),
                        conflict.from.short()
                    ),
                );
            }
            Err(error) => return failed(FailureKind::PushFailed, error.to_string()),
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
                review: None,
                outside_scope: scoped.outside,
                agent_config: scoped.agent_config,
            }),
            usage: None,
            reviewer_usage: None,
        }
    }
}
