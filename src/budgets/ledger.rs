//! The [`Ledger`]: what every task's standings share on one day (the raises on record, the day's usage rows) and
//! the own spend of the tasks it was read for; kept by the dispatcher from one tick to the next while what it was
//! read from has not moved ([`LedgerKey`]).

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, NaiveDate, Utc};

use super::{in_force, raises_on_record, standing, BudgetsConfig, Raised, Scope, Standing};
use crate::eventlog::{EventStore, StoreError};
use crate::projectors::usage::{self as usage_rows, UsageFilter};
use crate::tasks::TaskId;

/// What a [`Ledger`] was read from: the usage projector's checkpoint (its `projections` row: every batch that
/// changes the usage rows moves it, in the batch's own transaction; a rebuild moves its time even back to the same
/// position), the `budget` stream's version (every raise), and the UTC day. Read *before* what it keys, so rows
/// that a batch committed in between are newer than the key, never older: the next tick's key differs and it reads
/// them again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerKey {
    usage: Option<(i64, i64, DateTime<Utc>)>,
    budget: i64,
    today: NaiveDate,
}

/// One statement, both backends: the usage projector's row (none before it first ran) and the `budget` stream's
/// version.
const KEY: &str = "SELECT p.version, p.position, p.updated_at,
     (SELECT coalesce(max(stream_version), 0) FROM events WHERE stream = $2 AND stream IS NOT NULL) AS budget
     FROM (SELECT 1 AS one) AS one LEFT JOIN projections p ON p.name = $1";

impl LedgerKey {
    /// The key as it stands now, for `today`.
    pub async fn read(store: &EventStore, today: NaiveDate) -> Result<Self, StoreError> {
        type Row = (Option<i64>, Option<i64>, Option<DateTime<Utc>>, i64);
        let (version, position, at, budget): Row = crate::on_store!(store, |pool, backend| {
            sqlx::query_as(KEY)
                .bind(usage_rows::NAME)
                .bind(super::STREAM)
                .fetch_one(pool)
                .await?
        });
        let usage = match (version, position, at) {
            (Some(version), Some(position), Some(at)) => Some((version, position, at)),
            _ => None,
        };
        Ok(Self {
            usage,
            budget,
            today,
        })
    }
}

/// What every task's standings share on one day: the raises on record and the day's usage rows, and the own spend
/// of the tasks it was read for. The dispatcher reads it once per tick, with its candidates' spend in one statement
/// ([`Ledger::read_for`]), not once per queued candidate; and keeps it for the next tick ([`Ledger::refresh`]),
/// which reads only the key and the spend of candidates new to it while the key has not moved. A task it was not
/// read for has its own spend read when asked.
pub struct Ledger {
    /// What it was read from (`None`: read without one, never reused).
    key: Option<LedgerKey>,
    on_record: Vec<(i64, Raised)>,
    /// `on_record` without the positions, as [`in_force`] reads them.
    raises: Vec<Raised>,
    today: NaiveDate,
    today_rows: Vec<usage_rows::DayRow>,
    /// The own spend of each task read with the ledger (nothing spent for one without a row).
    tasks: HashMap<TaskId, usage_rows::Spent>,
    /// Each repository's standing today and the day's, once per [`Ledger::refresh`] (not once per candidate).
    repo_standings: HashMap<String, Standing>,
    day_standing: Option<Standing>,
}

impl Ledger {
    /// Reads what `config`'s limits need on `today` (nothing when no limit is set).
    pub async fn read(
        store: &EventStore,
        config: &BudgetsConfig,
        today: NaiveDate,
    ) -> Result<Self, StoreError> {
        let mut ledger = Self {
            key: None,
            on_record: Vec::new(),
            raises: Vec::new(),
            today,
            today_rows: Vec::new(),
            tasks: HashMap::new(),
            repo_standings: HashMap::new(),
            day_standing: None,
        };
        if !config.any() {
            return Ok(ledger);
        }
        ledger.on_record = raises_on_record(store).await?;
        ledger.raises = ledger.on_record.iter().map(|(_, r)| r.clone()).collect();
        if config.repo_daily.is_set() || config.daily.is_set() {
            let day = today.format("%Y-%m-%d").to_string();
            ledger.today_rows = usage_rows::days(
                store,
                &UsageFilter {
                    since: Some(today),
                    repo: None,
                },
            )
            .await?
            .into_iter()
            .filter(|r| r.day == day)
            .collect();
        }
        Ok(ledger)
    }

    /// [`Ledger::read`], and the own spend of each of `tasks` in one statement (when a task limit is set).
    pub async fn read_for(
        store: &EventStore,
        config: &BudgetsConfig,
        today: NaiveDate,
        tasks: &[TaskId],
    ) -> Result<Self, StoreError> {
        let mut ledger = Self::read(store, config, today).await?;
        ledger.read_tasks(store, config, tasks).await?;
        Ok(ledger)
    }

