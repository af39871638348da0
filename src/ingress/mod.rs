//! Webhook ingress: raw bytes in, verified and parsed event out, appended, and only then 2xx.
//!
//! Order of checks, so that each failure has one precise answer and nothing unverified reaches the log:
//! source configured (503) → body within its limit (413) → signature (401) → shape and freshness (400/401) →
//! durable append (503 if the store cannot commit; 409, recorded as `ingress.conflict`, if a GitHub or Telegram
//! delivery id is already stored with another body) → 200 with the event's position.
//! Ingress never calls an outbound API.

pub mod github;
pub mod linear;
pub mod telegram;
pub mod telegram_updates;
pub mod verify;

use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use chrono::Utc;
use secrecy::ExposeSecret;
use serde_json::json;

use crate::config::SourceSecret;
use crate::domain::{NewEvent, Source};
use crate::eventlog::{AppendError, Appended};
use crate::http::AppState;

/// GitHub caps deliveries at 25 MiB; Linear and Telegram bodies are small.
pub const GITHUB_BODY_LIMIT: usize = 25 * 1024 * 1024;
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

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
            Self::NotConfigured { .. } | Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
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
            Self::Unreadable(_) | Self::Malformed(_) => "malformed",
            Self::Signature(_) => "unauthorized",
            Self::Stale(_) => "stale",
            Self::Unavailable(_) => "unavailable",
            Self::DifferentBody(_) => "conflict",
        }
    }
}

fn respond(source: Source, result: Result<Appended, IngressError>) -> Response {
    match result {
        Ok(appended) => {
            let outcome = if appended.duplicate {
                "duplicate"
            } else {
                "accepted"
            };
            metrics::counter!("pidevops_webhook_requests_total", "source" => source.as_str(), "outcome" => outcome)
                .increment(1);
            (StatusCode::OK, Json(appended)).into_response()
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
                response
                    .headers_mut()
                    .insert("retry-after", axum::http::HeaderValue::from_static("5"));
            }
            response
        }
    }
}

fn secret(source: Source, configured: &SourceSecret) -> Result<&str, IngressError> {
    configured
        .value
        .as_ref()
        .map(|s| s.expose_secret())
        .ok_or(IngressError::NotConfigured {
            provider: source,
            variable: configured.variable,
        })
}

fn body(
    source: Source,
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<Bytes, IngressError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            IngressError::TooLarge {
                provider: source,
                limit,
            }
        } else {
            IngressError::Unreadable(rejection.body_text())
        }
    })
}

async fn append(state: &AppState, event: NewEvent) -> Result<Appended, IngressError> {
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

pub async fn github(
    State(state): State<AppState>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    let source = Source::Github;
    let result = async {
        let secret = secret(source, &state.settings.github_webhook_secret)?;
        let body = body(source, raw, GITHUB_BODY_LIMIT)?;
        verify::verify_github(
            secret.as_bytes(),
            &body,
            headers
                .get(verify::GITHUB_SIGNATURE_HEADER)
                .map(|v| v.as_bytes()),
        )?;
        // X-GitHub-Delivery names one payload: a redelivery carries the same bytes.
        let event = github::parse(&headers, body)?.pinned();
        append(&state, event).await
    }
    .await;
    respond(source, result)
}

pub async fn linear(
    State(state): State<AppState>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    let source = Source::Linear;
    let result = async {
        let secret = secret(source, &state.settings.linear_webhook_secret)?;
        let body = body(source, raw, DEFAULT_BODY_LIMIT)?;
        verify::verify_linear(
            secret.as_bytes(),
            &body,
            headers
                .get(verify::LINEAR_SIGNATURE_HEADER)
                .map(|v| v.as_bytes()),
        )?;
        let event = linear::parse(&headers, body, Utc::now()).map_err(|e| match e {
            linear::LinearError::Malformed(m) => IngressError::Malformed(m),
            stale @ linear::LinearError::Stale { .. } => IngressError::Stale(stale.to_string()),
        })?;
        append(&state, event).await
    }
    .await;
    respond(source, result)
}

pub async fn telegram(
    State(state): State<AppState>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    let source = Source::Telegram;
    let result = async {
        let secret = secret(source, &state.settings.telegram_webhook_secret)?;
        let body = body(source, raw, DEFAULT_BODY_LIMIT)?;
        verify::verify_token(
            secret,
            headers
                .get(verify::TELEGRAM_TOKEN_HEADER)
                .map(|v| v.as_bytes()),
        )?;
        // An update id names one update. (Not pinned: the getUpdates loop, which re-encodes what it pulls, and
        // Linear, whose retries must carry a fresh webhookTimestamp to pass the 60 s rule, so differ in bytes.)
        let event = telegram::parse(body, state.settings.telegram_bot_id.as_deref())?.pinned();
        append(&state, event).await
    }
    .await;
    respond(source, result)
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
