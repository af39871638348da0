//! Budgets: what runs may spend (`[budgets]`), per task, per repository per UTC day and overall per UTC day.
//! Checked before a task starts (the dispatcher starts nothing in a scope over its limit) and watched while its
//! agent runs (the attempt stops the agent the moment its streamed usage takes a scope over). A person raises a
//! limit with an event (`budget.raised` in the stream `budget`), like every other decision: the API, the CLI.
//!
//! What has been spent is the `usage` read model's; the limit in force is the configured one plus the raises of
//! that scope. A day's scopes end with the day (UTC): the next day starts from nothing.
//!
//! Fail closed: a run whose usage figures were refused (out of bounds, not numbers) spent an unknown amount, so a
//! scope that holds one is over its limit, whatever else it spent, until a person raises that scope's limit (a
//! raise recorded after the run's outcome; a later refused run holds it again) or, for a day's scopes, the day
//! ends.

use anyhow::Context;
use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::usage::Usage;
use crate::eventlog::{EventStore, StoreError, StoredEvent};
use crate::projectors::usage as usage_rows;
use crate::tasks::TaskId;

mod ledger;
pub use ledger::{Ledger, LedgerKey};

/// A limit in money and/or tokens; unset parts do not limit.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Limit {
    pub usd: Option<f64>,
    pub tokens: Option<u64>,
}

impl Limit {
    pub fn is_set(&self) -> bool {
        self.usd.is_some() || self.tokens.is_some()
    }
}

/// `[budgets]`: the configured limits (config reads them); unset parts limit nothing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BudgetsConfig {
    pub task: Limit,
    pub repo_daily: Limit,
    pub daily: Limit,
    /// The fraction of a limit at which one notice goes out.
    pub soft_at: f64,
}

impl Default for BudgetsConfig {
    fn default() -> Self {
        Self {
            task: Limit::default(),
            repo_daily: Limit::default(),
            daily: Limit::default(),
            soft_at: 0.8,
        }
    }
}

impl BudgetsConfig {
    /// Whether any limit is set (none: nothing is checked, nothing is watched).
    pub fn any(&self) -> bool {
        self.task.is_set() || self.repo_daily.is_set() || self.daily.is_set()
    }
}

/// The stream of raises.
pub const STREAM: &str = "budget";
pub const RAISED: &str = "budget.raised";

/// What a limit applies to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Scope {
    /// One task, all its attempts, every day.
    Task { task: String },
    /// One repository, one UTC day (`YYYY-MM-DD`).
    Repo { repo: String, day: String },
    /// Every repository, one UTC day.
    Day { day: String },
}

impl Scope {
    pub fn task(task: TaskId) -> Self {
        Scope::Task {
            task: task.to_string(),
        }
    }

    pub fn repo(repo: &str, day: NaiveDate) -> Self {
        Scope::Repo {
            repo: repo.to_owned(),
            day: day.format("%Y-%m-%d").to_string(),
        }
    }

    pub fn day(day: NaiveDate) -> Self {
        Scope::Day {
            day: day.format("%Y-%m-%d").to_string(),
        }
    }

    /// What names it in a key: `task:T-1`, `repo:acme/api:2026-12-02`, `day:2026-12-02`.
    pub fn key(&self) -> String {
        match self {
            Scope::Task { task } => format!("task:{task}"),
            Scope::Repo { repo, day } => format!("repo:{repo}:{day}"),
            Scope::Day { day } => format!("day:{day}"),
        }
    }

    /// For a person.
    pub fn describe(&self) -> String {
        match self {
            Scope::Task { task } => format!("task {task}"),
            Scope::Repo { repo, day } => format!("{repo} on {day}"),
            Scope::Day { day } => format!("all repositories on {day}"),
        }
    }
}

/// A person's raise of one scope's limit (the body of `budget.raised`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Raised {
    pub at: DateTime<Utc>,
    pub scope: Scope,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Who raised it: `api`, `cli`, `dashboard`.
    pub by: String,
}

