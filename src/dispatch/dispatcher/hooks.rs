//! A repository's own commands around its agent (`[repos."o/n"]` setup, before_run, after_run, check; see
//! `config/repo_env.rs`), run by pidevops in the run's worktree.
//!
//! Each one runs repository code (`npm ci` runs the install scripts of the repository and of its dependencies;
//! `cargo test` runs whatever the agent wrote), so each is treated like the agent: the same containment
//! (`Dispatcher::contain`: bubblewrap, else Landlock and a reaper), an environment built from nothing, and its
//! exit status read only as the answer to "did this command pass", never as a reason to trust the worktree.
//!
//! - **The hooks** (setup, before_run, after_run) get the repository's `secrets` and their own HOME and TMPDIR
//!   (`hook-home/`, `hook-tmp/` in the run directory), which the agent never sees: a token `npm` caches in its
//!   HOME stays out of the agent's reach. What a hook writes into the worktree, the agent (and the pushed branch)
//!   sees; a hook that runs repository code hands its secret to that code.
//! - **The check** gets no secret: it runs the agent's work, with a HOME and TMPDIR of its own (`check-home/`,
//!   `check-tmp/`), never the agent's, so configuration the agent left in its HOME (a `.gitconfig`, an `.npmrc`)
//!   does not steer it.
//!
//! Their output goes into the run's log (framed by a line naming the step), with every secret value masked, and
//! the end of it into the failure's detail that the next attempt's prompt shows.

use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::Dispatcher;
use crate::config::repo_env::RepoEnv;
use crate::dispatch::runner::{self, Ending, Launch};
use crate::dispatch::runs::{FailureKind, TAIL_BYTES};
use crate::dispatch::workspace::Prepared;

/// One of a repository's commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Setup,
    BeforeRun,
    AfterRun,
    Check,
}

impl Step {
    /// Its key in `[repos."o/n"]`.
    pub(super) fn key(self) -> &'static str {
        match self {
            Step::Setup => "setup",
            Step::BeforeRun => "before_run",
            Step::AfterRun => "after_run",
            Step::Check => "check",
        }
    }

    /// What its failure is recorded as: setup and before_run ran before the agent did anything, so they are not
    /// the agent's failure; after_run and check judge its work.
    fn failure(self) -> FailureKind {
        match self {
            Step::Setup | Step::BeforeRun => FailureKind::Setup,
            Step::AfterRun => FailureKind::AfterRun,
            Step::Check => FailureKind::Check,
        }
    }

    fn is_hook(self) -> bool {
        self != Step::Check
    }
}

/// Why a step did not pass: the run's failure.
#[derive(Debug)]
pub(super) struct StepFailed {
    pub kind: FailureKind,
    pub detail: String,
    /// The end of its output, secrets masked.
    pub tail: String,
}

/// The secrets' values, read when the run starts (by name, in the order configured).
pub(super) struct Secrets(Vec<(String, String)>);

/// What a step is run with, besides its command.
pub(super) struct StepContext<'a> {
    pub prepared: &'a Prepared,
    pub env: &'a RepoEnv,
    pub secrets: &'a Secrets,
    /// Output bytes of the whole run, for heartbeats.
    pub output: &'a Arc<AtomicU64>,
    /// Stops the step: the task cancelled or moved on, the run declared lost, the service stopping.
    pub stop: &'a CancellationToken,
    /// The service stopping (to tell an interruption from a cancellation).
    pub shutdown: &'a CancellationToken,
}

impl Dispatcher {
    /// The values of `env`'s secrets from the service's environment. Fails closed: an unset or empty variable
    /// fails the run as `setup`, naming the variable (never a value).
    pub(super) fn hook_secrets(&self, env: &RepoEnv) -> Result<Secrets, StepFailed> {
        let mut values = Vec::with_capacity(env.secrets.len());
        for name in &env.secrets {
            // `Env::get` counts an empty (or blank) value as unset.
            match self.inner.env.get(name) {
                Some(value) => values.push((name.clone(), value.to_owned())),
                None => {
                    return Err(StepFailed {
                        kind: FailureKind::Setup,
                        detail: format!(
                            "the repository's secret {name} is not set in pidevops's environment (or is empty); \
                             its hooks were not run"
                        ),
                        tail: String::new(),
                    })
                }
            }
        }
        Ok(Secrets(values))
    }

