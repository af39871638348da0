//! `build(Settings) -> App`: the one constructor for `main` and for tests. It connects, migrates, starts the
//! appender and every loop in the plan, and binds the listener (port 0 in tests) before anything is served.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::bus::relay::{BusTarget, Relay, RELAY};
use crate::bus::MemoryBus;
use crate::config::Settings;
use crate::dispatch::config::Executor;
use crate::dispatch::dispatcher::{DispatcherParts, DISPATCHER, GC, WATCHDOG};
use crate::dispatch::workspace::Workspaces;
use crate::dispatch::Dispatcher;
use crate::doctor::{self, HEARTBEAT_LOOP, METRICS_UPKEEP_LOOP};
use crate::eventlog::{EventLog, EventStore};
use crate::http::{router, AppState};
use crate::loops::lease::{while_held, LeaseHandle, Leases, LEASES_LOOP};
use crate::loops::{self, LoopSpec, LoopState, Pace};
use crate::projectors::{self, Projection};
use crate::telemetry;

/// How long a graceful shutdown may take before the process gives up waiting.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(9);

pub struct App {
    listener: TcpListener,
    state: AppState,
    shutdown: CancellationToken,
    appender_shutdown: CancellationToken,
    appender: tokio::task::JoinHandle<()>,
    tracker: TaskTracker,
    leases: Leases,
}

