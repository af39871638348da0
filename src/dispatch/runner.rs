//! Runs one agent process: its own process group, only the environment it is handed (the caller builds it from
//! the profile; nothing of the service's leaks in), stdin closed (or the prompt file; or, for a profile with live
//! input, a pipe its messages are written to: `live.rs`), stdout and stderr into the run's log file and a bounded
//! tail, and two watchdogs — wall clock and silence — that kill the whole group, grandchildren included.
//!
//! The child also dies with the service: `PR_SET_PDEATHSIG` sends it SIGKILL when the thread that started it
//! goes (a SIGKILLed `serve`). What the agent started outlives nothing: in a PID namespace (`namespaces`) the
//! kernel kills every process when the agent ends; under `landlock` a reaper between us and the agent does (see
//! `reaper.rs`).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::agent_log::HeadAndTail;
use super::runs::TAIL_BYTES;
use super::sandbox::Confinement;
use crate::domain::usage::UsageMeter;

/// How long a killed agent gets between SIGTERM and SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(3);

pub struct Launch {
    pub argv: Vec<String>,
    /// The agent's whole environment.
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub log: PathBuf,
    pub timeout: Duration,
    pub no_output_timeout: Duration,
    /// A file given to the agent as its standard input (the prompt, for profiles that read it there).
    pub stdin: Option<PathBuf>,
    pub child: ChildSetup,
    /// Reads what the agent spent from its output as it streams (`None`: a repository's hook, which spends nothing).
    pub meter: Option<SharedMeter>,
    /// Its live input: stdin is a pipe the prompt and follow-ups are written to (`stdin` is then unused).
    pub live: Option<super::live::Live>,
    /// What it may print, and how much of it its log keeps.
    pub output: OutputBounds,
}

/// What a process may print before it is stopped (`Ending::Flooded`), and how much of the start and of the end
/// of its output its log keeps (`agent_log.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputBounds {
    pub max: u64,
    pub log_keep: usize,
}

impl From<&crate::config::dispatch::AgentBounds> for OutputBounds {
    fn from(bounds: &crate::config::dispatch::AgentBounds) -> Self {
        Self {
            max: bounds.output_max,
            log_keep: usize::try_from(bounds.log_keep).unwrap_or(usize::MAX),
        }
    }
}

/// A run's usage meter, read by the attempt while the agent runs and after.
pub type SharedMeter = Arc<std::sync::Mutex<UsageMeter>>;

pub fn meter(format: crate::domain::usage::UsageFormat) -> SharedMeter {
    Arc::new(std::sync::Mutex::new(UsageMeter::new(format)))
}

/// What the child does to itself between fork and exec.
#[derive(Clone, Debug, Default)]
pub struct ChildSetup {
    /// Landlock rules to apply.
    pub confinement: Option<Arc<Confinement>>,
    /// Fork a reaper between us and the agent (no PID namespace here).
    pub reaper: bool,
    /// Drop every capability (the service runs as root and no sandbox program drops them for us).
    pub drop_capabilities: bool,
    /// Its own cgroup with a memory limit, entered before anything else (`cgroup.rs`).
    pub cgroup: Option<Arc<super::cgroup::RunCgroup>>,
    /// The run's egress proxy: it lives as long as the launch (the process and the bridge reaching it).
    pub egress: Option<Arc<super::egress::Proxy>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    Exited(i32),
    /// Killed by a signal that did not come from us.
    Signaled(i32),
    TimedOut,
    Stalled,
    /// It printed more than its output budget (`limit` bytes) and was killed.
    Flooded {
        limit: u64,
    },
    /// Stopped from outside (the task was cancelled, the run declared lost, the service stopping).
    Stopped,
    CannotStart(String),
}

#[derive(Clone, Debug)]
pub struct Finished {
    pub ending: Ending,
    pub duration: Duration,
    pub output_bytes: u64,
    /// The end of the output, lossily decoded.
    pub tail: String,
    /// What the agent's CLI said of its own end, read by the run's meter: a provider's limit, an error.
    pub said: Said,
}

/// What an agent's CLI said in its output about how it ended (nothing, without a meter).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Said {
    pub limit: Option<crate::domain::usage::Limit>,
    pub error: Option<String>,
    /// Why the meter refused a usage figure of the output (out of bounds, not a number): the run is over budget.
    pub refused: Option<String>,
}

