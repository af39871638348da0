//! Slack's intake rules: a mention of pidevops in an allowed channel, a direct message to it, or `/pidevops`,
//! from an allowed user, makes a task (or, `plan …`, a plan) for the repository it names or the channel's
//! (`[slack.channels."C…"] repo`), else intake's default; a reply in a task's thread is its answer or a
//! follow-up (`Decision::Reply`, the thread named by its root message). Who may command is its settings'
//! (`settings.rs`: `SlackIntake::refusal`); a stranger or another channel is recorded as ignored and never
//! answered in the channel. Pure, like the rest of the rules; events are read as Slack's (slack-morphism's
//! `SlackPushEvent`), so a field Slack renames fails over its own payloads rather than reading as "no text".

use serde::Deserialize;
use serde_json::Value;
use slack_morphism::events::{SlackEventCallbackBody, SlackPushEvent};
use slack_morphism::SlackMessageOrigin;

use crate::board::Draft;
use crate::domain::Source;
use crate::intake::rules::{
    ignore, no_planner, ticket_draft, Decision, Payload, ProviderRules, RuleConfig,
};
use crate::providers::slack::messages::message_ref;
use crate::providers::slack::settings::SlackIntake;
use crate::tasks::{FollowUpOrigin, Links, RepoName, SlackThread, Spec, ValueError, SLACK_THREAD};

/// What Slack's rules decide with: intake's shared settings and its own (who may command, and where).
pub type Config<'a> = RuleConfig<'a, SlackIntake>;

/// Slack's intake rules, with its settings (`providers::intake_rules` builds them).
pub fn rules(own: SlackIntake) -> ProviderRules<SlackIntake> {
    ProviderRules {
        source: Source::Slack,
        own,
        reads: crate::intake::rules::every_type,
        decide,
    }
}

/// Decides what intake does with Slack's event `event_type`: a mention, a message (a direct one, or a reply in
/// a thread), a slash command; anything else (button presses are the `effects:slack` loop's) is not intake's.
pub fn decide(event_type: &str, data: &Payload<'_>, config: &Config<'_>) -> Decision {
    match event_type {
        "slack.app_mention" | "slack.message" => message(event_type, &data.read(), config),
        "slack.slash_command" => command(&data.read(), config),
        _ => Decision::NotIntake,
    }
}

/// A message as intake reads it, from a mention or a message event.
struct Said<'a> {
    origin: &'a SlackMessageOrigin,
    channel: &'a str,
    user: Option<&'a str>,
    text: &'a str,
    mention: bool,
}

impl Said<'_> {
    /// Whether it was said in a direct message to the bot (its channel type `im`).
    fn direct(&self) -> bool {
        self.origin
            .channel_type
            .as_ref()
            .is_some_and(|t| t.0 == "im")
    }
}

fn message(event_type: &str, data: &Value, config: &Config<'_>) -> Decision {
    let callback = match SlackPushEvent::deserialize(data) {
        Ok(SlackPushEvent::EventCallback(callback)) => callback,
        Ok(_) => return Decision::NotIntake,
        Err(e) if event_type == "slack.app_mention" => {
            return ignore(format!(
                "a mention that does not read as Slack's event callback: {e}"
            ))
        }
        Err(_) => return Decision::NotIntake,
    };
    let said = match &callback.event {
        SlackEventCallbackBody::AppMention(mention) => Said {
            origin: &mention.origin,
            channel: mention.channel.0.as_str(),
            user: Some(mention.user.0.as_str()),
            text: mention.content.text.as_deref().unwrap_or_default(),
            mention: true,
        },
        // What a person wrote: no subtype (an edit, a join, a bot's post are not), no bot behind it.
        SlackEventCallbackBody::Message(message)
            if message.subtype.is_none() && message.sender.bot_id.is_none() =>
        {
            let Some(channel) = message.origin.channel.as_ref() else {
                return Decision::NotIntake;
            };
            Said {
                origin: &message.origin,
                channel: channel.0.as_str(),
                user: message.sender.user.as_ref().map(|u| u.0.as_str()),
                text: message
                    .content
                    .as_ref()
                    .and_then(|c| c.text.as_deref())
                    .unwrap_or_default(),
                mention: false,
            }
        }
        // Slack's other events (and a message of a subtype) ask for nothing; the type is non-exhaustive.
        _ => return Decision::NotIntake,
    };
    let ts = said.origin.ts.0.as_str();
    let thread = said.origin.thread_ts.as_ref().map(|t| t.0.as_str());
    if let Some(root) = thread.filter(|root| *root != ts) {
        return reply(&said, root, config);
    }
    let direct = said.direct();
    // In a channel only a mention asks; a channel's other messages are its people's (the `app_mention` event
    // carries the mention; its `message` twin is not a second ask).
    if !said.mention && !direct {
        return Decision::NotIntake;
    }
    let what = if said.mention {
        "a mention"
    } else {
        "a direct message"
    };
    if let Some(why) = config.own.refusal(said.channel, direct, said.user) {
        return ignore(format!("{what} refused: {why}"));
    }
    let key = format!("slack:{}:{ts}", said.channel);
    let thread = SlackThread::new(said.channel, Some(ts));
    ask(
        &key,
        thread,
        &strip_mentions(said.text),
        said.channel,
        config,
    )
}

