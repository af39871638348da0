//! An attempt's diff, recorded next to its log when its work is committed: what changed from the base commit the
//! worktree started at to the commit pidevops made, both ids pidevops itself recorded (`Prepared::base_commit`,
//! `commit`'s `rev-parse`), computed by our own git on the mirror (clean environment, no repository discovered from
//! the worktree, no diff drivers or textconv, so nothing the agent wrote is run or read as configuration).
//!
//! `<run dir>/diff.json` holds the files with their added and removed lines; `<run dir>/diff.patch` the patch,
//! its first [`PATCH_CAP`] bytes only. git is stopped after [`DIFF_TIMEOUT`]: a giant diff costs a capped file and
//! a bounded wait, never the whole output in memory. The event log gets none of it (events stay small).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;

use super::{Prepared, WorkspaceError, Workspaces};
use crate::tasks::plan::guard::{Change, Entry, Links};

/// The files changed, in the run's directory.
pub const DIFF_FILE: &str = "diff.json";
/// The patch (cut at [`PATCH_CAP`]), in the run's directory.
pub const PATCH_FILE: &str = "diff.patch";
/// The most bytes of a patch kept.
pub const PATCH_CAP: usize = 512 * 1024;
/// The most bytes of git's file list read (about 5000 files).
const STAT_CAP: usize = 256 * 1024;
/// Most bytes of changed paths read for a scope check (about 40,000 paths of 100 bytes).
const PATHS_CAP: usize = 4 * 1024 * 1024;
/// The most symbolic links and gitlinks one attempt may add or change: each link's target is read for the scope
/// check, and more than this is refused rather than read.
pub const MAX_LINKS: usize = 1_000;
/// The longest link target read (Linux's PATH_MAX); a longer blob is no link git would make.
const LINK_TARGET_MAX: usize = 4_096;
/// The longest each git command may take.
pub const DIFF_TIMEOUT: Duration = Duration::from_secs(20);

/// What `diff.json` holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiffRecord {
    pub base: String,
    pub commit: String,
    pub files: Vec<FileStat>,
    /// More files changed than are listed.
    pub files_cut: bool,
    /// The patch's size in bytes, as far as git got; `diff.patch` holds the first [`PATCH_CAP`] of them.
    pub patch_bytes: u64,
    /// git was stopped at [`DIFF_TIMEOUT`]: the patch is larger than `patch_bytes`.
    pub patch_timed_out: bool,
}

impl DiffRecord {
    /// Whether `diff.patch` holds less than the whole patch.
    pub fn patch_cut(&self) -> bool {
        self.patch_timed_out || self.patch_bytes > PATCH_CAP as u64
    }
}

/// One changed file; `None` counts for a binary file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileStat {
    pub path: String,
    pub added: Option<u64>,
    pub removed: Option<u64>,
}

