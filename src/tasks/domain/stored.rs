//! A stored task event read back with its log type: the type is in the event's own column, so the body is decoded
//! straight into that variant (`ByKind`, declared with `TaskEvent` in `event.rs`) instead of through serde's
//! internally tagged derive, which buffers every body into an intermediate tree to find `type` first (two fifths of
//! a body's decoding, `perf`; directly it is about 1.3× faster, docs/benchmarks.md).
//!
//! The direct path is taken only for a body that starts as pidevops writes one, `{"type":"<kind>",`; its `type`
//! is then the column's by construction. Any other body (keys reordered, spaces, another type) goes through the
//! general decoder, and a body whose type is not the column's is refused either way. One difference: a second
//! `type` member later in a direct body is skipped as an unknown member, where the general decoder refuses the
//! duplicate; pidevops never writes one, and the first says what the column says.

use serde::de::{self, DeserializeSeed, EnumAccess, IntoDeserializer, VariantAccess, Visitor};
use serde_json::de::SliceRead;

use super::event::{ByKind, TaskEvent};

/// Why a stored event could not be read as a task event.
#[derive(Debug, thiserror::Error)]
pub enum StoredEventError {
    #[error("event type {0} is not a task event's")]
    NotATaskType(String),
    #[error("the body of {event_type} is not a task event")]
    Body {
        event_type: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("event type {event_type} but the body is {body}")]
    TypeMismatch {
        event_type: String,
        body: &'static str,
    },
}

impl TaskEvent {
    /// The task event stored with type `event_type` (`task.started`, …) and this body.
    pub fn from_stored(event_type: &str, body: &[u8]) -> Result<Self, StoredEventError> {
        let Some(kind) = event_type.strip_prefix("task.") else {
            return Err(StoredEventError::NotATaskType(event_type.to_owned()));
        };
        let body_error = |source| StoredEventError::Body {
            event_type: event_type.to_owned(),
            source,
        };
        if written_as(body, kind) {
            let mut json = serde_json::Deserializer::from_slice(body);
            let event = ByKind::deserialize(Known {
                kind,
                json: &mut json,
            })
            .map_err(body_error)?;
            json.end().map_err(body_error)?;
            return Ok(event);
        }
        let event: TaskEvent = serde_json::from_slice(body).map_err(body_error)?;
        if event.kind() != event_type {
            return Err(StoredEventError::TypeMismatch {
                event_type: event_type.to_owned(),
                body: event.kind(),
            });
        }
        Ok(event)
    }
}

/// Whether `body` opens with `{"type":"<kind>"` and then the next member or the object's end, exactly as serde
/// writes a `TaskEvent` (the tag first, no spaces). `kind` must look like a variant's name: a quote in it could
/// otherwise match across the tag's end.
fn written_as(body: &[u8], kind: &str) -> bool {
    if kind.is_empty() || !kind.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
        return false;
    }
    let rest = body
        .strip_prefix(br#"{"type":""#.as_slice())
        .and_then(|rest| rest.strip_prefix(kind.as_bytes()))
        .and_then(|rest| rest.strip_prefix(b"\"".as_slice()));
    matches!(rest.and_then(|rest| rest.first()), Some(b',' | b'}'))
}

/// A deserializer that presents the body as the variant `kind` of an externally tagged enum: the variant's fields
/// are read from the body's object as it is (its `type` member is not a field, so it is skipped as any unknown
/// member is; a newtype variant's struct, `TaskCreated`, skips it the same way).
struct Known<'a, 'de> {
    kind: &'a str,
    json: &'a mut serde_json::Deserializer<SliceRead<'de>>,
}

impl<'de> de::Deserializer<'de> for Known<'_, 'de> {
    type Error = serde_json::Error;

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_enum(self)
    }

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("a stored task event is read as an enum"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

impl<'de> EnumAccess<'de> for Known<'_, 'de> {
    type Error = serde_json::Error;
    type Variant = Self;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), Self::Error> {
        let kind: de::value::StrDeserializer<'_, serde_json::Error> = self.kind.into_deserializer();
        let variant = seed.deserialize(kind)?;
        Ok((variant, self))
    }
}