/// What a scope has spent, and its limit in force.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Standing {
    pub scope: Scope,
    pub spent_usd: f64,
    pub spent_tokens: u64,
    pub limit_usd: Option<f64>,
    pub limit_tokens: Option<u64>,
    /// The scope's runs whose usage figures were refused (all of them, raised since or not).
    pub refused_runs: u64,
    /// Whether a run whose usage figures were refused is on record after the scope's last raise: what it spent is
    /// unknown, so the scope is over its limit (fail closed) until a person raises it, or its day ends.
    pub figures_refused: bool,
}

impl Standing {
    /// Why the scope is over its limit, with what `running` (a run not yet recorded) adds: `None` while under.
    pub fn over(&self, running: &Usage) -> Option<String> {
        if self.figures_refused {
            let until = match self.scope {
                Scope::Task { .. } => "until a person raises it",
                Scope::Repo { .. } | Scope::Day { .. } => {
                    "until a person raises it or the day ends (UTC)"
                }
            };
            return Some(format!(
                "budget exceeded: usage figures refused for {}: a run printed figures out of bounds, so what it \
                 spent is unknown; held {until}",
                self.scope.describe()
            ));
        }
        let usd = self.spent_usd + running.cost_usd.unwrap_or(0.0);
        let tokens = self.spent_tokens.saturating_add(running.total_tokens());
        if let Some(limit) = self.limit_usd.filter(|limit| usd >= *limit) {
            return Some(format!(
                "budget exceeded: ${usd:.2} of ${limit:.2} for {}",
                self.scope.describe()
            ));
        }
        if let Some(limit) = self.limit_tokens.filter(|limit| tokens >= *limit) {
            return Some(format!(
                "budget exceeded: {tokens} of {limit} tokens for {}",
                self.scope.describe()
            ));
        }
        None
    }

    /// Whether the scope has reached `soft_at` of a limit (its one notice).
    pub fn soft(&self, soft_at: f64) -> bool {
        self.soft_with(&Usage::default(), soft_at)
    }

    /// Whether the scope, with what `running` (a run not yet recorded) adds, has reached `soft_at` of a limit.
    pub fn soft_with(&self, running: &Usage, soft_at: f64) -> bool {
        let usd = self.spent_usd + running.cost_usd.unwrap_or(0.0);
        let tokens = self.spent_tokens.saturating_add(running.total_tokens());
        self.limit_usd.is_some_and(|limit| usd >= limit * soft_at)
            || self
                .limit_tokens
                .is_some_and(|limit| tokens as f64 >= limit as f64 * soft_at)
    }

    /// The soft notice's words.
    pub fn soft_words(&self, soft_at: f64) -> String {
        format!(
            "{} has spent {:.0} % of a budget",
            self.scope.describe(),
            soft_at * 100.0
        )
    }
}

/// The limit in force: the configured one plus every raise of the same scope. A raise of a part the file leaves
/// unlimited limits nothing (there is nothing to raise).
pub fn in_force(configured: Limit, raises: &[Raised], scope: &Scope) -> Limit {
    let mut limit = configured;
    for raise in raises.iter().filter(|r| &r.scope == scope) {
        if let (Some(limit), Some(more)) = (limit.usd.as_mut(), raise.usd) {
            *limit += more;
        }
        if let (Some(limit), Some(more)) = (limit.tokens.as_mut(), raise.tokens) {
            *limit = limit.saturating_add(more);
        }
    }
    limit
}

/// A raise as a person asks for it (`POST /api/budgets/raise`, `pidevops budget raise`): a day's scopes are today's.
#[derive(Clone, Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RaiseRequest {
    /// `task`, `repo` or `day` (every repository, today).
    pub scope: String,
    /// With `scope = "task"`.
    #[serde(default)]
    pub task: Option<String>,
    /// With `scope = "repo"`: today's budget of this repository.
    #[serde(default)]
    pub repo: Option<String>,
    /// US dollars to add.
    #[serde(default)]
    pub usd: Option<f64>,
    /// Tokens to add.
    #[serde(default)]
    pub tokens: Option<u64>,
    /// Makes a retried request one raise, not two.
    #[serde(default)]
    pub request_id: Option<String>,
}

