//! `landbench`: a plan's pull requests, all ready at once, landed by the merge queue (`land = "auto"`) against the
//! floor of a one-at-a-time queue (docs/benchmarks.md, "Landing in order").
//!
//! Setup (not measured): a bare repository standing in for GitHub's copy, the benchmark's own GitHub API on
//! loopback (`github.rs`: pull requests read from that repository, merges made there with real git, webhooks sent
//! back signed), a fresh Postgres database (`pidevops_landbench`, recreated each run), the real app
//! (`startup::build`), a planner whose plan has `--items` independent items, each of which adds a file of its own.
//!
//! Scripted CI: every commit pushed to a `pidevops/` branch gets a passing `ci` check `--ci-s` seconds after CI
//! sees it. It is held until every item's pull request is open, then started on all of them at once (t0): ten pull
//! requests ready together. A queue that merges one at a time, each after its checks passed on the latest base,
//! cannot finish before `items × ci_s` after t0 (the first merges at t0 + ci_s, each next one needs a refresh and a
//! CI run of its own); that is the floor. Measured: t0 to the last item's `task.completed`; merges made; people
//! asked (flags); refreshes and CI runs spent.

mod github;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;

use github::{FakeGithub, Hooks};
use pidevops::bench::{git, script};
use pidevops::board::{Board, Draft, Steer};
use pidevops::config::{DatabaseUrl, Env, Settings};
use pidevops::eventlog::EventStore;
use pidevops::tasks::{Column, Links, RepoName, Spec, TaskId};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "landbench",
    about = "A plan's ready pull requests landed by the merge queue, against items × CI time"
)]
struct Args {
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    admin_url: String,
    #[arg(long, default_value = "pidevops_landbench")]
    database: String,
    /// Items in the plan (pull requests to land).
    #[arg(long, default_value_t = 10)]
    items: usize,
    /// How long one CI run takes.
    #[arg(long, default_value_t = 10.0)]
    ci_s: f64,
    /// The loops' interval (projectors, dispatcher, merge queue, refresh).
    #[arg(long, default_value_t = 0.1)]
    interval_s: f64,
}

const REPO: &str = "bench/land";
const SECRET: &str = "landbench-webhook-secret";

