//! The `gitlab_poller` loop: for each GitLab project (`[repos]` with `provider = "gitlab"`), asks GitLab for the
//! merge requests changed since the last poll (less an overlap), oldest change first, page by page (keyset
//! pagination, at most [`MAX_PAGES`] a poll), and appends what a missed webhook would have said about a task's
//! merge request merged or closed, shaped like that webhook (`gitlab.merge_request.merge` /
//! `gitlab.merge_request.close`), so reactions handle it as they handle a delivery.
//!
//! What GitLab lists is a stranger's word, so only a merge request pidevops recorded is appended: its source
//! branch is `pidevops/<task>`, it comes from the project itself (not a fork's branch of the same name), and that
//! task's `gitlab_mr` link names this project and iid. Appended once: the dedup key
//! `poll:merge_request:<project>!<iid>:<state>`; and never when the log already has that merge request's merge
//! or close (its webhook came, or an earlier poll's: `EventStore::types_about`).
//!
//! And for every task made from a GitLab issue not yet in review, it reads the issue: one closed, or without the
//! intake label, is appended as `gitlab.issue.close` / `gitlab.issue.update` (the label taken off) unless the task
//! already holds that version (`ticket_version`: the webhook came), so intake withdraws the task as on the webhook.
//!
//! And for each project with a task's merge request in review whose base pushes refresh, it reads the base
//! branch's head and each of those merge requests' `detailed_merge_status` (`bases.rs`): a base push whose Push
//! Hook was lost is appended as a `gitlab.push`, a merge request GitLab finds `need_rebase` or in `conflict` as
//! `refresh.due`, for the `refresh` loop.
//!
//! And for each task whose merge request pidevops put on a merge train, its car (`trains.rs`): one gone while the
//! merge request is still open is appended as `gitlab.merge_train.left`, which flags the task (GitLab sends no
//! webhook when it takes a merge request off its train).
//!
//! The cursor, per project, is the checkpoint `gitlab_poller:<project>`: the newest `updated_at` seen (in
//! milliseconds), or, after a poll that read every page, the poll's start less [`SKEW`] when that is newer (so a
//! quiet project is not asked about the same day again and again). It survives restarts; a first poll looks
//! back [`FIRST_LOOKBACK`].

mod bases;
mod trains;

use std::sync::Arc;

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::board::Board;
use crate::config::dispatch::DispatchConfig;
use crate::domain::{EventType, NewEvent, Source};
use crate::effects::CallError;
use crate::eventlog::EventLog;
use crate::providers::gitlab::client::{GitlabClient, Issue, MergeRequest};
use crate::tasks::{RepoName, TaskId, GITLAB_ISSUE, GITLAB_MR};

pub const GITLAB_POLLER: &str = "gitlab_poller";
/// Changes this close before the cursor are asked for again (GitLab's indexing and clocks lag).
const OVERLAP: chrono::Duration = chrono::Duration::minutes(2);
/// How far behind our clock GitLab's may be: a complete poll's cursor is at most its start less this.
const SKEW: chrono::Duration = chrono::Duration::minutes(2);
/// How far back a project's very first poll looks.
const FIRST_LOOKBACK: chrono::Duration = chrono::Duration::hours(24);
/// A project's poll reads at most this many pages (a runaway cursor must not hold the loop); the next poll goes
/// on from the newest change read.
pub const MAX_PAGES: usize = 20;

/// What one poll did, for `/health`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct GitlabPollProgress {
    pub projects: u64,
    pub merge_requests: u64,
    /// Facts the log did not have.
    pub appended: u64,
    /// Merge requests merged or closed whose news the log already had.
    pub known: u64,
    /// Projects whose poll stopped at [`MAX_PAGES`].
    pub capped: u64,
    /// Issues of tasks not yet in review that were read.
    pub issues: u64,
    /// Base branches read (projects with a merge request in review that refresh).
    pub bases: u64,
    /// Merge requests GitLab finds `need_rebase` or in `conflict`, appended as `refresh.due`.
    pub due: u64,
    /// Merge train cars read (merge requests pidevops put on a train).
    pub cars: u64,
    /// Merge requests found off their train unmerged, appended as `gitlab.merge_train.left`.
    pub left_trains: u64,
}

