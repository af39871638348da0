//! The `github_poller` loop: for every task in review with a pull request, asks GitHub how the pull request and
//! its head commit's checks stand, and appends what a missed webhook would have said, shaped like the webhook,
//! so reactions handle it as they handle a delivery: a merged or closed pull request
//! (`github.pull_request.closed`) and a failed check suite (`github.check_suite.completed`).
//!
//! Each appended fact has a dedup key naming it (`poll:pull_request:<repo>#<n>:closed`,
//! `poll:check_suite:<id>:<conclusion>`), so polls append it once. When the webhook did arrive, the task has
//! usually left review before the poller looks; if both land, reactions treat the second report of the same
//! failure as no news, and a merge of a done task is refused by the task itself.

use anyhow::Context;
use serde_json::{json, Value};

use crate::domain::{EventType, NewEvent, Source};
use crate::eventlog::EventLog;
use crate::projectors::tasks::{self as task_rows, TaskFilter};
use crate::providers::github::GithubClient;
use crate::tasks::Column;

pub const GITHUB_POLLER: &str = "github_poller";
/// Conclusions reactions act on (the same as theirs).
const FAILED: [&str; 3] = ["failure", "timed_out", "startup_failure"];

/// What one poll did, for `/health`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct GithubPollProgress {
    pub pull_requests: u64,
    /// Facts the log did not have.
    pub appended: u64,
}

#[derive(Clone, Debug)]
pub struct GithubPoller {
    client: GithubClient,
    log: EventLog,
}

impl GithubPoller {
    pub fn new(client: GithubClient, log: EventLog) -> Self {
        Self { client, log }
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
        for row in rows {
            let Some(pr) = &row.links.github_pr else {
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
            if pull["state"].as_str() == Some("closed") {
                let by = pull["merged_by"]["login"]
                    .as_str()
                    .unwrap_or("someone")
                    .to_owned();
                let body = json!({
                    "action": "closed",
                    "pull_request": pull,
                    "repository": repository,
                    "sender": { "login": by },
                });
                if self
                    .append(
                        "github.pull_request.closed",
                        format!("poll:pull_request:{pr}:closed"),
                        &body,
                        pr.repo.as_str(),
                        number,
                    )
                    .await?
                {
                    progress.appended += 1;
                }
                continue;
            }
            let Some(sha) = pull["head"]["sha"].as_str() else {
                continue;
            };
            let suites = self
                .client
                .check_suites(&pr.repo, sha)
                .await
                .map_err(|e| anyhow::anyhow!(e))
                .with_context(|| format!("{} ({pr}) checks", row.id))?;
            for suite in suites["check_suites"].as_array().into_iter().flatten() {
                let conclusion = suite["conclusion"].as_str().unwrap_or_default();
                if suite["status"].as_str() != Some("completed") || !FAILED.contains(&conclusion) {
                    continue;
                }
                let id = suite["id"].as_i64().unwrap_or_default();
                let body = json!({
                    "action": "completed",
                    "check_suite": suite,
                    "repository": repository,
                    "sender": { "login": suite["app"]["slug"].as_str().unwrap_or("github") },
                });
                if self
                    .append(
                        "github.check_suite.completed",
                        format!("poll:check_suite:{id}:{conclusion}"),
                        &body,
                        pr.repo.as_str(),
                        number,
                    )
                    .await?
                {
                    progress.appended += 1;
                }
            }
        }
        metrics::counter!("pidevops_poller_appended_total", "poller" => GITHUB_POLLER)
            .increment(progress.appended);
        Ok(progress)
    }

    async fn append(
        &self,
        event_type: &str,
        dedup_key: String,
        body: &Value,
        repo: &str,
        number: u64,
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
        event.subject.number = i64::try_from(number).ok();
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
