//! An agent CLI's own session, kept with each checkpoint and resumed with it (Claude Code `--resume`, Codex
//! `exec resume`; docs/agents.md, "Resuming the CLI's session").
//!
//! A work run of a CLI that keeps sessions gets a directory of its own as the CLI's home (`CLAUDE_CONFIG_DIR`,
//! `CODEX_HOME`): `runs/<task>/<run>/session/`, fresh and empty. Each time pidevops takes a checkpoint of the
//! worktree it copies the session's transcript out of that directory to `sessions/<task>/<checkpoint commit>/`,
//! out of every agent's sight; an attempt resumed from that checkpoint gets a fresh directory with only that
//! transcript put back where the CLI looks, and the CLI's resume flag: the conversation goes on from where the
//! checkpoint's files are, not from later turns whose files were lost.
//!
//! The agent wrote that directory and does what ticket text tells it. Only the transcript crosses from one run to
//! the next, never the CLI's settings, hooks, credentials or anything else left there: found without following a
//! link (each directory opened `O_NOFOLLOW` relative to the one before), a regular file of at most
//! [`MAX_TRANSCRIPT_BYTES`] named as the CLI names it (its session id a UUID), kept up to its last whole line,
//! every line JSON. It is never executed and never read as configuration, only handed back to the same task's
//! next attempt, which could have written it anyway. Anything else keeps no session, and says why: the resumed
//! attempt then starts a new CLI session from the checkpoint's files, told what was done (as without this).
//!
//! Blocking (a directory walk and a file of up to a few MiB): call it from `spawn_blocking`.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};
use uuid::Uuid;

use super::agent_files::owned;
pub use crate::config::presets::SessionStore;
use crate::tasks::TaskId;

/// The largest transcript kept: past it the session is not kept (the attempt resumes from its files alone).
pub const MAX_TRANSCRIPT_BYTES: usize = 32 << 20;
/// Entries of one directory looked at while searching, so a directory of millions of files costs nothing.
const MAX_DIR_ENTRIES: usize = 1_000;
/// Codex's dated directories looked into at each level (a run makes one a day): each is held open meanwhile.
const MAX_DATED_DIRS: usize = 64;
/// Claude Code's longest project directory name it spells out; longer ones end in a hash of its own.
const CLAUDE_PROJECT_CHARS: usize = 200;
/// Sessions kept per task: the newest checkpoints'.
pub const KEPT_PER_TASK: usize = 3;
/// The kept transcript and what it is, in `sessions/<task>/<commit>/`.
const KEPT_FILE: &str = "transcript.jsonl";
const KEPT_META: &str = "session.json";

/// Why no session was kept or put back. Each message says what was found, for the log and the run's record.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SessionError {
    #[error("{path} was refused: it is {kind}; pidevops never follows a link out of the session directory")]
    NotDirectory { path: String, kind: &'static str },
    #[error("{path} was refused: it is {kind}, not a regular file")]
    NotRegular { path: String, kind: &'static str },
    #[error("{path} was refused: it is larger than {max} bytes")]
    TooLarge { path: String, max: usize },
    #[error("{path} holds more than {max} entries")]
    TooMany { path: String, max: usize },
    #[error("{path} was refused: line {line} is not JSON")]
    NotJson { path: String, line: usize },
    #[error("the worktree's path spells a Claude Code project name longer than {CLAUDE_PROJECT_CHARS} characters")]
    PathTooLong,
    #[error("the command {0}")]
    Command(&'static str),
    #[error("could not {what}: {why}")]
    Io { what: String, why: String },
}

impl SessionError {
    fn io(what: impl Into<String>, why: impl std::fmt::Display) -> Self {
        Self::Io {
            what: what.into(),
            why: why.to_string(),
        }
    }
}

/// A session's transcript: the CLI's id for it, where under the CLI's home it goes back (Claude Code's file
/// name; Codex's `sessions/YYYY/MM/DD/<name>`), and its whole lines of JSON.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Transcript {
    pub id: Uuid,
    pub name: String,
    #[serde(skip)]
    pub bytes: Vec<u8>,
}

/// How a work run's CLI keeps its session: which CLI, its home for this run, and the session it resumes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionPlan {
    pub store: SessionStore,
    pub home: PathBuf,
    pub resume: Option<Uuid>,
}

