//! [`LinkKey`]: the typed name of one kind of link a task's `Links` holds, declared as a constant by whoever owns the
//! link, and [`KnownLink`], a key with its value type erased (what a conflict message and the OpenAPI schema need).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde_json::Value;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;

/// The typed name of one kind of link: what its value is (`T`) and whether a later value may replace a set one.
/// Declared once, as a constant, by whoever owns the link.
pub struct LinkKey<T> {
    name: &'static str,
    replaceable: bool,
    _t: PhantomData<fn() -> T>,
}

// Not derived: a derive would ask `T: Clone`, and a key is a name whatever its value type.
impl<T> Clone for LinkKey<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for LinkKey<T> {}

// Not derived either: a key is equal to another by its name and rule, whatever its value type.
impl<T> PartialEq for LinkKey<T> {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.replaceable == other.replaceable
    }
}

impl<T> Eq for LinkKey<T> {}

impl<T> fmt::Debug for LinkKey<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LinkKey({})", self.name)
    }
}

impl<T> LinkKey<T> {
    /// `replaceable`: a later value may replace a set one ([`Links::set`]); otherwise a link, once set, stays.
    pub const fn new(name: &'static str, replaceable: bool) -> Self {
        LinkKey {
            name,
            replaceable,
            _t: PhantomData,
        }
    }

    /// The key in the stored JSON object.
    pub const fn name(self) -> &'static str {
        self.name
    }

    pub const fn is_replaceable(self) -> bool {
        self.replaceable
    }
}

/// A link key's value type, erased: what the conflict message and the OpenAPI schema need of a known key.
pub trait KnownLink: Sync {
    fn name(&self) -> &'static str;
    /// The raw value read as the key's type and shown with its `Display`; `None` if it does not read.
    fn show(&self, raw: &Value) -> Option<String>;
    /// Whether the raw value reads as the key's type; `Err`: why not.
    fn check(&self, raw: &Value) -> Result<(), String>;
    /// The value type's schema name, and its schema with the ones it references.
    fn schema_name(&self) -> Cow<'static, str>;
    fn schemas(&self, schemas: &mut Vec<(String, RefOr<Schema>)>);
}

impl<T: DeserializeOwned + fmt::Display + utoipa::ToSchema + 'static> KnownLink for LinkKey<T> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn show(&self, raw: &Value) -> Option<String> {
        T::deserialize(raw).ok().map(|value| value.to_string())
    }

    fn check(&self, raw: &Value) -> Result<(), String> {
        T::deserialize(raw).map(drop).map_err(|e| e.to_string())
    }

    fn schema_name(&self) -> Cow<'static, str> {
        T::name()
    }

    fn schemas(&self, schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((T::name().into_owned(), T::schema()));
        T::schemas(schemas);
    }
}
