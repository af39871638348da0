//! `--queued N [--budgets]`: the dispatcher's tick (the candidate selection up to the claims) with `N` tasks in
//! `todo`, with `[budgets]` set against the same tick without them, in the same run (docs/benchmarks.md,
//! "Dispatch: the tick with a long queue").
//!
//! Setup (not measured): a fresh database; the real app (`startup::build`) with its own dispatcher off, so no
//! tick but the measured ones runs; `--repos` repositories (one small local remote); `N` tasks created through
//! the board (round-robin over the repositories) and projected into `todo`; dispatch paused (an event, as
//! `pidevops dispatch pause` records it), so no tick claims and every tick does the whole selection; the usage
//! read model's rows written in bulk (today's and 29 earlier days' per repository and profile, half the queued
//! tasks' own spend and `--past-tasks` finished tasks'); raises of each kind through `budgets::raise`.
//!
//! Then two dispatchers on that board, built as `serve` builds its own (`startup::dispatcher`): the reference,
//! without `[budgets]`, and the one under test, with every budget set (task, repository and day, dollars and
//! tokens) far above what was spent, so nothing is held and no notice goes out (`over_budget` is checked to be
//! 0). Without `--budgets`, the second is a copy of the reference (an A/A run: the benchmark's noise). Each is
//! warmed up until its spare worktrees are ready (a paused dispatcher still checks them out for the queue),
//! then `--ticks` ticks of each are timed, alternating which goes first.

use super::*;

/// Profiles the usage rows are spread over (as a deployment with three agents).
const PROFILES: [&str; 3] = ["bench", "claude", "codex"];

