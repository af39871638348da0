//! The OpenAPI document of `/api/*`: the checked-in `docs/openapi.json` is the generated one (regenerate with
//! `UPDATE_OPENAPI=1 cargo test --test it openapi::`), every route the router mounts is documented and answers, and
//! real responses of the real server have the documented shapes.

use std::path::PathBuf;

use crate::common::{TestApp, TestDb, ADMIN_TOKEN};
use pidevops::http::openapi;
use serde_json::{json, Value};

fn checked_in_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.json")
}

#[test]
fn the_checked_in_document_is_the_generated_one() {
    let generated = openapi::document_json().expect("the document encodes");
    let path = checked_in_path();
    if std::env::var_os("UPDATE_OPENAPI").is_some_and(|v| v == "1") {
        std::fs::write(&path, &generated).expect("docs/openapi.json is writable");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != generated {
        let first_difference = checked_in
            .lines()
            .zip(generated.lines())
            .enumerate()
            .find(|(_, (old, new))| old != new)
            .map_or_else(
                || "one is a prefix of the other".to_owned(),
                |(line, (old, new))| {
                    format!(
                        "line {}:\n  checked in: {old}\n  generated:  {new}",
                        line + 1
                    )
                },
            );
        panic!(
            "docs/openapi.json is not the document the code generates ({first_difference}).\n\
             Regenerate it with `UPDATE_OPENAPI=1 cargo test --test it openapi::` and commit it."
        );
    }
}

/// The document as the server generates it, as JSON.
fn document() -> Value {
    serde_json::to_value(openapi::document()).expect("the document encodes")
}

/// A concrete path for a route template, with parameters that exist in no database.
fn concrete(template: &str) -> String {
    let id = if template.starts_with("/api/events/") {
        "00000000-0000-0000-0000-000000000000"
    } else {
        "T-1"
    };
    template.replace("{id}", id).replace("{action}", "approve")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_route_is_documented_and_mounted() {
    let document = document();
    let mounted: std::collections::BTreeSet<(String, String)> = openapi::routes()
        .iter()
        .map(|(method, path)| (method.as_str().to_lowercase(), (*path).to_owned()))
        .collect();
    let documented: std::collections::BTreeSet<(String, String)> = document["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .expect("a path item")
                .keys()
                .map(move |method| (method.clone(), path.clone()))
        })
        .collect();
    let undocumented: Vec<_> = mounted.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "routes the router mounts but the OpenAPI document lacks: {undocumented:?}. Give each handler a \
         #[utoipa::path] and list it in ApiDoc's paths (src/http/openapi.rs)"
    );
    let stale: Vec<_> = documented.difference(&mounted).collect();
    assert!(stale.is_empty(), "documented but not mounted: {stale:?}");

    // `routes()` is what the router mounts: each one answers on the real server, none with the router's own
    // 404 (`no such route`) or a 405.
    let db = TestDb::sqlite();
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    for (method, template) in openapi::routes() {
        let path = concrete(template);
        let response = app
            .client
            .request(method.clone(), app.url(&path))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        assert_ne!(status, 405, "{method} {path}");
        if status == 404 {
            let body: Value = response.json().await.unwrap();
            assert_ne!(body["message"], "no such route", "{method} {path}");
        }
    }
    // The check above can fail: a path the router does not have gets exactly that.
    let response = app
        .client
        .get(app.url("/api/no-such-route"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({ "error": "not_found", "message": "no such route" })
    );
    app.stop().await;
}

/// Where `value` departs from `schema`, for the schemas utoipa writes: `$ref`, `oneOf`, `type` (one or a list),
/// `enum`, `pattern`, the `uuid` and `date-time` formats, `items`, and `properties` (strictly: a field the
/// schema does not list is a mismatch, as is a required one missing).
fn mismatches(document: &Value, schema: &Value, value: &Value, at: &str) -> Vec<String> {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference
            .strip_prefix("#/components/schemas/")
            .expect("a local schema reference");
        let target = &document["components"]["schemas"][name];
        assert!(target.is_object(), "{at}: {reference} does not resolve");
        return mismatches(document, target, value, at);
    }
    if let Some(branches) = schema["oneOf"].as_array() {
        let failures: Vec<Vec<String>> = branches
            .iter()
            .map(|branch| mismatches(document, branch, value, at))
            .collect();
        return match failures.iter().filter(|f| f.is_empty()).count() {
            1 => Vec::new(),
            0 => vec![format!("{at}: matches no oneOf branch: {failures:?}")],
            n => vec![format!("{at}: matches {n} oneOf branches")],
        };
    }
    let mut found = Vec::new();
    let types: Vec<&str> = match &schema["type"] {
        Value::String(one) => vec![one.as_str()],
        Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let type_of = |value: &Value| match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let actual = type_of(value);
    let type_matches = types.is_empty()
        || types.contains(&actual)
        || (actual == "integer" && types.contains(&"number"));
    if !type_matches {
        return vec![format!("{at}: a {actual}, documented as {types:?}")];
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(value) {
            found.push(format!("{at}: {value} is not one of {allowed:?}"));
        }
    }
    if let (Some(pattern), Some(text)) = (schema["pattern"].as_str(), value.as_str()) {
        if !regex::Regex::new(pattern).unwrap().is_match(text) {
            found.push(format!("{at}: {text:?} does not match {pattern}"));
        }
    }
    match (schema["format"].as_str(), value.as_str()) {
        (Some("uuid"), Some(text)) if uuid::Uuid::parse_str(text).is_err() => {
            found.push(format!("{at}: {text:?} is not a uuid"))
        }
        (Some("date-time"), Some(text)) if chrono::DateTime::parse_from_rfc3339(text).is_err() => {
            found.push(format!("{at}: {text:?} is not a date-time"))
        }
        _ => {}
    }
    if let (Some(items), Some(elements)) = (schema.get("items"), value.as_array()) {
        for (i, element) in elements.iter().enumerate() {
            found.extend(mismatches(document, items, element, &format!("{at}[{i}]")));
        }
    }
    if let (Some(properties), Some(object)) = (schema["properties"].as_object(), value.as_object())
    {
        for (key, field) in object {
            match properties.get(key) {
                Some(property) => found.extend(mismatches(
                    document,
                    property,
                    field,
                    &format!("{at}.{key}"),
                )),
                None => found.push(format!("{at}.{key}: not in the documented properties")),
            }
        }
        for required in schema["required"].as_array().into_iter().flatten() {
            let key = required.as_str().unwrap();
            if !object.contains_key(key) {
                found.push(format!("{at}.{key}: required, missing"));
            }
        }
    }
    found
}

/// The documented response of `method template` for the response's status: its content type must be documented,
/// and a JSON body must match the documented schema. Returns the body (`null` when not JSON).
async fn check_documented(
    document: &Value,
    method: &str,
    template: &str,
    response: reqwest::Response,
) -> Value {
    let status = response.status().as_u16().to_string();
    let documented = &document["paths"][template][method]["responses"][&status];
    assert!(
        documented.is_object(),
        "{method} {template} answered {status}, which its documentation does not list"
    );
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .unwrap_or_default()
        .to_owned();
    let media = documented["content"]
        .as_object()
        .expect("documented content");
    let content = media
        .get(&content_type)
        .or_else(|| media.get("*/*"))
        .unwrap_or_else(|| {
            panic!(
                "{method} {template} {status}: served as {content_type:?}, documented as {media:?}"
            )
        });
    if content_type != "application/json" {
        return Value::Null;
    }
    let body: Value = response.json().await.unwrap();
    let errors = mismatches(document, &content["schema"], &body, "$");
    assert!(
        errors.is_empty(),
        "{method} {template} {status} departs from its documentation:\n{}\nbody: {body:#}",
        errors.join("\n")
    );
    body
}

/// The keys of a JSON object, sorted.
fn keys(value: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value
        .as_object()
        .unwrap_or_else(|| panic!("an object: {value}"))
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    keys
}

/// Every `$ref` in `value` names a schema the document has.
fn dangling_refs(document: &Value, value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get("$ref") {
                let name = reference.trim_start_matches("#/components/schemas/");
                if !document["components"]["schemas"][name].is_object() {
                    found.push(reference.clone());
                }
            }
            map.values().for_each(|v| dangling_refs(document, v, found));
        }
        Value::Array(items) => items.iter().for_each(|v| dangling_refs(document, v, found)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_document_describes_real_responses() {
    let db = TestDb::sqlite();
    let mut settings = crate::common::settings(&db);
    settings.file = "[intake]\nallow_repos = [\"acme/*\"]".parse().unwrap();
    let app = TestApp::spawn(settings).await;

    // Public (no token), valid JSON, OpenAPI 3.x, and the generated document.
    let response = app
        .client
        .get(app.url("/api/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()[reqwest::header::CONTENT_TYPE],
        "application/json"
    );
    let served: Value = response.json().await.unwrap();
    assert!(
        served["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.")),
        "{}",
        served["openapi"]
    );
    assert_eq!(served, document());
    let document = served;
    let mut dangling = Vec::new();
    dangling_refs(&document, &document, &mut dangling);
    assert!(dangling.is_empty(), "unresolved references: {dangling:?}");
    let mut operation_ids: Vec<&str> = document["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|item| item.as_object().unwrap().values())
        .map(|operation| operation["operationId"].as_str().expect("an operationId"))
        .collect();
    let operations = operation_ids.len();
    operation_ids.sort_unstable();
    operation_ids.dedup();
    assert_eq!(operation_ids.len(), operations, "operationIds are unique");
    assert_eq!(
        document["components"]["securitySchemes"]["admin_token"],
        json!({ "type": "http", "scheme": "bearer" })
    );

    let call = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let mut request = app
            .client
            .request(method, app.url(path))
            .bearer_auth(ADMIN_TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send()
    };
    use reqwest::Method;

    // Tasks: create (201, then 200 for the same key), list, show, steer, choose the agent, refusals.
    let draft = json!({
        "repo": "acme/api",
        "spec": { "task": "Fix the login bug", "scope": "src/", "done_when": "tests pass" },
        "priority": "high",
        "links": { "github_issue": { "repo": "acme/api", "number": 7 } },
        "agent": "codex",
    });
    for expected in [201, 200] {
        let response = app
            .client
            .post(app.url("/api/tasks"))
            .bearer_auth(ADMIN_TOKEN)
            .header("Idempotency-Key", "openapi-1")
            .json(&draft)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), expected);
        let created = check_documented(&document, "post", "/api/tasks", response).await;
        assert_eq!(keys(&created), ["created", "task"]);
    }
    let response = call(Method::GET, "/api/tasks/T-1", None).await.unwrap();
    let shown = check_documented(&document, "get", "/api/tasks/{id}", response).await;
    assert_eq!(keys(&shown), ["task", "timeline", "version"]);
    assert_eq!(
        keys(&shown["timeline"][0]),
        [
            "actor",
            "at",
            "cause_event_id",
            "event_id",
            "position",
            "recorded_at",
            "stream_version",
            "summary",
            "type"
        ]
    );
    let response = call(Method::POST, "/api/tasks/T-1/approve", None)
        .await
        .unwrap();
    let approved_at = response.status();
    let steered = check_documented(&document, "post", "/api/tasks/{id}/{action}", response).await;
    assert_eq!(keys(&steered), ["appended", "changed", "task"]);
    assert!(approved_at.is_success());
    // The receipt: its lines the task's two events, each backed by its place in the chain.
    let response = call(Method::GET, "/api/tasks/T-1/receipt", None)
        .await
        .unwrap();
    let receipt = check_documented(&document, "get", "/api/tasks/{id}/receipt", response).await;
    assert_eq!(
        keys(&receipt),
        ["format", "head", "issued_at", "lines", "task"]
    );
    assert_eq!(
        keys(&receipt["lines"][1]),
        [
            "actor",
            "chain_hash",
            "content_hash",
            "event_type",
            "position",
            "recorded_at",
            "stream",
            "summary"
        ]
    );
    assert_eq!(receipt["lines"][1]["event_type"], "task.approved");
    let response = call(Method::GET, "/api/tasks/T-99/receipt", None)
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    check_documented(&document, "get", "/api/tasks/{id}/receipt", response).await;
    assert_eq!(
        keys(&steered["appended"][0]),
        ["duplicate", "event_id", "position"]
    );
    let response = call(
        Method::POST,
        "/api/tasks/T-1/agent",
        Some(json!({ "agent": null })),
    )
    .await
    .unwrap();
    check_documented(&document, "post", "/api/tasks/{id}/agent", response).await;
    // A command's body goes through axum's own extractor: its refusals are plain text, and documented so.
    let oversized = format!("{{\"reason\": \"{}\"}}", "x".repeat(3 << 20));
    for (content_type, body, status) in [
        ("application/json", "{\"reasn\": \"typo\"}", 422),
        ("application/json", "{not json", 400),
        ("text/plain", "why", 415),
        ("application/json", oversized.as_str(), 413),
    ] {
        // Its own connection each: the server closes one whose body it refused unread.
        let response = reqwest::Client::new()
            .post(app.url("/api/tasks/T-1/reject"))
            .bearer_auth(ADMIN_TOKEN)
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            status,
            "{content_type}, {} bytes",
            body.len()
        );
        check_documented(&document, "post", "/api/tasks/{id}/{action}", response).await;
    }
    let response = call(Method::POST, "/api/tasks/T-9/cancel", None)
        .await
        .unwrap();
    let refused = check_documented(&document, "post", "/api/tasks/{id}/{action}", response).await;
    assert_eq!(refused["error"], "not_found");
    let response = call(Method::GET, "/api/tasks?limit=0", None).await.unwrap();
    let refused = check_documented(&document, "get", "/api/tasks", response).await;
    assert_eq!(keys(&refused), ["error", "message"]);
    crate::common::eventually("the board lists the task", || async {
        let response = call(Method::GET, "/api/tasks", None).await.unwrap();
        let listed = check_documented(&document, "get", "/api/tasks", response).await;
        assert_eq!(keys(&listed), ["projector", "tasks"]);
        assert_eq!(keys(&listed["projector"]), ["behind", "head", "position"]);
        listed["tasks"].as_array().unwrap().len() == 1 && listed["projector"]["behind"] == 0
    })
    .await;

    // Events: a page, one event, its body, the stream, the sources read model.
    let response = call(Method::GET, "/api/events", None).await.unwrap();
    let page = check_documented(&document, "get", "/api/events", response).await;
    assert_eq!(keys(&page), ["events", "next_after"]);
    let first = page["events"][0]["id"].as_str().unwrap().to_owned();
    let response = call(Method::GET, &format!("/api/events/{first}"), None)
        .await
        .unwrap();
    check_documented(&document, "get", "/api/events/{id}", response).await;
    let response = call(Method::GET, &format!("/api/events/{first}/body"), None)
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    check_documented(&document, "get", "/api/events/{id}/body", response).await;
    let mut stream = call(Method::GET, "/api/events/stream?after=0", None)
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(
        stream.headers()[reqwest::header::CONTENT_TYPE],
        "text/event-stream"
    );
    let mut received = String::new();
    let data = loop {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), stream.chunk())
            .await
            .expect("an event within 10 s")
            .unwrap()
            .expect("the stream goes on");
        received.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(line) = received.lines().find_map(|l| l.strip_prefix("data:")) {
            if received.contains("\n\n") {
                break line.trim().to_owned();
            }
        }
    };
    drop(stream);
    let envelope: Value = serde_json::from_str(&data).unwrap();
    let errors = mismatches(
        &document,
        &json!({ "$ref": "#/components/schemas/Envelope" }),
        &envelope,
        "data",
    );
    assert!(errors.is_empty(), "{errors:?}");
    crate::common::eventually("the sources read model has the task's events", || async {
        let response = call(Method::GET, "/api/sources", None).await.unwrap();
        let sources = check_documented(&document, "get", "/api/sources", response).await;
        assert_eq!(keys(&sources), ["projector", "sources"]);
        assert_eq!(
            keys(&sources["projector"]),
            ["behind", "head", "name", "position", "version"]
        );
        let Some(source) = sources["sources"].get(0) else {
            return false;
        };
        assert_eq!(
            keys(source),
            [
                "events",
                "last_delivery_ago_s",
                "last_delivery_at",
                "last_type",
                "source",
                "types"
            ]
        );
        assert_eq!(
            keys(&source["types"][0]),
            ["events", "first_at", "last_at", "last_position", "type"]
        );
        true
    })
    .await;

    // Dispatch: status, pause with a reason, status again, resume; runs.
    let response = call(Method::GET, "/api/dispatch", None).await.unwrap();
    let status = check_documented(&document, "get", "/api/dispatch", response).await;
    assert_eq!(status, json!({ "paused": false, "reason": null }));
    let response = call(
        Method::POST,
        "/api/dispatch/pause",
        Some(json!({ "reason": "maintenance" })),
    )
    .await
    .unwrap();
    let paused = check_documented(&document, "post", "/api/dispatch/pause", response).await;
    assert_eq!(paused, json!({ "paused": true, "changed": true }));
    let response = reqwest::Client::new()
        .post(app.url("/api/dispatch/pause"))
        .bearer_auth(ADMIN_TOKEN)
        .body(oversized)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    check_documented(&document, "post", "/api/dispatch/pause", response).await;
    let response = call(Method::GET, "/api/dispatch", None).await.unwrap();
    let status = check_documented(&document, "get", "/api/dispatch", response).await;
    assert_eq!(
        status,
        json!({ "paused": true, "reason": "paused by api: maintenance" })
    );
    let response = call(Method::POST, "/api/dispatch/resume", None)
        .await
        .unwrap();
    let resumed = check_documented(&document, "post", "/api/dispatch/resume", response).await;
    assert_eq!(resumed, json!({ "paused": false, "changed": true }));
    let response = call(Method::GET, "/api/runs", None).await.unwrap();
    let runs = check_documented(&document, "get", "/api/runs", response).await;
    assert_eq!(runs, json!({ "runs": [] }));

    // Without the token: 401 with the documented error shape and header.
    let response = app.client.get(app.url("/api/tasks")).send().await.unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(
        response.headers()[reqwest::header::WWW_AUTHENTICATE],
        "Bearer"
    );
    let refused = check_documented(&document, "get", "/api/tasks", response).await;
    assert_eq!(refused["error"], "unauthorized");
    app.stop().await;
}

#[test]
fn the_shape_check_finds_departures() {
    let document = document();
    let task_list = json!({ "$ref": "#/components/schemas/TaskList" });
    let projector = json!({ "position": 1, "head": 1, "behind": 0 });
    assert!(mismatches(
        &document,
        &task_list,
        &json!({ "tasks": [], "projector": projector }),
        "$"
    )
    .is_empty());
    let found = mismatches(
        &document,
        &task_list,
        &json!({ "tasks": "none", "projector": { "position": 1, "head": 1, "late": 0 } }),
        "$",
    );
    assert_eq!(
        found,
        [
            "$.projector.late: not in the documented properties",
            "$.projector.behind: required, missing",
            "$.tasks: a string, documented as [\"array\"]",
        ],
        "{found:#?}"
    );
    let id = json!({ "$ref": "#/components/schemas/TaskId" });
    assert_eq!(mismatches(&document, &id, &json!("T-01"), "$").len(), 1);
}
