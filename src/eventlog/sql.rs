//! The SQL both backends run, written once with `$N` placeholders (sqlx's SQLite driver binds `$N` by number, as
//! Postgres does). What stays per backend lives in `postgres.rs` / `sqlite.rs`: the append (one function call
//! under an advisory lock against `plan_batch` under BEGIN IMMEDIATE), the column lists that carry or skip bodies
//! (`bytea` and `meta::text` against BLOB and TEXT), how an event id is bound (uuid against text), and the leases
//! (the database's clock against the machine's). Run a statement on either backend with [`crate::on_store!`].

/// Events after a position, in order: `$1` the position, `$2` the page size. Follows a column list.
pub const EVENTS_AFTER: &str = "FROM events WHERE position > $1 ORDER BY position LIMIT $2";

/// One event by id (`$1`). Follows a column list.
pub const EVENT_BY_ID: &str = "FROM events WHERE id = $1";

/// A domain stream's events in version order (`$1` the stream), served by the partial unique index on
/// (stream, stream_version). Follows a column list.
pub const STREAM_EVENTS: &str =
    "FROM events WHERE stream = $1 AND stream IS NOT NULL ORDER BY stream_version";

/// The event stored under a `(source, dedup_key)` (`$1`, `$2`). Follows a column list.
pub const EVENT_BY_KEY: &str = "FROM events WHERE source = $1 AND dedup_key = $2";

pub const COUNT_BY_KEY: &str = "SELECT count(*) FROM events WHERE source = $1 AND dedup_key = $2";

pub const STREAM_VERSION: &str =
    "SELECT coalesce(max(stream_version), 0) FROM events WHERE stream = $1 AND stream IS NOT NULL";

pub const HEAD: &str = "SELECT coalesce(max(position), 0) FROM events";

pub const CHECKPOINT: &str = "SELECT position FROM checkpoints WHERE name = $1";

/// Moves a checkpoint forward, never back (CASE rather than `greatest` / `max`, which the two spell differently).
pub const ADVANCE_CHECKPOINT: &str =
    "INSERT INTO checkpoints (name, position, updated_at) VALUES ($1, $2, $3)
     ON CONFLICT (name) DO UPDATE
        SET position = CASE WHEN excluded.position > checkpoints.position
                            THEN excluded.position ELSE checkpoints.position END,
            updated_at = excluded.updated_at
     RETURNING position";

/// Runs `$body` against whichever backend holds `$store` (an `&EventStore`): the body is written once and compiled
/// once per driver. Inside it `$pool` is the backend's pool and `$backend` its module (`postgres` or `sqlite`) for
/// the few things that differ: `COLUMNS` / `HEADER_COLUMNS`, `decode`, `id_param`.
#[macro_export]
macro_rules! on_store {
    ($store:expr, |$pool:ident, $backend:ident| $body:expr) => {
        match $store {
            $crate::eventlog::EventStore::Postgres(store) => {
                #[allow(unused_imports)]
                use $crate::eventlog::postgres as $backend;
                let $pool = store.pool();
                $body
            }
            $crate::eventlog::EventStore::Sqlite(store) => {
                #[allow(unused_imports)]
                use $crate::eventlog::sqlite as $backend;
                let $pool = store.pool();
                $body
            }
        }
    };
}
