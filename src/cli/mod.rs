//! `pidevops task …`: the board from a terminal. Readable by default (columns, ages, attempts, flags), JSON with
//! `--json` for scripts. Commands go through the same `Board` as the API, straight to the database. Plans
//! (`pidevops plan …`) in `cli/plan.rs`.

use anyhow::Context;
use chrono::Utc;
use clap::Subcommand;

mod budget;
mod plan;
mod usage;
mod whatif;

pub use budget::{budget, BudgetCommand};
pub use plan::{plan, PlanCommand};
pub use usage::{usage, UsageArgs};
pub use whatif::{whatif, WhatifArgs};

use crate::board::{Board, BoardError, Draft, Loaded, Outcome, SpecEdit, Steer};
use crate::config::Settings;
use crate::tasks::{
    AgentName, ApprovalPolicy, Command, Priority, RepoName, Spec, Task, TaskError, TaskId,
};

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Create a task: `pidevops task new acme/api "Fix the login redirect"`.
    New {
        /// The repository (owner/name).
        repo: String,
        /// What to do (the spec's Task).
        #[arg(required = true, num_args = 1..)]
        text: Vec<String>,
        /// What it may change (the spec's Scope).
        #[arg(long, default_value = "")]
        scope: String,
        /// How to tell it is done (the spec's Done when).
        #[arg(long, default_value = "")]
        done_when: String,
        /// urgent, high, normal or low.
        #[arg(long)]
        priority: Option<Priority>,
        /// auto or manual (default: pidevops.toml).
        #[arg(long)]
        approval: Option<ApprovalPolicy>,
        /// The agent profile to run it with (default: the repository's).
        #[arg(long)]
        agent: Option<AgentName>,
        /// JSON instead of readable lines.
        #[arg(long)]
        json: bool,
    },
    /// The board: open tasks by column (archived and cancelled only when asked for).
    List {
        /// triage, todo, in-progress, in-review, done, archived or cancelled.
        #[arg(long)]
        column: Option<crate::tasks::Column>,
        /// The repository (owner/name).
        #[arg(long)]
        repo: Option<String>,
        /// linear, github, telegram or api.
        #[arg(long)]
        source: Option<String>,
        /// Only tasks waiting for a person.
        #[arg(long)]
        needs_human: bool,
        /// JSON instead of readable lines.
        #[arg(long)]
        json: bool,
    },
    /// One task with its timeline.
    Show {
        /// The task (T-7).
        id: TaskId,
        /// JSON instead of readable lines.
        #[arg(long)]
        json: bool,
    },
    /// Move a triage task to todo.
    Approve {
        /// The task (T-7).
        id: TaskId,
        /// JSON instead of readable lines.
        #[arg(long)]
        json: bool,
    },
    /// Refuse a triage task.
    Reject {
        /// The task (T-7).
        id: TaskId,
        /// Why, in words (kept on the timeline).
        #[arg(long)]
        reason: Option<String>,
        /// JSON instead of readable lines.
        #[arg(long)]
        json: bool,
    },
    /// Give a flagged task another go, or send a task in review back for another attempt.
    Retry {
        /// The task (T-7).
        id: TaskId,
        /// Why, in words (kept on the timeline).
        #[arg(long)]
        reason: Option<String>,
        /// JSON instead of readable lines.
        #[arg(long)]
        json: bool,
    },
    /// Cancel an open task.
    Cancel {
        /// The task (T-7).
        id: TaskId,
        /// Why, in words (kept on the timeline).
        #[arg(long)]
        reason: Option<String>,
        /// JSON instead of readable lines.
        #[arg(long)]
        json: bool,
    },
    /// Mark a task in review done without landing it (merged by hand, or kept as it is); `cancel` closes it
    /// without calling it done.
    Done {
        /// The task (T-7).
        id: TaskId,
        /// JSON instead of readable lines.
        #[arg(long)]
        json: bool,
    },
    /// Land a task in review on a repository not on GitHub: its pushed commit merged into the base (fast-forward,
    /// else a merge commit) and pushed, then the task is done. A GitHub repository's pull request lands it.
    Land {
        /// The task (T-7).
        id: TaskId,
        /// JSON instead of readable lines.
        #[arg(long)]
        json: bool,
    },
    /// Archive a done or cancelled task.
    Archive {
        /// The task (T-7).
        id: TaskId,
        /// JSON instead of readable lines.
        #[arg(long)]
        json: bool,
    },
    /// Edit a task's spec before work starts (triage or todo): `pidevops task spec T-7 --done-when "tests pass"`.
    /// A part not given keeps its value; `--scope ""` empties the scope.
    #[command(group(clap::ArgGroup::new("part").required(true).multiple(true)
        .args(["task", "scope", "done_when"])))]
    Spec {
        /// The task (T-7).
        id: TaskId,
        /// What to do (the spec's Task).
        #[arg(long)]
        task: Option<String>,
        /// What it may change (the spec's Scope).
        #[arg(long)]
        scope: Option<String>,
        /// How to tell it is done (the spec's Done when).
        #[arg(long)]
        done_when: Option<String>,
        /// JSON instead of readable lines.
        #[arg(long)]
        json: bool,
    },
    /// Answer the question a task waits on (any needs-human): `pidevops task answer T-7 "use euros"`. The first
    /// answer from anywhere becomes the next attempt's follow-up; a later one is refused.
    Answer {
        /// The task (T-7).
        id: TaskId,
        /// The answer, in words.
        #[arg(required = true)]
        text: Vec<String>,
        /// JSON instead of readable lines.
        #[arg(long)]
        json: bool,
    },
    /// Pick the agent profile of a task's next attempt: `pidevops task agent T-7 codex`, or `--default` for the
    /// repository's.
    Agent {
        /// The task (T-7).
        id: TaskId,
        /// The profile: a preset or one under [agents].
        #[arg(required_unless_present = "default", conflicts_with = "default")]
        name: Option<AgentName>,
        /// The repository's profile again.
        #[arg(long)]
        default: bool,
        /// JSON instead of readable lines.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Read pidevops.toml and the environment as `serve` would; print the effective configuration (secrets
    /// redacted) and exit 0, or print every error and exit 2.
    Check {
        /// The file to check (default: PIDEVOPS_CONFIG, else ./pidevops.toml if present, as serve reads it).
        file: Option<std::path::PathBuf>,
        /// How to print the effective configuration.
        #[arg(long, value_enum, default_value_t = ConfigFormat::Toml)]
        format: ConfigFormat,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ConfigFormat {
    /// A valid pidevops.toml, the environment in comments.
    Toml,
    Json,
}

/// `pidevops config check`: the effective configuration to print and the warnings (each profile it runs that
/// cannot run here: `dispatch::preflight`; not errors, since the check may run on another machine than the
/// service), or every error (one a line).
pub fn config(
    env: crate::config::Env,
    command: ConfigCommand,
) -> Result<(String, Vec<String>), String> {
    let ConfigCommand::Check { file, format } = command;
    let env = match &file {
        Some(path) => env.with("PIDEVOPS_CONFIG", &path.display().to_string()),
        None => env,
    };
    match Settings::from_env(&env) {
        Ok(settings) => {
            // Serve holds `[loops.<name>]` to the loops it plans; so does the check.
            crate::startup::check_fail_after(
                &settings.file.loop_fail_after,
                &crate::doctor::plan(&settings),
            )
            .map_err(|error| match &settings.config_file {
                Some(path) => format!("{}: {error}", path.display()),
                None => error,
            })?;
            let effective = crate::config::effective(&settings, format == ConfigFormat::Json)?;
            Ok((effective, config_warnings(&settings)))
        }
        Err(error) => {
            let mut errors = vec![error.to_string()];
            // A mistake in the environment stops the reading before the file: read the file too.
            let file_read = matches!(
                error,
                crate::config::ConfigError::File { .. }
                    | crate::config::ConfigError::ReadFile { .. }
                    | crate::config::ConfigError::ParseFile { .. }
            );
            if let (false, Some(path)) = (file_read, crate::config::config_path(&env)) {
                if let Err(error) = crate::config::read_config_file(&path) {
                    errors.push(error.to_string());
                }
            }
            Err(errors.join("\n"))
        }
    }
}

/// The profiles the configuration runs that fail their preflight here, when agents run on this machine.
fn config_warnings(settings: &Settings) -> Vec<String> {
    let dispatch = &settings.file.dispatch;
    if dispatch.off.is_some() || dispatch.executor != crate::config::dispatch::Executor::Local {
        return Vec::new();
    }
    crate::dispatch::preflight::unready_used(
        dispatch,
        &settings.file.profiles,
        &settings.env,
        &settings.workspace_root,
    )
    .into_iter()
    .map(|(whose, why)| format!("{whose} cannot run here: {}", why.join("; ")))
    .collect()
}

pub async fn task(settings: Settings, command: TaskCommand) -> anyhow::Result<()> {
    // `list` and `show` only read: they create no database.
    let core = if matches!(command, TaskCommand::List { .. } | TaskCommand::Show { .. }) {
        crate::startup::Core::open_for_cli_reading(settings).await?
    } else {
        crate::startup::Core::open_for_cli(settings).await?
    };
    let board = Board::new(core.log.clone(), core.settings.file.board.clone());
    let result = match command {
        TaskCommand::Land { id, json } => {
            let lander = crate::landing::Lander::new(
                board.clone(),
                core.log.clone(),
                core.settings.workspace_root.clone(),
                crate::startup::git_credentials(&core.settings),
                core.settings.file.dispatch.clone(),
            );
            land(&lander, id, json).await
        }
        command => run(&board, command).await,
    };
    core.close().await;
    result
}

async fn run(board: &Board, command: TaskCommand) -> anyhow::Result<()> {
    let (id, steer, reason, json) = match command {
        TaskCommand::New {
            repo,
            text,
            scope,
            done_when,
            priority,
            approval,
            agent,
            json,
        } => {
            let draft = Draft {
                repo: repo.parse::<RepoName>()?,
                spec: Spec::new(text.join(" "), scope, done_when)?,
                priority,
                links: Default::default(),
                approval,
                max_attempts: None,
                ticket_version: None,
                agent,
                family: Default::default(),
            };
            board.config().allowed.check(&draft.repo)?;
            let key = format!("cli:{}", uuid::Uuid::new_v4());
            let (outcome, _) = board.create(draft, &key, "cli", None).await?;
            return print_task(&outcome.task, json, "created");
        }
        TaskCommand::List {
            column,
            repo,
            source,
            needs_human,
            json,
        } => {
            let filter = crate::projectors::tasks::TaskFilter {
                column,
                repo,
                source,
                needs_human: needs_human.then_some(true),
                q: None,
                limit: None,
            };
            return list(board, &filter, json).await;
        }
        TaskCommand::Show { id, json } => {
            let loaded = board
                .load(id)
                .await?
                .with_context(|| format!("there is no task {id}"))?;
            return print_loaded(&loaded, json);
        }
        TaskCommand::Approve { id, json } => (id, Steer::Approve, None, json),
        TaskCommand::Archive { id, json } => (id, Steer::Archive, None, json),
        TaskCommand::Done { id, json } => (id, Steer::Done, None, json),
        // Handled by `task` (it needs the workspace root); here only for the match to be whole.
        TaskCommand::Land { .. } => anyhow::bail!("task land needs the lander"),
        TaskCommand::Reject { id, reason, json } => (id, Steer::Reject, reason, json),
        TaskCommand::Retry { id, reason, json } => (id, Steer::Retry, reason, json),
        TaskCommand::Cancel { id, reason, json } => (id, Steer::Cancel, reason, json),
        TaskCommand::Spec {
            id,
            task,
            scope,
            done_when,
            json,
        } => {
            let edit = SpecEdit {
                task,
                scope,
                done_when,
            };
            let edited = board.edit_spec(id, &edit, "cli").await;
            return print_outcome(id, edited, json);
        }
        TaskCommand::Answer { id, text, json } => {
            let answer = Command::Answer {
                text: crate::tasks::FollowUpText::new(text.join(" "))?,
                origin: Some(crate::tasks::FollowUpOrigin::new(
                    format!("cli:{}", uuid::Uuid::new_v4()),
                    "the CLI",
                )?),
            };
            let answered = board.execute(id, &answer, "cli").await;
            return print_outcome(id, answered, json);
        }
        TaskCommand::Agent { id, name, json, .. } => {
            let chosen = board
                .execute(id, &Command::ChooseAgent { agent: name }, "cli")
                .await;
            return print_outcome(id, chosen, json);
        }
    };
    let steered = board.steer(id, steer, reason, "from the CLI", "cli").await;
    print_outcome(id, steered, json)
}

/// `pidevops task land`: `landed onto <commit>`, `unchanged (already landed)`, or why not (exit status 1).
async fn land(lander: &crate::landing::Lander, id: TaskId, json: bool) -> anyhow::Result<()> {
    let landed = lander.land(id, "cli").await?;
    let what = match &landed.onto {
        None => "unchanged (already done)".to_owned(),
        Some((onto, _)) if landed.outcome.appended.is_empty() => {
            format!("unchanged (already landed at {})", onto.short())
        }
        Some((onto, true)) => format!("landed onto {}", onto.short()),
        Some((onto, false)) => format!("landed (the base held it already, at {})", onto.short()),
    };
    print_task(&landed.outcome.task, json, &what)
}

/// What a command did to a task: `updated`, or `unchanged` when the task already was so.
fn print_outcome(
    id: TaskId,
    outcome: Result<Outcome, BoardError>,
    json: bool,
) -> anyhow::Result<()> {
    let outcome = match outcome {
        Err(BoardError::Refused(TaskError::NotFound { .. })) => {
            anyhow::bail!("there is no task {id}")
        }
        other => other?,
    };
    let what = if outcome.appended.is_empty() {
        "unchanged (already so)"
    } else {
        "updated"
    };
    print_task(&outcome.task, json, what)
}

fn print_task(task: &Task, json: bool, what: &str) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(task)?);
    } else {
        println!("{what}: {}", line(task));
    }
    Ok(())
}

