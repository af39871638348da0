//! Telegram's side of intake: who may command pidevops from a chat, and the two commands that make work, `/new`
//! (a task) and `/plan` (a plan: a planner splits the goal into tasks). Pure, like the rest of the rules.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{ignore, no_planner, Decision, IntakeConfig};
use crate::board::Draft;
use crate::tasks::{Links, RepoName, Spec, TelegramMessage, ValueError};

pub(super) fn telegram_ids(
    list: &str,
    variable: &str,
    what: &str,
) -> Result<BTreeSet<i64>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(|id| {
            id.parse::<i64>()
                .map_err(|_| format!("{variable}: {id:?} is not a {what} id (a whole number)"))
        })
        .collect()
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

/// `/new owner/repo what to do` makes a task, `/plan owner/repo the goal` a plan; both keyed by the message
/// (`telegram:<chat>:<message>`), so a redelivered update makes nothing twice.
pub(super) fn telegram_message(data: &Value, config: &IntakeConfig) -> Decision {
    let message = &data["message"];
    let text = message["text"].as_str().unwrap_or_default();
    let (command, rest, plan) = match (command_args(text, "/new"), command_args(text, "/plan")) {
        (Some(rest), _) => ("/new", rest, false),
        (None, Some(rest)) => ("/plan", rest, true),
        (None, None) => return telegram_reply(message, config),
    };
    let chat = message["chat"]["id"].as_i64().unwrap_or_default();
    if let Some(why) = telegram_refusal(
        &config.telegram_allowed_chats,
        config.telegram_allowed_users.as_ref(),
        chat,
        message["from"]["id"].as_i64(),
    ) {
        let who = message["from"]["username"]
            .as_str()
            .or_else(|| message["from"]["first_name"].as_str())
            .unwrap_or("someone");
        return ignore(format!("{command} from {who}: {why}"));
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
        let message_id = message["message_id"].as_i64().unwrap_or_default();
        let spec = Spec::new(what, "", "")?;
        let links = Links {
            telegram: Some(TelegramMessage::new(chat, message_id)?),
            ..Links::default()
        };
        let draft = if plan {
            Draft::plan(repo, spec, links)
        } else {
            Draft::new(repo, spec, links)
        };
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
fn telegram_reply(message: &Value, config: &IntakeConfig) -> Decision {
    let Some(to) = message["reply_to_message"]["message_id"].as_i64() else {
        return Decision::NotIntake;
    };
    let text = message["text"].as_str().unwrap_or_default().trim();
    if text.is_empty() || text.starts_with('/') {
        return Decision::NotIntake;
    }
    let chat = message["chat"]["id"].as_i64().unwrap_or_default();
    let message_id = message["message_id"].as_i64().unwrap_or_default();
    let who = message["from"]["username"]
        .as_str()
        .map(|name| format!("@{name}"))
        .or_else(|| message["from"]["first_name"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "someone".to_owned());
    let Ok(origin) = crate::tasks::FollowUpOrigin::new(
        format!("telegram:{chat}:{message_id}"),
        format!("{who} in Telegram"),
    ) else {
        return Decision::NotIntake;
    };
    let refusal = telegram_refusal(
        &config.telegram_allowed_chats,
        config.telegram_allowed_users.as_ref(),
        chat,
        message["from"]["id"].as_i64(),
    );
    Decision::TelegramReply {
        chat,
        to,
        text: text.to_owned(),
        origin,
        refusal,
    }
}
