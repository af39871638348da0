//! Webhook ingress through the real HTTP server, per backend: every fixture signed, redelivered and tampered with.

use crate::common::{TestApp, TestDb, ADMIN_TOKEN, GITHUB_SECRET, TELEGRAM_SECRET};
use pidevops::domain::Source;
use pidevops::providers::github::webhook::sign_github;
use serde_json::Value;

per_backend!(
    every_github_fixture_is_stored_once_and_tampering_is_refused,
    form_encoded_github_deliveries_are_verified_on_the_raw_body,
    unknown_github_events_and_ping_are_stored,
    every_linear_fixture_is_stored_once_and_stale_ones_are_refused,
    every_telegram_fixture_is_stored_once_and_wrong_tokens_are_refused,
    a_source_without_its_secret_refuses_every_delivery,
    oversized_bodies_are_refused_with_413,
    malformed_deliveries_get_400_and_change_nothing,
    the_admin_api_serves_events_behind_the_token,
    a_redelivered_id_with_another_signed_body_is_refused_and_recorded,
    json_nested_past_the_limit_is_refused_on_every_route_and_not_stored,
);

async fn json(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body = response.json().await.expect("a JSON body");
    (status, body)
}

async fn every_github_fixture_is_stored_once_and_tampering_is_refused(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let fixtures = crate::common::github_fixtures();
    let mut expected = Vec::new();
    for (i, (event, path)) in fixtures.iter().enumerate() {
        let body = std::fs::read(path).unwrap();
        let delivery = format!("delivery-{i}");
        let (status, first) = json(app.post_github(event, &delivery, &body).await).await;
        assert_eq!(status, 200, "{}: {first}", path.display());
        assert_eq!(first["duplicate"], false);

        let (status, again) = json(app.post_github(event, &delivery, &body).await).await;
        assert_eq!(status, 200);
        assert_eq!(again["duplicate"], true, "{}", path.display());
        assert_eq!(again["position"], first["position"]);
        assert_eq!(again["event_id"], first["event_id"]);

        // One byte changed, signature of the original: refused, under a fresh delivery id so a store would show.
        let mut tampered = body.clone();
        let middle = tampered.len() / 2;
        tampered[middle] ^= 0x20;
        let signature = sign_github(GITHUB_SECRET.as_bytes(), &body);
        let response = app
            .post_github_signed(event, &format!("tampered-{i}"), &tampered, &signature)
            .await;
        assert_eq!(response.status().as_u16(), 401, "{}", path.display());
        expected.push((
            event.clone(),
            delivery,
            body,
            first["position"].as_i64().unwrap(),
        ));
    }

    let stored = app.webhook_events().await;
    assert_eq!(
        stored.len(),
        fixtures.len(),
        "each fixture once, nothing tampered"
    );
    for (event, delivery, body, position) in expected {
        let e = stored
            .iter()
            .find(|e| e.dedup_key == delivery)
            .expect("stored");
        assert_eq!(e.position, position);
        assert!(e.body == body, "the exact bytes are the record: {delivery}");
        assert_eq!(e.source, "github");
        let parsed: Value = serde_json::from_slice(&body).unwrap();
        let expected_type = match parsed["action"].as_str() {
            Some(action) => format!("github.{event}.{action}"),
            None => format!("github.{event}"),
        };
        assert_eq!(e.event_type, expected_type);
        assert_eq!(
            e.repository.as_deref(),
            parsed["repository"]["full_name"].as_str()
        );
        assert_eq!(
            e.meta.text("x-github-delivery").as_deref(),
            Some(delivery.as_str())
        );
    }
    app.stop().await;
}