pub async fn build(settings: Settings) -> anyhow::Result<App> {
    let metrics = telemetry::metrics_handle();
    let store = EventStore::connect(&settings.database, settings.max_db_connections)
        .await
        .with_context(|| format!("connecting to {}", settings.database.redacted()))?;
    store.migrate().await.context("applying migrations")?;

    let shutdown = CancellationToken::new();
    let appender_shutdown = CancellationToken::new();
    let (log, appender) = EventLog::start(
        store.clone(),
        settings.append_timeout,
        appender_shutdown.clone(),
    );

    let relay = Arc::new(
        Relay::new(
            store.clone(),
            match &settings.nats_url {
                Some(url) => BusTarget::Nats {
                    url: url.clone(),
                    config: settings.bus.clone(),
                },
                None => BusTarget::Memory(MemoryBus::new(settings.bus.clone())),
            },
        )
        // One interval of publishing per tick; with a backlog the next tick follows at once (`Pace::Again`).
        .with_tick_budget(settings.relay_interval),
    );
    let bus_kind = relay.bus_kind();
    let fail_after = settings.file.loop_fail_after.clone();
    check_fail_after(&fail_after, &doctor::plan(&settings))
        .map_err(|e| anyhow::anyhow!("pidevops.toml: {e}"))?;
    let registry = loops::LoopRegistry::with_fail_after(fail_after);
    let leases = Leases::new(
        store.clone(),
        settings.instance_id.clone(),
        settings.lease_ttl,
    );
    let projections: BTreeMap<String, Arc<Projection>> = projectors::all()
        .into_iter()
        .map(|p| {
            (
                projectors::loop_name(p.name()),
                Arc::new(
                    Projection::new(store.clone(), p).with_tick_budget(settings.projector_interval),
                ),
            )
        })
        .collect();
    // Checked when the settings were read: a bad profile or dispatch setting never got this far.
    let board_config = settings.file.board.clone();
    let profiles = settings.file.profiles.clone();
    let dispatch_config = settings.file.dispatch.clone();
    let board = crate::board::Board::new(log.clone(), board_config);
    let tracker = TaskTracker::new();
    let dispatcher = match dispatch_config.off {
        Some(_) => None,
        None => Some(
            dispatcher(
                &settings,
                &board,
                &log,
                dispatch_config,
                profiles,
                &tracker,
                &shutdown,
            )
            .await?,
        ),
    };
    let intake_config = settings
        .file
        .intake
        .clone()
        .with_telegram(
            settings.telegram_allowed_chats.as_deref(),
            settings.telegram_allowed_users.as_deref(),
        )
        .map_err(|e| anyhow::anyhow!("intake configuration: {e}"))?;
    let schedules = settings.file.schedules.clone();
    let cron = Arc::new(crate::cron::CronLoop::new(
        log.clone(),
        board.clone(),
        schedules,
    ));
    let telegram_chats: Vec<i64> = intake_config
        .telegram_allowed_chats
        .iter()
        .copied()
        .collect();
    let telegram_users = intake_config.telegram_allowed_users.clone();
    let reactions = Arc::new(crate::reactions::Reactions::new(
        log.clone(),
        board.clone(),
        intake_config.github_bot_login.clone(),
        intake_config.github_associations.clone(),
    ));
    let linear_label = intake_config.linear_label.clone();
    let intake = Arc::new(
        crate::intake::Intake::new(log.clone(), board.clone(), intake_config)
            .with_tick_budget(settings.projector_interval),
    );
    let plan = doctor::plan(&settings);
    // Every singleton's lease is known before any loop starts, so the first lease round tries for all of them.
    for planned in &plan {
        if planned.singleton && planned.state == LoopState::Armed {
            leases.register(&planned.name);
        }
    }
    for planned in plan {
        let name = planned.name.clone();
        match planned.state {
            LoopState::Disabled => registry.disable(&name, planned.reason.unwrap_or_default()),
            LoopState::Unarmed => registry.unarm(&name, planned.reason.unwrap_or_default()),
            LoopState::Armed => {
                if acts_on_news_only(&name) {
                    start_at_head(&store, &name).await?;
                }
                let spec = LoopSpec::new(&name, planned.interval, settings.loop_startup_delay);
                let mut first_detail: Option<serde_json::Value> = None;
                let job = match name.as_str() {
                    HEARTBEAT_LOOP => Job::Heartbeat(log.clone()),
                    RELAY => Job::Relay(relay.clone()),
                    METRICS_UPKEEP_LOOP => Job::MetricsUpkeep(metrics.clone()),
                    LEASES_LOOP => Job::Leases(leases.clone()),
                    crate::intake::INTAKE => Job::Intake(intake.clone()),
                    crate::reactions::REACTIONS => Job::Reactions(reactions.clone()),
                    crate::cron::CRON => Job::Cron(cron.clone()),
                    crate::ingress::telegram_updates::TELEGRAM_UPDATES => {
                        let token = settings.telegram_bot_token.as_ref().context(
                            "the loop plan arms telegram_updates without TELEGRAM_BOT_TOKEN",
                        )?;
                        let client = crate::effects::telegram::TelegramClient::new(
                            &settings.telegram_api_url,
                            token,
                        )
                        .map_err(|e| anyhow::anyhow!(e))?;
                        Job::TelegramUpdates(Arc::new(
                            crate::ingress::telegram_updates::TelegramUpdates::new(
                                client,
                                log.clone(),
                                settings.telegram_bot_id.clone(),
                                doctor::TELEGRAM_LONG_POLL_S,
                            ),
                        ))
                    }
                    name if name == crate::effects::Provider::Github.loop_name() => {
                        Job::Effects(github_effects(&settings, &log, &board)?)
                    }
                    crate::pollers::linear::LINEAR_POLLER => {
                        let key = settings
                            .linear_api_key
                            .as_ref()
                            .context("the loop plan arms linear_poller without LINEAR_API_KEY")?;
                        let client = crate::effects::linear::LinearClient::new(
                            &settings.linear_api_url,
                            key,
                        )
                        .map_err(|e| anyhow::anyhow!(e))?;
                        Job::LinearPoller(Arc::new(crate::pollers::linear::LinearPoller::new(
                            client,
                            log.clone(),
                            board.clone(),
                            linear_label.clone(),
                        )))
                    }
                    crate::pollers::github::GITHUB_POLLER => {
                        let token = settings
                            .github_token
                            .as_ref()
                            .context("the loop plan arms github_poller without GITHUB_TOKEN")?;
                        let client = crate::effects::github::GithubClient::new(
                            &settings.github_api_url,
                            token,
                        )
                        .map_err(|e| anyhow::anyhow!(e))?;
                        Job::GithubPoller(Arc::new(crate::pollers::github::GithubPoller::new(
                            client,
                            log.clone(),
                        )))
                    }
                    name if name == crate::effects::Provider::Linear.loop_name() => {
                        Job::Effects(linear_effects(&settings, &log, &board)?)
                    }
                    name if name == crate::effects::Provider::Telegram.loop_name() => {
                        Job::Effects(telegram_effects(
                            &settings,
                            &log,
                            &board,
                            telegram_chats.clone(),
                            telegram_users.clone(),
                            &registry,
                        )?)
                    }
                    name @ (DISPATCHER | WATCHDOG | GC) => {
                        let dispatcher = dispatcher.clone().with_context(|| {
                            format!("the loop plan arms {name} but dispatch is off")
                        })?;
                        match name {
                            DISPATCHER => {
                                // Shown before the first tick: how agents are contained is known at start.
                                first_detail = Some(serde_json::json!({
                                    "containment": dispatcher.containment().kind(),
                                    "confinement": dispatcher.confinement(),
                                }));
                                Job::Dispatcher(dispatcher)
                            }
                            WATCHDOG => Job::Watchdog(dispatcher),
                            _ => Job::Gc(dispatcher),
                        }
                    }
                    other => match projections.get(other) {
                        Some(projection) => Job::Projector(projection.clone()),
                        None => anyhow::bail!(
                            "the loop plan names {other}, which startup does not know"
                        ),
                    },
                };
                let lease = planned.singleton.then(|| leases.register(&name));
                spawn_job(&registry, &tracker, &shutdown, spec, job, lease);
                if let Some(detail) = first_detail.take() {
                    registry.set_detail(&name, detail);
                }
            }
        }
    }

    let listener = bind(settings.bind, settings.port)
        .with_context(|| format!("binding port {} on {}", settings.port, settings.bind))?;
    let state = AppState {
        settings: Arc::new(settings),
        log,
        loops: registry,
        metrics,
        started: Instant::now(),
        bus_kind,
        leases: leases.clone(),
        shutdown: shutdown.clone(),
        board,
        sign_ins: Default::default(),
        ingress_budget: Default::default(),
        last_health: Default::default(),
    };
    Ok(App {
        listener,
        state,
        shutdown,
        appender_shutdown,
        appender,
        tracker,
        leases,
    })
}

