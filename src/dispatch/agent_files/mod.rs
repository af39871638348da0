//! Reading what an agent left for pidevops in `.pidevops/` of its worktree (docs/agent-files.md), and removing the
//! directory so it is never committed.
//!
//! The agent wrote all of it and does what ticket text tells it, so nothing here is followed or trusted: the
//! directory is opened without following a link (`O_NOFOLLOW | O_DIRECTORY`) and each file relative to it
//! (`openat`), so neither can be pointed at `/etc/passwd`, another worktree or the database; a symbolic link, FIFO,
//! socket, device or directory is refused from its `lstat` before it is opened, and again from `fstat` after
//! (`O_NONBLOCK`, so a FIFO swapped in between cannot hang the dispatcher); a file over its size cap is refused
//! from its size and read at most one byte past the cap in case it grows. The bytes are then parsed strictly by
//! `tasks::values` (`AgentStatus`, `Review`, `TriagedSpec`, `AgentQuestion`).
//!
//! Blocking: small files and a directory listing, but call it from `spawn_blocking` on the runtime.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};

use crate::tasks::values::{AgentQuestion, AgentStatus, ReportError, Review, Spec, TriagedSpec};

/// The directory, in the worktree's root, where an agent leaves files for pidevops.
pub const AGENT_DIR: &str = ".pidevops";
/// `status-<id>.json` files read at most; more is an agent flooding the directory, not a verdict.
pub const MAX_STATUS_FILES: usize = 16;
/// Entries of `.pidevops/` looked at while listing, so a directory of millions of files costs nothing.
const MAX_DIR_ENTRIES: usize = 1_000;
/// `<id>` of `status-<id>.json`: 1 to 64 of `A-Z a-z 0-9 - _`.
const MAX_ID_CHARS: usize = 64;

