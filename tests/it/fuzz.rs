//! Arbitrary input never panics a parser and never gets past verification.

use crate::common::{TestApp, TestDb};
use axum::http::{HeaderMap, HeaderValue};
use bytes::Bytes;
use chrono::Utc;
use pidevops::providers::{
    github::webhook as github, linear::webhook as linear, telegram::webhook as telegram,
};
use proptest::prelude::*;

fn arbitrary_json_ish() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..512),
        // Near-misses of real shapes reach deeper into the parsers than random bytes do.
        "\\{\"(action|type|update_id|webhookTimestamp|repository|number|data)\":(\"[a-z]{0,8}\"|-?[0-9]{1,20}|null|\\{\\}|\\[\\]|true)\\}"
            .prop_map(String::into_bytes),
        any::<i64>().prop_map(|n| format!(
            r#"{{"type":"Issue","action":"update","webhookTimestamp":{n},"data":{{"id":{n}}}}}"#
        ).into_bytes()),
        any::<i64>().prop_map(|n| format!(r#"{{"update_id":{n},"message":{{"chat":{{"id":"x"}},"date":{n}}}}}"#).into_bytes()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn github_parser_never_panics(body in arbitrary_json_ish(), event in "[ -~]{0,40}", delivery in "[ -~]{0,40}",
                                  form in any::<bool>()) {
        let mut headers = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(&event) { headers.insert("x-github-event", v); }
        if let Ok(v) = HeaderValue::from_str(&delivery) { headers.insert("x-github-delivery", v); }
        if form { headers.insert("content-type", HeaderValue::from_static("application/x-www-form-urlencoded")); }
        if let Ok(e) = github::parse(&headers, Bytes::from(body)) {
            // Whatever is accepted has a safe, bounded name.
            prop_assert!(e.event_type.as_str().starts_with("github."));
            prop_assert!(e.event_type.as_str().chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)));
            prop_assert!(!e.dedup_key.is_empty() && e.dedup_key.len() <= 200);
        }
    }

    #[test]
    fn linear_parser_never_panics(body in arbitrary_json_ish()) {
        let _ = linear::parse(&HeaderMap::new(), Bytes::from(body), Utc::now());
    }

    #[test]
    fn telegram_parser_never_panics(body in arbitrary_json_ish()) {
        if let Ok(e) = telegram::parse(Bytes::from(body), Some("1")) {
            prop_assert!(e.dedup_key.starts_with("1:"));
        }
    }
}

/// Random bodies with random (or absent) signatures through the real server: never 2xx, never stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_deliveries_never_pass_the_server() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let db = TestDb::sqlite();
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let mut runner = TestRunner::deterministic();
    let strategy = (
        arbitrary_json_ish(),
        proptest::option::of("(sha256=)?[0-9a-f]{0,70}"),
        0usize..3,
    );
    for _ in 0..300 {
        let (body, signature, route) = strategy.new_tree(&mut runner).unwrap().current();
        let (path, header) = [
            ("/webhooks/github", "x-hub-signature-256"),
            ("/webhooks/linear", "linear-signature"),
            ("/webhooks/telegram", "x-telegram-bot-api-secret-token"),
        ][route];
        let mut request = app
            .client
            .post(app.url(path))
            .header("x-github-event", "push")
            .header("x-github-delivery", "fuzz")
            .body(body);
        if let Some(signature) = signature {
            request = request.header(header, signature);
        }
        let status = request.send().await.unwrap().status();
        assert!(!status.is_success(), "{path} accepted a forged delivery");
        assert!(status.is_client_error(), "{path} answered {status}");
    }
    assert!(app.webhook_events().await.is_empty());
    app.stop().await;
}
