//! The loop catalog: every background loop is declared here, once — its name, why this configuration arms,
//! disables or unarms it, and how it is built. [`plan`] is the pure part (`pidevops doctor` prints it); start-up
//! arms what it plans and registers the rest with their reasons, so `/health` and `/metrics`, which report the
//! registry, show exactly this list. Adding a loop is adding one [`Entry`] to [`CATALOG`].

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::future::BoxFuture;
use serde::Serialize;

use crate::config::Settings;
use crate::eventlog::{EventLog, EventStore};
use crate::loops::lease::LEASES_LOOP;
use crate::loops::{LoopRegistry, LoopState, Pace};

pub const HEARTBEAT_LOOP: &str = "database_heartbeat";
pub const METRICS_UPKEEP_LOOP: &str = "metrics_upkeep";
pub const METRICS_UPKEEP_INTERVAL: Duration = Duration::from_secs(5);
/// The `telegram_updates` loop's interval: it polls again at once after each answer, so this is only the wait
/// after an error or while another replica holds the loop; and `/health` calls the loop stale after three of
/// them, which must be longer than one long poll ([`TELEGRAM_LONG_POLL_S`]).
pub const TELEGRAM_POLL: Duration = Duration::from_secs(5);
/// How long one `getUpdates` waits for news.
pub const TELEGRAM_LONG_POLL_S: u64 = 10;

/// A loop as this configuration plans it.
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

impl PlannedLoop {
    fn armed(name: &str, singleton: bool, interval: Duration, what: &'static str) -> Self {
        Self {
            name: name.to_owned(),
            singleton,
            state: LoopState::Armed,
            reason: None,
            interval,
            what,
        }
    }

    fn off(
        name: &str,
        singleton: bool,
        state: LoopState,
        reason: String,
        interval: Duration,
    ) -> Self {
        Self {
            name: name.to_owned(),
            singleton,
            state,
            reason: Some(reason),
            interval,
            what: "",
        }
    }
}

/// One tick's outcome, and the loop's detail for `/health` (set even when the tick failed: during a NATS outage
/// the relay's growing lag is the news).
pub type Ticked = (Option<serde_json::Value>, anyhow::Result<Pace>);

/// A built loop's work.
pub trait LoopJob: Send + Sync + 'static {
    fn tick(&self) -> BoxFuture<'_, Ticked>;
    /// Called when this replica becomes the holder of the loop's lease: state cached while another replica held
    /// it is stale now.
    fn on_acquired(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// What start-up builds an armed loop into.
pub struct Built {
    pub job: Arc<dyn LoopJob>,
    /// The loop's events are instructions to act now (call out, steer a task): on its very first start its
    /// checkpoint goes to the log's head, so turning it on for a log with history does not act on last month's
    /// events (open pull requests for old tasks, flood a chat, replay old bot commands).
    pub starts_at_head: bool,
    /// Shown in `/health` before the first tick.
    pub detail: Option<serde_json::Value>,
}

impl Built {
    fn new<J: LoopJob>(job: J) -> Self {
        Self {
            job: Arc::new(job),
            starts_at_head: false,
            detail: None,
        }
    }

    /// A loop whose tick is `tick`, reporting what it returns as its detail.
    fn ticking<T, F, Fut>(tick: F, pace: fn(&T) -> Pace) -> Self
    where
        T: Serialize + 'static,
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = anyhow::Result<T>> + Send + 'static,
    {
        Self::new(FnJob(move || {
            let tick = tick();
            async move {
                match tick.await {
                    Ok(progress) => (serde_json::to_value(&progress).ok(), Ok(pace(&progress))),
                    Err(error) => (None, Err(error)),
                }
            }
        }))
    }

    fn at_head(mut self) -> Self {
        self.starts_at_head = true;
        self
    }
}

struct FnJob<F>(F);

impl<F, Fut> LoopJob for FnJob<F>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Ticked> + Send + 'static,
{
    fn tick(&self) -> BoxFuture<'_, Ticked> {
        Box::pin((self.0)())
    }
}

