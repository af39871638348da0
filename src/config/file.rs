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

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use super::dispatch::{ContainmentPolicy, DispatchConfig, Executor};
use super::profiles::Profiles;
use crate::board::BoardConfig;
use crate::cron::Schedule;
use crate::effects::policy::LinearStates;
use crate::intake::IntakeConfig;
use crate::pollers::PollerConfig;
use crate::tasks::{ApprovalPolicy, MaxAttempts};

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
    pub pollers: PollersTable,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub loops: BTreeMap<String, LoopTable>,
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
    /// Default: `[dispatch] per_repo`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<i64>,
    /// Default: `[dispatch] agent`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
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
    /// Hours; fractions are accepted.
    pub worktree_ttl_h: f64,
    pub executor: Executor,
    pub containment: ContainmentPolicy,
    pub bwrap: String,
    pub readable: Vec<String>,
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
            worktree_ttl_h: 24.0,
            executor: Executor::Local,
            containment: ContainmentPolicy::Required,
            bwrap: "bwrap".to_owned(),
            readable: Vec::new(),
        }
    }
}

/// `[agents.<name>]`: an agent profile of your own (or a preset's name, to replace it).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentTable {
    /// Required; `None` only so that its absence is reported as the profile's own mistake.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    pub stdin: StdinMode,
    pub env: Vec<String>,
    pub timeout_s: i64,
    pub no_output_timeout_s: i64,
}

impl Default for AgentTable {
    fn default() -> Self {
        Self {
            command: None,
            stdin: StdinMode::None,
            env: Vec::new(),
            timeout_s: super::profiles::DEFAULT_TIMEOUT.as_secs() as i64,
            no_output_timeout_s: super::profiles::DEFAULT_NO_OUTPUT_TIMEOUT.as_secs() as i64,
        }
    }
}

/// `[agents.<name>] stdin`: whether the prompt is the agent's standard input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StdinMode {
    Prompt,
    #[default]
    None,
}

/// `[[schedules]]`: a task (or a digest) on a cron pattern.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScheduleTable {
    /// Required (checked with the schedule's other rules, so the message can name the schedule).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    pub timezone: String,
    pub digest: bool,
    /// Required unless `digest = true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<ScheduleTaskTable>,
}

impl Default for ScheduleTable {
    fn default() -> Self {
        Self {
            name: None,
            cron: None,
            timezone: "UTC".to_owned(),
            digest: false,
            task: None,
        }
    }
}

/// `[schedules.task]`: the task a schedule creates.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScheduleTaskTable {
    pub repo: String,
    pub task: String,
    pub scope: String,
    pub done_when: String,
    /// Default: normal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
}

/// `[digest]`: the built-in daily digest.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DigestTable {
    pub enabled: bool,
    pub time: String,
    pub timezone: String,
}