    /// The ledger for `candidates` (each task with its repository) on `today`: `kept` (an earlier tick's) when
    /// what it was read from has not moved since, with the spend of the candidates new to it read (one statement)
    /// and that of tasks no longer asked for dropped; else read afresh. The key is read first: see [`LedgerKey`].
    pub async fn refresh(
        kept: Option<Self>,
        store: &EventStore,
        config: &BudgetsConfig,
        today: NaiveDate,
        candidates: &[(TaskId, &str)],
    ) -> Result<Self, StoreError> {
        if !config.any() {
            return Self::read(store, config, today).await;
        }
        let key = LedgerKey::read(store, today).await?;
        let mut ledger = match kept {
            Some(kept) if kept.key.as_ref() == Some(&key) => kept,
            _ => Self::read(store, config, today).await?,
        };
        ledger.key = Some(key);
        let wanted: HashSet<TaskId> = candidates.iter().map(|(task, _)| *task).collect();
        ledger.tasks.retain(|task, _| wanted.contains(task));
        let new: Vec<TaskId> = wanted
            .iter()
            .filter(|task| !ledger.tasks.contains_key(task))
            .copied()
            .collect();
        ledger.read_tasks(store, config, &new).await?;
        ledger.repo_standings.clear();
        if config.repo_daily.is_set() {
            for (_, repo) in candidates {
                if !ledger.repo_standings.contains_key(*repo) {
                    let standing = ledger.repo_standing(config, repo);
                    ledger.repo_standings.insert((*repo).to_owned(), standing);
                }
            }
        }
        ledger.day_standing = config
            .daily
            .is_set()
            .then(|| ledger.day_standing_now(config));
        Ok(ledger)
    }

    /// Reads the own spend of `tasks` (one statement per [`crate::eventlog::sql::MAX_PARAMS`] ids) into the
    /// ledger, when a task limit is set.
    async fn read_tasks(
        &mut self,
        store: &EventStore,
        config: &BudgetsConfig,
        tasks: &[TaskId],
    ) -> Result<(), StoreError> {
        if !config.task.is_set() || tasks.is_empty() {
            return Ok(());
        }
        let ids: Vec<String> = tasks.iter().map(ToString::to_string).collect();
        let mut found: HashMap<String, usage_rows::Spent> = usage_rows::tasks(store, &ids)
            .await?
            .into_iter()
            .map(|row| (row.task_id, row.spent))
            .collect();
        for (task, id) in tasks.iter().zip(&ids) {
            self.tasks
                .insert(*task, found.remove(id).unwrap_or_default());
        }
        Ok(())
    }

    /// [`super::standings`] of a task in `repo`, from this ledger and the task's own spend.
    pub async fn standings(
        &self,
        store: &EventStore,
        config: &BudgetsConfig,
        task: TaskId,
        repo: &str,
    ) -> Result<Vec<Standing>, StoreError> {
        if !config.any() {
            return Ok(Vec::new());
        }
        let mut out = Vec::with_capacity(3);
        if config.task.is_set() {
            let spent = match self.tasks.get(&task) {
                Some(spent) => spent.clone(),
                None => usage_rows::task(store, &task.to_string())
                    .await?
                    .map(|row| row.spent)
                    .unwrap_or_default(),
            };
            let scope = Scope::task(task);
            let limit = in_force(config.task, &self.raises, &scope);
            out.push(standing(scope, &spent, limit, &self.on_record));
        }
        if config.repo_daily.is_set() {
            out.push(match self.repo_standings.get(repo) {
                Some(standing) => standing.clone(),
                None => self.repo_standing(config, repo),
            });
        }
        if config.daily.is_set() {
            out.push(match &self.day_standing {
                Some(standing) => standing.clone(),
                None => self.day_standing_now(config),
            });
        }
        Ok(out)
    }

    /// `repo`'s standing today.
    fn repo_standing(&self, config: &BudgetsConfig, repo: &str) -> Standing {
        let spent = usage_rows::total(
            self.today_rows
                .iter()
                .filter(|r| r.repo == repo)
                .map(|r| &r.spent),
        );
        let scope = Scope::repo(repo, self.today);
        let limit = in_force(config.repo_daily, &self.raises, &scope);
        standing(scope, &spent, limit, &self.on_record)
    }

    /// The day's standing, every repository's.
    fn day_standing_now(&self, config: &BudgetsConfig) -> Standing {
        let spent = usage_rows::total(self.today_rows.iter().map(|r| &r.spent));
        let scope = Scope::day(self.today);
        let limit = in_force(config.daily, &self.raises, &scope);
        standing(scope, &spent, limit, &self.on_record)
    }
}
