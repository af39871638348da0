//! Linear deliveries: signed like GitHub but without a prefix, and dated by `webhookTimestamp` (Unix ms), which
//! must be within 60 s of now so a captured delivery cannot be replayed later.

use axum::http::HeaderMap;
use bytes::Bytes;
use chrono::{DateTime, TimeZone, Utc};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::domain::{EventType, NewEvent, Source, Subject};
use crate::ingress::verify::{hmac_hex, verify_hex_hmac, SignatureError};
use crate::ingress::{header_str, Malformed};

pub const MAX_CLOCK_SKEW_MS: i64 = 60_000;

const KEPT_HEADERS: &[&str] = &["linear-delivery", "linear-event", "user-agent"];

pub const LINEAR_SIGNATURE_HEADER: &str = "linear-signature";

/// Linear: `Linear-Signature: <hex HMAC-SHA256(secret, raw body)>`, no prefix.
pub fn verify_linear(
    secret: &[u8],
    body: &[u8],
    header: Option<&[u8]>,
) -> Result<(), SignatureError> {
    let name = "Linear-Signature";
    let header = header.ok_or(SignatureError::Missing(name))?;
    verify_hex_hmac(name, secret, body, header)
}

/// The `Linear-Signature` value for a body.
pub fn sign_linear(secret: &[u8], body: &[u8]) -> String {
    hmac_hex(secret, body)
}

#[derive(Debug, thiserror::Error)]
pub enum LinearError {
    #[error(transparent)]
    Malformed(#[from] Malformed),
    #[error("webhookTimestamp is {skew_ms} ms from now; deliveries more than {limit_ms} ms away are refused")]
    Stale { skew_ms: i64, limit_ms: i64 },
}

/// Linear's webhook: HMAC-SHA256 in `Linear-Signature`, and its `webhookTimestamp` within a minute. Not pinned:
/// Linear's retries carry a fresh `webhookTimestamp` to pass that rule, so differ in bytes.
pub struct Delivery;

impl crate::ingress::Webhook for Delivery {
    const SOURCE: Source = Source::Linear;
    const BODY_LIMIT: usize = crate::ingress::DEFAULT_BODY_LIMIT;

    fn verify(secret: &str, headers: &HeaderMap, body: &[u8]) -> Result<(), SignatureError> {
        let signature = headers.get(LINEAR_SIGNATURE_HEADER);
        verify_linear(secret.as_bytes(), body, signature.map(|v| v.as_bytes()))
    }

    fn parse(
        _: &crate::config::Settings,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<NewEvent, crate::ingress::IngressError> {
        parse(headers, body, Utc::now()).map_err(|e| match e {
            LinearError::Malformed(m) => crate::ingress::IngressError::Malformed(m),
            stale @ LinearError::Stale { .. } => {
                crate::ingress::IngressError::Stale(stale.to_string())
            }
        })
    }
}

/// Turns a verified delivery into an event. `now` is passed in so the freshness rule is testable.
pub fn parse(
    headers: &HeaderMap,
    body: Bytes,
    now: DateTime<Utc>,
) -> Result<NewEvent, LinearError> {
    crate::ingress::check_depth(&body)?;
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| Malformed::new(format!("the body is not valid JSON: {e}")))?;
    let object = value
        .as_object()
        .ok_or_else(|| Malformed::new("the body is JSON but not an object"))?;
    let kind = object
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| Malformed::new("the body has no string field \"type\""))?;
    let action = object
        .get("action")
        .and_then(Value::as_str)
        .ok_or_else(|| Malformed::new("the body has no string field \"action\""))?;
    let timestamp_ms = object
        .get("webhookTimestamp")
        .and_then(Value::as_i64)
        .ok_or_else(|| Malformed::new("the body has no integer field \"webhookTimestamp\""))?;
    let skew_ms = now.timestamp_millis().saturating_sub(timestamp_ms);
    if skew_ms.abs() > MAX_CLOCK_SKEW_MS {
        return Err(LinearError::Stale {
            skew_ms,
            limit_ms: MAX_CLOCK_SKEW_MS,
        });
    }

    let data = object.get("data");
    let entity_id = data
        .and_then(|d| d.get("id"))
        .or_else(|| object.get("agentActivity").and_then(|a| a.get("id")))
        .or_else(|| object.get("agentSession").and_then(|s| s.get("id")))
        .and_then(Value::as_str);
    let version = data
        .and_then(|d| d.get("updatedAt"))
        .or_else(|| object.get("createdAt"))
        .and_then(Value::as_str);
    let dedup_key = match header_str(headers, "linear-delivery")? {
        Some(delivery) => {
            crate::ingress::check_key("Linear-Delivery", delivery)?;
            delivery.to_owned()
        }
        // Without a delivery id, the entity and its version identify the change; `action` keeps a create and a
        // remove that share a timestamp apart. Failing all that, the body itself is the identity.
        None => match (
            object.get("webhookId").and_then(Value::as_str),
            entity_id,
            version,
        ) {
            (Some(hook), Some(id), Some(version)) => format!("{hook}:{id}:{action}:{version}"),
            _ => format!("sha256:{}", hex::encode(Sha256::digest(&body))),
        },
    };

