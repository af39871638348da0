//! `pidevops verify`: walks the log's hash chain (`chain.rs`) in position order and names the first break.

use futures::TryStreamExt;
use sqlx::Row;

use super::chain::{self, ChainedEvent, GENESIS};
use super::{EventStore, StoreError};

/// Where the chain broke, and how.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Break {
    /// The log jumps over positions: events were deleted.
    Missing { after: i64, next: i64 },
    /// The event's content no longer hashes to the hash stored with it: altered.
    ContentAltered { position: i64 },
    /// The event's link does not follow from the one before it: an event before it was removed, moved or
    /// altered along with its hashes.
    LinkBroken { position: i64 },
    /// An event without hashes after chained ones: written around the appender, or its hashes removed.
    Unchained { position: i64 },
    /// A stored hash is not 32 bytes.
    Malformed { position: i64 },
    /// A projector had applied events past the log's end: the newest events were cut off.
    CutOff {
        last: i64,
        consumer: String,
        position: i64,
    },
}

impl std::fmt::Display for Break {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing { after, next } => write!(
                f,
                "positions {}..={} are missing: the log goes from {after} to {next} (events deleted)",
                after + 1,
                next - 1
            ),
            Self::ContentAltered { position } => write!(
                f,
                "position {position}: the event's content does not match its stored content hash (altered)"
            ),
            Self::LinkBroken { position } => write!(
                f,
                "position {position}: its chain hash does not follow from the event before it \
                 (an earlier event was removed, reordered or rewritten with its hashes)"
            ),
            Self::Unchained { position } => write!(
                f,
                "position {position}: no hashes, after chained events (written around the appender, or its \
                 hashes removed)"
            ),
            Self::Malformed { position } => {
                write!(f, "position {position}: a stored hash is not 32 bytes")
            }
            Self::CutOff {
                last,
                consumer,
                position,
            } => write!(
                f,
                "the log ends at position {last}, but projector {consumer} had applied events up to {position}: the \
                 newest events were cut off"
            ),
        }
    }
}

/// What a walk of the chain found.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ChainReport {
    /// Events read (up to and including the first break).
    pub events: u64,
    /// The last position of the events written before the chain began (they carry no hashes), if any.
    pub unchained_through: Option<i64>,
    /// The last event verified, and its chain hash (hex): a later walk that reaches it must find the same.
    pub head: Option<(i64, String)>,
    pub first_break: Option<Break>,
}

/// A row of `{columns}, body_digest, content_hash, chain_hash` as a [`ChainedEvent`], on either backend.
macro_rules! chained {
    ($backend:ident, $row:ident) => {
        ChainedEvent {
            event: $backend::decode(&$row)?,
            body_digest: $row.try_get("body_digest")?,
            content_hash: $row.try_get("content_hash")?,
            chain_hash: $row.try_get("chain_hash")?,
        }
    };
}

/// The event store's columns (`{columns}`, the backend's) and the three hashes; a `WHERE` or `ORDER BY` follows.
const SELECT_CHAINED: &str = "SELECT {columns}, body_digest, content_hash, chain_hash FROM events";

impl EventStore {
    /// Walks the whole log in one read (one snapshot), recomputing each event's content hash and link, and stops
    /// at the first break. Holds one event in memory at a time.
    ///
    /// The projectors' positions are read first, the log after: a projector that had applied events the log no
    /// longer holds saw events cut off its end, which no walk of the remaining chain can see. (Only projectors:
    /// other rows of `checkpoints` hold a provider's offsets and times, not log positions.)
    pub async fn verify_chain(&self) -> Result<ChainReport, StoreError> {
        let projectors: Vec<(String, i64)> = crate::on_store!(self, |pool, _backend| {
            sqlx::query_as("SELECT name, position FROM projections ORDER BY position DESC LIMIT 1")
                .fetch_all(pool)
                .await?
        });
        let mut walk = ChainWalk::default();
        let mut last = 0;
        self.each_chained(|event| {
            last = event.event.position;
            Ok(walk.step(&event))
        })
        .await?;
        if walk.report.first_break.is_none() {
            if let Some((consumer, position)) = projectors.into_iter().find(|(_, p)| *p > last) {
                walk.report.first_break = Some(Break::CutOff {
                    last,
                    consumer,
                    position,
                });
            }
        }
        Ok(walk.report)
    }

    /// The events at `positions` with their hashes, in position order (a receipt's lines).
    pub async fn chained_at(&self, positions: &[i64]) -> Result<Vec<ChainedEvent>, StoreError> {
        let mut out = Vec::with_capacity(positions.len());
        for chunk in positions.chunks(super::sql::MAX_PARAMS) {
            let sql = format!(
                "{SELECT_CHAINED} WHERE position IN ({}) ORDER BY position",
                super::sql::list(1, chunk.len())
            );
            crate::on_store!(self, sql = sql, |pool, backend| {
                let sql = sql.replace("{columns}", backend::COLUMNS);
                let mut query = sqlx::query(&sql);
                for position in chunk {
                    query = query.bind(position);
                }
                for row in query.fetch_all(pool).await? {
                    out.push(chained!(backend, row));
                }
            });
        }
        out.sort_by_key(|c| c.event.position);
        Ok(out)
    }

