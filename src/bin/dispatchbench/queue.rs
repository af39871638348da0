//! The dispatch benchmark proper: a queue of tasks through the real app, each attempt timed by phase against
//! `git worktree add`, and whether the queue drains without idle slots.

use super::*;

pub(crate) async fn bench(args: &Args, dir: &Path) -> anyhow::Result<()> {
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
