//! `replaybench`: how fast `replay sources` rebuilds its read model, against a plain `SELECT` scan of the same
//! rows, on the same database in the same run (docs/benchmarks.md).
//!
//! It fills a throwaway Postgres database (`pidevops_replaybench`, created if missing) with `--events` events of
//! mixed sources and types (inserted by SQL in bulk: setup, not measured), then for each round times
//! (a) the reference: one `SELECT` of the columns a projector receives, streamed and decoded, every row touched;
//! (b) the real `Projection::rebuild` that `pidevops replay sources` runs, from reset to the head.
//! It prints both rates and their ratio per round.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::Parser;
use futures::TryStreamExt;
use sqlx::{Executor, Row};

use pidevops::eventlog::EventStore;
use pidevops::projectors::sources::SourcesProjector;
use pidevops::projectors::{Projection, REPLAY_BATCH};

#[derive(Parser, Debug)]
#[command(
    name = "replaybench",
    about = "Times `replay sources` against a raw SELECT scan of the same rows"
)]
struct Args {
    /// A Postgres URL whose user may create databases; the benchmark uses its own database on that server.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    admin_url: String,
    /// The database to create and fill (dropped and refilled when it holds a different number of events).
    #[arg(long, default_value = "pidevops_replaybench")]
    database: String,
    #[arg(long, default_value_t = 1_000_000)]
    events: i64,
    /// Bytes of body per event (a replay of `sources` never reads them; the scan does not either).
    #[arg(long, default_value_t = 512)]
    body_bytes: i32,
    #[arg(long, default_value_t = 3)]
    rounds: u32,
}

/// The allocator `pidevops` ships with (see `src/main.rs`), so this measures what ships.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("replaybench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.database
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
        "--database must be lower-case letters, digits and '_'"
    );
    let url = pidevops::bench::with_database(&args.admin_url, &args.database);
    pidevops::bench::ensure_database(&args.admin_url, &args.database).await?;
    let store = EventStore::connect(&pidevops::config::DatabaseUrl::Postgres(url.clone()), 4)
        .await
        .context("connecting to the benchmark database")?;
    store.migrate().await.context("migrating")?;
    let head = store.head().await?;
    if head != args.events {
        eprintln!("filling {} with {} events …", args.database, args.events);
        fill(&store, args.events, args.body_bytes).await?;
    }
    let head = store.head().await?;
    eprintln!("{head} events in {}", args.database);

    println!("round  scan events/s  replay events/s  replay/scan");
    for round in 1..=args.rounds {
        let (scan, replay) = if round % 2 == 1 {
            let scan = scan(&store).await?;
            (scan, replay(&store).await?)
        } else {
            let replay = replay(&store).await?;
            (scan(&store).await?, replay)
        };
        let (scan_rate, replay_rate) = (head as f64 / scan, head as f64 / replay);
        println!(
            "{round:>5}  {scan_rate:>13.0}  {replay_rate:>15.0}  {:>11.2}",
            replay_rate / scan_rate
        );
    }
    Ok(())
}

/// The reference: every row's projector-visible columns, streamed by one query and decoded.
/// On a connection of the store's own pool: the same settings (TLS off on loopback, plan mode) the projector reads
/// with, so the reference is not slowed by an encryption the projector does not pay.
async fn scan(store: &EventStore) -> anyhow::Result<f64> {
    let EventStore::Postgres(pg) = store else {
        anyhow::bail!("the benchmark runs on Postgres");
    };
    let mut conn = pg.pool().acquire().await?;
    let started = Instant::now();
    let mut rows = sqlx::query(
        "SELECT position, id, source, event_type, dedup_key, stream, stream_version, occurred_at,
                recorded_at, action, repository, number, reference, content_type, meta::text AS meta
         FROM events ORDER BY position",
    )
    .fetch(&mut *conn);
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
        let meta: String = row.try_get("meta")?;
        let _: serde_json::Value = serde_json::from_str(&meta)?;
        checksum = checksum.wrapping_add(
            position ^ (source.len() + event_type.len()) as i64 ^ recorded_at.timestamp(),
        );
        count += 1;
    }
    let elapsed = started.elapsed().as_secs_f64();
    anyhow::ensure!(count > 0 && checksum != 0, "the scan read nothing");
    Ok(elapsed)
}

/// What `pidevops replay sources` does: reset, then batches of REPLAY_BATCH to the head.
async fn replay(store: &EventStore) -> anyhow::Result<f64> {
    let projection =
        Projection::with_batch(store.clone(), Arc::new(SourcesProjector), REPLAY_BATCH);
    let started = Instant::now();
    let done = projection.rebuild(|_| {}).await?;
    let elapsed = started.elapsed().as_secs_f64();
    anyhow::ensure!(done.events > 0, "the replay applied nothing");
    Ok(elapsed)
}

/// Bulk setup by SQL: six event types over four sources, one millisecond apart.
async fn fill(store: &EventStore, events: i64, body_bytes: i32) -> anyhow::Result<()> {
    let EventStore::Postgres(pg) = store else {
        anyhow::bail!("replaybench runs on Postgres");
    };
    let mut conn = pg.pool().acquire().await?;
    conn.execute("TRUNCATE events, projections, source_activity, checkpoints")
        .await
        .context("emptying the benchmark database (it is a throwaway)")?;
    let started = Instant::now();
    let chunk = 100_000i64;
    let mut from = 1i64;
    while from <= events {
        let to = (from + chunk - 1).min(events);
        sqlx::query(
            "INSERT INTO events (position, id, source, event_type, dedup_key, occurred_at, recorded_at,
                                 action, content_type, body)
             SELECT n, gen_random_uuid(),
                    (ARRAY['github','github','github','linear','telegram','pidevops'])[1 + n % 6],
                    (ARRAY['github.pull_request.opened','github.push','github.issues.labeled',
                           'linear.Issue.update','telegram.message','pidevops.task.created'])[1 + n % 6],
                    'bench-' || n,
                    timestamptz '2026-01-01' + n * interval '1 millisecond',
                    timestamptz '2026-01-01' + n * interval '1 millisecond',
                    'opened', 'application/json', convert_to(repeat('x', $3), 'UTF8')
             FROM generate_series($1::bigint, $2::bigint) AS n",
        )
        .bind(from)
        .bind(to)
        .bind(body_bytes)
        .execute(&mut *conn)
        .await
        .with_context(|| format!("inserting events {from}..={to}"))?;
        from = to + 1;
    }
    conn.execute("VACUUM ANALYZE events").await?;
    eprintln!("filled in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
