//! `usagebench`: how fast `replay usage` rebuilds the usage read model (`usage_daily`, `usage_tasks`), against a
//! plain `SELECT` scan of the same rows with their bodies, on the same database in the same run
//! (docs/benchmarks.md, "Usage roll-up").
//!
//! It fills a throwaway Postgres database (`pidevops_usagebench`) with a month of agent runs as the dispatcher
//! records them: each run's stream `run:<id>` holds `run.started`, a few `run.heartbeat`s and one outcome
//! (`run.succeeded`, `run.failed` or `run.proposed`) carrying what the run spent, over a dozen repositories and
//! six profiles, some outcomes with no usage. Every body is a real `RunEvent`; the log is the first `--events`
//! events of the month in time order (the runs still going at the cut have no outcome yet). Inserted by SQL in
//! bulk: setup, not measured. Then for each round, alternating which goes first, it times
//! (a) the reference: one `SELECT` of every column a projector receives, bodies included, streamed and decoded;
//! (b) the real `Projection::rebuild` that `pidevops replay usage` runs, from reset to the head.
//! At the end it checks every row of the rebuilt read model against what was generated.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use chrono::{DateTime, Duration, TimeZone, Utc};
use clap::Parser;
use sqlx::{Executor, Row};
use uuid::Uuid;

use pidevops::domain::runs::{self, FailureKind, Proposal, RunEvent};
use pidevops::domain::usage::{RunUsage, Usage};
use pidevops::eventlog::EventStore;
use pidevops::projectors::usage::{day_of, UsageProjector};
use pidevops::projectors::{Projection, REPLAY_BATCH};
use pidevops::tasks::plan::{PlanDocument, PlanLimits};
use pidevops::tasks::{AttemptReport, RunId, Spec, TaskId};

mod expected;
mod generate;
mod log;

use expected::*;
use generate::*;
use log::*;

/// The target: the rebuild's rate at least this share of the scan's (docs/benchmarks.md).
const TARGET: f64 = 0.30;
const MINUTE_MS: i64 = 60_000;
const DAY_MS: i64 = 24 * 60 * MINUTE_MS;
/// The month the runs fall in.
const DAYS: i64 = 30;

#[derive(Parser, Debug)]
#[command(
    name = "usagebench",
    about = "Times `replay usage` against a raw SELECT scan of the same rows"
)]
struct Args {
    /// A Postgres URL whose user may create databases; the benchmark uses its own database on that server.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    admin_url: String,
    /// The database to create and fill (refilled when it holds a different number of events).
    #[arg(long, default_value = "pidevops_usagebench")]
    database: String,
    #[arg(long, default_value_t = 1_000_000)]
    events: usize,
    #[arg(long, default_value_t = 5)]
    rounds: u32,
    /// Events per rebuild transaction (default: what `pidevops replay` uses).
    #[arg(long, default_value_t = REPLAY_BATCH)]
    batch: i64,
    /// The generator's seed: the same seed and --events make the same log.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// The allocator `pidevops` ships with (see `src/main.rs`), so the rebuild is measured as `replay` runs it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("usagebench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<bool> {
    let started = Instant::now();
    let log = Log::generate(args.events, args.seed)?;
    eprintln!(
        "generated {} events of {} runs over {} tasks ({} outcomes, {} with usage) in {:.1} s",
        log.events.len(),
        log.runs.len(),
        log.tasks,
        log.outcomes,
        log.expected.total.runs,
        started.elapsed().as_secs_f64()
    );
    let store = pidevops::bench::open(&args.admin_url, &args.database).await?;
    if store.head().await? != args.events as i64 || !log.matches(&store).await? {
        eprintln!("filling {} …", args.database);
        log.fill(&store).await?;
    }
    let head = store.head().await?;
    eprintln!("{head} events in {}", args.database);

    println!("round  scan events/s  rebuild events/s  rebuild/scan");
    let mut ratios = Vec::new();
    for round in 1..=args.rounds {
        let (scan, rebuild) = if round % 2 == 1 {
            let scan = pidevops::bench::scan(&store, true).await?;
            (scan, rebuild(&store, args.batch).await?)
        } else {
            let rebuild = rebuild(&store, args.batch).await?;
            (pidevops::bench::scan(&store, true).await?, rebuild)
        };
        let (scan_rate, rebuild_rate) = (head as f64 / scan, head as f64 / rebuild);
        let ratio = rebuild_rate / scan_rate;
        ratios.push(ratio);
        println!("{round:>5}  {scan_rate:>13.0}  {rebuild_rate:>16.0}  {ratio:>12.2}");
    }
    log.expected.check(&store).await?;
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    let met = median >= TARGET;
    println!(
        "median rebuild/scan {median:.2} over {} rounds (lowest {:.2}, highest {:.2}); target >= {TARGET:.2}: {}",
        ratios.len(),
        ratios[0],
        ratios[ratios.len() - 1],
        if met { "met" } else { "NOT met" }
    );
    Ok(met)
}

/// What `pidevops replay usage` does: reset, then batches of REPLAY_BATCH to the head.
async fn rebuild(store: &EventStore, batch: i64) -> anyhow::Result<f64> {
    let projection = Projection::with_batch(store.clone(), Arc::new(UsageProjector), batch);
    let started = Instant::now();
    let done = projection.rebuild(|_| {}).await?;
    let elapsed = started.elapsed().as_secs_f64();
    anyhow::ensure!(done.events > 0, "the rebuild applied nothing");
    Ok(elapsed)
}
