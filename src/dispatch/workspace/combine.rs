//! A plan's items combined (`[plans] land = "combined"`): the commits pidevops recorded for its items merged, in
//! the plan's order, into one branch `pidevops/<plan>` from the newest base, and pushed.
//!
//! Only commit ids pidevops recorded go in (each item's last `run.succeeded`), never a branch head read from the
//! remote: anyone with push access could move `pidevops/<item>`. The fetch before brings the newest base (and the
//! recorded commits when another process pushed them); a recorded commit the mirror still lacks is asked for by
//! its id, and if the remote no longer has it the combination stops there, naming it.
//!
//! The merges run in a worktree of pidevops's own (`<root>/combine/<plan>/<uuid>/`, detached at the base; no agent
//! ever sees or writes it), by our own git (clean environment, hooks off, no repository discovered from a
//! directory): `merge --no-ff` per item, each message naming the plan and every item with its commit. A conflict
//! aborts the merge and is reported with the item, the files and the earlier items that changed them; nothing is
//! pushed. The worktree is removed afterwards; one a crash left behind is removed by the next combination of the
//! plan. The push is forced, like an attempt's: a new combination replaces the last.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::{WorkspaceError, Workspaces};
use crate::config::dispatch::{DispatchConfig, RepoSource};
use crate::tasks::{BranchName, RepoName, TaskId};

/// The most conflicting files named in a report (the rest are counted).
const MAX_FILES_NAMED: usize = 20;
/// A worktree a crash left under `combine/<plan>/` older than this is garbage (a younger one may be another
/// replica's combination under way, on a shared root).
const LEFTOVER_AGE: std::time::Duration = std::time::Duration::from_secs(600);

/// What to combine: the plan, its branch, and its items' recorded commits in the plan's order.
#[derive(Clone, Debug)]
pub struct CombineRequest {
    pub repo: RepoName,
    pub plan: TaskId,
    pub branch: BranchName,
    /// (item, the commit id pidevops recorded for its last successful attempt).
    pub items: Vec<(TaskId, String)>,
}

/// How a combination ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Combined {
    /// Every item merged; `commit` pushed as the branch. `base`: the base commit the merges started from.
    Pushed { commit: String, base: String },
    /// `item` conflicts with the items merged before it: nothing was pushed.
    Conflict {
        item: TaskId,
        /// The conflicting files (at most [`MAX_FILES_NAMED`]) and how many there were.
        files: Vec<String>,
        total: usize,
        /// The items merged before it that changed those files.
        with: Vec<TaskId>,
    },
    /// `item`'s recorded commit is neither in the mirror nor on the remote (its branch was moved and the
    /// commit collected): nothing was pushed.
    Missing { item: TaskId, commit: String },
}

/// The narrow handle a loop gets to combine plans: the dispatcher's workspaces (its mirrors and their locks, shared
/// with the runs) and where each repository comes from; nothing else of dispatch.
#[derive(Clone)]
pub struct Combiner {
    workspaces: Workspaces,
    config: Arc<DispatchConfig>,
}

impl Combiner {
    pub fn new(workspaces: Workspaces, config: DispatchConfig) -> Self {
        Self {
            workspaces,
            config: Arc::new(config),
        }
    }

    /// Combines `request`'s items from its repository's configured source (see the module doc).
    pub async fn combine(&self, request: &CombineRequest) -> Result<Combined, WorkspaceError> {
        let source = self.config.source(&request.repo);
        self.workspaces.combine(request, &source).await
    }
}

impl std::fmt::Debug for Combiner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Combiner")
            .field("root", &self.workspaces.root())
            .finish_non_exhaustive()
    }
}

