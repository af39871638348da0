//! A task landed without GitHub (`pidevops task land`, `land = "auto"` on a repository whose remote is a path or a
//! plain git URL): the commit pidevops recorded for the run that put it in review merged into the repository's
//! base on its configured remote, and pushed.
//!
//! The work happens in a clean room of pidevops's own: a bare repository made for this landing under
//! `<root>/land/<task>/<uuid>/` (the mirror's objects borrowed as an alternate when there is one, so only what is
//! missing is fetched), never the mirror's refs and never an agent's worktree, by our own git (clean environment,
//! hooks off). The base and the task's branch are fetched from the configured URL; the recorded commit is asked
//! for by its id when the branch no longer holds it.
//!
//! - The base holds the commit already: it is landed (a retried request, a restart between the push and its
//!   record); nothing is pushed.
//! - The base is an ancestor of the commit: the base fast-forwards to it.
//! - Otherwise a merge commit (author and committer pidevops, its message naming the task only) in a worktree of
//!   the clean room; a conflict aborts it and is reported with the files; nothing is pushed.
//!
//! The push names the base commit it merged onto as its lease (`--force-with-lease=<base>:<commit>`), so it never
//! replaces someone else's push: when the base moved, everything is done once more from the new base; a second
//! refusal is an error naming it.

use std::path::Path;

use super::combine::remove_leftovers;
use super::{RepoState, WorkspaceError, Workspaces};
use crate::config::dispatch::RepoSource;
use crate::tasks::{BranchName, RepoName, TaskId};

/// The most conflicting files named in a report (the rest are counted).
const MAX_FILES_NAMED: usize = 20;

/// What to land: the task, its branch as pushed, and the commit pidevops recorded for it.
#[derive(Clone, Debug)]
pub struct LandRequest {
    pub repo: RepoName,
    pub task: TaskId,
    pub branch: BranchName,
    pub commit: String,
}

/// How a landing ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LandResult {
    /// The base holds the commit: it is `onto` now. `pushed`: by this landing (else it was there already).
    Landed {
        onto: String,
        fast_forward: bool,
        pushed: bool,
    },
    /// The commit does not merge with the base at `base`: nothing was pushed.
    Conflict {
        base: String,
        /// The conflicting files (at most [`MAX_FILES_NAMED`]) and how many there were.
        files: Vec<String>,
        total: usize,
    },
    /// The recorded commit is neither on the task's branch nor to be had by its id: nothing was pushed.
    Missing,
}

/// What became of a landed task's branch on the remote ([`Workspaces::delete_landed_branch`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BranchLeft {
    /// Deleted: its head was the commit pidevops recorded.
    Deleted,
    /// Not there (deleted already: a repeat, or a person).
    Gone,
    /// Kept: its head is `head`, not the recorded commit (someone pushed to it), or it moved under the delete.
    Kept { head: String },
}

