//! The buttons under pidevops's Slack messages (Block Kit, delivered as `slack.block_actions`): a press from a
//! user who may command there (`SlackIntake::refusal`, the channel the payload names) steers the board; every
//! press is answered to the presser alone (`chat.postEphemeral`), once (`slack:button:<event>` says whether it
//! was). A stranger's press, or a value not of the exact shape pidevops's own buttons carry (`verb:T-n`), changes
//! nothing and is recorded.

use anyhow::Context;
use serde::Deserialize;
use serde_json::Value;
use slack_morphism::events::{
    SlackInteractionActionContainer, SlackInteractionBlockActionsEvent, SlackInteractionEvent,
};

use super::SlackAction;
use crate::board::{BoardError, Steer};
use crate::domain::{EventType, NewEvent, Source};
use crate::effects::handle::{EffectsProgress, Handle, Settled, ACTOR};
use crate::effects::Request;
use crate::eventlog::StoredEvent;
use crate::providers::slack::escape;
use crate::providers::slack::settings::SlackSettings;
use crate::tasks::TaskId;

/// The event type of a button press (webhook.rs stores interactions as `slack.<payload type>`).
pub const BLOCK_ACTIONS: &str = "slack.block_actions";

/// A press: answered once, steering only for an allowed user in an allowed channel.
pub(super) async fn press(
    fx: &impl Handle<Action = SlackAction>,
    settings: &SlackSettings,
    event: &StoredEvent,
    progress: &mut EffectsProgress,
) -> anyhow::Result<Settled> {
    let Some(pressed) = read(event) else {
        return Ok(Settled::Yes);
    };
    let user = pressed.user.as_ref().map(|u| u.id.0.clone());
    let channel = channel_of(&pressed);
    let value = pressed
        .actions
        .as_ref()
        .and_then(|actions| actions.first())
        .and_then(|action| action.value.clone())
        .unwrap_or_default();
    let (Some(user), Some(channel)) = (user, channel) else {
        // Nowhere to answer: no one to show it to, or no channel to show it in.
        refused(
            fx,
            event,
            "",
            "",
            &value,
            "a press without a user or a channel",
        )
        .await?;
        return Ok(Settled::Yes);
    };
    let key = format!("slack:button:{}", event.id);
    let handled = fx.requested(&key).await?;
    let text = if handled {
        // Answered before (a replay, or a crash after the answer was asked for): never steer twice.
        String::new()
    } else if let Some(why) =
        settings
            .intake
            .refusal(&channel, channel.starts_with('D'), Some(&user))
    {
        refused(fx, event, &channel, &user, &value, &why).await?;
        "You may not steer pidevops from here; nothing was changed.".to_owned()
    } else {
        steered(fx, &value, &user).await?
    };
    let request = Request {
        key,
        task: None,
        action: SlackAction::Ephemeral {
            channel,
            user,
            text,
        },
    };
    if !handled {
        fx.request(&request, event.position).await?;
    }
    fx.drive(&request, progress).await
}

/// The press as Slack's `block_actions` payload; one that does not read is logged and left unanswered (there is
/// no trustworthy user or channel to answer).
fn read(event: &StoredEvent) -> Option<SlackInteractionBlockActionsEvent> {
    let read = serde_json::from_str::<Value>(event.data_json().get())
        .map_err(|e| e.to_string())
        .and_then(|data| SlackInteractionEvent::deserialize(&data).map_err(|e| e.to_string()));
    match read {
        Ok(SlackInteractionEvent::BlockActions(pressed)) => Some(pressed),
        Ok(_) => None,
        Err(reason) => {
            tracing::warn!(event = %event.id, %reason, "Slack interaction not read");
            None
        }
    }
}

/// The channel the button was pressed in: the payload's, else its message container's.
fn channel_of(pressed: &SlackInteractionBlockActionsEvent) -> Option<String> {
    if let Some(channel) = &pressed.channel {
        return Some(channel.id.0.clone());
    }
    match &pressed.container {
        SlackInteractionActionContainer::Message(message) => {
            message.channel_id.as_ref().map(|c| c.0.clone())
        }
        SlackInteractionActionContainer::MessageAttachment(message) => {
            message.channel_id.as_ref().map(|c| c.0.clone())
        }
        SlackInteractionActionContainer::View(_) => None,
    }
}

