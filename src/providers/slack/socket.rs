//! The `slack_socket` loop: Socket Mode, for a pidevops with no public URL (a laptop). With `SLACK_APP_TOKEN` set
//! it asks `apps.connections.open` for a websocket URL, keeps that socket open, and lands every envelope in the
//! log exactly as the signed webhook lands the same payload ([`webhook::socket_event`]: same event, same dedup
//! key), so a redelivery, or the same event over both routes, is stored once.
//!
//! An envelope is acknowledged only after its event committed (`EventLog::append` returned): an envelope whose
//! append fails is left unacked, and Slack delivers it again. A malformed payload is acked all the same (Slack would
//! redeliver it forever) and nothing is stored, as the webhook stores nothing it refuses with a 400: the reason is
//! logged (a warning naming the envelope and its type, never the payload), counted in `/metrics` and shown in the
//! loop's `/health` detail (`last_malformed`).
//!
//! One tick reads for a [`Timing::window`] and reports; the socket stays open across ticks. Slack's pings are
//! answered by tungstenite; a quiet socket is pinged, and one silent for [`Timing::read_timeout`] is dead. A
//! `disconnect` envelope (Slack refreshing the connection) reconnects at once; a drop or a failed connect waits a
//! doubling backoff first.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use futures::{SinkExt, StreamExt};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use slack_morphism::prelude::SlackApiAppsConnectionOpenResponse;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

use super::webhook;
use crate::eventlog::EventLog;
use crate::ingress::Webhook;
use crate::loops::LoopRegistry;

pub const SLACK_SOCKET: &str = "slack_socket";
/// Envelopes by outcome: stored, duplicate, malformed, not_stored (the append failed: not acked).
pub const ENVELOPES_METRIC: &str = "pidevops_slack_socket_envelopes_total";
/// Websockets opened.
pub const CONNECTIONS_METRIC: &str = "pidevops_slack_socket_connections_total";

type Link =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Why `apps.connections.open` gave no socket. Never carries the token (it travels in a header only).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("apps.connections.open: no answer from Slack: {0}")]
    Unreachable(String),
    #[error("apps.connections.open: Slack refused: {code} (HTTP {status}); check SLACK_APP_TOKEN (an app-level token with connections:write)")]
    Refused { code: String, status: u16 },
    #[error("apps.connections.open: an answer pidevops cannot read (HTTP {status}): {reason}")]
    Unreadable { status: u16, reason: String },
}

/// The loop's pace; constants in the catalog, short ones in unit tests.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// How long one tick reads before it reports (each report keeps the loop fresh in `/health`).
    pub window: Duration,
    /// Quiet this long: ping Slack, whose pong proves the socket.
    pub ping_after: Duration,
    /// Nothing at all (an envelope, a ping, a pong) for this long: the socket is dead.
    pub read_timeout: Duration,
    /// The wait before the first reconnect after a drop or failure; it doubles with each one after.
    pub backoff_first: Duration,
    pub backoff_max: Duration,
    /// Bounds `apps.connections.open` and the websocket handshake, each.
    pub connect_timeout: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(5),
            ping_after: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            backoff_first: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

impl Timing {
    /// The wait before a reconnect after `failures` drops or failures in a row.
    pub fn backoff(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let doubled = self
            .backoff_first
            .saturating_mul(1u32 << (failures - 1).min(16));
        doubled.min(self.backoff_max)
    }
}

/// Where the socket stands, for `/health`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkState {
    /// Asking for a socket, or waiting for its `hello`.
    #[default]
    Connecting,
    Connected,
    /// The socket dropped or Slack asked to reconnect; the next tick reconnects.
    Reconnecting,
    /// No socket could be opened, or an envelope could not be stored.
    Failing,
}

/// The loop's detail in `/health`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SocketProgress {
    pub state: LinkState,
    /// Why it is reconnecting or failing.
    pub reason: Option<String>,
    pub connections: u64,
    pub stored: u64,
    pub duplicates: u64,
    pub malformed: u64,
    /// Appends that failed: left unacked for Slack to deliver again.
    pub not_stored: u64,
    pub last_malformed: Option<String>,
}

/// An envelope as sent: its payload kept as JSON, so the event is made of exactly what Slack sent (slack-morphism's
/// `SlackSocketModeEvent` would type it, and lose what its models do not name; its socket-mode models are not
/// reachable from outside the crate without its client features anyway).
#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "type")]
    kind: String,
    envelope_id: Option<String>,
    #[serde(default)]
    payload: Value,
    /// A `disconnect`'s (`refresh_requested`, `link_disabled`, `warning`).
    reason: Option<String>,
}

