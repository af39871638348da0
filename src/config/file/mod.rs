//! `pidevops.toml`, typed. One serde struct per table, each refusing unknown keys (`deny_unknown_fields`), read
//! once at start into [`FileConfig`]: the tables as written with their defaults filled in (what
//! `pidevops config check` prints) and the domain values built from them (`BoardConfig`, `DispatchConfig`,
//! `Profiles`, …), so no module reads the file again.
//!
//! Reading goes through a small deserializer of our own over `toml::Value` ([`ValueDe`]) rather than `toml`'s:
//! it knows the path of every value, so an error names its key (`[dispatch] max_concurent`), it sees each
//! struct's field list (serde hands it to `deserialize_struct`), so an unknown key is reported with the closest
//! known one and does not stop the reading, and a bad value is taken out and the file read again, so one run
//! reports every mistake instead of the first. `docs/configuration.md` lists every key; a test holds it to these
//! structs.
//!
//! Here: the tables (`agent_table.rs`: `[agents.*]`; `schedule_table.rs`: `[[schedules]]`). `build.rs`: [`FileConfig`], the domain values built from them,
//! each area's by its own file (`board.rs`, `budgets.rs`, `cron.rs`, `effects.rs`, `intake.rs`, `pollers.rs`): the
//! domains take those values and never read the tables. `reader.rs`: the deserializer.
//! `errors.rs`: a key path and what is wrong there. `schema.rs`: each table's keys, from serde.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use super::dispatch::{ContainmentPolicy, DispatchConfig, Executor};
use super::profiles::Profiles;
use crate::board::BoardConfig;
use crate::cron::Schedule;
use crate::domain::effect::LinearStates;
use crate::intake::IntakeConfig;
use crate::pollers::PollerConfig;
use crate::tasks::{ApprovalPolicy, LandMode, MaxAttempts, MergeMethod, RefreshMode, StaleAction};
// The tables' value types the domains decide with (re-exported: the tables name them).
pub use crate::tasks::{PlanLand, ReviewPolicy, ScopePolicy};

mod agent_table;
mod board;
mod budgets;
mod build;
mod cron;
mod effects;
mod errors;
mod intake;
mod pollers;
mod reader;
mod schedule_table;
mod schema;
#[cfg(test)]
mod tests;

pub use agent_table::*;
pub use budgets::budgets_config;
pub use build::*;
pub use errors::*;
use reader::*;
pub use schedule_table::*;
pub use schema::*;

// ---------------------------------------------------------------------------------------------------------------
// The tables. Field names are the keys; `Default` holds every default (serde fills absent keys from it).
// ---------------------------------------------------------------------------------------------------------------

/// The whole file.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Tables {
    pub board: BoardTable,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub repos: BTreeMap<String, RepoTable>,
    pub intake: IntakeTable,
    /// Absent: dispatch is off ("no [dispatch] in pidevops.toml").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatch: Option<DispatchTable>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub agents: BTreeMap<String, AgentTable>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schedules: Vec<ScheduleTable>,
    pub digest: DigestTable,
    pub linear: LinearTable,
    pub telegram: TelegramTable,
    pub slack: SlackTable,
    pub effects: EffectsTable,
    pub pollers: PollersTable,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub loops: BTreeMap<String, LoopTable>,
    pub plans: PlansTable,
    pub budgets: BudgetsTable,
}

/// `[budgets]`: spending limits (`budgets::BudgetsConfig`, read by `budgets.rs`); an unset key limits nothing.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetsTable {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_tokens: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo_daily_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo_daily_tokens: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daily_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daily_tokens: Option<i64>,
    pub soft_at: f64,
}

impl Default for BudgetsTable {
    fn default() -> Self {
        Self {
            task_usd: None,
            task_tokens: None,
            repo_daily_usd: None,
            repo_daily_tokens: None,
            daily_usd: None,
            daily_tokens: None,
            soft_at: 0.8,
        }
    }
}

