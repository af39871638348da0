//! Slack's Socket Mode through the real app, against a fake Slack on loopback: `apps.connections.open` (axum) and
//! the websocket it names (tokio-tungstenite). The fake behaves as Slack does where the loop's promises depend on
//! it: `hello` on every connection, and every envelope not yet acked sent again on the next one.
//!
//! What is held: an envelope is acked only once its event is in the log (the fake looks at the log when the ack
//! arrives), an envelope whose append fails is not acked, a drop or a `disconnect` reconnects and loses or doubles
//! nothing, a refused app token shows in `/health` without the token, and no app token leaves the loop listed
//! and not armed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use futures::{SinkExt, StreamExt};
use pidevops::eventlog::EventStore;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::common::{within, TestApp, TestDb};

const APP_TOKEN: &str = "xapp-1-A1-1234-goodsecretpart";
const WRONG_TOKEN: &str = "xapp-1-A1-1234-wrongsecretpart";
const LOOP: &str = "slack_socket";
const WAIT: Duration = Duration::from_secs(30);

/// An ack as the fake saw it: whether the envelope's event was in the log when the ack arrived.
#[derive(Clone, Debug, PartialEq)]
struct Acked {
    envelope: String,
    stored_first: Option<bool>,
    /// What the ack carried besides its id (a slash command's reply).
    payload: Value,
}

/// An envelope Slack would send: its frame and the dedup key its event has (`None`: none is stored).
#[derive(Clone)]
struct Envelope {
    id: String,
    frame: String,
    key: Option<String>,
}

enum Command {
    Send(String),
    /// Send, then drop the TCP connection at once (no close frame, no ack read).
    SendThenDrop(String),
    /// Go silent: read nothing, answer no ping, send nothing, keep the TCP connection open.
    Freeze,
}

#[derive(Default)]
struct Inner {
    /// Sent and not acked yet, in order: sent again on every new connection.
    pending: Vec<Envelope>,
    acks: Vec<Acked>,
    connections: usize,
    current: Option<mpsc::UnboundedSender<Command>>,
    /// Frames from the loop that were not acks.
    stray: Vec<String>,
    /// Each envelope sent, by id, in order (a redelivery twice).
    sent: Vec<String>,
}

#[derive(Clone)]
struct FakeSlack {
    api: String,
    inner: Arc<Mutex<Inner>>,
    /// The log an ack is checked against.
    witness: Arc<Mutex<Option<EventStore>>>,
}

