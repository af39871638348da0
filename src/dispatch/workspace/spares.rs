//! Spare worktrees: checked out ahead at the newest base for the next runs, and finished runs' worktrees reset
//! to the base and moved to a new directory for reuse, touching only the files a run changed.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::{remove_any, Prepared, RepoState, Spare, WorkspaceError, Workspaces};
use crate::config::dispatch::RepoSource;
use crate::tasks::RepoName;

/// A spare may be made from a fetch this recent: spares are for runs that start later, and each run fetches
/// again and uses a spare only at the base it found. The dispatcher asks for spares on every tick; without this,
/// each ask was a fetch under the repository's lock, in the way of the runs starting.
const SPARE_FETCH_FRESHNESS: std::time::Duration = std::time::Duration::from_secs(2);

/// How long a starting run waits for the spare being made (or a finished worktree being handed back) before it
/// checks out its own. Waiting is the faster path: that checkout started earlier, and a second one at the same
/// time only halves the disk for both.
const WAIT_FOR_SPARE: std::time::Duration = std::time::Duration::from_secs(60);

impl Workspaces {
    /// Keeps `wanted` spare worktrees of `repo` checked out at the newest base, so the next runs start without
    /// waiting for a checkout (on a large repository, most of a run's start-up). One replenisher per repository
    /// at a time; spares at an older base are removed.
    pub async fn replenish(
        &self,
        repo: &RepoName,
        source: &RepoSource,
        wanted: usize,
    ) -> Result<usize, WorkspaceError> {
        use std::sync::atomic::Ordering;
        let state = self.state(repo);
        let have = state.spares.lock().unwrap_or_else(|p| p.into_inner()).len();
        if have >= wanted {
            // Spares at an old base are dropped by the run that finds them so (it has just fetched).
            return Ok(0);
        }
        if state.replenishing.swap(true, Ordering::SeqCst) {
            return Ok(0);
        }
        let result = self.replenish_now(&state, repo, source, wanted).await;
        state.replenishing.store(false, Ordering::SeqCst);
        state.changed.notify_waiters();
        result
    }

