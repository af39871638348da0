//! Webhook ingress: raw bytes in, verified and parsed event out, appended, and only then 2xx.
//!
//! Order of checks, so that each failure has one precise answer and nothing unverified reaches the log:
//! source configured (503) → body within its limit (413) and the unverified-bytes budget (503 busy) → signature
//! (401) → nesting depth, shape and freshness (400/401) → durable append (503 if the store cannot commit; 409,
//! recorded as `ingress.conflict`, if a GitHub or Telegram delivery id is already stored with another body) → 200
//! with the event's position (or what the provider's webhook tells its sender: a slash command's answer). A
//! provider's handshake (Slack's `url_verification`) is answered once verified, and never stored.
//! Ingress never calls an outbound API.

pub mod verify;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, MethodRouter};
use axum::{Json, Router};
use bytes::Bytes;
use futures::StreamExt;
use secrecy::ExposeSecret;
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::Settings;
use crate::domain::{registry, NewEvent, Source};
use crate::eventlog::{AppendError, Appended, EventLog};

/// GitHub caps deliveries at 25 MiB; Linear and Telegram bodies are small.
/// What the webhook handlers may touch, and nothing more: the secrets (in `Settings`), the log to append to and
/// the unverified-bytes budget. The HTTP router hands it out of its own state (`FromRef`), so ingress never
/// depends on the router that mounts it.
#[derive(Clone)]
pub struct Webhooks {
    pub settings: Arc<Settings>,
    pub log: EventLog,
    pub budget: BodyBudget,
}

pub const GITHUB_BODY_LIMIT: usize = 25 * 1024 * 1024;
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// Bodies that declare at most this many bytes are read on the small lane of [`BodyBudget`].
pub const SMALL_BODY: usize = 1024 * 1024;
/// Bytes of declared-small bodies held in memory before their signature is checked, across every webhook route.
pub const SMALL_LANE_BYTES: usize = 32 * 1024 * 1024;
/// Bytes of larger (or undeclared, chunked) bodies held before their signature is checked.
pub const LARGE_LANE_BYTES: usize = 64 * 1024 * 1024;
/// What a delivery refused for want of room is told to wait.
const BUSY_RETRY_AFTER_S: &str = "1";

/// Memory for webhook bodies not yet verified. Anyone can post 25 MiB to `/webhooks/github`; only after the whole
/// body is read can its signature be checked, so the bytes held for such bodies are bounded here, and a delivery
/// that would pass the bound is answered 503 with `Retry-After`, its body read and dropped, never kept. Bodies that declare at most
/// [`SMALL_BODY`] (every real Linear and Telegram delivery, and nearly every GitHub one) have a lane of their own,
/// so a flood of large bodies cannot crowd out ordinary traffic. A body's bytes stay counted until its delivery is
/// answered.
#[derive(Clone, Debug)]
pub struct BodyBudget {
    small: Arc<Semaphore>,
    large: Arc<Semaphore>,
}

impl Default for BodyBudget {
    fn default() -> Self {
        Self::new(SMALL_LANE_BYTES, LARGE_LANE_BYTES)
    }
}

impl BodyBudget {
    pub fn new(small: usize, large: usize) -> Self {
        Self {
            small: Arc::new(Semaphore::new(small)),
            large: Arc::new(Semaphore::new(large)),
        }
    }

    /// Reads `body` (at most `limit` bytes) within the budget; the permit keeps its bytes counted until dropped.
    async fn read(
        &self,
        source: Source,
        headers: &HeaderMap,
        body: Body,
        limit: usize,
    ) -> Result<(Bytes, Option<OwnedSemaphorePermit>), IngressError> {
        let mut stream = body.into_data_stream();
        let read = self.read_within(source, headers, &mut stream, limit).await;
        if let Err(IngressError::TooLarge { .. } | IngressError::Busy { .. }) = &read {
            // Refused: the rest is read and dropped (holding nothing), up to a bound, so a client still sending
            // gets the answer rather than a reset; past the bound the connection is closed.
            let mut left = limit + SMALL_BODY;
            while let Some(Ok(chunk)) = stream.next().await {
                left = left.saturating_sub(chunk.len());
                if left == 0 {
                    break;
                }
            }
        }
        read
    }

