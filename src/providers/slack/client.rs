//! The Slack Web API client effects call through, at `SLACK_API_URL` with `SLACK_BOT_TOKEN` (`Authorization:
//! Bearer`, JSON bodies as slack-morphism's request types write them). Slack answers 200 with `ok: false` and an
//! error code for most failures: `ratelimited` and Slack's own outages are transient, the rest permanent and
//! named by their code. The token is only ever in a header, so no error here carries it.

use std::time::Duration;

use reqwest::header::{HeaderMap, AUTHORIZATION, RETRY_AFTER};
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use slack_morphism::api::{
    SlackApiAuthTestResponse, SlackApiChatPostEphemeralRequest, SlackApiChatPostEphemeralResponse,
    SlackApiChatPostMessageRequest, SlackApiChatPostMessageResponse, SlackApiChatUpdateRequest,
    SlackApiChatUpdateResponse, SlackApiReactionsAddRequest, SlackApiReactionsAddResponse,
};
use slack_morphism::blocks::{
    SlackActionsBlock, SlackBlock, SlackBlockButtonElement, SlackBlockButtonStyle,
    SlackBlockMarkDownText, SlackBlockPlainText, SlackSectionBlock,
};
use slack_morphism::{
    SlackActionId, SlackChannelId, SlackMessageContent, SlackReactionName, SlackTs, SlackUserId,
};

use crate::effects::{CallError, Produced};

/// What one section block's text may hold (Slack refuses more).
pub const MAX_TEXT: usize = 3000;
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// Slack's error codes that say "later", not "never".
const TRANSIENT_CODES: &[&str] = &[
    "ratelimited",
    "internal_error",
    "fatal_error",
    "service_unavailable",
    "request_timeout",
];

#[derive(Clone)]
pub struct SlackClient {
    http: reqwest::Client,
    api_url: String,
    token: SecretString,
}

impl std::fmt::Debug for SlackClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SlackClient")
    }
}

/// How Slack answered a call that arrived.
enum Answer<T> {
    Ok(T),
    /// `ok: false` with Slack's error code (and the wait a rate limit asked for).
    Refused {
        code: String,
        retry_after: Option<Duration>,
    },
}

