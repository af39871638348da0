//! A task's receipt: what happened to it, line by line, each line backed by an event's position and hashes in the
//! log's chain (`eventlog/chain.rs`), so that anyone holding the receipt and the log (or an export of it) can
//! check every line, offline, long after.
//!
//! The lines are the task's own events (who created, approved, steered and landed it, and how), the events that
//! caused them (the webhook deliveries, by their recorded cause), and the events of each of its runs (profile,
//! outcome, usage). Each line is derived from its event by [`line_of`], and the check derives it again from the
//! event it finds at that position: a line changed by hand no longer matches, and an event changed in the log no
//! longer matches its hash. The receipt's head (the log's newest position and chain hash when it was issued)
//! anchors the whole log up to there: a log rewritten from any earlier event on ends at another hash.

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::runs::{RunEvent, RUN_STREAM_PREFIX};
use crate::eventlog::{ChainWalk, ChainedEvent, EventStore, StoreError};
use crate::tasks::{TaskEvent, TaskId};

/// What a receipt says it is.
pub const RECEIPT_FORMAT: &str = "pidevops/receipt/v1";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    pub format: String,
    pub task: TaskId,
    pub issued_at: DateTime<Utc>,
    /// The log's newest event when the receipt was issued: its position and chain hash (hex).
    pub head: Anchor,
    pub lines: Vec<ReceiptLine>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Anchor {
    pub position: i64,
    pub chain_hash: String,
}

/// One thing that happened, as its event says it, and where in the chain that event is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReceiptLine {
    pub position: i64,
    pub event_type: String,
    pub stream: Option<String>,
    pub recorded_at: DateTime<Utc>,
    /// Who did it, as recorded (a person's login, `api`, a loop).
    pub actor: Option<String>,
    /// What happened, in words (a task event's timeline summary; for a delivery, what it was about).
    pub summary: String,
    pub content_hash: String,
    pub chain_hash: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ReceiptError {
    #[error("no task {0}")]
    NoTask(TaskId),
    #[error("the log has no hash chain yet (its newest event was written before the chain)")]
    Unchained,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("this is not a pidevops receipt (format {0:?}, expected {RECEIPT_FORMAT:?})")]
    Format(String),
    #[error("refused: {0}")]
    Refused(String),
}

/// The line an event with its hashes makes: the same function issues a receipt and checks one.
pub fn line_of(chained: &ChainedEvent) -> ReceiptLine {
    let e = &chained.event;
    let stream = e.stream.as_deref().unwrap_or_default();
    let summary = if stream.starts_with(super::STREAM_PREFIX) {
        super::timeline_entry(e).map_or_else(|_| describe(e), |entry| entry.summary)
    } else if stream.starts_with(RUN_STREAM_PREFIX) {
        serde_json::from_slice::<RunEvent>(&e.body)
            .map_or_else(|_| describe(e), |run| run_summary(&run))
    } else {
        describe(e)
    };
    ReceiptLine {
        position: e.position,
        event_type: e.event_type.clone(),
        stream: e.stream.clone(),
        recorded_at: e.recorded_at,
        actor: e.meta.text("actor"),
        summary,
        content_hash: chained
            .content_hash
            .as_ref()
            .map(hex::encode)
            .unwrap_or_default(),
        chain_hash: chained
            .chain_hash
            .as_ref()
            .map(hex::encode)
            .unwrap_or_default(),
    }
}

/// A run's event in words: each attempt's profile, duration, usage, review verdict, files outside its scope and
/// the hosts its network refused. The agent's own words (a failure's detail) are cut: a receipt is not its log.
fn run_summary(run: &RunEvent) -> String {
    match run {
        RunEvent::Started {
            attempt,
            profile,
            worker,
            ..
        } => format!("attempt {attempt} started: profile {profile} on {worker}"),
        RunEvent::Heartbeat { output_bytes, .. } => {
            format!("still running: {output_bytes} bytes of output")
        }
        RunEvent::Checkpointed { checkpoint, .. } => format!(
            "worktree saved after {} turn(s): checkpoint {} over {}, {} path(s) changed",
            checkpoint.turn,
            checkpoint.commit.short(),
            checkpoint.head.short(),
            checkpoint.changed
        ),
        RunEvent::Succeeded {
            attempt,
            branch,
            commit,
            duration_s,
            report,
            usage,
            ..
        } => {
            let mut out = format!(
                "attempt {attempt} pushed {} to {branch} after {duration_s:.0} s; {}",
                commit.chars().take(12).collect::<String>(),
                usage_words(usage.as_ref())
            );
            if let Some(review) = &report.review {
                out.push_str(&format!("; review: {:?}", review.verdict()));
            }
            if !report.outside_scope.is_empty() {
                out.push_str(&format!(
                    "; outside its scope: {}",
                    report.outside_scope.join(", ")
                ));
            }
            out
        }
        RunEvent::Failed {
            attempt,
            kind,
            detail,
            duration_s,
            usage,
            ..
        } => format!(
            "attempt {attempt} failed ({kind}) after {duration_s:.0} s: {}; {}",
            detail.chars().take(200).collect::<String>(),
            usage_words(usage.as_ref())
        ),
        RunEvent::Proposed {
            attempt,
            duration_s,
            usage,
            ..
        } => format!(
            "attempt {attempt} proposed for a person after {duration_s:.0} s; {}",
            usage_words(usage.as_ref())
        ),
        RunEvent::EgressRefused { refused, .. } => {
            let hosts: Vec<String> = refused
                .iter()
                .map(|r| format!("{}:{} ({}×)", r.host, r.port, r.count))
                .collect();
            format!("network refused: {}", hosts.join(", "))
        }
    }
}

