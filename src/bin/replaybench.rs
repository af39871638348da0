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
use clap::Parser;
use sqlx::Executor;

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
    let store = pidevops::bench::open(&args.admin_url, &args.database).await?;
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
            let scan = pidevops::bench::scan(&store, false).await?;
            (scan, replay(&store).await?)
        } else {
            let replay = replay(&store).await?;
            (pidevops::bench::scan(&store, false).await?, replay)
        };
        let (scan_rate, replay_rate) = (head as f64 / scan, head as f64 / replay);
        println!(
            "{round:>5}  {scan_rate:>13.0}  {replay_rate:>15.0}  {:>11.2}",
            replay_rate / scan_rate
        );
    }
    Ok(())
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
