//! Agent profiles: which command runs an attempt, with what it may see. Pure: parsed from `pidevops.toml`,
//! validated once at start-up, rendered into an argv per run (never a shell string, so a prompt or a path can
//! never become shell syntax).
//!
//! ```toml
//! [dispatch]
//! agent = "claude"                 # the default profile (a preset or one defined below)
//!
//! [agents.claude-opus]             # a profile of your own
//! command = ["claude", "-p", "--model", "opus", "--output-format", "stream-json", "--verbose"]
//! stdin = "prompt"                 # the prompt on standard input (or {prompt_file} / {prompt} in the command)
//! env = ["ANTHROPIC_API_KEY"]      # the only variables the agent gets besides PATH, HOME, LANG, TERM
//! timeout_s = 3600
//! no_output_timeout_s = 600
//!
//! [repos."acme/api"]
//! agent = "claude-opus"            # a repository picks its profile
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use super::file::{AgentTable, DispatchTable, StdinMode, Tables};
pub use super::file::{LiveInput, Network, OnFollowUp};
use crate::domain::usage::{UsageFormat, UsagePattern};
use crate::tasks::{AgentName, RepoName, RunPurpose, Task};

/// What a command template may name; anything else in braces is refused at start-up.
pub const PLACEHOLDERS: [&str; 4] = ["{prompt}", "{prompt_file}", "{workspace}", "{task_id}"];

/// The service's own secrets and connection strings; with every provider's (the provider table), a profile can
/// never pass these to an agent.
const OWN_SECRETS: [&str; 3] = ["DATABASE_URL", "NATS_URL", "PIDEVOPS_ADMIN_TOKEN"];

/// Every variable no agent (nor a repository's hook) is ever handed.
pub fn never_passed() -> impl Iterator<Item = &'static str> {
    OWN_SECRETS
        .into_iter()
        .chain(crate::domain::registry::agent_secrets())
}

/// Whether `var` is one of [`never_passed`].
pub fn is_never_passed(var: &str) -> bool {
    never_passed().any(|name| name == var)
}

/// The longest argument `{prompt}` may make. Linux refuses a single argument over 128 KiB (`E2BIG`), whatever the
/// total; a longer prompt needs `{prompt_file}` or `stdin = "prompt"`.
pub const MAX_ARGUMENT_BYTES: usize = 100_000;

/// A profile's wall-clock limit unless it sets `timeout_s`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60 * 60);
/// A profile's no-output limit unless it sets `no_output_timeout_s`.
pub const DEFAULT_NO_OUTPUT_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// One way to run a coding agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentProfile {
    pub name: String,
    /// argv, with placeholders.
    pub command: Vec<String>,
    /// Environment variables passed through from the service's environment (names only; values are read when
    /// the run starts). Nothing else of the service's environment reaches the agent.
    pub env: Vec<String>,
    /// Variables set to these fixed values (a CLI's switches: no telemetry, no update check), after `env`.
    pub set_env: BTreeMap<String, String>,
    /// Wall-clock limit for one attempt.
    pub timeout: Duration,
    /// Killed when it prints nothing for this long.
    pub no_output_timeout: Duration,
    /// The prompt is the agent's standard input (`stdin = "prompt"`); otherwise its stdin is empty.
    pub prompt_on_stdin: bool,
    /// How follow-ups reach it while it runs (`live_input`); with one, its standard input stays open and the
    /// prompt is the first message.
    pub live_input: LiveInput,
    /// What a follow-up arriving mid-run does when it cannot go live (`on_follow_up`).
    pub on_follow_up: OnFollowUp,
    /// How its output reports what it spent (`usage`, `usage_pattern`).
    pub usage: UsageFormat,
    /// The profile its tasks run with while its provider's limit holds (`fallback`).
    pub fallback: Option<String>,
    /// What its processes may reach (`network`): its own network and the egress proxy, none, or the host's.
    pub network: Network,
    /// How its CLI is pointed at its run's model gateway, so it holds only a placeholder key: the preset's, or
    /// guessed from the command's program ([`guess_route`]).
    pub model_route: ModelRoute,
}

pub use super::presets::ModelRoute;

