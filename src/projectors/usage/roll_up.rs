//! A batch of outcomes rolled up: every row of `usage_daily` and `usage_tasks` they touch read once, the outcomes
//! added to it in memory in log order, the row written back once (docs/benchmarks.md, "Usage roll-up": one upsert
//! per outcome and table ran at 0.04 of a scan's rate, this at 0.43).

use std::collections::HashMap;

use anyhow::Context;
use chrono::{DateTime, Utc};
use sqlx::Row;

use super::{spent, Entry, Spent, SPENT};
use crate::eventlog::sql::{list, rows_per_statement, values_rows};
use crate::projectors::ProjectorTx;

/// A batch's rows: each (day, repository, profile) and each task its outcomes touch, as stored before the batch
/// (`None`: no row yet), then with the batch's outcomes added.
struct Batch<'a> {
    days: Vec<(DayKey<'a>, Option<Spent>)>,
    day_index: HashMap<DayKey<'a>, usize>,
    tasks: Vec<(&'a str, Option<TaskTotal>)>,
    task_index: HashMap<&'a str, usize>,
    /// Per entry, in log order: its day row and its task row.
    slots: Vec<(usize, usize)>,
}

/// A row of `usage_daily`'s key: day, repository, profile.
type DayKey<'a> = (&'a str, &'a str, &'a str);

/// A task's row of `usage_tasks`.
#[derive(Clone, Debug, PartialEq)]
struct TaskTotal {
    repo: String,
    last_at: DateTime<Utc>,
    spent: Spent,
}

impl<'a> Batch<'a> {
    fn new(entries: &'a [Entry]) -> Self {
        let mut batch = Batch {
            days: Vec::new(),
            day_index: HashMap::new(),
            tasks: Vec::new(),
            task_index: HashMap::new(),
            slots: Vec::with_capacity(entries.len()),
        };
        for e in entries {
            let key = (
                e.day.as_str(),
                e.usage.repo.as_str(),
                e.usage.profile.as_str(),
            );
            let day = *batch.day_index.entry(key).or_insert_with(|| {
                batch.days.push((key, None));
                batch.days.len() - 1
            });
            let task = *batch.task_index.entry(&e.task).or_insert_with(|| {
                batch.tasks.push((&e.task, None));
                batch.tasks.len() - 1
            });
            batch.slots.push((day, task));
        }
        batch
    }

    fn stored_day(&mut self, key: DayKey<'_>, spent: Spent) {
        if let Some(&i) = self.day_index.get(&key) {
            self.days[i].1 = Some(spent);
        }
    }

    fn stored_task(&mut self, task: &str, total: TaskTotal) {
        if let Some(&i) = self.task_index.get(task) {
            self.tasks[i].1 = Some(total);
        }
    }

    /// Adds each outcome to its rows in log order: the additions an upsert per outcome made in SQL, in the same
    /// order, so the sums (the cost's doubles too) are the same to the bit whatever the batch size.
    fn add(&mut self, entries: &[Entry]) {
        for (e, &(day, task)) in entries.iter().zip(&self.slots) {
            let spent = Spent::of(&e.usage, e.position);
            match &mut self.days[day].1 {
                Some(row) => row.accumulate(&spent),
                none => *none = Some(spent.clone()),
            }
            match &mut self.tasks[task].1 {
                // A task's repository is its first outcome's; `last_at` the latest outcome's.
                Some(row) => {
                    row.spent.accumulate(&spent);
                    if e.at > row.last_at {
                        row.last_at = e.at;
                    }
                }
                none => {
                    *none = Some(TaskTotal {
                        repo: e.usage.repo.clone(),
                        last_at: e.at,
                        spent,
                    })
                }
            }
        }
    }
}

/// Adds a batch's outcomes to the read model: every row they touch is read once, the outcomes are added to it in
/// memory (`Batch::add`) and it is written back once, a few multi-row statements a batch whatever its size.
pub(super) async fn roll_up(
    tx: &mut ProjectorTx,
    entries: Vec<anyhow::Result<Entry>>,
) -> anyhow::Result<()> {
    let entries = entries.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    if entries.is_empty() {
        return Ok(());
    }
    let mut batch = Batch::new(&entries);
    read_stored(tx, &mut batch)
        .await
        .context("reading the usage rows a batch adds to")?;
    batch.add(&entries);
    write(tx, &batch)
        .await
        .context("writing the usage rows of a batch")?;
    changed(tx)
        .await
        .context("marking the usage rows changed")?;
    Ok(())
}

