//! Workspaces under `WORKSPACE_ROOT`: one cached bare mirror per repository (fetched before each run) and one git
//! worktree per attempt, on branch `pidevops/<task>`, fresh from the base branch.
//!
//! ```text
//! <root>/mirrors/<owner>/<name>.git          bare clone; remote branches under refs/remotes/origin/*
//! <root>/runs/<task>/<run>/worktree/         the agent's working directory (the only place it may write)
//! <root>/runs/<task>/<run>/home/, tmp/       the agent's HOME and TMPDIR
//! <root>/runs/<task>/<run>/agent.log         everything it printed
//! <root>/runs/<task>/<run>/prompt.md         the prompt, for `{prompt_file}`
//! <root>/runs/<task>/<run>/diff.json, .patch what the attempt changed (`diff.rs`), for the task's page
//! <root>/combine/<plan>/<uuid>/worktree/     pidevops's own worktree merging a plan's items (`combine.rs`)
//! <root>/land/<task>/<uuid>/repo.git         pidevops's own clean room landing a task on its base (`land.rs`)
//! <root>/refresh/<task>/<uuid>/repo.git      pidevops's own clean room refreshing a task's branch (`refresh.rs`)
//! <root>/refresh-diffs/<task>/<commit>.json  what a refresh (or a conflict's resolution) changed on the pull
//!                                            request's own diff, for the task's page (`remerge.rs`)
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
//!
//! One job per file, each adding to the one `Workspaces` (its state lives here, so the parts share it without
//! widening its fields beyond this module):
//! - `git.rs`       pidevops's own git: a clean environment, the token scoped to the remote's host
//! - `mirror.rs`    the bare mirror: clone, fetch (once for runs starting together), the base commit, push
//! - `worktree.rs`  a run's worktree: prepared on the task's branch (a spare, or a checkout), committed
//! - `handoff.rs`   the agent's own repository in its worktree (`hand_to_agent`)
//! - `spares.rs`    spare worktrees made ahead, and finished ones reset and reused in a new directory
//! - `diff.rs`      an attempt's diff from its base to its commit, recorded next to its log (capped); its changes
//! - `links.rs`     the commit's symbolic links a changed link's chain meets, their targets read
//! - `combine.rs`   a plan's items merged at their recorded commits into `pidevops/<plan>` and pushed
//! - `land.rs`      a task's recorded commit merged into the base and pushed with a lease, in a clean room
//! - `refresh.rs`   a task's pushed commit rebased onto (merged with) a moved base, pushed leased on that commit
//! - `remerge.rs`   what a refresh's commit changed against the plain merge of its commit and base, recorded
//! - `gc.rs`        run directories past the TTL, a previous process's spares, worktree lists pruned

mod checkpoint;
mod combine;
pub mod diff;
mod gc;
mod git;
mod handoff;
mod land;
mod links;
mod mirror;
mod refresh;
mod remerge;
mod resolve;
mod spares;
mod worktree;

pub use checkpoint::{checkpoint_ref, Publishing, Saved, MAX_PUBLISHED_BYTES};
pub use combine::{CombineRequest, Combined, Combiner};
pub use gc::GcReport;
pub use land::{BranchLeft, LandRequest, LandResult};
pub use refresh::{RefreshRequest, RefreshResult};
pub use remerge::{read_remerge, RemergeDiff, REMERGE_CAP};
pub use resolve::LeasedPush;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use secrecy::SecretString;
use tokio::sync::Mutex;

use crate::config::dispatch::RepoSource;
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
    #[error("{repo} is cloned from {url}, which needs {variable}, and it is not set")]
    NoToken {
        repo: RepoName,
        url: String,
        variable: &'static str,
    },
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

/// What pidevops's own git may present, each credential to its own host only, in git's environment (never an
/// agent's): `GITHUB_TOKEN` to github.com remotes, `GITLAB_TOKEN` to GitLab-hosted repositories' remotes on
/// `GITLAB_URL`'s host. Start-up builds it from the providers' settings.
#[derive(Clone, Default)]
pub struct GitCredentials {
    pub github: Option<SecretString>,
    pub gitlab: Option<GitlabCredential>,
}

/// `GITLAB_TOKEN`, and the instance it is for (`GITLAB_URL`): sent to that instance's origin only.
#[derive(Clone)]
pub struct GitlabCredential {
    pub url: String,
    pub token: SecretString,
}

impl std::fmt::Debug for GitCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitCredentials")
            .field("github", &self.github.is_some())
            .field("gitlab", &self.gitlab.as_ref().map(|g| g.url.as_str()))
            .finish()
    }
}

#[derive(Clone)]
pub struct Workspaces {
    root: PathBuf,
    credentials: GitCredentials,
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
    pub fn new(root: &Path, credentials: GitCredentials) -> Result<Self, WorkspaceError> {
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
            credentials,
            repos: Arc::default(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `mirrors/<namespace>/<name>.git`, two levels whatever the namespace's depth (`group+sub`), so gc finds
    /// every mirror where it looks and no name's directory is inside another's.
    pub fn mirror_path(&self, repo: &RepoName) -> PathBuf {
        self.root
            .join("mirrors")
            .join(repo.namespace_dir())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nested_group_s_mirror_and_spares_stay_at_the_depth_gc_walks() {
        let dir = tempfile::tempdir().unwrap();
        let workspaces = Workspaces::new(dir.path(), GitCredentials::default()).unwrap();
        let root = workspaces.root().to_owned();
        let github: RepoName = "acme/api".parse().unwrap();
        assert_eq!(
            workspaces.mirror_path(&github),
            root.join("mirrors/acme/api.git"),
            "GitHub's mirrors stay where they were"
        );
        let nested: RepoName = "group/sub/api".parse().unwrap();
        let mirror = workspaces.mirror_path(&nested);
        assert_eq!(mirror, root.join("mirrors/group+sub/api.git"));
        // `group/sub`'s project `api` and `group`'s project `sub` never share a directory.
        let sibling: RepoName = "group/sub".parse().unwrap();
        assert!(!mirror.starts_with(workspaces.mirror_path(&sibling)));
        let spare = workspaces.new_spare_path(&nested);
        assert_eq!(
            spare.parent(),
            Some(root.join("spares/group+sub/api").as_path())
        );
        for path in [&mirror, &spare] {
            assert!(path.starts_with(&root));
            assert!(path.components().all(|c| matches!(
                c,
                std::path::Component::Normal(_) | std::path::Component::RootDir
            )));
        }
    }
}
