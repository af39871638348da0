//! The `projections` row of each projector, `(version, position)`: locked, created, reset and moved by
//! compare-and-set, always in the transaction that applies the batch.

use chrono::Utc;

use super::ProjectorTx;
use crate::eventlog::EventStore;

pub(super) async fn commit(tx: ProjectorTx) -> Result<(), sqlx::Error> {
    match tx {
        ProjectorTx::Postgres(tx) => tx.commit().await,
        ProjectorTx::Sqlite(tx) => tx.commit().await,
    }
}

/// The projector's `(version, position)`, locked until the transaction ends (SQLite: the whole database is,
/// since BEGIN IMMEDIATE, and it has no `FOR UPDATE`: the one statement here that differs).
pub(super) async fn lock_row(
    tx: &mut ProjectorTx,
    name: &str,
) -> Result<Option<(i64, i64)>, sqlx::Error> {
    match tx {
        ProjectorTx::Postgres(tx) => {
            sqlx::query_as("SELECT version, position FROM projections WHERE name = $1 FOR UPDATE")
                .bind(name)
                .fetch_optional(&mut **tx)
                .await
        }
        ProjectorTx::Sqlite(tx) => {
            sqlx::query_as("SELECT version, position FROM projections WHERE name = ?1")
                .bind(name)
                .fetch_optional(&mut **tx)
                .await
        }
    }
}

/// A projector's stored `(version, position)`, if it ever ran.
pub async fn read_row(store: &EventStore, name: &str) -> Result<Option<(i64, i64)>, sqlx::Error> {
    crate::on_store!(store, |pool, backend| {
        sqlx::query_as("SELECT version, position FROM projections WHERE name = $1")
            .bind(name)
            .fetch_optional(pool)
            .await
    })
}

/// The projector's row, locked; created at `(version, 0)` if missing (a concurrent instance may create it
/// first, and then this one reads and locks theirs).
pub(super) async fn lock_or_create_row(
    tx: &mut ProjectorTx,
    name: &str,
    version: i64,
) -> Result<(i64, i64), sqlx::Error> {
    if let Some(row) = lock_row(tx, name).await? {
        return Ok(row);
    }
    insert_row(tx, name, version).await?;
    lock_row(tx, name).await?.ok_or(sqlx::Error::RowNotFound)
}

async fn insert_row(tx: &mut ProjectorTx, name: &str, version: i64) -> Result<(), sqlx::Error> {
    on_tx!(tx, |conn| sqlx::query(
        "INSERT INTO projections (name, version, position, updated_at) VALUES ($1, $2, 0, $3)
         ON CONFLICT (name) DO NOTHING",
    )
    .bind(name)
    .bind(version)
    .bind(Utc::now())
    .execute(conn)
    .await
    .map(|_| ()))
}

/// Sets the row unconditionally (a reset: the caller holds the row's lock).
pub(super) async fn move_row(
    tx: &mut ProjectorTx,
    name: &str,
    version: i64,
    position: i64,
) -> Result<(), sqlx::Error> {
    on_tx!(tx, |conn| sqlx::query(
        "UPDATE projections SET version = $2, position = $3, updated_at = $4 WHERE name = $1",
    )
    .bind(name)
    .bind(version)
    .bind(position)
    .bind(Utc::now())
    .execute(conn)
    .await
    .map(|_| ()))
}

/// Moves the checkpoint from `expected` to `to` only if nobody else moved it (or changed the version) since.
pub(super) async fn compare_and_set(
    tx: &mut ProjectorTx,
    name: &str,
    version: i64,
    expected: i64,
    to: i64,
) -> Result<bool, sqlx::Error> {
    let result = on_tx!(tx, |conn| sqlx::query(
        "UPDATE projections SET position = $4, updated_at = $5
         WHERE name = $1 AND version = $2 AND position = $3",
    )
    .bind(name)
    .bind(version)
    .bind(expected)
    .bind(to)
    .bind(Utc::now())
    .execute(conn)
    .await?
    .rows_affected());
    Ok(result == 1)
}
