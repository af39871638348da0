//! The board's command side through the real server: creation (ids, idempotency, the approval gate), racing
//! commands, and precise refusals.

use std::collections::BTreeSet;

use crate::common::{TestApp, TestDb, ADMIN_TOKEN};
use serde_json::{json, Value};

per_backend!(
    creation_allocates_dense_ids_and_an_idempotency_key_makes_one_task,
    the_approval_gate_is_manual_by_default_and_auto_goes_to_todo,
    two_racing_approvals_give_one_approval_and_one_no_op,
    concurrent_creations_get_distinct_consecutive_ids,
    refusals_are_precise_and_change_nothing,
    the_board_lists_from_the_read_model_with_filters,
    a_task_picks_its_agent_at_creation_and_between_attempts,
    a_spec_is_edited_before_work_starts_and_every_bad_edit_is_refused_precisely,
    search_finds_text_in_titles_and_specs_ignoring_case_and_taking_wildcards_literally,
);

async fn post(app: &TestApp, path: &str, body: Value, key: Option<&str>) -> (u16, Value) {
    let mut request = app
        .client
        .post(app.url(path))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// Settings whose allow-list (`acme/*`) admits the repositories these tests use.
fn allowing_acme(db: &TestDb) -> pidevops::config::Settings {
    let mut settings = crate::common::settings(db);
    settings.file = "[intake]\nallow_repos = [\"acme/*\"]".parse().unwrap();
    settings
}

async fn get(app: &TestApp, path: &str) -> (u16, Value) {
    let response = app
        .client
        .get(app.url(path))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

fn draft(task: &str) -> Value {
    json!({ "repo": "acme/api", "spec": { "task": task, "scope": "src/", "done_when": "tests pass" } })
}

async fn task_events(app: &TestApp) -> Vec<pidevops::eventlog::StoredEvent> {
    app.all_events()
        .await
        .into_iter()
        .filter(|e| e.stream.as_deref().is_some_and(|s| s.starts_with("task:")))
        .collect()
}

async fn creation_allocates_dense_ids_and_an_idempotency_key_makes_one_task(db: TestDb) {
    let app = TestApp::spawn(allowing_acme(&db)).await;
    let (status, first) = post(&app, "/api/tasks", draft("Fix the login bug"), Some("k-1")).await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["created"], true);
    assert_eq!(first["task"]["id"], "T-1");
    assert_eq!(first["task"]["repo"], "acme/api");
    // The client retries (a timeout, say): same key, same task, nothing new in the log.
    let (status, again) = post(&app, "/api/tasks", draft("Fix the login bug"), Some("k-1")).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["created"], false);
    assert_eq!(again["task"]["id"], "T-1");
    assert_eq!(task_events(&app).await.len(), 1);
    let (status, second) = post(&app, "/api/tasks", draft("Another"), Some("k-2")).await;
    assert_eq!((status, second["task"]["id"].as_str()), (201, Some("T-2")));

    let (status, shown) = get(&app, "/api/tasks/T-1").await;
    assert_eq!(status, 200);
    assert_eq!(shown["task"]["spec"]["task"], "Fix the login bug");
    assert_eq!(shown["version"], 1);
    let timeline = shown["timeline"].as_array().unwrap();
    assert_eq!(timeline.len(), 1);
    assert_eq!(timeline[0]["type"], "task.created");
    assert_eq!(timeline[0]["actor"], "api");
    assert!(
        timeline[0]["summary"]
            .as_str()
            .unwrap()
            .starts_with("created in "),
        "{shown}"
    );
    let event = &task_events(&app).await[0];
    assert_eq!(
        (
            event.source.as_str(),
            event.stream.as_deref(),
            event.stream_version
        ),
        ("pidevops", Some("task:T-1"), Some(1))
    );
    app.stop().await;
}

