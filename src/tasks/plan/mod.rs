//! STUB until the plan-file module lands (same names and shapes): the plan a planner agent writes.

use serde::{Deserialize, Serialize};

use super::values::Spec;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ItemId(pub String);

impl std::fmt::Display for ItemId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanItem {
    pub id: ItemId,
    pub title: String,
    pub task: String,
    pub scope: Vec<String>,
    pub done_when: String,
    pub depends_on: Vec<ItemId>,
}

impl PlanItem {
    pub fn spec(&self) -> Spec {
        Spec::new(
            format!("{}\n\n{}", self.title, self.task),
            self.scope.join(", "),
            self.done_when.clone(),
        )
        .expect("a checked item")
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanDocument {
    pub version: u32,
    #[serde(default)]
    pub summary: Option<String>,
    pub items: Vec<PlanItem>,
}

#[derive(Clone, Copy, Debug)]
pub struct PlanLimits {
    pub max_items: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanErrors(pub Vec<String>);

impl PlanErrors {
    pub fn retry_text(&self) -> String {
        format!(
            "The plan in .pidevops/plan.json was refused:\n- {}",
            self.0.join("\n- ")
        )
    }
}

impl PlanDocument {
    pub fn parse(bytes: &[u8], _limits: &PlanLimits) -> Result<Self, PlanErrors> {
        serde_json::from_slice(bytes).map_err(|e| PlanErrors(vec![e.to_string()]))
    }
    pub fn items(&self) -> &[PlanItem] {
        &self.items
    }
    pub fn topological_order(&self) -> Vec<&PlanItem> {
        self.items.iter().collect()
    }
}

/// STUB: a task's scope as rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope(Vec<String>);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScopeText {
    Paths(Scope),
    Prose,
    Empty,
}

impl Scope {
    pub fn parse(text: &str) -> ScopeText {
        let tokens: Vec<String> = text
            .split([',', '\n'])
            .map(|t| {
                t.trim()
                    .trim_start_matches("- ")
                    .trim_matches('`')
                    .to_owned()
            })
            .filter(|t| !t.is_empty())
            .collect();
        if tokens.is_empty() {
            return ScopeText::Empty;
        }
        if tokens.iter().any(|t| t.contains(char::is_whitespace)) {
            return ScopeText::Prose;
        }
        ScopeText::Paths(Scope(tokens))
    }
    pub fn outside(&self, changed: &[String]) -> Vec<String> {
        changed
            .iter()
            .filter(|path| {
                !self.0.iter().any(|g| {
                    let g = g.trim_end_matches("/**").trim_end_matches('/');
                    *path == g || path.starts_with(&format!("{g}/"))
                })
            })
            .cloned()
            .collect()
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join(", "))
    }
}
