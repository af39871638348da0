//! The loop plan: which background loops this configuration runs, and why the others do not. `serve` starts
//! exactly this plan, `/health` reports it, and `pidevops doctor` prints it without serving.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::config::Settings;
use crate::eventlog::EventStore;
use crate::loops::LoopState;

pub const HEARTBEAT_LOOP: &str = "database_heartbeat";
pub const METRICS_UPKEEP_LOOP: &str = "metrics_upkeep";
pub const METRICS_UPKEEP_INTERVAL: Duration = Duration::from_secs(5);
/// The `telegram_updates` loop's interval: it polls again at once after each answer, so this is only the wait
/// after an error or while another replica holds the loop; and `/health` calls the loop stale after three of
/// them, which must be longer than one long poll ([`TELEGRAM_LONG_POLL_S`]).
pub const TELEGRAM_POLL: Duration = Duration::from_secs(5);
/// How long one `getUpdates` waits for news.
pub const TELEGRAM_LONG_POLL_S: u64 = 10;

#[derive(Clone, Debug, PartialEq)]
pub struct PlannedLoop {
    pub name: String,
    /// Singleton loops run on the one replica holding their lease.
    pub singleton: bool,
    pub state: LoopState,
    pub reason: Option<String>,
    pub interval: Duration,
    pub what: &'static str,
}

