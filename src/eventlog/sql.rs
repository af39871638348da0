//! The SQL both backends run, written once with `$N` placeholders (sqlx's SQLite driver binds `$N` by number, as
//! Postgres does; a statement of many goes to SQLite as plain `?`, [`positional`]). What stays per backend lives
//! in `postgres.rs` / `sqlite.rs`: the append (one function call under an advisory lock against `plan_batch` under
//! BEGIN IMMEDIATE), the column lists that carry or skip bodies (`bytea` and `meta::text` against BLOB and TEXT),
//! how an event id is bound (uuid against text), and the leases (the database's clock against the machine's). Run a
//! statement on either backend with [`crate::on_store!`] (in a projector's transaction, `on_tx!`); a batch of rows
//! goes in one multi-row statement per [`rows_per_statement`] rows ([`values_rows`], [`list`]) rather than in
//! Postgres arrays, which SQLite lacks (the one exception, for speed: the tasks projector's batch writes on
//! Postgres, `projectors/tasks/write.rs`).

/// Events after a position, in order: `$1` the position, `$2` the page size. Follows a column list.
pub const EVENTS_AFTER: &str = "FROM events WHERE position > $1 ORDER BY position LIMIT $2";

/// The bodies of events at some positions (`$1, …`: at most a follower's page). Follows `WHERE position IN (`.
pub const BODIES_AT: &str = "SELECT position, body FROM events WHERE position IN (";

/// One event by id (`$1`). Follows a column list.
pub const EVENT_BY_ID: &str = "FROM events WHERE id = $1";

/// A domain stream's events in version order (`$1` the stream), served by the partial unique index on
/// (stream, stream_version). Follows a column list.
pub const STREAM_EVENTS: &str =
    "FROM events WHERE stream = $1 AND stream IS NOT NULL ORDER BY stream_version";

/// A domain stream's events of one type (`$1` the stream, `$2` the type), in stream-version order. Follows a
/// column list.
pub const STREAM_EVENTS_OF_TYPE: &str = "FROM events WHERE stream = $1 AND stream IS NOT NULL \
     AND event_type = $2 ORDER BY stream_version";

/// The event stored under a `(source, dedup_key)` (`$1`, `$2`). Follows a column list.
pub const EVENT_BY_KEY: &str = "FROM events WHERE source = $1 AND dedup_key = $2";

/// The types of a source's events about one subject (`$1` the source, `$2` the repository, `$3` the number),
/// served by the partial index on (repository, number), in log order, at most 100 (a subject's terminal news is
/// among its first hundred events, and a busy one must not make the query unbounded).
pub const TYPES_ABOUT: &str =
    "SELECT event_type FROM events WHERE repository = $2 AND number = $3 \
     AND source = $1 ORDER BY position LIMIT 100";

pub const COUNT_BY_KEY: &str = "SELECT count(*) FROM events WHERE source = $1 AND dedup_key = $2";

pub const STREAM_VERSION: &str =
    "SELECT coalesce(max(stream_version), 0) FROM events WHERE stream = $1 AND stream IS NOT NULL";

pub const HEAD: &str = "SELECT coalesce(max(position), 0) FROM events";

pub const CHECKPOINT: &str = "SELECT position FROM checkpoints WHERE name = $1";

/// What a checkpoint's insert does when the row exists: it moves forward, never back (CASE rather than `greatest`
/// / `max`, which the two spell differently). A macro so the statements below are `concat!`-ed constants.
macro_rules! checkpoint_moves_forward {
    () => {
        "ON CONFLICT (name) DO UPDATE
            SET position = CASE WHEN excluded.position > checkpoints.position
                                THEN excluded.position ELSE checkpoints.position END,
                updated_at = excluded.updated_at
         RETURNING position"
    };
}

/// Moves a checkpoint (`$1` the name, `$2` the position, `$3` the time) forward, never back.
pub const ADVANCE_CHECKPOINT: &str = concat!(
    "INSERT INTO checkpoints (name, position, updated_at) VALUES ($1, $2, $3) ",
    checkpoint_moves_forward!()
);

/// [`ADVANCE_CHECKPOINT`] committed without waiting for the WAL's flush, Postgres only (SQLite has no such switch):
/// `set_config(…, true)` holds for the statement's own transaction, so one round trip does it (`SET LOCAL` needs a
/// transaction of four). Here rather than in `postgres.rs`, beside the move it repeats.
pub const ADVANCE_CHECKPOINT_UNFLUSHED_POSTGRES: &str = concat!(
    "INSERT INTO checkpoints (name, position, updated_at) \
     SELECT $1::text, $2::bigint, $3::timestamptz \
     FROM (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed ",
    checkpoint_moves_forward!()
);

/// Runs `$body` against whichever backend holds `$store` (an `&EventStore`): the body is written once and compiled
/// once per driver. Inside it `$pool` is the backend's pool and `$backend` its module (`postgres` or `sqlite`) for
/// the few things that differ: `COLUMNS` / `HEADER_COLUMNS`, `decode`, `id_param`. With `sql = $statement` (a
/// statement of many placeholders: [`values_rows`], [`list`]), SQLite gets it through [`positional`].
#[macro_export]
macro_rules! on_store {
    ($store:expr, sql = $statement:ident, |$pool:ident, $backend:ident| $body:expr) => {
        $crate::on_store!(@arms $store, |$pool, $backend|
            [let $statement = $crate::eventlog::sql::positional(&$statement)] $body)
    };
    ($store:expr, |$pool:ident, $backend:ident| $body:expr) => {
        $crate::on_store!(@arms $store, |$pool, $backend| [] $body)
    };
    // `$sqlite`: a statement run on SQLite only, before the body.
    (@arms $store:expr, |$pool:ident, $backend:ident| [$($sqlite:stmt)?] $body:expr) => {
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
                $($sqlite)?
                $body
            }
        }
    };
}

