//! Checkpoints: a running agent's worktree saved by pidevops's own git, and an attempt's worktree put back where
//! one left it.
//!
//! A checkpoint is a commit of everything in the worktree (tracked or not, as the attempt's own commit would take
//! it) whose parent is the worktree's HEAD, made through a private index so the agent's index and branch are left
//! alone. It is kept on `refs/pidevops/checkpoints/<task>` in the mirror and pushed there on the remote, so a
//! worker on another machine can resume it. Only the commit the log recorded is ever restored: whatever the ref
//! holds when it is read (a stranger may push to it) must be that commit, with the recorded parent and base.

use std::path::Path;

use super::{Prepared, WorkspaceError, Workspaces};
use crate::tasks::{Checkpoint, TaskId};

/// Where a task's last checkpoint is kept, in the mirror and on the remote.
pub fn checkpoint_ref(task: TaskId) -> String {
    format!("refs/pidevops/checkpoints/{task}")
}

/// A checkpoint just taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Saved {
    pub commit: String,
    pub head: String,
    /// The saved tree: the next checkpoint is skipped while the worktree still holds it.
    pub tree: String,
    /// The paths changed against the base, as git names them (the agent's choice).
    pub files: Vec<String>,
    /// Whether the remote holds it too (a worker elsewhere can resume it); why not otherwise.
    pub published: Result<(), String>,
}

impl Workspaces {
    /// Saves the worktree as it is now. `None` when nothing changed since `previous_tree` (the last checkpoint's
    /// tree), or nothing at all since the base.
    pub async fn checkpoint(
        &self,
        prepared: &Prepared,
        task: TaskId,
        previous_tree: Option<&str>,
    ) -> Result<Option<Saved>, WorkspaceError> {
        let (admin, worktree) = (&prepared.admin, &prepared.dirs.worktree);
        let index = prepared.dirs.dir.join("checkpoint.index");
        let head = self
            .in_worktree(
                "reading the worktree's HEAD",
                admin,
                worktree,
                &["rev-parse", "--verify", "HEAD^{commit}"],
            )
            .await?;
        let tree = self.tree_of_worktree(prepared, &index, &head).await;
        let _ = tokio::fs::remove_file(&index).await;
        let tree = tree?;
        let base_tree = self
            .in_worktree(
                "reading the base's tree",
                admin,
                worktree,
                &["rev-parse", &format!("{}^{{tree}}", prepared.base_commit)],
            )
            .await?;
        let untouched = head == prepared.base_commit && tree == base_tree;
        if untouched || previous_tree == Some(tree.as_str()) {
            return Ok(None);
        }
        let message = format!("pidevops checkpoint of {task}");
        let commit = self
            .in_worktree(
                "committing a checkpoint",
                admin,
                worktree,
                &["commit-tree", &tree, "-p", &head, "-m", &message],
            )
            .await?;
        let reference = checkpoint_ref(task);
        self.in_worktree(
            "keeping a checkpoint",
            admin,
            worktree,
            &["update-ref", &reference, &commit],
        )
        .await?;
        let changed = self
            .in_worktree(
                "listing a checkpoint's changes",
                admin,
                worktree,
                &["diff", "--name-only", "-z", &prepared.base_commit, &commit],
            )
            .await?;
        let files = changed
            .split('\0')
            .filter(|f| !f.is_empty())
            .map(str::to_owned)
            .collect();
        let published = self
            .publish_checkpoint(prepared, &commit, &reference)
            .await
            .map_err(|e| e.to_string());
        Ok(Some(Saved {
            commit,
            head,
            tree,
            files,
            published,
        }))
    }

    /// The worktree's tree, through a private index (a copy of the worktree's, so unchanged files are not read
    /// again; HEAD's tree where it has none).
    async fn tree_of_worktree(
        &self,
        prepared: &Prepared,
        index: &Path,
        head: &str,
    ) -> Result<String, WorkspaceError> {
        let (admin, worktree) = (&prepared.admin, &prepared.dirs.worktree);
        let _ = tokio::fs::remove_file(index).await;
        let copied = tokio::fs::copy(admin.join("index"), index).await.is_ok();
        if !copied {
            self.indexed(index, admin, worktree, &["read-tree", head])
                .await?;
        }
        self.indexed(index, admin, worktree, &["add", "--all"])
            .await?;
        self.indexed(index, admin, worktree, &["write-tree"]).await
    }

