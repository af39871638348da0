//! `pidevops replay --all` on a log of a few thousand mixed events (webhooks, intake, API commands) rebuilds
//! exactly the read models that incremental processing in the running service built.

use crate::common::server::command;
use crate::common::{TestApp, TestDb, ADMIN_TOKEN};
use pidevops::eventlog::EventStore;
use serde_json::json;

per_backend!(replay_all_gives_exactly_the_incremental_read_models);

/// Every read model table, as JSON text in key order: what "exactly the same" is compared on.
async fn snapshot(store: &EventStore) -> Vec<(String, String)> {
    let tables = [
        ("tasks", "task_id"),
        ("task_links", "kind, value"),
        ("task_merges", "task_id"),
        ("source_activity", "source, event_type"),
    ];
    let mut out = Vec::new();
    for (table, order) in tables {
        let text: String = match store {
            EventStore::Postgres(s) => sqlx::query_scalar(&format!(
                "SELECT coalesce(json_agg(t ORDER BY {order})::text, '[]') FROM {table} t"
            ))
            .fetch_one(s.pool())
            .await
            .unwrap(),
            EventStore::Sqlite(s) => {
                let columns: Vec<String> =
                    sqlx::query_scalar(&format!("SELECT name FROM pragma_table_info('{table}')"))
                        .fetch_all(s.pool())
                        .await
                        .unwrap();
                let fields: Vec<String> = columns.iter().map(|c| format!("'{c}', {c}")).collect();
                sqlx::query_scalar(&format!(
                    "SELECT coalesce(json_group_array(json_object({})), '[]') FROM (SELECT * FROM {table} ORDER BY {order})",
                    fields.join(", ")
                ))
                .fetch_one(s.pool())
                .await
                .unwrap()
            }
        };
        out.push((table.to_owned(), text));
    }
    out
}

async fn replay_all_gives_exactly_the_incremental_read_models(db: TestDb) {
    let _cores = crate::common::heavy().await;
    let mut settings = crate::common::settings(&db);
    settings.file = "[intake]\nallow_repos = [\"acme/*\", \"Codertocat/Hello-World\"]"
        .parse()
        .unwrap();
    let app = TestApp::spawn(settings).await;
    let issue: serde_json::Value = serde_json::from_slice(
        &std::fs::read(crate::common::fixtures_dir().join("github/issues/opened.payload.json"))
            .unwrap(),
    )
    .unwrap();
    let client = &app.client;
    let mut requests = Vec::new();
    for i in 0..400u32 {
        let (app, issue) = (&app, &issue);
        requests.push(async move {
            // A labeled issue from a member (a task via intake), a stranger's (a recorded refusal), a ping.
            let mut body = issue.clone();
            body["issue"]["number"] = json!(1000 + i);
            body["issue"]["labels"] = crate::providers::github::gh_labels(&["pidevops"]);
            body["issue"]["author_association"] = json!(if i % 5 == 0 { "NONE" } else { "MEMBER" });
            let r = app
                .post_github("issues", &format!("issue-{i}"), body.to_string().as_bytes())
                .await;
            assert_eq!(r.status(), 200);
            let r = app
                .post_github("ping", &format!("ping-{i}"), br#"{"zen":"ok","hook_id":1}"#)
                .await;
            assert_eq!(r.status(), 200);
            // A task through the API, steered a little.
            let created: serde_json::Value = client
                .post(app.url("/api/tasks"))
                .bearer_auth(ADMIN_TOKEN)
                .json(&json!({ "repo": "acme/api", "spec": { "task": format!("API task {i}") } }))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let id = created["task"]["id"].as_str().unwrap().to_owned();
            let steps: &[&str] = match i % 4 {
                0 => &["approve"],
                1 => &["reject", "archive"],
                2 => &["approve", "cancel", "archive"],
                _ => &[],
            };
            for step in steps {
                let r = client
                    .post(app.url(&format!("/api/tasks/{id}/{step}")))
                    .bearer_auth(ADMIN_TOKEN)
                    .json(&json!({}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200, "{id} {step}");
            }
        });
        if requests.len() == 16 {
            futures::future::join_all(std::mem::take(&mut requests)).await;
        }
    }
    futures::future::join_all(requests).await;

    // Incremental processing catches up: intake, then the projectors, all at the head (driven, not waited for;
    // again while anything else the service runs still appends).
    let store = app.state.log.store().clone();
    loop {
        let head = store.head().await.unwrap();
        app.drive("intake").await;
        app.project().await;
        if store.head().await.unwrap() == head {
            break;
        }
    }
    let head = store.head().await.unwrap();
    assert!(
        store.checkpoint("intake").await.unwrap() >= head,
        "intake at the head"
    );
    for name in ["tasks", "sources"] {
        let position = pidevops::projectors::read_row(&store, name)
            .await
            .unwrap()
            .map_or(0, |(_, p)| p);
        assert!(position >= head, "{name} at the head: {position} < {head}");
    }
    let head = store.head().await.unwrap();
    assert!(head > 2000, "a log of thousands of events: {head}");
    let incremental = snapshot(&store).await;
    let tasks = &incremental[0].1;
    assert!(
        tasks.matches("\"task_id\"").count() >= 700,
        "intake and the API made the tasks"
    );
    app.stop().await;

    let workdir = tempfile::tempdir().unwrap();
    let out = command(&db.url_string(), workdir.path())
        .args(["replay", "--all"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("replayed tasks") && stderr.contains("events/s"),
        "{stderr}"
    );
    let replayed = snapshot(&store).await;
    for ((table, before), (_, after)) in incremental.iter().zip(&replayed) {
        assert!(before == after, "{table} differs after replay --all");
    }
}
