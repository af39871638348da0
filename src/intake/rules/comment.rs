//! A comment addressed to pidevops on a code host (GitHub's issues and pull requests), as intake consumes it
//! (`intake/comments.rs`): who said what, where (`Comment`), on which host (`CodeHost`: what intake needs of it),
//! what it asks (`Ask`, `CommentCommand`) and the stream of its record. Reading a comment event into one is the
//! host's part (GitHub's: `providers/github/intake/comment.rs`, with its `HOST`).

use crate::board::Draft;
use crate::domain::Source;
use crate::projectors::tasks::LinkKind;
use crate::tasks::{Links, RepoName};

/// The command prefix; a comment starting with it is for pidevops even when no bot login is configured.
pub const PREFIX: &str = "/pidevops";

/// What intake needs to know of the code host a comment is on. Each host's rules declare theirs (GitHub's:
/// `providers/github/intake/comment.rs` `HOST`) and hand it over with every comment; the names and streams are
/// stored, so a host's never change.
#[derive(Debug)]
pub struct CodeHost {
    /// Its source: the actor of what a comment does to a task, and the prefix of its intake and origin keys.
    pub source: Source,
    /// Its name as people say it: a command's record says `by <login> on <name> (owner/name#12)`.
    pub name: &'static str,
    /// The event type of a comment's record (GitHub's: `conversation.github_comment`).
    pub record: &'static str,
    /// The prefix of a comment's record stream (GitHub's: `github-comment:`), see [`CodeHost::comment_stream`].
    pub stream_prefix: &'static str,
    /// The task's pull request (merge request) on this host, read from its links (GitHub's: `github_pr`): a
    /// comment on one must be on the task's own, and `status` names it.
    pub pull_request: fn(&Links) -> Option<ReviewRequest>,
    /// The read model's index of that link (its value `owner/name#12`): a comment on a pull request finds its
    /// task by it.
    pub pull_request_kind: LinkKind,
}

/// Hosts are the same when their records are: the one name each stores.
impl PartialEq for CodeHost {
    fn eq(&self, other: &Self) -> bool {
        self.record == other.record
    }
}

impl Eq for CodeHost {}

/// A task's pull request (or merge request), as a comment's host reads it from the task's links.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReviewRequest {
    pub repo: RepoName,
    pub number: u64,
    /// As people write it: `owner/name#12`, `group/app!7`.
    pub shown: String,
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

/// What `body` asks of pidevops, if it is addressed to it: a `/pidevops` command at its start (after a mention,
/// if any), or the text around a whole-word `@<bot>` mention. `None`: not for pidevops.
pub fn ask(body: &str, bot: Option<&str>) -> Option<Ask> {
    let mentioned = bot.and_then(|bot| strip_mentions(body, bot));
    let text = mentioned.as_deref().unwrap_or(body).trim();
    if let Some(rest) = command_rest(text) {
        return Some(command(rest));
    }
    // A bare mention asks nothing: the reply lists what it could ask.
    mentioned.map(|text| match text.trim() {
        "" => Ask::Unknown(String::new()),
        text => Ask::Text(text.to_owned()),
    })
}

/// The text after a leading `/pidevops` (a whole word), if the text starts with it.
fn command_rest(text: &str) -> Option<&str> {
    let head = text.get(..PREFIX.len())?;
    if !head.eq_ignore_ascii_case(PREFIX) {
        return None;
    }
    let rest = &text[PREFIX.len()..];
    (rest.is_empty() || rest.starts_with(char::is_whitespace)).then_some(rest)
}

fn command(rest: &str) -> Ask {
    let line = rest.lines().next().unwrap_or_default().trim();
    let (word, reason) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    let reason = Some(reason.trim().to_owned()).filter(|r| !r.is_empty());
    match CommentCommand::ALL
        .into_iter()
        .find(|c| c.name().eq_ignore_ascii_case(word))
    {
        Some(command) => Ask::Command { command, reason },
        None => Ask::Unknown(word.to_owned()),
    }
}

/// `body` without its whole-word `@<bot>` mentions (any case), and a `,` or `:` right after one; `None` when it
/// has none.
pub fn strip_mentions(body: &str, bot: &str) -> Option<String> {
    let needle = format!("@{}", bot.to_ascii_lowercase());
    let lower = body.to_ascii_lowercase();
    let mut out = String::with_capacity(body.len());
    let (mut from, mut found) = (0, false);
    let mut search = 0;
    while let Some(at) = lower[search..].find(&needle).map(|i| i + search) {
        let end = at + needle.len();
        let before = body[..at].chars().next_back();
        let after = body[end..].chars().next();
        search = end;
        if before.is_some_and(word_char) || after.is_some_and(|c| word_char(c) || c == '/') {
            continue;
        }
        found = true;
        out.push_str(&body[from..at]);
        from = end;
        if matches!(after, Some(',' | ':')) {
            from += 1;
        }
    }
    if !found {
        return None;
    }
    out.push_str(&body[from..]);
    Some(out.trim().to_owned())
}

/// A character a login (GitHub's, GitLab's username, or an address around one) continues with.
fn word_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '-' | '_')
}
