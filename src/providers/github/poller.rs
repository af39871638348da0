//! The `github_poller` loop: for every task in review with a pull request, asks GitHub how the pull request and
//! its head commit's checks stand, and appends what a missed webhook would have said, shaped like the webhook,
//! so reactions handle it as they handle a delivery: a merged or closed pull request
//! (`github.pull_request.closed`) and a failed check suite (`github.check_suite.completed`). And for every task
//! made from a GitHub issue that is not yet in review (triage, todo, in progress), asks how its issue stands: one
//! closed, or without the intake label, is appended as `github.issues.closed` / `github.issues.unlabeled`, so
//! intake withdraws the task (a running agent is stopped) as it would on the webhook.
//!
//! And for every repository with a task's pull request in review whose base pushes refresh (`landing::refresh`), reads the base
//! branch's head: one the refresh loop has not handled (its webhook lost, or not yet come) is appended as a
//! `github.push` of that head (`poll:push:<repo>:<base>:<sha>`), which the refresh loop handles as the webhook's;
//! it records each head it handled, so the webhook and the poller never refresh for the same head twice.
//!
//! A pull request GitHub finds `behind` its base or `dirty` (its `mergeable_state`, read, not guessed) is appended
//! as `refresh.due` for its task (`refresh-due:<task>:<head>:<state>`), unless its base's push was appended in the
//! same poll (that refreshes every task of the repository); on a repository with `refresh = "off"` too, where it
//! only marks the board (the refresh loop never refreshes it). Once the board marks it, GitHub finding it `clean`,
//! `unstable` or `has_hooks` (not `blocked`, which may hide `behind`) is appended as `refresh.current`
//! (`refresh-current:<task>:<head>:<base sha>`): someone brought it up to date, and the mark goes.
//!
//! Each appended fact has a dedup key naming it (`poll:pull_request:<repo>#<n>:closed`,
//! `poll:check_suite:<id>:<conclusion>`, `poll:issues:<repo>#<n>:closed:<updated_at>`), so polls append it once.
//! When the webhook did arrive, the task has usually left review before the poller looks; if both land, reactions
//! treat the second report of the same failure as no news, and a merge of a done task is refused by the task
//! itself. An issue version the task already holds (its `ticket_version`: intake notes every version it sees) is
//! never appended: that webhook came. An issue GitHub no longer answers for (deleted, transferred) is left to its
//! webhook.

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::Context;
use octocrab::models::issues::Issue;
use octocrab::models::pulls::{MergeableState, PullRequest};
use octocrab::models::IssueState;
use serde_json::{json, Value};

use crate::board::BoardConfig;
use crate::config::dispatch::DispatchConfig;
use crate::domain::{EventType, NewEvent, Source};
use crate::effects::CallError;
use crate::eventlog::EventLog;
use crate::landing::refresh;
use crate::projectors::tasks::{self as task_rows, TaskFilter};
use crate::providers::github::{Answer, GithubClient};
use crate::tasks::{Column, CommitSha, RepoName, TaskId, GITHUB_ISSUE, GITHUB_PR};

pub const GITHUB_POLLER: &str = "github_poller";
/// Conclusions reactions act on (the same as theirs).
const FAILED: [&str; 3] = ["failure", "timed_out", "startup_failure"];

/// What one poll did, for `/health`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct GithubPollProgress {
    pub pull_requests: u64,
    /// Issues of tasks not yet in review that were read.
    pub issues: u64,
    /// Facts the log did not have.
    pub appended: u64,
    /// Base branches read (repositories with a task in review that refresh).
    pub bases: u64,
}

#[derive(Clone, Debug)]
pub struct GithubPoller {
    client: GithubClient,
    log: EventLog,
    /// The intake label (`[intake.github] label`): an issue without it no longer asks for its task.
    label: String,
    /// Which repositories' base pushes refresh, and their bases (`landing::refresh::refreshed_base`).
    board: Arc<BoardConfig>,
    sources: Arc<DispatchConfig>,
}

impl GithubPoller {
    pub fn new(
        client: GithubClient,
        log: EventLog,
        label: String,
        board: BoardConfig,
        sources: DispatchConfig,
    ) -> Self {
        Self {
            client,
            log,
            label,
            board: Arc::new(board),
            sources: Arc::new(sources),
        }
    }