impl Default for DigestTable {
    fn default() -> Self {
        Self {
            enabled: false,
            time: "09:00".to_owned(),
            timezone: "UTC".to_owned(),
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

/// `[pollers]`: one table per poller; a table present asks for its poller.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PollersTable {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub linear: Option<PollerTable>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub github: Option<PollerTable>,
}

/// `[pollers.<name>]`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PollerTable {
    pub enabled: bool,
    /// Seconds, fractions accepted; default: the poller's own (linear 300, github 120).
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

fn strings(items: &[&str]) -> Vec<String> {
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
                    env: preset.env.clone(),
                    timeout_s: preset.timeout.as_secs() as i64,
                    no_output_timeout_s: preset.no_output_timeout.as_secs() as i64,
                });
        }
        for (poller, default) in [
            (&mut out.pollers.linear, crate::pollers::LINEAR_INTERVAL),
            (&mut out.pollers.github, crate::pollers::GITHUB_INTERVAL),
        ] {
            if let Some(poller) = poller {
                poller.interval_s.get_or_insert(default.as_secs_f64());
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The checked file: the tables and the domain values, built once.
// ---------------------------------------------------------------------------------------------------------------

/// `pidevops.toml`, parsed and checked once at start: every table, and the domain values built from them.
#[derive(Clone, Debug)]
pub struct FileConfig {
    tables: Tables,
    pub board: BoardConfig,
    pub dispatch: DispatchConfig,
    pub profiles: Profiles,
    /// `[intake]` and the allow-list; the Telegram ids come from the environment at start
    /// (`IntakeConfig::with_telegram`).
    pub intake: IntakeConfig,
    /// `[[schedules]]` and the daily digest.
    pub schedules: Vec<Schedule>,
    pub linear_states: LinearStates,
    pub telegram_cooldown: chrono::Duration,
    pub linear_poller: PollerConfig,
    pub github_poller: PollerConfig,
    /// `[loops.<name>] fail_after_s`: stale thresholds by loop name (checked against the loop plan at start).
    pub loop_fail_after: BTreeMap<String, std::time::Duration>,
}

impl FileConfig {
    pub fn from_table(table: &toml::Table) -> Result<Self, FileErrors> {
        Self::from_tables(Tables::from_table(table).map_err(FileErrors)?)
    }

    /// Builds each domain value; every rule that fails is reported, each once.
    pub fn from_tables(tables: Tables) -> Result<Self, FileErrors> {
        let mut errors: Vec<FileError> = Vec::new();
        fn keep<T>(errors: &mut Vec<FileError>, result: Result<T, String>) -> Option<T> {
            match result {
                Ok(value) => Some(value),
                Err(message) => {
                    let error = FileError::rule(message);
                    if !errors.contains(&error) {
                        errors.push(error);
                    }
                    None
                }
            }
        }
        let board = keep(&mut errors, BoardConfig::from_tables(&tables));
        let dispatch = keep(&mut errors, DispatchConfig::from_tables(&tables));
        let profiles = keep(&mut errors, Profiles::from_tables(&tables));
        let intake = keep(&mut errors, IntakeConfig::from_tables(&tables));
        let schedules = keep(&mut errors, crate::cron::schedules(&tables));
        let linear_states = keep(&mut errors, LinearStates::from_tables(&tables));
        let telegram_cooldown = keep(
            &mut errors,
            crate::effects::policy::telegram_cooldown(&tables),
        );
        let linear_poller = keep(
            &mut errors,
            PollerConfig::from_table(
                tables.pollers.linear.as_ref(),
                "linear",
                crate::pollers::LINEAR_INTERVAL,
            ),
        );
        let github_poller = keep(
            &mut errors,
            PollerConfig::from_table(
                tables.pollers.github.as_ref(),
                "github",
                crate::pollers::GITHUB_INTERVAL,
            ),
        );
        let loop_fail_after = keep(
            &mut errors,
            crate::loops::fail_after_overrides(
                tables
                    .loops
                    .iter()
                    .map(|(name, table)| (name, table.fail_after_s)),
            ),
        );
        match (
            board,
            dispatch,
            profiles,
            intake,
            schedules,
            linear_states,
            telegram_cooldown,
            linear_poller,
            github_poller,
            loop_fail_after,
        ) {
            (
                Some(board),
                Some(dispatch),
                Some(profiles),
                Some(intake),
                Some(schedules),
                Some(linear_states),
                Some(telegram_cooldown),
                Some(linear_poller),
                Some(github_poller),
                Some(loop_fail_after),
            ) => Ok(Self {
                tables,
                board,
                dispatch,
                profiles,
                intake,
                schedules,
                linear_states,
                telegram_cooldown,
                linear_poller,
                github_poller,
                loop_fail_after,
            }),
            _ => Err(FileErrors(errors)),
        }
    }

    /// The tables as read, defaults filled in.
    pub fn tables(&self) -> &Tables {
        &self.tables
    }
}

/// No file: every default.
impl Default for FileConfig {
    fn default() -> Self {
        Self::from_tables(Tables::default()).expect(
            "the defaults are a valid configuration (tested: the_empty_file_is_every_default)",
        )
    }
}

impl std::str::FromStr for FileConfig {
    type Err = FileErrors;
    /// Parses TOML text (tests and `config check`); a syntax error is one error naming where.
    fn from_str(text: &str) -> Result<Self, FileErrors> {
        let table = text.parse::<toml::Table>().map_err(|e| {
            FileErrors(vec![FileError::rule(format!(
                "not valid TOML: {}",
                e.to_string().trim_end()
            ))])
        })?;
        Self::from_table(&table)
    }
}

impl TryFrom<toml::Table> for FileConfig {
    type Error = FileErrors;
    fn try_from(table: toml::Table) -> Result<Self, FileErrors> {
        Self::from_table(&table)
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Errors: a key path and what is wrong there.
// ---------------------------------------------------------------------------------------------------------------

/// One step of a key path: a table key or an array index.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Segment {
    Key(String),
    Index(usize),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Problem {
    /// A key no struct has; the closest known one, if any is close, else every known one.
    Unknown {
        suggestion: Option<String>,
        known: Vec<String>,
        table: Option<&'static str>,
    },
    /// A value of the wrong type or shape: what was expected and what was found.
    Invalid(String),
    /// A domain rule's own message (it names its key itself).
    Rule(String),
}

/// One mistake in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileError {
    path: Vec<Segment>,
    problem: Problem,
}

impl FileError {
    fn rule(message: String) -> Self {
        Self {
            path: Vec::new(),
            problem: Problem::Rule(message),
        }
    }

    fn unknown(path: Vec<Segment>, key: &str, known: &[&str], value: &toml::Value) -> Self {
        let mut path = path;
        path.push(Segment::Key(key.to_owned()));
        let table = match value {
            toml::Value::Table(_) => Some("[]"),
            toml::Value::Array(items)
                if !items.is_empty() && items.iter().all(|i| i.is_table()) =>
            {
                Some("[[]]")
            }
            _ => None,
        };
        Self {
            path,
            problem: Problem::Unknown {
                suggestion: closest(key, known).map(str::to_owned),
                known: known.iter().map(|k| (*k).to_owned()).collect(),
                table,
            },
        }
    }

    /// The key path, as it reads in the file: `dispatch.max_concurrent`, `repos."acme/api".base`.
    pub fn key(&self) -> String {
        dotted(&self.path)
    }
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.problem {
            Problem::Rule(message) => f.write_str(message),
            Problem::Invalid(message) => write!(f, "{}: {message}", location(&self.path)),
            Problem::Unknown {
                suggestion,
                known,
                table: Some(brackets),
            } => {
                let (open, close) = brackets.split_at(brackets.len() / 2);
                write!(f, "{open}{}{close}: unknown table", dotted(&self.path))?;
                match suggestion {
                    Some(s) => {
                        let mut parent = self.path.clone();
                        parent.pop();
                        parent.push(Segment::Key(s.clone()));
                        write!(f, "; did you mean {open}{}{close}?", dotted(&parent))
                    }
                    None => write!(f, " (known: {})", known.join(", ")),
                }
            }
            Problem::Unknown {
                suggestion,
                known,
                table: None,
            } => {
                let at = match self.path.as_slice() {
                    [top] => dotted(std::slice::from_ref(top)),
                    path => location(path),
                };
                write!(f, "{at}: unknown key")?;
                match suggestion {
                    Some(s) => write!(f, "; did you mean {s}?"),
                    None => write!(f, " (known: {})", known.join(", ")),
                }
            }
        }
    }
}

/// Every mistake found, one a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileErrors(pub Vec<FileError>);

impl fmt::Display for FileErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for FileErrors {}

/// The known key closest to `key`, if one is close enough to be what was meant (a typo, a missing `s`, `_s`).
fn closest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    let key = key.to_ascii_lowercase();
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(&key, k), *k))
        .filter(|(distance, k)| *distance <= (k.len() / 3).clamp(1, 3))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, k)| k)
}

