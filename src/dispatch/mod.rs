//! Dispatch: running a task's attempt with a coding agent. Built so far: the pure parts — agent profiles
//! (`profiles.rs`: presets, `pidevops.toml`, argv rendering), the prompt (`prompt.rs`) and which `todo` tasks
//! start within the concurrency limits (`schedule.rs`). The scheduler loop, worktrees, runner and workers come
//! next (issue 5).

pub mod profiles;
pub mod prompt;
pub mod schedule;

pub use profiles::{AgentProfile, Profiles, RunInputs};

#[cfg(test)]
mod tests;
