//! The `linear_poller` loop: asks Linear for the issues carrying the intake label that changed since the last
//! successful poll (less an overlap, since clocks and Linear's indexing lag), page by page, and appends each
//! version the log has not seen as a `linear.Issue.polled` event shaped like a webhook's, so intake treats it as
//! it treats a delivery.
//!
//! Deduplication, in three layers: a version whose task already holds it (`ticket_version`: intake notes every
//! version it sees, whatever the task's column, webhooks' and polls' alike) is skipped; so is one in the log after
//! intake's checkpoint (delivered, not yet read: the task trails the log by up to one intake tick, and a webhook's
//! key is its delivery id, which names no version); every appended version has the dedup key
//! `poll:<issue id>:<updatedAt>`,
//! so two polls (or two replicas in a brief split-brain) append it once. The poll's start time is the
//! checkpoint `linear_poller` (milliseconds), moved only when every page was read and appended.

use std::collections::HashSet;

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
/// What intake has not read yet is read in pages of this many events, at most [`MAX_UNREAD_PAGES`] of them (intake
/// trails by one tick; a longer backlog is intake down, and its versions on the tasks later are checked then).
const UNREAD_PAGE: i64 = 500;
const MAX_UNREAD_PAGES: usize = 20;

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
    /// The checkpoint of the loop that reads what the poller appends (intake).
    reader: &'static str,
}

impl LinearPoller {
    /// `label`: the intake label (`[intake.linear] label`): only issues carrying it can become tasks. `reader`: the
    /// checkpoint of intake, which reads what the poller appends.
    pub fn new(
        client: LinearClient,
        log: EventLog,
        board: Board,
        label: String,
        reader: &'static str,
    ) -> Self {
        Self {
            client,
            log,
            board,
            label,
            reader,
        }
    }

    /// The issue versions (id, `updatedAt`) in the log that intake has not read yet, webhooks' and polls' alike.
    async fn unread_versions(&self) -> anyhow::Result<HashSet<(String, DateTime<Utc>)>> {
        let store = self.log.store();
        let mut after = store
            .checkpoint(self.reader)
            .await
            .context("reading intake's checkpoint")?;
        let mut versions = HashSet::new();
        for _ in 0..MAX_UNREAD_PAGES {
            let page = store
                .read_after(after, UNREAD_PAGE)
                .await
                .context("reading what intake has not read")?;
            for event in page.iter().filter(|e| {
                e.source == Source::Linear.as_str() && e.event_type.starts_with("linear.Issue.")
            }) {
                let Ok(body) = serde_json::from_slice::<Value>(&event.body) else {
                    continue;
                };
                if let (Some(id), Some(version)) = (
                    body["data"]["id"].as_str(),
                    body["data"]["updatedAt"]
                        .as_str()
                        .and_then(|v| DateTime::parse_from_rfc3339(v).ok()),
                ) {
                    versions.insert((id.to_owned(), version.with_timezone(&Utc)));
                }
            }
            match page.last() {
                Some(last) if page.len() as i64 == UNREAD_PAGE => after = last.position,
                _ => break,
            }
        }
        Ok(versions)
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
        let unread = self.unread_versions().await?;
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
                if self.append(&node, &unread).await? {
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

    /// Appends one issue version unless the log has it (`unread`, not yet read by intake) or its task does; says
    /// whether it appended.
    async fn append(
        &self,
        node: &Value,
        unread: &HashSet<(String, DateTime<Utc>)>,
    ) -> anyhow::Result<bool> {
        let (Some(id), Some(updated)) = (node["id"].as_str(), node["updatedAt"].as_str()) else {
            anyhow::bail!("Linear answered an issue without id or updatedAt: {node}");
        };
        let version = DateTime::parse_from_rfc3339(updated)
            .with_context(|| format!("issue {id}: updatedAt {updated:?} is not a time"))?
            .with_timezone(&Utc);
        if unread.contains(&(id.to_owned(), version)) {
            return Ok(false);
        }
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
