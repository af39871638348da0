//! What `effects:telegram` can be asked to do. Stored in `effect.requested` under `action` (`telegram_send`, …):
//! the names are the log's, so they never change.

use serde::{Deserialize, Serialize};

use crate::effects::ProviderAction;

/// A Telegram Bot API call. Everything the call needs is in it, so the call is the same whoever makes it,
/// whenever.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action")]
pub enum TelegramAction {
    /// A message to a Telegram chat, in Telegram's HTML (escaped when it was built), with inline buttons (label,
    /// callback data of at most 64 bytes) in one row, or, with `reply_prompt`, a reply prompt instead (Telegram's
    /// `force_reply`, the prompt its input field's placeholder): a question whose reply is its answer.
    #[serde(rename = "telegram_send")]
    Send {
        chat: i64,
        html: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        buttons: Vec<(String, String)>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reply_prompt: Option<String>,
    },
    /// The answer every button press gets (Telegram shows it briefly; without one the button spins).
    #[serde(rename = "telegram_answer_callback")]
    AnswerCallback { callback: String, text: String },
    /// The bot's command menu (`setMyCommands`): name and description of each.
    #[serde(rename = "telegram_set_commands")]
    SetCommands { commands: Vec<(String, String)> },
}

impl ProviderAction for TelegramAction {
    fn name(&self) -> &'static str {
        match self {
            TelegramAction::Send { .. } => "telegram_send",
            TelegramAction::SetCommands { .. } => "telegram_set_commands",
            TelegramAction::AnswerCallback { .. } => "telegram_answer_callback",
        }
    }

    fn safe_to_repeat(&self) -> bool {
        match self {
            // Telegram cannot tell whether a message was delivered: one cut off is recorded, never sent twice.
            TelegramAction::Send { .. } => false,
            // Setting the same menu twice leaves one menu.
            TelegramAction::SetCommands { .. } => true,
            // A second answer to one press is refused by Telegram, not shown twice.
            TelegramAction::AnswerCallback { .. } => true,
        }
    }
}