/// The raise `request` asks for, checked against the configuration: `Err` names what is wrong (nothing is
/// raised). A part the file leaves unlimited cannot be raised: there is nothing to raise.
pub fn raise_of_request(
    request: &RaiseRequest,
    config: &BudgetsConfig,
    today: NaiveDate,
    by: &str,
) -> Result<Raised, String> {
    if request.usd.is_none() && request.tokens.is_none() {
        return Err("name usd, tokens or both: how much to add".to_owned());
    }
    if let Some(usd) = request.usd.filter(|usd| !(usd.is_finite() && *usd > 0.0)) {
        return Err(format!("usd must be a positive number, not {usd}"));
    }
    if request.tokens == Some(0) {
        return Err("tokens must be at least 1".to_owned());
    }
    if let Some(id) = &request.request_id {
        if id.is_empty() || id.len() > 100 || !id.chars().all(|c| c.is_ascii_graphic()) {
            return Err("request_id must be 1 to 100 visible ASCII characters".to_owned());
        }
    }
    let (scope, configured, key) = match request.scope.as_str() {
        "task" => {
            let task: TaskId = request
                .task
                .as_deref()
                .ok_or("scope = \"task\" needs task (T-n)")?
                .parse()
                .map_err(|e| format!("task: {e}"))?;
            (Scope::task(task), config.task, "task")
        }
        "repo" => {
            let repo: crate::tasks::RepoName = request
                .repo
                .as_deref()
                .ok_or("scope = \"repo\" needs repo (owner/name)")?
                .parse()
                .map_err(|e| format!("repo: {e}"))?;
            (
                Scope::repo(repo.as_str(), today),
                config.repo_daily,
                "repo_daily",
            )
        }
        "day" => (Scope::day(today), config.daily, "daily"),
        other => return Err(format!("scope must be task, repo or day, not {other:?}")),
    };
    if request.usd.is_some() && configured.usd.is_none() {
        return Err(format!(
            "budgets.{key}_usd is not set: that budget has no limit in US dollars to raise"
        ));
    }
    if request.tokens.is_some() && configured.tokens.is_none() {
        return Err(format!(
            "budgets.{key}_tokens is not set: that budget has no limit in tokens to raise"
        ));
    }
    Ok(Raised {
        at: Utc::now(),
        scope,
        usd: request.usd,
        tokens: request.tokens,
        by: by.to_owned(),
    })
}

/// Appends a raise. `request` makes it idempotent (a retried request with the same id is one raise); without one
/// every call raises.
pub async fn raise(
    log: &crate::eventlog::EventLog,
    raised: &Raised,
    request: Option<&str>,
) -> anyhow::Result<bool> {
    use crate::domain::{EventType, NewEvent, Source};

    if raised.usd.is_none() && raised.tokens.is_none() {
        anyhow::bail!("a raise names US dollars, tokens or both");
    }
    if raised
        .usd
        .is_some_and(|usd| !(usd.is_finite() && usd > 0.0))
    {
        anyhow::bail!("a raise in US dollars must be a positive number");
    }
    if raised.tokens == Some(0) {
        anyhow::bail!("a raise in tokens must be at least 1");
    }
    let key = match request {
        Some(id) => format!("{STREAM}:raise:{id}"),
        None => format!("{STREAM}:raise:{}", uuid::Uuid::now_v7()),
    };
    let mut new = NewEvent::new(
        Source::Pidevops,
        EventType::from_stored(RAISED.to_owned()),
        key,
        "application/json",
        bytes::Bytes::from(serde_json::to_vec(raised)?),
    );
    new.meta.insert(
        "actor".to_owned(),
        serde_json::Value::from(raised.by.clone()),
    );
    let appended = log
        .append_at_end(STREAM, new)
        .await
        .context("recording the raise (try again)")?;
    Ok(!appended.duplicate)
}