impl Workspaces {
    /// Computes the attempt's diff from `base_commit` to `commit` and writes `diff.json` and `diff.patch` into the
    /// run's directory (which the agent cannot write: its view has only the worktree, HOME and TMPDIR).
    pub async fn record_diff(
        &self,
        prepared: &Prepared,
        commit: &str,
    ) -> Result<DiffRecord, WorkspaceError> {
        let base = prepared.base_commit.as_str();
        for id in [base, commit] {
            if id.len() != 40 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(WorkspaceError::Git {
                    what: "diffing the attempt".to_owned(),
                    detail: format!("{id:?} is not a commit id"),
                });
            }
        }
        let git_dir = format!("--git-dir={}", prepared.dirs.mirror.to_string_lossy());
        let diff = |format: &'static str| {
            [
                git_dir.clone(),
                "diff".into(),
                "--no-ext-diff".into(),
                "--no-textconv".into(),
                "--no-color".into(),
                "--no-renames".into(),
                format.into(),
                base.into(),
                commit.into(),
                "--".into(),
            ]
        };
        let mut stat_args = diff("--numstat").to_vec();
        stat_args.insert(stat_args.len() - 3, "-z".into());
        let stat = self.capped_git(&stat_args, STAT_CAP).await?;
        let (files, files_cut) =
            parse_numstat(&stat.kept, stat.total > STAT_CAP as u64 || stat.timed_out);
        let patch = self.capped_git(&diff("--patch"), PATCH_CAP).await?;
        let record = DiffRecord {
            base: base.to_owned(),
            commit: commit.to_owned(),
            files,
            files_cut,
            patch_bytes: patch.total,
            patch_timed_out: patch.timed_out,
        };
        let dir = &prepared.dirs.dir;
        write(&dir.join(PATCH_FILE), &patch.kept).await?;
        let json = serde_json::to_vec(&record).map_err(|e| WorkspaceError::Git {
            what: "recording the attempt's diff".to_owned(),
            detail: e.to_string(),
        })?;
        write(&dir.join(DIFF_FILE), &json).await?;
        Ok(record)
    }

    /// Every path the attempt changed from `base_commit` to `commit` (added, modified, deleted; a rename as both
    /// its paths), by our git on the mirror: what its scope is checked against. Unlike the recorded diff this is
    /// never cut: a list too long (or a git too slow) to read whole is an error, so no file escapes the check.
    pub async fn changed_paths(
        &self,
        prepared: &Prepared,
        commit: &str,
    ) -> Result<Vec<String>, WorkspaceError> {
        let base = prepared.base_commit.as_str();
        for id in [base, commit] {
            if id.len() != 40 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(WorkspaceError::Git {
                    what: "listing the attempt's changes".to_owned(),
                    detail: format!("{id:?} is not a commit id"),
                });
            }
        }
        let args: Vec<String> = [
            &format!("--git-dir={}", prepared.dirs.mirror.to_string_lossy()),
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--no-renames",
            "--name-only",
            "-z",
            base,
            commit,
            "--",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let listed = self.capped_git(&args, PATHS_CAP).await?;
        if listed.timed_out || listed.total > PATHS_CAP as u64 {
            return Err(WorkspaceError::Git {
                what: "listing the attempt's changes".to_owned(),
                detail: format!(
                    "the list of changed files is over {PATHS_CAP} bytes or took over {} s; its scope cannot be checked",
                    DIFF_TIMEOUT.as_secs()
                ),
            });
        }
        Ok(listed
            .kept
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect())
    }

    /// Every path the attempt changed from `base_commit` to `commit`, with what it is in `commit` by its git mode:
    /// a file (or gone), a symbolic link with its target read from its blob, or a gitlink; and the commit's links
    /// that following the changed links to their ends meets (`links.rs`). Read from git's objects by our git on
    /// the mirror, never from the worktree; like [`Workspaces::changed_paths`] never cut (too long a list, or more
    /// than [`MAX_LINKS`] links, is an error, so nothing escapes the check).
    pub async fn changes(
        &self,
        prepared: &Prepared,
        commit: &str,
    ) -> Result<(Vec<Change>, Links), WorkspaceError> {
        let failed = |detail: String| WorkspaceError::Git {
            what: "listing the attempt's changes".to_owned(),
            detail,
        };
        let base = prepared.base_commit.as_str();
        for id in [base, commit] {
            if !is_object_id(id) {
                return Err(failed(format!("{id:?} is not a commit id")));
            }
        }
        let git_dir = format!("--git-dir={}", prepared.dirs.mirror.to_string_lossy());
        let args: Vec<String> = [
            git_dir.as_str(),
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--no-renames",
            "--raw",
            "--no-abbrev",
            "-z",
            base,
            commit,
            "--",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let listed = self.capped_git(&args, PATHS_CAP).await?;
        if listed.timed_out || listed.total > PATHS_CAP as u64 {
            return Err(failed(format!(
                "the list of changed files is over {PATHS_CAP} bytes or took over {} s; its scope cannot be checked",
                DIFF_TIMEOUT.as_secs()
            )));
        }
        let raw = parse_raw(&listed.kept).map_err(failed)?;
        let links: Vec<&str> = raw
            .iter()
            .filter(|r| r.mode == LINK_MODE)
            .map(|r| r.object.as_str())
            .collect();
        if links.len() > MAX_LINKS {
            return Err(failed(format!(
                "the attempt adds or changes {} symbolic links; at most {MAX_LINKS} are checked",
                links.len()
            )));
        }
        let mut targets = self.link_targets(&git_dir, &links).await?.into_iter();
        let changes: Vec<Change> = raw
            .into_iter()
            .map(|r| {
                let entry = match r.mode.as_str() {
                    LINK_MODE => Entry::Symlink(targets.next().flatten()),
                    GITLINK_MODE => Entry::Gitlink,
                    _ => Entry::File,
                };
                Change {
                    path: r.path,
                    entry,
                }
            })
            .collect();
        let links = self.links_met(&git_dir, commit, &changes).await?;
        Ok((changes, links))
    }

    /// The targets of these link blobs, in order, each `None` when it is not UTF-8 or too long to be a target: one
    /// `git cat-file --batch` for all of them.
    pub(super) async fn link_targets(
        &self,
        git_dir: &str,
        objects: &[&str],
    ) -> Result<Vec<Option<String>>, WorkspaceError> {
        if objects.is_empty() {
            return Ok(Vec::new());
        }
        let failed = |detail: String| WorkspaceError::Git {
            what: "reading the attempt's symbolic links".to_owned(),
            detail,
        };
        let mut command = self.git(None);
        command
            .args([git_dir, "cat-file", "--batch"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = command
            .spawn()
            .map_err(|e| failed(format!("cannot run git: {e}")))?;
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| failed("git's input is not piped".to_owned()))?;
        let mut stdout = child
            .stdout
            .take()
            .ok_or_else(|| failed("git's output is not piped".to_owned()))?;
        let request: String = objects.iter().map(|o| format!("{o}\n")).collect();
        let write = async move {
            use tokio::io::AsyncWriteExt;
            stdin.write_all(request.as_bytes()).await?;
            stdin.shutdown().await
        };
        // Each answer is a header line, the blob and a newline; a blob is read whole only up to the cap below.
        let cap = objects.len() * (LINK_TARGET_MAX + 128);
        let read = async {
            let mut kept = Vec::new();
            (&mut stdout)
                .take(cap as u64 + 1)
                .read_to_end(&mut kept)
                .await?;
            Ok::<_, std::io::Error>(kept)
        };
        let both = async { tokio::try_join!(write, read) };
        let (_, output) = match tokio::time::timeout(DIFF_TIMEOUT, both).await {
            Ok(done) => done.map_err(|e| failed(format!("talking to git: {e}")))?,
            Err(_) => {
                let _ = child.start_kill();
                return Err(failed(format!(
                    "git took over {} s",
                    DIFF_TIMEOUT.as_secs()
                )));
            }
        };
        let _ = child.wait().await;
        if output.len() > cap {
            return Err(failed("a link's blob is larger than any target".to_owned()));
        }
        parse_batch(&output, objects.len()).map_err(failed)
    }

    /// Runs our git and keeps the first `cap` bytes of what it prints, counting the rest, for at most
    /// [`DIFF_TIMEOUT`]; a git that fails is an error.
    async fn capped_git(&self, args: &[String], cap: usize) -> Result<Capped, WorkspaceError> {
        let mut command = self.git(None);
        command.args(args);
        let capped = self.capped(command, cap, DIFF_TIMEOUT).await?;
        match capped.status {
            Some(status) if !status.success() => Err(WorkspaceError::Git {
                what: "diffing the attempt".to_owned(),
                detail: format!("git diff exited with {status}"),
            }),
            _ => Ok(capped),
        }
    }

    /// Runs `command` (our git, its arguments given) and keeps the first `cap` bytes of what it prints, counting
    /// the rest, for at most `timeout` (then it is killed: `timed_out`, no status). Its exit status is the
    /// caller's to judge.
    pub(super) async fn capped(
        &self,
        mut command: tokio::process::Command,
        cap: usize,
        timeout: Duration,
    ) -> Result<Capped, WorkspaceError> {
        let failed = |detail: String| WorkspaceError::Git {
            what: "diffing the attempt".to_owned(),
            detail,
        };
        command.stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = command
            .spawn()
            .map_err(|e| failed(format!("cannot run git: {e}")))?;
        let mut stdout = child
            .stdout
            .take()
            .ok_or_else(|| failed("git's output is not piped".to_owned()))?;
        let mut kept = Vec::new();
        let mut total = 0u64;
        let read = async {
            let mut buffer = vec![0u8; 64 * 1024];
            loop {
                let n = stdout.read(&mut buffer).await?;
                if n == 0 {
                    return Ok::<_, std::io::Error>(());
                }
                total += n as u64;
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buffer[..n.min(room)]);
            }
        };
        let timed_out = match tokio::time::timeout(timeout, read).await {
            Ok(read) => {
                read.map_err(|e| failed(format!("reading git's output: {e}")))?;
                false
            }
            Err(_) => {
                let _ = child.start_kill();
                true
            }
        };
        let status = child
            .wait()
            .await
            .map_err(|e| failed(format!("waiting for git: {e}")))?;
        Ok(Capped {
            kept,
            total,
            timed_out,
            status: (!timed_out).then_some(status),
        })
    }
}

