//! `pidevops whatif --config`, the real binary over activity the real service recorded: GitHub issues through
//! signed webhooks and intake, tasks through the API, runs of a scripted agent by the dispatcher with the usage it
//! printed, pull requests opened on the fake GitHub, checks through webhooks, merges chosen by the merge queue.
//! Replayed under the service's own configuration it finds no difference; under a candidate with a lower budget, a
//! stricter allow-list and `land = "manual"` it names exactly the tasks that change, and how. The log is the same
//! after, byte for byte.

use std::collections::BTreeMap;

use pidevops::eventlog::EventStore;
use pidevops::tasks::{Column, TaskId};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::common::agents::{agent, Remote, REPO};
use crate::common::server::command;
use crate::common::{board, TestApp, TestDb};
use crate::land::{api, app, check_run, config, in_review, merged, post, settle};
use crate::providers::github::fake::FakeGithub;
use crate::web::{client, csrf, get, sign_in};

per_backend!(
    a_candidate_replayed_over_the_log_names_exactly_the_tasks_it_changes_and_the_same_config_none
);

/// Prints what it spent (ten cents on a task that says "Spend little", forty otherwise) and changes a file.
const SPENDER: &str = r#"if grep -q "Spend little" "$1"; then echo "spent 10 in, 1 out, \$0.10"
else echo "spent 100 in, 10 out, \$0.40"; fi
date +%s%N > "note-$(date +%s%N).md""#;

const ISSUES_REPO: &str = "Codertocat/Hello-World";

fn fixture(path: &str) -> Value {
    serde_json::from_slice(&std::fs::read(crate::common::fixtures_dir().join(path)).unwrap())
        .unwrap()
}

/// Every stored event, position, id, stream and bytes, hashed: the log as `verify` would see it.
async fn checksum(store: &EventStore) -> (usize, String) {
    let mut hash = Sha256::new();
    let (mut after, mut count) = (0, 0);
    loop {
        let page = store.read_after(after, 1_000).await.unwrap();
        let Some(last) = page.last() else { break };
        after = last.position;
        for event in &page {
            count += 1;
            hash.update(event.position.to_be_bytes());
            hash.update(event.id.as_bytes());
            hash.update(event.stream.as_deref().unwrap_or_default());
            hash.update(&event.body);
            hash.update(event.meta.to_map().len().to_be_bytes());
        }
    }
    (count, format!("{:x}", hash.finalize()))
}

/// A task through the API whose title says what its agent spends.
async fn task(base: &str, title: &str) -> TaskId {
    let body = json!({ "repo": REPO, "spec": { "task": title, "scope": "src", "done_when": "CI is green" } });
    let created = api(base, reqwest::Method::POST, "/api/tasks", Some(body)).await;
    created["task"]["id"].as_str().unwrap().parse().unwrap()
}

/// Runs `id` to review, passes its check, lets the merge queue merge it and GitHub report the merge.
/// `merges`: how many merges GitHub has been asked for once this one is.
async fn worked_and_merged(
    app: &TestApp,
    fake: &FakeGithub,
    remote: &Remote,
    id: TaskId,
    merges: usize,
) {
    let store = app.state.log.store().clone();
    let (pr, sha) = in_review(&store, id, 1).await;
    fake.set_head(REPO, pr, &sha);
    let check = check_run(REPO, id, &sha, "ci", "success");
    post(&app.url(""), "check_run", &format!("ci-{id}"), &check).await;
    settle(app).await;
    settle(app).await;
    assert_eq!(
        fake.merge_calls().len(),
        merges,
        "the merge queue merges {id}"
    );
    remote.merge_to_main(id.branch().as_str());
    post(
        &app.url(""),
        "pull_request",
        &format!("merged-{id}"),
        &merged(id, pr),
    )
    .await;
    settle(app).await;
    let row = board::row_in(&store, id).await.unwrap();
    assert_eq!(row.column, Column::Done, "{row:?}");
}