/// A message in a thread: about the task of that thread if pidevops speaks there (intake finds it by the
/// thread's record, or by the key of the message that asked for the task); who may answer is who may command.
fn reply(said: &Said<'_>, root: &str, config: &Config<'_>) -> Decision {
    let text = strip_mentions(said.text);
    if text.is_empty() {
        return Decision::NotIntake;
    }
    let who = said
        .user
        .map_or_else(|| "someone".to_owned(), |u| format!("<@{u}>"));
    let Ok(origin) = FollowUpOrigin::new(
        format!("slack:{}:{}", said.channel, said.origin.ts.0),
        format!("{who} in Slack"),
    ) else {
        return Decision::NotIntake;
    };
    let direct = said.direct();
    Decision::Reply {
        to: Box::new(message_ref(said.channel, root)),
        text,
        origin,
        refusal: config.own.refusal(said.channel, direct, said.user),
    }
}

/// A slash command's fields, as Slack sends them (slack-morphism's `SlackCommandEvent`, less `response_url`,
/// which is never stored).
#[derive(Deserialize)]
struct Command {
    channel_id: String,
    user_id: String,
    command: String,
    #[serde(default)]
    text: String,
    trigger_id: String,
    #[serde(default)]
    channel_name: Option<String>,
}

/// `/pidevops [plan] [owner/repo] what to do`: the same ask as a mention, its thread started by pidevops.
fn command(data: &Value, config: &Config<'_>) -> Decision {
    let command = match Command::deserialize(data) {
        Ok(command) => command,
        Err(e) => {
            return ignore(format!(
                "a slash command that does not read as Slack's: {e}"
            ))
        }
    };
    let direct = command.channel_name.as_deref() == Some("directmessage")
        || command.channel_id.starts_with('D');
    if let Some(why) = config
        .own
        .refusal(&command.channel_id, direct, Some(&command.user_id))
    {
        return ignore(format!("{} refused: {why}", command.command));
    }
    let key = format!(
        "slack-command:{}:{}",
        command.channel_id, command.trigger_id
    );
    let thread = SlackThread::new(&command.channel_id, None);
    ask(
        &key,
        thread,
        command.text.trim(),
        &command.channel_id,
        config,
    )
}

/// What was asked (`[plan] [owner/repo] what to do`) as a task or plan keyed `key`, linked to its thread.
fn ask(
    key: &str,
    thread: Result<SlackThread, ValueError>,
    text: &str,
    channel: &str,
    config: &Config<'_>,
) -> Decision {
    let (plan, text) = match text.split_once(char::is_whitespace) {
        Some((word, rest)) if word.eq_ignore_ascii_case("plan") => (true, rest.trim()),
        _ => (false, text),
    };
    let usage = if plan {
        "usage: @pidevops plan [owner/repo] <the goal>"
    } else {
        "usage: @pidevops [owner/repo] <what to do>"
    };
    if plan && !config.planner {
        return no_planner("a plan asked for in Slack refused");
    }
    let named = text
        .split_once(char::is_whitespace)
        .filter(|(first, _)| first.contains('/'))
        .and_then(|(first, rest)| Some((first.parse::<RepoName>().ok()?, rest.trim())));
    let (repo, what) = match named {
        Some((repo, what)) => (repo, what),
        None => match config
            .own
            .channel_repos
            .get(channel)
            .or(config.default_repo.as_ref())
        {
            Some(repo) => (repo.clone(), text),
            None => {
                return ignore(format!(
                    "no repository: name one ({usage}), or set [slack.channels.{channel}] repo"
                ))
            }
        },
    };
    let built = (|| -> Result<Draft, ValueError> {
        let spec = Spec::new(what, "", "")?;
        let links = Links::default().with(SLACK_THREAD, &thread?);
        Ok(ticket_draft(plan, None, repo, spec, links))
    })();
    match built {
        Ok(draft) => match config.allowed_repos.check(&draft.repo) {
            Ok(()) => Decision::Create {
                key: key.to_owned(),
                draft: Box::new(draft),
            },
            Err(refused) => ignore(format!("a Slack ask refused: {refused}")),
        },
        Err(e) => ignore(format!("{usage} ({e})")),
    }
}

/// The text without Slack's user mentions (`<@U0BOT>`, `<@U0BOT|pidevops>`), trimmed: what was asked.
pub fn strip_mentions(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<@") {
        out.push_str(&rest[..start]);
        match rest[start..].find('>') {
            Some(end) => rest = &rest[start + end + 1..],
            None => {
                rest = &rest[start..];
                break;
            }
        }
    }
    out.push_str(rest);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests;