impl Workspaces {
    /// Deletes `request`'s branch on `source`'s remote once its task landed, only while its head is the recorded
    /// commit: `ls-remote` reads it, and the delete is a push leased on that commit
    /// (`--force-with-lease=refs/heads/<branch>:<commit>`), so a person's push, even one made between the read
    /// and the delete, is never deleted. From an empty repository of its own under `land/` (a delete sends no
    /// objects). Safe to repeat: a branch gone is [`BranchLeft::Gone`].
    pub async fn delete_landed_branch(
        &self,
        request: &LandRequest,
        source: &RepoSource,
    ) -> Result<BranchLeft, WorkspaceError> {
        self.check_token(&request.repo, source)?;
        let branch_ref = format!("refs/heads/{}", request.branch.as_str());
        let listed = self
            .run_git(
                &format!("reading {}", request.branch.as_str()),
                Some(source),
                &["ls-remote", "--", &source.url, &branch_ref],
                None,
            )
            .await?;
        let Some(head) = listed
            .lines()
            .find_map(|line| line.split_once('\t').filter(|(_, r)| *r == branch_ref))
            .map(|(sha, _)| sha.to_owned())
        else {
            return Ok(BranchLeft::Gone);
        };
        if !head.eq_ignore_ascii_case(&request.commit) {
            return Ok(BranchLeft::Kept { head });
        }
        let task_dir = self.root.join("land").join(request.task.to_string());
        let dir = task_dir.join(uuid::Uuid::now_v7().to_string());
        let repo = dir.join("delete.git");
        let repo_str = repo.to_string_lossy().into_owned();
        let made = self
            .run_git(
                "making the delete's repository",
                None,
                &["init", "--bare", "--quiet", &repo_str],
                None,
            )
            .await;
        let lease = format!("--force-with-lease={branch_ref}:{}", request.commit);
        let refspec = format!(":{branch_ref}");
        let pushed = match made {
            Ok(_) => {
                self.run_git(
                    &format!("deleting {}", request.branch.as_str()),
                    Some(source),
                    &[
                        &format!("--git-dir={repo_str}"),
                        "push",
                        "--quiet",
                        &lease,
                        "--",
                        &source.url,
                        &refspec,
                    ],
                    None,
                )
                .await
            }
            Err(e) => Err(e),
        };
        let _ = tokio::fs::remove_dir_all(&dir).await;
        let _ = tokio::fs::remove_dir(&task_dir).await;
        match pushed {
            Ok(_) => Ok(BranchLeft::Deleted),
            // The lease refused it: the branch moved (or went) between the read and the delete.
            Err(WorkspaceError::Git { detail, .. }) if detail.contains("stale info") => {
                Ok(BranchLeft::Kept {
                    head: "moved during the delete".to_owned(),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Lands `request`'s commit on `source`'s base (see the module doc).
    pub async fn land(
        &self,
        request: &LandRequest,
        source: &RepoSource,
    ) -> Result<LandResult, WorkspaceError> {
        self.check_token(&request.repo, source)?;
        let commit = &request.commit;
        if !matches!(commit.len(), 40 | 64) || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(WorkspaceError::Git {
                what: format!("landing {}", request.task),
                detail: format!("{commit:?} is not a commit id"),
            });
        }
        let task_dir = self.root.join("land").join(request.task.to_string());
        remove_leftovers(&task_dir).await;
        let dir = task_dir.join(uuid::Uuid::now_v7().to_string());
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|source| WorkspaceError::Io {
                path: dir.clone(),
                source,
            })?;
        let result = self.land_in(&dir, request, source).await;
        let _ = tokio::fs::remove_dir_all(&dir).await;
        let _ = tokio::fs::remove_dir(&task_dir).await;
        result
    }

    async fn land_in(
        &self,
        dir: &Path,
        request: &LandRequest,
        source: &RepoSource,
    ) -> Result<LandResult, WorkspaceError> {
        let git_dir = self.clean_room(dir, &request.repo).await?;
        let commit = request.commit.as_str();
        let fetch =
            |what: String, refspec: String| self.fetch_into(&git_dir, source, what, refspec);
        // The branch as pushed brings the commit; if it was moved since, the commit is asked for by its id.
        let branch = request.branch.as_str();
        let _ = fetch(
            format!("fetching {branch}"),
            format!("+refs/heads/{branch}:refs/land/branch"),
        )
        .await;
        if !self.has_commit(&git_dir, commit).await {
            let _ = fetch("fetching the recorded commit".into(), commit.to_owned()).await;
            if !self.has_commit(&git_dir, commit).await {
                return Ok(LandResult::Missing);
            }
        }
        let base_ref = format!("refs/heads/{}", source.base);
        let mut refused = None;
        // Once, and once more from the new base if the base moved under the push.
        for _ in 0..2 {
            fetch(
                format!("fetching the base branch {}", source.base),
                format!("+{base_ref}:refs/land/base"),
            )
            .await?;
            let base = self
                .run_git(
                    "reading the base",
                    None,
                    &[&git_dir, "rev-parse", "--verify", "refs/land/base^{commit}"],
                    None,
                )
                .await?;
            if self.is_ancestor(&git_dir, commit, &base).await? {
                return Ok(LandResult::Landed {
                    fast_forward: base == commit,
                    onto: base,
                    pushed: false,
                });
            }
            let (onto, fast_forward) = if self.is_ancestor(&git_dir, &base, commit).await? {
                (commit.to_owned(), true)
            } else {
                match self.merge(dir, &git_dir, request, &base).await? {
                    Ok(merge) => (merge, false),
                    Err(conflict) => return Ok(conflict),
                }
            };
            let lease = format!("--force-with-lease={base_ref}:{base}");
            let refspec = format!("{onto}:{base_ref}");
            let pushed = self
                .run_git(
                    &format!("pushing {} to {}", request.task, source.base),
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
                Ok(_) => {
                    return Ok(LandResult::Landed {
                        onto,
                        fast_forward,
                        pushed: true,
                    })
                }
                Err(error) => refused = Some(error),
            }
        }
        let detail = refused.map_or_else(String::new, |e| e.to_string());
        Err(WorkspaceError::Git {
            what: format!("landing {} on {}", request.task, source.base),
            detail: format!(
                "the base branch moved while landing, twice (nothing of ours was pushed over it); try again: {detail}"
            ),
        })
    }

    /// A bare repository of pidevops's own at `dir/repo.git`, borrowing `repo`'s mirror's objects when there is a
    /// mirror (so only what is missing is fetched); its `--git-dir=` argument. For a landing and a refresh.
    pub(super) async fn clean_room(
        &self,
        dir: &Path,
        repo: &RepoName,
    ) -> Result<String, WorkspaceError> {
        let bare = dir.join("repo.git");
        let bare_str = bare.to_string_lossy().into_owned();
        self.run_git(
            "making a clean room's repository",
            None,
            &["init", "--bare", "--quiet", &bare_str],
            None,
        )
        .await?;
        let mirror_objects = self.mirror_path(repo).join("objects");
        if mirror_objects.is_dir() {
            let alternates = bare.join("objects").join("info").join("alternates");
            let line = format!("{}\n", mirror_objects.to_string_lossy());
            tokio::fs::write(&alternates, line)
                .await
                .map_err(|source| WorkspaceError::Io {
                    path: alternates,
                    source,
                })?;
        }
        Ok(format!("--git-dir={bare_str}"))
    }

    /// Fetches `refspec` from `source`'s configured URL into the clean room `git_dir`.
    pub(super) async fn fetch_into(
        &self,
        git_dir: &str,
        source: &RepoSource,
        what: String,
        refspec: String,
    ) -> Result<String, WorkspaceError> {
        self.run_git(
            &what,
            Some(source),
            &[
                git_dir,
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                "--",
                &source.url,
                &refspec,
            ],
            None,
        )
        .await
    }

    /// Whether `ancestor` is `commit` or in its history.
    pub(super) async fn is_ancestor(
        &self,
        git_dir: &str,
        ancestor: &str,
        commit: &str,
    ) -> Result<bool, WorkspaceError> {
        let mut command = self.git(None);
        command.args([git_dir, "merge-base", "--is-ancestor", ancestor, commit]);
        let output = command.output().await.map_err(|e| WorkspaceError::Git {
            what: "comparing histories".to_owned(),
            detail: format!("cannot run git: {e}"),
        })?;
        match output.status.code() {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => Err(WorkspaceError::Git {
                what: "comparing histories".to_owned(),
                detail: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            }),
        }
    }

    /// The merge commit of the request's commit into `base`, or the conflict that stopped it.
    async fn merge(
        &self,
        dir: &Path,
        git_dir: &str,
        request: &LandRequest,
        base: &str,
    ) -> Result<Result<String, LandResult>, WorkspaceError> {
        let worktree = dir.join(format!("worktree-{}", &base[..12]));
        // Our own repository: nobody else adds worktrees to it, so its lock is a fresh one.
        let state = RepoState::default();
        let admin = self
            .add_worktree(&state, git_dir, "--detach", None, &worktree, base)
            .await?;
        // The task id only: ticket text never goes into a commit message.
        let message = format!("Land {}\n\nMerged by pidevops.\n", request.task);
        let merged = self
            .in_worktree(
                &format!("merging {}", request.task),
                &admin,
                &worktree,
                &[
                    "merge",
                    "--no-ff",
                    "--no-edit",
                    "--quiet",
                    "-m",
                    &message,
                    &request.commit,
                ],
            )
            .await;
        let outcome = match merged {
            Ok(_) => Ok(self
                .in_worktree(
                    "reading the merge",
                    &admin,
                    &worktree,
                    &["rev-parse", "HEAD"],
                )
                .await?),
            Err(error) => {
                let unmerged = self.unmerged(&admin, &worktree).await.unwrap_or_default();
                let files: Vec<String> =
                    unmerged.iter().map(|f| super::git::printable(f)).collect();
                if files.is_empty() {
                    return Err(error);
                }
                Err(LandResult::Conflict {
                    base: base.to_owned(),
                    total: files.len(),
                    files: files.into_iter().take(MAX_FILES_NAMED).collect(),
                })
            }
        };
        let path = worktree.to_string_lossy().into_owned();
        let _ = self
            .run_git(
                "removing the landing's worktree",
                None,
                &[git_dir, "worktree", "remove", "--force", &path],
                None,
            )
            .await;
        Ok(outcome)
    }
}