/// Runs the agent to its end. `output_bytes` is kept current for heartbeats.
pub async fn run(
    mut launch: Launch,
    output_bytes: Arc<AtomicU64>,
    stop: CancellationToken,
) -> Finished {
    let started = Instant::now();
    let said = |meter: Option<&SharedMeter>| {
        meter
            .map(|m| {
                let m = m.lock().unwrap_or_else(|e| e.into_inner());
                Said {
                    limit: m.limit().cloned(),
                    error: m.ended_in_error().map(str::to_owned),
                    refused: m.refused().map(str::to_owned),
                }
            })
            .unwrap_or_default()
    };
    let finished = |ending, tail: &VecDeque<u8>| Finished {
        ending,
        duration: started.elapsed(),
        output_bytes: output_bytes.load(Ordering::Relaxed),
        tail: String::from_utf8_lossy(&tail.iter().copied().collect::<Vec<u8>>()).into_owned(),
        said: said(launch.meter.as_ref()),
    };
    let tail = VecDeque::with_capacity(TAIL_BYTES);
    let Some((program, args)) = launch.argv.split_first() else {
        return finished(Ending::CannotStart("the command is empty".into()), &tail);
    };
    // Appended to: the run's log may already hold what its setup printed.
    let opened = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&launch.log)
        .await;
    let log = match opened {
        Ok(file) => file,
        Err(e) => {
            return finished(
                Ending::CannotStart(format!("cannot create {}: {e}", launch.log.display())),
                &tail,
            )
        }
    };
    let mut command = match agent_command(&launch, program, args) {
        Ok(command) => command,
        Err(why) => return finished(Ending::CannotStart(why), &tail),
    };
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return finished(
                Ending::CannotStart(format!("cannot start {program:?}: {e}")),
                &tail,
            )
        }
    };
    let group = child.id().map(|pid| Pid::from_raw(pid as i32));
    let (mut turns, writer) = match (launch.live.take(), child.stdin.take()) {
        (Some(live), Some(stdin)) => {
            let (turns, writer) = super::live::start(stdin, live);
            (Some(turns), Some(writer))
        }
        _ => (None, None),
    };

    let (chunks, mut received) = mpsc::channel::<(bool, Vec<u8>)>(64);
    if let Some(stdout) = child.stdout.take() {
        tokio::spawn(pump(stdout, true, chunks.clone()));
    }
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(pump(stderr, false, chunks.clone()));
    }
    drop(chunks);

    let mut output = Output {
        log,
        log_error: None,
        kept: HeadAndTail::new(launch.output.log_keep),
        printed: 0,
        tail,
        bytes: &output_bytes,
        meter: launch.meter.as_deref(),
    };
    let ending = watch(
        &launch,
        &mut child,
        group,
        &mut received,
        (&mut output, turns.as_mut()),
        &stop,
    )
    .await;
    // Its input goes with it: whatever was still to be written is refused, and stays the task's to hand over.
    if let Some(writer) = writer {
        writer.abort();
    }
    // Whatever the agent left running in its group goes with it, so its pipes close and nothing writes on.
    if let Some(group) = group {
        let _ = killpg(group, Signal::SIGKILL);
    }
    let drain = async {
        while let Some((_, chunk)) = received.recv().await {
            output.take(&chunk).await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
    if let Some(meter) = output.meter {
        meter.lock().unwrap_or_else(|e| e.into_inner()).finish();
    }
    let end = output.kept.finish();
    if let Err(e) = output.log.write_all(&end).await {
        output.log_error.get_or_insert(e);
    }
    if let Err(e) = output.log.flush().await {
        output.log_error.get_or_insert(e);
    }
    if let Some(e) = output.log_error {
        tracing::warn!(log = %launch.log.display(), error = %e, "could not write the agent's log");
    }
    finished(ending, &output.tail)
}

/// The agent's command, not yet spawned: its own process group, only the environment it is handed, stdin from
/// the prompt file or closed, and what the child does to itself between fork and exec. `Err`: why it cannot start.
fn agent_command(
    launch: &Launch,
    program: &str,
    args: &[String],
) -> Result<tokio::process::Command, String> {
    let stdin = match &launch.stdin {
        _ if launch.live.is_some() => Stdio::piped(),
        None => Stdio::null(),
        Some(path) => match std::fs::File::open(path) {
            Ok(file) => Stdio::from(file),
            Err(e) => return Err(format!("cannot open {}: {e}", path.display())),
        },
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&launch.cwd)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let parent = std::process::id();
    let setup = launch.child.clone();
    // SAFETY: the closure makes only async-signal-safe calls (prctl, getppid, write, fork, the Landlock and
    // capability syscalls) and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            use nix::libc;
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then nobody would ever kill us.
            if libc::getppid() as u32 != parent {
                return Err(std::io::Error::other(
                    "the service exited while starting the agent",
                ));
            }
            // First: everything after, a reaper included, is inside its memory limit.
            if let Some(cgroup) = &setup.cgroup {
                cgroup.enter_in_child()?;
            }
            if setup.reaper {
                // Returns only in the agent; the reaper stays behind, adopting and finally killing its orphans.
                super::reaper::split_in_child()?;
            }
            if setup.drop_capabilities {
                super::sandbox::drop_capabilities_in_child()?;
            }
            if let Some(confinement) = &setup.confinement {
                confinement.apply_in_child()?;
            }
            Ok(())
        });
    }
    Ok(command)
}

