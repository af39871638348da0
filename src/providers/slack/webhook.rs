//! Slack's deliveries, on one route (`/webhooks/slack`, set as the app's Events API, Interactivity and slash
//! command URL): every request is signed with the signing secret, `X-Slack-Signature: v0=<hex HMAC-SHA256 of
//! "v0:<timestamp>:<body>">`, dated by `X-Slack-Request-Timestamp`, which must be within five minutes of now so a
//! captured request cannot be replayed later. Three shapes, told apart by their content:
//!
//! - the Events API: JSON, an `event_callback` (stored as `slack.<event type>`, keyed by its `event_id`, so
//!   Slack's retries, `X-Slack-Retry-Num`, are the same event) or the `url_verification` handshake, answered with
//!   its challenge and never stored;
//! - interactivity (a Block Kit button): a form whose `payload` is JSON, stored as `slack.<payload type>`;
//! - a slash command (`/pidevops …`): a form, stored as `slack.slash_command`, answered to whoever typed it alone.
//!
//! Socket Mode delivers the same three payloads over its websocket; [`socket_event`] makes the same events of
//! them. What is stored is the payload as JSON with the deprecated verification `token` and the `response_url`
//! (a capability to post into the channel) taken out: no credential reaches the log.

use axum::http::HeaderMap;
use bytes::Bytes;
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Map, Value};

use crate::domain::{EventType, NewEvent, Source, Subject};
use crate::ingress::verify::{hmac_hex, verify_hex_hmac, SignatureError};
use crate::ingress::{check_key, header_str, IngressError, Malformed};

pub const SIGNATURE_HEADER: &str = "x-slack-signature";
pub const TIMESTAMP_HEADER: &str = "x-slack-request-timestamp";
/// Slack's own bound: a request dated further from now is refused.
pub const MAX_CLOCK_SKEW_S: i64 = 5 * 60;
/// Fields of a payload never stored: the deprecated verification token and the response URL.
const NEVER_STORED: &[&str] = &["token", "response_url"];

/// `v0:<timestamp>:<body>`, what Slack signs.
fn base_string(timestamp: &[u8], body: &[u8]) -> Vec<u8> {
    let mut base = Vec::with_capacity(4 + timestamp.len() + body.len());
    base.extend_from_slice(b"v0:");
    base.extend_from_slice(timestamp);
    base.push(b':');
    base.extend_from_slice(body);
    base
}

/// Whether `signature` (`v0=<64 hex digits>`) signs `timestamp` and `body` with `secret`, in constant time.
pub fn verify_slack(
    secret: &[u8],
    timestamp: Option<&[u8]>,
    body: &[u8],
    signature: Option<&[u8]>,
) -> Result<(), SignatureError> {
    let name = "X-Slack-Signature";
    let signature = signature.ok_or(SignatureError::Missing(name))?;
    let timestamp = timestamp.ok_or(SignatureError::Missing("X-Slack-Request-Timestamp"))?;
    let hex = signature
        .strip_prefix(b"v0=")
        .ok_or(SignatureError::Malformed {
            header: name,
            reason: "expected v0=<64 hex digits>",
        })?;
    verify_hex_hmac(name, secret, &base_string(timestamp, body), hex)
}

/// The `X-Slack-Signature` value for `body` sent at `timestamp` (tests, the load generator, fakes).
pub fn sign_slack(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    format!(
        "v0={}",
        hmac_hex(secret, &base_string(timestamp.as_bytes(), body))
    )
}

/// Slack's webhook: signed, dated, and one of its three shapes.
pub struct Delivery;

impl crate::ingress::Webhook for Delivery {
    const SOURCE: Source = Source::Slack;
    const BODY_LIMIT: usize = crate::ingress::DEFAULT_BODY_LIMIT;

    fn verify(secret: &str, headers: &HeaderMap, body: &[u8]) -> Result<(), SignatureError> {
        verify_slack(
            secret.as_bytes(),
            headers.get(TIMESTAMP_HEADER).map(|v| v.as_bytes()),
            body,
            headers.get(SIGNATURE_HEADER).map(|v| v.as_bytes()),
        )
    }

    /// Runs first for every verified request, so the date is checked here, once, handshake or not.
    fn handshake(headers: &HeaderMap, body: &[u8]) -> Result<Option<Value>, IngressError> {
        fresh(headers, Utc::now())?;
        Ok(challenge(body).map(|challenge| serde_json::json!({ "challenge": challenge })))
    }

