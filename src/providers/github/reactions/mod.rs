//! GitHub's reactions (`reactions::rules::HostRules`): what a GitHub event on a pidevops branch means for its
//! task. Pure: event type and payload in, a reaction out. A branch name proves nothing (anyone can push
//! `pidevops/T-1` to a fork), so [`admit`] then checks the event against what pidevops recorded for that task (its
//! repository, its pull request, not a fork) and `[intake.github] associations` before it may move it.

use std::collections::BTreeSet;

use octocrab::models::pulls::ReviewState;
use octocrab::models::webhook_events::payload::{
    PullRequestReviewCommentWebhookEventPayload, PullRequestReviewWebhookEventPayload,
    PullRequestWebhookEventPayload,
};
use serde_json::Value;

use crate::domain::Source;
use crate::reactions::rules::{self, clip, task_of, HostRules, LineComment, Reaction, HUNK_LINES};
use crate::tasks::{RepoName, TaskId};

/// GitHub's reactions, with `[intake.github]`'s own account and trusted associations.
#[derive(Clone, Debug)]
pub struct GithubReactions {
    /// pidevops's own account, whose reviews and comments never send a task back (they would loop).
    pub bot_login: Option<String>,
    /// Author associations whose reviews and comments count (intake's).
    pub trusted: BTreeSet<String>,
}

impl HostRules for GithubReactions {
    fn source(&self) -> Source {
        Source::Github
    }

    fn reads(&self, event_type: &str) -> bool {
        reads(event_type)
    }

    fn decide(&self, event_type: &str, payload: &Value) -> Reaction {
        decide(event_type, payload, self.bot_login.as_deref())
    }

    fn admit(
        &self,
        event_type: &str,
        payload: &Value,
        expected: &rules::Expected<'_>,
    ) -> Result<(), String> {
        let expected = Expected {
            repo: expected.repo,
            pr: expected.pr,
            trusted: &self.trusted,
        };
        admit(event_type, payload, &expected)
    }

    fn dequeued(&self, reason: &str) -> String {
        format!(
            "GitHub's merge queue took its pull request out without merging it ({reason}); look at the queue's \
             checks, then send it back (retry) with what to fix, or add it to the queue again"
        )
    }

    fn review_key(&self, review: u64) -> String {
        format!("github:review:{review}")
    }

    fn comment_key(&self, comment: u64) -> String {
        format!("github:review-comment:{comment}")
    }

    fn place(&self, payload: &Value) -> String {
        format!(
            "{}#{}",
            payload["repository"]["full_name"]
                .as_str()
                .unwrap_or("GitHub"),
            payload["pull_request"]["number"].as_u64().unwrap_or(0)
        )
    }
}

/// Conclusions that mean the code is at fault (`action_required`, `cancelled`, `neutral`, `skipped` do not).
const FAILED: [&str; 3] = ["failure", "timed_out", "startup_failure"];
/// The one conclusion that counts as passing for auto-land (`neutral` and `skipped` say nothing of the code).
const PASSED: &str = "success";

/// What decides one event type: its payload and pidevops's own account.
type Decider = fn(&Value, Option<&str>) -> Reaction;

/// The event types GitHub's reactions read, each with what decides it; any other asks nothing of a task.
const DECIDERS: &[(&str, Decider)] = &[
    ("github.check_suite.completed", |p, _| check_suite(p)),
    ("github.check_run.completed", |p, _| check_run(p)),
    ("github.workflow_run.completed", |p, _| workflow_run(p)),
    ("github.pull_request_review.submitted", review_submitted),
    ("github.pull_request_review.dismissed", |p, _| {
        review_dismissed(p)
    }),
    ("github.pull_request_review_comment.created", review_comment),
    ("github.pull_request.closed", |p, _| pull_request_closed(p)),
    ("github.pull_request.dequeued", |p, _| {
        pull_request_dequeued(p)
    }),
];

/// Whether [`decide`] reads `event_type` at all: the reactions loop parses no other payload.
pub fn reads(event_type: &str) -> bool {
    DECIDERS.iter().any(|(t, _)| *t == event_type)
}

