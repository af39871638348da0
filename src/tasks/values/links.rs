//! Where a task came from and what it produced: Linear issues, GitHub references, Telegram messages, and the
//! [`LinkKey`]s a task's [`super::Links`] holds them under.

use std::fmt;
use std::num::NonZeroU64;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::link_key::{KnownLink, LinkKey};
use super::{RepoName, ValueError};

/// A Linear issue: the stable id (webhooks and the API key on it) and the identifier people read (`ENG-123`),
/// which changes when the issue moves team.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "LinearIssueParts")]
pub struct LinearIssue {
    id: Uuid,
    identifier: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinearIssueParts {
    pub id: Uuid,
    pub identifier: String,
}

impl LinearIssue {
    pub fn new(id: Uuid, identifier: &str) -> Result<Self, ValueError> {
        let refuse = || ValueError::LinearIdentifier(identifier.to_owned());
        let (team, number) = identifier.split_once('-').ok_or_else(refuse)?;
        let team_ok =
            (1..=16).contains(&team.len()) && team.bytes().all(|b| b.is_ascii_alphanumeric());
        let number_ok = !number.is_empty()
            && number.len() <= 19
            && number.bytes().all(|b| b.is_ascii_digit())
            && !number.starts_with('0');
        if !(team_ok && number_ok) {
            return Err(refuse());
        }
        Ok(LinearIssue {
            id,
            identifier: identifier.to_owned(),
        })
    }

    pub fn id(&self) -> Uuid {
        self.id
    }

    pub fn identifier(&self) -> &str {
        &self.identifier
    }
}

impl fmt::Display for LinearIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.identifier, self.id)
    }
}

impl TryFrom<LinearIssueParts> for LinearIssue {
    type Error = ValueError;
    fn try_from(parts: LinearIssueParts) -> Result<Self, Self::Error> {
        LinearIssue::new(parts.id, &parts.identifier)
    }
}

/// A GitHub issue or pull request: `owner/name#12`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub struct GithubRef {
    pub repo: RepoName,
    #[schema(value_type = u64, minimum = 1)]
    pub number: NonZeroU64,
}

impl GithubRef {
    pub fn new(repo: RepoName, number: u64) -> Result<Self, ValueError> {
        let number = NonZeroU64::new(number).ok_or(ValueError::GithubNumber)?;
        Ok(GithubRef { repo, number })
    }
}

impl fmt::Display for GithubRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.repo, self.number)
    }
}

/// A GitLab issue: its project's full path and its `iid` (the number people read, unique per project):
/// `group/sub/app#12`. The path is a [`RepoName`], so it is safe in a URL and a key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub struct GitlabIssueRef {
    pub project: RepoName,
    #[schema(value_type = u64, minimum = 1)]
    pub iid: NonZeroU64,
}

impl GitlabIssueRef {
    pub fn new(project: RepoName, iid: u64) -> Result<Self, ValueError> {
        let iid = NonZeroU64::new(iid).ok_or(ValueError::GitlabIid)?;
        Ok(GitlabIssueRef { project, iid })
    }
}

impl fmt::Display for GitlabIssueRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.project, self.iid)
    }
}

/// A GitLab merge request: its project's full path and its `iid`: `group/sub/app!7`, as GitLab writes it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub struct GitlabMrRef {
    pub project: RepoName,
    #[schema(value_type = u64, minimum = 1)]
    pub iid: NonZeroU64,
}

impl GitlabMrRef {
    pub fn new(project: RepoName, iid: u64) -> Result<Self, ValueError> {
        let iid = NonZeroU64::new(iid).ok_or(ValueError::GitlabIid)?;
        Ok(GitlabMrRef { project, iid })
    }
}

impl fmt::Display for GitlabMrRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}!{}", self.project, self.iid)
    }
}

/// A Telegram message: the chat it is in and its id there (message ids are only unique per chat).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "TelegramParts")]
pub struct TelegramMessage {
    chat: i64,
    message: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TelegramParts {
    pub chat: i64,
    pub message: i64,
}

impl TelegramMessage {
    pub fn new(chat: i64, message: i64) -> Result<Self, ValueError> {
        if chat == 0 || message < 1 {
            return Err(ValueError::Telegram);
        }
        Ok(TelegramMessage { chat, message })
    }

    pub fn chat(self) -> i64 {
        self.chat
    }

