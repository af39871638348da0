//! The `pidevops` command: a thin front over the library. Each subcommand builds what it needs from `Settings`.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use pidevops::config::Settings;
use pidevops::{doctor, startup, telemetry};

#[derive(Parser)]
#[command(
    name = "pidevops",
    version,
    about = "Lets AI coding agents work your tickets, and tells the truth about it"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write pidevops.toml and a .env of fresh secrets from a few answers; print the webhook URLs to set up.
    Init(pidevops::init::InitArgs),
    /// Apply migrations, then serve HTTP and run every loop.
    Serve,
    /// Apply migrations and exit.
    Migrate,
    /// Print each loop and source: armed, disabled or unarmed, and why. Exits non-zero if something enabled cannot run.
    Doctor,
    /// Print events as JSON lines, in position order.
    Events {
        /// Only events with a position greater than this.
        #[arg(long, default_value_t = 0)]
        after: i64,
        /// Stop after this many events (without --follow: default 100).
        #[arg(long)]
        limit: Option<u64>,
        /// Keep printing new events as they are committed.
        #[arg(long)]
        follow: bool,
    },
    /// The task board from a terminal: new, show, approve, reject, retry, cancel, archive.
    Task {
        #[command(subcommand)]
        command: pidevops::cli::TaskCommand,
    },
    /// Plans from a terminal: new, show, approve, reject (with a comment, for the planner).
    Plan {
        #[command(subcommand)]
        command: pidevops::cli::PlanCommand,
    },
    /// Budgets: a task's (what each has spent today and may spend), and raising one.
    Budget {
        #[command(subcommand)]
        command: pidevops::cli::BudgetCommand,
    },
    /// What agents spent: tokens and cost per day, repository and profile, and the tasks that spent most.
    Usage(pidevops::cli::UsageArgs),
    /// What a profile cost per merged pull request (`--agent`), or what a candidate configuration would have done
    /// to the recorded log (`--config`).
    Whatif(pidevops::cli::WhatifArgs),
    /// Pause or resume new agent runs on every replica.
    Dispatch {
        #[command(subcommand)]
        command: pidevops::cli::DispatchCommand,
    },
    /// Run agents only: pull run requests from NATS JetStream (`dispatch.executor = "workers"` on `serve`).
    Worker,
    /// Check the configuration: `pidevops config check [FILE]`.
    Config {
        #[command(subcommand)]
        command: pidevops::cli::ConfigCommand,
    },
    /// Walk the log's hash chain and name the first break (a changed, deleted or reordered event). Exits 0 when
    /// the chain is intact, 1 at a break, 2 when the log could not be read.
    Verify {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Walk an export (`pidevops export`) instead of the database: offline, nothing connected.
        #[arg(long, value_name = "FILE")]
        export: Option<std::path::PathBuf>,
        /// Check a receipt (`pidevops receipt`): every line against its event, the chain up to its head.
        #[arg(long, value_name = "FILE")]
        receipt: Option<std::path::PathBuf>,
    },
    /// A task's receipt as JSON: each thing that happened to it, backed by its event's place in the hash chain.
    Receipt {
        /// The task (T-n).
        task: pidevops::tasks::TaskId,
        /// The receipt recorded in the log when its work last ended (`receipt.issued`), not one issued now.
        #[arg(long)]
        recorded: bool,
    },
    /// Print the whole log as JSON lines, every stored column exactly (body in base64, hashes in hex), for
    /// `pidevops verify --export` to check anywhere. Read only, one snapshot.
    Export,
    /// Rebuild read models from position 0, with progress; safe while `serve` runs.
    Replay {
        /// The projector to rebuild (see `--all`).
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        projector: Option<String>,
        /// Rebuild every projector.
        #[arg(long)]
        all: bool,
    },
}

/// The command line, with `serve --help` listing the environment it reads (`config::VARIABLES`, declared once).
fn command() -> clap::Command {
    Cli::command().mut_subcommand("serve", |serve| {
        serve.after_help(pidevops::config::variables_help())
    })
}

