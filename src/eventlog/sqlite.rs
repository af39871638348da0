//! SQLite backend: the embedded default, so a fresh machine runs with no setup.

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Connection, Row};
use uuid::Uuid;

use super::{plan_batch, BatchOutcome, Bodies, StoreError, StoredEvent};
use crate::domain::NewEvent;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

pub(crate) const COLUMNS: &str =
    "position, id, source, event_type, dedup_key, stream, stream_version, occurred_at, \
     recorded_at, action, repository, number, reference, content_type, body, meta";

/// The same columns without the body, for readers that do not need it (most projectors).
pub(crate) const HEADER_COLUMNS: &str =
    "position, id, source, event_type, dedup_key, stream, stream_version, occurred_at, \
     recorded_at, action, repository, number, reference, content_type, X'' AS body, meta";

/// Only the bodies of one source's streams with a prefix (see the Postgres twin).
const STREAM_BODY_COLUMNS: &str =
    "position, id, source, event_type, dedup_key, stream, stream_version, occurred_at, \
     recorded_at, action, repository, number, reference, content_type, \
     CASE WHEN source = ?3 AND substr(coalesce(stream, ''), 1, length(?4)) = ?4 THEN body ELSE X'' END AS body, \
     meta";

const COLUMN_LISTS: super::ColumnLists = super::ColumnLists {
    all: COLUMNS,
    header: HEADER_COLUMNS,
    stream_bodies: STREAM_BODY_COLUMNS,
};

/// Events after `after` on a caller's connection (a projector's transaction), with the bodies asked for.
pub(crate) async fn read_after_on(
    conn: &mut sqlx::SqliteConnection,
    after: i64,
    limit: i64,
    bodies: Bodies,
) -> Result<Vec<StoredEvent>, StoreError> {
    let (sql, filter) = super::read_after(&COLUMN_LISTS, bodies);
    let mut query = sqlx::query(&sql).bind(after).bind(limit);
    if let Some((source, prefix)) = filter {
        query = query.bind(source).bind(prefix);
    }
    query.fetch_all(conn).await?.iter().map(decode).collect()
}

#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    /// The database file; migrations lock `<file>.migrate.lock` next to it.
    file: std::path::PathBuf,
}

