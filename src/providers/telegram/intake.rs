//! Telegram's intake rules: who may command pidevops from a chat, and the two commands that make work, `/new`
//! (a task) and `/plan` (a plan: a planner splits the goal into tasks), and replies to pidevops's questions. Pure,
//! like the rest of the rules; built with its settings by `providers::intake_rules` ([`rules`]). Updates are read
//! as the Bot API's `Update` (frankenstein's types), here for the bot too (`effects/bot.rs`). The allow-lists are
//! its settings' (`settings.rs`: `TELEGRAM_ALLOWED_CHATS`, `TELEGRAM_ALLOWED_USERS`).

use std::collections::BTreeSet;

use frankenstein::types::{Message, User};
use frankenstein::updates::{Update, UpdateContent};
use serde::Deserialize;
use serde_json::Value;

use crate::board::Draft;
use crate::domain::Source;
use crate::intake::rules::{
    ignore, no_planner, ticket_draft, Decision, Payload, ProviderRules, RuleConfig,
};
use crate::providers::telegram::settings::TelegramSettings;
use crate::tasks::{Links, RepoName, Spec, TelegramMessage, ValueError, TELEGRAM};

/// What Telegram's rules decide with: intake's shared settings and its own (who may command).
pub type Config<'a> = RuleConfig<'a, TelegramSettings>;

/// Telegram's intake rules, with its settings (`providers::intake_rules` builds them).
pub fn rules(own: TelegramSettings) -> ProviderRules<TelegramSettings> {
    ProviderRules {
        source: Source::Telegram,
        own,
        reads: crate::intake::rules::every_type,
        decide,
    }
}

/// Decides what intake does with Telegram's event `event_type` (`telegram.message`; any other is not intake's).
pub fn decide(event_type: &str, data: &Payload<'_>, config: &Config<'_>) -> Decision {
    match event_type {
        "telegram.message" => telegram_message(&data.read(), config),
        _ => Decision::NotIntake,
    }
}

/// Who may command pidevops from Telegram (commands, `/new`, `/plan` and button presses): someone in an allowed
/// chat and, when `TELEGRAM_ALLOWED_USERS` is set, one of those users (in any chat, groups included). `None` when
/// allowed; otherwise the reason, naming the variable to change.
pub fn telegram_refusal(
    chats: &BTreeSet<i64>,
    users: Option<&BTreeSet<i64>>,
    chat: i64,
    user: Option<i64>,
) -> Option<String> {
    if !chats.contains(&chat) {
        return Some(format!("chat {chat} is not in TELEGRAM_ALLOWED_CHATS"));
    }
    match (users, user) {
        (None, _) => None,
        (Some(users), Some(user)) if users.contains(&user) => None,
        (Some(_), Some(user)) => Some(format!("user {user} is not in TELEGRAM_ALLOWED_USERS")),
        (Some(_), None) => {
            Some("a message without a sender; TELEGRAM_ALLOWED_USERS is set".to_owned())
        }
    }
}

/// An update as ingress stored it, read as the Bot API's `Update` (frankenstein's): the one reading intake and the
/// bot share, so a field Telegram renames or retypes fails in the tests over Telegram's own updates rather than
/// reading as "no text" here. The error is serde's, naming the field.
pub fn read_update(data: &Value) -> Result<Update, String> {
    Update::deserialize(data)
        .map_err(|e| format!("an update that does not read as the Bot API's Update: {e}"))
}

/// A Telegram user as pidevops names them: their username, else their first name.
pub fn user_name(user: Option<&User>) -> String {
    user.map_or_else(
        || "someone".to_owned(),
        |user| {
            user.username
                .clone()
                .unwrap_or_else(|| user.first_name.clone())
        },
    )
}

/// A user's id as the allow-lists hold them.
pub fn user_id(user: Option<&User>) -> Option<i64> {
    user.and_then(|user| i64::try_from(user.id).ok())
}

