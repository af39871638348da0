//! `dispatchbench`: what dispatch costs on top of `git worktree add`, and whether a queue drains without idle
//! slots (docs/benchmarks.md, "Dispatch").
//!
//! Setup (not measured): a repository of `--files` files as a local bare remote, a fresh Postgres database
//! (`pidevops_dispatchbench`, recreated each run), the real app (`startup::build`) with dispatch on, and the
//! repository's mirror warmed by one run.
//!
//! 1. **Reference**: `git worktree add` from the warm mirror, alone, `--samples` times (each removed, untimed).
//! 2. **Dispatch latency**: `--samples` tasks created one at a time (approval `auto`, so created in `todo`); for
//!    each, the times of: the `todo` commit, the claim (`task.started`), and the agent's own first instruction
//!    (a bash script whose first line prints bash's own clock, `$EPOCHREALTIME`, into its log: no program is
//!    started to read the time). Claim → agent is the dispatch path (claim, run event, fetch,
//!    worktree, the agent's own repository, prompt, containment, spawn); todo → claim is polling (the projector
//!    and dispatcher intervals). Each sample is taken twice, interleaved: by the app under test (containment as
//!    detected here: `namespaces` with bubblewrap) and by a second app, on its own database and workspaces, whose
//!    agents run uncontained — the containment's cost is the difference. With `--reference network`, the second
//!    app's agents are contained the same way but keep the service's network (`network = "host"`): the difference
//!    is what an agent's own network costs (the namespace, the per-run egress proxy and the bridge). With
//!    `--reference same` the second app is identical to the first (an A/A run): the difference is the benchmark's
//!    own noise, measured the same way.
//! 3. **Drain**: dispatch paused, `--drain` tasks queued, resumed; each agent sleeps `--agent-sleep-ms`. From
//!    the agents' own start and end times: how long a slot stayed free while work waited.
//!
//! `--sandbox-start` measures only what starting a sandbox costs, without the service (and exits): the same
//! bubblewrap argv the dispatcher builds, run `--samples` times per variant, interleaved: the host's network, a
//! network of its own without a bridge, with `pidevops-bridge`, and (`--old-bridge <pidevops>`) with an older
//! `pidevops` binary's `sandbox-bridge` subcommand; last, with `pidevops-bridge` and the run's egress proxy started
//! for each sample as a dispatch starts it (its start counted in that variant's times, and timed alone first, with
//! the gateway's HTTP client it builds). Spawn -> the agent's first instruction, and spawn -> exit. The dispatch
//! path's differences come with a 95 % bootstrap interval, how far chance alone moves them.
//!
//! `--queued N [--budgets]` measures only the dispatcher's tick (the selection up to the claims) with `N` tasks
//! queued, with `[budgets]` set against the same tick without, alternating, in one run (and exits): tick.rs.

// A benchmark's driver reads top to bottom as its docs describe the run: its long setup and measuring
// functions are held to the file limit (tests/it/sizes.rs), not to clippy's function limit.
#![allow(clippy::too_many_lines)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::Parser;

use pidevops::bench::git;
use pidevops::board::Draft;
use pidevops::config::{DatabaseUrl, Env, Settings};
use pidevops::projectors::tasks as task_rows;
use pidevops::tasks::{Column, Links, RepoName, Spec, TaskId};

mod queue;
mod sandbox;
mod tick;