/// What Slack expects back for an envelope; a slash command's may carry the reply to whoever typed it.
#[derive(Serialize)]
struct Ack<'a> {
    envelope_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<Value>,
}

struct Live {
    link: Link,
    last_heard: Instant,
    pinged: bool,
}

#[derive(Default)]
struct Session {
    live: Option<Live>,
    /// Drops and failures in a row, for the backoff.
    failures: u32,
}

/// How a window of reading ended.
enum Window {
    /// Still open.
    Open,
    /// Gone: reconnect after the backoff.
    Dropped(String),
    /// Slack asked: reconnect at once.
    Refresh(String),
}

/// One envelope handled.
enum Step {
    Go,
    Dropped(String),
    Refresh(String),
}

pub struct SlackSocket {
    http: reqwest::Client,
    api_url: String,
    token: SecretString,
    log: EventLog,
    timing: Timing,
    session: tokio::sync::Mutex<Session>,
    progress: Arc<Mutex<SocketProgress>>,
    /// Where each change of the progress goes at once: a tick is a whole window, and `/health` should not lag it.
    registry: Option<LoopRegistry>,
}

impl SlackSocket {
    pub fn new(api_url: &str, token: &SecretString, log: EventLog) -> Result<Self, String> {
        let timing = Timing::default();
        let http = reqwest::Client::builder()
            .timeout(timing.connect_timeout)
            .build()
            .map_err(|e| format!("cannot build the Slack client: {e}"))?;
        Ok(Self {
            http,
            api_url: api_url.trim_end_matches('/').to_owned(),
            token: token.clone(),
            log,
            timing,
            session: tokio::sync::Mutex::default(),
            progress: Arc::default(),
            registry: None,
        })
    }

    /// Reports every change of the progress to `registry` as the loop's detail, as it happens.
    pub fn reporting_to(mut self, registry: LoopRegistry) -> Self {
        self.registry = Some(registry);
        self
    }

    pub fn with_timing(mut self, timing: Timing) -> Self {
        self.timing = timing;
        self
    }

    /// What `/health` shows, as of now.
    pub fn progress(&self) -> SocketProgress {
        // Each update is a plain field assignment: a poisoned lock holds no half-written state.
        self.progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn report(&self, update: impl FnOnce(&mut SocketProgress)) {
        let now = {
            let mut progress = self.progress.lock().unwrap_or_else(|p| p.into_inner());
            update(&mut progress);
            progress.clone()
        };
        if let (Some(registry), Ok(detail)) = (&self.registry, serde_json::to_value(now)) {
            registry.set_detail(SLACK_SOCKET, detail);
        }
    }

    /// Opens the socket if there is none (after the backoff), then reads one window of envelopes.
    pub async fn tick(&self) -> anyhow::Result<()> {
        let mut session = self.session.lock().await;
        let mut live = match session.live.take() {
            Some(live) => live,
            None => {
                tokio::time::sleep(self.timing.backoff(session.failures)).await;
                self.report(|p| p.state = LinkState::Connecting);
                match self.connect().await {
                    Ok(link) => {
                        metrics::counter!(CONNECTIONS_METRIC).increment(1);
                        self.report(|p| p.connections += 1);
                        Live {
                            link,
                            last_heard: Instant::now(),
                            pinged: false,
                        }
                    }
                    Err(error) => {
                        session.failures = session.failures.saturating_add(1);
                        let reason = format!("{error:#}");
                        self.report(|p| {
                            p.state = LinkState::Failing;
                            p.reason = Some(reason);
                        });
                        return Err(error);
                    }
                }
            }
        };
        match self.read_window(&mut live).await {
            Ok(Window::Open) => {
                // A socket that lived through a whole window is not flapping.
                session.failures = 0;
                session.live = Some(live);
                // A window with no failed append ends what a failed one reported.
                self.report(|p| {
                    if p.state == LinkState::Failing {
                        p.state = LinkState::Connected;
                        p.reason = None;
                    }
                });
                Ok(())
            }
            Ok(Window::Dropped(reason)) => {
                tracing::warn!(r#loop = SLACK_SOCKET, %reason, "Socket Mode dropped; reconnecting");
                session.failures = session.failures.saturating_add(1);
                self.reconnecting(reason);
                Ok(())
            }
            Ok(Window::Refresh(reason)) => {
                tracing::info!(r#loop = SLACK_SOCKET, %reason, "Slack asked to reconnect");
                // Bounded: a peer that stopped reading must not hold the reconnect.
                let _ = tokio::time::timeout(Duration::from_secs(1), live.link.close(None)).await;
                session.failures = 0;
                self.reconnecting(format!("Slack asked to reconnect: {reason}"));
                Ok(())
            }
            Err(error) => {
                // The socket is fine; the log is not. The envelope stays unacked and Slack delivers it again.
                session.live = Some(live);
                let reason = format!("{error:#}");
                self.report(|p| {
                    p.state = LinkState::Failing;
                    p.reason = Some(reason);
                });
                Err(error)
            }
        }
    }

    fn reconnecting(&self, reason: String) {
        self.report(|p| {
            p.state = LinkState::Reconnecting;
            p.reason = Some(reason);
        });
    }

    /// `apps.connections.open`: a fresh websocket URL (single use, it carries a ticket: never logged).
    async fn open(&self) -> Result<String, OpenError> {
        let response = self
            .http
            .post(format!("{}/apps.connections.open", self.api_url))
            .bearer_auth(self.token.expose_secret())
            .header("content-type", "application/x-www-form-urlencoded")
            .send()
            .await
            .map_err(|e| OpenError::Unreachable(e.without_url().to_string()))?;
        let status = response.status().as_u16();
        let answer: Value = response.json().await.map_err(|e| OpenError::Unreadable {
            status,
            reason: e.without_url().to_string(),
        })?;
        if answer.get("ok") != Some(&Value::Bool(true)) {
            let code = answer
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("no error code")
                .chars()
                .take(100)
                .collect();
            return Err(OpenError::Refused { code, status });
        }
        serde_json::from_value::<SlackApiAppsConnectionOpenResponse>(answer)
            .map(|open| open.url.0.to_string())
            .map_err(|e| OpenError::Unreadable {
                status,
                reason: e.to_string(),
            })
    }

    async fn connect(&self) -> anyhow::Result<Link> {
        let url = self.open().await?;
        let connector = tls().context("building Socket Mode's TLS")?;
        let (link, _) = tokio::time::timeout(
            self.timing.connect_timeout,
            tokio_tungstenite::connect_async_tls_with_config(url, None, false, Some(connector)),
        )
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "opening Socket Mode's websocket took longer than {:?}",
                self.timing.connect_timeout
            )
        })?
        // Tungstenite's errors name no URL (its ticket stays out of /health).
        .context("opening Socket Mode's websocket")?;
        Ok(link)
    }