/// The CLI's home of the run whose directory is `run_dir` (`runs/<task>/<run>/`).
pub fn home(run_dir: &Path) -> PathBuf {
    run_dir.join("session")
}

/// Where a session kept at checkpoint `commit` of `task` lies, under the workspace root.
pub fn kept_dir(root: &Path, task: TaskId, commit: &str) -> PathBuf {
    tasks_dir(root, task).join(commit)
}

/// Every session kept for `task`.
pub fn tasks_dir(root: &Path, task: TaskId) -> PathBuf {
    root.join("sessions").join(task.to_string())
}

/// The variable that points the CLI at its home.
pub fn home_var(store: SessionStore) -> &'static str {
    match store {
        SessionStore::Claude => "CLAUDE_CONFIG_DIR",
        SessionStore::Codex => "CODEX_HOME",
    }
}

/// The command that resumes session `id`, from the command the profile runs: Claude Code `--resume <id>` after
/// the program; Codex `exec resume … <id> -` (the prompt still read from stdin). A command already resuming or
/// continuing something, or not shaped as the preset's, is refused rather than guessed at.
pub fn resume_argv(
    store: SessionStore,
    mut argv: Vec<String>,
    id: Uuid,
) -> Result<Vec<String>, SessionError> {
    let has = |flags: &[&str]| argv.iter().skip(1).any(|a| flags.contains(&a.as_str()));
    match store {
        SessionStore::Claude => {
            if argv.is_empty() {
                return Err(SessionError::Command("is empty"));
            }
            if has(&["--resume", "-r", "--continue", "-c", "--session-id"]) {
                return Err(SessionError::Command(
                    "already names a session (--resume, --continue or --session-id)",
                ));
            }
            argv.splice(1..1, ["--resume".to_owned(), id.to_string()]);
        }
        SessionStore::Codex => {
            let Some(exec) = argv.iter().position(|a| a == "exec") else {
                return Err(SessionError::Command("has no `exec`"));
            };
            if has(&["resume", "fork", "review", "--last"]) {
                return Err(SessionError::Command("already resumes or forks a session"));
            }
            if argv.last().map(String::as_str) != Some("-") {
                return Err(SessionError::Command(
                    "does not end in `-` (the prompt from standard input)",
                ));
            }
            let last = argv.len() - 1;
            argv.insert(last, id.to_string());
            argv.insert(exec + 1, "resume".to_owned());
        }
    }
    Ok(argv)
}

/// The session the CLI wrote under `home` while running in `cwd`, if it wrote one: the newest transcript named as
/// the CLI names them, checked (see the module doc).
pub fn find(
    store: SessionStore,
    home: &Path,
    cwd: &Path,
) -> Result<Option<Transcript>, SessionError> {
    let root = match File::open(home) {
        Ok(root) => OwnedFd::from(root),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SessionError::io("open the session directory", e)),
    };
    let found = match store {
        SessionStore::Claude => {
            let project = claude_project(cwd)?;
            let Some(dir) = open_dir(&root, &["projects", &project])? else {
                return Ok(None);
            };
            newest(&dir, &format!("projects/{project}"), claude_id)?
                .map(|(name, id)| (dir, String::new(), name, id))
        }
        SessionStore::Codex => codex_newest(&root)?,
    };
    let Some((dir, prefix, name, id)) = found else {
        return Ok(None);
    };
    let shown = format!("{prefix}{name}");
    let bytes = whole_json_lines(read_regular(&dir, &name, &shown)?, &shown)?;
    if bytes.is_empty() {
        return Ok(None);
    }
    Ok(Some(Transcript {
        id,
        name: shown,
        bytes,
    }))
}

