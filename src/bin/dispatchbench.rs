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

// A benchmark's driver reads top to bottom as its docs describe the run: its long setup and measuring
// functions are held to the file limit (tests/it/sizes.rs), not to clippy's function limit.
#![allow(clippy::too_many_lines)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::Parser;

use pidevops::board::Draft;
use pidevops::config::{DatabaseUrl, Env, Settings};
use pidevops::projectors::tasks as task_rows;
use pidevops::tasks::{Column, Links, RepoName, Spec, TaskId};

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

fn git(cwd: &Path, args: &[&str]) -> anyhow::Result<String> {
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
    } else {
        bench(&args, &scratch).await
    };
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

async fn bench(args: &Args, dir: &Path) -> anyhow::Result<()> {
    // The repository: `--files` files in 100 directories, one commit, as a bare remote.
    let started = Instant::now();
    let seed = dir.join("seed");
    std::fs::create_dir(&seed)?;
    git(&seed, &["init", "--quiet", "--initial-branch=main"])?;
    for i in 0..args.files {
        let sub = seed.join(format!("src/m{:02}", i % 100));
        std::fs::create_dir_all(&sub)?;
        std::fs::write(
            sub.join(format!("f{i}.rs")),
            format!("pub fn f{i}() -> usize {{ {i} }}\n"),
        )?;
    }
    git(&seed, &["add", "."])?;
    git(&seed, &["commit", "--quiet", "-m", "seed"])?;
    git(dir, &["clone", "--quiet", "--bare", "seed", "remote.git"])?;
    let remote = format!("file://{}", dir.join("remote.git").display());
    println!(
        "repository: {} files, set up in {:.1} s",
        args.files,
        started.elapsed().as_secs_f64()
    );

    // A fresh database: earlier runs' tasks would be dispatched too.
    anyhow::ensure!(
        args.database
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
        "--database must be lower-case letters, digits and '_'"
    );
    pidevops::bench::recreate_database(&args.admin_url, &args.database).await?;
    let database = DatabaseUrl::Postgres(pidevops::bench::with_database(
        &args.admin_url,
        &args.database,
    ));

    let agent = dir.join("agent.sh");
    std::fs::write(
        &agent,
        format!(
            "#!/bin/bash\nprintf 'bench-started %s\\n' \"$EPOCHREALTIME\"\nsleep $(cat {sleep})\necho x > CHANGES.md\n\
             printf 'bench-ended %s\\n' \"$EPOCHREALTIME\"\n",
            sleep = dir.join("sleep").display()
        ),
    )?;
    // Latency samples finish at once; the drain's agents work for --agent-sleep-ms.
    std::fs::write(dir.join("sleep"), "0")?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755))?;
    }
    let root = dir.join("workspaces");
    let path = std::env::var("PATH").unwrap_or_default();
    // The reference app's agents run uncontained: its `bwrap` setting is pinned to "nothing here".
    const UNCONTAINED: &str = "dispatchbench-uncontained";
    pidevops::dispatch::sandbox::pin(
        UNCONTAINED,
        Some(path.as_str()),
        pidevops::dispatch::sandbox::Containment::None {
            why: "dispatchbench's uncontained reference".into(),
        },
    );
    // The sandbox's bridge, built beside this one.
    pidevops::dispatch::egress::pin_bridge_program(bridge_beside()?);
    let settings_for = |database: DatabaseUrl,
                        root: &Path,
                        bwrap: &str,
                        network: &str|
     -> anyhow::Result<Settings> {
        let file: pidevops::config::FileConfig = format!(
            r#"
            [board]
            approval = "auto"
            [dispatch]
            agent = "bench"
            max_concurrent = {c}
            per_repo = {c}
            heartbeat_s = 5
            bwrap = "{bwrap}"
            containment = "best-effort"
            readable = ["{sleep}"]
            [agents.bench]
            command = ["{agent}", "{{prompt_file}}"]
            network = "{network}"
            [repos."{REPO}"]
            url = "{remote}"
            "#,
            c = args.concurrency,
            agent = agent.display(),
            sleep = dir.join("sleep").display(),
        )
        .parse()
        .map_err(|e| anyhow::anyhow!("the benchmark's pidevops.toml: {e}"))?;
        let mut settings = Settings::for_tests(database);
        settings.file = file;
        settings.workspace_root = root.to_owned();
        settings.projector_interval = Duration::from_secs_f64(args.interval_s);
        settings.env = Env::from_pairs([("PATH", path.as_str())]);
        Ok(settings)
    };
    let app = pidevops::startup::build(settings_for(database, &root, "bwrap", "proxy")?).await?;
    let state = app.state().clone();
    let shutdown = app.shutdown_token();
    let server = tokio::spawn(app.run());
    let store = state.log.store().clone();
    let board = state.board.clone();
    let reference_db = format!("{}_uncontained", args.database);
    pidevops::bench::recreate_database(&args.admin_url, &reference_db).await?;
    let plain_root = dir.join("workspaces-uncontained");
    let plain_app = pidevops::startup::build(settings_for(
        DatabaseUrl::Postgres(pidevops::bench::with_database(
            &args.admin_url,
            &reference_db,
        )),
        &plain_root,
        match args.reference {
            Reference::Containment => UNCONTAINED,
            Reference::Network | Reference::Same => "bwrap",
        },
        match args.reference {
            Reference::Containment | Reference::Same => "proxy",
            Reference::Network => "host",
        },
    )?)
    .await?;
    let plain_state = plain_app.state().clone();
    let plain_shutdown = plain_app.shutdown_token();
    let plain_server = tokio::spawn(plain_app.run());
    println!(
        "containment under test: {} with network = \"proxy\"; reference: {}",
        pidevops::dispatch::sandbox::detect_cached("bwrap", Some(path.as_str())).kind(),
        match args.reference {
            Reference::Containment => format!(
                "{} (uncontained)",
                pidevops::dispatch::sandbox::detect_cached(UNCONTAINED, Some(path.as_str())).kind()
            ),
            Reference::Network => "the same containment with network = \"host\"".to_owned(),
            Reference::Same => "an identical app (A/A: the benchmark's noise)".to_owned(),
        }
    );
    let repo: RepoName = REPO.parse()?;
    let mut number = 0;
    let mut create_on = |board: &pidevops::board::Board| {
        number += 1;
        let draft = Draft::new(
            repo.clone(),
            Spec::new(format!("Bench task {number}"), "", "").expect("a valid spec"),
            Links::default(),
        );
        let board = board.clone();
        async move {
            let (outcome, _) = board
                .create(
                    draft,
                    &format!("bench:{}", uuid::Uuid::now_v7()),
                    "api",
                    None,
                )
                .await?;
            anyhow::Ok((outcome.task.id(), Utc::now()))
        }
    };
    let wait_for = |what: &'static str, limit: Duration| {
        let deadline = Instant::now() + limit;
        move || {
            anyhow::ensure!(Instant::now() < deadline, "timed out waiting for {what}");
            Ok(())
        }
    };

    // Warm-up: the first run of each app clones its mirror.
    for (board, root) in [(&board, &root), (&plain_state.board, &plain_root)] {
        let (warm, _) = create_on(board).await?;
        let check = wait_for("the warm-up run", Duration::from_secs(120));
        while agent_times(root, warm).is_empty() {
            check()?;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let mirror = root.join("mirrors/bench/monorepo.git");
    let git_dir = format!("--git-dir={}", mirror.display());
    let base = git(dir, &[&git_dir, "rev-parse", "refs/remotes/origin/main"])?;

    // 1 and 2, interleaved so both see the same machine: the reference (`git worktree add` alone, the way
    // workspace/worktree.rs calls it, kept until the end like a run's worktree is), then one task dispatched.
    let (mut reference, mut total, mut polling, mut pipeline) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut uncontained = Vec::new();
    let mut reference_paths = Vec::new();
    for i in 0..args.samples {
        let path = dir.join(format!("ref-{i}"));
        let path_str = path.display().to_string();
        let branch = format!("bench/ref-{i}");
        let t = Instant::now();
        git(
            dir,
            &[
                &git_dir,
                "-c",
                "core.hooksPath=/dev/null",
                "worktree",
                "add",
                "--quiet",
                "-B",
                &branch,
                &path_str,
                &base,
            ],
        )?;
        reference.push(t.elapsed().as_secs_f64() * 1000.0);
        reference_paths.push(path_str);

        for contained in [i % 2 == 0, i % 2 != 0] {
            let (board, store, root) = if contained {
                (&board, &store, &root)
            } else {
                (&plain_state.board, plain_state.log.store(), &plain_root)
            };
            let (id, todo_at) = create_on(board).await?;
            let check = wait_for("an agent to start", Duration::from_secs(60));
            let started = loop {
                if let Some((start, _)) = agent_times(root, id).first() {
                    break *start;
                }
                check()?;
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            let stream = store.read_stream(&id.stream()).await?;
            let claimed = stream
                .iter()
                .find(|e| e.event_type == "task.started")
                .map(|e| e.occurred_at)
                .context("the task has no task.started")?;
            let ms = |a: DateTime<Utc>, b: DateTime<Utc>| {
                (b - a).num_microseconds().unwrap_or(0) as f64 / 1000.0
            };
            if contained {
                total.push(ms(todo_at, started));
                polling.push(ms(todo_at, claimed));
                pipeline.push(ms(claimed, started));
            } else {
                uncontained.push(ms(claimed, started));
            }
            // Let it finish (commit, push) before the next sample, so samples do not overlap.
            let check = wait_for("the run to finish", Duration::from_secs(60));
            while task_rows::get(store, id)
                .await?
                .is_none_or(|row| row.column != Column::InReview)
            {
                check()?;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    plain_shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(20), plain_server).await;
    for path in &reference_paths {
        git(dir, &[&git_dir, "worktree", "remove", "--force", path])?;
    }
    println!();
    let (ref50, ref99) = summary("git worktree add alone (reference)", reference);
    let (measured, compared) = (pipeline.clone(), uncontained.clone());
    let (pipe50, pipe99) = summary("dispatch path: claim -> agent started", pipeline);
    let (plain50, plain99) = summary(
        match args.reference {
            Reference::Containment => "the same, agents uncontained (reference)",
            Reference::Network => "the same, agents on the host's network (reference)",
            Reference::Same => "the same, an identical app (A/A reference)",
        },
        uncontained,
    );
    println!(
        "{}p50 {:>8.1} ms   p99 {:>8.1} ms   (target: p99 <= 50 ms)",
        match args.reference {
            Reference::Containment => "containment's cost on the dispatch path:     ",
            Reference::Network => "an own network's cost on the dispatch path:  ",
            Reference::Same => "A/A difference (the benchmark's noise):      ",
        },
        pipe50 - plain50,
        pipe99 - plain99
    );
    let (low50, high50) = difference_interval(&measured, &compared, 0.5);
    let (low99, high99) = difference_interval(&measured, &compared, 0.99);
    println!(
        "  its 95 % interval (bootstrap, 2,000 resamples): p50 [{low50:.1}, {high50:.1}] ms   p99 [{low99:.1}, \
         {high99:.1}] ms"
    );
    summary("polling: todo committed -> claim", polling);
    summary("total: todo committed -> agent started", total);
    println!(
        "dispatch path beyond git worktree add:        p50 {:>8.1} ms   p99 {:>8.1} ms   (target: p99 < 100 ms)",
        pipe50 - ref50,
        pipe99 - ref99
    );

    // 3. The drain.
    std::fs::write(
        dir.join("sleep"),
        format!("{}", args.agent_sleep_ms as f64 / 1000.0),
    )?;
    pidevops::dispatch::dispatcher::set_paused(&state.log, true, "dispatchbench", None).await?;
    let mut drain = Vec::new();
    for _ in 0..args.drain {
        drain.push(create_on(&board).await?.0);
    }
    let check = wait_for("the queue in the read model", Duration::from_secs(30));
    loop {
        let todo = task_rows::list(
            &store,
            &task_rows::TaskFilter {
                column: Some(Column::Todo),
                ..Default::default()
            },
        )
        .await?;
        if todo.len() >= args.drain {
            break;
        }
        check()?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // While paused, the dispatcher checks out spares for what is queued, as it does while slots are busy.
    let check = wait_for("spare worktrees for the queue", Duration::from_secs(300));
    loop {
        let rendered = state.metrics.render();
        let spares: f64 = rendered
            .lines()
            .find(|l| l.starts_with("pidevops_worktree_spares "))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0);
        if spares >= args.concurrency as f64 {
            break;
        }
        check()?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before_drain = phase_totals(&state.metrics.render());
    let resumed = Utc::now();
    pidevops::dispatch::dispatcher::set_paused(&state.log, false, "dispatchbench", None).await?;
    let check = wait_for("the drain", Duration::from_secs(600));
    let spans = loop {
        let spans: Vec<(DateTime<Utc>, DateTime<Utc>)> = drain
            .iter()
            .filter_map(|id| {
                agent_times(&root, *id)
                    .into_iter()
                    .find_map(|(s, e)| Some((s, e?)))
            })
            .collect();
        if spans.len() == drain.len() {
            break spans;
        }
        check()?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut starts: Vec<DateTime<Utc>> = spans.iter().map(|s| s.0).collect();
    let mut ends: Vec<DateTime<Utc>> = spans.iter().map(|s| s.1).collect();
    starts.sort();
    ends.sort();
    let last_start = *starts.last().context("no runs")?;
    let finished = *ends.last().context("no runs")?;
    // Idle slot time while work waited: between the first start and the last, sum over time of free slots.
    let mut points: Vec<(DateTime<Utc>, i64)> = starts
        .iter()
        .map(|s| (*s, 1))
        .chain(ends.iter().map(|e| (*e, -1)))
        .collect();
    points.sort();
    let (mut running, mut idle_ms, mut previous) = (0i64, 0.0, starts[0]);
    for (at, delta) in points {
        if at > last_start {
            break;
        }
        let free = (args.concurrency as i64 - running).max(0) as f64;
        idle_ms += free * (at - previous).num_microseconds().unwrap_or(0) as f64 / 1000.0;
        running += delta;
        previous = at;
    }
    // For each slot freed while work waited: how long until an agent started in it.
    let mut gaps = Vec::new();
    let mut next_start = starts.iter().skip(args.concurrency).peekable();
    for end in ends
        .iter()
        .take(args.drain.saturating_sub(args.concurrency))
    {
        if let Some(start) = next_start.next() {
            gaps.push(((*start - *end).num_microseconds().unwrap_or(0) as f64 / 1000.0).max(0.0));
        }
    }
    let ideal = args.drain.div_ceil(args.concurrency) as f64 * args.agent_sleep_ms as f64 / 1000.0;
    let makespan = (finished - resumed).num_milliseconds() as f64 / 1000.0;
    println!();
    println!(
        "drain: {} tasks, {} slots, agents of {} ms: {:.2} s from resume to the last agent's end (ideal {:.2} s)",
        args.drain, args.concurrency, args.agent_sleep_ms, makespan, ideal
    );
    println!(
        "idle slot time while work waited: {:.0} ms in all ({:.1} % of the slot time to the last start)",
        idle_ms,
        100.0 * idle_ms / (args.concurrency as f64 * (last_start - starts[0]).num_milliseconds().max(1) as f64)
    );
    summary("slot freed -> next agent started (while queued)", gaps);
    // Where a run's time outside the agent went during the drain (Prometheus summaries: sum / count, less what
    // the latency samples recorded before it).
    let rendered = state.metrics.render();
    let after_drain = phase_totals(&rendered);
    for (phase, (sum, count)) in &after_drain {
        let (sum_before, count_before) = before_drain
            .iter()
            .find(|(p, _)| p == phase)
            .map_or((0.0, 0.0), |(_, totals)| *totals);
        let (sum, count) = (sum - sum_before, count - count_before);
        println!(
            "drain phase {phase:<8} mean {:>8.1} ms over {count} runs",
            1000.0 * sum / count
        );
    }
    for line in rendered
        .lines()
        .filter(|l| l.starts_with("pidevops_worktrees"))
    {
        println!("{line}");
    }

    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(20), server).await;
    Ok(())
}

/// `pidevops-bridge`, built beside this binary.
fn bridge_beside() -> anyhow::Result<PathBuf> {
    let bridge = std::env::current_exe()?.with_file_name(pidevops::dispatch::egress::BRIDGE_NAME);
    anyhow::ensure!(
        bridge.is_file(),
        "{} is missing: build it with this benchmark (cargo build --bins)",
        bridge.display()
    );
    Ok(bridge)
}

/// `--sandbox-start`: the dispatcher's bubblewrap argv (its view of the system, a worktree, HOME and TMPDIR as
/// tmpfs), for an agent whose first instruction writes bash's clock, per variant, interleaved.
fn sandbox_start(args: &Args, dir: &Path) -> anyhow::Result<()> {
    use pidevops::dispatch::egress::{BRIDGE_PORT, SOCKET_IN_SANDBOX};
    use pidevops::dispatch::sandbox::{
        bwrap_argv, detect, AgentView, BwrapNet, Containment, Scratch,
    };
    let path = std::env::var("PATH").unwrap_or_default();
    let Containment::Namespaces { bwrap } = detect("bwrap", Some(&path)) else {
        anyhow::bail!("--sandbox-start needs bubblewrap that works here");
    };
    let bridge = bridge_beside()?;
    let (worktree, home, tmp) = (dir.join("worktree"), dir.join("home"), dir.join("tmp"));
    for d in [&worktree, &home, &tmp] {
        std::fs::create_dir_all(d)?;
    }
    // The run's proxy socket, bound in as the dispatcher binds it; nothing connects in this measurement.
    let socket = dir.join("egress.sock");
    let _proxy = std::os::unix::net::UnixListener::bind(&socket)?;
    let agent = dir.join("agent.sh");
    std::fs::write(
        &agent,
        "#!/bin/bash\nprintf '%s\\n' \"$EPOCHREALTIME\" > \"$PWD/started\"\n",
    )?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755))?;
    }
    let mut readable = AgentView::system_readable();
    readable.push(agent.clone());
    for program in std::iter::once(&bridge).chain(args.old_bridge.as_ref()) {
        readable.push(program.clone());
        readable.extend(program.canonicalize().ok());
    }
    let tmp_size = pidevops::config::FileConfig::default()
        .dispatch
        .bounds
        .tmp_size;
    let home_size = pidevops::config::FileConfig::default()
        .dispatch
        .bounds
        .home_size;
    // As the dispatcher makes it: HOME and TMPDIR each a sized tmpfs; the clock goes into the worktree, which
    // outlives the process.
    let view = AgentView {
        writable: vec![worktree.clone()],
        readable,
        // SAFETY: geteuid has no preconditions and cannot fail.
        drop_capabilities: unsafe { nix::libc::geteuid() } == 0,
        tmp_size: Some(tmp_size),
        scratch: vec![
            Scratch {
                path: tmp.clone(),
                size: tmp_size,
            },
            Scratch {
                path: home.clone(),
                size: home_size,
            },
        ],
    };
    let agent_argv = vec![agent.display().to_string()];
    let bridged = |program: &Path, subcommand: Option<&str>| {
        let mut argv = vec![program.display().to_string()];
        argv.extend(subcommand.map(str::to_owned));
        argv.extend([
            "--socket".to_owned(),
            SOCKET_IN_SANDBOX.to_owned(),
            "--port".to_owned(),
            BRIDGE_PORT.to_string(),
            "--".to_owned(),
        ]);
        argv.extend(agent_argv.iter().cloned());
        argv
    };
    let own = BwrapNet::Own {
        proxy_socket: Some(socket.as_path()),
    };
    let mut variants: Vec<(&str, Vec<String>)> = vec![
        (
            "host network",
            bwrap_argv(&bwrap, &view, &worktree, &agent_argv, BwrapNet::Host),
        ),
        (
            "own network, no bridge",
            bwrap_argv(
                &bwrap,
                &view,
                &worktree,
                &agent_argv,
                BwrapNet::Own { proxy_socket: None },
            ),
        ),
        (
            "own network, pidevops-bridge",
            bwrap_argv(&bwrap, &view, &worktree, &bridged(&bridge, None), own),
        ),
    ];
    if let Some(old) = &args.old_bridge {
        variants.push((
            "own network, pidevops sandbox-bridge (old)",
            bwrap_argv(
                &bwrap,
                &view,
                &worktree,
                &bridged(old, Some("sandbox-bridge")),
                own,
            ),
        ));
    }
    // As a dispatch does: the run's proxy started (its socket bound) for each sample, then the sandbox.
    let run_socket = dir.join("egress-run.sock");
    variants.push((
        "own network, pidevops-bridge, a proxy per run",
        bwrap_argv(
            &bwrap,
            &view,
            &worktree,
            &bridged(&bridge, None),
            BwrapNet::Own {
                proxy_socket: Some(run_socket.as_path()),
            },
        ),
    ));
    let per_run = variants.len() - 1;
    let start_proxy = || {
        pidevops::dispatch::egress::Proxy::start(
            pidevops::dispatch::egress::policy::Policy {
                model: None,
                allowed: Vec::new(),
            },
            None,
            Some(run_socket.as_path()),
            Default::default(),
        )
    };
    // The proxy's start alone (as `launch` makes it per run), before the sandboxes.
    let (mut proxy_ms, mut client_ms) = (Vec::new(), Vec::new());
    for i in 0..args.samples + 5 {
        let clock = Instant::now();
        let proxy = start_proxy()?;
        let took = clock.elapsed().as_secs_f64() * 1000.0;
        drop(proxy);
        // Of which: its gateway's HTTP client, built as Proxy::start builds it.
        let clock = Instant::now();
        let client = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(15))
            .build()?;
        let built = clock.elapsed().as_secs_f64() * 1000.0;
        drop(client);
        if i >= 5 {
            proxy_ms.push(took);
            client_ms.push(built);
        }
    }
    let started = worktree.join("started");
    let once = |argv: &[String]| -> anyhow::Result<(f64, f64)> {
        let _ = std::fs::remove_file(&started);
        let (wall, clock) = (Utc::now(), Instant::now());
        let status = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .env("PATH", &path)
            .env("LANG", "C.UTF-8")
            .env("HOME", &home)
            .env("TMPDIR", &tmp)
            .stdin(std::process::Stdio::null())
            .status()?;
        let total = clock.elapsed().as_secs_f64() * 1000.0;
        anyhow::ensure!(status.success(), "{argv:?}: {status}");
        let first =
            epoch_realtime(&std::fs::read_to_string(&started)?).context("the agent's clock")?;
        let start = (first - wall).num_microseconds().unwrap_or(0) as f64 / 1000.0;
        Ok((start, total))
    };
    // The per-run variant's clock starts before its proxy: spawn -> first instruction includes the proxy's start.
    let sample = |v: usize| -> anyhow::Result<(f64, f64)> {
        if v != per_run {
            return once(&variants[v].1);
        }
        let clock = Instant::now();
        let proxy = start_proxy()?;
        let before = clock.elapsed().as_secs_f64() * 1000.0;
        let (start, total) = once(&variants[v].1)?;
        drop(proxy);
        Ok((start + before, total + before))
    };
    for v in 0..variants.len() {
        for _ in 0..5 {
            sample(v)?;
        }
    }
    let mut times: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); variants.len()];
    for i in 0..args.samples {
        // Each variant in a rotating order, so none always follows the same one.
        for k in 0..variants.len() {
            let v = (i + k) % variants.len();
            let (start, total) = sample(v)?;
            times[v].0.push(start);
            times[v].1.push(total);
        }
    }
    summary("the run's egress proxy alone (Proxy::start)", proxy_ms);
    summary("  of which its HTTP client, built alone", client_ms);
    println!(
        "sandbox start ({}), {} samples per variant, interleaved; ms",
        bwrap.display(),
        args.samples
    );
    println!(
        "{:<42} {:>22} {:>22} {:>16}",
        "variant (spawn -> first instruction; -> exit)",
        "start p50 / p99",
        "exit p50 / p99",
        "added p50 / p99"
    );
    let mut host = (f64::NAN, f64::NAN);
    for ((name, _), (mut start, mut total)) in variants.iter().zip(times) {
        start.sort_by(f64::total_cmp);
        total.sort_by(f64::total_cmp);
        let p = |v: &[f64]| (percentile(v, 0.5), percentile(v, 0.99));
        let ((s50, s99), (t50, t99)) = (p(&start), p(&total));
        if host.0.is_nan() {
            host = (s50, s99);
        }
        println!(
            "{name:<42} {:>13.1} / {:>6.1} {:>13.1} / {:>6.1} {:>7.1} / {:>6.1}",
            s50,
            s99,
            t50,
            t99,
            s50 - host.0,
            s99 - host.1
        );
    }
    Ok(())
}
