//! What an event is before and after it reaches the log.

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

/// Where an event came from. The set is closed: a new source is a deliberate change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Github,
    Linear,
    Telegram,
    Slack,
    Gitlab,
    /// Events pidevops itself decides (tasks, runs, effects).
    Pidevops,
}

impl Source {
    pub const ALL: [Source; 6] = [
        Source::Github,
        Source::Linear,
        Source::Telegram,
        Source::Slack,
        Source::Gitlab,
        Source::Pidevops,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Source::Github => "github",
            Source::Linear => "linear",
            Source::Telegram => "telegram",
            Source::Slack => "slack",
            Source::Gitlab => "gitlab",
            Source::Pidevops => "pidevops",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Source {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Source::ALL
            .into_iter()
            .find(|src| src.as_str() == s)
            .ok_or_else(|| format!("unknown source {s:?}"))
    }
}

/// An event type such as `github.pull_request.opened`: dot-separated tokens of `[A-Za-z0-9_-]`.
///
/// Each token becomes a NATS subject token, so a provider-supplied name (GitHub's event header, Linear's `type`)
/// is sanitised here: `*`, `>`, spaces and dots inside a token could otherwise change which subscribers see it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct EventType(String);

impl EventType {
    const MAX_TOKEN_LEN: usize = 64;

    /// Builds `source.token1.token2…`, sanitising each provider-supplied token and dropping empty ones.
    pub fn new(source: Source, tokens: &[&str]) -> Self {
        let mut name = source.as_str().to_owned();
        for token in tokens {
            let clean = Self::sanitize(token);
            if !clean.is_empty() {
                name.push('.');
                name.push_str(&clean);
            }
        }
        Self(name)
    }

    fn sanitize(token: &str) -> String {
        token
            .chars()
            .take(Self::MAX_TOKEN_LEN)
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }

    /// For names read back from the log, which were sanitised on the way in.
    pub fn from_stored(name: String) -> Self {
        Self(name)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The few facts about an event that queries need, extracted at ingress so the append never parses the body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Subject {
    pub action: Option<String>,
    /// `owner/name` for GitHub.
    pub repository: Option<String>,
    /// Issue or pull request number.
    pub number: Option<i64>,
    /// A provider's own reference: a Linear identifier (`ENG-412`) or id, a Telegram chat id.
    pub reference: Option<String>,
}

/// An event on its way into the log. The body is kept byte for byte: it is the record.
#[derive(Clone, Debug)]
pub struct NewEvent {
    pub id: Uuid,
    pub source: Source,
    pub event_type: EventType,
    /// Unique per source; a second append with the same key returns the first one's position.
    pub dedup_key: String,
    /// Domain stream (`task:T-42`) and the version this event gives it; `None` for provider events.
    pub stream: Option<(String, i64)>,
    pub occurred_at: DateTime<Utc>,
    pub content_type: String,
    pub body: Bytes,
    /// Selected request headers and similar context; small.
    pub meta: serde_json::Map<String, serde_json::Value>,
    pub subject: Subject,
    /// SHA-256 of `body` when the key is a provider's delivery id ([`NewEvent::pinned`]): the same key with
    /// another digest is then refused rather than answered as a duplicate. `None` for keys where a later body
    /// may rightly differ (internal keys, poller snapshots): those stay first-writer-wins.
    pub body_digest: Option<[u8; 32]>,
}

impl NewEvent {
    /// A fresh event with a time-ordered id and no stream.
    pub fn new(
        source: Source,
        event_type: EventType,
        dedup_key: impl Into<String>,
        content_type: impl Into<String>,
        body: Bytes,
    ) -> Self {
        Self {
            id: Uuid::now_v7(),
            source,
            event_type,
            dedup_key: dedup_key.into(),
            stream: None,
            occurred_at: Utc::now(),
            content_type: content_type.into(),
            body,
            meta: serde_json::Map::new(),
            subject: Subject::default(),
            body_digest: None,
        }
    }

    /// Pins the body to the key: a later append with this key and other bytes is a conflict, not a duplicate.
    /// For provider deliveries whose key is the provider's own delivery id and whose redeliveries are byte for
    /// byte the same (GitHub, Telegram webhooks).
    pub fn pinned(mut self) -> Self {
        use sha2::{Digest, Sha256};
        self.body_digest = Some(Sha256::digest(&self.body).into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_types_are_dot_joined_and_sanitised() {
        assert_eq!(
            EventType::new(Source::Github, &["pull_request", "opened"]).as_str(),
            "github.pull_request.opened"
        );
        assert_eq!(
            EventType::new(Source::Github, &["ping"]).as_str(),
            "github.ping"
        );
        assert_eq!(
            EventType::new(Source::Github, &["evil.>", "a *b"]).as_str(),
            "github.evil__.a__b"
        );
        assert_eq!(
            EventType::new(Source::Telegram, &["", "message"]).as_str(),
            "telegram.message"
        );
        let long = "x".repeat(500);
        assert_eq!(
            EventType::new(Source::Linear, &[&long]).as_str().len(),
            "linear.".len() + 64
        );
    }

    #[test]
    fn sources_round_trip_through_strings() {
        for source in Source::ALL {
            assert_eq!(source.as_str().parse::<Source>().unwrap(), source);
        }
        assert!("gitea".parse::<Source>().is_err());
    }
}