/// Decides what `event_type` with `payload` asks of its task. `bot_login`: pidevops's own GitHub account, whose
/// reviews and comments never send a task back (they would loop).
pub fn decide(event_type: &str, payload: &Value, bot_login: Option<&str>) -> Reaction {
    DECIDERS
        .iter()
        .find(|(t, _)| *t == event_type)
        .map_or(Reaction::None, |(_, decider)| decider(payload, bot_login))
}

/// A string field, or empty.
fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// Whether `login` is pidevops's own account.
fn ours(bot_login: Option<&str>, login: &str) -> bool {
    bot_login.is_some_and(|bot| bot.eq_ignore_ascii_case(login))
}

/// A check suite finished: a failure sends the task back.
fn check_suite(payload: &Value) -> Reaction {
    let suite = &payload["check_suite"];
    let Some(task) = task_of_value(&suite["head_branch"]) else {
        return Reaction::None;
    };
    let conclusion = text(&suite["conclusion"]);
    let app = suite["app"]["name"].as_str().unwrap_or("a CI app");
    if conclusion == PASSED {
        return Reaction::ChecksPassed {
            task,
            sha: text(&suite["head_sha"]),
            name: app.to_owned(),
        };
    }
    if !FAILED.contains(&conclusion.as_str()) {
        return Reaction::Ignore {
            task,
            why: format!("check suite concluded {conclusion}"),
        };
    }
    Reaction::ChecksFailed {
        task,
        sha: text(&suite["head_sha"]),
        summary: format!("{app} check suite concluded {conclusion}"),
    }
}

/// A check run finished: a failure sends the task back with its output's title, summary and link.
fn check_run(payload: &Value) -> Reaction {
    let run = &payload["check_run"];
    let Some(task) = task_of_value(&run["check_suite"]["head_branch"]) else {
        return Reaction::None;
    };
    let conclusion = text(&run["conclusion"]);
    if conclusion == PASSED {
        return Reaction::ChecksPassed {
            task,
            sha: text(&run["head_sha"]),
            name: text(&run["name"]),
        };
    }
    if !FAILED.contains(&conclusion.as_str()) {
        return Reaction::Ignore {
            task,
            why: format!("check run concluded {conclusion}"),
        };
    }
    let mut summary = format!("{} concluded {conclusion}", text(&run["name"]));
    for part in [&run["output"]["title"], &run["output"]["summary"]] {
        if let Some(part) = part.as_str().filter(|p| !p.trim().is_empty()) {
            summary.push_str(&format!("\n{}", part.trim()));
        }
    }
    if let Some(url) = run["details_url"].as_str().or(run["html_url"].as_str()) {
        summary.push_str(&format!("\n{url}"));
    }
    Reaction::ChecksFailed {
        task,
        sha: text(&run["head_sha"]),
        summary: clip(&summary),
    }
}