/// `[board]`: the approval gate and the attempt budget.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BoardTable {
    pub approval: ApprovalPolicy,
    pub max_attempts: i64,
}

impl Default for BoardTable {
    fn default() -> Self {
        Self {
            // A person sees a task before an agent spends money on it, unless the team says otherwise.
            approval: ApprovalPolicy::Manual,
            max_attempts: i64::from(MaxAttempts::DEFAULT.get()),
        }
    }
}

/// `[repos."owner/name"]`: a repository; each key falls back to a global one when absent.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RepoTable {
    /// Default: `[board] approval`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalPolicy>,
    /// Default: `https://github.com/<owner>/<name>.git`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Default: `main`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// Where its tasks land. Default: `github` for a github.com URL, else `git`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forge: Option<Forge>,
    /// Its code host: where its issues are taken from (and, later, its merge requests go). Default: `github`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<CodeHost>,
    /// Whether its merge requests open as drafts (GitLab-hosted repositories only). Default: false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draft: Option<bool>,
    /// Default: `[dispatch] per_repo`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<i64>,
    /// Default: `[dispatch] agent`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Run once in each fresh worktree before the agent (`["npm", "ci"]`). Default: nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setup: Option<Vec<String>>,
    /// Run before each agent, after `setup`. Default: nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before_run: Option<Vec<String>>,
    /// Run after an agent that exited 0, before `check`. Default: nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_run: Option<Vec<String>>,
    /// Run by pidevops after the agent; its failure sends the task back. Default: nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<Vec<String>>,
    /// Names of environment variables handed to `setup`, `before_run` and `after_run` only. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secrets: Option<Vec<String>>,
    /// Default: 600.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook_timeout_s: Option<f64>,
    /// Default: 1800.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_timeout_s: Option<f64>,
    /// Whether an attempt's changed files must stay within its task's scope. Default: enforce.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<ScopePolicy>,
    /// Protected paths (`tasks::plan::guard::PROTECTED`, as `.github/workflows`) a planner may give a plan's item
    /// to change. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plans_may_name: Option<Vec<String>>,
    /// Whether a reviewer agent reads each successful attempt before its pull request. Default: off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review: Option<ReviewPolicy>,
    /// The reviewer's profile for this repository. Default: `[dispatch] reviewer`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reviewer: Option<String>,
    /// Host names (or `*.name`) this repository's agents and hooks may reach through the egress proxy, on 443
    /// or 80; `"registries"` adds the package registries (which hooks get anyway). Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_hosts: Option<Vec<String>>,
    /// Who merges a task's pull request. Default: `manual` (people).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub land: Option<LandMode>,
    /// Approvals by trusted people `land = "auto"` waits for, 0 to 10. Default: 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approvals: Option<i64>,
    /// Checks that must pass on the head commit, by name. Default: none named (any one passing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required_checks: Option<Vec<String>>,
    /// Default: the repository's allowed method (squash, else merge, else rebase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge_method: Option<MergeMethod>,
    /// How pidevops brings its pull request's branch up to date when the base moves: `rebase` (default),
    /// `merge` or `off`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refresh: Option<RefreshMode>,
    /// Whether pidevops deletes its own branch (`pidevops/<task>`) once the task's pull or merge request merged or
    /// the task was cancelled, and only while its head is a commit pidevops pushed. Default: true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delete_branch: Option<bool>,
    /// Hours a task may stay in review without activity before `stale_action`, 1 to 8784. Default: off (0 too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_after_h: Option<i64>,
    /// What a review left without activity past `stale_after_h` gets: `remind` (its source, once) or `close` (its
    /// pull request, and the task cancelled). Default: remind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_action: Option<StaleAction>,
}

/// `[repos."o/n"] forge`: where a repository's tasks land.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Forge {
    /// Through their pull requests on GitHub (github.com, or the Enterprise server `GITHUB_API_URL` names).
    Github,
    /// By pidevops's own git on the configured remote (`task land`, `land = "auto"`).
    Git,
}