async fn form_encoded_github_deliveries_are_verified_on_the_raw_body(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let json_body =
        std::fs::read(crate::common::fixtures_dir().join("github/issues/opened.payload.json"))
            .unwrap();
    let form: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", std::str::from_utf8(&json_body).unwrap())
        .finish();
    let send = |body: Vec<u8>, signature: String, delivery: &'static str| {
        app.client
            .post(app.url("/webhooks/github"))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("x-github-event", "issues")
            .header("x-github-delivery", delivery)
            .header("x-hub-signature-256", signature)
            .body(body)
            .send()
    };
    // Signed over the form bytes: accepted.
    let response = send(
        form.clone().into_bytes(),
        sign_github(GITHUB_SECRET.as_bytes(), form.as_bytes()),
        "form-1",
    )
    .await
    .unwrap();
    let (status, body) = json(response).await;
    assert_eq!(status, 200, "{body}");
    // Signed over the JSON inside instead of the raw body: refused.
    let response = send(
        form.clone().into_bytes(),
        sign_github(GITHUB_SECRET.as_bytes(), &json_body),
        "form-2",
    )
    .await
    .unwrap();
    assert_eq!(response.status().as_u16(), 401);

    let stored = app.webhook_events().await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].event_type, "github.issues.opened");
    assert!(
        stored[0].body == form.as_bytes(),
        "the raw form body is kept"
    );
    // `data` is the JSON value (without the file's trailing newline); the raw bytes are the record.
    assert!(
        stored[0].data_json().get().as_bytes() == json_body.trim_ascii_end(),
        "data is the JSON payload"
    );
    app.stop().await;
}

async fn unknown_github_events_and_ping_are_stored(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let ping =
        std::fs::read(crate::common::fixtures_dir().join("github/ping/payload.json")).unwrap();
    assert_eq!(
        app.post_github("ping", "p-1", &ping)
            .await
            .status()
            .as_u16(),
        200
    );
    let novel = br#"{"action":"teleported","widget":{"id":1}}"#;
    assert_eq!(
        app.post_github("widget_teleport", "n-1", novel)
            .await
            .status()
            .as_u16(),
        200
    );
    let hostile = br#"{"action":"x.y > *"}"#;
    assert_eq!(
        app.post_github("a.b", "n-2", hostile)
            .await
            .status()
            .as_u16(),
        200
    );
    let types: Vec<String> = app
        .webhook_events()
        .await
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert_eq!(
        types,
        vec![
            "github.ping",
            "github.widget_teleport.teleported",
            "github.a_b.x_y____"
        ],
        "names stay safe as NATS subject tokens"
    );
    app.stop().await;
}

async fn every_linear_fixture_is_stored_once_and_stale_ones_are_refused(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let files = crate::common::fixture_files("linear");
    assert!(files.len() >= 6);
    for path in &files {
        let body = crate::common::linear_body_at(path, 0);
        let (status, first) = json(app.post_linear(&body).await).await;
        assert_eq!(status, 200, "{}: {first}", path.display());
        assert_eq!(first["duplicate"], false, "{}", path.display());
        let (status, again) = json(app.post_linear(&body).await).await;
        assert_eq!(status, 200);
        assert_eq!(again["duplicate"], true);
        assert_eq!(again["position"], first["position"]);

        let mut tampered = body.clone();
        let i = tampered.len() / 3;
        tampered[i] ^= 0x01;
        let response = app
            .client
            .post(app.url("/webhooks/linear"))
            .header(
                "linear-signature",
                pidevops::providers::linear::webhook::sign_linear(
                    crate::common::LINEAR_SECRET.as_bytes(),
                    &body,
                ),
            )
            .body(tampered)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 401);

        // Correctly signed but 61 s old, or 61 s ahead: a replay, refused.
        for offset in [-61_000, 61_000] {
            let stale = crate::common::linear_body_at(path, offset);
            let (status, refused) = json(app.post_linear(&stale).await).await;
            assert_eq!(status, 401, "{}: {refused}", path.display());
            assert!(
                refused["message"]
                    .as_str()
                    .unwrap()
                    .contains("webhookTimestamp"),
                "{refused}"
            );
        }
    }
    let stored = app.webhook_events().await;
    assert_eq!(stored.len(), files.len());
    let types: Vec<&str> = stored.iter().map(|e| e.event_type.as_str()).collect();
    assert!(types.contains(&"linear.Issue.create"), "{types:?}");
    assert!(
        types.contains(&"linear.AgentSessionEvent.prompted"),
        "{types:?}"
    );
    app.stop().await;
}

