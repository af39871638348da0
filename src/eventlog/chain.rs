//! The log's hash chain: what makes it tamper-evident.
//!
//! Every event stores two SHA-256 hashes written in its append transaction:
//! - `content_hash`, of everything stored about the event but its position ([`content_hash`]), computed by the
//!   appender before it takes the writer lock (hashing a 25 MiB body must not hold up other writers);
//! - `chain_hash`, linking it to the event before it in the log: `sha256(CHAIN_DOMAIN ‖ previous chain_hash ‖
//!   position ‖ content_hash)` ([`link`]), computed under the writer lock (`pidevops_append` on Postgres, the
//!   append transaction on SQLite), where the previous event is known.
//!
//! So a flipped byte changes a content hash, a deleted or reordered event breaks the link after it, and rewriting
//! the whole chain changes every hash after the edit, which anything holding a later hash (a receipt, a pull
//! request body) exposes. `pidevops verify` walks it ([`Verifier`]).
//!
//! The content is hashed as the backends give it back, so both compute the same hash: timestamps to the
//! microsecond (what Postgres keeps), `meta` in a canonical JSON form (Postgres stores it as `jsonb`, which keeps
//! neither the key order nor the spacing it was sent with), the body by its SHA-256.

use chrono::{DateTime, SubsecRound, Utc};
use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::StoredEvent;
use crate::domain::NewEvent;

/// Separates an event's content hash from any other SHA-256 of the same bytes.
const CONTENT_DOMAIN: &[u8] = b"pidevops/event-content/v1\n";
/// Separates a chain link from a content hash.
pub const CHAIN_DOMAIN: &[u8] = b"pidevops/event-chain/v1\n";
/// The link before the first chained event.
pub const GENESIS: [u8; 32] = [0; 32];

/// A timestamp as it is stored: Postgres keeps microseconds, so the appender stores (and hashes) exactly that.
pub fn stored_time(at: DateTime<Utc>) -> DateTime<Utc> {
    at.trunc_subsecs(6)
}

/// Everything stored about an event but its position, borrowed from wherever it lives (an event being appended,
/// a row read back).
#[derive(Clone, Copy, Debug)]
pub struct Content<'a> {
    pub id: Uuid,
    pub source: &'a str,
    pub event_type: &'a str,
    pub dedup_key: &'a str,
    pub stream: Option<(&'a str, i64)>,
    pub occurred_at: DateTime<Utc>,
    pub recorded_at: DateTime<Utc>,
    pub action: Option<&'a str>,
    pub repository: Option<&'a str>,
    pub number: Option<i64>,
    pub reference: Option<&'a str>,
    pub content_type: &'a str,
    /// SHA-256 of the body.
    pub body_sha256: [u8; 32],
    pub meta: &'a serde_json::Map<String, Value>,
    pub body_digest: Option<&'a [u8]>,
}

/// The hash of an event's content: each field length-prefixed (no two different contents encode alike), in a
/// fixed order.
pub fn content_hash(c: &Content<'_>) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(CONTENT_DOMAIN);
    field(&mut h, c.id.as_bytes());
    field(&mut h, c.source.as_bytes());
    field(&mut h, c.event_type.as_bytes());
    field(&mut h, c.dedup_key.as_bytes());
    optional(&mut h, c.stream.map(|(s, _)| s.as_bytes()));
    optional(
        &mut h,
        c.stream
            .map(|(_, v)| v.to_be_bytes())
            .as_ref()
            .map(|b| &b[..]),
    );
    field(
        &mut h,
        &stored_time(c.occurred_at).timestamp_micros().to_be_bytes(),
    );
    field(
        &mut h,
        &stored_time(c.recorded_at).timestamp_micros().to_be_bytes(),
    );
    optional(&mut h, c.action.map(str::as_bytes));
    optional(&mut h, c.repository.map(str::as_bytes));
    optional(
        &mut h,
        c.number.map(i64::to_be_bytes).as_ref().map(|b| &b[..]),
    );
    optional(&mut h, c.reference.map(str::as_bytes));
    field(&mut h, c.content_type.as_bytes());
    field(&mut h, &c.body_sha256);
    field(&mut h, canonical_object(c.meta).as_bytes());
    optional(&mut h, c.body_digest);
    h.finalize().into()
}

/// An event as stored, with its hashes: what the walk checks and `pidevops export` writes.
pub struct ChainedEvent {
    pub event: StoredEvent,
    pub body_digest: Option<Vec<u8>>,
    pub content_hash: Option<Vec<u8>>,
    pub chain_hash: Option<Vec<u8>>,
}

