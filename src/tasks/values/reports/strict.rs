//! The strict reading of an agent's JSON: duplicate keys refused at any depth, unknown fields refused by name
//! (with the field probably meant), each field's type and text checked with its path (`comments[3].line`) in the
//! error.

use crate::tasks::values::suggest::closest;
use serde::{de, Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::{field_error, ReportError, MAX_PATH_CHARS};

/// The fields of one JSON object of a report, taken one by one; unknown ones were refused up front.
pub(super) struct Fields<'a> {
    file: &'a str,
    /// Where this object is in the file: "" at the top, `comments[3]` below.
    at: String,
    map: Map<String, Value>,
}

impl<'a> Fields<'a> {
    pub(super) fn top(file: &'a str, bytes: &[u8], allowed: &[&str]) -> Result<Self, ReportError> {
        let value = strict_json(file, bytes)?;
        let Value::Object(map) = value else {
            return Err(ReportError::NotObject {
                file: file.to_owned(),
                found: kind(&value),
            });
        };
        Self::checked(file, String::new(), map, allowed)
    }

    pub(super) fn nested(
        file: &'a str,
        at: &str,
        value: Value,
        allowed: &[&str],
    ) -> Result<Self, ReportError> {
        let Value::Object(map) = value else {
            return Err(field_error(
                file,
                at,
                format!("must be an object, not {}", kind(&value)),
            ));
        };
        Self::checked(file, at.to_owned(), map, allowed)
    }

    fn checked(
        file: &'a str,
        at: String,
        map: Map<String, Value>,
        allowed: &[&str],
    ) -> Result<Self, ReportError> {
        let fields = Fields { file, at, map };
        if let Some(unknown) = fields.map.keys().find(|k| !allowed.contains(&k.as_str())) {
            let hint = closest(unknown, allowed)
                .map(|k| format!("; did you mean `{k}`?"))
                .unwrap_or_default();
            return Err(field_error(
                file,
                &fields.path(&shown_key(unknown)),
                format!(
                    "is not a known field (the fields are {}){hint}",
                    allowed.join(", ")
                ),
            ));
        }
        Ok(fields)
    }

    pub(super) fn path(&self, key: &str) -> String {
        if self.at.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.at)
        }
    }

    /// The field's value; `null` counts as absent, which is what JSON writers make of an unset optional.
    pub(super) fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key).filter(|v| !v.is_null())
    }

    pub(super) fn bool(&mut self, key: &str) -> Result<Option<bool>, ReportError> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(other) => Err(field_error(
                self.file,
                &self.path(key),
                format!("must be true or false, not {}", kind(&other)),
            )),
        }
    }

    pub(super) fn text(&mut self, key: &str, max: usize) -> Result<Option<String>, ReportError> {
        let field = self.path(key);
        match self.take(key) {
            None => Ok(None),
            Some(value) => {
                let text = string(self.file, &field, value)?;
                check_text(self.file, &field, &text, max)?;
                Ok(Some(text))
            }
        }
    }

    pub(super) fn array(&mut self, key: &str, max: usize) -> Result<Vec<Value>, ReportError> {
        let field = self.path(key);
        match self.take(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) if items.len() > max => Err(field_error(
                self.file,
                &field,
                format!("has {} entries; at most {max} are allowed", items.len()),
            )),
            Some(Value::Array(items)) => Ok(items),
            Some(other) => Err(field_error(
                self.file,
                &field,
                format!("must be a list ([...]), not {}", kind(&other)),
            )),
        }
    }

    pub(super) fn line(&mut self, key: &str) -> Result<Option<u32>, ReportError> {
        let field = self.path(key);
        match self.take(key) {
            None => Ok(None),
            Some(Value::Number(n)) => match n.as_u64().map(u32::try_from) {
                Some(Ok(line)) if line >= 1 => Ok(Some(line)),
                _ => Err(field_error(
                    self.file,
                    &field,
                    format!("must be a whole number from 1 to {}", u32::MAX),
                )),
            },
            Some(other) => Err(field_error(
                self.file,
                &field,
                format!("must be a line number, not {}", kind(&other)),
            )),
        }
    }
}

pub(super) fn string(file: &str, field: &str, value: Value) -> Result<String, ReportError> {
    match value {
        Value::String(s) => Ok(s),
        other => Err(field_error(
            file,
            field,
            format!("must be a string, not {}", kind(&other)),
        )),
    }
}

/// Text bound for events (jsonb refuses NUL) and prompts.
pub(super) fn check_text(
    file: &str,
    field: &str,
    text: &str,
    max: usize,
) -> Result<(), ReportError> {
    if text.contains('\0') {
        return Err(field_error(
            file,
            field,
            "contains a NUL character, which cannot be stored",
        ));
    }
    let chars = text.chars().count();
    if chars > max {
        return Err(field_error(
            file,
            field,
            format!("is {chars} characters; at most {max} are allowed"),
        ));
    }
    Ok(())
}

/// A path in the repository as git names it: relative, `/`-separated, no part that is empty, `.` or `..`, no
/// control character (a newline in a path would fake a line of the prompt or the pull request body).
pub(super) fn check_path(file: &str, field: &str, path: &str) -> Result<(), ReportError> {
    let why = if path.is_empty() {
        "must not be empty"
    } else if path.chars().count() > MAX_PATH_CHARS {
        "is longer than 1024 characters"
    } else if path.chars().any(char::is_control) {
        "contains a control character (a NUL, a newline, a tab, ...)"
    } else if path.starts_with('/') {
        "must be relative to the repository root, not absolute"
    } else if path.split('/').any(|part| part == "..") {
        "must not climb out with `..`"
    } else if path.split('/').any(|part| part.is_empty() || part == ".") {
        "must not have an empty or `.` part (`a//b`, `./a`, `a/`)"
    } else {
        return Ok(());
    };
    Err(field_error(file, field, why))
}

/// What a JSON value is, for "must be X, not Y".
pub(super) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// An unknown key as an error shows it: the agent chose it, so it is quoted when odd and cut when long.
fn shown_key(key: &str) -> String {
    const MAX: usize = 64;
    let bare = key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (bare, key.chars().count() > MAX) {
        (true, false) => key.to_owned(),
        (_, true) => format!("{:?}…", key.chars().take(MAX).collect::<String>()),
        (false, false) => format!("{key:?}"),
    }
}

/// Cuts `text` to at most `max` characters, marking the cut with `…`.
pub(super) fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Parses JSON, refusing a duplicate key at any depth: `{"needs_human": true, "needs_human": false}` has no
/// honest reading, and another JSON reader might pick the other one.
pub(super) fn strict_json(file: &str, bytes: &[u8]) -> Result<Value, ReportError> {
    serde_json::from_slice::<Strict>(bytes)
        .map(|strict| strict.0)
        .map_err(|e| ReportError::Json {
            file: file.to_owned(),
            why: e.to_string(),
        })
}

struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> de::Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "the key {} appears twice",
                    shown_key(&key)
                )));
            }
            let Strict(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}
