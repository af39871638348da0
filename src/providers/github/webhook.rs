//! GitHub deliveries: `X-GitHub-Event` names the event, `X-GitHub-Delivery` is the dedup key, the body is JSON or
//! form-encoded `payload=<json>`. Every event type is stored, including ones this code has never heard of.

use axum::http::HeaderMap;
use bytes::Bytes;
use serde::Deserialize;

use crate::domain::{EventType, NewEvent, Source, Subject};
use crate::ingress::verify::{hmac_hex, verify_hex_hmac, SignatureError};
use crate::ingress::{header_str, Malformed};

pub const GITHUB_SIGNATURE_HEADER: &str = "x-hub-signature-256";

/// GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, raw body)>`.
pub fn verify_github(
    secret: &[u8],
    body: &[u8],
    header: Option<&[u8]>,
) -> Result<(), SignatureError> {
    let name = "X-Hub-Signature-256";
    let header = header.ok_or(SignatureError::Missing(name))?;
    let hex_digest = header
        .strip_prefix(b"sha256=")
        .ok_or(SignatureError::Malformed {
            header: name,
            reason: "expected sha256=<64 hex digits>",
        })?;
    verify_hex_hmac(name, secret, body, hex_digest)
}

/// `sha256=<hex>` as GitHub would send it; for tests, the load generator and fakes.
pub fn sign_github(secret: &[u8], body: &[u8]) -> String {
    format!("sha256={}", hmac_hex(secret, body))
}

/// Headers worth keeping with the event; none of them carries a secret.
const KEPT_HEADERS: &[&str] = &[
    "x-github-event",
    "x-github-delivery",
    "x-github-hook-id",
    "x-github-hook-installation-target-type",
    "x-github-hook-installation-target-id",
    "user-agent",
];

#[derive(Deserialize)]
struct Probe {
    action: Option<String>,
    repository: Option<Repository>,
    number: Option<i64>,
    issue: Option<Numbered>,
    pull_request: Option<Numbered>,
}

#[derive(Deserialize)]
struct Repository {
    full_name: Option<String>,
}

#[derive(Deserialize)]
struct Numbered {
    number: Option<i64>,
}

/// Turns a verified delivery into an event. Pure: no I/O.
/// GitHub's webhook: HMAC-SHA256 in `X-Hub-Signature-256`; `X-GitHub-Delivery` names one payload (a redelivery
/// carries the same bytes), so the event is pinned.
pub struct Delivery;

impl crate::ingress::Webhook for Delivery {
    const SOURCE: Source = Source::Github;
    const BODY_LIMIT: usize = crate::ingress::GITHUB_BODY_LIMIT;

    fn verify(secret: &str, headers: &HeaderMap, body: &[u8]) -> Result<(), SignatureError> {
        let signature = headers.get(GITHUB_SIGNATURE_HEADER);
        verify_github(secret.as_bytes(), body, signature.map(|v| v.as_bytes()))
    }

