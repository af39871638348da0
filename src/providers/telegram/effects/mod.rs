//! The Telegram policy: notices of the tasks' state changes and digests to the allowed chats, and the bot (its
//! commands and buttons, in `bot.rs`). The request builders are pure; [`TelegramPolicy`] is the
//! `effects:telegram` loop's side of [`ProviderPolicy`], and keeps to Telegram's rate limits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;

use crate::board::Loaded;
use crate::domain::Source;
use crate::effects::handle::{EffectsProgress, Handle, Settled};
use crate::effects::provider::{OwnRecord, ProviderPolicy};
use crate::effects::CallError;
use crate::effects::{Produced, Request};
use crate::eventlog::StoredEvent;
use crate::providers::telegram::settings::TelegramSettings;
use crate::providers::telegram::{message_stream, SentMessage, TelegramClient, MESSAGE_SENT};
use crate::tasks::plan::PlanDocument;
use crate::tasks::{Task, TaskEvent};

pub use action::TelegramAction;

mod action;
pub(crate) mod bot;

/// The `effects:telegram` policy: notifications to the allowed chats, digests, and the bot.
#[derive(Clone, Debug)]
pub struct TelegramPolicy {
    client: TelegramClient,
    /// Who is told and who may command (`TELEGRAM_ALLOWED_CHATS`, `TELEGRAM_ALLOWED_USERS`), and the cooldown.
    settings: TelegramSettings,
    /// The allowed chats, in order: each notice goes to each.
    chats: Vec<i64>,
    /// When this process last sent to each Telegram chat, and at all (Telegram's rate limits).
    sent: Arc<Mutex<Sent>>,
    /// The command menu is settled for this process (set, or failed for good).
    menu_settled: Arc<AtomicBool>,
}

#[derive(Debug, Default)]
struct Sent {
    per_chat: std::collections::HashMap<i64, Instant>,
    last: Option<Instant>,
}

impl TelegramPolicy {
    pub fn new(client: TelegramClient, settings: TelegramSettings) -> Self {
        Self {
            client,
            chats: settings.allowed_chats.iter().copied().collect(),
            settings,
            sent: Default::default(),
            menu_settled: Default::default(),
        }
    }

