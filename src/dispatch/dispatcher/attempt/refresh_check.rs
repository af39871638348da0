//! A refresh check (`RunPurpose::Refresh`, `tasks::domain::refresh_check`): the `refresh` loop brought the branch up
//! to date and held it, the repository having a `check`. No agent runs: the same refresh is made again in the run's
//! worktree (the same commit for the same stamp, else nothing is checked or pushed), the repository's `setup` then
//! `check` run on it, contained like every repository command (`hooks.rs`: the check gets no secret), and only a
//! passing check is pushed, leased on the commit pidevops recorded, so a person's push meanwhile is never
//! overwritten. A failing check is the run's `check` failure, which `outcome.rs` hands to the task as
//! `Command::FailRefreshCheck` (an agent makes it pass).
//!
//! Exactly once: a run cut off after its push (a restart) goes round again; its successor finds the branch at the
//! very commit it would push and records it without running the check or pushing again.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use chrono::Utc;
use tokio_util::sync::CancellationToken;

use super::super::hooks::{Step, StepContext};
use super::super::run_writer::RunWriter;
use super::super::Dispatcher;
use super::Heartbeat;
use crate::dispatch::runs::{FailureKind, RunEvent};
use crate::dispatch::workspace::{LeasedPush, Prepared, RefreshRequest};
use crate::tasks::{AttemptReport, RefreshCheck, RunId, Task};

/// What a refresh check's run is: the task, its run and attempt, when it began.
struct CheckRun<'a> {
    task: &'a Task,
    run: RunId,
    attempt: u32,
    began: std::time::Instant,
}

impl CheckRun<'_> {
    fn failed(&self, kind: FailureKind, detail: String, tail: String) -> RunEvent {
        RunEvent::Failed {
            at: Utc::now(),
            run: self.run,
            task: self.task.id(),
            attempt: self.attempt,
            kind,
            detail,
            duration_s: self.began.elapsed().as_secs_f64(),
            tail,
            usage: None,
            until: None,
            reviewer_usage: None,
        }
    }

    /// The refresh `to` is on the branch: the run's success (`task.refreshed` follows).
    fn pushed(&self, prepared: &Prepared, to: String) -> RunEvent {
        RunEvent::Succeeded {
            at: Utc::now(),
            run: self.run,
            task: self.task.id(),
            attempt: self.attempt,
            branch: prepared.branch.clone(),
            commit: to,
            duration_s: self.began.elapsed().as_secs_f64(),
            tail: String::new(),
            report: Box::new(AttemptReport::default()),
            usage: None,
            reviewer_usage: None,
        }
    }

    /// Someone else's push found on the branch (`found`, or gone): nothing pushed over it.
    fn moved(&self, prepared: &Prepared, check: &RefreshCheck, found: Option<&str>) -> RunEvent {
        let now = found.map_or_else(
            || "gone".to_owned(),
            |f| format!("at {}", f.get(..7).unwrap_or(f)),
        );
        self.failed(
            FailureKind::PushFailed,
            format!(
                "someone else pushed to {} (it is {now}, not at {} that pidevops pushed); not overwritten: the \
                 refreshed branch was not pushed",
                prepared.branch.as_str(),
                check.from.short()
            ),
            String::new(),
        )
    }
}

