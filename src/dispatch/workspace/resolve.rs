//! A conflict attempt's git (`RunPurpose::Resolve`, issue 33): the attempt's worktree put on the commit pidevops
//! pushed for review with the base the refresh met merged in and not committed, so the agent finds git's markers;
//! afterwards the markers looked for in what it left, and the resolution pushed leased on that commit.
//!
//! Everything here is pidevops's own git on its own administrative directory and the mirror: what the agent wrote
//! in its `.git` is never read. The merge commit's parents are what pidevops merged (its `MERGE_HEAD` lives in
//! the worktree's administrative directory, which the agent cannot reach), checked again before the push.

use super::{Prepared, WorkspaceError, Workspaces};
use crate::config::dispatch::RepoSource;
use crate::dispatch::prompt::{BaseCommit, MAX_BASE_COMMITS};
use crate::tasks::{BranchName, RepoName};

/// The most conflicted paths whose content is searched for markers (the rest are named as unchecked).
const MAX_MARKER_FILES: usize = 200;

/// How a leased push of a resolution ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeasedPush {
    Pushed,
    /// Someone else pushed to the branch: it is at `found` (or gone), not at the lease; nothing was pushed.
    Refused {
        found: Option<String>,
    },
}

impl Workspaces {
    /// Puts `prepared`'s worktree on `from` with `base` merged in, not committed, and returns every conflicted
    /// path (none: the merge went through cleanly, and the agent still checks it). Afterwards "no change" means
    /// the worktree is `from`'s.
    pub async fn start_merge(
        &self,
        prepared: &mut Prepared,
        from: &str,
        base: &str,
    ) -> Result<Vec<String>, WorkspaceError> {
        let mirror = format!("--git-dir={}", prepared.dirs.mirror.to_string_lossy());
        for (what, commit) in [("the commit pidevops pushed", from), ("the base", base)] {
            if !self.has_commit(&mirror, commit).await {
                return Err(WorkspaceError::Git {
                    what: "preparing the conflict attempt".to_owned(),
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
        let merged = self
            .in_worktree(
                "merging the base",
                &admin,
                &worktree,
                &["merge", "--no-commit", "--no-ff", "--quiet", base],
            )
            .await;
        let files = self.unmerged(&admin, &worktree).await?;
        if let Err(error) = merged {
            if files.is_empty() {
                return Err(error);
            }
        }
        prepared.base_commit = from.to_owned();
        Ok(files)
    }

    /// The base's commits that touched `files` since `from` left it, newest first, at most
    /// [`MAX_BASE_COMMITS`]: their short id, subject and author, for the prompt. Never fatal: none on an error.
    pub async fn base_commits(
        &self,
        prepared: &Prepared,
        from: &str,
        base: &str,
        files: &[String],
    ) -> Vec<BaseCommit> {
        let mirror = format!("--git-dir={}", prepared.dirs.mirror.to_string_lossy());
        let range = format!("{from}..{base}");
        let count = format!("-n{MAX_BASE_COMMITS}");
        let mut args = vec![
            mirror.as_str(),
            "log",
            "--no-color",
            "--format=%h%x00%s%x00%an",
            &count,
            &range,
            "--",
        ];
        args.extend(files.iter().take(MAX_MARKER_FILES).map(String::as_str));
        let listed = self
            .run_git("reading the base's commits", None, &args, None)
            .await
            .unwrap_or_default();
        listed
            .lines()
            .filter_map(|line| {
                let mut parts = line.splitn(3, '\0');
                Some(BaseCommit {
                    short: parts.next()?.to_owned(),
                    subject: parts.next()?.to_owned(),
                    author: parts.next()?.to_owned(),
                })
            })
            .collect()
    }

    /// Why `commit` is not the resolution pidevops asked for, if it is not: its parents are not exactly `from`
    /// and `base`, or a conflicted path still holds a marker line (`<<<<<<<`, `=======`, `>>>>>>>` at the start
    /// of a line), read from the commit's objects, not from the worktree.
    pub async fn unresolved(
        &self,
        prepared: &Prepared,
        commit: &str,
        from: &str,
        base: &str,
        files: &[String],
    ) -> Result<Option<String>, WorkspaceError> {
        let mirror = format!("--git-dir={}", prepared.dirs.mirror.to_string_lossy());
        let parents = self
            .run_git(
                "reading the merge's parents",
                None,
                &[&mirror, "rev-list", "--parents", "-n", "1", commit],
                None,
            )
            .await?;
        let parents: Vec<&str> = parents.split_whitespace().skip(1).collect();
        if parents != [from, base] {
            return Ok(Some(format!(
                "the commit is not the merge of {} and {} pidevops started (its parents: {})",
                &from[..7],
                &base[..7],
                parents.join(", ")
            )));
        }
        let mut marked = Vec::new();
        for file in files.iter().take(MAX_MARKER_FILES) {
            let object = format!("{commit}:{file}");
            // Deleted in the resolution: nothing left to hold a marker.
            let Ok(text) = self
                .run_git(
                    "reading a resolved file",
                    None,
                    &[&mirror, "cat-file", "-p", &object],
                    None,
                )
                .await
            else {
                continue;
            };
            if has_markers(&text) {
                marked.push(super::git::printable(file));
            }
        }
        if marked.is_empty() {
            return Ok(None);
        }
        let mut named = marked
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if marked.len() > 20 {
            named.push_str(&format!(" and {} more", marked.len() - 20));
        }
        Ok(Some(format!(
            "conflict markers (<<<<<<<, =======, >>>>>>>) are left in {named}; nothing was pushed"
        )))
    }

    /// Pushes `commit` as the attempt's branch, leased on `lease` (the commit pidevops pushed before): a branch
    /// someone else pushed to since is never overwritten, and is reported with what it holds now.
    pub async fn push_leased(
        &self,
        prepared: &Prepared,
        commit: &str,
        lease: &str,
    ) -> Result<LeasedPush, WorkspaceError> {
        let source = &prepared.source;
        self.check_token(&prepared.repo, source)?;
        let branch_ref = format!("refs/heads/{}", prepared.branch.as_str());
        let lease_arg = format!("--force-with-lease={branch_ref}:{lease}");
        let refspec = format!("{commit}:{branch_ref}");
        let mirror = format!("--git-dir={}", prepared.dirs.mirror.to_string_lossy());
        let what = format!("pushing the resolved {}", prepared.branch.as_str());
        let pushed = self
            .run_git(
                &what,
                Some(source),
                &[
                    &mirror,
                    "push",
                    "--quiet",
                    &lease_arg,
                    "--",
                    &source.url,
                    &refspec,
                ],
                None,
            )
            .await;
        let Err(refused) = pushed else {
            return Ok(LeasedPush::Pushed);
        };
        // Refused: say what the branch holds now (a failure of another kind stays that failure).
        let found = self.remote_branch(prepared).await?;
        match found.as_deref() {
            Some(head) if head == commit => Ok(LeasedPush::Pushed),
            Some(head) if head == lease => Err(refused),
            _ => Ok(LeasedPush::Refused { found }),
        }
    }
}

impl Workspaces {
    /// What `prepared`'s branch holds on the remote now (`None`: it is gone).
    pub async fn remote_branch(
        &self,
        prepared: &Prepared,
    ) -> Result<Option<String>, WorkspaceError> {
        self.remote_head(&prepared.repo, &prepared.source, &prepared.branch)
            .await
    }

    /// What `branch` of `repo` holds on its remote (`source`) now (`None`: it is gone), read through the
    /// repository's mirror, no worktree needed.
    pub async fn remote_head(
        &self,
        repo: &RepoName,
        source: &RepoSource,
        branch: &BranchName,
    ) -> Result<Option<String>, WorkspaceError> {
        self.check_token(repo, source)?;
        let branch_ref = format!("refs/heads/{}", branch.as_str());
        let mirror = format!("--git-dir={}", self.mirror_path(repo).to_string_lossy());
        let listed = self
            .run_git(
                "reading the branch",
                Some(source),
                &[&mirror, "ls-remote", "--", &source.url, &branch_ref],
                None,
            )
            .await?;
        Ok(listed.split_whitespace().next().map(str::to_owned))
    }
}

/// Whether `text` holds a line git's conflict markers start.
fn has_markers(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim_end_matches('\r');
        line == "======="
            || ["<<<<<<<", ">>>>>>>"]
                .iter()
                .any(|m| line == *m || line.starts_with(&format!("{m} ")))
    })
}

#[cfg(test)]
mod tests {
    use super::has_markers;

    #[test]
    fn markers_are_lines_git_starts_with_them() {
        assert!(has_markers(
            "a\n<<<<<<< HEAD\nb\n=======\nc\n>>>>>>> base\n"
        ));
        assert!(has_markers("x\n=======\n"));
        assert!(has_markers(">>>>>>> 1234567 (Base)\r\n"));
        assert!(!has_markers(
            "a\n  <<<<<<< indented\n==========\nb <<<<<<< c\n"
        ));
        assert!(!has_markers("resolved\n"));
    }
}