    let reference = data
        .and_then(|d| d.get("identifier"))
        .or_else(|| data.and_then(|d| d.get("id")))
        .or_else(|| object.get("agentSession").and_then(|s| s.get("issueId")))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let occurred_at = Utc
        .timestamp_millis_opt(timestamp_ms)
        .single()
        .unwrap_or(now);

    let event_type = EventType::new(Source::Linear, &[kind, action]);
    let mut event = NewEvent::new(
        Source::Linear,
        event_type,
        dedup_key,
        "application/json",
        body,
    );
    event.occurred_at = occurred_at;
    event.meta = crate::ingress::kept_headers(headers, KEPT_HEADERS);
    event.subject = Subject {
        action: Some(action.to_owned()),
        repository: None,
        number: data.and_then(|d| d.get("number")).and_then(Value::as_i64),
        reference,
    };
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(ts: i64) -> Bytes {
        Bytes::from(format!(
            r#"{{"action":"create","type":"Issue","webhookId":"wh","webhookTimestamp":{ts},
                "data":{{"id":"i-1","identifier":"ENG-1","number":1,"updatedAt":"2026-01-01T00:00:00Z"}}}}"#
        ))
    }

    #[test]
    fn names_and_keys_an_issue_event() {
        let now = Utc::now();
        let e = parse(&HeaderMap::new(), body(now.timestamp_millis()), now).unwrap();
        assert_eq!(e.event_type.as_str(), "linear.Issue.create");
        assert_eq!(e.dedup_key, "wh:i-1:create:2026-01-01T00:00:00Z");
        assert_eq!(e.subject.reference.as_deref(), Some("ENG-1"));
    }

    #[test]
    fn the_delivery_header_wins_as_key() {
        let now = Utc::now();
        let mut h = HeaderMap::new();
        h.insert("linear-delivery", "abc-123".parse().unwrap());
        let e = parse(&h, body(now.timestamp_millis()), now).unwrap();
        assert_eq!(e.dedup_key, "abc-123");
    }

    #[test]
    fn timestamps_beyond_sixty_seconds_either_way_are_stale() {
        let now = Utc::now();
        let ms = now.timestamp_millis();
        assert!(parse(&HeaderMap::new(), body(ms - 60_000), now).is_ok());
        assert!(matches!(
            parse(&HeaderMap::new(), body(ms - 61_000), now),
            Err(LinearError::Stale { .. })
        ));
        assert!(matches!(
            parse(&HeaderMap::new(), body(ms + 61_000), now),
            Err(LinearError::Stale { .. })
        ));
    }

    #[test]
    fn missing_fields_are_malformed() {
        let now = Utc::now();
        for bad in [
            &b"[]"[..],
            b"{}",
            br#"{"type":"Issue"}"#,
            br#"{"type":"Issue","action":"create"}"#,
            b"\xff",
        ] {
            assert!(
                matches!(
                    parse(&HeaderMap::new(), Bytes::copy_from_slice(bad), now),
                    Err(LinearError::Malformed(_))
                ),
                "{bad:?}"
            );
        }
    }

    mod signature {
        use super::super::{sign_linear, verify_linear};
        use crate::ingress::verify::SignatureError;
        use proptest::prelude::*;

        #[test]
        fn linear_signature_has_no_prefix() {
            let sig = sign_linear(b"lin", b"{}");
            assert_eq!(verify_linear(b"lin", b"{}", Some(sig.as_bytes())), Ok(()));
            let prefixed = format!("sha256={sig}");
            assert!(verify_linear(b"lin", b"{}", Some(prefixed.as_bytes())).is_err());
            assert_eq!(
                verify_linear(b"lin", b"{}", None),
                Err(SignatureError::Missing("Linear-Signature"))
            );
        }

        proptest! {
            #[test]
            fn arbitrary_hex_signatures_never_pass(body in proptest::collection::vec(any::<u8>(), 0..256),
                                                   digest in "[0-9a-f]{64}") {
                prop_assume!(digest != sign_linear(b"secret", &body));
                prop_assert!(verify_linear(b"secret", &body, Some(digest.as_bytes())).is_err());
            }
        }
    }
}