fn rest<T>(_: &T) -> Pace {
    Pace::Rest
}

/// What loops are built from: the running service's parts, made once by start-up.
pub struct Parts<'a> {
    pub settings: &'a Settings,
    pub store: &'a EventStore,
    pub log: &'a EventLog,
    pub board: &'a crate::board::Board,
    pub registry: &'a LoopRegistry,
    pub leases: &'a crate::loops::lease::Leases,
    pub metrics: &'a metrics_exporter_prometheus::PrometheusHandle,
    pub relay: &'a Arc<crate::bus::relay::Relay>,
    /// `None` when dispatch is off.
    pub dispatcher: Option<&'a crate::dispatch::Dispatcher>,
    pub intake: &'a crate::intake::IntakeConfig,
    pub schedules: &'a [crate::cron::Schedule],
}

/// One declaration: how a configuration plans the loop (or a family of loops: one per projector, the three of
/// dispatch), and how an armed one is built.
pub struct Entry {
    pub plan: fn(&Settings) -> Vec<PlannedLoop>,
    pub build: fn(&Parts<'_>, &PlannedLoop) -> anyhow::Result<Built>,
}

/// Every loop, in the order `doctor` prints them.
pub const CATALOG: &[Entry] = &[
    Entry {
        plan: |s| {
            vec![PlannedLoop::armed(
                HEARTBEAT_LOOP,
                false,
                s.heartbeat_interval,
                "a database round trip (and, while appends fail, one probe append), so an outage or a full disk shows in /health and /metrics, and its end too, even with no traffic",
            )]
        },
        build: |parts, _| {
            let log = parts.log.clone();
            Ok(Built::new(FnJob(move || {
                let log = log.clone();
                async move { (None, heartbeat(&log).await.map(|()| Pace::Rest)) }
            })))
        },
    },
    Entry {
        plan: |s| {
            vec![match s.nats_url {
                Some(_) => PlannedLoop::armed(
                    crate::bus::relay::RELAY,
                    true,
                    s.relay_interval,
                    "publishes committed events to NATS JetStream (NATS_URL), in order, each once",
                ),
                // Publishing every body to an in-process bus nobody reads would cost ingest a fifth of its
                // throughput (measured); it is armed when something consumes it.
                None => PlannedLoop::off(
                    crate::bus::relay::RELAY,
                    true,
                    LoopState::Disabled,
                    "NATS_URL is not set, and nothing in this process consumes the in-process bus yet".to_owned(),
                    s.relay_interval,
                ),
            }]
        },
        build: |parts, _| Ok(Built::new(RelayJob(parts.relay.clone()))),
    },
    Entry {
        plan: |_| {
            vec![PlannedLoop::armed(
                METRICS_UPKEEP_LOOP,
                false,
                METRICS_UPKEEP_INTERVAL,
                "drains histogram buffers so /metrics stays cheap to render",
            )]
        },
        build: |parts, _| {
            let handle = parts.metrics.clone();
            Ok(Built::new(FnJob(move || {
                handle.run_upkeep();
                async { (None, Ok(Pace::Rest)) }
            })))
        },
    },
    Entry {
        plan: |s| {
            vec![PlannedLoop::armed(
                LEASES_LOOP,
                false,
                s.lease_ttl / 6,
                "renews this replica's leases and takes over singleton loops whose holder went silent",
            )]
        },
        build: |parts, _| {
            let leases = parts.leases.clone();
            Ok(Built::new(FnJob(move || {
                let leases = leases.clone();
                async move { (None, leases.tick().await.map(|()| Pace::Rest)) }
            })))
        },
    },
    Entry {
        plan: |s| {
            vec![PlannedLoop::armed(
                crate::intake::INTAKE,
                true,
                s.projector_interval,
                "turns qualifying GitHub issues, Linear issues and Telegram /new into tasks, and records why others do not",
            )]
        },
        build: |parts, _| {
            let intake = Arc::new(crate::intake::Intake::new(
                parts.log.clone(),
                parts.board.clone(),
                parts.intake.clone(),
            ));
            Ok(Built::ticking(
                move || {
                    let intake = intake.clone();
                    async move { intake.tick().await }
                },
                |p| Pace::again_if(p.out_of_time),
            ))
        },
    },
    Entry {
        plan: |s| vec![telegram_updates(s)],
        build: |parts, _| {
            let s = parts.settings;
            let token = s
                .telegram_bot_token
                .as_ref()
                .context("the loop plan arms telegram_updates without TELEGRAM_BOT_TOKEN")?;
            let client =
                crate::providers::telegram::TelegramClient::new(&s.telegram_api_url, token)
                    .map_err(|e| anyhow::anyhow!(e))?;
            let updates = Arc::new(crate::ingress::telegram_updates::TelegramUpdates::new(
                client,
                parts.log.clone(),
                s.telegram_bot_id.clone(),
                TELEGRAM_LONG_POLL_S,
            ));
            // A long poll: it returns when there is news or after its wait, and polls again at once.
            Ok(Built::ticking(
                move || {
                    let updates = updates.clone();
                    async move { updates.tick().await }
                },
                |_| Pace::Again,
            ))
        },
    },
    Entry {
        plan: |s| vec![telegram_effects_plan(s)],
        build: |parts, _| Ok(effects(telegram_effects(parts)?)),
    },
    Entry {
        plan: |s| vec![cron_plan(s)],
        build: |parts, _| {
            let cron = Arc::new(crate::cron::CronLoop::new(
                parts.log.clone(),
                parts.board.clone(),
                parts.schedules.to_vec(),
            ));
            Ok(Built::ticking(
                move || {
                    let cron = cron.clone();
                    async move { cron.tick().await }
                },
                rest,
            ))
        },
    },
    Entry {
        plan: |s| {
            vec![PlannedLoop::armed(
                crate::reactions::REACTIONS,
                true,
                s.projector_interval,
                "turns CI failures, requested changes, review comments, merges and closes on pidevops branches into task commands",
            )]
        },
        build: |parts, _| {
            let reactions = Arc::new(crate::reactions::Reactions::new(
                parts.log.clone(),
                parts.board.clone(),
                parts.intake.github_bot_login.clone(),
                parts.intake.github_associations.clone(),
            ));
            Ok(Built::ticking(
                move || {
                    let reactions = reactions.clone();
                    async move { reactions.tick().await }
                },
                |p| Pace::again_if(p.out_of_time),
            )
            .at_head())
        },
    },
    Entry {
        plan: dispatch_loops,
        build: |parts, planned| {
            use crate::dispatch::dispatcher::{DISPATCHER, WATCHDOG};
            let name = planned.name.as_str();
            let dispatcher = parts
                .dispatcher
                .cloned()
                .with_context(|| format!("the loop plan arms {name} but dispatch is off"))?;
            Ok(match name {
                DISPATCHER => {
                    // Shown before the first tick: how agents are contained is known at start.
                    let detail = serde_json::json!({
                        "containment": dispatcher.containment().kind(),
                        "confinement": dispatcher.confinement(),
                    });
                    let mut built = Built::ticking(
                        move || {
                            let dispatcher = dispatcher.clone();
                            async move { dispatcher.tick().await }
                        },
                        rest,
                    );
                    built.detail = Some(detail);
                    built
                }
                WATCHDOG => Built::ticking(
                    move || {
                        let dispatcher = dispatcher.clone();
                        async move { dispatcher.watchdog_tick().await }
                    },
                    rest,
                ),
                _ => Built::ticking(
                    move || {
                        let dispatcher = dispatcher.clone();
                        async move { dispatcher.gc_tick().await }
                    },
                    rest,
                ),
            })
        },
    },
    Entry {
        plan: |s| vec![github_effects_plan(s)],
        build: |parts, _| Ok(effects(github_effects(parts)?)),
    },
    Entry {
        plan: |s| vec![linear_effects_plan(s)],
        build: |parts, _| Ok(effects(linear_effects(parts)?)),
    },
    Entry {
        plan: |s| {
            vec![poller_loop(
                crate::pollers::linear::LINEAR_POLLER,
                &s.file.linear_poller,
                s.linear_api_key.is_some(),
                "LINEAR_API_KEY",
                "asks Linear for labeled issues changed since the last poll and appends what the webhook missed",
            )]
        },
        build: |parts, _| {
            let s = parts.settings;
            let key = s
                .linear_api_key
                .as_ref()
                .context("the loop plan arms linear_poller without LINEAR_API_KEY")?;
            let client = crate::providers::linear::LinearClient::new(&s.linear_api_url, key)
                .map_err(|e| anyhow::anyhow!(e))?;
            let poller = Arc::new(crate::pollers::linear::LinearPoller::new(
                client,
                parts.log.clone(),
                parts.board.clone(),
                parts.intake.linear_label.clone(),
            ));
            Ok(Built::ticking(
                move || {
                    let poller = poller.clone();
                    async move { poller.tick().await }
                },
                rest,
            ))
        },
    },
    Entry {
        plan: |s| {
            vec![poller_loop(
                crate::pollers::github::GITHUB_POLLER,
                &s.file.github_poller,
                s.github_token.is_some(),
                "GITHUB_TOKEN",
                "checks the pull requests of tasks in review (merged, closed, failed checks) for missed webhooks",
            )]
        },
        build: |parts, _| {
            let s = parts.settings;
            let token = s
                .github_token
                .as_ref()
                .context("the loop plan arms github_poller without GITHUB_TOKEN")?;
            let client = crate::providers::github::GithubClient::new(&s.github_api_url, token)
                .map_err(|e| anyhow::anyhow!(e))?;
            let poller = Arc::new(crate::pollers::github::GithubPoller::new(
                client,
                parts.log.clone(),
            ));
            Ok(Built::ticking(
                move || {
                    let poller = poller.clone();
                    async move { poller.tick().await }
                },
                rest,
            ))
        },
    },
    Entry {
        plan: |s| {
            crate::projectors::all()
                .into_iter()
                .map(|projector| {
                    PlannedLoop::armed(
                        &crate::projectors::loop_name(projector.name()),
                        true,
                        s.projector_interval,
                        "applies newly committed events to a read model, checkpointed in the same transaction",
                    )
                })
                .collect()
        },
        build: |parts, planned| {
            let projector = crate::projectors::all()
                .into_iter()
                .find(|p| crate::projectors::loop_name(p.name()) == planned.name)
                .with_context(|| format!("no projector is named by {}", planned.name))?;
            let projection = Arc::new(
                crate::projectors::Projection::new(parts.store.clone(), projector)
                    .with_tick_budget(parts.settings.projector_interval),
            );
            Ok(Built::ticking(
                move || {
                    let projection = projection.clone();
                    async move { projection.tick().await }
                },
                |status| Pace::again_if(status.out_of_time),
            ))
        },
    },
];

/// Which loops run under these settings, and why the others do not. Pure.
pub fn plan(settings: &Settings) -> Vec<PlannedLoop> {
    CATALOG
        .iter()
        .flat_map(|entry| (entry.plan)(settings))
        .collect()
}

/// The relay: its lag is its detail, reported even when a tick fails; a replica that (re)gains its lease asks the
/// bus where to resume.
struct RelayJob(Arc<crate::bus::relay::Relay>);

impl LoopJob for RelayJob {
    fn tick(&self) -> BoxFuture<'_, Ticked> {
        Box::pin(async move {
            let result = self.0.tick().await.map(|p| Pace::again_if(p.out_of_time));
            let detail = self.0.lag().map(|lag| {
                serde_json::json!({
                    "position": lag.position,
                    "head": lag.head,
                    "behind": lag.behind(),
                })
            });
            (detail, result)
        })
    }

