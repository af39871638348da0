//! What a refresh changed on its pull request's own diff (issue 33, for the task page): the commit it made (`to`)
//! against the plain merge of what pidevops had pushed (`from`) with the base it was brought onto (`base`), as
//! `git merge-tree --write-tree` makes that merge (a conflicted file keeps git's markers). A clean rebase or merge
//! normally changes nothing there; a conflict's resolution shows the markers replaced by what the agent kept.
//!
//! Recorded when the commit is made, where all three commits are at hand (the refresh's clean room, or the mirror
//! for a conflict attempt's resolution), as `<root>/refresh-diffs/<task>/<commit>.json`, read back by the task
//! page: a clean room is gone afterwards, and a page never runs git. Bounded: git is stopped after
//! [`REMERGE_TIMEOUT`] and the patch kept to [`REMERGE_CAP`] bytes, the rest counted. The merge's objects are
//! written to a scratch object directory of their own (the repository's objects borrowed as an alternate), so
//! nothing is added to a mirror. The patch is repository content: shown only as inert text.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{WorkspaceError, Workspaces};
use crate::tasks::TaskId;

/// The most bytes of a refresh's patch kept.
pub const REMERGE_CAP: usize = 32 * 1024;
/// The longest each git command may take (two of them, inside the refresh's own time limit).
const REMERGE_TIMEOUT: Duration = Duration::from_secs(5);
/// The most bytes of a record read back (the patch, escaped as JSON, and its few fields).
const RECORD_CAP: u64 = (REMERGE_CAP as u64) * 6 + 4096;

/// What `<commit>.json` holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemergeDiff {
    pub base: String,
    pub from: String,
    pub to: String,
    /// The patch's first [`REMERGE_CAP`] bytes (invalid UTF-8 replaced).
    pub patch: String,
    /// The patch's size in bytes, as far as git got.
    pub bytes: u64,
    /// git was stopped at the time limit: the patch is larger than `bytes`.
    pub timed_out: bool,
}

impl RemergeDiff {
    /// Whether `patch` holds less than the whole patch.
    pub fn cut(&self) -> bool {
        self.timed_out || self.bytes > REMERGE_CAP as u64
    }
}