impl FakeSlack {
    async fn start() -> Self {
        let sockets = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ws_url = format!("ws://{}/link", sockets.local_addr().unwrap());
        let api_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let fake = Self {
            api: format!("http://{}", api_listener.local_addr().unwrap()),
            inner: Arc::default(),
            witness: Arc::default(),
        };
        let router = Router::new()
            .route("/apps.connections.open", post(open))
            .with_state(ws_url);
        tokio::spawn(async move { axum::serve(api_listener, router).await });
        let served = fake.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = sockets.accept().await {
                let fake = served.clone();
                tokio::spawn(async move { fake.serve(stream).await });
            }
        });
        fake
    }

    fn point_settings(&self, settings: &mut pidevops::config::Settings, token: &str) {
        settings
            .providers
            .set("SLACK_APP_TOKEN", Some(token))
            .unwrap();
        settings
            .providers
            .set("SLACK_API_URL", Some(&self.api))
            .unwrap();
    }

    fn witness(&self, store: EventStore) {
        *self.witness.lock().unwrap() = Some(store);
    }

    /// One connection, as Slack runs it: hello, what is pending, then the test's commands and the loop's acks.
    async fn serve(self, stream: tokio::net::TcpStream) {
        let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
            return;
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        let pending: Vec<String> = {
            let mut inner = self.inner.lock().unwrap();
            inner.connections += 1;
            inner.current = Some(tx);
            let ids: Vec<String> = inner.pending.iter().map(|e| e.id.clone()).collect();
            inner.sent.extend(ids);
            inner.pending.iter().map(|e| e.frame.clone()).collect()
        };
        let hello = json!({
            "type": "hello", "num_connections": 1,
            "connection_info": { "app_id": "A1" },
            "debug_info": { "host": "fake-slack" },
        });
        if ws.send(Message::text(hello.to_string())).await.is_err() {
            return;
        }
        for frame in pending {
            if ws.send(Message::text(frame)).await.is_err() {
                return;
            }
        }
        loop {
            tokio::select! {
                command = rx.recv() => match command {
                    Some(Command::Send(frame)) => {
                        if ws.send(Message::text(frame)).await.is_err() {
                            return;
                        }
                    }
                    Some(Command::SendThenDrop(frame)) => {
                        let _ = ws.send(Message::text(frame)).await;
                        return; // dropped: TCP gone, no close handshake
                    }
                    Some(Command::Freeze) => {
                        // `ws` stays open in this frame, never read again.
                        std::future::pending::<()>().await;
                    }
                    None => return,
                },
                frame = ws.next() => match frame {
                    Some(Ok(Message::Text(text))) => self.acked(text.as_str()).await,
                    Some(Ok(_)) => {}
                    _ => return,
                },
            }
        }
    }

    async fn acked(&self, text: &str) {
        let value: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        let Some(id) = value["envelope_id"].as_str().map(str::to_owned) else {
            self.inner.lock().unwrap().stray.push(text.to_owned());
            return;
        };
        let key = {
            let inner = self.inner.lock().unwrap();
            inner
                .pending
                .iter()
                .find(|e| e.id == id)
                .and_then(|e| e.key.clone())
        };
        let store = self.witness.lock().unwrap().clone();
        let stored_first = match (store, key) {
            (Some(store), Some(key)) => Some(
                store
                    .read_after(0, 10_000)
                    .await
                    .unwrap()
                    .iter()
                    .any(|e| e.source == "slack" && e.dedup_key == key),
            ),
            _ => None,
        };
        let mut inner = self.inner.lock().unwrap();
        inner.pending.retain(|e| e.id != id);
        inner.acks.push(Acked {
            envelope: id,
            stored_first,
            payload: value["payload"].clone(),
        });
    }

    fn command(&self, command: Command) {
        let mut inner = self.inner.lock().unwrap();
        let id = match &command {
            Command::Send(frame) | Command::SendThenDrop(frame) => {
                serde_json::from_str::<Value>(frame).unwrap()["envelope_id"]
                    .as_str()
                    .map(str::to_owned)
            }
            Command::Freeze => None,
        };
        if let Some(current) = &inner.current {
            if current.send(command).is_ok() {
                inner.sent.extend(id);
            }
        }
    }

    /// How many times the envelope `id` was sent.
    fn sent(&self, id: &str) -> usize {
        self.inner
            .lock()
            .unwrap()
            .sent
            .iter()
            .filter(|s| *s == id)
            .count()
    }

    /// Sends `envelope` on the open connection (and on each next one until it is acked).
    fn push(&self, envelope: &Envelope) {
        self.inner.lock().unwrap().pending.push(envelope.clone());
        self.command(Command::Send(envelope.frame.clone()));
    }

    /// Sends `envelope` and drops the connection before reading any ack.
    fn push_then_drop(&self, envelope: &Envelope) {
        self.inner.lock().unwrap().pending.push(envelope.clone());
        self.command(Command::SendThenDrop(envelope.frame.clone()));
    }

    /// Slack's retry of what is not acked, on the open connection.
    fn redeliver(&self) {
        let frames: Vec<String> = {
            let inner = self.inner.lock().unwrap();
            inner.pending.iter().map(|e| e.frame.clone()).collect()
        };
        for frame in frames {
            self.command(Command::Send(frame));
        }
    }

    fn disconnect(&self) {
        let frame = json!({
            "type": "disconnect", "reason": "refresh_requested",
            "debug_info": { "host": "fake-slack" },
        });
        self.command(Command::Send(frame.to_string()));
    }

    fn acks(&self) -> Vec<Acked> {
        self.inner.lock().unwrap().acks.clone()
    }

    fn acked_ids(&self) -> Vec<String> {
        self.acks().into_iter().map(|a| a.envelope).collect()
    }

    fn connections(&self) -> usize {
        self.inner.lock().unwrap().connections
    }
}

/// `apps.connections.open`: the socket's URL for the right app token, Slack's `invalid_auth` for any other.
async fn open(State(ws_url): State<String>, headers: HeaderMap) -> Json<Value> {
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    Json(if bearer == format!("Bearer {APP_TOKEN}") {
        json!({ "ok": true, "url": ws_url })
    } else {
        json!({ "ok": false, "error": "invalid_auth" })
    })
}

