//! `planbench`: how long a plan's fan-out takes against the same number of independent tasks created at once
//! (docs/benchmarks.md, "Plan fan-out").
//!
//! Setup (not measured): a small repository as a local bare remote, a fresh Postgres database
//! (`pidevops_planbench`, recreated each run), the real app (`startup::build`) with `--slots` slots, a planner
//! profile whose script writes a plan of `--items` independent items, and a worker whose script works
//! `--agent-sleep-ms`.
//!
//! Rounds alternate, so both see the same machine:
//! - **plan**: a plan is created and proposed (not measured); from the commit of its approval
//!   (`task.plan_approved`) to the commit of the last of its items' claims (`task.started`);
//! - **tasks** (the reference): `--items` tasks created at once, concurrently; from the first creation's commit to
//!   the commit of the last claim.
//!
//! Each round waits for every task to be in review before the next starts.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::Parser;

use pidevops::bench::{git, script};
use pidevops::board::{Draft, Steer};
use pidevops::config::{DatabaseUrl, Env, Settings};
use pidevops::eventlog::{EventStore, StoredEvent};
use pidevops::tasks::{Column, Links, RepoName, Spec, TaskId};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "planbench",
    about = "A plan's fan-out against as many independent tasks"
)]
struct Args {
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    admin_url: String,
    #[arg(long, default_value = "pidevops_planbench")]
    database: String,
    /// Items in the plan, and independent tasks in the reference.
    #[arg(long, default_value_t = 20)]
    items: usize,
    /// Slots (`dispatch.max_concurrent`, and per repository).
    #[arg(long, default_value_t = 4)]
    slots: usize,
    /// How long each worker agent works.
    #[arg(long, default_value_t = 2000)]
    agent_sleep_ms: u64,
    /// Rounds of each (plan, then tasks, alternating).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The projectors', dispatcher's and plans loop's interval.
    #[arg(long, default_value_t = 0.05)]
    interval_s: f64,
}

const REPO: &str = "bench/plans";

