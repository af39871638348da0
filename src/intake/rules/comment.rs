//! A comment addressed to pidevops on a code host (GitHub's issues and pull requests), as intake consumes it
//! (`intake/comments.rs`): who said what, where (`Comment`), on which host (`CodeHost`: what intake needs of it),
//! what it asks (`Ask`, `CommentCommand`) and the stream of its record. Reading a comment event into one is the
//! host's part (GitHub's: `providers/github/intake/comment.rs`, with its `HOST`).

use crate::board::Draft;
use crate::domain::Source;
use crate::projectors::tasks::LinkKind;
use crate::tasks::{GithubRef, LinkKey, RepoName};

/// The command prefix; a comment starting with it is for pidevops even when no bot login is configured.
pub const PREFIX: &str = "/pidevops";

/// What intake needs to know of the code host a comment is on. Each host's rules declare theirs (GitHub's:
/// `providers/github/intake/comment.rs` `HOST`) and hand it over with every comment; the names and streams are
/// stored, so a host's never change.
#[derive(Debug, PartialEq, Eq)]
pub struct CodeHost {
    /// Its source: the actor of what a comment does to a task, and the prefix of its intake and origin keys.
    pub source: Source,
    /// Its name as people say it: a command's record says `by <login> on <name> (owner/name#12)`.
    pub name: &'static str,
    /// The event type of a comment's record (GitHub's: `conversation.github_comment`).
    pub record: &'static str,
    /// The prefix of a comment's record stream (GitHub's: `github-comment:`), see [`CodeHost::comment_stream`].
    pub stream_prefix: &'static str,
    /// The link a task records its pull request under (GitHub's: `github_pr`), and the read model's index of it:
    /// a comment on a pull request finds its task by it.
    pub pull_request: LinkKey<GithubRef>,
    pub pull_request_kind: LinkKind,
}

impl CodeHost {
    /// The stream of one comment's record (`record`): `<stream_prefix><repo, lower case>:<comment id>`, appended at
    /// version 1 only, so a comment delivered again (GitHub's redelivery has a new delivery id) runs nothing
    /// twice.
    pub fn comment_stream(&self, repo: &RepoName, comment: u64) -> String {
        format!(
            "{}{}:{comment}",
            self.stream_prefix,
            repo.as_str().to_ascii_lowercase()
        )
    }
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

/// A comment addressed to pidevops by a trusted author, on an issue or a pull request of an allowed repository
/// of a code host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comment {
    /// The code host it is on (its source: `host.source`).
    pub host: &'static CodeHost,
    pub repo: RepoName,
    /// The issue's or pull request's number.
    pub number: u64,
    pub pull_request: bool,
    /// The host's id of the comment: the key of its follow-up (`<source>:comment:<id>`) and of its record.
    pub id: u64,
    pub login: String,
    pub ask: Ask,
    /// On an issue: the task it becomes when it is none yet (the same draft and key a labeled issue makes), or why
    /// it cannot. `None` on a pull request: those are never made tasks from a comment.
    pub draft: Option<Result<(String, Box<Draft>), String>>,
}

impl Comment {
    /// The intake key of the issue (`<source>:owner/name#12`, GitHub's `github:owner/name#12`); a pull request's
    /// task is found by its link instead.
    pub fn issue_key(&self) -> String {
        format!(
            "{}:{}#{}",
            self.host.source.as_str(),
            self.repo,
            self.number
        )
    }

    /// `<source>:comment:<id>` (`github:comment:<id>`): the follow-up's origin key.
    pub fn origin_key(&self) -> String {
        format!("{}:comment:{}", self.host.source.as_str(), self.id)
    }

    /// `<login> on owner/name#12`: who said it, where.
    pub fn from(&self) -> String {
        format!("{} on {}#{}", self.login, self.repo, self.number)
    }

    /// The stream of its record ([`CodeHost::comment_stream`]).
    pub fn stream(&self) -> String {
        self.host.comment_stream(&self.repo, self.id)
    }
}
