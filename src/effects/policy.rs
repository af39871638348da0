//! Which effects an event asks for. Pure: the runner hands it the event's type and the task as the log has it,
//! and it answers with requests (each with its idempotency key); it never calls out.

use std::collections::BTreeMap;

use super::{Action, Request};
use crate::tasks::{RepoName, Task, TaskEvent};

/// What the policy needs to know of the deployment.
#[derive(Clone, Debug, Default)]
pub struct PolicyConfig {
    /// The branch each configured repository's pull requests go to (`[repos."o/n"] base`); others go to `main`.
    pub bases: BTreeMap<RepoName, String>,
    /// The Telegram chats told about tasks (`TELEGRAM_ALLOWED_CHATS`).
    pub telegram_chats: Vec<i64>,
}

impl PolicyConfig {
    pub fn base_for(&self, repo: &RepoName) -> String {
        self.bases
            .get(repo)
            .cloned()
            .unwrap_or_else(|| "main".to_owned())
    }
}

/// The GitHub requests `event` (one of `task`'s events) asks for.
pub fn github(event: &TaskEvent, task: &Task, config: &PolicyConfig) -> Vec<Request> {
    match event {
        // One pull request per task: a later attempt pushes to the same branch, which updates it.
        TaskEvent::SubmittedForReview { branch, .. } => vec![Request {
            key: format!("github:pr:{}", task.id()),
            task: Some(task.id()),
            action: Action::GithubOpenPullRequest {
                repo: task.repo().clone(),
                head: branch.clone(),
                base: config.base_for(task.repo()),
                title: format!("{}: {}", task.id(), task.title()),
                body: pull_request_body(task),
            },
        }],
        _ => Vec::new(),
    }
}

/// Once the task's pull request is open: a comment on the GitHub issue it came from, pointing at it (once per
/// task; the marker on its last line lets a repeat find it).
pub fn after_pull_request(
    task: &Task,
    number: u64,
    url: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<Request> {
    let Some(issue) = &task.links().github_issue else {
        return Vec::new();
    };
    let key = format!("github:comment:{}:pull-request", task.id());
    let pull = if &issue.repo == task.repo() {
        format!("#{number}")
    } else {
        url.to_owned()
    };
    vec![Request {
        key: key.clone(),
        task: Some(task.id()),
        action: Action::GithubComment {
            repo: issue.repo.clone(),
            number: issue.number.get(),
            body: format!(
                "pidevops worked on this as {} and opened {pull} for review (attempt {} of {}).\n\n{}",
                task.id(),
                task.attempts(),
                task.max_attempts().get(),
                super::marker(&key)
            ),
            since: now - chrono::Duration::minutes(10),
        },
    }]
}

/// Whether a task event is news for Telegram (checked before the task is loaded).
pub fn telegram_notifies(event: &TaskEvent) -> bool {
    matches!(
        event,
        TaskEvent::FlaggedNeedsHuman { .. }
            | TaskEvent::SubmittedForReview { .. }
            | TaskEvent::Completed { .. }
            | TaskEvent::Cancelled { .. }
            | TaskEvent::Created(_)
    )
}

/// One message per chat for each state change people act on: a task waiting for approval, in review, done,
/// cancelled, and each needs-human episode (the domain records one flag per episode, so a task that stays
/// flagged is not announced again). Keyed by the event, so a replay sends nothing twice.
pub fn telegram(event: &TaskEvent, task: &Task, event_id: &str, chats: &[i64]) -> Vec<Request> {
    use super::telegram::{escape, fit};
    let head = format!(
        "<b>{}</b> {} <i>({})</i>",
        task.id(),
        escape(&task.title()),
        escape(task.repo().as_str())
    );
    let text = match event {
        TaskEvent::Created(created) if created.approval == crate::tasks::ApprovalPolicy::Manual => {
            format!(
                "🆕 {head}\nwaits for approval: /approve {} or /reject {}",
                task.id(),
                task.id()
            )
        }
        TaskEvent::FlaggedNeedsHuman { reason, .. } => format!(
            "⚠️ {head}\nneeds a human: {}\n/retry {} or /cancel {}",
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
        _ => return Vec::new(),
    };
    let html = fit(&text);
    // Callback data stays far under Telegram's 64 bytes: a verb and a task id.
    let button = |label: &str, verb: &str| (label.to_owned(), format!("{verb}:{}", task.id()));
    let buttons = match event {
        TaskEvent::Created(_) => vec![button("Approve", "approve"), button("Reject", "reject")],
        TaskEvent::FlaggedNeedsHuman { .. } => {
            vec![button("Retry", "retry"), button("Cancel", "cancel")]
        }
        _ => Vec::new(),
    };
    chats
        .iter()
        .map(|chat| Request {
            key: format!("telegram:notify:{chat}:{event_id}"),
            task: Some(task.id()),
            action: Action::TelegramSend {
                chat: *chat,
                html: html.clone(),
                buttons: buttons.clone(),
            },
        })
        .collect()
}

/// The pull request's description: the spec, where the task came from, and how many attempts it took.
pub fn pull_request_body(task: &Task) -> String {
    let spec = task.spec();
    let mut body = format!("## Task\n{}\n", spec.task());
    if !spec.scope().is_empty() {
        body.push_str(&format!("\n## Scope\n{}\n", spec.scope()));
    }
    if !spec.done_when().is_empty() {
        body.push_str(&format!("\n## Done when\n{}\n", spec.done_when()));
    }
    let links = task.links();
    let mut from = Vec::new();
    if let Some(issue) = &links.github_issue {
        // `Closes` only works within the repository; elsewhere it is a plain reference.
        if &issue.repo == task.repo() {
            from.push(format!("Closes #{}", issue.number));
        } else {
            from.push(format!("{issue}"));
        }
    }
    if let Some(linear) = &links.linear_issue {
        from.push(format!("Linear {}", linear.identifier()));
    }
    if let Some(telegram) = &links.telegram {
        from.push(format!("Telegram message {telegram}"));
    }
    body.push_str("\n---\n");
    if !from.is_empty() {
        body.push_str(&format!("From: {}\n", from.join(", ")));
    }
    body.push_str(&format!(
        "Opened by pidevops for {} after attempt {} of {}.\n",
        task.id(),
        task.attempts(),
        task.max_attempts().get()
    ));
    body
}