#[derive(Clone, Debug)]
pub struct GitlabPoller {
    client: GitlabClient,
    log: EventLog,
    board: Board,
    projects: Vec<RepoName>,
    /// The intake label (`[intake.gitlab] label`): an issue without it no longer asks for its task.
    label: String,
    /// Where each project comes from and its base (`landing::base_push::refreshed_base`, with the board's rules).
    sources: Arc<DispatchConfig>,
    /// Where the next tick's car reads start (`trains.rs`: at most `MAX_CARS` a tick, round robin).
    train_cursor: Arc<std::sync::atomic::AtomicUsize>,
}

impl GitlabPoller {
    pub fn new(
        client: GitlabClient,
        log: EventLog,
        board: Board,
        projects: Vec<RepoName>,
        label: String,
        sources: DispatchConfig,
    ) -> Self {
        Self {
            client,
            log,
            board,
            projects,
            label,
            sources: Arc::new(sources),
            train_cursor: Arc::default(),
        }
    }

    /// The checkpoint holding `project`'s cursor.
    pub fn cursor_name(project: &RepoName) -> String {
        format!("{GITLAB_POLLER}:{project}")
    }

    pub async fn tick(&self) -> anyhow::Result<GitlabPollProgress> {
        let mut progress = GitlabPollProgress::default();
        for project in &self.projects {
            progress.projects += 1;
            self.poll(project, &mut progress)
                .await
                .with_context(|| format!("polling {project}"))?;
        }
        self.bases(&mut progress).await?;
        self.trains(&mut progress).await?;
        self.issues(&mut progress).await?;
        metrics::counter!("pidevops_poller_appended_total", "poller" => GITLAB_POLLER)
            .increment(progress.appended);
        Ok(progress)
    }

    async fn poll(
        &self,
        project: &RepoName,
        progress: &mut GitlabPollProgress,
    ) -> anyhow::Result<()> {
        let store = self.log.store();
        let started = Utc::now();
        let name = Self::cursor_name(project);
        let cursor = store
            .checkpoint(&name)
            .await
            .context("reading the cursor")?;
        let since = match DateTime::<Utc>::from_timestamp_millis(cursor).filter(|_| cursor > 0) {
            Some(cursor) => cursor - OVERLAP,
            None => started - FIRST_LOOKBACK,
        };
        let mut newest: Option<DateTime<Utc>> = None;
        let mut next: Option<String> = None;
        let mut complete = false;
        // The project the first page (asked by its path) is about: a later page under another id is not it.
        let mut target: Option<u64> = None;
        for _ in 0..MAX_PAGES {
            let page = self
                .client
                .merge_requests(project, since, next.as_deref())
                .await
                .map_err(|e| anyhow::anyhow!(e))?;
            for mr in &page.merge_requests {
                if *target.get_or_insert(mr.project_id) != mr.project_id {
                    tracing::warn!(%project, iid = mr.iid, "a page of another project's merge requests: skipped");
                    continue;
                }
                progress.merge_requests += 1;
                newest = newest.max(Some(mr.updated_at));
                match self.missed(project, mr).await? {
                    Some(true) => progress.appended += 1,
                    Some(false) => progress.known += 1,
                    None => {}
                }
            }
            match page.next {
                Some(url) => next = Some(url),
                None => {
                    complete = true;
                    break;
                }
            }
        }
        if !complete {
            progress.capped += 1;
            tracing::warn!(%project, pages = MAX_PAGES, "GitLab had more pages of merge requests; the next poll goes on from the newest read");
        }
        let moved = if complete {
            newest.max(Some(started - SKEW))
        } else {
            newest
        };
        if let Some(moved) = moved {
            store
                .advance_checkpoint(&name, moved.timestamp_millis())
                .await
                .context("saving the cursor")?;
        }
        Ok(())
    }