/// Why a file the agent left was not read. Each message names the file and says why, for the person on the board
/// and for the agent's retry prompt alike.
#[derive(Debug, thiserror::Error)]
pub enum AgentFileError {
    /// A bug in pidevops, not the agent's doing: only plain file names are read.
    #[error("{name:?} is not a file name pidevops reads from .pidevops/: {why}")]
    Name { name: String, why: &'static str },
    #[error(".pidevops was refused: it is {kind}, not a directory; pidevops never follows a link out of the worktree")]
    Dir { kind: &'static str },
    #[error(".pidevops/{name} was refused: it is {kind}; write a regular file there instead")]
    NotRegular { name: String, kind: &'static str },
    #[error(".pidevops/{name} was refused: it was replaced while pidevops was reading it")]
    Replaced { name: String },
    #[error(".pidevops/{name} was refused: it is larger than {max} bytes")]
    TooLarge { name: String, max: usize },
    #[error(".pidevops/ was refused: it holds more than {max} {what}")]
    TooMany { what: &'static str, max: usize },
    #[error("could not read {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(#[from] ReportError),
    #[error("could not remove .pidevops/ from the worktree: {0}")]
    Remove(#[source] std::io::Error),
}

fn io_error(what: impl Into<String>, errno: Errno) -> AgentFileError {
    AgentFileError::Io {
        what: what.into(),
        source: std::io::Error::from(errno),
    }
}

/// The bytes of `.pidevops/<name>` in `worktree`, at most `max_bytes` of them; `None` when the directory or the
/// file is not there. Refused (never followed, never blocking): a symbolic link as `.pidevops` or as the file, a
/// FIFO, socket, device or directory, a file larger than `max_bytes`.
pub fn read_agent_file(
    worktree: &Path,
    name: &str,
    max_bytes: usize,
) -> Result<Option<Vec<u8>>, AgentFileError> {
    check_name(name)?;
    let Some(dir) = open_agent_dir(worktree)? else {
        return Ok(None);
    };
    read_in(&dir, name, max_bytes)
}

/// The `status-<id>.json` names in `.pidevops/`, sorted (`status.json` itself is not listed). Listed whatever they
/// are, so that [`read_agent_file`] refuses a link or a FIFO by name instead of it being skipped silently; names of
/// another shape are not status files and are ignored.
pub fn agent_files(worktree: &Path) -> Result<Vec<String>, AgentFileError> {
    let Some(dir) = open_agent_dir(worktree)? else {
        return Ok(Vec::new());
    };
    let mut dir = Dir::from(dir).map_err(|e| io_error(".pidevops/", e))?;
    let mut names = Vec::new();
    for (seen, entry) in dir.iter().enumerate() {
        if seen >= MAX_DIR_ENTRIES {
            return Err(AgentFileError::TooMany {
                what: "entries",
                max: MAX_DIR_ENTRIES,
            });
        }
        let entry = entry.map_err(|e| io_error(".pidevops/", e))?;
        let Ok(name) = entry.file_name().to_str() else {
            continue;
        };
        if is_status_file(name) {
            if names.len() == MAX_STATUS_FILES {
                return Err(AgentFileError::TooMany {
                    what: "status-<id>.json files",
                    max: MAX_STATUS_FILES,
                });
            }
            names.push(name.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// The agent's verdict from `status.json` and every `status-<id>.json`, combined by [`AgentStatus::combine`];
/// `None` when there is no status file. One refused or invalid file refuses the whole verdict: a verdict that
/// silently dropped a file could drop its call for a person.
pub fn read_status(worktree: &Path) -> Result<Option<AgentStatus>, AgentFileError> {
    let mut names = vec![AgentStatus::FILE.to_owned()];
    names.extend(agent_files(worktree)?);
    let mut found = Vec::new();
    for name in names {
        if let Some(bytes) = read_agent_file(worktree, &name, AgentStatus::MAX_BYTES)? {
            let status = AgentStatus::parse(&name, &bytes)?;
            found.push((name, status));
        }
    }
    Ok(AgentStatus::combine(found))
}

/// The agent's question for a person (`question.md`), if it left one.
pub fn read_question(worktree: &Path) -> Result<Option<AgentQuestion>, AgentFileError> {
    read_agent_file(worktree, AgentQuestion::FILE, AgentQuestion::MAX_BYTES)?
        .map(|bytes| AgentQuestion::parse(&bytes).map_err(AgentFileError::from))
        .transpose()
}

/// A reviewer agent's `review.json`, if it left one.
pub fn read_review(worktree: &Path) -> Result<Option<Review>, AgentFileError> {
    read_agent_file(worktree, Review::FILE, Review::MAX_BYTES)?
        .map(|bytes| Review::parse(&bytes).map_err(AgentFileError::from))
        .transpose()
}

/// A triage agent's `spec.json`, if it left one, as the task's new [`Spec`].
pub fn read_spec(worktree: &Path) -> Result<Option<Spec>, AgentFileError> {
    read_agent_file(worktree, TriagedSpec::FILE, TriagedSpec::MAX_BYTES)?
        .map(|bytes| {
            TriagedSpec::parse(&bytes)
                .map(TriagedSpec::into_spec)
                .map_err(AgentFileError::from)
        })
        .transpose()
}

/// Removes `.pidevops` from `worktree` so it is never committed: a directory with everything in it (links inside
/// are removed, never followed), or, when the agent made `.pidevops` a link or a file, just that entry, never what
/// it points at. Nothing there is fine.
pub fn remove_agent_dir(worktree: &Path) -> Result<(), AgentFileError> {
    remove_entry(&worktree.join(AGENT_DIR))
        .map(|_| ())
        .map_err(AgentFileError::Remove)
}

/// Removes from `worktree` the agent CLIs' project configuration (`tasks::agent_config::PATHS`: settings, hooks,
/// MCP servers, plugins, extensions) before a run that must not load what a worker could have planted (a reviewer,
/// a planner, a triage agent), whatever its CLI's switches say; the paths that were there, for the record. The work
/// is unchanged: what is pushed is the commit recorded before, and the worktree is reset before its next use.
pub fn set_aside_agent_config(worktree: &Path) -> std::io::Result<Vec<String>> {
    let mut removed = Vec::new();
    for path in crate::tasks::agent_config::PATHS {
        if remove_entry(&worktree.join(path.name()))? {
            removed.push(path.name().to_owned());
        }
    }
    Ok(removed)
}

/// Removes a file, a link (never what it points at) or a directory tree; `false` when nothing was there.
fn remove_entry(path: &Path) -> std::io::Result<bool> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if !meta.is_dir() {
        return std::fs::remove_file(path).map(|()| true);
    }
    // remove_dir_all does not follow links (std removes through openat/unlinkat). An agent may have taken the
    // permissions off a directory inside to keep it (and so itself) in the commit: give them back and retry.
    if std::fs::remove_dir_all(path).is_ok() {
        return Ok(true);
    }
    make_removable(path);
    std::fs::remove_dir_all(path).map(|()| true)
}

/// `u+rwx` on every real directory under `root` (found with `lstat`, so no link is followed; the agent's
/// processes are gone by the time pidevops cleans up, so nothing swaps one in meanwhile). Best effort: whatever
/// still cannot be removed, the retry reports.
fn make_removable(root: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
        }
    }
}

/// The name guard: one plain file name, nothing that could reach outside `.pidevops/`.
fn check_name(name: &str) -> Result<(), AgentFileError> {
    let why = if name.is_empty() {
        "it is empty"
    } else if name.contains('/') {
        "it contains `/`"
    } else if name.contains("..") {
        "it contains `..`"
    } else if name == "." {
        "it is `.`"
    } else if name.contains('\0') {
        "it contains a NUL"
    } else if name.len() > 255 {
        "it is longer than 255 bytes"
    } else {
        return Ok(());
    };
    Err(AgentFileError::Name {
        name: name.to_owned(),
        why,
    })
}

/// `status-<id>.json`, `<id>` 1 to 64 of `A-Z a-z 0-9 - _`.
fn is_status_file(name: &str) -> bool {
    name.strip_prefix("status-")
        .and_then(|rest| rest.strip_suffix(".json"))
        .is_some_and(|id| {
            (1..=MAX_ID_CHARS).contains(&id.len())
                && id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
}

/// Takes ownership of a descriptor `openat` (or `dup`) just returned; `sessions` reads the same way.
pub(crate) fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: `fd` was returned by a successful openat (or dup) a moment ago and nothing else holds it, so this
    // is its one owner and it is closed exactly once.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// `.pidevops` of `worktree`, opened as a directory only if it is a real one; `None` if there is none.
fn open_agent_dir(worktree: &Path) -> Result<Option<OwnedFd>, AgentFileError> {
    // The worktree's own path is ours (made by Workspaces); only what is inside it is the agent's.
    let root = File::open(worktree).map_err(|source| AgentFileError::Io {
        what: "the worktree".to_owned(),
        source,
    })?;
    match fstatat(
        Some(root.as_raw_fd()),
        AGENT_DIR,
        AtFlags::AT_SYMLINK_NOFOLLOW,
    ) {
        Err(Errno::ENOENT) => return Ok(None),
        Err(e) => return Err(io_error(".pidevops", e)),
        Ok(stat) if file_type(&stat) != Some(SFlag::S_IFDIR) => {
            return Err(AgentFileError::Dir {
                kind: describe(&stat),
            })
        }
        Ok(_) => {}
    }
    // Checked above, and enforced here in case it changed since: a link is not followed (ELOOP), a non-directory
    // not opened (ENOTDIR).
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    match openat(Some(root.as_raw_fd()), AGENT_DIR, flags, Mode::empty()) {
        Ok(fd) => Ok(Some(owned(fd))),
        Err(Errno::ENOENT) => Ok(None),
        Err(Errno::ELOOP) | Err(Errno::ENOTDIR) => Err(AgentFileError::Dir {
            kind: "a link or another kind of file",
        }),
        Err(e) => Err(io_error(".pidevops", e)),
    }
}

/// Reads `name` relative to the opened `.pidevops` directory.
fn read_in(dir: &OwnedFd, name: &str, max: usize) -> Result<Option<Vec<u8>>, AgentFileError> {
    let shown = || format!(".pidevops/{name}");
    let before = match fstatat(Some(dir.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Err(Errno::ENOENT) => return Ok(None),
        Err(e) => return Err(io_error(shown(), e)),
        Ok(stat) => stat,
    };
    // Refused before opening: opening a FIFO waits for a writer, opening a device can act on it.
    if file_type(&before) != Some(SFlag::S_IFREG) {
        return Err(AgentFileError::NotRegular {
            name: name.to_owned(),
            kind: describe(&before),
        });
    }
    if u64::try_from(before.st_size).unwrap_or(u64::MAX) > max as u64 {
        return Err(AgentFileError::TooLarge {
            name: name.to_owned(),
            max,
        });
    }
    let flags = OFlag::O_RDONLY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    let file = match openat(Some(dir.as_raw_fd()), name, flags, Mode::empty()) {
        Ok(fd) => File::from(owned(fd)),
        Err(Errno::ENOENT) => return Ok(None),
        Err(Errno::ELOOP) => {
            return Err(AgentFileError::NotRegular {
                name: name.to_owned(),
                kind: "a symbolic link",
            })
        }
        Err(e) => return Err(io_error(shown(), e)),
    };
    // What was opened must be what was checked: a swap between the two is refused, not read.
    let after = fstat(file.as_raw_fd()).map_err(|e| io_error(shown(), e))?;
    if file_type(&after) != Some(SFlag::S_IFREG)
        || (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino)
    {
        return Err(AgentFileError::Replaced {
            name: name.to_owned(),
        });
    }
    // One byte past the cap tells "too large" from "exactly the cap" if it grew since the check.
    let mut bytes = Vec::with_capacity(usize::try_from(before.st_size).unwrap_or(0).min(max));
    file.take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| AgentFileError::Io {
            what: shown(),
            source,
        })?;
    if bytes.len() > max {
        return Err(AgentFileError::TooLarge {
            name: name.to_owned(),
            max,
        });
    }
    Ok(Some(bytes))
}

fn file_type(stat: &FileStat) -> Option<SFlag> {
    let kind = SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits());
    [
        SFlag::S_IFREG,
        SFlag::S_IFDIR,
        SFlag::S_IFLNK,
        SFlag::S_IFIFO,
        SFlag::S_IFSOCK,
        SFlag::S_IFCHR,
        SFlag::S_IFBLK,
    ]
    .into_iter()
    .find(|k| *k == kind)
}

fn describe(stat: &FileStat) -> &'static str {
    match file_type(stat) {
        Some(SFlag::S_IFREG) => "a regular file",
        Some(SFlag::S_IFDIR) => "a directory",
        Some(SFlag::S_IFLNK) => "a symbolic link",
        Some(SFlag::S_IFIFO) => "a FIFO (named pipe)",
        Some(SFlag::S_IFSOCK) => "a socket",
        Some(SFlag::S_IFCHR) => "a character device",
        Some(SFlag::S_IFBLK) => "a block device",
        _ => "an unknown kind of file",
    }
}

#[cfg(test)]
mod tests;