fn usage_words(usage: Option<&crate::domain::usage::RunUsage>) -> String {
    match usage {
        None => "no usage reported".to_owned(),
        Some(u) => {
            let figures = u.usage.clamped();
            let mut out = format!(
                "{} tokens in, {} out",
                figures.input_tokens, figures.output_tokens
            );
            if let Some(cost) = figures.cost_usd {
                out.push_str(&format!(", ${cost:.4}"));
            }
            if let Some(refused) = &u.refused {
                out.push_str(&format!(" (figures refused: {refused})"));
            }
            out
        }
    }
}

/// What a non-task event was about, from its columns: `github.issues.opened acme/app#12 (opened)`.
fn describe(e: &crate::eventlog::StoredEvent) -> String {
    let mut out = e.event_type.clone();
    match (&e.repository, e.number) {
        (Some(repository), Some(number)) => out.push_str(&format!(" {repository}#{number}")),
        (Some(repository), None) => out.push_str(&format!(" {repository}")),
        _ => {}
    }
    if let Some(reference) = &e.reference {
        out.push_str(&format!(" [{reference}]"));
    }
    if let Some(action) = &e.action {
        out.push_str(&format!(" ({action})"));
    }
    out
}

/// Issues the receipt of `task` from the log as it is now.
pub async fn issue(store: &EventStore, task: TaskId) -> Result<Receipt, ReceiptError> {
    let stream = format!("{}{task}", super::STREAM_PREFIX);
    let own = store.read_stream(&stream).await?;
    if own.is_empty() {
        return Err(ReceiptError::NoTask(task));
    }
    let mut positions: BTreeSet<i64> = own.iter().map(|e| e.position).collect();
    for event in &own {
        // The deliveries and events that caused the task's events.
        if let Some(cause) = event
            .meta
            .text("cause_event_id")
            .and_then(|id| id.parse::<uuid::Uuid>().ok())
        {
            if let Some(found) = store.get(cause).await? {
                positions.insert(found.position);
            }
        }
        // Each run's own stream: its outcome, usage and the hosts its network refused.
        if let Ok(TaskEvent::Started { run, .. }) =
            TaskEvent::from_stored(&event.event_type, &event.body)
        {
            for run_event in store.read_stream(&crate::domain::runs::stream(run)).await? {
                positions.insert(run_event.position);
            }
        }
    }
    let positions: Vec<i64> = positions.into_iter().collect();
    let lines = store.chained_at(&positions).await?;
    // Read after the lines: the head is at or past every one of them.
    let (head, hash) = store.chain_head().await?.ok_or(ReceiptError::Unchained)?;
    Ok(Receipt {
        format: RECEIPT_FORMAT.to_owned(),
        task,
        issued_at: Utc::now(),
        head: Anchor {
            position: head,
            chain_hash: hex::encode(hash),
        },
        lines: lines.iter().map(line_of).collect(),
    })
}

/// Checks a receipt against a log's events, fed in position order (the log's or an export's) until `feed`
/// answers false: the chain must hold through the receipt's head and end there at the receipt's hash, and each
/// line must be what its event makes.
pub struct ReceiptCheck<'r> {
    receipt: &'r Receipt,
    walk: ChainWalk,
    /// The line for each position the receipt names.
    wanted: HashMap<i64, usize>,
    found: Vec<Option<ReceiptLine>>,
}

impl<'r> ReceiptCheck<'r> {
    pub fn new(receipt: &'r Receipt) -> Result<Self, ReceiptError> {
        if receipt.format != RECEIPT_FORMAT {
            return Err(ReceiptError::Format(receipt.format.clone()));
        }
        let wanted = receipt
            .lines
            .iter()
            .enumerate()
            .map(|(i, line)| (line.position, i))
            .collect();
        Ok(Self {
            receipt,
            walk: ChainWalk::default(),
            wanted,
            found: vec![None; receipt.lines.len()],
        })
    }