impl<'de> VariantAccess<'de> for Known<'_, 'de> {
    type Error = serde_json::Error;

    fn unit_variant(self) -> Result<(), Self::Error> {
        Err(de::Error::custom("task events have no unit variant"))
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<T::Value, Self::Error> {
        seed.deserialize(&mut *self.json)
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        _len: usize,
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("task events have no tuple variant"))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        de::Deserializer::deserialize_struct(&mut *self.json, "TaskEvent", fields, visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `started` body's members after its type, as pidevops writes them.
    const STARTED: &str =
        r#""at":"2026-01-01T00:00:03Z","run":"01a24fdb-d3b6-71d2-9dcd-9c7ab0f65ce8","attempt":2"#;

    fn started() -> TaskEvent {
        serde_json::from_str(&format!(r#"{{"type":"started",{STARTED}}}"#)).unwrap()
    }

    #[test]
    fn a_body_as_pidevops_writes_it_is_read_as_its_column_says() {
        let event = started();
        let body = serde_json::to_vec(&event).unwrap();
        assert!(written_as(&body, "started"));
        assert_eq!(
            TaskEvent::from_stored("task.started", &body).unwrap(),
            event
        );
    }

    #[test]
    fn a_body_written_otherwise_is_read_by_the_general_decoder() {
        let event = started();
        for body in [
            format!(r#"{{{STARTED},"type":"started"}}"#),
            format!(r#"{{ "type": "started", {STARTED}}}"#),
        ] {
            assert!(!written_as(body.as_bytes(), "started"), "{body}");
            assert_eq!(
                TaskEvent::from_stored("task.started", body.as_bytes()).unwrap(),
                event
            );
        }
    }

    #[test]
    fn a_body_of_another_type_than_its_column_is_refused() {
        let body = serde_json::to_vec(&started()).unwrap();
        let error = TaskEvent::from_stored("task.approved", &body).unwrap_err();
        assert_eq!(
            error.to_string(),
            "event type task.approved but the body is task.started"
        );
        // A kind that is a prefix of the body's type does not match it either.
        let error = TaskEvent::from_stored("task.start", &body).unwrap_err();
        assert!(
            matches!(error, StoredEventError::TypeMismatch { .. }),
            "{error}"
        );
    }

    #[test]
    fn what_follows_the_object_and_a_missing_field_are_errors() {
        let mut body = serde_json::to_vec(&started()).unwrap();
        body.extend_from_slice(b" {}");
        assert!(matches!(
            TaskEvent::from_stored("task.started", &body).unwrap_err(),
            StoredEventError::Body { .. }
        ));
        let error = TaskEvent::from_stored(
            "task.started",
            br#"{"type":"started","at":"2026-01-01T00:00:03Z"}"#,
        )
        .unwrap_err();
        let StoredEventError::Body { source, .. } = &error else {
            panic!("{error}");
        };
        assert!(
            source.to_string().contains("missing field `run`"),
            "{source}"
        );
    }

    #[test]
    fn only_a_task_type_with_a_plain_name_takes_the_direct_path() {
        let body = serde_json::to_vec(&started()).unwrap();
        assert!(matches!(
            TaskEvent::from_stored("run.started", &body).unwrap_err(),
            StoredEventError::NotATaskType(_)
        ));
        assert!(!written_as(&body, ""));
        assert!(!written_as(br#"{"type":"a"b","at":1}"#, r#"a"b"#));
        assert!(written_as(br#"{"type":"completed"}"#, "completed"));
        assert!(!written_as(br#"{"type":"completed""#, "completed"));
        // An unknown type written as pidevops would is an unknown variant, not a panic or a guess.
        let error =
            TaskEvent::from_stored("task.nonsense", br#"{"type":"nonsense","at":1}"#).unwrap_err();
        assert!(
            error.source_text().contains("unknown variant `nonsense`"),
            "{error}"
        );
    }

    impl StoredEventError {
        fn source_text(&self) -> String {
            match self {
                StoredEventError::Body { source, .. } => source.to_string(),
                other => other.to_string(),
            }
        }
    }
}