    async fn read_within(
        &self,
        source: Source,
        headers: &HeaderMap,
        stream: &mut axum::body::BodyDataStream,
        limit: usize,
    ) -> Result<(Bytes, Option<OwnedSemaphorePermit>), IngressError> {
        let too_large = || IngressError::TooLarge {
            provider: source,
            limit,
        };
        let declared = match headers.get(header::CONTENT_LENGTH) {
            None => None,
            Some(value) => Some(
                value
                    .to_str()
                    .ok()
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .ok_or_else(|| {
                        IngressError::Unreadable("Content-Length is not a number".into())
                    })?,
            ),
        };
        if declared.is_some_and(|n| n > limit) {
            return Err(too_large());
        }
        let busy = || IngressError::Busy { provider: source };
        // A declared length is reserved whole before a byte is read; a chunked body reserves as it arrives.
        let (lane, mut held) = match declared {
            Some(n) => {
                let lane = if n <= SMALL_BODY {
                    &self.small
                } else {
                    &self.large
                };
                (lane, Some(take(lane, n).ok_or_else(busy)?))
            }
            None => (&self.large, None),
        };
        let mut bytes = Vec::with_capacity(declared.unwrap_or(0));
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| IngressError::Unreadable(e.to_string()))?;
            if bytes.len() + chunk.len() > limit {
                return Err(too_large());
            }
            if declared.is_none() {
                let more = take(lane, chunk.len()).ok_or_else(busy)?;
                match held.as_mut() {
                    Some(permit) => permit.merge(more),
                    None => held = Some(more),
                }
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok((Bytes::from(bytes), held))
    }
}

/// `n` bytes of `lane` now, or `None` if it has not that much room.
fn take(lane: &Arc<Semaphore>, n: usize) -> Option<OwnedSemaphorePermit> {
    let n = u32::try_from(n).ok()?;
    lane.clone().try_acquire_many_owned(n).ok()
}

/// The deepest nesting of arrays and objects a delivery may have. serde_json refuses to read past 128 levels, so
/// a body stored deeper could never be served again (`/api/events` wraps it in two more); real payloads stay
/// under 20.
pub const MAX_JSON_DEPTH: usize = 64;

/// Refuses JSON nested deeper than [`MAX_JSON_DEPTH`], by a scan that holds no state but the depth, so the check
/// cannot itself overflow a stack. Other syntax errors are left to the parser. A string's contents (most of a
/// webhook's bytes: URLs, bodies) are skipped to their next quote or backslash with `memchr`, not byte by byte.
pub(crate) fn check_depth(json: &[u8]) -> Result<(), Malformed> {
    if within_depth(json, MAX_JSON_DEPTH) {
        Ok(())
    } else {
        Err(Malformed::new(format!(
            "the body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels"
        )))
    }
}