/// An `events_api` envelope carrying an `app_mention` callback, as Slack sends it.
fn mention(n: u32) -> Envelope {
    let id = format!("env-{n}");
    let event_id = format!("Ev{n:04}");
    let frame = json!({
        "envelope_id": id,
        "type": "events_api",
        "accepts_response_payload": false,
        "retry_attempt": 0,
        "retry_reason": "",
        "payload": {
            "token": "verification-token",
            "team_id": "T1",
            "api_app_id": "A1",
            "type": "event_callback",
            "event_id": event_id,
            "event_time": 1_700_000_000 + i64::from(n),
            "event": {
                "type": "app_mention", "user": "U1", "channel": "C1",
                "text": format!("<@UBOT> fix bug {n}"), "ts": format!("1700000000.{n:06}"),
            },
        },
    });
    Envelope {
        id,
        frame: frame.to_string(),
        key: Some(format!("event:T1:{event_id}")),
    }
}

/// A `slash_commands` envelope: `/pidevops` typed in C1.
fn slash_command(n: u32) -> Envelope {
    let id = format!("cmd-{n}");
    let trigger = format!("{n}.8.7");
    let frame = json!({
        "envelope_id": id, "type": "slash_commands", "accepts_response_payload": true,
        "payload": {
            "token": "verification-token", "team_id": "T1", "channel_id": "C1", "user_id": "U1",
            "command": "/pidevops", "text": "o/n fix it", "trigger_id": trigger,
            "response_url": "https://hooks.slack.com/commands/T1/1/secret",
        },
    });
    Envelope {
        id,
        frame: frame.to_string(),
        key: Some(format!("command:T1:{trigger}")),
    }
}

/// An `events_api` envelope whose callback has no `event_id`: malformed.
fn malformed(n: u32) -> Envelope {
    let id = format!("bad-{n}");
    let frame = json!({
        "envelope_id": id, "type": "events_api", "accepts_response_payload": false,
        "payload": { "team_id": "T1", "type": "event_callback", "event": { "type": "app_mention" } },
    });
    Envelope {
        id,
        frame: frame.to_string(),
        key: None,
    }
}

async fn spawn(db: &TestDb, fake: &FakeSlack, token: &str) -> TestApp {
    let mut settings = crate::common::settings(db);
    fake.point_settings(&mut settings, token);
    let app = TestApp::spawn(settings).await;
    fake.witness(app.state.log.store().clone());
    app
}

/// The `slack.*` events in the log, by dedup key.
async fn slack_keys(app: &TestApp) -> Vec<String> {
    app.all_events()
        .await
        .into_iter()
        .filter(|e| e.source == "slack")
        .map(|e| e.dedup_key)
        .collect()
}

async fn wait_acked(fake: &FakeSlack, ids: &[&str]) {
    within(WAIT, &format!("acks of {ids:?}"), || async {
        let acked = fake.acked_ids();
        ids.iter().all(|id| acked.iter().any(|a| a == id))
    })
    .await;
}

async fn socket_health(app: &TestApp) -> Value {
    app.health().await.1["loops"][LOOP].clone()
}

/// One mention over the socket: one stored `slack.app_mention`, acked only after it was stored; a malformed
/// envelope is acked and stores nothing; /health says connected, /metrics counts both.
async fn an_envelope_is_stored_once_and_acked_only_after(db: TestDb) {
    let fake = FakeSlack::start().await;
    let app = spawn(&db, &fake, APP_TOKEN).await;
    within(WAIT, "the socket connected", || async {
        socket_health(&app).await["detail"]["state"] == "connected"
    })
    .await;
    let first = mention(1);
    fake.push(&first);
    wait_acked(&fake, &["env-1"]).await;
    assert_eq!(
        fake.acks(),
        [Acked {
            envelope: "env-1".into(),
            stored_first: Some(true),
            payload: Value::Null,
        }],
        "acked before its event was stored"
    );
    let events: Vec<_> = app
        .all_events()
        .await
        .into_iter()
        .filter(|e| e.source == "slack")
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].event_type, "slack.app_mention");
    assert_eq!(events[0].dedup_key, "event:T1:Ev0001");
    let body: Value = serde_json::from_slice(&events[0].body).unwrap();
    assert!(body.get("token").is_none(), "{body}");

    fake.push(&malformed(1));
    wait_acked(&fake, &["bad-1"]).await;
    assert_eq!(slack_keys(&app).await, ["event:T1:Ev0001"]);
    let loop_health = socket_health(&app).await;
    assert_eq!(loop_health["state"], "armed", "{loop_health}");
    assert_eq!(loop_health["detail"]["stored"], 1, "{loop_health}");
    assert_eq!(loop_health["detail"]["malformed"], 1, "{loop_health}");
    let why = loop_health["detail"]["last_malformed"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("bad-1") && why.contains("event_id"), "{why}");
    let metrics = app.metrics().await;
    for outcome in ["stored", "malformed"] {
        let line = format!("pidevops_slack_socket_envelopes_total{{outcome=\"{outcome}\"}}");
        assert!(metrics.contains(&line), "{line} missing");
    }
    app.stop().await;
}

