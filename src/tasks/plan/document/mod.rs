//! The plan file, version 1: what a planner agent writes to `.pidevops/plan.json` (documented for planner
//! authors in `docs/plans.md`, with a JSON Schema in `docs/plan.schema.json`).
//!
//! [`PlanDocument::parse`] checks everything and reports every problem it finds, not only the first: the lines go
//! back to the planner, and one round trip per mistake would be slow and expensive. A parsed document holds its
//! invariants (ids unique, dependencies known and acyclic, scopes valid and disjoint), and so does one read back
//! with serde, which runs the same checks.

use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::glob::Glob;
use crate::tasks::values::Spec;

mod errors;
mod validate;

pub use errors::{PlanError, PlanErrorKind, PlanErrors};

/// Where a planner writes its plan, relative to its worktree.
pub const PLAN_PATH: &str = ".pidevops/plan.json";

/// What the operator configured a plan to be held to; everything else about a plan is fixed by the version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanLimits {
    /// The most items a plan may have: each becomes a task running in parallel.
    pub max_items: usize,
    /// The protected paths' protected parts (`.github/workflows`, `web/.claude`) an item's scope may name or
    /// cover: the repository's `plans_may_name`. An entry reaching any other protected path
    /// (`guard::PROTECTED`) is refused; a plan read back from the log is not held to it.
    pub may_name: Vec<String>,
}

impl PlanLimits {
    pub const DEFAULT_MAX_ITEMS: usize = 20;
}

impl Default for PlanLimits {
    fn default() -> Self {
        PlanLimits {
            max_items: Self::DEFAULT_MAX_ITEMS,
            may_name: Vec::new(),
        }
    }
}

/// An item's id: 1 to 40 of `a-z`, `0-9`, `-`, `_`, starting with a letter or digit. Unique within its plan;
/// `depends_on` names items by it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ItemId(String);

impl ItemId {
    /// The rule, as the schema and error lines spell it.
    pub const PATTERN: &'static str = "^[a-z0-9][a-z0-9_-]{0,39}$";
    pub const MAX_CHARS: usize = 40;

    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn valid(s: &str) -> bool {
        let starts_well = s
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        starts_well
            && s.len() <= Self::MAX_CHARS
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
    }
}

/// An id that does not match [`ItemId::PATTERN`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("item id {0:?} does not match {pattern}", pattern = ItemId::PATTERN)]
pub struct ItemIdError(pub String);

impl FromStr for ItemId {
    type Err = ItemIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if ItemId::valid(s) {
            Ok(ItemId(s.to_owned()))
        } else {
            Err(ItemIdError(errors::cut(s, 60)))
        }
    }
}

impl TryFrom<String> for ItemId {
    type Error = ItemIdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<ItemId> for String {
    fn from(id: ItemId) -> Self {
        id.0
    }
}

impl fmt::Display for ItemId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One item of a plan: a task to create, confined to its scope, after the items it depends on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanItem {
    id: ItemId,
    title: String,
    task: String,
    scope: Vec<Glob>,
    done_when: String,
    depends_on: Vec<ItemId>,
}

impl PlanItem {
    pub const TITLE_MAX_CHARS: usize = 200;
    /// The task text's bound: the spec's task is the title, a blank line and the task, within
    /// [`Spec::MAX_CHARS`].
    pub const TASK_MAX_CHARS: usize = Spec::MAX_CHARS - Self::TITLE_MAX_CHARS - 2;
    pub const DONE_WHEN_MAX_CHARS: usize = Spec::MAX_CHARS;
    /// The most scope entries: with globs of at most 300 characters the joined scope fits a spec.
    pub const MAX_SCOPE_ENTRIES: usize = 50;

    pub fn id(&self) -> &ItemId {
        &self.id
    }

    /// One line, at most [`PlanItem::TITLE_MAX_CHARS`] characters.
    pub fn title(&self) -> &str {
        &self.title
    }

    pub fn task(&self) -> &str {
        &self.task
    }

    /// The paths this item's task may change; no other item's scope overlaps them.
    pub fn scope(&self) -> &[Glob] {
        &self.scope
    }

    pub fn done_when(&self) -> &str {
        &self.done_when
    }

