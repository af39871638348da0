//! Which effects an event asks for. Pure: the runner hands it the event's type and the task as the log has it,
//! and it answers with requests (each with its idempotency key); it never calls out.

use std::collections::BTreeMap;

use serde_json::json;

use super::{Action, Request};
use crate::tasks::{RepoName, RetryCause, RunId, Task, TaskEvent};

/// What the policy needs to know of the deployment.
#[derive(Clone, Debug, Default)]
pub struct PolicyConfig {
    /// The branch each configured repository's pull requests go to (`[repos."o/n"] base`); others go to `main`.
    pub bases: BTreeMap<RepoName, String>,
    /// The Telegram chats told about tasks (`TELEGRAM_ALLOWED_CHATS`).
    pub telegram_chats: Vec<i64>,
    /// `TELEGRAM_ALLOWED_USERS`: when set, only these users may command or press buttons.
    pub telegram_users: Option<std::collections::BTreeSet<i64>>,
    /// A task's review or needs-human notice again within this long of the last one sent is not sent
    /// (`[telegram] cooldown_s`, default 10 minutes; 0 sends every one).
    pub telegram_cooldown: chrono::Duration,
    /// Where Linear issues move (`[linear.states]`).
    pub linear_states: LinearStates,
    /// Whether pull requests are opened (`effects:github` runs): Linear hears of a review when its pull request
    /// opens; without one, when the branch is pushed.
    pub github_prs: bool,
}

/// The Linear workflow states pidevops moves an issue through, each a list of names tried in order (the first
/// the team has wins) and the state type used when the team has none of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinearStates {
    pub in_progress: Vec<String>,
    pub in_review: Vec<String>,
    pub done: Vec<String>,
    pub blocked: Vec<String>,
}

impl Default for LinearStates {
    fn default() -> Self {
        let names = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
        Self {
            in_progress: names(&["Pi-Dev: In Progress", "In Progress"]),
            in_review: names(&["In Review"]),
            done: names(&["Done"]),
            blocked: names(&["Pi-Dev: Blocked", "Blocked"]),
        }
    }
}