    /// A git command on the worktree with a private index.
    async fn indexed(
        &self,
        index: &Path,
        admin: &Path,
        worktree: &Path,
        args: &[&str],
    ) -> Result<String, WorkspaceError> {
        let what = "saving a checkpoint";
        let mut command = self.git(None);
        command
            .env("GIT_INDEX_FILE", index)
            .arg(format!("--git-dir={}", admin.to_string_lossy()))
            .arg(format!("--work-tree={}", worktree.to_string_lossy()))
            .args(args)
            .current_dir(worktree);
        let output = command.output().await.map_err(|e| WorkspaceError::Git {
            what: what.to_owned(),
            detail: format!("cannot run git: {e}"),
        })?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
        } else {
            Err(WorkspaceError::Git {
                what: what.to_owned(),
                detail: format!(
                    "{} ({})",
                    String::from_utf8_lossy(&output.stderr).trim(),
                    output.status
                ),
            })
        }
    }

    /// Pushes the checkpoint to the remote's private ref, for a worker elsewhere.
    async fn publish_checkpoint(
        &self,
        prepared: &Prepared,
        commit: &str,
        reference: &str,
    ) -> Result<(), WorkspaceError> {
        let source = &prepared.source;
        self.check_token(&prepared.repo, source)?;
        let mirror = format!("--git-dir={}", prepared.dirs.mirror.to_string_lossy());
        let refspec = format!("+{commit}:{reference}");
        self.run_git(
            "publishing a checkpoint",
            Some(source),
            &[&mirror, "push", "--quiet", "--", &source.url, &refspec],
            None,
        )
        .await
        .map(|_| ())
    }

    /// Puts a freshly prepared worktree where `checkpoint` left its attempt: HEAD at the checkpoint's parent,
    /// every file as it was saved. The commit is looked for in the mirror, then on the remote's checkpoint ref;
    /// it must be the recorded commit, its parent the recorded HEAD, and the recorded base an ancestor of that.
    pub async fn restore(
        &self,
        prepared: &mut Prepared,
        task: TaskId,
        checkpoint: &Checkpoint,
    ) -> Result<(), WorkspaceError> {
        let mirror = format!("--git-dir={}", prepared.dirs.mirror.to_string_lossy());
        let commit = checkpoint.commit.as_str();
        let object = format!("{commit}^{{commit}}");
        let have = || async {
            self.run_git(
                "finding a checkpoint",
                None,
                &[&mirror, "rev-parse", "--verify", "--quiet", &object],
                None,
            )
            .await
            .ok()
        };
        let mut found = have().await;
        if found.is_none() {
            // Taken on another machine: the remote's ref, fetched as it is now (checked below, whoever pushed it).
            let source = &prepared.source;
            self.check_token(&prepared.repo, source)?;
            let refspec = format!("+{}:refs/pidevops/fetched/{task}", checkpoint_ref(task));
            let _ = self
                .run_git(
                    "fetching a checkpoint",
                    Some(source),
                    &[&mirror, "fetch", "--quiet", "--", &source.url, &refspec],
                    None,
                )
                .await;
            found = have().await;
        }
        let refused = |detail: String| WorkspaceError::Git {
            what: "restoring a checkpoint".to_owned(),
            detail,
        };
        let Some(found) = found else {
            return Err(refused(format!(
                "commit {} is neither in the mirror nor on the remote's {}",
                checkpoint.commit.short(),
                checkpoint_ref(task)
            )));
        };
        if found != commit {
            return Err(refused(format!(
                "{} names {found}, not the recorded {commit}",
                checkpoint.commit.short()
            )));
        }
        let parent = self
            .run_git(
                "reading a checkpoint's parent",
                None,
                &[&mirror, "rev-parse", "--verify", &format!("{commit}^1")],
                None,
            )
            .await?;
        let parents = self
            .run_git(
                "reading a checkpoint's parents",
                None,
                &[&mirror, "rev-list", "--parents", "-n", "1", commit],
                None,
            )
            .await?;
        if parent != checkpoint.head.as_str() || parents.split_whitespace().count() != 2 {
            return Err(refused(format!(
                "{} is not the recorded checkpoint over {}",
                checkpoint.commit.short(),
                checkpoint.head.short()
            )));
        }
        let descends = self
            .run_git(
                "checking a checkpoint's base",
                None,
                &[
                    &mirror,
                    "merge-base",
                    "--is-ancestor",
                    checkpoint.base.as_str(),
                    checkpoint.head.as_str(),
                ],
                None,
            )
            .await;
        if descends.is_err() {
            return Err(refused(format!(
                "the recorded base {} is not under {}",
                checkpoint.base.short(),
                checkpoint.head.short()
            )));
        }
        let (admin, worktree) = (&prepared.admin, &prepared.dirs.worktree);
        self.in_worktree(
            "restoring a checkpoint",
            admin,
            worktree,
            &["reset", "--hard", "--quiet", commit],
        )
        .await?;
        self.in_worktree(
            "restoring a checkpoint's HEAD",
            admin,
            worktree,
            &["reset", "--quiet", checkpoint.head.as_str()],
        )
        .await?;
        prepared.base_commit = checkpoint.base.as_str().to_owned();
        Ok(())
    }

    /// A worktree a failed restore may have touched, back at its base with nothing else in it.
    pub async fn start_over(&self, prepared: &Prepared) -> Result<(), WorkspaceError> {
        let (admin, worktree) = (&prepared.admin, &prepared.dirs.worktree);
        self.in_worktree(
            "starting over from the base",
            admin,
            worktree,
            &["reset", "--hard", "--quiet", &prepared.base_commit],
        )
        .await?;
        self.in_worktree(
            "starting over from the base",
            admin,
            worktree,
            &["clean", "-ffdxq"],
        )
        .await
        .map(|_| ())
    }

    /// Deletes the task's checkpoint ref, in the mirror and on the remote (gone already is no error).
    pub async fn forget_checkpoints(
        &self,
        prepared: &Prepared,
        task: TaskId,
    ) -> Result<(), WorkspaceError> {
        let mirror = format!("--git-dir={}", prepared.dirs.mirror.to_string_lossy());
        let reference = checkpoint_ref(task);
        let source = &prepared.source;
        self.check_token(&prepared.repo, source)?;
        let fetched = format!("refs/pidevops/fetched/{task}");
        for local in [reference.as_str(), fetched.as_str()] {
            let _ = self
                .run_git(
                    "deleting a checkpoint ref",
                    None,
                    &[&mirror, "update-ref", "-d", local],
                    None,
                )
                .await;
        }
        let remote = self
            .run_git(
                "deleting the remote's checkpoint ref",
                Some(source),
                &[&mirror, "ls-remote", "--", &source.url, &reference],
                None,
            )
            .await?;
        if remote.is_empty() {
            return Ok(());
        }
        self.run_git(
            "deleting the remote's checkpoint ref",
            Some(source),
            &[
                &mirror,
                "push",
                "--quiet",
                "--",
                &source.url,
                &format!(":{reference}"),
            ],
            None,
        )
        .await
        .map(|_| ())
    }
}
