//! `[plans]`: which label makes an issue a plan, how many items a plan may have, and how its items land; and each
//! repository's `plans_may_name`: the protected paths a planner may give an item.

use std::collections::BTreeMap;

use super::file::{PlanLand, Tables};
use crate::tasks::plan::guard::{protected, protected_root};
use crate::tasks::plan::PlanLimits;
use crate::tasks::values::RepoName;

/// The most items any plan may have, whatever the file says: each one is a task, a worktree and an agent.
pub const MAX_ITEMS_CAP: i64 = 100;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlansConfig {
    /// A GitHub or Linear issue with this label becomes a plan.
    pub label: String,
    pub max_items: usize,
    pub land: PlanLand,
    /// `[repos."o/n"] plans_may_name` where set: the protected parts (`.github/workflows`) a planner's scope may
    /// name for that repository. Absent: none.
    pub may_name: BTreeMap<RepoName, Vec<String>>,
}

impl Default for PlansConfig {
    fn default() -> Self {
        Self::from_tables(&Tables::default()).unwrap_or(Self {
            label: "pidevops:plan".to_owned(),
            max_items: 20,
            land: PlanLand::Separate,
            may_name: BTreeMap::new(),
        })
    }
}

impl PlansConfig {
    /// What a proposed plan is held to, for no repository in particular (no protected path may be named).
    pub fn limits(&self) -> PlanLimits {
        PlanLimits {
            max_items: self.max_items,
            may_name: Vec::new(),
        }
    }

    /// What a plan proposed for `repo` is held to.
    pub fn limits_for(&self, repo: &RepoName) -> PlanLimits {
        PlanLimits {
            max_items: self.max_items,
            may_name: self.may_name(repo).to_vec(),
        }
    }

    /// The protected parts a planner's scope may name in `repo` (`guard::Author::Planner`).
    pub fn may_name(&self, repo: &RepoName) -> &[String] {
        self.may_name.get(repo).map_or(&[], Vec::as_slice)
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
        let mut may_name = BTreeMap::new();
        for (name, repo) in &tables.repos {
            let Some(paths) = &repo.plans_may_name else {
                continue;
            };
            let key = format!("repos.\"{name}\".plans_may_name");
            let parsed = name
                .parse::<RepoName>()
                .map_err(|e| format!("[repos.\"{name}\"]: {e}"))?;
            for path in paths {
                if !is_protected_part(path) {
                    let names: Vec<&str> = protected().map(|p| p.name()).collect();
                    return Err(format!(
                        "{key}: {path:?} is not a protected path; name one as it is protected ({}), or one in a \
                         subdirectory (web/.claude)",
                        names.join(", ")
                    ));
                }
            }
            may_name.insert(parsed, paths.clone());
        }
        Ok(Self {
            label: label.to_owned(),
            max_items,
            land: plans.land,
            may_name,
        })
    }
}

/// Whether `path` is exactly a protected path's protected part (`.github/workflows`, `web/.claude`,
/// `.mcp.json`), written plainly: no empty, `.` or `..` segment.
fn is_protected_part(path: &str) -> bool {
    path.split('/')
        .all(|s| !s.is_empty() && s != "." && s != "..")
        && protected_root(path) == Some(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::file::RepoTable;

    fn with(paths: &[&str]) -> Result<PlansConfig, String> {
        let mut tables = Tables::default();
        tables.repos.insert(
            "acme/app".to_owned(),
            RepoTable {
                plans_may_name: Some(paths.iter().map(|p| (*p).to_owned()).collect()),
                ..RepoTable::default()
            },
        );
        PlansConfig::from_tables(&tables)
    }

    #[test]
    fn plans_may_name_lists_protected_parts_only() {
        let repo: RepoName = "acme/app".parse().unwrap();
        let config = with(&[".github/workflows", "web/.claude", ".mcp.json"]).unwrap();
        assert_eq!(
            config.may_name(&repo),
            [".github/workflows", "web/.claude", ".mcp.json"]
        );
        assert_eq!(config.limits_for(&repo).may_name, config.may_name(&repo));
        assert!(config.limits().may_name.is_empty());
        let other: RepoName = "acme/other".parse().unwrap();
        assert!(config.may_name(&other).is_empty());
        assert!(PlansConfig::default().may_name.is_empty());
        for wrong in [
            ".github/workflows/**",
            ".github/workflows/",
            ".github",
            ".claude/settings.json",
            "src",
            "",
            "./.claude",
            "../.claude",
            "/.claude",
        ] {
            let error = with(&[wrong]).unwrap_err();
            assert!(
                error.starts_with(&format!(
                    "repos.\"acme/app\".plans_may_name: {wrong:?} is not a protected path"
                )),
                "{error}"
            );
        }
    }
}