impl Workspaces {
    /// Combines `request`'s items into its branch from `source`'s base and pushes it (see the module doc).
    pub async fn combine(
        &self,
        request: &CombineRequest,
        source: &RepoSource,
    ) -> Result<Combined, WorkspaceError> {
        for (item, commit) in &request.items {
            if commit.len() != 40 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(WorkspaceError::Git {
                    what: format!("combining {}", request.plan),
                    detail: format!("{item}'s {commit:?} is not a commit id"),
                });
            }
        }
        let state = self.state(&request.repo);
        let mirror = {
            let _guard = state.lock.lock().await;
            self.fetch_since(&state, &request.repo, source, Instant::now())
                .await?
        };
        let git_dir = format!("--git-dir={}", mirror.to_string_lossy());
        for (item, commit) in &request.items {
            if !self.has_commit(&git_dir, commit).await {
                // Not reachable from any branch any more (moved by someone): ask the remote for the id itself,
                // taking turns with the runs' fetches.
                let _guard = state.lock.lock().await;
                let _ = self
                    .run_git(
                        &format!("fetching {item}'s recorded commit"),
                        Some(source),
                        &[
                            &git_dir,
                            "fetch",
                            "--quiet",
                            "--no-write-fetch-head",
                            "--",
                            &source.url,
                            commit,
                        ],
                        None,
                    )
                    .await;
                if !self.has_commit(&git_dir, commit).await {
                    return Ok(Combined::Missing {
                        item: *item,
                        commit: commit.clone(),
                    });
                }
            }
        }
        let base = self.base_commit(&git_dir, source).await?;
        let plan_dir = self.root.join("combine").join(request.plan.to_string());
        remove_leftovers(&plan_dir).await;
        let dir = plan_dir.join(uuid::Uuid::now_v7().to_string());
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|source| WorkspaceError::Io {
                path: dir.clone(),
                source,
            })?;
        let worktree = dir.join("worktree");
        let outcome = match self
            .add_worktree(&state, &git_dir, "--detach", None, &worktree, &base)
            .await
        {
            Ok(admin) => {
                self.merge_items(request, &git_dir, &admin, &worktree, &base)
                    .await
            }
            Err(error) => Err(error),
        };
        // Whatever happened, our worktree goes (its branch is the pushed commit, or nothing).
        {
            let _guard = state.lock.lock().await;
            let path = worktree.to_string_lossy().into_owned();
            let _ = self
                .run_git(
                    "removing the combination's worktree",
                    None,
                    &[&git_dir, "worktree", "remove", "--force", &path],
                    None,
                )
                .await;
            let _ = tokio::fs::remove_dir_all(&dir).await;
            let _ = self
                .run_git(
                    "pruning worktrees",
                    None,
                    &[&git_dir, "worktree", "prune"],
                    None,
                )
                .await;
        }
        let _ = tokio::fs::remove_dir(&plan_dir).await;
        let commit = match outcome? {
            Ok(commit) => commit,
            Err(stopped) => return Ok(stopped),
        };
        self.push_commit(&request.repo, source, &mirror, &request.branch, &commit)
            .await?;
        Ok(Combined::Pushed { commit, base })
    }

    /// Merges each item in turn; the last merge commit, or how it stopped.
    async fn merge_items(
        &self,
        request: &CombineRequest,
        git_dir: &str,
        admin: &Path,
        worktree: &Path,
        base: &str,
    ) -> Result<Result<String, Combined>, WorkspaceError> {
        let named: Vec<String> = request
            .items
            .iter()
            .map(|(item, commit)| format!("{item} {commit}"))
            .collect();
        for (done, (item, commit)) in request.items.iter().enumerate() {
            let message = format!(
                "{plan}: merge {item} ({short})\n\nPlan {plan} lands its items as one, each at the commit pidevops \
                 recorded for it:\n{list}\n",
                plan = request.plan,
                short = &commit[..7],
                list = named.join("\n"),
            );
            let merged = self
                .in_worktree(
                    &format!("merging {item}"),
                    admin,
                    worktree,
                    &[
                        "merge",
                        "--no-ff",
                        "--no-edit",
                        "--quiet",
                        "-m",
                        &message,
                        commit,
                    ],
                )
                .await;
            let Err(error) = merged else {
                continue;
            };
            let files = self.unmerged(admin, worktree).await.unwrap_or_default();
            if files.is_empty() {
                return Err(error);
            }
            let _ = self
                .in_worktree("aborting the merge", admin, worktree, &["merge", "--abort"])
                .await;
            let named_files: Vec<String> = files.iter().take(MAX_FILES_NAMED).cloned().collect();
            let mut with = Vec::new();
            for (earlier, earlier_commit) in &request.items[..done] {
                if self
                    .touches(git_dir, base, earlier_commit, &named_files)
                    .await
                {
                    with.push(*earlier);
                }
            }
            return Ok(Err(Combined::Conflict {
                item: *item,
                total: files.len(),
                // Paths are the agents' to choose: a control character in one is shown as `?`, never as a new line.
                files: named_files
                    .iter()
                    .map(|f| super::git::printable(f))
                    .collect(),
                with,
            }));
        }
        let head = self
            .in_worktree(
                "reading the combination",
                admin,
                worktree,
                &["rev-parse", "HEAD"],
            )
            .await?;
        Ok(Ok(head))
    }

    /// Whether `commit` changed any of `files` since it left `base`'s history (literal paths, never patterns).
    async fn touches(&self, git_dir: &str, base: &str, commit: &str, files: &[String]) -> bool {
        let range = format!("{base}...{commit}");
        let mut args = vec![
            git_dir,
            "--literal-pathspecs",
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--no-renames",
            "--name-only",
            &range,
            "--",
        ];
        args.extend(files.iter().map(String::as_str));
        self.run_git("finding who changed a file", None, &args, None)
            .await
            .is_ok_and(|changed| !changed.is_empty())
    }

    pub(super) async fn has_commit(&self, git_dir: &str, commit: &str) -> bool {
        let object = format!("{commit}^{{commit}}");
        self.run_git(
            "looking for a commit",
            None,
            &[git_dir, "cat-file", "-e", &object],
            None,
        )
        .await
        .is_ok()
    }

    /// Pushes `commit` from `mirror` as `branch` of the configured URL, forced.
    pub(super) async fn push_commit(
        &self,
        repo: &RepoName,
        source: &RepoSource,
        mirror: &Path,
        branch: &BranchName,
        commit: &str,
    ) -> Result<(), WorkspaceError> {
        self.check_token(repo, source)?;
        if commit.len() != 40 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(WorkspaceError::Git {
                what: format!("pushing {}", branch.as_str()),
                detail: format!("{commit:?} is not a commit id"),
            });
        }
        let refspec = format!("+{commit}:refs/heads/{}", branch.as_str());
        let git_dir = format!("--git-dir={}", mirror.to_string_lossy());
        self.run_git(
            &format!("pushing {}", branch.as_str()),
            Some(source),
            &[&git_dir, "push", "--quiet", "--", &source.url, &refspec],
            None,
        )
        .await?;
        Ok(())
    }
}

/// Removes the worktree directories of a plan's earlier combinations (or a task's landings) that a crash left (old enough not to be one
/// under way); the mirror's worktree list forgets them at the next prune.
pub(super) async fn remove_leftovers(plan_dir: &Path) {
    let Ok(mut entries) = tokio::fs::read_dir(plan_dir).await else {
        return;
    };
    while let Ok(Some(entry)) = entries.next_entry().await {
        let old = entry
            .metadata()
            .await
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= LEFTOVER_AGE);
        if old {
            let _ = tokio::fs::remove_dir_all(entry.path()).await;
        }
    }
}