async fn every_telegram_fixture_is_stored_once_and_wrong_tokens_are_refused(db: TestDb) {
    let mut settings = crate::common::settings(&db);
    // Its webhook secret is set, so the bot's token arms no long poll: it only scopes the update ids.
    settings
        .providers
        .set("TELEGRAM_BOT_TOKEN", Some("4242:ingress-bot-secret"))
        .unwrap();
    let app = TestApp::spawn(settings).await;
    let files = crate::common::fixture_files("telegram");
    assert!(files.len() >= 7);
    for path in &files {
        let body = std::fs::read(path).unwrap();
        let (status, first) = json(app.post_telegram(&body, TELEGRAM_SECRET).await).await;
        assert_eq!(status, 200, "{}: {first}", path.display());
        assert_eq!(first["duplicate"], false);
        let (status, again) = json(app.post_telegram(&body, TELEGRAM_SECRET).await).await;
        assert_eq!(status, 200);
        assert_eq!(
            (again["duplicate"].clone(), again["position"].clone()),
            (Value::Bool(true), first["position"].clone())
        );
        for wrong in [
            "",
            "tg-test-secreT",
            "tg-test-secret-",
            "tg-test-secre",
            "x",
        ] {
            assert_eq!(
                app.post_telegram(&body, wrong).await.status().as_u16(),
                401,
                "token {wrong:?}"
            );
        }
        let missing = app
            .client
            .post(app.url("/webhooks/telegram"))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(missing.status().as_u16(), 401);
    }
    let stored = app.webhook_events().await;
    assert_eq!(stored.len(), files.len());
    let stranger = stored
        .iter()
        .find(|e| {
            e.body
                == std::fs::read(
                    crate::common::fixtures_dir().join("telegram/message.from_stranger.json"),
                )
                .unwrap()
        })
        .expect("a stranger's message is recorded; refusing it is policy, not ingress");
    assert_eq!(stranger.event_type, "telegram.message");
    assert!(
        stranger.dedup_key.starts_with("4242:"),
        "update ids are scoped by bot: {}",
        stranger.dedup_key
    );
    app.stop().await;
}