    /// The newest event's position and chain hash (none while the log is empty or its newest event is from
    /// before the chain).
    pub async fn chain_head(&self) -> Result<Option<(i64, Vec<u8>)>, StoreError> {
        let row: Option<(i64, Option<Vec<u8>>)> = crate::on_store!(self, |pool, _backend| {
            sqlx::query_as("SELECT position, chain_hash FROM events ORDER BY position DESC LIMIT 1")
                .fetch_optional(pool)
                .await?
        });
        Ok(row.and_then(|(position, hash)| hash.map(|h| (position, h))))
    }

    /// Every event with its hashes, in position order, in one read (one snapshot), one at a time, while `each`
    /// answers true.
    pub async fn each_chained(
        &self,
        mut each: impl FnMut(ChainedEvent) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        crate::on_store!(self, |pool, backend| {
            let sql = format!("{SELECT_CHAINED} ORDER BY position")
                .replace("{columns}", backend::COLUMNS);
            let mut rows = sqlx::query(&sql).fetch(pool);
            while let Some(row) = rows.try_next().await? {
                let chained = chained!(backend, row);
                if !each(chained)? {
                    break;
                }
            }
        });
        Ok(())
    }
}

/// Walks an export (`pidevops export`: JSON lines, one event each) as [`EventStore::verify_chain`] walks the
/// log: no database needed. A line that is not an exported event is an error naming the line.
pub fn verify_export(lines: impl std::io::BufRead) -> Result<ChainReport, String> {
    let mut walk = ChainWalk::default();
    each_exported(lines, |chained| Ok(walk.step(&chained)))?;
    Ok(walk.report)
}

/// Every event of an export, in its order, while `each` answers true.
pub fn each_exported(
    lines: impl std::io::BufRead,
    mut each: impl FnMut(ChainedEvent) -> Result<bool, String>,
) -> Result<(), String> {
    for (number, line) in lines.lines().enumerate() {
        let line = line.map_err(|e| format!("reading line {}: {e}", number + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let exported: super::export::Exported = serde_json::from_str(&line)
            .map_err(|e| format!("line {} is not an exported event: {e}", number + 1))?;
        let chained = exported
            .into_chained()
            .map_err(|e| format!("line {}: {e}", number + 1))?;
        if !each(chained)? {
            break;
        }
    }
    Ok(())
}

/// A walk of the chain, event by event in position order: what `verify_chain` and `verify_export` run, and what
/// a receipt's check runs up to the receipt's head.
#[derive(Default)]
pub struct ChainWalk {
    report: ChainReport,
    previous_position: i64,
    /// The last link; `None` while no chained event was seen.
    previous_link: Option<[u8; 32]>,
}

impl ChainWalk {
    /// What the walk found so far.
    pub fn report(&self) -> &ChainReport {
        &self.report
    }

    /// Checks one event; false once the chain broke.
    pub fn step(&mut self, chained: &ChainedEvent) -> bool {
        let position = chained.event.position;
        self.report.events += 1;
        let broke = self.check(
            &chained.event,
            chained.body_digest.as_deref(),
            chained.content_hash.as_deref(),
            chained.chain_hash.as_deref(),
        );
        self.previous_position = position;
        match broke {
            Some(found) => {
                self.report.first_break = Some(found);
                false
            }
            None => true,
        }
    }

    fn check(
        &mut self,
        event: &super::StoredEvent,
        digest: Option<&[u8]>,
        content: Option<&[u8]>,
        link: Option<&[u8]>,
    ) -> Option<Break> {
        let position = event.position;
        if position != self.previous_position + 1 {
            return Some(Break::Missing {
                after: self.previous_position,
                next: position,
            });
        }
        let (content, link) = match (content, link) {
            (None, None) if self.previous_link.is_none() => {
                self.report.unchained_through = Some(position);
                return None;
            }
            (Some(content), Some(link)) => (content, link),
            _ => return Some(Break::Unchained { position }),
        };
        let (Ok(content), Ok(link)) = (<[u8; 32]>::try_from(content), <[u8; 32]>::try_from(link))
        else {
            return Some(Break::Malformed { position });
        };
        if chain::of_stored(event, digest) != content {
            return Some(Break::ContentAltered { position });
        }
        let previous = self.previous_link.unwrap_or(GENESIS);
        if chain::link(&previous, position, &content) != link {
            return Some(Break::LinkBroken { position });
        }
        self.previous_link = Some(link);
        self.report.head = Some((position, hex::encode(link)));
        None
    }
}

/// The report as `pidevops verify` prints it: what was checked, then the break if there is one.
pub fn chain_report_text(report: &ChainReport) -> String {
    let mut out = String::new();
    match (&report.first_break, &report.head) {
        (Some(found), _) => out.push_str(&format!("BROKEN: {found}\n")),
        (None, Some((position, hash))) => out.push_str(&format!(
            "intact: {} events, chained through position {position}, head hash {hash}\n",
            report.events
        )),
        (None, None) if report.events == 0 => out.push_str("intact: the log is empty\n"),
        (None, None) => out.push_str(&format!(
            "nothing to verify: all {} events were written before the chain\n",
            report.events
        )),
    }
    if let Some(last) = report.unchained_through {
        out.push_str(&format!(
            "positions 1..={last} were written before the chain began and carry no hashes\n"
        ));
    }
    out
}
