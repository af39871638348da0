//! Names of effects and their streams, shared by the effects that write them and the loops that look them up
//! without importing `effects` (intake asks whether a task's notice went to a chat); and the Linear states
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

/// The task whose pull request effect `key` opens, if it is one.
pub fn pull_request_task(key: &str) -> Option<crate::tasks::TaskId> {
    key.strip_prefix(PULL_REQUEST_KEY_PREFIX)?.parse().ok()
}

const PULL_REQUEST_KEY_PREFIX: &str = "github:pr:";

/// The key of the Telegram notice to `chat` about the task event stored as `event_id`.
pub fn telegram_notice_key(chat: i64, event_id: &str) -> String {
    format!("telegram:notify:{chat}:{event_id}")
}

/// The stream recording one message pidevops sent about a task, named by the message:
/// `telegram-message:<chat>:<message id>`, so that a reply to it (`reply_to_message`) finds its task.
pub const MESSAGE_STREAM_PREFIX: &str = "telegram-message:";
/// The event type of that record.
pub const MESSAGE_SENT: &str = "telegram.message_sent";

pub fn message_stream(chat: i64, message_id: i64) -> String {
    format!("{MESSAGE_STREAM_PREFIX}{chat}:{message_id}")
}

/// What pidevops sent as message `message_id` to `chat`: about which task, as which effect, and whether it asked a
/// question (its reply is then the answer).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SentMessage {
    pub chat: i64,
    pub message_id: i64,
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
