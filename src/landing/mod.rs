//! Landing a task in review on a repository that is not on GitHub (its remote a path, `file://` or another git
//! host): `pidevops task land`, `POST /api/tasks/{id}/land`, the task page's Land button, and the `land` loop
//! (`land = "auto"`, `auto.rs`). A GitHub repository's tasks land through their pull requests, a GitLab-hosted
//! one's through their merge requests; this refuses both.
//!
//! What lands is the commit pidevops recorded for the run that put the task in review (its `run.succeeded`),
//! never the remote branch's head (anyone with push access could move `pidevops/<task>`). The git work is
//! `dispatch::workspace::land` (a clean room of our own, fast-forward else a merge commit, the push leased on the
//! base it merged onto); the result is recorded as `task.landed` then `task.completed` (`Command::RecordLanded`).
//!
//! Once recorded, `pidevops/<task>` is deleted on the remote (unless `[repos] delete_branch = false`), only while
//! its head is the recorded commit, by a push leased on it (`Workspaces::delete_landed_branch`); what became of it
//! is logged, and a failure (or its own timeout) never undoes the landing nor counts against its timeout.
//!
//! Exactly once: the git step is idempotent (a base that holds the commit already is "landed", nothing pushed),
//! and the record is a no-op on a done task. A retried request, two racing ones, or a restart between the push and
//! the record all end with one landing on the base and one `task.landed`: the loser of a race finds its lease
//! refused, fetches the new base, finds the commit in it, and records what is there.

pub mod auto;
pub mod base_push;
mod merges;
pub mod queue;
pub mod refresh;
pub mod stale;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::board::{Board, BoardError, Outcome};
use crate::config::dispatch::DispatchConfig;
use crate::config::dispatch::RepoSource;
use crate::dispatch::runs::{self, RunEvent};
use crate::dispatch::workspace::{
    BranchLeft, GitCredentials, LandRequest, LandResult, WorkspaceError, Workspaces,
};
use crate::eventlog::EventLog;
use crate::tasks::{
    Column, Command, CommitSha, GithubRef, GitlabMrRef, RunId, Task, TaskId, GITHUB_PR, GITLAB_MR,
};
use anyhow::Context;

/// Why a task was not landed.
#[derive(Debug, thiserror::Error)]
pub enum LandError {
    #[error("there is no task {0}")]
    NotFound(TaskId),
    #[error(
        "{id}'s repository is on GitHub: its pull request lands it ({}), not pidevops's git; merge it there, or set \
         land = \"auto\" for the repository",
        pr.as_ref().map_or_else(|| "none is open yet".to_owned(), |pr| format!("pull request {pr}"))
    )]
    OnGithub { id: TaskId, pr: Option<GithubRef> },
    #[error(
        "{id}'s repository is on GitLab: its merge request lands it ({}), not pidevops's git; merge it there, or set \
         land = \"auto\" for the repository",
        mr.as_ref().map_or_else(|| "none is open yet".to_owned(), |mr| format!("merge request {mr}"))
    )]
    OnGitlab { id: TaskId, mr: Option<GitlabMrRef> },
    #[error("{0} is a plan: its items land, each on its own")]
    Plan(TaskId),
    #[error("{id} is {column}: only a task in review is landed")]
    NotInReview { id: TaskId, column: Column },
    #[error(
        "{0} is in review but pidevops recorded no pushed commit for it: send it back (retry)"
    )]
    NoCommit(TaskId),
    #[error(
        "{id}'s commit {commit} does not merge with the base at {base} in {files}; nothing was pushed and it stays \
         in review. Send it back (retry) with what to change, or merge it by hand and mark it done"
    )]
    Conflict {
        id: TaskId,
        commit: String,
        base: String,
        files: String,
    },
    #[error(
        "{id}'s recorded commit {commit} is neither on its branch nor on the remote (its branch was moved); nothing \
         was pushed. Send it back (retry) for a new attempt"
    )]
    Missing { id: TaskId, commit: String },
    #[error(transparent)]
    Board(#[from] BoardError),
    #[error("landing {id}: {source}")]
    Git { id: TaskId, source: WorkspaceError },
    #[error("landing {id}: {message}")]
    Store { id: TaskId, message: String },
    #[error(
        "landing {id} took over {} s (fetches, merge, push) and was stopped; nothing was recorded and it stays in \
         review. Try again, or look at the remote",
        after.as_secs()
    )]
    TimedOut { id: TaskId, after: Duration },
}