    pub async fn tick(&self) -> anyhow::Result<GithubPollProgress> {
        let rows = task_rows::list(
            self.log.store(),
            &TaskFilter {
                column: Some(Column::InReview),
                limit: Some(500),
                ..TaskFilter::default()
            },
        )
        .await
        .context("listing the tasks in review")?;
        let mut progress = GithubPollProgress::default();
        let pushed = self.bases(&rows, &mut progress).await?;
        for row in rows {
            let Some(pr) = row.links.get(GITHUB_PR) else {
                continue;
            };
            progress.pull_requests += 1;
            let number = pr.number.get();
            let pull = self
                .client
                .pull(&pr.repo, number)
                .await
                .map_err(|e| anyhow::anyhow!(e))
                .with_context(|| format!("{} ({pr})", row.id))?;
            let repository = json!({ "full_name": pr.repo.as_str() });
            // Decisions read octocrab's model; the bodies appended carry GitHub's JSON as it came (the log records
            // what GitHub said, and reactions read it as they read a delivery).
            if pull.model.state == Some(IssueState::Closed) {
                let by = pull
                    .model
                    .merged_by
                    .as_ref()
                    .map_or("someone", |by| by.login.as_str());
                // As GitHub's webhook has it: the number beside the pull request (octocrab's model needs it).
                let body = json!({
                    "action": "closed",
                    "number": number,
                    "pull_request": pull.json,
                    "repository": repository,
                    "sender": { "login": by },
                });
                if self
                    .append(
                        "github.pull_request.closed",
                        format!("poll:pull_request:{pr}:closed"),
                        &body,
                        pr.repo.as_str(),
                        Some(number),
                    )
                    .await?
                {
                    progress.appended += 1;
                }
                continue;
            }
            if !pushed.contains(&pr.repo) && !row.needs_human {
                let marked = row.is_behind();
                self.behind(
                    row.id,
                    pr.repo.clone(),
                    number,
                    &pull.model,
                    marked,
                    &mut progress,
                )
                .await?;
            }
            let suites = self
                .client
                .check_suites(&pr.repo, &pull.model.head.sha)
                .await
                .map_err(|e| anyhow::anyhow!(e))
                .with_context(|| format!("{} ({pr}) checks", row.id))?;
            for suite in suites {
                let conclusion = suite.model.conclusion.as_deref().unwrap_or_default();
                if suite.model.status.as_deref() != Some("completed")
                    || !FAILED.contains(&conclusion)
                {
                    continue;
                }
                let id = suite.model.id;
                // octocrab keeps a suite's `app` private: its slug is read from the JSON.
                let sender = suite.json["app"]["slug"].as_str().unwrap_or("github");
                let body = json!({
                    "action": "completed",
                    "check_suite": suite.json,
                    "repository": repository,
                    "sender": { "login": sender },
                });
                if self
                    .append(
                        "github.check_suite.completed",
                        format!("poll:check_suite:{id}:{conclusion}"),
                        &body,
                        pr.repo.as_str(),
                        Some(number),
                    )
                    .await?
                {
                    progress.appended += 1;
                }
            }
        }
        self.issues(&mut progress).await?;
        metrics::counter!("pidevops_poller_appended_total", "poller" => GITHUB_POLLER)
            .increment(progress.appended);
        Ok(progress)
    }

    /// The issues of tasks not yet in review: a closed or unlabeled one whose webhook never came is appended.
    async fn issues(&self, progress: &mut GithubPollProgress) -> anyhow::Result<()> {
        for row in crate::pollers::withdrawable_tasks(self.log.store()).await? {
            let Some(issue_ref) = row.links.get(GITHUB_ISSUE) else {
                continue;
            };
            progress.issues += 1;
            let number = issue_ref.number.get();
            let issue = match self.client.issue(&issue_ref.repo, number).await {
                Ok(issue) => issue,
                Err(CallError::Permanent { message }) => {
                    tracing::info!(task = %row.id, issue = %issue_ref, %message, "the poller cannot read the task's issue");
                    continue;
                }
                Err(error) => {
                    return Err(anyhow::anyhow!(error))
                        .with_context(|| format!("{} ({issue_ref})", row.id))
                }
            };
            let held = crate::pollers::held_version(&row);
            let Some(missed) =
                missed_withdrawal(&issue, held, issue_ref.repo.as_str(), &self.label)
            else {
                continue;
            };
            if self
                .append(
                    missed.event_type,
                    missed.dedup_key,
                    &missed.body,
                    issue_ref.repo.as_str(),
                    Some(number),
                )
                .await?
            {
                progress.appended += 1;
            }
        }
        Ok(())
    }

