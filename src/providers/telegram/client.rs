//! The Telegram Bot API client effects call through, at `TELEGRAM_API_URL` with `TELEGRAM_BOT_TOKEN`. The token
//! is part of every request's path, so no error message here ever carries a URL.

use std::time::Duration;

use frankenstein::methods::{
    AnswerCallbackQueryParams, DeleteWebhookParams, GetUpdatesParams, SendMessageParams,
    SetMyCommandsParams,
};
use frankenstein::response::{ErrorResponse, MethodResponse};
use frankenstein::types::{
    AllowedUpdate, BotCommand, ForceReply, InlineKeyboardButton, InlineKeyboardMarkup,
    LinkPreviewOptions, Message, ReplyMarkup, User,
};
use frankenstein::updates::{Update, WebhookInfo};
use frankenstein::ParseMode;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::Value;

use crate::effects::{CallError, Produced};

/// Telegram refuses messages longer than this many characters.
pub const MAX_MESSAGE: usize = 4096;
pub const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct TelegramClient {
    http: reqwest::Client,
    api_url: String,
    token: SecretString,
}

impl std::fmt::Debug for TelegramClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TelegramClient")
    }
}

impl TelegramClient {
    pub fn new(api_url: &str, token: &SecretString) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .build()
            .map_err(|e| format!("cannot build the Telegram client: {e}"))?;
        Ok(Self {
            http,
            api_url: api_url.trim_end_matches('/').to_owned(),
            token: token.clone(),
        })
    }

    /// One Bot API method with `params` (a frankenstein request type), its `result` decoded as `T`. Errors are
    /// Telegram's `ErrorResponse`: 429 and 5xx are transient (with its `retry_after`), the rest permanent.
    async fn call<P, T>(&self, method: &str, params: &P) -> Result<T, CallError>
    where
        P: serde::Serialize + ?Sized,
        T: serde::de::DeserializeOwned,
    {
        let url = format!(
            "{}/bot{}/{method}",
            self.api_url,
            self.token.expose_secret()
        );
        let response =
            self.http
                .post(url)
                .json(params)
                .send()
                .await
                .map_err(|e| CallError::Transient {
                    message: format!("{method}: no answer from Telegram: {}", e.without_url()),
                    retry_after: None,
                })?;
        let status = response.status();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        if status.is_success() && answer["ok"] == true {
            return serde_json::from_value::<MethodResponse<T>>(answer)
                .map(|answer| answer.result)
                .map_err(|e| CallError::Permanent {
                    message: format!("{method}: Telegram's answer does not fit the Bot API: {e}"),
                });
        }
        let error = serde_json::from_value::<ErrorResponse>(answer).ok();
        let description = error
            .as_ref()
            .map_or("no description", |e| e.description.as_str());
        let message = format!("{method}: Telegram answered {status}: {description}");
        let retry_after = error
            .as_ref()
            .and_then(|e| e.parameters.as_ref())
            .and_then(|p| p.retry_after)
            .map(|s| Duration::from_secs(u64::from(s)));
        if status.as_u16() == 429 || status.is_server_error() {
            Err(CallError::Transient {
                message,
                retry_after,
            })
        } else {
            Err(CallError::Permanent { message })
        }
    }

    /// Sends `html` (Telegram's HTML subset, already escaped) to `chat`, with `buttons` (label, callback data) in
    /// one row when there are any, or a reply prompt (`force_reply`, its placeholder) when asked.
    pub async fn send_message(
        &self,
        chat: i64,
        html: &str,
        buttons: &[(String, String)],
        reply_prompt: Option<&str>,
    ) -> Result<Produced, CallError> {
        let params = message_params(chat, html, buttons, reply_prompt);
        let sent: Message = self.call("sendMessage", &params).await?;
        Ok(Produced::Message {
            chat,
            message_id: i64::from(sent.message_id),
        })
    }
}

