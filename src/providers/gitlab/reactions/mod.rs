//! GitLab's reactions (`reactions::rules::HostRules`): what a GitLab event on a `pidevops/<task>` branch means for
//! its task, pure, and whether it may move it. Built with `[intake.gitlab]` (who is trusted, pidevops's own
//! account) and the GitLab client, which only fetches a failed job's log tail.
//!
//! - `gitlab.pipeline`: `failed` is a CI failure on its `sha`, naming the jobs that failed it (allowed failures
//!   are not); their log tails are fetched before the task is sent back ([`GitlabReactions::failure_details`]:
//!   at most [`MAX_JOBS`], each bounded, a fetch that fails says so and holds nothing up). `success` is the
//!   passing check `pipeline`. A merge request pipeline's (`refs/merge-requests/<iid>/…`) is its merge request's
//!   task's; a merged result's counts for the head GitLab's API says it was made from (`trains.rs`).
//! - `gitlab.merge_train.left` (`gitlab_poller`'s): the merge request left its train unmerged, the task flagged
//!   (`trains.rs`).
//! - `gitlab.build` (a job): `success` is a passing check named after the job (what `required_checks` names); a
//!   failed job is its pipeline's to report, so a failure sends the task back once.
//! - `gitlab.merge_request.*`: `approved` is an approval of `last_commit`, `unapproved` withdraws the approver's,
//!   `merge` completes the task, `close` cancels it; other actions change nothing.
//! - `gitlab.note` on a merge request by a trusted user (`[intake.gitlab] trusted_users`), not pidevops's own and
//!   not addressed to pidevops (`/pidevops …`, an @-mention: intake's): a diff note is a line comment (file and
//!   lines), any other a follow-up that sends the task back, keyed `gitlab:note:<id>`.
//!
//! [`admit`] holds each to what pidevops recorded: the project is the task's repository, a merge request (or a
//! note on one) is the task's own (`GITLAB_MR`'s iid) and not from a fork (source and target are the project), a
//! note or approval is by a trusted user.

use futures::future::BoxFuture;
use serde_json::Value;

use crate::domain::Source;
use crate::providers::gitlab::client::GitlabClient;
use crate::providers::gitlab::intake::addressed;
use crate::providers::gitlab::models::{JobEvent, MergeRequestEvent, NoteEvent, PipelineEvent};
use crate::providers::gitlab::settings::{GitlabIntake, GitlabSettings};
use crate::reactions::rules::{
    clip, own_request, task_of, Expected, HostRules, LineComment, Reaction, ResultHead,
};
use crate::tasks::{RepoName, TaskId};

/// At most this many failed jobs' logs are fetched for one pipeline (the first ones, in its order).
pub const MAX_JOBS: usize = 3;
/// How long one job's log may take: a slow GitLab costs the loop this much, once, and never stalls it.
const LOG_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// All the log tails of one failure together, in characters: a retry's reason is 2,000 at most, and the job
/// names and the pipeline's link come first.
const DETAILS_BUDGET: usize = 1200;

/// GitLab's reactions, with `[intake.gitlab]` and the client a failed job's log is read with (or why there is
/// none: no `GITLAB_TOKEN`).
#[derive(Clone, Debug)]
pub struct GitlabReactions {
    own: GitlabIntake,
    client: Result<GitlabClient, String>,
}

impl GitlabReactions {
    pub fn new(settings: GitlabSettings) -> Self {
        let client = match &settings.token {
            Some(token) => GitlabClient::new(&settings.url, token),
            None => Err(format!(
                "{} is not set",
                crate::providers::gitlab::settings::TOKEN
            )),
        };
        Self {
            own: settings.intake,
            client,
        }
    }

    /// The end of job `job`'s log in `project`, or why not.
    async fn log_tail(&self, project: &RepoName, job: u64) -> Result<String, String> {
        let client = self.client.as_ref().map_err(Clone::clone)?;
        match tokio::time::timeout(LOG_TIMEOUT, client.job_log_tail(project, job)).await {
            Ok(Ok(tail)) => Ok(tail),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err(format!("no answer within {} s", LOG_TIMEOUT.as_secs())),
        }
    }
}

