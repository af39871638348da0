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
//! beyond the owner/name split, so nothing lands outside the root.
//!
//! **Nothing an agent writes is read as git's configuration or as the way to a repository.** Before the agent
//! starts, its worktree's `.git` link is replaced by a small repository of its own (`hand_to_agent`: its own
//! HEAD, index and objects, the mirror's objects borrowed read-only as an alternate), so its git works and writes
//! only there. pidevops's own git never discovers a repository from the worktree: every command names the
//! worktree's administrative directory inside the mirror (`--git-dir`, recorded when pidevops made the worktree,
//! never read back from it) and the work tree, with system and global config off, hooks and fsmonitor off. The
//! mirror and its administrative directories are out of the agent's sight (see `sandbox.rs`). Commit and push read
//! only the files of the work tree; the push names the configured URL and a commit id, from the mirror itself.
//! `GITHUB_TOKEN` reaches git only through the environment of the git processes this module starts, as a header
//! scoped to the configured remote's own host, never a file, a URL or an argv.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Instant;

use base64::Engine as _;
use secrecy::{ExposeSecret, SecretString};
use tokio::process::Command;
use tokio::sync::Mutex;

use super::config::RepoSource;
use crate::tasks::{BranchName, RepoName, RunId, TaskId};

/// A spare may be made from a fetch this recent: spares are for runs that start later, and each run fetches
/// again and uses a spare only at the base it found. The dispatcher asks for spares on every tick; without this,
/// each ask was a fetch under the repository's lock, in the way of the runs starting.
const SPARE_FETCH_FRESHNESS: std::time::Duration = std::time::Duration::from_secs(2);

/// How long a starting run waits for the spare being made (or a finished worktree being handed back) before it
/// checks out its own. Waiting is the faster path: that checkout started earlier, and a second one at the same
/// time only halves the disk for both.
const WAIT_FOR_SPARE: std::time::Duration = std::time::Duration::from_secs(60);

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
    /// The repository's mirror (the agent borrows its objects, read-only).
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
    /// The worktree's administrative directory in the mirror: pidevops's own git directory for this worktree.
    pub admin: PathBuf,
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
    repos: Arc<std::sync::Mutex<HashMap<RepoName, Arc<RepoState>>>>,
}

/// Per repository: fetches take turns (git fails, rather than waits, on a locked ref), and the spare worktrees.
#[derive(Default)]
struct RepoState {
    /// Held while fetching and while removing an earlier attempt's worktree.
    lock: Mutex<()>,
    /// When the last successful fetch started: a run asking for a fetch after that has to wait for one; a run
    /// that asked before it can use it (so four runs starting together fetch once, not four times).
    last_fetch: std::sync::Mutex<Option<Instant>>,
    /// Worktrees checked out ahead of time at the base, detached, for the next runs to take (see `replenish`).
    spares: std::sync::Mutex<Vec<Spare>>,
    /// Worktrees of runs that are over (their work pushed or their failure recorded): when queued work needs
    /// spares, these are reset to the base and reused, touching only the files the run changed instead of
    /// checking out the whole tree again. The rest wait for gc's TTL. (worktree, administrative directory)
    finished: std::sync::Mutex<Vec<(PathBuf, PathBuf)>>,
    replenishing: std::sync::atomic::AtomicBool,
    /// Woken when a spare is made, a finished worktree is handed back, or a replenisher stops.
    changed: tokio::sync::Notify,
}

#[derive(Clone, Debug)]
struct Spare {
    path: PathBuf,
    commit: String,
    admin: PathBuf,
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
            repos: Arc::default(),
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

    fn state(&self, repo: &RepoName) -> Arc<RepoState> {
        let mut repos = self.repos.lock().unwrap_or_else(|p| p.into_inner());
        repos.entry(repo.clone()).or_default().clone()
    }

