//! Setup the benchmark binaries (and the tests' throwaway databases) share; the service itself never uses it.

use anyhow::Context;
use sqlx::{Connection, Executor};

/// `url` with its database name replaced by `name`, query string kept.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}

/// Creates the Postgres database `name` through `admin_url` unless it exists. `name` must already be checked to
/// be a plain identifier (it is spliced into the statement).
pub async fn ensure_database(admin_url: &str, name: &str) -> anyhow::Result<()> {
    let mut admin = sqlx::PgConnection::connect(admin_url)
        .await
        .context("connecting with --admin-url")?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(name)
            .fetch_one(&mut admin)
            .await?;
    if !exists {
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await?;
    }
    Ok(())
}

/// Drops (forcing connections off) and creates the Postgres database `name` through `admin_url`: a run starts
/// from nothing. `name` must already be checked to be a plain identifier.
pub async fn recreate_database(admin_url: &str, name: &str) -> anyhow::Result<()> {
    let mut admin = sqlx::PgConnection::connect(admin_url)
        .await
        .context("connecting with --admin-url")?;
    admin
        .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
        .await?;
    admin
        .execute(format!("CREATE DATABASE {name}").as_str())
        .await?;
    Ok(())
}

/// The benchmark's own database on `admin_url`'s server: checked to be a plain name, created if missing,
/// connected as the service connects, migrated.
pub async fn open(admin_url: &str, database: &str) -> anyhow::Result<crate::eventlog::EventStore> {
    anyhow::ensure!(
        database
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
        "--database must be lower-case letters, digits and '_'"
    );
    ensure_database(admin_url, database).await?;
    let url = crate::config::DatabaseUrl::Postgres(with_database(admin_url, database));
    let store = crate::eventlog::EventStore::connect(&url, 4)
        .await
        .context("connecting to the benchmark database")?;
    store.migrate().await.context("migrating")?;
    Ok(store)
}

/// The reference the replay benchmarks compare against: one `SELECT` of every column a projector receives
/// (`body` too when `with_bodies`), streamed in position order and every column decoded, `meta` parsed. On a
/// connection of the store's own pool: the settings the projector reads with (TLS off on loopback, plan mode),
/// so the reference pays nothing the projector does not. Returns the seconds it took.
pub async fn scan(store: &crate::eventlog::EventStore, with_bodies: bool) -> anyhow::Result<f64> {
    use chrono::{DateTime, Utc};
    use futures::TryStreamExt;
    use sqlx::Row;

    let crate::eventlog::EventStore::Postgres(pg) = store else {
        anyhow::bail!("the benchmark runs on Postgres");
    };
    let mut conn = pg.pool().acquire().await?;
    let started = std::time::Instant::now();
    let body = if with_bodies {
        "body"
    } else {
        "'\\x'::bytea AS body"
    };
    let sql = format!(
        "SELECT position, id, source, event_type, dedup_key, stream, stream_version, occurred_at,
                recorded_at, action, repository, number, reference, content_type, {body}, meta::text AS meta
         FROM events ORDER BY position"
    );
    let mut rows = sqlx::query(&sql).fetch(&mut *conn);
    let mut count = 0u64;
    let mut checksum = 0i64;
    while let Some(row) = rows.try_next().await? {
        let position: i64 = row.try_get("position")?;
        let _: uuid::Uuid = row.try_get("id")?;
        let source: String = row.try_get("source")?;
        let event_type: String = row.try_get("event_type")?;
        let _: String = row.try_get("dedup_key")?;
        let _: Option<String> = row.try_get("stream")?;
        let _: Option<i64> = row.try_get("stream_version")?;
        let _: DateTime<Utc> = row.try_get("occurred_at")?;
        let recorded_at: DateTime<Utc> = row.try_get("recorded_at")?;
        let _: Option<String> = row.try_get("action")?;
        let _: Option<String> = row.try_get("repository")?;
        let _: Option<i64> = row.try_get("number")?;
        let _: Option<String> = row.try_get("reference")?;
        let _: String = row.try_get("content_type")?;
        let body: Vec<u8> = row.try_get("body")?;
        let meta: String = row.try_get("meta")?;
        let _: serde_json::Value = serde_json::from_str(&meta)?;
        checksum = checksum.wrapping_add(
            position
                ^ (source.len() + event_type.len() + body.len()) as i64
                ^ recorded_at.timestamp(),
        );
        count += 1;
    }
    let elapsed = started.elapsed().as_secs_f64();
    anyhow::ensure!(count > 0 && checksum != 0, "the scan read nothing");
    Ok(elapsed)
}

/// Runs `git args` in `cwd` as the benchmarks' own committer; its output, trimmed. Fails with git's error.
pub fn git(cwd: &std::path::Path, args: &[&str]) -> anyhow::Result<String> {
    let out = std::process::Command::new("git")
        .args(args)
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@localhost")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@localhost")
        .current_dir(cwd)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Writes an executable `/bin/sh` script (`set -eu`) at `path`: a benchmark's agent or planner.
pub fn script(path: &std::path::Path, body: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\nset -eu\n{body}\n"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn the_database_name_is_replaced_and_the_query_kept() {
        assert_eq!(
            with_database("postgres://u@h:5432/postgres", "x"),
            "postgres://u@h:5432/x"
        );
        assert_eq!(
            with_database("postgres://u@h/postgres?sslmode=disable", "x"),
            "postgres://u@h/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://u@h", "x"), "postgres://u@h/x");
    }
}