#[tokio::main]
async fn main() -> ExitCode {
    pidevops::telemetry::init_tracing(pidevops::config::LogFormat::Pretty);
    let args = Args::parse();
    let scratch = std::env::temp_dir().join(format!("landbench-{}", uuid::Uuid::now_v7()));
    let result = match std::fs::create_dir_all(&scratch) {
        Ok(()) => bench(&args, &scratch).await,
        Err(e) => Err(e.into()),
    };
    let _ = std::fs::remove_dir_all(&scratch);
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("landbench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The repository, its GitHub copy and a clone for GitHub's merges; the planner and worker scripts.
fn repository(dir: &Path, items: usize) -> anyhow::Result<()> {
    let seed = dir.join("seed");
    std::fs::create_dir(&seed)?;
    git(&seed, &["init", "--quiet", "--initial-branch=main"])?;
    std::fs::write(seed.join("README.md"), "# land\n")?;
    git(&seed, &["add", "."])?;
    git(&seed, &["commit", "--quiet", "-m", "seed"])?;
    git(dir, &["clone", "--quiet", "--bare", "seed", "remote.git"])?;
    git(dir, &["clone", "--quiet", "remote.git", "work"])?;
    let items: Vec<serde_json::Value> = (1..=items)
        .map(|i| {
            serde_json::json!({"id": format!("p{i}"), "title": format!("Part {i}"),
                "task": format!("Write part {i}"), "scope": [format!("p{i}/**")], "done_when": "it exists",
                "depends_on": []})
        })
        .collect();
    let plan = serde_json::json!({"version": 1, "items": items});
    script(
        &dir.join("planner.sh"),
        &format!("mkdir -p .pidevops\ncat > .pidevops/plan.json <<'JSON'\n{plan}\nJSON"),
    )?;
    // Each item adds a file of its own: no two conflict, and each lacks the others' until refreshed.
    script(
        &dir.join("worker.sh"),
        "f=\"part-$(date +%s%N)-$$.txt\"\necho done > \"$f\"",
    )?;
    Ok(())
}

fn settings(args: &Args, dir: &Path, github_url: &str) -> anyhow::Result<Settings> {
    let file: pidevops::config::FileConfig = format!(
        r#"
        [board]
        approval = "manual"
        [dispatch]
        agent = "worker"
        planner = "planner"
        max_concurrent = {items}
        per_repo = {items}
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
        forge = "github"
        scope = "off"
        land = "auto"
        approvals = 0
        required_checks = ["ci"]
        merge_method = "merge"
        delete_branch = false
        [intake.github]
        bot_login = "pidevops-bot"
        "#,
        items = args.items,
        worker = dir.join("worker.sh").display(),
        planner = dir.join("planner.sh").display(),
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
    let path = std::env::var("PATH").unwrap_or_default();
    settings.env = Env::from_pairs([("PATH", path.as_str())]);
    for (name, value) in [
        ("GITHUB_TOKEN", "landbench-token"),
        ("GITHUB_API_URL", github_url),
    ] {
        settings.providers.set(name, Some(value))?;
    }
    let secret = Some(secrecy::SecretString::from(SECRET));
    anyhow::ensure!(
        settings.webhook_secrets.set("github", secret),
        "no provider is github"
    );
    Ok(settings)
}

/// Scripted CI: each commit of a `pidevops/` branch not seen before gets its passing check `ci_s` later.
#[derive(Clone)]
struct Ci {
    github: FakeGithub,
    remote: std::path::PathBuf,
    ci: Duration,
    seen: Arc<Mutex<BTreeSet<(String, String)>>>,
}

impl Ci {
    /// Every `pidevops/` branch's head in the remote.
    fn heads(&self) -> anyhow::Result<Vec<(String, String)>> {
        let listed = git(
            &self.remote,
            &[
                "for-each-ref",
                "--format=%(refname:lstrip=2) %(objectname)",
                "refs/heads/pidevops/",
            ],
        )?;
        Ok(listed
            .lines()
            .filter_map(|line| line.split_once(' '))
            .map(|(branch, sha)| (branch.to_owned(), sha.to_owned()))
            .collect())
    }

    /// Starts a run on each head not seen before; how many it started.
    fn start_new(&self) -> anyhow::Result<usize> {
        let mut started = 0;
        for (branch, sha) in self.heads()? {
            let new = self
                .seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert((branch.clone(), sha.clone()));
            if new {
                started += 1;
                let (github, ci) = (self.github.clone(), self.ci);
                tokio::spawn(async move {
                    tokio::time::sleep(ci).await;
                    let sent = match github.check_passed(&branch, &sha) {
                        Ok(body) => github.hooks().send("check_run", &body).await,
                        Err(e) => Err(e),
                    };
                    if let Err(e) = sent {
                        eprintln!("landbench: CI on {branch} {sha}: {e:#}");
                    }
                });
            }
        }
        Ok(started)
    }

    fn runs(&self) -> usize {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

async fn bench(args: &Args, dir: &Path) -> anyhow::Result<bool> {
    repository(dir, args.items)?;
    let hooks = Hooks {
        url: Arc::default(),
        secret: SECRET.to_owned(),
        client: reqwest::Client::new(),
    };
    let (github, github_url) = FakeGithub::start(
        REPO,
        dir.join("remote.git"),
        dir.join("work"),
        hooks.clone(),
    )
    .await?;
    pidevops::bench::recreate_database(&args.admin_url, &args.database).await?;
    let app = pidevops::startup::build(settings(args, dir, &github_url)?).await?;
    let _ = hooks.url.set(format!(
        "{}/webhooks/github",
        pidevops::startup::url_of(app.local_addr()).trim_end_matches('/')
    ));
    let state = app.state().clone();
    let shutdown = app.shutdown_token();
    let server = tokio::spawn(app.run());
    let (store, board) = (state.log.store().clone(), state.board.clone());
    println!(
        "{} plan items, CI of {} s each, loops every {} s",
        args.items, args.ci_s, args.interval_s
    );

    let items = ready_plan(&board, &github, args.items).await?;
    let ci = Ci {
        github: github.clone(),
        remote: dir.join("remote.git"),
        ci: Duration::from_secs_f64(args.ci_s),
        seen: Arc::default(),
    };
    // t0: CI starts on every item's pull request at once.
    let t0 = chrono::Utc::now();
    let started = Instant::now();
    anyhow::ensure!(
        ci.start_new()? == args.items,
        "not every item's branch is pushed"
    );
    let floor = args.ci_s * args.items as f64;
    let limit = Duration::from_secs_f64(floor * 3.0 + 120.0);
    loop {
        ci.start_new()?;
        if all_done(&board, &items).await? {
            break;
        }
        anyhow::ensure!(started.elapsed() < limit, "not all landed within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let last = last_completed(&store, &items).await?;
    let elapsed = (last - t0).num_milliseconds() as f64 / 1000.0;
    let flags = count(&store, &items, "task.flagged_needs_human").await?;
    let refreshes = count(&store, &items, "task.refreshed").await?;
    let queued = count(&store, &items, "task.merge_queued").await?;
    let merges = github.merges();
    let ratio = elapsed / floor;
    println!(
        "t0 -> all {} landed: {elapsed:.3} s; floor {} × {} s = {floor:.3} s; ratio {ratio:.3} (target <= 1.20)",
        args.items, args.items, args.ci_s
    );
    println!(
        "merges {merges} (of {}), merges queued {queued}, people asked {flags}, refreshes {refreshes}, CI runs {}",
        args.items,
        ci.runs()
    );
    shutdown.cancel();
    server.await??;
    Ok(merges == args.items as u64 && flags == 0 && ratio <= 1.20)
}

/// A plan of `n` items proposed, approved, and every item in review with its pull request open.
async fn ready_plan(board: &Board, github: &FakeGithub, n: usize) -> anyhow::Result<Vec<TaskId>> {
    let repo: RepoName = REPO.parse()?;
    let draft = Draft::plan(repo, Spec::new("Land in order", "", "")?, Links::default());
    let plan = board
        .create(draft, "landbench:plan", "bench", None)
        .await?
        .0
        .task
        .id();
    wait("the plan proposed", || async {
        Ok(board
            .load(plan)
            .await?
            .is_some_and(|l| l.task.column() == Column::Triage))
    })
    .await?;
    board
        .steer(plan, Steer::Approve, None, "bench", "bench")
        .await?;
    wait("the plan's items", || async {
        let loaded = board.load(plan).await?.context("the plan")?;
        Ok(loaded.task.plan().is_some_and(|p| p.children.len() == n))
    })
    .await?;
    let loaded = board.load(plan).await?.context("the plan")?;
    let items = loaded
        .task
        .plan()
        .map(|p| p.children.clone())
        .unwrap_or_default();
    for id in &items {
        wait(&format!("{id} in review"), || async {
            Ok(board.load(*id).await?.is_some_and(|l| {
                l.task.column() == Column::InReview && l.task.review_request().is_some()
            }))
        })
        .await?;
    }
    anyhow::ensure!(
        github.opened().len() == n,
        "{} pull requests open, not {n}",
        github.opened().len()
    );
    Ok(items)
}

/// Polls `check` every 20 ms until it holds, or fails after ten minutes.
async fn wait<F, Fut>(what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let started = Instant::now();
    while !check().await? {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

async fn all_done(board: &Board, ids: &[TaskId]) -> anyhow::Result<bool> {
    for id in ids {
        let done = board
            .load(*id)
            .await?
            .is_some_and(|l| l.task.column() == Column::Done);
        if !done {
            return Ok(false);
        }
    }
    Ok(true)
}

async fn last_completed(
    store: &EventStore,
    ids: &[TaskId],
) -> anyhow::Result<chrono::DateTime<chrono::Utc>> {
    let mut last = None;
    for id in ids {
        let events = store.read_stream(&id.stream()).await?;
        let at = events
            .iter()
            .find(|e| e.event_type == "task.completed")
            .map(|e| e.recorded_at)
            .with_context(|| format!("{id} has no task.completed"))?;
        last = Some(last.map_or(at, |l: chrono::DateTime<chrono::Utc>| l.max(at)));
    }
    last.context("no item")
}

async fn count(store: &EventStore, ids: &[TaskId], event_type: &str) -> anyhow::Result<usize> {
    let mut n = 0;
    for id in ids {
        let events = store.read_stream(&id.stream()).await?;
        n += events.iter().filter(|e| e.event_type == event_type).count();
    }
    Ok(n)
}