    /// The issues of tasks not yet in review: one closed, or without the intake label, whose webhook never came
    /// (the task holds an older version) is appended as `gitlab.issue.close` / `gitlab.issue.update` (the label
    /// taken off) in the hook's shape, so intake withdraws the task as it would on the webhook.
    async fn issues(&self, progress: &mut GitlabPollProgress) -> anyhow::Result<()> {
        for row in crate::pollers::withdrawable_tasks(self.log.store()).await? {
            let Some(link) = row.links.get(GITLAB_ISSUE) else {
                continue;
            };
            progress.issues += 1;
            let issue = match self.client.issue(&link.project, link.iid.get()).await {
                Ok(issue) => issue,
                Err(CallError::Permanent { message }) => {
                    tracing::info!(task = %row.id, issue = %link, %message, "the poller cannot read the task's issue");
                    continue;
                }
                Err(error) => {
                    return Err(anyhow::anyhow!(error))
                        .with_context(|| format!("{} ({link})", row.id))
                }
            };
            let held = crate::pollers::held_version(&row);
            let Some((event_type, body)) =
                missed_withdrawal(&link.project, &issue, held, &self.label)
            else {
                continue;
            };
            let action = body["object_attributes"]["action"]
                .as_str()
                .unwrap_or("close");
            let updated = issue
                .updated_at
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            let mut event = NewEvent::new(
                Source::Gitlab,
                EventType::from_stored(event_type.to_owned()),
                format!("poll:issue:{}:{action}:{updated}", link),
                "application/json",
                bytes::Bytes::from(serde_json::to_vec(&body)?),
            );
            event.occurred_at = issue.updated_at;
            event.subject.action = Some(action.to_owned());
            event.subject.repository = Some(link.project.as_str().to_owned());
            event.subject.number = i64::try_from(issue.iid).ok();
            event
                .meta
                .insert("poller".to_owned(), Value::from(GITLAB_POLLER));
            let appended = self
                .log
                .append(event)
                .await
                .with_context(|| format!("appending {link}"))?;
            if !appended.duplicate {
                progress.appended += 1;
            }
        }
        Ok(())
    }

    /// Appends the webhook `mr` would have made if it is a task's merge request merged or closed and the log
    /// lacks that news: `Some(true)` appended, `Some(false)` the log had it, `None` not a task's.
    async fn missed(&self, project: &RepoName, mr: &MergeRequest) -> anyhow::Result<Option<bool>> {
        let Some(action) = terminal_action(&mr.state) else {
            return Ok(None);
        };
        if !self.recorded(project, mr).await? {
            return Ok(None);
        }
        let event_type = format!("gitlab.merge_request.{action}");
        let iid = i64::try_from(mr.iid).context("a merge request's iid past i64")?;
        let told = self
            .log
            .store()
            .types_about(Source::Gitlab, project.as_str(), iid)
            .await
            .context("reading what the log has of the merge request")?;
        if told.contains(&event_type) {
            return Ok(Some(false));
        }
        let mut event = NewEvent::new(
            Source::Gitlab,
            EventType::from_stored(event_type),
            format!("poll:merge_request:{project}!{}:{}", mr.iid, mr.state),
            "application/json",
            bytes::Bytes::from(serde_json::to_vec(&webhook_shaped(project, mr, action))?),
        );
        event.occurred_at = mr.updated_at;
        event.subject.action = Some(action.to_owned());
        event.subject.repository = Some(project.as_str().to_owned());
        event.subject.number = Some(iid);
        event
            .meta
            .insert("poller".to_owned(), Value::from(GITLAB_POLLER));
        let appended = self
            .log
            .append(event)
            .await
            .with_context(|| format!("appending {project}!{}", mr.iid))?;
        Ok(Some(!appended.duplicate))
    }

    /// Whether `mr` is the merge request pidevops recorded for the task its branch names: from `project` itself
    /// (a fork's `pidevops/T-1` is a stranger's), and that task's `gitlab_mr` link is this project's iid.
    async fn recorded(&self, project: &RepoName, mr: &MergeRequest) -> anyhow::Result<bool> {
        let Some(task) = task_of_branch(&mr.source_branch) else {
            return Ok(false);
        };
        if mr.source_project_id != mr.target_project_id || mr.project_id != mr.target_project_id {
            tracing::info!(%project, iid = mr.iid, "a merge request from another project's pidevops branch: not a task's");
            return Ok(false);
        }
        let Some(loaded) = self.board.load(task).await? else {
            return Ok(false);
        };
        Ok(loaded.task.links().get(GITLAB_MR).is_some_and(|link| {
            link.iid.get() == mr.iid && link.project.as_str().eq_ignore_ascii_case(project.as_str())
        }))
    }
}