impl SlackClient {
    pub fn new(api_url: &str, token: &SecretString) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .build()
            .map_err(|e| format!("cannot build the Slack client: {e}"))?;
        Ok(Self {
            http,
            api_url: api_url.trim_end_matches('/').to_owned(),
            token: token.clone(),
        })
    }

    /// One Web API method with `body`, its answer read as `T` when `ok`. 429 and 5xx are transient (with
    /// `Retry-After`); an `ok: false` is handed back with its code for the caller to classify.
    async fn send<B, T>(&self, method: &str, body: &B) -> Result<Answer<T>, CallError>
    where
        B: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        let response = self
            .http
            .post(format!("{}/{method}", self.api_url))
            .header(
                AUTHORIZATION,
                format!("Bearer {}", self.token.expose_secret()),
            )
            .json(body)
            .send()
            .await
            .map_err(|e| CallError::Transient {
                message: format!("{method}: no answer from Slack: {}", e.without_url()),
                retry_after: None,
            })?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        if status.as_u16() == 429 || status.is_server_error() {
            return Err(CallError::Transient {
                message: format!("{method}: Slack answered {status}"),
                retry_after,
            });
        }
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        if answer["ok"] == true {
            return serde_json::from_value::<T>(answer)
                .map(Answer::Ok)
                .map_err(|e| CallError::Permanent {
                    message: format!("{method}: Slack's answer does not fit the Web API: {e}"),
                });
        }
        let code = answer["error"].as_str().unwrap_or_default();
        if code.is_empty() {
            return Err(CallError::Permanent {
                message: format!("{method}: Slack answered {status} without ok or an error code"),
            });
        }
        Ok(Answer::Refused {
            code: code.chars().take(80).collect(),
            retry_after,
        })
    }

    /// `send`, an `ok: false` classified by its code.
    async fn call<B, T>(&self, method: &str, body: &B) -> Result<T, CallError>
    where
        B: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        match self.send(method, body).await? {
            Answer::Ok(value) => Ok(value),
            Answer::Refused { code, retry_after } => Err(refused(method, &code, retry_after)),
        }
    }

    /// `chat.postMessage`: `text` (Slack's mrkdwn, escaped when it was built) to `channel`, in the thread of
    /// `thread` when given, with `buttons` (label, value) under it. Produces the channel and the new message's ts.
    pub async fn post_message(
        &self,
        channel: &str,
        thread: Option<&str>,
        text: &str,
        buttons: &[(String, String)],
    ) -> Result<Produced, CallError> {
        let request = post_message_request(channel, thread, text, buttons);
        let posted: SlackApiChatPostMessageResponse =
            self.call("chat.postMessage", &request).await?;
        Ok(Produced::Posted {
            conversation: posted.channel.0,
            message: posted.ts.0,
        })
    }

    /// `chat.update`: message `ts` of `channel` now says `text` (its buttons gone).
    pub async fn update_message(
        &self,
        channel: &str,
        ts: &str,
        text: &str,
    ) -> Result<Produced, CallError> {
        let request = SlackApiChatUpdateRequest::new(
            SlackChannelId(channel.to_owned()),
            content(text, &[]),
            SlackTs(ts.to_owned()),
        );
        let updated: SlackApiChatUpdateResponse = self.call("chat.update", &request).await?;
        Ok(Produced::Posted {
            conversation: updated.channel.0,
            message: updated.ts.0,
        })
    }

    /// `chat.postEphemeral`: `text` shown to `user` alone in `channel`.
    pub async fn post_ephemeral(
        &self,
        channel: &str,
        user: &str,
        text: &str,
    ) -> Result<Produced, CallError> {
        let request = ephemeral_request(channel, user, text);
        let _: SlackApiChatPostEphemeralResponse =
            self.call("chat.postEphemeral", &request).await?;
        Ok(Produced::Done)
    }

    /// `reactions.add`: `name` (an emoji, `eyes`) on message `ts` of `channel`; one already there is the same
    /// result.
    pub async fn add_reaction(
        &self,
        channel: &str,
        ts: &str,
        name: &str,
    ) -> Result<Produced, CallError> {
        let request = SlackApiReactionsAddRequest::new(
            SlackChannelId(channel.to_owned()),
            SlackReactionName(name.to_owned()),
            SlackTs(ts.to_owned()),
        );
        match self
            .send::<_, SlackApiReactionsAddResponse>("reactions.add", &request)
            .await?
        {
            Answer::Ok(_) => Ok(Produced::Done),
            Answer::Refused { code, .. } if code == "already_reacted" => Ok(Produced::Done),
            Answer::Refused { code, retry_after } => {
                Err(refused("reactions.add", &code, retry_after))
            }
        }
    }

    /// `auth.test`: who the token is (the bot user and its workspace), a read-only proof for `doctor`.
    pub async fn auth_test(&self) -> Result<String, CallError> {
        let me: SlackApiAuthTestResponse = self.call("auth.test", &serde_json::Map::new()).await?;
        Ok(format!(
            "the bot is {} ({}) in {}",
            me.user.as_deref().unwrap_or("unnamed"),
            me.user_id.0,
            me.team
        ))
    }
}

/// An `ok: false` as a call error: a rate limit or Slack's own trouble is transient, the rest permanent; either
/// way Slack's code is named.
fn refused(method: &str, code: &str, retry_after: Option<Duration>) -> CallError {
    let message = format!("{method}: Slack refused it: {code}");
    if TRANSIENT_CODES.contains(&code) {
        CallError::Transient {
            message,
            retry_after,
        }
    } else {
        CallError::Permanent { message }
    }
}

/// `Retry-After` in whole seconds, as Slack sends it.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// What `chat.postMessage` is sent (pure, for the tests).
pub fn post_message_request(
    channel: &str,
    thread: Option<&str>,
    text: &str,
    buttons: &[(String, String)],
) -> SlackApiChatPostMessageRequest {
    SlackApiChatPostMessageRequest::new(SlackChannelId(channel.to_owned()), content(text, buttons))
        .opt_thread_ts(thread.map(|ts| SlackTs(ts.to_owned())))
        .with_unfurl_links(false)
}

