//! A task's branch brought up to date with its base after the base moved under its pull request
//! (`[repos."o/n"] refresh`): the commit pidevops last pushed for the task rebased onto the base (or the base
//! merged into it), and pushed over that very commit only.
//!
//! The work happens in a clean room of pidevops's own, as a landing's does (`land.rs`): a bare repository made
//! for it under `<root>/refresh/<task>/<uuid>/`, the mirror's objects borrowed, our own git (clean environment,
//! hooks off), the base and the branch fetched from the configured URL.
//!
//! - The base is in the commit's history already: it is current; nothing is pushed.
//! - Otherwise the commit is rebased onto (merged with) the base in a worktree of the clean room. A conflict
//!   aborts it and is reported with the files and the conflicting hunks; nothing is pushed.
//! - The new commit is made with the committer (and a merge's author) dated `stamp`, the time of the base push
//!   that asked for it: the same refresh made again after a crash makes the same commit, so a push that
//!   happened before the crash is recognised ("pushed already") and never repeated.
//! - The push names the commit pidevops recorded as its lease (`--force-with-lease=<branch>:<commit>`): a branch
//!   someone else pushed to since is never overwritten; that is reported with what is there now.
//! - Held (`hold`: the repository has a `check`): nothing is pushed; the new commit is reported (`Held`) for the
//!   attempt that checks it, which makes it again in its own worktree ([`Workspaces::refresh_again`], the same
//!   commit for the same stamp) and pushes it leased on the same commit once the check passed.

use std::path::Path;

use super::combine::remove_leftovers;
use super::git::printable;
use super::{Prepared, RepoState, WorkspaceError, Workspaces};
use crate::config::dispatch::RepoSource;
use crate::tasks::{BranchName, RefreshMode, RepoName, TaskId};

/// The most conflicting files named in a report (the rest are counted).
const MAX_FILES_NAMED: usize = 20;
/// The most bytes of conflicting hunks kept in a report (a prompt and a page read it).
const MAX_HUNK_BYTES: usize = 16 * 1024;

/// What to refresh: the task, its branch, the commit pidevops last pushed to it, and how.
#[derive(Clone, Debug)]
pub struct RefreshRequest {
    pub repo: RepoName,
    pub task: TaskId,
    pub branch: BranchName,
    /// The commit pidevops recorded as the branch's head (the lease).
    pub commit: String,
    pub mode: RefreshMode,
    /// Seconds since the epoch: the new commit's committer date (see the module doc).
    pub stamp: i64,
    /// Bring it up to date but push nothing: the repository's check runs on it first (`Held`).
    pub hold: bool,
}

/// How a refresh ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefreshResult {
    /// The base at `base` is in the commit's history: nothing to do.
    Current { base: String },
    /// The branch is `to` now, up to date with `base`. `pushed`: by this refresh (else it was there already: a
    /// refresh cut off between its push and its record).
    Refreshed {
        base: String,
        to: String,
        pushed: bool,
    },
    /// `hold`: the branch, still at the recorded commit, would be `to`, up to date with `base`; nothing was pushed.
    Held { base: String, to: String },
    /// The commit does not rebase onto (merge with) the base at `base`: nothing was pushed.
    Conflict {
        base: String,
        /// The conflicting files (at most [`MAX_FILES_NAMED`]) and how many there were.
        files: Vec<String>,
        total: usize,
        /// The conflicting hunks as `git diff` shows them with their markers, at most [`MAX_HUNK_BYTES`].
        hunks: String,
    },
    /// Someone else pushed to the branch: it is at `found`, not at the commit pidevops recorded. Nothing was
    /// pushed over it.
    Moved { found: String },
    /// The branch is gone from the remote (a person deleted it): nothing was pushed.
    Gone,
    /// The recorded commit is neither on the branch nor to be had by its id: nothing was pushed.
    Missing,
}

