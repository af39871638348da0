//! GitLab deliveries (`/webhooks/gitlab`, a project's or group's webhook): GitLab sends the webhook's secret token
//! as it is in `X-Gitlab-Token` (no signature), compared in constant time. The event's type is its body's
//! `object_kind` (`gitlab.issue.open`, `gitlab.note`, `gitlab.merge_request.merge`, `gitlab.pipeline`,
//! `gitlab.build`, `gitlab.push`: the refresh loop's base push), the action added for issues and merge requests;
//! every kind is stored, one this code has never heard of too.
//!
//! Deduplicated by `X-Gitlab-Event-UUID` **and the body's digest**, not pinned: GitLab documents that a
//! recursive webhook (one triggered by another) carries the same event UUID as the one that triggered it, so one
//! UUID may carry two different bodies. Keyed by the UUID alone, the second would be taken for a duplicate and
//! lost (or, pinned, refused with 409 forever); with the digest, a redelivery of the same bytes ("Resend request")
//! is one event and a different body under the same UUID is its own. Intake is idempotent by the issue's key and
//! a note's id, so even a resend whose bytes differed would make nothing twice.

use axum::http::HeaderMap;
use bytes::Bytes;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::domain::{EventType, NewEvent, Source, Subject};
use crate::ingress::verify::{verify_token, SignatureError};
use crate::ingress::{check_key, header_str, Malformed};

pub const TOKEN_HEADER: &str = "x-gitlab-token";
pub const EVENT_HEADER: &str = "x-gitlab-event";
pub const EVENT_UUID_HEADER: &str = "x-gitlab-event-uuid";

/// Headers worth keeping with the event; none of them carries a secret (`X-Gitlab-Token` is the secret).
const KEPT_HEADERS: &[&str] = &[
    "x-gitlab-event",
    "x-gitlab-event-uuid",
    "x-gitlab-webhook-uuid",
    "x-gitlab-instance",
    "idempotency-key",
    "user-agent",
];

/// GitLab sends the secret token back verbatim.
pub fn verify_gitlab(expected: &str, header: Option<&[u8]>) -> Result<(), SignatureError> {
    verify_token("X-Gitlab-Token", expected, header)
}

/// GitLab's webhook: the secret token in `X-Gitlab-Token`; keyed by `X-Gitlab-Event-UUID` and the body's digest.
pub struct Delivery;

impl crate::ingress::Webhook for Delivery {
    const SOURCE: Source = Source::Gitlab;
    /// A push with many commits is large; the same budget as GitHub's.
    const BODY_LIMIT: usize = crate::ingress::GITHUB_BODY_LIMIT;

    fn verify(secret: &str, headers: &HeaderMap, _body: &[u8]) -> Result<(), SignatureError> {
        verify_gitlab(secret, headers.get(TOKEN_HEADER).map(|v| v.as_bytes()))
    }