/// Bumps `usage_changes` (migration 17), in the transaction that changes the rows: what the dispatcher keys its
/// budgets ledger on (`budgets::LedgerKey`). A batch without usage leaves it, so the key does not move with the
/// log's every event.
pub(super) async fn changed(tx: &mut ProjectorTx) -> Result<(), sqlx::Error> {
    on_tx!(tx, |conn| {
        sqlx::query("UPDATE usage_changes SET changes = changes + 1")
            .execute(conn)
            .await?;
    });
    Ok(())
}

/// Binds a `Spent` in `SPENT`'s order.
macro_rules! bind_spent {
    ($query:expr, $s:expr) => {{
        let s: &Spent = $s;
        $query
            .bind(s.runs)
            .bind(s.input_tokens)
            .bind(s.output_tokens)
            .bind(s.cache_read_tokens)
            .bind(s.cache_write_tokens)
            .bind(s.cost_usd)
            .bind(s.costed_runs)
            .bind(s.turns)
            .bind(s.refused_runs)
            .bind(s.refused_position)
    }};
}

/// The columns of `SPENT`, which `bind_spent!` binds in order.
const SPENT_COUNT: usize = 10;
const SET_SPENT: &str = "runs = excluded.runs, input_tokens = excluded.input_tokens,
    output_tokens = excluded.output_tokens, cache_read_tokens = excluded.cache_read_tokens,
    cache_write_tokens = excluded.cache_write_tokens, cost_usd = excluded.cost_usd,
    costed_runs = excluded.costed_runs, turns = excluded.turns, refused_runs = excluded.refused_runs,
    refused_position = excluded.refused_position";

/// The stored rows of a batch's keys, into `batch`. Statements of as many keys as the parameter limit allows,
/// their text varying with the count, so not kept prepared (as the tasks projector's writes).
async fn read_stored(tx: &mut ProjectorTx, batch: &mut Batch<'_>) -> Result<(), sqlx::Error> {
    let keys: Vec<_> = batch.days.iter().map(|(key, _)| *key).collect();
    for chunk in keys.chunks(rows_per_statement(3)) {
        let sql = format!(
            "SELECT day, repo, profile, {SPENT} FROM usage_daily
             WHERE (day, repo, profile) IN (VALUES {})",
            values_rows(chunk.len(), 3)
        );
        on_tx!(tx, sql = sql, |conn| {
            let mut query = sqlx::query(&sql).persistent(false);
            for (day, repo, profile) in chunk {
                query = query.bind(*day).bind(*repo).bind(*profile);
            }
            for row in query.fetch_all(conn).await? {
                let (day, repo, profile): (String, String, String) = (
                    row.try_get("day")?,
                    row.try_get("repo")?,
                    row.try_get("profile")?,
                );
                batch.stored_day((&day, &repo, &profile), spent(&row)?);
            }
        });
    }
    let tasks: Vec<&str> = batch.tasks.iter().map(|(task, _)| *task).collect();
    for chunk in tasks.chunks(rows_per_statement(1)) {
        let sql = format!(
            "SELECT task_id, repo, last_at, {SPENT} FROM usage_tasks WHERE task_id IN ({})",
            list(1, chunk.len())
        );
        on_tx!(tx, sql = sql, |conn| {
            let mut query = sqlx::query(&sql).persistent(false);
            for task in chunk {
                query = query.bind(*task);
            }
            for row in query.fetch_all(conn).await? {
                let task: String = row.try_get("task_id")?;
                let total = TaskTotal {
                    repo: row.try_get("repo")?,
                    last_at: row.try_get("last_at")?,
                    spent: spent(&row)?,
                };
                batch.stored_task(&task, total);
            }
        });
    }
    Ok(())
}