async fn a_source_without_its_secret_refuses_every_delivery(db: TestDb) {
    let mut settings = crate::common::settings(&db);
    for provider in pidevops::domain::registry::names() {
        assert!(settings.webhook_secrets.set(provider, None), "{provider}");
    }
    let app = TestApp::spawn(settings).await;
    let body = br#"{"zen":"z"}"#;
    let (status, refused) = json(app.post_github("ping", "x", body).await).await;
    assert_eq!(status, 503);
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("GITHUB_WEBHOOK_SECRET"),
        "{refused}"
    );
    let (status, refused) = json(app.post_linear(body).await).await;
    assert_eq!(status, 503);
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("LINEAR_WEBHOOK_SECRET"),
        "{refused}"
    );
    let (status, refused) = json(app.post_telegram(br#"{"update_id":1}"#, "").await).await;
    assert_eq!(status, 503);
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("TELEGRAM_WEBHOOK_SECRET"),
        "{refused}"
    );
    assert!(app.webhook_events().await.is_empty());
    let (_, health) = app.health().await;
    assert_eq!(
        health["checks"]["webhooks"]["sources"]["github"]["configured"],
        false
    );
    // The provider table and its readers agree: /health lists each provider, and each has its route.
    let providers = &pidevops::domain::registry::PROVIDERS;
    let listed: Vec<&str> = health["checks"]["webhooks"]["sources"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut names: Vec<&str> = providers.iter().map(|p| p.name).collect();
    names.sort_unstable();
    assert_eq!(listed, names);
    for provider in providers {
        let response = reqwest::Client::new()
            .post(app.url(provider.webhook_route))
            .body("{}")
            .send()
            .await
            .unwrap();
        let (status, refused) = json(response).await;
        assert_eq!(status, 503, "{}: {refused}", provider.name);
        assert!(
            refused["message"]
                .as_str()
                .unwrap()
                .contains(provider.webhook_secret),
            "{refused}"
        );
    }
    app.stop().await;
}

async fn oversized_bodies_are_refused_with_413(db: TestDb) {
    let _cores = crate::common::heavy().await;
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    // Valid JSON just over each limit, correctly signed: the size alone refuses it.
    let padded = |limit: usize| {
        let mut body = b"{\"pad\":\"".to_vec();
        body.resize(limit + 1 - 2, b'a');
        body.extend_from_slice(b"\"}");
        body
    };
    let big = padded(pidevops::ingress::GITHUB_BODY_LIMIT);
    let (status, refused) = json(app.post_github("push", "big", &big).await).await;
    assert_eq!(status, 413, "{refused}");
    let just_fits = padded(pidevops::ingress::GITHUB_BODY_LIMIT - 1);
    assert_eq!(
        app.post_github("push", "fits", &just_fits)
            .await
            .status()
            .as_u16(),
        200
    );

    let big = padded(pidevops::ingress::DEFAULT_BODY_LIMIT);
    assert_eq!(app.post_linear(&big).await.status().as_u16(), 413);
    assert_eq!(
        app.post_telegram(&big, TELEGRAM_SECRET)
            .await
            .status()
            .as_u16(),
        413
    );
    let stored = app.webhook_events().await;
    assert_eq!(
        stored
            .iter()
            .map(|e| e.dedup_key.as_str())
            .collect::<Vec<_>>(),
        vec!["fits"]
    );
    app.stop().await;
}

async fn malformed_deliveries_get_400_and_change_nothing(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let not_json = b"{this is not json";
    let (status, refused) = json(app.post_github("push", "m-1", not_json).await).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"], "malformed");

    let body = br#"{"a":1}"#;
    let no_delivery = app
        .client
        .post(app.url("/webhooks/github"))
        .header("x-github-event", "push")
        .header(
            "x-hub-signature-256",
            sign_github(GITHUB_SECRET.as_bytes(), body),
        )
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    let (status, refused) = json(no_delivery).await;
    assert_eq!(status, 400);
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("X-GitHub-Delivery"),
        "{refused}"
    );

    let (status, _) = json(app.post_linear(b"[1,2,3]").await).await;
    assert_eq!(status, 400);
    let (status, _) = json(
        app.post_telegram(br#"{"message":{}}"#, TELEGRAM_SECRET)
            .await,
    )
    .await;
    assert_eq!(status, 400);
    // Unsigned junk is 401 before it is ever parsed.
    let unsigned = app
        .client
        .post(app.url("/webhooks/github"))
        .body("junk")
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status().as_u16(), 401);
    assert!(app.webhook_events().await.is_empty());
    app.stop().await;
}

