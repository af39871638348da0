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

/// The most a run's checkpoints push to the remote, in bytes of new objects (git's own estimate): an agent that
/// rewrites a big file every turn does not make pidevops upload it every turn. Past it, checkpoints are kept in
/// the mirror only (resumable on this machine, not on another).
pub const MAX_PUBLISHED_BYTES: u64 = 64 << 20;

/// What a run's checkpoints have pushed so far.
#[derive(Clone, Debug, Default)]
pub struct Publishing {
    /// The last checkpoint pushed: the next push sends only what is new since.
    last: Option<String>,
    bytes: u64,
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
        publishing: &mut Publishing,
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
            .publish_checkpoint(prepared, &commit, &reference, publishing)
            .await;
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
        super::git::output_of(what, command).await
    }

    /// Pushes the checkpoint to the remote's private ref, for a worker elsewhere, within the run's
    /// [`MAX_PUBLISHED_BYTES`]; `Err` says why it is kept here only.
    async fn publish_checkpoint(
        &self,
        prepared: &Prepared,
        commit: &str,
        reference: &str,
        publishing: &mut Publishing,
    ) -> Result<(), String> {
        let source = &prepared.source;
        self.check_token(&prepared.repo, source)
            .map_err(|e| e.to_string())?;
        let mirror = format!("--git-dir={}", prepared.dirs.mirror.to_string_lossy());
        let not_since = publishing.last.as_deref().unwrap_or(&prepared.base_commit);
        let new_bytes = self
            .run_git(
                "sizing a checkpoint",
                None,
                &[
                    &mirror,
                    "rev-list",
                    "--objects",
                    "--disk-usage",
                    commit,
                    "--not",
                    &prepared.base_commit,
                    not_since,
                ],
                None,
            )
            .await
            .map_err(|e| e.to_string())?
            .parse::<u64>()
            .map_err(|e| format!("git's size of a checkpoint: {e}"))?;
        let total = publishing.bytes.saturating_add(new_bytes);
        if total > MAX_PUBLISHED_BYTES {
            return Err(format!(
                "its run's checkpoints would push {} MiB, more than the {} MiB a run may",
                total >> 20,
                MAX_PUBLISHED_BYTES >> 20
            ));
        }
        let refspec = format!("+{commit}:{reference}");
        self.run_git(
            "publishing a checkpoint",
            Some(source),
            &[&mirror, "push", "--quiet", "--", &source.url, &refspec],
            None,
        )
        .await
        .map_err(|e| e.to_string())?;
        publishing.bytes = total;
        publishing.last = Some(commit.to_owned());
        Ok(())
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

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::Command;

    use super::*;
    use crate::config::dispatch::RepoSource;
    use crate::config::file::CodeHost;
    use crate::tasks::{CommitSha, RepoName, RunId};

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// A bare remote with one commit on `main`.
    fn remote(dir: &Path) -> RepoSource {
        let seed = dir.join("seed");
        std::fs::create_dir(&seed).unwrap();
        git(&seed, &["init", "--quiet", "--initial-branch=main"]);
        std::fs::write(seed.join("README.md"), "# app\n").unwrap();
        git(&seed, &["add", "."]);
        git(&seed, &["commit", "--quiet", "-m", "seed"]);
        git(dir, &["clone", "--quiet", "--bare", "seed", "remote.git"]);
        RepoSource {
            url: format!("file://{}", dir.join("remote.git").display()),
            base: "main".to_owned(),
            forge: None,
            host: CodeHost::Github,
            keeps_branches: false,
        }
    }

    fn machine(root: &Path) -> Workspaces {
        Workspaces::new(
            root,
            super::super::GitCredentials {
                github: None,
                gitlab: None,
            },
        )
        .unwrap()
    }

    fn recorded(saved: &Saved, base: &str, run: RunId) -> Checkpoint {
        let sha = |s: &str| CommitSha::new(s).unwrap();
        Checkpoint {
            run,
            commit: sha(&saved.commit),
            head: sha(&saved.head),
            base: sha(base),
            turn: 1,
            at: chrono::Utc::now(),
            files: saved.files.clone(),
            changed: 1,
        }
    }

    #[tokio::test]
    async fn a_checkpoint_is_restored_on_another_machine_and_one_past_the_publish_budget_stays_here(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let source = remote(dir.path());
        let repo: RepoName = "acme/app".parse().unwrap();
        let task = "T-7".parse::<TaskId>().unwrap();
        let (here, there) = (
            machine(&dir.path().join("here")),
            machine(&dir.path().join("there")),
        );
        let first = RunId(uuid::Uuid::now_v7());
        let prepared = here.prepare(&repo, &source, task, first).await.unwrap();
        let mut publishing = Publishing::default();
        // Nothing changed: nothing saved.
        let none = here
            .checkpoint(&prepared, task, None, &mut publishing)
            .await;
        assert_eq!(none.unwrap(), None);
        std::fs::write(prepared.dirs.worktree.join("notes.md"), "turn 1\n").unwrap();
        let saved = here
            .checkpoint(&prepared, task, None, &mut publishing)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(saved.files, ["notes.md"]);
        assert_eq!(saved.published, Ok(()));
        assert_eq!(saved.head, prepared.base_commit);
        // The agent's own branch and index are untouched: the checkpoint is beside them.
        let branch = git(&prepared.dirs.worktree, &["rev-parse", "HEAD"]);
        assert_eq!(branch, prepared.base_commit);
        // Unchanged since: not saved again.
        let again = here
            .checkpoint(&prepared, task, Some(&saved.tree), &mut publishing)
            .await
            .unwrap();
        assert_eq!(again, None);
        let checkpoint = recorded(&saved, &prepared.base_commit, first);

        // Another machine: its own mirror, the checkpoint from the remote's ref.
        let second = RunId(uuid::Uuid::now_v7());
        let mut resumed = there.prepare(&repo, &source, task, second).await.unwrap();
        there
            .restore(&mut resumed, task, &checkpoint)
            .await
            .unwrap();
        let notes = std::fs::read_to_string(resumed.dirs.worktree.join("notes.md")).unwrap();
        assert_eq!(notes, "turn 1\n");
        assert_eq!(resumed.base_commit, prepared.base_commit);

        // A recorded commit that is nowhere (a stranger's rewrite, a lost mirror): refused, and the worktree goes
        // back to the base with nothing else in it.
        let mut forged = checkpoint.clone();
        forged.commit = CommitSha::new(&"e".repeat(40)).unwrap();
        let third = RunId(uuid::Uuid::now_v7());
        let mut refused = there.prepare(&repo, &source, task, third).await.unwrap();
        let error = there
            .restore(&mut refused, task, &forged)
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("neither in the mirror"),
            "{error}"
        );
        there.start_over(&refused).await.unwrap();
        assert!(!refused.dirs.worktree.join("notes.md").exists());

        // Past the run's publish budget: kept here only, and said so.
        // Random bytes: git cannot compress them under the budget.
        let mut big = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(
                std::fs::File::open("/dev/urandom").unwrap(),
                MAX_PUBLISHED_BYTES + (1 << 20),
            ),
            &mut big,
        )
        .unwrap();
        std::fs::write(prepared.dirs.worktree.join("big.bin"), big).unwrap();
        let heavy = here
            .checkpoint(&prepared, task, Some(&saved.tree), &mut publishing)
            .await
            .unwrap()
            .unwrap();
        let why = heavy.published.unwrap_err();
        assert!(why.contains("more than the 64 MiB a run may"), "{why}");
        let on_remote = git(
            &dir.path().join("remote.git"),
            &["rev-parse", &checkpoint_ref(task)],
        );
        assert_eq!(
            on_remote, saved.commit,
            "the remote keeps the last one published"
        );
        let mirror = format!("--git-dir={}", here.mirror_path(&repo).display());
        let kept = git(dir.path(), &[&mirror, "rev-parse", &checkpoint_ref(task)]);
        assert_eq!(kept, heavy.commit, "this machine keeps it");
    }
}
