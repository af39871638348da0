//! Workspaces under `WORKSPACE_ROOT`: one cached bare mirror per repository (fetched before each run) and one git
//! worktree per attempt, on branch `pidevops/<task>`, fresh from the base branch.
//!
//! ```text
//! <root>/mirrors/<owner>/<name>.git          bare clone; remote branches under refs/remotes/origin/*
//! <root>/runs/<task>/<run>/worktree/         the agent's working directory (the only place it may write)
//! <root>/runs/<task>/<run>/home/, tmp/       the agent's HOME and TMPDIR
//! <root>/runs/<task>/<run>/agent.log         everything it printed
//! <root>/runs/<task>/<run>/prompt.md         the prompt, for `{prompt_file}`
//! ```
//!
//! Every path is built from a validated `RepoName`, `TaskId` and `RunId`, none of which can hold `..` or `/`
//! beyond the owner/name split, so nothing lands outside the root. `GITHUB_TOKEN` reaches git only through the
//! environment of the git processes this module starts (`GIT_CONFIG_*`), never a file, a URL or an argv; and git
//! runs with hooks off and the remote URL given explicitly, so nothing an agent leaves in the repository can make
//! pidevops's own git run its code or send the token elsewhere.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use base64::Engine as _;
use secrecy::{ExposeSecret, SecretString};
use tokio::process::Command;
use tokio::sync::Mutex;

use super::config::RepoSource;
use crate::tasks::{BranchName, RepoName, RunId, TaskId};

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("{what} failed: {detail}")]
    Git { what: String, detail: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{repo} is cloned from {url}, which needs GITHUB_TOKEN, and it is not set")]
    NoToken { repo: RepoName, url: String },
}

/// The directories of one attempt.
#[derive(Clone, Debug)]
pub struct RunDirs {
    pub dir: PathBuf,
    pub worktree: PathBuf,
    pub home: PathBuf,
    pub tmp: PathBuf,
    pub log: PathBuf,
    pub prompt: PathBuf,
    /// The repository's mirror (git writes its objects there when the agent commits).
    pub mirror: PathBuf,
}

/// A worktree ready for the agent.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub dirs: RunDirs,
    /// The base branch's commit the worktree starts from: "no changes" means HEAD is still this and nothing is
    /// left uncommitted.
    pub base_commit: String,
    pub branch: BranchName,
    pub repo: RepoName,
    pub source: RepoSource,
}

/// What `gc` did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct GcReport {
    pub removed: usize,
    pub kept: usize,
    pub errors: usize,
}

#[derive(Clone)]
pub struct Workspaces {
    root: PathBuf,
    token: Option<SecretString>,
    /// One lock per repository: git serialises writes to a repository with lock files and fails (not waits) on
    /// contention, so fetches and worktree changes take turns here instead.
    locks: Arc<std::sync::Mutex<HashMap<RepoName, Arc<Mutex<()>>>>>,
}

