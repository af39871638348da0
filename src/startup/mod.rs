//! `build(Settings) -> App`: the one constructor for `main` and for tests. It connects, migrates, starts the
//! appender and every loop in the plan, and binds the listener (port 0 in tests) before anything is served.

pub mod catalog;
mod core;
pub mod first_run;
pub mod worker;

pub use self::core::{connect, connect_existing, must_exist, Core, CLI_CONNECTIONS};

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::bus::relay::{BusTarget, Relay};
use crate::bus::MemoryBus;
use crate::config::dispatch::Executor;
use crate::config::Settings;
use crate::dispatch::dispatcher::DispatcherParts;
use crate::dispatch::workspace::Workspaces;
use crate::dispatch::Dispatcher;
use crate::eventlog::{EventLog, EventStore};
use crate::http::{router, AppState};
use crate::loops::lease::{while_held, LeaseHandle, Leases};
use crate::loops::{self, LoopSpec, LoopState, Pace};
use crate::providers::github::settings::GithubSettings;
use crate::telemetry;
use catalog::{Armed, ArmedLoops};

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
    armed: ArmedLoops,
}

pub async fn build(settings: Settings) -> anyhow::Result<App> {
    let metrics = telemetry::metrics_handle();
    let (settings, store, log, appender_shutdown, appender) =
        Core::open(settings).await?.into_parts();
    // Read once, before anything of this process can append: a loop that starts at the head on its first start
    // starts here, not at the head it happens to read when its turn to be built comes, by which time a loop
    // spawned before it (the Telegram poller) may have appended what it must act on.
    let head_at_start = store.head().await.context("reading the log's head")?;
    let shutdown = CancellationToken::new();

    let relay = Arc::new(Relay::new(
        store.clone(),
        match &settings.nats_url {
            Some(url) => BusTarget::Nats {
                url: url.clone(),
                config: settings.bus.clone(),
            },
            None => BusTarget::Memory(MemoryBus::new(settings.bus.clone())),
        },
    ));
    let bus_kind = relay.bus_kind();
    if let Some(why) = settings
        .nats_url
        .as_deref()
        .and_then(crate::bus::credentials::open_to_strangers)
    {
        tracing::warn!(%why, "the bus is open to strangers");
    }
    let fail_after = settings.file.loop_fail_after.clone();
    check_fail_after(&fail_after, &catalog::plan(&settings))
        .map_err(|e| anyhow::anyhow!("pidevops.toml: {e}"))?;
    let registry = loops::LoopRegistry::with_fail_after(fail_after);
    let leases = Leases::new(
        store.clone(),
        settings.instance_id.clone(),
        settings.lease_ttl,
    );
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
    let intake_config = settings.file.intake.clone();
    let schedules = settings.file.schedules.clone();
    let parts = catalog::Parts {
        settings: &settings,
        store: &store,
        log: &log,
        board: &board,
        registry: &registry,
        leases: &leases,
        metrics: &metrics,
        relay: &relay,
        dispatcher: dispatcher.as_ref(),
        intake: &intake_config,
        schedules: &schedules,
    };
    let declared: Vec<(&catalog::Entry, catalog::PlannedLoop)> = catalog::CATALOG
        .iter()
        .flat_map(|entry| (entry.plan)(&settings).into_iter().map(move |p| (entry, p)))
        .collect();
    // Every singleton's lease is known before any loop starts, so the first lease round tries for all of them.
    for (_, planned) in &declared {
        if planned.singleton && planned.state == LoopState::Armed {
            leases.register(&planned.name);
        }
    }
    let mut armed = BTreeMap::new();
    for (entry, planned) in declared {
        let name = planned.name.clone();
        match planned.state {
            LoopState::Disabled => registry.disable(&name, planned.reason.unwrap_or_default()),
            LoopState::Unarmed => registry.unarm(&name, planned.reason.unwrap_or_default()),
            LoopState::Armed => {
                let built = (entry.build)(&parts, &planned)?;
                if built.starts_at_head {
                    start_at_head(&store, &name, head_at_start).await?;
                }
                let mut spec = LoopSpec::new(&name, planned.interval, settings.loop_startup_delay);
                if built.woken_by_commits {
                    spec = spec.woken_by(log.committed());
                }
                let job = Arc::new(Armed::new(built.job));
                let lease = planned.singleton.then(|| leases.register(&name));
                let detail = built.detail;
                spawn_job(
                    &registry,
                    &tracker,
                    &shutdown,
                    spec,
                    job.clone(),
                    lease,
                    detail.clone(),
                );
                if let Some(detail) = detail {
                    registry.set_detail(&name, detail);
                }
                armed.insert(name, job);
            }
        }
    }

    let listener = bind(settings.bind, settings.port).map_err(|e| listen_error(&settings, &e))?;
    let lander = crate::landing::Lander::new(
        board.clone(),
        log.clone(),
        settings.workspace_root.clone(),
        git_credentials(&settings),
        settings.file.dispatch.clone(),
    );
    let state = AppState {
        lander,
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
        sign_in_link: Default::default(),
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
        armed: ArmedLoops::new(armed),
    })
}