impl HostRules for GitlabReactions {
    fn source(&self) -> Source {
        Source::Gitlab
    }

    fn reads(&self, event_type: &str) -> bool {
        reads(event_type)
    }

    fn decide(&self, event_type: &str, payload: &Value) -> Reaction {
        decide(event_type, payload, &self.own)
    }

    fn admit(
        &self,
        event_type: &str,
        payload: &Value,
        expected: &Expected<'_>,
    ) -> Result<(), String> {
        admit(event_type, payload, expected, &self.own)
    }

    /// A failed pipeline's failed jobs' log tails, fetched together (each bounded by [`LOG_TIMEOUT`]).
    fn failure_details<'a>(
        &'a self,
        repo: &'a RepoName,
        event_type: &'a str,
        payload: &'a Value,
    ) -> BoxFuture<'a, Option<String>> {
        Box::pin(async move {
            if event_type != "gitlab.pipeline" {
                return None;
            }
            let pipeline = PipelineEvent::read(payload).ok()?;
            let jobs: Vec<_> = pipeline.failed_jobs().take(MAX_JOBS).collect();
            if jobs.is_empty() {
                return None;
            }
            let tails = futures::future::join_all(
                jobs.iter()
                    .map(|job| async { (job.name.as_str(), self.log_tail(repo, job.id).await) }),
            )
            .await;
            Some(details(&tails))
        })
    }

    fn result_head<'a>(
        &'a self,
        repo: &'a RepoName,
        event_type: &'a str,
        payload: &'a Value,
    ) -> BoxFuture<'a, ResultHead> {
        Box::pin(async move {
            if event_type != "gitlab.pipeline" {
                return ResultHead::Own;
            }
            trains::result_head(self.client.as_ref(), repo, payload).await
        })
    }

    fn dequeued(&self, reason: &str) -> String {
        format!(
            "{reason}; look at its train pipeline and GitLab's note on it, then send it back (retry) with what to \
             fix, or put it on the train again in GitLab"
        )
    }

    fn review_key(&self, review: u64) -> String {
        if review & SUBMISSION != 0 {
            format!("gitlab:review:{}", review & !SUBMISSION)
        } else {
            note_key(review)
        }
    }

    fn comment_key(&self, comment: u64) -> String {
        note_key(comment)
    }

    fn place(&self, payload: &Value) -> String {
        let project = payload["project"]["path_with_namespace"]
            .as_str()
            .unwrap_or("GitLab");
        let iid = payload["merge_request"]["iid"]
            .as_u64()
            .or(payload["object_attributes"]["iid"].as_u64())
            .unwrap_or(0);
        format!("{project}!{iid}")
    }
}

/// A note's follow-up key, as intake keys one: a note reactions and intake both saw attaches once.
fn note_key(id: u64) -> String {
    format!("gitlab:note:{id}")
}

/// The log tails of the failed jobs, each cut to its share of [`DETAILS_BUDGET`] (its end kept: where a log
/// says what failed), or why one is missing.
pub fn details(tails: &[(&str, Result<String, String>)]) -> String {
    let share = DETAILS_BUDGET / tails.len().max(1);
    let parts: Vec<String> = tails
        .iter()
        .map(|(name, tail)| match tail {
            Ok(tail) => format!(
                "{name} log (its end):\n{}",
                last_chars(tail.trim_end(), share)
            ),
            Err(why) => format!("{name}: log unavailable: {why}"),
        })
        .collect();
    parts.join("\n")
}

/// The last `n` characters of `text`.
fn last_chars(text: &str, n: usize) -> &str {
    let count = text.chars().count();
    match text.char_indices().nth(count.saturating_sub(n)) {
        Some((start, _)) => &text[start..],
        None => text,
    }
}

