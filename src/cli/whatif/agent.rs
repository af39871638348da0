//! `pidevops whatif --agent <profile> [--against <profile>]`: what a profile cost per merged pull request over the
//! last days, against another (or every other), from the log's read models (`usage`, `runs`, `tasks`), brought up
//! to the log first. A profile's cost is what its runs reported in the range (a cost no run reported is unknown,
//! never $0); its merged pull requests are those merged in the range whose task's last succeeded run was its.

use std::collections::BTreeMap;

use chrono::{NaiveDate, Utc};
use serde::Serialize;

use crate::config::Settings;
use crate::projectors::tasks as task_rows;
use crate::projectors::usage::{self, filter, Spent};

/// One profile's line of the report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProfileCost {
    pub profile: String,
    pub spent: Spent,
    pub merged_pull_requests: i64,
    /// The cost over the merged pull requests, where every run reported a cost and one was merged.
    pub cost_per_merged_pull_request: Option<f64>,
}

/// The report (`--json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AgentReport {
    /// The first day covered (UTC).
    pub since: NaiveDate,
    /// `--agent`'s line first, then the others by name.
    pub profiles: Vec<ProfileCost>,
}

/// The report from the range's usage rows and merged pull requests per profile. Pure.
pub fn report(
    since: NaiveDate,
    agent: &str,
    against: Option<&str>,
    rows: &[usage::DayRow],
    merged: &BTreeMap<String, i64>,
) -> AgentReport {
    let mut by_profile: BTreeMap<&str, Vec<&Spent>> = BTreeMap::new();
    for row in rows {
        by_profile
            .entry(row.profile.as_str())
            .or_default()
            .push(&row.spent);
    }
    let spent: BTreeMap<&str, Spent> = by_profile
        .into_iter()
        .map(|(name, rows)| (name, usage::total(rows)))
        .collect();
    let mut names: Vec<&str> = match against {
        Some(other) => vec![other],
        None => spent
            .keys()
            .copied()
            .chain(merged.keys().map(String::as_str))
            .filter(|name| *name != agent)
            .collect(),
    };
    names.sort_unstable();
    names.dedup();
    names.insert(0, agent);
    let profiles = names
        .into_iter()
        .map(|name| {
            let spent = spent.get(name).cloned().unwrap_or_default();
            let merged = merged.get(name).copied().unwrap_or(0);
            let every_run_costed = spent.runs > 0 && spent.costed_runs == spent.runs;
            ProfileCost {
                profile: name.to_owned(),
                cost_per_merged_pull_request: (every_run_costed && merged > 0)
                    .then(|| spent.cost_usd / merged as f64),
                merged_pull_requests: merged,
                spent,
            }
        })
        .collect();
    AgentReport { since, profiles }
}

pub(super) async fn whatif(
    settings: Settings,
    agent: &str,
    against: Option<&str>,
    days: i64,
    json: bool,
) -> anyhow::Result<()> {
    for name in std::iter::once(agent).chain(against) {
        if name.is_empty() || name.len() > 64 || name.chars().any(char::is_control) {
            anyhow::bail!("{name:?} is not a profile name");
        }
    }
    let filter = filter(Some(days), None, Utc::now().date_naive())
        .map_err(|(_, message)| anyhow::anyhow!(message))?;
    let since = filter.since.unwrap_or_default();
    let core = crate::startup::Core::open_for_cli_reading(settings).await?;
    let store = core.log.store().clone();
    for projector in [usage::NAME, "runs", "tasks"] {
        crate::cli::catch_up(&store, projector).await;
    }
    let read = async {
        let rows = usage::days(&store, &filter).await?;
        let merged = task_rows::merged_by_profile(&store, since).await?;
        anyhow::Ok((rows, merged))
    };
    let result = read.await;
    core.close().await;
    let (rows, merged) = result?;
    let report = report(since, agent, against, &rows, &merged);
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", readable(&report));
    }
    Ok(())
}

/// The report as a person reads it in a terminal.
pub fn readable(report: &AgentReport) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "cost per merged pull request since {} (UTC)\n",
        report.since
    );
    for line in &report.profiles {
        let spent = &line.spent;
        let cost = if spent.runs == 0 {
            "no runs".to_owned()
        } else if spent.costed_runs == 0 {
            "cost unknown".to_owned()
        } else if spent.costed_runs < spent.runs {
            format!(
                "at least ${:.4} ({} of {} runs reported a cost)",
                spent.cost_usd, spent.costed_runs, spent.runs
            )
        } else {
            format!("${:.4}", spent.cost_usd)
        };
        let per = match line.cost_per_merged_pull_request {
            Some(per) => format!("${per:.4} per merged pull request"),
            None if line.merged_pull_requests == 0 => "no pull request merged".to_owned(),
            None => "per merged pull request unknown".to_owned(),
        };
        let _ = writeln!(
            out,
            "  {:<16} {} runs  {cost}  {} merged  {per}",
            line.profile, spent.runs, line.merged_pull_requests
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(profile: &str, runs: i64, costed: i64, cost: f64) -> usage::DayRow {
        usage::DayRow {
            day: "2026-12-01".into(),
            repo: "acme/app".into(),
            profile: profile.into(),
            spent: Spent {
                runs,
                costed_runs: costed,
                cost_usd: cost,
                ..Spent::default()
            },
        }
    }

    #[test]
    fn each_profile_costs_its_runs_over_its_merged_pull_requests_and_an_unknown_cost_stays_unknown()
    {
        let since = NaiveDate::from_ymd_opt(2026, 11, 8).unwrap();
        let rows = [
            row("claude", 2, 2, 1.0),
            row("claude", 1, 1, 0.5),
            row("codex", 3, 0, 0.0),
            row("pi", 1, 1, 0.2),
        ];
        let merged = BTreeMap::from([("claude".to_owned(), 3), ("codex".to_owned(), 1)]);
        let all = report(since, "codex", None, &rows, &merged);
        let names: Vec<&str> = all.profiles.iter().map(|p| p.profile.as_str()).collect();
        assert_eq!(names, ["codex", "claude", "pi"]);
        assert_eq!(
            all.profiles[0].cost_per_merged_pull_request, None,
            "Codex reports no cost"
        );
        assert_eq!(all.profiles[1].cost_per_merged_pull_request, Some(0.5));
        assert_eq!(all.profiles[1].spent.runs, 3);
        assert_eq!(all.profiles[2].merged_pull_requests, 0);
        assert_eq!(all.profiles[2].cost_per_merged_pull_request, None);
        let text = readable(&all);
        assert!(text.contains("cost unknown"), "{text}");
        assert!(text.contains("$0.5000 per merged pull request"), "{text}");
        assert!(text.contains("no pull request merged"), "{text}");
        // Against one: only the two, a profile that never ran says so.
        let two = report(since, "claude", Some("opencode"), &rows, &merged);
        let names: Vec<&str> = two.profiles.iter().map(|p| p.profile.as_str()).collect();
        assert_eq!(names, ["claude", "opencode"]);
        assert!(readable(&two).contains("no runs"));
    }
}
