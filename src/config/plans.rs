//! `[plans]`: which label makes an issue a plan, how many items a plan may have, and how its items land.

use super::file::{PlanLand, Tables};
use crate::tasks::plan::PlanLimits;

/// The most items any plan may have, whatever the file says: each one is a task, a worktree and an agent.
pub const MAX_ITEMS_CAP: i64 = 100;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlansConfig {
    /// A GitHub or Linear issue with this label becomes a plan.
    pub label: String,
    pub max_items: usize,
    pub land: PlanLand,
}

impl Default for PlansConfig {
    fn default() -> Self {
        Self::from_tables(&Tables::default()).unwrap_or(Self {
            label: "pidevops:plan".to_owned(),
            max_items: 20,
            land: PlanLand::Separate,
        })
    }
}

impl PlansConfig {
    /// What a proposed plan is held to.
    pub fn limits(&self) -> PlanLimits {
        PlanLimits {
            max_items: self.max_items,
        }
    }

    pub fn from_tables(tables: &Tables) -> Result<Self, String> {
        let plans = &tables.plans;
        let label = plans.label.trim();
        if label.is_empty() {
            return Err("plans.label must not be empty".to_owned());
        }
        let max_items = usize::try_from(plans.max_items)
            .ok()
            .filter(|n| (1..=MAX_ITEMS_CAP as usize).contains(n))
            .ok_or_else(|| {
                format!("plans.max_items must be a whole number from 1 to {MAX_ITEMS_CAP}")
            })?;
        Ok(Self {
            label: label.to_owned(),
            max_items,
            land: plans.land,
        })
    }
}