    fn on_acquired(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.0.resync())
    }
}

/// An `effects:<provider>` loop: acts on news only.
fn effects(worker: crate::effects::runner::Effects) -> Built {
    let worker = Arc::new(worker);
    Built::ticking(
        move || {
            let worker = worker.clone();
            async move { worker.tick().await }
        },
        |p| Pace::again_if(p.out_of_time),
    )
    .at_head()
}

fn telegram_updates(s: &Settings) -> PlannedLoop {
    use crate::ingress::telegram_updates::TELEGRAM_UPDATES;
    match (&s.telegram_bot_token, s.telegram_webhook_secret.is_set()) {
        (Some(_), false) => PlannedLoop::armed(
            TELEGRAM_UPDATES,
            true,
            TELEGRAM_POLL,
            "long-polls getUpdates (no webhook: TELEGRAM_WEBHOOK_SECRET is not set) into the log",
        ),
        (Some(_), true) => PlannedLoop::off(
            TELEGRAM_UPDATES,
            true,
            LoopState::Disabled,
            "webhook mode: TELEGRAM_WEBHOOK_SECRET is set, so updates come to /webhooks/telegram"
                .to_owned(),
            TELEGRAM_POLL,
        ),
        (None, _) => PlannedLoop::off(
            TELEGRAM_UPDATES,
            true,
            LoopState::Disabled,
            "TELEGRAM_BOT_TOKEN is not set".to_owned(),
            TELEGRAM_POLL,
        ),
    }
}

