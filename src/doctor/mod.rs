//! `pidevops doctor`: the truth about a configuration without serving — the database, the loop plan (which
//! background loops this configuration runs, and why the others do not: [`plan`], from the loop catalog that
//! `serve` starts and `/health` reports), containment, webhooks and each provider's API.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::config::Settings;
use crate::loops::LoopState;
use crate::providers::CheckState;
pub use crate::startup::catalog::{plan, PlannedLoop};

mod workspace;

/// Prints the truth about this configuration; returns the report and whether everything enabled can run.
pub async fn diagnose(settings: &Settings) -> (String, bool) {
    diagnose_with(settings, None).await
}

/// The same, saying what became of `.env` (`pidevops doctor` reads the one in the current directory:
/// `config::Env::with_env_file`).
pub async fn diagnose_with(settings: &Settings, env_file: Option<&str>) -> (String, bool) {
    let mut out = String::new();
    let _ = writeln!(out, "pidevops {} doctor", env!("CARGO_PKG_VERSION"));
    if let Some(path) = &settings.config_file {
        let _ = writeln!(out, "config file      {}", path.display());
    }
    if let Some(line) = env_file {
        let _ = writeln!(out, ".env             {line}");
    }

    let mut ok = database(&mut out, settings).await;
    ok &= loop_plan(&mut out, settings);
    containment(&mut out, settings);
    if settings.file.dispatch.off.is_none() {
        let _ = writeln!(out, "{}", workspace::line(&settings.workspace_root));
        ok &= agent_profiles(&mut out, settings);
    }
    allowed_repos(&mut out, settings);
    webhooks(&mut out, settings);
    for line in crate::providers::api_checks(settings).await {
        ok &= !matches!(line.state, CheckState::Fail);
        let _ = writeln!(
            out,
            "{:<26} {:<9} {}",
            line.label,
            line.state.as_str(),
            line.detail
        );
    }
    bus(&mut out, settings).await;
    let _ = writeln!(
        out,
        "{}",
        if ok {
            "ok"
        } else {
            "NOT OK: something enabled cannot run"
        }
    );
    (out, ok)
}

/// The database answers (a probe: doctor never migrates or writes it), and where its log's head is.
async fn database(out: &mut String, settings: &Settings) -> bool {
    let mut ok = true;
    // Not made here: doctor runs before the first `serve` (README's tour), which makes it. A warning naming the
    // path, so a mistyped one shows.
    if let Err(missing) = crate::startup::must_exist(settings) {
        let _ = writeln!(
            out,
            "database         warn      {}",
            crate::telemetry::error_chain(&missing)
        );
        return ok;
    }
    let started = Instant::now();
    let database = async {
        // A probe, not a Core: doctor never creates, migrates or writes the database it diagnoses.
        let store =
            crate::startup::connect_existing(settings, crate::startup::CLI_CONNECTIONS).await?;
        store.ping().await?;
        let head = store.head().await.ok();
        Ok::<_, anyhow::Error>(head)
    };
    match tokio::time::timeout(Duration::from_secs(10), database).await {
        Ok(Ok(head)) => {
            let head = head.map_or_else(
                || "not migrated yet".to_owned(),
                |h| format!("head position {h}"),
            );
            let _ = writeln!(
                out,
                "database         pass      {} ({:.1} ms, {head})",
                settings.database.redacted(),
                started.elapsed().as_secs_f64() * 1000.0
            );
        }
        Ok(Err(e)) => {
            ok = false;
            let _ = writeln!(
                out,
                "database         FAIL      {}",
                crate::telemetry::error_chain(&e)
            );
        }
        Err(_) => {
            ok = false;
            let _ = writeln!(
                out,
                "database         FAIL      {}: no answer within 10 s",
                settings.database.redacted()
            );
        }
    }
    ok
}

/// The loop plan, one line per loop; an `unarmed` loop is a failure.
fn loop_plan(out: &mut String, settings: &Settings) -> bool {
    let mut ok = true;
    for planned in plan(settings) {
        let detail = match &planned.reason {
            Some(reason) => reason.clone(),
            None => format!("every {:?}: {}", planned.interval, planned.what),
        };
        if planned.state == LoopState::Unarmed {
            ok = false;
        }
        let _ = writeln!(
            out,
            "loop {:<22} {:<9} {detail}",
            planned.name,
            planned.state.as_str()
        );
    }
    ok
}