fn bare(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn key_text(key: &str) -> String {
    if bare(key) {
        key.to_owned()
    } else {
        format!("{key:?}")
    }
}

/// `dispatch`, `repos."acme/api"`, `schedules[0].task`.
fn dotted(path: &[Segment]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&key_text(key));
            }
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// `[dispatch] max_concurrent`, `[intake] allow_repos[0]`, `[dispatch]` (a top-level key: all are tables).
fn location(path: &[Segment]) -> String {
    let Some(last_key) = path.iter().rposition(|s| matches!(s, Segment::Key(_))) else {
        return "the file".to_owned();
    };
    let (table, key) = path.split_at(last_key);
    if path.len() == 1 {
        // Every top-level key is a table.
        format!("[{}]", dotted(key))
    } else if table.is_empty() {
        dotted(key)
    } else {
        format!("[{}] {}", dotted(table), dotted(key))
    }
}

/// Takes the value at `path` out, so the next reading goes past it. A bad array element takes its whole array
/// (removing one element would renumber the others' errors). False when there is nothing to take.
fn remove(root: &mut toml::Value, path: &[Segment]) -> bool {
    let Some(last_key) = path.iter().rposition(|s| matches!(s, Segment::Key(_))) else {
        return false;
    };
    let Segment::Key(key) = &path[last_key] else {
        return false;
    };
    let mut node = root;
    for segment in &path[..last_key] {
        node = match (segment, node) {
            (Segment::Key(k), toml::Value::Table(t)) => match t.get_mut(k) {
                Some(next) => next,
                None => return false,
            },
            (Segment::Index(i), toml::Value::Array(a)) => match a.get_mut(*i) {
                Some(next) => next,
                None => return false,
            },
            _ => return false,
        };
    }
    match node {
        toml::Value::Table(t) => t.remove(key).is_some(),
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The deserializer: toml::Value in, with the path of every value and each struct's known keys.
// ---------------------------------------------------------------------------------------------------------------

/// Unknown keys found on the way (they do not stop the reading).
type Sink = RefCell<Vec<FileError>>;

#[derive(Debug)]
struct DeError {
    /// Set by the innermost value the error passes through: where it happened.
    path: Option<Vec<Segment>>,
    problem: Problem,
}

impl DeError {
    fn at(mut self, path: &[Segment]) -> Self {
        if self.path.is_none() {
            self.path = Some(path.to_vec());
        }
        self
    }

    fn into_file_error(self) -> FileError {
        FileError {
            path: self.path.unwrap_or_default(),
            problem: self.problem,
        }
    }

    fn invalid(message: String) -> Self {
        Self {
            path: None,
            problem: Problem::Invalid(message),
        }
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let error = FileError {
            path: self.path.clone().unwrap_or_default(),
            problem: self.problem.clone(),
        };
        error.fmt(f)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(message: T) -> Self {
        Self::invalid(message.to_string())
    }

    fn invalid_type(found: de::Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Self::invalid(format!(
            "expected {}, found {}",
            expected_text(&expected.to_string()),
            found_text(&found)
        ))
    }

    fn invalid_value(found: de::Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Self::invalid_type(found, expected)
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        Self::invalid(format!("expected {}, found {variant:?}", one_of(expected)))
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        // Not reached through `ValueDe` (it filters unknown keys into the sink first); kept exact for any other.
        Self {
            path: None,
            problem: Problem::Unknown {
                suggestion: closest(field, expected).map(str::to_owned),
                known: expected.iter().map(|k| (*k).to_owned()).collect(),
                table: None,
            },
        }
    }

    fn missing_field(field: &'static str) -> Self {
        Self::invalid(format!("{field} is missing"))
    }
}

fn one_of(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    match quoted.split_last() {
        None => "nothing".to_owned(),
        Some((only, [])) => only.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// serde's names for what it wanted, in the file's words.
fn expected_text(expected: &str) -> String {
    match expected {
        "a boolean" => "true or false".to_owned(),
        "a string" | "a borrowed string" => "a string".to_owned(),
        "a sequence" => "a list".to_owned(),
        "f32" | "f64" => "a number".to_owned(),
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number".to_owned(),
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number, 0 or more".to_owned(),
        other if other.starts_with("struct ") || other.starts_with("a map") => "a table".to_owned(),
        other => other.to_owned(),
    }
}

fn found_text(found: &de::Unexpected<'_>) -> String {
    match found {
        de::Unexpected::Bool(b) => b.to_string(),
        de::Unexpected::Signed(i) => format!("the whole number {i}"),
        de::Unexpected::Unsigned(u) => format!("the whole number {u}"),
        de::Unexpected::Float(x) => format!("the number {x}"),
        de::Unexpected::Str(s) => format!("the string {s:?}"),
        de::Unexpected::Seq => "a list".to_owned(),
        de::Unexpected::Map => "a table".to_owned(),
        other => other.to_string(),
    }
}

fn unexpected(value: &toml::Value) -> de::Unexpected<'_> {
    match value {
        toml::Value::String(s) => de::Unexpected::Str(s),
        toml::Value::Integer(i) => de::Unexpected::Signed(*i),
        toml::Value::Float(x) => de::Unexpected::Float(*x),
        toml::Value::Boolean(b) => de::Unexpected::Bool(*b),
        toml::Value::Datetime(_) => de::Unexpected::Other("a date or time"),
        toml::Value::Array(_) => de::Unexpected::Seq,
        toml::Value::Table(_) => de::Unexpected::Map,
    }
}

struct ValueDe<'a> {
    value: &'a toml::Value,
    path: Vec<Segment>,
    sink: &'a Sink,
}

impl<'de> Deserializer<'de> for ValueDe<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let ValueDe { value, path, sink } = self;
        let result = match value {
            toml::Value::String(s) => visitor.visit_str(s),
            toml::Value::Integer(i) => visitor.visit_i64(*i),
            toml::Value::Float(x) => visitor.visit_f64(*x),
            toml::Value::Boolean(b) => visitor.visit_bool(*b),
            // No key takes a date: TOML's unquoted times (`time = 09:00:00`) would otherwise slip through.
            toml::Value::Datetime(_) => Err(de::Error::invalid_type(unexpected(value), &visitor)),
            toml::Value::Array(items) => visitor.visit_seq(SeqDe {
                items: items.iter().enumerate(),
                path: &path,
                sink,
            }),
            toml::Value::Table(table) => visitor.visit_map(MapDe {
                entries: table.iter().collect::<Vec<_>>().into_iter(),
                current: None,
                path: &path,
                sink,
            }),
        };
        result.map_err(|e| e.at(&path))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        // A key that is there is `Some`; an absent one never reaches the deserializer.
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let result = match self.value {
            toml::Value::String(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            other => Err(DeError::invalid(format!(
                "expected {}, found {}",
                one_of(variants),
                found_text(&unexpected(other))
            ))),
        };
        result.map_err(|e| e.at(&self.path))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let toml::Value::Table(table) = self.value else {
            return self.deserialize_any(visitor);
        };
        let mut known = Vec::new();
        for (key, value) in table {
            if fields.contains(&key.as_str()) {
                known.push((key, value));
            } else {
                self.sink.borrow_mut().push(FileError::unknown(
                    self.path.clone(),
                    key,
                    fields,
                    value,
                ));
            }
        }
        visitor
            .visit_map(MapDe {
                entries: known.into_iter(),
                current: None,
                path: &self.path,
                sink: self.sink,
            })
            .map_err(|e| e.at(&self.path))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit unit_struct
        seq tuple tuple_struct map identifier ignored_any
    }
}

struct MapDe<'a, 'p> {
    entries: std::vec::IntoIter<(&'a String, &'a toml::Value)>,
    current: Option<(&'a String, &'a toml::Value)>,
    path: &'p [Segment],
    sink: &'a Sink,
}

impl MapDe<'_, '_> {
    fn child(&self, key: &str) -> Vec<Segment> {
        let mut path = self.path.to_vec();
        path.push(Segment::Key(key.to_owned()));
        path
    }
}

impl<'de> MapAccess<'de> for MapDe<'_, '_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.current = Some((key, value));
        let deserializer: de::value::StrDeserializer<'_, DeError> =
            key.as_str().into_deserializer();
        seed.deserialize(deserializer)
            .map(Some)
            .map_err(|e| e.at(&self.child(key)))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let Some((key, value)) = self.current.take() else {
            return Err(DeError::invalid(
                "a value asked for before its key".to_owned(),
            ));
        };
        seed.deserialize(ValueDe {
            value,
            path: self.child(key),
            sink: self.sink,
        })
    }
}