/// The webhook action of a merge request in `state`: `merge` when merged, `close` when closed; else none.
fn terminal_action(state: &str) -> Option<&'static str> {
    match state {
        "merged" => Some("merge"),
        "closed" => Some("close"),
        _ => None,
    }
}

/// The task a `pidevops/<task>` branch is for.
fn task_of_branch(branch: &str) -> Option<TaskId> {
    branch.strip_prefix("pidevops/")?.parse().ok()
}

/// `mr` as GitLab's merge request hook has it (`object_kind`, `user`, `project`, `object_attributes` with the
/// fields reactions read), the user being whoever merged or closed it (else its author).
pub fn webhook_shaped(project: &RepoName, mr: &MergeRequest, action: &str) -> Value {
    let by = match action {
        "merge" => mr.merged_by.as_ref(),
        _ => mr.closed_by.as_ref(),
    }
    .unwrap_or(&mr.author);
    json!({
        "object_kind": "merge_request",
        "event_type": "merge_request",
        "user": { "id": by.id, "username": by.username },
        "project": { "id": mr.project_id, "path_with_namespace": project.as_str() },
        "object_attributes": {
            "id": mr.id,
            "iid": mr.iid,
            "title": mr.title,
            "source_branch": mr.source_branch,
            "target_branch": mr.target_branch,
            "source_project_id": mr.source_project_id,
            "target_project_id": mr.target_project_id,
            "state": mr.state,
            "action": action,
            "updated_at": mr.updated_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "merge_commit_sha": mr.merge_commit_sha,
            // Reactions read `last_commit.id` as a string: no head known, no `last_commit`.
            "last_commit": mr.sha.as_ref().map(|sha| json!({ "id": sha })),
            "url": mr.web_url,
        },
    })
}