/// `[repos."o/n"] provider`: the code host a repository lives on. Its issues become tasks only from there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CodeHost {
    /// `owner/name` on GitHub (github.com, or the Enterprise server `GITHUB_API_URL` names).
    #[default]
    Github,
    /// `group/…/name` on GitLab (`GITLAB_URL`: gitlab.com or a self-managed instance).
    Gitlab,
}

impl CodeHost {
    /// The provider's name in `domain::registry::PROVIDERS`.
    pub fn provider(self) -> &'static str {
        match self {
            CodeHost::Github => "github",
            CodeHost::Gitlab => "gitlab",
        }
    }
}

/// `[plans]`: goals decomposed into tasks by a planner agent.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlansTable {
    /// A GitHub or Linear issue with this label becomes a plan (instead of a task).
    pub label: String,
    /// The most items a plan may have.
    pub max_items: i64,
    /// How a plan's items reach GitHub: a pull request each, or their branches merged into one.
    pub land: PlanLand,
}

impl Default for PlansTable {
    fn default() -> Self {
        Self {
            label: "pidevops:plan".to_owned(),
            max_items: 20,
            land: PlanLand::Separate,
        }
    }
}

/// `[intake]`: which tickets become tasks, and for which repositories.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct IntakeTable {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_repo: Option<String>,
    pub allow_repos: Vec<String>,
    pub github: IntakeGithubTable,
    pub linear: IntakeLinearTable,
    pub gitlab: IntakeGitlabTable,
}

/// `[intake.github]`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct IntakeGithubTable {
    pub label: String,
    pub associations: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bot_login: Option<String>,
}

impl Default for IntakeGithubTable {
    fn default() -> Self {
        Self {
            label: "pidevops".to_owned(),
            associations: strings(&["OWNER", "MEMBER", "COLLABORATOR"]),
            bot_login: None,
        }
    }
}

/// `[intake.gitlab]`: GitLab's webhooks carry no access level, so who is trusted is named here.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct IntakeGitlabTable {
    pub label: String,
    /// GitLab usernames whose issues and notes may ask pidevops; empty: no one.
    pub trusted_users: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bot_username: Option<String>,
}

impl Default for IntakeGitlabTable {
    fn default() -> Self {
        Self {
            label: "pidevops".to_owned(),
            trusted_users: Vec::new(),
            bot_username: None,
        }
    }
}

/// `[intake.linear]`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct IntakeLinearTable {
    pub state: String,
    pub label: String,
    pub skip_labels: Vec<String>,
    /// Team key → repository.
    pub teams: BTreeMap<String, String>,
}

impl Default for IntakeLinearTable {
    fn default() -> Self {
        Self {
            state: "Ready for Pi-Dev".to_owned(),
            label: "pi-dev:autonomous".to_owned(),
            skip_labels: strings(&["no-code", "manual-action", "legal"]),
            teams: BTreeMap::new(),
        }
    }
}