    pub fn message(self) -> i64 {
        self.message
    }
}

impl fmt::Display for TelegramMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "chat {} message {}", self.chat, self.message)
    }
}

impl TryFrom<TelegramParts> for TelegramMessage {
    type Error = ValueError;
    fn try_from(parts: TelegramParts) -> Result<Self, Self::Error> {
        TelegramMessage::new(parts.chat, parts.message)
    }
}

/// A Slack conversation a task belongs to: its channel (a channel, a group or a direct message's id) and the
/// thread's root message, by its `ts` (`1700000000.000100`). No `thread`: pidevops starts the thread itself (a
/// `/pidevops` command is no message to reply to).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "SlackParts")]
pub struct SlackThread {
    channel: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    thread: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlackParts {
    pub channel: String,
    #[serde(default)]
    pub thread: Option<String>,
}

impl SlackThread {
    /// A channel id is Slack's (`C…`, `G…`, `D…`: upper-case letters and digits) and a `ts` is seconds, a dot and
    /// microseconds: what is kept is what Slack could have sent, nothing a stranger's text could smuggle in.
    pub fn new(channel: &str, thread: Option<&str>) -> Result<Self, ValueError> {
        if !is_slack_id(channel) || thread.is_some_and(|ts| !is_slack_ts(ts)) {
            return Err(ValueError::Slack);
        }
        Ok(SlackThread {
            channel: channel.to_owned(),
            thread: thread.map(str::to_owned),
        })
    }

    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The thread's root message, unless pidevops starts the thread.
    pub fn thread(&self) -> Option<&str> {
        self.thread.as_deref()
    }
}

/// A Slack id (`C0123ABCD`, `U024BE7LH`): 2 to 32 upper-case letters and digits.
pub fn is_slack_id(id: &str) -> bool {
    (2..=32).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// A Slack message `ts` (`1700000000.000100`): digits, one dot, digits.
pub fn is_slack_ts(ts: &str) -> bool {
    let Some((seconds, micros)) = ts.split_once('.') else {
        return false;
    };
    (1..=12).contains(&seconds.len())
        && (1..=9).contains(&micros.len())
        && seconds
            .bytes()
            .chain(micros.bytes())
            .all(|b| b.is_ascii_digit())
}

impl fmt::Display for SlackThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.thread {
            Some(ts) => write!(f, "channel {} thread {ts}", self.channel),
            None => write!(f, "channel {}", self.channel),
        }
    }
}

impl TryFrom<SlackParts> for SlackThread {
    type Error = ValueError;
    fn try_from(parts: SlackParts) -> Result<Self, Self::Error> {
        SlackThread::new(&parts.channel, parts.thread.as_deref())
    }
}

/// A task's Linear issue (where it came from, or the issue a plan's item is filed under).
pub const LINEAR_ISSUE: LinkKey<LinearIssue> = LinkKey::new("linear_issue", false);
/// The GitHub issue a task came from.
pub const GITHUB_ISSUE: LinkKey<GithubRef> = LinkKey::new("github_issue", false);
/// A task's pull request: the one link a later submission's pull request replaces.
pub const GITHUB_PR: LinkKey<GithubRef> = LinkKey::new("github_pr", true);
/// The Telegram message a task came from.
pub const TELEGRAM: LinkKey<TelegramMessage> = LinkKey::new("telegram", false);
/// The Slack conversation a task came from (and is told about, in its thread).
pub const SLACK_THREAD: LinkKey<SlackThread> = LinkKey::new("slack_thread", false);

/// The GitLab issue a task came from.
pub const GITLAB_ISSUE: LinkKey<GitlabIssueRef> = LinkKey::new("gitlab_issue", false);
/// A task's merge request on GitLab: like [`GITHUB_PR`], the one a later submission's merge request replaces.
pub const GITLAB_MR: LinkKey<GitlabMrRef> = LinkKey::new("gitlab_mr", true);

/// The keys this build knows: the OpenAPI schema documents them and a conflict shows their values with `Display`.
/// A key left out still works (read, set, kept); its values show as JSON and the schema does not name it.
pub static KNOWN_LINKS: [&dyn KnownLink; 7] = [
    &LINEAR_ISSUE,
    &GITHUB_ISSUE,
    &GITHUB_PR,
    &TELEGRAM,
    &SLACK_THREAD,
    &GITLAB_ISSUE,
    &GITLAB_MR,
];
