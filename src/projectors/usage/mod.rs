//! The `usage` read model: what agents spent, rolled up per UTC day, repository and profile (`usage_daily`) and
//! per task (`usage_tasks`), from the usage each run's outcome carries. `/api/usage`, `pidevops usage`, the
//! dashboard's spend page and `/metrics` read it; budgets (when they come) read it too.
//!
//! Each outcome adds to its rows once: the projector applies a batch and moves its checkpoint in one transaction.
//! A batch is rolled up in memory: each row its outcomes touch is read once and written once, the outcomes added in
//! log order, so the sums are the ones an upsert per outcome made (docs/benchmarks.md, "Usage roll-up").

use chrono::{DateTime, Duration, NaiveDate, Utc};
use futures::future::BoxFuture;
use serde::Serialize;
use sqlx::Row;

use super::{Bodies, Projector, ProjectorTx};
use crate::domain::runs::{RunEvent, RUN_STREAM_PREFIX};
use crate::domain::usage::RunUsage;
use crate::eventlog::{EventStore, StoreError, StoredEvent};
use crate::tasks::RepoName;

mod roll_up;
use roll_up::roll_up;

pub const NAME: &str = "usage";
const SOURCE: &str = "pidevops";

#[derive(Clone, Copy, Debug, Default)]
pub struct UsageProjector;

/// Totals of some runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Spent {
    pub runs: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    /// Over the runs whose CLI reported a cost (`costed_runs` of `runs`); Codex reports none.
    pub cost_usd: f64,
    pub costed_runs: i64,
    pub turns: i64,
    /// Runs whose usage figures were refused (out of bounds, not numbers): what they spent is unknown, so a budget
    /// whose scope holds one is over its limit until a person raises it (`budgets`).
    pub refused_runs: i64,
    /// The log position of the last of those runs' outcomes: a raise recorded after it lifts the hold.
    #[serde(skip)]
    pub refused_position: Option<i64>,
}

/// The most a stored count may hold: a row's sums stop here (saturate), so that SQL summing up to 2^15 rows
/// (a report, `/metrics`) stays within a bigint. At [`crate::domain::usage::MAX_TOKENS`] a run, that is 281,474
/// runs of a day, repository and profile at the bound.
pub const ROW_MAX_COUNT: i64 = 1 << 48;
/// The most US dollars a stored row may hold (its sums stop here): finite whatever is summed.
pub const ROW_MAX_USD: f64 = 1e12;

impl Spent {
    pub fn tokens(&self) -> i64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_write_tokens)
    }

    /// Adds `other`, each sum saturating (at `cap` for counts, [`ROW_MAX_USD`] for the cost): agent output never
    /// fails a batch, so no projector is stuck by it.
    fn add_capped(&mut self, other: &Spent, cap: i64) {
        let sum = |a: &mut i64, b: i64| *a = a.saturating_add(b).clamp(0, cap);
        sum(&mut self.runs, other.runs);
        sum(&mut self.input_tokens, other.input_tokens);
        sum(&mut self.output_tokens, other.output_tokens);
        sum(&mut self.cache_read_tokens, other.cache_read_tokens);
        sum(&mut self.cache_write_tokens, other.cache_write_tokens);
        self.cost_usd = finite_usd(self.cost_usd + other.cost_usd);
        sum(&mut self.costed_runs, other.costed_runs);
        sum(&mut self.turns, other.turns);
        sum(&mut self.refused_runs, other.refused_runs);
        self.refused_position = self.refused_position.max(other.refused_position);
    }

    /// A sum of rows (a report, budgets): saturating.
    fn add(&mut self, other: &Spent) {
        self.add_capped(other, i64::MAX);
    }

    /// A row's sum: saturating at [`ROW_MAX_COUNT`].
    fn accumulate(&mut self, other: &Spent) {
        self.add_capped(other, ROW_MAX_COUNT);
    }

    /// An outcome's usage as it is rolled up: held to the meter's bounds on read, so an outcome recorded before
    /// the bounds (or forged) counts for at most what a run may say, and is a run whose figures were refused (fail
    /// closed) as one whose meter refused them. `position`: the outcome's in the log.
    fn of(usage: &RunUsage, position: i64) -> Spent {
        let refused = usage.refused.is_some() || usage.usage.out_of_bounds().is_some();
        let usage = &RunUsage {
            usage: usage.usage.clamped(),
            ..usage.clone()
        };
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        Spent {
            runs: 1,
            input_tokens: n(usage.usage.input_tokens),
            output_tokens: n(usage.usage.output_tokens),
            cache_read_tokens: n(usage.usage.cache_read_tokens),
            cache_write_tokens: n(usage.usage.cache_write_tokens),
            cost_usd: usage.usage.cost_usd.unwrap_or(0.0),
            costed_runs: i64::from(usage.usage.cost_usd.is_some()),
            turns: i64::from(usage.usage.turns),
            refused_runs: i64::from(refused),
            refused_position: refused.then_some(position),
        }
    }
}