impl SqliteStore {
    /// The file a URL names, `None` for an in-memory database.
    pub fn file_of(url: &str) -> Result<Option<std::path::PathBuf>, StoreError> {
        if url.contains(":memory:") || url.contains("mode=memory") {
            return Ok(None);
        }
        let options = SqliteConnectOptions::from_str(url)?;
        Ok(Some(options.get_filename().to_path_buf()))
    }

    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: a commit is on disk before the webhook hears 2xx, power loss included.
            .synchronous(SqliteSynchronous::Full)
            // A writer waits for the one write lock rather than failing: on a starved machine a commit (FULL:
            // fsync) can hold it past 5 s, and a projector tick then failed with `database is locked`.
            .busy_timeout(Duration::from_secs(30))
            .foreign_keys(true);
        let file = options.get_filename().to_path_buf();
        if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Directory {
                path: dir.display().to_string(),
                source,
            })?;
        }
        // Opening a new file switches it to WAL, and SQLite answers that switch with SQLITE_BUSY at once (the
        // busy timeout does not cover it) while another process is opening or migrating the same file, as a
        // `migrate` and a `serve` started together do. Retried for up to 5 s.
        let mut attempts = 0;
        let pool = loop {
            match SqlitePoolOptions::new()
                .max_connections(max_connections)
                .acquire_timeout(Duration::from_secs(3))
                // A failed COMMIT (SQLITE_FULL, SQLITE_IOERR) can make SQLite roll the transaction back by itself;
                // sqlx's own ROLLBACK then fails and it goes on counting the transaction open, so every later
                // BEGIN on that connection fails ("non-zero transaction depth") long after the disk has room
                // again. An idle connection (already pinged, so any queued rollback has run) that still counts
                // one is closed instead of handed out; the pool opens a fresh one.
                .before_acquire(|conn, _| {
                    Box::pin(async move {
                        let clean = !conn.is_in_transaction();
                        if !clean {
                            tracing::warn!(
                                "discarding a SQLite connection left inside a failed transaction"
                            );
                        }
                        Ok(clean)
                    })
                })
                // A connection coming back inside a transaction whose guard never ran (its task was cancelled
                // between sqlx's BEGIN and the transaction it would have returned) would keep the one write
                // lock until the pool handed it out again: every other writer waited out the busy timeout and
                // failed. The ping runs any rollback already queued; a connection still inside a transaction
                // after it is closed, which rolls it back and lets the lock go at once.
                .after_release(|conn, _| {
                    Box::pin(async move {
                        conn.ping().await?;
                        let clean = !conn.is_in_transaction();
                        if !clean {
                            tracing::warn!(
                                "closing a SQLite connection handed back inside a transaction"
                            );
                        }
                        Ok(clean)
                    })
                })
                .connect_with(options.clone())
                .await
            {
                Err(sqlx::Error::Database(e)) if is_busy(e.as_ref()) && attempts < 50 => {
                    attempts += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => break other?,
            }
        };
        Ok(Self { pool, file })
    }

    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// sqlx takes no lock for SQLite migrations, so two processes starting at once could both try to apply the
    /// same one. An exclusive file lock next to the database serialises them; the second finds nothing to do.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let lock_path = {
            let mut name = self.file.clone().into_os_string();
            name.push(".migrate.lock");
            std::path::PathBuf::from(name)
        };
        let directory_error = |source| StoreError::Directory {
            path: lock_path.display().to_string(),
            source,
        };
        let lock_file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(directory_error)?;
        let lock_file = tokio::task::spawn_blocking(move || lock_file.lock().map(|()| lock_file))
            .await
            .map_err(|e| directory_error(std::io::Error::other(e)))?
            .map_err(directory_error)?;
        let result = MIGRATOR.run(&self.pool).await;
        drop(lock_file);
        result?;
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
        // Hashed before the write lock (chain.rs), stored to the microsecond as on Postgres.
        let recorded_at = super::chain::stored_time(Utc::now());
        let content_hashes: Vec<[u8; 32]> = events
            .iter()
            .map(|e| super::chain::of_new_event(e, recorded_at))
            .collect();
        // IMMEDIATE takes the write lock up front, so the reads below see the state this transaction commits on.
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;

        let mut existing: HashMap<usize, super::KeyHolder> = HashMap::new();
        for (i, event) in events.iter().enumerate() {
            let row = sqlx::query(
                "SELECT id, position, body_digest FROM events WHERE source = ?1 AND dedup_key = ?2",
            )
            .bind(event.source.as_str())
            .bind(&event.dedup_key)
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(row) = row {
                let position: i64 = row.try_get("position")?;
                let id = parse_uuid(position, row.try_get("id")?)?;
                let digest = super::parse_digest(position, row.try_get("body_digest")?)?;
                existing.insert(i, (id, position, digest));
            }
        }
        let mut heads: HashMap<String, i64> = HashMap::new();
        for (stream, _) in events.iter().filter_map(|e| e.stream.as_ref()) {
            if !heads.contains_key(stream) {
                let version: Option<i64> =
                    sqlx::query_scalar("SELECT max(stream_version) FROM events WHERE stream = ?1")
                        .bind(stream)
                        .fetch_one(&mut *tx)
                        .await?;
                heads.insert(stream.clone(), version.unwrap_or(0));
            }
        }
        let head: i64 = sqlx::query_scalar("SELECT coalesce(max(position), 0) FROM events")
            .fetch_one(&mut *tx)
            .await?;
        // The link of the event before this batch's first; none, or one from before the chain: the genesis.
        let previous: Option<Vec<u8>> =
            sqlx::query_scalar("SELECT chain_hash FROM events WHERE position = ?1")
                .bind(head)
                .fetch_optional(&mut *tx)
                .await?
                .flatten();
        let mut chain = previous
            .and_then(|p| <[u8; 32]>::try_from(p.as_slice()).ok())
            .unwrap_or(super::chain::GENESIS);

        let (outcomes, inserts) = plan_batch(
            events,
            |i| existing.get(&i).copied(),
            |stream| heads.get(stream).copied().unwrap_or(0),
            head,
        );

        for (index, position) in inserts {
            let e = &events[index];
            chain = super::chain::link(&chain, position, &content_hashes[index]);
            sqlx::query(
                "INSERT INTO events (position, id, source, event_type, dedup_key, stream, stream_version,
                                     occurred_at, recorded_at, action, repository, number, reference,
                                     content_type, body, meta, body_digest, content_hash, chain_hash)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
            )
            .bind(position)
            .bind(e.id.to_string())
            .bind(e.source.as_str())
            .bind(e.event_type.as_str())
            .bind(&e.dedup_key)
            .bind(e.stream.as_ref().map(|(s, _)| s.as_str()))
            .bind(e.stream.as_ref().map(|(_, v)| *v))
            .bind(super::chain::stored_time(e.occurred_at))
            .bind(recorded_at)
            .bind(e.subject.action.as_deref())
            .bind(e.subject.repository.as_deref())
            .bind(e.subject.number)
            .bind(e.subject.reference.as_deref())
            .bind(&e.content_type)
            .bind(e.body.as_ref())
            .bind(serde_json::to_string(&e.meta).unwrap_or_else(|_| "{}".to_owned()))
            .bind(e.body_digest.as_ref().map(|d| d.as_slice()))
            .bind(content_hashes[index].as_slice())
            .bind(chain.as_slice())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(outcomes)
    }
}

/// SQLITE_BUSY, or one of its extended codes (busy recovery, busy snapshot).
fn is_busy(e: &dyn sqlx::error::DatabaseError) -> bool {
    e.code()
        .and_then(|c| c.parse::<i32>().ok())
        .is_some_and(|c| c & 0xff == 5)
}

fn parse_uuid(position: i64, text: String) -> Result<Uuid, StoreError> {
    Uuid::parse_str(&text).map_err(|e| StoreError::Corrupt {
        position,
        reason: format!("id {text:?} is not a UUID: {e}"),
    })
}

/// How an event id is bound here: text in a TEXT column.
pub(crate) fn id_param(id: Uuid) -> String {
    id.to_string()
}

pub(crate) fn decode(row: &SqliteRow) -> Result<StoredEvent, StoreError> {
    let position: i64 = row.try_get("position")?;
    let meta: String = row.try_get("meta")?;
    let meta = super::Meta::from_json(meta).map_err(|e| StoreError::Corrupt {
        position,
        reason: format!("meta is not a JSON object: {e}"),
    })?;
    let occurred_at: DateTime<Utc> = row.try_get("occurred_at")?;
    Ok(StoredEvent {
        position,
        id: parse_uuid(position, row.try_get("id")?)?,
        source: row.try_get("source")?,
        event_type: row.try_get("event_type")?,
        dedup_key: row.try_get("dedup_key")?,
        stream: row.try_get("stream")?,
        stream_version: row.try_get("stream_version")?,
        occurred_at,
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