/// What `sendMessage` is sent (pure, for the tests): HTML, no link previews, and a reply prompt or one row of
/// buttons.
pub fn message_params(
    chat: i64,
    html: &str,
    buttons: &[(String, String)],
    reply_prompt: Option<&str>,
) -> SendMessageParams {
    let reply_markup = match reply_prompt {
        Some(prompt) => Some(ReplyMarkup::ForceReply(ForceReply {
            force_reply: true,
            // Telegram keeps a placeholder to 64 characters.
            input_field_placeholder: Some(prompt.chars().take(64).collect()),
            selective: None,
        })),
        None if !buttons.is_empty() => {
            let row = buttons
                .iter()
                .map(|(text, data)| {
                    InlineKeyboardButton::builder()
                        .text(text.clone())
                        .callback_data(data.clone())
                        .build()
                })
                .collect();
            Some(ReplyMarkup::InlineKeyboardMarkup(InlineKeyboardMarkup {
                inline_keyboard: vec![row],
                force_reply: None,
            }))
        }
        None => None,
    };
    SendMessageParams::builder()
        .chat_id(chat)
        .text(html)
        .parse_mode(ParseMode::Html)
        .link_preview_options(LinkPreviewOptions::DISABLED)
        .maybe_reply_markup(reply_markup)
        .build()
}

impl TelegramClient {
    /// The bot's username (`getMe`): a read-only proof that the token works, for `doctor`.
    pub async fn get_me(&self) -> Result<String, CallError> {
        let me: User = self.call("getMe", &serde_json::Map::new()).await?;
        Ok(me.username.unwrap_or_else(|| "unnamed".to_owned()))
    }

    /// Where Telegram sends updates (`getWebhookInfo`): the webhook URL, empty when none is set.
    pub async fn webhook_url(&self) -> Result<String, CallError> {
        let info: WebhookInfo = self.call("getWebhookInfo", &serde_json::Map::new()).await?;
        Ok(info.url)
    }

    /// Removes the webhook, so `getUpdates` may be used (Telegram refuses both at once).
    pub async fn delete_webhook(&self) -> Result<(), CallError> {
        let params = DeleteWebhookParams::builder()
            .drop_pending_updates(false)
            .build();
        self.call::<_, bool>("deleteWebhook", &params)
            .await
            .map(drop)
    }

    /// Updates from `offset` on, waiting up to `timeout_s` for the first (long polling; keep it under the
    /// client's 30 s timeout). Each update is kept as Telegram sent it (the log records what came, and a typed
    /// round trip would drop what the crate does not model); each must still read as the Bot API's `Update`.
    pub async fn get_updates(&self, offset: i64, timeout_s: u32) -> Result<Vec<Value>, CallError> {
        let params = GetUpdatesParams::builder()
            .offset(offset)
            .timeout(timeout_s)
            .allowed_updates(vec![
                AllowedUpdate::Message,
                AllowedUpdate::EditedMessage,
                AllowedUpdate::CallbackQuery,
            ])
            .build();
        let updates: Vec<Value> = self.call("getUpdates", &params).await?;
        for update in &updates {
            if let Err(e) = Update::deserialize(update) {
                return Err(CallError::Permanent {
                    message: format!("getUpdates: an update that does not fit the Bot API: {e}"),
                });
            }
        }
        Ok(updates)
    }

    /// Answers a button press (`answerCallbackQuery`) with a short notice.
    pub async fn answer_callback(&self, callback: &str, text: &str) -> Result<Produced, CallError> {
        let params = AnswerCallbackQueryParams::builder()
            .callback_query_id(callback)
            .text(text)
            .build();
        self.call::<_, bool>("answerCallbackQuery", &params).await?;
        Ok(Produced::Done)
    }

    /// Sets the command menu Telegram shows for the bot.
    pub async fn set_my_commands(
        &self,
        commands: &[(String, String)],
    ) -> Result<Produced, CallError> {
        let commands = commands
            .iter()
            .map(|(command, description)| {
                BotCommand::builder()
                    .command(command.clone())
                    .description(description.clone())
                    .build()
            })
            .collect();
        let params = SetMyCommandsParams::builder().commands(commands).build();
        self.call::<_, bool>("setMyCommands", &params).await?;
        Ok(Produced::Done)
    }
}

/// Escapes text for Telegram's HTML parse mode.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Cuts `html` to fit one message, at a line break when there is one near the end.
pub fn fit(html: &str) -> String {
    if html.chars().count() <= MAX_MESSAGE {
        return html.to_owned();
    }
    let limit = MAX_MESSAGE - 2;
    let cut: String = html.chars().take(limit).collect();
    let at = cut
        .rfind('\n')
        .filter(|i| *i > limit / 2)
        .unwrap_or(cut.len());
    // Never end inside an escape like `&amp;` or a tag.
    let mut end = at;
    if let Some(amp) = cut[..end].rfind('&') {
        if !cut[amp..end].contains(';') {
            end = amp;
        }
    }
    if let Some(lt) = cut[..end].rfind('<') {
        if !cut[lt..end].contains('>') {
            end = lt;
        }
    }
    format!("{}\n…", &cut[..end])
}