/// Whether [`decide`] reads `event_type` at all (it decides no other): the reactions loop parses no other payload.
pub fn reads(event_type: &str) -> bool {
    matches!(
        event_type,
        "gitlab.pipeline" | "gitlab.build" | "gitlab.note" | "gitlab.merge_train.left"
    ) || event_type.starts_with("gitlab.merge_request.")
}

/// Decides what GitLab's `event_type` with `payload` asks of its task. `own`: whom `[intake.gitlab]` trusts and
/// pidevops's own account, whose notes never send a task back (they would loop).
pub fn decide(event_type: &str, payload: &Value, own: &GitlabIntake) -> Reaction {
    if !reads(event_type) {
        return Reaction::None;
    }
    match event_type {
        "gitlab.pipeline" => pipeline(payload),
        "gitlab.build" => job(payload),
        "gitlab.note" => note(payload, own),
        "gitlab.merge_train.left" => trains::left(payload),
        _ => match event_type.strip_prefix("gitlab.merge_request.") {
            Some(action) => merge_request(action, payload),
            None => Reaction::None,
        },
    }
}

/// A payload that does not read as GitLab's: nothing, and why in the log.
fn unread(reason: &str) -> Reaction {
    tracing::warn!(reason, "a GitLab event reactions cannot read: ignored");
    Reaction::None
}

/// A pipeline finished: failed sends the task back naming the jobs that failed it, success is a passing check.
fn pipeline(payload: &Value) -> Reaction {
    let reference = payload["object_attributes"]["ref"].as_str().unwrap_or("");
    let on = trains::MergeRequestRef::read(reference);
    let task = match on {
        Some(_) => trains::task_of_merge_request(payload),
        None => task_of(reference),
    };
    let Some(task) = task else {
        return Reaction::None;
    };
    if let Some(trains::MergeRequestRef::Train(_)) = on {
        return Reaction::Ignore {
            task,
            why: "a merge train's pipeline: the train merges the merge request, or drops it"
                .to_owned(),
        };
    }
    let event = match PipelineEvent::read(payload) {
        Ok(event) => event,
        Err(reason) => return unread(&reason),
    };
    let attributes = &event.object_attributes;
    match attributes.status.as_str() {
        "success" => Reaction::ChecksPassed {
            task,
            sha: attributes.sha.clone(),
            name: "pipeline".to_owned(),
        },
        "failed" => {
            let failed: Vec<&str> = event.failed_jobs().map(|j| j.name.as_str()).collect();
            let mut summary = match failed.as_slice() {
                [] => format!("pipeline #{} failed", attributes.id),
                jobs => format!("pipeline #{} failed: {}", attributes.id, jobs.join(", ")),
            };
            if let Some(url) = &attributes.url {
                summary.push_str(&format!(" ({url})"));
            }
            Reaction::ChecksFailed {
                task,
                sha: attributes.sha.clone(),
                summary: clip(&summary),
            }
        }
        other => Reaction::Ignore {
            task,
            why: format!("pipeline is {other}"),
        },
    }
}

/// A job finished: success is a passing check named after it; a failure is its pipeline's to report.
fn job(payload: &Value) -> Reaction {
    let Some(task) = payload["ref"].as_str().and_then(task_of) else {
        return Reaction::None;
    };
    let event = match JobEvent::read(payload) {
        Ok(event) => event,
        Err(reason) => return unread(&reason),
    };
    match event.build_status.as_str() {
        "success" => Reaction::ChecksPassed {
            task,
            sha: event.sha,
            name: event.build_name,
        },
        "failed" => Reaction::Ignore {
            task,
            why: format!(
                "job {} failed: its pipeline reports it, with its log",
                event.build_name
            ),
        },
        other => Reaction::Ignore {
            task,
            why: format!("job {} is {other}", event.build_name),
        },
    }
}