use queue::*;
use sandbox::*;
use tick::*;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "dispatchbench",
    about = "Dispatch overhead against git worktree add, and queue drain"
)]
struct Args {
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    admin_url: String,
    #[arg(long, default_value = "pidevops_dispatchbench")]
    database: String,
    /// Files in the repository.
    #[arg(long, default_value_t = 10_000)]
    files: usize,
    /// Latency samples (reference and dispatch each).
    #[arg(long, default_value_t = 100)]
    samples: usize,
    /// Tasks queued for the drain.
    #[arg(long, default_value_t = 50)]
    drain: usize,
    /// Slots (`dispatch.max_concurrent`, and per repository) for the drain.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// How long each drain agent works (real ones take minutes).
    #[arg(long, default_value_t = 5000)]
    agent_sleep_ms: u64,
    /// The tasks projector's and the dispatcher's interval.
    #[arg(long, default_value_t = 0.05)]
    interval_s: f64,
    /// What the second app's agents run without: `containment` (uncontained) or `network` (contained, on the
    /// service's network): the difference is that part's cost on the dispatch path.
    /// `same`: the second app is identical to the first (an A/A run: the benchmark's own noise).
    #[arg(long, value_enum, default_value_t = Reference::Containment)]
    reference: Reference,
    /// Measure only a sandbox's start, per network and bridge (see the module's documentation), and exit.
    #[arg(long)]
    sandbox_start: bool,
    /// Measure only the dispatcher's tick with this many tasks queued (see tick.rs), and exit.
    #[arg(long)]
    queued: Option<usize>,
    /// With --queued: the tick under test has every `[budgets]` limit set (else it is the reference again: A/A).
    #[arg(long)]
    budgets: bool,
    /// With --queued: ticks timed, of each dispatcher.
    #[arg(long, default_value_t = 200)]
    ticks: usize,
    /// With --queued: repositories the queue is spread over.
    #[arg(long, default_value_t = 5)]
    repos: usize,
    /// With --queued: finished tasks with a row in the usage read model, besides half the queued ones.
    #[arg(long, default_value_t = 20_000)]
    past_tasks: usize,
    /// With --sandbox-start: an older `pidevops` binary whose `sandbox-bridge` subcommand was the bridge.
    #[arg(long)]
    old_bridge: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Reference {
    Containment,
    Network,
    Same,
}

const REPO: &str = "bench/monorepo";

#[tokio::main]
async fn main() -> ExitCode {
    // Warnings (a worktree that could not be reused, say) explain a slow drain; RUST_LOG=info for more.
    pidevops::telemetry::init_tracing(pidevops::config::LogFormat::Pretty);
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dispatchbench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Per dispatch phase, the summary's sum (seconds) and count so far.
fn phase_totals(rendered: &str) -> Vec<(&'static str, (f64, f64))> {
    [
        "select", "claim", "record", "prepare", "launch", "commit", "push",
    ]
    .into_iter()
    .map(|phase| {
        let value = |suffix: &str| -> f64 {
            rendered
                .lines()
                .find(|l| {
                    l.starts_with(&format!(
                        "pidevops_run_phase_seconds_{suffix}{{phase=\"{phase}\"}}"
                    ))
                })
                .and_then(|l| l.rsplit(' ').next()?.parse().ok())
                .unwrap_or(0.0)
        };
        (phase, (value("sum"), value("count")))
    })
    .collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn summary(name: &str, mut ms: Vec<f64>) -> (f64, f64) {
    ms.sort_by(f64::total_cmp);
    let (p50, p99, max) = (
        percentile(&ms, 0.5),
        percentile(&ms, 0.99),
        ms.last().copied().unwrap_or(f64::NAN),
    );
    println!(
        "{name:<44} p50 {p50:>8.1} ms   p99 {p99:>8.1} ms   max {max:>8.1} ms   (n = {})",
        ms.len()
    );
    (p50, p99)
}

/// A 95 % interval of `p`-quantile(a) − `p`-quantile(b) by bootstrap (each side resampled with replacement, 2,000
/// times): how far the sample's difference could move by chance alone.
fn difference_interval(a: &[f64], b: &[f64], p: f64) -> (f64, f64) {
    use rand::Rng as _;
    if a.is_empty() || b.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = rand::rng();
    let mut resample = |v: &[f64]| {
        let mut out: Vec<f64> = (0..v.len())
            .map(|_| v[rng.random_range(0..v.len())])
            .collect();
        out.sort_by(f64::total_cmp);
        percentile(&out, p)
    };
    let mut differences: Vec<f64> = (0..2000).map(|_| resample(a) - resample(b)).collect();
    differences.sort_by(f64::total_cmp);
    (
        percentile(&differences, 0.025),
        percentile(&differences, 0.975),
    )
}

/// bash's `$EPOCHREALTIME` (`seconds.microseconds`, the separator the locale's).
fn epoch_realtime(text: &str) -> Option<DateTime<Utc>> {
    let (seconds, micros) = text.trim().split_once(['.', ','])?;
    DateTime::from_timestamp(seconds.parse().ok()?, micros.parse::<u32>().ok()? * 1000)
}

/// The agent's recorded start (and end) times, in the run directories of `task`.
fn agent_times(root: &Path, task: TaskId) -> Vec<(DateTime<Utc>, Option<DateTime<Utc>>)> {
    let mut times = Vec::new();
    let Ok(runs) = std::fs::read_dir(root.join("runs").join(task.to_string())) else {
        return times;
    };
    // The agent prints its clock: its HOME and TMPDIR are tmpfs of its own, gone with it; its log stays.
    for run in runs.flatten() {
        let Ok(log) = std::fs::read_to_string(run.path().join("agent.log")) else {
            continue;
        };
        let at = |mark: &str| {
            log.lines()
                .find_map(|line| line.strip_prefix(mark))
                .and_then(epoch_realtime)
        };
        if let Some(start) = at("bench-started ") {
            times.push((start, at("bench-ended ")));
        }
    }
    times
}

async fn run(args: Args) -> anyhow::Result<()> {
    let scratch = std::env::temp_dir().join(format!("dispatchbench-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&scratch)?;
    let result = if args.sandbox_start {
        sandbox_start(&args, &scratch)
    } else if let Some(queued) = args.queued {
        queued_tick(&args, &scratch, queued).await
    } else {
        bench(&args, &scratch).await
    };
    let _ = std::fs::remove_dir_all(&scratch);
    result
}
