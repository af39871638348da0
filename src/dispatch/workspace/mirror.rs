//! The bare mirror of each repository: cloned once, fetched before runs (one fetch serves the runs that asked
//! before it started), the base branch's commit, and the push of an attempt's commit from it.

use std::path::PathBuf;
use std::time::Instant;

use super::{Prepared, RepoState, WorkspaceError, Workspaces};
use crate::config::dispatch::RepoSource;
use crate::tasks::RepoName;

impl Workspaces {
    /// Fetches unless a fetch that started after `asked` already succeeded. Called under the repository's lock.
    pub(super) async fn fetch_since(
        &self,
        state: &RepoState,
        repo: &RepoName,
        source: &RepoSource,
        asked: Instant,
    ) -> Result<PathBuf, WorkspaceError> {
        let fresh = state
            .last_fetch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|at| at >= asked);
        if fresh {
            return Ok(self.mirror_path(repo));
        }
        let started = Instant::now();
        let mirror = self.refresh_mirror(repo, source).await?;
        *state.last_fetch.lock().unwrap_or_else(|p| p.into_inner()) = Some(started);
        Ok(mirror)
    }

    pub(super) async fn base_commit(
        &self,
        git_dir: &str,
        source: &RepoSource,
    ) -> Result<String, WorkspaceError> {
        let base_ref = format!("refs/remotes/origin/{}^{{commit}}", source.base);
        self.run_git(
            "finding the base branch",
            None,
            &[git_dir, "rev-parse", "--verify", "--quiet", &base_ref],
            None,
        )
        .await
        .map_err(|_| WorkspaceError::Git {
            what: "finding the base branch".to_owned(),
            detail: format!("{} has no branch {:?}", source.url, source.base),
        })
    }

    /// Clones the mirror if it is missing, then fetches: the worktree starts from the remote's newest base.
    pub async fn refresh_mirror(
        &self,
        repo: &RepoName,
        source: &RepoSource,
    ) -> Result<PathBuf, WorkspaceError> {
        self.check_token(repo, source)?;
        let mirror = self.mirror_path(repo);
        if !mirror.join("HEAD").exists() {
            let parent = mirror.parent().unwrap_or(&self.root);
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|source| WorkspaceError::Io {
                    path: parent.to_owned(),
                    source,
                })?;
            // Cloned next to its place and renamed, so a crash mid-clone never leaves a half mirror that looks whole.
            let partial = parent.join(format!(".{}.partial-{}", repo.name(), uuid::Uuid::now_v7()));
            let partial_str = partial.to_string_lossy().into_owned();
            self.run_git(
                &format!("cloning {}", repo.as_str()),
                Some(source),
                &[
                    "clone",
                    "--bare",
                    "--quiet",
                    "--",
                    &source.url,
                    &partial_str,
                ],
                None,
            )
            .await?;
            let git_dir = format!("--git-dir={partial_str}");
            self.run_git(
                "configuring the mirror",
                None,
                &[
                    &git_dir,
                    "config",
                    "remote.origin.fetch",
                    "+refs/heads/*:refs/remotes/origin/*",
                ],
                None,
            )
            .await?;
            if let Err(source) = tokio::fs::rename(&partial, &mirror).await {
                let _ = tokio::fs::remove_dir_all(&partial).await;
                if !mirror.join("HEAD").exists() {
                    return Err(WorkspaceError::Io {
                        path: mirror,
                        source,
                    });
                }
            }
        }
        let git_dir = format!("--git-dir={}", mirror.to_string_lossy());
        self.run_git(
            &format!("fetching {}", repo.as_str()),
            Some(source),
            &[
                &git_dir,
                "fetch",
                "--quiet",
                "--prune",
                "--",
                &source.url,
                "+refs/heads/*:refs/remotes/origin/*",
            ],
            None,
        )
        .await?;
        Ok(mirror)
    }

    /// Pushes `commit` as the attempt's branch, from the mirror, to the configured URL. Forced: each attempt
    /// starts again from the base, so it replaces the last.
    pub async fn push(&self, prepared: &Prepared, commit: &str) -> Result<(), WorkspaceError> {
        self.push_commit(
            &prepared.repo,
            &prepared.source,
            &prepared.dirs.mirror,
            &prepared.branch,
            commit,
        )
        .await
    }
}