    /// A pull request GitHub finds `behind` its base or `dirty` (read, not guessed): `refresh.due` for its task,
    /// once per head and state. On a repository whose `refresh` is `"off"` too: the refresh loop leaves it, and the
    /// board marks it for a person. One the board marks (`marked`) that GitHub finds neither any more:
    /// `refresh.current`, and the mark goes.
    async fn behind(
        &self,
        task: TaskId,
        repo: RepoName,
        number: u64,
        pull: &PullRequest,
        marked: bool,
        progress: &mut GithubPollProgress,
    ) -> anyhow::Result<()> {
        let state = match pull.mergeable_state {
            Some(MergeableState::Behind) => "behind",
            Some(MergeableState::Dirty) => "dirty",
            // Up to date with its base and mergeable, whatever its checks say. Not `blocked` (a missing review may
            // hide `behind`), `unknown` (not computed yet) or a draft: no word either way.
            Some(MergeableState::Clean | MergeableState::Unstable | MergeableState::HasHooks)
                if marked =>
            {
                let current = refresh::Current {
                    task,
                    head: pull.head.sha.clone(),
                    base: pull.base.sha.clone(),
                };
                if current.record(&self.log, Some(GITHUB_POLLER)).await? {
                    progress.appended += 1;
                }
                return Ok(());
            }
            _ => return Ok(()),
        };
        let due = refresh::Due {
            task,
            repo,
            number,
            head: pull.head.sha.clone(),
            state: state.to_owned(),
        };
        let key = due.key();
        let appended = self
            .log
            .append(due.event(GITHUB_POLLER)?)
            .await
            .with_context(|| format!("appending {key}"))?;
        if !appended.duplicate {
            progress.appended += 1;
        }
        Ok(())
    }

    /// The base branch of each repository with a pull request in review that refreshes: a head the refresh loop has not
    /// handled is appended as the push its webhook would have been. Returns the repositories whose push it
    /// appended (their tasks are all refreshed: no pull request of theirs is due on its own).
    async fn bases(
        &self,
        rows: &[task_rows::TaskRow],
        progress: &mut GithubPollProgress,
    ) -> anyhow::Result<BTreeSet<RepoName>> {
        let mut pushed = BTreeSet::new();
        // The repositories of pidevops's pull requests in review: what they stand on.
        let repos: BTreeSet<RepoName> = rows
            .iter()
            .filter_map(|row| Some(row.links.get(GITHUB_PR)?.repo))
            .collect();
        for repo in &repos {
            let Some(base) = refresh::refreshed_base(&self.board, &self.sources, repo) else {
                continue;
            };
            progress.bases += 1;
            let head = match self.client.branch_head(repo, &base).await {
                Ok(Some(head)) => head,
                Ok(None) => continue,
                Err(CallError::Permanent { message }) => {
                    tracing::info!(%repo, %base, %message, "the poller cannot read the base branch");
                    continue;
                }
                Err(error) => {
                    return Err(anyhow::anyhow!(error))
                        .with_context(|| format!("{repo}'s base {base}"))
                }
            };
            if CommitSha::new(&head).is_err() {
                continue;
            }
            let handled = refresh::base_key(repo, &base, &head);
            if self
                .log
                .store()
                .find_by_key(Source::Pidevops, &handled)
                .await
                .with_context(|| format!("reading {handled}"))?
                .is_some()
            {
                continue;
            }
            // As GitHub's webhook has it (the parts the refresh loop reads, and who: GitHub itself).
            let body = json!({
                "ref": format!("refs/heads/{base}"),
                "after": head,
                "created": false,
                "deleted": false,
                "forced": false,
                "repository": { "full_name": repo.as_str() },
                "sender": { "login": "github" },
            });
            let key = format!(
                "poll:push:{}:{base}:{}",
                repo.as_str(),
                head.to_ascii_lowercase()
            );
            if self
                .append("github.push", key, &body, repo.as_str(), None)
                .await?
            {
                progress.appended += 1;
                pushed.insert(repo.clone());
            }
        }
        Ok(pushed)
    }

    async fn append(
        &self,
        event_type: &str,
        dedup_key: String,
        body: &Value,
        repo: &str,
        number: Option<u64>,
    ) -> anyhow::Result<bool> {
        let mut event = NewEvent::new(
            Source::Github,
            EventType::from_stored(event_type.to_owned()),
            dedup_key.clone(),
            "application/json",
            bytes::Bytes::from(serde_json::to_vec(body)?),
        );
        event.subject.action = body["action"].as_str().map(str::to_owned);
        event.subject.repository = Some(repo.to_owned());
        event.subject.number = number.and_then(|n| i64::try_from(n).ok());
        event
            .meta
            .insert("poller".to_owned(), Value::from(GITHUB_POLLER));
        let appended = self
            .log
            .append(event)
            .await
            .with_context(|| format!("appending {dedup_key}"))?;
        Ok(!appended.duplicate)
    }
}

/// What a missed webhook about an issue would have said: its type, its dedup key and its body.
#[derive(Clone, Debug, PartialEq)]
pub struct MissedIssue {
    pub event_type: &'static str,
    pub dedup_key: String,
    pub body: Value,
}