/// `/new owner/repo what to do` makes a task, `/plan owner/repo the goal` a plan; both keyed by the message
/// (`telegram:<chat>:<message>`), so a redelivered update makes nothing twice. An update that does not read as
/// the Bot API's is refused, saying why, when its text asks for work; otherwise it is not intake's business.
pub fn telegram_message(data: &Value, config: &Config<'_>) -> Decision {
    let message = match read_update(data) {
        Ok(Update {
            content: UpdateContent::Message(message),
            ..
        }) => message,
        Ok(_) => return Decision::NotIntake,
        Err(reason) => {
            let text = data["message"]["text"].as_str().unwrap_or_default();
            let asks = command_args(text, "/new").or_else(|| command_args(text, "/plan"));
            return match asks {
                Some(_) => ignore(reason),
                None => Decision::NotIntake,
            };
        }
    };
    let text = message.text.as_deref().unwrap_or_default();
    let (command, rest, plan) = match (command_args(text, "/new"), command_args(text, "/plan")) {
        (Some(rest), _) => ("/new", rest, false),
        (None, Some(rest)) => ("/plan", rest, true),
        (None, None) => return telegram_reply(&message, config),
    };
    let chat = message.chat.id;
    let from = message.from.as_deref();
    if let Some(why) = telegram_refusal(
        &config.own.allowed_chats,
        config.own.allowed_users.as_ref(),
        chat,
        user_id(from),
    ) {
        return ignore(format!("{command} from {}: {why}", user_name(from)));
    }
    if plan && !config.planner {
        return no_planner("/plan refused");
    }
    let mut words = rest.splitn(2, char::is_whitespace);
    let (repo, what) = (
        words.next().unwrap_or_default(),
        words.next().unwrap_or("").trim(),
    );
    let built = (|| -> Result<(String, Draft), ValueError> {
        let repo: RepoName = repo.parse()?;
        let message_id = i64::from(message.message_id);
        let spec = Spec::new(what, "", "")?;
        let links = Links::default().with(TELEGRAM, &TelegramMessage::new(chat, message_id)?);
        let draft = ticket_draft(plan, None, repo, spec, links);
        Ok((format!("telegram:{chat}:{message_id}"), draft))
    })();
    match built {
        Ok((key, draft)) => match config.allowed_repos.check(&draft.repo) {
            Ok(()) => Decision::Create {
                key,
                draft: Box::new(draft),
            },
            Err(refused) => ignore(format!("{command} refused: {refused}")),
        },
        Err(e) if plan => ignore(format!("usage: /plan <owner/repo> <the goal> ({e})")),
        Err(e) => ignore(format!("usage: /new <owner/repo> <what to do> ({e})")),
    }
}

/// The arguments of `/cmd args` or `/cmd@bot args`; `None` for any other text.
fn command_args<'a>(text: &'a str, command: &str) -> Option<&'a str> {
    let (head, rest) = text
        .trim()
        .split_once(char::is_whitespace)
        .unwrap_or((text.trim(), ""));
    let name = head.split('@').next().unwrap_or_default();
    (name == command).then(|| rest.trim())
}

/// A message that replies to another (`reply_to_message`) and is no command: perhaps an answer to a question
/// pidevops asked there. Keyed by the reply itself (`telegram:<chat>:<message>`); intake looks up what the
/// replied-to message was. Who may answer is who may command.
fn telegram_reply(message: &Message, config: &Config<'_>) -> Decision {
    let Some(to) = message.reply_to_message.as_deref() else {
        return Decision::NotIntake;
    };
    let text = message.text.as_deref().unwrap_or_default().trim();
    if text.is_empty() || text.starts_with('/') {
        return Decision::NotIntake;
    }
    let chat = message.chat.id;
    let from = message.from.as_deref();
    let who = match from.and_then(|user| user.username.as_deref()) {
        Some(username) => format!("@{username}"),
        None => user_name(from),
    };
    let Ok(origin) = crate::tasks::FollowUpOrigin::new(
        format!("telegram:{chat}:{}", message.message_id),
        format!("{who} in Telegram"),
    ) else {
        return Decision::NotIntake;
    };
    let refusal = telegram_refusal(
        &config.own.allowed_chats,
        config.own.allowed_users.as_ref(),
        chat,
        user_id(from),
    );
    Decision::Reply {
        to: Box::new(crate::providers::telegram::messages::message_ref(
            chat,
            i64::from(to.message_id),
        )),
        text: text.to_owned(),
        origin,
        refusal,
    }
}