/// What contains agents, when dispatch is on.
fn containment(out: &mut String, settings: &Settings) {
    if settings.file.dispatch.off.is_none() {
        let found = crate::dispatch::sandbox::detect_cached(
            &settings.file.dispatch.bwrap,
            settings.env.get("PATH"),
        );
        let _ = writeln!(
            out,
            "containment                {:<9} {}",
            found.kind(),
            found.describe()
        );
        // Read-only: serve sets the cgroups up when it starts.
        let memory = crate::dispatch::cgroup::describe_probe(
            std::path::Path::new("/"),
            std::process::id(),
            settings.file.dispatch.bounds.memory_max,
        );
        let state = if memory.starts_with("not bounded") {
            "warn"
        } else {
            "armed"
        };
        let _ = writeln!(out, "memory                     {state:<9} {memory}");
        let bounds = &settings.file.dispatch.bounds;
        let scratch = found.describe_scratch(bounds.tmp_size, bounds.home_size);
        let state = if scratch.starts_with("not bounded") {
            "warn"
        } else {
            "armed"
        };
        let _ = writeln!(out, "agent HOME and /tmp        {state:<9} {scratch}");
        let host = settings.file.profiles.on_host_network();
        let network = if host.is_empty() {
            "proxy     every profile has a network of its own: egress through pidevops's proxy"
                .to_owned()
        } else {
            format!(
                "warn      network = \"host\" (the service's network, no egress proxy) for: {}",
                host.join(", ")
            )
        };
        let _ = writeln!(out, "agent network              {network}");
        if let crate::dispatch::sandbox::Containment::Namespaces { .. } = found {
            // Under bubblewrap every sandbox with a network of its own starts through it.
            let bridge = match crate::dispatch::egress::bridge_missing() {
                None => crate::dispatch::egress::bridge_program().map_or_else(
                    |_| "armed".to_owned(),
                    |p| format!("armed     {}: each sandbox's proxy port, forwarded", p.display()),
                ),
                Some(missing) => format!(
                    "warn      {missing}: no agent with network = \"proxy\" (nor a repository's hook) can \
                     start (it ships beside pidevops)"
                ),
            };
            let _ = writeln!(out, "network bridge             {bridge}");
        }
    }
}

/// Each profile this configuration runs, through its preflight (`dispatch::preflight`, the dispatcher's own
/// check): its program, git, its credential, the workspace volume. One that fails is a failure: its tasks
/// would wait.
fn agent_profiles(out: &mut String, settings: &Settings) -> bool {
    use crate::config::dispatch::Executor;
    let config = &settings.file.dispatch;
    if config.executor != Executor::Local {
        let _ = writeln!(
            out,
            "agent profiles             workers   runs go to `pidevops worker`s, which check their own machine when they start"
        );
        return true;
    }
    let mut ok = true;
    let mut seen = std::collections::BTreeSet::new();
    for (whose, profile) in
        crate::dispatch::preflight::used_profiles(config, &settings.file.profiles)
    {
        if !seen.insert(profile.name.clone()) {
            continue;
        }
        let problems =
            crate::dispatch::preflight::check(profile, &settings.env, &settings.workspace_root);
        let label = format!("agent {}", profile.name);
        if problems.is_empty() {
            let _ = writeln!(
                out,
                "{label:<26} ready     {whose} profile: its command, git, its credential and the workspace volume"
            );
        } else {
            ok = false;
            let _ = writeln!(
                out,
                "{label:<26} FAIL      {whose} profile; its tasks would wait: {}",
                problems.join("; ")
            );
        }
    }
    ok
}

/// A warning when no repository is allowed.
fn allowed_repos(out: &mut String, settings: &Settings) {
    // Not a failure (a fresh install has no repositories yet), but every ticket would be refused: say so.
    if settings.file.board.allowed.is_empty() {
        let _ = writeln!(
            out,
            "allowed repos              warn      none: no [repos.\"o/n\"] and no [intake] allow_repos, so every \
             task is refused (intake records why)"
        );
    }
}

/// Which webhooks verify deliveries, and whether the API is served.
fn webhooks(out: &mut String, settings: &Settings) {
    let secrets = crate::domain::registry::PROVIDERS
        .iter()
        .filter_map(|p| Some((p.name, p.webhook_route, settings.webhook_secret(p.source)?)));
    for (name, route, secret) in secrets {
        let (state, detail) = if secret.is_set() {
            (
                "armed",
                format!("POST {route} verifies with {}", secret.variable),
            )
        } else {
            (
                "disabled",
                format!("{} is not set; deliveries get 503", secret.variable),
            )
        };
        let _ = writeln!(out, "webhook {name:<19} {state:<9} {detail}");
    }
    let (state, detail) = match settings.admin_token {
        Some(_) => (
            "armed",
            "/api/* requires Authorization: Bearer <PIDEVOPS_ADMIN_TOKEN>",
        ),
        None => (
            "disabled",
            "PIDEVOPS_ADMIN_TOKEN is not set; /api/* refuses every request",
        ),
    };
    let _ = writeln!(out, "api                        {state:<9} {detail}");
}

/// The bus: JetStream at `NATS_URL`, or in-process.
async fn bus(out: &mut String, settings: &Settings) {
    match &settings.nats_url {
        Some(url) => {
            let reachable = tokio::time::timeout(
                Duration::from_secs(5),
                crate::bus::JetstreamBus::connect(url, settings.bus.clone()),
            )
            .await;
            let detail = match reachable {
                Ok(Ok(_)) => format!("JetStream stream {} is ready", settings.bus.stream),
                Ok(Err(e)) => {
                    format!("{e} (ingest goes on; the relay catches up when NATS answers)")
                }
                Err(_) => {
                    "no answer within 5 s (ingest goes on; the relay catches up when NATS answers)"
                        .into()
                }
            };
            let _ = writeln!(out, "bus                        nats      {detail}");
            if let Some(why) = crate::bus::credentials::open_to_strangers(url) {
                let _ = writeln!(out, "bus credentials            warn      {why}");
            }
        }
        None => {
            let _ = writeln!(out, "bus                        memory    NATS_URL is not set; events fan out in-process");
        }
    }
}