impl LinearStates {
    /// `[linear.states]`: `in_progress`, `in_review`, `done`, `blocked`, each a name or a list of names.
    pub fn from_tables(tables: &crate::config::file::Tables) -> Result<Self, String> {
        let table = &tables.linear.states;
        let mut states = Self::default();
        for (key, names, into) in [
            ("in_progress", &table.in_progress, &mut states.in_progress),
            ("in_review", &table.in_review, &mut states.in_review),
            ("done", &table.done, &mut states.done),
            ("blocked", &table.blocked, &mut states.blocked),
        ] {
            if names.0.is_empty() || names.0.iter().any(|n| n.trim().is_empty()) {
                return Err(format!("linear.states.{key} names an empty state"));
            }
            into.clone_from(&names.0);
        }
        Ok(states)
    }
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
                title: format!("{}: {}", task.id(), inert(&task.title())),
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
    use crate::providers::telegram::{escape, fit};
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
    // Ticket text is untrusted: only the "From" line below may reference the source issue.
    let mut body = format!("## Task\n{}\n", inert(spec.task()));
    if !spec.scope().is_empty() {
        body.push_str(&format!("\n## Scope\n{}\n", inert(spec.scope())));
    }
    if !spec.done_when().is_empty() {
        body.push_str(&format!("\n## Done when\n{}\n", inert(spec.done_when())));
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

/// GitHub's closing keywords (any case); followed by a reference they close it when the pull request merges.
const CLOSING_KEYWORDS: [&str; 9] = [
    "close", "closes", "closed", "fix", "fixes", "fixed", "resolve", "resolves", "resolved",
];

/// Whether the text after a closing keyword could be what it closes (`#1`, `o/r#1`, a URL, `GH-1`): after an
/// optional `:` and spaces, anything but a plain word. "Fix the redirect" stays as typed.
fn names_something(after: &[char]) -> bool {
    let mut rest = after;
    if rest.first() == Some(&':') {
        rest = &rest[1..];
    }
    let token: String = rest
        .iter()
        .skip_while(|c| c.is_whitespace())
        .take_while(|c| !c.is_whitespace())
        .collect();
    let plain = token.starts_with(|c: char| c.is_ascii_alphabetic())
        && !token.contains(['#', '/', ':', '&'])
        && !token.to_ascii_lowercase().starts_with("gh-");
    !plain
}

/// Untrusted text made inert for GitHub, still readable: a zero-width space (U+200B, what Dependabot and
/// Renovate use) after every `@` (no mention or team ping), after a `#` that starts a reference (`#12`,
/// `org/repo#12`) and after `GH-`, and inside a closing keyword followed by what it could close; `&` before an
/// entity is escaped so
/// `&#64;` cannot render into an `@` after this pass. Markdown headings (`# `, `##`) keep working.
pub fn inert(text: &str) -> String {
    const ZWSP: char = '\u{200B}';
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 16);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        // Whole runs of letters, so a keyword is found whatever precedes it.
        if c.is_ascii_alphabetic() {
            let end = (i..chars.len())
                .find(|&j| !chars[j].is_ascii_alphabetic())
                .unwrap_or(chars.len());
            let word: String = chars[i..end].iter().collect();
            let lower = word.to_ascii_lowercase();
            if CLOSING_KEYWORDS.contains(&lower.as_str()) && names_something(&chars[end..]) {
                out.push(c);
                out.push(ZWSP);
                out.push_str(&word[1..]);
                i = end;
                continue;
            }
            if lower == "gh"
                && chars.get(end) == Some(&'-')
                && chars.get(end + 1).is_some_and(char::is_ascii_digit)
            {
                out.push_str(&word);
                out.push('-');
                out.push(ZWSP);
                i = end + 1;
                continue;
            }
            out.push_str(&word);
            i = end;
            continue;
        }
        out.push(c);
        match c {
            '@' if next != Some(ZWSP) => out.push(ZWSP),
            '#' if next.is_some_and(|n| n != '#' && n != ZWSP && !n.is_whitespace()) => {
                out.push(ZWSP)
            }
            '&' if next.is_some_and(|n| n == '#' || n.is_ascii_alphabetic()) => {
                out.push_str("amp;")
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Whether a task event is news for Linear (checked before the task is loaded).
pub fn linear_notifies(event: &TaskEvent) -> bool {
    matches!(
        event,
        TaskEvent::Started { .. }
            | TaskEvent::SubmittedForReview { .. }
            | TaskEvent::Retried { .. }
            | TaskEvent::FlaggedNeedsHuman { .. }
            | TaskEvent::Completed { .. }
            | TaskEvent::Cancelled { .. }
    )
}

/// What Linear hears of a task from one of its events: comments and state moves on the issue, or, when an agent
/// session (`session`) has the issue, agent activities instead of comments. Every attempt ends in exactly one
/// terminal activity (`response` or `error`, keyed by its run, so whichever of its causes comes first posts it),
/// since a `response` closes the session in Linear. `event_id` keys what happens once per event.
/// `last_run`: the run of the task's latest start (the attempt a pull request or a cancel belongs to).
pub fn linear(
    event: &TaskEvent,
    task: &Task,
    session: Option<&str>,
    last_run: Option<RunId>,
    event_id: &str,
    config: &PolicyConfig,
) -> Vec<Request> {
    let Some(issue) = task.links().linear_issue.as_ref().map(|l| l.id()) else {
        return Vec::new();
    };
    let id = task.id();
    let states = &config.linear_states;
    let request = |key: String, action: Action| Request {
        key,
        task: Some(id),
        action,
    };
    let move_to = |names: &[String], fallback: &str| {
        request(
            format!("linear:state:{event_id}"),
            Action::LinearMoveIssue {
                issue,
                states: names.to_vec(),
                fallback: fallback.to_owned(),
            },
        )
    };
    let comment = |key: String, body: String| request(key, Action::LinearComment { issue, body });
    let activity = |key: String, content: serde_json::Value| {
        session.map(|session| {
            request(
                key,
                Action::LinearActivity {
                    session: session.to_owned(),
                    content,
                },
            )
        })
    };
    let of = format!("{} of {}", task.attempts(), task.max_attempts().get());
    let mut requests = Vec::new();
    match event {
        TaskEvent::Started { run, attempt, .. } => {
            requests.push(move_to(&states.in_progress, "started"));
            let agent = task
                .agent()
                .map_or_else(|| "the repository's agent".to_owned(), |a| a.to_string());
            match activity(
                format!("linear:activity:{run}:started"),
                json!({
                    "type": "action",
                    "action": "Working",
                    "parameter": format!("attempt {attempt} of {} on pidevops/{id} with {agent}", task.max_attempts().get()),
                }),
            ) {
                Some(action) => requests.push(action),
                // People hear once that work started; later attempts show in the state and the end of each.
                None if *attempt == 1 => requests.push(comment(
                    format!("linear:comment:{id}:started"),
                    format!(
                        "pidevops started work on this as **{id}** in `{}` on branch `pidevops/{id}` with {agent}.",
                        task.repo()
                    ),
                )),
                None => {}
            }
        }
        TaskEvent::SubmittedForReview {
            run, branch, pr, ..
        } => {
            requests.push(move_to(&states.in_review, "started"));
            // The pull request is known (an earlier attempt opened it), or none will be opened: this attempt's
            // end is now. Otherwise it is when the pull request opens (see `linear_pull_request`).
            let known = pr.clone().or_else(|| task.links().github_pr.clone());
            if known.is_some() || !config.github_prs {
                let place = known.map_or_else(
                    || format!("branch `{branch}`"),
                    |pr| format!("pull request {pr}"),
                );
                requests.extend(review_notice(task, session, *run, &place, &of));
            }
        }
        TaskEvent::Retried {
            cause,
            reason,
            attempt,
            ..
        } => match cause {
            RetryCause::RunFailed { run } => requests.extend(activity(
                format!("linear:activity:{run}:end"),
                json!({
                    "type": "error",
                    "body": format!("Attempt {attempt} failed: {}", reason.as_str()),
                }),
            )),
            RetryCause::ChecksFailed | RetryCause::ChangesRequested => requests.extend(activity(
                format!("linear:activity:{event_id}"),
                json!({
                    "type": "thought",
                    "body": format!("Going again: {}", reason.as_str()),
                }),
            )),
            RetryCause::Interrupted { .. } => {}
        },
        TaskEvent::FlaggedNeedsHuman { reason, .. } => {
            requests.push(move_to(&states.blocked, "started"));
            let text = format!(
                "**{id}** needs a human: {}\n\nRetry or cancel it from Telegram (`/retry {id}`, `/cancel {id}`) or the CLI.",
                reason.as_str()
            );
            match activity(
                format!("linear:activity:{event_id}"),
                // Asks the person for input (the session waits for them) without ending it.
                json!({ "type": "elicitation", "body": text }),
            ) {
                Some(ask) => requests.push(ask),
                None => requests.push(comment(format!("linear:comment:{event_id}"), text)),
            }
        }
        TaskEvent::Completed { .. } => {
            requests.push(move_to(&states.done, "completed"));
            // A session already ended with its last attempt's response; another activity would reopen it.
            if session.is_none() {
                let pr = task
                    .links()
                    .github_pr
                    .as_ref()
                    .map_or_else(String::new, |pr| format!(": {pr} was merged"));
                requests.push(comment(
                    format!("linear:comment:{event_id}"),
                    format!("**{id}** is done{pr}."),
                ));
            }
        }
        TaskEvent::Cancelled { reason, .. } => {
            let text = format!("**{id}** was cancelled: {}", reason.as_str());
            // The attempt under way (a stop signal) ends here; one that ended already keeps its end (same key).
            let key = last_run.map_or_else(
                || format!("linear:activity:{event_id}"),
                |run| format!("linear:activity:{run}:end"),
            );
            let ended = json!({ "type": "response", "body": text });
            match activity(key, ended) {
                Some(end) => requests.push(end),
                None => requests.push(comment(format!("linear:comment:{event_id}"), text)),
            }
        }
        _ => {}
    }
    requests
}

/// The end of an attempt that went to review: the session's `response` (with the pull request among its links),
/// or a comment on the issue when its pull request opens (once per task).
fn review_notice(
    task: &Task,
    session: Option<&str>,
    run: RunId,
    place: &str,
    of: &str,
) -> Vec<Request> {
    let Some(issue) = task.links().linear_issue.as_ref().map(|l| l.id()) else {
        return Vec::new();
    };
    let id = task.id();
    let text = format!("**{id}** is ready for review in {place} (attempt {of}).");
    match session {
        Some(session) => vec![Request {
            key: format!("linear:activity:{run}:end"),
            task: Some(id),
            action: Action::LinearActivity {
                session: session.to_owned(),
                content: json!({ "type": "response", "body": text }),
            },
        }],
        None => vec![Request {
            key: format!("linear:comment:{id}:review"),
            task: Some(id),
            action: Action::LinearComment { issue, body: text },
        }],
    }
}

/// When the task's pull request opens: the attempt's end for Linear (see [`linear`]), and the pull request among
/// the session's links.
pub fn linear_pull_request(
    task: &Task,
    session: Option<&str>,
    last_run: Option<RunId>,
    url: &str,
) -> Vec<Request> {
    let Some(run) = last_run else {
        return Vec::new();
    };
    let of = format!("{} of {}", task.attempts(), task.max_attempts().get());
    let mut requests = review_notice(
        task,
        session,
        run,
        &format!("[the pull request]({url})"),
        &of,
    );
    if let Some(session) = session {
        requests.push(Request {
            key: format!("linear:session-urls:{session}:{}", task.id()),
            task: Some(task.id()),
            action: Action::LinearSessionUrls {
                session: session.to_owned(),
                urls: vec![("Pull request".to_owned(), url.to_owned())],
            },
        });
    }
    requests
}

/// An agent session pidevops will not work on (intake said why): ended with an `error` naming the reason.
pub fn linear_session_refused(session: &str, reason: &str) -> Request {
    Request {
        key: format!("linear:activity:{session}:refused"),
        task: None,
        action: Action::LinearActivity {
            session: session.to_owned(),
            content: json!({
                "type": "error",
                "body": format!("pidevops cannot take this on: {reason}"),
            }),
        },
    }
}

/// The first word in a newly opened agent session, so Linear shows it is being handled (it expects one within
/// 10 s of `created`).
pub fn linear_session_opened(session: &str, identifier: &str) -> Request {
    Request {
        key: format!("linear:activity:{session}:ack"),
        task: None,
        action: Action::LinearActivity {
            session: session.to_owned(),
            content: json!({
                "type": "thought",
                "body": format!("pidevops received {identifier}; its progress shows here."),
            }),
        },
    }
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

/// The Telegram cooldown from `[telegram] cooldown_s` (default 600).
pub fn telegram_cooldown(tables: &crate::config::file::Tables) -> Result<chrono::Duration, String> {
    Some(tables.telegram.cooldown_s)
        .filter(|s| (0..=86_400).contains(s))
        .map(chrono::Duration::seconds)
        .ok_or_else(|| {
            "telegram.cooldown_s must be a whole number of seconds from 0 to 86400".to_owned()
        })
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