/// Puts `transcript` where the CLI looks for it under `home` (a fresh directory of pidevops's own) when it runs
/// in `cwd`.
pub fn put_back(
    store: SessionStore,
    transcript: &Transcript,
    home: &Path,
    cwd: &Path,
) -> Result<(), SessionError> {
    let path = match store {
        SessionStore::Claude => home
            .join("projects")
            .join(claude_project(cwd)?)
            .join(format!("{}.jsonl", transcript.id)),
        SessionStore::Codex => {
            let parts: Vec<&str> = transcript.name.split('/').collect();
            match parts.as_slice() {
                ["sessions", y, m, d, name]
                    if date_part(y, 4)
                        && date_part(m, 2)
                        && date_part(d, 2)
                        && codex_id(name) == Some(transcript.id) =>
                {
                    home.join(transcript.name.as_str())
                }
                _ => {
                    return Err(SessionError::io(
                        "put the session back",
                        format!("{:?} is not a Codex session's path", transcript.name),
                    ))
                }
            }
        }
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| SessionError::io(format!("make {}", parent.display()), e))?;
    }
    std::fs::write(&path, &transcript.bytes)
        .map_err(|e| SessionError::io(format!("write {}", path.display()), e))
}

/// Keeps `transcript` as the session of checkpoint `commit` of `task`, and forgets all but the task's
/// [`KEPT_PER_TASK`] newest: a resume starts from the last checkpoint recorded, and this one is kept just before it
/// is recorded (a crash between the two resumes the one before). Written aside and renamed in, so a crash leaves a
/// whole one or none.
pub fn keep(
    root: &Path,
    task: TaskId,
    commit: &str,
    transcript: &Transcript,
) -> Result<(), SessionError> {
    let dir = tasks_dir(root, task);
    let aside = dir.join(format!(".{}", Uuid::new_v4()));
    let io = |what: &str| {
        let what = format!("{what} {}", aside.display());
        move |e: std::io::Error| SessionError::io(what, e)
    };
    std::fs::create_dir_all(&aside).map_err(io("make"))?;
    std::fs::write(aside.join(KEPT_FILE), &transcript.bytes).map_err(io("write into"))?;
    let meta = serde_json::to_vec(transcript).map_err(|e| SessionError::io("encode", e))?;
    std::fs::write(aside.join(KEPT_META), meta).map_err(io("write into"))?;
    let target = kept_dir(root, task, commit);
    let _ = std::fs::remove_dir_all(&target);
    std::fs::rename(&aside, &target).map_err(io("rename"))?;
    let mut kept: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&dir)
        .map_err(|e| SessionError::io(format!("list {}", dir.display()), e))?
        .flatten()
        .filter(|e| e.file_name().to_str() != Some(commit))
        .map(|e| {
            let at = e.metadata().and_then(|m| m.modified());
            (at.unwrap_or(std::time::UNIX_EPOCH), e.path())
        })
        .collect();
    kept.sort();
    let older = kept.len().saturating_sub(KEPT_PER_TASK - 1);
    for (_, path) in kept.drain(..older) {
        let _ = std::fs::remove_dir_all(path);
    }
    Ok(())
}

/// The session kept at checkpoint `commit` of `task`, if one was.
pub fn kept(root: &Path, task: TaskId, commit: &str) -> Result<Option<Transcript>, SessionError> {
    let dir = kept_dir(root, task, commit);
    let meta = match std::fs::read(dir.join(KEPT_META)) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SessionError::io("read the kept session", e)),
    };
    let mut transcript: Transcript =
        serde_json::from_slice(&meta).map_err(|e| SessionError::io("read the kept session", e))?;
    transcript.bytes = std::fs::read(dir.join(KEPT_FILE))
        .map_err(|e| SessionError::io("read the kept transcript", e))?;
    Ok(Some(transcript))
}