impl Workspaces {
    /// Creates the root if needed. The root is made absolute so a worktree's paths never depend on a cwd.
    pub fn new(root: &Path, token: Option<SecretString>) -> Result<Self, WorkspaceError> {
        let io = |source| WorkspaceError::Io {
            path: root.to_owned(),
            source,
        };
        std::fs::create_dir_all(root.join("runs")).map_err(io)?;
        std::fs::create_dir_all(root.join("mirrors")).map_err(io)?;
        std::fs::create_dir_all(root.join(".home")).map_err(io)?;
        let root = root.canonicalize().map_err(io)?;
        Ok(Self {
            root,
            token,
            locks: Arc::default(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn mirror_path(&self, repo: &RepoName) -> PathBuf {
        self.root
            .join("mirrors")
            .join(repo.owner())
            .join(format!("{}.git", repo.name()))
    }

    pub fn run_dirs(&self, repo: &RepoName, task: TaskId, run: RunId) -> RunDirs {
        let dir = self
            .root
            .join("runs")
            .join(task.to_string())
            .join(run.to_string());
        RunDirs {
            worktree: dir.join("worktree"),
            home: dir.join("home"),
            tmp: dir.join("tmp"),
            log: dir.join("agent.log"),
            prompt: dir.join("prompt.md"),
            mirror: self.mirror_path(repo),
            dir,
        }
    }

    fn lock(&self, repo: &RepoName) -> Arc<Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.entry(repo.clone()).or_default().clone()
    }

    /// A git command with a clean environment: no inherited `GIT_*`, no global or system config, no prompts, no
    /// hooks, and the token (when the source needs it) as an HTTP header in git's own environment.
    fn git(&self, source: Option<&RepoSource>) -> Command {
        let mut command = Command::new("git");
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.root.join(".home"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_AUTHOR_NAME", "pidevops")
            .env("GIT_AUTHOR_EMAIL", "pidevops@localhost")
            .env("GIT_COMMITTER_NAME", "pidevops")
            .env("GIT_COMMITTER_EMAIL", "pidevops@localhost")
            .args([
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "protocol.ext.allow=never",
            ])
            .stdin(Stdio::null())
            .kill_on_drop(true);
        // Callers check `needs_github_token` against a missing token first (`check_token`), with the repository
        // to name in the error.
        if let (Some(_), Some(token)) = (source.filter(|s| s.needs_github_token()), &self.token) {
            let basic = base64::engine::general_purpose::STANDARD
                .encode(format!("x-access-token:{}", token.expose_secret()));
            command
                .env("GIT_CONFIG_COUNT", "1")
                .env("GIT_CONFIG_KEY_0", "http.extraHeader")
                .env(
                    "GIT_CONFIG_VALUE_0",
                    format!("Authorization: Basic {basic}"),
                );
        }
        command
    }

    fn check_token(&self, repo: &RepoName, source: &RepoSource) -> Result<(), WorkspaceError> {
        if source.needs_github_token() && self.token.is_none() {
            return Err(WorkspaceError::NoToken {
                repo: repo.clone(),
                url: source.url.clone(),
            });
        }
        Ok(())
    }

    async fn run_git(
        &self,
        what: &str,
        source: Option<&RepoSource>,
        args: &[&str],
        cwd: Option<&Path>,
    ) -> Result<String, WorkspaceError> {
        let mut command = self.git(source);
        command.args(args);
        if let Some(cwd) = cwd {
            command.current_dir(cwd);
        }
        let output = command.output().await.map_err(|e| WorkspaceError::Git {
            what: what.to_owned(),
            detail: format!("cannot run git: {e}"),
        })?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
        } else {
            let stderr = String::from_utf8_lossy(&output.stderr);
            Err(WorkspaceError::Git {
                what: what.to_owned(),
                detail: format!("{} ({})", stderr.trim(), output.status),
            })
        }
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

    /// A fresh worktree for this attempt. Worktrees of the task's earlier attempts are removed first: a task
    /// has one live attempt at a time (the claim guarantees it), and its branch can be checked out only once.
    pub async fn prepare(
        &self,
        repo: &RepoName,
        source: &RepoSource,
        task: TaskId,
        run: RunId,
    ) -> Result<Prepared, WorkspaceError> {
        let lock = self.lock(repo);
        let _guard = lock.lock().await;
        let mirror = self.refresh_mirror(repo, source).await?;
        let dirs = self.run_dirs(repo, task, run);
        let git_dir = format!("--git-dir={}", mirror.to_string_lossy());
        self.remove_task_worktrees(&git_dir, task, Some(run))
            .await?;
        for dir in [&dirs.dir, &dirs.home, &dirs.tmp] {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|source| WorkspaceError::Io {
                    path: dir.clone(),
                    source,
                })?;
        }
        let base_ref = format!("refs/remotes/origin/{}", source.base);
        let base_commit = self
            .run_git(
                &format!("finding the base branch {:?}", source.base),
                None,
                &[
                    &git_dir,
                    "rev-parse",
                    "--verify",
                    "--quiet",
                    &format!("{base_ref}^{{commit}}"),
                ],
                None,
            )
            .await
            .map_err(|_| WorkspaceError::Git {
                what: "finding the base branch".to_owned(),
                detail: format!("{} has no branch {:?}", source.url, source.base),
            })?;
        let branch = task.branch();
        let worktree = dirs.worktree.to_string_lossy().into_owned();
        self.run_git(
            "adding the worktree",
            None,
            &[
                &git_dir,
                "worktree",
                "add",
                "--quiet",
                "-B",
                branch.as_str(),
                &worktree,
                &base_commit,
            ],
            None,
        )
        .await?;
        Ok(Prepared {
            dirs,
            base_commit,
            branch,
            repo: repo.clone(),
            source: source.clone(),
        })
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
                let path = path.to_string_lossy().into_owned();
                self.run_git(
                    "removing an earlier attempt's worktree",
                    None,
                    &[git_dir, "worktree", "remove", "--force", &path],
                    None,
                )
                .await?;
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

    /// Commits whatever the agent left (its own commits included) and returns the new HEAD, or `None` when the
    /// worktree is exactly the base: the run made no change.
    pub async fn commit(
        &self,
        prepared: &Prepared,
        message: &str,
    ) -> Result<Option<String>, WorkspaceError> {
        let cwd = Some(prepared.dirs.worktree.as_path());
        self.run_git("staging the agent's changes", None, &["add", "--all"], cwd)
            .await?;
        let staged = self
            .run_git(
                "listing the agent's changes",
                None,
                &["diff", "--cached", "--name-only"],
                cwd,
            )
            .await?;
        if !staged.is_empty() {
            self.run_git(
                "committing the agent's changes",
                None,
                &["commit", "--quiet", "--no-verify", "-m", message],
                cwd,
            )
            .await?;
        }
        let head = self
            .run_git("reading HEAD", None, &["rev-parse", "HEAD"], cwd)
            .await?;
        Ok((head != prepared.base_commit).then_some(head))
    }

    /// Pushes the attempt's branch. Forced: each attempt starts again from the base, so it replaces the last.
    pub async fn push(&self, prepared: &Prepared) -> Result<(), WorkspaceError> {
        self.check_token(&prepared.repo, &prepared.source)?;
        let refspec = format!("+HEAD:refs/heads/{}", prepared.branch.as_str());
        self.run_git(
            &format!("pushing {}", prepared.branch.as_str()),
            Some(&prepared.source),
            &["push", "--quiet", "--", &prepared.source.url, &refspec],
            Some(&prepared.dirs.worktree),
        )
        .await?;
        Ok(())
    }

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
