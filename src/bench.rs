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