/// A workflow run finished: a failure sends the task back.
fn workflow_run(payload: &Value) -> Reaction {
    let run = &payload["workflow_run"];
    let Some(task) = task_of_value(&run["head_branch"]) else {
        return Reaction::None;
    };
    let conclusion = text(&run["conclusion"]);
    let name = run["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .or(payload["workflow"]["name"].as_str())
        .unwrap_or("a workflow");
    if conclusion == PASSED {
        return Reaction::ChecksPassed {
            task,
            sha: text(&run["head_sha"]),
            name: name.to_owned(),
        };
    }
    if !FAILED.contains(&conclusion.as_str()) {
        return Reaction::Ignore {
            task,
            why: format!("workflow run concluded {conclusion}"),
        };
    }
    Reaction::ChecksFailed {
        task,
        sha: text(&run["head_sha"]),
        summary: format!(
            "workflow {name} concluded {conclusion} ({})",
            text(&run["html_url"])
        ),
    }
}

/// A payload of one of the families octocrab models (reviews, review comments, pull requests), typed; `None`
/// (with why, logged) when GitHub sent something its model does not read. Check suites, check runs and workflow
/// runs octocrab leaves as free JSON, so those are read by name above.
fn typed<T: serde::de::DeserializeOwned>(payload: &Value, what: &str) -> Option<T> {
    match T::deserialize(payload) {
        Ok(typed) => Some(typed),
        Err(error) => {
            tracing::warn!(%error, "a GitHub {what} that octocrab's model does not read: ignored");
            None
        }
    }
}

/// Who: a login, or empty when GitHub names nobody (a deleted account).
fn login(author: Option<&octocrab::models::Author>) -> String {
    author.map(|a| a.login.clone()).unwrap_or_default()
}

/// A review: requested changes or comments send the task back (once per review) and an approval is a landing
/// fact, unless pidevops wrote it.
fn review_submitted(payload: &Value, bot_login: Option<&str>) -> Reaction {
    let Some(event) = typed::<PullRequestReviewWebhookEventPayload>(payload, "review") else {
        return Reaction::None;
    };
    let Some(task) = task_of(&event.pull_request.head.ref_field) else {
        return Reaction::None;
    };
    let review = &event.review;
    let by = login(review.user.as_ref());
    if ours(bot_login, &by) {
        return Reaction::Ignore {
            task,
            why: "a review by pidevops's own account".into(),
        };
    }
    let changes_requested = match review.state {
        Some(ReviewState::Approved) => {
            return Reaction::Approved {
                task,
                by,
                // The commit the reviewer saw; an approval of older code must not count for newer.
                sha: review.commit_id.clone().unwrap_or_default(),
            };
        }
        Some(ReviewState::ChangesRequested) => true,
        Some(ReviewState::Commented) => false,
        other => {
            return Reaction::Ignore {
                task,
                why: format!("a review that is {other:?}"),
            }
        }
    };
    Reaction::Reviewed {
        task,
        review: review.id.0,
        by,
        changes_requested,
        body: clip(review.body.as_deref().unwrap_or_default()),
    }
}

/// A review was dismissed: if it approved, it no longer counts.
fn review_dismissed(payload: &Value) -> Reaction {
    let Some(event) = typed::<PullRequestReviewWebhookEventPayload>(payload, "review") else {
        return Reaction::None;
    };
    let Some(task) = task_of(&event.pull_request.head.ref_field) else {
        return Reaction::None;
    };
    Reaction::ReviewDismissed {
        task,
        by: login(event.review.user.as_ref()),
    }
}

/// A reviewer's line comment, unless pidevops wrote it.
fn review_comment(payload: &Value, bot_login: Option<&str>) -> Reaction {
    let Some(event) =
        typed::<PullRequestReviewCommentWebhookEventPayload>(payload, "review comment")
    else {
        return Reaction::None;
    };
    let Some(task) = task_of(&event.pull_request.head.ref_field) else {
        return Reaction::None;
    };
    let comment = &event.comment;
    let by = login(comment.user.as_ref());
    if ours(bot_login, &by) {
        return Reaction::Ignore {
            task,
            why: "a comment by pidevops's own account".into(),
        };
    }
    let lines = comment.line.map(|end| {
        let start = comment.start_line.filter(|s| *s <= end);
        (start.unwrap_or(end), end)
    });
    let hunk_lines: Vec<&str> = comment.diff_hunk.lines().collect();
    let hunk = hunk_lines[hunk_lines.len().saturating_sub(HUNK_LINES)..].join("\n");
    Reaction::ReviewComment {
        task,
        comment: LineComment {
            id: comment.id.0,
            review: comment.pull_request_review_id.map(|r| r.0),
            by,
            path: comment.path.clone(),
            lines,
            body: comment.body.clone(),
            hunk: clip(&hunk),
        },
    }
}

/// The pull request closed: merged, or closed unmerged.
fn pull_request_closed(payload: &Value) -> Reaction {
    let Some(event) = typed::<PullRequestWebhookEventPayload>(payload, "pull request") else {
        return Reaction::None;
    };
    let pr = &event.pull_request;
    let Some(task) = task_of(&pr.head.ref_field) else {
        return Reaction::None;
    };
    // Who: the payload's sender (octocrab keeps it beside the payload it models).
    let sender = payload["sender"]["login"].as_str();
    if pr.merged == Some(true) || pr.merged_at.is_some() {
        let by = pr
            .merged_by
            .as_ref()
            .map(|a| a.login.as_str())
            .or(sender)
            .unwrap_or("someone")
            .to_owned();
        Reaction::Merged { task, by }
    } else {
        Reaction::ClosedUnmerged {
            task,
            by: sender.unwrap_or("someone").to_owned(),
        }
    }
}

/// GitHub's merge queue took the pull request out without merging it (`reason`: `CI_FAILURE`, `MERGE_CONFLICT`,
/// `MANUAL`, …, GitHub's own words, clipped). `ALREADY_MERGED` asks for nothing: its `closed` (merged) comes.
fn pull_request_dequeued(payload: &Value) -> Reaction {
    let Some(task) = task_of_value(&payload["pull_request"]["head"]["ref"]) else {
        return Reaction::None;
    };
    let reason = payload["reason"].as_str().unwrap_or("no reason given");
    if reason.eq_ignore_ascii_case("ALREADY_MERGED") {
        return Reaction::Ignore {
            task,
            why: "out of the merge queue because it merged".into(),
        };
    }
    Reaction::Dequeued {
        task,
        reason: clip(reason),
    }
}

/// What pidevops recorded of a task (`reactions::rules::Expected`) with whom GitHub's rules trust: what an event
/// about it must match.
#[derive(Clone, Copy, Debug)]
pub struct Expected<'a> {
    pub repo: &'a RepoName,
    /// The pull request pidevops opened for it (in its repository), if any.
    pub pr: Option<u64>,
    /// Author associations whose reviews and comments count (intake's `[intake.github] associations`).
    pub trusted: &'a BTreeSet<String>,
}