/// Some chat is allowed in `TELEGRAM_ALLOWED_CHATS`.
fn telegram_chats(s: &Settings) -> bool {
    s.telegram_allowed_chats
        .as_deref()
        .is_some_and(|c| c.split(',').any(|c| !c.trim().is_empty()))
}

fn telegram_effects_plan(s: &Settings) -> PlannedLoop {
    let name = crate::effects::Provider::Telegram.loop_name();
    match (&s.telegram_bot_token, telegram_chats(s)) {
        (Some(_), true) => PlannedLoop::armed(
            &name,
            true,
            s.projector_interval,
            if s.telegram_allowed_users.is_some() {
                "tells TELEGRAM_ALLOWED_CHATS when a task waits for approval, needs a human, is in review, done or cancelled; only TELEGRAM_ALLOWED_USERS can command"
            } else {
                "tells TELEGRAM_ALLOWED_CHATS when a task waits for approval, needs a human, is in review, done or cancelled; any member of an allowed group can command (TELEGRAM_ALLOWED_USERS is not set)"
            },
        ),
        (None, _) => PlannedLoop::off(
            &name,
            true,
            LoopState::Disabled,
            "TELEGRAM_BOT_TOKEN is not set: no Telegram messages".to_owned(),
            s.projector_interval,
        ),
        (Some(_), false) => PlannedLoop::off(
            &name,
            true,
            LoopState::Disabled,
            "TELEGRAM_ALLOWED_CHATS is not set: no chat to tell".to_owned(),
            s.projector_interval,
        ),
    }
}

