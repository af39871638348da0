//! The checks of a version 1 plan. The file is parsed as a JSON value and walked by hand rather than through
//! `#[serde(deny_unknown_fields)]` structs: serde stops at the first problem, and the planner should hear of all
//! of them at once. Each field is typed on its own, so a good field of a bad item still takes part in the checks
//! between items (its scope in the overlap check, its id as a dependency target).

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::errors::{cut, quote, PlanErrorKind as Kind, PlanErrors};
use super::{ItemId, PlanDocument, PlanItem, PlanLimits, PLAN_PATH};
use crate::tasks::plan::glob::Glob;
use crate::tasks::plan::scope::Scope;

mod protected;
mod relations;

use protected::protected_scopes;
use relations::{cycles, overlaps, unique_ids};

pub(super) fn parse(bytes: &[u8], limits: &PlanLimits) -> Result<PlanDocument, PlanErrors> {
    let mut errors = PlanErrors::new();
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let at = e.valid_up_to();
            let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
            errors.push(
                Kind::NotUtf8,
                format!("{PLAN_PATH} is not UTF-8: byte {at} (line {line}) is not valid UTF-8; write the file as UTF-8"),
            );
            return Err(errors);
        }
    };
    // Some editors start a UTF-8 file with a byte order mark; it carries nothing, and serde_json refuses it.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    match serde_json::from_str::<Value>(text) {
        Ok(value) => check(&value, limits, Reading::File),
        Err(e) => {
            let message = e.to_string();
            let position = format!(" at line {} column {}", e.line(), e.column());
            let what = message.strip_suffix(&position).unwrap_or(&message);
            errors.push(
                Kind::NotJson,
                format!(
                    "{PLAN_PATH} is not valid JSON: {what} at line {}, column {}",
                    e.line(),
                    e.column()
                ),
            );
            Err(errors)
        }
    }
}

/// What is being read: a planner's file, held to every check of today, or a plan stored in the log, held only to
/// the checks it was accepted under (version 1's checks may be relaxed, never tightened, for stored plans).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Reading {
    File,
    Stored,
}

/// Checks a parsed plan and types it, or returns every problem found.
pub(super) fn check(
    value: &Value,
    limits: &PlanLimits,
    reading: Reading,
) -> Result<PlanDocument, PlanErrors> {
    let mut errors = PlanErrors::new();
    find_nul(value, &mut String::new(), &mut errors);
    let Some(root) = value.as_object() else {
        errors.push(
            Kind::NotAnObject,
            format!(
                "the plan must be a JSON object such as {{\"version\": 1, \"items\": [...]}}, not {}",
                json_type(value)
            ),
        );
        return Err(errors);
    };
    for key in root.keys() {
        if !PlanDocument::FIELDS.contains(&key.as_str()) {
            errors.push(
                Kind::UnknownField,
                format!(
                    "unknown field {} at the top level; the plan's fields are version, summary and items",
                    quote(key)
                ),
            );
        }
    }
    match root.get("version") {
        None => errors.push(
            Kind::Version,
            format!(
                "version is missing: add \"version\": {}",
                PlanDocument::VERSION
            ),
        ),
        Some(v) if v.as_u64() == Some(PlanDocument::VERSION) => {}
        Some(v) => {
            errors.push(
                Kind::Version,
                format!(
                    "version {} is not understood; this pidevops reads plan version {} only",
                    cut(&v.to_string(), 40),
                    PlanDocument::VERSION
                ),
            );
            // The rest was written to other rules: checking it against these would only add noise.
            return Err(errors);
        }
    }
    let summary = read_summary(root, &mut errors);
    let items: &[Value] = match root.get("items") {
        None => {
            errors.push(
                Kind::MissingField,
                "items is missing: list the plan's items in \"items\": [...]".to_owned(),
            );
            &[]
        }
        Some(Value::Array(items)) => {
            if items.is_empty() {
                errors.push(
                    Kind::NoItems,
                    "items is empty; a plan needs at least one item".to_owned(),
                );
            }
            items
        }
        Some(other) => {
            errors.push(
                Kind::WrongType,
                format!(
                    "items must be an array of item objects, not {}",
                    json_type(other)
                ),
            );
            &[]
        }
    };
    let within_limit = items.len() <= limits.max_items;
    if !within_limit {
        errors.push(
            Kind::TooManyItems,
            format!(
                "items has {} entries; at most {} are allowed: merge small items, or leave work for a later plan",
                items.len(),
                limits.max_items
            ),
        );
    }
    let mut drafts: Vec<Draft> = items
        .iter()
        .enumerate()
        .map(|(index, item)| Draft::read(index, item, reading, &mut errors))
        .collect();
    let ids = unique_ids(&mut drafts, &mut errors);
    // Named in every unknown-dependency line; listed once, not per line, whatever the number of items.
    let mut listed: Vec<(&ItemId, &usize)> = ids.iter().collect();
    listed.sort_by_key(|(_, index)| **index);
    let listed: Vec<&str> = listed.iter().take(30).map(|(id, _)| id.as_str()).collect();
    let known = cut(&listed.join(", "), 200);
    for draft in &mut drafts {
        draft.resolve_dependencies(&ids, &known, &mut errors);
    }
    // Comparing items with each other is quadratic: only for a plan whose size is already acceptable.
    if within_limit {
        overlaps(&drafts, &mut errors);
        cycles(&drafts, &ids, &mut errors);
        if reading == Reading::File {
            protected_scopes(&drafts, &limits.may_name, &mut errors);
        }
    }
    let typed: Option<Vec<PlanItem>> = drafts.iter().map(Draft::finish).collect();
    match typed {
        Some(items) if errors.is_empty() => Ok(PlanDocument { summary, items }),
        _ => {
            if errors.is_empty() {
                // Every field left untyped has pushed its problem; this line only guards that promise.
                errors.push(Kind::WrongType, "an item could not be read".to_owned());
            }
            Err(errors)
        }
    }
}