/// The fake drops the socket right after sending an envelope, before any ack: the loop reconnects, the envelope
/// comes again on the new connection, and the log holds every event once.
async fn a_dropped_socket_reconnects_and_loses_or_doubles_nothing(db: TestDb) {
    let fake = FakeSlack::start().await;
    let app = spawn(&db, &fake, APP_TOKEN).await;
    within(WAIT, "the first connection", || async {
        fake.connections() == 1
    })
    .await;
    fake.push(&mention(1));
    wait_acked(&fake, &["env-1"]).await;
    fake.push_then_drop(&mention(2));
    within(WAIT, "a second connection", || async {
        fake.connections() >= 2
    })
    .await;
    fake.push(&mention(3));
    wait_acked(&fake, &["env-2", "env-3"]).await;
    assert_eq!(fake.sent("env-2"), 2, "env-2 was not redelivered");
    let mut keys = slack_keys(&app).await;
    keys.sort();
    assert_eq!(
        keys,
        ["event:T1:Ev0001", "event:T1:Ev0002", "event:T1:Ev0003"],
        "each event once"
    );
    assert!(
        fake.acks().iter().all(|a| a.stored_first == Some(true)),
        "{:?}",
        fake.acks()
    );
    let detail = &socket_health(&app).await["detail"];
    assert!(detail["connections"].as_u64() >= Some(2), "{detail}");
    app.stop().await;
}

/// Slack's `disconnect` (a refresh): the loop opens a new socket and goes on.
async fn a_disconnect_envelope_reconnects(db: TestDb) {
    let fake = FakeSlack::start().await;
    let app = spawn(&db, &fake, APP_TOKEN).await;
    fake.push(&mention(1));
    wait_acked(&fake, &["env-1"]).await;
    fake.disconnect();
    within(WAIT, "a second connection", || async {
        fake.connections() == 2
    })
    .await;
    fake.push(&mention(2));
    wait_acked(&fake, &["env-2"]).await;
    assert_eq!(
        slack_keys(&app).await,
        ["event:T1:Ev0001", "event:T1:Ev0002"]
    );
    app.stop().await;
}

