//! The loop catalog: every background loop is declared here, once — its name, why this configuration arms,
//! disables or unarms it, and how it is built. [`plan`] is the pure part (`pidevops doctor` prints it); start-up
//! arms what it plans and registers the rest with their reasons, so `/health` and `/metrics`, which report the
//! registry, show exactly this list. Adding a loop is adding one [`Entry`] to [`CATALOG`].

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures::future::BoxFuture;
use serde::Serialize;

mod builds;
mod effects;
mod plans;

use builds::{
    heartbeat, land_loop, merge_queue_loop, poller_entry, refresh_loop, stale_reviews, RelayJob,
    SlackSocketJob,
};
use plans::{
    combine_plan, cron_plan, dispatch_loops, land_plan, merge_queue_plan, poller_loop,
    refresh_plan, slack_socket, stale_plan, telegram_updates,
};

use crate::config::Settings;
use crate::eventlog::{EventLog, EventStore};
use crate::loops::lease::LEASES_LOOP;
use crate::loops::{LoopRegistry, LoopState, Pace};
use crate::providers::github::settings::GithubSettings;
use crate::providers::linear::settings::LinearSettings;
use crate::providers::slack::settings::SlackSettings;
use crate::providers::telegram::settings::TelegramSettings;

pub const HEARTBEAT_LOOP: &str = "database_heartbeat";
pub const METRICS_UPKEEP_LOOP: &str = "metrics_upkeep";
pub const METRICS_UPKEEP_INTERVAL: Duration = Duration::from_secs(5);
/// The `telegram_updates` loop's interval: it polls again at once after each answer, so this is only the wait
/// after an error or while another replica holds the loop; and `/health` calls the loop stale after three of
/// them, which must be longer than one long poll ([`TELEGRAM_LONG_POLL_S`]).
pub const TELEGRAM_POLL: Duration = Duration::from_secs(5);
/// How long one `getUpdates` waits for news.
pub const TELEGRAM_LONG_POLL_S: u64 = 10;
/// The `slack_socket` loop's wait after a failed tick (a refused connect, an envelope not stored); its ticks are
/// windows of reading the socket, one after another, and a connect's own backoff is the socket's.
pub const SLACK_SOCKET_INTERVAL: Duration = Duration::from_secs(2);

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
    /// The loop follows the log: this process's commits wake it from its rest (`LoopSpec::woken_by`).
    pub woken_by_commits: bool,
}

