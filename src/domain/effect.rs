//! Names of effects and their streams, shared by the effects that write them and the loops that look them up
//! without importing `effects` (intake asks whether a task's notice went to a chat).

/// The stream of one effect: `effect:<key>`.
pub const EFFECT_STREAM_PREFIX: &str = "effect:";

pub fn stream(key: &str) -> String {
    format!("{EFFECT_STREAM_PREFIX}{key}")
}

/// The key of the Telegram notice to `chat` about the task event stored as `event_id`.
pub fn telegram_notice_key(chat: i64, event_id: &str) -> String {
    format!("telegram:notify:{chat}:{event_id}")
}
