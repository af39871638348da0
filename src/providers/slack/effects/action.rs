//! What `effects:slack` can be asked to do. Stored in `effect.requested` under `action` (`slack_post`, …): the
//! names are the log's, so they never change.

use serde::{Deserialize, Serialize};

use crate::effects::ProviderAction;

/// A Slack Web API call. Everything the call needs is in it, so the call is the same whoever makes it, whenever.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action")]
pub enum SlackAction {
    /// A message in `channel` (`chat.postMessage`), in the thread rooted at `thread` when given (none: a root
    /// message, the thread pidevops starts for a `/pidevops` command), in Slack's mrkdwn (escaped when it was
    /// built), with buttons (label, value `verb:T-n`) under it. `question`: it asks the agent's question.
    #[serde(rename = "slack_post")]
    Post {
        channel: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        thread: Option<String>,
        text: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        buttons: Vec<(String, String)>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        question: bool,
    },
    /// Message `ts` of `channel` rewritten (`chat.update`): a task's live status, its buttons gone.
    #[serde(rename = "slack_update")]
    Update {
        channel: String,
        ts: String,
        text: String,
    },
    /// A message shown to `user` alone (`chat.postEphemeral`): the answer to a button press.
    #[serde(rename = "slack_ephemeral")]
    Ephemeral {
        channel: String,
        user: String,
        text: String,
    },
    /// An emoji on a message (`reactions.add`): pidevops has seen the ask.
    #[serde(rename = "slack_react")]
    React {
        channel: String,
        ts: String,
        name: String,
    },
}

impl ProviderAction for SlackAction {
    fn name(&self) -> &'static str {
        match self {
            SlackAction::Post { .. } => "slack_post",
            SlackAction::Update { .. } => "slack_update",
            SlackAction::Ephemeral { .. } => "slack_ephemeral",
            SlackAction::React { .. } => "slack_react",
        }
    }

    fn safe_to_repeat(&self) -> bool {
        match self {
            // Slack has no idempotency key for a post: one cut off is recorded in doubt, never posted twice.
            SlackAction::Post { .. } | SlackAction::Ephemeral { .. } => false,
            // A second reaction is `already_reacted`, which the client counts as done; an edit made twice
            // leaves the same message.
            SlackAction::React { .. } | SlackAction::Update { .. } => true,
        }
    }
}