impl Workspaces {
    /// Refreshes `request`'s branch on `source` (see the module doc). `intend(to, base)` is called just before
    /// the push, to record what is about to be pushed; its error stops the refresh with nothing pushed.
    pub async fn refresh<F, Fut>(
        &self,
        request: &RefreshRequest,
        source: &RepoSource,
        intend: F,
    ) -> Result<RefreshResult, WorkspaceError>
    where
        F: FnOnce(String, String) -> Fut,
        Fut: std::future::Future<Output = Result<(), String>>,
    {
        self.check_token(&request.repo, source)?;
        let commit = &request.commit;
        if !matches!(commit.len(), 40 | 64) || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(WorkspaceError::Git {
                what: format!("refreshing {}", request.task),
                detail: format!("{commit:?} is not a commit id"),
            });
        }
        if request.mode == RefreshMode::Off {
            return Err(WorkspaceError::Git {
                what: format!("refreshing {}", request.task),
                detail: "its repository sets refresh = \"off\"".to_owned(),
            });
        }
        let task_dir = self.root.join("refresh").join(request.task.to_string());
        remove_leftovers(&task_dir).await;
        let dir = task_dir.join(uuid::Uuid::now_v7().to_string());
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|source| WorkspaceError::Io {
                path: dir.clone(),
                source,
            })?;
        let result = self.refresh_in(&dir, request, source, intend).await;
        let _ = tokio::fs::remove_dir_all(&dir).await;
        let _ = tokio::fs::remove_dir(&task_dir).await;
        result
    }

    async fn refresh_in<F, Fut>(
        &self,
        dir: &Path,
        request: &RefreshRequest,
        source: &RepoSource,
        intend: F,
    ) -> Result<RefreshResult, WorkspaceError>
    where
        F: FnOnce(String, String) -> Fut,
        Fut: std::future::Future<Output = Result<(), String>>,
    {
        let git_dir = self.clean_room(dir, &request.repo).await?;
        let commit = request.commit.to_ascii_lowercase();
        let branch = request.branch.as_str();
        let branch_ref = format!("refs/heads/{branch}");
        let fetch =
            |what: String, refspec: String| self.fetch_into(&git_dir, source, what, refspec);
        // The branch as it is on the remote now: ours, someone else's, or gone.
        let found = match fetch(
            format!("fetching {branch}"),
            format!("+{branch_ref}:refs/refresh/branch"),
        )
        .await
        {
            Ok(_) => Some(self.rev_parse(&git_dir, "refs/refresh/branch").await?),
            Err(_) => None,
        };
        // Deleted by someone: recreating it would undo what a person did.
        let Some(found) = found else {
            return Ok(RefreshResult::Gone);
        };
        if !self.has_commit(&git_dir, &commit).await {
            let _ = fetch("fetching the recorded commit".into(), commit.clone()).await;
            if !self.has_commit(&git_dir, &commit).await {
                return Ok(RefreshResult::Missing);
            }
        }
        fetch(
            format!("fetching the base branch {}", source.base),
            format!("+refs/heads/{}:refs/refresh/base", source.base),
        )
        .await?;
        let base = self.rev_parse(&git_dir, "refs/refresh/base").await?;
        if self.is_ancestor(&git_dir, &base, &commit).await? {
            return Ok(RefreshResult::Current { base });
        }
        let to = match self
            .bring_up(dir, &git_dir, request, &commit, &base)
            .await?
        {
            Ok(to) => to,
            Err(conflict) => return Ok(conflict),
        };
        // For the task's page, while the three commits are at hand (the clean room goes with this refresh).
        let bare = dir.join("repo.git");
        if let Err(error) = self
            .record_remerge(&bare, request.task, &base, &commit, &to)
            .await
        {
            tracing::warn!(task = %request.task, %error, "the refresh's diff was not recorded");
        }
        if found == to {
            // Pushed by this very refresh before a crash cut off its record.
            return Ok(RefreshResult::Refreshed {
                base,
                to,
                pushed: false,
            });
        }
        if found != commit {
            return Ok(RefreshResult::Moved { found });
        }
        if request.hold {
            return Ok(RefreshResult::Held { base, to });
        }
        intend(to.clone(), base.clone())
            .await
            .map_err(|detail| WorkspaceError::Git {
                what: format!("recording the refresh of {} before its push", request.task),
                detail,
            })?;
        let lease = format!("--force-with-lease={branch_ref}:{commit}");
        let refspec = format!("{to}:{branch_ref}");
        let pushed = self
            .run_git(
                &format!("pushing the refreshed {branch}"),
                Some(source),
                &[
                    &git_dir,
                    "push",
                    "--quiet",
                    &lease,
                    "--",
                    &source.url,
                    &refspec,
                ],
                None,
            )
            .await;
        match pushed {
            Ok(_) => Ok(RefreshResult::Refreshed {
                base,
                to,
                pushed: true,
            }),
            Err(refused) => {
                // The lease refused: someone pushed between our fetch and our push. Say what is there now.
                match fetch(
                    format!("fetching {branch} again"),
                    format!("+{branch_ref}:refs/refresh/branch"),
                )
                .await
                {
                    Ok(_) => {
                        let found = self.rev_parse(&git_dir, "refs/refresh/branch").await?;
                        if found == to {
                            Ok(RefreshResult::Refreshed {
                                base,
                                to,
                                pushed: false,
                            })
                        } else if found != commit {
                            Ok(RefreshResult::Moved { found })
                        } else {
                            Err(refused)
                        }
                    }
                    Err(_) => Err(refused),
                }
            }
        }
    }

    async fn rev_parse(&self, git_dir: &str, name: &str) -> Result<String, WorkspaceError> {
        let object = format!("{name}^{{commit}}");
        self.run_git(
            &format!("reading {name}"),
            None,
            &[git_dir, "rev-parse", "--verify", &object],
            None,
        )
        .await
    }

    /// The commit rebased onto `base` (or `base` merged into it), or the conflict that stopped it.
    async fn bring_up(
        &self,
        dir: &Path,
        git_dir: &str,
        request: &RefreshRequest,
        commit: &str,
        base: &str,
    ) -> Result<Result<String, RefreshResult>, WorkspaceError> {
        let worktree = dir.join(format!("worktree-{}", &base[..12]));
        // Our own repository: nobody else adds worktrees to it, so its lock is a fresh one.
        let state = RepoState::default();
        let admin = self
            .add_worktree(&state, git_dir, "--detach", None, &worktree, commit)
            .await?;
        let message = message(request.task, base);
        let brought = self
            .stamped(
                &admin,
                &worktree,
                &bring_args(request.mode, &message, base),
                &stamp(request.stamp),
            )
            .await;
        let outcome = match brought {
            Ok(()) => Ok(self
                .in_worktree(
                    "reading the refresh",
                    &admin,
                    &worktree,
                    &["rev-parse", "HEAD"],
                )
                .await?),
            Err(error) => {
                let unmerged = self.unmerged(&admin, &worktree).await.unwrap_or_default();
                let files: Vec<String> = unmerged.iter().map(|f| printable(f)).collect();
                if files.is_empty() {
                    return Err(error);
                }
                let hunks = self
                    .in_worktree(
                        "reading the conflicts",
                        &admin,
                        &worktree,
                        &["diff", "--no-color", "--no-ext-diff", "--diff-filter=U"],
                    )
                    .await
                    .unwrap_or_default();
                Err(RefreshResult::Conflict {
                    base: base.to_owned(),
                    total: files.len(),
                    files: files.into_iter().take(MAX_FILES_NAMED).collect(),
                    hunks: bounded(&hunks),
                })
            }
        };
        if outcome.is_err() {
            let _ = self
                .in_worktree(
                    "aborting the refresh",
                    &admin,
                    &worktree,
                    &abort_args(request.mode),
                )
                .await;
        }
        let path = worktree.to_string_lossy().into_owned();
        let _ = self
            .run_git(
                "removing the refresh's worktree",
                None,
                &[git_dir, "worktree", "remove", "--force", &path],
                None,
            )
            .await;
        Ok(outcome)
    }

    /// `args` in the worktree with the commits it makes dated `stamp` (deterministic: see the module doc).
    async fn stamped(
        &self,
        admin: &Path,
        worktree: &Path,
        args: &[&str],
        stamp: &str,
    ) -> Result<(), WorkspaceError> {
        let git_dir = format!("--git-dir={}", admin.to_string_lossy());
        let work_tree = format!("--work-tree={}", worktree.to_string_lossy());
        let mut command = self.git(None);
        command
            .env("GIT_COMMITTER_DATE", stamp)
            .env("GIT_AUTHOR_DATE", stamp)
            .args([git_dir.as_str(), work_tree.as_str()])
            .args(args)
            .current_dir(worktree);
        let output = command.output().await.map_err(|e| WorkspaceError::Git {
            what: "refreshing".to_owned(),
            detail: format!("cannot run git: {e}"),
        })?;
        if output.status.success() {
            Ok(())
        } else {
            Err(WorkspaceError::Git {
                what: "refreshing".to_owned(),
                detail: format!(
                    "{} ({})",
                    String::from_utf8_lossy(&output.stderr).trim(),
                    output.status
                ),
            })
        }
    }
}

