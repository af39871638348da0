//! A conflict attempt (`RunPurpose::Resolve`): its worktree on the commit pidevops pushed with the base merged in
//! and the markers left, its prompt naming the files, hunks and the base's commits there; afterwards it is checked
//! like any attempt (its status, the repository's `check` in `around_agent`, its scope) and for markers left, then
//! committed as the merge and pushed leased on that commit, so a person's push in between is never overwritten.
//!
//! Exactly once: before its push, the attempt records what it is about to push (`resolve.pushing` in the stream
//! `resolve:<task>`: the run, the conflict's commit and base, the resolution and its report). A run cut off after
//! its push (a restart) is lost and goes round again (`outcome.rs`); its successor finds the branch at the very
//! resolution recorded for the same conflict and records it as its own outcome: no agent, no push, nobody asked.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::super::ending::badly_ended;
use super::super::Dispatcher;
use super::Ended;
use crate::dispatch::prompt;
use crate::dispatch::runner;
use crate::dispatch::runs::{FailureKind, RunEvent};
use crate::dispatch::workspace::{LeasedPush, Prepared};
use crate::domain::{EventType, NewEvent, Source};

use crate::tasks::{AttemptReport, CommitSha, Conflict, RunId, Task, TaskId};

/// What a conflict attempt is about to push, recorded before its leased push.
pub const RESOLVING: &str = "resolve.pushing";

/// The stream of task `id`'s resolution intents.
pub fn stream(id: TaskId) -> String {
    format!("resolve:{id}")
}

/// `resolve.pushing`: `run`, resolving the conflict of `from` with `base`, is about to push `commit`, which its
/// checks passed with `report`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Resolving {
    at: DateTime<Utc>,
    task: TaskId,
    run: RunId,
    from: CommitSha,
    base: CommitSha,
    commit: String,
    report: AttemptReport,
}

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
        let report = AttemptReport {
            summary,
            review: None,
            outside_scope: scoped.outside,
            agent_config: scoped.agent_config,
        };
        let intent = Resolving {
            at: Utc::now(),
            task: id,
            run,
            from: conflict.from.clone(),
            base: conflict.base.clone(),
            commit: commit.clone(),
            report: report.clone(),
        };
        if let Err(error) = self.intend(&intent).await {
            return failed(
                FailureKind::Workspace,
                format!("the resolution was not pushed: what it would push was not recorded first: {error}"),
            );
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
            report: Box::new(report),
            usage: None,
            reviewer_usage: None,
        }
    }

    /// A conflict attempt's predecessor cut off after its push: the branch is at the resolution a run recorded it
    /// would push for this very conflict, which is this run's outcome, recorded without an agent or a push.
    /// `None`: nothing of the kind (or it cannot be told), and the attempt runs; its push is leased on the
    /// conflict's commit anyway, so a resolution on the branch is never pushed over.
    pub(super) async fn resolution_pushed(
        &self,
        task: &Task,
        run: RunId,
        attempt: u32,
    ) -> Option<RunEvent> {
        let id = task.id();
        let conflict = task.conflict()?;
        let intents = match self.intents(id, conflict).await {
            Ok(intents) if intents.is_empty() => return None,
            Ok(intents) => intents,
            Err(error) => {
                tracing::warn!(task = %id, %run, %error, "the resolutions recorded could not be read");
                return None;
            }
        };
        let source = self.inner.config.source(task.repo());
        let branch = id.branch();
        let head = match self
            .inner
            .workspaces
            .remote_head(task.repo(), &source, &branch)
            .await
        {
            Ok(Some(head)) => head,
            Ok(None) => return None,
            Err(error) => {
                tracing::warn!(task = %id, %run, %error, "the branch could not be read");
                return None;
            }
        };
        let pushed = intents
            .into_iter()
            .rev()
            .find(|intent| intent.commit.eq_ignore_ascii_case(&head))?;
        tracing::info!(task = %id, %run, cut_off = %pushed.run, commit = %head, "a resolution pushed before a restart, recorded");
        self.release_slot(id);
        Some(RunEvent::Succeeded {
            at: Utc::now(),
            run,
            task: id,
            attempt,
            branch,
            commit: pushed.commit,
            duration_s: 0.0,
            tail: String::new(),
            report: Box::new(pushed.report),
            usage: None,
            reviewer_usage: None,
        })
    }

    /// Records `intent` (before its push), in order in its task's stream.
    async fn intend(&self, intent: &Resolving) -> Result<(), String> {
        let body = serde_json::to_vec(intent).map_err(|e| e.to_string())?;
        let stream = stream(intent.task);
        let new = NewEvent::new(
            Source::Pidevops,
            EventType::from_stored(RESOLVING.to_owned()),
            format!("{stream}:{}", intent.run),
            "application/json",
            bytes::Bytes::from(body),
        );
        self.inner
            .log
            .append_at_end(&stream, new)
            .await
            .map(|_| ())
            .map_err(|error| error.to_string())
    }

    /// The intents recorded for `conflict` of task `id`, oldest first.
    async fn intents(&self, id: TaskId, conflict: &Conflict) -> anyhow::Result<Vec<Resolving>> {
        let recorded = self.store().read_stream(&stream(id)).await?;
        Ok(recorded
            .iter()
            .filter(|event| event.event_type == RESOLVING)
            .filter_map(|event| serde_json::from_slice::<Resolving>(&event.body).ok())
            .filter(|intent| intent.from == conflict.from && intent.base == conflict.base)
            .collect())
    }
}