/// Which loops run under these settings. Pure.
pub fn plan(settings: &Settings) -> Vec<PlannedLoop> {
    let mut loops = vec![
        PlannedLoop {
            name: HEARTBEAT_LOOP.to_owned(),
            singleton: false,
            state: LoopState::Armed,
            reason: None,
            interval: settings.heartbeat_interval,
            what: "a database round trip (and, while appends fail, one probe append), so an outage or a full disk shows in /health and /metrics, and its end too, even with no traffic",
        },
        match settings.nats_url {
            Some(_) => PlannedLoop {
                name: crate::bus::relay::RELAY.to_owned(),
                singleton: true,
                state: LoopState::Armed,
                reason: None,
                interval: settings.relay_interval,
                what: "publishes committed events to NATS JetStream (NATS_URL), in order, each once",
            },
            // Publishing every body to an in-process bus nobody reads would cost ingest a fifth of its throughput
            // (measured); it is armed when something consumes it.
            None => PlannedLoop {
                name: crate::bus::relay::RELAY.to_owned(),
                singleton: true,
                state: LoopState::Disabled,
                reason: Some(
                    "NATS_URL is not set, and nothing in this process consumes the in-process bus yet".to_owned(),
                ),
                interval: settings.relay_interval,
                what: "",
            },
        },
        PlannedLoop {
            name: METRICS_UPKEEP_LOOP.to_owned(),
            singleton: false,
            state: LoopState::Armed,
            reason: None,
            interval: METRICS_UPKEEP_INTERVAL,
            what: "drains histogram buffers so /metrics stays cheap to render",
        },
        PlannedLoop {
            name: crate::loops::lease::LEASES_LOOP.to_owned(),
            singleton: false,
            state: LoopState::Armed,
            reason: None,
            interval: settings.lease_ttl / 6,
            what: "renews this replica's leases and takes over singleton loops whose holder went silent",
        },
    ];
    loops.push(PlannedLoop {
        name: crate::intake::INTAKE.to_owned(),
        singleton: true,
        state: LoopState::Armed,
        reason: None,
        interval: settings.projector_interval,
        what: "turns qualifying GitHub issues, Linear issues and Telegram /new into tasks, and records why others do not",
    });
    loops.push(
        match (
            &settings.telegram_bot_token,
            settings.telegram_webhook_secret.is_set(),
        ) {
            (Some(_), false) => PlannedLoop {
                name: crate::ingress::telegram_updates::TELEGRAM_UPDATES.to_owned(),
                singleton: true,
                state: LoopState::Armed,
                reason: None,
                interval: TELEGRAM_POLL,
                what: "long-polls getUpdates (no webhook: TELEGRAM_WEBHOOK_SECRET is not set) into the log",
            },
            (Some(_), true) => PlannedLoop {
                name: crate::ingress::telegram_updates::TELEGRAM_UPDATES.to_owned(),
                singleton: true,
                state: LoopState::Disabled,
                reason: Some(
                    "webhook mode: TELEGRAM_WEBHOOK_SECRET is set, so updates come to /webhooks/telegram".to_owned(),
                ),
                interval: TELEGRAM_POLL,
                what: "",
            },
            (None, _) => PlannedLoop {
                name: crate::ingress::telegram_updates::TELEGRAM_UPDATES.to_owned(),
                singleton: true,
                state: LoopState::Disabled,
                reason: Some("TELEGRAM_BOT_TOKEN is not set".to_owned()),
                interval: TELEGRAM_POLL,
                what: "",
            },
        },
    );
    let telegram = crate::effects::Provider::Telegram.loop_name();
    let telegram_chats = settings
        .telegram_allowed_chats
        .as_deref()
        .is_some_and(|c| c.split(',').any(|c| !c.trim().is_empty()));
    loops.push(match (&settings.telegram_bot_token, telegram_chats) {
        (Some(_), true) => PlannedLoop {
            name: telegram,
            singleton: true,
            state: LoopState::Armed,
            reason: None,
            interval: settings.projector_interval,
            what: if settings.telegram_allowed_users.is_some() {
                "tells TELEGRAM_ALLOWED_CHATS when a task waits for approval, needs a human, is in review, done or cancelled; only TELEGRAM_ALLOWED_USERS can command"
            } else {
                "tells TELEGRAM_ALLOWED_CHATS when a task waits for approval, needs a human, is in review, done or cancelled; any member of an allowed group can command (TELEGRAM_ALLOWED_USERS is not set)"
            },
        },
        (None, _) => PlannedLoop {
            name: telegram,
            singleton: true,
            state: LoopState::Disabled,
            reason: Some("TELEGRAM_BOT_TOKEN is not set: no Telegram messages".to_owned()),
            interval: settings.projector_interval,
            what: "",
        },
        (Some(_), false) => PlannedLoop {
            name: telegram,
            singleton: true,
            state: LoopState::Disabled,
            reason: Some("TELEGRAM_ALLOWED_CHATS is not set: no chat to tell".to_owned()),
            interval: settings.projector_interval,
            what: "",
        },
    });
    let digests_without_telegram = |list: &[crate::cron::Schedule]| {
        let digest = list
            .iter()
            .find(|s| s.action == crate::cron::ScheduleAction::Digest)?;
        let missing = match (&settings.telegram_bot_token, telegram_chats) {
            (None, _) => "TELEGRAM_BOT_TOKEN is not set",
            (Some(_), false) => "TELEGRAM_ALLOWED_CHATS is not set",
            (Some(_), true) => return None,
        };
        Some(format!(
            "schedule {:?} sends a digest to Telegram, but {missing}",
            digest.name
        ))
    };
    loops.push(match &settings.file.schedules {
        list if digests_without_telegram(list).is_some() => PlannedLoop {
            name: crate::cron::CRON.to_owned(),
            singleton: true,
            state: LoopState::Unarmed,
            reason: digests_without_telegram(list),
            interval: settings.projector_interval,
            what: "",
        },
        list if !list.is_empty() => PlannedLoop {
            name: crate::cron::CRON.to_owned(),
            singleton: true,
            state: LoopState::Armed,
            reason: None,
            interval: settings.projector_interval,
            what: "creates the tasks of [[schedules]] and sends digests on time; after downtime each overdue schedule fires once",
        },
        _ => PlannedLoop {
            name: crate::cron::CRON.to_owned(),
            singleton: true,
            state: LoopState::Disabled,
            reason: Some("no [[schedules]] in pidevops.toml".to_owned()),
            interval: settings.projector_interval,
            what: "",
        },
    });
    loops.push(PlannedLoop {
        name: crate::reactions::REACTIONS.to_owned(),
        singleton: true,
        state: LoopState::Armed,
        reason: None,
        interval: settings.projector_interval,
        what: "turns CI failures, requested changes, review comments, merges and closes on pidevops branches into task commands",
    });
    loops.extend(dispatch_loops(settings));
    loops.push(match settings.github_token {
        Some(_) => PlannedLoop {
            name: crate::effects::Provider::Github.loop_name(),
            singleton: true,
            state: LoopState::Armed,
            reason: None,
            interval: settings.projector_interval,
            what: "opens each task's pull request when it goes to review (GITHUB_API_URL), once, recorded",
        },
        None => PlannedLoop {
            name: crate::effects::Provider::Github.loop_name(),
            singleton: true,
            state: LoopState::Disabled,
            reason: Some("GITHUB_TOKEN is not set: no pull requests are opened".to_owned()),
            interval: settings.projector_interval,
            what: "",
        },
    });
    let linear = crate::effects::Provider::Linear.loop_name();
    loops.push(
        match &settings.linear_api_key {
            Some(_) => PlannedLoop {
                name: linear,
                singleton: true,
                state: LoopState::Armed,
                reason: None,
                interval: settings.projector_interval,
                what: "comments on and moves the tasks' Linear issues, and speaks in Linear agent sessions (LINEAR_API_URL)",
            },
            None => PlannedLoop {
                name: linear,
                singleton: true,
                state: LoopState::Disabled,
                reason: Some("LINEAR_API_KEY is not set: Linear hears nothing back".to_owned()),
                interval: settings.projector_interval,
                what: "",
            },
        },
    );
    loops.push(poller_loop(
        crate::pollers::linear::LINEAR_POLLER,
        &settings.file.linear_poller,
        settings.linear_api_key.is_some(),
        "LINEAR_API_KEY",
        "asks Linear for labeled issues changed since the last poll and appends what the webhook missed",
    ));
    loops.push(poller_loop(
        crate::pollers::github::GITHUB_POLLER,
        &settings.file.github_poller,
        settings.github_token.is_some(),
        "GITHUB_TOKEN",
        "checks the pull requests of tasks in review (merged, closed, failed checks) for missed webhooks",
    ));
    for projector in crate::projectors::all() {
        loops.push(PlannedLoop {
            name: crate::projectors::loop_name(projector.name()),
            singleton: true,
            state: LoopState::Armed,
            reason: None,
            interval: settings.projector_interval,
            what: "applies newly committed events to a read model, checkpointed in the same transaction",
        });
    }
    loops
}