    fn parse(
        _: &crate::config::Settings,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<NewEvent, IngressError> {
        // Dated within the window: checked by `handshake`, which ingress runs first.
        Ok(parse(headers, &body)?)
    }

    fn acknowledgement(event: &NewEvent) -> Option<Value> {
        (event.event_type.as_str() == SLASH_COMMAND).then(|| {
            serde_json::json!({
                "response_type": "ephemeral",
                "text": "pidevops has it. If you may ask it for work here, the task's thread starts in this \
                         channel; if not, nothing is posted.",
            })
        })
    }
}

/// The event type of a slash command.
pub const SLASH_COMMAND: &str = "slack.slash_command";

/// Refuses a request dated more than [`MAX_CLOCK_SKEW_S`] from `now` (its signature covers the date).
pub fn fresh(headers: &HeaderMap, now: DateTime<Utc>) -> Result<(), IngressError> {
    let stamp = header_str(headers, TIMESTAMP_HEADER)?
        .ok_or_else(|| Malformed::new("the X-Slack-Request-Timestamp header is missing"))?;
    let at: i64 = stamp
        .parse()
        .map_err(|_| Malformed::new("the X-Slack-Request-Timestamp header is not whole seconds"))?;
    let skew = now.timestamp().saturating_sub(at);
    if skew.abs() > MAX_CLOCK_SKEW_S {
        return Err(IngressError::Stale(format!(
            "X-Slack-Request-Timestamp is {skew} s from now; requests more than {MAX_CLOCK_SKEW_S} s away are \
             refused"
        )));
    }
    Ok(())
}

/// The challenge of a `url_verification` request, if this is one.
fn challenge(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    (value.get("type")?.as_str()? == "url_verification")
        .then(|| value.get("challenge")?.as_str().map(str::to_owned))
        .flatten()
}

/// Which of Slack's payloads a delivery carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An Events API callback (`events_api` in Socket Mode).
    Event,
    /// A Block Kit interaction (`interactive`).
    Interaction,
    /// A slash command (`slash_commands`).
    Command,
}

/// A verified webhook request as its event: JSON is an Events API callback; a form with `payload` an
/// interaction; any other form a slash command.
pub fn parse(headers: &HeaderMap, body: &[u8]) -> Result<NewEvent, Malformed> {
    let form = header_str(headers, "content-type")?
        .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
    if !form {
        crate::ingress::check_depth(body)?;
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| Malformed::new(format!("the body is not valid JSON: {e}")))?;
        return event(Kind::Event, value);
    }
    let fields: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
    if let Some((_, payload)) = fields.iter().find(|(name, _)| name == "payload") {
        crate::ingress::check_depth(payload.as_bytes())?;
        let value: Value = serde_json::from_str(payload).map_err(|e| {
            Malformed::new(format!("the interaction's payload is not valid JSON: {e}"))
        })?;
        return event(Kind::Interaction, value);
    }
    let object: Map<String, Value> = fields
        .into_iter()
        .map(|(name, value)| (name, Value::String(value)))
        .collect();
    event(Kind::Command, Value::Object(object))
}

/// A Socket Mode envelope's payload as its event, the same event the webhook makes of the same payload:
/// `envelope_type` is Slack's (`events_api`, `interactive`, `slash_commands`); any other is not an event.
pub fn socket_event(envelope_type: &str, payload: Value) -> Result<NewEvent, Malformed> {
    let kind = match envelope_type {
        "events_api" => Kind::Event,
        "interactive" => Kind::Interaction,
        "slash_commands" => Kind::Command,
        other => {
            return Err(Malformed::new(format!(
                "a Socket Mode envelope of type {other:?} carries no event"
            )))
        }
    };
    crate::ingress::check_depth(payload.to_string().as_bytes())?;
    event(kind, payload)
}

