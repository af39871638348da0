//! The dispatcher: claims `todo` tasks within the concurrency limits and runs each attempt to exactly one
//! outcome; the watchdog declares silent runs lost; gc removes old worktrees.
//!
//! Correctness rests on the log, not on who holds which lease:
//! - **A claim is an append.** `task.started` is written at the task stream's next version; of two replicas
//!   claiming the same task, one append wins and the other meets a conflict, rereads, and finds the task in
//!   `in-progress`. So an attempt starts once.
//! - **One outcome per run.** The runner and the watchdog both write a run's terminal event with the version they
//!   expect and the run's end key; the loser adopts the winner's outcome. A runner whose heartbeat meets a
//!   conflict learns it was declared lost and kills its agent.
//! - **The task follows the outcome** (`submit-for-review` or `retry`), and the domain refuses a report naming a
//!   run that is no longer the live one, so applying an outcome twice (a crash between the two writes, then the
//!   watchdog's recovery) changes nothing the second time.
//!
//! One job per file; every one adds to the one `Dispatcher` (its state lives here, so the parts share it without
//! widening its fields beyond this module):
//! - `claim.rs`     the dispatcher tick: which `todo` tasks may start (limits, backoff, pause), the claim, the start
//! - `attempt.rs`   one attempt end to end: worktree, agent, commit, push; the run writer; outcome to the task
//! - `launch.rs`    the agent's command line, environment and containment
//! - `watchdog.rs`  silent runs declared lost, recorded outcomes applied, claims that never started released
//! - `gc.rs`        run directories past their TTL removed
//! - `pause.rs`     pause and resume for every replica (the `dispatch` stream)

mod attempt;
mod checkpoints;
mod claim;
mod ending;
mod gc;
mod hooks;
mod launch;
mod limits;
mod pause;
mod proposal;
mod run_writer;
mod steering;
mod verdicts;
mod watchdog;

// The paths callers have always used (`dispatch::dispatcher::set_paused`, ...) stay valid.
pub use crate::board::pause::{pause_state, set_paused, DISPATCH_STREAM};
pub use claim::DispatchStatus;
pub use watchdog::{watchdog_interval, WatchdogStatus};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::sandbox::Containment;
use super::workspace::Workspaces;
use crate::board::Board;
use crate::config::dispatch::{ContainmentPolicy, DispatchConfig, Executor};
use crate::config::plans::PlansConfig;
use crate::config::profiles::{AgentProfile, Profiles};

/// How long a profile's preflight answer is kept: a fixed environment (an installed CLI, a remounted volume)
/// un-blocks its tasks within this, without a restart.
pub const PREFLIGHT_TTL: std::time::Duration = std::time::Duration::from_secs(2);
use crate::config::Env;
use crate::eventlog::{EventLog, EventStore};
use crate::projectors::tasks::TaskRow;
use crate::tasks::{RepoName, RunId, TaskId};

pub const DISPATCHER: &str = "dispatcher";
pub const WATCHDOG: &str = "watchdog";
pub const GC: &str = "gc";

/// Runs this process is executing.
#[derive(Default)]
struct Local {
    running: HashMap<TaskId, LocalRun>,
    /// Runs that ended here but that the tasks read model may still show in progress: their slots are free.
    finished: HashMap<TaskId, RunId>,
    /// Runs handed to workers that the read model may not show yet: their slots are taken.
    claimed: HashMap<TaskId, (RunId, RepoName, std::time::Instant)>,
    /// Budget notices this process has recorded (each is once in the log by its key; this spares the appends).
    budget_notices: std::collections::HashSet<String>,
    /// The last tick's budgets ledger, reused by the next while what it was read from has not moved
    /// (`budgets::Ledger::refresh`).
    ledger: Option<crate::budgets::Ledger>,
}

struct LocalRun {
    run: RunId,
    repo: RepoName,
    /// A slot is an agent process: once the agent has exited, committing and pushing its work no longer holds
    /// one, so the next queued task starts while this one is being wrapped up.
    holds_slot: bool,
}

struct Inner {
    board: Board,
    log: EventLog,
    config: DispatchConfig,
    profiles: Profiles,
    workspaces: Workspaces,
    worker: String,
    env: Env,
    plans: PlansConfig,
    paused_by_env: bool,
    containment: Containment,
    /// What bounds each agent's memory here (a cgroup v2 limit, or why nothing does).
    memory: super::cgroup::MemoryBound,
    local: Mutex<Local>,
    /// Each run's egress refusals (by run directory) while it runs: dispatcher/launch.rs.
    refused: Mutex<HashMap<std::path::PathBuf, Arc<crate::dispatch::egress::Refusals>>>,
    fill: tokio::sync::Mutex<()>,
    /// Each profile's last preflight (`dispatch::preflight::check`): when, and why it cannot run (empty: it can).
    preflight: Mutex<HashMap<String, (std::time::Instant, Vec<String>)>>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    work: Option<crate::bus::work::WorkQueue>,
}

/// Cheap to clone.
#[derive(Clone)]
pub struct Dispatcher {
    inner: Arc<Inner>,
}

