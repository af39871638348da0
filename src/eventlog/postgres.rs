//! Postgres backend: production. One batch = one transaction = one fsync.

use std::time::Duration;

use chrono::{DateTime, Utc};
use std::str::FromStr;

use futures::TryStreamExt;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow, PgSslMode};
use sqlx::Row;
use uuid::Uuid;

use super::{Appended, BatchOutcome, Bodies, StoreError, StoredEvent};
use crate::domain::NewEvent;

/// Appender tasks for this backend: while one holds the writer lock, the others encode and ship their batches.
/// Three measured best on two cores (docs/benchmarks.md).
pub(crate) const APPENDERS: usize = 3;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

pub(crate) const COLUMNS: &str =
    "position, id, source, event_type, dedup_key, stream, stream_version, occurred_at, \
     recorded_at, action, repository, number, reference, content_type, body, meta::text AS meta";

/// The same columns without the body, for readers that do not need it (most projectors): no detoasting.
pub(crate) const HEADER_COLUMNS: &str =
    "position, id, source, event_type, dedup_key, stream, stream_version, occurred_at, \
     recorded_at, action, repository, number, reference, content_type, '\\x'::bytea AS body, meta::text AS meta";

/// Only the bodies of one source's streams with a prefix; the others are never detoasted (CASE reads `body` only
/// when the condition holds).
const STREAM_BODY_COLUMNS: &str =
    "position, id, source, event_type, dedup_key, stream, stream_version, occurred_at, \
     recorded_at, action, repository, number, reference, content_type, \
     CASE WHEN source = $3 AND starts_with(coalesce(stream, ''), $4) THEN body ELSE '\\x'::bytea END AS body, \
     meta::text AS meta";

const COLUMN_LISTS: super::ColumnLists = super::ColumnLists {
    all: COLUMNS,
    header: HEADER_COLUMNS,
    stream_bodies: STREAM_BODY_COLUMNS,
};

/// Events after `after` on a caller's connection (a projector's transaction), with the bodies asked for.
pub(crate) async fn read_after_on(
    conn: &mut sqlx::PgConnection,
    after: i64,
    limit: i64,
    bodies: Bodies,
) -> Result<Vec<StoredEvent>, StoreError> {
    let (sql, filter) = super::read_after(&COLUMN_LISTS, bodies);
    let mut query = sqlx::query(&sql).bind(after).bind(limit);
    if let Some((source, prefix)) = filter {
        query = query.bind(source).bind(prefix);
    }
    // Decoded as the rows arrive into a vector sized once: a replay page is 50,000 rows, and collecting the raw
    // rows first (then growing the vector of events) doubled its memory and copies.
    let mut rows = query.fetch(conn);
    let mut events = Vec::with_capacity(usize::try_from(limit.clamp(0, 100_000)).unwrap_or(0));
    while let Some(row) = rows.try_next().await? {
        events.push(decode(&row)?);
    }
    Ok(events)
}

#[derive(Clone, Debug)]
pub struct PostgresStore {
    /// Reads and everything else: custom plans (see `connect`).
    pool: PgPool,
    /// The appenders' own connections. Default plan caching: a custom plan for `pidevops_append` would copy the
    /// batch's megabyte of array parameters into the plan on every call.
    append_pool: PgPool,
}

