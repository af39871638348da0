//! `pidevops doctor`: the truth about a configuration without serving — the database, the loop plan (which
//! background loops this configuration runs, and why the others do not: [`plan`], from the loop catalog that
//! `serve` starts and `/health` reports), containment, webhooks and each provider's API.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::config::Settings;
use crate::loops::LoopState;
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
    ok &= github_api(&mut out, settings).await;
    ok &= linear_api(&mut out, settings).await;
    ok &= telegram_api(&mut out, settings).await;
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

/// GitHub's API with `GITHUB_TOKEN`, and then the repositories' webhooks.
async fn github_api(out: &mut String, settings: &Settings) -> bool {
    let mut ok = true;
    match &settings.github_token {
        None => {
            let _ = writeln!(
                out,
                "github api                 disabled  GITHUB_TOKEN is not set; no pull requests or comments"
            );
        }
        Some(token) => {
            let checked = match crate::providers::github::GithubClient::new(
                &settings.github_api_url,
                token,
            ) {
                Err(e) => Err(e),
                Ok(client) => {
                    match tokio::time::timeout(Duration::from_secs(10), client.whoami()).await {
                        Ok(Ok(login)) => Ok(login),
                        Ok(Err(e)) => Err(e.to_string()),
                        Err(_) => Err("no answer within 10 s".to_owned()),
                    }
                }
            };
            match checked {
                Ok(login) => {
                    let _ = writeln!(
                        out,
                        "github api                 pass      {} answers; GITHUB_TOKEN is {login}'s",
                        settings.github_api_url
                    );
                    github_webhooks(out, settings, token).await;
                }
                Err(e) => {
                    ok = false;
                    let _ = writeln!(
                        out,
                        "github api                 FAIL      {}: {e}",
                        settings.github_api_url
                    );
                }
            }
        }
    }
    ok
}

/// Linear's API with `LINEAR_API_KEY`.
async fn linear_api(out: &mut String, settings: &Settings) -> bool {
    let mut ok = true;
    match &settings.linear_api_key {
        None => {
            let _ = writeln!(
                out,
                "linear api                 disabled  LINEAR_API_KEY is not set; Linear hears nothing back and is not polled"
            );
        }
        Some(key) => {
            let checked =
                match crate::providers::linear::LinearClient::new(&settings.linear_api_url, key) {
                    Err(e) => Err(e),
                    Ok(client) => within_10s(client.viewer()).await,
                };
            ok &= report(
                out,
                "linear api",
                &settings.linear_api_url,
                checked.map(|name| format!("LINEAR_API_KEY acts as {name}")),
            );
        }
    }
    ok
}

/// The Bot API with `TELEGRAM_BOT_TOKEN`, and how updates arrive.
async fn telegram_api(out: &mut String, settings: &Settings) -> bool {
    let mut ok = true;
    match &settings.telegram_bot_token {
        None => {
            let _ = writeln!(
                out,
                "telegram api               disabled  TELEGRAM_BOT_TOKEN is not set; no bot"
            );
        }
        Some(token) => {
            let checked = match crate::providers::telegram::TelegramClient::new(
                &settings.telegram_api_url,
                token,
            ) {
                Err(e) => Err(e),
                Ok(client) => match within_10s(client.get_me()).await {
                    Err(e) => Err(e),
                    Ok(bot) => within_10s(client.webhook_url()).await.map(|url| {
                        let mode = match (url.is_empty(), settings.webhook_secrets.is_set("telegram")) {
                            (true, false) => "no webhook: telegram_updates long-polls".to_owned(),
                            (true, true) => "no webhook registered, though TELEGRAM_WEBHOOK_SECRET is set: register one (setWebhook with the secret)".to_owned(),
                            (false, _) => format!("webhook registered at {url}"),
                        };
                        format!("the bot is @{bot}; {mode}")
                    }),
                },
            };
            ok &= report(out, "telegram api", &settings.telegram_api_url, checked);
        }
    }
    ok
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

/// A provider's read-only check, bounded: a hung API is a failed check, not a hung doctor.
async fn within_10s<T>(
    call: impl std::future::Future<Output = Result<T, crate::effects::CallError>>,
) -> Result<T, String> {
    match tokio::time::timeout(Duration::from_secs(10), call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 10 s".to_owned()),
    }
}

/// One provider line of the report; says whether it passed.
fn report(out: &mut String, label: &str, url: &str, checked: Result<String, String>) -> bool {
    match checked {
        Ok(detail) => {
            let _ = writeln!(out, "{label:<26} pass      {url} answers; {detail}");
            true
        }
        Err(e) => {
            let _ = writeln!(out, "{label:<26} FAIL      {url}: {e}");
            false
        }
    }
}

/// For each configured repository, whether a webhook delivers to `/webhooks/github`. Reported, never failed: without
/// one, `github_poller` still finds merges and CI failures, only later.
async fn github_webhooks(out: &mut String, settings: &Settings, token: &secrecy::SecretString) {
    let Ok(client) = crate::providers::github::GithubClient::new(&settings.github_api_url, token)
    else {
        return;
    };
    // Every configured repository, an empty `[repos."o/n"]` (as `init` writes it) too.
    for repo in settings.file.board.allowed.repositories() {
        let line = match within_10s(client.webhook_urls(repo)).await {
            Ok(urls) => match urls.iter().find(|u| u.ends_with("/webhooks/github")) {
                Some(url) => format!("pass      delivers to {url}"),
                None => "warn      no webhook delivers to …/webhooks/github: GitHub events arrive only through github_poller".to_owned(),
            },
            Err(e) => format!("warn      cannot list webhooks ({e}); the token needs Webhooks: read"),
        };
        let _ = writeln!(out, "{:<26} {line}", format!("github webhook {repo}"));
    }
}