impl Built {
    fn new<J: LoopJob>(job: J) -> Self {
        Self {
            job: Arc::new(job),
            starts_at_head: false,
            detail: None,
            woken_by_commits: false,
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

    /// A follower of the log, woken by its commits.
    pub(super) fn follows_log(mut self) -> Self {
        self.woken_by_commits = true;
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
        build: |parts, _| Ok(Built::new(RelayJob(parts.relay.clone())).follows_log()),
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
                "turns qualifying GitHub issues, Linear issues, Telegram /new and Slack asks into tasks, and records why others do not",
            )]
        },
        build: |parts, _| {
            let intake = Arc::new(crate::intake::Intake::new(
                parts.log.clone(),
                parts.board.clone(),
                parts.intake.clone(),
                crate::providers::intake_rules(parts.settings),
            ));
            Ok(Built::ticking(
                move || {
                    let intake = intake.clone();
                    async move { intake.tick().await }
                },
                |p| Pace::again_if(p.out_of_time),
            )
            .follows_log())
        },
    },
    Entry {
        plan: |s| {
            vec![PlannedLoop::armed(
                crate::plans::PLANS,
                true,
                s.projector_interval,
                "makes an approved plan's items tasks, rolls a plan's column up from its items', flags the items whose dependency was cancelled, cancels a cancelled plan's items",
            )]
        },
        build: |parts, _| {
            let plans = Arc::new(crate::plans::Plans::new(
                parts.log.clone(),
                parts.board.clone(),
                parts.settings.file.plans.land,
            ));
            Ok(Built::ticking(
                move || {
                    let plans = plans.clone();
                    async move { plans.tick().await }
                },
                |p| Pace::again_if(p.out_of_time),
            )
            .at_head()
            .follows_log())
        },
    },
    Entry {
        plan: combine_plan,
        build: |parts, _| {
            let dispatcher = parts
                .dispatcher
                .context("the loop plan arms combine but dispatch is off")?;
            let combine = Arc::new(crate::plans::combine::Combine::new(
                parts.log.clone(),
                parts.board.clone(),
                dispatcher.combiner(),
            ));
            Ok(Built::ticking(
                move || {
                    let combine = combine.clone();
                    async move { combine.tick().await }
                },
                |p| Pace::again_if(p.out_of_time),
            )
            .at_head())
        },
    },
    Entry {
        plan: |s| {
            vec![PlannedLoop::armed(
                crate::receipts::RECEIPTS,
                true,
                s.projector_interval,
                "records each ended task's receipt in the log (receipt.issued), right after its last event",
            )]
        },
        build: |parts, _| {
            let receipts = Arc::new(crate::receipts::Receipts::new(parts.log.clone()));
            Ok(Built::ticking(
                move || {
                    let receipts = receipts.clone();
                    async move { receipts.tick().await }
                },
                |p| Pace::again_if(p.out_of_time),
            )
            .at_head()
            .follows_log())
        },
    },
    Entry {
        plan: land_plan,
        build: land_loop,
    },
    Entry {
        plan: refresh_plan,
        build: refresh_loop,
    },
    Entry {
        plan: merge_queue_plan,
        build: merge_queue_loop,
    },
    Entry {
        plan: stale_plan,
        build: stale_reviews,
    },
    Entry {
        plan: |s| vec![telegram_updates(s)],
        build: |parts, _| {
            let telegram = TelegramSettings::of(parts.settings);
            let token = telegram
                .bot_token
                .as_ref()
                .context("the loop plan arms telegram_updates without TELEGRAM_BOT_TOKEN")?;
            let client = crate::providers::telegram::TelegramClient::new(&telegram.api_url, token)
                .map_err(|e| anyhow::anyhow!(e))?;
            let updates = Arc::new(crate::providers::telegram::updates::TelegramUpdates::new(
                client,
                parts.log.clone(),
                telegram.bot_id.clone(),
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
        plan: |s| vec![slack_socket(s)],
        build: |parts, _| {
            let slack = SlackSettings::of(parts.settings);
            let token = slack
                .app_token
                .as_ref()
                .context("the loop plan arms slack_socket without SLACK_APP_TOKEN")?;
            let socket = crate::providers::slack::socket::SlackSocket::new(
                &slack.api_url,
                token,
                parts.log.clone(),
            )
            .map_err(|e| anyhow::anyhow!(e))?
            .reporting_to(parts.registry.clone());
            Ok(Built::new(SlackSocketJob(Arc::new(socket))))
        },
    },
    Entry {
        plan: |s| vec![cron_plan(s)],
        build: |parts, _| {
            let cron = Arc::new(crate::cron::CronLoop::new(
                parts.log.clone(),
                parts.board.clone(),
                parts.schedules.to_vec(),
                parts.settings.clock.clone(),
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
            let reactions = Arc::new(
                crate::reactions::Reactions::new(
                    parts.log.clone(),
                    parts.board.clone(),
                    crate::providers::reaction_rules(parts.settings),
                )
                .with_code_hosts(parts.settings.file.intake.code_hosts.clone()),
            );
            Ok(Built::ticking(
                move || {
                    let reactions = reactions.clone();
                    async move { reactions.tick().await }
                },
                |p| Pace::again_if(p.out_of_time),
            )
            .at_head()
            .follows_log())
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
                        "memory": dispatcher.memory(),
                        "scratch": dispatcher.scratch(),
                        // The profiles that opted out of a network of their own.
                        "network_host": dispatcher.on_host_network(),
                    });
                    let mut built = Built::ticking(
                        move || {
                            let dispatcher = dispatcher.clone();
                            async move { dispatcher.tick().await }
                        },
                        rest,
                    );
                    built.detail = Some(detail);
                    // A task that became ready starts now, not at the next interval.
                    built.follows_log()
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
        plan: effects::plan,
        build: effects::build,
    },
    Entry {
        plan: |s| {
            vec![poller_loop(
                crate::providers::linear::poller::LINEAR_POLLER,
                &s.file.linear_poller,
                LinearSettings::of(s).api_key.is_some(),
                "LINEAR_API_KEY",
                "asks Linear for labeled issues changed since the last poll and appends what the webhook missed",
            )]
        },
        build: |parts, _| {
            let linear = LinearSettings::of(parts.settings);
            poller_entry(
                crate::providers::linear::poller::LINEAR_POLLER,
                "LINEAR_API_KEY",
                linear.api_key.as_ref(),
                |key| {
                    let client = crate::providers::linear::LinearClient::new(&linear.api_url, key)
                        .map_err(|e| anyhow::anyhow!(e))?;
                    Ok(crate::providers::linear::poller::LinearPoller::new(
                        client,
                        parts.log.clone(),
                        parts.board.clone(),
                        linear.intake.label.clone(),
                        crate::intake::INTAKE,
                    ))
                },
                |poller| async move { poller.tick().await },
            )
        },
    },
    Entry {
        plan: |s| {
            vec![poller_loop(
                crate::providers::github::poller::GITHUB_POLLER,
                &s.file.github_poller,
                GithubSettings::of(s).token.is_some(),
                "GITHUB_TOKEN",
                "checks the pull requests of tasks in review (merged, closed, failed checks) the base branches they refresh on (moved) and the issues of tasks not yet in review (closed, unlabeled) for missed webhooks",
            )]
        },
        build: |parts, _| {
            let github = GithubSettings::of(parts.settings);
            poller_entry(
                crate::providers::github::poller::GITHUB_POLLER,
                "GITHUB_TOKEN",
                github.token.as_ref(),
                |token| {
                    let client =
                        crate::providers::github::GithubClient::new(&github.api_url, token)
                            .map_err(|e| anyhow::anyhow!(e))?;
                    Ok(crate::providers::github::poller::GithubPoller::new(
                        client,
                        parts.log.clone(),
                        github.intake.label.clone(),
                        parts.board.config().clone(),
                        parts.settings.file.dispatch.clone(),
                    ))
                },
                |poller| async move { poller.tick().await },
            )
        },
    },
    Entry {
        plan: |s| vec![plans::gitlab_poller(s)],
        build: |parts, _| builds::gitlab_poller(parts),
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
            )
            .follows_log())
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
mod tests;