    /// Runs `step` if the repository has it. `Ok`: it is not configured, or it exited 0.
    pub(super) async fn run_step(
        &self,
        step: Step,
        cx: &StepContext<'_>,
    ) -> Result<(), StepFailed> {
        let command = match step {
            Step::Setup => &cx.env.setup,
            Step::BeforeRun => &cx.env.before_run,
            Step::AfterRun => &cx.env.after_run,
            Step::Check => &cx.env.check,
        };
        let Some(argv) = command else { return Ok(()) };
        let shown = argv.join(" ");
        let fail =
            |kind: FailureKind, detail: String, tail: String| StepFailed { kind, detail, tail };
        let dirs = &cx.prepared.dirs;
        // Never the agent's HOME or TMPDIR: the hooks' hold their secrets' traces, and the check (the agent's code)
        // must not run with configuration the agent left there (a `.gitconfig`, an `.npmrc`).
        let (home, tmp) = if step.is_hook() {
            (dirs.dir.join("hook-home"), dirs.dir.join("hook-tmp"))
        } else {
            (dirs.dir.join("check-home"), dirs.dir.join("check-tmp"))
        };
        for dir in [&home, &tmp] {
            if let Err(error) = tokio::fs::create_dir_all(dir).await {
                return Err(fail(
                    FailureKind::Workspace,
                    format!("cannot make {}: {error}", dir.display()),
                    String::new(),
                ));
            }
        }
        let mut env = self.neutral_env(&home, &tmp);
        let secrets: &[(String, String)] = if step.is_hook() { &cx.secrets.0 } else { &[] };
        env.extend(secrets.iter().cloned());
        let who = format!("repository's {}", step.key());
        let writable = vec![dirs.worktree.clone(), home, tmp];
        let net = self.hook_network(&cx.prepared.repo);
        let (wrapped, child) = self
            .contain(
                &who,
                cx.prepared,
                argv.clone(),
                &mut env,
                writable,
                Vec::new(),
                net,
            )
            .map_err(|e| fail(step.failure(), format!("{e:#}"), String::new()))?;
        let timeout = if step.is_hook() {
            cx.env.hook_timeout
        } else {
            cx.env.check_timeout
        };
        // Its own file first, so that what reaches the run's log has its secrets masked.
        let step_log = dirs.dir.join(format!("{}.log", step.key()));
        let launch = Launch {
            argv: wrapped,
            env,
            cwd: dirs.worktree.clone(),
            log: step_log.clone(),
            timeout,
            // Only the wall clock bounds it (twice the timeout: never first).
            no_output_timeout: timeout.saturating_mul(2),
            stdin: None,
            child,
            meter: None,
            live: None,
            output: (&self.inner.config.bounds).into(),
        };
        tracing::info!(repo = %cx.prepared.repo, step = step.key(), "running the repository's command");
        let began = Instant::now();
        let finished = runner::run(launch, cx.output.clone(), cx.stop.clone()).await;
        let tail = append_masked(&step_log, &dirs.log, step.key(), &shown, secrets)
            .await
            .unwrap_or_else(|error| {
                tracing::warn!(log = %dirs.log.display(), %error, "could not copy a step's output to the run's log");
                String::new()
            });
        let _ = tokio::fs::remove_file(&step_log).await;
        let took = began.elapsed().as_secs_f64();
        let name = step.key();
        let (kind, detail) = match finished.ending {
            Ending::Exited(0) => {
                metrics::histogram!("pidevops_run_phase_seconds", "phase" => name).record(took);
                return Ok(());
            }
            Ending::Exited(code) => (
                step.failure(),
                format!("the repository's {name} `{shown}` exited with status {code}"),
            ),
            Ending::Signaled(signal) => (
                step.failure(),
                format!("the repository's {name} `{shown}` was killed by signal {signal}"),
            ),
            Ending::Flooded { limit } => (
                step.failure(),
                format!(
                    "the repository's {name} `{shown}` printed more than {limit} bytes and was killed"
                ),
            ),
            Ending::TimedOut | Ending::Stalled => (
                step.failure(),
                format!(
                    "the repository's {name} `{shown}` ran longer than {} s and was killed",
                    timeout.as_secs_f64()
                ),
            ),
            Ending::Stopped if cx.shutdown.is_cancelled() => (
                FailureKind::Interrupted,
                format!("interrupted: pidevops shut down while the repository's {name} ran"),
            ),
            Ending::Stopped => (
                FailureKind::Stopped,
                format!(
                    "stopped: the task was cancelled or moved on while the repository's {name} ran"
                ),
            ),
            Ending::CannotStart(why) => (
                step.failure(),
                format!("the repository's {name} `{shown}` could not start: {why}"),
            ),
        };
        Err(fail(kind, detail, tail))
    }
}

