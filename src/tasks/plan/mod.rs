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
