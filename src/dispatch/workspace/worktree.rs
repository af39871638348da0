//! A run's worktree: prepared on the task's branch at the newest base (from a spare or a finished worktree when
//! one is at hand, else a checkout), the task's earlier attempts removed first; and its commit.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::{Prepared, RepoState, WorkspaceError, Workspaces};
use crate::config::dispatch::RepoSource;
use crate::tasks::{BranchName, RepoName, RunId, TaskId};

impl Workspaces {
    /// A fresh worktree for this attempt. Worktrees of the task's earlier attempts are removed first: a task
    /// has one live attempt at a time (the claim guarantees it), and its branch can be checked out only once.
    pub async fn prepare(
        &self,
        repo: &RepoName,
        source: &RepoSource,
        task: TaskId,
        run: RunId,
    ) -> Result<Prepared, WorkspaceError> {
        let state = self.state(repo);
        let asked = Instant::now();
        let dirs = self.run_dirs(repo, task, run);
        let mirror = {
            let _guard = state.lock.lock().await;
            let mirror = self.fetch_since(&state, repo, source, asked).await?;
            let git_dir = format!("--git-dir={}", mirror.to_string_lossy());
            // The task's earlier attempts are removed, not reused: take them off the reuse list first.
            let task_dir = self.root.join("runs").join(task.to_string());
            state
                .finished
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|(path, _)| !path.starts_with(&task_dir));
            // A first attempt (the common case) has nothing to remove: no git on the start path for it.
            if earlier_worktree_exists(&task_dir, run).await {
                self.remove_task_worktrees(&git_dir, task, Some(run))
                    .await?;
            }
            mirror
        };
        let git_dir = format!("--git-dir={}", mirror.to_string_lossy());
        for dir in [&dirs.dir, &dirs.home, &dirs.tmp] {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|source| WorkspaceError::Io {
                    path: dir.clone(),
                    source,
                })?;
        }
        let base_commit = self.base_commit(&git_dir, source).await?;
        let branch = task.branch();
        let worktree = dirs.worktree.to_string_lossy().into_owned();
        let spare = self
            .take_worktree(&state, &git_dir, repo, &base_commit)
            .await;
        let mut admin = None;
        if let Some(spare) = spare {
            let from = spare.path.to_string_lossy().into_owned();
            let moved = {
                let _guard = state.lock.lock().await;
                self.run_git(
                    "moving a spare worktree",
                    None,
                    &[&git_dir, "worktree", "move", &from, &worktree],
                    None,
                )
                .await
            };
            let switched = match moved {
                Ok(_) => {
                    self.put_on_branch(&dirs.worktree, &spare.admin, &branch, &spare.commit)
                        .await
                }
                Err(error) => Err(error),
            };
            match switched {
                Ok(()) => {
                    metrics::counter!("pidevops_worktrees_total", "how" => "spare").increment(1);
                    admin = Some(spare.admin.clone());
                }
                Err(error) => {
                    tracing::warn!(%error, "a spare worktree could not be used; checking out a new one");
                    let _guard = state.lock.lock().await;
                    for path in [&from, &worktree] {
                        let _ = self
                            .run_git(
                                "removing a spare worktree",
                                None,
                                &[&git_dir, "worktree", "remove", "--force", path],
                                None,
                            )
                            .await;
                    }
                }
            }
        }
        let admin = match admin {
            Some(admin) => admin,
            None => {
                // Whatever a failed reuse left at the path goes, or `worktree add` would refuse it.
                if tokio::fs::try_exists(&dirs.worktree).await.unwrap_or(false) {
                    let _ = tokio::fs::remove_dir_all(&dirs.worktree).await;
                    let _guard = state.lock.lock().await;
                    let _ = self
                        .run_git(
                            "pruning worktrees",
                            None,
                            &[&git_dir, "worktree", "prune"],
                            None,
                        )
                        .await;
                }
                metrics::counter!("pidevops_worktrees_total", "how" => "checkout").increment(1);
                self.add_worktree(
                    &state,
                    &git_dir,
                    "-B",
                    Some(branch.as_str()),
                    &dirs.worktree,
                    &base_commit,
                )
                .await?
            }
        };
        Ok(Prepared {
            dirs,
            base_commit,
            branch,
            repo: repo.clone(),
            source: source.clone(),
            admin,
        })
    }

    /// Puts a clean worktree detached at `commit` on `branch`, reset to `commit`: what `checkout -B` does, without
    /// refreshing the index of every file (nothing in the tree changes). The task's earlier worktrees are gone,
    /// so no other worktree has the branch checked out.
    async fn put_on_branch(
        &self,
        worktree: &Path,
        admin: &Path,
        branch: &BranchName,
        commit: &str,
    ) -> Result<(), WorkspaceError> {
        let reference = format!("refs/heads/{}", branch.as_str());
        let what = "putting the worktree on its branch";
        let head = self
            .in_worktree(what, admin, worktree, &["rev-parse", "--verify", "HEAD"])
            .await?;
        if head != commit {
            return Err(WorkspaceError::Git {
                what: what.to_owned(),
                detail: format!("the spare is at {head}, not {commit}"),
            });
        }
        self.in_worktree(what, admin, worktree, &["update-ref", &reference, commit])
            .await?;
        self.in_worktree(what, admin, worktree, &["symbolic-ref", "HEAD", &reference])
            .await?;
        Ok(())
    }

    /// `git worktree add` in two steps: the administrative part (the worktree list every git command of the
    /// repository reads) under the repository's lock, then the checkout of every file outside it, in the new
    /// worktree only. git does not make the first step safe against concurrent readers; the second is most of
    /// the time and touches nothing shared. Returns the worktree's administrative directory, read from the link
    /// git has just written (nobody else has touched the new worktree yet).
    pub(super) async fn add_worktree(
        &self,
        state: &RepoState,
        git_dir: &str,
        head: &str,
        branch: Option<&str>,
        path: &Path,
        commit: &str,
    ) -> Result<PathBuf, WorkspaceError> {
        let path_str = path.to_string_lossy().into_owned();
        let mut args = vec![git_dir, "worktree", "add", "--quiet", "--no-checkout", head];
        args.extend(branch);
        args.extend([path_str.as_str(), commit]);
        {
            let _guard = state.lock.lock().await;
            self.run_git("adding a worktree", None, &args, None).await?;
        }
        let mirror = Path::new(git_dir.trim_start_matches("--git-dir="));
        let admin = admin_of_new_worktree(path, mirror).await?;
        self.in_worktree(
            "checking out the worktree",
            &admin,
            path,
            &["reset", "--hard", "--quiet"],
        )
        .await?;
        Ok(admin)
    }

    /// Removes the worktrees git knows under `runs/<task>/`, except `keep`'s.
    async fn remove_task_worktrees(
        &self,
        git_dir: &str,
        task: TaskId,
        keep: Option<RunId>,
    ) -> Result<(), WorkspaceError> {
        let task_dir = self.root.join("runs").join(task.to_string());
        let listed = self
            .run_git(
                "listing worktrees",
                None,
                &[git_dir, "worktree", "list", "--porcelain"],
                None,
            )
            .await?;
        for line in listed.lines() {
            let Some(path) = line.strip_prefix("worktree ") else {
                continue;
            };
            let path = Path::new(path);
            let keep_it = keep.is_some_and(|run| path.starts_with(task_dir.join(run.to_string())));
            if path.starts_with(&task_dir) && !keep_it {
                let path_str = path.to_string_lossy().into_owned();
                let removed = self
                    .run_git(
                        "removing an earlier attempt's worktree",
                        None,
                        &[git_dir, "worktree", "remove", "--force", &path_str],
                        None,
                    )
                    .await;
                // git refuses when something else touched it meanwhile (a reuse that lost the race): it is
                // garbage either way, so it goes by hand and `prune` below forgets it.
                if let Err(error) = removed {
                    tracing::debug!(%error, "removing an earlier attempt's worktree by hand");
                    let _ = tokio::fs::remove_dir_all(path).await;
                }
            }
        }
        self.run_git(
            "pruning worktrees",
            None,
            &[git_dir, "worktree", "prune"],
            None,
        )
        .await?;
        Ok(())
    }

    /// Removes a stopped run's worktree now instead of offering it for reuse: its task was closed (cancelled: its
    /// ticket withdrawn, a person, a plan) or another run took it, so nothing of it is worth keeping or resetting.
    /// The agent's `.git` is its own (`hand_to_agent`), so the directory goes by hand and the mirror forgets the
    /// worktree; the run's directory keeps its log, prompt and diff for its page.
    pub async fn discard(&self, prepared: &Prepared) -> Result<(), WorkspaceError> {
        let worktree = &prepared.dirs.worktree;
        super::remove_any(worktree)
            .await
            .map_err(|source| WorkspaceError::Io {
                path: worktree.clone(),
                source,
            })?;
        let state = self.state(&prepared.repo);
        let _guard = state.lock.lock().await;
        let git_dir = format!("--git-dir={}", prepared.dirs.mirror.to_string_lossy());
        self.run_git(
            "pruning worktrees",
            None,
            &[&git_dir, "worktree", "prune"],
            None,
        )
        .await?;
        Ok(())
    }

    /// Commits whatever the agent left (its own commits included) and returns the new HEAD, or `None` when the
    /// worktree is exactly the base: the run made no change.
    pub async fn commit(
        &self,
        prepared: &Prepared,
        message: &str,
    ) -> Result<Option<String>, WorkspaceError> {
        let (admin, worktree) = (&prepared.admin, &prepared.dirs.worktree);
        self.in_worktree(
            "staging the agent's changes",
            admin,
            worktree,
            &["add", "--all"],
        )
        .await?;
        let staged = self
            .in_worktree(
                "listing the agent's changes",
                admin,
                worktree,
                &["diff", "--cached", "--name-only"],
            )
            .await?;
        if !staged.is_empty() {
            self.in_worktree(
                "committing the agent's changes",
                admin,
                worktree,
                &["commit", "--quiet", "--no-verify", "-m", message],
            )
            .await?;
        }
        let head = self
            .in_worktree("reading HEAD", admin, worktree, &["rev-parse", "HEAD"])
            .await?;
        Ok((head != prepared.base_commit).then_some(head))
    }
}

