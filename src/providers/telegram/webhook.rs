//! Telegram updates: not signed, but the webhook's secret token comes back in a header. `update_id` is unique per
//! bot, so the dedup key is scoped by the bot id.

use bytes::Bytes;
use chrono::{TimeZone, Utc};
use serde_json::Value;

use crate::domain::{EventType, NewEvent, Source, Subject};
use crate::ingress::verify::{verify_token, SignatureError};
use crate::ingress::Malformed;

pub const TELEGRAM_TOKEN_HEADER: &str = "x-telegram-bot-api-secret-token";

/// Telegram sends the webhook's secret token back verbatim.
pub fn verify_telegram(expected: &str, header: Option<&[u8]>) -> Result<(), SignatureError> {
    verify_token("X-Telegram-Bot-Api-Secret-Token", expected, header)
}

/// Telegram's webhook: the secret token in `X-Telegram-Bot-Api-Secret-Token`. An update id names one update, so
/// the event is pinned (the getUpdates loop, which re-encodes what it pulls, does not pin).
pub struct Delivery;

impl crate::ingress::Webhook for Delivery {
    const SOURCE: Source = Source::Telegram;
    const BODY_LIMIT: usize = crate::ingress::DEFAULT_BODY_LIMIT;

    fn verify(
        secret: &str,
        headers: &axum::http::HeaderMap,
        _: &[u8],
    ) -> Result<(), SignatureError> {
        let token = headers.get(TELEGRAM_TOKEN_HEADER);
        verify_telegram(secret, token.map(|v| v.as_bytes()))
    }

    fn parse(
        settings: &crate::config::Settings,
        _: &axum::http::HeaderMap,
        body: Bytes,
    ) -> Result<NewEvent, crate::ingress::IngressError> {
        let bot_id = super::settings::bot_id(&settings.providers);
        Ok(parse(body, bot_id.as_deref())?.pinned())
    }
}

/// Turns a verified update into an event. `bot_id` comes from `TELEGRAM_BOT_TOKEN` when it is set.
pub fn parse(body: Bytes, bot_id: Option<&str>) -> Result<NewEvent, Malformed> {
    crate::ingress::check_depth(&body)?;
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| Malformed::new(format!("the body is not valid JSON: {e}")))?;
    let object = value
        .as_object()
        .ok_or_else(|| Malformed::new("the body is JSON but not an object"))?;
    let update_id = object
        .get("update_id")
        .and_then(Value::as_i64)
        .ok_or_else(|| Malformed::new("the update has no integer field \"update_id\""))?;
    // An Update carries exactly one optional field besides update_id; its name is the kind.
    let kind = object
        .keys()
        .find(|k| k.as_str() != "update_id")
        .map(String::as_str)
        .unwrap_or("unknown");
    let inner = object.get(kind);
    let message = inner.and_then(|v| v.get("message")).or(inner);
    let chat_id = message
        .and_then(|m| m.get("chat"))
        .and_then(|c| c.get("id"))
        .and_then(Value::as_i64);
    let date = message.and_then(|m| m.get("date")).and_then(Value::as_i64);

    let dedup_key = format!("{}:{update_id}", bot_id.unwrap_or("bot"));
    let event_type = EventType::new(Source::Telegram, &[kind]);
    let mut event = NewEvent::new(
        Source::Telegram,
        event_type,
        dedup_key,
        "application/json",
        body,
    );
    if let Some(at) = date.and_then(|d| Utc.timestamp_opt(d, 0).single()) {
        event.occurred_at = at;
    }
    event.subject = Subject {
        action: None,
        repository: None,
        number: None,
        reference: chat_id.map(|c| c.to_string()),
    };
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keys_and_references_an_update() {
        let body = Bytes::from_static(
            br#"{"update_id":7,"message":{"message_id":1,"date":1764411303,"chat":{"id":-100,"type":"group"},"text":"hi"}}"#,
        );
        let e = parse(body, Some("123")).unwrap();
        assert_eq!(e.event_type.as_str(), "telegram.message");
        assert_eq!(e.dedup_key, "123:7");
        assert_eq!(e.subject.reference.as_deref(), Some("-100"));
        assert_eq!(e.occurred_at.timestamp(), 1764411303);
    }

    #[test]
    fn callback_queries_reference_their_message_chat() {
        let body = Bytes::from_static(
            br#"{"update_id":8,"callback_query":{"id":"q","data":"approve","message":{"date":1,"chat":{"id":5}}}}"#,
        );
        let e = parse(body, None).unwrap();
        assert_eq!(e.event_type.as_str(), "telegram.callback_query");
        assert_eq!(e.dedup_key, "bot:8");
        assert_eq!(e.subject.reference.as_deref(), Some("5"));
    }

    #[test]
    fn updates_without_an_id_are_malformed() {
        for bad in [&b"{}"[..], br#"{"update_id":"7"}"#, b"[]", b"nope"] {
            assert!(parse(Bytes::copy_from_slice(bad), None).is_err(), "{bad:?}");
        }
    }

    mod signature {
        use super::super::verify_telegram;
        use crate::ingress::verify::SignatureError;
        use proptest::prelude::*;

        #[test]
        fn telegram_token_must_match_exactly() {
            assert_eq!(verify_telegram("s3cret", Some(b"s3cret")), Ok(()));
            assert!(verify_telegram("s3cret", Some(b"s3cre")).is_err());
            assert!(verify_telegram("s3cret", Some(b"s3cret ")).is_err());
            assert!(verify_telegram("s3cret", Some(b"")).is_err());
            assert_eq!(
                verify_telegram("s3cret", None),
                Err(SignatureError::Missing("X-Telegram-Bot-Api-Secret-Token"))
            );
        }

        proptest! {
            #[test]
            fn arbitrary_tokens_never_pass(token in proptest::collection::vec(any::<u8>(), 0..64)) {
                prop_assume!(token != b"the-real-token");
                prop_assert!(verify_telegram("the-real-token", Some(&token)).is_err());
            }
        }
    }
}
