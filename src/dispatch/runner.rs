//! Runs one agent process: its own process group, only the environment it is handed (the caller builds it from
//! the profile; nothing of the service's leaks in), stdin closed (or the prompt file; or, for a profile with live
//! input, a pipe its messages are written to: `live.rs`), stdout and stderr into the run's log file and a bounded
//! tail, line by line (each stream's lines assembled on their own, then taken in the order they were read, stderr's
//! marked: `agent_log.rs`), and two watchdogs — wall clock and silence — that kill the whole group, grandchildren included.
//!
//! The child also dies with the service: `PR_SET_PDEATHSIG` sends it SIGKILL when the thread that started it
//! goes (a SIGKILLed `serve`). What the agent started outlives nothing: a reaper between us and the agent kills
//! and waits for every descendant when the agent ends (see `reaper.rs`); in a PID namespace (`namespaces`) that is
//! bubblewrap's init, whose end takes the whole namespace with it.

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

use super::agent_log::{logged_lines, HeadAndTail};
use super::runs::TAIL_BYTES;
use super::sandbox::Confinement;
use crate::domain::usage::UsageMeter;

/// How long a killed agent gets between SIGTERM and SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(3);

/// The longest line held back for its end: a longer one is taken in pieces of this size, each as a line.
const LINE_MAX: usize = 1024 * 1024;

/// What a pump read from one of the agent's pipes: how many bytes, and the whole lines they completed (each with
/// its newline; none while a line is still being written).
struct Read {
    stdout: bool,
    bytes: usize,
    lines: Vec<u8>,
}

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
    /// Fork a reaper between us and the agent (`reaper.rs`).
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

    let (chunks, mut received) = mpsc::channel::<Read>(64);
    tokio::spawn(pump(child.stdout.take(), child.stderr.take(), chunks));

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
        while let Some(read) = received.recv().await {
            output.take(&read).await;
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
    /// Counts what was read, and takes the whole lines it completed: into the log (stderr's marked), the meter and
    /// the tail.
    async fn take(&mut self, read: &Read) {
        self.printed = self.printed.saturating_add(read.bytes as u64);
        self.bytes.fetch_add(read.bytes as u64, Ordering::Relaxed);
        let chunk = &read.lines[..];
        if chunk.is_empty() {
            return;
        }
        // One write for the read's lines (a write per line would make a chatty agent wait on the file).
        let logged = logged_lines(!read.stdout, chunk);
        let head = self.kept.take(&logged);
        if !head.is_empty() {
            if let Err(e) = self.log.write_all(head).await {
                self.log_error.get_or_insert(e);
            }
        }
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
    received: &mut mpsc::Receiver<Read>,
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
            Some(read) = received.recv() => {
                last_output = tokio::time::Instant::now();
                output.take(&read).await;
                if output.printed > launch.output.max {
                    terminate(group, reaped, child).await;
                    break Ending::Flooded { limit: launch.output.max };
                }
                if let (true, Some(turns)) = (read.stdout, turns.as_deref_mut()) {
                    turns.feed(&read.lines);
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

/// Reads the agent's two pipes in one task, sending on every read its size and the whole lines it completed, in
/// the order they were read: a line written to one pipe after the other's was read comes after it. A line still
/// being written is held back (so the other stream's lines never cut it), to [`LINE_MAX`]; a last one without its
/// newline goes, given one, when its pipe closes.
async fn pump(
    mut stdout: Option<tokio::process::ChildStdout>,
    mut stderr: Option<tokio::process::ChildStderr>,
    to: mpsc::Sender<Read>,
) {
    let (mut out_buffer, mut err_buffer) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    let (mut out_lines, mut err_lines) = (Lines::default(), Lines::default());
    while stdout.is_some() || stderr.is_some() {
        // Both reads are cancel-safe: the one not chosen read nothing.
        let (is_stdout, result) = tokio::select! {
            read = read_from(&mut stdout, &mut out_buffer), if stdout.is_some() => (true, read),
            read = read_from(&mut stderr, &mut err_buffer), if stderr.is_some() => (false, read),
        };
        let (lines, buffer) = match is_stdout {
            true => (&mut out_lines, &out_buffer),
            false => (&mut err_lines, &err_buffer),
        };
        let (bytes, whole) = match result {
            Ok(0) | Err(_) => {
                if is_stdout {
                    stdout = None;
                } else {
                    stderr = None;
                }
                (0, lines.end())
            }
            Ok(n) => (n, lines.take(&buffer[..n])),
        };
        if bytes == 0 && whole.is_empty() {
            continue;
        }
        let read = Read {
            stdout: is_stdout,
            bytes,
            lines: whole,
        };
        if to.send(read).await.is_err() {
            return;
        }
    }
}

async fn read_from(
    pipe: &mut Option<impl AsyncRead + Unpin>,
    buffer: &mut [u8],
) -> std::io::Result<usize> {
    match pipe {
        Some(pipe) => pipe.read(buffer).await,
        None => Ok(0),
    }
}

/// One stream's bytes as whole lines: what a read completed, the rest held for the next.
#[derive(Default)]
struct Lines {
    held: Vec<u8>,
}

impl Lines {
    /// The whole lines `read` completes (each with its newline), in order; a line past [`LINE_MAX`] in pieces.
    fn take(&mut self, read: &[u8]) -> Vec<u8> {
        let (whole, rest) = match read.iter().rposition(|b| *b == b'\n') {
            Some(end) => {
                let mut whole = std::mem::take(&mut self.held);
                whole.extend_from_slice(&read[..=end]);
                (whole, &read[end + 1..])
            }
            None => (Vec::new(), read),
        };
        self.held.extend_from_slice(rest);
        let mut whole = whole;
        while self.held.len() >= LINE_MAX {
            let piece: Vec<u8> = self.held.drain(..LINE_MAX).collect();
            whole.extend_from_slice(&piece);
            whole.push(b'\n');
        }
        whole
    }

    /// The stream ended: a last line without its newline, given one.
    fn end(&mut self) -> Vec<u8> {
        let mut last = std::mem::take(&mut self.held);
        if !last.is_empty() {
            last.push(b'\n');
        }
        last
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_taken_in_whole_lines_a_partial_one_held_to_its_end() {
        let mut lines = Lines::default();
        assert_eq!(lines.take(b"out 1\nout par"), b"out 1\n");
        assert_eq!(lines.take(b"ti"), b"");
        assert_eq!(lines.take(b"al\nout 3\nlast"), b"out partial\nout 3\n");
        assert_eq!(lines.end(), b"last\n");
        assert_eq!(lines.end(), b"");
    }

    #[test]
    fn a_line_longer_than_the_most_held_is_taken_in_pieces() {
        let mut lines = Lines::default();
        let long = vec![b'x'; LINE_MAX + 10];
        let whole = lines.take(&long);
        assert_eq!(whole.len(), LINE_MAX + 1);
        assert_eq!(whole.last(), Some(&b'\n'));
        assert_eq!(
            lines.take(b"y\n"),
            [vec![b'x'; 10], b"y\n".to_vec()].concat()
        );
    }
}
