//! `pidevops whatif`: what the log says a choice would have changed.
//!
//! - `--agent <profile> [--against <profile>]` (`agent.rs`): what a profile cost per merged pull request, from the
//!   read models.
//! - `--config <candidate.toml>` (`recorded.rs` reads, `replay.rs` decides, `report.rs` says): the recorded log
//!   replayed through pidevops's own decisions under a candidate configuration, with no outbound call and no agent
//!   run; each run's recorded outcome and usage stand in for it. Nothing is written: the replay builds its own
//!   state in memory from the log.

mod agent;
mod recorded;
mod replay;
mod report;
#[cfg(test)]
mod tests;

use clap::{ArgGroup, Args};

use crate::config::Settings;

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("question").required(true).args(["agent", "config"])))]
pub struct WhatifArgs {
    /// The agent profile to report on: its cost per merged pull request.
    #[arg(long)]
    agent: Option<String>,
    /// With `--agent`: the profile to compare it with; without it, every other profile that ran in the range.
    #[arg(long, requires = "agent")]
    against: Option<String>,
    /// A candidate pidevops.toml: the log replayed under it, task by task, against what the service did.
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Days back from now, today included (`--since 30d` says the same).
    #[arg(long, default_value_t = 30, conflicts_with = "since")]
    days: i64,
    /// The range as `<days>d` (`30d`).
    #[arg(long, value_parser = parse_since)]
    since: Option<i64>,
    /// JSON instead of readable lines.
    #[arg(long)]
    json: bool,
}

/// `30d` → 30: the only unit is days, 1 to 3,660.
fn parse_since(text: &str) -> Result<i64, String> {
    let days = text
        .strip_suffix('d')
        .and_then(|n| n.parse::<i64>().ok())
        .filter(|n| (1..=3660).contains(n));
    days.ok_or_else(|| format!("{text:?} is not a range: write days as <n>d, 1d to 3660d (30d)"))
}

pub async fn whatif(settings: Settings, args: WhatifArgs) -> anyhow::Result<()> {
    let days = args.since.unwrap_or(args.days);
    if let Some(path) = &args.config {
        return replay::whatif_config(settings, path, days, args.json).await;
    }
    let agent = args.agent.as_deref().unwrap_or_default();
    agent::whatif(settings, agent, args.against.as_deref(), days, args.json).await
}