struct SeqDe<'a, 'p> {
    items: std::iter::Enumerate<std::slice::Iter<'a, toml::Value>>,
    path: &'p [Segment],
    sink: &'a Sink,
}

impl<'de> SeqAccess<'de> for SeqDe<'_, '_> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        let Some((i, value)) = self.items.next() else {
            return Ok(None);
        };
        let mut path = self.path.to_vec();
        path.push(Segment::Index(i));
        seed.deserialize(ValueDe {
            value,
            path,
            sink: self.sink,
        })
        .map(Some)
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Each table's keys, from serde itself (for the documentation test and `config check`).
// ---------------------------------------------------------------------------------------------------------------

/// The keys a struct accepts: the field list serde hands to `deserialize_struct`, caught by a deserializer that
/// does nothing else.
pub fn keys_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    struct Probe;
    #[derive(Debug)]
    struct Fields(&'static [&'static str]);
    impl fmt::Display for Fields {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a probe for field names")
        }
    }
    impl std::error::Error for Fields {}
    impl de::Error for Fields {
        fn custom<M: fmt::Display>(_: M) -> Self {
            Fields(&[])
        }
    }
    impl<'de> Deserializer<'de> for Probe {
        type Error = Fields;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Fields> {
            Err(Fields(&[]))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Fields> {
            Err(Fields(fields))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    match T::deserialize(Probe) {
        Err(Fields(fields)) => fields,
        Ok(_) => &[],
    }
}

/// Every table of the file: its header as written in the docs, and its keys (sub-tables excluded; they are
/// tables of their own). `docs/configuration.md` documents exactly these.
pub fn schema() -> Vec<(&'static str, Vec<&'static str>)> {
    let without = |keys: &'static [&'static str], tables: &[&str]| -> Vec<&'static str> {
        keys.iter()
            .copied()
            .filter(|k| !tables.contains(k))
            .collect()
    };
    vec![
        ("[board]", keys_of::<BoardTable>().to_vec()),
        ("[repos.\"owner/name\"]", keys_of::<RepoTable>().to_vec()),
        (
            "[intake]",
            without(keys_of::<IntakeTable>(), &["github", "linear"]),
        ),
        ("[intake.github]", keys_of::<IntakeGithubTable>().to_vec()),
        (
            "[intake.linear]",
            without(keys_of::<IntakeLinearTable>(), &["teams"]),
        ),
        ("[dispatch]", keys_of::<DispatchTable>().to_vec()),
        ("[agents.<name>]", keys_of::<AgentTable>().to_vec()),
        (
            "[[schedules]]",
            without(keys_of::<ScheduleTable>(), &["task"]),
        ),
        ("[schedules.task]", keys_of::<ScheduleTaskTable>().to_vec()),
        ("[digest]", keys_of::<DigestTable>().to_vec()),
        ("[linear.states]", keys_of::<LinearStatesTable>().to_vec()),
        ("[telegram]", keys_of::<TelegramTable>().to_vec()),
        ("[pollers.<name>]", keys_of::<PollerTable>().to_vec()),
        ("[loops.<name>]", keys_of::<LoopTable>().to_vec()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> String {
        text.parse::<FileConfig>()
            .expect_err("a refused file")
            .to_string()
    }

    #[test]
    fn an_unknown_key_in_any_table_is_refused_with_the_closest_known_one() {
        for (text, refusal) in [
            (
                "[dispatch]\nmax_concurent = 4",
                "[dispatch] max_concurent: unknown key; did you mean max_concurrent?",
            ),
            (
                "[board]\nmax_attemps = 5",
                "[board] max_attemps: unknown key; did you mean max_attempts?",
            ),
            (
                "[repos.\"acme/api\"]\nbse = \"main\"",
                "[repos.\"acme/api\"] bse: unknown key; did you mean base?",
            ),
            (
                "[intake]\ndefault_rep = \"acme/api\"",
                "[intake] default_rep: unknown key; did you mean default_repo?",
            ),
            (
                "[intake.github]\nbot_logn = \"x\"",
                "[intake.github] bot_logn: unknown key; did you mean bot_login?",
            ),
            (
                "[intake.linear]\nskip_label = [\"x\"]",
                "[intake.linear] skip_label: unknown key; did you mean skip_labels?",
            ),
            (
                "[agents.mine]\ncommand = [\"a\", \"{prompt}\"]\ntimeout = 5",
                "[agents.mine] timeout: unknown key; did you mean timeout_s?",
            ),
            (
                "[[schedules]]\nname = \"s\"\ncron = \"* * * * *\"\ndigest = true\ntimezon = \"UTC\"",
                "[schedules[0]] timezon: unknown key; did you mean timezone?",
            ),
            (
                "[[schedules]]\nname = \"s\"\ncron = \"* * * * *\"\n[schedules.task]\nrepo = \"a/b\"\ntask = \"t\"\ndone-when = \"x\"",
                "[schedules[0].task] done-when: unknown key; did you mean done_when?",
            ),
            (
                "[digest]\ntimezne = \"UTC\"",
                "[digest] timezne: unknown key; did you mean timezone?",
            ),
            (
                "[linear]\nstate = {}",
                "[linear.state]: unknown table; did you mean [linear.states]?",
            ),
            (
                "[linear.states]\nreview = \"In Review\"",
                "[linear.states] review: unknown key; did you mean in_review?",
            ),
            (
                "[linear.states]\ncancelled = \"Cancelled\"",
                "[linear.states] cancelled: unknown key (known: in_progress, in_review, done, blocked)",
            ),
            (
                "[telegram]\ncooldown = 60",
                "[telegram] cooldown: unknown key; did you mean cooldown_s?",
            ),
            (
                "[pollers.gitlab]\ninterval_s = 60",
                "[pollers.gitlab]: unknown table; did you mean [pollers.github]?",
            ),
            (
                "[pollers.linear]\nenable = false",
                "[pollers.linear] enable: unknown key; did you mean enabled?",
            ),
            (
                "[loops.cron]\nfail_after = 5",
                "[loops.cron] fail_after: unknown key; did you mean fail_after_s?",
            ),
            (
                "[dispach]\nenabled = true",
                "[dispach]: unknown table; did you mean [dispatch]?",
            ),
            (
                "[[schedule]]\nname = \"s\"",
                "[[schedule]]: unknown table; did you mean [[schedules]]?",
            ),
            (
                "verbose = true",
                "verbose: unknown key (known: board, repos, intake, dispatch, agents, schedules, digest, linear, \
                 telegram, pollers, loops)",
            ),
        ] {
            assert_eq!(errors(text), refusal, "{text}");
        }
    }

    #[test]
    fn a_bad_value_names_its_key_and_what_was_expected() {
        for (text, refusal) in [
            (
                "[board]\nmax_attempts = \"five\"",
                "[board] max_attempts: expected a whole number, found the string \"five\"",
            ),
            (
                "[board]\napproval = \"maybe\"",
                "[board] approval: expected \"auto\" or \"manual\", found \"maybe\"",
            ),
            (
                "[dispatch]\nheartbeat_s = \"30s\"",
                "[dispatch] heartbeat_s: expected a number, found the string \"30s\"",
            ),
            (
                "[dispatch]\nreadable = [\"/opt\", 3]",
                "[dispatch] readable[1]: expected a string, found the whole number 3",
            ),
            (
                "[repos.\"acme/api\"]\nmax_concurrent = 1.5",
                "[repos.\"acme/api\"] max_concurrent: expected a whole number, found the number 1.5",
            ),
            (
                "[digest]\ntime = 09:00:00",
                "[digest] time: expected a string, found a date or time",
            ),
            (
                "[intake.linear.teams]\nENG = 3",
                "[intake.linear.teams] ENG: expected a string, found the whole number 3",
            ),
            ("repos = 3", "[repos]: expected a table, found the whole number 3"),
            // The rules of the domain keep their own words, which name the key too.
            (
                "[dispatch]\nmax_concurrent = 0",
                "dispatch.max_concurrent must be a whole number from 1 to 1000",
            ),
            (
                "[board]\nmax_attempts = 101",
                "board.max_attempts: max attempts 101 is outside 1..=100",
            ),
        ] {
            assert_eq!(errors(text), refusal, "{text}");
        }
    }

    #[test]
    fn every_mistake_is_reported_at_once() {
        let all = errors(
            "[dispatch]\nmax_concurent = 4\nheartbeat_s = \"x\"\nexecutor = \"cloud\"\n\
             [board]\nmax_attemps = 5\napproval = 3\n\
             [pollers.linear]\nenabled = \"no\"\n",
        );
        let lines: Vec<&str> = all.lines().collect();
        assert_eq!(
            lines,
            [
                "[board] approval: expected \"auto\" or \"manual\", found the whole number 3",
                "[board] max_attemps: unknown key; did you mean max_attempts?",
                "[dispatch] executor: expected \"local\" or \"workers\", found \"cloud\"",
                "[dispatch] heartbeat_s: expected a number, found the string \"x\"",
                "[dispatch] max_concurent: unknown key; did you mean max_concurrent?",
                "[pollers.linear] enabled: expected true or false, found the string \"no\"",
            ]
        );
        // Rules are checked once the shapes are right, each table's on its own.
        let rules = errors(
            "[dispatch]\nmax_concurrent = 0\n[telegram]\ncooldown_s = -1\n[repos.\"acme/api\"]\nbase = \"-x\"",
        );
        assert_eq!(
            rules.lines().collect::<Vec<_>>(),
            [
                "dispatch.max_concurrent must be a whole number from 1 to 1000",
                "telegram.cooldown_s must be a whole number of seconds from 0 to 86400",
            ]
        );
    }

    #[test]
    fn the_empty_file_is_every_default() {
        let file = FileConfig::default();
        assert_eq!(file.tables(), &Tables::default());
        assert_eq!(file.board, BoardConfig::default());
        assert_eq!(file.intake, IntakeConfig::default());
        assert_eq!(file.linear_states, LinearStates::default());
        assert_eq!(file.telegram_cooldown, chrono::Duration::minutes(10));
        assert!(file.schedules.is_empty());
        assert!(file
            .dispatch
            .off
            .as_deref()
            .unwrap()
            .contains("no [dispatch]"));
        assert_eq!(file.profiles.default_profile().name, "claude");
        for (poller, interval) in [
            (&file.linear_poller, crate::pollers::LINEAR_INTERVAL),
            (&file.github_poller, crate::pollers::GITHUB_INTERVAL),
        ] {
            assert!(!poller.configured && poller.enabled);
            assert_eq!(poller.interval, interval);
        }
        // An empty [dispatch] runs with the same values a missing one would have.
        let on = "[dispatch]".parse::<FileConfig>().unwrap().dispatch;
        assert_eq!(on.off, None);
        assert_eq!(
            DispatchConfig {
                off: file.dispatch.off.clone(),
                ..on
            },
            file.dispatch
        );
    }

    #[test]
    fn fractional_seconds_are_accepted_where_documented() {
        let file = "[dispatch]\nheartbeat_s = 0.25\nretry_backoff_s = 0.05\nworktree_ttl_h = 1.5\n\
                    [pollers.github]\ninterval_s = 0.5"
            .parse::<FileConfig>()
            .unwrap();
        assert_eq!(
            file.dispatch.heartbeat,
            std::time::Duration::from_millis(250)
        );
        assert_eq!(
            file.dispatch.retry_backoff,
            std::time::Duration::from_millis(50)
        );
        assert_eq!(
            file.dispatch.worktree_ttl,
            std::time::Duration::from_secs(5400)
        );
        assert_eq!(
            file.github_poller.interval,
            std::time::Duration::from_millis(500)
        );
        // Whole numbers are numbers too.
        let whole = "[dispatch]\nheartbeat_s = 2".parse::<FileConfig>().unwrap();
        assert_eq!(whole.dispatch.heartbeat, std::time::Duration::from_secs(2));
    }

    #[test]
    fn the_effective_configuration_is_a_valid_file_that_means_the_same() {
        let file = r#"
            [dispatch]
            max_concurrent = 3
            [repos."acme/api"]
            max_concurrent = 2
            [agents.mine]
            command = ["mine", "{prompt}"]
            [pollers.linear]
            [[schedules]]
            name = "friday"
            cron = "0 16 * * FRI"
            digest = true
            [linear.states]
            done = "Closed"
        "#
        .parse::<FileConfig>()
        .unwrap();
        let effective = file.tables().effective();
        let text = toml::to_string(&effective).unwrap();
        let again = text.parse::<FileConfig>().unwrap();
        assert_eq!(again.tables().effective(), effective, "{text}");
        assert_eq!(again.dispatch, file.dispatch);
        assert_eq!(again.profiles, file.profiles);
        assert_eq!(again.board, file.board);
        assert_eq!(again.linear_poller, file.linear_poller);
        assert_eq!(again.linear_states.done, ["Closed"]);
        assert!(text.contains("[agents.claude]"), "{text}");
        assert!(text.contains("interval_s = 300.0"), "{text}");
    }

    #[test]
    fn keys_come_from_serde_itself() {
        assert_eq!(keys_of::<BoardTable>(), ["approval", "max_attempts"]);
        assert_eq!(keys_of::<PollersTable>(), ["linear", "github"]);
        assert_eq!(keys_of::<LinearTable>(), ["states"]);
    }

    // -- docs/configuration.md is held to the structs ---------------------------------------------------------

    const DOC: &str = include_str!("../../docs/configuration.md");

    /// Each `## \`[table]\`` heading of the doc with the keys its table lists (`| \`key\` | type | default |`).
    fn documented() -> Vec<(String, Vec<(String, String)>)> {
        let mut sections: Vec<(String, Vec<(String, String)>)> = Vec::new();
        for line in DOC.lines() {
            if let Some(heading) = line
                .strip_prefix("## `")
                .and_then(|rest| rest.strip_suffix('`'))
            {
                sections.push((heading.to_owned(), Vec::new()));
            } else if let (Some(row), Some((_, keys))) =
                (line.strip_prefix("| `"), sections.last_mut())
            {
                let cells: Vec<&str> = row.split(" | ").collect();
                let key = cells[0].trim_end_matches('`').to_owned();
                keys.push((key, cells.get(2).copied().unwrap_or_default().to_owned()));
            }
        }
        sections
    }

    #[test]
    fn the_documentation_lists_every_key_of_every_table_and_no_other() {
        let documented = documented();
        let schema = schema();
        for (heading, keys) in &schema {
            let Some((_, rows)) = documented.iter().find(|(h, _)| h == heading) else {
                panic!("docs/configuration.md has no section ## `{heading}`");
            };
            let doc_keys: Vec<&str> = rows.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(
                &doc_keys, keys,
                "the keys of {heading}, in the structs' order"
            );
        }
        for (heading, rows) in &documented {
            assert!(
                rows.is_empty() || schema.iter().any(|(h, _)| h == heading),
                "docs/configuration.md documents {heading}, which no struct reads"
            );
        }
        // Every top-level table has a section (`[linear]` and `[pollers]` through their sub-tables).
        let headings: Vec<&str> = documented.iter().map(|(h, _)| h.as_str()).collect();
        for table in keys_of::<Tables>() {
            assert!(
                headings
                    .iter()
                    .any(|h| h.trim_start_matches('[').starts_with(table)),
                "docs/configuration.md has no section for [{table}]"
            );
        }
        assert!(headings.contains(&"[intake.linear.teams]"));
        for poller in keys_of::<PollersTable>() {
            assert!(
                DOC.contains(&format!("`[pollers.{poller}]`")),
                "[pollers.{poller}]"
            );
        }
    }

    #[test]
    fn the_documented_defaults_are_the_defaults() {
        fn value<T: Serialize>(table: T) -> toml::Table {
            toml::Table::try_from(table).unwrap()
        }
        let defaults: Vec<(&str, toml::Table)> = vec![
            ("[board]", value(BoardTable::default())),
            ("[repos.\"owner/name\"]", value(RepoTable::default())),
            ("[intake]", value(IntakeTable::default())),
            ("[intake.github]", value(IntakeGithubTable::default())),
            ("[intake.linear]", value(IntakeLinearTable::default())),
            ("[dispatch]", value(DispatchTable::default())),
            ("[agents.<name>]", value(AgentTable::default())),
            ("[[schedules]]", value(ScheduleTable::default())),
            ("[schedules.task]", value(ScheduleTaskTable::default())),
            ("[digest]", value(DigestTable::default())),
            ("[linear.states]", value(LinearStatesTable::default())),
            ("[telegram]", value(TelegramTable::default())),
            ("[pollers.<name>]", value(PollerTable::default())),
            ("[loops.<name>]", value(LoopTable::default())),
        ];
        let mut checked = 0;
        for (heading, rows) in documented() {
            let Some((_, table)) = defaults.iter().find(|(h, _)| *h == heading) else {
                continue;
            };
            for (key, default) in rows {
                // Only a default written as one TOML value (`"manual"`, `3`, `[]`); not "unset" or another key.
                let Some(literal) = default
                    .strip_prefix('`')
                    .and_then(|d| d.strip_suffix('`'))
                    .filter(|d| !d.contains('`'))
                else {
                    continue;
                };
                let Ok(parsed) = format!("v = {literal}").parse::<toml::Table>() else {
                    continue;
                };
                // A key the struct leaves unset falls back to something else (`base`: "main" in the dispatcher).
                let Some(actual) = table.get(&key) else {
                    continue;
                };
                let same = match (&parsed["v"], actual) {
                    (toml::Value::Integer(d), toml::Value::Float(a)) => *d as f64 == *a,
                    (d, a) => d == a,
                };
                assert!(
                    same,
                    "{heading} {key}: documented default {literal}, the struct's {actual:?}"
                );
                checked += 1;
            }
        }
        assert!(checked >= 30, "only {checked} defaults were checked");
    }

    #[test]
    fn every_toml_example_in_the_docs_uses_known_keys_of_the_right_types() {
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
        let mut checked = 0;
        for entry in std::fs::read_dir(&docs).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|ext| ext != "md") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for block in text.split("```toml\n").skip(1) {
                let block = block.split("```").next().unwrap_or_default();
                let table: toml::Table = block
                    .parse()
                    .unwrap_or_else(|e| panic!("{}: not TOML: {e}\n{block}", path.display()));
                if let Err(errors) = Tables::from_table(&table) {
                    panic!(
                        "{}: an example pidevops.toml is refused:\n{}\n{block}",
                        path.display(),
                        FileErrors(errors)
                    );
                }
                checked += 1;
            }
        }
        assert!(checked >= 10, "only {checked} examples found");
    }

    #[test]
    fn the_documented_complete_file_is_accepted_and_sets_every_key() {
        let example = DOC
            .split("## A complete file")
            .nth(1)
            .and_then(|rest| rest.split("```toml\n").nth(1))
            .and_then(|rest| rest.split("```").next())
            .expect("a ```toml block under ## A complete file");
        let file: FileConfig = example.parse().unwrap_or_else(|e| panic!("{e}"));
        let table: toml::Table = example.parse().unwrap();
        let first = |value: &toml::Value| -> toml::Table {
            match value {
                toml::Value::Table(t) => t.values().next().and_then(|v| v.as_table()).cloned(),
                toml::Value::Array(a) => a.first().and_then(|v| v.as_table()).cloned(),
                _ => None,
            }
            .unwrap_or_default()
        };
        let at = |path: &[&str]| -> toml::Table {
            let mut node = table.clone();
            for key in path {
                node = node
                    .get(*key)
                    .and_then(|v| v.as_table())
                    .cloned()
                    .unwrap_or_default();
            }
            node
        };
        let schedule = first(&table["schedules"]);
        let tables: Vec<(&str, toml::Table)> = vec![
            ("[board]", at(&["board"])),
            ("[repos.\"owner/name\"]", first(&table["repos"])),
            ("[intake]", at(&["intake"])),
            ("[intake.github]", at(&["intake", "github"])),
            ("[intake.linear]", at(&["intake", "linear"])),
            ("[dispatch]", at(&["dispatch"])),
            ("[agents.<name>]", first(&table["agents"])),
            ("[[schedules]]", schedule.clone()),
            (
                "[schedules.task]",
                schedule
                    .get("task")
                    .and_then(|t| t.as_table())
                    .cloned()
                    .unwrap_or_default(),
            ),
            ("[digest]", at(&["digest"])),
            ("[linear.states]", at(&["linear", "states"])),
            ("[telegram]", at(&["telegram"])),
            ("[pollers.<name>]", at(&["pollers", "linear"])),
            ("[loops.<name>]", first(&table["loops"])),
        ];
        for (heading, keys) in schema() {
            let (_, written) = tables
                .iter()
                .find(|(h, _)| *h == heading)
                .expect("every table of the schema is looked up");
            for key in keys {
                assert!(
                    written.contains_key(key),
                    "the complete file lacks {heading} {key}"
                );
            }
        }
        assert_eq!(file.schedules.len(), 2, "weekly-deps and the daily digest");
    }
}