/// The `effects:github` loop's worker: GitHub at `GITHUB_API_URL` with `GITHUB_TOKEN`, pull requests to each
/// repository's base branch.
fn github_effects(
    settings: &Settings,
    log: &EventLog,
    board: &crate::board::Board,
) -> anyhow::Result<Arc<crate::effects::runner::Effects>> {
    let token = settings
        .github_token
        .as_ref()
        .context("the loop plan arms effects:github without GITHUB_TOKEN")?;
    let client = crate::effects::github::GithubClient::new(&settings.github_api_url, token)
        .map_err(|e| anyhow::anyhow!(e))?;
    let bases = settings
        .file
        .dispatch
        .repos
        .iter()
        .map(|(repo, source)| (repo.clone(), source.base.clone()))
        .collect();
    Ok(Arc::new(crate::effects::runner::Effects::github(
        log.clone(),
        board.clone(),
        client,
        crate::effects::policy::PolicyConfig {
            bases,
            ..Default::default()
        },
    )))
}

/// The `effects:telegram` loop's worker: the Bot API at `TELEGRAM_API_URL`, notifications to the allowed chats.
fn telegram_effects(
    settings: &Settings,
    log: &EventLog,
    board: &crate::board::Board,
    chats: Vec<i64>,
    users: Option<std::collections::BTreeSet<i64>>,
    loops: &loops::LoopRegistry,
) -> anyhow::Result<Arc<crate::effects::runner::Effects>> {
    let token = settings
        .telegram_bot_token
        .as_ref()
        .context("the loop plan arms effects:telegram without TELEGRAM_BOT_TOKEN")?;
    let client = crate::effects::telegram::TelegramClient::new(&settings.telegram_api_url, token)
        .map_err(|e| anyhow::anyhow!(e))?;
    Ok(Arc::new(
        crate::effects::runner::Effects::telegram(
            log.clone(),
            board.clone(),
            client,
            crate::effects::policy::PolicyConfig {
                telegram_chats: chats,
                telegram_users: users,
                telegram_cooldown: settings.file.telegram_cooldown,
                ..Default::default()
            },
        )
        .with_loops(loops.clone()),
    ))
}

