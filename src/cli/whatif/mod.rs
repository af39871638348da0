//! `pidevops whatif`: what the log says a choice would have changed.
//!
//! - `--agent <profile> [--against <profile>]` (`agent.rs`): what a profile cost per merged pull request, from the
//!   read models.
//! - `--config <candidate.toml>`: the recorded log replayed under a candidate configuration (`crate::whatif`).

mod agent;

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
        .filter(|n| (1..=crate::whatif::MAX_DAYS).contains(n));
    days.ok_or_else(|| format!("{text:?} is not a range: write days as <n>d, 1d to 3660d (30d)"))
}

pub async fn whatif(settings: Settings, args: WhatifArgs) -> anyhow::Result<()> {
    let days = args.since.unwrap_or(args.days);
    if let Some(path) = &args.config {
        return whatif_config(settings, path, days, args.json).await;
    }
    let agent = args.agent.as_deref().unwrap_or_default();
    agent::whatif(settings, agent, args.against.as_deref(), days, args.json).await
}

/// `whatif --config`: the candidate read and checked as `serve` would read it, the log read once, the replay
/// printed. No outbound call, no agent, nothing written.
async fn whatif_config(
    settings: Settings,
    path: &std::path::Path,
    days: i64,
    json: bool,
) -> anyhow::Result<()> {
    let file = crate::config::read_config_file(path)
        .map_err(|e| anyhow::anyhow!("the candidate configuration is refused: {e}"))?;
    let rules = crate::providers::intake_rules(&Settings {
        file: file.clone(),
        ..settings.clone()
    });
    let service_rules = crate::providers::intake_rules(&settings);
    let since = chrono::Utc::now() - chrono::Duration::days(days);
    let core = crate::startup::Core::open_for_cli_reading(settings).await?;
    let report =
        crate::whatif::replay_log(core.log.store(), &file, &rules, &service_rules, since).await;
    core.close().await;
    let report = report?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", crate::whatif::readable(&report));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_range_is_days_written_with_a_d() {
        assert_eq!(super::parse_since("30d"), Ok(30));
        for bad in ["30", "0d", "-1d", "d", "1w", "3661d", "1.5d"] {
            assert!(super::parse_since(bad).is_err(), "{bad}");
        }
    }
}
