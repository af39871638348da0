//! `GET /api/events/stream` through the real server: history then live events, resume with `Last-Event-ID`,
//! filters, precise refusals, and a graceful shutdown that does not wait for a listening client.

use std::time::Duration;

use crate::common::{TestApp, TestDb, ADMIN_TOKEN};

per_backend!(
    history_then_live_events_in_order,
    last_event_id_resumes_right_after_the_last_event_seen,
    a_source_filter_and_bad_requests,
    shutdown_ends_open_streams,
);

/// One SSE event as a client sees it.
#[derive(Debug)]
struct SseEvent {
    id: i64,
    kind: String,
    data: serde_json::Value,
}

/// An open stream and the text received but not yet parsed.
struct Reader {
    body: reqwest::Response,
    pending: String,
}

impl Reader {
    async fn open(app: &TestApp, query: &str, last_event_id: Option<&str>) -> Self {
        let mut request = app
            .client
            .get(app.url(&format!("/api/events/stream{query}")))
            .bearer_auth(ADMIN_TOKEN);
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Self {
            body: response,
            pending: String::new(),
        }
    }

    /// The next event (comments and keep-alives skipped), within 10 s.
    async fn next(&mut self) -> SseEvent {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Some(end) = self.pending.find("\n\n") {
                    let block: String = self.pending.drain(..end + 2).collect();
                    let (mut id, mut kind, mut data) = (None, String::new(), Vec::new());
                    for line in block.lines() {
                        if let Some(v) = line.strip_prefix("id:") {
                            id = Some(v.trim().parse::<i64>().unwrap());
                        } else if let Some(v) = line.strip_prefix("event:") {
                            kind = v.trim().to_owned();
                        } else if let Some(v) = line.strip_prefix("data:") {
                            data.push(v.strip_prefix(' ').unwrap_or(v).to_owned());
                        }
                    }
                    if let Some(id) = id {
                        return SseEvent {
                            id,
                            kind,
                            data: serde_json::from_str(&data.join("\n")).unwrap(),
                        };
                    }
                    continue;
                }
                let chunk = self
                    .body
                    .chunk()
                    .await
                    .unwrap()
                    .expect("the stream stays open");
                self.pending.push_str(std::str::from_utf8(&chunk).unwrap());
            }
        })
        .await
        .expect("an event within 10 s")
    }
}

async fn ping(app: &TestApp, delivery: &str) {
    let r = app
        .post_github("ping", delivery, br#"{"zen":"ok","hook_id":1}"#)
        .await;
    assert_eq!(r.status(), 200);
}

async fn history_then_live_events_in_order(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    for i in 0..3 {
        ping(&app, &format!("old-{i}")).await;
    }
    let mut reader = Reader::open(&app, "?after=0", None).await;
    for expected in 1..=3 {
        let event = reader.next().await;
        assert_eq!(event.id, expected);
        assert_eq!(event.kind, "github.ping");
        assert_eq!(event.data["position"], expected);
        assert_eq!(event.data["dedup_key"], format!("old-{}", expected - 1));
    }
    // Live: a delivery committed now arrives on the open stream.
    let sent = std::time::Instant::now();
    ping(&app, "new").await;
    let event = reader.next().await;
    assert_eq!(
        (event.id, event.data["dedup_key"].as_str()),
        (4, Some("new"))
    );
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "live events are pushed, not found late"
    );
    // A stream opened without `after` starts at the head: live only.
    let mut live = Reader::open(&app, "", None).await;
    ping(&app, "newer").await;
    assert_eq!(live.next().await.id, 5);
    app.stop().await;
}

async fn last_event_id_resumes_right_after_the_last_event_seen(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    for i in 0..6 {
        ping(&app, &format!("d-{i}")).await;
    }
    // The header wins over the query, as a browser's reconnect sends the header with the original URL.
    let mut reader = Reader::open(&app, "?after=0", Some("4")).await;
    assert_eq!(reader.next().await.id, 5);
    assert_eq!(reader.next().await.id, 6);
    app.stop().await;
}

async fn a_source_filter_and_bad_requests(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    ping(&app, "g-1").await;
    let update = br#"{"update_id": 777, "message": {"message_id": 1, "date": 1700000000, "chat": {"id": 5, "type": "private"}, "text": "hi"}}"#;
    let r = app
        .post_telegram(update, crate::common::TELEGRAM_SECRET)
        .await;
    assert_eq!(r.status(), 200);
    ping(&app, "g-2").await;
    let mut telegram = Reader::open(&app, "?after=0&source=telegram", None).await;
    let event = telegram.next().await;
    assert_eq!((event.id, event.kind.as_str()), (2, "telegram.message"));

    let get = |query: &'static str, last: Option<&'static str>, token: bool| {
        let mut request = app
            .client
            .get(app.url(&format!("/api/events/stream{query}")));
        if token {
            request = request.bearer_auth(ADMIN_TOKEN);
        }
        if let Some(last) = last {
            request = request.header("Last-Event-ID", last);
        }
        request.send()
    };
    for (query, last, token, status, code) in [
        ("", Some("nope"), true, 400, "bad_last_event_id"),
        ("", Some("-3"), true, 400, "bad_last_event_id"),
        ("?source=jira", None, true, 400, "bad_query"),
        ("?after=-1", None, true, 400, "bad_query"),
        ("?colour=red", None, true, 400, "bad_query"),
        ("", None, false, 401, "unauthorized"),
    ] {
        let r = get(query, last, token).await.unwrap();
        assert_eq!(r.status(), status, "{query} {last:?}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"], code, "{query} {last:?}: {body}");
    }
    app.stop().await;
}

async fn shutdown_ends_open_streams(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let mut reader = Reader::open(&app, "?after=0", None).await;
    ping(&app, "x").await;
    assert_eq!(reader.next().await.id, 1);
    // A graceful stop must not wait forever on a client that would listen forever (the HTTP server has no
    // deadline of its own: an open stream that ignored shutdown would hold it for ever). The bound is about
    // "ends", not "fast": the stop also waits on the loops and the appender, each up to SHUTDOWN_GRACE, which a
    // loaded machine can take a while to reach (seen over 10 s once with another test run beside it).
    tokio::time::timeout(Duration::from_secs(60), app.stop())
        .await
        .expect("shutdown finished with a stream open");
    let rest = tokio::time::timeout(Duration::from_secs(5), async {
        while let Ok(Some(_)) = reader.body.chunk().await {}
    })
    .await;
    assert!(rest.is_ok(), "the stream ended with the server");
}