impl PostgresStore {
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        let mut append_options = PgConnectOptions::from_str(url)?;
        if !url.contains("sslmode") && is_loopback(append_options.get_host()) {
            // libpq's default (`prefer`) would encrypt every batch on a connection that never leaves the machine.
            // An explicit sslmode in the URL is always respected.
            append_options = append_options.ssl_mode(PgSslMode::Disable);
        }
        // Custom plans for this service's own queries: a generic plan cached while the log was small (or never
        // analysed) could keep scanning the whole table as it grows. Planning these few queries is cheap.
        let options = append_options
            .clone()
            .options([("plan_cache_mode", "force_custom_plan")]);
        // Short acquire timeouts, so a database outage turns into a prompt 503 rather than a hung webhook.
        let pool = match PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(3))
            .connect_with(options.clone())
            .await
        {
            Ok(pool) => pool,
            // The pool retries a refused connection until its timeout, then says only that it timed out: one
            // connection tried on its own says why (refused, no such host, a password refused).
            Err(sqlx::Error::PoolTimedOut) => {
                use sqlx::Connection as _;
                let alone = tokio::time::timeout(
                    Duration::from_secs(5),
                    sqlx::PgConnection::connect_with(&options),
                )
                .await;
                return Err(match alone {
                    Ok(Err(cause)) => cause.into(),
                    _ => sqlx::Error::PoolTimedOut.into(),
                });
            }
            Err(error) => return Err(error.into()),
        };
        let append_pool = PgPoolOptions::new()
            .max_connections(APPENDERS as u32)
            .acquire_timeout(Duration::from_secs(3))
            .connect_lazy_with(append_options);
        Ok(Self { pool, append_pool })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Closes both pools; their server processes exit (and flush their statistics).
    pub async fn close(&self) {
        self.append_pool.close().await;
        self.pool.close().await;
    }

    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// One statement: `pidevops_append` takes the writer lock, decides each event exactly as `plan_batch` does,
    /// inserts and returns the outcomes; run outside an explicit transaction it commits as it returns.
    pub(crate) async fn append_batch(
        &self,
        events: &[NewEvent],
    ) -> Result<Vec<BatchOutcome>, StoreError> {
        // Stored (and hashed) to the microsecond Postgres keeps; the content hashes are computed here, before the
        // writer lock, so hashing a large body holds up no other appender.
        let recorded_at = super::chain::stored_time(Utc::now());
        let mut c = AppendColumns::with_capacity(events.len());
        for event in events {
            c.push(event, recorded_at);
        }
        let rows = sqlx::query(
            "SELECT idx, event_id, event_position, duplicate, stream_actual, different_body
               FROM pidevops_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
        )
        .bind(c.id)
        .bind(c.source)
        .bind(c.event_type)
        .bind(c.dedup_key)
        .bind(c.stream)
        .bind(c.stream_version)
        .bind(c.occurred_at)
        .bind(recorded_at)
        .bind(c.action)
        .bind(c.repository)
        .bind(c.number)
        .bind(c.reference)
        .bind(c.content_type)
        .bind(c.body)
        .bind(c.meta)
        .bind(c.body_digest)
        .bind(c.content_hash)
        .fetch_all(&self.append_pool)
        .await?;

        let mut outcomes: Vec<Option<BatchOutcome>> = (0..events.len()).map(|_| None).collect();
        for row in rows {
            let idx: i32 = row.try_get("idx")?;
            let slot = usize::try_from(idx - 1)
                .ok()
                .and_then(|i| outcomes.get_mut(i))
                .ok_or_else(|| corrupt_batch(format!("pidevops_append returned index {idx}")))?;
            let event_id: Option<Uuid> = row.try_get("event_id")?;
            let position: Option<i64> = row.try_get("event_position")?;
            let actual: Option<i64> = row.try_get("stream_actual")?;
            let different: Option<Vec<u8>> = row.try_get("different_body")?;
            let different = super::parse_digest(position.unwrap_or(0), different)?;
            *slot = Some(match (event_id, position, actual, different) {
                (Some(event_id), Some(position), None, Some(stored)) => {
                    BatchOutcome::DifferentBody {
                        event_id,
                        position,
                        stored,
                    }
                }
                (Some(event_id), Some(position), None, None) => BatchOutcome::Appended(Appended {
                    event_id,
                    position,
                    duplicate: row.try_get("duplicate")?,
                }),
                (None, None, Some(actual), None) => {
                    let (stream, expected) =
                        events[idx as usize - 1].stream.clone().ok_or_else(|| {
                            corrupt_batch("a conflict on an event without a stream".into())
                        })?;
                    BatchOutcome::Conflict {
                        stream,
                        expected,
                        actual,
                    }
                }
                _ => {
                    return Err(corrupt_batch(format!(
                        "pidevops_append returned an inconsistent row for {idx}"
                    )))
                }
            });
        }
        outcomes
            .into_iter()
            .map(|o| o.ok_or_else(|| corrupt_batch("pidevops_append skipped an event".into())))
            .collect()
    }
}

/// Column-wise arrays: the whole batch travels as one set of array parameters.
struct AppendColumns<'a> {
    id: Vec<Uuid>,
    source: Vec<&'a str>,
    event_type: Vec<&'a str>,
    dedup_key: Vec<&'a str>,
    stream: Vec<Option<&'a str>>,
    stream_version: Vec<Option<i64>>,
    occurred_at: Vec<DateTime<Utc>>,
    action: Vec<Option<&'a str>>,
    repository: Vec<Option<&'a str>>,
    number: Vec<Option<i64>>,
    reference: Vec<Option<&'a str>>,
    content_type: Vec<&'a str>,
    body: Vec<&'a [u8]>,
    meta: Vec<String>,
    body_digest: Vec<Option<&'a [u8]>>,
    content_hash: Vec<Vec<u8>>,
}

