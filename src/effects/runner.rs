//! The `effects:<provider>` loop: reads the log after its checkpoint, asks the policy what each event wants,
//! makes each call once (see the module doc for how), and turns what came back into commands on the task.
//!
//! The checkpoint moves past an event only when its effects are settled (succeeded, or failed for good): an
//! effect waiting for its retry time stops the tick there, and the next tick picks it up again. One provider's
//! calls are made in the order their causes were committed.

use anyhow::Context;
use chrono::Utc;

use super::bot;
use super::policy::{self, PolicyConfig};
use super::{
    retry_at, state, stream, Action, EffectEvent, Produced, Provider, Request, State,
    EFFECT_STREAM_PREFIX,
};
use crate::board::{Board, BoardError};
use crate::domain::{EventType, NewEvent, Source};
use crate::eventlog::{AppendError, EventLog, StoredEvent};
use crate::loops::follow::{AsStored, Follow, Follower, Next};
use crate::providers::github::GithubClient;
use crate::providers::linear::LinearClient;
use crate::providers::telegram::TelegramClient;
use crate::providers::CallError;
use crate::tasks::values::TASK_STREAM_PREFIX;
use crate::tasks::{Command, GithubRef, Links, Reason, TaskEvent, TaskId};

const ACTOR: &str = "effects";

/// What one tick did, for `/health`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct EffectsProgress {
    pub position: i64,
    pub succeeded: u64,
    pub failed: u64,
    /// An effect waits for its retry time (the checkpoint stays before its cause until then).
    pub waiting: Option<String>,
    /// The tick handed back with events left (the loop goes again at once).
    #[serde(skip)]
    pub out_of_time: bool,
}

/// How an effect stands after this tick looked at it.
enum Settled {
    Yes,
    /// Not before this time.
    Waiting(chrono::DateTime<Utc>),
}

#[derive(Clone, Debug)]
pub struct Effects {
    provider: Provider,
    log: EventLog,
    board: Board,
    github: Option<GithubClient>,
    telegram: Option<TelegramClient>,
    linear: Option<LinearClient>,
    config: PolicyConfig,
    /// The checkpoint's name: the loop's, unless [`Self::with_checkpoint`] says otherwise.
    checkpoint: String,
    follow: Follow<StoredEvent>,
    /// When this process last sent to each Telegram chat, and at all (Telegram's rate limits).
    sent: std::sync::Arc<std::sync::Mutex<Sent>>,
    /// For the bot's `/status`.
    loops: Option<crate::loops::LoopRegistry>,
    /// The command menu is settled for this process (set, or failed for good).
    menu_settled: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Debug, Default)]
struct Sent {
    per_chat: std::collections::HashMap<i64, std::time::Instant>,
    last: Option<std::time::Instant>,
}

impl Effects {
    /// A worker for `provider` with no client yet; each public constructor gives it its own.
    fn new(provider: Provider, log: EventLog, board: Board, config: PolicyConfig) -> Self {
        Self {
            provider,
            log,
            board,
            github: None,
            telegram: None,
            linear: None,
            config,
            checkpoint: provider.loop_name(),
            follow: Follow::default(),
            sent: Default::default(),
            loops: None,
            menu_settled: Default::default(),
        }
    }

    /// The `effects:github` worker: pull requests and issue comments.
    pub fn github(log: EventLog, board: Board, github: GithubClient, config: PolicyConfig) -> Self {
        Self {
            github: Some(github),
            ..Self::new(Provider::Github, log, board, config)
        }
    }

    /// The `effects:telegram` worker: notifications to `config.telegram_chats`.
    pub fn telegram(
        log: EventLog,
        board: Board,
        telegram: TelegramClient,
        config: PolicyConfig,
    ) -> Self {
        Self {
            telegram: Some(telegram),
            ..Self::new(Provider::Telegram, log, board, config)
        }
    }

    /// The `effects:linear` worker: comments, state moves and agent activities on the tasks' Linear issues.
    pub fn linear(log: EventLog, board: Board, linear: LinearClient, config: PolicyConfig) -> Self {
        Self {
            linear: Some(linear),
            ..Self::new(Provider::Linear, log, board, config)
        }
    }