/// The content hash of an event being appended, recorded at `recorded_at`. A pinned event's body digest is
/// already its body's SHA-256 ([`NewEvent::pinned`]): the body is not hashed twice.
pub fn of_new_event(e: &NewEvent, recorded_at: DateTime<Utc>) -> [u8; 32] {
    let body_sha256 = e
        .body_digest
        .unwrap_or_else(|| Sha256::digest(&e.body).into());
    content_hash(&Content {
        id: e.id,
        source: e.source.as_str(),
        event_type: e.event_type.as_str(),
        dedup_key: &e.dedup_key,
        stream: e.stream.as_ref().map(|(s, v)| (s.as_str(), *v)),
        occurred_at: e.occurred_at,
        recorded_at,
        action: e.subject.action.as_deref(),
        repository: e.subject.repository.as_deref(),
        number: e.subject.number,
        reference: e.subject.reference.as_deref(),
        content_type: &e.content_type,
        body_sha256,
        meta: &e.meta,
        body_digest: e.body_digest.as_ref().map(|d| d.as_slice()),
    })
}

/// The content hash of an event as read back (with its body), and its stored body digest.
pub fn of_stored(e: &StoredEvent, body_digest: Option<&[u8]>) -> [u8; 32] {
    let meta = e.meta.to_map();
    content_hash(&Content {
        id: e.id,
        source: &e.source,
        event_type: &e.event_type,
        dedup_key: &e.dedup_key,
        stream: e
            .stream
            .as_deref()
            .map(|s| (s, e.stream_version.unwrap_or(0))),
        occurred_at: e.occurred_at,
        recorded_at: e.recorded_at,
        action: e.action.as_deref(),
        repository: e.repository.as_deref(),
        number: e.number,
        reference: e.reference.as_deref(),
        content_type: &e.content_type,
        body_sha256: Sha256::digest(&e.body).into(),
        meta: &meta,
        body_digest,
    })
}

/// The chain hash of the event at `position` whose content hashes to `content`, after the event whose chain hash
/// is `previous` ([`GENESIS`] for the first).
pub fn link(previous: &[u8; 32], position: i64, content: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(CHAIN_DOMAIN);
    h.update(previous);
    h.update(position.to_be_bytes());
    h.update(content);
    h.finalize().into()
}

fn field(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_be_bytes());
    h.update(bytes);
}

fn optional(h: &mut Sha256, bytes: Option<&[u8]>) {
    match bytes {
        None => h.update([0]),
        Some(bytes) => {
            h.update([1]);
            field(h, bytes);
        }
    }
}

/// `meta` in one canonical JSON text: keys sorted by their bytes, no spacing, strings escaped as serde_json
/// escapes them, and numbers so that a value and its `jsonb` round trip print alike (`jsonb` prints `1e16` as
/// `10000000000000000` and `1.0` as `1.0`): an integer as an integer, a float with no fraction (below 2^63) as
/// that integer, any other float in its shortest form.
pub fn canonical_object(map: &serde_json::Map<String, Value>) -> String {
    let mut out = String::new();
    write_object(&mut out, map);
    out
}

fn write_object(out: &mut String, map: &serde_json::Map<String, Value>) {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort_unstable();
    out.push('{');
    for (i, key) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(out, key);
        out.push(':');
        if let Some(value) = map.get(key) {
            write_value(out, value);
        }
    }
    out.push('}');
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => write_object(out, map),
    }
}

fn write_number(out: &mut String, n: &serde_json::Number) {
    use std::fmt::Write as _;
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else if let Some(f) = n.as_f64() {
        // 2^63: every float with no fraction below it is exactly an i64.
        if f.fract() == 0.0 && f.abs() < 9.223_372_036_854_776e18 {
            let _ = write!(out, "{}", f as i64);
        } else {
            out.push_str(
                &serde_json::Number::from_f64(f)
                    .map_or_else(|| "null".to_owned(), |n| n.to_string()),
            );
        }
    } else {
        out.push_str(&n.to_string());
    }
}