pub(crate) async fn queued_tick(args: &Args, dir: &Path, queued: usize) -> anyhow::Result<()> {
    // A small repository: the tick reads no file of it; the spares it checks out ahead are its only use.
    let seed = dir.join("seed");
    std::fs::create_dir(&seed)?;
    git(&seed, &["init", "--quiet", "--initial-branch=main"])?;
    std::fs::write(seed.join("README.md"), "bench\n")?;
    git(&seed, &["add", "."])?;
    git(&seed, &["commit", "--quiet", "-m", "seed"])?;
    git(dir, &["clone", "--quiet", "--bare", "seed", "remote.git"])?;
    let remote = format!("file://{}", dir.join("remote.git").display());
    let agent = dir.join("agent.sh");
    pidevops::bench::script(&agent, "exit 0")?;

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
    let repos: Vec<RepoName> = (0..args.repos.max(1))
        .map(|i| format!("bench/repo{i:02}").parse())
        .collect::<Result<_, _>>()?;
    let path = std::env::var("PATH").unwrap_or_default();
    let settings_for = |dispatch: bool, budgets: bool, root: &Path| -> anyhow::Result<Settings> {
        let mut toml = format!(
            r#"
            [board]
            approval = "auto"
            [dispatch]
            enabled = {dispatch}
            agent = "bench"
            max_concurrent = {c}
            per_repo = {c}
            containment = "best-effort"
            [agents.bench]
            command = ["{agent}", "{{prompt_file}}"]
            "#,
            c = args.concurrency,
            agent = agent.display(),
        );
        for repo in &repos {
            toml.push_str(&format!("[repos.\"{repo}\"]\nurl = \"{remote}\"\n"));
        }
        if budgets {
            // Far above what the rows below spend: nothing is held, nothing is past `soft_at`.
            toml.push_str(
                "[budgets]\ntask_usd = 100.0\ntask_tokens = 100000000\nrepo_daily_usd = 10000.0\n\
                 repo_daily_tokens = 10000000000\ndaily_usd = 100000.0\ndaily_tokens = 100000000000\n",
            );
        }
        let file: pidevops::config::FileConfig = toml
            .parse()
            .map_err(|e| anyhow::anyhow!("the benchmark's pidevops.toml: {e}"))?;
        let mut settings = Settings::for_tests(database.clone());
        settings.file = file;
        settings.workspace_root = root.to_owned();
        settings.projector_interval = Duration::from_secs_f64(args.interval_s);
        settings.env = Env::from_pairs([("PATH", path.as_str())]);
        Ok(settings)
    };
    let app = pidevops::startup::build(settings_for(false, false, &dir.join("app"))?).await?;
    let state = app.state().clone();
    let (shutdown, tracker) = (app.shutdown_token(), app.tracker());
    let server = tokio::spawn(app.run());
    let store = state.log.store().clone();
    pidevops::dispatch::dispatcher::set_paused(&state.log, true, "dispatchbench", None).await?;

    // The queue, through the board, one task at a time (ids are allocated by counting: concurrent creations race
    // for the same one).
    let started = Instant::now();
    let mut ids: Vec<TaskId> = Vec::with_capacity(queued);
    for i in 0..queued {
        let draft = Draft::new(
            repos[i % repos.len()].clone(),
            Spec::new(format!("Bench task {i}"), "", "")?,
            Links::default(),
        );
        let (outcome, _) = state
            .board
            .create(draft, &format!("bench:queued:{i}"), "api", None)
            .await?;
        ids.push(outcome.task.id());
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let todo = task_rows::list(
            &store,
            &task_rows::TaskFilter {
                column: Some(Column::Todo),
                ..Default::default()
            },
        )
        .await?;
        if todo.len() >= queued {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "timed out waiting for the queue in the read model"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "queue: {queued} tasks in todo over {} repositories, created and projected in {:.1} s",
        repos.len(),
        started.elapsed().as_secs_f64()
    );
    let rows = usage_rows(&store, &repos, &ids, args.past_tasks).await?;
    let raised = raises(&state.log, &repos, &ids).await?;
    println!("usage read model: {rows} rows written; {raised} raises recorded");

    let build = |budgets: bool, root: PathBuf| {
        let settings = settings_for(true, budgets, &root);
        let (board, log, tracker, shutdown) = (&state.board, &state.log, &tracker, &shutdown);
        async move {
            let settings = settings?;
            pidevops::startup::dispatcher(
                &settings,
                board,
                log,
                settings.file.dispatch.clone(),
                settings.file.profiles.clone(),
                tracker,
                shutdown,
            )
            .await
        }
    };
    let reference = build(false, dir.join("reference")).await?;
    let measured = build(args.budgets, dir.join("measured")).await?;
    let label = if args.budgets {
        "tick with [budgets]"
    } else {
        "tick, the same again (A/A)"
    };

    // Warm-up: each checks out its spares for the queue (in the background, as a paused dispatcher does), then
    // a few ticks more.
    let spares_wanted = (repos.len() * args.concurrency) as f64;
    for dispatcher in [&reference, &measured] {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            dispatcher.tick().await?;
            let spares = state
                .metrics
                .render()
                .lines()
                .find(|l| l.starts_with("pidevops_worktree_spares "))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .unwrap_or(0.0);
            if spares >= spares_wanted {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "timed out waiting for spare worktrees"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for _ in 0..10 {
            dispatcher.tick().await?;
        }
    }

    let (mut without, mut with) = (Vec::new(), Vec::new());
    let mut last = None;
    for i in 0..args.ticks {
        for first in [i % 2 == 0, i % 2 != 0] {
            let (dispatcher, times) = if first {
                (&reference, &mut without)
            } else {
                (&measured, &mut with)
            };
            let t = Instant::now();
            let status = dispatcher.tick().await?;
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            anyhow::ensure!(status.started == 0, "a paused tick started a run");
            anyhow::ensure!(
                status.over_budget == 0 && status.budgets.is_empty(),
                "a budget held a task back or warned: the benchmark's limits are too low"
            );
            last = Some(status);
        }
    }
    let last = last.context("no ticks")?;
    println!(
        "each tick: {} candidates (the queue window of {queued} in todo), {} held by a budget",
        last.queue, last.over_budget
    );
    println!();
    let (ref50, ref99) = summary("tick without [budgets] (reference)", without);
    let (p50, p99) = summary(label, with);
    println!(
        "ratio: p50 {:.2}   p99 {:.2}   (target: tick < 50 ms, ratio <= 1.20)",
        p50 / ref50,
        p99 / ref99
    );
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(20), server).await;
    Ok(())
}

/// The usage read model as a deployment's would be after a month: per day, repository and profile (30 days),
/// half the queued tasks' own spend (their earlier attempts), and `past` finished tasks'. Written in bulk, as the
/// usage projector would have left it; returns the rows written.
async fn usage_rows(
    store: &pidevops::eventlog::EventStore,
    repos: &[RepoName],
    queued: &[TaskId],
    past: usize,
) -> anyhow::Result<usize> {
    let pidevops::eventlog::EventStore::Postgres(pg) = store else {
        anyhow::bail!("dispatchbench runs on Postgres");
    };
    let pool = pg.pool();
    let today = Utc::now().date_naive();
    let mut written = 0;
    for back in 0..30 {
        let day = (today - chrono::Duration::days(back))
            .format("%Y-%m-%d")
            .to_string();
        for repo in repos {
            for profile in PROFILES {
                sqlx::query(
                    "INSERT INTO usage_daily (day, repo, profile, runs, input_tokens, output_tokens,
                     cache_read_tokens, cache_write_tokens, cost_usd, costed_runs, turns)
                     VALUES ($1, $2, $3, 10, 400000, 60000, 1500000, 90000, 5.0, 10, 120)",
                )
                .bind(&day)
                .bind(repo.as_str())
                .bind(profile)
                .execute(pool)
                .await?;
                written += 1;
            }
        }
    }
    let tasks: Vec<(String, String)> = queued
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(i, id)| (id.to_string(), repos[i % repos.len()].to_string()))
        .chain((0..past).map(|i| {
            (
                format!("T-{}", 1_000_000 + i),
                repos[i % repos.len()].to_string(),
            )
        }))
        .collect();
    for chunk in tasks.chunks(1000) {
        let (ids, repos): (Vec<String>, Vec<String>) = chunk.iter().cloned().unzip();
        sqlx::query(
            "INSERT INTO usage_tasks (task_id, repo, runs, input_tokens, output_tokens, cache_read_tokens,
             cache_write_tokens, cost_usd, costed_runs, turns, last_at)
             SELECT id, repo, 1, 40000, 6000, 150000, 9000, 0.5, 1, 12, now() - interval '1 hour'
             FROM unnest($1::text[], $2::text[]) AS t(id, repo)",
        )
        .bind(&ids)
        .bind(&repos)
        .execute(pool)
        .await?;
        written += chunk.len();
    }
    Ok(written)
}

/// Raises of each scope, as people would have made them: each day scope and repository today, and some tasks.
async fn raises(
    log: &pidevops::eventlog::EventLog,
    repos: &[RepoName],
    queued: &[TaskId],
) -> anyhow::Result<usize> {
    use pidevops::budgets::{raise, Raised, Scope};
    let today = Utc::now().date_naive();
    let scopes = std::iter::once(Scope::day(today))
        .chain(repos.iter().map(|repo| Scope::repo(repo.as_str(), today)))
        .chain(queued.iter().step_by(250).map(|task| Scope::task(*task)));
    let mut made = 0;
    for scope in scopes {
        let raised = Raised {
            at: Utc::now(),
            scope,
            usd: Some(1.0),
            tokens: Some(1000),
            by: "dispatchbench".to_owned(),
        };
        raise(log, &raised, None).await?;
        made += 1;
    }
    Ok(made)
}
