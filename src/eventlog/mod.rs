//! The event log: the only writer of the `events` table, and the source of truth everything else derives from.
//!
//! Appends go through the appender tasks of this process (three on Postgres, one on SQLite). Each drains whatever
//! requests are waiting into one transaction (group commit: one commit for many events, so throughput rises with
//! concurrency) and answers each caller only after that transaction committed. Inside the transaction a global lock
//! serialises writers, so positions become visible in commit order and a reader polling `position > last` never
//! skips an event that commits late.

pub mod chain;
mod envelope;
pub mod export;
mod meta;
pub(crate) mod postgres;
pub mod sql;
pub(crate) mod sqlite;
pub mod url;

mod appender;
mod plan;
mod verify;

pub use appender::{AppendFailure, AppenderStats, EventLog};
pub(crate) use plan::{plan_batch, KeyHolder};

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

pub use chain::ChainedEvent;
pub use envelope::Envelope;
pub use meta::Meta;
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;
pub use verify::{chain_report_text, each_exported, verify_export, Break, ChainReport, ChainWalk};

use crate::domain::{NewEvent, Source};
pub use url::DatabaseUrl;

/// Most events one transaction takes; bounds a batch's latency and memory (GitHub bodies reach 25 MiB).
const MAX_BATCH_EVENTS: usize = 256;
const MAX_BATCH_BYTES: usize = 32 * 1024 * 1024;

/// Which event bodies a reader wants. Bodies are most of the log's bytes (GitHub's reach 25 MiB), so a reader
/// that needs only some of them should not pay for detoasting and shipping the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bodies {
    /// No bodies: every event arrives with an empty one.
    None,
    All,
    /// Only events of `source` whose stream starts with `stream_prefix` (e.g. `pidevops`, `task:`); every other
    /// event arrives with an empty body.
    Streams {
        source: &'static str,
        stream_prefix: &'static str,
    },
    /// Only events of one source (`pidevops`: the service's own records, never a webhook's body).
    Source(&'static str),
}

/// A backend's three column lists: every column, the header without the body, and the body only for the events a
/// [`Bodies::Streams`] or [`Bodies::Source`] reader wants (`$3` the source, `$4` the stream prefix, `""` for any).
pub struct ColumnLists {
    pub all: &'static str,
    pub header: &'static str,
    pub stream_bodies: &'static str,
}

/// The statement reading events after `$1`, at most `$2`, with the bodies asked for, and the source and stream
/// prefix to bind as `$3` and `$4` when the bodies are filtered.
pub fn read_after(
    lists: &ColumnLists,
    bodies: Bodies,
) -> (String, Option<(&'static str, &'static str)>) {
    let (columns, filter) = match bodies {
        Bodies::None => (lists.header, None),
        Bodies::All => (lists.all, None),
        Bodies::Streams {
            source,
            stream_prefix,
        } => (lists.stream_bodies, Some((source, stream_prefix))),
        // Every stream starts with "", and a stream-less event counts as "" (the lists' `coalesce`).
        Bodies::Source(source) => (lists.stream_bodies, Some((source, ""))),
    };
    (format!("SELECT {columns} {}", sql::EVENTS_AFTER), filter)
}

/// What an append returns: the event's place in the log, or the place of the event it duplicates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Appended {
    pub event_id: Uuid,
    pub position: i64,
    pub duplicate: bool,
}

/// An event as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredEvent {
    pub position: i64,
    pub id: Uuid,
    pub source: String,
    pub event_type: String,
    pub dedup_key: String,
    pub stream: Option<String>,
    pub stream_version: Option<i64>,
    pub occurred_at: DateTime<Utc>,
    pub recorded_at: DateTime<Utc>,
    pub action: Option<String>,
    pub repository: Option<String>,
    pub number: Option<i64>,
    pub reference: Option<String>,
    pub content_type: String,
    /// The exact bytes received (for webhooks, the raw request body).
    pub body: Vec<u8>,
    pub meta: Meta,
}

