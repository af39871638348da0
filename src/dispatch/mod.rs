//! Dispatch: running a task's attempt with a coding agent, in its own worktree, to exactly one outcome.
//!
//! Its configuration (`[dispatch]`, `[repos]`, `[agents.*]`: limits, sources, timing, profiles) is typed in
//! `crate::config::{dispatch, profiles}`, with the rest of `pidevops.toml`.
//!
//! - `agent_files.rs` what an agent leaves in `.pidevops/` (status, review, spec), read as untrusted input
//! - `prompt.rs`     the prompt: Task / Scope / Done when, and what failed last time (pure)
//! - `schedule.rs`   which `todo` tasks start within the limits (pure)
//! - `runs`          the run's events (pure; in `domain::runs`, shared with the runs projector)
//! - `workspace/`    mirrors and worktrees under `WORKSPACE_ROOT`: git, mirror, worktree, handoff, spares, gc
//! - `sandbox.rs`    containment: bubblewrap namespaces, else Landlock reads and writes; what an agent sees
//! - `reaper.rs`     the process between us and the agent (or bubblewrap) that adopts and kills everything a run leaves
//! - `runner.rs`     the agent process: group, scrubbed env, stdin, log (whole lines, in the order read), tail,
//!   watchdogs, output budget
//! - `agent_log.rs`  what the run's log keeps of the output: head, a marker with the bytes cut, tail (pure)
//! - `cgroup.rs`     a memory limit per agent where cgroup v2 delegation exists (memory.max), else why not
//! - `disk.rs`       free space on the workspace volume: claims wait below `min_free_disk_mib`
//! - `sessions/`     an agent CLI's own session, kept with each checkpoint and resumed with it (only the
//!   transcript, found without following links, bounded, whole JSON lines)
//! - `preflight.rs`  whether a profile can run here (its program, git, its credential, the workspace volume)
//! - `dispatcher/`   the dispatcher, watchdog and gc loops: claim, attempt, launch, watchdog, gc, pause
//! - `worker.rs`     `pidevops worker`: runs pulled from JetStream

pub mod agent_files;
pub mod agent_log;
pub mod cgroup;
pub mod disk;
pub mod dispatcher;
pub mod egress;
pub mod live;
pub mod preflight;
pub mod prompt;
pub mod reaper;
pub mod runner;
/// The run events live in `domain` (pure values read by the runs projector too); re-exported where they began.
pub use crate::domain::runs;
pub mod sandbox;
pub mod schedule;
pub mod sessions;
pub mod worker;
pub mod workspace;

pub use dispatcher::Dispatcher;

#[cfg(test)]
mod tests;