fn read_summary(root: &Map<String, Value>, errors: &mut PlanErrors) -> Option<String> {
    match root.get("summary") {
        None | Some(Value::Null) => None,
        Some(Value::String(summary)) => {
            let chars = summary.chars().count();
            if chars > PlanDocument::SUMMARY_MAX_CHARS {
                errors.push(
                    Kind::Summary,
                    format!(
                        "summary is {chars} characters; at most {} allowed (one paragraph)",
                        PlanDocument::SUMMARY_MAX_CHARS
                    ),
                );
            }
            Some(summary.clone())
        }
        Some(other) => {
            errors.push(
                Kind::WrongType,
                format!("summary must be a string, not {}", json_type(other)),
            );
            None
        }
    }
}

/// Reports every string (and field name) holding a NUL, by its place in the document: Postgres cannot store one
/// in JSON, so a plan carrying it could never be recorded.
fn find_nul(value: &Value, at: &mut String, errors: &mut PlanErrors) {
    let place = |at: &str| {
        if at.is_empty() {
            "the document".to_owned()
        } else {
            at.escape_debug().to_string()
        }
    };
    match value {
        Value::String(s) if s.contains('\0') => errors.push(
            Kind::Nul,
            format!(
                "{} contains a NUL character (\\u0000); remove it",
                place(at)
            ),
        ),
        Value::Array(values) => {
            for (i, v) in values.iter().enumerate() {
                let len = at.len();
                at.push_str(&format!("[{i}]"));
                find_nul(v, at, errors);
                at.truncate(len);
            }
        }
        Value::Object(map) => {
            for (key, v) in map {
                if key.contains('\0') {
                    errors.push(
                        Kind::Nul,
                        format!(
                            "{} has a field name with a NUL character (\\u0000)",
                            place(at)
                        ),
                    );
                }
                let len = at.len();
                if !at.is_empty() {
                    at.push('.');
                }
                at.push_str(&cut(key, 40));
                find_nul(v, at, errors);
                at.truncate(len);
            }
        }
        _ => {}
    }
}

/// "a string", "an array", … for error lines.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Why a planner's scope entry names no path ([`Scope::placeholder`]); a stored plan is not held to it.
fn placeholder(entry: &str, reading: Reading) -> Option<&'static str> {
    match reading {
        Reading::File => Scope::placeholder(entry),
        Reading::Stored => None,
    }
}

/// One item as far as it could be typed: each field is `Some` when it passed its checks.
struct Draft {
    index: usize,
    /// `items[2] "api"`, or `items[2]` while the id is not valid.
    label: String,
    id: Option<ItemId>,
    /// A later item with an id already used: it names nothing, as a dependency target or in a cycle.
    duplicate: bool,
    title: Option<String>,
    task: Option<String>,
    done_when: Option<String>,
    /// The valid entries, compared with other items' even when some entry is invalid.
    globs: Vec<Glob>,
    /// Each valid entry's place in `scope`, for error lines.
    glob_at: Vec<usize>,
    scope_ok: bool,
    /// `depends_on` entries that are strings, with their position; resolved against the ids once all are read.
    wanted: Vec<(usize, String)>,
    depends_on: Option<Vec<ItemId>>,
}