/// The most parameters one statement binds: SQLite's limit (32,766 since 3.32) is the lower of the two (Postgres
/// takes 65,535). Multi-row statements split their rows into chunks of [`rows_per_statement`].
pub const MAX_PARAMS: usize = 32_766;

/// How many rows of `columns` values fit in one statement.
pub fn rows_per_statement(columns: usize) -> usize {
    (MAX_PARAMS / columns.max(1)).max(1)
}

/// `($1, $2), ($3, $4)` for `rows` rows of `columns` values: the `VALUES` list of a multi-row insert, the same text
/// on both backends.
pub fn values_rows(rows: usize, columns: usize) -> String {
    let mut out = String::with_capacity(rows * columns * 7);
    for row in 0..rows {
        if row > 0 {
            out.push_str(", ");
        }
        out.push('(');
        out.push_str(&list(row * columns + 1, columns));
        out.push(')');
    }
    out
}

/// `$first, …` for `count` placeholders: an `IN (…)` list, the same text on both backends (Postgres's `= ANY($1)`
/// takes an array SQLite does not have).
pub fn list(first: usize, count: usize) -> String {
    (first..first + count)
        .map(|n| format!("${n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `statement` as SQLite should run it: `$1, $2, …`, each once and in that order, become plain `?`. SQLite keeps
/// `$N` (and `?N`) placeholders as names in a list it scans linearly, when it parses a statement and again for each
/// parameter's name sqlx asks, so n of them cost O(n²): one `INSERT` of 30,000 one-column rows took 2.89 s with
/// `$N`, 0.024 s with `?` (docs/benchmarks.md). Plain `?` are numbered as they come and listed nowhere. Any other
/// statement (a number repeated, out of order, or none) is returned as it is: still right, only slower. Text
/// inside single quotes is never touched.
pub fn positional(statement: &str) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    let bytes = statement.as_bytes();
    let mut out = String::with_capacity(statement.len());
    let (mut next, mut copied, mut i) = (1_usize, 0, 0);
    let mut quoted = false;
    while let Some(&b) = bytes.get(i) {
        i += 1;
        match b {
            b'\'' => quoted = !quoted,
            b'$' if !quoted => {
                let digits = bytes[i..].iter().take_while(|c| c.is_ascii_digit()).count();
                if digits == 0 {
                    continue;
                }
                if statement[i..i + digits].parse::<usize>().ok() != Some(next) {
                    return Cow::Borrowed(statement);
                }
                out.push_str(&statement[copied..i - 1]);
                out.push('?');
                next += 1;
                i += digits;
                copied = i;
            }
            _ => {}
        }
    }
    if next == 1 {
        return Cow::Borrowed(statement);
    }
    out.push_str(&statement[copied..]);
    Cow::Owned(out)
}

#[cfg(test)]
mod placeholder_tests {
    use super::*;

    #[test]
    fn numbered_placeholders_in_order_become_plain_ones() {
        assert_eq!(
            positional("INSERT INTO t VALUES ($1, $2), ($3, $4) ON CONFLICT DO NOTHING"),
            "INSERT INTO t VALUES (?, ?), (?, ?) ON CONFLICT DO NOTHING"
        );
        let many = format!("SELECT 1 WHERE x IN ({})", list(1, 12));
        assert_eq!(
            positional(&many),
            format!("SELECT 1 WHERE x IN ({})", ["?"; 12].join(", "))
        );
        // Quoted text is left alone, placeholders after it still counted.
        assert_eq!(
            positional("SELECT '$2 it''s', json_extract(m, '$.a') WHERE a = $1 AND b = $2"),
            "SELECT '$2 it''s', json_extract(m, '$.a') WHERE a = ? AND b = ?"
        );
    }

    #[test]
    fn any_other_numbering_is_left_as_it_is() {
        for statement in [
            "SELECT $2, $1",
            "SELECT $1 WHERE a = $1",
            "SELECT $1, $3",
            "SELECT 1",
            "SELECT '$1'",
            "SELECT $x, $",
        ] {
            assert!(
                matches!(positional(statement), std::borrow::Cow::Borrowed(s) if s == statement),
                "{statement}"
            );
        }
    }

    #[test]
    fn values_rows_number_every_value_once_in_order() {
        assert_eq!(values_rows(1, 1), "($1)");
        assert_eq!(values_rows(2, 3), "($1, $2, $3), ($4, $5, $6)");
        assert_eq!(values_rows(0, 3), "");
    }

    #[test]
    fn list_starts_where_asked() {
        assert_eq!(list(1, 3), "$1, $2, $3");
        assert_eq!(list(4, 1), "$4");
        assert_eq!(list(2, 0), "");
    }

    #[test]
    fn a_full_statement_stays_within_both_backends_limits() {
        for columns in [1, 4, 18, 40] {
            let rows = rows_per_statement(columns);
            assert!(rows * columns <= MAX_PARAMS, "{columns} columns");
            assert!(
                rows * columns > MAX_PARAMS - columns,
                "{columns} columns: room left unused"
            );
        }
        assert_eq!(rows_per_statement(0), MAX_PARAMS);
    }
}