/// On a loop's very first start, sets its checkpoint to `head`, the log's head when this process started; on
/// every later start it stays where it is. "First" is remembered apart (checkpoint `started:<name>`), since a loop
/// first started on an empty log still has checkpoint 0: without the mark, a restart before its first event would
/// skip what arrived meanwhile.
async fn start_at_head(store: &EventStore, name: &str, head: i64) -> anyhow::Result<()> {
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
    if head > 0 && read(name.to_owned()).await? == 0 {
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
    store
        .advance_checkpoint(&mark, 1)
        .await
        .with_context(|| format!("marking {name} as started"))?;
    Ok(())
}

/// Each `[loops.<name>]` must name a loop this process plans, with a threshold longer than its interval (a
/// shorter one would call the loop dead between two healthy ticks).
pub(crate) fn check_fail_after(
    fail_after: &BTreeMap<String, Duration>,
    plan: &[catalog::PlannedLoop],
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
    job: Arc<Armed>,
    lease: Option<LeaseHandle>,
    // What the loop's report shows before its first tick (the dispatcher's containment): kept through a change
    // of role, so /health never goes without it between acquiring the lease and the first tick's own detail.
    initial_detail: Option<serde_json::Value>,
) {
    let registry_for_tick = registry.clone();
    let name = spec.name.clone();
    let was_holder = Arc::new(AtomicBool::new(false));
    loops::spawn(registry, tracker, shutdown.clone(), spec, move || {
        let (job, registry, name) = (job.clone(), registry_for_tick.clone(), name.clone());
        let (lease, was_holder) = (lease.clone(), was_holder.clone());
        let initial_detail = initial_detail.clone();
        async move {
            let (detail, result) = match &lease {
                None => job.tick().await,
                Some(lease) => {
                    if !lease.is_held() {
                        // At start this lease may not have been tried yet: a lone replica is about to
                        // hold every lease, so wait for its first try (bounded) rather than report a standby.
                        let _ = tokio::time::timeout(FIRST_LEASE_TRY_WAIT, lease.first_try()).await;
                    }
                    let holder = lease.is_held();
                    if holder && !was_holder.swap(true, Ordering::SeqCst) {
                        // The standby's detail described a role this replica no longer has.
                        match &initial_detail {
                            Some(initial) => registry.set_detail(&name, initial.clone()),
                            None => registry.clear_detail(&name),
                        }
                        job.job.on_acquired().await;
                    }
                    if !holder {
                        was_holder.store(false, Ordering::SeqCst);
                    }
                    match while_held(lease, async { Ok(job.tick().await) }).await? {
                        Some(ran) => ran,
                        None => (
                            Some(standby_detail(initial_detail.as_ref())),
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

/// A standby's report: its role, beside what the loop shows from the start (a standby dispatcher still says how
/// it would contain agents).
fn standby_detail(initial: Option<&serde_json::Value>) -> serde_json::Value {
    let mut detail = match initial {
        Some(serde_json::Value::Object(fields)) => fields.clone(),
        _ => serde_json::Map::new(),
    };
    detail.insert("role".to_owned(), serde_json::json!("standby"));
    serde_json::Value::Object(detail)
}

/// What pidevops's own git presents (`dispatch::workspace::GitCredentials`): `GITHUB_TOKEN`, and `GITLAB_TOKEN`
/// for `GITLAB_URL`'s host; the dispatcher, the lander and the combiner all push with it.
pub fn git_credentials(settings: &Settings) -> crate::dispatch::workspace::GitCredentials {
    let gitlab = crate::providers::gitlab::settings::GitlabSettings::of(settings);
    crate::dispatch::workspace::GitCredentials {
        github: GithubSettings::of(settings).token,
        gitlab: gitlab
            .token
            .map(|token| crate::dispatch::workspace::GitlabCredential {
                url: gitlab.url,
                token,
            }),
    }
}

/// The dispatcher of a `serve` (or a `worker`): its workspaces under `WORKSPACE_ROOT`, and with
/// `executor = "workers"` the JetStream work queue runs are handed to.
pub async fn dispatcher(
    settings: &Settings,
    board: &crate::board::Board,
    log: &EventLog,
    config: crate::config::dispatch::DispatchConfig,
    profiles: crate::config::profiles::Profiles,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) -> anyhow::Result<Dispatcher> {
    let workspaces = Workspaces::new(&settings.workspace_root, git_credentials(settings))
        .with_context(|| {
            format!(
                "WORKSPACE_ROOT {} cannot be used",
                settings.workspace_root.display()
            )
        })?;
    let work = match (&config.executor, &settings.nats_url) {
        (Executor::Workers, Some(url)) => Some(
            crate::bus::work::WorkQueue::connect(
                Some(url),
                run_queue_config(&settings.bus),
                log.clone(),
            )
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
        plans: settings.file.plans.clone(),
        paused_by_env: settings.paused,
        tracker: tracker.clone(),
        shutdown: shutdown.clone(),
        work,
    }))
}

/// The work queue that carries run requests to workers: a run may take an hour, so a worker proves it is alive
/// with `progress` well inside `ack_wait`, and a request is delivered at most three times.
///
/// Named after the deployment's events stream, so deployments that share one NATS (each with its own
/// `PIDEVOPS_NATS_STREAM` and subject prefix) never take each other's run requests: the defaults
/// (`PIDEVOPS_EVENTS`, `pidevops.events`) give `PIDEVOPS_RUNS`, `pidevops.runs` and `pidevops-run-workers`.
pub fn run_queue_config(bus: &crate::bus::BusConfig) -> crate::bus::work::WorkQueueConfig {
    let base = bus.stream.strip_suffix("_EVENTS").unwrap_or(&bus.stream);
    // A sibling of the events subjects, never under them: JetStream refuses two streams whose subjects overlap.
    let subject_prefix = match bus.subject_prefix.strip_suffix(".events") {
        Some(root) if !root.is_empty() => format!("{root}.runs"),
        _ => format!("{}_runs", bus.subject_prefix),
    };
    crate::bus::work::WorkQueueConfig {
        stream: format!("{base}_RUNS"),
        subject_prefix,
        consumer: format!("{}-run-workers", base.to_lowercase()),
        ack_wait: Duration::from_secs(60),
        max_deliver: 3,
        backoff: vec![Duration::from_secs(1)],
        ..Default::default()
    }
}

/// Why `serve` cannot listen, in words: a port in use names `PORT`, the one variable that moves it.
fn listen_error(settings: &Settings, error: &std::io::Error) -> anyhow::Error {
    let (ip, port) = (settings.bind, settings.port);
    if error.kind() == std::io::ErrorKind::AddrInUse {
        let next = port.checked_add(1).unwrap_or(8081);
        anyhow::anyhow!(
            "port {port} is already in use on {ip} (another pidevops, or another server): set PORT to a free \
             one (PORT={next} pidevops serve), or stop what listens there"
        )
    } else {
        anyhow::anyhow!("cannot listen on port {port} of {ip} (PORT, PIDEVOPS_BIND): {error}")
    }
}

/// The address to open in a browser for a listener at `addr`: `localhost` when it listens on every address.
pub fn url_of(addr: SocketAddr) -> String {
    match addr.ip() {
        ip if ip.is_unspecified() || ip.is_loopback() => {
            format!("http://localhost:{}/", addr.port())
        }
        IpAddr::V6(ip) => format!("http://[{ip}]:{}/", addr.port()),
        IpAddr::V4(ip) => format!("http://{ip}:{}/", addr.port()),
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
        // A port in use is in use on IPv4 too: said as it is, not blamed on IPv6.
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => return Err(e),
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

    /// The loops this process armed, for a test to drive one tick at a time.
    pub fn armed_loops(&self) -> ArmedLoops {
        self.armed.clone()
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
            armed: _,
        } = self;
        let url = listener.local_addr().map(url_of).unwrap_or_default();
        tracing::info!(%url, database = state.log.store().kind(), "serving");
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

#[cfg(test)]
mod tests {
    use super::run_queue_config;
    use crate::bus::BusConfig;

    fn bus(stream: &str, subject_prefix: &str) -> BusConfig {
        BusConfig {
            stream: stream.to_owned(),
            subject_prefix: subject_prefix.to_owned(),
        }
    }

    #[test]
    fn a_standby_keeps_what_its_loop_shows_from_the_start() {
        let initial = serde_json::json!({ "containment": "namespaces" });
        assert_eq!(
            super::standby_detail(Some(&initial)),
            serde_json::json!({ "containment": "namespaces", "role": "standby" })
        );
        assert_eq!(
            super::standby_detail(None),
            serde_json::json!({ "role": "standby" })
        );
    }

    #[test]
    fn the_default_events_stream_keeps_the_documented_run_queue_names() {
        let config = run_queue_config(&BusConfig::default());
        assert_eq!(config.stream, "PIDEVOPS_RUNS");
        assert_eq!(config.subject_prefix, "pidevops.runs");
        assert_eq!(config.consumer, "pidevops-run-workers");
    }

    #[test]
    fn another_events_stream_gets_a_run_queue_of_its_own() {
        let config = run_queue_config(&bus("STAGING_EVENTS", "staging.events"));
        assert_eq!(config.stream, "STAGING_RUNS");
        assert_eq!(config.subject_prefix, "staging.runs");
        assert_eq!(config.consumer, "staging-run-workers");
    }

    #[test]
    fn run_subjects_never_fall_under_the_events_subjects() {
        // Events are published under `<prefix>.>`: runs under `acme.runs.>` would overlap them.
        let config = run_queue_config(&bus("ACME", "acme"));
        assert_eq!(config.stream, "ACME_RUNS");
        assert_eq!(config.subject_prefix, "acme_runs");
        assert_eq!(config.consumer, "acme-run-workers");
    }
}
