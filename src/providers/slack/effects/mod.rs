//! The Slack policy: a task that came from Slack (`SLACK_THREAD` among its links) has its story told in its
//! thread: created (waiting for approval, with buttons, or on it), approved, in review with its pull request,
//! a needs-human episode (the agent's question: a reply in the thread answers it), done, cancelled, and a plan's
//! proposal. A task asked for by `/pidevops` has no thread yet: its root message is posted first
//! (`slack:root:<task>`), and its `ts`, read back from that effect's success, roots the rest. The thread is
//! recorded (`slack-message:<channel>:<root>`) so intake finds the task from a reply in it. Button presses are
//! `buttons.rs`'s; the first message about a task is kept saying where it stands (`status.rs`). The request builders are pure; [`SlackPolicy`] is the `effects:slack` loop's side of
//! [`ProviderPolicy`], and keeps to Slack's pace (about a message a second per channel).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;

use crate::board::Loaded;
use crate::domain::Source;
use crate::effects::handle::{EffectsProgress, Handle, Settled};
use crate::effects::provider::{OpenedPullRequest, OwnRecord, ProviderPolicy};
use crate::effects::{stream, CallError, EffectEvent, Produced, Request};
use crate::eventlog::StoredEvent;
use crate::providers::slack::messages::notice_key;
use crate::providers::slack::settings::SlackSettings;
use crate::providers::slack::{escape, message_stream, SentMessage, SlackClient, MESSAGE_SENT};
use crate::tasks::plan::PlanDocument;
use crate::tasks::{
    ApprovalPolicy, GithubRef, SlackThread, Task, TaskEvent, TaskId, GITHUB_PR, SLACK_THREAD,
};

pub use action::SlackAction;

mod action;
mod buttons;
mod status;

pub use status::slack_status;

/// The emoji put on the message that asked for a task: seen, and taken.
pub const SEEN: &str = "eyes";

/// The `effects:slack` policy: each Slack task's story in its thread, and the buttons.
#[derive(Clone, Debug)]
pub struct SlackPolicy {
    client: SlackClient,
    /// Who may press the buttons, and where.
    settings: SlackSettings,
    /// When this process last posted to each channel (Slack's pace).
    sent: Arc<Mutex<HashMap<String, Instant>>>,
}

impl SlackPolicy {
    pub fn new(client: SlackClient, settings: SlackSettings) -> Self {
        Self {
            client,
            settings,
            sent: Default::default(),
        }
    }
}

/// Where a task's thread stands.
enum Root {
    /// Its root message's ts.
    Ready(String),
    /// The root message is on its way (this request waits for its retry).
    Waiting(Request<SlackAction>),
    /// No thread: its root message failed for good (the task was flagged), or is withheld.
    None,
}

/// The thread of `task`, from its link: the message that asked, or the root pidevops posted (asked for now if it
/// was not, when `cause` says which event asks).
async fn root_of(
    fx: &impl Handle<Action = SlackAction>,
    task: &Task,
    thread: &SlackThread,
    cause: Option<i64>,
) -> anyhow::Result<Root> {
    if let Some(ts) = thread.thread() {
        return Ok(Root::Ready(ts.to_owned()));
    }
    let request = slack_root(task, thread.channel());
    if let Some(cause) = cause {
        let mut progress = EffectsProgress::default();
        if let Settled::Waiting(_) = fx.ask(&request, cause, &mut progress).await? {
            return Ok(Root::Waiting(request));
        }
    }
    Ok(posted(fx, &request.key)
        .await?
        .map_or(Root::None, Root::Ready))
}

/// The ts effect `key` posted, once it succeeded.
async fn posted(
    fx: &impl Handle<Action = SlackAction>,
    key: &str,
) -> anyhow::Result<Option<String>> {
    let events = fx
        .log()
        .store()
        .read_stream(&stream(key))
        .await
        .with_context(|| format!("reading {}", stream(key)))?;
    Ok(events.iter().find_map(
        |e| match serde_json::from_slice::<EffectEvent>(&e.body).ok()? {
            EffectEvent::Succeeded {
                produced: Produced::Posted { message, .. },
                ..
            } => Some(message),
            _ => None,
        },
    ))
}

impl ProviderPolicy for SlackPolicy {
    type Action = SlackAction;