/// mimalloc: glibc's malloc spent about half of a rebuild's CPU in fragmentation upkeep (docs/benchmarks.md,
/// "Tasks rebuild"); the benchmark binaries use the same allocator so they measure what ships.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match Cli::from_arg_matches(&command().get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(e) => {
            eprintln!("pidevops: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> ExitCode {
    if let Command::Init(args) = &cli.command {
        // Before the settings are read: it writes them.
        return match pidevops::init::run(args, &pidevops::config::Env::from_process()).await {
            Ok(done) => {
                print!("{}", done.text);
                if done.complete {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(e) => {
                eprintln!("pidevops init: {}", telemetry::error_chain(&e));
                ExitCode::from(2)
            }
        };
    }
    if let Command::Config { command } = cli.command {
        // Before the settings are read: its job is to report what is wrong with them, all of it.
        return match pidevops::cli::config(pidevops::config::Env::from_process(), command) {
            Ok((effective, warnings)) => {
                print!("{effective}");
                // Warnings, not errors: the check may run elsewhere than the service (exit 0 still).
                for warning in warnings {
                    eprintln!("warning: {warning}");
                }
                ExitCode::SUCCESS
            }
            Err(errors) => {
                eprintln!("{errors}");
                ExitCode::from(2)
            }
        };
    }
    // `doctor` predicts `serve` as README starts it, with ./.env sourced.
    let (env, env_file) = match cli.command {
        Command::Doctor => {
            let (env, line) =
                pidevops::config::Env::from_process().with_env_file(std::path::Path::new(".env"));
            (env, Some(line))
        }
        _ => (pidevops::config::Env::from_process(), None),
    };
    let settings = match Settings::from_env(&env) {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("pidevops: configuration error: {e}");
            return ExitCode::from(2);
        }
    };
    telemetry::init_tracing(settings.log_format);
    if matches!(cli.command, Command::Serve | Command::Worker) {
        // Agents run what ticket text says: no process of the same user may read this one's memory or
        // /proc/<pid>/environ (the secrets), nor attach to it, even outside a sandbox.
        // SAFETY: prctl with plain integer arguments.
        if unsafe { nix::libc::prctl(nix::libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            tracing::warn!(error = %std::io::Error::last_os_error(), "could not make the process non-dumpable");
        }
    }
    let result = match cli.command {
        Command::Serve => serve(settings).await,
        Command::Migrate => migrate(settings).await,
        Command::Worker => {
            let shutdown = tokio_util::sync::CancellationToken::new();
            let stop = shutdown.clone();
            tokio::spawn(async move {
                wait_for_signal().await;
                tracing::info!("shutdown requested; stopping runs");
                stop.cancel();
            });
            pidevops::startup::worker::run(settings, shutdown).await
        }
        Command::Doctor => {
            let (report, ok) = doctor::diagnose_with(&settings, env_file.as_deref()).await;
            print!("{report}");
            return if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
        Command::Events {
            after,
            limit,
            follow,
        } => events(settings, after, limit, follow).await,
        Command::Replay { projector, all } => replay(settings, projector, all).await,
        Command::Verify {
            json,
            export,
            receipt: Some(receipt),
        } => return verify_receipt(settings, json, receipt, export).await,
        Command::Verify {
            json,
            export,
            receipt: None,
        } => return verify(settings, json, export).await,
        Command::Receipt { task, recorded } => receipt(settings, task, recorded).await,
        Command::Export => export(settings).await,
        Command::Task { command } => pidevops::cli::task(settings, command).await,
        Command::Plan { command } => pidevops::cli::plan(settings, command).await,
        Command::Dispatch { command } => pidevops::cli::dispatch(settings, command).await,
        Command::Usage(args) => pidevops::cli::usage(settings, args).await,
        Command::Whatif(args) => pidevops::cli::whatif(settings, args).await,
        Command::Budget { command } => pidevops::cli::budget(settings, command).await,
        Command::Config { .. } | Command::Init(_) => {
            unreachable!("handled before the settings are read")
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Said once, on stderr (not logged too: the log is stderr as well), each cause once.
        Err(e) => {
            eprintln!("pidevops: {}", telemetry::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

async fn serve(mut settings: Settings) -> anyhow::Result<()> {
    let token_file = startup::first_run::local_admin_token(&mut settings)?;
    let app = startup::build(settings).await?;
    if let Some(token_file) = token_file {
        let code = app.state().sign_in_link.issue();
        eprintln!(
            "{}",
            startup::first_run::sign_in_line(app.local_addr(), &code, &token_file)
        );
    } else if app.state().settings.log_format != pidevops::config::LogFormat::Json {
        // What to open, and with what to sign in: the address a person types, not a socket's debug print. Not
        // with LOG_FORMAT=json, whose stderr is JSON lines only (the start-up log line has the `url`).
        let sign_in = if app.state().settings.admin_token.is_some() {
            "sign in with PIDEVOPS_ADMIN_TOKEN"
        } else {
            "PIDEVOPS_ADMIN_TOKEN is not set, so the dashboard and /api refuse everyone"
        };
        eprintln!(
            "pidevops: serving at {} ({sign_in})",
            startup::url_of(app.local_addr())
        );
    }
    let shutdown = app.shutdown_token();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown requested; draining in-flight requests");
        shutdown.cancel();
    });
    app.run().await
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the server");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn migrate(settings: Settings) -> anyhow::Result<()> {
    let store = pidevops::startup::connect(&settings, pidevops::startup::CLI_CONNECTIONS).await?;
    store.migrate().await.context("applying migrations")?;
    eprintln!("migrations applied to {}", settings.database.redacted());
    Ok(())
}

/// `pidevops verify`: the chain walk's report, and an exit code that says whether it held.
async fn verify(settings: Settings, json: bool, export: Option<std::path::PathBuf>) -> ExitCode {
    let report = async {
        if let Some(file) = export {
            let open = std::fs::File::open(&file)
                .with_context(|| format!("cannot open the export {}", file.display()))?;
            return pidevops::eventlog::verify_export(std::io::BufReader::new(open))
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("reading the export {}", file.display()));
        }
        // Read only, as `events`: never creates or migrates the database it is pointed at.
        let store =
            pidevops::startup::connect_existing(&settings, pidevops::startup::CLI_CONNECTIONS)
                .await?;
        store.verify_chain().await.context(
            "walking the hash chain (a log from before the chain needs `pidevops migrate` first)",
        )
    }
    .await;
    let report = match report {
        Ok(report) => report,
        Err(e) => {
            eprintln!("pidevops verify: {}", telemetry::error_chain(&e));
            return ExitCode::from(2);
        }
    };
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("pidevops verify: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print!("{}", pidevops::eventlog::chain_report_text(&report));
    }
    if report.first_break.is_some() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `pidevops receipt T-n [--recorded]`: the task's receipt, issued from the log as it is now, or the last one the
/// `receipts` loop recorded when its work ended.
async fn receipt(
    settings: Settings,
    task: pidevops::tasks::TaskId,
    recorded: bool,
) -> anyhow::Result<()> {
    let store =
        pidevops::startup::connect_existing(&settings, pidevops::startup::CLI_CONNECTIONS).await?;
    let receipt = if recorded {
        pidevops::receipts::recorded(&store, task)
            .await?
            .pop()
            .ok_or_else(|| {
                anyhow::anyhow!("no receipt of {task} is recorded: its work has not ended")
            })?
    } else {
        pidevops::projectors::tasks::receipt::issue(&store, task).await?
    };
    println!("{}", serde_json::to_string_pretty(&receipt)?);
    Ok(())
}

/// `pidevops verify --receipt FILE [--export FILE]`: 0 when every line holds, 1 naming the first that does not,
/// 2 when the receipt or the log cannot be read.
async fn verify_receipt(
    settings: Settings,
    json: bool,
    file: std::path::PathBuf,
    export: Option<std::path::PathBuf>,
) -> ExitCode {
    use pidevops::projectors::tasks::receipt::{Receipt, ReceiptCheck, ReceiptError};
    let checked = async {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read the receipt {}", file.display()))?;
        let receipt: Receipt = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a pidevops receipt", file.display()))?;
        let mut check = ReceiptCheck::new(&receipt)?;
        match &export {
            Some(path) => {
                let open = std::fs::File::open(path)
                    .with_context(|| format!("cannot open the export {}", path.display()))?;
                pidevops::eventlog::each_exported(std::io::BufReader::new(open), |e| {
                    Ok(check.feed(&e))
                })
                .map_err(anyhow::Error::msg)?;
            }
            None => {
                let store = pidevops::startup::connect_existing(
                    &settings,
                    pidevops::startup::CLI_CONNECTIONS,
                )
                .await?;
                store.each_chained(|e| Ok(check.feed(&e))).await?;
            }
        }
        anyhow::Ok((receipt.task, check.finish()))
    }
    .await;
    let (task, verdict) = match checked {
        Ok(checked) => checked,
        Err(e) => {
            eprintln!("pidevops verify: {}", telemetry::error_chain(&e));
            return ExitCode::from(2);
        }
    };
    let (ok, said) = match verdict {
        Ok(lines) => (
            true,
            format!("receipt of {task} holds: {lines} lines checked against the log"),
        ),
        Err(ReceiptError::Refused(why)) => (false, format!("receipt of {task} REFUSED: {why}")),
        Err(e) => {
            eprintln!("pidevops verify: {e}");
            return ExitCode::from(2);
        }
    };
    if json {
        println!(
            "{}",
            serde_json::json!({"task": task.to_string(), "holds": ok, "said": said})
        );
    } else {
        println!("{said}");
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `pidevops export`: every event with its hashes, one JSON line each, from one snapshot.
async fn export(settings: Settings) -> anyhow::Result<()> {
    let store =
        pidevops::startup::connect_existing(&settings, pidevops::startup::CLI_CONNECTIONS).await?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut closed = false;
    store
        .each_chained(|chained| {
            let line = serde_json::to_string(&pidevops::eventlog::export::Exported::of(&chained))
                .map_err(|e| pidevops::eventlog::StoreError::Corrupt {
                position: chained.event.position,
                reason: format!("cannot be exported: {e}"),
            })?;
            // The reader went away (`| head`): a normal end.
            closed = writeln!(out, "{line}").is_err();
            Ok(!closed)
        })
        .await
        .context("reading the log (a log from before the chain needs `pidevops migrate` first)")?;
    if !closed {
        out.flush().context("writing the export")?;
    }
    Ok(())
}

async fn events(
    settings: Settings,
    mut after: i64,
    limit: Option<u64>,
    follow: bool,
) -> anyhow::Result<()> {
    // Read only: `events` never creates, migrates (or writes) the database it is pointed at.
    let store =
        pidevops::startup::connect_existing(&settings, pidevops::startup::CLI_CONNECTIONS).await?;
    let mut remaining = limit.or(if follow { None } else { Some(100) });
    let stdout = std::io::stdout();
    loop {
        let page = remaining.map_or(500, |r| r.min(500)) as i64;
        if page == 0 {
            return Ok(());
        }
        let events = store
            .read_after(after, page)
            .await
            .context("reading events")?;
        {
            let mut out = stdout.lock();
            for event in &events {
                let line =
                    serde_json::to_string(&event.to_envelope()).context("encoding an event")?;
                if writeln!(out, "{line}").is_err() {
                    // The reader went away (`| head`); that is a normal end.
                    return Ok(());
                }
            }
            let _ = out.flush();
        }
        if let Some(last) = events.last() {
            after = last.position;
        }
        if let Some(r) = remaining.as_mut() {
            *r -= events.len() as u64;
        }
        if events.len() < page as usize {
            if !follow {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

async fn replay(settings: Settings, name: Option<String>, all: bool) -> anyhow::Result<()> {
    use indicatif::{ProgressBar, ProgressStyle};
    use pidevops::projectors::{self, Projection, REPLAY_BATCH};

    let known = projectors::all();
    let chosen: Vec<_> = match (&name, all) {
        (_, true) => known,
        (Some(name), false) => {
            let names: Vec<_> = known.iter().map(|p| p.name()).collect();
            let found: Vec<_> = known.into_iter().filter(|p| p.name() == name).collect();
            if found.is_empty() {
                anyhow::bail!(
                    "there is no projector named {name:?}; known: {}",
                    names.join(", ")
                );
            }
            found
        }
        (None, false) => anyhow::bail!("name a projector, or pass --all"),
    };
    let store = pidevops::startup::connect(&settings, pidevops::startup::CLI_CONNECTIONS).await?;
    store.migrate().await.context("applying migrations")?;
    for projector in chosen {
        let name = projector.name();
        let projection = Projection::with_batch(store.clone(), projector, REPLAY_BATCH);
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:>10} [{bar:40}] {pos}/{len} events  {per_sec}  eta {eta}",
            )
            .context("the progress template")?
            .progress_chars("=> "),
        );
        bar.set_prefix(name);
        let started = std::time::Instant::now();
        let done = projection
            .rebuild(|p| {
                bar.set_length(p.head.max(0) as u64);
                bar.set_position(p.position.max(0) as u64);
            })
            .await
            .with_context(|| format!("replaying {name}"))?;
        bar.finish_and_clear();
        let seconds = started.elapsed().as_secs_f64();
        eprintln!(
            "replayed {name}: {} events in {seconds:.2} s ({:.0} events/s), now at position {}",
            done.events,
            done.events as f64 / seconds.max(1e-9),
            done.position
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every argument of every command says what it is in `--help` (clap's own checks run too).
    #[test]
    fn every_argument_has_a_description() {
        let command = command();
        command.clone().debug_assert();
        let mut missing = Vec::new();
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in command.get_subcommands() {
                if sub.get_about().is_none() && sub.get_long_about().is_none() {
                    missing.push(format!("{path} {} (the command)", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        walk(&command, "pidevops", &mut missing);
        assert!(missing.is_empty(), "without a description: {missing:#?}");
    }
}
