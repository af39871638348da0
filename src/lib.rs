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
//! main.rs          thin clap front: init | serve | migrate | doctor | events | task | plan | budget | usage |
//!                  dispatch | worker | config check | replay
//! cli/             `pidevops task …` (the board in a terminal), `pidevops plan …` (cli/plan.rs), `pidevops budget`,
//!                  `pidevops usage` and `pidevops dispatch pause|resume|status`
//! startup/         build(Settings) -> App: the one constructor for main and for tests (port 0 in tests)
//!   catalog/       THE list of loops: each one's plan (armed / disabled / unarmed and why) and its builder;
//!                  doctor, /health, /metrics and start-up all read it; effects.rs: one entry per provider's
//!                  effects loop
//! config/          Settings from the environment; config/file/: pidevops.toml typed, unknown keys refused, and
//!                  each area's domain values assembled from the tables (board.rs, budgets.rs, cron.rs, …): the
//!                  modules below take those values and none reads `Tables`; config/dispatch.rs, profiles.rs:
//!                  dispatch and agent profiles typed; presets.rs: the agent presets, one entry each; secret.rs:
//!                  constant-time compare
//! telemetry.rs     tracing (json | pretty) and the Prometheus recorder
//! init/            `pidevops init`: pidevops.toml and .env of fresh secrets from a few answers
//! doctor/          `pidevops doctor`: the loop plan, containment, webhooks, each provider's API (its own check)
//! budgets/         what runs may spend, raised by events, from the usage read model
//! domain/          pure values: Source, event types, NewEvent; runs.rs, a run's events; usage.rs, what a run
//!                  spent, read from its agent's output; registry.rs, THE provider table (PROVIDERS)
//! eventlog/        the only writer of the events table: appender tasks (group commit) over two backends
//!   sql.rs         the statements both backends run (`$N`), and `on_store!` to run one body on either pool
//!   postgres.rs    what differs on Postgres: the append (`pidevops_append`, advisory lock), body columns
//!   sqlite.rs      embedded default (`./data/pidevops.db`): `plan_batch` (plan.rs) under BEGIN IMMEDIATE
//! ingress/         webhooks: raw bytes in, verified and parsed NewEvent out, appended, then 2xx; one handler
//!                  (`receive`) over each provider's `Webhook` (verify + parse, in the provider's folder), one
//!                  route per provider
//! bus/             fan-out: Bus (JetStream | in-process), relay.rs (log → bus, exactly once), work.rs (work queues),
//!                  credentials.rs (NATS_URL's credentials to the client; is it open to strangers?)
//! loops/           the do-while runner and the health registry (stale rule); follow.rs, the one driver for
//!                  loops that apply each new event of the log; lease.rs, one replica per singleton loop
//! projectors/      read models from the log: batch + checkpoint in one transaction, rebuildable from 0
//! board/           the command side: load a task's stream, decide, append at its version; allow-list; pause
//! tasks/           the task board's domain, pure: typed values, decide(state, command) → events, evolve; plans and
//!                  triage (domain/family.rs), auto-land's facts (landing.rs), the plan file (plan/)
//! intake/          the follower that turns qualifying webhook events into tasks or plans (rules/ is pure: the
//!                  decision, its configuration and the shared helpers; each provider's rules are in its folder),
//!                  replies to pidevops's messages into answers and follow-ups, and trusted comments on a code
//!                  host (GitHub's comments, GitLab's notes) addressed to pidevops into follow-ups, answers and
//!                  commands (comments.rs)
//! receipts.rs      the follower that records an ended task's receipt in the log (receipt.issued)
//! plans/           the follower that makes an approved plan's items tasks and rolls the plan up from them
//! reactions/       the follower that turns code hosts' events on pidevops branches into task commands (each
//!                  host's pure rules, `HostRules`, in its provider's folder)
//! effects/         outbound calls, each recorded in `effect:<key>` and made once: runner/ (the one
//!                  `effects:<provider>` follower, generic over its policy), provider.rs (the ProviderPolicy
//!                  shape), handle.rs (the narrow handle a policy gets instead of the runner), call.rs (CallError,
//!                  Produced), pull_request.rs (both pull requests' one description writer), policy_config.rs
//! providers/       one folder per provider, whole (github/, linear/, telegram/, slack/, gitlab/): its client, its
//!                  webhook
//!                  (`ingress::Webhook`), its settings (settings.rs), its poller, its intake rules
//!                  (`intake::rules::SourceRules`, built by `intake_rules`), its effects policy and actions (`effects::ProviderPolicy`);
//!                  above the layers it plugs into, which name no provider
//! pollers/         what the pollers share; each poller lives in its provider's folder
//! cron/            [[schedules]] and the `cron` loop: after downtime the latest slot fires once
//! dispatch/        attempts with coding agents: pure config / profiles / prompt / schedule; dispatcher/ (claim,
//!                  attempt, steering, launch, watchdog, gc, pause), workspace/ (mirrors, worktrees, hand-off,
//!                  spares), sandbox.rs + reaper.rs (containment), runner.rs (the agent process), live.rs (its
//!                  live input), worker.rs
//! http/            router: /health, /metrics, /api/* (bearer token; OpenAPI at /api/openapi.json), JSON errors
//!   web/           the dashboard at /: pages.rs (pure maud), session.rs (cookie + CSRF, pure), mod.rs (handlers)
//! whatif/          the recorded log replayed under a candidate configuration (`pidevops whatif --config`,
//!                  the dashboard's /whatif): read once into memory, each decision asked again of the function the
//!                  service decides with, what differs reported; reads only
//! bench.rs         setup the benchmark binaries share; not used by the service
//! ```
//!
//! The layers, lowest first (AGENTS.md, "Layers"; held by tests/it/architecture.rs): a module imports only its own
//! layer or a lower one, and no import cycle closes.
//!
//! ```text
//!  1 foundation: tasks, domain, telemetry
//!  2 infrastructure: eventlog, loops, bus
//!  3 read models: projectors
//!  4 command side: board
//!  5 policies: budgets, cron, intake, pollers, effects, receipts
//!  6 configuration: config
//!  7 workers: dispatch, ingress, plans, reactions, landing, whatif
//!  8 providers: providers
//!  9 surfaces: http, init
//! 10 start-up: startup
//! 11 front ends: doctor, cli, bench
//! ```
//!
//! Where a rule is decided (retries, staleness, leases, effects, intake): AGENTS.md, "Where things are decided".

pub mod bench;
pub mod board;
pub mod budgets;
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
pub mod init;
pub mod intake;
pub mod landing;
pub mod loops;
pub mod plans;
pub mod pollers;
pub mod projectors;
pub mod providers;
pub mod reactions;
pub mod receipts;
pub mod startup;
pub mod tasks;
pub mod telemetry;
pub mod whatif;
