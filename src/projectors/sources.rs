//! The `sources` read model: per source and event type, how many events arrived and when the first and the last
//! did, so an operator sees at a glance that GitHub last delivered three days ago.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde::Serialize;

use super::{Projector, ProjectorTx};
use crate::eventlog::{EventStore, StoreError, StoredEvent};

pub const NAME: &str = "sources";

#[derive(Clone, Copy, Debug, Default)]
pub struct SourcesProjector;

/// One row of the read model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct SourceActivity {
    pub source: String,
    pub event_type: String,
    pub events: i64,
    pub first_at: DateTime<Utc>,
    pub first_position: i64,
    pub last_at: DateTime<Utc>,
    pub last_position: i64,
}

/// Per source: the totals over its event types.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SourceSummary {
    pub source: String,
    pub events: i64,
    pub last_at: DateTime<Utc>,
    pub last_type: String,
    pub last_position: i64,
}

impl Projector for SourcesProjector {
    fn name(&self) -> &'static str {
        NAME
    }

    fn version(&self) -> i64 {
        1
    }

    fn reset<'a>(&'a self, tx: &'a mut ProjectorTx) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            super::empty_tables(tx, &["source_activity"]).await?;
            Ok(())
        })
    }

    fn apply<'a>(
        &'a self,
        tx: &'a mut ProjectorTx,
        events: &'a [StoredEvent],
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            // A batch touches a handful of rows however many events it holds: fold it first, write once per row.
            for row in fold(events) {
                upsert(tx, &row).await?;
            }
            Ok(())
        })
    }
}

/// Folds events (in position order) into one row per (source, type). Pure.
pub fn fold(events: &[StoredEvent]) -> Vec<SourceActivity> {
    let mut rows: BTreeMap<(&str, &str), SourceActivity> = BTreeMap::new();
    for event in events {
        rows.entry((&event.source, &event.event_type))
            .and_modify(|row| {
                row.events += 1;
                if event.position > row.last_position {
                    row.last_position = event.position;
                    row.last_at = event.recorded_at;
                }
            })
            .or_insert_with(|| SourceActivity {
                source: event.source.clone(),
                event_type: event.event_type.clone(),
                events: 1,
                first_at: event.recorded_at,
                first_position: event.position,
                last_at: event.recorded_at,
                last_position: event.position,
            });
    }
    rows.into_values().collect()
}

async fn upsert(tx: &mut ProjectorTx, row: &SourceActivity) -> Result<(), sqlx::Error> {
    // Batches arrive in position order, so a stored row's first event stays first and the batch's last is last.
    const SQL: &str = "INSERT INTO source_activity
            (source, event_type, events, first_at, first_position, last_at, last_position)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (source, event_type) DO UPDATE SET
            events = source_activity.events + excluded.events,
            last_at = excluded.last_at,
            last_position = excluded.last_position";
    on_tx!(tx, |conn| sqlx::query(SQL)
        .bind(&row.source)
        .bind(&row.event_type)
        .bind(row.events)
        .bind(row.first_at)
        .bind(row.first_position)
        .bind(row.last_at)
        .bind(row.last_position)
        .execute(conn)
        .await
        .map(|_| ()))?;
    Ok(())
}

/// The whole read model, ordered by source then type.
pub async fn activity(store: &EventStore) -> Result<Vec<SourceActivity>, StoreError> {
    const SQL: &str =
        "SELECT source, event_type, events, first_at, first_position, last_at, last_position
                       FROM source_activity ORDER BY source, event_type";
    Ok(crate::on_store!(store, |pool, backend| sqlx::query_as(SQL)
        .fetch_all(pool)
        .await?))
}

/// One line per source: its total and its latest delivery. Pure.
pub fn summarize(rows: &[SourceActivity]) -> Vec<SourceSummary> {
    let mut by_source: BTreeMap<&str, SourceSummary> = BTreeMap::new();
    for row in rows {
        let entry = by_source
            .entry(&row.source)
            .or_insert_with(|| SourceSummary {
                source: row.source.clone(),
                events: 0,
                last_at: row.last_at,
                last_type: row.event_type.clone(),
                last_position: row.last_position,
            });
        entry.events += row.events;
        if row.last_position > entry.last_position {
            entry.last_at = row.last_at;
            entry.last_type = row.event_type.clone();
            entry.last_position = row.last_position;
        }
    }
    by_source.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn event(position: i64, source: &str, event_type: &str) -> StoredEvent {
        let at = Utc
            .timestamp_opt(1_700_000_000 + position, 0)
            .single()
            .expect("a valid time");
        StoredEvent {
            position,
            id: uuid::Uuid::now_v7(),
            source: source.into(),
            event_type: event_type.into(),
            dedup_key: position.to_string(),
            stream: None,
            stream_version: None,
            occurred_at: at,
            recorded_at: at,
            action: None,
            repository: None,
            number: None,
            reference: None,
            content_type: "application/json".into(),
            body: Vec::new(),
            meta: Default::default(),
        }
    }

    /// Merges folded batches the way the upsert does.
    fn merge(into: &mut BTreeMap<(String, String), SourceActivity>, rows: Vec<SourceActivity>) {
        for row in rows {
            into.entry((row.source.clone(), row.event_type.clone()))
                .and_modify(|stored| {
                    stored.events += row.events;
                    stored.last_at = row.last_at;
                    stored.last_position = row.last_position;
                })
                .or_insert(row);
        }
    }

    #[test]
    fn fold_counts_per_source_and_type_and_keeps_first_and_last() {
        let events = vec![
            event(1, "github", "github.push"),
            event(2, "linear", "linear.Issue.create"),
            event(3, "github", "github.push"),
            event(4, "github", "github.ping"),
        ];
        let rows = fold(&events);
        assert_eq!(rows.len(), 3);
        let push = &rows[1];
        assert_eq!((push.event_type.as_str(), push.events), ("github.push", 2));
        assert_eq!((push.first_position, push.last_position), (1, 3));
        assert_eq!(push.last_at, events[2].recorded_at);
        let summary = summarize(&rows);
        assert_eq!(summary.len(), 2);
        assert_eq!(
            (summary[0].source.as_str(), summary[0].events),
            ("github", 3)
        );
        assert_eq!(summary[0].last_type, "github.ping");
        assert_eq!(summary[0].last_position, 4);
    }

    proptest! {
        /// However the log is cut into batches, folding and merging gives the same read model.
        #[test]
        fn batching_never_changes_the_read_model(
            kinds in proptest::collection::vec(0usize..5, 1..200),
            cuts in proptest::collection::vec(1usize..50, 1..20),
        ) {
            const TYPES: [(&str, &str); 5] = [
                ("github", "github.push"), ("github", "github.ping"), ("linear", "linear.Issue.update"),
                ("telegram", "telegram.message"), ("pidevops", "pidevops.task.created"),
            ];
            let events: Vec<_> = kinds.iter().enumerate()
                .map(|(i, k)| event(i as i64 + 1, TYPES[*k].0, TYPES[*k].1))
                .collect();
            let mut whole = BTreeMap::new();
            merge(&mut whole, fold(&events));
            let mut batched = BTreeMap::new();
            let mut rest = &events[..];
            let mut cut = cuts.iter().cycle();
            while !rest.is_empty() {
                let n = (*cut.next().unwrap_or(&1)).min(rest.len());
                merge(&mut batched, fold(&rest[..n]));
                rest = &rest[n..];
            }
            prop_assert_eq!(&whole, &batched);
            let total: i64 = whole.values().map(|r| r.events).sum();
            prop_assert_eq!(total, events.len() as i64);
        }
    }
}