    fn parse(
        _: &crate::config::Settings,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<NewEvent, crate::ingress::IngressError> {
        Ok(parse(headers, body)?.pinned())
    }
}

pub fn parse(headers: &HeaderMap, body: Bytes) -> Result<NewEvent, Malformed> {
    let event_name = header_str(headers, "x-github-event")?
        .filter(|name| !name.is_empty())
        .ok_or_else(|| Malformed::new("the X-GitHub-Event header is missing or empty"))?;
    let delivery = header_str(headers, "x-github-delivery")?
        .ok_or_else(|| Malformed::new("the X-GitHub-Delivery header is missing"))?;
    crate::ingress::check_key("X-GitHub-Delivery", delivery)?;
    let content_type = header_str(headers, "content-type")?
        .unwrap_or("application/json")
        .to_owned();

    let json: std::borrow::Cow<'_, [u8]> =
        if content_type.starts_with("application/x-www-form-urlencoded") {
            let payload = form_urlencoded::parse(&body)
                .find(|(k, _)| k == "payload")
                .ok_or_else(|| Malformed::new("a form-encoded delivery needs a payload= field"))?
                .1;
            std::borrow::Cow::Owned(payload.into_owned().into_bytes())
        } else {
            std::borrow::Cow::Borrowed(&body[..])
        };
    crate::ingress::check_depth(&json)?;
    let subject = probe(&json)?;

    let mut tokens = vec![event_name];
    if let Some(action) = subject.action.as_deref() {
        tokens.push(action);
    }
    let event_type = EventType::new(Source::Github, &tokens);
    let mut event = NewEvent::new(Source::Github, event_type, delivery, content_type, body);
    event.meta = crate::ingress::kept_headers(headers, KEPT_HEADERS);
    event.subject = subject;
    Ok(event)
}

/// Extracts the columns queries need. A body that is valid JSON but shaped unlike any payload we know is still
/// stored, just without extracted columns: unknown events must never be lost.
fn probe(json: &[u8]) -> Result<Subject, Malformed> {
    match serde_json::from_slice::<Probe>(json) {
        Ok(p) => Ok(Subject {
            action: p.action,
            repository: p.repository.and_then(|r| r.full_name),
            number: p
                .pull_request
                .and_then(|n| n.number)
                .or(p.issue.and_then(|n| n.number))
                .or(p.number),
            reference: None,
        }),
        Err(_) => match serde_json::from_slice::<serde_json::Value>(json) {
            Ok(serde_json::Value::Object(_)) => Ok(Subject::default()),
            Ok(_) => Err(Malformed::new("the payload is JSON but not an object")),
            Err(e) => Err(Malformed::new(format!(
                "the payload is not valid JSON: {e}"
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(event: &str, delivery: &str, content_type: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-github-event", HeaderValue::from_str(event).unwrap());
        h.insert(
            "x-github-delivery",
            HeaderValue::from_str(delivery).unwrap(),
        );
        h.insert("content-type", HeaderValue::from_str(content_type).unwrap());
        h.insert(
            "x-hub-signature-256",
            HeaderValue::from_static("sha256=abc"),
        );
        h
    }

    #[test]
    fn names_the_event_after_header_and_action() {
        let body = Bytes::from_static(
            br#"{"action":"opened","number":7,"pull_request":{"number":7},"repository":{"full_name":"o/r"}}"#,
        );
        let e = parse(&headers("pull_request", "d-1", "application/json"), body).unwrap();
        assert_eq!(e.event_type.as_str(), "github.pull_request.opened");
        assert_eq!(e.dedup_key, "d-1");
        assert_eq!(e.subject.repository.as_deref(), Some("o/r"));
        assert_eq!(e.subject.number, Some(7));
        assert_eq!(e.subject.action.as_deref(), Some("opened"));
        assert!(e.meta.contains_key("x-github-delivery"));
        assert!(
            !e.meta.contains_key("x-hub-signature-256"),
            "signatures are not kept"
        );
    }

    #[test]
    fn events_without_action_and_unknown_events_are_kept() {
        let e = parse(
            &headers("ping", "d-2", "application/json"),
            Bytes::from_static(br#"{"zen":"z"}"#),
        )
        .unwrap();
        assert_eq!(e.event_type.as_str(), "github.ping");
        let e = parse(
            &headers("brand_new_event", "d-3", "application/json"),
            Bytes::from_static(br#"{"action":42,"repository":"not an object"}"#),
        )
        .unwrap();
        assert_eq!(e.event_type.as_str(), "github.brand_new_event");
        assert_eq!(e.subject, Subject::default());
    }

    #[test]
    fn form_encoded_payloads_are_parsed_but_stored_raw() {
        let raw = Bytes::from_static(b"payload=%7B%22action%22%3A%22created%22%7D");
        let e = parse(
            &headers("label", "d-4", "application/x-www-form-urlencoded"),
            raw.clone(),
        )
        .unwrap();
        assert_eq!(e.event_type.as_str(), "github.label.created");
        assert_eq!(e.body, raw);
    }

    #[test]
    fn malformed_deliveries_are_refused_with_a_reason() {
        let ok = Bytes::from_static(b"{}");
        let mut h = headers("push", "d", "application/json");
        h.remove("x-github-delivery");
        assert!(parse(&h, ok.clone())
            .unwrap_err()
            .0
            .contains("X-GitHub-Delivery"));
        let mut h = headers("push", "d", "application/json");
        h.remove("x-github-event");
        assert!(parse(&h, ok.clone())
            .unwrap_err()
            .0
            .contains("X-GitHub-Event"));
        let h = headers("push", "d", "application/json");
        assert!(parse(&h, Bytes::from_static(b"{not json"))
            .unwrap_err()
            .0
            .contains("not valid JSON"));
        assert!(parse(&h, Bytes::from_static(b"[1,2]"))
            .unwrap_err()
            .0
            .contains("not an object"));
        let h = headers("push", "d", "application/x-www-form-urlencoded");
        assert!(parse(&h, Bytes::from_static(b"other=1"))
            .unwrap_err()
            .0
            .contains("payload="));
    }

    mod signature {
        use super::super::{sign_github, verify_github};
        use crate::ingress::verify::SignatureError;
        use proptest::prelude::*;

        const VECTOR_SECRET: &[u8] = b"It's a Secret to Everybody";
        const VECTOR_BODY: &[u8] = b"Hello, World!";
        const VECTOR_SIGNATURE: &str =
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

        #[test]
        fn github_published_test_vector() {
            assert_eq!(sign_github(VECTOR_SECRET, VECTOR_BODY), VECTOR_SIGNATURE);
            assert_eq!(
                verify_github(
                    VECTOR_SECRET,
                    VECTOR_BODY,
                    Some(VECTOR_SIGNATURE.as_bytes())
                ),
                Ok(())
            );
        }

        #[test]
        fn github_rejects_missing_malformed_and_wrong_signatures() {
            assert_eq!(
                verify_github(VECTOR_SECRET, VECTOR_BODY, None),
                Err(SignatureError::Missing("X-Hub-Signature-256"))
            );
            let sha1 = b"sha1=0123456789012345678901234567890123456789";
            assert!(matches!(
                verify_github(VECTOR_SECRET, VECTOR_BODY, Some(sha1)),
                Err(SignatureError::Malformed { .. })
            ));
            let uppercase_prefix = VECTOR_SIGNATURE.replace("sha256=", "SHA256=");
            assert!(verify_github(
                VECTOR_SECRET,
                VECTOR_BODY,
                Some(uppercase_prefix.as_bytes())
            )
            .is_err());
            assert_eq!(
                verify_github(
                    b"another secret",
                    VECTOR_BODY,
                    Some(VECTOR_SIGNATURE.as_bytes())
                ),
                Err(SignatureError::Mismatch("X-Hub-Signature-256"))
            );
            assert_eq!(
                verify_github(
                    VECTOR_SECRET,
                    b"Hello, World?",
                    Some(VECTOR_SIGNATURE.as_bytes())
                ),
                Err(SignatureError::Mismatch("X-Hub-Signature-256"))
            );
            let truncated = &VECTOR_SIGNATURE[..VECTOR_SIGNATURE.len() - 2];
            assert!(verify_github(VECTOR_SECRET, VECTOR_BODY, Some(truncated.as_bytes())).is_err());
        }

        proptest! {
            // Arbitrary bytes never panic and never pass.
            #[test]
            fn arbitrary_github_headers_never_pass(body in proptest::collection::vec(any::<u8>(), 0..256),
                                                   header in proptest::collection::vec(any::<u8>(), 0..80)) {
                prop_assert!(verify_github(b"secret", &body, Some(&header)).is_err());
            }

            #[test]
            fn arbitrary_hex_signatures_never_pass(body in proptest::collection::vec(any::<u8>(), 0..256),
                                                   digest in "[0-9a-f]{64}") {
                let header = format!("sha256={digest}");
                prop_assume!(header != sign_github(b"secret", &body));
                prop_assert!(verify_github(b"secret", &body, Some(header.as_bytes())).is_err());
            }

            #[test]
            fn a_changed_body_never_passes(body in proptest::collection::vec(any::<u8>(), 1..256), flip in any::<usize>()) {
                let signature = sign_github(b"secret", &body);
                let mut tampered = body.clone();
                let i = flip % tampered.len();
                tampered[i] ^= 0x01;
                prop_assert!(verify_github(b"secret", &tampered, Some(signature.as_bytes())).is_err());
            }
        }
    }
}
