//! The Telegram bot, part of the Telegram policy: a command in a message or a button press, from an allowed chat
//! and user, is done and answered once (the reply effect `telegram:reply:<event>` or `telegram:callback:<event>`
//! says whether it was); anything else is refused and recorded. Parsing is pure; `answer` reads the read models
//! and steers the board.

use std::fmt::Write as _;

use anyhow::Context;
use frankenstein::types::{MaybeInaccessibleMessage, Message, User};
use frankenstein::updates::UpdateContent;
use serde_json::Value;

use super::TelegramAction;
use crate::board::{Board, BoardError, Steer};
use crate::domain::{EventType, NewEvent, Source};
use crate::effects::handle::{EffectsProgress, Handle, Settled, ACTOR};
use crate::effects::Request;
use crate::eventlog::StoredEvent;
use crate::loops::{LoopRegistry, LoopState};
use crate::projectors::runs::{self, Which};
use crate::projectors::tasks::{self as task_rows, TaskFilter};
use crate::providers::telegram::intake::{read_update, telegram_refusal, user_id, user_name};
use crate::providers::telegram::settings::TelegramSettings;
use crate::providers::telegram::{escape, fit};
use crate::tasks::{Column, TaskId, GITHUB_PR};

pub const HELP: &str = "/status — loops, queue, pause
/tasks [column] — the board (triage, todo, in-progress, in-review, done)
/task T-n — one task
/new owner/repo what to do — a new task
/plan owner/repo the goal — a plan: a planner splits it into tasks
/approve T-n · /reject T-n [comment] · /retry T-n · /cancel T-n
/pause · /resume — new runs
/runs — recent runs";

/// The menu `setMyCommands` sets at start-up: the commands without their arguments.
pub fn menu() -> Vec<(String, String)> {
    [
        ("help", "what the bot can do"),
        ("status", "loops, queue, pause"),
        ("tasks", "the board: /tasks [column]"),
        ("task", "one task: /task T-n"),
        ("new", "a new task: /new owner/repo what to do"),
        ("plan", "a plan: /plan owner/repo the goal"),
        ("approve", "/approve T-n"),
        ("reject", "/reject T-n [comment]"),
        ("retry", "/retry T-n"),
        ("cancel", "/cancel T-n"),
        ("pause", "no new runs"),
        ("resume", "runs start again"),
        ("runs", "recent runs"),
    ]
    .into_iter()
    .map(|(c, d)| (c.to_owned(), d.to_owned()))
    .collect()
}

/// The commands the bot understands; `/help` shows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BotCommand {
    Help,
    Status,
    Tasks(Option<Column>),
    Task(TaskId),
    Steer(Steer, TaskId),
    /// `/reject T-n <comment>`: a rejection that says why (for a plan, what its planner gets).
    Reject(TaskId, String),
    Pause,
    Resume,
    Runs,
    /// `/new` is intake's: the reply says which task it made.
    New,
    /// `/plan` is intake's too: the reply says which plan it made.
    Plan,
}