/// A sum of dollars held finite and within [`ROW_MAX_USD`] (a stored NaN or infinity is none).
fn finite_usd(usd: f64) -> f64 {
    if usd.is_nan() {
        0.0
    } else {
        usd.clamp(0.0, ROW_MAX_USD)
    }
}

/// One row of `usage_daily`.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct DayRow {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    pub repo: String,
    pub profile: String,
    #[serde(flatten)]
    pub spent: Spent,
}

/// One row of `usage_tasks`.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct TaskUsageRow {
    pub task_id: String,
    pub repo: String,
    pub last_at: DateTime<Utc>,
    #[serde(flatten)]
    pub spent: Spent,
}

/// The usage of one outcome, with where it goes.
struct Entry {
    day: String,
    task: String,
    at: DateTime<Utc>,
    /// The outcome's position in the log.
    position: i64,
    usage: RunUsage,
}

fn entries_of(event: &StoredEvent) -> anyhow::Result<Vec<Entry>> {
    if event.source != SOURCE
        || !event
            .stream
            .as_deref()
            .is_some_and(|s| s.starts_with(RUN_STREAM_PREFIX))
        || !matches!(
            event.event_type.as_str(),
            "run.succeeded" | "run.failed" | "run.proposed"
        )
    {
        return Ok(Vec::new());
    }
    let decoded: RunEvent = super::runs::decode(event)?;
    let at = decoded.at();
    // The agent's and, where one reviewed the attempt, its reviewer's: each under its own profile.
    Ok([decoded.usage(), decoded.reviewer_usage()]
        .into_iter()
        .flatten()
        .map(|usage| Entry {
            day: day_of(at),
            task: decoded.task().to_string(),
            at,
            position: event.position,
            usage: usage.clone(),
        })
        .collect())
}

/// The UTC day a moment falls in, as the read model keys it.
pub fn day_of(at: DateTime<Utc>) -> String {
    at.date_naive().format("%Y-%m-%d").to_string()
}

impl Projector for UsageProjector {
    fn name(&self) -> &'static str {
        NAME
    }

    fn version(&self) -> i64 {
        // 2: outcomes held to the usage bounds on read, sums saturating (rows stuck on absurd figures rebuilt).
        // 3: the runs whose figures were refused counted (migration 13), so budgets see them.
        3
    }

    fn bodies(&self) -> Bodies {
        Bodies::Streams {
            source: SOURCE,
            stream_prefix: RUN_STREAM_PREFIX,
        }
    }

    fn reset<'a>(&'a self, tx: &'a mut ProjectorTx) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            // Emptied (or rebuilt from here): a ledger read before is not reused. Tables that held nothing are
            // no change (a projector at 0 resets on every tick until the log's first event).
            if super::empty_tables(tx, &["usage_daily", "usage_tasks"]).await? {
                roll_up::changed(tx).await?;
            }
            Ok(())
        })
    }

    fn apply<'a>(
        &'a self,
        tx: &'a mut ProjectorTx,
        events: &'a [StoredEvent],
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move { roll_up(tx, entries(events)).await })
    }

    fn prepare(&self, events: &[StoredEvent]) -> Option<super::Prepared> {
        Some(Box::new(entries(events)))
    }

    fn apply_prepared<'a>(
        &'a self,
        tx: &'a mut ProjectorTx,
        events: &'a [StoredEvent],
        prepared: super::Prepared,
    ) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let entries = match prepared.downcast::<Vec<anyhow::Result<Entry>>>() {
                Ok(entries) => *entries,
                // Not ours (cannot happen: only `prepare` above makes these); decode again.
                Err(_) => entries(events),
            };
            roll_up(tx, entries).await
        })
    }
}