/// What `chat.postEphemeral` is sent (pure, for the tests).
pub fn ephemeral_request(
    channel: &str,
    user: &str,
    text: &str,
) -> SlackApiChatPostEphemeralRequest {
    SlackApiChatPostEphemeralRequest::new(
        SlackChannelId(channel.to_owned()),
        SlackUserId(user.to_owned()),
        SlackMessageContent::new().with_text(fit(text)),
    )
}

/// A message's content: its text (the notification's words), and with buttons a section of that text and one
/// row of buttons, each `action_id` its value's verb (unique in the message, as Slack requires).
fn content(text: &str, buttons: &[(String, String)]) -> SlackMessageContent {
    let text = fit(text);
    let content = SlackMessageContent::new().with_text(text.clone());
    if buttons.is_empty() {
        return content;
    }
    let elements = buttons
        .iter()
        .map(|(label, value)| {
            let verb = value.split(':').next().unwrap_or(value);
            let mut button =
                SlackBlockButtonElement::new(SlackBlockPlainText::new(label.clone()).into())
                    .with_action_id(SlackActionId(format!("pidevops_{verb}")))
                    .with_value(value.clone());
            if verb == "approve" {
                button = button.with_style(SlackBlockButtonStyle::Primary);
            }
            button.into()
        })
        .collect();
    let blocks = vec![
        SlackBlock::Section(
            SlackSectionBlock::new().with_text(SlackBlockMarkDownText::new(text).into()),
        ),
        SlackBlock::Actions(SlackActionsBlock::new(elements)),
    ];
    content.with_blocks(blocks)
}

/// Escapes text for Slack's mrkdwn: `&`, `<` and `>` (a stranger's `<!channel>` would ping everyone).
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Cuts `text` to fit one section, never inside an escape.
pub fn fit(text: &str) -> String {
    if text.chars().count() <= MAX_TEXT {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(MAX_TEXT - 2).collect();
    if let Some(amp) = cut.rfind('&') {
        if !cut[amp..].contains(';') {
            cut.truncate(amp);
        }
    }
    format!("{cut}\n…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_classified_by_slacks_code() {
        let wait = Some(Duration::from_secs(3));
        assert_eq!(
            refused("chat.postMessage", "ratelimited", wait),
            CallError::Transient {
                message: "chat.postMessage: Slack refused it: ratelimited".into(),
                retry_after: wait
            }
        );
        for code in ["channel_not_found", "not_in_channel", "invalid_auth"] {
            assert!(matches!(
                refused("chat.postMessage", code, None),
                CallError::Permanent { message } if message.ends_with(code)
            ));
        }
    }

    #[test]
    fn text_is_escaped_and_fits_a_section() {
        assert_eq!(escape("<!channel> & co"), "&lt;!channel&gt; &amp; co");
        let long = format!("{}&amp;", "x".repeat(MAX_TEXT - 4));
        let cut = fit(&long);
        assert!(cut.chars().count() <= MAX_TEXT);
        assert!(cut.ends_with("x\n…"), "{cut}");
    }

    #[test]
    fn buttons_are_a_section_and_one_row() {
        let request = post_message_request(
            "C1",
            Some("1.2"),
            "*T-7* waits",
            &[
                ("Approve".into(), "approve:T-7".into()),
                ("Reject".into(), "reject:T-7".into()),
            ],
        );
        let json = serde_json::to_value(&request).unwrap();
        assert_eq!(json["channel"], "C1");
        assert_eq!(json["thread_ts"], "1.2");
        assert_eq!(json["text"], "*T-7* waits");
        assert_eq!(json["blocks"][0]["type"], "section");
        assert_eq!(json["blocks"][1]["type"], "actions");
        let buttons = &json["blocks"][1]["elements"];
        assert_eq!(buttons[0]["value"], "approve:T-7");
        assert_eq!(buttons[0]["action_id"], "pidevops_approve");
        assert_eq!(buttons[1]["value"], "reject:T-7");
        let plain = serde_json::to_value(post_message_request("C1", None, "hi", &[])).unwrap();
        assert!(plain.get("blocks").is_none() && plain.get("thread_ts").is_none());
    }
}