/// The `effects:linear` loop's worker: Linear's GraphQL API at `LINEAR_API_URL` with `LINEAR_API_KEY`, issues
/// moved through `[linear.states]`.
fn linear_effects(
    settings: &Settings,
    log: &EventLog,
    board: &crate::board::Board,
) -> anyhow::Result<Arc<crate::effects::runner::Effects>> {
    let key = settings
        .linear_api_key
        .as_ref()
        .context("the loop plan arms effects:linear without LINEAR_API_KEY")?;
    let client = crate::effects::linear::LinearClient::new(&settings.linear_api_url, key)
        .map_err(|e| anyhow::anyhow!(e))?;
    let linear_states = settings.file.linear_states.clone();
    Ok(Arc::new(crate::effects::runner::Effects::linear(
        log.clone(),
        board.clone(),
        client,
        crate::effects::policy::PolicyConfig {
            linear_states,
            github_prs: settings.github_token.is_some(),
            ..Default::default()
        },
    )))
}

/// Loops whose events are instructions to act now (call out, steer a task): on their very first start they begin
/// at the log's head, so turning one on for a log with history does not act on last month's events (open pull
/// requests for old tasks, flood a chat, replay old bot commands).
fn acts_on_news_only(name: &str) -> bool {
    name.starts_with("effects:") || name == crate::reactions::REACTIONS
}

/// On a loop's very first start, sets its checkpoint to the log's head; on every later start it stays where it
/// is. "First" is remembered apart (checkpoint `started:<name>`), since a loop first started on an empty log still
/// has checkpoint 0: without the mark, a restart before its first event would skip what arrived meanwhile.
async fn start_at_head(store: &EventStore, name: &str) -> anyhow::Result<()> {
    let mark = format!("started:{name}");
    let read = |name: String| async move {
        store
            .checkpoint(&name)
            .await
            .with_context(|| format!("reading the {name} checkpoint"))
    };
    if read(mark.clone()).await? > 0 {
        return Ok(());
    }
    if read(name.to_owned()).await? == 0 {
        let head = store.head().await.context("reading the log's head")?;
        if head > 0 {
            store
                .advance_checkpoint(name, head)
                .await
                .with_context(|| format!("starting {name} at the log's head"))?;
            tracing::info!(
                r#loop = name,
                head,
                "first start: acting on events from the head on"
            );
        }
    }
    store
        .advance_checkpoint(&mark, 1)
        .await
        .with_context(|| format!("marking {name} as started"))?;
    Ok(())
}

/// What a loop does on each tick.
enum Job {
    Heartbeat(EventLog),
    Relay(Arc<Relay>),
    MetricsUpkeep(metrics_exporter_prometheus::PrometheusHandle),
    Leases(Leases),
    Projector(Arc<Projection>),
    Intake(Arc<crate::intake::Intake>),
    Reactions(Arc<crate::reactions::Reactions>),
    Cron(Arc<crate::cron::CronLoop>),
    TelegramUpdates(Arc<crate::ingress::telegram_updates::TelegramUpdates>),
    Effects(Arc<crate::effects::runner::Effects>),
    LinearPoller(Arc<crate::pollers::linear::LinearPoller>),
    GithubPoller(Arc<crate::pollers::github::GithubPoller>),
    Dispatcher(Dispatcher),
    Watchdog(Dispatcher),
    Gc(Dispatcher),
}