/// Claude Code's project directory for `cwd`: every character but ASCII letters and digits as `-`.
fn claude_project(cwd: &Path) -> Result<String, SessionError> {
    let spelled: String = cwd
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    if spelled.len() > CLAUDE_PROJECT_CHARS {
        return Err(SessionError::PathTooLong);
    }
    Ok(spelled)
}

/// `<uuid>.jsonl`: Claude Code's transcript of session `<uuid>`.
fn claude_id(name: &str) -> Option<Uuid> {
    name.strip_suffix(".jsonl")
        .and_then(|id| Uuid::parse_str(id).ok())
        .filter(|id| name == format!("{id}.jsonl"))
}

/// `rollout-<time>-<uuid>.jsonl`: Codex's transcript of session `<uuid>`.
fn codex_id(name: &str) -> Option<Uuid> {
    let stem = name.strip_prefix("rollout-")?.strip_suffix(".jsonl")?;
    let id = stem.get(stem.len().checked_sub(36)?..)?;
    let time = &stem[..stem.len() - 36];
    let plain = time
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '-' | 'T' | ':' | '.'));
    let id = Uuid::parse_str(id).ok()?;
    (plain && time.ends_with('-') && stem.ends_with(&id.to_string())).then_some(id)
}

fn date_part(part: &str, digits: usize) -> bool {
    part.len() == digits && part.chars().all(|c| c.is_ascii_digit())
}

/// A transcript found: its directory, the path to it shown (and put back at), its file name, its session id.
type Found = (OwnedFd, String, String, Uuid);

/// Codex's newest transcript: `sessions/YYYY/MM/DD/rollout-…-<uuid>.jsonl`, each directory a real one.
fn codex_newest(root: &OwnedFd) -> Result<Option<Found>, SessionError> {
    let Some(sessions) = open_dir(root, &["sessions"])? else {
        return Ok(None);
    };
    // Down the dated directories, level by level: (the path so far, the directory).
    let mut level = vec![("sessions".to_owned(), sessions)];
    for digits in [4, 2, 2] {
        let mut next = Vec::new();
        for (path, dir) in &level {
            for name in names(dir, path)? {
                if !date_part(&name, digits) {
                    continue;
                }
                if next.len() == MAX_DATED_DIRS {
                    return Err(SessionError::TooMany {
                        path: format!("{path}/…"),
                        max: MAX_DATED_DIRS,
                    });
                }
                if let Some(sub) = open_dir(dir, &[&name])? {
                    next.push((format!("{path}/{name}"), sub));
                }
            }
        }
        level = next;
    }
    let mut best: Option<((i64, i64), Found)> = None;
    for (path, day) in level {
        let prefix = format!("{path}/");
        if let Some((name, id)) = newest(&day, &prefix, codex_id)? {
            let at = modified(&day, &name);
            if best.as_ref().is_none_or(|b| at > b.0) {
                best = Some((at, (day, prefix, name, id)));
            }
        }
    }
    Ok(best.map(|(_, found)| found))
}

/// The newest entry of `dir` whose name `id_of` accepts.
fn newest(
    dir: &OwnedFd,
    shown: &str,
    id_of: fn(&str) -> Option<Uuid>,
) -> Result<Option<(String, Uuid)>, SessionError> {
    let mut best: Option<((i64, i64), String, Uuid)> = None;
    for name in names(dir, shown)? {
        let Some(id) = id_of(&name) else { continue };
        let at = modified(dir, &name);
        if best.as_ref().is_none_or(|b| at > b.0) {
            best = Some((at, name, id));
        }
    }
    Ok(best.map(|(_, name, id)| (name, id)))
}

