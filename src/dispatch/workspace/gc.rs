//! Workspace gc: run directories past the TTL that the caller does not keep, spares a previous process left,
//! refreshes' recorded diffs past the TTL, and every mirror's worktree list pruned.

use std::path::Path;

use super::{WorkspaceError, Workspaces};
use crate::tasks::{RepoName, RunId, TaskId};

/// What `gc` did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct GcReport {
    pub removed: usize,
    pub kept: usize,
    pub errors: usize,
}

impl Workspaces {
    /// Removes run directories that `keep` does not name and that are older than `ttl` (by their last change),
    /// with their worktrees; then prunes every mirror's worktree list.
    pub async fn gc(
        &self,
        ttl: std::time::Duration,
        keep: &(dyn Fn(TaskId, RunId) -> bool + Sync),
    ) -> Result<GcReport, WorkspaceError> {
        let mut report = GcReport::default();
        let runs = self.root.join("runs");
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| WorkspaceError::Io { path, source }
        };
        let mut tasks = tokio::fs::read_dir(&runs).await.map_err(io(&runs))?;
        while let Some(task_dir) = tasks.next_entry().await.map_err(io(&runs))? {
            let Ok(task) = task_dir.file_name().to_string_lossy().parse::<TaskId>() else {
                continue;
            };
            let mut attempts = tokio::fs::read_dir(task_dir.path())
                .await
                .map_err(io(&task_dir.path()))?;
            while let Some(run_dir) = attempts.next_entry().await.map_err(io(&task_dir.path()))? {
                let Ok(uuid) = run_dir.file_name().to_string_lossy().parse::<uuid::Uuid>() else {
                    continue;
                };
                let run = RunId(uuid);
                let age = run_dir
                    .metadata()
                    .await
                    .ok()
                    .and_then(|m| m.modified().ok())
                    .and_then(|t| t.elapsed().ok())
                    .unwrap_or_default();
                if keep(task, run) || age < ttl {
                    report.kept += 1;
                    continue;
                }
                match tokio::fs::remove_dir_all(run_dir.path()).await {
                    Ok(()) => report.removed += 1,
                    Err(error) => {
                        tracing::warn!(path = %run_dir.path().display(), %error, "gc could not remove a run");
                        report.errors += 1;
                    }
                }
            }
            // An emptied task directory goes too (ignored when it still holds runs).
            let _ = tokio::fs::remove_dir(task_dir.path()).await;
        }
        // Spares a previous process left (this one's are in memory): a cache, so simply removed.
        let spares = self.root.join("spares");
        if let Ok(mut owners) = tokio::fs::read_dir(&spares).await {
            while let Ok(Some(owner)) = owners.next_entry().await {
                let Ok(mut repos) = tokio::fs::read_dir(owner.path()).await else {
                    continue;
                };
                while let Ok(Some(repo)) = repos.next_entry().await {
                    let Ok(mut entries) = tokio::fs::read_dir(repo.path()).await else {
                        continue;
                    };
                    while let Ok(Some(spare)) = entries.next_entry().await {
                        // Young unknown spares may be mid-checkout by this process: left for a later pass.
                        let young = spare
                            .metadata()
                            .await
                            .ok()
                            .and_then(|m| m.modified().ok())
                            .and_then(|t| t.elapsed().ok())
                            .is_none_or(|age| age < std::time::Duration::from_secs(600));
                        if young || self.is_known_spare(&spare.path()) {
                            report.kept += 1;
                        } else if tokio::fs::remove_dir_all(spare.path()).await.is_ok() {
                            report.removed += 1;
                        } else {
                            report.errors += 1;
                        }
                    }
                }
            }
        }
        // What refreshes changed, recorded for the task page: gone after the same TTL as the runs' diffs.
        report.removed += self.gc_refresh_diffs(ttl).await;
        // CLI sessions kept with checkpoints (`dispatch::sessions`): gone after the same TTL as the runs.
        report.removed += remove_aged(&self.root.join("sessions"), ttl).await;
        let mirrors = self.root.join("mirrors");
        let mut owners = tokio::fs::read_dir(&mirrors).await.map_err(io(&mirrors))?;
        while let Some(owner) = owners.next_entry().await.map_err(io(&mirrors))? {
            let Ok(mut repos) = tokio::fs::read_dir(owner.path()).await else {
                continue;
            };
            while let Ok(Some(repo)) = repos.next_entry().await {
                if !repo.path().join("HEAD").exists() {
                    continue;
                }
                let Some(name) = RepoName::from_dirs(
                    &owner.file_name().to_string_lossy(),
                    repo.file_name().to_string_lossy().trim_end_matches(".git"),
                ) else {
                    continue;
                };
                let state = self.state(&name);
                let _guard = state.lock.lock().await;
                let git_dir = format!("--git-dir={}", repo.path().to_string_lossy());
                if self
                    .run_git(
                        "pruning worktrees",
                        None,
                        &[&git_dir, "worktree", "prune"],
                        None,
                    )
                    .await
                    .is_err()
                {
                    report.errors += 1;
                }
            }
        }
        Ok(report)
    }
}

/// Removes each `<dir>/<task>/<entry>` (a file or a directory) older than `ttl` by its last change, and each task
/// directory that leaves empty; how many entries it removed. Refreshes' recorded diffs and kept CLI sessions.
pub(super) async fn remove_aged(dir: &Path, ttl: std::time::Duration) -> usize {
    let mut removed = 0;
    let Ok(mut tasks) = tokio::fs::read_dir(dir).await else {
        return removed;
    };
    while let Ok(Some(task)) = tasks.next_entry().await {
        let Ok(mut entries) = tokio::fs::read_dir(task.path()).await else {
            continue;
        };
        while let Ok(Some(entry)) = entries.next_entry().await {
            let old = entry
                .metadata()
                .await
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age >= ttl);
            if old && super::remove_any(&entry.path()).await.is_ok() {
                removed += 1;
            }
        }
        // Ignored while it still holds entries.
        let _ = tokio::fs::remove_dir(task.path()).await;
    }
    removed
}