/// Whether `json` nests at most `limit` levels (strings' contents do not count).
fn within_depth(json: &[u8], limit: usize) -> bool {
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(&b) = json.get(i) {
        match b {
            b'"' => {
                // To the string's closing quote, stepping over each escaped byte.
                i += 1;
                loop {
                    let Some(at) = json
                        .get(i..)
                        .and_then(|rest| memchr::memchr2(b'"', b'\\', rest))
                    else {
                        // Unterminated: the parser says so.
                        return true;
                    };
                    i += at;
                    if json[i] == b'"' {
                        break;
                    }
                    i += 2;
                }
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    true
}

/// A delivery that is authentic but not shaped as its provider promises.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Malformed(pub String);

impl Malformed {
    pub fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }
}

/// Why a delivery was not accepted. Each maps to one status and one metrics outcome.
#[derive(Debug, thiserror::Error)]
pub enum IngressError {
    #[error("{variable} is not set, so {provider} deliveries are refused")]
    NotConfigured {
        provider: Source,
        variable: &'static str,
    },
    #[error("the body is larger than the {limit} byte limit for {provider}")]
    TooLarge { provider: Source, limit: usize },
    #[error("too many {provider} bodies are being received at once; retry shortly")]
    Busy { provider: Source },
    #[error("the body could not be read: {0}")]
    Unreadable(String),
    #[error(transparent)]
    Signature(#[from] verify::SignatureError),
    #[error("{0}")]
    Stale(String),
    #[error(transparent)]
    Malformed(#[from] Malformed),
    #[error("the event log could not commit the delivery: {0}")]
    Unavailable(#[from] AppendError),
    /// [`AppendError::DifferentBody`]: the delivery id is stored with another body.
    #[error("{0}")]
    DifferentBody(AppendError),
}

impl IngressError {
    fn status(&self) -> StatusCode {
        match self {
            Self::NotConfigured { .. } | Self::Busy { .. } | Self::Unavailable(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Unreadable(_) | Self::Malformed(_) => StatusCode::BAD_REQUEST,
            Self::Signature(_) | Self::Stale(_) => StatusCode::UNAUTHORIZED,
            Self::DifferentBody(_) => StatusCode::CONFLICT,
        }
    }

    fn outcome(&self) -> &'static str {
        match self {
            Self::NotConfigured { .. } => "not_configured",
            Self::TooLarge { .. } => "too_large",
            Self::Busy { .. } => "busy",
            Self::Unreadable(_) | Self::Malformed(_) => "malformed",
            Self::Signature(_) => "unauthorized",
            Self::Stale(_) => "stale",
            Self::Unavailable(_) => "unavailable",
            Self::DifferentBody(_) => "conflict",
        }
    }
}

fn respond(source: Source, result: Result<Answer, IngressError>) -> Response {
    match result {
        Ok(answer) => {
            let outcome = match &answer {
                Answer::Stored(appended) | Answer::Told(appended, _) if appended.duplicate => {
                    "duplicate"
                }
                Answer::Stored(_) | Answer::Told(..) => "accepted",
                Answer::Handshake(_) => "handshake",
            };
            metrics::counter!("pidevops_webhook_requests_total", "source" => source.as_str(), "outcome" => outcome)
                .increment(1);
            match answer {
                Answer::Stored(appended) => (StatusCode::OK, Json(appended)).into_response(),
                Answer::Told(_, told) | Answer::Handshake(told) => {
                    (StatusCode::OK, Json(told)).into_response()
                }
            }
        }
        Err(error) => {
            metrics::counter!("pidevops_webhook_requests_total", "source" => source.as_str(), "outcome" => error.outcome())
                .increment(1);
            let status = error.status();
            if status.is_server_error() {
                tracing::warn!(%source, error = %error, "delivery refused");
            } else {
                tracing::info!(%source, error = %error, "delivery refused");
            }
            let mut response = (
                status,
                Json(json!({ "error": error.outcome(), "message": error.to_string() })),
            )
                .into_response();
            if status == StatusCode::SERVICE_UNAVAILABLE {
                let after = match error {
                    IngressError::Busy { .. } => BUSY_RETRY_AFTER_S,
                    _ => "5",
                };
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static(after));
            }
            response
        }
    }
}

fn secret(source: Source, settings: &Settings) -> Result<&str, IngressError> {
    let configured = settings.webhook_secret(source);
    configured
        .and_then(|c| c.value.as_ref())
        .map(|s| s.expose_secret())
        .ok_or(IngressError::NotConfigured {
            provider: source,
            variable: configured.map_or("", |c| c.variable),
        })
}

async fn append(state: &Webhooks, event: NewEvent) -> Result<Appended, IngressError> {
    match state.log.append(event).await {
        Ok(appended) => Ok(appended),
        Err(refused @ AppendError::DifferentBody { .. }) => {
            // Refused only once the refusal is on record; if recording fails, 503 asks the sender to retry.
            if let Some(record) = conflict_record(&refused) {
                state.log.append(record).await?;
            }
            Err(IngressError::DifferentBody(refused))
        }
        Err(other) => Err(other.into()),
    }
}

/// The `ingress.conflict` record of a refused delivery: source, key and both digests, never the body. Keyed by
/// the received digest, so a sender repeating the same altered body is recorded once.
fn conflict_record(refused: &AppendError) -> Option<NewEvent> {
    let AppendError::DifferentBody {
        provider,
        dedup_key,
        event_id,
        position,
        stored,
        received,
    } = refused
    else {
        return None;
    };
    let body = json!({
        "source": provider.as_str(),
        "dedup_key": dedup_key,
        "stored_event_id": event_id,
        "stored_position": position,
        "stored_sha256": stored,
        "received_sha256": received,
        "reason": "the delivery id is already stored with a different body",
    });
    let mut record = NewEvent::new(
        Source::Pidevops,
        crate::domain::EventType::from_stored("ingress.conflict".to_owned()),
        format!("ingress-conflict:{provider}:{dedup_key}:{received}"),
        "application/json",
        Bytes::from(body.to_string()),
    );
    record
        .meta
        .insert("source".to_owned(), json!(provider.as_str()));
    Some(record)
}

/// What one provider's webhook does with a delivery of its own: check it is authentic, and read it into its
/// event. Everything around them (the secret, the body budget, the append, the answer) is [`receive`]'s, the
/// same for every provider. Each provider's module implements it; [`router`] mounts one route per entry of the
/// provider table.
pub trait Webhook {
    const SOURCE: Source;
    /// The largest body accepted.
    const BODY_LIMIT: usize;
    /// Whether the delivery is signed (or carries the token) with `secret`.
    fn verify(secret: &str, headers: &HeaderMap, body: &[u8])
        -> Result<(), verify::SignatureError>;
    /// The verified delivery as its event (pinned when its delivery id names one payload).
    fn parse(
        settings: &Settings,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<NewEvent, IngressError>;
    /// A verified delivery answered at once with this JSON and never stored: a provider's handshake (Slack's
    /// `url_verification`, which must echo its challenge). `Ok(None)` for every other delivery.
    fn handshake(
        _headers: &HeaderMap,
        _body: &[u8],
    ) -> Result<Option<serde_json::Value>, IngressError> {
        Ok(None)
    }
    /// What the sender is told once `event` is stored, instead of its position (Slack shows a slash command's
    /// answer to whoever typed it). A duplicate is told the same.
    fn acknowledgement(_event: &NewEvent) -> Option<serde_json::Value> {
        None
    }
}

/// The one webhook handler: configured, read within the budget, verified, parsed, appended, answered.
pub async fn receive<W: Webhook>(
    State(state): State<Webhooks>,
    headers: HeaderMap,
    raw: Body,
) -> Response {
    let source = W::SOURCE;
    let result = async {
        let secret = secret(source, &state.settings)?;
        let (body, _held) = state
            .budget
            .read(source, &headers, raw, W::BODY_LIMIT)
            .await?;
        W::verify(secret, &headers, &body)?;
        if let Some(answer) = W::handshake(&headers, &body)? {
            return Ok(Answer::Handshake(answer));
        }
        let event = W::parse(&state.settings, &headers, body)?;
        let acknowledgement = W::acknowledgement(&event);
        let appended = append(&state, event).await?;
        Ok(match acknowledgement {
            Some(told) => Answer::Told(appended, told),
            None => Answer::Stored(appended),
        })
    }
    .await;
    respond(source, result)
}

/// What a verified delivery is answered with.
enum Answer {
    /// Stored: its position.
    Stored(Appended),
    /// Stored, and the sender is told this instead ([`Webhook::acknowledgement`]).
    Told(Appended, serde_json::Value),
    /// A handshake, answered and not stored ([`Webhook::handshake`]).
    Handshake(serde_json::Value),
}

/// Every provider's webhook route (`PROVIDERS[..].webhook_route`), for the HTTP router to mount: `handler` says
/// which [`Webhook`] receives a source's deliveries (the providers' registration, `providers::webhook`); ingress
/// names no provider.
pub fn router<S>(handler: fn(Source) -> Option<MethodRouter<S>>) -> Router<S>
where
    Webhooks: FromRef<S>,
    S: Clone + Send + Sync + 'static,
{
    registry::PROVIDERS
        .iter()
        .filter_map(|p| Some((p.webhook_route, handler(p.source)?)))
        .fold(Router::new(), |router, (route, handler)| {
            router.route(route, handler)
        })
}

/// The handler of webhook `W`: read within budget, verified, parsed, appended (see [`receive`]).
pub fn handler<W: Webhook + 'static, S>() -> MethodRouter<S>
where
    Webhooks: FromRef<S>,
    S: Clone + Send + Sync + 'static,
{
    post(receive::<W>)
}

/// A header as text; a header that is present but not visible ASCII is malformed, not absent.
pub(crate) fn header_str<'a>(
    headers: &'a HeaderMap,
    name: &str,
) -> Result<Option<&'a str>, Malformed> {
    headers
        .get(name)
        .map(|v| {
            v.to_str()
                .map(str::trim)
                .map_err(|_| Malformed::new(format!("the {name} header is not visible ASCII")))
        })
        .transpose()
}

/// Dedup keys from headers are bounded and printable, so they are safe in logs, URLs and NATS headers.
pub(crate) fn check_key(header: &str, key: &str) -> Result<(), Malformed> {
    if key.is_empty() || key.len() > 200 || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Malformed::new(format!(
            "the {header} header must be 1 to 200 visible ASCII characters"
        )));
    }
    Ok(())
}

pub(crate) fn kept_headers(
    headers: &HeaderMap,
    names: &[&str],
) -> serde_json::Map<String, serde_json::Value> {
    names
        .iter()
        .filter_map(|name| {
            let value = headers.get(*name)?.to_str().ok()?;
            Some((
                (*name).to_owned(),
                serde_json::Value::String(value.to_owned()),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn nested(depth: usize) -> String {
        format!(
            "{{\"a\":{}1{}}}",
            "[".repeat(depth - 1),
            "]".repeat(depth - 1)
        )
    }

    #[test]
    fn nesting_is_limited_and_strings_do_not_count() {
        assert!(check_depth(nested(MAX_JSON_DEPTH).as_bytes()).is_ok());
        let err = check_depth(nested(MAX_JSON_DEPTH + 1).as_bytes()).unwrap_err();
        assert!(err.to_string().contains("deeper than 64"), "{err}");
        let brackets_in_a_string = format!(r#"{{"a":"{}\"{}"}}"#, "[".repeat(500), "{".repeat(500));
        assert!(check_depth(brackets_in_a_string.as_bytes()).is_ok());
        // What serde_json itself can read back, with room for the envelope around it.
        let value: serde_json::Value = serde_json::from_str(&nested(MAX_JSON_DEPTH)).unwrap();
        let wrapped = serde_json::json!({ "events": [{ "body": value }] }).to_string();
        assert!(serde_json::from_str::<serde_json::Value>(&wrapped).is_ok());
    }

    /// The byte-by-byte scan `check_depth` replaced: the reference it must agree with.
    fn depth_byte_by_byte(json: &[u8], limit: usize) -> bool {
        let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
        for &b in json {
            if in_string {
                match b {
                    _ if escaped => escaped = false,
                    b'\\' => escaped = true,
                    b'"' => in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    if depth > limit {
                        return false;
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        true
    }

    proptest! {
        /// Any bytes, weighted to the ones that matter (quotes, escapes, brackets), get the same answer as the
        /// byte-by-byte scan at every small limit (where a string read wrong changes the answer): escapes at the
        /// very end, unterminated strings and escaped quotes included.
        #[test]
        fn skipping_strings_with_memchr_agrees_with_the_byte_by_byte_scan(
            json in proptest::collection::vec(
                prop_oneof![
                    Just(b'"'), Just(b'\\'), Just(b'['), Just(b'{'), Just(b']'), Just(b'}'), Just(b'a'),
                    proptest::num::u8::ANY,
                ],
                0..200,
            ),
        ) {
            for limit in 0..6 {
                prop_assert_eq!(within_depth(&json, limit), depth_byte_by_byte(&json, limit), "limit {}", limit);
            }
        }
    }
}