/// Whether an attempt of this task other than `run` still has a worktree here (recycled ones were moved away).
async fn earlier_worktree_exists(task_dir: &Path, run: RunId) -> bool {
    // When in doubt (an error reading the directory), yes: the removal path then asks git.
    let mut entries = match tokio::fs::read_dir(task_dir).await {
        Ok(entries) => entries,
        Err(error) => return error.kind() != std::io::ErrorKind::NotFound,
    };
    let run = run.to_string();
    loop {
        match entries.next_entry().await {
            Ok(None) => return false,
            Err(_) => return true,
            Ok(Some(entry)) => {
                if entry.file_name().to_string_lossy() != run.as_str()
                    && tokio::fs::try_exists(entry.path().join("worktree"))
                        .await
                        .unwrap_or(true)
                {
                    return true;
                }
            }
        }
    }
}

/// The administrative directory a freshly added worktree links to, checked to be inside `mirror`'s `worktrees/`.
async fn admin_of_new_worktree(worktree: &Path, mirror: &Path) -> Result<PathBuf, WorkspaceError> {
    let link = worktree.join(".git");
    let text = tokio::fs::read_to_string(&link)
        .await
        .map_err(|source| WorkspaceError::Io {
            path: link.clone(),
            source,
        })?;
    let admin = text
        .strip_prefix("gitdir: ")
        .map(|p| PathBuf::from(p.trim_end()))
        .filter(|p| p.starts_with(mirror.join("worktrees")) && p.is_absolute())
        .ok_or_else(|| WorkspaceError::Git {
            what: "adding a worktree".to_owned(),
            detail: format!("{} does not link into {}", link.display(), mirror.display()),
        })?;
    Ok(admin)
}