    fn provider(&self) -> &'static str {
        "slack"
    }

    /// Button presses; Slack's other events are intake's.
    async fn own_event(
        &self,
        fx: &impl Handle<Action = SlackAction>,
        event: &StoredEvent,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Option<Settled>> {
        if event.source != Source::Slack.as_str() {
            return Ok(None);
        }
        if event.event_type == buttons::BLOCK_ACTIONS {
            return buttons::press(fx, &self.settings, event, progress)
                .await
                .map(Some);
        }
        Ok(Some(Settled::Yes))
    }

    fn notifies(&self, event: &TaskEvent) -> bool {
        slack_notifies(event)
    }

    async fn requests(
        &self,
        fx: &impl Handle<Action = SlackAction>,
        event: &StoredEvent,
        task_event: &TaskEvent,
        loaded: &Loaded,
    ) -> anyhow::Result<Vec<Request<SlackAction>>> {
        let task = &loaded.task;
        let Some(thread) = task.links().get(SLACK_THREAD) else {
            return Ok(Vec::new());
        };
        let channel = thread.channel();
        let mut requests = Vec::new();
        // The ask seen: an emoji on the message that asked (a slash command has none).
        if let (TaskEvent::Created(_), Some(ts)) = (task_event, thread.thread()) {
            requests.push(slack_seen(task.id(), channel, ts));
        }
        let root = match root_of(fx, task, &thread, Some(event.position)).await? {
            Root::Ready(root) => root,
            Root::Waiting(request) => return Ok(vec![request]),
            Root::None => return Ok(requests),
        };
        // The status message first: it is not paced, and says where the task stands even while a post waits.
        if let Some(update) =
            status::update(fx, loaded, &thread, task_event, &event.id.to_string()).await?
        {
            requests.push(update);
        }
        if let TaskEvent::PlanProposed { plan, .. } = task_event {
            // Its revision as of this event: the proposals in the task's stream up to it.
            let revision = loaded
                .events
                .iter()
                .filter(|e| e.position <= event.position && e.event_type == "task.plan_proposed")
                .count();
            requests.push(slack_proposal(
                plan,
                task,
                u32::try_from(revision).unwrap_or(u32::MAX),
                channel,
                &root,
            ));
            return Ok(requests);
        }
        let pr = submitted_pull_request(task_event, &loaded.events, event.position);
        requests.extend(slack(
            task_event,
            task,
            channel,
            &root,
            &event.id.to_string(),
            pr.as_ref(),
        ));
        Ok(requests)
    }

    /// The pull request's address in the thread, once it is open (the review notice may have gone without it).
    async fn pull_request_opened(
        &self,
        fx: &impl Handle<Action = SlackAction>,
        opened: &OpenedPullRequest<'_>,
    ) -> anyhow::Result<Vec<Request<SlackAction>>> {
        let Some(loaded) = fx.board().load(opened.task).await? else {
            return Ok(Vec::new());
        };
        let Some(thread) = loaded.task.links().get(SLACK_THREAD) else {
            return Ok(Vec::new());
        };
        // The thread was started when the task was created; none by now means none at all.
        let Root::Ready(root) = root_of(fx, &loaded.task, &thread, None).await? else {
            return Ok(Vec::new());
        };
        Ok(vec![slack_pull_request(
            &loaded.task,
            thread.channel(),
            &root,
            opened.number,
            opened.url,
        )])
    }

    /// About one message a second per channel, as Slack asks of a bot; a post waits for its channel's turn.
    fn not_before(&self, action: &SlackAction) -> Option<chrono::DateTime<Utc>> {
        let SlackAction::Post { channel, .. } = action else {
            return None;
        };
        let sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
        let free = *sent.get(channel)? + Duration::from_secs(1);
        let now = Instant::now();
        (free > now)
            .then(|| Utc::now() + chrono::Duration::from_std(free - now).unwrap_or_default())
    }

    fn sent(&self, action: &SlackAction) {
        if let SlackAction::Post { channel, .. } = action {
            let mut sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
            sent.insert(channel.clone(), Instant::now());
        }
    }

    /// The thread a task's message went to (its root: the thread's, or this very message when it started one),
    /// so a reply in it reaches the task. First writer wins: the first message posted there names it.
    fn record_of(&self, request: &Request<SlackAction>, produced: &Produced) -> Option<OwnRecord> {
        let (
            Produced::Posted { message, .. },
            SlackAction::Post {
                channel,
                thread,
                question,
                ..
            },
        ) = (produced, &request.action)
        else {
            return None;
        };
        let root = thread.as_deref().unwrap_or(message);
        if root.is_empty() {
            return None;
        }
        let sent = SentMessage {
            channel: channel.clone(),
            thread_ts: root.to_owned(),
            task: request.task?,
            key: request.key.clone(),
            question: *question,
        };
        Some(OwnRecord {
            stream: message_stream(channel, root),
            kind: MESSAGE_SENT,
            task: Some(sent.task),
            body: serde_json::to_vec(&sent).ok()?,
        })
    }

    async fn call(&self, _key: &str, action: &SlackAction) -> Result<Produced, CallError> {
        match action {
            SlackAction::Post {
                channel,
                thread,
                text,
                buttons,
                ..
            } => {
                self.client
                    .post_message(channel, thread.as_deref(), text, buttons)
                    .await
            }
            SlackAction::Update { channel, ts, text } => {
                self.client.update_message(channel, ts, text).await
            }
            SlackAction::Ephemeral {
                channel,
                user,
                text,
            } => self.client.post_ephemeral(channel, user, text).await,
            SlackAction::React { channel, ts, name } => {
                self.client.add_reaction(channel, ts, name).await
            }
        }
    }
}