/// Where the agent's output goes: the log file (its head and tail: `agent_log.rs`; its first write error kept for
/// one warning), the bounded tail, and the byte count heartbeats report.
struct Output<'a> {
    log: tokio::fs::File,
    log_error: Option<std::io::Error>,
    kept: HeadAndTail,
    /// Bytes this process printed (`bytes` may count a run's other processes too).
    printed: u64,
    tail: VecDeque<u8>,
    bytes: &'a AtomicU64,
    meter: Option<&'a std::sync::Mutex<UsageMeter>>,
}

impl Output<'_> {
    async fn take(&mut self, chunk: &[u8]) {
        let head = self.kept.take(chunk);
        if !head.is_empty() {
            if let Err(e) = self.log.write_all(head).await {
                self.log_error.get_or_insert(e);
            }
        }
        self.printed = self.printed.saturating_add(chunk.len() as u64);
        self.bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        if let Some(meter) = self.meter {
            // A poisoned meter still holds what it read: a panic elsewhere must not lose the run's usage.
            meter.lock().unwrap_or_else(|e| e.into_inner()).feed(chunk);
        }
        for byte in chunk.iter().skip(chunk.len().saturating_sub(TAIL_BYTES)) {
            if self.tail.len() == TAIL_BYTES {
                self.tail.pop_front();
            }
            self.tail.push_back(*byte);
        }
    }
}

/// Waits for the agent's end while taking its output; the wall clock, silence and `stop` end it early, killing
/// its whole group.
async fn watch(
    launch: &Launch,
    child: &mut tokio::process::Child,
    group: Option<Pid>,
    received: &mut mpsc::Receiver<(bool, Vec<u8>)>,
    (output, mut turns): (&mut Output<'_>, Option<&mut super::live::TurnWatch>),
    stop: &CancellationToken,
) -> Ending {
    let reaped = launch.child.reaper;
    let deadline = tokio::time::Instant::now() + launch.timeout;
    let mut last_output = tokio::time::Instant::now();
    loop {
        tokio::select! {
            status = child.wait() => {
                break match status {
                    Ok(status) => match (status.code(), std::os::unix::process::ExitStatusExt::signal(&status)) {
                        (Some(code), _) => Ending::Exited(code),
                        (None, Some(signal)) => Ending::Signaled(signal),
                        (None, None) => Ending::Exited(-1),
                    },
                    Err(e) => Ending::CannotStart(format!("waiting for the agent failed: {e}")),
                };
            }
            Some((stdout, chunk)) = received.recv() => {
                last_output = tokio::time::Instant::now();
                output.take(&chunk).await;
                if output.printed > launch.output.max {
                    terminate(group, reaped, child).await;
                    break Ending::Flooded { limit: launch.output.max };
                }
                if let (true, Some(turns)) = (stdout, turns.as_deref_mut()) {
                    turns.feed(&chunk);
                }
            }
            () = tokio::time::sleep_until(deadline) => {
                terminate(group, reaped, child).await;
                break Ending::TimedOut;
            }
            () = tokio::time::sleep_until(last_output + launch.no_output_timeout) => {
                terminate(group, reaped, child).await;
                break Ending::Stalled;
            }
            () = stop.cancelled() => {
                terminate(group, reaped, child).await;
                break Ending::Stopped;
            }
        }
    }
}

async fn pump(mut from: impl AsyncRead + Unpin, stdout: bool, to: mpsc::Sender<(bool, Vec<u8>)>) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.send((stdout, buffer[..n].to_vec())).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// SIGTERM to the whole group, then SIGKILL after a grace period. A reaper is asked to kill its tree rather
/// than killed itself: killed, it could no longer kill the orphans it adopted.
async fn terminate(group: Option<Pid>, reaped: bool, child: &mut tokio::process::Child) {
    let Some(group) = group else {
        let _ = child.kill().await;
        return;
    };
    let _ = killpg(group, Signal::SIGTERM);
    if tokio::time::timeout(TERM_GRACE, child.wait()).await.is_ok() {
        return;
    }
    if reaped {
        let _ = nix::sys::signal::kill(group, Signal::SIGUSR1);
        if tokio::time::timeout(TERM_GRACE, child.wait()).await.is_ok() {
            return;
        }
    }
    let _ = killpg(group, Signal::SIGKILL);
    let _ = child.wait().await;
}