/// What a `pidevops worker` is asked to run.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct RunRequest {
    pub task: TaskId,
    pub run: RunId,
    pub attempt: u32,
}

pub struct DispatcherParts {
    pub board: Board,
    pub log: EventLog,
    pub config: DispatchConfig,
    pub profiles: Profiles,
    pub workspaces: Workspaces,
    pub worker: String,
    pub env: Env,
    /// `[plans]`: what a planner's plan is held to.
    pub plans: PlansConfig,
    pub paused_by_env: bool,
    pub tracker: TaskTracker,
    pub shutdown: CancellationToken,
    pub work: Option<crate::bus::work::WorkQueue>,
}

impl Dispatcher {
    pub fn new(parts: DispatcherParts) -> Self {
        let containment = super::sandbox::detect_cached(&parts.config.bwrap, parts.env.get("PATH"));
        let memory = super::cgroup::detect_cached(parts.config.bounds.memory_max);
        Self {
            inner: Arc::new(Inner {
                board: parts.board,
                log: parts.log,
                config: parts.config,
                profiles: parts.profiles,
                workspaces: parts.workspaces,
                worker: parts.worker,
                env: parts.env,
                plans: parts.plans,
                paused_by_env: parts.paused_by_env,
                containment,
                memory,
                local: Mutex::default(),
                refused: Mutex::default(),
                fill: tokio::sync::Mutex::new(()),
                preflight: Mutex::default(),
                tracker: parts.tracker,
                shutdown: parts.shutdown,
                work: parts.work,
            }),
        }
    }

    fn store(&self) -> &EventStore {
        self.inner.log.store()
    }

    fn local(&self) -> std::sync::MutexGuard<'_, Local> {
        self.inner.local.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The handle that combines a plan's items (`[plans] land = "combined"`) on this dispatcher's mirrors.
    pub fn combiner(&self) -> super::workspace::Combiner {
        super::workspace::Combiner::new(self.inner.workspaces.clone(), self.inner.config.clone())
    }

    pub fn confinement(&self) -> String {
        self.inner.containment.describe()
    }

    pub fn containment(&self) -> &Containment {
        &self.inner.containment
    }

    /// What bounds each agent's memory here, in words (`/health`, the dispatcher's detail).
    pub fn memory(&self) -> String {
        self.inner.memory.describe()
    }

    /// What bounds each agent's HOME, TMPDIR and /tmp here, in words (`/health`, the dispatcher's detail).
    pub fn scratch(&self) -> String {
        let bounds = &self.inner.config.bounds;
        self.inner
            .containment
            .describe_scratch(bounds.tmp_size, bounds.home_size)
    }

    /// Why `profile` cannot run here, if it cannot (its preflight, at most [`PREFLIGHT_TTL`] old); `None` also when
    /// runs go to workers, whose machines are their own (a worker checks itself when it starts).
    pub fn unready(&self, profile: &AgentProfile) -> Option<String> {
        if self.inner.config.executor != Executor::Local {
            return None;
        }
        let mut cache = self
            .inner
            .preflight
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let fresh = cache
            .get(&profile.name)
            .filter(|(at, _)| at.elapsed() < PREFLIGHT_TTL)
            .map(|(_, problems)| problems.clone());
        let problems = match fresh {
            Some(problems) => problems,
            None => {
                let problems =
                    super::preflight::check(profile, &self.inner.env, self.inner.workspaces.root());
                cache.insert(
                    profile.name.clone(),
                    (std::time::Instant::now(), problems.clone()),
                );
                problems
            }
        };
        (!problems.is_empty()).then(|| problems.join("; "))
    }

    /// The profiles whose agents keep the service's network (`network = "host"`).
    pub fn on_host_network(&self) -> Vec<String> {
        self.inner.profiles.on_host_network()
    }
}

/// The run a task row says is live.
fn run_of(row: &TaskRow) -> Option<RunId> {
    row.state
        .get("run")?
        .as_str()?
        .parse::<uuid::Uuid>()
        .ok()
        .map(RunId)
}

/// Whether `program` resolves to an executable file, the way the runner will look for it.
pub fn resolves(program: &str, path: Option<&str>) -> bool {
    super::sandbox::find_program(program, path).is_some()
}