    /// Fetches unless a fetch that started after `asked` already succeeded. Called under the repository's lock.
    async fn fetch_since(
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

    async fn base_commit(
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
    async fn take_worktree(
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

    /// `git worktree add` in two steps: the administrative part (the worktree list every git command of the
    /// repository reads) under the repository's lock, then the checkout of every file outside it, in the new
    /// worktree only. git does not make the first step safe against concurrent readers; the second is most of
    /// the time and touches nothing shared. Returns the worktree's administrative directory, read from the link
    /// git has just written (nobody else has touched the new worktree yet).
    async fn add_worktree(
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

    /// Where a new spare worktree of `repo` goes: `<root>/spares/<owner>/<name>/<uuid>`.
    fn new_spare_path(&self, repo: &RepoName) -> PathBuf {
        self.root
            .join("spares")
            .join(repo.owner())
            .join(repo.name())
            .join(uuid::Uuid::now_v7().to_string())
    }

    /// Whether `path` is a spare this process knows (gc removes the others: a previous process's).
    fn is_known_spare(&self, path: &Path) -> bool {
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

    /// A git command with a clean environment: no inherited `GIT_*`, no global or system config, no prompts, no
    /// hooks, no fsmonitor, and the token (when the source needs it) as an HTTP header for the configured remote's
    /// host only, in git's own environment.
    fn git(&self, source: Option<&RepoSource>) -> Command {
        let mut command = Command::new("git");
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.root.join(".home"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_AUTHOR_NAME", "pidevops")
            .env("GIT_AUTHOR_EMAIL", "pidevops@localhost")
            .env("GIT_COMMITTER_NAME", "pidevops")
            .env("GIT_COMMITTER_EMAIL", "pidevops@localhost")
            .args([
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "core.fsmonitor=false",
                "-c",
                "protocol.ext.allow=never",
            ])
            .stdin(Stdio::null())
            .kill_on_drop(true);
        // Callers check `needs_github_token` against a missing token first (`check_token`), with the repository
        // to name in the error.
        if let (Some(source), Some(token)) =
            (source.filter(|s| s.needs_github_token()), &self.token)
        {
            // Scoped to the configured remote's origin: a redirect or a rewritten URL to any other host gets
            // no credential.
            if let Some(origin) = http_origin(&source.url) {
                let basic = base64::engine::general_purpose::STANDARD
                    .encode(format!("x-access-token:{}", token.expose_secret()));
                command
                    .env("GIT_CONFIG_COUNT", "2")
                    .env("GIT_CONFIG_KEY_0", format!("http.{origin}/.extraHeader"))
                    .env(
                        "GIT_CONFIG_VALUE_0",
                        format!("Authorization: Basic {basic}"),
                    )
                    .env("GIT_CONFIG_KEY_1", "http.followRedirects")
                    .env("GIT_CONFIG_VALUE_1", "false");
            }
        }
        command
    }

    /// A git command on one worktree, never discovered from it: pidevops's own administrative directory for it
    /// and its files, named explicitly. What the agent left in the worktree (`.git`, config, hooks) is not read.
    async fn in_worktree(
        &self,
        what: &str,
        admin: &Path,
        worktree: &Path,
        args: &[&str],
    ) -> Result<String, WorkspaceError> {
        let git_dir = format!("--git-dir={}", admin.to_string_lossy());
        let work_tree = format!("--work-tree={}", worktree.to_string_lossy());
        let mut all = vec![git_dir.as_str(), work_tree.as_str()];
        all.extend_from_slice(args);
        self.run_git(what, None, &all, Some(worktree)).await
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

    /// Gives the agent a repository of its own in its worktree, in place of the link to pidevops's: HEAD on the
    /// task's branch at the base, an index of the checkout, its own objects with the mirror's borrowed read-only.
    /// Its `git status`, `diff`, `log` and `commit` work; whatever it does there is never read by pidevops.
    pub async fn hand_to_agent(&self, prepared: &Prepared) -> Result<(), WorkspaceError> {
        let worktree = &prepared.dirs.worktree;
        let dot_git = worktree.join(".git");
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| WorkspaceError::Io { path, source }
        };
        remove_any(&dot_git).await.map_err(io(&dot_git))?;
        let branch_ref = dot_git.join("refs/heads").join(prepared.branch.as_str());
        let base_ref = dot_git
            .join("refs/remotes/origin")
            .join(&prepared.source.base);
        for dir in [
            dot_git.join("objects/info"),
            dot_git.join("refs/tags"),
            branch_ref.parent().unwrap_or(&dot_git).to_owned(),
            base_ref.parent().unwrap_or(&dot_git).to_owned(),
        ] {
            tokio::fs::create_dir_all(&dir).await.map_err(io(&dir))?;
        }
        let files = [
            (
                dot_git.join("HEAD"),
                format!("ref: refs/heads/{}\n", prepared.branch.as_str()),
            ),
            (
                dot_git.join("config"),
                "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
                    .to_owned(),
            ),
            (
                dot_git.join("objects/info/alternates"),
                format!("{}\n", prepared.dirs.mirror.join("objects").display()),
            ),
            (branch_ref, format!("{}\n", prepared.base_commit)),
            (base_ref, format!("{}\n", prepared.base_commit)),
        ];
        for (path, content) in files {
            tokio::fs::write(&path, content).await.map_err(io(&path))?;
        }
        let index = dot_git.join("index");
        tokio::fs::copy(prepared.admin.join("index"), &index)
            .await
            .map_err(io(&index))?;
        Ok(())
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

    /// Pushes `commit` as the attempt's branch, from the mirror, to the configured URL. Forced: each attempt
    /// starts again from the base, so it replaces the last.
    pub async fn push(&self, prepared: &Prepared, commit: &str) -> Result<(), WorkspaceError> {
        self.check_token(&prepared.repo, &prepared.source)?;
        if commit.len() != 40 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(WorkspaceError::Git {
                what: format!("pushing {}", prepared.branch.as_str()),
                detail: format!("{commit:?} is not a commit id"),
            });
        }
        let refspec = format!("+{commit}:refs/heads/{}", prepared.branch.as_str());
        let git_dir = format!("--git-dir={}", prepared.dirs.mirror.to_string_lossy());
        self.run_git(
            &format!("pushing {}", prepared.branch.as_str()),
            Some(&prepared.source),
            &[
                &git_dir,
                "push",
                "--quiet",
                "--",
                &prepared.source.url,
                &refspec,
            ],
            None,
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
                let name = format!(
                    "{}/{}",
                    owner.file_name().to_string_lossy(),
                    repo.file_name().to_string_lossy().trim_end_matches(".git")
                );
                let Ok(name) = name.parse::<RepoName>() else {
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

/// `scheme://host[:port]` of an http(s) URL, for scoping the credential; `None` for other transports.
fn http_origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    if !matches!(scheme, "https" | "http") {
        return None;
    }
    let authority = rest.split('/').next()?;
    // Credentials in the URL itself are not ours to scope.
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    Some(format!("{scheme}://{authority}"))
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

/// Removes a file, a symbolic link (not what it points to) or a directory tree, if there is one.
async fn remove_any(path: &Path) -> std::io::Result<()> {
    match tokio::fs::symlink_metadata(path).await {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(meta) if meta.is_dir() => tokio::fs::remove_dir_all(path).await,
        Ok(_) => tokio::fs::remove_file(path).await,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_credential_is_scoped_to_the_configured_origin() {
        assert_eq!(
            http_origin("https://github.com/acme/app.git").as_deref(),
            Some("https://github.com")
        );
        assert_eq!(
            http_origin("http://127.0.0.1:8080/acme/app.git").as_deref(),
            Some("http://127.0.0.1:8080")
        );
        assert_eq!(http_origin("file:///srv/git/app.git"), None);
        assert_eq!(http_origin("git@github.com:acme/app.git"), None);
        assert_eq!(http_origin("https://user:pw@github.com/acme/app.git"), None);
    }

    #[test]
    fn our_git_reads_no_global_or_system_config_and_sends_the_token_only_to_its_host() {
        let root = tempfile::tempdir().unwrap();
        let workspaces =
            Workspaces::new(root.path(), Some("ghp_secret".to_owned().into())).unwrap();
        let source = RepoSource {
            url: "https://github.com/acme/app.git".to_owned(),
            base: "main".to_owned(),
        };
        let command = workspaces.git(Some(&source));
        let env: HashMap<String, String> = command
            .as_std()
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_str()?.to_owned(), v?.to_str()?.to_owned())))
            .collect();
        assert_eq!(env["GIT_CONFIG_NOSYSTEM"], "1");
        assert_eq!(env["GIT_CONFIG_GLOBAL"], "/dev/null");
        assert_eq!(
            env["GIT_CONFIG_KEY_0"],
            "http.https://github.com/.extraHeader"
        );
        assert!(env["GIT_CONFIG_VALUE_0"].starts_with("Authorization: Basic "));
        assert_eq!(env["GIT_CONFIG_KEY_1"], "http.followRedirects");
        assert_eq!(env["GIT_CONFIG_VALUE_1"], "false");
        let args: Vec<String> = command
            .as_std()
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        for setting in ["core.hooksPath=/dev/null", "core.fsmonitor=false"] {
            assert!(args.contains(&setting.to_owned()), "{args:?}");
        }
        // No token for a source that does not need one.
        let local = RepoSource {
            url: "file:///srv/git/app.git".to_owned(),
            base: "main".to_owned(),
        };
        let command = workspaces.git(Some(&local));
        assert!(!command
            .as_std()
            .get_envs()
            .any(|(k, _)| k.to_string_lossy().starts_with("GIT_CONFIG_KEY")));
    }
}