fn print_loaded(loaded: &Loaded, json: bool) -> anyhow::Result<()> {
    let task = &loaded.task;
    if json {
        let timeline: Vec<_> = loaded
            .events
            .iter()
            .map(|e| {
                serde_json::json!({
                    "position": e.position,
                    "type": e.event_type,
                    "at": e.occurred_at,
                    "actor": e.meta.get("actor"),
                    "summary": crate::projectors::tasks::timeline_entry(e).ok().map(|t| t.summary),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({ "task": task, "version": loaded.version, "timeline": timeline })
        );
        return Ok(());
    }
    println!("{}", line(task));
    println!("  Task:      {}", task.spec().task());
    if !task.spec().scope().is_empty() {
        println!("  Scope:     {}", task.spec().scope());
    }
    if !task.spec().done_when().is_empty() {
        println!("  Done when: {}", task.spec().done_when());
    }
    println!("  timeline:");
    for e in &loaded.events {
        let actor = e.meta.text("actor").unwrap_or_else(|| "-".to_owned());
        let summary = crate::projectors::tasks::timeline_entry(e)
            .map(|t| t.summary)
            .unwrap_or_default();
        println!(
            "    {:>8}  {}  {:<10} {}",
            e.position,
            e.occurred_at.format("%Y-%m-%d %H:%M:%S"),
            actor,
            summary
        );
    }
    Ok(())
}

/// `T-3  todo         acme/api  normal  attempts 0/3  2h  Fix the login redirect  [needs human: …]`
pub fn line(task: &Task) -> String {
    let age = age(task.created_at());
    let mut out = format!(
        "{:<6} {:<12} {:<24} {:<7} attempts {}/{}  {:>4}  {}",
        task.id().to_string(),
        task.column().as_str(),
        task.repo().to_string(),
        task.priority().as_str(),
        task.attempts(),
        task.max_attempts().get(),
        age,
        task.title()
    );
    if let Some(flag) = task.needs_human() {
        out.push_str(&format!("  [needs human: {}]", flag.reason));
    }
    out
}

/// The board from the read model, grouped by column in lifecycle order.
async fn list(
    board: &Board,
    filter: &crate::projectors::tasks::TaskFilter,
    json: bool,
) -> anyhow::Result<()> {
    use crate::tasks::Column;
    catch_up(board.store(), "tasks").await;
    let rows = crate::projectors::tasks::list(board.store(), filter).await?;
    if json {
        println!("{}", serde_json::to_string(&rows)?);
        return Ok(());
    }
    let columns = [
        Column::Triage,
        Column::Todo,
        Column::InProgress,
        Column::InReview,
        Column::Done,
        Column::Cancelled,
        Column::Archived,
    ];
    for column in columns {
        // Closed columns only when asked for by name: the board is about open work.
        if filter.column.is_none() && matches!(column, Column::Archived | Column::Cancelled) {
            continue;
        }
        let in_column: Vec<_> = rows.iter().filter(|r| r.column == column).collect();
        if filter.column.is_some() && filter.column != Some(column) {
            continue;
        }
        println!("{} ({})", column.as_str(), in_column.len());
        for row in in_column {
            let age = age(row.created_at);
            let flag = row
                .needs_human_reason
                .as_deref()
                .filter(|_| row.needs_human)
                .map(|r| format!("  [needs human: {r}]"))
                .unwrap_or_default();
            println!(
                "  {:<6} {:<24} {:<7} {:<8} attempts {}/{}  {:>4}  {}{flag}",
                row.id.to_string(),
                row.repo,
                row.priority.as_str(),
                row.source,
                row.attempts,
                row.max_attempts,
                age,
                row.title
            );
        }
    }
    Ok(())
}

/// Brings a read model up to the log: `serve` may not be running (a laptop), and the compare-and-set checkpoint
/// makes this safe when it is. A failure is said and the read model read as it is.
pub(crate) async fn catch_up(store: &crate::eventlog::EventStore, name: &str) {
    let Some(projector) = crate::projectors::all()
        .into_iter()
        .find(|p| p.name() == name)
    else {
        return;
    };
    let projection = crate::projectors::Projection::with_batch(
        store.clone(),
        projector,
        crate::projectors::REPLAY_BATCH,
    );
    loop {
        match projection.step(crate::projectors::REPLAY_BATCH).await {
            Ok(crate::projectors::Step::Applied { .. }) => continue,
            Ok(crate::projectors::Step::CaughtUp { .. }) => break,
            Err(e) => {
                eprintln!("warning: the {name} read model may be behind the log: {e}");
                break;
            }
        }
    }
}

/// How long ago, in the largest whole unit: `3d`, `5h`, `12m`.
fn age(since: chrono::DateTime<Utc>) -> String {
    let age = Utc::now() - since;
    if age.num_days() > 0 {
        format!("{}d", age.num_days())
    } else if age.num_hours() > 0 {
        format!("{}h", age.num_hours())
    } else {
        format!("{}m", age.num_minutes().max(0))
    }
}

/// `pidevops dispatch …`: pause and resume new runs for every replica (an event in the log).
#[derive(Debug, Subcommand)]
pub enum DispatchCommand {
    /// No new runs start on any replica; running ones finish.
    Pause {
        /// Why, in words (shown in /health and on the dashboard).
        #[arg(long)]
        reason: Option<String>,
    },
    /// New runs start again.
    Resume,
    /// Whether dispatch is paused, and why.
    Status,
    /// Lifts an agent profile's pause by its provider's usage or rate limit (a `limits.lifted` event): the
    /// limits its runs reported before count no more.
    Lift {
        /// The profile (`[agents.<name>]`).
        profile: String,
    },
}

pub async fn dispatch(settings: Settings, command: DispatchCommand) -> anyhow::Result<()> {
    use crate::board::pause::{pause_state, set_paused};
    if let DispatchCommand::Lift { profile } = &command {
        if settings.file.profiles.get(profile).is_none() {
            anyhow::bail!("no agent profile {profile:?}");
        }
    }
    let core = crate::startup::Core::open_for_cli(settings).await?;
    let (store, log) = (core.store.clone(), core.log.clone());
    let result = async {
        match command {
            DispatchCommand::Pause { reason } => {
                if reason
                    .as_deref()
                    .is_some_and(|r| r.trim().is_empty() || r.len() > 500)
                {
                    anyhow::bail!("--reason must be 1 to 500 characters");
                }
                let changed = set_paused(&log, true, "cli", reason.as_deref()).await?;
                println!("{}", if changed { "paused" } else { "already paused" });
            }
            DispatchCommand::Resume => {
                let changed = set_paused(&log, false, "cli", None).await?;
                println!("{}", if changed { "resumed" } else { "not paused" });
            }
            DispatchCommand::Status => match pause_state(&store).await? {
                Some(why) => println!("paused: {why}"),
                None => println!("running"),
            },
            DispatchCommand::Lift { profile } => {
                crate::board::pause::lift_limit(&log, &profile, "cli").await?;
                println!("lifted the limit's pause of {profile}");
            }
        }
        Ok(())
    }
    .await;
    core.close().await;
    result
}