/// Why runs cannot happen under this configuration, if they cannot: the dispatcher is then `unarmed`. What one
/// profile lacks (its program, its credential) is its preflight's, not this: the other profiles run on.
pub fn cannot_run(
    config: &DispatchConfig,
    profiles: &Profiles,
    env: &Env,
    has_github_token: bool,
    has_nats: bool,
) -> Option<String> {
    if config.executor == Executor::Workers && !has_nats {
        return Some("dispatch.executor = \"workers\" needs NATS_URL".into());
    }
    if config.executor == Executor::Local && config.containment == ContainmentPolicy::Required {
        if let Containment::None { why } =
            super::sandbox::detect_cached(&config.bwrap, env.get("PATH"))
        {
            return Some(format!(
                "nothing can contain agents here ({why}); install bubblewrap, or set dispatch.containment = \"best-effort\" to run them uncontained"
            ));
        }
    }
    // Each profile's own program, git, credential and volume are its preflight (`dispatch::preflight`): a profile
    // that fails it holds only its own tasks, and says why in `/health`.
    let used = super::preflight::used_profiles(config, profiles);
    if config.executor == Executor::Local {
        if let Containment::Landlock { abi } =
            super::sandbox::detect_cached(&config.bwrap, env.get("PATH"))
        {
            let hooks = config.environments.values().any(|e| !e.is_empty());
            let networked = used
                .iter()
                .find(|(_, p)| p.network != crate::config::profiles::Network::Host);
            if abi < super::sandbox::NET_ABI && (networked.is_some() || hooks) {
                let whose = networked.map_or_else(
                    || "a repository's hooks".to_owned(),
                    |(whose, p)| format!("agent profile {:?} ({whose} profile)", p.name),
                );
                return Some(format!(
                    "{whose} needs a network of its own, and here containment is landlock abi {abi}, which has no \
                     network rules (abi {}); set network = \"host\" on the profile to run it with the service's \
                     network",
                    super::sandbox::NET_ABI
                ));
            }
        }
    }
    if config.executor == Executor::Local {
        if let Some(why) = bridge_missing(config, &used, env) {
            return Some(why);
        }
    }
    if config.executor == Executor::Local {
        // A repository's command that cannot start would fail every attempt of it (a `check` charged to the
        // agent): said here, once, instead.
        for (repo, commands) in &config.environments {
            let steps = [
                ("setup", &commands.setup),
                ("before_run", &commands.before_run),
                ("after_run", &commands.after_run),
                ("check", &commands.check),
            ];
            for (step, command) in steps {
                let Some(program) = command.as_ref().and_then(|argv| argv.first()) else {
                    continue;
                };
                if !resolves(program, env.get("PATH")) {
                    return Some(format!(
                        "{repo}'s {step} runs {program:?}, which is not an executable on PATH"
                    ));
                }
            }
        }
    }
    if !has_github_token {
        if config.repos.is_empty() {
            return Some(
                "no repository in [repos] has a url of its own, so every one is cloned from GitHub, and GITHUB_TOKEN is not set"
                    .into(),
            );
        }
        if let Some((repo, source)) = config
            .repos
            .iter()
            .find(|(_, source)| source.needs_github_token())
        {
            return Some(format!(
                "{repo} is cloned from {}, which needs GITHUB_TOKEN, and it is not set",
                source.url
            ));
        }
    }
    None
}

/// Under bubblewrap a network of its own is a namespace with only loopback, and pidevops-bridge, exec'd first
/// inside, is the way to its proxy: without it every run of a profile with `network = "proxy"` (and every
/// repository hook) would fail, so the dispatcher is unarmed instead, naming the missing file.
fn bridge_missing(
    config: &DispatchConfig,
    used: &[(String, &AgentProfile)],
    env: &Env,
) -> Option<String> {
    let Containment::Namespaces { .. } =
        super::sandbox::detect_cached(&config.bwrap, env.get("PATH"))
    else {
        return None;
    };
    let hooks = config.environments.values().any(|e| !e.is_empty());
    let proxied = used
        .iter()
        .find(|(_, p)| p.network == crate::config::profiles::Network::Proxy);
    if proxied.is_none() && !hooks {
        return None;
    }
    let missing = crate::dispatch::egress::bridge_missing()?;
    let whose = proxied.map_or_else(
        || "a repository's hooks".to_owned(),
        |(whose, p)| format!("agent profile {:?} ({whose} profile)", p.name),
    );
    Some(format!(
        "{whose} needs a network of its own, which under bubblewrap goes through {}, and {missing}: install it \
         beside pidevops (`cargo build` builds both, deploy/Dockerfile ships both), or set network = \"host\" on \
         the profile",
        crate::dispatch::egress::BRIDGE_NAME
    ))
}

/// The message of an attempt's commit: the task id and pidevops's own words only. The ticket's title is a
/// stranger's text, and GitHub acts on a commit message once it lands (`Fixes #7` closes an issue, `@team` pings);
/// the pull request carries the title, made inert there.
fn commit_message(task: TaskId, profile: &str, attempt: u32, run: RunId) -> String {
    format!(
        "{task}: attempt {attempt}\n\nWritten by the {profile} agent for pidevops task {task}, attempt {attempt} \
         (pidevops run {run}); the task's title and spec are on its pull request."
    )
}

#[cfg(test)]
mod commit_message_tests {
    use super::*;

    #[test]
    fn a_commit_message_names_the_task_and_carries_no_ticket_text() {
        let run = RunId(uuid::Uuid::from_u128(7));
        let message = commit_message("T-7".parse().unwrap(), "claude", 2, run);
        assert_eq!(
            message,
            format!(
                "T-7: attempt 2\n\nWritten by the claude agent for pidevops task T-7, attempt 2 (pidevops run \
                 {run}); the task's title and spec are on its pull request."
            )
        );
        assert!(
            !message.contains('@') && !message.contains('#'),
            "{message}"
        );
    }
}