/// The log refuses Slack's events (a trigger): the envelope is not acked and the loop fails in /health; once the
/// log takes them again, Slack's redelivery is stored once and acked.
async fn an_envelope_whose_append_fails_is_not_acked(db: TestDb) {
    let fake = FakeSlack::start().await;
    let app = spawn(&db, &fake, APP_TOKEN).await;
    let store = app.state.log.store().clone();
    let (refuse, allow) = if db.is_postgres() {
        (
            "CREATE FUNCTION refuse_slack() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN RAISE EXCEPTION 'the test refuses slack events'; END $$;
             CREATE TRIGGER refuse_slack BEFORE INSERT ON events
             FOR EACH ROW WHEN (NEW.source = 'slack') EXECUTE FUNCTION refuse_slack();",
            "DROP TRIGGER refuse_slack ON events",
        )
    } else {
        (
            "CREATE TRIGGER refuse_slack BEFORE INSERT ON events WHEN NEW.source = 'slack'
             BEGIN SELECT RAISE(ABORT, 'the test refuses slack events'); END;",
            "DROP TRIGGER refuse_slack",
        )
    };
    crate::common::execute(&store, refuse).await;
    fake.push(&mention(1));
    within(WAIT, "the failed append in /health", || async {
        let health = socket_health(&app).await;
        health["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("env-1") && e.contains("not acked"))
    })
    .await;
    // An envelope after it on the same socket: once its ack is in, any ack of env-1 (sent before) is too.
    fake.push(&malformed(1));
    wait_acked(&fake, &["bad-1"]).await;
    assert!(
        !fake.acked_ids().contains(&"env-1".to_owned()),
        "an envelope whose append failed was acked: {:?}",
        fake.acks()
    );
    assert!(slack_keys(&app).await.is_empty());
    let detail = &socket_health(&app).await["detail"];
    assert!(detail["not_stored"].as_u64() >= Some(1), "{detail}");

    crate::common::execute(&store, allow).await;
    fake.redeliver();
    wait_acked(&fake, &["env-1"]).await;
    assert_eq!(slack_keys(&app).await, ["event:T1:Ev0001"]);
    within(WAIT, "connected again in /health", || async {
        socket_health(&app).await["detail"]["state"] == "connected"
    })
    .await;
    app.stop().await;
}

/// A refused app token: /health says why (Slack's code), never the token.
async fn a_wrong_app_token_shows_in_health_without_the_token(db: TestDb) {
    let fake = FakeSlack::start().await;
    let app = spawn(&db, &fake, WRONG_TOKEN).await;
    within(WAIT, "invalid_auth in /health", || async {
        socket_health(&app).await["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("invalid_auth"))
    })
    .await;
    let (_, health) = app.health().await;
    let loop_health = &health["loops"][LOOP];
    assert_eq!(loop_health["detail"]["state"], "failing", "{loop_health}");
    assert!(
        loop_health["detail"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("invalid_auth")),
        "{loop_health}"
    );
    let everything = format!("{health}{}", app.metrics().await);
    assert!(!everything.contains("wrongsecretpart"), "the token leaked");
    assert_eq!(fake.connections(), 0);
    app.stop().await;
}

/// No app token: the loop is listed, not armed, and says where Slack's events come instead.
async fn without_an_app_token_the_loop_is_listed_not_armed(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let loop_health = socket_health(&app).await;
    assert_eq!(loop_health["state"], "disabled", "{loop_health}");
    assert_eq!(
        loop_health["reason"],
        "SLACK_APP_TOKEN is not set: Slack's events arrive at /webhooks/slack"
    );
    app.stop().await;
}

/// A slash command over the socket: stored as the webhook stores it (no response URL), and its ack carries the
/// ephemeral reply the webhook would answer with.
async fn a_slash_commands_ack_carries_the_webhooks_reply(db: TestDb) {
    let fake = FakeSlack::start().await;
    let app = spawn(&db, &fake, APP_TOKEN).await;
    fake.push(&slash_command(1));
    wait_acked(&fake, &["cmd-1"]).await;
    let ack = &fake.acks()[0];
    assert_eq!(ack.stored_first, Some(true));
    assert_eq!(ack.payload["response_type"], "ephemeral", "{ack:?}");
    assert!(ack.payload["text"]
        .as_str()
        .is_some_and(|t| t.contains("pidevops has it")));
    let events: Vec<_> = app
        .all_events()
        .await
        .into_iter()
        .filter(|e| e.source == "slack")
        .collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_type, "slack.slash_command");
    let body: Value = serde_json::from_slice(&events[0].body).unwrap();
    assert!(
        body.get("response_url").is_none() && body.get("token").is_none(),
        "{body}"
    );
    app.stop().await;
}

/// A socket that goes silent (no envelope, no pong to the loop's ping) is dead after the read timeout, and the
/// next tick opens another. The loop is driven here, a tick at a time, with short timings.
async fn a_silent_socket_is_dropped_after_the_read_timeout(db: TestDb) {
    use pidevops::providers::slack::socket::{LinkState, SlackSocket, Timing};
    let fake = FakeSlack::start().await;
    // The app without an app token: only this test's socket talks to the fake.
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let socket = SlackSocket::new(
        &fake.api,
        &secrecy::SecretString::from(APP_TOKEN),
        app.state.log.clone(),
    )
    .unwrap()
    .with_timing(Timing {
        window: Duration::from_millis(300),
        ping_after: Duration::from_millis(200),
        read_timeout: Duration::from_millis(800),
        backoff_first: Duration::from_millis(50),
        backoff_max: Duration::from_millis(200),
        connect_timeout: Duration::from_secs(5),
    });
    socket.tick().await.unwrap();
    assert_eq!(socket.progress().state, LinkState::Connected);
    fake.command(Command::Freeze);
    let deadline = tokio::time::Instant::now() + WAIT;
    while socket.progress().state != LinkState::Reconnecting {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            socket.progress()
        );
        socket.tick().await.unwrap();
    }
    let reason = socket.progress().reason.unwrap_or_default();
    assert!(reason.contains("not even a pong"), "{reason}");
    socket.tick().await.unwrap();
    assert_eq!(fake.connections(), 2);
    assert_eq!(socket.progress().state, LinkState::Connected);
    app.stop().await;
}

crate::per_backend!(
    an_envelope_is_stored_once_and_acked_only_after,
    a_dropped_socket_reconnects_and_loses_or_doubles_nothing,
    a_disconnect_envelope_reconnects,
    an_envelope_whose_append_fails_is_not_acked,
    a_wrong_app_token_shows_in_health_without_the_token,
    without_an_app_token_the_loop_is_listed_not_armed,
    a_slash_commands_ack_carries_the_webhooks_reply,
    a_silent_socket_is_dropped_after_the_read_timeout,
);