/// `[dispatch]`: running agents.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DispatchTable {
    pub enabled: bool,
    pub agent: String,
    pub max_concurrent: i64,
    pub per_repo: i64,
    /// Seconds; fractions are accepted.
    pub heartbeat_s: f64,
    /// Seconds; fractions are accepted.
    pub retry_backoff_s: f64,
    /// Seconds (fractions accepted): the longest one run's report of its provider's limit pauses its profile.
    pub limit_unverified_s: f64,
    /// Hours; fractions are accepted.
    pub worktree_ttl_h: f64,
    /// Seconds (fractions accepted): how often a running agent's worktree is saved, besides each turn's end.
    pub checkpoint_every_s: f64,
    pub executor: Executor,
    pub containment: ContainmentPolicy,
    pub bwrap: String,
    pub readable: Vec<String>,
    /// The profile that plans (writes `.pidevops/plan.json`); unset: plans cannot be made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planner: Option<String>,
    /// The profile that rewrites a ticket waiting in triage into a spec; unset: no triage runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub triage: Option<String>,
    /// The profile that reviews attempts where `[repos."o/n"] review = "agent"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reviewer: Option<String>,
    /// MiB: the size of each agent's private `/tmp` and TMPDIR (each a tmpfs under bubblewrap).
    pub tmp_size_mib: i64,
    /// MiB: the size of each agent's HOME (a tmpfs under bubblewrap).
    pub home_size_mib: i64,
    /// MiB: the memory each agent (and each of its repository's commands) may use, where cgroup v2 lets
    /// pidevops set it.
    pub memory_max_mib: i64,
    /// MiB: what an agent may print in one run; past it the agent is stopped (`flooded`).
    pub output_max_mib: i64,
    /// MiB: `agent.log` keeps this much of the start and of the end of the output, and says what was cut.
    pub log_keep_mib: i64,
    /// MiB: nothing is claimed while the workspace volume has less free than this; a run that takes it below half
    /// is stopped.
    pub min_free_disk_mib: i64,
}

impl Default for DispatchTable {
    fn default() -> Self {
        Self {
            enabled: true,
            agent: "claude".to_owned(),
            max_concurrent: 2,
            per_repo: 1,
            heartbeat_s: 30.0,
            retry_backoff_s: 60.0,
            limit_unverified_s: crate::domain::limits::UNVERIFIED_WINDOW_S,
            worktree_ttl_h: 24.0,
            checkpoint_every_s: 300.0,
            executor: Executor::Local,
            containment: ContainmentPolicy::Required,
            bwrap: "bwrap".to_owned(),
            readable: Vec::new(),
            planner: None,
            triage: None,
            reviewer: None,
            tmp_size_mib: 512,
            home_size_mib: 1024,
            memory_max_mib: 4096,
            output_max_mib: 256,
            log_keep_mib: 4,
            min_free_disk_mib: 1024,
        }
    }
}

/// `[linear]`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinearTable {
    pub states: LinearStatesTable,
}

/// `[linear.states]`: the Linear states pidevops moves issues through, each a name or a list of names.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinearStatesTable {
    pub in_progress: Names,
    pub in_review: Names,
    pub done: Names,
    pub blocked: Names,
}

impl Default for LinearStatesTable {
    fn default() -> Self {
        let states = LinearStates::default();
        Self {
            in_progress: Names(states.in_progress),
            in_review: Names(states.in_review),
            done: Names(states.done),
            blocked: Names(states.blocked),
        }
    }
}

/// `[telegram]`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelegramTable {
    pub cooldown_s: i64,
}

impl Default for TelegramTable {
    fn default() -> Self {
        Self { cooldown_s: 600 }
    }
}

/// `[slack]`: the channels a mention makes work in, each with its repository (`[slack.channels."C0123ABCD"]`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlackTable {
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub channels: BTreeMap<String, SlackChannelTable>,
}

/// `[slack.channels."C…"]`: an allowed channel and the repository its tasks are for when a mention names none.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlackChannelTable {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
}

/// `[effects]`: the outbound calls of the `effects:<provider>` loops.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct EffectsTable {
    /// Outbound calls per task in any hour before it is flagged and held (`effects::cap`); 0: no cap.
    pub max_per_task_per_hour: i64,
}

impl Default for EffectsTable {
    fn default() -> Self {
        Self {
            max_per_task_per_hour: i64::from(crate::effects::cap::DEFAULT_PER_HOUR),
        }
    }
}

/// `[pollers]`: one table per poller; a table present asks for its poller.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PollersTable {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub linear: Option<PollerTable>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub github: Option<PollerTable>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gitlab: Option<PollerTable>,
}