/// A poller: armed with its credential; asked for (`[pollers.<name>]`) without it, `unarmed`, since missed
/// webhooks would go unnoticed; neither, disabled.
fn poller_loop(
    name: &str,
    config: &crate::pollers::PollerConfig,
    credential: bool,
    variable: &str,
    what: &'static str,
) -> PlannedLoop {
    // `linear_poller` is configured under `[pollers.linear]`.
    let table = name.trim_end_matches("_poller");
    let planned = |state, reason: Option<String>, interval| PlannedLoop {
        name: name.to_owned(),
        singleton: true,
        state,
        reason,
        interval,
        what: if state == LoopState::Armed { what } else { "" },
    };
    match config {
        config if !config.enabled => planned(
            LoopState::Disabled,
            Some(format!("pollers.{table}.enabled is false")),
            config.interval,
        ),
        config if credential => planned(LoopState::Armed, None, config.interval),
        config if config.configured => planned(
            LoopState::Unarmed,
            Some(format!(
                "[pollers.{table}] is set but {variable} is not: missed webhooks would go unnoticed"
            )),
            config.interval,
        ),
        config => planned(
            LoopState::Disabled,
            Some(format!("{variable} is not set")),
            config.interval,
        ),
    }
}

/// The dispatcher, watchdog and gc: all three run when dispatch is on; the dispatcher is `unarmed` when it is on
/// but nothing could run (no agent executable, a repository needing `GITHUB_TOKEN` without it, …).
fn dispatch_loops(settings: &Settings) -> Vec<PlannedLoop> {
    use crate::dispatch::dispatcher::{cannot_run, watchdog_interval, DISPATCHER, GC, WATCHDOG};
    let (config, profiles) = (&settings.file.dispatch, &settings.file.profiles);
    let planned = |name: &str, singleton, interval, what| PlannedLoop {
        name: name.to_owned(),
        singleton,
        state: LoopState::Armed,
        reason: None,
        interval,
        what,
    };
    let gc_interval = Duration::from_secs(600);
    let mut loops = vec![
        planned(
            DISPATCHER,
            true,
            settings.projector_interval,
            "claims todo tasks by priority and age within the concurrency limits and starts their runs",
        ),
        planned(
            WATCHDOG,
            true,
            watchdog_interval(config),
            "declares runs lost when they go silent and retries their tasks; applies outcomes a crash left unapplied",
        ),
        // Every replica removes its own old worktrees.
        planned(GC, false, gc_interval, "removes worktrees of finished runs after dispatch.worktree_ttl_h"),
    ];
    if let Some(off) = &config.off {
        for planned in &mut loops {
            planned.state = LoopState::Disabled;
            planned.reason = Some(off.clone());
        }
    } else if let Some(why) = cannot_run(
        config,
        profiles,
        &settings.env,
        settings.github_token.is_some(),
        settings.nats_url.is_some(),
    ) {
        loops[0].state = LoopState::Unarmed;
        loops[0].reason = Some(why);
    }
    loops
}