impl Draft {
    fn read(index: usize, value: &Value, reading: Reading, errors: &mut PlanErrors) -> Draft {
        let mut draft = Draft {
            index,
            label: format!("items[{index}]"),
            id: None,
            duplicate: false,
            title: None,
            task: None,
            done_when: None,
            globs: Vec::new(),
            glob_at: Vec::new(),
            scope_ok: false,
            wanted: Vec::new(),
            depends_on: None,
        };
        let Some(item) = value.as_object() else {
            errors.push(
                Kind::NotAnObject,
                format!(
                    "{} must be an object with {}, not {}",
                    draft.label,
                    PlanDocument::ITEM_FIELDS.join(", "),
                    json_type(value)
                ),
            );
            return draft;
        };
        draft.read_id(item, errors);
        for key in item.keys() {
            if !PlanDocument::ITEM_FIELDS.contains(&key.as_str()) {
                errors.push(
                    Kind::UnknownField,
                    format!(
                        "{}: unknown field {}; an item's fields are {}",
                        draft.label,
                        quote(key),
                        PlanDocument::ITEM_FIELDS.join(", ")
                    ),
                );
            }
        }
        let title = TextRule {
            field: "title",
            kind: Kind::Title,
            max: PlanItem::TITLE_MAX_CHARS,
            one_line: true,
        };
        draft.title = title.read(item, &draft.label, errors);
        let task = TextRule {
            field: "task",
            kind: Kind::Task,
            max: PlanItem::TASK_MAX_CHARS,
            one_line: false,
        };
        draft.task = task.read(item, &draft.label, errors);
        let done_when = TextRule {
            field: "done_when",
            kind: Kind::DoneWhen,
            max: PlanItem::DONE_WHEN_MAX_CHARS,
            one_line: false,
        };
        draft.done_when = done_when.read(item, &draft.label, errors);
        draft.read_scope(item, reading, errors);
        draft.read_depends_on(item, errors);
        draft
    }

    fn read_id(&mut self, item: &Map<String, Value>, errors: &mut PlanErrors) {
        let label = &self.label;
        match item.get("id") {
            None => errors.push(Kind::MissingField, format!("{label}: id is missing")),
            Some(Value::String(id)) if id.is_empty() => {
                errors.push(Kind::Id, format!("{label}: id is empty"));
            }
            Some(Value::String(id)) => match id.parse::<ItemId>() {
                Ok(id) => {
                    self.label = format!("{label} {:?}", id.as_str());
                    self.id = Some(id);
                }
                Err(_) => errors.push(
                    Kind::Id,
                    format!(
                        "{label}: id {} must match {} (1 to {} of a-z, 0-9, - and _, starting with a letter or digit)",
                        quote(id),
                        ItemId::PATTERN,
                        ItemId::MAX_CHARS
                    ),
                ),
            },
            Some(other) => errors.push(
                Kind::WrongType,
                format!("{label}: id must be a string, not {}", json_type(other)),
            ),
        }
    }

    fn read_scope(&mut self, item: &Map<String, Value>, reading: Reading, errors: &mut PlanErrors) {
        let label = &self.label;
        let entries = match item.get("scope") {
            None => {
                errors.push(
                    Kind::MissingField,
                    format!("{label}: scope is missing: list the paths or globs this item may change, such as [\"src/api/**\"]"),
                );
                return;
            }
            Some(Value::Array(entries)) => entries,
            Some(other) => {
                errors.push(
                    Kind::WrongType,
                    format!(
                        "{label}: scope must be an array of paths or globs, not {}",
                        json_type(other)
                    ),
                );
                return;
            }
        };
        let mut ok = true;
        if entries.is_empty() {
            errors.push(
                Kind::Scope,
                format!("{label}: scope is empty; list the paths or globs this item may change"),
            );
            ok = false;
        }
        if entries.len() > PlanItem::MAX_SCOPE_ENTRIES {
            errors.push(
                Kind::Scope,
                format!(
                    "{label}: scope has {} entries; at most {} allowed (a glob such as src/api/** covers a directory)",
                    entries.len(),
                    PlanItem::MAX_SCOPE_ENTRIES
                ),
            );
            ok = false;
        }
        for (j, entry) in entries.iter().enumerate() {
            match entry {
                // Reported where it is, by `find_nul`.
                Value::String(text) if text.contains('\0') => ok = false,
                // A placeholder would be read as a path (`n/a`) or as every path (`**`): neither is a scope.
                Value::String(text) if placeholder(text, reading).is_some() => {
                    let why = placeholder(text, reading).unwrap_or("names no path");
                    errors.push(
                        Kind::Placeholder,
                        format!("{label}: scope[{j}] {} {why}; list the paths or globs this item may change, such as \"src/api/**\"", quote(text)),
                    );
                    ok = false;
                }
                Value::String(text) => match text.parse::<Glob>() {
                    Ok(glob) if Scope::holds(&glob) => {
                        self.globs.push(glob);
                        self.glob_at.push(j);
                    }
                    Ok(_) => {
                        errors.push(
                            Kind::Scope,
                            format!("{label}: scope[{j}] {} contains whitespace or a backtick, which a task's scope line cannot hold", quote(text)),
                        );
                        ok = false;
                    }
                    Err(e) => {
                        errors.push(Kind::Glob, format!("{label}: scope[{j}]: {e}"));
                        ok = false;
                    }
                },
                other => {
                    errors.push(
                        Kind::WrongType,
                        format!(
                            "{label}: scope[{j}] must be a string, not {}",
                            json_type(other)
                        ),
                    );
                    ok = false;
                }
            }
        }
        self.scope_ok = ok;
    }

