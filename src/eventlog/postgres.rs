//! Postgres backend: production. One batch = one transaction = one fsync.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::postgres::{PgPool, PgPoolOptions, PgRow};
use sqlx::Row;
use uuid::Uuid;

use super::{plan_batch, BatchOutcome, StoreError, StoredEvent};
use crate::domain::{NewEvent, Source};

/// The writer lock; the same key as in the `pidevops_events_serialize` trigger.
const WRITER_LOCK: i64 = 7_420_113_000_001;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

const COLUMNS: &str =
    "position, id, source, event_type, dedup_key, stream, stream_version, occurred_at, \
     recorded_at, action, repository, number, reference, content_type, body, meta::text AS meta";

#[derive(Clone, Debug)]
pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            // Short, so a database outage turns into a prompt 503 rather than a hung webhook.
            .acquire_timeout(Duration::from_secs(3))
            .connect(url)
            .await?;
        Ok(Self { pool })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub(crate) async fn append_batch(
        &self,
        events: &[NewEvent],
    ) -> Result<Vec<BatchOutcome>, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(WRITER_LOCK)
            .execute(&mut *tx)
            .await?;

        let sources: Vec<&str> = events.iter().map(|e| e.source.as_str()).collect();
        let keys: Vec<&str> = events.iter().map(|e| e.dedup_key.as_str()).collect();
        let existing: HashMap<(String, String), (Uuid, i64)> = sqlx::query(
            "SELECT e.source, e.dedup_key, e.id, e.position
               FROM events e
               JOIN UNNEST($1::text[], $2::text[]) AS k(source, dedup_key) USING (source, dedup_key)",
        )
        .bind(&sources)
        .bind(&keys)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(|row| {
            Ok::<_, sqlx::Error>((
                (row.try_get("source")?, row.try_get("dedup_key")?),
                (row.try_get("id")?, row.try_get("position")?),
            ))
        })
        .collect::<Result<_, _>>()?;

        let streams: Vec<&str> = events
            .iter()
            .filter_map(|e| e.stream.as_ref().map(|(s, _)| s.as_str()))
            .collect();
        let heads: HashMap<String, i64> = if streams.is_empty() {
            HashMap::new()
        } else {
            sqlx::query(
                "SELECT stream, max(stream_version) AS version FROM events WHERE stream = ANY($1) GROUP BY stream",
            )
            .bind(&streams)
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .map(|row| Ok::<_, sqlx::Error>((row.try_get("stream")?, row.try_get("version")?)))
            .collect::<Result<_, _>>()?
        };

        let head: i64 = sqlx::query_scalar("SELECT coalesce(max(position), 0) FROM events")
            .fetch_one(&mut *tx)
            .await?;

        let (outcomes, inserts) = plan_batch(
            events,
            |i| {
                existing
                    .get(&(
                        events[i].source.as_str().to_owned(),
                        events[i].dedup_key.clone(),
                    ))
                    .copied()
            },
            |stream| heads.get(stream).copied().unwrap_or(0),
            head,
        );

        if !inserts.is_empty() {
            let recorded_at = Utc::now();
            let mut c = InsertColumns::with_capacity(inserts.len());
            for &(index, position) in &inserts {
                c.push(&events[index], position, recorded_at);
            }
            sqlx::query(
                "INSERT INTO events (position, id, source, event_type, dedup_key, stream, stream_version,
                                     occurred_at, recorded_at, action, repository, number, reference,
                                     content_type, body, meta)
                 SELECT position, id, source, event_type, dedup_key, stream, stream_version,
                        occurred_at, recorded_at, action, repository, number, reference,
                        content_type, body, meta::jsonb
                   FROM UNNEST($1::bigint[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[],
                               $7::bigint[], $8::timestamptz[], $9::timestamptz[], $10::text[], $11::text[],
                               $12::bigint[], $13::text[], $14::text[], $15::bytea[], $16::text[])
                        AS t(position, id, source, event_type, dedup_key, stream, stream_version,
                             occurred_at, recorded_at, action, repository, number, reference,
                             content_type, body, meta)
                  ORDER BY position",
            )
            .bind(c.position)
            .bind(c.id)
            .bind(c.source)
            .bind(c.event_type)
            .bind(c.dedup_key)
            .bind(c.stream)
            .bind(c.stream_version)
            .bind(c.occurred_at)
            .bind(c.recorded_at)
            .bind(c.action)
            .bind(c.repository)
            .bind(c.number)
            .bind(c.reference)
            .bind(c.content_type)
            .bind(c.body)
            .bind(c.meta)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(outcomes)
    }

    pub async fn read_after(&self, after: i64, limit: i64) -> Result<Vec<StoredEvent>, StoreError> {
        sqlx::query(&format!(
            "SELECT {COLUMNS} FROM events WHERE position > $1 ORDER BY position LIMIT $2"
        ))
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(decode)
        .collect()
    }

    pub async fn get(&self, id: Uuid) -> Result<Option<StoredEvent>, StoreError> {
        sqlx::query(&format!("SELECT {COLUMNS} FROM events WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(decode)
            .transpose()
    }

    pub async fn head(&self) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT coalesce(max(position), 0) FROM events")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    pub async fn count_by_key(&self, source: Source, dedup_key: &str) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT count(*) FROM events WHERE source = $1 AND dedup_key = $2")
                .bind(source.as_str())
                .bind(dedup_key)
                .fetch_one(&self.pool)
                .await?,
        )
    }
}