/// The longest one landing may take (fetches, a merge, the push) from any door: the CLI, the API and the `land`
/// loop (well inside its stale threshold). Its git processes are killed when it is stopped; what it pushed before
/// is found and recorded by the next landing.
pub const LAND_TIMEOUT: Duration = Duration::from_secs(45);

/// What a landing did.
#[derive(Clone, Debug)]
pub struct Landed {
    /// The task's command outcome: `appended` empty when it was landed (or done) already.
    pub outcome: Outcome,
    /// The base's commit that holds the task's, and whether pidevops pushed it now; `None`: the task was done
    /// already.
    pub onto: Option<(CommitSha, bool)>,
}

/// Lands tasks: the board, the log (the runs' recorded commits) and where each repository comes from.
#[derive(Clone)]
pub struct Lander {
    board: Board,
    log: EventLog,
    root: PathBuf,
    credentials: GitCredentials,
    sources: Arc<DispatchConfig>,
    timeout: Duration,
}

impl std::fmt::Debug for Lander {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lander")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl Lander {
    /// `root`: `WORKSPACE_ROOT` (the clean rooms go under `land/`; the mirrors lend their objects).
    pub fn new(
        board: Board,
        log: EventLog,
        root: PathBuf,
        credentials: GitCredentials,
        sources: DispatchConfig,
    ) -> Self {
        Self {
            board,
            log,
            root,
            credentials,
            sources: Arc::new(sources),
            timeout: LAND_TIMEOUT,
        }
    }

    /// The same lander, stopping a landing after `timeout` instead of [`LAND_TIMEOUT`].
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether `task`'s repository lands through GitHub (its pull request) rather than pidevops's git.
    pub fn on_github(&self, task: &Task) -> bool {
        self.sources.source(task.repo()).on_github()
    }

    /// Whether `task`'s repository lands through its code host's review request (a GitHub pull request, a
    /// GitLab merge request) rather than pidevops's git.
    pub fn lands_by_review(&self, task: &Task) -> bool {
        let source = self.sources.source(task.repo());
        source.on_github() || source.on_gitlab()
    }

    /// Lands task `id` (see the module doc); `actor` is recorded on its events. Stopped after the lander's
    /// timeout ([`LandError::TimedOut`]), its git processes killed (they are `kill_on_drop`).
    /// Once recorded, the task's branch is deleted under a timeout of its own: a slow remote there never turns a
    /// recorded landing into a timed-out one.
    pub async fn land(&self, id: TaskId, actor: &str) -> Result<Landed, LandError> {
        let (landed, branch) = tokio::time::timeout(self.timeout, self.land_untimed(id, actor))
            .await
            .unwrap_or(Err(LandError::TimedOut {
                id,
                after: self.timeout,
            }))?;
        if let Some((request, source)) = branch {
            let deleted = async {
                match Workspaces::new(&self.root, self.credentials.clone()) {
                    Ok(workspaces) => delete_branch(&workspaces, &request, &source).await,
                    Err(error) => {
                        tracing::warn!(task = %id, error = %error, "landed branch not deleted")
                    }
                }
            };
            if tokio::time::timeout(self.timeout, deleted).await.is_err() {
                tracing::warn!(task = %id, "landed branch not deleted: timed out");
            }
        }
        Ok(landed)
    }

