//! What the read model must hold once every outcome is applied, summed apart from the projector it checks.

use super::*;

/// What the read model must hold once every outcome in the log is applied.
#[derive(Default)]
pub(crate) struct Expected {
    pub(crate) daily: BTreeMap<(String, String, String), Totals>,
    pub(crate) tasks: BTreeMap<String, (String, DateTime<Utc>, Totals)>,
    pub(crate) total: Totals,
}

/// The benchmark's own sum of some runs' usage (kept apart from the projector's code, which it checks).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Totals {
    pub(crate) runs: i64,
    pub(crate) input_tokens: i64,
    pub(crate) output_tokens: i64,
    pub(crate) cache_read_tokens: i64,
    pub(crate) cache_write_tokens: i64,
    pub(crate) cost_usd: f64,
    pub(crate) costed_runs: i64,
    pub(crate) turns: i64,
}

impl Totals {
    pub(crate) fn add_usage(&mut self, u: &Usage) {
        self.runs += 1;
        self.input_tokens += u.input_tokens as i64;
        self.output_tokens += u.output_tokens as i64;
        self.cache_read_tokens += u.cache_read_tokens as i64;
        self.cache_write_tokens += u.cache_write_tokens as i64;
        self.cost_usd += u.cost_usd.unwrap_or(0.0);
        self.costed_runs += i64::from(u.cost_usd.is_some());
        self.turns += i64::from(u.turns);
    }

    pub(crate) fn tokens(&self) -> i64 {
        self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens
    }

    pub(crate) fn of_row(row: &sqlx::postgres::PgRow) -> Result<Totals, sqlx::Error> {
        Ok(Totals {
            runs: row.try_get("runs")?,
            input_tokens: row.try_get("input_tokens")?,
            output_tokens: row.try_get("output_tokens")?,
            cache_read_tokens: row.try_get("cache_read_tokens")?,
            cache_write_tokens: row.try_get("cache_write_tokens")?,
            cost_usd: row.try_get("cost_usd")?,
            costed_runs: row.try_get("costed_runs")?,
            turns: row.try_get("turns")?,
        })
    }

    /// Every count equal, the cost within rounding (sums of doubles in another order differ in the last bits).
    /// Returns the cost's difference.
    pub(crate) fn agrees(&self, other: &Totals, what: &str) -> anyhow::Result<f64> {
        let exact = |t: &Totals| Totals {
            cost_usd: 0.0,
            ..t.clone()
        };
        anyhow::ensure!(
            exact(self) == exact(other),
            "{what}: read model {self:?}, generated {other:?}"
        );
        let diff = (self.cost_usd - other.cost_usd).abs();
        anyhow::ensure!(
            diff <= 1e-9 * other.cost_usd.abs().max(1.0),
            "{what}: cost {} in the read model, {} generated",
            self.cost_usd,
            other.cost_usd
        );
        Ok(diff)
    }
}

impl Expected {
    /// Every row of both tables against what was generated, and the totals.
    pub(crate) async fn check(&self, store: &EventStore) -> anyhow::Result<()> {
        let EventStore::Postgres(pg) = store else {
            anyhow::bail!("usagebench runs on Postgres");
        };
        const SPENT: &str =
            "runs, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, \
                             cost_usd, costed_runs, turns";
        let mut worst = 0f64;
        let rows = sqlx::query(&format!(
            "SELECT day, repo, profile, {SPENT} FROM usage_daily"
        ))
        .fetch_all(pg.pool())
        .await?;
        anyhow::ensure!(
            rows.len() == self.daily.len(),
            "usage_daily has {} rows, expected {}",
            rows.len(),
            self.daily.len()
        );
        let mut total = Totals::default();
        for row in &rows {
            let key: (String, String, String) = (
                row.try_get("day")?,
                row.try_get("repo")?,
                row.try_get("profile")?,
            );
            let got = Totals::of_row(row)?;
            let want = self
                .daily
                .get(&key)
                .with_context(|| format!("usage_daily has an unexpected row {key:?}"))?;
            worst = worst.max(got.agrees(want, &format!("usage_daily {key:?}"))?);
            total.runs += got.runs;
            total.input_tokens += got.input_tokens;
            total.output_tokens += got.output_tokens;
            total.cache_read_tokens += got.cache_read_tokens;
            total.cache_write_tokens += got.cache_write_tokens;
            total.cost_usd += got.cost_usd;
            total.costed_runs += got.costed_runs;
            total.turns += got.turns;
        }
        total.agrees(&self.total, "the sum of usage_daily")?;

        let rows = sqlx::query(&format!(
            "SELECT task_id, repo, last_at, {SPENT} FROM usage_tasks"
        ))
        .fetch_all(pg.pool())
        .await?;
        anyhow::ensure!(
            rows.len() == self.tasks.len(),
            "usage_tasks has {} rows, expected {}",
            rows.len(),
            self.tasks.len()
        );
        for row in &rows {
            let task: String = row.try_get("task_id")?;
            let (repo, last_at, want) = self
                .tasks
                .get(&task)
                .with_context(|| format!("usage_tasks has an unexpected task {task}"))?;
            let got_repo: String = row.try_get("repo")?;
            let got_last: DateTime<Utc> = row.try_get("last_at")?;
            anyhow::ensure!(
                &got_repo == repo && &got_last == last_at,
                "usage_tasks {task}: {got_repo} {got_last}, expected {repo} {last_at}"
            );
            worst = worst.max(Totals::of_row(row)?.agrees(want, &format!("usage_tasks {task}"))?);
        }
        println!(
            "read model checked: {} daily rows and {} task rows equal to the generated runs ({} runs with usage, \
             {} tokens, ${:.2}; largest cost difference in a row {worst:e} USD)",
            self.daily.len(),
            self.tasks.len(),
            self.total.runs,
            self.total.tokens(),
            self.total.cost_usd
        );
        Ok(())
    }
}