/// The withdrawal `issue` shows, as the hook GitLab would have sent (its type and body), unless its task already
/// holds that version (`held`: the webhook came) or it still asks for the work (open, with `label`).
pub fn missed_withdrawal(
    project: &RepoName,
    issue: &Issue,
    held: Option<DateTime<Utc>>,
    label: &str,
) -> Option<(&'static str, Value)> {
    if held.is_some_and(|held| held >= issue.updated_at) {
        return None;
    }
    let labelled = issue.labels.iter().any(|l| l == label);
    let titled = |names: &mut dyn Iterator<Item = &String>| -> Vec<Value> {
        names.map(|name| json!({ "title": name })).collect()
    };
    let labels = titled(&mut issue.labels.iter());
    let (event_type, action, by, changes) = match (issue.state.as_str(), labelled) {
        ("closed", _) => (
            "gitlab.issue.close",
            "close",
            issue.closed_by.as_ref().unwrap_or(&issue.author),
            Value::Null,
        ),
        (_, false) => {
            let mut previous = issue.labels.clone();
            previous.push(label.to_owned());
            (
                "gitlab.issue.update",
                "update",
                &issue.author,
                json!({ "labels": { "previous": titled(&mut previous.iter()), "current": labels } }),
            )
        }
        _ => return None,
    };
    let mut body = json!({
        "object_kind": "issue",
        "event_type": "issue",
        "user": { "id": by.id, "username": by.username },
        "project": { "id": issue.project_id, "path_with_namespace": project.as_str() },
        "object_attributes": {
            "id": issue.id,
            "iid": issue.iid,
            "title": issue.title,
            "description": issue.description,
            "author_id": issue.author.id,
            "state": issue.state,
            "action": action,
            "updated_at": issue.updated_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "confidential": issue.confidential,
            "labels": labels,
        },
    });
    if !changes.is_null() {
        body["changes"] = changes;
    }
    Some((event_type, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::gitlab::models::MergeRequestEvent;

    fn mr(state: &str) -> MergeRequest {
        serde_json::from_value(json!({
            "id": 900, "iid": 7, "project_id": 42, "source_project_id": 42, "target_project_id": 42,
            "source_branch": "pidevops/T-3", "target_branch": "main", "state": state,
            "updated_at": "2026-12-05T10:00:00.123Z", "sha": "abc123", "merge_commit_sha": null,
            "title": "T-3: fix it", "web_url": "https://gitlab.example.com/acme/api/-/merge_requests/7",
            "author": { "id": 99, "username": "pidevops-bot" },
            "merged_by": { "id": 5, "username": "alice" },
            "closed_by": null,
        }))
        .unwrap()
    }

    #[test]
    fn a_merged_or_closed_merge_request_reads_as_its_webhook() {
        let project: RepoName = "acme/platform/api".parse().unwrap();
        let merged = webhook_shaped(&project, &mr("merged"), "merge");
        let event = <MergeRequestEvent as serde::Deserialize>::deserialize(&merged).unwrap();
        assert_eq!(event.project.path_with_namespace, "acme/platform/api");
        assert_eq!(event.project.id, 42);
        assert_eq!(event.user.username, "alice", "who merged it");
        let a = &event.object_attributes;
        assert_eq!((a.iid, a.state.as_str()), (7, "merged"));
        assert_eq!(a.action.as_deref(), Some("merge"));
        assert_eq!(a.source_branch, "pidevops/T-3");
        assert_eq!((a.source_project_id, a.target_project_id), (42, 42));
        assert_eq!(merged["object_attributes"]["last_commit"]["id"], "abc123");
        let mut headless = mr("merged");
        headless.sha = None;
        let without = webhook_shaped(&project, &headless, "merge");
        assert!(
            without["object_attributes"]["last_commit"].is_null(),
            "{without}"
        );
        let closed = webhook_shaped(&project, &mr("closed"), "close");
        assert_eq!(
            closed["user"]["username"], "pidevops-bot",
            "no closer: its author"
        );
        assert_eq!(terminal_action("merged"), Some("merge"));
        assert_eq!(terminal_action("closed"), Some("close"));
        assert_eq!(terminal_action("opened"), None);
        assert_eq!(terminal_action("locked"), None);
        assert_eq!(task_of_branch("pidevops/T-3"), Some("T-3".parse().unwrap()));
        assert_eq!(task_of_branch("feature/T-3"), None);
        assert_eq!(task_of_branch("pidevops/T-3/x"), None);
    }

    fn issue(state: &str, labels: &[&str]) -> Issue {
        serde_json::from_value(json!({
            "id": 301, "iid": 23, "project_id": 42, "title": "Paginate", "description": null,
            "state": state, "labels": labels, "updated_at": "2026-12-05T10:40:02Z", "confidential": false,
            "author": { "id": 51, "username": "alice" }, "closed_by": { "id": 7, "username": "bob" },
        }))
        .unwrap()
    }

    #[test]
    fn a_closed_or_unlabeled_issue_is_a_missed_withdrawal_unless_its_task_holds_that_version() {
        use crate::providers::gitlab::models::IssueEvent;
        let project: RepoName = "acme/platform/api".parse().unwrap();
        let at = |t: &str| Some(t.parse::<DateTime<Utc>>().unwrap());
        let older = at("2026-12-05T10:00:00Z");
        let (kind, closed) =
            missed_withdrawal(&project, &issue("closed", &["pidevops"]), older, "pidevops")
                .unwrap();
        assert_eq!(kind, "gitlab.issue.close");
        let event = IssueEvent::read(&closed).unwrap();
        assert_eq!(event.user.username, "bob", "who closed it");
        assert_eq!(event.object_attributes.iid, 23);
        assert_eq!(event.project.path_with_namespace, "acme/platform/api");
        let (kind, unlabeled) =
            missed_withdrawal(&project, &issue("opened", &["bug"]), None, "pidevops").unwrap();
        assert_eq!(kind, "gitlab.issue.update");
        let event = IssueEvent::read(&unlabeled).unwrap();
        let change = event.changes.unwrap().labels.unwrap();
        assert!(change.previous.iter().any(|l| l.title == "pidevops"));
        assert!(!change.current.iter().any(|l| l.title == "pidevops"));
        // Still asking: open with the label.
        assert!(
            missed_withdrawal(&project, &issue("opened", &["pidevops"]), None, "pidevops")
                .is_none()
        );
        // The task holds this version (its webhook came) or a newer one.
        for held in ["2026-12-05T10:40:02Z", "2026-12-05T10:41:00Z"] {
            assert!(
                missed_withdrawal(&project, &issue("closed", &[]), at(held), "pidevops").is_none(),
                "{held}"
            );
        }
    }
}
