//! The hand-off to the agent: its worktree's link to pidevops's administrative directory is replaced by a
//! repository of its own, so nothing it writes there is ever read as pidevops's git.

use std::path::Path;

use super::{remove_any, Prepared, WorkspaceError, Workspaces};

impl Workspaces {
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
}