/// Prints the truth about this configuration; returns the report and whether everything enabled can run.
pub async fn diagnose(settings: &Settings) -> (String, bool) {
    let mut out = String::new();
    let mut ok = true;
    let _ = writeln!(out, "pidevops {} doctor", env!("CARGO_PKG_VERSION"));
    if let Some(path) = &settings.config_file {
        let _ = writeln!(out, "config file      {}", path.display());
    }

    let started = Instant::now();
    let database = async {
        let store = EventStore::connect(&settings.database, 2).await?;
        store.ping().await?;
        let head = store.head().await.ok();
        Ok::<_, crate::eventlog::StoreError>(head)
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
                "database         FAIL      {}: {e}",
                settings.database.redacted()
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
    }

    // Not a failure (a fresh install has no repositories yet), but every ticket would be refused: say so.
    if settings.file.board.allowed.is_empty() {
        let _ = writeln!(
            out,
            "allowed repos              warn      none: no [repos.\"o/n\"] and no [intake] allow_repos, so every \
             task is refused (intake records why)"
        );
    }

    for (name, secret) in [
        ("github", &settings.github_webhook_secret),
        ("linear", &settings.linear_webhook_secret),
        ("telegram", &settings.telegram_webhook_secret),
    ] {
        let (state, detail) = if secret.is_set() {
            (
                "armed",
                format!("POST /webhooks/{name} verifies with {}", secret.variable),
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
    match &settings.github_token {
        None => {
            let _ = writeln!(
                out,
                "github api                 disabled  GITHUB_TOKEN is not set; no pull requests or comments"
            );
        }
        Some(token) => {
            let checked =
                match crate::effects::github::GithubClient::new(&settings.github_api_url, token) {
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
                    github_webhooks(&mut out, settings, token).await;
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
    match &settings.linear_api_key {
        None => {
            let _ = writeln!(
                out,
                "linear api                 disabled  LINEAR_API_KEY is not set; Linear hears nothing back and is not polled"
            );
        }
        Some(key) => {
            let checked =
                match crate::effects::linear::LinearClient::new(&settings.linear_api_url, key) {
                    Err(e) => Err(e),
                    Ok(client) => within_10s(client.viewer()).await,
                };
            ok &= report(
                &mut out,
                "linear api",
                &settings.linear_api_url,
                checked.map(|name| format!("LINEAR_API_KEY acts as {name}")),
            );
        }
    }
    match &settings.telegram_bot_token {
        None => {
            let _ = writeln!(
                out,
                "telegram api               disabled  TELEGRAM_BOT_TOKEN is not set; no bot"
            );
        }
        Some(token) => {
            let checked = match crate::effects::telegram::TelegramClient::new(
                &settings.telegram_api_url,
                token,
            ) {
                Err(e) => Err(e),
                Ok(client) => match within_10s(client.get_me()).await {
                    Err(e) => Err(e),
                    Ok(bot) => within_10s(client.webhook_url()).await.map(|url| {
                        let mode = match (url.is_empty(), settings.telegram_webhook_secret.is_set()) {
                            (true, false) => "no webhook: telegram_updates long-polls".to_owned(),
                            (true, true) => "no webhook registered, though TELEGRAM_WEBHOOK_SECRET is set: register one (setWebhook with the secret)".to_owned(),
                            (false, _) => format!("webhook registered at {url}"),
                        };
                        format!("the bot is @{bot}; {mode}")
                    }),
                },
            };
            ok &= report(
                &mut out,
                "telegram api",
                &settings.telegram_api_url,
                checked,
            );
        }
    }
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
        }
        None => {
            let _ = writeln!(out, "bus                        memory    NATS_URL is not set; events fan out in-process");
        }
    }
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
    let config = &settings.file.dispatch;
    let Ok(client) = crate::effects::github::GithubClient::new(&settings.github_api_url, token)
    else {
        return;
    };
    for repo in config.repos.keys() {
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
