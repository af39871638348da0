//! The dashboard's board with thousands of tasks: server time and size of `GET /`, against `GET /api/tasks` for
//! the same tasks measured in the same run (the read model dumped as JSON: what a board that rendered everything
//! would at least pay).
//!
//! It runs the real app (`startup::build`) on a throwaway database (embedded SQLite by default, Postgres with
//! `--pg`), seeds `--tasks` tasks through the board spread over the columns (a twentieth flagged for a human),
//! waits for the tasks read model, signs in, then alternates the two requests `--samples` times. The board's server
//! time is its `Server-Timing` header (read models + rendering); both are also timed end to end on loopback.
//!
//! Target (issue 7): the board for 5 000 tasks under 100 ms server time at p99, its HTML under 200 KB.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use pidevops::board::Draft;
use pidevops::config::{DatabaseUrl, Settings};
use pidevops::tasks::{BranchName, Command, Links, Reason, RunId, Spec};
use secrecy::SecretString;

const TOKEN: &str = "boardbench-admin-token-long-enough";

#[derive(Parser, Debug)]
#[command(about = "server time of the dashboard's board for many tasks, against /api/tasks")]
struct Args {
    #[arg(long, default_value_t = 5000)]
    tasks: usize,
    #[arg(long, default_value_t = 200)]
    samples: usize,
    /// A Postgres server (admin URL); the database `pidevops_boardbench` is recreated. Default: embedded SQLite.
    #[arg(long)]
    pg: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(pass) => {
            if pass {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            }
        }
        Err(e) => {
            eprintln!("boardbench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

async fn run(args: Args) -> anyhow::Result<bool> {
    let dir = std::env::temp_dir().join(format!("pidevops-boardbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = bench(&args, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn bench(args: &Args, dir: &std::path::Path) -> anyhow::Result<bool> {
    let database = match &args.pg {
        Some(admin) => {
            let name = "pidevops_boardbench";
            let url = pidevops::bench::with_database(admin, name);
            {
                use sqlx::{Connection, Executor};
                let mut conn = sqlx::PgConnection::connect(admin).await?;
                conn.execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                    .await?;
            }
            pidevops::bench::ensure_database(admin, name).await?;
            DatabaseUrl::Postgres(url)
        }
        None => DatabaseUrl::Sqlite(format!("sqlite://{}", dir.join("board.db").display())),
    };
    let mut settings = Settings::for_tests(database);
    settings.admin_token = Some(SecretString::from(TOKEN));
    settings.projector_interval = Duration::from_millis(200);
    settings.loop_startup_delay = Duration::from_millis(50);
    let app = pidevops::startup::build(settings).await?;
    let state = app.state().clone();
    let base = format!("http://{}", app.local_addr());
    let shutdown = app.shutdown_token();
    let server = tokio::spawn(app.run());

    // Seed: creations and moves through the board, 32 at a time.
    let seeding = Instant::now();
    let board = state.board.clone();
    let repos = ["acme/api", "acme/web", "acme/billing", "acme/mobile"];
    let mut pending = Vec::new();
    for n in 0..args.tasks {
        let board = board.clone();
        let repo = repos[n % repos.len()];
        pending.push(tokio::spawn(async move {
            let draft = Draft {
                approval: Some(if n % 5 == 0 {
                    pidevops::tasks::ApprovalPolicy::Manual
                } else {
                    pidevops::tasks::ApprovalPolicy::Auto
                }),
                ..Draft::new(
                    repo.parse()?,
                    Spec::new(
                        format!("Bench task {n}: make the thing do what the ticket says"),
                        "src/",
                        "the tests pass",
                    )?,
                    Links::default(),
                )
            };
            let (outcome, _) = board
                .create(draft, &format!("bench:{n}"), "api", None)
                .await?;
            let id = outcome.task.id();
            let run = RunId(uuid::Uuid::now_v7());
            // 0: triage (manual), 1-2: todo, 3: in progress, 4 (and every 5th of the rest): review or done.
            let stage = n % 10;
            if matches!(stage, 3 | 4 | 6 | 8 | 9) {
                board.execute(id, &Command::Start { run }, "bench").await?;
            }
            if matches!(stage, 4 | 6 | 8 | 9) {
                let branch: BranchName = id.branch();
                board
                    .execute(
                        id,
                        &Command::SubmitForReview {
                            run,
                            branch,
                            pr: None,
                            report: Default::default(),
                        },
                        "bench",
                    )
                    .await?;
            }
            if matches!(stage, 8 | 9) {
                board.execute(id, &Command::Complete, "bench").await?;
            }
            if n % 20 == 7 {
                board
                    .execute(
                        id,
                        &Command::FlagNeedsHuman {
                            reason: Reason::new("the bench says so".to_owned())?,
                        },
                        "bench",
                    )
                    .await?;
            }
            anyhow::Ok(())
        }));
        if pending.len() >= 32 {
            for task in pending.drain(..) {
                task.await??;
            }
        }
    }
    for task in pending.drain(..) {
        task.await??;
    }
    let store = state.log.store().clone();
    let head = store.head().await?;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let at = pidevops::projectors::read_row(&store, pidevops::projectors::tasks::NAME)
            .await?
            .map_or(0, |(_, p)| p);
        if at >= head {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the tasks read model did not catch up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "seeded {} tasks ({} events) in {:.1} s; read model caught up",
        args.tasks,
        head,
        seeding.elapsed().as_secs_f64()
    );

    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let signed_in = client
        .post(format!("{base}/sign-in"))
        .form(&[("token", TOKEN), ("next", "/")])
        .send()
        .await?;
    let cookie = signed_in
        .headers()
        .get("set-cookie")
        .context("no session cookie")?
        .to_str()?
        .split(';')
        .next()
        .unwrap_or_default()
        .to_owned();

    let (mut server_ms, mut board_ms, mut api_ms) = (Vec::new(), Vec::new(), Vec::new());
    let mut bytes = 0;
    for sample in 0..args.samples + 5 {
        let started = Instant::now();
        let response = client
            .get(format!("{base}/"))
            .header("cookie", &cookie)
            .send()
            .await?;
        anyhow::ensure!(response.status() == 200, "board: {}", response.status());
        let timing = response
            .headers()
            .get("server-timing")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("app;dur="))
            .and_then(|v| v.parse::<f64>().ok())
            .context("no Server-Timing on the board")?;
        let html = response.bytes().await?;
        let whole = started.elapsed().as_secs_f64() * 1000.0;
        let started = Instant::now();
        let api = client
            .get(format!("{base}/api/tasks"))
            .bearer_auth(TOKEN)
            .send()
            .await?;
        anyhow::ensure!(api.status() == 200, "api: {}", api.status());
        let _ = api.bytes().await?;
        let api_whole = started.elapsed().as_secs_f64() * 1000.0;
        if sample >= 5 {
            // The first few warm the caches.
            server_ms.push(timing);
            board_ms.push(whole);
            api_ms.push(api_whole);
            bytes = html.len();
        }
    }
    for v in [&mut server_ms, &mut board_ms, &mut api_ms] {
        v.sort_by(f64::total_cmp);
    }
    let row = |name: &str, v: &[f64]| {
        println!(
            "{name:<34} p50 {:>8.2} ms   p99 {:>8.2} ms",
            percentile(v, 50.0),
            percentile(v, 99.0)
        );
    };
    println!(
        "{} samples each, {} tasks, {}",
        server_ms.len(),
        args.tasks,
        if args.pg.is_some() {
            "Postgres"
        } else {
            "SQLite"
        }
    );
    row("board, server time (Server-Timing)", &server_ms);
    row("board, whole request", &board_ms);
    row("reference: /api/tasks, whole request", &api_ms);
    println!(
        "ratio board / reference (p50)       {:.2}",
        percentile(&board_ms, 50.0) / percentile(&api_ms, 50.0)
    );
    println!("board HTML                          {} bytes", bytes);
    let pass = percentile(&server_ms, 99.0) < 100.0 && bytes < 200 * 1024;
    println!(
        "target: p99 server time < 100 ms and HTML < 200 KB: {}",
        if pass { "PASS" } else { "FAIL" }
    );
    shutdown.cancel();
    let _ = server.await;
    Ok(pass)
}