/// When `name` in `dir` last changed (seconds, nanoseconds), not following a link; the epoch if unknown.
fn modified(dir: &OwnedFd, name: &str) -> (i64, i64) {
    nix::sys::stat::fstatat(
        Some(dir.as_raw_fd()),
        name,
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map(|s| (s.st_mtime, s.st_mtime_nsec))
    .unwrap_or((0, 0))
}

/// The names in `dir`, at most [`MAX_DIR_ENTRIES`] looked at.
fn names(dir: &OwnedFd, shown: &str) -> Result<Vec<String>, SessionError> {
    let fd = nix::unistd::dup(dir.as_raw_fd())
        .map_err(|e| SessionError::io(format!("list {shown}"), e))?;
    let mut listing =
        Dir::from(owned(fd)).map_err(|e| SessionError::io(format!("list {shown}"), e))?;
    let mut out = Vec::new();
    for (seen, entry) in listing.iter().enumerate() {
        if seen >= MAX_DIR_ENTRIES {
            return Err(SessionError::TooMany {
                path: shown.to_owned(),
                max: MAX_DIR_ENTRIES,
            });
        }
        let entry = entry.map_err(|e| SessionError::io(format!("list {shown}"), e))?;
        if let Ok(name) = entry.file_name().to_str() {
            if name != "." && name != ".." {
                out.push(name.to_owned());
            }
        }
    }
    Ok(out)
}

/// `path`'s directories under `from`, each opened only if it is a real directory; `None` when one is not there.
fn open_dir(from: &OwnedFd, path: &[&str]) -> Result<Option<OwnedFd>, SessionError> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut at: Option<OwnedFd> = None;
    for (i, part) in path.iter().enumerate() {
        let parent = at.as_ref().unwrap_or(from).as_raw_fd();
        match openat(Some(parent), *part, flags, Mode::empty()) {
            Ok(fd) => at = Some(owned(fd)),
            Err(Errno::ENOENT) => return Ok(None),
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                return Err(SessionError::NotDirectory {
                    path: path[..=i].join("/"),
                    kind: "a link or another kind of file",
                })
            }
            Err(e) => {
                return Err(SessionError::io(
                    format!("open {}", path[..=i].join("/")),
                    e,
                ))
            }
        }
    }
    Ok(at)
}

/// `name` in `dir`, a regular file of at most [`MAX_TRANSCRIPT_BYTES`], read without following a link or
/// blocking on a FIFO.
fn read_regular(dir: &OwnedFd, name: &str, shown: &str) -> Result<Vec<u8>, SessionError> {
    let flags = OFlag::O_RDONLY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    let file = match openat(Some(dir.as_raw_fd()), name, flags, Mode::empty()) {
        Ok(fd) => File::from(owned(fd)),
        Err(Errno::ELOOP) => {
            return Err(SessionError::NotRegular {
                path: shown.to_owned(),
                kind: "a symbolic link",
            })
        }
        Err(e) => return Err(SessionError::io(format!("open {shown}"), e)),
    };
    let stat = fstat(file.as_raw_fd()).map_err(|e| SessionError::io(format!("read {shown}"), e))?;
    if SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFREG {
        return Err(SessionError::NotRegular {
            path: shown.to_owned(),
            kind: "not a regular file (a FIFO, a socket, a device or a directory)",
        });
    }
    let max = MAX_TRANSCRIPT_BYTES;
    if u64::try_from(stat.st_size).unwrap_or(u64::MAX) > max as u64 {
        return Err(SessionError::TooLarge {
            path: shown.to_owned(),
            max,
        });
    }
    let mut bytes = Vec::new();
    file.take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| SessionError::io(format!("read {shown}"), e))?;
    // It grew past the cap while it was read.
    if bytes.len() > max {
        return Err(SessionError::TooLarge {
            path: shown.to_owned(),
            max,
        });
    }
    Ok(bytes)
}

/// `bytes` up to its last newline (a line the CLI was still writing is left out), every line JSON.
fn whole_json_lines(mut bytes: Vec<u8>, shown: &str) -> Result<Vec<u8>, SessionError> {
    let end = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    bytes.truncate(end);
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if serde_json::from_slice::<serde::de::IgnoredAny>(line).is_err() {
            return Err(SessionError::NotJson {
                path: shown.to_owned(),
                line: i + 1,
            });
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests;
