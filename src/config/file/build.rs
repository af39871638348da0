//! The checked file: the tables and the domain values, built once (each area's by its own file here: `board.rs`,
//! `budgets.rs`, `cron.rs`, `effects.rs`, `intake.rs`, `pollers.rs`; `[dispatch]`, `[agents.*]` and `[plans]` by
//! `config/dispatch.rs`, `profiles.rs`, `plans.rs`), so nothing below config reads the tables.

use super::*;
use super::{board, cron, effects, intake, pollers};

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
    /// `[effects] max_per_task_per_hour`: the cap on a task's outbound calls.
    pub effect_cap: crate::effects::cap::EffectCap,
    pub linear_poller: PollerConfig,
    pub github_poller: PollerConfig,
    pub gitlab_poller: PollerConfig,
    /// `[loops.<name>] fail_after_s`: stale thresholds by loop name (checked against the loop plan at start).
    pub loop_fail_after: BTreeMap<String, std::time::Duration>,
    /// `[plans]`.
    pub plans: crate::config::plans::PlansConfig,
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
        let board = keep(&mut errors, board::board_config(&tables));
        let dispatch = keep(&mut errors, DispatchConfig::from_tables(&tables));
        let profiles = keep(&mut errors, Profiles::from_tables(&tables));
        let intake = keep(&mut errors, intake::intake_config(&tables));
        let schedules = keep(&mut errors, cron::schedules(&tables));
        let linear_states = keep(&mut errors, effects::linear_states(&tables));
        let telegram_cooldown = keep(&mut errors, effects::telegram_cooldown(&tables));
        let effect_cap = keep(&mut errors, effects::effect_cap(&tables));
        let linear_poller = keep(
            &mut errors,
            pollers::poller_config(
                tables.pollers.linear.as_ref(),
                "linear",
                crate::pollers::LINEAR_INTERVAL,
            ),
        );
        let github_poller = keep(
            &mut errors,
            pollers::poller_config(
                tables.pollers.github.as_ref(),
                "github",
                crate::pollers::GITHUB_INTERVAL,
            ),
        );
        let gitlab_poller = keep(
            &mut errors,
            pollers::poller_config(
                tables.pollers.gitlab.as_ref(),
                "gitlab",
                crate::pollers::GITLAB_INTERVAL,
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
        let plans = keep(
            &mut errors,
            crate::config::plans::PlansConfig::from_tables(&tables),
        );
        match (
            plans,
            board,
            dispatch,
            profiles,
            intake,
            schedules,
            linear_states,
            telegram_cooldown,
            effect_cap,
            linear_poller,
            github_poller,
            gitlab_poller,
            loop_fail_after,
        ) {
            (
                Some(plans),
                Some(board),
                Some(dispatch),
                Some(profiles),
                Some(intake),
                Some(schedules),
                Some(linear_states),
                Some(telegram_cooldown),
                Some(effect_cap),
                Some(linear_poller),
                Some(github_poller),
                Some(gitlab_poller),
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
                effect_cap,
                linear_poller,
                github_poller,
                gitlab_poller,
                loop_fail_after,
                plans,
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