impl<'a> AppendColumns<'a> {
    fn with_capacity(n: usize) -> Self {
        Self {
            id: Vec::with_capacity(n),
            source: Vec::with_capacity(n),
            event_type: Vec::with_capacity(n),
            dedup_key: Vec::with_capacity(n),
            stream: Vec::with_capacity(n),
            stream_version: Vec::with_capacity(n),
            occurred_at: Vec::with_capacity(n),
            action: Vec::with_capacity(n),
            repository: Vec::with_capacity(n),
            number: Vec::with_capacity(n),
            reference: Vec::with_capacity(n),
            content_type: Vec::with_capacity(n),
            body: Vec::with_capacity(n),
            meta: Vec::with_capacity(n),
            body_digest: Vec::with_capacity(n),
            content_hash: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, e: &'a NewEvent, recorded_at: DateTime<Utc>) {
        self.id.push(e.id);
        self.source.push(e.source.as_str());
        self.event_type.push(e.event_type.as_str());
        self.dedup_key.push(&e.dedup_key);
        self.stream.push(e.stream.as_ref().map(|(s, _)| s.as_str()));
        self.stream_version.push(e.stream.as_ref().map(|(_, v)| *v));
        self.occurred_at
            .push(super::chain::stored_time(e.occurred_at));
        self.action.push(e.subject.action.as_deref());
        self.repository.push(e.subject.repository.as_deref());
        self.number.push(e.subject.number);
        self.reference.push(e.subject.reference.as_deref());
        self.content_type.push(&e.content_type);
        self.body.push(&e.body);
        self.meta
            .push(serde_json::to_string(&e.meta).unwrap_or_else(|_| "{}".to_owned()));
        self.body_digest
            .push(e.body_digest.as_ref().map(|d| d.as_slice()));
        self.content_hash
            .push(super::chain::of_new_event(e, recorded_at).to_vec());
    }
}

/// A host whose traffic never leaves this machine: loopback addresses, `localhost`, or a Unix socket directory.
fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host.starts_with('/')
        || host
            .trim_matches(|c| c == '[' || c == ']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn corrupt_batch(reason: String) -> StoreError {
    StoreError::Corrupt {
        position: 0,
        reason,
    }
}

/// How an event id is bound here: a `uuid` column.
pub(crate) fn id_param(id: Uuid) -> Uuid {
    id
}

/// A row of any of the column lists above, which all share this order. By index: by name costs a lookup per
/// column per row, a measurable part of a replay.
pub(crate) fn decode(row: &PgRow) -> Result<StoredEvent, StoreError> {
    let position: i64 = row.try_get(0)?;
    let meta: String = row.try_get(15)?;
    let meta = super::Meta::from_json(meta).map_err(|e| StoreError::Corrupt {
        position,
        reason: format!("meta is not a JSON object: {e}"),
    })?;
    Ok(StoredEvent {
        position,
        id: row.try_get(1)?,
        source: row.try_get(2)?,
        event_type: row.try_get(3)?,
        dedup_key: row.try_get(4)?,
        stream: row.try_get(5)?,
        stream_version: row.try_get(6)?,
        occurred_at: row.try_get(7)?,
        recorded_at: row.try_get(8)?,
        action: row.try_get(9)?,
        repository: row.try_get(10)?,
        number: row.try_get(11)?,
        reference: row.try_get(12)?,
        content_type: row.try_get(13)?,
        body: row.try_get(14)?,
        meta,
    })
}

#[cfg(test)]
mod tests {
    use super::is_loopback;

    #[test]
    fn loopback_hosts_are_recognised() {
        for host in [
            "localhost",
            "127.0.0.1",
            "127.8.9.10",
            "::1",
            "[::1]",
            "/var/run/postgresql",
        ] {
            assert!(is_loopback(host), "{host}");
        }
        for host in [
            "db",
            "postgres.railway.internal",
            "10.0.0.1",
            "2001:db8::1",
            "localhost.example.com",
        ] {
            assert!(!is_loopback(host), "{host}");
        }
    }
}
