//! Telegram's record of a message pidevops sent about a task (`telegram.message_sent` at the head of
//! `telegram-message:<chat>:<message id>`): written by `effects:telegram` once the message is sent, read by intake
//! (as `domain::effect::SentMessage`, with the message named by a `MessageRef`) when someone replies to it. And
//! the key of a notice to a chat. Stored shapes: the tests below pin them.

use crate::domain::effect::{self, MessageRef};
use crate::domain::Source;

/// The event type of the record.
pub const MESSAGE_SENT: &str = "telegram.message_sent";

/// The record's body: the chat and the message, then what every provider's record says (`SentMessage`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SentMessage {
    pub chat: i64,
    pub message_id: i64,
    pub task: crate::tasks::TaskId,
    pub key: String,
    #[serde(default)]
    pub question: bool,
}

/// Message `message_id` of `chat`, as intake names a message pidevops sent.
pub fn message_ref(chat: i64, message_id: i64) -> MessageRef {
    MessageRef {
        source: Source::Telegram,
        conversation: chat.to_string(),
        message: message_id.to_string(),
    }
}

/// The stream of the record of message `message_id` of `chat`: `telegram-message:<chat>:<message id>`.
pub fn message_stream(chat: i64, message_id: i64) -> String {
    message_ref(chat, message_id).stream()
}

/// The key of the notice to `chat` about the task event stored as `event_id`: `telegram:notify:<chat>:<event>`.
pub fn notice_key(chat: i64, event_id: &str) -> String {
    effect::notice_key(Source::Telegram.as_str(), &chat.to_string(), event_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_shapes_are_pinned() {
        assert_eq!(message_stream(-100, 42), "telegram-message:-100:42");
        assert_eq!(notice_key(-100, "e-1"), "telegram:notify:-100:e-1");
        assert_eq!(MESSAGE_SENT, "telegram.message_sent");
        let task: crate::tasks::TaskId = "T-7".parse().unwrap();
        let sent = SentMessage {
            chat: -100,
            message_id: 42,
            task,
            key: "telegram:notify:-100:e-1".to_owned(),
            question: true,
        };
        let body = serde_json::to_string(&sent).unwrap();
        assert_eq!(
            body,
            r#"{"chat":-100,"message_id":42,"task":"T-7","key":"telegram:notify:-100:e-1","question":true}"#
        );
        let read: effect::SentMessage = serde_json::from_str(&body).unwrap();
        assert_eq!(
            read,
            effect::SentMessage {
                task,
                key: sent.key.clone(),
                question: true
            }
        );
        let old: effect::SentMessage = serde_json::from_str(&format!(
            r#"{{"chat":1,"message_id":2,"task":"{task}","key":"k"}}"#
        ))
        .unwrap();
        assert!(!old.question);
    }
}