impl Dispatcher {
    /// Runs a refresh check to its outcome (see the module doc). `None` when it was declared lost meanwhile.
    pub(super) async fn check_refresh(
        &self,
        task: &Task,
        run: RunId,
        attempt: u32,
        writer: &mut RunWriter,
        stop: CancellationToken,
    ) -> Option<RunEvent> {
        let id = task.id();
        let this = CheckRun {
            task,
            run,
            attempt,
            began: std::time::Instant::now(),
        };
        let Some(check) = task.refresh_check() else {
            let why = format!("{id} holds no refresh to check");
            return Some(this.failed(FailureKind::Workspace, why, String::new()));
        };
        let output = Arc::new(AtomicU64::new(0));
        // Beats from the start: preparing the worktree may outlast the watchdog's bound, and setup and check may
        // take as long as `check_timeout_s`.
        let mut heartbeat = self.heartbeat(id, run, writer.clone(), output.clone(), stop.clone());
        let source = self.inner.config.source(task.repo());
        let prepared = self
            .inner
            .workspaces
            .prepare(task.repo(), &source, id, run)
            .await;
        let mut prepared = match prepared {
            Ok(prepared) => prepared,
            Err(error) => {
                heartbeat.end(writer).await;
                return Some(this.failed(FailureKind::Workspace, error.to_string(), String::new()));
            }
        };
        let outcome = self
            .checked_push(&this, check, &mut prepared, &output, &heartbeat, &stop)
            .await;
        self.forget_hook_dirs(&prepared).await;
        self.release_slot(id);
        let stopped = heartbeat.agent_stop.is_cancelled()
            && !stop.is_cancelled()
            && !heartbeat.lost.is_cancelled();
        self.done_with_worktree(&prepared, stopped).await;
        heartbeat.end(writer).await;
        if heartbeat.lost.is_cancelled() {
            return None;
        }
        Some(outcome)
    }

    /// The refresh made again and checked, then pushed leased on the recorded commit: the run's outcome.
    async fn checked_push(
        &self,
        this: &CheckRun<'_>,
        check: &RefreshCheck,
        prepared: &mut Prepared,
        output: &Arc<AtomicU64>,
        heartbeat: &Heartbeat,
        stop: &CancellationToken,
    ) -> RunEvent {
        let (task, workspaces) = (this.task, &self.inner.workspaces);
        let failed = |kind, detail: String| this.failed(kind, detail, String::new());
        let request = RefreshRequest {
            repo: task.repo().clone(),
            task: task.id(),
            branch: task.id().branch(),
            commit: check.from.as_str().to_owned(),
            mode: check.strategy,
            stamp: check.stamp,
            hold: true,
        };
        let to = match workspaces
            .refresh_again(prepared, &request, check.base.as_str())
            .await
        {
            Ok(to) => to,
            Err(error) => return failed(FailureKind::Workspace, error.to_string()),
        };
        if !to.eq_ignore_ascii_case(check.to.as_str()) {
            return failed(
                FailureKind::Workspace,
                format!(
                    "the refresh made again is {}, not {} that the refresh loop made: nothing was checked or pushed",
                    to.get(..7).unwrap_or(&to),
                    check.to.short()
                ),
            );
        }
        // Ours still, or pushed already by a run of this check cut off before its outcome was recorded.
        match workspaces.remote_branch(prepared).await {
            Ok(Some(head)) if head == to => return this.pushed(prepared, to),
            Ok(Some(head)) if head == check.from.as_str() => {}
            Ok(found) => return this.moved(prepared, check, found.as_deref()),
            Err(error) => return failed(FailureKind::Workspace, error.to_string()),
        }
        // The check's own repository, HEAD on the refreshed commit, as an agent's would be.
        if let Err(error) = workspaces.hand_to_agent(prepared).await {
            return failed(FailureKind::Workspace, error.to_string());
        }
        let env = self
            .inner
            .config
            .environment(task.repo())
            .cloned()
            .unwrap_or_default();
        let secrets = match self.hook_secrets(&env) {
            Ok(secrets) => secrets,
            Err(step) => return this.failed(step.kind, step.detail, step.tail),
        };
        let cx = StepContext {
            prepared,
            env: &env,
            secrets: &secrets,
            output,
            stop: &heartbeat.agent_stop,
            shutdown: stop,
        };
        for step in [Step::Setup, Step::Check] {
            if let Err(step) = self.run_step(step, &cx).await {
                return this.failed(step.kind, step.detail, step.tail);
            }
        }
        match workspaces
            .push_leased(prepared, &to, check.from.as_str())
            .await
        {
            Ok(LeasedPush::Pushed) => this.pushed(prepared, to),
            Ok(LeasedPush::Refused { found }) => this.moved(prepared, check, found.as_deref()),
            Err(error) => failed(FailureKind::PushFailed, error.to_string()),
        }
    }
}
