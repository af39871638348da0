//! Slack's record of a thread pidevops speaks in about a task (`slack.message_sent` at the head of
//! `slack-message:<channel>:<thread ts>`): written by `effects:slack` once its first message there is posted (the
//! thread of the message that asked, or the one pidevops started for a `/pidevops` command), read by intake (as
//! `domain::effect::SentMessage`, the thread named by a `MessageRef`) when someone replies in the thread. And the
//! key of a notice to a channel. Stored shapes: the tests below pin them.

use crate::domain::effect::{self, MessageRef};
use crate::domain::Source;

/// The event type of the record.
pub const MESSAGE_SENT: &str = "slack.message_sent";

/// The record's body: the channel and the thread's root, then what every provider's record says.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SentMessage {
    pub channel: String,
    pub thread_ts: String,
    pub task: crate::tasks::TaskId,
    pub key: String,
    #[serde(default)]
    pub question: bool,
}

/// The thread rooted at message `ts` of `channel`, as intake names it.
pub fn message_ref(channel: &str, ts: &str) -> MessageRef {
    MessageRef {
        source: Source::Slack,
        conversation: channel.to_owned(),
        message: ts.to_owned(),
    }
}

/// The stream of the record of the thread rooted at `ts` in `channel`: `slack-message:<channel>:<ts>`.
pub fn message_stream(channel: &str, ts: &str) -> String {
    message_ref(channel, ts).stream()
}

/// The key of the notice to `channel` about the task event stored as `event_id`: `slack:notify:<channel>:<event>`.
pub fn notice_key(channel: &str, event_id: &str) -> String {
    effect::notice_key(Source::Slack.as_str(), channel, event_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_shapes_are_pinned() {
        assert_eq!(
            message_stream("C1", "1700000000.000100"),
            "slack-message:C1:1700000000.000100"
        );
        assert_eq!(notice_key("C1", "e-1"), "slack:notify:C1:e-1");
        assert_eq!(message_ref("C1", "1.2").asked_key(), "slack:C1:1.2");
        let task: crate::tasks::TaskId = "T-7".parse().unwrap();
        let sent = SentMessage {
            channel: "C1".into(),
            thread_ts: "1.2".into(),
            task,
            key: "slack:notify:C1:e-1".into(),
            question: false,
        };
        let body = serde_json::to_string(&sent).unwrap();
        assert_eq!(
            body,
            r#"{"channel":"C1","thread_ts":"1.2","task":"T-7","key":"slack:notify:C1:e-1","question":false}"#
        );
        let read: effect::SentMessage = serde_json::from_str(&body).unwrap();
        assert_eq!(read.task, task);
    }
}