impl Job {
    /// One tick's work, and its detail for `/health` (set even when the tick failed: during a NATS outage the
    /// relay's growing lag is the news).
    async fn run(&self) -> (Option<serde_json::Value>, anyhow::Result<Pace>) {
        match self {
            Self::Heartbeat(log) => (None, heartbeat(log).await.map(|()| Pace::Rest)),
            Self::Relay(relay) => {
                let result = relay
                    .tick()
                    .await
                    .map(|progress| Pace::again_if(progress.out_of_time));
                let detail = relay.lag().map(|lag| {
                    serde_json::json!({
                        "position": lag.position,
                        "head": lag.head,
                        "behind": lag.behind(),
                    })
                });
                (detail, result)
            }
            Self::MetricsUpkeep(handle) => {
                handle.run_upkeep();
                (None, Ok(Pace::Rest))
            }
            Self::Leases(leases) => (None, leases.tick().await.map(|()| Pace::Rest)),
            Self::Intake(intake) => match intake.tick().await {
                Ok(progress) => (
                    serde_json::to_value(progress).ok(),
                    Ok(Pace::again_if(progress.out_of_time)),
                ),
                Err(error) => (None, Err(error)),
            },
            // A long poll: it returns when there is news or after its wait, and polls again at once.
            Self::TelegramUpdates(updates) => match updates.tick().await {
                Ok(progress) => (serde_json::to_value(progress).ok(), Ok(Pace::Again)),
                Err(error) => (None, Err(error)),
            },
            Self::LinearPoller(poller) => match poller.tick().await {
                Ok(progress) => (serde_json::to_value(progress).ok(), Ok(Pace::Rest)),
                Err(error) => (None, Err(error)),
            },
            Self::GithubPoller(poller) => match poller.tick().await {
                Ok(progress) => (serde_json::to_value(progress).ok(), Ok(Pace::Rest)),
                Err(error) => (None, Err(error)),
            },
            Self::Cron(cron) => match cron.tick().await {
                Ok(progress) => (serde_json::to_value(progress).ok(), Ok(Pace::Rest)),
                Err(error) => (None, Err(error)),
            },
            Self::Reactions(reactions) => match reactions.tick().await {
                Ok(progress) => {
                    let again = Pace::again_if(progress.out_of_time);
                    (serde_json::to_value(progress).ok(), Ok(again))
                }
                Err(error) => (None, Err(error)),
            },
            Self::Effects(effects) => match effects.tick().await {
                Ok(progress) => {
                    let again = Pace::again_if(progress.out_of_time);
                    (serde_json::to_value(progress).ok(), Ok(again))
                }
                Err(error) => (None, Err(error)),
            },
            Self::Dispatcher(dispatcher) => match dispatcher.tick().await {
                Ok(status) => (serde_json::to_value(status).ok(), Ok(Pace::Rest)),
                Err(error) => (None, Err(error)),
            },
            Self::Watchdog(dispatcher) => match dispatcher.watchdog_tick().await {
                Ok(status) => (serde_json::to_value(status).ok(), Ok(Pace::Rest)),
                Err(error) => (None, Err(error)),
            },
            Self::Gc(dispatcher) => match dispatcher.gc_tick().await {
                Ok(report) => (serde_json::to_value(report).ok(), Ok(Pace::Rest)),
                Err(error) => (None, Err(error)),
            },
            Self::Projector(projection) => match projection.tick().await {
                Ok(status) => (
                    serde_json::to_value(&status).ok(),
                    Ok(Pace::again_if(status.out_of_time)),
                ),
                Err(error) => (None, Err(error)),
            },
        }
    }

    /// Called when this replica becomes the holder of the job's lease: state cached while another replica held
    /// it is stale now.
    async fn on_acquired(&self) {
        if let Self::Relay(relay) = self {
            relay.resync().await;
        }
    }
}

