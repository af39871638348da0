//! A GitHub comment addressed to pidevops, as intake consumes it (`intake/comments.rs`): who said what, where
//! (`GithubComment`), what it asks (`Ask`, `CommentCommand`) and the stream of its record. Reading a comment event
//! into one is GitHub's part (`providers/github/intake/comment.rs`).

use crate::board::Draft;
use crate::tasks::RepoName;

/// The command prefix; a comment starting with it is for pidevops even when no bot login is configured.
pub const PREFIX: &str = "/pidevops";

/// The stream of one comment's record (`conversation.github_comment`): appended at version 1 only, so a comment
/// delivered again (GitHub's redelivery has a new delivery id) runs nothing twice.
pub fn comment_stream(repo: &RepoName, comment: u64) -> String {
    format!(
        "github-comment:{}:{comment}",
        repo.as_str().to_ascii_lowercase()
    )
}

/// A command of `/pidevops <command>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommentCommand {
    Retry,
    Cancel,
    Approve,
    Status,
}

impl CommentCommand {
    pub const ALL: [CommentCommand; 4] = [Self::Retry, Self::Cancel, Self::Approve, Self::Status];

    pub fn name(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::Cancel => "cancel",
            Self::Approve => "approve",
            Self::Status => "status",
        }
    }

    /// `retry, cancel, approve, status`: what an error reply lists.
    pub fn listed() -> String {
        Self::ALL.map(Self::name).join(", ")
    }
}

/// What an addressed comment asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ask {
    /// Words for the task: a follow-up, or the answer to its question. The mention is stripped.
    Text(String),
    /// `/pidevops <command> [reason]`.
    Command {
        command: CommentCommand,
        reason: Option<String>,
    },
    /// `/pidevops` with no command or one pidevops does not know (the word as typed, maybe empty).
    Unknown(String),
}

/// A comment addressed to pidevops by a trusted author, on an issue or a pull request of an allowed repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GithubComment {
    pub repo: RepoName,
    /// The issue's or pull request's number.
    pub number: u64,
    pub pull_request: bool,
    /// GitHub's id of the comment: the key of its follow-up (`github:comment:<id>`) and of its record.
    pub id: u64,
    pub login: String,
    pub ask: Ask,
    /// On an issue: the task it becomes when it is none yet (the same draft and key a labeled issue makes), or why
    /// it cannot. `None` on a pull request: those are never made tasks from a comment.
    pub draft: Option<Result<(String, Box<Draft>), String>>,
}

impl GithubComment {
    /// The intake key of the issue (`github:owner/name#12`); a pull request's task is found by its link instead.
    pub fn issue_key(&self) -> String {
        format!("github:{}#{}", self.repo, self.number)
    }

    /// `github:comment:<id>`: the follow-up's origin key.
    pub fn origin_key(&self) -> String {
        format!("github:comment:{}", self.id)
    }

    /// `<login> on owner/name#12`: who said it, where.
    pub fn from(&self) -> String {
        format!("{} on {}#{}", self.login, self.repo, self.number)
    }
}