/// A button's value, if it is exactly one of pidevops's: `approve|reject|retry|cancel`, a colon, a task id.
pub fn parse_value(value: &str) -> Option<(Steer, TaskId)> {
    let (verb, id) = value.split_once(':')?;
    let steer = match verb {
        "approve" => Steer::Approve,
        "reject" => Steer::Reject,
        "retry" => Steer::Retry,
        "cancel" => Steer::Cancel,
        _ => return None,
    };
    let id: TaskId = id.parse().ok()?;
    // Its canonical spelling only: ` T-7`, `T-07` and the like were not sent by pidevops.
    (id.to_string() == id_text(value)).then_some((steer, id))
}

fn id_text(value: &str) -> &str {
    value.split_once(':').map_or("", |(_, id)| id)
}

/// What an allowed press does, as the answer the presser sees: the board decides; a refusal is the answer.
async fn steered(
    fx: &impl Handle<Action = SlackAction>,
    value: &str,
    user: &str,
) -> anyhow::Result<String> {
    let Some((steer, id)) = parse_value(value) else {
        return Ok(format!(
            "Unknown button {}: nothing was changed.",
            escape(&format!("{:?}", value.chars().take(40).collect::<String>()))
        ));
    };
    let board = fx.board();
    if steer == Steer::Reject {
        let plan = board.load(id).await?.is_some_and(|l| l.task.is_plan());
        if plan {
            return Ok(format!(
                "Say what to change: `pidevops plan reject {id} --comment …`. The planner gets your comment."
            ));
        }
    }
    let via = format!("from Slack by <@{user}>");
    Ok(match board.steer(id, steer, None, &via, "slack").await {
        Ok(outcome) if outcome.appended.is_empty() => {
            format!("{id} was already so ({}).", outcome.task.column())
        }
        Ok(outcome) => format!("{id}: {} — now {}.", steer.name(), outcome.task.column()),
        // The board's words may quote a title: escaped like any other text pidevops posts.
        Err(BoardError::Refused(refused)) => escape(&refused.to_string()),
        // What the person pressed (a comment too long): theirs to fix, not a failure to retry.
        Err(BoardError::Invalid(invalid)) => escape(&invalid.to_string()),
        Err(error) => return Err(error).with_context(|| format!("steering {id} from Slack")),
    })
}

/// A press that changes nothing: recorded once per press, with why.
async fn refused(
    fx: &impl Handle<Action = SlackAction>,
    event: &StoredEvent,
    channel: &str,
    user: &str,
    value: &str,
    reason: &str,
) -> anyhow::Result<()> {
    let body = serde_json::json!({
        "channel": channel,
        "user": user,
        "value": value.chars().take(80).collect::<String>(),
        "cause_event_id": event.id,
        "reason": reason,
    });
    let mut new = NewEvent::new(
        Source::Pidevops,
        EventType::from_stored("slack.button_refused".to_owned()),
        format!("slack:refused:{}", event.id),
        "application/json",
        bytes::Bytes::from(serde_json::to_vec(&body)?),
    );
    new.meta.insert("actor".to_owned(), Value::from(ACTOR));
    tracing::warn!(channel, user, reason, "Slack button press refused");
    fx.log()
        .append(new)
        .await
        .context("recording a refused button press")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pidevops_own_button_values_are_read() {
        let t7: TaskId = "T-7".parse().unwrap();
        assert_eq!(parse_value("approve:T-7"), Some((Steer::Approve, t7)));
        assert_eq!(parse_value("reject:T-7"), Some((Steer::Reject, t7)));
        assert_eq!(parse_value("retry:T-7"), Some((Steer::Retry, t7)));
        assert_eq!(parse_value("cancel:T-7"), Some((Steer::Cancel, t7)));
        for bad in [
            "archive:T-7",
            "approve T-7",
            "approve:",
            "approve: T-7",
            "approve:T-7 ",
            "approve:T-7:x",
            "Approve:T-7",
            "",
            "approve",
        ] {
            assert_eq!(parse_value(bad), None, "{bad:?}");
        }
    }
}
