//! `pidevops usage`: what agents spent, per day, repository and profile, and the tasks that spent most — the
//! `usage` read model, brought up to the log first (serve may not be running). Readable, or JSON with `--json`
//! (the shape of `GET /api/usage`).

use chrono::Utc;
use clap::Args;

use crate::config::Settings;
use crate::projectors::usage::{self, filter, Spent, UsageReport};

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// Days back from today (UTC), today included.
    #[arg(long, default_value_t = 30)]
    days: i64,
    /// One repository's usage (owner/name).
    #[arg(long)]
    repo: Option<String>,
    /// How many of the tasks that spent most to list.
    #[arg(long, default_value_t = 10)]
    tasks: i64,
    /// JSON instead of readable lines.
    #[arg(long)]
    json: bool,
}

pub async fn usage(settings: Settings, args: UsageArgs) -> anyhow::Result<()> {
    let filter = filter(
        Some(args.days),
        args.repo.as_deref(),
        Utc::now().date_naive(),
    )
    .map_err(|(_, message)| anyhow::anyhow!(message))?;
    if !(0..=100).contains(&args.tasks) {
        anyhow::bail!("--tasks must be from 0 to 100");
    }
    let core = crate::startup::Core::open_for_cli_reading(settings).await?;
    let store = core.log.store().clone();
    super::catch_up(&store, usage::NAME).await;
    let read = async {
        let days = usage::days(&store, &filter).await?;
        let tasks = usage::top_tasks(&store, filter.repo.as_deref(), args.tasks).await?;
        anyhow::Ok((days, tasks))
    };
    let result = read.await;
    core.close().await;
    let (days, tasks) = result?;
    let report = UsageReport {
        since: filter.since.unwrap_or_default(),
        total: usage::total(days.iter().map(|d| &d.spent)),
        days,
        tasks,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    print!("{}", readable(&report));
    Ok(())
}

/// The report as a person reads it in a terminal.
pub fn readable(report: &UsageReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "usage since {} (UTC)", report.since);
    if report.days.is_empty() {
        out.push_str("  no agent run reported usage in these days\n");
    }
    for row in &report.days {
        let _ = writeln!(
            out,
            "  {}  {:<24} {:<12} {}",
            row.day,
            row.repo,
            row.profile,
            spent(&row.spent)
        );
    }
    let _ = writeln!(out, "total  {}", spent(&report.total));
    if !report.tasks.is_empty() {
        out.push_str("tasks that spent most (all time)\n");
        for task in &report.tasks {
            let _ = writeln!(
                out,
                "  {:<8} {:<24} {}",
                task.task_id,
                task.repo,
                spent(&task.spent)
            );
        }
    }
    out
}

fn spent(spent: &Spent) -> String {
    let cost = if spent.costed_runs == 0 {
        "cost unknown".to_owned()
    } else if spent.costed_runs < spent.runs {
        format!(
            "${:.4} ({} of {} runs reported a cost)",
            spent.cost_usd, spent.costed_runs, spent.runs
        )
    } else {
        format!("${:.4}", spent.cost_usd)
    };
    format!(
        "{} runs  {} tokens (in {}, out {}, cache read {}, cache write {})  {cost}",
        spent.runs,
        spent.tokens(),
        spent.input_tokens,
        spent.output_tokens,
        spent.cache_read_tokens,
        spent.cache_write_tokens
    ) + &refused(spent)
}

/// The runs whose usage figures were refused (what they spent is unknown), where there are any.
fn refused(spent: &Spent) -> String {
    match spent.refused_runs {
        0 => String::new(),
        n => format!("  figures refused for {n} run(s)"),
    }
}