/// The route of a profile's program: `pi`, `opencode` and `codex` by their configuration, anything else by the
/// provider's base-URL variable.
pub fn guess_route(command: &[impl AsRef<str>]) -> ModelRoute {
    let program = command.first().map(|p| p.as_ref()).unwrap_or_default();
    super::presets::by_program(program).map_or(ModelRoute::BaseUrlVariable, |p| p.model_route)
}

/// What a run fills the placeholders with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunInputs<'a> {
    pub prompt: &'a str,
    pub prompt_file: &'a str,
    pub workspace: &'a str,
    pub task_id: &'a str,
}

impl AgentProfile {
    /// The argv for one run: each placeholder replaced inside its argument, nothing split or joined.
    pub fn argv(&self, inputs: &RunInputs<'_>) -> Vec<String> {
        self.command
            .iter()
            .map(|arg| {
                arg.replace("{prompt_file}", inputs.prompt_file)
                    .replace("{workspace}", inputs.workspace)
                    .replace("{task_id}", inputs.task_id)
                    // Last: a prompt that itself contains `{workspace}` stays as written.
                    .replace("{prompt}", inputs.prompt)
            })
            .collect()
    }

    /// Why this prompt cannot go into this profile's argv (`{prompt}` would make an argument longer than
    /// [`MAX_ARGUMENT_BYTES`]), if it cannot.
    pub fn refuses_prompt(&self, prompt: &str) -> Option<String> {
        let longest = self
            .command
            .iter()
            .filter(|a| a.contains("{prompt}"))
            .map(|a| a.len() - "{prompt}".len() + prompt.len() * a.matches("{prompt}").count())
            .max()?;
        (longest > MAX_ARGUMENT_BYTES).then(|| {
            format!(
                "the prompt is {} bytes, and agent profile {:?} passes it as a command-line argument ({{prompt}}), \
                 which takes at most {MAX_ARGUMENT_BYTES}: use {{prompt_file}} or stdin = \"prompt\" in [agents.{}]",
                prompt.len(),
                self.name,
                self.name
            )
        })
    }
}

/// The presets pidevops ships (README, "Agents"): each reads the prompt from its standard input (so a prompt of
/// any length runs; none of it is in the process list) and works in the current directory, which the runner
/// sets to the attempt's worktree. `claude -p` and `pi -p` read a piped prompt, `codex exec -` reads it by name,
/// `opencode run` reads piped input as the message. Claude Code takes live input (`--input-format stream-json`):
/// its prompt is the first JSON message on its standard input and each follow-up another while it runs (see
/// docs/agents.md for why the others do not). Each passes its provider's key and the variables that point
/// the CLI at another endpoint or configuration (read by pidevops, which points the CLI at its run's model
/// gateway by its [`ModelRoute`] and gives it a placeholder key), and sets the switches that turn off what a run
/// does not need (telemetry, update checks, downloads at start-up). tests/it/agent_clis.rs runs each against a
/// scripted model.
pub fn presets() -> Vec<AgentProfile> {
    super::presets::PRESETS
        .iter()
        .map(|preset| AgentProfile {
            name: preset.name.to_owned(),
            usage: guess_usage(preset.command),
            fallback: None,
            network: Network::Proxy,
            model_route: preset.model_route,
            command: preset.command.iter().map(|s| (*s).to_owned()).collect(),
            env: preset.env.iter().map(|s| (*s).to_owned()).collect(),
            set_env: preset
                .set_env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            timeout: DEFAULT_TIMEOUT,
            no_output_timeout: DEFAULT_NO_OUTPUT_TIMEOUT,
            prompt_on_stdin: !preset.live_input,
            live_input: if preset.live_input {
                LiveInput::ClaudeStreamJson
            } else {
                LiveInput::None
            },
            on_follow_up: OnFollowUp::Queue,
        })
        .collect()
}

/// Every profile, the default, each repository's pick, and the profiles with a role of their own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profiles {
    profiles: BTreeMap<String, AgentProfile>,
    default: String,
    by_repo: BTreeMap<RepoName, String>,
    /// `[dispatch] planner`.
    planner: Option<String>,
    /// `[dispatch] triage`.
    triage: Option<String>,
    /// `[dispatch] reviewer`, and each repository's `reviewer`.
    reviewer: Option<String>,
    reviewer_by_repo: BTreeMap<RepoName, String>,
}