async fn the_approval_gate_is_manual_by_default_and_auto_goes_to_todo(db: TestDb) {
    let app = TestApp::spawn(allowing_acme(&db)).await;
    let (_, manual) = post(&app, "/api/tasks", draft("Wait for a human"), None).await;
    assert_eq!(manual["task"]["column"], "triage");
    let mut auto = draft("Go");
    auto["approval"] = json!("auto");
    let (status, auto) = post(&app, "/api/tasks", auto, None).await;
    assert_eq!(status, 201);
    assert_eq!(auto["task"]["column"], "todo");
    let (_, shown) = get(&app, "/api/tasks/T-2").await;
    let types: Vec<&str> = shown["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["task.created", "task.approved"]);

    let (status, approved) = post(&app, "/api/tasks/T-1/approve", json!({}), None).await;
    assert_eq!(status, 200, "{approved}");
    assert_eq!(approved["task"]["column"], "todo");
    assert_eq!(approved["changed"], true);
    app.stop().await;
}

async fn two_racing_approvals_give_one_approval_and_one_no_op(db: TestDb) {
    let app = TestApp::spawn(allowing_acme(&db)).await;
    for round in 1..=5 {
        let (_, created) = post(&app, "/api/tasks", draft(&format!("Race {round}")), None).await;
        let id = created["task"]["id"].as_str().unwrap().to_owned();
        let path = format!("/api/tasks/{id}/approve");
        let (a, b) = tokio::join!(
            post(&app, &path, json!({}), None),
            post(&app, &path, json!({}), None)
        );
        assert_eq!((a.0, b.0), (200, 200), "{a:?} {b:?}");
        let changed: Vec<bool> = [&a.1, &b.1]
            .iter()
            .map(|r| r["changed"].as_bool().unwrap())
            .collect();
        assert_eq!(
            changed.iter().filter(|c| **c).count(),
            1,
            "exactly one approval: {a:?} {b:?}"
        );
        let (_, shown) = get(&app, &format!("/api/tasks/{id}")).await;
        let approvals = shown["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["type"] == "task.approved")
            .count();
        assert_eq!(approvals, 1);
    }
    // Approve racing reject: one wins, the other is refused cleanly (409), never both applied.
    let (_, created) = post(&app, "/api/tasks", draft("Approve or reject"), None).await;
    let id = created["task"]["id"].as_str().unwrap().to_owned();
    let (approve, reject) = (
        format!("/api/tasks/{id}/approve"),
        format!("/api/tasks/{id}/reject"),
    );
    let (a, r) = tokio::join!(
        post(&app, &approve, json!({}), None),
        post(&app, &reject, json!({"reason": "out of scope"}), None)
    );
    let mut statuses = [a.0, r.0];
    statuses.sort();
    assert_eq!(statuses, [200, 409], "{a:?} {r:?}");
    let (_, shown) = get(&app, &format!("/api/tasks/{id}")).await;
    assert_eq!(shown["timeline"].as_array().unwrap().len(), 2);
    app.stop().await;
}

async fn concurrent_creations_get_distinct_consecutive_ids(db: TestDb) {
    let app = TestApp::spawn(allowing_acme(&db)).await;
    let results = futures::future::join_all(
        (0..12).map(|i| post(&app, "/api/tasks", draft(&format!("Task {i}")), None)),
    )
    .await;
    let ids: BTreeSet<String> = results
        .iter()
        .map(|(status, body)| {
            assert_eq!(*status, 201, "{body}");
            body["task"]["id"].as_str().unwrap().to_owned()
        })
        .collect();
    let expected: BTreeSet<String> = (1..=12).map(|n| format!("T-{n}")).collect();
    assert_eq!(ids, expected);
    app.stop().await;
}

async fn refusals_are_precise_and_change_nothing(db: TestDb) {
    let app = TestApp::spawn(allowing_acme(&db)).await;
    post(&app, "/api/tasks", draft("Something"), None).await;
    let before = task_events(&app).await.len();
    for (path, body, status, code) in [
        ("/api/tasks/T-1/archive", json!({}), 409, "refused"),
        ("/api/tasks/T-9/approve", json!({}), 404, "not_found"),
        ("/api/tasks/X-1/approve", json!({}), 400, "bad_id"),
        (
            "/api/tasks/X-1/agent",
            json!({"agent": "claude"}),
            400,
            "bad_id",
        ),
        ("/api/tasks/T-0/spec", json!({"task": "x"}), 400, "bad_id"),
        ("/api/tasks/t-1/answer", json!({"text": "x"}), 400, "bad_id"),
        ("/api/tasks/X-1/land", json!({}), 400, "bad_id"),
        ("/api/tasks/T-1/launch", json!({}), 404, "not_found"),
        (
            "/api/tasks/T-1/reject",
            json!({"reason": ""}),
            400,
            "bad_reason",
        ),
        (
            "/api/tasks",
            json!({"repo": "not a repo", "spec": {"task": "x"}}),
            400,
            "bad_task",
        ),
        (
            "/api/tasks",
            json!({"repo": "acme/api", "spec": {"task": ""}}),
            400,
            "bad_task",
        ),
        ("/api/tasks", json!({"repo": "acme/api"}), 400, "bad_task"),
    ] {
        let (got, response) = post(&app, path, body.clone(), None).await;
        assert_eq!(got, status, "{path} {body}: {response}");
        assert_eq!(response["error"], code, "{path} {body}: {response}");
    }
    for path in ["/api/tasks/X-1", "/api/plans/T-x"] {
        let (status, body) = get(&app, path).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["error"], "bad_id", "{path}: {body}");
        assert!(
            !body["message"].as_str().unwrap().is_empty(),
            "{path}: {body}"
        );
    }
    let (_, refused) = post(&app, "/api/tasks/T-1/archive", json!({}), None).await;
    assert!(
        refused["message"].as_str().unwrap().contains("triage"),
        "the refusal says why: {refused}"
    );
    let (status, _) = post(&app, "/api/tasks", draft("x"), Some("bad key with spaces")).await;
    assert_eq!(status, 400);
    assert_eq!(
        task_events(&app).await.len(),
        before,
        "a refusal changed the log"
    );
    let (status, _) = get(&app, "/api/tasks/T-404").await;
    assert_eq!(status, 404);
    // Without the token, nothing.
    let r = app
        .client
        .post(app.url("/api/tasks"))
        .json(&draft("x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    app.stop().await;
}

async fn the_board_lists_from_the_read_model_with_filters(db: TestDb) {
    let app = TestApp::spawn(allowing_acme(&db)).await;
    for (i, repo) in ["acme/api", "acme/web", "acme/api"].iter().enumerate() {
        let mut body = draft(&format!("Task {i}"));
        body["repo"] = json!(repo);
        if i == 2 {
            body["priority"] = json!("urgent");
        }
        post(&app, "/api/tasks", body, None).await;
    }
    post(&app, "/api/tasks/T-2/approve", json!({}), None).await;
    // The read model follows the log: brought to its head, not waited for.
    app.project().await;
    let listed = get(&app, "/api/tasks").await.1;
    assert_eq!(listed["projector"]["behind"], 0, "{listed}");
    let ids: Vec<&str> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["T-3", "T-1", "T-2"],
        "urgent first, then oldest: {listed}"
    );
    let (_, todo) = get(&app, "/api/tasks?column=todo").await;
    assert_eq!(todo["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(todo["tasks"][0]["id"], "T-2");
    let (_, api) = get(&app, "/api/tasks?repo=acme/api&source=api").await;
    assert_eq!(api["tasks"].as_array().unwrap().len(), 2);
    let (_, flagged) = get(&app, "/api/tasks?needs_human=true").await;
    assert!(flagged["tasks"].as_array().unwrap().is_empty());
    for query in [
        "?column=doing",
        "?colour=red",
        "?limit=0",
        "?needs_human=maybe",
    ] {
        let (status, body) = get(&app, &format!("/api/tasks{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
    }
    app.stop().await;
}

/// `q` finds text in a task's title or spec (task, scope, done when), ignoring case (Unicode's); `%` and `_` are text, not
/// wildcards; other JSON in the task's state (keys, follow-ups) never matches; the board's search box does the same.
async fn search_finds_text_in_titles_and_specs_ignoring_case_and_taking_wildcards_literally(
    db: TestDb,
) {
    let app = TestApp::spawn(allowing_acme(&db)).await;
    let specs = [
        json!({ "task": "Fix the Redirect loop", "scope": "src/auth/", "done_when": "tests pass" }),
        json!({ "task": "Speed up the build", "scope": "ci/cache_dir", "done_when": "under 100% of today's time" }),
        json!({ "task": "Write docs", "scope": "docs/", "done_when": "the REDIRECT section is clear" }),
        json!({ "task": "Rename the Übersicht page", "scope": "web/", "done_when": "ÄRGER gone" }),
    ];
    for spec in specs {
        let (status, body) = post(
            &app,
            "/api/tasks",
            json!({ "repo": "acme/api", "spec": spec }),
            None,
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    app.project().await;
    let found = |query: &'static str| {
        let app = &app;
        async move {
            let (status, body) = get(app, &format!("/api/tasks?q={query}")).await;
            assert_eq!(status, 200, "{query}: {body}");
            let mut ids: Vec<String> = body["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["id"].as_str().unwrap().to_owned())
                .collect();
            ids.sort();
            ids
        }
    };
    // The title (any case) and the done-when of another task.
    assert_eq!(found("redirect").await, ["T-1", "T-3"]);
    // The scope.
    assert_eq!(found("cache_dir").await, ["T-2"]);
    // `_` and `%` are the characters themselves: "cache_dir" is not "cacheXdir", "100%" not "100 anything".
    assert!(found("src_auth").await.is_empty());
    assert_eq!(found("100%25").await, ["T-2"]);
    assert!(found("1%25s").await.is_empty());
    // Case is ignored beyond ASCII, on both backends ("übersicht" finds "Übersicht", "ärger" finds "ÄRGER").
    assert_eq!(found("%C3%BCbersicht").await, ["T-4"]);
    assert_eq!(found("%C3%A4rger").await, ["T-4"]);
    // JSON keys and other parts of the stored state are not searched.
    assert!(found("done_when").await.is_empty());
    assert!(found("acme").await.is_empty());
    let (status, body) = get(&app, &format!("/api/tasks?q={}", "x".repeat(201))).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("at most 200"),
        "{body}"
    );
    // The board's search box: only the matching cards, and the counts are theirs.
    let cookie = crate::web::sign_in(&app).await;
    let (status, html) = crate::web::get(&app, "/?q=REDIRECT", &cookie).await;
    assert_eq!(status, 200);
    assert!(
        html.contains(r#"data-task="T-1""#) && html.contains(r#"data-task="T-3""#),
        "{html}"
    );
    assert!(!html.contains(r#"data-task="T-2""#), "{html}");
    assert!(html.contains(r#"value="REDIRECT""#), "{html}");
    app.stop().await;
}

async fn a_task_picks_its_agent_at_creation_and_between_attempts(db: TestDb) {
    let app = TestApp::spawn(allowing_acme(&db)).await;
    let mut body = draft("Port the parser");
    body["agent"] = json!("codex");
    let (status, created) = post(&app, "/api/tasks", body, None).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["task"]["agent"], "codex");

    let (status, changed) = post(&app, "/api/tasks/T-1/agent", json!({"agent": "pi"}), None).await;
    assert_eq!(
        (status, &changed["changed"]),
        (200, &json!(true)),
        "{changed}"
    );
    assert_eq!(changed["task"]["agent"], "pi");
    let (_, again) = post(&app, "/api/tasks/T-1/agent", json!({"agent": "pi"}), None).await;
    assert_eq!(again["changed"], false, "the same pick twice is one event");
    let (_, back) = post(&app, "/api/tasks/T-1/agent", json!({"agent": null}), None).await;
    assert!(back["task"].get("agent").is_none(), "{back}");

    let before = task_events(&app).await.len();
    for (path, body, status, code) in [
        (
            "/api/tasks/T-1/agent",
            json!({"agent": "Codex"}),
            400,
            "bad_agent",
        ),
        ("/api/tasks/T-1/agent", json!({}), 400, "bad_agent"),
        (
            "/api/tasks/T-1/agent",
            json!({"agent": "pi", "x": 1}),
            400,
            "bad_agent",
        ),
        ("/api/tasks/T-1/agent", json!("pi"), 400, "bad_agent"),
        (
            "/api/tasks/T-9/agent",
            json!({"agent": "pi"}),
            404,
            "not_found",
        ),
        (
            "/api/tasks",
            json!({"repo": "acme/api", "spec": {"task": "x"}, "agent": "a b"}),
            400,
            "bad_task",
        ),
    ] {
        let (got, response) = post(&app, path, body.clone(), None).await;
        assert_eq!(got, status, "{path} {body}: {response}");
        assert_eq!(response["error"], code, "{path} {body}: {response}");
    }
    let (_, bad) = post(
        &app,
        "/api/tasks/T-1/agent",
        json!({"agent": "Codex"}),
        None,
    )
    .await;
    assert!(
        bad["message"].as_str().unwrap().contains("\"Codex\""),
        "{bad}"
    );
    assert_eq!(
        task_events(&app).await.len(),
        before,
        "a refusal changed the log"
    );
    let timeline = get(&app, "/api/tasks/T-1").await.1;
    let summaries: Vec<&str> = timeline["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["summary"].as_str())
        .filter(|s| s.contains("agent profile"))
        .collect();
    assert_eq!(
        summaries,
        [
            "agent profile pi chosen",
            "agent profile back to the repository's"
        ]
    );
    app.stop().await;
}

async fn a_spec_is_edited_before_work_starts_and_every_bad_edit_is_refused_precisely(db: TestDb) {
    let app = TestApp::spawn(allowing_acme(&db)).await;
    post(&app, "/api/tasks", draft("Fix the login bug"), None).await;
    let before = task_events(&app).await.len();
    for (body, status, code, says) in [
        (
            json!({}),
            400,
            "bad_spec",
            "give at least one of task, scope, done_when",
        ),
        (
            json!({"task": ""}),
            400,
            "bad_spec",
            "spec task must not be empty",
        ),
        (json!({"scope": "\u{0}"}), 400, "bad_spec", "NUL"),
        (
            json!({"title": "x"}),
            400,
            "bad_spec",
            "unknown field `title`",
        ),
        (json!({"task": 7}), 400, "bad_spec", "invalid type"),
    ] {
        let (got, response) = post(&app, "/api/tasks/T-1/spec", body.clone(), None).await;
        assert_eq!(
            (got, response["error"].as_str()),
            (status, Some(code)),
            "{body}: {response}"
        );
        assert!(
            response["message"].as_str().unwrap().contains(says),
            "{body}: {response}"
        );
    }
    let (got, response) = post(&app, "/api/tasks/T-9/spec", json!({"task": "x"}), None).await;
    assert_eq!(
        (got, response["error"].as_str()),
        (404, Some("not_found")),
        "{response}"
    );
    assert_eq!(
        task_events(&app).await.len(),
        before,
        "a refusal changed the log"
    );

    // A part given replaces its own; the others stay. The same edit again changes nothing.
    let edit = json!({"done_when": "a test signs in and lands where it started", "scope": ""});
    let (got, edited) = post(&app, "/api/tasks/T-1/spec", edit.clone(), None).await;
    assert_eq!(got, 200, "{edited}");
    assert_eq!(edited["changed"], true);
    assert_eq!(
        edited["task"]["spec"],
        json!({"task": "Fix the login bug", "scope": "", "done_when": "a test signs in and lands where it started"})
    );
    let (_, again) = post(&app, "/api/tasks/T-1/spec", edit, None).await;
    assert_eq!(again["changed"], false);

    // Once the work started, the spec is the one the run was given.
    post(&app, "/api/tasks/T-1/approve", json!({}), None).await;
    app.state
        .board
        .execute(
            "T-1".parse().unwrap(),
            &pidevops::tasks::Command::Start {
                run: pidevops::tasks::RunId(uuid::Uuid::now_v7()),
            },
            "test",
        )
        .await
        .unwrap();
    let (got, refused) = post(&app, "/api/tasks/T-1/spec", json!({"task": "Other"}), None).await;
    assert_eq!(
        (got, refused["error"].as_str()),
        (409, Some("refused")),
        "{refused}"
    );
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("in-progress; update-spec needs triage or todo"),
        "{refused}"
    );
    app.stop().await;
}
