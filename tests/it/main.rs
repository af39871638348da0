//! The integration tests: one binary, one module per area.
//!
//! One binary links sqlx, octocrab and async-nats once instead of once per area, and compiles `common` once. The
//! price: every area's tests share one process and run side by side, so no test may change process-wide state
//! (environment variables, the current directory, a cached detection) that another could read, and assertions on
//! the process-wide metrics recorder hold only for series that test alone writes, or for counters read as "at
//! least". A new area is a module here (`tests/it/<area>.rs`), never a `tests/<area>.rs` of its own:
//! `scripts/test.sh` refuses those. Run one area with `scripts/test.sh --test it <area>::`.

// Every function here is test code (helpers included, which clippy's allow-unwrap-in-tests does not see), and an
// end-to-end scenario reads as one story: the function limit (clippy.toml) holds the library and its unit tests.
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

#[macro_use]
mod common;

mod agent_clis;
mod architecture;
mod board_replay;
mod bounds;
mod branches;
mod browser;
mod budgets;
mod budgets_ledger;
mod bus;
mod chain;
mod cli_errors;
mod cli_sessions;
mod comments;
mod config;
mod cron;
mod deploy;
mod disk_full;
mod dispatch;
mod dispatch_process;
mod docs;
mod effects;
mod egress;
mod eventlog;
mod exhaustive;
mod follower_reads;
mod full_loop;
mod fuzz;
mod health;
mod hostile;
mod ingress;
mod init;
mod intake;
mod land;
mod land_local;
mod leases;
mod limits;
mod merge_queue;
mod merge_queue_gitlab;
mod merge_queue_host;
mod merge_train_gitlab;
mod openapi;
mod plans;
mod plans_combined;
mod planted;
mod pollers;
mod process;
mod projectors;
mod providers;
mod questions;
mod reactions;
mod receipts;
mod refresh;
mod refresh_backstop;
mod refresh_check;
mod refresh_conflict;
mod refresh_gitlab;
mod relay;
mod replicas;
mod repo_env;
mod resume;
mod runs_projector;
mod scopes;
mod sizes;
mod stale;
mod steering;
mod stream;
mod task_cli;
mod tasks_api;
mod tasks_projectors;
mod tasks_rebuild;
mod tour;
mod usage;
mod verdicts;
mod web;
mod web_attempts;
mod web_new_task;
mod web_plans;
mod web_spend;
mod whatif;
mod whatif_replay;
mod work;