/// Writes every row of the batch, whole: `Batch::add` started from the stored values.
async fn write(tx: &mut ProjectorTx, batch: &Batch<'_>) -> Result<(), sqlx::Error> {
    let days: Vec<_> = batch
        .days
        .iter()
        .filter_map(|(key, spent)| Some((*key, spent.as_ref()?)))
        .collect();
    for chunk in days.chunks(rows_per_statement(3 + SPENT_COUNT)) {
        let sql = format!(
            "INSERT INTO usage_daily (day, repo, profile, {SPENT}) VALUES {}
             ON CONFLICT (day, repo, profile) DO UPDATE SET {SET_SPENT}",
            values_rows(chunk.len(), 3 + SPENT_COUNT)
        );
        on_tx!(tx, sql = sql, |conn| {
            let mut query = sqlx::query(&sql).persistent(false);
            for ((day, repo, profile), s) in chunk {
                query = bind_spent!(query.bind(*day).bind(*repo).bind(*profile), s);
            }
            query.execute(conn).await?;
        });
    }
    let tasks: Vec<_> = batch
        .tasks
        .iter()
        .filter_map(|(task, total)| Some((*task, total.as_ref()?)))
        .collect();
    // The repository is the task's first outcome's: an update leaves it.
    for chunk in tasks.chunks(rows_per_statement(3 + SPENT_COUNT)) {
        let sql = format!(
            "INSERT INTO usage_tasks (task_id, repo, last_at, {SPENT}) VALUES {}
             ON CONFLICT (task_id) DO UPDATE SET {SET_SPENT}, last_at = excluded.last_at",
            values_rows(chunk.len(), 3 + SPENT_COUNT)
        );
        on_tx!(tx, sql = sql, |conn| {
            let mut query = sqlx::query(&sql).persistent(false);
            for (task, t) in chunk {
                query = bind_spent!(
                    query.bind(*task).bind(t.repo.as_str()).bind(t.last_at),
                    &t.spent
                );
            }
            query.execute(conn).await?;
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::usage::{RunUsage, Usage};
    use crate::projectors::usage::day_of;

    fn outcome(task: &str, repo: &str, at: &str, cost: f64, input: u64) -> Entry {
        let at: DateTime<Utc> = at.parse().unwrap();
        Entry {
            day: day_of(at),
            task: task.into(),
            at,
            position: 1,
            usage: RunUsage {
                repo: repo.into(),
                profile: "claude".into(),
                usage: Usage {
                    input_tokens: input,
                    cost_usd: Some(cost),
                    turns: 2,
                    ..Usage::default()
                },
                refused: None,
            },
        }
    }

    fn spent(runs: i64, input_tokens: i64, cost_usd: f64) -> Spent {
        Spent {
            runs,
            input_tokens,
            cost_usd,
            costed_runs: runs,
            turns: 2 * runs,
            ..Spent::default()
        }
    }

    #[test]
    fn a_batch_adds_each_outcome_in_log_order_to_the_stored_rows_as_one_upsert_per_outcome_did() {
        let entries = [
            outcome("T-1", "acme/api", "2026-12-01T10:00:00Z", 0.2, 10),
            outcome("T-2", "acme/api", "2026-12-01T11:00:00Z", 0.3, 20),
            outcome("T-1", "acme/api", "2026-12-01T09:00:00Z", 0.3, 5),
        ];
        let mut batch = Batch::new(&entries);
        assert_eq!(batch.days.len(), 1);
        assert_eq!(batch.tasks.len(), 2);
        batch.stored_day(("2026-12-01", "acme/api", "claude"), spent(1, 1, 0.1));
        let before = "2026-12-01T08:00:00Z".parse().unwrap();
        batch.stored_task(
            "T-1",
            TaskTotal {
                repo: "acme/old".into(),
                last_at: before,
                spent: spent(1, 1, 0.1),
            },
        );
        // Keys no entry has are not the batch's.
        batch.stored_day(("2026-11-30", "acme/api", "claude"), spent(9, 9, 9.0));
        batch.stored_task("T-9", batch.tasks[0].1.clone().unwrap());
        batch.add(&entries);

        // The very additions SQL made, in the same order: the doubles agree to the bit (summing the batch
        // first would not: 0.1 + (0.2 + 0.3 + 0.3) is another double).
        let sequential = ((0.1f64 + 0.2) + 0.3) + 0.3;
        assert_ne!(sequential.to_bits(), (0.1f64 + (0.2 + 0.3 + 0.3)).to_bits());
        let day = batch.days[0].1.as_ref().unwrap();
        assert_eq!(day.cost_usd.to_bits(), sequential.to_bits());
        assert_eq!(
            (day.runs, day.input_tokens, day.costed_runs, day.turns),
            (4, 36, 4, 8)
        );
        assert_eq!((day.refused_runs, day.refused_position), (0, None));

        let (task, t1) = (&batch.tasks[0].0, batch.tasks[0].1.as_ref().unwrap());
        assert_eq!(*task, "T-1");
        // The first outcome's repository stays; `last_at` is the latest, not the last applied.
        assert_eq!(t1.repo, "acme/old");
        assert_eq!(
            t1.last_at,
            "2026-12-01T10:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert_eq!(
            t1.spent.cost_usd.to_bits(),
            ((0.1f64 + 0.2) + 0.3).to_bits()
        );
        assert_eq!(t1.spent.runs, 3);
        let t2 = batch.tasks[1].1.as_ref().unwrap();
        assert_eq!(
            (t2.repo.as_str(), t2.spent.runs, t2.spent.input_tokens),
            ("acme/api", 1, 20)
        );
        assert_eq!(t2.spent.cost_usd.to_bits(), 0.3f64.to_bits());
    }

    #[test]
    fn absurd_outcomes_and_stored_rows_saturate_and_never_fail_the_batch() {
        use crate::domain::usage::{MAX_COST_USD, MAX_TOKENS};
        use crate::projectors::usage::{ROW_MAX_COUNT, ROW_MAX_USD};
        // An outcome recorded before the bounds (or forged): u64::MAX tokens, an infinite and a NaN cost.
        let mut huge = outcome(
            "T-1",
            "acme/api",
            "2026-12-01T10:00:00Z",
            f64::INFINITY,
            u64::MAX,
        );
        huge.usage.usage.output_tokens = u64::MAX;
        huge.position = 7;
        let mut nan = outcome("T-1", "acme/api", "2026-12-01T11:00:00Z", f64::NAN, 10);
        nan.position = 5;
        let normal = outcome("T-2", "acme/api", "2026-12-01T12:00:00Z", 0.5, 10);
        let entries = [huge, nan, normal];
        let mut batch = Batch::new(&entries);
        // A row that already holds a bigint's worth (stored by the old code).
        batch.stored_day(
            ("2026-12-01", "acme/api", "claude"),
            spent(1, i64::MAX - 5, f64::MAX),
        );
        batch.add(&entries);
        let day = batch.days[0].1.as_ref().unwrap();
        assert_eq!(day.runs, 4);
        assert_eq!(day.input_tokens, ROW_MAX_COUNT);
        assert!(day.tokens() > 0, "{day:?}");
        assert_eq!(day.cost_usd, ROW_MAX_USD);
        let t1 = batch.tasks[0].1.as_ref().unwrap();
        // Each outcome counts for at most what a run may say; the NaN cost for nothing.
        assert_eq!(t1.spent.input_tokens, MAX_TOKENS as i64 + 10);
        assert_eq!(t1.spent.output_tokens, MAX_TOKENS as i64);
        assert_eq!(t1.spent.cost_usd, MAX_COST_USD);
        let t2 = batch.tasks[1].1.as_ref().unwrap();
        assert_eq!((t2.spent.input_tokens, t2.spent.cost_usd), (10, 0.5));
        // Fail closed: figures past the bounds make a run whose figures were refused, as the meter's refusal does;
        // the row keeps the latest such outcome's position (a raise after it lifts the budgets' hold).
        assert_eq!(
            (t1.spent.refused_runs, t1.spent.refused_position),
            (2, Some(7))
        );
        assert_eq!((day.refused_runs, day.refused_position), (2, Some(7)));
        assert_eq!(
            (t2.spent.refused_runs, t2.spent.refused_position),
            (0, None)
        );
    }

    #[test]
    fn a_run_whose_meter_refused_its_figures_is_counted_with_its_position_and_what_it_spent_is_not()
    {
        let mut refused = outcome("T-3", "acme/api", "2026-12-01T10:00:00Z", 0.1, 10);
        refused.usage.refused = Some("input_tokens = 18446744073709551615".into());
        refused.position = 42;
        let later = outcome("T-3", "acme/api", "2026-12-01T11:00:00Z", 0.2, 5);
        let entries = [refused, later];
        let mut batch = Batch::new(&entries);
        // A stored row with an earlier refused run: the later position wins, the counts add.
        batch.stored_day(
            ("2026-12-01", "acme/api", "claude"),
            Spent {
                refused_runs: 1,
                refused_position: Some(3),
                ..spent(1, 1, 0.0)
            },
        );
        batch.add(&entries);
        let day = batch.days[0].1.as_ref().unwrap();
        assert_eq!(
            (day.runs, day.refused_runs, day.refused_position),
            (3, 2, Some(42))
        );
        let t3 = batch.tasks[0].1.as_ref().unwrap();
        assert_eq!((t3.spent.runs, t3.spent.refused_runs), (2, 1));
        assert_eq!(t3.spent.refused_position, Some(42));
        // The figures it did read count: only the refused one is not in `usage`.
        assert_eq!(t3.spent.input_tokens, 15);
    }
}