    /// Reads envelopes until the window ends or the socket goes; an error is an envelope not stored.
    async fn read_window(&self, live: &mut Live) -> anyhow::Result<Window> {
        let timing = self.timing;
        let end = Instant::now() + timing.window;
        loop {
            let now = Instant::now();
            if now >= end {
                return Ok(Window::Open);
            }
            let dead_at = live.last_heard + timing.read_timeout;
            if now >= dead_at {
                return Ok(Window::Dropped(format!(
                    "nothing from Slack for {:?}, not even a pong",
                    timing.read_timeout
                )));
            }
            let ping_at = live.last_heard + timing.ping_after;
            if now >= ping_at && !live.pinged {
                if let Err(e) = live.link.send(Message::Ping(Vec::new().into())).await {
                    return Ok(Window::Dropped(format!("pinging Slack: {e}")));
                }
                live.pinged = true;
            }
            let mut until = end.min(dead_at);
            if !live.pinged {
                until = until.min(ping_at);
            }
            let message = match tokio::time::timeout_at(until, live.link.next()).await {
                Err(_) => continue,
                Ok(None) => return Ok(Window::Dropped("Slack closed the socket".to_owned())),
                Ok(Some(Err(e))) => return Ok(Window::Dropped(format!("the socket failed: {e}"))),
                Ok(Some(Ok(message))) => message,
            };
            live.last_heard = Instant::now();
            live.pinged = false;
            match message {
                Message::Text(text) => match self.envelope(live, text.as_str()).await? {
                    Step::Go => {}
                    Step::Dropped(reason) => return Ok(Window::Dropped(reason)),
                    Step::Refresh(reason) => return Ok(Window::Refresh(reason)),
                },
                Message::Close(frame) => {
                    let why = frame.map(|f| format!(": {}", f.reason)).unwrap_or_default();
                    return Ok(Window::Dropped(format!("Slack closed the socket{why}")));
                }
                // Tungstenite answers pings itself; a pong or anything else only proves the socket alive.
                Message::Ping(_) | Message::Pong(_) | Message::Binary(_) | Message::Frame(_) => {}
            }
        }
    }

