//! A task's live status: the first message pidevops posted about it (a `/pidevops` task's root in the channel,
//! else the first message of its thread) is edited with `chat.update` as the task moves, so the thread's head
//! says where it stands now; the story below it keeps each step.

use super::{head, notice_key, posted, SlackAction};
use crate::board::Loaded;
use crate::effects::handle::Handle;
use crate::effects::Request;
use crate::tasks::{SlackThread, Task, TaskEvent, GITHUB_PR};

/// The update of `loaded`'s status message for its event `event_id`, once the message is known: `None` before it
/// was posted (the event that posts it needs no update) or when it never was.
pub(super) async fn update(
    fx: &impl Handle<Action = SlackAction>,
    loaded: &Loaded,
    thread: &SlackThread,
    task_event: &TaskEvent,
    event_id: &str,
) -> anyhow::Result<Option<Request<SlackAction>>> {
    if let TaskEvent::Created(_) = task_event {
        return Ok(None);
    }
    let task = &loaded.task;
    let key = match thread.thread() {
        None => super::slack_root(task, thread.channel()).key,
        // The thread's first message: the notice of the task's creation.
        Some(_) => {
            let Some(created) = loaded.events.first() else {
                return Ok(None);
            };
            notice_key(thread.channel(), &created.id.to_string())
        }
    };
    let Some(ts) = posted(fx, &key).await? else {
        return Ok(None);
    };
    Ok(Some(slack_status(task, thread.channel(), &ts, event_id)))
}

/// The status message `ts` of `channel` rewritten to say where `task` stands (`slack:status:<task>:<event>`, once
/// per event: a replay edits nothing again). What it says is the task as loaded, so a loop catching up writes
/// the latest state each time.
pub fn slack_status(task: &Task, channel: &str, ts: &str, event_id: &str) -> Request<SlackAction> {
    let mut text = format!("{}\nnow: {}", head(task), task.column());
    if let Some(flag) = task.needs_human() {
        let what = if flag.question {
            "the agent asks"
        } else {
            "needs a human"
        };
        text.push_str(&format!(
            " — {what}: {}",
            super::escape(flag.reason.as_str())
        ));
    }
    if let Some(pr) = task.links().get(GITHUB_PR) {
        text.push_str(&format!(
            "\npull request {}",
            super::escape(&pr.to_string())
        ));
    }
    Request {
        key: format!("slack:status:{}:{event_id}", task.id()),
        task: Some(task.id()),
        action: SlackAction::Update {
            channel: channel.to_owned(),
            ts: ts.to_owned(),
            text,
        },
    }
}
