//! The reader: a serde deserializer over `toml::Value` that knows the path of every value and each struct's known
//! keys.

use super::*;

/// Unknown keys found on the way (they do not stop the reading).
pub(super) type Sink = RefCell<Vec<FileError>>;

#[derive(Debug)]
pub(super) struct DeError {
    /// Set by the innermost value the error passes through: where it happened.
    path: Option<Vec<Segment>>,
    problem: Problem,
}

impl DeError {
    fn at(mut self, path: &[Segment]) -> Self {
        if self.path.is_none() {
            self.path = Some(path.to_vec());
        }
        self
    }

    pub(super) fn into_file_error(self) -> FileError {
        FileError {
            path: self.path.unwrap_or_default(),
            problem: self.problem,
        }
    }

    fn invalid(message: String) -> Self {
        Self {
            path: None,
            problem: Problem::Invalid(message),
        }
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let error = FileError {
            path: self.path.clone().unwrap_or_default(),
            problem: self.problem.clone(),
        };
        error.fmt(f)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(message: T) -> Self {
        Self::invalid(message.to_string())
    }

    fn invalid_type(found: de::Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Self::invalid(format!(
            "expected {}, found {}",
            expected_text(&expected.to_string()),
            found_text(&found)
        ))
    }

    fn invalid_value(found: de::Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Self::invalid_type(found, expected)
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        Self::invalid(format!("expected {}, found {variant:?}", one_of(expected)))
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        // Not reached through `ValueDe` (it filters unknown keys into the sink first); kept exact for any other.
        Self {
            path: None,
            problem: Problem::Unknown {
                suggestion: closest(field, expected).map(str::to_owned),
                known: expected.iter().map(|k| (*k).to_owned()).collect(),
                table: None,
            },
        }
    }

    fn missing_field(field: &'static str) -> Self {
        Self::invalid(format!("{field} is missing"))
    }
}

pub(super) fn one_of(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    match quoted.split_last() {
        None => "nothing".to_owned(),
        Some((only, [])) => only.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// serde's names for what it wanted, in the file's words.
pub(super) fn expected_text(expected: &str) -> String {
    match expected {
        "a boolean" => "true or false".to_owned(),
        "a string" | "a borrowed string" => "a string".to_owned(),
        "a sequence" => "a list".to_owned(),
        "f32" | "f64" => "a number".to_owned(),
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number".to_owned(),
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number, 0 or more".to_owned(),
        other if other.starts_with("struct ") || other.starts_with("a map") => "a table".to_owned(),
        other => other.to_owned(),
    }
}

pub(super) fn found_text(found: &de::Unexpected<'_>) -> String {
    match found {
        de::Unexpected::Bool(b) => b.to_string(),
        de::Unexpected::Signed(i) => format!("the whole number {i}"),
        de::Unexpected::Unsigned(u) => format!("the whole number {u}"),
        de::Unexpected::Float(x) => format!("the number {x}"),
        de::Unexpected::Str(s) => format!("the string {s:?}"),
        de::Unexpected::Seq => "a list".to_owned(),
        de::Unexpected::Map => "a table".to_owned(),
        other => other.to_string(),
    }
}

pub(super) fn unexpected(value: &toml::Value) -> de::Unexpected<'_> {
    match value {
        toml::Value::String(s) => de::Unexpected::Str(s),
        toml::Value::Integer(i) => de::Unexpected::Signed(*i),
        toml::Value::Float(x) => de::Unexpected::Float(*x),
        toml::Value::Boolean(b) => de::Unexpected::Bool(*b),
        toml::Value::Datetime(_) => de::Unexpected::Other("a date or time"),
        toml::Value::Array(_) => de::Unexpected::Seq,
        toml::Value::Table(_) => de::Unexpected::Map,
    }
}

pub(super) struct ValueDe<'a> {
    pub(super) value: &'a toml::Value,
    pub(super) path: Vec<Segment>,
    pub(super) sink: &'a Sink,
}

impl<'de> Deserializer<'de> for ValueDe<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let ValueDe { value, path, sink } = self;
        let result = match value {
            toml::Value::String(s) => visitor.visit_str(s),
            toml::Value::Integer(i) => visitor.visit_i64(*i),
            toml::Value::Float(x) => visitor.visit_f64(*x),
            toml::Value::Boolean(b) => visitor.visit_bool(*b),
            // No key takes a date: TOML's unquoted times (`time = 09:00:00`) would otherwise slip through.
            toml::Value::Datetime(_) => Err(de::Error::invalid_type(unexpected(value), &visitor)),
            toml::Value::Array(items) => visitor.visit_seq(SeqDe {
                items: items.iter().enumerate(),
                path: &path,
                sink,
            }),
            toml::Value::Table(table) => visitor.visit_map(MapDe {
                entries: table.iter().collect::<Vec<_>>().into_iter(),
                current: None,
                path: &path,
                sink,
            }),
        };
        result.map_err(|e| e.at(&path))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        // A key that is there is `Some`; an absent one never reaches the deserializer.
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let result = match self.value {
            toml::Value::String(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            other => Err(DeError::invalid(format!(
                "expected {}, found {}",
                one_of(variants),
                found_text(&unexpected(other))
            ))),
        };
        result.map_err(|e| e.at(&self.path))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let toml::Value::Table(table) = self.value else {
            return self.deserialize_any(visitor);
        };
        let mut known = Vec::new();
        for (key, value) in table {
            if fields.contains(&key.as_str()) {
                known.push((key, value));
            } else {
                self.sink.borrow_mut().push(FileError::unknown(
                    self.path.clone(),
                    key,
                    fields,
                    value,
                ));
            }
        }
        visitor
            .visit_map(MapDe {
                entries: known.into_iter(),
                current: None,
                path: &self.path,
                sink: self.sink,
            })
            .map_err(|e| e.at(&self.path))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit unit_struct
        seq tuple tuple_struct map identifier ignored_any
    }
}

pub(super) struct MapDe<'a, 'p> {
    entries: std::vec::IntoIter<(&'a String, &'a toml::Value)>,
    current: Option<(&'a String, &'a toml::Value)>,
    path: &'p [Segment],
    sink: &'a Sink,
}

impl MapDe<'_, '_> {
    fn child(&self, key: &str) -> Vec<Segment> {
        let mut path = self.path.to_vec();
        path.push(Segment::Key(key.to_owned()));
        path
    }
}

impl<'de> MapAccess<'de> for MapDe<'_, '_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.current = Some((key, value));
        let deserializer: de::value::StrDeserializer<'_, DeError> =
            key.as_str().into_deserializer();
        seed.deserialize(deserializer)
            .map(Some)
            .map_err(|e| e.at(&self.child(key)))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let Some((key, value)) = self.current.take() else {
            return Err(DeError::invalid(
                "a value asked for before its key".to_owned(),
            ));
        };
        seed.deserialize(ValueDe {
            value,
            path: self.child(key),
            sink: self.sink,
        })
    }
}

pub(super) struct SeqDe<'a, 'p> {
    items: std::iter::Enumerate<std::slice::Iter<'a, toml::Value>>,
    path: &'p [Segment],
    sink: &'a Sink,
}

impl<'de> SeqAccess<'de> for SeqDe<'_, '_> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        let Some((i, value)) = self.items.next() else {
            return Ok(None);
        };
        let mut path = self.path.to_vec();
        path.push(Segment::Index(i));
        seed.deserialize(ValueDe {
            value,
            path,
            sink: self.sink,
        })
        .map(Some)
    }
}