    /// The landing, and the branch to delete once it is recorded (none when nothing was landed now, or the
    /// repository keeps its branches).
    async fn land_untimed(
        &self,
        id: TaskId,
        actor: &str,
    ) -> Result<(Landed, Option<(LandRequest, RepoSource)>), LandError> {
        let loaded = self.board.load(id).await?.ok_or(LandError::NotFound(id))?;
        let task = &loaded.task;
        if self.on_github(task) {
            return Err(LandError::OnGithub {
                id,
                pr: task.links().get(GITHUB_PR),
            });
        }
        if self.sources.source(task.repo()).on_gitlab() {
            return Err(LandError::OnGitlab {
                id,
                mr: task.links().get(GITLAB_MR),
            });
        }
        if task.is_plan() {
            return Err(LandError::Plan(id));
        }
        match task.column() {
            Column::InReview => {}
            // Landed already (or done by a person): nothing to do, said so.
            Column::Done => {
                return Ok((
                    Landed {
                        outcome: Outcome {
                            task: loaded.task,
                            appended: Vec::new(),
                        },
                        onto: None,
                    },
                    None,
                ))
            }
            column => return Err(LandError::NotInReview { id, column }),
        }
        let run = task.reviewed_run().ok_or(LandError::NoCommit(id))?;
        let commit = self
            .recorded_commit(run)
            .await
            .map_err(|e| LandError::Store {
                id,
                message: format!("{e:#}"),
            })?
            .ok_or(LandError::NoCommit(id))?;
        let source = self.sources.source(task.repo());
        let request = LandRequest {
            repo: task.repo().clone(),
            task: id,
            branch: id.branch(),
            commit: commit.as_str().to_owned(),
        };
        let git = |source| LandError::Git { id, source };
        let workspaces = Workspaces::new(&self.root, self.credentials.clone()).map_err(git)?;
        let (onto, fast_forward, pushed) =
            match workspaces.land(&request, &source).await.map_err(git)? {
                LandResult::Landed {
                    onto,
                    fast_forward,
                    pushed,
                } => (onto, fast_forward, pushed),
                LandResult::Conflict { base, files, total } => {
                    let mut named = files.join(", ");
                    if total > files.len() {
                        named.push_str(&format!(" and {} more", total - files.len()));
                    }
                    return Err(LandError::Conflict {
                        id,
                        commit: commit.short().to_owned(),
                        base: base.chars().take(7).collect(),
                        files: named,
                    });
                }
                LandResult::Missing => {
                    return Err(LandError::Missing {
                        id,
                        commit: commit.short().to_owned(),
                    })
                }
            };
        let onto = CommitSha::new(&onto).map_err(|e| LandError::Store {
            id,
            message: format!("git named the base {e}"),
        })?;
        if pushed {
            tracing::info!(task = %id, onto = onto.short(), fast_forward, "task landed");
        }
        let command = Command::RecordLanded {
            run,
            commit,
            onto: onto.clone(),
            fast_forward,
        };
        let outcome = self.board.execute(id, &command, actor).await?;
        // Recorded first: the branch is only ever deleted once its commit is on the base and the task done.
        let branch = (!source.keeps_branches).then_some((request, source));
        Ok((
            Landed {
                outcome,
                onto: Some((onto, pushed)),
            },
            branch,
        ))
    }

    /// The commit pidevops recorded for run `run` (its `run.succeeded`), from the log.
    async fn recorded_commit(&self, run: RunId) -> anyhow::Result<Option<CommitSha>> {
        let stream = self
            .log
            .store()
            .read_stream(&runs::stream(run))
            .await
            .with_context(|| format!("reading run {run}"))?;
        Ok(stream.iter().rev().find_map(|recorded| {
            match serde_json::from_slice::<RunEvent>(&recorded.body) {
                Ok(RunEvent::Succeeded { commit, .. }) => CommitSha::new(&commit).ok(),
                _ => None,
            }
        }))
    }
}

/// `pidevops/<task>` deleted on the remote once the task landed, leased on the recorded commit
/// (`Workspaces::delete_landed_branch`); what became of it is logged, and a failure never undoes the landing (the
/// branch stays, as with `delete_branch = false`).
async fn delete_branch(workspaces: &Workspaces, request: &LandRequest, source: &RepoSource) {
    let branch = request.branch.as_str();
    match workspaces.delete_landed_branch(request, source).await {
        Ok(BranchLeft::Deleted) => {
            tracing::info!(task = %request.task, branch, "landed branch deleted")
        }
        Ok(BranchLeft::Gone) => {
            tracing::info!(task = %request.task, branch, "landed branch gone already")
        }
        Ok(BranchLeft::Kept { head }) => tracing::warn!(
            task = %request.task,
            branch,
            head = %head,
            "landed branch kept: its head is not the commit pidevops recorded (someone pushed to it)"
        ),
        Err(error) => {
            tracing::warn!(task = %request.task, branch, error = %error, "landed branch not deleted")
        }
    }
}