    fn read_depends_on(&mut self, item: &Map<String, Value>, errors: &mut PlanErrors) {
        let label = &self.label;
        match item.get("depends_on") {
            None | Some(Value::Null) => self.depends_on = Some(Vec::new()),
            Some(Value::Array(entries)) => {
                let mut ok = true;
                for (j, entry) in entries.iter().enumerate() {
                    match entry {
                        Value::String(id) => self.wanted.push((j, id.clone())),
                        other => {
                            errors.push(
                                Kind::WrongType,
                                format!(
                                    "{label}: depends_on[{j}] must be an item id (a string), not {}",
                                    json_type(other)
                                ),
                            );
                            ok = false;
                        }
                    }
                }
                // Resolved once every id is known.
                self.depends_on = ok.then(Vec::new);
            }
            Some(other) => errors.push(
                Kind::WrongType,
                format!(
                    "{label}: depends_on must be an array of item ids, not {}",
                    json_type(other)
                ),
            ),
        }
    }

    /// Resolves the wanted ids against every valid id; `known` lists them for the error line.
    fn resolve_dependencies(
        &mut self,
        ids: &HashMap<ItemId, usize>,
        known: &str,
        errors: &mut PlanErrors,
    ) {
        let label = &self.label;
        let mut seen: HashSet<&str> = HashSet::new();
        let mut resolved = Vec::new();
        let mut ok = true;
        for (j, wanted) in &self.wanted {
            let target = wanted
                .parse::<ItemId>()
                .ok()
                .filter(|id| ids.contains_key(id));
            if self.id.as_ref().is_some_and(|own| own.as_str() == wanted) {
                errors.push(
                    Kind::DependsOn,
                    format!("{label}: depends_on[{j}] names the item itself"),
                );
                ok = false;
            } else if !seen.insert(wanted) {
                errors.push(
                    Kind::DependsOn,
                    format!("{label}: depends_on lists {} more than once", quote(wanted)),
                );
                ok = false;
            } else if let Some(id) = target {
                resolved.push(id);
            } else {
                errors.push(
                    Kind::DependsOn,
                    format!(
                        "{label}: depends_on[{j}] {} is not the id of any item (the ids are: {})",
                        quote(wanted),
                        known
                    ),
                );
                ok = false;
            }
        }
        if let Some(depends_on) = &mut self.depends_on {
            if ok {
                *depends_on = resolved;
            } else {
                self.depends_on = None;
            }
        }
    }

    fn finish(&self) -> Option<PlanItem> {
        Some(PlanItem {
            id: self.id.clone().filter(|_| !self.duplicate)?,
            title: self.title.clone()?,
            task: self.task.clone()?,
            scope: self.scope_ok.then(|| self.globs.clone())?,
            done_when: self.done_when.clone()?,
            depends_on: self.depends_on.clone()?,
        })
    }
}

/// The checks of one free-text field of an item.
struct TextRule {
    field: &'static str,
    kind: Kind,
    max: usize,
    one_line: bool,
}

impl TextRule {
    fn read(
        &self,
        item: &Map<String, Value>,
        label: &str,
        errors: &mut PlanErrors,
    ) -> Option<String> {
        let field = self.field;
        let text = match item.get(field) {
            None => {
                errors.push(Kind::MissingField, format!("{label}: {field} is missing"));
                return None;
            }
            Some(Value::String(text)) => text,
            Some(other) => {
                errors.push(
                    Kind::WrongType,
                    format!(
                        "{label}: {field} must be a string, not {}",
                        json_type(other)
                    ),
                );
                return None;
            }
        };
        // A NUL is reported where it is, by `find_nul`.
        let mut ok = !text.contains('\0');
        if text.trim().is_empty() {
            errors.push(self.kind, format!("{label}: {field} is empty"));
            ok = false;
        }
        let chars = text.chars().count();
        if chars > self.max {
            errors.push(
                self.kind,
                format!(
                    "{label}: {field} is {chars} characters; at most {} allowed",
                    self.max
                ),
            );
            ok = false;
        }
        if self.one_line && text.contains(['\n', '\r']) {
            errors.push(self.kind, format!("{label}: {field} must be one line"));
            ok = false;
        }
        ok.then(|| text.clone())
    }
}