    /// The bot's command menu, once per menu (its key names the menu's content): a changed menu is set again
    /// after a deploy, the same one never. Does not hold back the tick: a failure is retried on its own schedule.
    async fn set_menu(&self, fx: &impl Handle<Action = TelegramAction>) -> anyhow::Result<()> {
        let commands = bot::menu();
        let digest = {
            use sha2::Digest;
            let text = serde_json::to_string(&commands)?;
            hex::encode(&sha2::Sha256::digest(text.as_bytes())[..6])
        };
        let request = Request {
            key: format!("telegram:set-my-commands:{digest}"),
            task: None,
            action: TelegramAction::SetCommands { commands },
        };
        let mut progress = EffectsProgress::default();
        if let Settled::Yes = fx.ask(&request, 0, &mut progress).await? {
            self.menu_settled.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// A digest schedule fired: the board, once per chat and slot.
    async fn digest(
        &self,
        fx: &impl Handle<Action = TelegramAction>,
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
        for chat in &self.chats {
            let key = format!("telegram:digest:{schedule}:{}:{chat}", slot.to_rfc3339());
            let fresh = !fx.requested(&key).await?;
            let text = if !fresh {
                String::new()
            } else {
                if html.is_none() {
                    let rows = crate::projectors::tasks::list(
                        fx.log().store(),
                        &crate::projectors::tasks::TaskFilter::default(),
                    )
                    .await
                    .context("reading the board for the digest")?;
                    html = Some(digest(&schedule, &rows, Utc::now()));
                }
                html.clone().unwrap_or_default()
            };
            let request = Request {
                key,
                task: None,
                action: TelegramAction::Send {
                    chat: *chat,
                    html: text,
                    buttons: Vec::new(),
                    reply_prompt: None,
                },
            };
            if fresh {
                fx.request(&request, event.position).await?;
            }
            if let waiting @ Settled::Waiting(_) = fx.drive(&request, progress).await? {
                return Ok(waiting);
            }
        }
        Ok(Settled::Yes)
    }
}

impl TelegramPolicy {
    /// A budget's notice (soft limit reached, or spent), to every chat, once each.
    async fn budget_notice(
        &self,
        fx: &impl Handle<Action = TelegramAction>,
        event: &StoredEvent,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Settled> {
        let Ok(notice) = serde_json::from_slice::<crate::budgets::Notice>(&event.body) else {
            return Ok(Settled::Yes);
        };
        let heading = match notice.level.as_str() {
            "exceeded" => "Budget spent",
            _ => "Budget nearly spent",
        };
        let html = format!(
            "<b>{heading}</b>: {}\nRaise it with <code>pidevops budget raise</code> or the API.",
            crate::providers::telegram::escape(&notice.words)
        );
        for chat in &self.chats {
            let request = Request {
                key: format!("telegram:budget:{}:{chat}", event.id),
                task: None,
                action: TelegramAction::Send {
                    chat: *chat,
                    html: html.clone(),
                    buttons: Vec::new(),
                    reply_prompt: None,
                },
            };
            if !fx.requested(&request.key).await? {
                fx.request(&request, event.position).await?;
            }
            if let waiting @ Settled::Waiting(_) = fx.drive(&request, progress).await? {
                return Ok(waiting);
            }
        }
        Ok(Settled::Yes)
    }
}

impl ProviderPolicy for TelegramPolicy {
    type Action = TelegramAction;

    fn provider(&self) -> &'static str {
        "telegram"
    }

    async fn prepare(&self, fx: &impl Handle<Action = TelegramAction>) -> anyhow::Result<()> {
        if !self.menu_settled.load(Ordering::Relaxed) {
            self.set_menu(fx).await?;
        }
        Ok(())
    }

    /// The bot's messages and button presses, and digests.
    async fn own_event(
        &self,
        fx: &impl Handle<Action = TelegramAction>,
        event: &StoredEvent,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Option<Settled>> {
        if event.source == Source::Telegram.as_str() {
            let settled = match event.event_type.as_str() {
                "telegram.message" => bot::command(fx, &self.settings, event, progress).await?,
                "telegram.callback_query" => {
                    bot::button(fx, &self.settings, event, progress).await?
                }
                _ => Settled::Yes,
            };
            return Ok(Some(settled));
        }
        if event.source == Source::Pidevops.as_str() && event.event_type == "cron.fired" {
            return self.digest(fx, event, progress).await.map(Some);
        }
        if event.source == Source::Pidevops.as_str() && event.event_type == crate::budgets::NOTICE {
            return self.budget_notice(fx, event, progress).await.map(Some);
        }
        Ok(None)
    }

    fn notifies(&self, event: &TaskEvent) -> bool {
        telegram_notifies(event)
    }

    async fn requests(
        &self,
        _fx: &impl Handle<Action = TelegramAction>,
        event: &StoredEvent,
        task_event: &TaskEvent,
        loaded: &Loaded,
    ) -> anyhow::Result<Vec<Request<TelegramAction>>> {
        let history: Vec<(i64, chrono::DateTime<Utc>, &str)> = loaded
            .events
            .iter()
            .map(|e| (e.position, e.occurred_at, e.event_type.as_str()))
            .collect();
        // The agent's question is asked whatever the cooldown: nothing else would ask it.
        let question = matches!(
            task_event,
            TaskEvent::FlaggedNeedsHuman { question: true, .. }
        );
        if !question && repeat_in_cooldown(&history, event.position, self.settings.cooldown) {
            tracing::debug!(
                position = event.position,
                "a repeat inside the cooldown: not sent"
            );
            return Ok(Vec::new());
        }
        if let TaskEvent::PlanProposed { plan, .. } = task_event {
            // Its revision as of this event: the proposals in the plan's stream up to it.
            let revision = history
                .iter()
                .filter(|(p, _, kind)| *p <= event.position && *kind == "task.plan_proposed")
                .count();
            return Ok(telegram_proposal(
                plan,
                &loaded.task,
                u32::try_from(revision).unwrap_or(u32::MAX),
                &self.chats,
            ));
        }
        Ok(telegram(
            task_event,
            &loaded.task,
            &event.id.to_string(),
            &self.chats,
        ))
    }

    /// Telegram allows a bot about one message a second per chat and 30 a second in all: when the next message
    /// would break that, the time it may go.
    fn not_before(&self, action: &TelegramAction) -> Option<chrono::DateTime<Utc>> {
        let TelegramAction::Send { chat, .. } = action else {
            return None;
        };
        let sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let per_chat = sent
            .per_chat
            .get(chat)
            .map(|at| *at + Duration::from_secs(1));
        let overall = sent
            .last
            .map(|at| at + Duration::from_millis(1000 / 30 + 1));
        let free = per_chat.into_iter().chain(overall).max()?;
        (free > now)
            .then(|| Utc::now() + chrono::Duration::from_std(free - now).unwrap_or_default())
    }

    fn sent(&self, action: &TelegramAction) {
        if let TelegramAction::Send { chat, .. } = action {
            let mut sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            sent.per_chat.insert(*chat, now);
            sent.last = Some(now);
        }
    }

    /// A message about a task, once sent: which task it was about, so that a reply to it reaches the task.
    fn record_of(
        &self,
        request: &Request<TelegramAction>,
        produced: &Produced,
    ) -> Option<OwnRecord> {
        let (Produced::Message { chat, message_id }, TelegramAction::Send { reply_prompt, .. }) =
            (produced, &request.action)
        else {
            return None;
        };
        // Telegram always names the message; a reply could not be matched to one it did not.
        if *message_id == 0 {
            return None;
        }
        let sent = SentMessage {
            chat: *chat,
            message_id: *message_id,
            task: request.task?,
            key: request.key.clone(),
            question: reply_prompt.is_some(),
        };
        Some(OwnRecord {
            stream: message_stream(sent.chat, sent.message_id),
            kind: MESSAGE_SENT,
            task: Some(sent.task),
            body: serde_json::to_vec(&sent).ok()?,
        })
    }

    async fn call(&self, _key: &str, action: &TelegramAction) -> Result<Produced, CallError> {
        match action {
            TelegramAction::SetCommands { commands } => self.client.set_my_commands(commands).await,
            TelegramAction::AnswerCallback { callback, text } => {
                self.client.answer_callback(callback, text).await
            }
            TelegramAction::Send {
                chat,
                html,
                buttons,
                reply_prompt,
            } => {
                self.client
                    .send_message(*chat, html, buttons, reply_prompt.as_deref())
                    .await
            }
        }
    }
}

/// Whether a task event is news for Telegram (checked before the task is loaded).
pub fn telegram_notifies(event: &TaskEvent) -> bool {
    match event {
        TaskEvent::FlaggedNeedsHuman { .. }
        | TaskEvent::SubmittedForReview { .. }
        | TaskEvent::Completed { .. }
        | TaskEvent::Cancelled { .. }
        | TaskEvent::Created(_)
        | TaskEvent::PlanProposed { .. }
        | TaskEvent::WentStale { .. } => true,
        TaskEvent::Approved { .. }
        | TaskEvent::Rejected { .. }
        | TaskEvent::Started { .. }
        | TaskEvent::Resumed { .. }
        | TaskEvent::Retried { .. }
        | TaskEvent::Archived { .. }
        | TaskEvent::NeedsHumanCleared { .. }
        | TaskEvent::SpecUpdated { .. }
        | TaskEvent::FollowUpAttached { .. }
        | TaskEvent::FollowUpsDelivered { .. }
        | TaskEvent::TicketSeen { .. }
        | TaskEvent::PriorityChanged { .. }
        | TaskEvent::LinksAttached { .. }
        | TaskEvent::AttemptReturned { .. }
        | TaskEvent::AgentChosen { .. }
        | TaskEvent::TriageEnded { .. }
        | TaskEvent::PlanApproved { .. }
        | TaskEvent::PlanRejected { .. }
        | TaskEvent::ChildrenCreated { .. }
        | TaskEvent::RolledUp { .. }
        | TaskEvent::CheckPassed { .. }
        | TaskEvent::ReviewApproved { .. }
        | TaskEvent::ApprovalWithdrawn { .. }
        | TaskEvent::Combined { .. }
        | TaskEvent::Landed { .. }
        | TaskEvent::Refreshed { .. }
        | TaskEvent::ConflictFound { .. }
        | TaskEvent::ConflictUnresolved { .. }
        | TaskEvent::RefreshCheckDue { .. }
        | TaskEvent::RefreshCheckFailed { .. }
        | TaskEvent::MergeQueued { .. } => false,
    }
}

/// One message per chat for each state change people act on: a task waiting for approval, in review, done,
/// cancelled, and each needs-human episode (the domain records one flag per episode, so a task that stays
/// flagged is not announced again), asked as a question with a reply prompt: a reply to that message from an
/// allowed chat is the answer (`intake`, through the message's record `telegram-message:<chat>:<id>`). Keyed by
/// the event, so a replay sends nothing twice.
pub fn telegram(
    event: &TaskEvent,
    task: &Task,
    event_id: &str,
    chats: &[i64],
) -> Vec<Request<TelegramAction>> {
    use crate::providers::telegram::{escape, fit};
    let head = format!(
        "<b>{}</b> {} <i>({})</i>",
        task.id(),
        escape(&task.title()),
        escape(task.repo().as_str())
    );
    let text = match event {
        // A plan waits for its planner first; what is approved is its proposal (see `telegram_proposal`).
        TaskEvent::Created(created)
            if created.approval == crate::tasks::ApprovalPolicy::Manual && task.is_plan() =>
        {
            format!(
                "🗺 {head}\na plan: its planner splits the goal into tasks, and the plan comes here for approval"
            )
        }
        TaskEvent::Created(created) if created.approval == crate::tasks::ApprovalPolicy::Manual => {
            format!(
                "🆕 {head}\nwaits for approval: /approve {} or /reject {}",
                task.id(),
                task.id()
            )
        }
        // A question: the reply to this very message is the answer (the bot's reply prompt asks for it).
        TaskEvent::FlaggedNeedsHuman {
            reason,
            question: true,
            ..
        } => format!(
            "❓ {head}\nthe agent asks: {}\nReply to this message to answer (the next attempt gets it), or /retry {} or /cancel {}",
            escape(reason.as_str()),
            task.id(),
            task.id()
        ),
        TaskEvent::FlaggedNeedsHuman { reason, .. } => format!(
            "⚠️ {head}\nneeds a human: {}\nReply to this message to answer (the next attempt gets it), or /retry {} or /cancel {}",
            escape(reason.as_str()),
            task.id(),
            task.id()
        ),
        TaskEvent::SubmittedForReview { branch, .. } => format!(
            "👀 {head}\nready for review on <code>{}</code> (attempt {} of {})",
            escape(branch.as_str()),
            task.attempts(),
            task.max_attempts().get()
        ),
        TaskEvent::Completed { .. } => format!("✅ {head}\ndone"),
        TaskEvent::Cancelled { reason, .. } => {
            format!("✖️ {head}\ncancelled: {}", escape(reason.as_str()))
        }
        TaskEvent::WentStale {
            after_h,
            action: crate::tasks::StaleAction::Remind,
            ..
        } => format!(
            "⏰ {head}\nin review for {after_h} h without activity: its pull request waits for a reviewer"
        ),
        // Closed: its cancellation, which follows, says why.
        TaskEvent::WentStale { .. } => return Vec::new(),
        // Its flag (when the conflict needs a person) is the news.
        TaskEvent::ConflictFound { .. }
        | TaskEvent::ConflictUnresolved { .. }
        | TaskEvent::RefreshCheckDue { .. }
        | TaskEvent::RefreshCheckFailed { .. } => return Vec::new(),
        // Approved at creation (the `auto` policy): the next news is its start, not announced either.
        TaskEvent::Created(_) => return Vec::new(),
        TaskEvent::Approved { .. }
        | TaskEvent::Rejected { .. }
        | TaskEvent::Started { .. }
        | TaskEvent::Resumed { .. }
        | TaskEvent::Retried { .. }
        | TaskEvent::Archived { .. }
        | TaskEvent::NeedsHumanCleared { .. }
        | TaskEvent::SpecUpdated { .. }
        | TaskEvent::FollowUpAttached { .. }
        | TaskEvent::FollowUpsDelivered { .. }
        | TaskEvent::TicketSeen { .. }
        | TaskEvent::PriorityChanged { .. }
        | TaskEvent::LinksAttached { .. }
        | TaskEvent::AttemptReturned { .. }
        | TaskEvent::AgentChosen { .. }
        | TaskEvent::TriageEnded { .. }
        | TaskEvent::PlanProposed { .. }
        | TaskEvent::PlanApproved { .. }
        | TaskEvent::PlanRejected { .. }
        | TaskEvent::ChildrenCreated { .. }
        | TaskEvent::RolledUp { .. }
        | TaskEvent::CheckPassed { .. }
        | TaskEvent::ReviewApproved { .. }
        | TaskEvent::ApprovalWithdrawn { .. }
        | TaskEvent::Combined { .. }
        | TaskEvent::Landed { .. }
        | TaskEvent::MergeQueued { .. }
        | TaskEvent::Refreshed { .. } => return Vec::new(),
    };
    let html = fit(&text);
    // Callback data stays far under Telegram's 64 bytes: a verb and a task id.
    let button = |label: &str, verb: &str| (label.to_owned(), format!("{verb}:{}", task.id()));
    // Only a task that waits for approval gets buttons (a plan's are on its proposal).
    let buttons = if matches!(event, TaskEvent::Created(_)) && !task.is_plan() {
        vec![button("Approve", "approve"), button("Reject", "reject")]
    } else {
        Vec::new()
    };
    // A needs-human notice asks: Telegram shows a reply box under it (no buttons then: one markup per message).
    let reply_prompt = matches!(event, TaskEvent::FlaggedNeedsHuman { .. })
        .then(|| format!("Your answer for {}", task.id()));
    chats
        .iter()
        .map(|chat| Request {
            key: crate::providers::telegram::messages::notice_key(*chat, event_id),
            task: Some(task.id()),
            action: TelegramAction::Send {
                chat: *chat,
                html: html.clone(),
                buttons: buttons.clone(),
                reply_prompt: reply_prompt.clone(),
            },
        })
        .collect()
}

/// A plan's proposal, one message per chat per revision (`telegram:plan:<chat>:<plan>:<revision>`): its items
/// with their scopes and dependencies, all of it escaped (a planner agent wrote it). Waiting for approval it
/// carries **Approve** and **Reject**; a rejection needs a comment for the planner, so Reject asks for
/// `/reject T-n <comment>`. Approved as proposed (`approval = "auto"`), it says so, without buttons.
pub fn telegram_proposal(
    plan: &PlanDocument,
    task: &Task,
    revision: u32,
    chats: &[i64],
) -> Vec<Request<TelegramAction>> {
    use crate::providers::telegram::{escape, fit};
    let id = task.id();
    let waits = task.approval() == crate::tasks::ApprovalPolicy::Manual;
    let items = plan.items();
    let mut text = format!(
        "📋 <b>{id}</b> {} <i>({})</i>\nplan revision {revision}: {} task{}, {}",
        escape(&task.title()),
        escape(task.repo().as_str()),
        items.len(),
        if items.len() == 1 { "" } else { "s" },
        if waits {
            "waiting for approval"
        } else {
            "approved as proposed"
        }
    );
    if let Some(summary) = plan.summary().filter(|s| !s.trim().is_empty()) {
        text.push_str(&format!("\n<i>{}</i>", escape(summary.trim())));
    }
    for item in items {
        text.push_str(&format!(
            "\n• <code>{}</code> <b>{}</b>",
            escape(&item.id().to_string()),
            escape(item.title().trim())
        ));
        if !item.scope().is_empty() {
            text.push_str(&format!(
                " — scope: {}",
                escape(
                    &item
                        .scope()
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            ));
        }
        if !item.depends_on().is_empty() {
            let after: Vec<String> = item.depends_on().iter().map(ToString::to_string).collect();
            text.push_str(&format!(" — after: {}", escape(&after.join(", "))));
        }
    }
    if waits {
        text.push_str(&format!(
            "\nApprove, or /reject {id} &lt;what to change&gt; (the planner gets your comment)"
        ));
    }
    let html = fit(&text);
    let buttons = if waits {
        vec![
            ("Approve".to_owned(), format!("approve:{id}")),
            ("Reject".to_owned(), format!("reject:{id}")),
        ]
    } else {
        Vec::new()
    };
    chats
        .iter()
        .map(|chat| Request {
            key: format!("telegram:plan:{chat}:{id}:{revision}"),
            task: Some(id),
            action: TelegramAction::Send {
                chat: *chat,
                html: html.clone(),
                buttons: buttons.clone(),
                reply_prompt: None,
            },
        })
        .collect()
}

/// The board in one Telegram message, for a digest schedule: counts per column, what needs a human, what waits
/// for review, what was done since the day before. Pure: the rows as the read model has them.
pub fn digest(
    schedule: &str,
    rows: &[crate::projectors::tasks::TaskRow],
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    use crate::providers::telegram::{escape, fit};
    use crate::tasks::Column;
    let count = |column: Column| rows.iter().filter(|r| r.column == column).count();
    let done_today: Vec<_> = rows
        .iter()
        .filter(|r| r.column == Column::Done && now - r.updated_at < chrono::Duration::days(1))
        .collect();
    let mut text = format!(
        "📋 <b>Digest</b> <i>({})</i>\ntriage {} · todo {} · in progress {} · in review {} · done in the last day {}",
        escape(schedule),
        count(Column::Triage),
        count(Column::Todo),
        count(Column::InProgress),
        count(Column::InReview),
        done_today.len()
    );
    let line =
        |r: &crate::projectors::tasks::TaskRow| format!("\n• <b>{}</b> {}", r.id, escape(&r.title));
    let flagged: Vec<_> = rows.iter().filter(|r| r.needs_human).collect();
    if !flagged.is_empty() {
        text.push_str("\n\n⚠️ needs a human:");
        for r in flagged.iter().take(10) {
            text.push_str(&line(r));
            if let Some(reason) = &r.needs_human_reason {
                text.push_str(&format!(" — {}", escape(reason)));
            }
        }
    }
    let review: Vec<_> = rows
        .iter()
        .filter(|r| r.column == Column::InReview)
        .collect();
    if !review.is_empty() {
        text.push_str("\n\n👀 in review:");
        for r in review.iter().take(10) {
            text.push_str(&line(r));
        }
    }
    if !done_today.is_empty() {
        text.push_str("\n\n✅ done:");
        for r in done_today.iter().take(10) {
            text.push_str(&line(r));
        }
    }
    fit(&text)
}

/// Whether the notice for the task event at `position` is a repeat inside the cooldown: of the same kind as one
/// sent less than `cooldown` before it. Pure and decided from the task's own history (its events' kinds and
/// times, in order), so a replay decides the same; a notice held back does not restart the cooldown.
pub fn repeat_in_cooldown(
    history: &[(i64, chrono::DateTime<chrono::Utc>, &str)],
    position: i64,
    cooldown: chrono::Duration,
) -> bool {
    let Some((_, _, kind)) = history.iter().find(|(p, _, _)| *p == position) else {
        return false;
    };
    if !matches!(
        *kind,
        "task.submitted_for_review" | "task.flagged_needs_human"
    ) {
        return false;
    }
    let mut last_sent: Option<chrono::DateTime<chrono::Utc>> = None;
    for (p, at, k) in history {
        if k != kind {
            continue;
        }
        let sent = last_sent.is_none_or(|last| *at - last >= cooldown);
        if *p == position {
            return !sent;
        }
        if sent {
            last_sent = Some(*at);
        }
    }
    false
}