pub(super) struct Capped {
    pub(super) kept: Vec<u8>,
    pub(super) total: u64,
    pub(super) timed_out: bool,
    /// How git exited; none when it was stopped at the time limit.
    pub(super) status: Option<std::process::ExitStatus>,
}

async fn write(path: &Path, bytes: &[u8]) -> Result<(), WorkspaceError> {
    tokio::fs::write(path, bytes)
        .await
        .map_err(|source| WorkspaceError::Io {
            path: path.to_owned(),
            source,
        })
}

/// `git diff --numstat -z` (no renames): `added TAB removed TAB path NUL` per file, `-` counts for binary files.
/// A record cut by the cap is left out, and `cut` says the list is incomplete.
pub fn parse_numstat(bytes: &[u8], cut: bool) -> (Vec<FileStat>, bool) {
    let mut records: Vec<&[u8]> = bytes.split(|b| *b == 0).collect();
    // The piece after the last NUL is empty when the output is whole, a cut record otherwise.
    let partial = records.pop().is_some_and(|last| !last.is_empty());
    let files = records
        .into_iter()
        .filter_map(|record| {
            let text = String::from_utf8_lossy(record);
            let mut fields = text.splitn(3, '\t');
            let (added, removed, path) = (fields.next()?, fields.next()?, fields.next()?);
            Some(FileStat {
                path: path.to_owned(),
                added: added.parse().ok(),
                removed: removed.parse().ok(),
            })
        })
        .collect();
    (files, cut || partial)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numstat_gives_each_file_its_counts_and_a_cut_list_says_so() {
        let (files, cut) = parse_numstat(b"3\t1\tsrc/a b.rs\0-\t-\tlogo.png\0", false);
        assert!(!cut);
        assert_eq!(
            files,
            vec![
                FileStat {
                    path: "src/a b.rs".into(),
                    added: Some(3),
                    removed: Some(1)
                },
                FileStat {
                    path: "logo.png".into(),
                    added: None,
                    removed: None
                },
            ]
        );
        let (files, cut) = parse_numstat(b"3\t1\tsrc/a.rs\x002\t0\tsrc/b", true);
        assert_eq!((files.len(), cut), (1, true));
        assert_eq!(parse_numstat(b"", false), (vec![], false));
    }
}