impl Profiles {
    /// `[dispatch] agent`, `[agents.<name>]` and `[repos."owner/name"] agent` over the presets. Every mistake
    /// names its key: a start-up error, not a failed run at 3 a.m.
    pub fn from_tables(tables: &Tables) -> Result<Self, String> {
        let mut profiles: BTreeMap<String, AgentProfile> =
            presets().into_iter().map(|p| (p.name.clone(), p)).collect();
        for (name, table) in &tables.agents {
            let key = format!("agents.{name}");
            // A task picks a profile by this name (a label, the API): it must be a name a task can say.
            name.parse::<AgentName>()
                .map_err(|e| format!("[{key}]: {e}"))?;
            profiles.insert(name.clone(), profile(name, table, &key)?);
        }
        let default = tables
            .dispatch
            .as_ref()
            .map_or_else(|| DispatchTable::default().agent, |d| d.agent.clone());
        known(&profiles, &default, "dispatch.agent")?;
        for (name, profile) in &profiles {
            if let Some(fallback) = &profile.fallback {
                let key = format!("agents.{name}.fallback");
                known(&profiles, fallback, &key)?;
                if fallback == name {
                    return Err(format!("{key} names the profile itself"));
                }
            }
        }
        let mut by_repo = BTreeMap::new();
        let mut reviewer_by_repo = BTreeMap::new();
        let dispatch = tables.dispatch.clone().unwrap_or_default();
        let role = |name: &Option<String>, key: &str| -> Result<Option<String>, String> {
            match name {
                Some(name) => known(&profiles, name, key).map(|()| Some(name.clone())),
                None => Ok(None),
            }
        };
        let planner = role(&dispatch.planner, "dispatch.planner")?;
        let triage = role(&dispatch.triage, "dispatch.triage")?;
        let reviewer = role(&dispatch.reviewer, "dispatch.reviewer")?;
        for (name, table) in &tables.repos {
            let repo = name
                .parse::<RepoName>()
                .map_err(|e| format!("[repos.\"{name}\"]: {e}"))?;
            if let Some(agent) = &table.agent {
                known(&profiles, agent, &format!("repos.\"{name}\".agent"))?;
                by_repo.insert(repo.clone(), agent.clone());
            }
            if let Some(own) = role(&table.reviewer, &format!("repos.\"{name}\".reviewer"))? {
                reviewer_by_repo.insert(repo.clone(), own);
            }
            let reviews = table.review == Some(super::file::ReviewPolicy::Agent);
            if reviews && reviewer.is_none() && !reviewer_by_repo.contains_key(&repo) {
                return Err(format!(
                    "repos.\"{name}\".review = \"agent\" needs a reviewer profile: set [dispatch] reviewer or repos.\"{name}\".reviewer"
                ));
            }
        }
        Ok(Self {
            profiles,
            default,
            by_repo,
            planner,
            triage,
            reviewer,
            reviewer_by_repo,
        })
    }

    /// The profiles that keep the service's network (`network = "host"`): named in `/health` and `doctor`.
    pub fn on_host_network(&self) -> Vec<String> {
        self.profiles
            .values()
            .filter(|p| p.network == Network::Host)
            .map(|p| p.name.clone())
            .collect()
    }

    /// The planner's profile, when plans are configured.
    pub fn planner(&self) -> Option<&AgentProfile> {
        self.planner
            .as_deref()
            .and_then(|name| self.profiles.get(name))
    }

    /// The triage agent's profile, when triage runs are configured.
    pub fn triager(&self) -> Option<&AgentProfile> {
        self.triage
            .as_deref()
            .and_then(|name| self.profiles.get(name))
    }

    /// The reviewer of `repo`'s attempts: its own, else `[dispatch] reviewer`.
    pub fn reviewer_for(&self, repo: &RepoName) -> Option<&AgentProfile> {
        self.reviewer_by_repo
            .get(repo)
            .or(self.reviewer.as_ref())
            .and_then(|name| self.profiles.get(name))
    }

    /// The profile a run of `task` for `purpose` uses: the task's own for work, the planner for a plan, the
    /// triage agent for triage; `Err` says what is missing.
    pub fn for_run(&self, task: &Task, purpose: RunPurpose) -> Result<&AgentProfile, String> {
        match purpose {
            // A refresh check runs no agent: the task's own profile only names its run.
            RunPurpose::Work | RunPurpose::Resolve | RunPurpose::Refresh => self.for_task(task),
            RunPurpose::Plan => self.planner().ok_or_else(|| {
                format!(
                    "{} is a plan, and no planner profile is configured ([dispatch] planner)",
                    task.id()
                )
            }),
            RunPurpose::Triage => self.triager().ok_or_else(|| {
                format!(
                    "{} waits for triage, and no triage profile is configured ([dispatch] triage)",
                    task.id()
                )
            }),
        }
    }