fn is_object_id(id: &str) -> bool {
    id.len() == 40 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Where the refresh diff of task `task`'s commit `commit` is recorded under the workspace root `root`; none for a
/// commit id that is not one.
pub fn remerge_path(root: &Path, task: TaskId, commit: &str) -> Option<PathBuf> {
    is_object_id(commit).then(|| {
        root.join("refresh-diffs")
            .join(task.to_string())
            .join(format!("{}.json", commit.to_ascii_lowercase()))
    })
}

/// The recorded refresh diff of task `task`'s commit `commit` under the workspace root `root`, if this machine has
/// one (read capped; the task page's, which needs no `Workspaces`).
pub async fn read_remerge(root: &Path, task: TaskId, commit: &str) -> Option<RemergeDiff> {
    use tokio::io::AsyncReadExt;
    let path = remerge_path(root, task, commit)?;
    let mut json = Vec::new();
    tokio::fs::File::open(path)
        .await
        .ok()?
        .take(RECORD_CAP)
        .read_to_end(&mut json)
        .await
        .ok()?;
    serde_json::from_slice(&json).ok()
}

impl Workspaces {
    /// [`remerge_path`] under this root.
    pub fn remerge_path(&self, task: TaskId, commit: &str) -> Option<PathBuf> {
        remerge_path(&self.root, task, commit)
    }

    /// Computes what `to` changed against the plain merge of `from` and `base`, by our git on `git_dir` (a bare
    /// repository holding the three), and records it for task `task`'s page.
    pub async fn record_remerge(
        &self,
        git_dir: &Path,
        task: TaskId,
        base: &str,
        from: &str,
        to: &str,
    ) -> Result<RemergeDiff, WorkspaceError> {
        let failed = |detail: String| WorkspaceError::Git {
            what: "recording the refresh's diff".to_owned(),
            detail,
        };
        let path = self
            .remerge_path(task, to)
            .filter(|_| is_object_id(base) && is_object_id(from))
            .ok_or_else(|| failed(format!("{base:?}, {from:?} or {to:?} is not a commit id")))?;
        let scratch = Scratch::new(&self.root.join(".home"))?;
        let objects = git_dir.join("objects");
        let git = |args: &[&str]| {
            let mut command = self.git(None);
            command
                .env("GIT_OBJECT_DIRECTORY", &scratch.0)
                .env("GIT_ALTERNATE_OBJECT_DIRECTORIES", &objects)
                .arg(format!("--git-dir={}", git_dir.to_string_lossy()))
                .args(args);
            command
        };
        // 0: merged cleanly, 1: conflicts (the tree keeps their markers); both print the tree first.
        let merged = self
            .capped(
                git(&["merge-tree", "--write-tree", "--no-messages", base, from]),
                4096,
                REMERGE_TIMEOUT,
            )
            .await?;
        let tree = String::from_utf8_lossy(&merged.kept)
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned();
        if !matches!(merged.status.and_then(|s| s.code()), Some(0 | 1)) || !is_object_id(&tree) {
            return Err(failed(format!(
                "git merge-tree did not merge {from} with {base}"
            )));
        }
        let patch = self
            .capped(
                git(&[
                    "diff",
                    "--no-ext-diff",
                    "--no-textconv",
                    "--no-color",
                    "--no-renames",
                    "--patch",
                    &tree,
                    to,
                    "--",
                ]),
                REMERGE_CAP,
                REMERGE_TIMEOUT,
            )
            .await?;
        if patch.status.is_some_and(|s| !s.success()) {
            return Err(failed(format!("git diff of {to} failed")));
        }
        let record = RemergeDiff {
            base: base.to_owned(),
            from: from.to_owned(),
            to: to.to_owned(),
            patch: String::from_utf8_lossy(&patch.kept).into_owned(),
            bytes: patch.total,
            timed_out: patch.timed_out,
        };
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| WorkspaceError::Io { path, source }
        };
        if let Some(dir) = path.parent() {
            tokio::fs::create_dir_all(dir).await.map_err(io(dir))?;
        }
        let json = serde_json::to_vec(&record).map_err(|e| failed(e.to_string()))?;
        tokio::fs::write(&path, json).await.map_err(io(&path))?;
        Ok(record)
    }
}

impl Workspaces {
    /// Removes recorded refresh diffs older than `ttl` (by their last change), as run directories go after it,
    /// and the task directories that leaves empty; returns how many it removed.
    pub(super) async fn gc_refresh_diffs(&self, ttl: Duration) -> usize {
        super::gc::remove_aged(&self.root.join("refresh-diffs"), ttl).await
    }
}

/// A scratch object directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(parent: &Path) -> Result<Self, WorkspaceError> {
        let dir = parent.join(format!("remerge-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).map_err(|source| WorkspaceError::Io {
            path: dir.clone(),
            source,
        })?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn records_go_after_the_ttl_with_their_emptied_task_directory() {
        let root = tempfile::tempdir().unwrap();
        let workspaces =
            Workspaces::new(root.path(), super::super::GitCredentials::default()).unwrap();
        let task: TaskId = "T-3".parse().unwrap();
        assert!(workspaces.remerge_path(task, "not-a-commit").is_none());
        let path = workspaces.remerge_path(task, &"A".repeat(40)).unwrap();
        assert!(path.ends_with(format!("refresh-diffs/T-3/{}.json", "a".repeat(40))));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "{}").unwrap();
        assert_eq!(
            workspaces.gc_refresh_diffs(Duration::from_secs(3600)).await,
            0
        );
        assert!(path.exists());
        assert_eq!(workspaces.gc_refresh_diffs(Duration::ZERO).await, 1);
        assert!(!path.exists() && !path.parent().unwrap().exists());
    }
}