/// git's mode of a symbolic link and of a gitlink (a submodule's commit).
pub(super) const LINK_MODE: &str = "120000";
const GITLINK_MODE: &str = "160000";

fn is_object_id(id: &str) -> bool {
    id.len() == 40 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// One record of `git diff --raw -z`: the path, its mode and object in the new commit.
#[derive(Debug, PartialEq, Eq)]
struct RawChange {
    path: String,
    mode: String,
    object: String,
}

/// `git diff --raw -z --no-renames --no-abbrev`: `:old_mode new_mode old_sha new_sha status NUL path NUL` per path.
fn parse_raw(bytes: &[u8]) -> Result<Vec<RawChange>, String> {
    let mut fields = bytes.split(|b| *b == 0);
    let mut changes = Vec::new();
    while let Some(meta) = fields.next() {
        if meta.is_empty() {
            continue;
        }
        let meta = String::from_utf8_lossy(meta);
        let parts: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
        let [_, new_mode, _, new_object, _] = parts.as_slice() else {
            return Err(format!("git diff --raw printed {meta:?}"));
        };
        let path = fields
            .next()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| format!("git diff --raw printed {meta:?} without a path"))?;
        changes.push(RawChange {
            path: String::from_utf8_lossy(path).into_owned(),
            mode: (*new_mode).to_owned(),
            object: (*new_object).to_owned(),
        });
    }
    Ok(changes)
}