#[tokio::main]
async fn main() -> ExitCode {
    pidevops::telemetry::init_tracing(pidevops::config::LogFormat::Pretty);
    let args = Args::parse();
    let scratch = std::env::temp_dir().join(format!("planbench-{}", uuid::Uuid::now_v7()));
    let result = match std::fs::create_dir_all(&scratch) {
        Ok(()) => bench(&args, &scratch).await,
        Err(e) => Err(e.into()),
    };
    let _ = std::fs::remove_dir_all(&scratch);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("planbench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn bench(args: &Args, dir: &Path) -> anyhow::Result<()> {
    let seed = dir.join("seed");
    std::fs::create_dir(&seed)?;
    git(&seed, &["init", "--quiet", "--initial-branch=main"])?;
    std::fs::write(seed.join("README.md"), "# plans\n")?;
    git(&seed, &["add", "."])?;
    git(&seed, &["commit", "--quiet", "-m", "seed"])?;
    git(dir, &["clone", "--quiet", "--bare", "seed", "remote.git"])?;

    let items: Vec<serde_json::Value> = (1..=args.items)
        .map(|i| {
            serde_json::json!({"id": format!("p{i}"), "title": format!("Part {i}"),
                "task": format!("Write p{i}/done.txt"), "scope": [format!("p{i}/**")],
                "done_when": "it exists", "depends_on": []})
        })
        .collect();
    let plan = serde_json::json!({"version": 1, "items": items});
    let planner = dir.join("planner.sh");
    script(
        &planner,
        &format!("mkdir -p .pidevops\ncat > .pidevops/plan.json <<'JSON'\n{plan}\nJSON"),
    )?;
    let worker = dir.join("worker.sh");
    script(
        &worker,
        &format!(
            "sleep {}\nmkdir -p \"w$$\" && echo done > \"w$$/done.txt\"",
            args.agent_sleep_ms as f64 / 1000.0
        ),
    )?;

    pidevops::bench::recreate_database(&args.admin_url, &args.database).await?;
    let path = std::env::var("PATH").unwrap_or_default();
    let file: pidevops::config::FileConfig = format!(
        r#"
        [board]
        approval = "manual"
        [dispatch]
        agent = "worker"
        planner = "planner"
        max_concurrent = {slots}
        per_repo = {slots}
        heartbeat_s = 5
        containment = "best-effort"
        [plans]
        max_items = {items}
        [agents.worker]
        command = ["{worker}", "{{prompt_file}}"]
        [agents.planner]
        command = ["{planner}", "{{prompt_file}}"]
        [repos."{REPO}"]
        url = "file://{remote}"
        scope = "off"
        "#,
        slots = args.slots,
        items = args.items,
        worker = worker.display(),
        planner = planner.display(),
        remote = dir.join("remote.git").display(),
    )
    .parse()
    .map_err(|e| anyhow::anyhow!("the benchmark's pidevops.toml: {e}"))?;
    let mut settings = Settings::for_tests(DatabaseUrl::Postgres(pidevops::bench::with_database(
        &args.admin_url,
        &args.database,
    )));
    settings.file = file;
    settings.workspace_root = dir.join("workspaces");
    settings.projector_interval = Duration::from_secs_f64(args.interval_s);
    settings.env = Env::from_pairs([("PATH", path.as_str())]);
    let app = pidevops::startup::build(settings).await?;
    let state = app.state().clone();
    let shutdown = app.shutdown_token();
    let server = tokio::spawn(app.run());
    let store = state.log.store().clone();
    let board = state.board.clone();
    let repo: RepoName = REPO.parse()?;
    println!(
        "{} items, {} slots, agents of {} ms, {} rounds each, alternating",
        args.items, args.slots, args.agent_sleep_ms, args.rounds
    );

    let (mut plans, mut references) = (Vec::new(), Vec::new());
    for round in 1..=args.rounds {
        // The plan: proposed first (not measured), then from its approval to its last item's claim.
        let draft = Draft::plan(
            repo.clone(),
            Spec::new(format!("Plan {round}"), "", "")?,
            Links::default(),
        );
        let key = format!("planbench:plan:{round}");
        let plan = board.create(draft, &key, "bench", None).await?.0.task.id();
        wait(Duration::from_secs(120), "the plan proposed", || async {
            Ok(board
                .load(plan)
                .await?
                .is_some_and(|l| l.task.column() == Column::Triage))
        })
        .await?;
        board
            .steer(plan, Steer::Approve, None, "bench", "bench")
            .await?;
        let children = wait_for_children(&board, plan, args.items).await?;
        let approved = first_of(&store, plan, "task.plan_approved").await?;
        let last_start = wait_for_starts(&store, &children).await?;
        let plan_s = (last_start - approved).num_milliseconds() as f64 / 1000.0;
        all_in_review(&board, &children).await?;

        // The reference: as many tasks at once.
        let created: Vec<TaskId> = futures::future::try_join_all((1..=args.items).map(|i| {
            let board = board.clone();
            let repo = repo.clone();
            async move {
                let draft = Draft {
                    approval: Some(pidevops::tasks::ApprovalPolicy::Auto),
                    ..Draft::new(
                        repo,
                        Spec::new(format!("Task {round}.{i}"), "", "")?,
                        Links::default(),
                    )
                };
                let key = format!("planbench:task:{round}:{i}");
                anyhow::Ok(board.create(draft, &key, "bench", None).await?.0.task.id())
            }
        }))
        .await?;
        let mut first_created = None;
        for id in &created {
            let at = first_of(&store, *id, "task.created").await?;
            first_created = Some(first_created.map_or(at, |f: DateTime<Utc>| f.min(at)));
        }
        let first_created = first_created.context("no task was created")?;
        let last_start = wait_for_starts(&store, &created).await?;
        let tasks_s = (last_start - first_created).num_milliseconds() as f64 / 1000.0;
        all_in_review(&board, &created).await?;
        println!(
            "round {round}: plan approval -> all {} items started {plan_s:>7.3} s   |   {} tasks created -> all started {tasks_s:>7.3} s   (ratio {:.3})",
            args.items,
            args.items,
            plan_s / tasks_s
        );
        plans.push(plan_s);
        references.push(tasks_s);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (plan_m, tasks_m) = (median(plans), median(references));
    println!(
        "median: plan {plan_m:.3} s, tasks {tasks_m:.3} s, plan / tasks = {:.3} (target <= 1.10)",
        plan_m / tasks_m
    );
    shutdown.cancel();
    server.await??;
    Ok(())
}

/// Polls `check` every 20 ms until it holds, or fails after `limit`.
async fn wait<F, Fut>(limit: Duration, what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let started = Instant::now();
    while !check().await? {
        anyhow::ensure!(started.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

async fn wait_for_children(
    board: &pidevops::board::Board,
    plan: TaskId,
    n: usize,
) -> anyhow::Result<Vec<TaskId>> {
    let started = Instant::now();
    loop {
        let loaded = board.load(plan).await?.context("the plan")?;
        let children = loaded
            .task
            .plan()
            .map(|p| p.children.clone())
            .unwrap_or_default();
        if children.len() == n {
            return Ok(children);
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "timed out waiting for {plan}'s items"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn all_in_review(board: &pidevops::board::Board, ids: &[TaskId]) -> anyhow::Result<()> {
    for id in ids {
        wait(
            Duration::from_secs(600),
            &format!("{id} in review"),
            || async {
                Ok(board
                    .load(*id)
                    .await?
                    .is_some_and(|l| l.task.column() == Column::InReview))
            },
        )
        .await?;
    }
    Ok(())
}

/// When `id`'s first `event_type` was committed.
async fn first_of(
    store: &EventStore,
    id: TaskId,
    event_type: &str,
) -> anyhow::Result<DateTime<Utc>> {
    let events: Vec<StoredEvent> = store.read_stream(&id.stream()).await?;
    events
        .iter()
        .find(|e| e.event_type == event_type)
        .map(|e| e.recorded_at)
        .with_context(|| format!("{id} has no {event_type}"))
}

/// When the last of `ids` was claimed, once all are.
async fn wait_for_starts(store: &EventStore, ids: &[TaskId]) -> anyhow::Result<DateTime<Utc>> {
    let mut last = None;
    for id in ids {
        wait(
            Duration::from_secs(600),
            &format!("{id} started"),
            || async { Ok(first_of(store, *id, "task.started").await.is_ok()) },
        )
        .await?;
        let at = first_of(store, *id, "task.started").await?;
        last = Some(last.map_or(at, |l: DateTime<Utc>| l.max(at)));
    }
    last.context("no task")
}