/// One payload of `kind` as its event: typed, keyed, dated, and without what is never stored.
pub fn event(kind: Kind, value: Value) -> Result<NewEvent, Malformed> {
    let Value::Object(mut object) = value else {
        return Err(Malformed::new("the payload is JSON but not an object"));
    };
    for field in NEVER_STORED {
        object.remove(*field);
    }
    let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
    let team = text(object.get("team_id"))
        .or_else(|| text(object.get("team").and_then(|t| t.get("id"))))
        .unwrap_or_else(|| "team".to_owned());
    let (kind_name, key, channel, at) = match kind {
        Kind::Event => {
            let outer = text(object.get("type")).unwrap_or_default();
            if outer != "event_callback" {
                // `app_rate_limited` and the like: kept, keyed by their own minute.
                let minute = object
                    .get("minute_rate_limited")
                    .and_then(Value::as_i64)
                    .unwrap_or_default();
                let name = if outer.is_empty() {
                    "unknown".into()
                } else {
                    outer
                };
                (name.clone(), format!("{name}:{team}:{minute}"), None, None)
            } else {
                let id = text(object.get("event_id")).ok_or_else(|| {
                    Malformed::new("the event callback has no string field \"event_id\"")
                })?;
                check_key("event_id", &id)?;
                let inner = object.get("event");
                let name = text(inner.and_then(|e| e.get("type")))
                    .ok_or_else(|| Malformed::new("the event callback has no event.type"))?;
                let channel = text(inner.and_then(|e| e.get("channel")));
                let at = object.get("event_time").and_then(Value::as_i64);
                (name, format!("event:{team}:{id}"), channel, at)
            }
        }
        Kind::Interaction => {
            let name = text(object.get("type"))
                .ok_or_else(|| Malformed::new("the interaction has no string field \"type\""))?;
            let trigger = text(object.get("trigger_id"))
                .or_else(|| {
                    // A button's press without a trigger: its action's own time names it.
                    let action = object.get("actions")?.get(0)?;
                    text(action.get("action_ts"))
                })
                .ok_or_else(|| Malformed::new("the interaction has no trigger_id"))?;
            check_key("trigger_id", &trigger)?;
            let channel = text(object.get("channel").and_then(|c| c.get("id")));
            (name, format!("interaction:{team}:{trigger}"), channel, None)
        }
        Kind::Command => {
            let trigger = text(object.get("trigger_id"))
                .ok_or_else(|| Malformed::new("the slash command has no trigger_id"))?;
            check_key("trigger_id", &trigger)?;
            let channel = text(object.get("channel_id"));
            (
                "slash_command".to_owned(),
                format!("command:{team}:{trigger}"),
                channel,
                None,
            )
        }
    };
    let body = serde_json::to_vec(&object)
        .map_err(|e| Malformed::new(format!("the payload cannot be stored: {e}")))?;
    let mut event = NewEvent::new(
        Source::Slack,
        EventType::new(Source::Slack, &[kind_name.as_str()]),
        key,
        "application/json",
        Bytes::from(body),
    );
    if let Some(at) = at.and_then(|s| Utc.timestamp_opt(s, 0).single()) {
        event.occurred_at = at;
    }
    event.subject = Subject {
        action: None,
        repository: None,
        number: None,
        reference: channel,
    };
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn json_headers() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers
    }

    fn form_headers() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            "content-type",
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        headers
    }

    #[test]
    fn slacks_own_example_signature_verifies() {
        // Slack's documented example: signing secret, timestamp, body and the signature it gives.
        let secret = b"8f742231b10e8888abcd99yyyzzz85a5";
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let signature = b"v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        assert_eq!(
            verify_slack(secret, Some(b"1531420618"), body, Some(signature)),
            Ok(())
        );
        assert_eq!(sign_slack(secret, "1531420618", body).as_bytes(), signature);
        // Another timestamp, the same body: refused (the date is signed).
        assert!(verify_slack(secret, Some(b"1531420619"), body, Some(signature)).is_err());
        assert!(verify_slack(secret, Some(b"1531420618"), &body[1..], Some(signature)).is_err());
        assert_eq!(
            verify_slack(secret, None, body, Some(signature)),
            Err(SignatureError::Missing("X-Slack-Request-Timestamp"))
        );
        assert_eq!(
            verify_slack(secret, Some(b"1"), body, None),
            Err(SignatureError::Missing("X-Slack-Signature"))
        );
        assert!(matches!(
            verify_slack(secret, Some(b"1"), body, Some(&signature[3..])),
            Err(SignatureError::Malformed { .. })
        ));
    }

    #[test]
    fn a_request_dated_more_than_five_minutes_away_is_stale() {
        let now = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        let mut headers = json_headers();
        for (at, ok) in [
            (0, true),
            (-300, true),
            (300, true),
            (-301, false),
            (301, false),
        ] {
            let stamp = (1_700_000_000 + at).to_string();
            headers.insert(TIMESTAMP_HEADER, HeaderValue::from_str(&stamp).unwrap());
            assert_eq!(fresh(&headers, now).is_ok(), ok, "{at}");
        }
        headers.insert(TIMESTAMP_HEADER, HeaderValue::from_static("soon"));
        assert!(matches!(
            fresh(&headers, now),
            Err(IngressError::Malformed(_))
        ));
    }

    #[test]
    fn the_url_verification_handshake_is_answered_not_stored() {
        let body = br#"{"token":"t","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
        assert_eq!(
            challenge(body).as_deref(),
            Some("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P")
        );
        assert_eq!(challenge(br#"{"type":"event_callback"}"#), None);
        assert_eq!(challenge(b"nope"), None);
    }

    #[test]
    fn an_event_callback_is_keyed_by_its_event_id_and_keeps_no_token() {
        let body = br#"{"token":"verification-token","team_id":"T1","api_app_id":"A1","type":"event_callback","event_id":"Ev08","event_time":1700000000,"event":{"type":"app_mention","user":"U1","text":"<@UBOT> fix it","ts":"1700000000.000100","channel":"C1"}}"#;
        let e = parse(&json_headers(), body).unwrap();
        assert_eq!(e.event_type.as_str(), "slack.app_mention");
        assert_eq!(e.dedup_key, "event:T1:Ev08");
        assert_eq!(e.subject.reference.as_deref(), Some("C1"));
        assert_eq!(e.occurred_at.timestamp(), 1_700_000_000);
        let stored: Value = serde_json::from_slice(&e.body).unwrap();
        assert!(stored.get("token").is_none(), "{stored}");
        assert_eq!(stored["event"]["text"], "<@UBOT> fix it");
    }

    #[test]
    fn an_interaction_and_a_slash_command_are_forms() {
        let payload = r#"{"type":"block_actions","token":"t","team":{"id":"T1"},"user":{"id":"U1"},"trigger_id":"13.14.ab","channel":{"id":"C1"},"response_url":"https://hooks.slack.com/x","actions":[{"action_id":"approve","value":"T-7","action_ts":"1700000000.1"}]}"#;
        let body: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", payload)
            .finish();
        let e = parse(&form_headers(), body.as_bytes()).unwrap();
        assert_eq!(e.event_type.as_str(), "slack.block_actions");
        assert_eq!(e.dedup_key, "interaction:T1:13.14.ab");
        assert_eq!(e.subject.reference.as_deref(), Some("C1"));
        let stored: Value = serde_json::from_slice(&e.body).unwrap();
        assert!(stored.get("token").is_none() && stored.get("response_url").is_none());

        let body = "token=t&team_id=T1&channel_id=C1&user_id=U1&command=%2Fpidevops&text=o%2Fn+fix+it&response_url=https%3A%2F%2Fhooks.slack.com%2Fc&trigger_id=9.8.7";
        let e = parse(&form_headers(), body.as_bytes()).unwrap();
        assert_eq!(e.event_type.as_str(), SLASH_COMMAND);
        assert_eq!(e.dedup_key, "command:T1:9.8.7");
        let stored: Value = serde_json::from_slice(&e.body).unwrap();
        assert_eq!(stored["text"], "o/n fix it");
        assert!(stored.get("token").is_none() && stored.get("response_url").is_none());
    }

    #[test]
    fn socket_mode_payloads_make_the_same_events() {
        let payload: Value = serde_json::from_str(
            r#"{"token":"t","team_id":"T1","type":"event_callback","event_id":"Ev1","event_time":1,"event":{"type":"message","channel":"D1","user":"U1","text":"hi","ts":"1.2"}}"#,
        )
        .unwrap();
        let over_socket = socket_event("events_api", payload.clone()).unwrap();
        let over_http = parse(&json_headers(), payload.to_string().as_bytes()).unwrap();
        assert_eq!(over_socket.dedup_key, over_http.dedup_key);
        assert_eq!(over_socket.body, over_http.body);
        assert_eq!(over_socket.event_type, over_http.event_type);
        assert!(socket_event("hello", Value::Null).is_err());
    }

    #[test]
    fn what_is_not_slacks_shape_is_malformed() {
        for bad in [
            &br#"{"type":"event_callback","event":{"type":"message"}}"#[..],
            br#"{"type":"event_callback","event_id":"Ev1"}"#,
            br#"{"type":"event_callback","event_id":"has space","event":{"type":"m"}}"#,
            b"[]",
            b"nope",
        ] {
            assert!(parse(&json_headers(), bad).is_err(), "{bad:?}");
        }
        assert!(parse(&form_headers(), b"command=%2Fpidevops").is_err());
        assert!(parse(&form_headers(), b"payload=%7B").is_err());
    }
}