    /// The items that must be done before this one starts, in file order.
    pub fn depends_on(&self) -> &[ItemId] {
        &self.depends_on
    }

    /// The child task's spec: the title, a blank line and the task; the scope's globs joined with `, ` (which
    /// [`Scope::parse`](super::Scope::parse) reads back as the same globs); the done-when text.
    pub fn spec(&self) -> Spec {
        let task = format!("{}\n\n{}", self.title, self.task);
        let scope = self
            .scope
            .iter()
            .map(Glob::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        // Proven invariant: validation bounded the title, task, scope entries and done_when so the parts fit
        // Spec::MAX_CHARS, refused empty text and NUL, and every item is built only by validation.
        Spec::new(task, scope, self.done_when.clone())
            .expect("a validated plan item always makes a valid spec")
    }
}

/// A validated plan, version 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanDocument {
    summary: Option<String>,
    items: Vec<PlanItem>,
}

impl PlanDocument {
    /// The version this parser reads. A file of another version is refused; a future version gets its own parser
    /// and version 1 files stay readable.
    pub const VERSION: u64 = 1;
    pub const SUMMARY_MAX_CHARS: usize = 4_000;
    /// The fields of the document and of an item: anything else is refused. `docs/plan.schema.json` names
    /// exactly these (a test holds it to them).
    pub const FIELDS: [&'static str; 3] = ["version", "summary", "items"];
    pub const ITEM_FIELDS: [&'static str; 6] =
        ["id", "title", "task", "scope", "done_when", "depends_on"];
    pub const REQUIRED_FIELDS: [&'static str; 2] = ["version", "items"];
    pub const REQUIRED_ITEM_FIELDS: [&'static str; 5] =
        ["id", "title", "task", "scope", "done_when"];

    /// Reads and checks a plan file. Every problem found is reported, each on its own line; items are checked
    /// against each other (scope overlap, dependency cycles) only when their number is within the limit, and the
    /// overlap check has a fixed work budget (a plan whose scopes would take more is refused for that), so the
    /// work stays bounded whatever the planner wrote. The caller bounds the file's size.
    pub fn parse(bytes: &[u8], limits: &PlanLimits) -> Result<PlanDocument, PlanErrors> {
        validate::parse(bytes, limits)
    }

    /// The planner's one-paragraph summary, if it wrote one.
    pub fn summary(&self) -> Option<&str> {
        self.summary.as_deref()
    }

    /// The items in file order.
    pub fn items(&self) -> &[PlanItem] {
        &self.items
    }

    pub fn item(&self, id: &ItemId) -> Option<&PlanItem> {
        self.items.iter().find(|item| &item.id == id)
    }

    /// The items with every item after the items it depends on, and otherwise in file order: the order children
    /// are created in.
    pub fn topological_order(&self) -> Vec<&PlanItem> {
        let index: HashMap<&ItemId, usize> = self
            .items
            .iter()
            .enumerate()
            .map(|(i, item)| (&item.id, i))
            .collect();
        let mut waiting: Vec<usize> = self.items.iter().map(|i| i.depends_on.len()).collect();
        let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); self.items.len()];
        for (i, item) in self.items.iter().enumerate() {
            for dependency in &item.depends_on {
                if let Some(&d) = index.get(dependency) {
                    dependents[d].push(i);
                }
            }
        }
        // Kahn's algorithm, always taking the earliest ready item in file order.
        let mut ready: BinaryHeap<std::cmp::Reverse<usize>> = waiting
            .iter()
            .enumerate()
            .filter(|(_, &w)| w == 0)
            .map(|(i, _)| std::cmp::Reverse(i))
            .collect();
        let mut order = Vec::with_capacity(self.items.len());
        while let Some(std::cmp::Reverse(i)) = ready.pop() {
            order.push(&self.items[i]);
            for &dependent in &dependents[i] {
                waiting[dependent] -= 1;
                if waiting[dependent] == 0 {
                    ready.push(std::cmp::Reverse(dependent));
                }
            }
        }
        order
    }
}

/// The stored shape: the version 1 file format itself, so a stored plan reads like a file.
#[derive(Serialize)]
struct Stored<'a> {
    version: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: Option<&'a str>,
    items: Vec<StoredItem<'a>>,
}

#[derive(Serialize)]
struct StoredItem<'a> {
    id: &'a ItemId,
    title: &'a str,
    task: &'a str,
    scope: &'a [Glob],
    done_when: &'a str,
    depends_on: &'a [ItemId],
}

impl Serialize for PlanDocument {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Stored {
            version: Self::VERSION,
            summary: self.summary.as_deref(),
            items: self
                .items
                .iter()
                .map(|item| StoredItem {
                    id: &item.id,
                    title: &item.title,
                    task: &item.task,
                    scope: &item.scope,
                    done_when: &item.done_when,
                    depends_on: &item.depends_on,
                })
                .collect(),
        }
        .serialize(serializer)
    }
}

