//! The Telegram bot's commands. Parsing is pure; `answer` reads the read models and steers the board, and the
//! runner sends what it returns as one reply effect (`telegram:reply:<event>`), so a command is answered once.

use std::fmt::Write as _;

use serde_json::Value;

use crate::board::{Board, BoardError, Steer};
use crate::loops::{LoopRegistry, LoopState};
use crate::projectors::runs::{self, Which};
use crate::projectors::tasks::{self as task_rows, TaskFilter};
use crate::providers::telegram::{escape, fit};
use crate::tasks::{Column, TaskId};

pub const HELP: &str = "/status — loops, queue, pause
/tasks [column] — the board (triage, todo, in-progress, in-review, done)
/task T-n — one task
/new owner/repo what to do — a new task
/approve T-n · /reject T-n · /retry T-n · /cancel T-n
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
        ("approve", "/approve T-n"),
        ("reject", "/reject T-n"),
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
    Pause,
    Resume,
    Runs,
    /// `/new` is intake's: the reply says which task it made.
    New,
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
        "/reject" => task("/reject").map(|id| BotCommand::Steer(Steer::Reject, id)),
        "/retry" => task("/retry").map(|id| BotCommand::Steer(Steer::Retry, id)),
        "/cancel" => task("/cancel").map(|id| BotCommand::Steer(Steer::Cancel, id)),
        "/pause" => Ok(BotCommand::Pause),
        "/resume" => Ok(BotCommand::Resume),
        "/runs" => Ok(BotCommand::Runs),
        "/new" => Ok(BotCommand::New),
        other => Err(format!("unknown command {other}; /help lists them")),
    })
}

/// What the bot answers `command` from `who` (a Telegram user's name), having done what it asks.
pub async fn answer(
    command: &BotCommand,
    who: &str,
    message: &Value,
    board: &Board,
    log: &crate::eventlog::EventLog,
    loops: Option<&LoopRegistry>,
) -> anyhow::Result<String> {
    let store = board.store();
    Ok(match command {
        BotCommand::Help => escape(HELP),
        BotCommand::Status => {
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
                let _ = write!(out, "\n{armed} loops armed");
                if bad.is_empty() {
                    out.push_str(", all well");
                } else {
                    out.push('\n');
                    out.push_str(&bad.join("\n"));
                }
            }
            out
        }
        BotCommand::Tasks(column) => {
            let rows = task_rows::list(
                store,
                &TaskFilter {
                    column: *column,
                    limit: Some(50),
                    ..TaskFilter::default()
                },
            )
            .await?;
            if rows.is_empty() {
                "No tasks there.".to_owned()
            } else {
                rows.iter()
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
                    .join("\n")
            }
        }
        BotCommand::Task(id) => match task_rows::get(store, *id).await? {
            None => format!("There is no task {id}."),
            Some(r) => {
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
                if let Some(pr) = &r.links.github_pr {
                    let _ = write!(out, "\npull request {}", escape(&pr.to_string()));
                }
                out
            }
        },
        BotCommand::Steer(steer, id) => {
            let via = format!("from Telegram by {who}");
            match board.steer(*id, *steer, None, &via, "telegram").await {
                Ok(outcome) if outcome.appended.is_empty() => {
                    format!("{id} was already so ({}).", outcome.task.column())
                }
                Ok(outcome) => format!("{id}: {} — now {}.", steer.name(), outcome.task.column()),
                Err(BoardError::Refused(refused)) => escape(&refused.to_string()),
                Err(error) => return Err(error.into()),
            }
        }
        BotCommand::Pause | BotCommand::Resume => {
            let pause = *command == BotCommand::Pause;
            let reason = format!("from Telegram by {who}");
            crate::board::pause::set_paused(log, pause, "telegram", Some(&reason)).await?;
            if pause {
                "Paused: no new runs start; running ones finish. /resume to go on.".to_owned()
            } else {
                "Resumed: queued tasks start again.".to_owned()
            }
        }
        BotCommand::Runs => {
            let recent = runs::query(store, Which::Recent(10)).await?;
            if recent.is_empty() {
                "No runs yet.".to_owned()
            } else {
                recent
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
                    .join("\n")
            }
        }
        BotCommand::New => {
            let chat = message["chat"]["id"].as_i64().unwrap_or_default();
            let id = message["message_id"].as_i64().unwrap_or_default();
            match board.task_for_key(&format!("telegram:{chat}:{id}")).await? {
                Some(task) => format!("Created <b>{task}</b>."),
                None => escape("No task: /new owner/repo what to do"),
            }
        }
    })
    .map(|html| fit(&html))
}
