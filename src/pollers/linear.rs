//! The `linear_poller` loop: asks Linear for the issues carrying the intake label that changed since the last
//! successful poll (less an overlap, since clocks and Linear's indexing lag), page by page, and appends each
//! version the log has not seen as a `linear.Issue.polled` event shaped like a webhook's, so intake treats it as
//! it treats a delivery.
//!
//! Deduplication, in two layers: a version whose task already holds it (`ticket_version`: intake notes every
//! version it sees, whatever the task's column, webhooks' and polls' alike) is skipped; every appended version has
//! the dedup key `poll:<issue id>:<updatedAt>`,
//! so two polls (or two replicas in a brief split-brain) append it once. The poll's start time is the
//! checkpoint `linear_poller` (milliseconds), moved only when every page was read and appended.

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::board::Board;
use crate::domain::{EventType, NewEvent, Source};
use crate::eventlog::EventLog;
use crate::providers::linear::operations::{changed_issues, ChangedIssues};
use crate::providers::linear::LinearClient;

pub const LINEAR_POLLER: &str = "linear_poller";
const PAGE: i64 = 50;
/// Changes this close before the last poll are asked for again.
const OVERLAP: chrono::Duration = chrono::Duration::minutes(2);
/// How far back the very first poll looks.
const FIRST_LOOKBACK: chrono::Duration = chrono::Duration::hours(24);
/// A poll reads at most this many pages (a runaway cursor must not hold the loop).
const MAX_PAGES: usize = 100;

/// What one poll did, for `/health`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LinearPollProgress {
    pub since: String,
    pub seen: u64,
    /// Versions the log did not have (missed webhooks, or changes made while pidevops was down).
    pub appended: u64,
    /// Versions a task already had from its webhook.
    pub known: u64,
}

#[derive(Clone, Debug)]
pub struct LinearPoller {
    client: LinearClient,
    log: EventLog,
    board: Board,
    label: String,
}

impl LinearPoller {
    /// `label`: the intake label (`[intake.linear] label`): only issues carrying it can become tasks.
    pub fn new(client: LinearClient, log: EventLog, board: Board, label: String) -> Self {
        Self {
            client,
            log,
            board,
            label,
        }
    }

    pub async fn tick(&self) -> anyhow::Result<LinearPollProgress> {
        let store = self.log.store();
        let started = Utc::now();
        let last_ms = store
            .checkpoint(LINEAR_POLLER)
            .await
            .context("reading the last poll time")?;
        let since = if last_ms > 0 {
            DateTime::<Utc>::from_timestamp_millis(last_ms).unwrap_or(started) - OVERLAP
        } else {
            started - FIRST_LOOKBACK
        };
        let mut progress = LinearPollProgress {
            since: since.to_rfc3339(),
            ..LinearPollProgress::default()
        };
        let mut after: Option<String> = None;
        for page in 0.. {
            anyhow::ensure!(
                page < MAX_PAGES,
                "Linear kept answering with more pages after {MAX_PAGES}; the poll stops here"
            );
            let variables = changed_issues::Variables {
                since: since.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                label: self.label.clone(),
                first: PAGE,
                after: after.clone(),
            };
            let data = self
                .client
                .run::<ChangedIssues>("issues", variables)
                .await
                .map_err(|e| anyhow::anyhow!(e))
                .context("asking Linear for changed issues")?;
            let issues = data.issues;
            for node in &issues.nodes {
                progress.seen += 1;
                let node = serde_json::to_value(node).context("a polled issue as JSON")?;
                if self.append(&node).await? {
                    progress.appended += 1;
                } else {
                    progress.known += 1;
                }
            }
            match (issues.page_info.has_next_page, issues.page_info.end_cursor) {
                (true, Some(cursor)) => after = Some(cursor),
                _ => break,
            }
        }
        store
            .advance_checkpoint(LINEAR_POLLER, started.timestamp_millis())
            .await
            .context("saving the poll time")?;
        metrics::counter!("pidevops_poller_appended_total", "poller" => LINEAR_POLLER)
            .increment(progress.appended);
        Ok(progress)
    }

    /// Appends one issue version unless its task already has it; says whether it appended.
    async fn append(&self, node: &Value) -> anyhow::Result<bool> {
        let (Some(id), Some(updated)) = (node["id"].as_str(), node["updatedAt"].as_str()) else {
            anyhow::bail!("Linear answered an issue without id or updatedAt: {node}");
        };
        let version = DateTime::parse_from_rfc3339(updated)
            .with_context(|| format!("issue {id}: updatedAt {updated:?} is not a time"))?
            .with_timezone(&Utc);
        if let Some(task) = self.board.task_for_key(&format!("linear:{id}")).await? {
            let known = self
                .board
                .load(task)
                .await?
                .and_then(|loaded| loaded.task.ticket_version());
            if known.is_some_and(|known| known >= version) {
                return Ok(false);
            }
        }
        let body = webhook_shaped(node);
        let mut event = NewEvent::new(
            Source::Linear,
            EventType::from_stored("linear.Issue.polled".to_owned()),
            format!("poll:{id}:{updated}"),
            "application/json",
            bytes::Bytes::from(serde_json::to_vec(&body)?),
        );
        event.occurred_at = version;
        event.subject.action = Some("polled".to_owned());
        event.subject.reference = node["identifier"].as_str().map(str::to_owned);
        event
            .meta
            .insert("poller".to_owned(), Value::from(LINEAR_POLLER));
        let appended = self
            .log
            .append(event)
            .await
            .with_context(|| format!("appending polled issue {id}"))?;
        Ok(!appended.duplicate)
    }
}

/// A polled issue in the shape of an `Issue` webhook (`data` with `labels` as a list), which intake reads.
pub fn webhook_shaped(node: &Value) -> Value {
    let mut data = node.clone();
    data["labels"] = node["labels"]["nodes"].clone();
    json!({ "action": "polled", "type": "Issue", "data": data })
}