/// Whether an event `decide` tied to a task may move it: it comes from the task's repository and, for pull
/// request events, is about the task's own pull request (never a fork's), and a review or comment is by someone
/// trusted. `Err` says why not. CI results are held to the task's last pushed commit by the caller.
pub fn admit(event_type: &str, payload: &Value, expected: &Expected<'_>) -> Result<(), String> {
    let name = |v: &Value| v.as_str().unwrap_or("an unnamed repository").to_owned();
    let repo = name(&payload["repository"]["full_name"]);
    if !repo.eq_ignore_ascii_case(expected.repo.as_str()) {
        return Err(format!(
            "from {repo}, not the task's repository {}",
            expected.repo
        ));
    }
    if event_type == "github.workflow_run.completed" {
        let head = &payload["workflow_run"]["head_repository"]["full_name"];
        if !head.is_null() && !name(head).eq_ignore_ascii_case(&repo) {
            return Err(format!(
                "a workflow run for {}'s branch, a fork",
                name(head)
            ));
        }
    }
    let pr = &payload["pull_request"];
    if !event_type.starts_with("github.pull_request") {
        return Ok(());
    }
    let number = pr["number"].as_u64().unwrap_or(0);
    rules::own_request(expected.pr, number, "pull request #")?;
    let head = &pr["head"]["repo"]["full_name"];
    let base = name(&pr["base"]["repo"]["full_name"]);
    if head.is_null()
        || !name(head).eq_ignore_ascii_case(&base)
        || !base.eq_ignore_ascii_case(&repo)
    {
        return Err(format!(
            "pull request #{number} comes from {}, a fork",
            head.as_str().unwrap_or("a deleted repository")
        ));
    }
    let author = match event_type {
        "github.pull_request_review.submitted" => Some(&payload["review"]),
        "github.pull_request_review_comment.created" => Some(&payload["comment"]),
        _ => None,
    };
    if let Some(author) = author {
        let association = author["author_association"].as_str().unwrap_or("NONE");
        if !expected.trusted.contains(&association.to_ascii_uppercase()) {
            return Err(format!(
                "{} is {association} on {repo}; only {} move a task",
                author["user"]["login"].as_str().unwrap_or("someone"),
                expected
                    .trusted
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    Ok(())
}

/// [`task_of`] a branch read by name from free JSON.
fn task_of_value(branch: &Value) -> Option<TaskId> {
    task_of(branch.as_str()?)
}

#[cfg(test)]
mod tests;