impl Dispatcher {
    /// Removes the hooks' and the check's HOME and TMPDIR once the attempt is over: what a tool cached there (a
    /// token in an `.npmrc`) does not wait on disk for the run directory's TTL.
    pub(super) async fn forget_hook_dirs(&self, prepared: &Prepared) {
        for dir in ["hook-home", "hook-tmp", "check-home", "check-tmp"] {
            let path = prepared.dirs.dir.join(dir);
            match tokio::fs::remove_dir_all(&path).await {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "could not remove the hooks' directory")
                }
            }
        }
    }
}

/// Appends the step's output (`from`) to the run's log, framed by lines naming it, with every secret value
/// masked, and returns the end of what was appended.
async fn append_masked(
    from: &Path,
    log: &Path,
    step: &str,
    shown: &str,
    secrets: &[(String, String)],
) -> std::io::Result<String> {
    let mut out = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .await?;
    out.write_all(format!("\n=== pidevops: the repository's {step}: {shown} ===\n").as_bytes())
        .await?;
    let mut input = match tokio::fs::File::open(from).await {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            out.flush().await?;
            return Ok(String::new());
        }
        Err(e) => return Err(e),
    };
    let masks: Vec<(&[u8], Vec<u8>)> = secrets
        .iter()
        .map(|(name, value)| (value.as_bytes(), format!("[{name}]").into_bytes()))
        .collect();
    // A secret cut in two by a read is kept back until the next one completes it.
    let keep = masks.iter().map(|(v, _)| v.len()).max().unwrap_or(1) - 1;
    let mut pending = Vec::new();
    let mut block = vec![0u8; 64 * 1024];
    let mut tail = std::collections::VecDeque::with_capacity(TAIL_BYTES);
    loop {
        let n = input.read(&mut block).await?;
        pending.extend_from_slice(&block[..n]);
        let masked = mask(&pending, &masks);
        let cut = if n == 0 {
            masked.len()
        } else {
            masked.len().saturating_sub(keep)
        };
        out.write_all(&masked[..cut]).await?;
        for byte in masked[..cut].iter().skip(cut.saturating_sub(TAIL_BYTES)) {
            if tail.len() == TAIL_BYTES {
                tail.pop_front();
            }
            tail.push_back(*byte);
        }
        pending = masked[cut..].to_vec();
        if n == 0 {
            break;
        }
    }
    out.write_all(format!("=== pidevops: end of the repository's {step} ===\n").as_bytes())
        .await?;
    out.flush().await?;
    let tail: Vec<u8> = tail.into_iter().collect();
    Ok(String::from_utf8_lossy(&tail).into_owned())
}

/// `text` with every occurrence of each secret replaced by its mask.
fn mask(text: &[u8], masks: &[(&[u8], Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    'next: while i < text.len() {
        for (secret, replacement) in masks {
            if !secret.is_empty() && text[i..].starts_with(secret) {
                out.extend_from_slice(replacement);
                i += secret.len();
                continue 'next;
            }
        }
        out.push(text[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_occurrence_of_each_secret_is_masked() {
        let masks = [
            (b"s3cr3t".as_slice(), b"[A]".to_vec()),
            (b"xy".as_slice(), b"[B]".to_vec()),
        ];
        assert_eq!(
            mask(b"s3cr3t and s3cr3ts3cr3t, xyz s3cr", &masks),
            b"[A] and [A][A], [B]z s3cr".to_vec()
        );
        assert_eq!(mask(b"", &masks), Vec::<u8>::new());
    }

    #[tokio::test]
    async fn a_secret_cut_by_the_read_boundary_is_still_masked() {
        let dir = tempfile::tempdir().unwrap();
        let (from, log) = (dir.path().join("step.log"), dir.path().join("run.log"));
        let secret = "TOKEN-0123456789";
        // The secret straddles the 64 KiB read.
        let mut text = "a".repeat(64 * 1024 - 5);
        text.push_str(secret);
        text.push_str(" end\n");
        std::fs::write(&from, &text).unwrap();
        std::fs::write(&log, "before\n").unwrap();
        let secrets = [("NPM_TOKEN".to_owned(), secret.to_owned())];
        let tail = append_masked(&from, &log, "setup", "npm ci", &secrets)
            .await
            .unwrap();
        let written = std::fs::read_to_string(&log).unwrap();
        assert!(!written.contains(secret), "the log holds the secret");
        assert!(
            written.starts_with("before\n\n=== pidevops: the repository's setup: npm ci ===\naaa")
        );
        assert!(
            written.contains("a[NPM_TOKEN] end\n=== pidevops: end of the repository's setup ===\n")
        );
        assert!(tail.ends_with("[NPM_TOKEN] end\n"), "{tail}");
        assert!(tail.len() <= TAIL_BYTES);
    }
}
