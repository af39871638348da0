//! What `effects:gitlab` can be asked to do. Stored in `effect.requested` under `action` (`gitlab_note`,
//! `gitlab_award`, `gitlab_open_merge_request`, `gitlab_merge_merge_request`): the names are the log's, so they
//! never change.

use serde::{Deserialize, Serialize};

use crate::effects::ProviderAction;
pub use crate::providers::gitlab::client::Noteable;
use crate::tasks::{BranchName, CommitSha, RepoName};

/// A GitLab call. Everything the call needs is in it, so the call is the same whoever makes it, whenever.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action")]
pub enum GitlabAction {
    /// A note on a GitLab issue or merge request (Markdown), carrying its key's marker so it is made once.
    #[serde(rename = "gitlab_note")]
    Note {
        project: RepoName,
        /// Recorded before merge requests were noted on: an issue.
        #[serde(default)]
        on: Noteable,
        iid: u64,
        body: String,
    },
    /// Opens the task's merge request from `source_branch` to `target_branch` in `project` (a draft when
    /// `draft`), or finds the one already open from that branch of the project itself.
    #[serde(rename = "gitlab_open_merge_request")]
    OpenMergeRequest {
        project: RepoName,
        source_branch: BranchName,
        target_branch: String,
        title: String,
        description: String,
        #[serde(default)]
        draft: bool,
        /// GitLab deletes the source branch when the merge request merges (`[repos] delete_branch`, default
        /// true); a request recorded before the key existed kept it.
        #[serde(default)]
        remove_source_branch: bool,
    },
    /// Merges the task's merge request `iid` at commit `sha` (auto-land): GitLab refuses if its head moved.
    #[serde(rename = "gitlab_merge_merge_request")]
    MergeMergeRequest {
        project: RepoName,
        iid: u64,
        sha: CommitSha,
    },
    /// An emoji award on a note (`eyes`: pidevops has it), as GitHub's reaction on a comment.
    #[serde(rename = "gitlab_award")]
    Award {
        project: RepoName,
        on: Noteable,
        iid: u64,
        note: u64,
        name: String,
    },
}

impl ProviderAction for GitlabAction {
    fn name(&self) -> &'static str {
        match self {
            GitlabAction::Note { .. } => "gitlab_note",
            GitlabAction::Award { .. } => "gitlab_award",
            GitlabAction::OpenMergeRequest { .. } => "gitlab_open_merge_request",
            GitlabAction::MergeMergeRequest { .. } => "gitlab_merge_merge_request",
        }
    }

    fn safe_to_repeat(&self) -> bool {
        match self {
            // The client looks for the key's marker among the notes before making one.
            GitlabAction::Note { .. } => true,
            // An award already given is answered as done (GitLab refuses the same award twice).
            GitlabAction::Award { .. } => true,
            // Looks for the open merge request of the branch before it opens one.
            GitlabAction::OpenMergeRequest { .. } => true,
            // Reads the merge request first: one already merged (by the attempt cut off) is a success.
            GitlabAction::MergeMergeRequest { .. } => true,
        }
    }
}