    /// Takes the next event; false once the walk is past the receipt's head or the chain broke.
    pub fn feed(&mut self, chained: &ChainedEvent) -> bool {
        let position = chained.event.position;
        if position > self.receipt.head.position {
            return false;
        }
        if let Some(&i) = self.wanted.get(&position) {
            self.found[i] = Some(line_of(chained));
        }
        self.walk.step(chained)
    }

    /// The verdict once fed: which line (or the chain) does not hold, or how many lines were checked.
    pub fn finish(self) -> Result<usize, ReceiptError> {
        let report = self.walk.report();
        if let Some(found) = &report.first_break {
            return Err(ReceiptError::Refused(format!(
                "the log's chain is broken: {found}"
            )));
        }
        match &report.head {
            Some((position, hash)) if *position == self.receipt.head.position => {
                if *hash != self.receipt.head.chain_hash {
                    return Err(ReceiptError::Refused(format!(
                        "the log's chain hash at position {position} is {hash}, the receipt's head says {}: \
                         the log was rewritten before that position",
                        self.receipt.head.chain_hash
                    )));
                }
            }
            other => {
                return Err(ReceiptError::Refused(format!(
                    "the log's chain ends at position {}, before the receipt's head at {}: events were removed",
                    other.as_ref().map_or(0, |h| h.0),
                    self.receipt.head.position
                )))
            }
        }
        for (i, (line, found)) in self.receipt.lines.iter().zip(&self.found).enumerate() {
            match found {
                None => {
                    return Err(ReceiptError::Refused(format!(
                        "line {} names position {}, which the log does not hold",
                        i + 1,
                        line.position
                    )))
                }
                Some(found) if found != line => {
                    return Err(ReceiptError::Refused(format!(
                        "line {} does not match the event at position {}: the receipt says {}, the log says {}",
                        i + 1,
                        line.position,
                        serde_json::to_string(line).unwrap_or_default(),
                        serde_json::to_string(found).unwrap_or_default()
                    )))
                }
                Some(_) => {}
            }
        }
        Ok(self.receipt.lines.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::runs::{FailureKind, RefusedEgress};
    use crate::domain::usage::{RunUsage, Usage};
    use crate::tasks::RunId;

    fn at() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    #[test]
    fn a_refusal_names_every_host_and_how_often() {
        let run = RunEvent::EgressRefused {
            at: at(),
            run: RunId(uuid::Uuid::nil()),
            task: "T-1".parse().unwrap(),
            refused: vec![
                RefusedEgress {
                    host: "evil.example".into(),
                    port: 443,
                    count: 3,
                },
                RefusedEgress {
                    host: "10.0.0.1".into(),
                    port: 22,
                    count: 1,
                },
            ],
        };
        assert_eq!(
            run_summary(&run),
            "network refused: evil.example:443 (3×), 10.0.0.1:22 (1×)"
        );
    }

    #[test]
    fn a_failure_says_its_kind_and_spend_and_cuts_the_agents_words() {
        let usage = RunUsage {
            repo: "acme/app".into(),
            profile: "claude".into(),
            usage: Usage {
                input_tokens: 1200,
                output_tokens: 300,
                cost_usd: Some(0.0421),
                ..Usage::default()
            },
            refused: None,
        };
        let run = RunEvent::Failed {
            at: at(),
            run: RunId(uuid::Uuid::nil()),
            task: "T-1".parse().unwrap(),
            attempt: 2,
            kind: FailureKind::Exit,
            detail: "x".repeat(5_000),
            duration_s: 61.4,
            tail: String::new(),
            usage: Some(usage),
            until: None,
            reviewer_usage: None,
        };
        let said = run_summary(&run);
        assert!(
            said.starts_with("attempt 2 failed (exit) after 61 s: xxx"),
            "{said}"
        );
        assert!(
            said.ends_with(&format!(
                "{}; 1200 tokens in, 300 out, $0.0421",
                "x".repeat(3)
            )),
            "{said}"
        );
        assert!(
            said.len() < 300,
            "the agent's words are cut: {} bytes",
            said.len()
        );
        assert_eq!(usage_words(None), "no usage reported");
    }

    #[test]
    fn a_delivery_is_described_by_its_columns() {
        let mut e = crate::eventlog::StoredEvent {
            position: 3,
            id: uuid::Uuid::nil(),
            source: "github".into(),
            event_type: "github.issues.opened".into(),
            dedup_key: "d".into(),
            stream: None,
            stream_version: None,
            occurred_at: at(),
            recorded_at: at(),
            action: Some("opened".into()),
            repository: Some("acme/app".into()),
            number: Some(12),
            reference: None,
            content_type: "application/json".into(),
            body: b"{}".to_vec(),
            meta: crate::eventlog::Meta::default(),
        };
        assert_eq!(describe(&e), "github.issues.opened acme/app#12 (opened)");
        e.repository = None;
        e.number = None;
        e.reference = Some("ENG-4".into());
        assert_eq!(describe(&e), "github.issues.opened [ENG-4] (opened)");
    }
}