    async fn replenish_now(
        &self,
        state: &RepoState,
        repo: &RepoName,
        source: &RepoSource,
        wanted: usize,
    ) -> Result<usize, WorkspaceError> {
        let asked = Instant::now()
            .checked_sub(SPARE_FETCH_FRESHNESS)
            .unwrap_or_else(Instant::now);
        let mirror = {
            let _guard = state.lock.lock().await;
            self.fetch_since(state, repo, source, asked).await?
        };
        let git_dir = format!("--git-dir={}", mirror.to_string_lossy());
        let base = self.base_commit(&git_dir, source).await?;
        let stale: Vec<Spare> = {
            let mut spares = state.spares.lock().unwrap_or_else(|p| p.into_inner());
            let (keep, stale) = spares.drain(..).partition(|s| s.commit == base);
            *spares = keep;
            stale
        };
        for spare in stale {
            let path = spare.path.to_string_lossy().into_owned();
            let _guard = state.lock.lock().await;
            let _ = self
                .run_git(
                    "removing a stale spare worktree",
                    None,
                    &[&git_dir, "worktree", "remove", "--force", &path],
                    None,
                )
                .await;
        }
        let mut made = 0;
        loop {
            let have = state.spares.lock().unwrap_or_else(|p| p.into_inner()).len();
            if have >= wanted {
                return Ok(made);
            }
            let recyclable = state
                .finished
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop();
            if let Some((worktree, admin)) = recyclable {
                match self.recycle(state, repo, &worktree, &admin, &base).await {
                    Ok(spare) => {
                        state
                            .spares
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(spare);
                        state.changed.notify_waiters();
                        metrics::counter!("pidevops_worktrees_recycled_total").increment(1);
                        made += 1;
                    }
                    Err(error) => {
                        tracing::warn!(%error, worktree = %worktree.display(), "a finished worktree could not be reused");
                    }
                }
                continue;
            }
            let path = self.new_spare_path(repo);
            let admin = self
                .add_worktree(state, &git_dir, "--detach", None, &path, &base)
                .await?;
            state
                .spares
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Spare {
                    path,
                    commit: base.clone(),
                    admin,
                });
            state.changed.notify_waiters();
            made += 1;
        }
    }

    /// A worktree at `base` for a starting run without a checkout of every file: a spare at this very base, else a
    /// finished run's worktree reset to it. While a replenisher is at work, waits (up to [`WAIT_FOR_SPARE`]) for
    /// what it makes or for a run handing its worktree back. `None`: check one out.
    pub(super) async fn take_worktree(
        &self,
        state: &RepoState,
        git_dir: &str,
        repo: &RepoName,
        base: &str,
    ) -> Option<Spare> {
        let deadline = tokio::time::Instant::now() + WAIT_FOR_SPARE;
        loop {
            // Registered before looking, so a spare made between the look and the wait still wakes us.
            let changed = state.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            // Spares at an older base are stale now that the base moved: they go, and `replenish` makes new ones.
            let (spare, stale) = {
                let mut spares = state.spares.lock().unwrap_or_else(|p| p.into_inner());
                let (current, stale): (Vec<Spare>, Vec<Spare>) =
                    spares.drain(..).partition(|s| s.commit == base);
                *spares = current;
                (spares.pop(), stale)
            };
            for old in stale {
                let path = old.path.to_string_lossy().into_owned();
                let _guard = state.lock.lock().await;
                let _ = self
                    .run_git(
                        "removing a stale spare worktree",
                        None,
                        &[git_dir, "worktree", "remove", "--force", &path],
                        None,
                    )
                    .await;
            }
            if spare.is_some() {
                return spare;
            }
            let finished = state
                .finished
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop();
            if let Some((old, admin)) = finished {
                match self.recycle(state, repo, &old, &admin, base).await {
                    Ok(spare) => {
                        metrics::counter!("pidevops_worktrees_recycled_total").increment(1);
                        return Some(spare);
                    }
                    Err(error) => {
                        tracing::warn!(%error, worktree = %old.display(), "a finished worktree could not be reused");
                        continue;
                    }
                }
            }
            let replenishing = state.replenishing.load(std::sync::atomic::Ordering::SeqCst);
            if !replenishing || tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::select! {
                () = &mut changed => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Spare worktrees ready now, over every repository (`pidevops_worktree_spares`).
    pub fn spares_ready(&self) -> usize {
        let repos = self.repos.lock().unwrap_or_else(|p| p.into_inner());
        repos
            .values()
            .map(|state| state.spares.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }

    /// Offers a finished run's worktree for reuse (see `RepoState::finished`).
    pub fn finished(&self, prepared: &Prepared) {
        let state = self.state(&prepared.repo);
        state
            .finished
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((prepared.dirs.worktree.clone(), prepared.admin.clone()));
        state.changed.notify_waiters();
    }

    /// A finished worktree reset to `base` exactly as a fresh checkout would be (the agent's `.git` replaced by
    /// pidevops's own link, tracked files forced back, everything untracked and ignored removed, HEAD detached so
    /// the run's branch is free) and moved to the spares as a new directory: a process the run left (there should
    /// be none) holding the old directory sees an empty one, never the next task's.
    async fn recycle(
        &self,
        state: &RepoState,
        repo: &RepoName,
        worktree: &Path,
        admin: &Path,
        base: &str,
    ) -> Result<Spare, WorkspaceError> {
        link_to_admin(worktree, admin).await?;
        self.in_worktree(
            "resetting a finished worktree",
            admin,
            worktree,
            &["checkout", "--quiet", "--force", "--detach", base],
        )
        .await?;
        self.in_worktree(
            "cleaning a finished worktree",
            admin,
            worktree,
            &["clean", "-ffdxq"],
        )
        .await?;
        let status = self
            .in_worktree(
                "checking a finished worktree",
                admin,
                worktree,
                &["status", "--porcelain", "--ignored"],
            )
            .await?;
        if !status.is_empty() {
            return Err(WorkspaceError::Git {
                what: "resetting a finished worktree".to_owned(),
                detail: format!("still differs from the base: {status}"),
            });
        }
        let path = self.new_spare_path(repo);
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|source| WorkspaceError::Io {
                    path: parent.to_owned(),
                    source,
                })?;
        }
        move_into_new_directory(worktree, &path).await?;
        link_to_admin(&path, admin).await?;
        {
            // What `git worktree repair` would write (it reports a repair with a failing status): the way back
            // from the administrative directory to the worktree, in a file only pidevops writes.
            let _guard = state.lock.lock().await;
            let back = admin.join("gitdir");
            tokio::fs::write(&back, format!("{}\n", path.join(".git").display()))
                .await
                .map_err(|source| WorkspaceError::Io { path: back, source })?;
        }
        Ok(Spare {
            path,
            commit: base.to_owned(),
            admin: admin.to_owned(),
        })
    }

    /// Where a new spare worktree of `repo` goes: `<root>/spares/<namespace>/<name>/<uuid>`, three levels as gc
    /// walks them whatever the namespace's depth (`group+sub`): `spares/group/sub/name` would be read as a spare.
    pub(super) fn new_spare_path(&self, repo: &RepoName) -> PathBuf {
        self.root
            .join("spares")
            .join(repo.namespace_dir())
            .join(repo.name())
            .join(uuid::Uuid::now_v7().to_string())
    }

    /// Whether `path` is a spare this process knows (gc removes the others: a previous process's).
    pub(super) fn is_known_spare(&self, path: &Path) -> bool {
        let repos = self.repos.lock().unwrap_or_else(|p| p.into_inner());
        repos.values().any(|state| {
            state
                .spares
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .any(|s| s.path == path)
        })
    }
}

/// Puts pidevops's own link back in a worktree, whatever the agent made of `.git` (a directory, a file, a link).
async fn link_to_admin(worktree: &Path, admin: &Path) -> Result<(), WorkspaceError> {
    let link = worktree.join(".git");
    let io = |source| WorkspaceError::Io {
        path: link.clone(),
        source,
    };
    remove_any(&link).await.map_err(io)?;
    tokio::fs::write(&link, format!("gitdir: {}\n", admin.display()))
        .await
        .map_err(io)
}

/// Moves every entry of `from` into a new directory `to` and removes `from`: the same files under a directory
/// with a new inode.
async fn move_into_new_directory(from: &Path, to: &Path) -> Result<(), WorkspaceError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| WorkspaceError::Io { path, source }
    };
    tokio::fs::create_dir(to).await.map_err(io(to))?;
    let mut entries = tokio::fs::read_dir(from).await.map_err(io(from))?;
    while let Some(entry) = entries.next_entry().await.map_err(io(from))? {
        let target = to.join(entry.file_name());
        tokio::fs::rename(entry.path(), &target)
            .await
            .map_err(io(&target))?;
    }
    tokio::fs::remove_dir(from).await.map_err(io(from))
}
