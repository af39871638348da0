//! `pidevops plan …`: state a goal for the planner, read its proposal and the tasks it became, approve it as a
//! whole or reject it with a comment (what the planner gets). The same `Board` as the API, straight to the
//! database; readable by default, JSON with `--json`.

use anyhow::Context;
use clap::Subcommand;

use super::{line, print_outcome};
use crate::board::{Board, Draft, Loaded, Steer};
use crate::config::Settings;
use crate::tasks::{ApprovalPolicy, Priority, RepoName, Spec, Task, TaskId};

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Ask for a plan: `pidevops plan new acme/api "Split billing into services"`. The planner
    /// (`[dispatch] planner`) proposes its tasks; the plan waits for approval as a whole.
    New {
        /// The repository (owner/name).
        repo: String,
        /// What the plan as a whole achieves; the planner decomposes it.
        #[arg(required = true, num_args = 1..)]
        goal: Vec<String>,
        /// Limits on what the plan's tasks may touch, for the planner.
        #[arg(long, default_value = "")]
        scope: String,
        /// How to tell the whole plan is done.
        #[arg(long, default_value = "")]
        done_when: String,
        /// urgent, high, normal or low (its tasks get the same).
        #[arg(long)]
        priority: Option<Priority>,
        /// manual (a person approves the proposal) or auto (approved as proposed); default: pidevops.toml.
        #[arg(long)]
        approval: Option<ApprovalPolicy>,
        /// JSON instead of readable lines.
        #[arg(long)]
        json: bool,
    },
    /// The plan, its proposal's items (scopes, dependencies), and its items as tasks.
    Show {
        /// The plan (T-7).
        id: TaskId,
        /// JSON instead of readable lines.
        #[arg(long)]
        json: bool,
    },
    /// Approve the proposal waiting for approval: its items become tasks.
    Approve {
        /// The plan (T-7).
        id: TaskId,
        /// JSON instead of readable lines.
        #[arg(long)]
        json: bool,
    },
    /// Reject the proposal: the planner plans again, with the comment.
    Reject {
        /// The plan (T-7).
        id: TaskId,
        /// What to change: the planner's next prompt carries it.
        #[arg(long)]
        comment: String,
        /// JSON instead of readable lines.
        #[arg(long)]
        json: bool,
    },
}

pub async fn plan(settings: Settings, command: PlanCommand) -> anyhow::Result<()> {
    if let PlanCommand::New { repo, .. } = &command {
        // Refused before anything is opened: a plan without a planner would wait for a run that never comes.
        if settings.file.profiles.planner().is_none() {
            anyhow::bail!(
                "no planner profile is configured: set [dispatch] planner in pidevops.toml to an agent profile \
                 that writes .pidevops/plan.json"
            );
        }
        let repo = repo.parse::<RepoName>()?;
        settings.file.board.allowed.check(&repo)?;
    }
    // `show` only reads: it creates no database.
    let core = if matches!(command, PlanCommand::Show { .. }) {
        crate::startup::Core::open_for_cli_reading(settings).await?
    } else {
        crate::startup::Core::open_for_cli(settings).await?
    };
    let board = Board::new(core.log.clone(), core.settings.file.board.clone());
    let result = run(&board, command).await;
    core.close().await;
    result
}

async fn run(board: &Board, command: PlanCommand) -> anyhow::Result<()> {
    match command {
        PlanCommand::New {
            repo,
            goal,
            scope,
            done_when,
            priority,
            approval,
            json,
        } => {
            let draft = Draft {
                priority,
                approval,
                ..Draft::plan(
                    repo.parse::<RepoName>()?,
                    Spec::new(goal.join(" "), scope, done_when)?,
                    Default::default(),
                )
            };
            let key = format!("cli:{}", uuid::Uuid::new_v4());
            let (outcome, _) = board.create(draft, &key, "cli", None).await?;
            super::print_task(&outcome.task, json, "created plan")
        }
        PlanCommand::Show { id, json } => {
            let loaded = load_plan(board, id).await?;
            let mut items = Vec::new();
            for child in plan_children(&loaded.task) {
                if let Some(item) = board.load(child).await? {
                    items.push(item.task);
                }
            }
            if json {
                println!(
                    "{}",
                    serde_json::json!({ "plan": loaded.task, "items": items })
                );
            } else {
                print!("{}", shown(&loaded.task, &items));
            }
            Ok(())
        }
        PlanCommand::Approve { id, json } => {
            load_plan(board, id).await?;
            let approved = board
                .steer(id, Steer::Approve, None, "from the CLI", "cli")
                .await;
            print_outcome(id, approved, json)
        }
        PlanCommand::Reject { id, comment, json } => {
            if comment.trim().is_empty() {
                anyhow::bail!("--comment must say what to change: the planner gets it");
            }
            load_plan(board, id).await?;
            let rejected = board
                .steer(id, Steer::Reject, Some(comment), "from the CLI", "cli")
                .await;
            print_outcome(id, rejected, json)
        }
    }
}

/// The plan `id`, or why `id` is not one.
async fn load_plan(board: &Board, id: TaskId) -> anyhow::Result<Loaded> {
    let loaded = board
        .load(id)
        .await?
        .with_context(|| format!("there is no task {id}"))?;
    if !loaded.task.is_plan() {
        anyhow::bail!("{id} is a task, not a plan (pidevops task show {id})");
    }
    Ok(loaded)
}

fn plan_children(plan: &Task) -> Vec<TaskId> {
    plan.plan().map(|p| p.children.clone()).unwrap_or_default()
}

/// The readable `plan show`: the plan's line and goal, its proposal (each item with its scope and what it waits
/// for), why the last one was rejected, and its items as tasks.
pub fn shown(plan: &Task, items: &[Task]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "{}", line(plan));
    let _ = writeln!(out, "  Goal:      {}", plan.spec().task());
    if !plan.spec().scope().is_empty() {
        let _ = writeln!(out, "  Scope:     {}", plan.spec().scope());
    }
    if !plan.spec().done_when().is_empty() {
        let _ = writeln!(out, "  Done when: {}", plan.spec().done_when());
    }
    let state = plan.plan().cloned().unwrap_or_default();
    if let Some(rejection) = &state.rejection {
        let _ = writeln!(
            out,
            "  rejected:  {rejection} (the planner's next proposal answers it)"
        );
    }
    match state.proposal.as_deref() {
        None if plan.column().is_open() => {
            let _ = writeln!(out, "  proposal:  none yet (the planner is writing it)");
        }
        None => {}
        Some(proposal) => {
            let standing = if state.approved_at.is_some() {
                "approved"
            } else {
                "waiting for approval: pidevops plan approve | reject --comment"
            };
            let _ = writeln!(
                out,
                "  proposal:  revision {}, {} item(s), {standing}",
                state.revision,
                proposal.items().len()
            );
            if let Some(summary) = proposal.summary() {
                let _ = writeln!(out, "             {}", summary.trim());
            }
            for item in proposal.items() {
                let _ = write!(
                    out,
                    "    {:<10} {}",
                    item.id().to_string(),
                    item.title().trim()
                );
                if !item.scope().is_empty() {
                    let _ = write!(
                        out,
                        "  scope: {}",
                        item.scope()
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
                if !item.depends_on().is_empty() {
                    let after: Vec<String> =
                        item.depends_on().iter().map(ToString::to_string).collect();
                    let _ = write!(out, "  after: {}", after.join(", "));
                }
                out.push('\n');
            }
        }
    }
    if !items.is_empty() {
        let _ = writeln!(out, "  items:");
        for item in items {
            let _ = writeln!(out, "    {}", line(item));
        }
    }
    out
}