    fn parse(
        _: &crate::config::Settings,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<NewEvent, crate::ingress::IngressError> {
        Ok(parse(headers, body)?)
    }
}

/// The columns queries need, read leniently: a body shaped unlike any payload known is still stored.
#[derive(Deserialize)]
struct Probe {
    object_kind: Option<String>,
    /// System hooks name their kind here instead.
    event_name: Option<String>,
    project: Option<ProbeProject>,
    object_attributes: Option<ProbeAttributes>,
    issue: Option<ProbeNumbered>,
    merge_request: Option<ProbeNumbered>,
}

#[derive(Deserialize)]
struct ProbeProject {
    path_with_namespace: Option<String>,
}

#[derive(Deserialize)]
struct ProbeAttributes {
    iid: Option<i64>,
    action: Option<String>,
}

#[derive(Deserialize)]
struct ProbeNumbered {
    iid: Option<i64>,
}

/// Kinds whose type names their action (`gitlab.issue.close`): what intake and, later, effects tell apart.
const KINDS_WITH_ACTION: &[&str] = &["issue", "work_item", "merge_request"];

/// Turns a verified delivery into an event. Pure: no I/O.
pub fn parse(headers: &HeaderMap, body: Bytes) -> Result<NewEvent, Malformed> {
    // Required as GitHub's event header is: a delivery without it is not GitLab's webhook.
    header_str(headers, EVENT_HEADER)?
        .filter(|name| !name.is_empty())
        .ok_or_else(|| Malformed::new("the X-Gitlab-Event header is missing or empty"))?;
    let uuid = header_str(headers, EVENT_UUID_HEADER)?
        .ok_or_else(|| Malformed::new("the X-Gitlab-Event-UUID header is missing"))?;
    check_key("X-Gitlab-Event-UUID", uuid)?;
    crate::ingress::check_depth(&body)?;
    let probe = match serde_json::from_slice::<Probe>(&body) {
        Ok(probe) => probe,
        Err(_) => {
            return Err(match serde_json::from_slice::<serde_json::Value>(&body) {
                Ok(_) => Malformed::new("the payload is JSON but not an object GitLab sends"),
                Err(e) => Malformed::new(format!("the payload is not valid JSON: {e}")),
            })
        }
    };
    let kind = probe
        .object_kind
        .as_deref()
        .or(probe.event_name.as_deref())
        .filter(|kind| !kind.is_empty())
        .ok_or_else(|| Malformed::new("the payload names no object_kind"))?;
    let attributes = probe.object_attributes.as_ref();
    let action = attributes
        .and_then(|a| a.action.as_deref())
        .filter(|_| KINDS_WITH_ACTION.contains(&kind));
    let mut tokens = vec![kind];
    tokens.extend(action);
    let event_type = EventType::new(Source::Gitlab, &tokens);
    let number = match kind {
        "note" => probe
            .issue
            .as_ref()
            .or(probe.merge_request.as_ref())
            .and_then(|n| n.iid),
        _ => attributes.and_then(|a| a.iid),
    };
    let subject = Subject {
        action: action.map(str::to_owned),
        repository: probe.project.and_then(|p| p.path_with_namespace),
        number,
        reference: None,
    };
    let digest = hex::encode(&Sha256::digest(&body)[..16]);
    let mut event = NewEvent::new(
        Source::Gitlab,
        event_type,
        format!("{uuid}:{digest}"),
        "application/json",
        body,
    );
    event.meta = crate::ingress::kept_headers(headers, KEPT_HEADERS);
    event.subject = subject;
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    pub(crate) fn fixture(name: &str) -> Bytes {
        let path = format!(
            "{}/tests/fixtures/gitlab/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
    }

    fn headers(event: &str, uuid: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(EVENT_HEADER, HeaderValue::from_str(event).unwrap());
        h.insert(EVENT_UUID_HEADER, HeaderValue::from_str(uuid).unwrap());
        h.insert(TOKEN_HEADER, HeaderValue::from_static("s3cret"));
        h.insert("content-type", HeaderValue::from_static("application/json"));
        h
    }

    #[test]
    fn each_fixture_is_named_after_its_object_kind_and_action() {
        for (name, event, expected, repo, number) in [
            (
                "issue_open",
                "Issue Hook",
                "gitlab.issue.open",
                "acme/platform/api",
                Some(23),
            ),
            (
                "issue_update_label",
                "Issue Hook",
                "gitlab.issue.update",
                "acme/platform/api",
                Some(23),
            ),
            (
                "issue_close",
                "Issue Hook",
                "gitlab.issue.close",
                "acme/platform/api",
                Some(23),
            ),
            (
                "note_issue",
                "Note Hook",
                "gitlab.note",
                "acme/platform/api",
                Some(23),
            ),
            (
                "merge_request_merge",
                "Merge Request Hook",
                "gitlab.merge_request.merge",
                "acme/platform/api",
                Some(7),
            ),
            (
                "pipeline_failed",
                "Pipeline Hook",
                "gitlab.pipeline",
                "acme/platform/api",
                Some(31),
            ),
            (
                "job_failed",
                "Job Hook",
                "gitlab.build",
                "acme/platform/api",
                None,
            ),
            // What reactions read.
            (
                "merge_request_approved",
                "Merge Request Hook",
                "gitlab.merge_request.approved",
                "acme/platform/api",
                Some(7),
            ),
            (
                "merge_request_unapproved",
                "Merge Request Hook",
                "gitlab.merge_request.unapproved",
                "acme/platform/api",
                Some(7),
            ),
            (
                "merge_request_close",
                "Merge Request Hook",
                "gitlab.merge_request.close",
                "acme/platform/api",
                Some(7),
            ),
            (
                "merge_request_fork_merge",
                "Merge Request Hook",
                "gitlab.merge_request.merge",
                "acme/platform/api",
                Some(8),
            ),
            (
                "note_merge_request",
                "Note Hook",
                "gitlab.note",
                "acme/platform/api",
                Some(7),
            ),
            (
                "note_merge_request_diff",
                "Note Hook",
                "gitlab.note",
                "acme/platform/api",
                Some(7),
            ),
            (
                "pipeline_success",
                "Pipeline Hook",
                "gitlab.pipeline",
                "acme/platform/api",
                Some(31),
            ),
            (
                "job_success",
                "Job Hook",
                "gitlab.build",
                "acme/platform/api",
                None,
            ),
            // What the refresh loop reads.
            (
                "push",
                "Push Hook",
                "gitlab.push",
                "acme/platform/api",
                None,
            ),
        ] {
            let e = parse(&headers(event, "e-1"), fixture(name)).unwrap();
            assert_eq!(e.event_type.as_str(), expected, "{name}");
            assert_eq!(e.subject.repository.as_deref(), Some(repo), "{name}");
            assert_eq!(e.subject.number, number, "{name}");
            assert!(e.dedup_key.starts_with("e-1:"), "{name}");
            assert!(e.body_digest.is_none(), "not pinned: {name}");
            assert!(e.meta.contains_key("x-gitlab-event-uuid"));
            assert!(
                !e.meta.contains_key(TOKEN_HEADER),
                "the token is never kept"
            );
        }
    }

    #[test]
    fn one_uuid_with_two_bodies_is_two_events_and_the_same_bytes_one() {
        let open = parse(&headers("Issue Hook", "u-1"), fixture("issue_open")).unwrap();
        let again = parse(&headers("Issue Hook", "u-1"), fixture("issue_open")).unwrap();
        let recursive = parse(&headers("Issue Hook", "u-1"), fixture("issue_close")).unwrap();
        assert_eq!(open.dedup_key, again.dedup_key);
        assert_ne!(open.dedup_key, recursive.dedup_key);
    }

    #[test]
    fn a_delivery_gitlab_would_not_send_is_refused_saying_why() {
        let body = fixture("issue_open");
        let mut no_event = headers("Issue Hook", "u-1");
        no_event.remove(EVENT_HEADER);
        let mut no_uuid = headers("Issue Hook", "u-1");
        no_uuid.remove(EVENT_UUID_HEADER);
        for (h, body, why) in [
            (no_event, body.clone(), "X-Gitlab-Event"),
            (no_uuid, body.clone(), "X-Gitlab-Event-UUID"),
            (
                headers("Issue Hook", "u-1"),
                Bytes::from_static(b"not json"),
                "not valid JSON",
            ),
            (
                headers("Issue Hook", "u-1"),
                Bytes::from_static(b"[1]"),
                "not an object",
            ),
            (
                headers("Issue Hook", "u-1"),
                Bytes::from_static(br#"{"project":{}}"#),
                "object_kind",
            ),
        ] {
            let refused = parse(&h, body).unwrap_err();
            assert!(refused.0.contains(why), "{}", refused.0);
        }
        // A kind never heard of is stored all the same.
        let e = parse(
            &headers("Brand New Hook", "u-2"),
            Bytes::from_static(br#"{"object_kind":"brand_new"}"#),
        )
        .unwrap();
        assert_eq!(e.event_type.as_str(), "gitlab.brand_new");
    }

    #[test]
    fn only_the_exact_token_verifies() {
        assert_eq!(verify_gitlab("s3cret", Some(b"s3cret")), Ok(()));
        for wrong in [&b"s3cre"[..], b"s3cret ", b"S3CRET", b""] {
            assert!(verify_gitlab("s3cret", Some(wrong)).is_err(), "{wrong:?}");
        }
        assert_eq!(
            verify_gitlab("s3cret", None),
            Err(SignatureError::Missing("X-Gitlab-Token"))
        );
    }
}