impl StoredEvent {
    /// The record a policy appends when this event moved nothing: `<policy>.ignored`, keyed by this event so it
    /// is written once however often the policy sees it, naming the cause, the reason and `extra` fields.
    pub fn ignored_by(
        &self,
        policy: &str,
        reason: &str,
        extra: serde_json::Map<String, serde_json::Value>,
    ) -> NewEvent {
        let mut body = extra;
        body.insert("cause_event_id".to_owned(), serde_json::json!(self.id));
        body.insert("cause_position".to_owned(), self.position.into());
        body.insert("cause_type".to_owned(), self.event_type.clone().into());
        body.insert("reason".to_owned(), reason.into());
        let mut record = NewEvent::new(
            Source::Pidevops,
            crate::domain::EventType::from_stored(format!("{policy}.ignored")),
            format!("{policy}-ignored:{}", self.id),
            "application/json",
            bytes::Bytes::from(serde_json::Value::Object(body).to_string()),
        );
        record.meta.insert(
            "cause_event_id".to_owned(),
            serde_json::Value::from(self.id.to_string()),
        );
        record
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// The stream moved on since the caller read it; reread and decide again.
    #[error(
        "stream {stream} is at version {actual}, the event expected to write version {expected}"
    )]
    Conflict {
        stream: String,
        expected: i64,
        actual: i64,
    },
    /// A pinned key ([`NewEvent::pinned`]) already stored with another body: the same delivery id carrying
    /// other content is a lie, so it is refused rather than answered as a duplicate. Digests only, never bodies.
    #[error(
        "{provider} delivery {dedup_key} is already stored (position {position}) with a different body: \
         stored sha256 {stored}, received sha256 {received}"
    )]
    DifferentBody {
        provider: Source,
        dedup_key: String,
        event_id: Uuid,
        position: i64,
        stored: String,
        received: String,
    },
    #[error("the event log is unavailable: {0}")]
    Unavailable(String),
    #[error("the event log did not commit within {0:?}")]
    TimedOut(Duration),
    #[error("the event log is shutting down")]
    Closed,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("cannot prepare the embedded database directory {path}: {source}")]
    Directory {
        path: String,
        source: std::io::Error,
    },
    #[error("stored event {position} is corrupt: {reason}")]
    Corrupt { position: i64, reason: String },
}

/// The outcome of one event within a batch, decided under the lock.
#[derive(Debug)]
pub(crate) enum BatchOutcome {
    Appended(Appended),
    /// The key is stored (or inserted earlier in the batch) with another pinned body: the stored event and its
    /// digest.
    DifferentBody {
        event_id: Uuid,
        position: i64,
        stored: [u8; 32],
    },
    Conflict {
        stream: String,
        expected: i64,
        actual: i64,
    },
}

/// A storage backend. A closed set: Postgres in production, SQLite as the embedded default; one conformance suite.
#[derive(Clone, Debug)]
pub enum EventStore {
    Postgres(PostgresStore),
    Sqlite(SqliteStore),
}