fn write_string(out: &mut String, s: &str) {
    // serde_json's escaping of a string cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(v: Value) -> serde_json::Map<String, Value> {
        match v {
            Value::Object(map) => map,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn canonical_meta_sorts_keys_and_drops_spacing() {
        let a = object(json!({"b": 1, "a": {"y": [1, "x"], "x": null}}));
        assert_eq!(
            canonical_object(&a),
            r#"{"a":{"x":null,"y":[1,"x"]},"b":1}"#
        );
    }

    #[test]
    fn canonical_meta_prints_a_number_as_its_jsonb_round_trip_does() {
        // What jsonb prints for each (tests/it/chain.rs checks these against a real jsonb), and forms it could
        // print: the canonical form must not tell them apart.
        let zeros = format!("15{}", "0".repeat(299));
        for (sent, jsonb_prints) in [
            ("1e16", "10000000000000000"),
            ("1.0", "1.0"),
            ("100.0", "100"),
            ("-0", "0"),
            ("0.1", "0.1"),
            ("1.5e300", zeros.as_str()),
            ("18446744073709551615", "18446744073709551615"),
            ("-9223372036854775808", "-9223372036854775808"),
        ] {
            let a = object(serde_json::from_str(&format!(r#"{{"n": {sent}}}"#)).unwrap());
            let b = object(serde_json::from_str(&format!(r#"{{"n": {jsonb_prints}}}"#)).unwrap());
            assert_eq!(
                canonical_object(&a),
                canonical_object(&b),
                "{sent} against {jsonb_prints}"
            );
        }
    }

    #[test]
    fn canonical_meta_keeps_strings_exact() {
        let a = object(json!({"s": "é \"quoted\" \u{1} \\ /"}));
        let parsed: Value = serde_json::from_str(&canonical_object(&a)).unwrap();
        assert_eq!(parsed, Value::Object(a));
    }

    fn content<'a>(meta: &'a serde_json::Map<String, Value>) -> Content<'a> {
        let at = DateTime::from_timestamp(1_800_000_000, 123_456_789).unwrap();
        Content {
            id: Uuid::from_u128(7),
            source: "github",
            event_type: "github.issues.opened",
            dedup_key: "d-1",
            stream: None,
            occurred_at: at,
            recorded_at: at,
            action: Some("opened"),
            repository: Some("acme/widgets"),
            number: Some(7),
            reference: None,
            content_type: "application/json",
            body_sha256: Sha256::digest(b"{}").into(),
            meta,
            body_digest: None,
        }
    }

    #[test]
    fn every_field_changes_the_content_hash() {
        let meta = object(json!({"actor": "octocat"}));
        let other_meta = object(json!({"actor": "mallory"}));
        let base = content(&meta);
        let at = base.occurred_at;
        let digest = [9u8; 32];
        let variants: Vec<Content<'_>> = vec![
            Content {
                id: Uuid::from_u128(8),
                ..base
            },
            Content {
                source: "linear",
                ..base
            },
            Content {
                event_type: "github.issues.closed",
                ..base
            },
            Content {
                dedup_key: "d-2",
                ..base
            },
            Content {
                stream: Some(("task:T-1", 1)),
                ..base
            },
            Content {
                occurred_at: at + chrono::Duration::microseconds(1),
                ..base
            },
            Content {
                recorded_at: at - chrono::Duration::microseconds(1),
                ..base
            },
            Content {
                action: None,
                ..base
            },
            Content {
                repository: Some("acme/widget"),
                ..base
            },
            Content {
                number: Some(8),
                ..base
            },
            Content {
                reference: Some(""),
                ..base
            },
            Content {
                content_type: "text/plain",
                ..base
            },
            Content {
                body_sha256: [0; 32],
                ..base
            },
            Content {
                meta: &other_meta,
                ..base
            },
            Content {
                body_digest: Some(&digest),
                ..base
            },
        ];
        let hash = content_hash(&base);
        for (i, variant) in variants.iter().enumerate() {
            assert_ne!(
                content_hash(variant),
                hash,
                "variant {i} hashed like the original"
            );
        }
        // Streams differing only in version, and where a field's bytes end, hash apart too.
        let v1 = Content {
            stream: Some(("task:T-1", 1)),
            ..base
        };
        let v2 = Content {
            stream: Some(("task:T-1", 2)),
            ..base
        };
        assert_ne!(content_hash(&v1), content_hash(&v2));
        let split_a = Content {
            source: "gith",
            event_type: "ubgithub.issues.opened",
            ..base
        };
        let split_b = Content {
            source: "github",
            event_type: "github.issues.opened",
            ..base
        };
        assert_ne!(content_hash(&split_a), content_hash(&split_b));
    }

    #[test]
    fn nanoseconds_below_a_microsecond_are_not_content() {
        let meta = serde_json::Map::new();
        let base = content(&meta);
        let coarser = Content {
            occurred_at: stored_time(base.occurred_at),
            recorded_at: stored_time(base.recorded_at),
            ..base
        };
        assert_eq!(content_hash(&base), content_hash(&coarser));
    }

    #[test]
    fn a_link_depends_on_the_previous_link_the_position_and_the_content() {
        let a = link(&GENESIS, 1, &[1; 32]);
        assert_ne!(a, link(&[1; 32], 1, &[1; 32]));
        assert_ne!(a, link(&GENESIS, 2, &[1; 32]));
        assert_ne!(a, link(&GENESIS, 1, &[2; 32]));
        assert_eq!(a, link(&GENESIS, 1, &[1; 32]));
    }
}