/// A merge request approved, unapproved, merged or closed.
fn merge_request(action: &str, payload: &Value) -> Reaction {
    let Some(task) = payload["object_attributes"]["source_branch"]
        .as_str()
        .and_then(task_of)
    else {
        return Reaction::None;
    };
    let event = match MergeRequestEvent::read(payload) {
        Ok(event) => event,
        Err(reason) => return unread(&reason),
    };
    let by = event.user.username;
    match action {
        "approved" => Reaction::Approved {
            task,
            by,
            // The commit the approver saw; an approval of older code must not count for newer.
            sha: event
                .object_attributes
                .last_commit
                .map(|c| c.id)
                .unwrap_or_default(),
        },
        "unapproved" => Reaction::ReviewDismissed { task, by },
        "update" => requested_changes(task, by, payload),
        "merge" => Reaction::Merged { task, by },
        "close" => Reaction::ClosedUnmerged { task, by },
        other => Reaction::Ignore {
            task,
            why: format!("a merge request's {other}"),
        },
    }
}

/// The top bit of a [`Reaction::Reviewed`]'s `review` marks a review submission (not a note): its follow-up key
/// is `gitlab:review:…`, never a note's.
const SUBMISSION: u64 = 1 << 63;

/// A review submitted with "Request changes": the hook (`update`) shows, in `changes.reviewers`, the acting
/// reviewer's state turned `requested_changes`. The task goes back once per submission (keyed by the reviewer and
/// the merge request's `updated_at`); its notes, sent as their own events, are its words. Any other update is not
/// reactions'.
fn requested_changes(task: TaskId, by: String, payload: &Value) -> Reaction {
    let reviewers = &payload["changes"]["reviewers"];
    let state_in = |side: &str, id: &Value| {
        reviewers[side]
            .as_array()
            .and_then(|all| all.iter().find(|r| &r["id"] == id))
            .and_then(|r| r["state"].as_str())
            .map(str::to_owned)
    };
    let acting = &payload["user"]["id"];
    let turned = state_in("current", acting).as_deref() == Some("requested_changes")
        && state_in("previous", acting).as_deref() != Some("requested_changes");
    if !turned || acting.as_u64().is_none() {
        return Reaction::Ignore {
            task,
            why: "a merge request's update".to_owned(),
        };
    }
    let at = payload["object_attributes"]["updated_at"]
        .as_str()
        .and_then(crate::providers::gitlab::models::parse_time)
        .map_or(0, |t| t.timestamp().unsigned_abs());
    // Reviewer and second: one submission, however often it is delivered.
    let submission =
        (acting.as_u64().unwrap_or(0) % 1_000_000_000) * 10_000_000_000 + at % 10_000_000_000;
    Reaction::Reviewed {
        task,
        review: SUBMISSION | submission,
        by,
        changes_requested: true,
        body: String::new(),
    }
}

/// A person's note on the task's merge request: a diff note is a line comment, any other a follow-up that sends
/// the task back; pidevops's own, GitLab's system notes, edits and notes addressed to pidevops (intake's) are not.
fn note(payload: &Value, own: &GitlabIntake) -> Reaction {
    if payload["object_attributes"]["noteable_type"].as_str() != Some("MergeRequest") {
        return Reaction::None;
    }
    let Some(task) = payload["merge_request"]["source_branch"]
        .as_str()
        .and_then(task_of)
    else {
        return Reaction::None;
    };
    let event = match NoteEvent::read(payload) {
        Ok(event) => event,
        Err(reason) => return unread(&reason),
    };
    let note = &event.object_attributes;
    let by = event.user.username;
    let why = if note.system {
        Some("GitLab's own note".to_owned())
    } else if own.is_bot(&by) {
        Some("a note by pidevops's own account".to_owned())
    } else if note.action.as_deref().is_some_and(|a| a != "create") {
        Some("an edited note is never taken again".to_owned())
    } else if addressed(&note.note, own.bot_username.as_deref()).is_some() {
        Some("a note addressed to pidevops: intake's".to_owned())
    } else {
        None
    };
    if let Some(why) = why {
        return Reaction::Ignore { task, why };
    }
    match note.position.as_ref().and_then(|p| Some((p.path()?, p))) {
        Some((path, position)) => Reaction::ReviewComment {
            task,
            comment: LineComment {
                id: note.id,
                review: None,
                by,
                path: path.to_owned(),
                lines: position.lines(),
                body: note.note.clone(),
                hunk: String::new(),
            },
        },
        None => Reaction::Reviewed {
            task,
            review: note.id,
            by,
            changes_requested: false,
            body: clip(&note.note),
        },
    }
}

