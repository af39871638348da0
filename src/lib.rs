//! # pidevops
//!
//! An always-on service that lets AI coding agents work a team's tickets. Everything that happens is an event in
//! an append-only log; everything else is derived from it. See `AGENTS.md` for the rules and `README.md` for use.
//!
//! # Layout — the map of this tree
//!
//! Data flows one way: ingress → event log → (projectors, relay, policies) → effects. A module is a room with one
//! job; the arrows below are the only doors.
//!
//! ```text
//! main.rs          thin clap front: serve | migrate | doctor | events | replay | task | dispatch | worker | config
//! cli.rs           `pidevops task …` (the board in a terminal), `pidevops dispatch pause|resume|status` and
//!                  `pidevops config check [FILE]` (the effective configuration, secrets redacted, or every error)
//! startup.rs       build(Settings) -> App: the one constructor for main and for tests (port 0 in tests)
//! config.rs        typed settings: environment first, then optional pidevops.toml; secrets wrapped
//! config/file.rs   pidevops.toml typed: a serde struct per table (unknown keys refused with the closest known
//!                  one), read once into FileConfig (tables + BoardConfig, DispatchConfig, Profiles, …); errors
//!                  name the key path (`[dispatch] max_concurent`); docs/configuration.md is tested against it
//! telemetry.rs     tracing (json | pretty) and the Prometheus recorder
//! cron/            [[schedules]] and the `cron` loop: tasks on time; after downtime the latest slot fires once
//! doctor.rs        the loop plan (armed / disabled / unarmed and why), shared by `serve`, `doctor` and /health
//! domain/          pure values: Source, event type names, the event envelope
//! eventlog/        the only writer of the events table: appender tasks (group commit) over two backends
//!   postgres.rs    production: a batch is one call of `pidevops_append`, under an advisory lock = gap-free order
//!   sqlite.rs      embedded default (`./data/pidevops.db`): `plan_batch` under BEGIN IMMEDIATE
//! ingress/         webhooks: raw bytes in, verified and parsed NewEvent out, appended, then 2xx
//!   verify.rs      HMAC and token checks, constant time
//!   github.rs linear.rs telegram.rs   one parser per provider (pure)
//!   telegram_updates.rs   without a webhook: the long-poll loop, into the log like a delivery
//! bench.rs         setup the benchmark binaries share (throwaway databases); not used by the service
//! board/           the board's command side: load a task's stream, decide, append with its version, retry races
//! bus/             fan-out: Bus (JetStream | in-process), relay.rs (log → bus, exactly once), work.rs (work queues)
//! dispatch/        running attempts with coding agents: the pure parts (config, profiles, prompt, schedule, run
//!                  events), workspaces (mirrors, worktrees), Landlock, the runner, the dispatcher / watchdog /
//!                  gc loops and `pidevops worker`; one outcome per run whatever crashes
//! effects/         outbound calls driven by events, each recorded in its stream `effect:<key>` and made once
//!   policy.rs      pure: which effects an event asks for (pull request, Linear comments / states / agent
//!                  activities, Telegram notifications), each with its idempotency key
//!   github.rs linear.rs telegram.rs   the provider clients (base URLs from config); bot.rs the Telegram bot
//!   runner.rs      the `effects:<provider>` loop: request once, call, record, follow up
//! pollers/         `linear_poller`, `github_poller`: what a missed webhook would have said, appended in its shape
//! intake/          the policy that turns qualifying webhook events into tasks (rules.rs is pure)
//! reactions/       the policy that turns GitHub events on pidevops branches into task commands (rules.rs is pure)
//! loops/           the do-while runner and the health registry every background activity reports to
//!   lease.rs       one replica runs each singleton loop: a lease row, DB-clock expiry, renewed by `leases`
//! projectors/      read models from the log: batch + checkpoint in one transaction, rebuildable from 0
//!   runs.rs        one row per agent run: state, last sign of life, outcome (watchdog, /api/runs)
//!   sources.rs     per source and event type: counts, first and last delivery (`/api/sources`, `/health`)
//! tasks/           the task board's domain, pure: typed values, decide(state, command) → events, evolve
//! http/            router: /health, /metrics, /webhooks/*, /api/* (bearer token), JSON errors
//! web/             the dashboard at /: pages.rs (pure maud rendering from read models), session.rs (signed
//!                  cookie + CSRF, pure), assets.rs (one stylesheet, one script), mod.rs (handlers, /live SSE)
//! ```

pub mod bench;
pub mod board;
pub mod bus;
pub mod cli;
pub mod config;
pub mod cron;
pub mod dispatch;
pub mod doctor;
pub mod domain;
pub mod effects;
pub mod eventlog;
pub mod http;
pub mod ingress;
pub mod intake;
pub mod loops;
pub mod pollers;
pub mod projectors;
pub mod reactions;
pub mod startup;
pub mod tasks;
pub mod telemetry;
pub mod web;