/// `[pollers.<name>]`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PollerTable {
    pub enabled: bool,
    /// Seconds, fractions accepted; default: the poller's own (linear 300, github 120, gitlab 120).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_s: Option<f64>,
}

impl Default for PollerTable {
    fn default() -> Self {
        Self {
            enabled: true,
            interval_s: None,
        }
    }
}

/// `[loops.<name>]`: a loop's stale threshold.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoopTable {
    /// Seconds, fractions accepted; default: 3 × the loop's interval, at least 60.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail_after_s: Option<f64>,
}

/// A name or a list of names (`done = "Done"` or `done = ["Done", "Closed"]`); always printed as a list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Names(pub Vec<String>);

impl<'de> Deserialize<'de> for Names {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NamesVisitor;
        impl<'de> Visitor<'de> for NamesVisitor {
            type Value = Names;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a name or a list of names")
            }
            fn visit_str<E: de::Error>(self, one: &str) -> Result<Names, E> {
                Ok(Names(vec![one.to_owned()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Names, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<String>()? {
                    names.push(name);
                }
                Ok(Names(names))
            }
        }
        deserializer.deserialize_any(NamesVisitor)
    }
}

pub(super) fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

impl Tables {
    /// Reads the tables from a parsed file, reporting every unknown key and bad value, not only the first.
    pub fn from_table(table: &toml::Table) -> Result<Self, Vec<FileError>> {
        let mut value = toml::Value::Table(table.clone());
        let mut errors: Vec<FileError> = Vec::new();
        // Each round either succeeds or takes one bad value out, so this ends; the bound is a second guarantee.
        for _ in 0..256 {
            let sink = Sink::default();
            let read = Tables::deserialize(ValueDe {
                value: &value,
                path: Vec::new(),
                sink: &sink,
            });
            for unknown in sink.into_inner() {
                if !errors.contains(&unknown) {
                    errors.push(unknown);
                }
            }
            match read {
                Ok(tables) if errors.is_empty() => return Ok(tables),
                Ok(_) => break,
                Err(error) => {
                    let error = error.into_file_error();
                    let removed = remove(&mut value, &error.path);
                    if !errors.contains(&error) {
                        errors.push(error);
                    }
                    if !removed {
                        break;
                    }
                }
            }
        }
        errors.sort_by(|a, b| a.path.cmp(&b.path));
        Err(errors)
    }

    /// What the service runs with: the file's values, the defaults, the presets as `[agents.*]` and each asked-for
    /// poller's interval. A repository's keys stay as written: each unset one falls back to another key or to its
    /// name, and a repository with `url` or `base` set counts as one with its own source (the dispatcher checks
    /// those), so filling them in would change what the file means.
    pub fn effective(&self) -> Self {
        let mut out = self.clone();
        for preset in super::profiles::presets() {
            out.agents
                .entry(preset.name.clone())
                .or_insert_with(|| AgentTable {
                    command: Some(preset.command.clone()),
                    stdin: if preset.prompt_on_stdin {
                        StdinMode::Prompt
                    } else {
                        StdinMode::None
                    },
                    live_input: preset.live_input,
                    on_follow_up: preset.on_follow_up,
                    env: preset.env.clone(),
                    set_env: preset.set_env.clone(),
                    timeout_s: preset.timeout.as_secs() as i64,
                    no_output_timeout_s: preset.no_output_timeout.as_secs() as i64,
                    usage: Some(preset.usage.name().to_owned()),
                    usage_pattern: None,
                    fallback: None,
                    network: preset.network,
                });
        }
        for (poller, default) in [
            (&mut out.pollers.linear, crate::pollers::LINEAR_INTERVAL),
            (&mut out.pollers.github, crate::pollers::GITHUB_INTERVAL),
            (&mut out.pollers.gitlab, crate::pollers::GITLAB_INTERVAL),
        ] {
            if let Some(poller) = poller {
                poller.interval_s.get_or_insert(default.as_secs_f64());
            }
        }
        out
    }
}