/// Whether an event `decide` tied to a task may move it: from the task's project, and for a merge request (or a
/// note on one) the task's own, not a fork's, and a note or an approval by a trusted user. `Err` says why not.
/// CI results are held to the task's last pushed commit by the loop.
pub fn admit(
    event_type: &str,
    payload: &Value,
    expected: &Expected<'_>,
    own: &GitlabIntake,
) -> Result<(), String> {
    let project = payload["project"]["path_with_namespace"]
        .as_str()
        .unwrap_or("an unnamed project");
    if !project.eq_ignore_ascii_case(expected.repo.as_str()) {
        return Err(format!(
            "from {project}, not the task's repository {}",
            expected.repo
        ));
    }
    let project_id = payload["project"]["id"].as_u64();
    let merge_request = match event_type {
        "gitlab.note" => &payload["merge_request"],
        "gitlab.pipeline" => {
            // A merge request pipeline of a fork's branch runs in the fork's project or, asked for, in ours.
            not_a_fork(&payload["merge_request"], project_id)
                .map_err(|why| format!("a pipeline of {why}"))?;
            return merge_request_ref(payload, expected);
        }
        t if t.starts_with("gitlab.merge_request.") || t == "gitlab.merge_train.left" => {
            &payload["object_attributes"]
        }
        _ => return Ok(()),
    };
    let iid = merge_request["iid"].as_u64().unwrap_or(0);
    own_request(expected.pr, iid, "merge request !")?;
    not_a_fork(merge_request, project_id)?;
    let author = match event_type {
        "gitlab.note" => Some(&payload["object_attributes"]["author_id"]),
        "gitlab.merge_request.approved" | "gitlab.merge_request.update" => {
            Some(&payload["user"]["id"])
        }
        _ => None,
    };
    if let Some(author_id) = author {
        let user = payload["user"]["username"].as_str().unwrap_or("someone");
        if !own.trusts(user) {
            return Err(format!(
                "{user} is not in [intake.gitlab] trusted_users: only they move a task"
            ));
        }
        // The hook's `user` is who acted; a note names its author by id too, and both must agree.
        if author_id.as_u64().is_none() || *author_id != payload["user"]["id"] {
            return Err(format!(
                "the note's author (id {author_id}) is not {user}, whom the hook names"
            ));
        }
    }
    Ok(())
}

/// A pipeline of a merge request's ref (`refs/merge-requests/<iid>/…`) is the task's merge request's, and its
/// ref names the merge request its hook does; a branch's pipeline has nothing more to hold.
fn merge_request_ref(payload: &Value, expected: &Expected<'_>) -> Result<(), String> {
    let reference = payload["object_attributes"]["ref"].as_str().unwrap_or("");
    let Some(on) = trains::MergeRequestRef::read(reference) else {
        return Ok(());
    };
    let iid = payload["merge_request"]["iid"].as_u64().unwrap_or(0);
    if on.iid() != iid {
        return Err(format!(
            "a pipeline of {reference}, but its hook names merge request !{iid}"
        ));
    }
    own_request(expected.pr, iid, "merge request !")
}

/// A merge request's source and target are `project` (none, as on a pipeline of no merge request, is fine):
/// else it is a fork's.
fn not_a_fork(merge_request: &Value, project: Option<u64>) -> Result<(), String> {
    if merge_request.is_null() {
        return Ok(());
    }
    let source = merge_request["source_project_id"].as_u64();
    let target = merge_request["target_project_id"].as_u64();
    if source.is_none() || source != target || target != project {
        return Err(format!(
            "merge request !{} comes from project {}, a fork",
            merge_request["iid"].as_u64().unwrap_or(0),
            source.map_or("unknown".to_owned(), |s| s.to_string())
        ));
    }
    Ok(())
}

mod trains;

#[cfg(test)]
mod tests;
