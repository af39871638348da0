//! Names of effects and their streams, shared by the effects that write them and the loops that look them up
//! without importing `effects` (intake asks whether a task's notice went to a conversation, and which task a
//! message pidevops sent was about); and the Linear states
//! `effects:linear` moves issues to, which intake reads as at work.

/// The stream of one effect: `effect:<key>`.
pub const EFFECT_STREAM_PREFIX: &str = "effect:";

pub fn stream(key: &str) -> String {
    format!("{EFFECT_STREAM_PREFIX}{key}")
}

/// The key of the effect that opens task `task`'s pull request (a plan's combined one too): `github:pr:<task>`.
/// Its success is news for every provider's policy (Linear links the pull request, Telegram says so).
pub fn pull_request_key(task: crate::tasks::TaskId) -> String {
    format!("{PULL_REQUEST_KEY_PREFIX}{task}")
}

/// The key of the merge of `task`'s pull request at `sha` (auto-land): once per task and head commit. The merge
/// queue reads its outcome.
pub fn github_merge_key(task: crate::tasks::TaskId, sha: &crate::tasks::CommitSha) -> String {
    format!("github:merge:{task}:{sha}")
}

/// The key of the merge of `task`'s GitLab merge request at `sha` (auto-land, or its place on GitLab's merge
/// train): once per task and head commit. The merge queue reads its outcome.
pub fn gitlab_merge_key(task: crate::tasks::TaskId, sha: &crate::tasks::CommitSha) -> String {
    format!("gitlab:merge:{task}:{sha}")
}

/// The key of the effect that opens task `task`'s GitLab merge request: `gitlab:mr:<task>`. Like
/// [`pull_request_key`]'s, its success is news for every provider's policy.
pub fn merge_request_key(task: crate::tasks::TaskId) -> String {
    format!("{MERGE_REQUEST_KEY_PREFIX}{task}")
}

/// The task whose review request (GitHub pull request, GitLab merge request) effect `key` opens, if it is one.
pub fn pull_request_task(key: &str) -> Option<crate::tasks::TaskId> {
    review_request_of(key).map(|(_, task)| task)
}

/// The code host and the task of the review request effect `key` opens, if it is one.
pub fn review_request_of(key: &str) -> Option<(super::Source, crate::tasks::TaskId)> {
    let (host, task) = if let Some(task) = key.strip_prefix(PULL_REQUEST_KEY_PREFIX) {
        (super::Source::Github, task)
    } else {
        (
            super::Source::Gitlab,
            key.strip_prefix(MERGE_REQUEST_KEY_PREFIX)?,
        )
    };
    Some((host, task.parse().ok()?))
}

const PULL_REQUEST_KEY_PREFIX: &str = "github:pr:";
const MERGE_REQUEST_KEY_PREFIX: &str = "gitlab:mr:";

/// The key of the notice to `conversation` on `provider` about the task event stored as `event_id`:
/// `<provider>:notify:<conversation>:<event id>` (Telegram's: `telegram:notify:<chat>:<event id>`).
pub fn notice_key(provider: &str, conversation: &str, event_id: &str) -> String {
    format!("{provider}:notify:{conversation}:{event_id}")
}

/// The stream recording one message pidevops sent about a task, named by the message:
/// `<provider>-message:<conversation>:<message>` (Telegram's: `telegram-message:<chat>:<message id>`), so that a
/// reply to it finds its task.
pub fn message_stream(provider: &str, conversation: &str, message: &str) -> String {
    format!("{provider}-message:{conversation}:{message}")
}

/// A message pidevops sent, as its provider names it: the provider, the conversation it is in and the message,
/// both opaque to everyone but the provider (Telegram's: the chat's id and the message's, as the numbers print).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageRef {
    pub source: super::Source,
    pub conversation: String,
    pub message: String,
}

impl MessageRef {
    /// The stream of its record ([`message_stream`]).
    pub fn stream(&self) -> String {
        message_stream(self.source.as_str(), &self.conversation, &self.message)
    }

    /// The intake key of a task this message asked for (`<source>:<conversation>:<message>`: a Telegram `/new`,
    /// a Slack mention), so that a reply to the asking message (in its Slack thread) is about that task.
    pub fn asked_key(&self) -> String {
        format!(
            "{}:{}:{}",
            self.source.as_str(),
            self.conversation,
            self.message
        )
    }

    /// The key of the notice about the task event `event_id` in this message's conversation ([`notice_key`]).
    pub fn notice_key(&self, event_id: &str) -> String {
        notice_key(self.source.as_str(), &self.conversation, event_id)
    }
}

/// What every provider's record of a message it sent says (the first event of the message's stream, of type
/// `<provider>.message_sent`; the rest of its body is the provider's own, Telegram's names the chat and the
/// message): about which task, as which effect, and whether it asked a question (a reply is then the answer).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
pub struct SentMessage {
    pub task: crate::tasks::TaskId,
    pub key: String,
    #[serde(default)]
    pub question: bool,
}

/// The Linear workflow states pidevops moves an issue through, each a list of names tried in order (the first
/// the team has wins) and the state type used when the team has none of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinearStates {
    pub in_progress: Vec<String>,
    pub in_review: Vec<String>,
    pub done: Vec<String>,
    pub blocked: Vec<String>,
}

impl Default for LinearStates {
    fn default() -> Self {
        let names = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
        Self {
            in_progress: names(&["Pi-Dev: In Progress", "In Progress"]),
            in_review: names(&["In Review"]),
            done: names(&["Done"]),
            blocked: names(&["Pi-Dev: Blocked", "Blocked"]),
        }
    }
}

impl LinearStates {
    /// Every state name, `in_progress`'s to `blocked`'s.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        [
            &self.in_progress,
            &self.in_review,
            &self.done,
            &self.blocked,
        ]
        .into_iter()
        .flatten()
        .map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_code_hosts_review_request_keys_name_their_task() {
        let task: crate::tasks::TaskId = "T-7".parse().unwrap();
        assert_eq!(pull_request_task(&pull_request_key(task)), Some(task));
        assert_eq!(pull_request_task(&merge_request_key(task)), Some(task));
        assert_eq!(
            review_request_of("gitlab:mr:T-7"),
            Some((super::super::Source::Gitlab, task))
        );
        assert_eq!(
            review_request_of("github:pr:T-7"),
            Some((super::super::Source::Github, task))
        );
        for other in [
            "gitlab:note:T-7:created",
            "github:merge:T-7:abc",
            "gitlab:mr:x",
        ] {
            assert_eq!(pull_request_task(other), None, "{other}");
        }
    }
}
