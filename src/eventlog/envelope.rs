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

    #[test]
    fn other_bytes_become_a_json_string() {
        let e = stored("application/octet-stream", b"\xffnot json");
        let value: serde_json::Value = serde_json::from_str(e.data_json().get()).unwrap();
        assert!(value.is_string());
    }
}