/// Each `[loops.<name>]` must name a loop this process plans, with a threshold longer than its interval (a
/// shorter one would call the loop dead between two healthy ticks).
pub(crate) fn check_fail_after(
    fail_after: &BTreeMap<String, Duration>,
    plan: &[doctor::PlannedLoop],
) -> Result<(), String> {
    for (name, threshold) in fail_after {
        let Some(planned) = plan.iter().find(|p| &p.name == name) else {
            let known: Vec<&str> = plan.iter().map(|p| p.name.as_str()).collect();
            return Err(format!(
                "[loops.{name}]: no such loop (loops: {})",
                known.join(", ")
            ));
        };
        if *threshold <= planned.interval {
            return Err(format!(
                "[loops.{name}] fail_after_s: {} s is not longer than the loop's interval ({} s)",
                threshold.as_secs_f64(),
                planned.interval.as_secs_f64()
            ));
        }
    }
    Ok(())
}

/// How long a singleton's first tick waits for this replica's first try at its lease before it reports a standby.
const FIRST_LEASE_TRY_WAIT: Duration = Duration::from_secs(10);

/// Spawns a loop for `job`. A singleton job runs only while this replica holds its lease; the others tick as
/// standbys (so `/health` still sees them alive) and report who the holder is.
fn spawn_job(
    registry: &loops::LoopRegistry,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
    spec: LoopSpec,
    job: Job,
    lease: Option<LeaseHandle>,
) {
    let job = Arc::new(job);
    let registry_for_tick = registry.clone();
    let name = spec.name.clone();
    let was_holder = Arc::new(AtomicBool::new(false));
    loops::spawn(registry, tracker, shutdown.clone(), spec, move || {
        let (job, registry, name) = (job.clone(), registry_for_tick.clone(), name.clone());
        let (lease, was_holder) = (lease.clone(), was_holder.clone());
        async move {
            let (detail, result) = match &lease {
                None => job.run().await,
                Some(lease) => {
                    if !lease.is_held() {
                        // At start this lease may not have been tried yet: a lone replica is about to
                        // hold every lease, so wait for its first try (bounded) rather than report a standby.
                        let _ = tokio::time::timeout(FIRST_LEASE_TRY_WAIT, lease.first_try()).await;
                    }
                    let holder = lease.is_held();
                    if holder && !was_holder.swap(true, Ordering::SeqCst) {
                        // The standby's detail described a role this replica no longer has.
                        registry.clear_detail(&name);
                        job.on_acquired().await;
                    }
                    if !holder {
                        was_holder.store(false, Ordering::SeqCst);
                    }
                    match while_held(lease, async { Ok(job.run().await) }).await? {
                        Some(ran) => ran,
                        None => (
                            Some(serde_json::json!({ "role": "standby" })),
                            Ok(Pace::Rest),
                        ),
                    }
                }
            };
            if let Some(detail) = detail {
                registry.set_detail(&name, detail);
            }
            result
        }
    });
}

/// The dispatcher of a `serve` (or a `worker`): its workspaces under `WORKSPACE_ROOT`, and with
/// `executor = "workers"` the JetStream work queue runs are handed to.
pub async fn dispatcher(
    settings: &Settings,
    board: &crate::board::Board,
    log: &EventLog,
    config: crate::dispatch::DispatchConfig,
    profiles: crate::dispatch::Profiles,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) -> anyhow::Result<Dispatcher> {
    let workspaces = Workspaces::new(&settings.workspace_root, settings.github_token.clone())
        .with_context(|| {
            format!(
                "WORKSPACE_ROOT {} cannot be used",
                settings.workspace_root.display()
            )
        })?;
    let work = match (&config.executor, &settings.nats_url) {
        (Executor::Workers, Some(url)) => Some(
            crate::bus::work::WorkQueue::connect(Some(url), run_queue_config(), log.clone())
                .await
                .context("connecting to the JetStream work queue for workers")?,
        ),
        _ => None,
    };
    Ok(Dispatcher::new(DispatcherParts {
        board: board.clone(),
        log: log.clone(),
        config,
        profiles,
        workspaces,
        worker: settings.instance_id.clone(),
        env: settings.env.clone(),
        paused_by_env: settings.paused,
        tracker: tracker.clone(),
        shutdown: shutdown.clone(),
        work,
    }))
}