    /// The loops the bot's `/status` reports on.
    pub fn with_loops(mut self, loops: crate::loops::LoopRegistry) -> Self {
        self.loops = Some(loops);
        self
    }

    /// The same worker reading the log under another checkpoint name: a second reader from position 0 (a rebuild,
    /// or a test replaying the log) settles every effect from its stream and calls nothing twice.
    pub fn with_checkpoint(mut self, name: &str) -> Self {
        self.checkpoint = name.to_owned();
        // A reader left running belongs to the other checkpoint's ticks.
        self.follow = Follow::default();
        self
    }

    /// Handles what was committed since the checkpoint, up to the first effect that must wait (see
    /// [`crate::loops::follow`] for pages, checkpoint and budget).
    pub async fn tick(&self) -> anyhow::Result<EffectsProgress> {
        if self.provider == Provider::Telegram
            && !self.menu_settled.load(std::sync::atomic::Ordering::Relaxed)
        {
            self.set_menu().await?;
        }
        let followed = self.follow.tick(self.log.store(), self).await?;
        Ok(EffectsProgress {
            position: followed.position,
            waiting: followed.waiting,
            out_of_time: followed.out_of_time,
            ..followed.tally
        })
    }

    async fn handle_event(
        &self,
        event: &StoredEvent,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Settled> {
        if self.provider == Provider::Telegram && event.source == Source::Telegram.as_str() {
            match event.event_type.as_str() {
                "telegram.message" => return self.command(event, progress).await,
                "telegram.callback_query" => return self.button(event, progress).await,
                _ => return Ok(Settled::Yes),
            }
        }
        if self.provider == Provider::Linear
            && event.event_type == "linear.AgentSessionEvent.created"
        {
            return self.session_opened(event, progress).await;
        }
        if self.provider == Provider::Linear && event.event_type == "intake.ignored" {
            return self.session_refused(event, progress).await;
        }
        if event.source != Source::Pidevops.as_str() {
            return Ok(Settled::Yes);
        }
        let stream = event.stream.as_deref().unwrap_or_default();
        if self.provider == Provider::Telegram && event.event_type == "cron.fired" {
            return self.digest(event, progress).await;
        }
        if stream.starts_with(EFFECT_STREAM_PREFIX) {
            if let Ok(EffectEvent::Succeeded { produced, key, .. }) =
                serde_json::from_slice::<EffectEvent>(&event.body)
            {
                for request in self.follow_up(&key, &produced).await? {
                    if let waiting @ Settled::Waiting(_) =
                        self.ask(&request, event.position, progress).await?
                    {
                        return Ok(waiting);
                    }
                }
            }
            return Ok(Settled::Yes);
        }
        let Some(id) = stream
            .strip_prefix(TASK_STREAM_PREFIX)
            .and_then(|id| id.parse::<TaskId>().ok())
        else {
            return Ok(Settled::Yes);
        };
        let task_event: TaskEvent = serde_json::from_slice(&event.body).with_context(|| {
            format!(
                "{stream}: the body of {} is not a task event",
                event.event_type
            )
        })?;
        // The cheap test first: most task events ask for nothing, and need no load.
        let wanted = match self.provider {
            Provider::Github => matches!(task_event, TaskEvent::SubmittedForReview { .. }),
            Provider::Telegram => policy::telegram_notifies(&task_event),
            Provider::Linear => policy::linear_notifies(&task_event),
        };
        if !wanted {
            return Ok(Settled::Yes);
        }
        let Some(loaded) = self.board.load(id).await? else {
            return Ok(Settled::Yes);
        };
        let requests = match self.provider {
            Provider::Github => policy::github(&task_event, &loaded.task, &self.config),
            Provider::Telegram => {
                let history: Vec<(i64, chrono::DateTime<Utc>, &str)> = loaded
                    .events
                    .iter()
                    .map(|e| (e.position, e.occurred_at, e.event_type.as_str()))
                    .collect();
                if policy::repeat_in_cooldown(
                    &history,
                    event.position,
                    self.config.telegram_cooldown,
                ) {
                    tracing::debug!(
                        position = event.position,
                        "a repeat inside the cooldown: not sent"
                    );
                    return Ok(Settled::Yes);
                }
                policy::telegram(
                    &task_event,
                    &loaded.task,
                    &event.id.to_string(),
                    &self.config.telegram_chats,
                )
            }
            Provider::Linear => {
                let session = self.session_of(&loaded.task).await?;
                policy::linear(
                    &task_event,
                    &loaded.task,
                    session.as_deref(),
                    last_run(&loaded.events),
                    &event.id.to_string(),
                    &self.config,
                )
            }
        };
        for request in requests {
            if let waiting @ Settled::Waiting(_) =
                self.ask(&request, event.position, progress).await?
            {
                return Ok(waiting);
            }
        }
        Ok(Settled::Yes)
    }

    /// The bot's command menu, once per menu (its key names the menu's content): a changed menu is set again
    /// after a deploy, the same one never. Does not hold back the tick: a failure is retried on its own schedule.
    async fn set_menu(&self) -> anyhow::Result<()> {
        let commands = bot::menu();
        let digest = {
            use sha2::Digest;
            let text = serde_json::to_string(&commands)?;
            hex::encode(&sha2::Sha256::digest(text.as_bytes())[..6])
        };
        let request = Request {
            key: format!("telegram:set-my-commands:{digest}"),
            task: None,
            action: Action::TelegramSetCommands { commands },
        };
        let mut progress = EffectsProgress::default();
        if let Settled::Yes = self.ask(&request, 0, &mut progress).await? {
            self.menu_settled
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }

    /// A bot command in a message: answered once (the reply effect's stream says whether it was), only in the
    /// allowed chats; anything else is refused and recorded.
    async fn command(
        &self,
        event: &StoredEvent,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Settled> {
        let payload: serde_json::Value =
            serde_json::from_str(event.data_json().get()).unwrap_or_default();
        let message = &payload["message"];
        let Some(parsed) = bot::parse(message["text"].as_str().unwrap_or_default()) else {
            return Ok(Settled::Yes);
        };
        let chat = message["chat"]["id"].as_i64().unwrap_or_default();
        let who = sender(&message["from"]);
        if let Some(why) = self.may_command(chat, &message["from"]) {
            // `/new` from a stranger is intake's to record; every other command is recorded here.
            if parsed != Ok(bot::BotCommand::New) {
                self.refused(
                    event,
                    chat,
                    &who,
                    message["text"].as_str().unwrap_or_default(),
                    &why,
                )
                .await?;
            }
            return Ok(Settled::Yes);
        }
        let key = format!("telegram:reply:{}", event.id);
        let handled = self.requested(&key).await?;
        let html = if handled {
            // Answered before (a replay, or a crash after the reply was asked for): never act twice.
            String::new()
        } else {
            match &parsed {
                Ok(command) => bot::answer(
                    command,
                    &who,
                    message,
                    &self.board,
                    &self.log,
                    self.loops.as_ref(),
                )
                .await
                .with_context(|| format!("answering {command:?}"))?,
                Err(usage) => crate::providers::telegram::escape(usage),
            }
        };
        let request = Request {
            key,
            task: None,
            action: Action::TelegramSend {
                chat,
                html,
                buttons: Vec::new(),
            },
        };
        if !handled {
            self.request(&request, event.position).await?;
        }
        self.drive(&request, progress).await
    }

    /// A button press (`approve:T-7`, …): steered like the command, from an allowed chat only; every press is
    /// answered (a refusal too), once — the answer effect's stream says whether it was.
    async fn button(
        &self,
        event: &StoredEvent,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Settled> {
        let payload: serde_json::Value =
            serde_json::from_str(event.data_json().get()).unwrap_or_default();
        let query = &payload["callback_query"];
        let Some(callback) = query["id"].as_str() else {
            return Ok(Settled::Yes);
        };
        let chat = query["message"]["chat"]["id"].as_i64().unwrap_or_default();
        let who = sender(&query["from"]);
        let data = query["data"].as_str().unwrap_or_default();
        let key = format!("telegram:callback:{}", event.id);
        let handled = self.requested(&key).await?;
        let text = if handled {
            String::new()
        } else if let Some(why) = self.may_command(chat, &query["from"]) {
            self.refused(event, chat, &who, data, &why).await?;
            if why.contains("TELEGRAM_ALLOWED_USERS") {
                "You are not allowed to steer pidevops.".to_owned()
            } else {
                "Not allowed from this chat.".to_owned()
            }
        } else {
            let command = data
                .split_once(':')
                .map(|(verb, id)| format!("/{verb} {id}"))
                .and_then(|text| bot::parse(&text));
            match command {
                Some(Ok(command @ bot::BotCommand::Steer(..))) => {
                    let answer = bot::answer(
                        &command,
                        &who,
                        &payload,
                        &self.board,
                        &self.log,
                        self.loops.as_ref(),
                    )
                    .await
                    .with_context(|| format!("answering the button {data:?}"))?;
                    // The notice is plain text, short.
                    answer
                        .replace("<b>", "")
                        .replace("</b>", "")
                        .chars()
                        .take(190)
                        .collect()
                }
                _ => format!("Unknown button {data:?}."),
            }
        };
        let request = Request {
            key,
            task: None,
            action: Action::TelegramAnswerCallback {
                callback: callback.to_owned(),
                text,
            },
        };
        if !handled {
            self.request(&request, event.position).await?;
        }
        self.drive(&request, progress).await
    }

    /// A digest schedule fired: the board, once per chat and slot.
    async fn digest(
        &self,
        event: &StoredEvent,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Settled> {
        let Ok(crate::cron::CronEvent::Fired {
            slot, digest: true, ..
        }) = serde_json::from_slice(&event.body)
        else {
            return Ok(Settled::Yes);
        };
        let schedule = event
            .stream
            .as_deref()
            .and_then(|s| s.strip_prefix(crate::cron::CRON_STREAM_PREFIX))
            .unwrap_or("digest")
            .to_owned();
        // Written once, when first asked for: a replay drives what was recorded and never rewrites it.
        let mut html: Option<String> = None;
        for chat in &self.config.telegram_chats {
            let key = format!("telegram:digest:{schedule}:{}:{chat}", slot.to_rfc3339());
            let fresh = !self.requested(&key).await?;
            let text = if !fresh {
                String::new()
            } else {
                if html.is_none() {
                    let rows = crate::projectors::tasks::list(
                        self.log.store(),
                        &crate::projectors::tasks::TaskFilter::default(),
                    )
                    .await
                    .context("reading the board for the digest")?;
                    html = Some(policy::digest(&schedule, &rows, Utc::now()));
                }
                html.clone().unwrap_or_default()
            };
            let request = Request {
                key,
                task: None,
                action: Action::TelegramSend {
                    chat: *chat,
                    html: text,
                    buttons: Vec::new(),
                },
            };
            if fresh {
                self.request(&request, event.position).await?;
            }
            if let waiting @ Settled::Waiting(_) = self.drive(&request, progress).await? {
                return Ok(waiting);
            }
        }
        Ok(Settled::Yes)
    }

    /// Whether effect `key` was ever requested (its stream has anything).
    async fn requested(&self, key: &str) -> anyhow::Result<bool> {
        let events = self
            .log
            .store()
            .read_stream(&stream(key))
            .await
            .with_context(|| format!("reading {}", stream(key)))?;
        Ok(!events.is_empty())
    }

    /// Why `from` may not command pidevops in `chat`; `None` when they may (intake's rule for `/new`, too).
    fn may_command(&self, chat: i64, from: &serde_json::Value) -> Option<String> {
        let chats = self.config.telegram_chats.iter().copied().collect();
        crate::intake::rules::telegram_refusal(
            &chats,
            self.config.telegram_users.as_ref(),
            chat,
            from["id"].as_i64(),
        )
    }

    /// A command from a chat or a user that is not allowed: recorded (once per message), not answered.
    async fn refused(
        &self,
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
        new.meta
            .insert("actor".to_owned(), serde_json::Value::from(ACTOR));
        tracing::warn!(chat, who, reason, "Telegram command refused");
        self.log
            .append(new)
            .await
            .context("recording a refused command")?;
        Ok(())
    }

    /// Records the request (once per key), then makes its next attempt if that is due.
    async fn ask(
        &self,
        request: &Request,
        cause: i64,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Settled> {
        self.request(request, cause).await?;
        self.drive(request, progress).await
    }

    /// Records the request (once per key: a repeat is a duplicate of the first).
    async fn request(&self, request: &Request, cause: i64) -> anyhow::Result<()> {
        let event = EffectEvent::Requested {
            at: Utc::now(),
            key: request.key.clone(),
            task: request.task,
            action: request.action.clone(),
            cause_position: cause,
        };
        self.append(&request.key, request.task, 1, &event)
            .await
            .with_context(|| format!("requesting {}", request.key))?;
        Ok(())
    }

    /// Makes the next attempt of the effect if it is due; says whether it is settled.
    async fn drive(
        &self,
        request: &Request,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Settled> {
        let recorded = self
            .log
            .store()
            .read_stream(&stream(&request.key))
            .await
            .with_context(|| format!("reading {}", stream(&request.key)))?;
        let events: Vec<EffectEvent> = recorded
            .iter()
            .map(|e| serde_json::from_slice(&e.body))
            .collect::<Result<_, _>>()
            .with_context(|| {
                format!("{} holds an event that is not an effect event", request.key)
            })?;
        let version = i64::try_from(recorded.len()).unwrap_or(i64::MAX);
        // The action as first requested: a later request (a retried task) asks for the same thing.
        let action = events
            .iter()
            .find_map(|e| match e {
                EffectEvent::Requested { action, .. } => Some(action.clone()),
                _ => None,
            })
            .unwrap_or_else(|| request.action.clone());
        if action.provider() != self.provider {
            // Another provider's loop makes this call.
            return Ok(Settled::Yes);
        }
        let now = Utc::now();
        let attempt = match state(&events) {
            State::Succeeded | State::Failed | State::Unknown => return Ok(Settled::Yes),
            State::Pending { due: Some(due), .. } if due > now => return Ok(Settled::Waiting(due)),
            State::Pending { attempts, .. } => attempts + 1,
            State::InDoubt { attempt } if !action.safe_to_repeat() => {
                let failed = EffectEvent::Failed {
                    at: now,
                    key: request.key.clone(),
                    attempt,
                    error: "in doubt: the call was cut off (a crash) and is not safe to repeat"
                        .into(),
                    retry_at: None,
                };
                self.append(&request.key, request.task, version + 1, &failed)
                    .await
                    .context("recording an attempt in doubt")?;
                progress.failed += 1;
                return Ok(Settled::Yes);
            }
            State::InDoubt { attempt } => attempt + 1,
        };
        if let Some(free) = self.rate_limited(&action) {
            return Ok(Settled::Waiting(free));
        }
        let started = EffectEvent::Started {
            at: now,
            key: request.key.clone(),
            attempt,
        };
        let claimed = self
            .append(&request.key, request.task, version + 1, &started)
            .await
            .context("recording the attempt's start")?;
        if !claimed {
            // Someone else (a replica in a brief split-brain) started this attempt: theirs to finish.
            return Ok(Settled::Waiting(now + chrono::Duration::seconds(1)));
        }
        let outcome = self.call(&request.key, &action).await;
        self.record_sent(&action);
        let label = match &outcome {
            Ok(_) => "succeeded",
            Err(CallError::Transient { .. }) => "transient",
            Err(CallError::Permanent { .. }) => "permanent",
        };
        metrics::counter!("pidevops_effects_total", "provider" => self.provider.as_str(), "action" => action.name(), "outcome" => label)
            .increment(1);
        let (recorded, settled) = match outcome {
            Ok(produced) => {
                progress.succeeded += 1;
                (
                    EffectEvent::Succeeded {
                        at: Utc::now(),
                        key: request.key.clone(),
                        attempt,
                        produced,
                    },
                    Settled::Yes,
                )
            }
            Err(error) => {
                let retry = match &error {
                    CallError::Transient { retry_after, .. } => {
                        retry_at(Utc::now(), attempt, *retry_after)
                    }
                    CallError::Permanent { .. } => None,
                };
                if retry.is_none() {
                    progress.failed += 1;
                    self.surface(request, &error, attempt).await?;
                }
                tracing::warn!(key = %request.key, attempt, %error, retry_at = ?retry, "effect failed");
                (
                    EffectEvent::Failed {
                        at: Utc::now(),
                        key: request.key.clone(),
                        attempt,
                        error: error.to_string(),
                        retry_at: retry,
                    },
                    retry.map_or(Settled::Yes, Settled::Waiting),
                )
            }
        };
        self.append(&request.key, request.task, version + 2, &recorded)
            .await
            .context("recording the attempt's outcome")?;
        Ok(settled)
    }

    fn github_client(&self) -> Result<&GithubClient, CallError> {
        self.github.as_ref().ok_or_else(|| CallError::Permanent {
            message: "GITHUB_TOKEN is not set".into(),
        })
    }

    fn linear_client(&self) -> Result<&LinearClient, CallError> {
        self.linear.as_ref().ok_or_else(|| CallError::Permanent {
            message: "LINEAR_API_KEY is not set".into(),
        })
    }

    fn telegram_client(&self) -> Result<&TelegramClient, CallError> {
        self.telegram.as_ref().ok_or_else(|| CallError::Permanent {
            message: "TELEGRAM_BOT_TOKEN is not set".into(),
        })
    }

    /// Telegram allows a bot about one message a second per chat and 30 a second in all: when the next message
    /// would break that, the time it may go.
    fn rate_limited(&self, action: &Action) -> Option<chrono::DateTime<Utc>> {
        let Action::TelegramSend { chat, .. } = action else {
            return None;
        };
        let sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        let per_chat = sent
            .per_chat
            .get(chat)
            .map(|at| *at + std::time::Duration::from_secs(1));
        let overall = sent
            .last
            .map(|at| at + std::time::Duration::from_millis(1000 / 30 + 1));
        let free = per_chat.into_iter().chain(overall).max()?;
        (free > now)
            .then(|| Utc::now() + chrono::Duration::from_std(free - now).unwrap_or_default())
    }

    fn record_sent(&self, action: &Action) {
        if let Action::TelegramSend { chat, .. } = action {
            let mut sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
            let now = std::time::Instant::now();
            sent.per_chat.insert(*chat, now);
            sent.last = Some(now);
        }
    }

    async fn call(&self, key: &str, action: &Action) -> Result<Produced, CallError> {
        match action {
            Action::GithubOpenPullRequest {
                repo,
                head,
                base,
                title,
                body,
            } => {
                self.github_client()?
                    .open_pull_request(repo, head, base, title, body)
                    .await
            }
            Action::GithubComment {
                repo,
                number,
                body,
                since,
            } => {
                let marker = body.lines().last().unwrap_or_default();
                self.github_client()?
                    .comment(repo, *number, body, marker, *since)
                    .await
            }
            Action::LinearComment { issue, body } => {
                self.linear_client()?.comment(key, *issue, body).await
            }
            Action::LinearActivity { session, content } => {
                self.linear_client()?.activity(key, session, content).await
            }
            Action::LinearMoveIssue {
                issue,
                states,
                fallback,
            } => {
                self.linear_client()?
                    .move_issue(*issue, states, fallback)
                    .await
            }
            Action::LinearSessionUrls { session, urls } => {
                self.linear_client()?.session_urls(session, urls).await
            }
            Action::TelegramSetCommands { commands } => {
                self.telegram_client()?.set_my_commands(commands).await
            }
            Action::TelegramAnswerCallback { callback, text } => {
                self.telegram_client()?
                    .answer_callback(callback, text)
                    .await
            }
            Action::TelegramSend {
                chat,
                html,
                buttons,
            } => {
                self.telegram_client()?
                    .send_message(*chat, html, buttons)
                    .await
            }
        }
    }

    /// A permanent failure is the task's business: a person must look.
    async fn surface(
        &self,
        request: &Request,
        error: &CallError,
        attempt: u32,
    ) -> anyhow::Result<()> {
        let reason = Reason::summarize(&format!(
            "{} failed for good after {attempt} attempt(s): {error}",
            request.action.name().replace('_', " ")
        ));
        let Some(task) = request.task else {
            return Ok(());
        };
        match self
            .board
            .execute(task, &Command::FlagNeedsHuman { reason }, ACTOR)
            .await
        {
            Ok(_) | Err(BoardError::Refused(_)) => Ok(()),
            Err(error) => Err(error).context("flagging the task after a failed effect"),
        }
    }

    /// What a success means for the task: the pull request becomes its link, and the issue it came from hears
    /// of it. Returns the effects that asks for.
    async fn follow_up(&self, key: &str, produced: &Produced) -> anyhow::Result<Vec<Request>> {
        let Produced::PullRequest {
            repo, number, url, ..
        } = produced
        else {
            return Ok(Vec::new());
        };
        let Some(task) = key
            .strip_prefix("github:pr:")
            .and_then(|id| id.parse::<TaskId>().ok())
        else {
            return Ok(Vec::new());
        };
        match self.provider {
            Provider::Github => {}
            Provider::Linear => {
                let Some(loaded) = self.board.load(task).await? else {
                    return Ok(Vec::new());
                };
                let session = self.session_of(&loaded.task).await?;
                return Ok(policy::linear_pull_request(
                    &loaded.task,
                    session.as_deref(),
                    last_run(&loaded.events),
                    url,
                ));
            }
            Provider::Telegram => return Ok(Vec::new()),
        }
        let links = Links {
            github_pr: Some(GithubRef::new(repo.clone(), *number)?),
            ..Links::default()
        };
        let linked = match self
            .board
            .execute(task, &Command::AttachLinks { links }, ACTOR)
            .await
        {
            Ok(outcome) => outcome.task,
            // Closed and archived tasks, and a task already linked to another pull request, keep what they have.
            Err(BoardError::Refused(refused)) => {
                tracing::info!(%task, %refused, "pull request not linked");
                match self.board.load(task).await? {
                    Some(loaded) => loaded.task,
                    None => return Ok(Vec::new()),
                }
            }
            Err(error) => return Err(error).context("linking the pull request to its task"),
        };
        Ok(policy::after_pull_request(
            &linked,
            *number,
            url,
            Utc::now(),
        ))
    }

    /// A Linear agent session opened on an issue (someone delegated it to pidevops): remembered as the issue's
    /// current session (`linear-session:<issue id>`, newest last: re-delegating opens a new one), and answered
    /// at once with a thought, as Linear expects within 10 s.
    async fn session_opened(
        &self,
        event: &StoredEvent,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Settled> {
        let payload: serde_json::Value =
            serde_json::from_str(event.data_json().get()).unwrap_or_default();
        let session = &payload["agentSession"];
        let (Some(id), Some(issue)) = (
            session["id"].as_str(),
            session["issueId"]
                .as_str()
                .or(session["issue"]["id"].as_str()),
        ) else {
            return Ok(Settled::Yes);
        };
        let stream_name = format!("{LINEAR_SESSION_PREFIX}{issue}");
        let known = self
            .log
            .store()
            .read_stream(&stream_name)
            .await
            .with_context(|| format!("reading {stream_name}"))?;
        if !known.iter().any(|e| session_in(e).as_deref() == Some(id)) {
            let body =
                serde_json::json!({ "session": id, "issue": issue, "cause_event_id": event.id });
            let mut new = NewEvent::new(
                Source::Pidevops,
                EventType::from_stored("linear.session_opened".to_owned()),
                format!("{}{id}", crate::intake::rules::SESSION_KEY_PREFIX),
                "application/json",
                bytes::Bytes::from(serde_json::to_vec(&body)?),
            );
            new.stream = Some((
                stream_name.clone(),
                i64::try_from(known.len()).unwrap_or(i64::MAX) + 1,
            ));
            new.meta
                .insert("actor".to_owned(), serde_json::Value::from(ACTOR));
            match self.log.append(new).await {
                Ok(_) | Err(AppendError::Conflict { .. }) => {}
                Err(error) => return Err(error).context("remembering the agent session"),
            }
        }
        let identifier = session["issue"]["identifier"]
            .as_str()
            .unwrap_or("this issue");
        let request = policy::linear_session_opened(id, identifier);
        self.ask(&request, event.position, progress).await
    }

    /// Intake refused an agent session (no repository, a skip label, …): the session ends with an `error` saying
    /// why, instead of waiting for work that will never start.
    async fn session_refused(
        &self,
        event: &StoredEvent,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Settled> {
        let record: serde_json::Value = serde_json::from_slice(&event.body).unwrap_or_default();
        if record["cause_type"] != "linear.AgentSessionEvent.created" {
            return Ok(Settled::Yes);
        }
        let (Some(cause), Some(reason)) = (
            record["cause_event_id"]
                .as_str()
                .and_then(|id| id.parse::<uuid::Uuid>().ok()),
            record["reason"].as_str(),
        ) else {
            return Ok(Settled::Yes);
        };
        let Some(cause) = self
            .log
            .store()
            .get(cause)
            .await
            .context("reading the refused agent session's event")?
        else {
            return Ok(Settled::Yes);
        };
        let payload: serde_json::Value =
            serde_json::from_str(cause.data_json().get()).unwrap_or_default();
        let Some(session) = payload["agentSession"]["id"].as_str() else {
            return Ok(Settled::Yes);
        };
        let request = policy::linear_session_refused(session, reason);
        self.ask(&request, event.position, progress).await
    }

    /// The agent session that has the task's Linear issue now, if one does.
    async fn session_of(&self, task: &crate::tasks::Task) -> anyhow::Result<Option<String>> {
        let Some(issue) = &task.links().linear_issue else {
            return Ok(None);
        };
        let stream_name = format!("{LINEAR_SESSION_PREFIX}{}", issue.id());
        let events = self
            .log
            .store()
            .read_stream(&stream_name)
            .await
            .with_context(|| format!("reading {stream_name}"))?;
        Ok(events.last().and_then(session_in))
    }

    /// Appends `event` as version `version` of the effect's stream. `Ok(false)`: that version is taken (someone
    /// else wrote it, or this very write was made before a crash).
    async fn append(
        &self,
        key: &str,
        task: Option<TaskId>,
        version: i64,
        event: &EffectEvent,
    ) -> Result<bool, AppendError> {
        let body = serde_json::to_vec(event)
            .map_err(|e| AppendError::Unavailable(format!("encoding {}: {e}", event.kind())))?;
        let mut new = NewEvent::new(
            Source::Pidevops,
            EventType::from_stored(event.kind().to_owned()),
            format!("{}:{version}", stream(key)),
            "application/json",
            bytes::Bytes::from(body),
        );
        new.stream = Some((stream(key), version));
        new.occurred_at = event.at();
        new.subject.reference = task.map(|t| t.to_string());
        new.meta
            .insert("actor".to_owned(), serde_json::Value::from(ACTOR));
        match self.log.append(new).await {
            Ok(appended) => Ok(!appended.duplicate),
            Err(AppendError::Conflict { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }
}

impl Follower for Effects {
    type Prepare = AsStored;
    type Tally = EffectsProgress;

    fn checkpoint(&self) -> &str {
        &self.checkpoint
    }

    fn prepare(&self) -> AsStored {
        AsStored
    }

    async fn handle(
        &self,
        event: &StoredEvent,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Next> {
        let settled = self.handle_event(event, progress).await.with_context(|| {
            format!("effects of event {} ({})", event.position, event.event_type)
        })?;
        Ok(match settled {
            Settled::Yes => Next::Done,
            Settled::Waiting(until) => Next::Wait(format!(
                "event {} waits for its retry at {}",
                event.position,
                until.to_rfc3339()
            )),
        })
    }
}

/// A Telegram user as the bot names them: their username, else their first name.
fn sender(from: &serde_json::Value) -> String {
    from["username"]
        .as_str()
        .or(from["first_name"].as_str())
        .unwrap_or("someone")
        .to_owned()
}

/// The stream that lists the agent sessions opened on a Linear issue: `linear-session:<issue id>`.
pub const LINEAR_SESSION_PREFIX: &str = "linear-session:";

fn session_in(event: &StoredEvent) -> Option<String> {
    serde_json::from_slice::<serde_json::Value>(&event.body)
        .ok()?
        .get("session")?
        .as_str()
        .map(str::to_owned)
}

/// The run of a task's latest start, from its events.
fn last_run(events: &[StoredEvent]) -> Option<crate::tasks::RunId> {
    events.iter().rev().find_map(
        |e| match serde_json::from_slice::<TaskEvent>(&e.body).ok()? {
            TaskEvent::Started { run, .. } => Some(run),
            _ => None,
        },
    )
}
