//! Dispatch: running a task's attempt with a coding agent. Built so far: the pure parts — agent profiles
//! (`profiles.rs`: presets, `pidevops.toml`, argv rendering) and the prompt (`prompt.rs`). The scheduler,
//! worktrees, runner and workers come next (issue 5).

pub mod profiles;
pub mod prompt;

pub use profiles::{AgentProfile, Profiles, RunInputs};

#[cfg(test)]
mod tests;