/// The withdrawal `issue` shows, unless its task already holds that version (`held`: the webhook came) or it still
/// asks for the work (open, with the intake `label`). Decided on octocrab's model; the body carries GitHub's JSON.
pub fn missed_withdrawal(
    issue: &Answer<Issue>,
    held: Option<chrono::DateTime<chrono::Utc>>,
    repo: &str,
    label: &str,
) -> Option<MissedIssue> {
    let version = issue.model.updated_at;
    if held.is_some_and(|held| held >= version) {
        return None;
    }
    // GitHub's own form of the time (`2026-11-29T10:05:00Z`), as the keys have always had it.
    let updated = version.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    let number = issue.model.number;
    let repository = json!({ "full_name": repo });
    if issue.model.state == IssueState::Closed {
        let by = issue
            .model
            .closed_by
            .as_ref()
            .map_or("github", |by| by.login.as_str());
        return Some(MissedIssue {
            event_type: "github.issues.closed",
            dedup_key: format!("poll:issues:{repo}#{number}:closed:{updated}"),
            body: json!({ "action": "closed", "issue": issue.json, "repository": repository, "sender": { "login": by } }),
        });
    }
    let labelled = issue.model.labels.iter().any(|l| l.name == label);
    (!labelled).then(|| MissedIssue {
        event_type: "github.issues.unlabeled",
        dedup_key: format!("poll:issues:{repo}#{number}:unlabeled:{updated}"),
        body: json!({
            "action": "unlabeled", "issue": issue.json, "label": { "name": label },
            "repository": repository, "sender": { "login": "github" },
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GitHub's issue (the `issues.labeled` fixture's) in this state, with these labels, at this version.
    fn issue(state: &str, labels: &[&str], updated_at: &str) -> Answer<Issue> {
        let fixture: Value = serde_json::from_str(include_str!(
            "../../../tests/fixtures/github/issues/labeled.payload.json"
        ))
        .unwrap();
        let mut issue = fixture["issue"].clone();
        let label = issue["labels"][0].clone();
        issue["number"] = json!(12);
        issue["state"] = json!(state);
        issue["updated_at"] = json!(updated_at);
        let mut ada = issue["user"].clone();
        ada["login"] = json!("ada");
        issue["closed_by"] = ada;
        issue["labels"] = labels
            .iter()
            .map(|l| {
                let mut label = label.clone();
                label["name"] = json!(l);
                label
            })
            .collect();
        Answer::read("the test's issue", issue).unwrap()
    }

    fn at(text: &str) -> Option<chrono::DateTime<chrono::Utc>> {
        Some(text.parse().unwrap())
    }

    #[test]
    fn a_closed_or_unlabeled_issue_is_a_missed_withdrawal_unless_its_task_holds_that_version() {
        let closed = missed_withdrawal(
            &issue("closed", &["pidevops"], "2026-11-29T10:05:00Z"),
            at("2026-11-29T10:00:00Z"),
            "acme/app",
            "pidevops",
        )
        .unwrap();
        assert_eq!(closed.event_type, "github.issues.closed");
        assert_eq!(
            closed.dedup_key,
            "poll:issues:acme/app#12:closed:2026-11-29T10:05:00Z"
        );
        assert_eq!(closed.body["action"], "closed");
        assert_eq!(closed.body["repository"]["full_name"], "acme/app");
        assert_eq!(closed.body["issue"]["number"], 12);
        assert_eq!(closed.body["sender"]["login"], "ada");
        let unlabeled = missed_withdrawal(
            &issue("open", &["bug"], "2026-11-29T10:05:00Z"),
            None,
            "acme/app",
            "pidevops",
        )
        .unwrap();
        assert_eq!(unlabeled.event_type, "github.issues.unlabeled");
        assert_eq!(unlabeled.body["label"]["name"], "pidevops");
        // Still asking: open with the label.
        assert_eq!(
            missed_withdrawal(
                &issue("open", &["pidevops"], "2026-11-29T10:05:00Z"),
                None,
                "acme/app",
                "pidevops"
            ),
            None
        );
        // The task holds this version (its webhook came), or a newer one: nothing to append.
        for held in ["2026-11-29T10:05:00Z", "2026-11-29T10:06:00Z"] {
            assert_eq!(
                missed_withdrawal(
                    &issue("closed", &[], "2026-11-29T10:05:00Z"),
                    at(held),
                    "acme/app",
                    "pidevops"
                ),
                None,
                "{held}"
            );
        }
        // An answer without a version or a number cannot be placed: it does not read as an issue at all.
        let Err(CallError::Transient { message, .. }) = Answer::<Issue>::read(
            "reading the issue",
            json!({ "state": "closed", "number": 12 }),
        ) else {
            panic!("an issue without its fields read");
        };
        assert!(
            message.contains("does not read as octocrab's Issue"),
            "{message}"
        );
    }
}