    /// The profile a task in `repo` runs with: the repository's pick, else the default.
    pub fn for_repo(&self, repo: &RepoName) -> &AgentProfile {
        let name = self.by_repo.get(repo).unwrap_or(&self.default);
        // `from_tables` checked every name it stores against `profiles`.
        self.profiles
            .get(name)
            .or_else(|| self.profiles.values().next())
            .expect("a checked profile name, and the presets are never empty")
    }

    /// The profile `task` runs with: its own pick, else its repository's. A pick that names no profile here is
    /// refused with the names that exist (the task was made elsewhere, or the file changed since).
    pub fn for_task(&self, task: &Task) -> Result<&AgentProfile, String> {
        match task.agent() {
            None => Ok(self.for_repo(task.repo())),
            Some(name) => self.profiles.get(name.as_str()).ok_or_else(|| {
                format!(
                    "{} asks for the agent profile {:?}, which is neither a preset nor defined under [agents] \
                     (known: {})",
                    task.id(),
                    name.as_str(),
                    self.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
                )
            }),
        }
    }

    /// The profile of repositories that do not pick one.
    pub fn default_profile(&self) -> &AgentProfile {
        self.profiles
            .get(&self.default)
            .or_else(|| self.profiles.values().next())
            .expect("a checked profile name, and the presets are never empty")
    }

    /// The profile that runs `name`'s tasks while `name` is paused by its provider's limit: its `fallback`, unless
    /// that one is paused too.
    pub fn fallback_for<T>(
        &self,
        name: &str,
        paused: &BTreeMap<String, T>,
    ) -> Option<&AgentProfile> {
        let fallback = self.profiles.get(name)?.fallback.as_deref()?;
        (!paused.contains_key(fallback))
            .then(|| self.profiles.get(fallback))
            .flatten()
    }

    pub fn get(&self, name: &str) -> Option<&AgentProfile> {
        self.profiles.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.profiles.keys().map(String::as_str)
    }
}

fn known(profiles: &BTreeMap<String, AgentProfile>, name: &str, key: &str) -> Result<(), String> {
    if profiles.contains_key(name) {
        Ok(())
    } else {
        Err(format!(
            "{key} names the agent profile {name:?}, which is neither a preset nor defined under [agents] \
             (known: {})",
            profiles.keys().cloned().collect::<Vec<_>>().join(", ")
        ))
    }
}

