//! `--sandbox-start`: a sandbox's start alone, per network and bridge.

use super::*;

/// `pidevops-bridge`, built beside this binary.
pub(crate) fn bridge_beside() -> anyhow::Result<PathBuf> {
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
pub(crate) fn sandbox_start(args: &Args, dir: &Path) -> anyhow::Result<()> {
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
