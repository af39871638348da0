//! `[budgets]`: what agents may spend per task, per repository per UTC day and overall per UTC day, in US dollars
//! and/or tokens, and where the soft limit (one notice) sits, read into `budgets::BudgetsConfig`.
//!
//! ```toml
//! [budgets]
//! task_usd = 5.0              # a task's attempts together
//! task_tokens = 3000000
//! repo_daily_usd = 50.0       # one repository, one UTC day
//! repo_daily_tokens = 40000000
//! daily_usd = 200.0           # every repository, one UTC day
//! daily_tokens = 150000000
//! soft_at = 0.8               # one notice at 80 % of a limit
//! ```

use super::Tables;
use crate::budgets::{BudgetsConfig, Limit};

/// `[budgets]`, each limit checked.
pub fn budgets_config(tables: &Tables) -> Result<BudgetsConfig, String> {
    let b = &tables.budgets;
    let usd = |value: Option<f64>, key: &str| -> Result<Option<f64>, String> {
        match value {
            Some(v) if !(v.is_finite() && v > 0.0) => Err(format!(
                "budgets.{key} must be a positive number of US dollars, not {v}"
            )),
            v => Ok(v),
        }
    };
    let tokens = |value: Option<i64>, key: &str| -> Result<Option<u64>, String> {
        match value {
            Some(v) if v < 1 => Err(format!(
                "budgets.{key} must be a whole number of tokens of at least 1, not {v}"
            )),
            v => Ok(v.map(i64::unsigned_abs)),
        }
    };
    if !(b.soft_at > 0.0 && b.soft_at <= 1.0) {
        return Err(format!(
            "budgets.soft_at must be a fraction above 0 and at most 1 (0.8: a notice at 80 %), not {}",
            b.soft_at
        ));
    }
    Ok(BudgetsConfig {
        task: Limit {
            usd: usd(b.task_usd, "task_usd")?,
            tokens: tokens(b.task_tokens, "task_tokens")?,
        },
        repo_daily: Limit {
            usd: usd(b.repo_daily_usd, "repo_daily_usd")?,
            tokens: tokens(b.repo_daily_tokens, "repo_daily_tokens")?,
        },
        daily: Limit {
            usd: usd(b.daily_usd, "daily_usd")?,
            tokens: tokens(b.daily_tokens, "daily_tokens")?,
        },
        soft_at: b.soft_at,
    })
}
