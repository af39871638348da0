//! What `effects:github` can be asked to do. Stored in `effect.requested` under `action` (`github_comment`, …):
//! the names are the log's, so they never change.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::effects::ProviderAction;
use crate::tasks::{BranchName, CommitSha, MergeMethod, RepoName};

/// A GitHub call. Everything the call needs is in it, so the call is the same whoever makes it, whenever.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action")]
pub enum GithubAction {
    /// Opens the task's pull request from `head` to `base`, or finds the one already open.
    #[serde(rename = "github_open_pull_request")]
    OpenPullRequest {
        repo: RepoName,
        head: BranchName,
        base: String,
        title: String,
        body: String,
    },
    /// Comments on an issue (or pull request). The body carries a hidden marker naming the effect, so a repeat
    /// finds the comment it made instead of posting it again.
    #[serde(rename = "github_comment")]
    Comment {
        repo: RepoName,
        number: u64,
        body: String,
        /// Comments updated since this time are searched for the marker (the request's time, less a margin).
        since: DateTime<Utc>,
    },
    /// Reacts to an issue or pull request comment (`eyes`: pidevops has it). GitHub keeps one reaction per account
    /// and content, so a repeat changes nothing.
    #[serde(rename = "github_reaction")]
    Reaction {
        repo: RepoName,
        comment: u64,
        content: String,
    },
    /// Merges the task's pull request at commit `sha` (auto-land), with `method` or the repository's allowed one.
    #[serde(rename = "github_merge_pull_request")]
    MergePullRequest {
        repo: RepoName,
        number: u64,
        sha: CommitSha,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        method: Option<MergeMethod>,
    },
    /// Deletes pidevops's own branch of a task done or cancelled (`branch`, always the task's `pidevops/<task>`,
    /// in the task's own repository), only while its head is one of `commits`: the commits pidevops recorded for
    /// the task (its runs' pushes, a plan's combinations). A head that is anything else is kept, and why is said.
    #[serde(rename = "github_delete_branch")]
    DeleteBranch {
        repo: RepoName,
        branch: BranchName,
        commits: Vec<CommitSha>,
    },
    /// Closes the task's pull request unmerged (`stale_action = "close"`).
    #[serde(rename = "github_close_pull_request")]
    ClosePullRequest { repo: RepoName, number: u64 },
}

impl ProviderAction for GithubAction {
    fn name(&self) -> &'static str {
        match self {
            GithubAction::OpenPullRequest { .. } => "github_open_pull_request",
            GithubAction::Comment { .. } => "github_comment",
            GithubAction::Reaction { .. } => "github_reaction",
            GithubAction::MergePullRequest { .. } => "github_merge_pull_request",
            GithubAction::DeleteBranch { .. } => "github_delete_branch",
            GithubAction::ClosePullRequest { .. } => "github_close_pull_request",
        }
    }

    fn safe_to_repeat(&self) -> bool {
        match self {
            // Looks for the open pull request of the branch before it opens one.
            GithubAction::OpenPullRequest { .. } => true,
            // Looks for its marker among the recent comments before it posts.
            GithubAction::Comment { .. } => true,
            // GitHub answers a repeated reaction with the one there.
            GithubAction::Reaction { .. } => true,
            // Reads the pull request first: one already merged (by the attempt cut off) is a success, not a merge.
            GithubAction::MergePullRequest { .. } => true,
            // Reads the branch first: one gone already (deleted by the attempt cut off) is a success.
            GithubAction::DeleteBranch { .. } => true,
            // Reads the pull request first: one closed already is left as it is.
            GithubAction::ClosePullRequest { .. } => true,
        }
    }
}
