//! An event's `meta`: the JSON object stored with it (kept headers, actor, cause), held as its text and parsed
//! only when someone reads it. Most readers never do: parsing every event's meta on a rebuild cost about a tenth
//! of it (docs/benchmarks.md, "Tasks rebuild").

use serde::{Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// A JSON object, as text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta(String);

impl Default for Meta {
    fn default() -> Self {
        Self("{}".to_owned())
    }
}

impl Meta {
    /// Checks that `text` is a JSON object (a syntax pass, no tree built) and keeps it.
    pub fn from_json(text: String) -> Result<Self, String> {
        serde_json::from_str::<&RawValue>(&text).map_err(|e| e.to_string())?;
        if !text.trim_start().starts_with('{') {
            return Err("not a JSON object".to_owned());
        }
        Ok(Self(text))
    }

    /// The whole object.
    pub fn to_map(&self) -> Map<String, Value> {
        // `from_json` checked it is an object; a `Meta` is built no other way.
        serde_json::from_str(&self.0).unwrap_or_default()
    }

    pub fn get(&self, key: &str) -> Option<Value> {
        self.to_map().remove(key)
    }

    /// A value as text: a JSON string as itself, anything else as its JSON.
    pub fn text(&self, key: &str) -> Option<String> {
        self.get(key).map(|v| match v {
            Value::String(s) => s,
            other => other.to_string(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<Map<String, Value>> for Meta {
    fn from(map: Map<String, Value>) -> Self {
        Self(Value::Object(map).to_string())
    }
}

/// Embedded in an envelope as stored, byte for byte.
impl Serialize for Meta {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match serde_json::from_str::<&RawValue>(&self.0) {
            Ok(raw) => raw.serialize(serializer),
            Err(_) => self.to_map().serialize(serializer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_json_objects_are_meta() {
        assert!(Meta::from_json(r#"{"actor": "api"}"#.into()).is_ok());
        assert!(Meta::from_json(" {}".into()).is_ok());
        for bad in ["[1]", "\"x\"", "{", "", "{} {}"] {
            assert!(Meta::from_json(bad.into()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn values_are_read_on_demand_and_serialised_verbatim() {
        let meta =
            Meta::from_json(r#"{"actor":"api","n":3,"cause_event_id":"e-1"}"#.into()).unwrap();
        assert_eq!(meta.text("actor").as_deref(), Some("api"));
        assert_eq!(meta.text("n").as_deref(), Some("3"));
        assert_eq!(meta.get("missing"), None);
        assert_eq!(
            serde_json::to_string(&meta).unwrap(),
            r#"{"actor":"api","n":3,"cause_event_id":"e-1"}"#
        );
        let mut map = Map::new();
        map.insert("actor".into(), "github".into());
        assert_eq!(Meta::from(map).text("actor").as_deref(), Some("github"));
        assert_eq!(Meta::default().to_map(), Map::new());
    }
}
