//! The event envelope: the one shape an event has when stored, served over HTTP, printed by the CLI or published.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::value::RawValue;
use uuid::Uuid;

use super::StoredEvent;

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Envelope {
    pub id: Uuid,
    pub position: i64,
    pub source: String,
    #[serde(rename = "type")]
    pub event_type: String,
    pub stream: Option<String>,
    pub stream_version: Option<i64>,
    pub dedup_key: String,
    pub occurred_at: DateTime<Utc>,
    pub recorded_at: DateTime<Utc>,
    /// The payload as JSON, byte for byte as received when the body was JSON.
    #[schema(value_type = serde_json::Value)]
    pub data: Box<RawValue>,
    #[schema(value_type = Object)]
    pub meta: super::Meta,
}

/// [`Envelope`] borrowed from the stored event, for writers that need no owned copy. The same fields, names and
/// order: `write_envelope`'s tests hold the two to the same bytes.
#[derive(Serialize)]
struct EnvelopeRef<'a> {
    id: Uuid,
    position: i64,
    source: &'a str,
    #[serde(rename = "type")]
    event_type: &'a str,
    stream: Option<&'a str>,
    stream_version: Option<i64>,
    dedup_key: &'a str,
    occurred_at: DateTime<Utc>,
    recorded_at: DateTime<Utc>,
    data: &'a RawValue,
    meta: &'a super::Meta,
}

impl StoredEvent {
    /// The payload as JSON: the body itself, or GitHub's form-encoded `payload=` field. A body that is not JSON
    /// (never produced by ingress) is served as a JSON string so the envelope is always valid JSON.
    pub fn data_json(&self) -> Box<RawValue> {
        let json_text: Option<String> = if self
            .content_type
            .starts_with("application/x-www-form-urlencoded")
        {
            form_urlencoded::parse(&self.body)
                .find(|(k, _)| k == "payload")
                .map(|(_, v)| v.into_owned())
        } else {
            std::str::from_utf8(&self.body).ok().map(str::to_owned)
        };
        json_text
            .and_then(|text| RawValue::from_string(text).ok())
            .unwrap_or_else(|| {
                let lossy = String::from_utf8_lossy(&self.body);
                RawValue::from_string(serde_json::Value::String(lossy.into_owned()).to_string())
                    .expect("a serialised JSON string is valid JSON")
            })
    }

    /// Writes this event's envelope, the same bytes as serialising [`Self::to_envelope`], without copying the
    /// body first: a JSON body (every webhook's, every event pidevops records) is validated where it lies and
    /// written once. The relay encodes every event this way (docs/benchmarks.md, "Relay throughput").
    pub fn write_envelope<W: std::io::Write>(&self, writer: W) -> serde_json::Result<()> {
        let owned;
        let data: &RawValue = match self.borrowed_json() {
            Some(raw) => raw,
            None => {
                owned = self.data_json();
                &owned
            }
        };
        serde_json::to_writer(
            writer,
            &EnvelopeRef {
                id: self.id,
                position: self.position,
                source: &self.source,
                event_type: &self.event_type,
                stream: self.stream.as_deref(),
                stream_version: self.stream_version,
                dedup_key: &self.dedup_key,
                occurred_at: self.occurred_at,
                recorded_at: self.recorded_at,
                data,
                meta: &self.meta,
            },
        )
    }

    /// The body as it lies, when it is the JSON [`Self::data_json`] would serve anyway.
    fn borrowed_json(&self) -> Option<&RawValue> {
        if self
            .content_type
            .starts_with("application/x-www-form-urlencoded")
        {
            return None;
        }
        serde_json::from_slice::<&RawValue>(&self.body).ok()
    }

    pub fn to_envelope(&self) -> Envelope {
        Envelope {
            id: self.id,
            position: self.position,
            source: self.source.clone(),
            event_type: self.event_type.clone(),
            stream: self.stream.clone(),
            stream_version: self.stream_version,
            dedup_key: self.dedup_key.clone(),
            occurred_at: self.occurred_at,
            recorded_at: self.recorded_at,
            data: self.data_json(),
            meta: self.meta.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(content_type: &str, body: &[u8]) -> StoredEvent {
        StoredEvent {
            position: 1,
            id: Uuid::now_v7(),
            source: "github".into(),
            event_type: "github.ping".into(),
            dedup_key: "d".into(),
            stream: None,
            stream_version: None,
            occurred_at: Utc::now(),
            recorded_at: Utc::now(),
            action: None,
            repository: None,
            number: None,
            reference: None,
            content_type: content_type.into(),
            body: body.to_vec(),
            meta: Default::default(),
        }
    }

    #[test]
    fn json_bodies_are_served_byte_for_byte() {
        let body = br#"{ "zen" :"Keep it logically awesome.",  "n": 1.50 }"#;
        assert_eq!(
            stored("application/json", body)
                .data_json()
                .get()
                .as_bytes(),
            body
        );
    }

    #[test]
    fn form_bodies_serve_their_payload_field() {
        let e = stored(
            "application/x-www-form-urlencoded",
            b"payload=%7B%22a%22%3A1%7D",
        );
        assert_eq!(e.data_json().get(), r#"{"a":1}"#);
    }

    /// The borrowed writer and the owned envelope give the same bytes, whatever the body: JSON (with the
    /// whitespace around it a `RawValue` trims), a form's payload, bytes that are not JSON, not UTF-8, or empty.
    #[test]
    fn the_written_envelope_is_the_owned_envelope_byte_for_byte() {
        let mut with_stream = stored("application/json", br#"{"a":[1,2,{"b":null}]}"#);
        with_stream.stream = Some("task:7".into());
        with_stream.stream_version = Some(3);
        with_stream.meta = crate::eventlog::Meta::from_json(r#"{"actor":"x"}"#.into()).unwrap();
        let cases = [
            with_stream,
            stored(
                "application/json",
                b" \n{ \"zen\" :\"ok\",  \"n\": 1.50 }\n ",
            ),
            stored("application/json", b"{\"unterminated\": "),
            stored("application/json", b""),
            stored(
                "application/x-www-form-urlencoded",
                b"payload=%7B%22a%22%3A1%7D",
            ),
            stored("application/x-www-form-urlencoded", b"other=1"),
            stored("application/octet-stream", b"\xffnot json"),
            stored("text/plain", b"\"a JSON string\""),
        ];
        for event in cases {
            let mut written = Vec::new();
            event.write_envelope(&mut written).unwrap();
            let owned = serde_json::to_vec(&event.to_envelope()).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&written),
                String::from_utf8_lossy(&owned),
                "body {:?} as {}",
                event.body,
                event.content_type
            );
        }
    }

    #[test]
    fn other_bytes_become_a_json_string() {
        let e = stored("application/octet-stream", b"\xffnot json");
        let value: serde_json::Value = serde_json::from_str(e.data_json().get()).unwrap();
        assert!(value.is_string());
    }
}
