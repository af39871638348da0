//! [`Links`]: a task's links, one entry per kind of link, keyed by the name its owner declared in a [`LinkKey`].
//! A provider adds its link by declaring one `LinkKey` constant; neither `Links` nor the task domain changes.
//!
//! The stored shape is a flat JSON object, `{"github_pr": {"repo": "acme/api", "number": 9}, …}`, the shape
//! events had when `Links` was one field per provider: every stored event reads back unchanged. Written out, the
//! keys come in the map's order (sorted), so writing the same links twice gives the same bytes. A key no
//! `LinkKey` here names (a newer provider's, read by an older build) is kept and written back, never dropped.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::{Ref, RefOr};

use super::link_key::LinkKey;
use super::links::KNOWN_LINKS;

/// A link that is set and refused a different value: its key and both values as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkConflict {
    pub link: String,
    pub existing: Value,
    pub proposed: Value,
}

impl LinkConflict {
    /// The existing value as a person reads it ([`KNOWN_LINKS`]' `Display`, else its JSON).
    pub fn existing_shown(&self) -> String {
        shown(&self.link, &self.existing)
    }

    /// The proposed value as a person reads it.
    pub fn proposed_shown(&self) -> String {
        shown(&self.link, &self.proposed)
    }
}

/// A link's value as a person reads it: a known key's `Display`, else (an unknown key, a value that does not parse)
/// its compact JSON.
fn shown(name: &str, raw: &Value) -> String {
    KNOWN_LINKS
        .iter()
        .find(|key| key.name() == name)
        .and_then(|key| key.show(raw))
        .unwrap_or_else(|| raw.to_string())
}

/// Where a task came from and what it produced, keyed by link name. A link, once set, stays set; only a replaceable
/// key (`github_pr`: a later submission's pull request) may be replaced.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Links(BTreeMap<String, Value>);

impl<'de> Deserialize<'de> for Links {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut map = BTreeMap::<String, Value>::deserialize(deserializer)?;
        // `null` was how an unset field could read back; it is absent, not a value.
        map.retain(|_, value| !value.is_null());
        Ok(Links(map))
    }
}

impl Links {
    /// The link under `key`, if set and it reads as `T`; a stored value that does not is absent.
    pub fn get<T: DeserializeOwned>(&self, key: LinkKey<T>) -> Option<T> {
        let raw = self.0.get(key.name())?;
        T::deserialize(raw).ok()
    }

    /// Whether the link under `key` is set (and reads as `T`).
    pub fn has<T: DeserializeOwned>(&self, key: LinkKey<T>) -> bool {
        self.get(key).is_some()
    }

    /// Sets the link under `key`: when it is unset, holds the same value, or the key is replaceable; otherwise the
    /// conflict. A value that does not serialize (none of the link types here can fail) changes nothing.
    pub fn set<T: Serialize>(&mut self, key: LinkKey<T>, value: &T) -> Result<(), LinkConflict> {
        let Ok(proposed) = serde_json::to_value(value) else {
            return Ok(());
        };
        match self.0.get(key.name()) {
            Some(existing) if *existing != proposed && !key.is_replaceable() => Err(LinkConflict {
                link: key.name().to_owned(),
                existing: existing.clone(),
                proposed,
            }),
            _ => {
                self.0.insert(key.name().to_owned(), proposed);
                Ok(())
            }
        }
    }

    /// These links with `value` under `key`, for building a new set of links (a later value wins; the set-once
    /// rule is [`Links::set`]'s and the task's).
    #[must_use]
    pub fn with<T: Serialize>(mut self, key: LinkKey<T>, value: &T) -> Self {
        if let Ok(value) = serde_json::to_value(value) {
            self.0.insert(key.name().to_owned(), value);
        }
        self
    }

    /// The links in `proposed` that these lack; a different value for a set link (replaceable or not: only a
    /// submission replaces a pull request, never attached links) is a conflict.
    pub fn missing_from(&self, proposed: &Links) -> Result<Links, LinkConflict> {
        let mut added = Links::default();
        for (name, want) in &proposed.0 {
            match self.0.get(name) {
                Some(have) if have != want => {
                    return Err(LinkConflict {
                        link: name.clone(),
                        existing: have.clone(),
                        proposed: want.clone(),
                    })
                }
                Some(_) => {}
                None => {
                    added.0.insert(name.clone(), want.clone());
                }
            }
        }
        Ok(added)
    }

    /// Adds the links of `other` these lack; a set link keeps its value.
    pub fn add_missing(&mut self, other: Links) {
        for (name, value) in other.0 {
            self.0.entry(name).or_insert(value);
        }
    }

    /// Reads links a caller gives (`POST /api/tasks`'s `links`) as strictly as when `Links` had one typed field per
    /// link: a known key's value must read as its type (else the error names it), an unknown key is dropped.
    pub fn deserialize_given<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Links, D::Error> {
        let given = Links::deserialize(deserializer)?;
        let mut kept = Links::default();
        for (name, raw) in given.0 {
            let Some(key) = KNOWN_LINKS.iter().find(|key| key.name() == name) else {
                continue;
            };
            key.check(&raw)
                .map_err(|why| serde::de::Error::custom(format!("links.{name}: {why}")))?;
            kept.0.insert(name, raw);
        }
        Ok(kept)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every link as stored: its name and raw value, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(name, value)| (name.as_str(), value))
    }
}

const DESCRIPTION: &str = "Where a task came from and what it produced, keyed by link name. A link, once set, \
stays set; only `github_pr` may be replaced, by a later submission's pull request. The properties are the links \
known to this build; other keys (a newer provider's links) may appear and are kept.";

impl utoipa::PartialSchema for Links {
    fn schema() -> RefOr<Schema> {
        let mut object = ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some(DESCRIPTION))
            .additional_properties(Some(AdditionalProperties::FreeForm(true)));
        for key in KNOWN_LINKS {
            let value = OneOfBuilder::new()
                .item(ObjectBuilder::new().schema_type(Type::Null))
                .item(Ref::from_schema_name(key.schema_name()));
            object = object.property(key.name(), value);
        }
        RefOr::T(Schema::Object(object.build()))
    }
}

impl utoipa::ToSchema for Links {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Links")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        for key in KNOWN_LINKS {
            key.schemas(schemas);
        }
    }
}