impl Workspaces {
    /// The refresh `request` (its recorded commit onto `base`) made again in `prepared`'s worktree, as the `refresh`
    /// loop made it in its clean room: the same commit for the same stamp. Returns it; the worktree is left on it
    /// (and `prepared.base_commit` is it: what the check's repository starts from). Nothing is pushed.
    pub async fn refresh_again(
        &self,
        prepared: &mut Prepared,
        request: &RefreshRequest,
        base: &str,
    ) -> Result<String, WorkspaceError> {
        let mirror = format!("--git-dir={}", prepared.dirs.mirror.to_string_lossy());
        let from = request.commit.as_str();
        for (what, commit) in [("the commit pidevops pushed", from), ("the base", base)] {
            if !self.has_commit(&mirror, commit).await {
                return Err(WorkspaceError::Git {
                    what: "making the refresh again".to_owned(),
                    detail: format!("{what} ({commit}) is not in the mirror"),
                });
            }
        }
        let (admin, worktree) = (prepared.admin.clone(), prepared.dirs.worktree.clone());
        self.in_worktree(
            "putting the worktree on the commit pidevops pushed",
            &admin,
            &worktree,
            &["reset", "--hard", "--quiet", from],
        )
        .await?;
        let message = message(request.task, base);
        let brought = self
            .stamped(
                &admin,
                &worktree,
                &bring_args(request.mode, &message, base),
                &stamp(request.stamp),
            )
            .await;
        if let Err(error) = brought {
            let _ = self
                .in_worktree(
                    "aborting the refresh",
                    &admin,
                    &worktree,
                    &abort_args(request.mode),
                )
                .await;
            return Err(error);
        }
        let to = self
            .in_worktree(
                "reading the refresh",
                &admin,
                &worktree,
                &["rev-parse", "HEAD"],
            )
            .await?;
        prepared.base_commit = to.clone();
        Ok(to)
    }
}