fn cron_plan(s: &Settings) -> PlannedLoop {
    use crate::cron::CRON;
    let digests_without_telegram = |list: &[crate::cron::Schedule]| {
        let digest = list
            .iter()
            .find(|s| s.action == crate::cron::ScheduleAction::Digest)?;
        let missing = match (&s.telegram_bot_token, telegram_chats(s)) {
            (None, _) => "TELEGRAM_BOT_TOKEN is not set",
            (Some(_), false) => "TELEGRAM_ALLOWED_CHATS is not set",
            (Some(_), true) => return None,
        };
        Some(format!(
            "schedule {:?} sends a digest to Telegram, but {missing}",
            digest.name
        ))
    };
    let unarmed =
        |reason| PlannedLoop::off(CRON, true, LoopState::Unarmed, reason, s.projector_interval);
    let list = &s.file.schedules;
    match digests_without_telegram(list) {
            Some(reason) => unarmed(reason),
            None if !list.is_empty() => PlannedLoop::armed(
                CRON,
                true,
                s.projector_interval,
                "creates the tasks of [[schedules]] and sends digests on time; after downtime each overdue schedule fires once",
            ),
            None => PlannedLoop::off(
                CRON,
                true,
                LoopState::Disabled,
                "no [[schedules]] in pidevops.toml".to_owned(),
                s.projector_interval,
            ),
    }
}