/// The outcomes of a page that carry usage, decoded in log order, each with its own result: the first error
/// fails the batch there, with the error applying the events one by one gives.
fn entries(events: &[StoredEvent]) -> Vec<anyhow::Result<Entry>> {
    events
        .iter()
        .flat_map(|e| match entries_of(e) {
            Ok(entries) => entries.into_iter().map(Ok).collect::<Vec<_>>(),
            Err(error) => vec![Err(error)],
        })
        .collect()
}

const SPENT: &str =
    "runs, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd,
    costed_runs, turns, refused_runs, refused_position";
// Postgres sums bigints as numeric: cast back, so both backends decode an i64.
const SUMMED: &str =
    "CAST(SUM(runs) AS bigint) AS runs, CAST(SUM(input_tokens) AS bigint) AS input_tokens,
    CAST(SUM(output_tokens) AS bigint) AS output_tokens,
    CAST(SUM(cache_read_tokens) AS bigint) AS cache_read_tokens,
    CAST(SUM(cache_write_tokens) AS bigint) AS cache_write_tokens, SUM(cost_usd) AS cost_usd,
    CAST(SUM(costed_runs) AS bigint) AS costed_runs, CAST(SUM(turns) AS bigint) AS turns,
    CAST(SUM(refused_runs) AS bigint) AS refused_runs, MAX(refused_position) AS refused_position";

fn spent<R>(row: &R) -> Result<Spent, sqlx::Error>
where
    R: Row,
    for<'r> &'r str: sqlx::ColumnIndex<R>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> f64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<i64>: sqlx::Decode<'r, R::Database>,
{
    Ok(Spent {
        runs: row.try_get("runs")?,
        input_tokens: row.try_get("input_tokens")?,
        output_tokens: row.try_get("output_tokens")?,
        cache_read_tokens: row.try_get("cache_read_tokens")?,
        cache_write_tokens: row.try_get("cache_write_tokens")?,
        cost_usd: row.try_get("cost_usd")?,
        costed_runs: row.try_get("costed_runs")?,
        turns: row.try_get("turns")?,
        refused_runs: row.try_get("refused_runs")?,
        refused_position: row.try_get("refused_position")?,
    })
}

/// Which days a report covers, and of which repository.
#[derive(Clone, Debug, Default)]
pub struct UsageFilter {
    /// The first day (inclusive); `None`: from the first.
    pub since: Option<NaiveDate>,
    pub repo: Option<String>,
}

/// The most days a report covers.
pub const MAX_DAYS: i64 = 366;

/// A usage report (`GET /api/usage`, `pidevops usage --json`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct UsageReport {
    /// The first day covered (UTC).
    pub since: NaiveDate,
    /// Per day, repository and profile, newest day first.
    pub days: Vec<DayRow>,
    /// The sum of `days`.
    pub total: Spent,
    /// The tasks that spent most, over all time.
    pub tasks: Vec<TaskUsageRow>,
}

/// A report's bounds, checked: `Err` is the refusal.
pub fn filter(
    days: Option<i64>,
    repo: Option<&str>,
    today: NaiveDate,
) -> Result<UsageFilter, (&'static str, String)> {
    let days = days.unwrap_or(30);
    if !(1..=MAX_DAYS).contains(&days) {
        return Err(("bad_days", format!("days must be from 1 to {MAX_DAYS}")));
    }
    let repo = repo
        .map(|r| r.parse::<RepoName>().map(|r| r.to_string()))
        .transpose()
        .map_err(|e| ("bad_repo", e.to_string()))?;
    Ok(UsageFilter {
        since: Some(today - Duration::days(days - 1)),
        repo,
    })
}