/// The one notice a budget gets at each level (the body of `budget.notice`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Notice {
    pub at: DateTime<Utc>,
    /// `soft` (past `soft_at` of a limit) or `exceeded`.
    pub level: String,
    pub scope: Scope,
    /// What a person reads.
    pub words: String,
}

pub const NOTICE: &str = "budget.notice";

/// The key that makes a budget's notice at `level` once in the log, whoever appends it.
pub fn notice_key(level: &str, scope: &Scope) -> String {
    format!("{STREAM}:notice:{level}:{}", scope.key())
}

/// Records a budget's notice (once per budget and level: a second append is a duplicate). The Telegram policy
/// sends it to the bot's chats.
pub async fn notify(log: &crate::eventlog::EventLog, notice: &Notice) -> anyhow::Result<()> {
    use crate::domain::{EventType, NewEvent, Source};
    let new = NewEvent::new(
        Source::Pidevops,
        EventType::from_stored(NOTICE.to_owned()),
        notice_key(&notice.level, &notice.scope),
        "application/json",
        bytes::Bytes::from(serde_json::to_vec(notice)?),
    );
    log.append(new).await?;
    Ok(())
}

/// Every raise on record.
pub async fn raises(store: &EventStore) -> Result<Vec<Raised>, StoreError> {
    Ok(raises_on_record(store)
        .await?
        .into_iter()
        .map(|(_, raised)| raised)
        .collect())
}

/// Every raise on record, with its position in the log.
async fn raises_on_record(store: &EventStore) -> Result<Vec<(i64, Raised)>, StoreError> {
    let events = store.read_stream(STREAM).await?;
    Ok(events
        .iter()
        .filter_map(|e| Some((e.position, raise_of(e)?)))
        .collect())
}

fn raise_of(event: &StoredEvent) -> Option<Raised> {
    (event.event_type == RAISED)
        .then(|| serde_json::from_slice(&event.body).ok())
        .flatten()
}

/// Whether `spent` holds a run whose figures were refused after the last raise of `scope` (by log position: a
/// raise lifts what was on record before it, never what comes after).
fn refused_since_raise(spent: &usage_rows::Spent, raises: &[(i64, Raised)], scope: &Scope) -> bool {
    spent.refused_position.is_some_and(|refused| {
        !raises
            .iter()
            .any(|(at, raise)| *at > refused && &raise.scope == scope)
    })
}

/// What each scope of a task in `repo` has spent today and may spend (only scopes with a limit set).
pub async fn standings(
    store: &EventStore,
    config: &BudgetsConfig,
    task: TaskId,
    repo: &str,
    today: NaiveDate,
) -> Result<Vec<Standing>, StoreError> {
    Ledger::read(store, config, today)
        .await?
        .standings(store, config, task, repo)
        .await
}

/// A scope's standing from what its rows spent, its limit in force, and the raises on record (with positions).
fn standing(
    scope: Scope,
    spent: &usage_rows::Spent,
    limit: Limit,
    raises: &[(i64, Raised)],
) -> Standing {
    Standing {
        figures_refused: refused_since_raise(spent, raises, &scope),
        scope,
        spent_usd: spent.cost_usd,
        spent_tokens: u64::try_from(spent.tokens()).unwrap_or(0),
        limit_usd: limit.usd,
        limit_tokens: limit.tokens,
        refused_runs: u64::try_from(spent.refused_runs).unwrap_or(0),
    }
}

/// The first scope over its limit with `running` added, and why.
pub fn first_over(standings: &[Standing], running: &Usage) -> Option<(Scope, String)> {
    standings
        .iter()
        .find_map(|s| s.over(running).map(|why| (s.scope.clone(), why)))
}

#[cfg(test)]
mod tests;
