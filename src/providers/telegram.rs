//! The Telegram Bot API client effects call through, at `TELEGRAM_API_URL` with `TELEGRAM_BOT_TOKEN`. The token
//! is part of every request's path, so no error message here ever carries a URL.

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};

use super::CallError;
use super::Produced;

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

    async fn call(&self, method: &str, body: &Value) -> Result<Value, CallError> {
        let url = format!(
            "{}/bot{}/{method}",
            self.api_url,
            self.token.expose_secret()
        );
        let response =
            self.http
                .post(url)
                .json(body)
                .send()
                .await
                .map_err(|e| CallError::Transient {
                    message: format!("{method}: no answer from Telegram: {}", e.without_url()),
                    retry_after: None,
                })?;
        let status = response.status();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        if status.is_success() && answer["ok"] == true {
            return Ok(answer["result"].clone());
        }
        let description = answer["description"]
            .as_str()
            .unwrap_or("no description")
            .to_owned();
        let message = format!("{method}: Telegram answered {status}: {description}");
        let retry_after = answer["parameters"]["retry_after"]
            .as_u64()
            .map(Duration::from_secs);
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
    /// one row when there are any.
    pub async fn send_message(
        &self,
        chat: i64,
        html: &str,
        buttons: &[(String, String)],
        reply_prompt: Option<&str>,
    ) -> Result<Produced, CallError> {
        let mut body = json!({
            "chat_id": chat,
            "text": html,
            "parse_mode": "HTML",
            "link_preview_options": { "is_disabled": true },
        });
        if let Some(prompt) = reply_prompt {
            // Telegram keeps a placeholder to 64 characters.
            let placeholder: String = prompt.chars().take(64).collect();
            body["reply_markup"] =
                json!({ "force_reply": true, "input_field_placeholder": placeholder });
        } else if !buttons.is_empty() {
            let row: Vec<Value> = buttons
                .iter()
                .map(|(text, data)| json!({ "text": text, "callback_data": data }))
                .collect();
            body["reply_markup"] = json!({ "inline_keyboard": [row] });
        }
        let result = self.call("sendMessage", &body).await?;
        Ok(Produced::Message {
            chat,
            message_id: result["message_id"].as_i64().unwrap_or_default(),
        })
    }
}

impl TelegramClient {
    /// The bot's username (`getMe`): a read-only proof that the token works, for `doctor`.
    pub async fn get_me(&self) -> Result<String, CallError> {
        let me = self.call("getMe", &json!({})).await?;
        Ok(me["username"].as_str().unwrap_or("unnamed").to_owned())
    }

    /// Where Telegram sends updates (`getWebhookInfo`): the webhook URL, empty when none is set.
    pub async fn webhook_url(&self) -> Result<String, CallError> {
        let info = self.call("getWebhookInfo", &json!({})).await?;
        Ok(info["url"].as_str().unwrap_or_default().to_owned())
    }

    /// Removes the webhook, so `getUpdates` may be used (Telegram refuses both at once).
    pub async fn delete_webhook(&self) -> Result<(), CallError> {
        self.call("deleteWebhook", &json!({ "drop_pending_updates": false }))
            .await
            .map(drop)
    }

    /// Updates from `offset` on, waiting up to `timeout_s` for the first (long polling; keep it under the
    /// client's 30 s timeout).
    pub async fn get_updates(&self, offset: i64, timeout_s: u64) -> Result<Vec<Value>, CallError> {
        let result = self
            .call(
                "getUpdates",
                &json!({
                    "offset": offset,
                    "timeout": timeout_s,
                    "allowed_updates": ["message", "edited_message", "callback_query"],
                }),
            )
            .await?;
        Ok(result.as_array().cloned().unwrap_or_default())
    }

    /// Answers a button press (`answerCallbackQuery`) with a short notice.
    pub async fn answer_callback(&self, callback: &str, text: &str) -> Result<Produced, CallError> {
        self.call(
            "answerCallbackQuery",
            &json!({ "callback_query_id": callback, "text": text }),
        )
        .await?;
        Ok(Produced::Done)
    }

    /// Sets the command menu Telegram shows for the bot.
    pub async fn set_my_commands(
        &self,
        commands: &[(String, String)],
    ) -> Result<Produced, CallError> {
        let commands: Vec<Value> = commands
            .iter()
            .map(|(command, description)| json!({ "command": command, "description": description }))
            .collect();
        self.call("setMyCommands", &json!({ "commands": commands }))
            .await?;
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
