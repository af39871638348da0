//! `pidevops budget …`: a task's budgets (what each has spent today and may spend), and a person's raise — the
//! same `budget.raised` event as the API's, straight to the database.

use chrono::Utc;
use clap::Subcommand;

use crate::budgets::{self, RaiseRequest};
use crate::config::Settings;
use crate::tasks::TaskId;

#[derive(Debug, Subcommand)]
pub enum BudgetCommand {
    /// The budgets a task falls under: its own, its repository's today, everyone's today.
    Show {
        /// The task (T-7).
        task: TaskId,
        /// One JSON object instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Add to a budget's limit: `pidevops budget raise --repo acme/api --usd 20` (today's), `--task T-4`, `--day`.
    Raise {
        /// The task's own budget (T-7).
        #[arg(long, conflicts_with_all = ["repo", "day"], required_unless_present_any = ["repo", "day"])]
        task: Option<String>,
        /// A repository's budget, today (owner/name).
        #[arg(long, conflicts_with = "day")]
        repo: Option<String>,
        /// Every repository's budget, today.
        #[arg(long)]
        day: bool,
        /// US dollars to add to its cost limit.
        #[arg(long)]
        usd: Option<f64>,
        /// Tokens to add to its token limit.
        #[arg(long)]
        tokens: Option<u64>,
        /// The raise as one JSON object instead of a line.
        #[arg(long)]
        json: bool,
    },
}

pub async fn budget(settings: Settings, command: BudgetCommand) -> anyhow::Result<()> {
    let config = settings.file.dispatch.budgets;
    // `show` only reads: it creates no database.
    let core = if matches!(command, BudgetCommand::Show { .. }) {
        crate::startup::Core::open_for_cli_reading(settings).await?
    } else {
        crate::startup::Core::open_for_cli(settings).await?
    };
    let result = run(&core, &config, command).await;
    core.close().await;
    result
}

async fn run(
    core: &crate::startup::Core,
    config: &budgets::BudgetsConfig,
    command: BudgetCommand,
) -> anyhow::Result<()> {
    let store = core.log.store();
    match command {
        BudgetCommand::Show { task, json } => {
            super::catch_up(store, crate::projectors::usage::NAME).await;
            super::catch_up(store, "tasks").await;
            let row = crate::projectors::tasks::get(store, task)
                .await?
                .ok_or_else(|| anyhow::anyhow!("no task {task}"))?;
            let standings =
                budgets::standings(store, config, task, &row.repo, Utc::now().date_naive()).await?;
            if json {
                println!("{}", serde_json::to_string(&standings)?);
            } else if standings.is_empty() {
                println!("no budget is set ([budgets] in pidevops.toml)");
            } else {
                for s in standings {
                    let usd = s
                        .limit_usd
                        .map(|l| format!("${:.2} of ${l:.2}", s.spent_usd))
                        .unwrap_or_else(|| format!("${:.2} (no limit)", s.spent_usd));
                    let tokens = s
                        .limit_tokens
                        .map(|l| format!("{} of {l} tokens", s.spent_tokens))
                        .unwrap_or_else(|| format!("{} tokens (no limit)", s.spent_tokens));
                    let state = match s.over(&Default::default()) {
                        Some(_) if s.figures_refused => {
                            "  SPENT: figures refused (raise it to go on)"
                        }
                        Some(_) => "  SPENT",
                        None => "",
                    };
                    println!("{:<40} {usd}, {tokens}{state}", s.scope.describe());
                }
            }
            Ok(())
        }
        BudgetCommand::Raise {
            task,
            repo,
            day,
            usd,
            tokens,
            json,
        } => {
            let scope = if task.is_some() {
                "task"
            } else if repo.is_some() {
                "repo"
            } else if day {
                "day"
            } else {
                anyhow::bail!("name the budget: --task T-n, --repo owner/name or --day");
            };
            let request = RaiseRequest {
                scope: scope.to_owned(),
                task,
                repo,
                usd,
                tokens,
                request_id: None,
            };
            let raise = budgets::raise_of_request(&request, config, Utc::now().date_naive(), "cli")
                .map_err(|why| anyhow::anyhow!(why))?;
            budgets::raise(&core.log, &raise, None).await?;
            if json {
                println!("{}", serde_json::to_string(&raise)?);
            } else {
                let mut added = Vec::new();
                if let Some(usd) = raise.usd {
                    added.push(format!("${usd:.2}"));
                }
                if let Some(tokens) = raise.tokens {
                    added.push(format!("{tokens} tokens"));
                }
                println!(
                    "raised {} by {}",
                    raise.scope.describe(),
                    added.join(" and ")
                );
            }
            Ok(())
        }
    }
}