fn profile(name: &str, table: &AgentTable, key: &str) -> Result<AgentProfile, String> {
    let prompt_on_stdin = table.stdin == StdinMode::Prompt;
    let command = table
        .command
        .clone()
        .ok_or_else(|| format!("{key}.command is missing"))?;
    if command.is_empty() || command[0].trim().is_empty() {
        return Err(format!(
            "{key}.command must name a program: [\"program\", \"arg\", …]"
        ));
    }
    for arg in &command {
        let mut rest = arg.as_str();
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}') else {
                break;
            };
            let placeholder = &rest[open..open + close + 1];
            if !PLACEHOLDERS.contains(&placeholder) {
                return Err(format!(
                    "{key}.command has the placeholder {placeholder}; known ones are {}",
                    PLACEHOLDERS.join(", ")
                ));
            }
            rest = &rest[open + close + 1..];
        }
    }
    let live = table.live_input != LiveInput::None;
    if live && prompt_on_stdin {
        return Err(format!(
            "{key}: stdin = \"prompt\" and live_input = {:?} both want the agent's standard input; with live \
             input the prompt is its first message, so drop stdin",
            live_input_name(table.live_input)
        ));
    }
    // Claude Code takes a message written mid-turn into that turn: only its echo of each says when every message
    // was taken, so its input can close (without, a follow-up mid-turn would leave it waiting for more).
    let program = command[0].rsplit('/').next().unwrap_or_default();
    if table.live_input == LiveInput::ClaudeStreamJson
        && program == "claude"
        && !command.iter().any(|a| a == "--replay-user-messages")
    {
        return Err(format!(
            "{key}: live_input = \"claude-stream-json\" with claude needs --replay-user-messages in the command \
             (and --input-format stream-json --output-format stream-json --verbose): its echo says when a \
             follow-up was taken"
        ));
    }
    if !live
        && !prompt_on_stdin
        && !command
            .iter()
            .any(|a| a.contains("{prompt}") || a.contains("{prompt_file}"))
    {
        return Err(format!(
            "{key}.command never passes the prompt: put {{prompt}} or {{prompt_file}} in an argument, or set \
             {key}.stdin = \"prompt\""
        ));
    }
    let usage = usage_format(table, &command, key)?;
    for var in &table.env {
        variable(var, &format!("{key}.env"))?;
    }
    for var in table.set_env.keys() {
        variable(var, &format!("{key}.set_env"))?;
        if OWN_VARIABLES.contains(&var.as_str()) {
            return Err(format!(
                "{key}.set_env sets {var}, which pidevops sets for every run (its own directories)"
            ));
        }
        if table.env.contains(var) {
            return Err(format!(
                "{key}: {var} is both passed through (env) and set (set_env); keep one"
            ));
        }
    }
    let model_route = guess_route(&command);
    Ok(AgentProfile {
        name: name.to_owned(),
        command,
        env: table.env.clone(),
        set_env: table.set_env.clone(),
        timeout: seconds(table.timeout_s, &format!("{key}.timeout_s"))?,
        no_output_timeout: seconds(
            table.no_output_timeout_s,
            &format!("{key}.no_output_timeout_s"),
        )?,
        prompt_on_stdin,
        live_input: table.live_input,
        on_follow_up: table.on_follow_up,
        usage,
        fallback: table.fallback.clone(),
        network: table.network,
        model_route,
    })
}

fn live_input_name(live: LiveInput) -> &'static str {
    match live {
        LiveInput::None => "none",
        LiveInput::ClaudeStreamJson => "claude-stream-json",
    }
}

/// What a profile's output is read as when it does not say (`usage` unset): the CLI it runs, in the mode that
/// reports usage. Anything else reads nothing.
pub fn guess_usage(command: &[impl AsRef<str>]) -> UsageFormat {
    let args: Vec<&str> = command.iter().map(|a| a.as_ref()).collect();
    let Some(preset) = args
        .first()
        .and_then(|program| super::presets::by_program(program))
    else {
        return UsageFormat::None;
    };
    if !preset.reports_usage(&args) {
        return UsageFormat::None;
    }
    UsageFormat::named(preset.usage).unwrap_or_default()
}

/// `usage` and `usage_pattern`: one format, named or a regex; neither, guessed from the command.
fn usage_format(table: &AgentTable, command: &[String], key: &str) -> Result<UsageFormat, String> {
    match (&table.usage, &table.usage_pattern) {
        (Some(name), Some(_)) if name != "pattern" => Err(format!(
            "{key}: usage = {name:?} and usage_pattern are both set; keep one (a pattern is its own format)"
        )),
        (_, Some(pattern)) => UsagePattern::new(pattern)
            .map(UsageFormat::Pattern)
            .map_err(|e| format!("{key}.usage_pattern: {e}")),
        (Some(name), None) if name == "pattern" => Err(format!(
            "{key}: usage = \"pattern\" needs usage_pattern (a regex with named groups)"
        )),
        (Some(name), None) => UsageFormat::named(name).map_err(|e| format!("{key}.usage: {e}")),
        (None, None) => Ok(guess_usage(command)),
    }
}

/// What the runner sets for every run: a profile's `set_env` cannot move the agent out of its own directories.
const OWN_VARIABLES: [&str; 3] = ["PATH", "HOME", "TMPDIR"];

/// A variable a profile may name: a variable name, never one of pidevops's own secrets or settings.
fn variable(var: &str, key: &str) -> Result<(), String> {
    if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("{key}: {var:?} is not a variable name"));
    }
    if is_never_passed(var) || var.starts_with("PIDEVOPS_") {
        return Err(format!(
            "{key} lists {var}, one of pidevops's own secrets or settings: an agent never gets those"
        ));
    }
    Ok(())
}

fn seconds(n: i64, key: &str) -> Result<Duration, String> {
    if n < 1 {
        return Err(format!("{key} must be at least 1 second"));
    }
    Ok(Duration::from_secs(n.unsigned_abs()))
}