/// Reading a stored plan runs every check again, so a `PlanDocument` from the log holds the same invariants as
/// one from a file. The item limit is not applied: it was the operator's limit when the plan was accepted, and a
/// lower one since must not make the log unreadable. Checks of version 1 may be relaxed but never tightened, for
/// the same reason.
impl<'de> Deserialize<'de> for PlanDocument {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        let limits = PlanLimits {
            max_items: usize::MAX,
            may_name: Vec::new(),
        };
        validate::check(&value, &limits, validate::Reading::Stored)
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod schema_tests {
    //! `docs/plan.schema.json` describes exactly what the parser accepts.

    use serde_json::Value;

    use super::*;

    fn schema() -> Value {
        serde_json::from_str(include_str!("../../../../docs/plan.schema.json"))
            .expect("docs/plan.schema.json is JSON")
    }

    fn names(object: &Value) -> Vec<String> {
        let mut names: Vec<String> = object
            .as_object()
            .expect("an object of properties")
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }

    fn strings(value: &Value) -> Vec<String> {
        let mut strings: Vec<String> = value
            .as_array()
            .expect("an array of strings")
            .iter()
            .map(|v| v.as_str().expect("a string").to_owned())
            .collect();
        strings.sort();
        strings
    }

    fn sorted(fields: &[&str]) -> Vec<String> {
        let mut fields: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
        fields.sort();
        fields
    }

    #[test]
    fn the_schema_names_exactly_the_fields_the_parser_accepts() {
        let schema = schema();
        assert_eq!(
            schema["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        assert_eq!(names(&schema["properties"]), sorted(&PlanDocument::FIELDS));
        assert_eq!(
            strings(&schema["required"]),
            sorted(&PlanDocument::REQUIRED_FIELDS)
        );
        assert_eq!(schema["additionalProperties"], false);
        let item = &schema["$defs"]["item"];
        assert_eq!(
            schema["properties"]["items"]["items"]["$ref"],
            "#/$defs/item"
        );
        assert_eq!(
            names(&item["properties"]),
            sorted(&PlanDocument::ITEM_FIELDS)
        );
        assert_eq!(
            strings(&item["required"]),
            sorted(&PlanDocument::REQUIRED_ITEM_FIELDS)
        );
        assert_eq!(item["additionalProperties"], false);
    }

    #[test]
    fn the_schema_states_the_parsers_bounds() {
        let schema = schema();
        let item = &schema["$defs"]["item"]["properties"];
        assert_eq!(
            schema["properties"]["version"]["const"],
            PlanDocument::VERSION
        );
        assert_eq!(
            schema["properties"]["summary"]["maxLength"],
            PlanDocument::SUMMARY_MAX_CHARS
        );
        assert_eq!(item["id"]["pattern"], ItemId::PATTERN);
        assert_eq!(item["title"]["maxLength"], PlanItem::TITLE_MAX_CHARS);
        assert_eq!(item["task"]["maxLength"], PlanItem::TASK_MAX_CHARS);
        assert_eq!(
            item["done_when"]["maxLength"],
            PlanItem::DONE_WHEN_MAX_CHARS
        );
        assert_eq!(item["scope"]["maxItems"], PlanItem::MAX_SCOPE_ENTRIES);
        assert_eq!(item["scope"]["items"]["maxLength"], Glob::MAX_CHARS);
    }
}