/// Column-wise arrays for one `INSERT … SELECT FROM UNNEST(…)`: one statement for the whole batch.
struct InsertColumns<'a> {
    position: Vec<i64>,
    id: Vec<Uuid>,
    source: Vec<&'a str>,
    event_type: Vec<&'a str>,
    dedup_key: Vec<&'a str>,
    stream: Vec<Option<&'a str>>,
    stream_version: Vec<Option<i64>>,
    occurred_at: Vec<DateTime<Utc>>,
    recorded_at: Vec<DateTime<Utc>>,
    action: Vec<Option<&'a str>>,
    repository: Vec<Option<&'a str>>,
    number: Vec<Option<i64>>,
    reference: Vec<Option<&'a str>>,
    content_type: Vec<&'a str>,
    body: Vec<&'a [u8]>,
    meta: Vec<String>,
}

impl<'a> InsertColumns<'a> {
    fn with_capacity(n: usize) -> Self {
        Self {
            position: Vec::with_capacity(n),
            id: Vec::with_capacity(n),
            source: Vec::with_capacity(n),
            event_type: Vec::with_capacity(n),
            dedup_key: Vec::with_capacity(n),
            stream: Vec::with_capacity(n),
            stream_version: Vec::with_capacity(n),
            occurred_at: Vec::with_capacity(n),
            recorded_at: Vec::with_capacity(n),
            action: Vec::with_capacity(n),
            repository: Vec::with_capacity(n),
            number: Vec::with_capacity(n),
            reference: Vec::with_capacity(n),
            content_type: Vec::with_capacity(n),
            body: Vec::with_capacity(n),
            meta: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, e: &'a NewEvent, position: i64, recorded_at: DateTime<Utc>) {
        self.position.push(position);
        self.id.push(e.id);
        self.source.push(e.source.as_str());
        self.event_type.push(e.event_type.as_str());
        self.dedup_key.push(&e.dedup_key);
        self.stream.push(e.stream.as_ref().map(|(s, _)| s.as_str()));
        self.stream_version.push(e.stream.as_ref().map(|(_, v)| *v));
        self.occurred_at.push(e.occurred_at);
        self.recorded_at.push(recorded_at);
        self.action.push(e.subject.action.as_deref());
        self.repository.push(e.subject.repository.as_deref());
        self.number.push(e.subject.number);
        self.reference.push(e.subject.reference.as_deref());
        self.content_type.push(&e.content_type);
        self.body.push(&e.body);
        self.meta
            .push(serde_json::to_string(&e.meta).unwrap_or_else(|_| "{}".to_owned()));
    }
}

fn decode(row: &PgRow) -> Result<StoredEvent, StoreError> {
    let position: i64 = row.try_get("position")?;
    let meta: String = row.try_get("meta")?;
    let meta = serde_json::from_str(&meta).map_err(|e| StoreError::Corrupt {
        position,
        reason: format!("meta is not a JSON object: {e}"),
    })?;
    Ok(StoredEvent {
        position,
        id: row.try_get("id")?,
        source: row.try_get("source")?,
        event_type: row.try_get("event_type")?,
        dedup_key: row.try_get("dedup_key")?,
        stream: row.try_get("stream")?,
        stream_version: row.try_get("stream_version")?,
        occurred_at: row.try_get("occurred_at")?,
        recorded_at: row.try_get("recorded_at")?,
        action: row.try_get("action")?,
        repository: row.try_get("repository")?,
        number: row.try_get("number")?,
        reference: row.try_get("reference")?,
        content_type: row.try_get("content_type")?,
        body: row.try_get("body")?,
        meta,
    })
}