async fn the_admin_api_serves_events_behind_the_token(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let body = std::fs::read(
        crate::common::fixtures_dir().join("github/pull_request/opened.payload.json"),
    )
    .unwrap();
    for i in 0..3 {
        assert_eq!(
            app.post_github("pull_request", &format!("api-{i}"), &body)
                .await
                .status()
                .as_u16(),
            200
        );
    }
    let get = |path: &str, token: Option<&str>| {
        let mut request = app.client.get(app.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    assert_eq!(
        get("/api/events", None).await.unwrap().status().as_u16(),
        401
    );
    assert_eq!(
        get("/api/events", Some("wrong"))
            .await
            .unwrap()
            .status()
            .as_u16(),
        401
    );
    let (status, page) = json(
        get("/api/events?after=1&limit=1", Some(ADMIN_TOKEN))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let events = page["events"].as_array().unwrap();
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(e["position"], 2);
    assert_eq!(e["source"], "github");
    assert_eq!(e["type"], "github.pull_request.opened");
    assert_eq!(e["dedup_key"], "api-1");
    assert_eq!(e["data"]["number"], 2);
    assert_eq!(page["next_after"], 2);
    for key in [
        "id",
        "stream",
        "stream_version",
        "occurred_at",
        "recorded_at",
        "meta",
    ] {
        assert!(e.get(key).is_some(), "envelope has {key}: {e}");
    }

    let id = e["id"].as_str().unwrap();
    let raw = get(&format!("/api/events/{id}/body"), Some(ADMIN_TOKEN))
        .await
        .unwrap();
    assert_eq!(raw.status().as_u16(), 200);
    assert!(
        raw.bytes().await.unwrap() == body,
        "the exact bytes stay retrievable"
    );

    for bad in [
        "/api/events?limit=0",
        "/api/events?limit=5000",
        "/api/events?after=-1",
        "/api/events?after=x",
        "/api/events?colour=red",
    ] {
        let (status, refused) = json(get(bad, Some(ADMIN_TOKEN)).await.unwrap()).await;
        assert_eq!(status, 400, "{bad}: {refused}");
    }
    assert_eq!(
        get("/api/events/not-a-uuid", Some(ADMIN_TOKEN))
            .await
            .unwrap()
            .status()
            .as_u16(),
        400
    );
    let missing = format!("/api/events/{}", uuid::Uuid::now_v7());
    assert_eq!(
        get(&missing, Some(ADMIN_TOKEN))
            .await
            .unwrap()
            .status()
            .as_u16(),
        404
    );
    app.stop().await;

    // No token configured: the API refuses everyone.
    let mut settings = crate::common::settings(&db);
    settings.admin_token = None;
    let app = TestApp::spawn(settings).await;
    let (status, refused) = json(get_plain(&app, "/api/events", Some(ADMIN_TOKEN)).await).await;
    assert_eq!(status, 503);
    assert!(refused["message"]
        .as_str()
        .unwrap()
        .contains("PIDEVOPS_ADMIN_TOKEN"));
    assert_eq!(
        app.state
            .log
            .store()
            .count_by_key(Source::Github, "api-0")
            .await
            .unwrap(),
        1
    );
    app.stop().await;
}

async fn get_plain(app: &TestApp, path: &str, token: Option<&str>) -> reqwest::Response {
    let mut request = app.client.get(app.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

/// A delivery id already stored, redelivered with other bytes that are validly signed (a leaked secret, or a
/// sender bug): 409 naming both digests, recorded once as `ingress.conflict`, and the stored event untouched.
async fn a_redelivered_id_with_another_signed_body_is_refused_and_recorded(db: TestDb) {
    use sha2::{Digest, Sha256};
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let body = br#"{"action":"opened","issue":{"number":7,"title":"real"},"repository":{"full_name":"acme/billing"}}"#;
    let tampered = br#"{"action":"opened","issue":{"number":7,"title":"evil"},"repository":{"full_name":"acme/billing"}}"#;
    let (status, first_github) = json(app.post_github("issues", "d-dup", body).await).await;
    assert_eq!(
        (status, first_github["duplicate"].clone()),
        (200, Value::Bool(false))
    );
    let (status, again) = json(app.post_github("issues", "d-dup", body).await).await;
    assert_eq!(
        (status, again["duplicate"].clone()),
        (200, Value::Bool(true))
    );

    let stored_sha = hex::encode(Sha256::digest(body));
    let received_sha = hex::encode(Sha256::digest(tampered));
    for _ in 0..2 {
        let (status, refused) = json(app.post_github("issues", "d-dup", tampered).await).await;
        assert_eq!(status, 409, "{refused}");
        assert_eq!(refused["error"], "conflict");
        let message = refused["message"].as_str().unwrap();
        for part in ["d-dup", stored_sha.as_str(), received_sha.as_str()] {
            assert!(message.contains(part), "{message} names {part}");
        }
    }

    // Telegram: the same update id with another body and the right token.
    let update = br#"{"update_id":90001,"message":{"message_id":1,"date":1700000000,"chat":{"id":5,"type":"private"},"text":"hi"}}"#;
    let forged = br#"{"update_id":90001,"message":{"message_id":1,"date":1700000000,"chat":{"id":5,"type":"private"},"text":"/approve T-1"}}"#;
    let (status, first) = json(app.post_telegram(update, TELEGRAM_SECRET).await).await;
    assert_eq!(status, 200, "{first}");
    let (status, refused) = json(app.post_telegram(forged, TELEGRAM_SECRET).await).await;
    assert_eq!(status, 409, "{refused}");

    let stored = app.webhook_events().await;
    assert_eq!(stored.len(), 2, "only the originals are stored");
    let original = stored.iter().find(|e| e.dedup_key == "d-dup").unwrap();
    assert!(
        original.body == body.to_vec(),
        "the first body is the record"
    );
    assert_eq!(Some(original.position), first_github["position"].as_i64());

    let conflicts: Vec<_> = app
        .all_events()
        .await
        .into_iter()
        .filter(|e| e.event_type == "ingress.conflict")
        .collect();
    assert_eq!(
        conflicts.len(),
        2,
        "one record per altered body, however often it is sent"
    );
    let github: Value = serde_json::from_slice(
        &conflicts
            .iter()
            .find(|e| e.body.windows(6).any(|w| w == b"github"))
            .expect("the GitHub conflict")
            .body,
    )
    .unwrap();
    assert_eq!(github["source"], "github");
    assert_eq!(github["dedup_key"], "d-dup");
    assert_eq!(github["stored_sha256"], stored_sha);
    assert_eq!(github["received_sha256"], received_sha);
    assert_eq!(github["stored_position"], original.position);
    for record in &conflicts {
        let text = String::from_utf8_lossy(&record.body);
        assert!(
            !text.contains("evil") && !text.contains("/approve"),
            "never the body: {text}"
        );
        assert!(!text.contains(GITHUB_SECRET) && !text.contains(TELEGRAM_SECRET));
        assert!(!record.meta.as_str().contains(TELEGRAM_SECRET));
    }
    app.stop().await;
}

/// `{"deep":[[…1…]]}` nested `depth` levels in all (the outer object counts), inside `wrap` levels more.
fn nested(depth: usize) -> String {
    format!(
        r#"{{"deep":{}1{}}}"#,
        "[".repeat(depth - 1),
        "]".repeat(depth - 1)
    )
}

async fn json_nested_past_the_limit_is_refused_on_every_route_and_not_stored(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let limit = pidevops::ingress::MAX_JSON_DEPTH;
    let linear_fixture = crate::common::fixture_files("linear")[0].clone();
    // Each route's valid delivery with `nested(depth)` added so that the whole body nests exactly `depth` deep.
    let github =
        |depth: usize| format!(r#"{{"zen":"x","hook_id":1,"extra":{}}}"#, nested(depth - 1));
    let telegram = |depth: usize, update: i64| {
        format!(
            r#"{{"update_id":{update},"message":{{"message_id":1,"date":1,"chat":{{"id":5,"type":"private"}},"x":{}}}}}"#,
            nested(depth - 2)
        )
    };
    let linear = |depth: usize| {
        let body = String::from_utf8(crate::common::linear_body_at(&linear_fixture, 0)).unwrap();
        let open = body.find('{').unwrap();
        format!("{{\"extra\":{},{}", nested(depth - 1), &body[open + 1..])
    };
    for (depth, expected) in [(limit, 200), (limit + 1, 400)] {
        let delivery = format!("deep-{depth}");
        let response = app
            .post_github("ping", &delivery, github(depth).as_bytes())
            .await;
        let (status, body) = json(response).await;
        assert_eq!(status, expected, "github at depth {depth}: {body}");
        let (status, body) = json(app.post_linear(linear(depth).as_bytes()).await).await;
        assert_eq!(status, expected, "linear at depth {depth}: {body}");
        let update = telegram(depth, depth as i64);
        let (status, body) =
            json(app.post_telegram(update.as_bytes(), TELEGRAM_SECRET).await).await;
        assert_eq!(status, expected, "telegram at depth {depth}: {body}");
        if expected == 400 {
            assert_eq!(body["error"], "malformed");
            assert!(
                body["message"].as_str().unwrap().contains("deeper than 64"),
                "{body}"
            );
        }
    }
    // Only the three just under the limit are stored, and the log serves them back.
    let stored = app.webhook_events().await;
    assert_eq!(
        stored.len(),
        3,
        "{:?}",
        stored.iter().map(|e| &e.dedup_key).collect::<Vec<_>>()
    );
    let events = app
        .client
        .get(app.url("/api/events?after=0&limit=100"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    let (status, page) = json(events).await;
    assert_eq!(status, 200, "{page}");
    let served = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["source"] != "pidevops")
        .count();
    assert_eq!(served, 3, "{page}");
    app.stop().await;
}