impl EventStore {
    /// Connects (creating the embedded database file if needed). Does not migrate.
    pub async fn connect(url: &DatabaseUrl, max_connections: u32) -> Result<Self, StoreError> {
        Ok(match url {
            DatabaseUrl::Postgres(url) => {
                Self::Postgres(PostgresStore::connect(url, max_connections).await?)
            }
            DatabaseUrl::Sqlite(url) => {
                Self::Sqlite(SqliteStore::connect(url, max_connections).await?)
            }
        })
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Self::Postgres(_) => "postgres",
            Self::Sqlite(_) => "sqlite",
        }
    }

    /// How many appender tasks feed this backend. Postgres: several, so batches' transfers overlap the locked
    /// work. SQLite: one, since it has a single writer anyway.
    fn appenders(&self) -> usize {
        match self {
            Self::Postgres(_) => postgres::APPENDERS,
            Self::Sqlite(_) => 1,
        }
    }

    /// Applies pending migrations. Safe when several replicas start at once: Postgres takes an advisory lock,
    /// SQLite a file lock.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        match self {
            Self::Postgres(s) => s.migrate().await,
            Self::Sqlite(s) => s.migrate().await,
        }
    }

    /// A real round trip to the database.
    pub async fn ping(&self) -> Result<(), StoreError> {
        match self {
            Self::Postgres(s) => s.ping().await,
            Self::Sqlite(s) => s.ping().await,
        }
    }

    pub(crate) async fn append_batch(
        &self,
        events: &[NewEvent],
    ) -> Result<Vec<BatchOutcome>, StoreError> {
        match self {
            Self::Postgres(s) => s.append_batch(events).await,
            Self::Sqlite(s) => s.append_batch(events).await,
        }
    }

    /// Events with `position > after`, in position order, at most `limit`.
    pub async fn read_after(&self, after: i64, limit: i64) -> Result<Vec<StoredEvent>, StoreError> {
        crate::on_store!(self, |pool, backend| {
            let sql = format!("SELECT {} {}", backend::COLUMNS, sql::EVENTS_AFTER);
            let rows = sqlx::query(&sql)
                .bind(after)
                .bind(limit)
                .fetch_all(pool)
                .await?;
            rows.iter().map(backend::decode).collect()
        })
    }

    /// Like [`Self::read_after`], with only the bodies asked for (a projector's read, outside its transaction).
    pub async fn read_after_with(
        &self,
        after: i64,
        limit: i64,
        bodies: Bodies,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        crate::on_store!(self, |pool, backend| {
            let mut conn = pool.acquire().await?;
            backend::read_after_on(&mut conn, after, limit, bodies).await
        })
    }

    /// The bodies of the events at `positions` (a follower's picked events), in any order.
    pub async fn bodies_at(&self, positions: &[i64]) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
        let mut bodies = Vec::with_capacity(positions.len());
        for chunk in positions.chunks(sql::MAX_PARAMS) {
            let sql = format!("{}{})", sql::BODIES_AT, sql::list(1, chunk.len()));
            crate::on_store!(self, sql = sql, |pool, _backend| {
                let mut query = sqlx::query_as::<_, (i64, Vec<u8>)>(&sql);
                for position in chunk {
                    query = query.bind(position);
                }
                bodies.extend(query.fetch_all(pool).await?);
            });
        }
        Ok(bodies)
    }

    pub async fn get(&self, id: Uuid) -> Result<Option<StoredEvent>, StoreError> {
        crate::on_store!(self, |pool, backend| {
            let sql = format!("SELECT {} {}", backend::COLUMNS, sql::EVENT_BY_ID);
            let row = sqlx::query(&sql)
                .bind(backend::id_param(id))
                .fetch_optional(pool)
                .await?;
            row.as_ref().map(backend::decode).transpose()
        })
    }

    /// A domain stream's events (`task:T-42`, say), in stream-version order.
    pub async fn read_stream(&self, stream: &str) -> Result<Vec<StoredEvent>, StoreError> {
        crate::on_store!(self, |pool, backend| {
            let sql = format!("SELECT {} {}", backend::COLUMNS, sql::STREAM_EVENTS);
            let rows = sqlx::query(&sql).bind(stream).fetch_all(pool).await?;
            rows.iter().map(backend::decode).collect()
        })
    }

    /// A domain stream's events of one type (a run's `run.egress_refused`, say, without its heartbeats), in
    /// stream-version order.
    pub async fn read_stream_of_type(
        &self,
        stream: &str,
        event_type: &str,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        crate::on_store!(self, |pool, backend| {
            let sql = format!("SELECT {} {}", backend::COLUMNS, sql::STREAM_EVENTS_OF_TYPE);
            let rows = sqlx::query(&sql)
                .bind(stream)
                .bind(event_type)
                .fetch_all(pool)
                .await?;
            rows.iter().map(backend::decode).collect()
        })
    }

    /// The types of `source`'s events about `repository`'s `number` (a merge request's webhooks, its polls), in log
    /// order, at most 100.
    pub async fn types_about(
        &self,
        source: Source,
        repository: &str,
        number: i64,
    ) -> Result<Vec<String>, StoreError> {
        crate::on_store!(self, |pool, backend| Ok(sqlx::query_scalar(
            sql::TYPES_ABOUT
        )
        .bind(source.as_str())
        .bind(repository)
        .bind(number)
        .fetch_all(pool)
        .await?))
    }

    /// A domain stream's current version (its highest `stream_version`), 0 when it has no events.
    pub async fn stream_version(&self, stream: &str) -> Result<i64, StoreError> {
        crate::on_store!(self, |pool, backend| Ok(sqlx::query_scalar(
            sql::STREAM_VERSION
        )
        .bind(stream)
        .fetch_one(pool)
        .await?))
    }

    /// The highest committed position, 0 for an empty log.
    pub async fn head(&self) -> Result<i64, StoreError> {
        crate::on_store!(self, |pool, backend| Ok(sqlx::query_scalar(sql::HEAD)
            .fetch_one(pool)
            .await?))
    }

    /// A consumer's checkpoint: the last position it has fully handled, 0 if it never ran.
    pub async fn checkpoint(&self, name: &str) -> Result<i64, StoreError> {
        let position: Option<i64> = crate::on_store!(self, |pool, backend| {
            sqlx::query_scalar(sql::CHECKPOINT)
                .bind(name)
                .fetch_optional(pool)
                .await?
        });
        Ok(position.unwrap_or(0))
    }

    /// Moves a checkpoint forward to `position`; never back. Returns the checkpoint as stored afterwards.
    pub async fn advance_checkpoint(&self, name: &str, position: i64) -> Result<i64, StoreError> {
        self.move_checkpoint(sql::ADVANCE_CHECKPOINT, name, position)
            .await
    }

    /// [`Self::advance_checkpoint`], committed without waiting for the database to flush it to disk (Postgres's
    /// `synchronous_commit = off`, for this statement only). For a follower's checkpoint: its handlers are
    /// idempotent, so a move lost in a database crash only hands it some events again, and waiting for a flush
    /// after every page of every follower was as many flushes as the appends themselves make.
    pub async fn advance_checkpoint_unflushed(
        &self,
        name: &str,
        position: i64,
    ) -> Result<i64, StoreError> {
        let statement = match self {
            Self::Postgres(_) => sql::ADVANCE_CHECKPOINT_UNFLUSHED_POSTGRES,
            // SQLite has no per-transaction flush switch: the flushed statement.
            Self::Sqlite(_) => sql::ADVANCE_CHECKPOINT,
        };
        self.move_checkpoint(statement, name, position).await
    }

    async fn move_checkpoint(
        &self,
        statement: &'static str,
        name: &str,
        position: i64,
    ) -> Result<i64, StoreError> {
        crate::on_store!(self, |pool, _backend| Ok(sqlx::query_scalar(statement)
            .bind(name)
            .bind(position)
            .bind(chrono::Utc::now())
            .fetch_one(pool)
            .await?))
    }

    /// The event stored under this `(source, dedup_key)`, if any (the unique constraint's index serves it).
    pub async fn find_by_key(
        &self,
        source: Source,
        dedup_key: &str,
    ) -> Result<Option<StoredEvent>, StoreError> {
        crate::on_store!(self, |pool, backend| {
            let sql = format!("SELECT {} {}", backend::COLUMNS, sql::EVENT_BY_KEY);
            let row = sqlx::query(&sql)
                .bind(source.as_str())
                .bind(dedup_key)
                .fetch_optional(pool)
                .await?;
            row.as_ref().map(backend::decode).transpose()
        })
    }

    /// How many events carry this `(source, dedup_key)`; the unique index makes it 0 or 1.
    pub async fn count_by_key(&self, source: Source, dedup_key: &str) -> Result<i64, StoreError> {
        crate::on_store!(self, |pool, backend| Ok(sqlx::query_scalar(
            sql::COUNT_BY_KEY
        )
        .bind(source.as_str())
        .bind(dedup_key)
        .fetch_one(pool)
        .await?))
    }
}

/// A stored `body_digest` column: NULL, or exactly 32 bytes.
pub(crate) fn parse_digest(
    position: i64,
    bytes: Option<Vec<u8>>,
) -> Result<Option<[u8; 32]>, StoreError> {
    bytes
        .map(|b| {
            <[u8; 32]>::try_from(b.as_slice()).map_err(|_| StoreError::Corrupt {
                position,
                reason: format!("body_digest is {} bytes, not 32", b.len()),
            })
        })
        .transpose()
}

/// A fresh, migrated SQLite log in `dir`, for the library's own tests.
#[cfg(test)]
pub(crate) async fn sqlite_log_in(dir: &std::path::Path) -> EventLog {
    let url =
        crate::config::DatabaseUrl::Sqlite(format!("sqlite://{}", dir.join("log.db").display()));
    let store = EventStore::connect(&url, 4).await.expect("sqlite");
    store.migrate().await.expect("migrations");
    let (log, _appender) = EventLog::start(
        store,
        std::time::Duration::from_secs(5),
        tokio_util::sync::CancellationToken::new(),
    );
    log
}

#[cfg(test)]
mod tests;