/// The work queue that carries run requests to workers: a run may take an hour, so a worker proves it is alive
/// with `progress` well inside `ack_wait`, and a request is delivered at most three times.
pub fn run_queue_config() -> crate::bus::work::WorkQueueConfig {
    crate::bus::work::WorkQueueConfig {
        stream: "PIDEVOPS_RUNS".to_owned(),
        subject_prefix: "pidevops.runs".to_owned(),
        consumer: "pidevops-run-workers".to_owned(),
        ack_wait: Duration::from_secs(60),
        max_deliver: 3,
        backoff: vec![Duration::from_secs(1)],
        ..Default::default()
    }
}

async fn heartbeat(log: &EventLog) -> anyhow::Result<()> {
    let started = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(5), log.store().ping()).await;
    let up = matches!(result, Ok(Ok(())));
    metrics::gauge!("pidevops_database_up").set(if up { 1.0 } else { 0.0 });
    match result {
        Ok(Ok(())) => {
            metrics::histogram!("pidevops_database_ping_seconds")
                .record(started.elapsed().as_secs_f64());
            log.probe_if_failing()
                .await
                .context("the database answers but appends still fail")
        }
        Ok(Err(e)) => Err(e).context("database round trip failed"),
        Err(_) => anyhow::bail!("database round trip took longer than 5 s"),
    }
}

/// Listens on IPv4 and IPv6 when given the unspecified IPv6 address (Railway's private network is IPv6), and
/// falls back to IPv4 where the host has no IPv6.
fn bind(ip: IpAddr, port: u16) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let open = |addr: SocketAddr| -> std::io::Result<std::net::TcpListener> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
        if addr.is_ipv6() && ip.is_unspecified() {
            socket.set_only_v6(false)?;
        }
        socket.set_reuse_address(true)?;
        socket.set_nodelay(true)?;
        socket.bind(&addr.into())?;
        socket.listen(1024)?;
        socket.set_nonblocking(true)?;
        Ok(socket.into())
    };
    let std_listener = match open(SocketAddr::new(ip, port)) {
        Ok(l) => l,
        Err(e) if ip.is_ipv6() && ip.is_unspecified() => {
            tracing::warn!(error = %e, "IPv6 is unavailable; listening on IPv4 only");
            open(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port))?
        }
        Err(e) => return Err(e),
    };
    TcpListener::from_std(std_listener)
}

impl App {
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Cancelling this token starts a graceful shutdown.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// For tests and later modules: where extra loops are tracked, so shutdown waits for them.
    pub fn tracker(&self) -> TaskTracker {
        self.tracker.clone()
    }

    /// Serves until the shutdown token fires, then stops accepting, lets in-flight requests (and the appends they
    /// wait on) finish, stops the loops and the appender. Errors if a critical task died on its own.
    pub async fn run(self) -> anyhow::Result<()> {
        let App {
            listener,
            state,
            shutdown,
            appender_shutdown,
            mut appender,
            tracker,
            leases,
        } = self;
        let addr = listener.local_addr().ok();
        tracing::info!(?addr, database = state.log.store().kind(), "serving");
        // The peer's address, for the dashboard's per-address sign-in throttle.
        let server = axum::serve(
            listener,
            router(state.clone()).into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown.clone().cancelled_owned());

        let mut appender_died = false;
        let served = tokio::select! {
            served = server => served.context("the HTTP server failed"),
            _ = &mut appender => {
                // The appender only ends on its own if it panicked: without it nothing can be acknowledged.
                appender_died = true;
                Err(anyhow::anyhow!("the event log appender stopped unexpectedly"))
            }
        };
        shutdown.cancel();
        tracker.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("loops did not stop within the shutdown grace");
        }
        // Only now: a stopping loop or an interrupted run still records its last events (a run's outcome and
        // its task's retry) through the appender.
        appender_shutdown.cancel();
        // The loops have stopped: hand their leases over now rather than at expiry.
        leases.release_all().await;
        if !appender_died
            && tokio::time::timeout(SHUTDOWN_GRACE, appender)
                .await
                .is_err()
        {
            tracing::warn!("the appender did not drain within the shutdown grace");
        }
        tracing::info!("stopped");
        served
    }
}