/// `whatif --config <file>` against the database: its JSON report.
fn whatif(db: &TestDb, dir: &std::path::Path, file: &toml::Table) -> Value {
    let path = dir.join("candidate.toml");
    std::fs::write(&path, toml::to_string(file).unwrap()).unwrap();
    let out = command(&db.url_string(), dir)
        .args(["whatif", "--config"])
        .arg(&path)
        .args(["--since", "30d", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Each changed task's change kinds, by task.
fn changes(report: &Value) -> BTreeMap<String, Vec<String>> {
    report["differences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|line| {
            let kinds = line["changes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["kind"].as_str().unwrap().to_owned())
                .collect();
            (line["task"].as_str().unwrap_or("(none)").to_owned(), kinds)
        })
        .collect()
}

async fn a_candidate_replayed_over_the_log_names_exactly_the_tasks_it_changes_and_the_same_config_none(
    db: TestDb,
) {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let script = agent(scratch.path(), "spender.sh", SPENDER);
    let mut file = config(&remote, &script, None);
    file["repos"][REPO]
        .as_table_mut()
        .unwrap()
        .insert("approvals".into(), 0.into());
    file["agents"]["fake"].as_table_mut().unwrap().insert(
        "usage_pattern".into(),
        r"spent (?P<input>\d+) in, (?P<output>\d+) out, \$(?P<cost>[0-9.]+)".into(),
    );
    // Issues of a second repository become tasks that wait for a person (and none comes).
    file["intake"].as_table_mut().unwrap().insert(
        "allow_repos".into(),
        toml::Value::Array(vec![ISSUES_REPO.into()]),
    );
    let mut issues_repo = toml::Table::new();
    issues_repo.insert("approval".into(), "manual".into());
    file["repos"]
        .as_table_mut()
        .unwrap()
        .insert(ISSUES_REPO.into(), issues_repo.into());
    let app = app(&db, &fake, file.clone(), scratch.path()).await;
    let base = app.url("");

    for number in [1, 2] {
        let mut issue = fixture("github/issues/opened.payload.json");
        issue["issue"]["labels"] = crate::providers::github::gh_labels(&["pidevops"]);
        issue["issue"]["author_association"] = json!("MEMBER");
        issue["issue"]["number"] = json!(number);
        post(&base, "issues", &format!("issue-{number}"), &issue).await;
    }
    app.drive("intake").await;
    app.project().await;
    let from_issues: Vec<TaskId> = ["T-1", "T-2"].iter().map(|t| t.parse().unwrap()).collect();
    for id in &from_issues {
        let row = board::row_in(app.state.log.store(), *id).await.unwrap();
        assert_eq!(row.repo, ISSUES_REPO, "{row:?}");
        assert_eq!(row.column, Column::Triage, "{row:?}");
    }
    // One at a time, so each run's spend is on record before the next starts.
    let mut worked = Vec::new();
    let titles = [
        "Spend little: one",
        "Spend little: two",
        "Spend more: three",
        "Spend more: four",
    ];
    for (n, title) in titles.into_iter().enumerate() {
        let id = task(&base, title).await;
        worked_and_merged(&app, &fake, &remote, id, n + 1).await;
        worked.push(id);
    }
    let store = app.state.log.store().clone();
    let before = checksum(&store).await;
    let dir = tempfile::tempdir().unwrap();

    let same = whatif(&db, dir.path(), &file);
    assert_eq!(same["differences"], json!([]), "{same:#}");
    assert_eq!(same["tasks_compared"], 6, "{same:#}");
    assert_eq!(same["recorded"]["runs"], 4, "{same:#}");
    assert!((same["recorded"]["cost_usd"].as_f64().unwrap() - 1.0).abs() < 1e-9);
    assert_eq!(same["recorded"], same["candidate"]);

    let mut candidate = file.clone();
    candidate.insert(
        "budgets".into(),
        toml::Value::Table(
            [("task_usd".to_owned(), toml::Value::Float(0.3))]
                .into_iter()
                .collect(),
        ),
    );
    candidate["intake"]
        .as_table_mut()
        .unwrap()
        .remove("allow_repos");
    candidate["repos"]
        .as_table_mut()
        .unwrap()
        .remove(ISSUES_REPO);
    candidate["repos"][REPO]
        .as_table_mut()
        .unwrap()
        .insert("land".into(), "manual".into());
    let report = whatif(&db, dir.path(), &candidate);
    let named = |id: &TaskId| id.to_string();
    let expected: BTreeMap<String, Vec<String>> = [
        (named(&from_issues[0]), vec!["ignored"]),
        (named(&from_issues[1]), vec!["ignored"]),
        (named(&worked[0]), vec!["not_landed"]),
        (named(&worked[1]), vec!["not_landed"]),
        (named(&worked[2]), vec!["stopped_by_budget"]),
        (named(&worked[3]), vec!["stopped_by_budget"]),
    ]
    .into_iter()
    .map(|(task, kinds)| (task, kinds.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(changes(&report), expected, "{report:#}");
    let lines = report["differences"].as_array().unwrap();
    let line = |id: &TaskId| {
        lines
            .iter()
            .find(|l| l["task"] == json!(named(id)))
            .unwrap()
            .clone()
    };
    let ignored = line(&from_issues[0]);
    assert_eq!(ignored["key"], json!(format!("github:{ISSUES_REPO}#1")));
    let reason = ignored["changes"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("not an allowed repository"), "{reason}");
    let not_landed = line(&worked[0]);
    assert_eq!(
        not_landed["changes"][0]["why"],
        json!("land = manual: a person merges")
    );
    let stopped = &line(&worked[2])["changes"][0];
    assert_eq!(stopped["while_running"], json!(true), "{stopped}");
    assert!(
        stopped["why"].as_str().unwrap().contains("$0.40 of $0.30"),
        "{stopped}"
    );
    // The two runs a task budget of 30 cents stops spend 30 cents each, not 40: 20 cents saved.
    let candidate_cost = report["candidate"]["cost_usd"].as_f64().unwrap();
    assert!((candidate_cost - 0.8).abs() < 1e-9, "{report:#}");

    // The readable report says the same; and nothing was written.
    let path = dir.path().join("candidate.toml");
    let out = command(&db.url_string(), dir.path())
        .args(["whatif", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("pidevops would not land it: land = manual"),
        "{text}"
    );
    assert!(text.contains("stopped by a budget while running"), "{text}");
    assert_eq!(checksum(&store).await, before, "the log changed");

    // A candidate that is not a configuration is refused, naming what is wrong, and nothing is replayed.
    std::fs::write(&path, "[board]\napproval = \"sometimes\"\n").unwrap();
    let out = command(&db.url_string(), dir.path())
        .args(["whatif", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr.contains("candidate configuration is refused"),
        "{stderr}"
    );
    assert!(stderr.contains("approval"), "{stderr}");
    assert!(out.stdout.is_empty());

    // The dashboard's /whatif replays the same way, behind a session and its CSRF token.
    let cookie = sign_in(&app).await;
    let (status, html) = get(&app, "/whatif", &cookie).await;
    assert_eq!(status, 200, "{html}");
    let token = csrf(&html);
    let post_form = |fields: Vec<(&'static str, String)>| {
        let (app, cookie) = (&app, &cookie);
        async move {
            let response = client()
                .post(app.url("/whatif"))
                .header("cookie", cookie)
                .form(&fields)
                .send()
                .await
                .unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    let candidate_text = toml::to_string(&candidate).unwrap();
    let (status, html) = post_form(vec![
        ("csrf", token.clone()),
        ("candidate", candidate_text.clone()),
        ("days", "30".into()),
    ])
    .await;
    assert_eq!(status, 200, "{html}");
    for id in from_issues.iter().chain(&worked) {
        assert!(
            html.contains(&format!("href=\"/tasks/{id}\"")),
            "{id}: {html}"
        );
    }
    assert!(
        html.contains("pidevops would not land it: land = manual"),
        "{html}"
    );
    assert!(html.contains("stopped by a budget while running"), "{html}");
    let (status, html) = post_form(vec![
        ("csrf", token.clone()),
        ("candidate", toml::to_string(&file).unwrap()),
        ("days", "30".into()),
    ])
    .await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("No differences"), "{html}");
    let (status, html) = post_form(vec![
        ("csrf", token.clone()),
        ("candidate", "[board]\napproval = \"sometimes\"\n".into()),
        ("days", "30".into()),
    ])
    .await;
    assert_eq!(status, 400, "{html}");
    assert!(
        html.contains("nothing was replayed") && html.contains("approval"),
        "{html}"
    );
    let (status, _) = post_form(vec![
        ("csrf", token.clone()),
        ("candidate", candidate_text.clone()),
        ("days", "0".into()),
    ])
    .await;
    assert_eq!(status, 400);
    // A candidate past 64 KiB once decoded is refused; one whose encoding is larger than that is not.
    let (status, _) = post_form(vec![
        ("csrf", token.clone()),
        ("candidate", format!("# {}\n", "x".repeat(70 * 1024))),
        ("days", "30".into()),
    ])
    .await;
    assert_eq!(status, 413);
    let padded = format!("{candidate_text}\n# {}\n", "\"[]=\" ".repeat(8 * 1024));
    let (status, html) = post_form(vec![
        ("csrf", token.clone()),
        ("candidate", padded),
        ("days", "30".into()),
    ])
    .await;
    assert_eq!(status, 200, "{html}");
    let (status, _) = post_form(vec![("candidate", candidate_text), ("days", "30".into())]).await;
    assert_eq!(status, 403, "no CSRF token, no replay");
    assert_eq!(checksum(&store).await, before, "the log changed");
}