/// The daily rows a report shows, newest day first.
pub async fn days(store: &EventStore, filter: &UsageFilter) -> Result<Vec<DayRow>, StoreError> {
    let since = filter
        .since
        .map(|d| d.format("%Y-%m-%d").to_string())
        .unwrap_or_default();
    let sql = format!(
        "SELECT day, repo, profile, {SPENT} FROM usage_daily WHERE day >= $1 AND ($2 = '' OR repo = $2)
         ORDER BY day DESC, repo, profile"
    );
    let repo = filter.repo.clone().unwrap_or_default();
    crate::on_store!(store, |pool, backend| {
        let rows = sqlx::query(&sql)
            .bind(&since)
            .bind(&repo)
            .fetch_all(pool)
            .await?;
        Ok(rows
            .iter()
            .map(|row| {
                Ok(DayRow {
                    day: row.try_get("day")?,
                    repo: row.try_get("repo")?,
                    profile: row.try_get("profile")?,
                    spent: spent(row)?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()?)
    })
}

/// The sum of some rows.
pub fn total<'a>(rows: impl IntoIterator<Item = &'a Spent>) -> Spent {
    let mut sum = Spent::default();
    for row in rows {
        sum.add(row);
    }
    sum
}

/// Every repository and profile's totals over all days (what `/metrics` exposes as counters).
pub async fn by_repo_and_profile(
    store: &EventStore,
) -> Result<Vec<(String, String, Spent)>, StoreError> {
    let sql = format!(
        "SELECT repo, profile, {SUMMED} FROM usage_daily GROUP BY repo, profile ORDER BY repo, profile"
    );
    crate::on_store!(store, |pool, backend| {
        let rows = sqlx::query(&sql).fetch_all(pool).await?;
        Ok(rows
            .iter()
            .map(|row| Ok((row.try_get("repo")?, row.try_get("profile")?, spent(row)?)))
            .collect::<Result<_, sqlx::Error>>()?)
    })
}

/// One task's usage, if any of its runs reported some.
pub async fn task(store: &EventStore, task_id: &str) -> Result<Option<TaskUsageRow>, StoreError> {
    let sql = format!("SELECT task_id, repo, last_at, {SPENT} FROM usage_tasks WHERE task_id = $1");
    crate::on_store!(store, |pool, backend| {
        let row = sqlx::query(&sql).bind(task_id).fetch_optional(pool).await?;
        Ok(row.map(|row| task_row(&row)).transpose()?)
    })
}

/// The usage of those of `task_ids` whose runs reported some, in no particular order: one statement per
/// [`sql::MAX_PARAMS`](crate::eventlog::sql::MAX_PARAMS) ids (the dispatcher reads its queue's at once, not one
/// task at a time).
pub async fn tasks(
    store: &EventStore,
    task_ids: &[String],
) -> Result<Vec<TaskUsageRow>, StoreError> {
    use crate::eventlog::sql;
    let mut rows = Vec::with_capacity(task_ids.len());
    for chunk in task_ids.chunks(sql::MAX_PARAMS) {
        let statement = format!(
            "SELECT task_id, repo, last_at, {SPENT} FROM usage_tasks WHERE task_id IN ({})",
            sql::list(1, chunk.len())
        );
        let found: Vec<TaskUsageRow> = crate::on_store!(store, sql = statement, |pool, backend| {
            // Not prepared: the text differs with the chunk's length.
            let mut query = sqlx::query(&statement).persistent(false);
            for id in chunk {
                query = query.bind(id.as_str());
            }
            query
                .fetch_all(pool)
                .await?
                .iter()
                .map(task_row)
                .collect::<Result<_, sqlx::Error>>()?
        });
        rows.extend(found);
    }
    Ok(rows)
}

fn task_row<R>(row: &R) -> Result<TaskUsageRow, sqlx::Error>
where
    R: Row,
    for<'r> &'r str: sqlx::ColumnIndex<R>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> f64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<i64>: sqlx::Decode<'r, R::Database>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> DateTime<Utc>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    Ok(TaskUsageRow {
        task_id: row.try_get("task_id")?,
        repo: row.try_get("repo")?,
        last_at: row.try_get("last_at")?,
        spent: spent(row)?,
    })
}

