//! `pidevops export`: the log as JSON lines, every stored column exactly (the body in base64, hashes in hex), so
//! that `pidevops verify --export` can walk its hash chain offline, on another machine, long after.

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::chain::ChainedEvent;
use super::{Meta, StoredEvent};

/// One exported event. Field for field what the `events` table holds.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exported {
    pub position: i64,
    pub id: Uuid,
    pub source: String,
    pub event_type: String,
    pub dedup_key: String,
    pub stream: Option<String>,
    pub stream_version: Option<i64>,
    pub occurred_at: DateTime<Utc>,
    pub recorded_at: DateTime<Utc>,
    pub action: Option<String>,
    pub repository: Option<String>,
    pub number: Option<i64>,
    pub reference: Option<String>,
    pub content_type: String,
    /// The exact bytes, standard base64.
    pub body: String,
    pub meta: serde_json::Map<String, serde_json::Value>,
    pub body_digest: Option<String>,
    pub content_hash: Option<String>,
    pub chain_hash: Option<String>,
}

impl Exported {
    pub fn of(chained: &ChainedEvent) -> Self {
        let e = &chained.event;
        Self {
            position: e.position,
            id: e.id,
            source: e.source.clone(),
            event_type: e.event_type.clone(),
            dedup_key: e.dedup_key.clone(),
            stream: e.stream.clone(),
            stream_version: e.stream_version,
            occurred_at: e.occurred_at,
            recorded_at: e.recorded_at,
            action: e.action.clone(),
            repository: e.repository.clone(),
            number: e.number,
            reference: e.reference.clone(),
            content_type: e.content_type.clone(),
            body: base64::engine::general_purpose::STANDARD.encode(&e.body),
            meta: e.meta.to_map(),
            body_digest: chained.body_digest.as_ref().map(hex::encode),
            content_hash: chained.content_hash.as_ref().map(hex::encode),
            chain_hash: chained.chain_hash.as_ref().map(hex::encode),
        }
    }

    /// Back to the stored event and its hashes; an undecodable body or hash is an error naming the field.
    pub fn into_chained(self) -> Result<ChainedEvent, String> {
        let hash = |name: &str, text: Option<String>| -> Result<Option<Vec<u8>>, String> {
            text.map(|t| hex::decode(&t).map_err(|e| format!("{name} is not hex: {e}")))
                .transpose()
        };
        let body = base64::engine::general_purpose::STANDARD
            .decode(&self.body)
            .map_err(|e| format!("body is not base64: {e}"))?;
        let meta = Meta::from_json(serde_json::Value::Object(self.meta).to_string())?;
        Ok(ChainedEvent {
            body_digest: hash("body_digest", self.body_digest)?,
            content_hash: hash("content_hash", self.content_hash)?,
            chain_hash: hash("chain_hash", self.chain_hash)?,
            event: StoredEvent {
                position: self.position,
                id: self.id,
                source: self.source,
                event_type: self.event_type,
                dedup_key: self.dedup_key,
                stream: self.stream,
                stream_version: self.stream_version,
                occurred_at: self.occurred_at,
                recorded_at: self.recorded_at,
                action: self.action,
                repository: self.repository,
                number: self.number,
                reference: self.reference,
                content_type: self.content_type,
                body,
                meta,
            },
        })
    }
}