/// `git cat-file --batch` answers: `<sha> blob <size> LF <contents> LF` each (or `<name> missing LF`).
fn parse_batch(mut bytes: &[u8], expected: usize) -> Result<Vec<Option<String>>, String> {
    let mut targets = Vec::with_capacity(expected);
    while targets.len() < expected {
        let end = bytes
            .iter()
            .position(|b| *b == b'\n')
            .ok_or("git cat-file's answer was cut")?;
        let header = String::from_utf8_lossy(&bytes[..end]).into_owned();
        bytes = &bytes[end + 1..];
        let size: usize = match header.split(' ').collect::<Vec<_>>().as_slice() {
            [_, "blob", size] => size
                .parse()
                .map_err(|_| format!("git cat-file printed {header:?}"))?,
            _ => {
                return Err(format!(
                    "a symbolic link's object is not a blob: {header:?}"
                ))
            }
        };
        if bytes.len() < size + 1 {
            return Err("git cat-file's answer was cut".to_owned());
        }
        let blob = &bytes[..size];
        bytes = &bytes[size + 1..];
        targets.push(
            (size <= LINK_TARGET_MAX)
                .then(|| std::str::from_utf8(blob).ok().map(str::to_owned))
                .flatten(),
        );
    }
    Ok(targets)
}

#[cfg(test)]
mod raw_tests {
    use super::*;

    #[test]
    fn raw_records_give_each_paths_new_mode_and_object() {
        let sha = |c: char| c.to_string().repeat(40);
        let raw = format!(
            ":000000 120000 {z} {a} A\0docs/l\0:100644 100644 {b} {c} M\0src/a b.rs\0:000000 160000 {z} {d} A\0vendor/lib\0:100644 000000 {b} {z} D\0gone\0",
            z = sha('0'),
            a = sha('a'),
            b = sha('b'),
            c = sha('c'),
            d = sha('d'),
        );
        let parsed = parse_raw(raw.as_bytes()).unwrap();
        let summary: Vec<(&str, &str)> = parsed
            .iter()
            .map(|r| (r.path.as_str(), r.mode.as_str()))
            .collect();
        assert_eq!(
            summary,
            [
                ("docs/l", "120000"),
                ("src/a b.rs", "100644"),
                ("vendor/lib", "160000"),
                ("gone", "000000")
            ]
        );
        assert_eq!(parsed[0].object, sha('a'));
        assert!(parse_raw(b":100644 100644 x\0").is_err());
        assert!(parse_raw(format!(":000000 120000 {z} {z} A\0", z = sha('0')).as_bytes()).is_err());
    }

    #[test]
    fn batch_answers_give_each_target_or_none() {
        let answer = b"aaaa blob 7\n../x/y\n\nbbbb blob 2\n\xff\xfe\n";
        assert_eq!(
            parse_batch(answer, 2).unwrap(),
            [Some("../x/y\n".to_owned()), None]
        );
        assert!(parse_batch(b"aaaa missing\n", 1).is_err());
        assert!(parse_batch(b"aaaa blob 9\nab\n", 1).is_err());
    }
}