/// A submission's pull request as it stood when it was made: the one it names, else the one linked before it
/// (an earlier attempt opened it). One this attempt opens is told when it opens (`pull_request_opened`).
fn submitted_pull_request(
    task_event: &TaskEvent,
    events: &[StoredEvent],
    position: i64,
) -> Option<GithubRef> {
    let TaskEvent::SubmittedForReview { pr, .. } = task_event else {
        return None;
    };
    pr.clone().or_else(|| {
        events
            .iter()
            .filter(|e| e.position < position)
            .filter_map(|e| TaskEvent::from_stored(&e.event_type, &e.body).ok())
            .fold(None, |known, earlier| {
                // Only a link or an earlier submission's pull request says which one it was.
                if let TaskEvent::LinksAttached { links, .. } = &earlier {
                    return links.get(GITHUB_PR).or(known);
                }
                if let TaskEvent::SubmittedForReview { pr: Some(pr), .. } = earlier {
                    return Some(pr);
                }
                known
            })
    })
}

/// Whether a task event is news for Slack (checked before the task is loaded).
pub fn slack_notifies(event: &TaskEvent) -> bool {
    match event {
        TaskEvent::Created(_)
        | TaskEvent::Approved { .. }
        | TaskEvent::FlaggedNeedsHuman { .. }
        | TaskEvent::SubmittedForReview { .. }
        | TaskEvent::Completed { .. }
        | TaskEvent::Cancelled { .. }
        | TaskEvent::PlanProposed { .. }
        | TaskEvent::WentStale { .. } => true,
        TaskEvent::Rejected { .. }
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

/// The task's head line: its id, title and repository, escaped (a person or an agent wrote them).
fn head(task: &Task) -> String {
    format!(
        "*{}* {} _({})_",
        task.id(),
        escape(&task.title()),
        escape(task.repo().as_str())
    )
}

/// A button: its label and value `verb:T-n` (what `buttons.rs` reads back).
fn button(label: &str, verb: &str, task: TaskId) -> (String, String) {
    (label.to_owned(), format!("{verb}:{task}"))
}

/// The story's message about `event` in the task's thread (rooted at `root` of `channel`), keyed by the event
/// (`slack:notify:<channel>:<event>`), so a replay posts nothing twice: waiting for approval with Approve and
/// Reject, on it, in review (with its pull request when one is known), needing a human with the reason (the
/// agent's question: a reply in the thread is its answer) and Retry and Cancel, done, cancelled.
pub fn slack(
    event: &TaskEvent,
    task: &Task,
    channel: &str,
    root: &str,
    event_id: &str,
    pr: Option<&GithubRef>,
) -> Vec<Request<SlackAction>> {
    let head = head(task);
    let id = task.id();
    let mut buttons = Vec::new();
    let mut question = false;
    let text = match event {
        // A plan waits for its planner first; what is approved is its proposal (see `slack_proposal`).
        TaskEvent::Created(created)
            if created.approval == ApprovalPolicy::Manual && task.is_plan() =>
        {
            format!("🗺 {head}\na plan: its planner splits the goal into tasks, and the plan comes here for approval")
        }
        TaskEvent::Created(created) if created.approval == ApprovalPolicy::Manual => {
            buttons = vec![
                button("Approve", "approve", id),
                button("Reject", "reject", id),
            ];
            format!("🆕 {head}\nwaits for approval")
        }
        TaskEvent::Created(_) => format!("👀 {head}\non it"),
        TaskEvent::Approved {
            automatic: false, ..
        } => format!("👍 {head}\napproved: on it"),
        TaskEvent::FlaggedNeedsHuman {
            reason,
            question: asked,
            ..
        } => {
            buttons = vec![button("Retry", "retry", id), button("Cancel", "cancel", id)];
            question = *asked;
            if *asked {
                format!(
                    "❓ {head}\nthe agent asks: {}\nReply in this thread to answer (the next attempt gets it).",
                    escape(reason.as_str())
                )
            } else {
                format!(
                    "⚠️ {head}\nneeds a human: {}\nReply in this thread to answer (the next attempt gets it).",
                    escape(reason.as_str())
                )
            }
        }
        TaskEvent::SubmittedForReview { branch, .. } => {
            let mut text = format!(
                "🔍 {head}\nready for review on `{}` (attempt {} of {})",
                escape(branch.as_str()),
                task.attempts(),
                task.max_attempts().get()
            );
            if let Some(pr) = pr {
                text.push_str(&format!("\npull request {}", escape(&pr.to_string())));
            }
            text
        }
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
        // Its automatic approval follows its creation, already told as "on it".
        TaskEvent::Approved {
            automatic: true, ..
        }
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
    vec![Request {
        key: notice_key(channel, event_id),
        task: Some(id),
        action: SlackAction::Post {
            channel: channel.to_owned(),
            thread: Some(root.to_owned()),
            text,
            buttons,
            question,
        },
    }]
}

/// The root message of a task asked for by `/pidevops`, in its channel: the thread its story is told in
/// (`slack:root:<task>`, once per task).
pub fn slack_root(task: &Task, channel: &str) -> Request<SlackAction> {
    Request {
        key: format!("slack:root:{}", task.id()),
        task: Some(task.id()),
        action: SlackAction::Post {
            channel: channel.to_owned(),
            thread: None,
            text: format!(
                "🧵 {}\nasked for with /pidevops; its story goes on in this thread",
                head(task)
            ),
            buttons: Vec::new(),
            question: false,
        },
    }
}

/// The emoji on the message that asked for `task` (`slack:react:<task>`, once).
pub fn slack_seen(task: TaskId, channel: &str, ts: &str) -> Request<SlackAction> {
    Request {
        key: format!("slack:react:{task}"),
        task: Some(task),
        action: SlackAction::React {
            channel: channel.to_owned(),
            ts: ts.to_owned(),
            name: SEEN.to_owned(),
        },
    }
}

/// The task's pull request, opened: its address in the thread (`slack:pr:<task>:<number>`, once each).
pub fn slack_pull_request(
    task: &Task,
    channel: &str,
    root: &str,
    number: u64,
    url: &str,
) -> Request<SlackAction> {
    Request {
        key: format!("slack:pr:{}:{number}", task.id()),
        task: Some(task.id()),
        action: SlackAction::Post {
            channel: channel.to_owned(),
            thread: Some(root.to_owned()),
            text: format!("🔗 {}\npull request #{number}: {}", head(task), escape(url)),
            buttons: Vec::new(),
            question: false,
        },
    }
}

/// A plan's proposal in its thread, once per revision (`slack:plan:<channel>:<plan>:<revision>`): its items with
/// their scopes and dependencies, escaped (a planner agent wrote them); waiting for approval it carries Approve
/// and Reject.
pub fn slack_proposal(
    plan: &PlanDocument,
    task: &Task,
    revision: u32,
    channel: &str,
    root: &str,
) -> Request<SlackAction> {
    let id = task.id();
    let waits = task.approval() == ApprovalPolicy::Manual;
    let items = plan.items();
    let mut text = format!(
        "📋 {}\nplan revision {revision}: {} task{}, {}",
        head(task),
        items.len(),
        if items.len() == 1 { "" } else { "s" },
        if waits {
            "waiting for approval"
        } else {
            "approved as proposed"
        }
    );
    if let Some(summary) = plan.summary().filter(|s| !s.trim().is_empty()) {
        text.push_str(&format!("\n_{}_", escape(summary.trim())));
    }
    for item in items {
        text.push_str(&format!(
            "\n• `{}` *{}*",
            escape(&item.id().to_string()),
            escape(item.title().trim())
        ));
        if !item.scope().is_empty() {
            let scope: Vec<String> = item.scope().iter().map(ToString::to_string).collect();
            text.push_str(&format!(" — scope: {}", escape(&scope.join(", "))));
        }
        if !item.depends_on().is_empty() {
            let after: Vec<String> = item.depends_on().iter().map(ToString::to_string).collect();
            text.push_str(&format!(" — after: {}", escape(&after.join(", "))));
        }
    }
    let buttons = if waits {
        text.push_str(&format!(
            "\nTo reject with what to change: `pidevops plan reject {id} --comment …` (the planner gets it)"
        ));
        vec![
            button("Approve", "approve", id),
            button("Reject", "reject", id),
        ]
    } else {
        Vec::new()
    };
    Request {
        key: format!("slack:plan:{channel}:{id}:{revision}"),
        task: Some(id),
        action: SlackAction::Post {
            channel: channel.to_owned(),
            thread: Some(root.to_owned()),
            text,
            buttons,
            question: false,
        },
    }
}

#[cfg(test)]
mod tests;