/// A refresh's commit message: the task id only (ticket text never goes into a commit message).
fn message(task: TaskId, base: &str) -> String {
    format!(
        "Refresh {task} onto {}\n\nMerged by pidevops.\n",
        base.get(..12).unwrap_or(base)
    )
}

/// git's arguments that bring the commit checked out up to date with `base` by `mode`.
fn bring_args<'a>(mode: RefreshMode, message: &'a str, base: &'a str) -> Vec<&'a str> {
    match mode {
        RefreshMode::Merge => vec![
            "merge",
            "--no-ff",
            "--no-edit",
            "--quiet",
            "-m",
            message,
            base,
        ],
        RefreshMode::Rebase | RefreshMode::Off => vec!["rebase", "--quiet", base],
    }
}

/// git's arguments that abort what [`bring_args`] started.
fn abort_args(mode: RefreshMode) -> [&'static str; 2] {
    match mode {
        RefreshMode::Merge => ["merge", "--abort"],
        RefreshMode::Rebase | RefreshMode::Off => ["rebase", "--abort"],
    }
}

/// `stamp` (seconds since the epoch) as git's date.
fn stamp(stamp: i64) -> String {
    format!("@{stamp} +0000")
}

/// At most [`MAX_HUNK_BYTES`] of `text`, cut at a character boundary, saying so when cut.
fn bounded(text: &str) -> String {
    if text.len() <= MAX_HUNK_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_HUNK_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n… (cut at {MAX_HUNK_BYTES} bytes)\n", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hunks_are_bounded_at_a_character_boundary() {
        let long = "é".repeat(MAX_HUNK_BYTES);
        let cut = bounded(&long);
        assert!(cut.len() < MAX_HUNK_BYTES + 40);
        assert!(cut.ends_with("bytes)\n"));
        assert_eq!(bounded("short"), "short");
    }

    #[test]
    fn a_path_cannot_start_a_new_line() {
        assert_eq!(printable("a\nb\tc.rs"), "a?b?c.rs");
    }
}