/// The command in a message's text: `/cmd args` or `/cmd@BotName args` (groups). `Err`: a command we do not know
/// or a bad argument, with the reply that says so. `None`: not a command.
pub fn parse(text: &str) -> Option<Result<BotCommand, String>> {
    let text = text.trim();
    if !text.starts_with('/') {
        return None;
    }
    let (head, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
    let name = head.split('@').next().unwrap_or_default();
    let arg = rest.split_whitespace().next();
    let task = |verb: &str| -> Result<TaskId, String> {
        arg.ok_or_else(|| format!("usage: {verb} T-n"))?
            .parse::<TaskId>()
            .map_err(|e| e.to_string())
    };
    Some(match name {
        "/help" | "/start" => Ok(BotCommand::Help),
        "/status" => Ok(BotCommand::Status),
        "/tasks" => match arg {
            None => Ok(BotCommand::Tasks(None)),
            Some(column) => column
                .parse::<Column>()
                .map(|c| BotCommand::Tasks(Some(c)))
                .map_err(|e| e.to_string()),
        },
        "/task" => task("/task").map(BotCommand::Task),
        "/approve" => task("/approve").map(|id| BotCommand::Steer(Steer::Approve, id)),
        "/reject" => task("/reject").map(|id| {
            let comment = rest
                .trim_start()
                .split_once(char::is_whitespace)
                .map(|(_, c)| c.trim());
            match comment.filter(|c| !c.is_empty()) {
                Some(comment) => BotCommand::Reject(id, comment.to_owned()),
                None => BotCommand::Steer(Steer::Reject, id),
            }
        }),
        "/retry" => task("/retry").map(|id| BotCommand::Steer(Steer::Retry, id)),
        "/cancel" => task("/cancel").map(|id| BotCommand::Steer(Steer::Cancel, id)),
        "/pause" => Ok(BotCommand::Pause),
        "/resume" => Ok(BotCommand::Resume),
        "/runs" => Ok(BotCommand::Runs),
        "/new" => Ok(BotCommand::New),
        "/plan" => Ok(BotCommand::Plan),
        other => Err(format!("unknown command {other}; /help lists them")),
    })
}

/// A bot command in a message: answered once (the reply effect's stream says whether it was), only in the
/// allowed chats; anything else is refused and recorded.
pub(super) async fn command(
    fx: &impl Handle<Action = TelegramAction>,
    settings: &TelegramSettings,
    event: &StoredEvent,
    progress: &mut EffectsProgress,
) -> anyhow::Result<Settled> {
    let Some(UpdateContent::Message(message)) = content(event) else {
        return Ok(Settled::Yes);
    };
    let text = message.text.as_deref().unwrap_or_default();
    let Some(parsed) = parse(text) else {
        return Ok(Settled::Yes);
    };
    let chat = message.chat.id;
    let from = message.from.as_deref();
    let who = user_name(from);
    if let Some(why) = may_command(settings, chat, from) {
        // `/new` and `/plan` from a stranger are intake's to record; every other command is recorded here.
        if !matches!(parsed, Ok(BotCommand::New | BotCommand::Plan)) {
            refused(fx, event, chat, &who, text, &why).await?;
        }
        return Ok(Settled::Yes);
    }
    let key = format!("telegram:reply:{}", event.id);
    let handled = fx.requested(&key).await?;
    let html = if handled {
        // Answered before (a replay, or a crash after the reply was asked for): never act twice.
        String::new()
    } else {
        match &parsed {
            Ok(command @ (BotCommand::New | BotCommand::Plan)) => {
                match intake_said(fx, event, &message).await? {
                    Some(said) => made(command, said),
                    // Intake follows the log on its own loop: the answer waits for its decision, a little.
                    None if waited(event) < INTAKE_WAIT => {
                        return Ok(Settled::Waiting(
                            chrono::Utc::now() + chrono::Duration::seconds(1),
                        ))
                    }
                    None => {
                        escape("Not made yet: intake has not decided. /tasks shows it once it has.")
                    }
                }
            }
            Ok(command) => answer(
                command,
                &who,
                Some(&message),
                fx.board(),
                fx.log(),
                fx.loops(),
            )
            .await
            .with_context(|| format!("answering {command:?}"))?,
            Err(usage) => escape(usage),
        }
    };
    let request = Request {
        key,
        task: None,
        action: TelegramAction::Send {
            chat,
            html,
            buttons: Vec::new(),
            reply_prompt: None,
        },
    };
    if !handled {
        fx.request(&request, event.position).await?;
    }
    fx.drive(&request, progress).await
}

/// A button press (`approve:T-7`, …): steered like the command, from an allowed chat only; every press is
/// answered (a refusal too), once — the answer effect's stream says whether it was.
pub(super) async fn button(
    fx: &impl Handle<Action = TelegramAction>,
    settings: &TelegramSettings,
    event: &StoredEvent,
    progress: &mut EffectsProgress,
) -> anyhow::Result<Settled> {
    let Some(UpdateContent::CallbackQuery(query)) = content(event) else {
        return Ok(Settled::Yes);
    };
    let callback = query.id.as_str();
    // The chat of the message the button was on; a press without one (an inline message's) is from no allowed chat.
    let chat = match &query.message {
        Some(MaybeInaccessibleMessage::Message(message)) => message.chat.id,
        Some(MaybeInaccessibleMessage::InaccessibleMessage(message)) => message.chat.id,
        None => 0,
    };
    let who = user_name(Some(&query.from));
    let data = query.data.as_deref().unwrap_or_default();
    let key = format!("telegram:callback:{}", event.id);
    let handled = fx.requested(&key).await?;
    let text = if handled {
        String::new()
    } else if let Some(why) = may_command(settings, chat, Some(&query.from)) {
        refused(fx, event, chat, &who, data, &why).await?;
        if why.contains("TELEGRAM_ALLOWED_USERS") {
            "You are not allowed to steer pidevops.".to_owned()
        } else {
            "Not allowed from this chat.".to_owned()
        }
    } else {
        pressed(fx, data, &who).await?
    };
    let request = Request {
        key,
        task: None,
        action: TelegramAction::AnswerCallback {
            callback: callback.to_owned(),
            text,
        },
    };
    if !handled {
        fx.request(&request, event.position).await?;
    }
    fx.drive(&request, progress).await
}

/// What an allowed press of button `data` (`verb:T-n`) does, as the short plain notice Telegram shows. Only data
/// of exactly that shape is a button: anything else in a callback was not sent by pidevops's own keyboards.
async fn pressed(
    fx: &impl Handle<Action = TelegramAction>,
    data: &str,
    who: &str,
) -> anyhow::Result<String> {
    let command = data
        .split_once(':')
        .filter(|_| !data.contains(char::is_whitespace))
        .filter(|(_, id)| id.parse::<TaskId>().is_ok())
        .map(|(verb, id)| format!("/{verb} {id}"))
        .and_then(|text| parse(&text));
    let Some(Ok(command @ BotCommand::Steer(..))) = command else {
        return Ok(format!("Unknown button {data:?}."));
    };
    let answer = answer(&command, who, None, fx.board(), fx.log(), fx.loops())
        .await
        .with_context(|| format!("answering the button {data:?}"))?;
    // The notice is plain text, short: the answer's markup goes, and what it escaped reads as typed.
    Ok(answer
        .replace("<b>", "")
        .replace("</b>", "")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
        .chars()
        .take(190)
        .collect())
}

/// Why `from` may not command pidevops in `chat`; `None` when they may (intake's rule for `/new`, too).
fn may_command(settings: &TelegramSettings, chat: i64, from: Option<&User>) -> Option<String> {
    telegram_refusal(
        &settings.allowed_chats,
        settings.allowed_users.as_ref(),
        chat,
        user_id(from),
    )
}

/// The event's update, read as the Bot API's (intake's reading). One that does not read is logged and left
/// unanswered: without a chat or a callback id that reads there is nowhere trustworthy to answer (intake records a
/// `/new` or `/plan` in one as refused).
fn content(event: &StoredEvent) -> Option<UpdateContent> {
    let read = serde_json::from_str::<Value>(event.data_json().get())
        .map_err(|e| format!("an update that is not JSON: {e}"))
        .and_then(|data| read_update(&data));
    match read {
        Ok(update) => Some(update.content),
        Err(reason) => {
            tracing::warn!(event = %event.id, %reason, "Telegram update not read");
            None
        }
    }
}

/// A command from a chat or a user that is not allowed: recorded (once per message), not answered.
async fn refused(
    fx: &impl Handle<Action = TelegramAction>,
    event: &StoredEvent,
    chat: i64,
    who: &str,
    text: &str,
    reason: &str,
) -> anyhow::Result<()> {
    let body = serde_json::json!({
        "chat": chat,
        "from": who,
        "command": text.split_whitespace().next().unwrap_or_default(),
        "cause_event_id": event.id,
        "reason": reason,
    });
    let mut new = NewEvent::new(
        Source::Pidevops,
        EventType::from_stored("telegram.command_refused".to_owned()),
        format!("telegram:refused:{}", event.id),
        "application/json",
        bytes::Bytes::from(serde_json::to_vec(&body)?),
    );
    new.meta.insert("actor".to_owned(), Value::from(ACTOR));
    tracing::warn!(chat, who, reason, "Telegram command refused");
    fx.log()
        .append(new)
        .await
        .context("recording a refused command")?;
    Ok(())
}

/// What the bot answers `command` from `who` (a Telegram user's name), having done what it asks; `message` is the
/// command's own (a button press has none: it only steers).
pub async fn answer(
    command: &BotCommand,
    who: &str,
    message: Option<&Message>,
    board: &Board,
    log: &crate::eventlog::EventLog,
    loops: Option<&LoopRegistry>,
) -> anyhow::Result<String> {
    let store = board.store();
    let html = match command {
        BotCommand::Help => escape(HELP),
        BotCommand::Status => status(store, loops).await?,
        BotCommand::Tasks(column) => tasks(store, *column).await?,
        BotCommand::Task(id) => task(store, *id).await?,
        BotCommand::Steer(steer, id) => steered(board, *steer, *id, who, None).await?,
        BotCommand::Reject(id, comment) => {
            steered(board, Steer::Reject, *id, who, Some(comment.clone())).await?
        }
        BotCommand::Pause | BotCommand::Resume => {
            paused(log, *command == BotCommand::Pause, who).await?
        }
        BotCommand::Runs => recent_runs(store).await?,
        // Answered in `command`, once intake has decided; here only the board's view.
        BotCommand::New | BotCommand::Plan => match message {
            Some(message) => created(board, message).await?,
            None => escape("No task: /new owner/repo what to do"),
        },
    };
    Ok(fit(&html))
}

/// `/status`: queue, runs, pause, and the loops that are not well.
async fn status(
    store: &crate::eventlog::EventStore,
    loops: Option<&LoopRegistry>,
) -> anyhow::Result<String> {
    let paused = crate::board::pause::pause_state(store).await?;
    let queue = task_rows::list(
        store,
        &TaskFilter {
            column: Some(Column::Todo),
            ..TaskFilter::default()
        },
    )
    .await?
    .len();
    let running = runs::query(store, Which::Running).await?.len();
    let mut out = format!("<b>pidevops</b>: {queue} queued, {running} running");
    match paused {
        Some(reason) => {
            let _ = write!(out, ", <b>paused</b> ({})", escape(&reason));
        }
        None => out.push_str(", dispatching"),
    }
    if let Some(loops) = loops {
        out.push_str(&loops_line(loops));
    }
    Ok(out)
}

/// How many loops are armed, and each one that is unarmed, stale or failing, with why.
fn loops_line(loops: &LoopRegistry) -> String {
    let report = loops.report();
    let bad: Vec<String> = report
        .iter()
        .filter(|(_, r)| r.state == LoopState::Unarmed || r.stale || r.failing)
        .map(|(name, r)| {
            let why = r
                .reason
                .clone()
                .or(r.last_error.clone())
                .unwrap_or_else(|| "stale".into());
            format!("⚠️ {}: {}", escape(name), escape(&why))
        })
        .collect();
    let armed = report
        .values()
        .filter(|r| r.state == LoopState::Armed)
        .count();
    let mut out = format!("\n{armed} loops armed");
    if bad.is_empty() {
        out.push_str(", all well");
    } else {
        out.push('\n');
        out.push_str(&bad.join("\n"));
    }
    out
}

/// `/tasks [column]`: one line per task, at most 50.
async fn tasks(
    store: &crate::eventlog::EventStore,
    column: Option<Column>,
) -> anyhow::Result<String> {
    let rows = task_rows::list(
        store,
        &TaskFilter {
            column,
            limit: Some(50),
            ..TaskFilter::default()
        },
    )
    .await?;
    if rows.is_empty() {
        return Ok("No tasks there.".to_owned());
    }
    Ok(rows
        .iter()
        .map(|r| {
            format!(
                "<b>{}</b> {} {}{} <i>({})</i>",
                r.id,
                r.column,
                escape(&r.title),
                if r.needs_human { " ⚠️" } else { "" },
                escape(&r.repo)
            )
        })
        .collect::<Vec<_>>()
        .join("\n"))
}

/// `/task T-n`: the task's card.
async fn task(store: &crate::eventlog::EventStore, id: TaskId) -> anyhow::Result<String> {
    let Some(r) = task_rows::get(store, id).await? else {
        return Ok(format!("There is no task {id}."));
    };
    let mut out = format!(
        "<b>{}</b> {}\n{} · attempt {} of {} · {}",
        r.id,
        escape(&r.title),
        r.column,
        r.attempts,
        r.max_attempts,
        escape(&r.repo)
    );
    if let Some(reason) = &r.needs_human_reason {
        let _ = write!(out, "\n⚠️ needs a human: {}", escape(reason));
    }
    if let Some(pr) = r.links.get(GITHUB_PR) {
        let _ = write!(out, "\npull request {}", escape(&pr.to_string()));
    }
    Ok(out)
}

/// `/approve`, `/reject`, `/retry`, `/cancel`: the board decides; a refusal is the answer. A plan's proposal is
/// rejected only with a comment (its planner gets it): the Reject button and a bare `/reject` ask for one.
async fn steered(
    board: &Board,
    steer: Steer,
    id: TaskId,
    who: &str,
    comment: Option<String>,
) -> anyhow::Result<String> {
    if steer == Steer::Reject && comment.is_none() {
        let plan = board.load(id).await?.is_some_and(|l| l.task.is_plan());
        if plan {
            return Ok(format!(
                "Say what to change: /reject {id} &lt;comment&gt;. The planner gets your comment."
            ));
        }
    }
    let via = format!("from Telegram by {who}");
    Ok(
        match board.steer(id, steer, comment, &via, "telegram").await {
            Ok(outcome) if outcome.appended.is_empty() => {
                format!("{id} was already so ({}).", outcome.task.column())
            }
            Ok(outcome) => format!("{id}: {} — now {}.", steer.name(), outcome.task.column()),
            Err(BoardError::Refused(refused)) => escape(&refused.to_string()),
            // What the person typed (a comment too long): theirs to fix, not a failure to retry.
            Err(BoardError::Invalid(invalid)) => escape(&invalid.to_string()),
            Err(error) => return Err(error.into()),
        },
    )
}

/// `/pause` and `/resume`.
async fn paused(log: &crate::eventlog::EventLog, pause: bool, who: &str) -> anyhow::Result<String> {
    let reason = format!("from Telegram by {who}");
    crate::board::pause::set_paused(log, pause, "telegram", Some(&reason)).await?;
    Ok(if pause {
        "Paused: no new runs start; running ones finish. /resume to go on.".to_owned()
    } else {
        "Resumed: queued tasks start again.".to_owned()
    })
}

/// `/runs`: the ten most recent.
async fn recent_runs(store: &crate::eventlog::EventStore) -> anyhow::Result<String> {
    let recent = runs::query(store, Which::Recent(10)).await?;
    if recent.is_empty() {
        return Ok("No runs yet.".to_owned());
    }
    Ok(recent
        .iter()
        .map(|r| {
            format!(
                "{} attempt {} {}{}",
                r.task_id,
                r.attempt,
                r.state,
                r.failure
                    .as_deref()
                    .map(|f| format!(" ({f})"))
                    .unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n"))
}

/// How long the answer to `/new` or `/plan` waits for intake's decision before it says there is none yet.
const INTAKE_WAIT: chrono::Duration = chrono::Duration::seconds(60);

/// What intake decided about the message of `event`: the task it made, or why it made none.
enum IntakeSaid {
    Made(TaskId),
    Refused(String),
}

/// Intake's decision about `/new` or `/plan` in `event`, once it has made one: the task of the message's intake
/// key, or its `intake.ignored` record (keyed by the event).
async fn intake_said(
    fx: &impl Handle<Action = TelegramAction>,
    event: &StoredEvent,
    message: &Message,
) -> anyhow::Result<Option<IntakeSaid>> {
    let (chat, id) = (message.chat.id, message.message_id);
    if let Some(task) = fx
        .board()
        .task_for_key(&format!("telegram:{chat}:{id}"))
        .await?
    {
        return Ok(Some(IntakeSaid::Made(task)));
    }
    let ignored = fx
        .log()
        .store()
        .find_by_key(Source::Pidevops, &format!("intake-ignored:{}", event.id))
        .await
        .context("looking for intake's refusal")?;
    Ok(ignored.map(|record| {
        let body: Value = serde_json::from_slice(&record.body).unwrap_or_default();
        IntakeSaid::Refused(body["reason"].as_str().unwrap_or("refused").to_owned())
    }))
}

/// How long ago `event` was recorded.
fn waited(event: &StoredEvent) -> chrono::Duration {
    chrono::Utc::now() - event.recorded_at
}

/// The answer to `/new` or `/plan` once intake decided.
fn made(command: &BotCommand, said: IntakeSaid) -> String {
    match (command, said) {
        (BotCommand::Plan, IntakeSaid::Made(id)) => format!(
            "Plan <b>{id}</b> made: its planner splits the goal into tasks, and the plan comes here for approval."
        ),
        (_, IntakeSaid::Made(id)) => format!("Created <b>{id}</b>."),
        (BotCommand::Plan, IntakeSaid::Refused(why)) => format!("No plan: {}", escape(&why)),
        (_, IntakeSaid::Refused(why)) => format!("No task: {}", escape(&why)),
    }
}

/// `/new`, `/plan`: the task intake made (keyed by the message), as the board has it.
async fn created(board: &Board, message: &Message) -> anyhow::Result<String> {
    let (chat, id) = (message.chat.id, message.message_id);
    Ok(
        match board.task_for_key(&format!("telegram:{chat}:{id}")).await? {
            Some(task) => format!("Created <b>{task}</b>."),
            None => escape("No task: /new owner/repo what to do"),
        },
    )
}
