//! `/health` tells the truth: loops that panic, hang or cannot run, and a database that goes away.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{eventually, TestApp, TestDb};
use pidevops::config::DatabaseUrl;
use pidevops::loops::{self, LoopSpec};
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};

per_backend!(health_reports_the_database_and_every_loop);

async fn health_reports_the_database_and_every_loop(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let live = app
        .client
        .get(app.url("/health/live"))
        .send()
        .await
        .unwrap();
    assert_eq!(live.status().as_u16(), 200);

    eventually("the heartbeat ticked", || async {
        app.health().await.1["loops"]["database_heartbeat"]["ticks"]
            .as_u64()
            .unwrap_or(0)
            >= 1
    })
    .await;
    let (status, health) = app.health().await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["status"], "pass");
    assert_eq!(health["version"], env!("CARGO_PKG_VERSION"));
    assert!(health["uptime_s"].is_u64());
    let database = &health["checks"]["database"];
    assert_eq!(database["status"], "pass");
    assert_eq!(
        database["kind"],
        if db.is_postgres() {
            "postgres"
        } else {
            "sqlite"
        }
    );
    assert!(database["latency_ms"].as_f64().unwrap() >= 0.0);
    let heartbeat = &health["loops"]["database_heartbeat"];
    assert_eq!(heartbeat["state"], "armed");
    assert_eq!(heartbeat["stale"], false);
    assert_eq!(heartbeat["errors"], 0);
    assert_eq!(heartbeat["reason"], Value::Null);
    assert!(heartbeat["interval_s"].as_f64().unwrap() > 0.0);
    for key in ["last_tick_at", "last_ok_at"] {
        let at = heartbeat[key]
            .as_str()
            .unwrap_or_else(|| panic!("{key} is set: {heartbeat}"));
        chrono::DateTime::parse_from_rfc3339(at).expect("RFC 3339");
    }
    assert_eq!(health["loops"]["metrics_upkeep"]["state"], "armed");
    assert_eq!(
        health["loops"]["relay"]["state"], "disabled",
        "no NATS_URL, no consumer: nothing to fan out"
    );
    assert!(health["loops"]["relay"]["reason"]
        .as_str()
        .unwrap()
        .contains("NATS_URL"));
    assert_eq!(health["checks"]["bus"]["kind"], "memory");
    assert_eq!(health["checks"]["bus"]["status"], "pass");
    assert_eq!(health["problems"], serde_json::json!([]), "{health}");

    // A lone server holds every singleton's lease from its first tick: none of them reports a standby role.
    let singletons_ticked = |health: &Value| {
        let singletons: Vec<&Value> = health["loops"]
            .as_object()
            .unwrap()
            .values()
            .filter(|l| l.get("lease").is_some())
            .collect();
        !singletons.is_empty() && singletons.iter().all(|l| l["ticks"].as_u64() >= Some(1))
    };
    eventually("every singleton loop ticked", || async {
        singletons_ticked(&app.health().await.1)
    })
    .await;
    let (_, health) = app.health().await;
    for (name, report) in health["loops"].as_object().unwrap() {
        assert_ne!(report["detail"]["role"], "standby", "{name}: {health}");
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_loop_keeps_ticking_and_reports_the_error() {
    let db = TestDb::sqlite();
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let ticks = Arc::new(AtomicU32::new(0));
    let counter = ticks.clone();
    loops::spawn(
        &app.state.loops,
        &app.tracker,
        app.shutdown.clone(),
        // Long enough that a loaded CI machine never makes it look stale (3 intervals without a tick).
        LoopSpec::new("flaky", Duration::from_millis(200), Duration::ZERO),
        move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async { panic!("the flux capacitor is empty") }
        },
    );
    eventually("three panicking ticks", || async {
        app.health().await.1["loops"]["flaky"]["errors"]
            .as_u64()
            .unwrap_or(0)
            >= 3
    })
    .await;
    let (status, health) = app.health().await;
    let flaky = &health["loops"]["flaky"];
    assert_eq!(
        status, 200,
        "a loop whose ticks fail but keep coming warns: {health}"
    );
    assert_eq!(health["status"], "warn");
    assert_eq!(flaky["state"], "armed");
    assert_eq!(flaky["stale"], false);
    assert!(
        flaky["last_error"]
            .as_str()
            .unwrap()
            .contains("the flux capacitor is empty"),
        "{flaky}"
    );
    assert_eq!(flaky["last_ok_at"], Value::Null);
    assert_eq!(flaky["ticks"], flaky["errors"]);

    let metrics = app.metrics().await;
    assert!(
        metrics.contains(r#"pidevops_loop_errors_total{loop="flaky"}"#),
        "{metrics}"
    );
    app.stop().await;
    assert!(ticks.load(Ordering::SeqCst) >= 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_that_stops_ticking_fails_health() {
    let db = TestDb::sqlite();
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let calls = Arc::new(AtomicU32::new(0));
    let counter = calls.clone();
    loops::spawn(
        &app.state.loops,
        &app.tracker,
        app.shutdown.clone(),
        LoopSpec::new("wedged", Duration::from_millis(100), Duration::ZERO)
            .with_fail_after(Duration::from_millis(300)),
        move || {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            async move {
                if n >= 2 {
                    // A tick that never returns: the classic dead poller behind a green /health.
                    std::future::pending::<()>().await;
                }
                Ok(loops::Pace::Rest)
            }
        },
    );
    eventually("health turns 503", || async { app.health().await.0 == 503 }).await;
    let (_, health) = app.health().await;
    assert_eq!(health["status"], "fail");
    assert_eq!(health["loops"]["wedged"]["stale"], true, "{health}");
    assert_eq!(health["loops"]["wedged"]["ticks"], 2);
    assert_eq!(
        health["loops"]["database_heartbeat"]["stale"], false,
        "only the wedged loop is blamed"
    );
    let metrics = app.metrics().await;
    assert!(
        metrics.contains(r#"pidevops_loop_stale{loop="wedged"} 1"#),
        "{metrics}"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unarmed_loop_fails_health_and_a_disabled_one_does_not() {
    let db = TestDb::sqlite();
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    app.state
        .loops
        .disable("telegram_updates", "TELEGRAM_BOT_TOKEN is not set");
    let (status, health) = app.health().await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["loops"]["telegram_updates"]["state"], "disabled");
    assert_eq!(
        health["loops"]["telegram_updates"]["reason"],
        "TELEGRAM_BOT_TOKEN is not set"
    );

    app.state.loops.unarm(
        "github_poller",
        "repos are configured but GITHUB_TOKEN is not set",
    );
    let (status, health) = app.health().await;
    assert_eq!(status, 503, "{health}");
    assert_eq!(health["status"], "fail");
    assert_eq!(health["loops"]["github_poller"]["state"], "unarmed");
    assert_eq!(
        health["loops"]["github_poller"]["reason"],
        "repos are configured but GITHUB_TOKEN is not set"
    );
    app.stop().await;
}

/// A TCP proxy in front of Postgres that can cut every connection and refuse new ones: "the database is down".
struct Proxy {
    addr: std::net::SocketAddr,
    up: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Proxy {
    async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (flag, conns) = (up.clone(), connections.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                if !flag.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let upstream = upstream.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                conns.lock().unwrap().push(task.abort_handle());
            }
        });
        Self {
            addr,
            up,
            connections,
        }
    }

    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for c in self.connections.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_outage_fails_health_and_webhooks_then_recovers() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let url = db.url_string();
    // postgres://user@host:port/db → route host:port through the proxy.
    let at = url.find('@').expect("user@ in the test URL") + 1;
    let slash = at + url[at..].find('/').expect("a database path");
    let upstream = url[at..slash].to_owned();
    let proxy = Proxy::start(upstream).await;
    let mut settings = crate::common::settings(&db);
    settings.database =
        DatabaseUrl::Postgres(format!("{}{}{}", &url[..at], proxy.addr, &url[slash..]));
    let app = TestApp::spawn(settings).await;
    let body = br#"{"action":"opened","number":1}"#;
    assert_eq!(
        app.post_github("issues", "before-outage", body)
            .await
            .status()
            .as_u16(),
        200
    );

    proxy.cut();
    let (status, health) = app.health().await;
    assert_eq!(status, 503, "{health}");
    assert_eq!(health["status"], "fail");
    assert_eq!(health["checks"]["database"]["status"], "fail");
    assert!(health["checks"]["database"]["error"].is_string());

    let response = app.post_github("issues", "during-outage", body).await;
    let status = response.status().as_u16();
    let refused: Value = response.json().await.unwrap();
    assert_eq!(status, 503, "never 2xx without a commit: {refused}");
    assert_eq!(refused["error"], "unavailable");

    eventually("the heartbeat loop reports the outage", || async {
        app.health().await.1["loops"]["database_heartbeat"]["errors"]
            .as_u64()
            .unwrap_or(0)
            >= 1
    })
    .await;

    proxy.restore();
    eventually("health recovers", || async { app.health().await.0 == 200 }).await;
    let (status, again) = {
        let r = app.post_github("issues", "during-outage", body).await;
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    };
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        again["duplicate"], false,
        "the refused delivery was never stored, so its retry is new"
    );
    let keys: Vec<String> = app
        .webhook_events()
        .await
        .into_iter()
        .map(|e| e.dedup_key)
        .collect();
    assert_eq!(keys, vec!["before-outage", "during-outage"]);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_prometheus_text_rendered_from_memory() {
    let db = TestDb::sqlite();
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let body = br#"{"zen":"Design for failure."}"#;
    assert_eq!(
        app.post_github("ping", "m-1", body).await.status().as_u16(),
        200
    );
    assert_eq!(
        app.post_github("ping", "m-1", body).await.status().as_u16(),
        200
    );
    let unsigned = app
        .client
        .post(app.url("/webhooks/github"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status().as_u16(), 401);
    eventually("the heartbeat ticked", || async {
        app.health().await.1["loops"]["database_heartbeat"]["ticks"]
            .as_u64()
            .unwrap_or(0)
            >= 1
    })
    .await;

    let response = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let text = response.text().await.unwrap();
    for needle in [
        r#"pidevops_webhook_requests_total{source="github",outcome="accepted"}"#,
        r#"pidevops_webhook_requests_total{source="github",outcome="duplicate"}"#,
        r#"pidevops_webhook_requests_total{source="github",outcome="unauthorized"}"#,
        r#"pidevops_events_appended_total{source="github"}"#,
        "pidevops_append_duration_seconds_bucket{le=",
        "pidevops_append_batch_size_bucket{le=",
        r#"pidevops_loop_ticks_total{loop="database_heartbeat"}"#,
        r#"pidevops_loop_last_tick_timestamp_seconds{loop="database_heartbeat"}"#,
        r#"pidevops_loop_state{loop="database_heartbeat",state="armed"} 1"#,
        r#"pidevops_loop_stale{loop="database_heartbeat"} 0"#,
        "pidevops_uptime_seconds",
    ] {
        assert!(text.contains(needle), "missing {needle} in:\n{text}");
    }
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let value = line.rsplit(' ').next().unwrap();
        assert!(
            value.parse::<f64>().is_ok(),
            "not a Prometheus sample line: {line}"
        );
    }
    assert!(
        !text.contains(crate::common::GITHUB_SECRET),
        "no secret in metrics"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_listener_answers_on_ipv4_and_ipv6() {
    let db = TestDb::sqlite();
    let mut settings = crate::common::settings(&db);
    settings.bind = std::net::IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED);
    let app = TestApp::spawn(settings).await;
    let port = app.base.rsplit(':').next().unwrap().to_owned();
    for host in ["127.0.0.1", "[::1]"] {
        let url = format!("http://{host}:{port}/health/live");
        let response = app
            .client
            .get(&url)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(response.status().as_u16(), 200, "{url}");
    }
    app.stop().await;
}