    /// One envelope: stored, then acked; malformed, acked; not stored, not acked (an error).
    async fn envelope(&self, live: &mut Live, frame: &str) -> anyhow::Result<Step> {
        let envelope: Envelope = match serde_json::from_str(frame) {
            Ok(envelope) => envelope,
            Err(e) => {
                // No envelope id to ack: Slack's own frames always have one, so this is not Slack's.
                self.malformed("?", "?", &format!("a frame that is not an envelope: {e}"));
                return Ok(Step::Go);
            }
        };
        match envelope.kind.as_str() {
            "hello" => {
                metrics::counter!(ENVELOPES_METRIC, "outcome" => "hello").increment(1);
                self.report(|p| {
                    p.state = LinkState::Connected;
                    p.reason = None;
                });
                return Ok(Step::Go);
            }
            "disconnect" => {
                metrics::counter!(ENVELOPES_METRIC, "outcome" => "disconnect").increment(1);
                let reason = envelope
                    .reason
                    .unwrap_or_else(|| "no reason given".to_owned());
                return Ok(Step::Refresh(reason));
            }
            _ => {}
        }
        let Some(id) = envelope.envelope_id.as_deref() else {
            self.malformed("?", &envelope.kind, "the envelope has no envelope_id");
            return Ok(Step::Go);
        };
        let reply = match webhook::socket_event(&envelope.kind, envelope.payload) {
            Ok(event) => {
                let reply = if envelope.kind == "slash_commands" {
                    webhook::Delivery::acknowledgement(&event)
                } else {
                    None
                };
                let key = event.dedup_key.clone();
                match self.log.append(event).await {
                    Ok(appended) => {
                        let outcome = if appended.duplicate {
                            "duplicate"
                        } else {
                            "stored"
                        };
                        metrics::counter!(ENVELOPES_METRIC, "outcome" => outcome).increment(1);
                        self.report(|p| {
                            if appended.duplicate {
                                p.duplicates += 1;
                            } else {
                                p.stored += 1;
                            }
                        });
                    }
                    Err(error) => {
                        metrics::counter!(ENVELOPES_METRIC, "outcome" => "not_stored").increment(1);
                        self.report(|p| p.not_stored += 1);
                        return Err(anyhow::Error::new(error).context(format!(
                            "storing envelope {id} ({key}); not acked: Slack delivers it again"
                        )));
                    }
                }
                reply
            }
            Err(malformed) => {
                self.malformed(id, &envelope.kind, &malformed.0);
                None
            }
        };
        let ack = serde_json::to_string(&Ack {
            envelope_id: id,
            payload: reply,
        })
        .context("writing an ack")?;
        if let Err(e) = live.link.send(Message::text(ack)).await {
            // Stored but not acked: the redelivery is a duplicate the log answers with the same event.
            return Ok(Step::Dropped(format!("acking envelope {id}: {e}")));
        }
        Ok(Step::Go)
    }

    fn malformed(&self, id: &str, kind: &str, reason: &str) {
        tracing::warn!(
            r#loop = SLACK_SOCKET,
            envelope = id,
            kind,
            reason,
            "a malformed Socket Mode envelope: acked, not stored"
        );
        metrics::counter!(ENVELOPES_METRIC, "outcome" => "malformed").increment(1);
        let text = format!("envelope {id} ({kind}): {reason}");
        self.report(|p| {
            p.malformed += 1;
            p.last_malformed = Some(text);
        });
    }
}

/// Rustls with ring named and webpki's roots, for `wss://`.
fn tls() -> anyhow::Result<tokio_tungstenite::Connector> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(tokio_tungstenite::Connector::Rustls(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_from_the_first_wait_up_to_its_bound() {
        let timing = Timing::default();
        let waits: Vec<u64> = (0..8).map(|n| timing.backoff(n).as_secs()).collect();
        assert_eq!(waits, [0, 1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(timing.backoff(u32::MAX), timing.backoff_max);
    }

    #[test]
    fn tls_builds_with_ring_named() {
        assert!(tls().is_ok());
    }

    #[test]
    fn an_ack_is_the_envelope_id_and_a_reply_only_when_there_is_one() {
        let plain = serde_json::to_value(Ack {
            envelope_id: "e1",
            payload: None,
        })
        .unwrap();
        assert_eq!(plain, serde_json::json!({ "envelope_id": "e1" }));
        let reply = serde_json::to_value(Ack {
            envelope_id: "e2",
            payload: Some(serde_json::json!({ "text": "hi" })),
        })
        .unwrap();
        assert_eq!(reply["payload"]["text"], "hi");
    }

    #[test]
    fn the_health_detail_names_the_state_in_lowercase() {
        let progress = SocketProgress {
            state: LinkState::Reconnecting,
            reason: Some("Slack closed the socket".into()),
            ..SocketProgress::default()
        };
        let value = serde_json::to_value(progress).unwrap();
        assert_eq!(value["state"], "reconnecting");
        assert_eq!(value["reason"], "Slack closed the socket");
    }
}