fn github_effects_plan(s: &Settings) -> PlannedLoop {
    let name = crate::effects::Provider::Github.loop_name();
    match s.github_token {
        Some(_) => PlannedLoop::armed(
            &name,
            true,
            s.projector_interval,
            "opens each task's pull request when it goes to review (GITHUB_API_URL), once, recorded",
        ),
        None => PlannedLoop::off(
            &name,
            true,
            LoopState::Disabled,
            "GITHUB_TOKEN is not set: no pull requests are opened".to_owned(),
            s.projector_interval,
        ),
    }
}

fn linear_effects_plan(s: &Settings) -> PlannedLoop {
    let name = crate::effects::Provider::Linear.loop_name();
    match &s.linear_api_key {
        Some(_) => PlannedLoop::armed(
            &name,
            true,
            s.projector_interval,
            "comments on and moves the tasks' Linear issues, and speaks in Linear agent sessions (LINEAR_API_URL)",
        ),
        None => PlannedLoop::off(
            &name,
            true,
            LoopState::Disabled,
            "LINEAR_API_KEY is not set: Linear hears nothing back".to_owned(),
            s.projector_interval,
        ),
    }
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
    let gc_interval = Duration::from_secs(600);
    let mut loops = vec![
        PlannedLoop::armed(
            DISPATCHER,
            true,
            settings.projector_interval,
            "claims todo tasks by priority and age within the concurrency limits and starts their runs",
        ),
        PlannedLoop::armed(
            WATCHDOG,
            true,
            watchdog_interval(config),
            "declares runs lost when they go silent and retries their tasks; applies outcomes a crash left unapplied",
        ),
        // Every replica removes its own old worktrees.
        PlannedLoop::armed(
            GC,
            false,
            gc_interval,
            "removes worktrees of finished runs after dispatch.worktree_ttl_h",
        ),
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

/// The `effects:github` loop's worker: GitHub at `GITHUB_API_URL` with `GITHUB_TOKEN`, pull requests to each
/// repository's base branch.
fn github_effects(parts: &Parts<'_>) -> anyhow::Result<crate::effects::runner::Effects> {
    let settings = parts.settings;
    let token = settings
        .github_token
        .as_ref()
        .context("the loop plan arms effects:github without GITHUB_TOKEN")?;
    let client = crate::providers::github::GithubClient::new(&settings.github_api_url, token)
        .map_err(|e| anyhow::anyhow!(e))?;
    let bases = settings
        .file
        .dispatch
        .repos
        .iter()
        .map(|(repo, source)| (repo.clone(), source.base.clone()))
        .collect();
    Ok(crate::effects::runner::Effects::github(
        parts.log.clone(),
        parts.board.clone(),
        client,
        crate::effects::policy::PolicyConfig {
            bases,
            ..Default::default()
        },
    ))
}

/// The `effects:telegram` loop's worker: the Bot API at `TELEGRAM_API_URL`, notifications to the allowed chats.
fn telegram_effects(parts: &Parts<'_>) -> anyhow::Result<crate::effects::runner::Effects> {
    let settings = parts.settings;
    let token = settings
        .telegram_bot_token
        .as_ref()
        .context("the loop plan arms effects:telegram without TELEGRAM_BOT_TOKEN")?;
    let client = crate::providers::telegram::TelegramClient::new(&settings.telegram_api_url, token)
        .map_err(|e| anyhow::anyhow!(e))?;
    Ok(crate::effects::runner::Effects::telegram(
        parts.log.clone(),
        parts.board.clone(),
        client,
        crate::effects::policy::PolicyConfig {
            telegram_chats: parts
                .intake
                .telegram_allowed_chats
                .iter()
                .copied()
                .collect(),
            telegram_users: parts.intake.telegram_allowed_users.clone(),
            telegram_cooldown: settings.file.telegram_cooldown,
            ..Default::default()
        },
    )
    .with_loops(parts.registry.clone()))
}

/// The `effects:linear` loop's worker: Linear's GraphQL API at `LINEAR_API_URL` with `LINEAR_API_KEY`, issues
/// moved through `[linear.states]`.
fn linear_effects(parts: &Parts<'_>) -> anyhow::Result<crate::effects::runner::Effects> {
    let settings = parts.settings;
    let key = settings
        .linear_api_key
        .as_ref()
        .context("the loop plan arms effects:linear without LINEAR_API_KEY")?;
    let client = crate::providers::linear::LinearClient::new(&settings.linear_api_url, key)
        .map_err(|e| anyhow::anyhow!(e))?;
    let linear_states = settings.file.linear_states.clone();
    Ok(crate::effects::runner::Effects::linear(
        parts.log.clone(),
        parts.board.clone(),
        client,
        crate::effects::policy::PolicyConfig {
            linear_states,
            github_prs: settings.github_token.is_some(),
            ..Default::default()
        },
    ))
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

/// The loops this process armed, by name: what a test drives one tick at a time instead of waiting for them.
#[derive(Clone, Default)]
pub struct ArmedLoops {
    loops: Arc<BTreeMap<String, Arc<Armed>>>,
}

/// An armed loop's job, and the turn its ticks take: never two ticks of one loop at once, whoever asks.
pub struct Armed {
    pub job: Arc<dyn LoopJob>,
    turn: tokio::sync::Mutex<()>,
}

impl Armed {
    pub fn new(job: Arc<dyn LoopJob>) -> Self {
        Self {
            job,
            turn: tokio::sync::Mutex::new(()),
        }
    }

    /// One tick, after any tick of this loop under way.
    pub async fn tick(&self) -> Ticked {
        let _turn = self.turn.lock().await;
        self.job.tick().await
    }
}

impl ArmedLoops {
    pub fn new(loops: BTreeMap<String, Arc<Armed>>) -> Self {
        Self {
            loops: Arc::new(loops),
        }
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.loops.keys().map(String::as_str)
    }

    /// Runs one tick of the armed loop `name` now, after any tick of it under way, and reports it like the loop's
    /// own (its detail reaches `/health`). A singleton's lease is not consulted: this is for one process (tests).
    pub async fn tick(&self, registry: &LoopRegistry, name: &str) -> anyhow::Result<Pace> {
        let armed = self
            .loops
            .get(name)
            .with_context(|| format!("no armed loop is named {name}"))?;
        let (detail, result) = armed.tick().await;
        if let Some(detail) = detail {
            registry.set_detail(name, detail);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_loop_is_planned_once() {
        let settings = Settings::for_tests(crate::config::DatabaseUrl::Sqlite(
            "sqlite://unused.db".to_owned(),
        ));
        let planned = plan(&settings);
        let names: std::collections::BTreeSet<_> = planned.iter().map(|p| &p.name).collect();
        assert_eq!(
            names.len(),
            planned.len(),
            "a name planned twice: {planned:?}"
        );
        for expected in [
            HEARTBEAT_LOOP,
            "relay",
            "intake",
            "reactions",
            "effects:github",
        ] {
            assert!(
                names.contains(&expected.to_owned()),
                "{expected} is not planned"
            );
        }
    }
}