/// The tasks that spent the most (cost, then tokens), of one repository or all.
pub async fn top_tasks(
    store: &EventStore,
    repo: Option<&str>,
    limit: i64,
) -> Result<Vec<TaskUsageRow>, StoreError> {
    top_tasks_since(store, repo, None, limit).await
}

/// The tasks that spent the most (cost, then tokens; each task's whole spend), among those whose last run ended at
/// or after `since` (all of them for `None`), of one repository or all.
pub async fn top_tasks_since(
    store: &EventStore,
    repo: Option<&str>,
    since: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<Vec<TaskUsageRow>, StoreError> {
    let sql = format!(
        "SELECT task_id, repo, last_at, {SPENT} FROM usage_tasks
         WHERE ($1 = '' OR repo = $1) AND last_at >= $2
         ORDER BY cost_usd DESC, input_tokens + output_tokens DESC, task_id LIMIT $3"
    );
    let repo = repo.unwrap_or_default().to_owned();
    let since = since.unwrap_or(DateTime::<Utc>::UNIX_EPOCH);
    crate::on_store!(store, |pool, backend| {
        let rows = sqlx::query(&sql)
            .bind(&repo)
            .bind(since)
            .bind(limit)
            .fetch_all(pool)
            .await?;
        Ok(rows
            .iter()
            .map(task_row)
            .collect::<Result<_, sqlx::Error>>()?)
    })
}

/// The repositories with any usage, sorted.
pub async fn repos(store: &EventStore) -> Result<Vec<String>, StoreError> {
    let sql = "SELECT DISTINCT repo FROM usage_daily ORDER BY repo";
    crate::on_store!(store, |pool, backend| Ok(sqlx::query_scalar(sql)
        .fetch_all(pool)
        .await?))
}

/// `/metrics`' usage counters, from the read model (so they hold across restarts and agree between replicas):
/// `pidevops_agent_tokens_total{repo,profile,kind}` and `pidevops_agent_cost_usd_total{repo,profile}`.
pub fn prometheus_text(rows: &[(String, String, Spent)]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let label = |v: &str| {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    };
    out.push_str(
        "# HELP pidevops_agent_tokens_total Tokens agents spent, as their CLIs reported them.\n",
    );
    out.push_str("# TYPE pidevops_agent_tokens_total counter\n");
    for (repo, profile, spent) in rows {
        for (kind, n) in [
            ("input", spent.input_tokens),
            ("output", spent.output_tokens),
            ("cache_read", spent.cache_read_tokens),
            ("cache_write", spent.cache_write_tokens),
        ] {
            let _ = writeln!(
                out,
                "pidevops_agent_tokens_total{{repo=\"{}\",profile=\"{}\",kind=\"{kind}\"}} {n}",
                label(repo),
                label(profile)
            );
        }
    }
    out.push_str("# HELP pidevops_agent_cost_usd_total US dollars agents spent, as their CLIs reported them.\n");
    out.push_str("# TYPE pidevops_agent_cost_usd_total counter\n");
    for (repo, profile, spent) in rows {
        let _ = writeln!(
            out,
            "pidevops_agent_cost_usd_total{{repo=\"{}\",profile=\"{}\"}} {}",
            label(repo),
            label(profile),
            spent.cost_usd
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn a_report_covers_today_and_the_days_before_and_refuses_bad_bounds() {
        let today = NaiveDate::from_ymd_opt(2026, 12, 2).unwrap();
        let f = filter(Some(7), Some("acme/api"), today).unwrap();
        assert_eq!(f.since, NaiveDate::from_ymd_opt(2026, 11, 26));
        assert_eq!(f.repo.as_deref(), Some("acme/api"));
        assert_eq!(
            filter(None, None, today).unwrap().since,
            NaiveDate::from_ymd_opt(2026, 11, 3)
        );
        assert_eq!(filter(Some(0), None, today).unwrap_err().0, "bad_days");
        assert_eq!(filter(Some(367), None, today).unwrap_err().0, "bad_days");
        assert_eq!(
            filter(Some(1), Some("not a repo"), today).unwrap_err().0,
            "bad_repo"
        );
    }
}
