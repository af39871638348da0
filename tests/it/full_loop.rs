//! The whole loop, through the real server, real git and real agent processes, with fake GitHub, Linear and
//! Telegram APIs on loopback: a signed Linear webhook becomes a task, an agent run pushes a branch, the pull
//! request opens on GitHub, Linear gets comments and state changes, Telegram is told; a signed failed
//! `check_suite` sends the task back with the failure in the next prompt, the second push updates the same pull
//! request, and the merge makes the task done and the Linear issue Done. Then the same flow with the real binary,
//! SIGKILLed in the middle of a call and restarted: no call to a fake is made twice.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::common::agents::{agent, dispatch_file, Remote, REPO};
use crate::common::board;
use crate::common::server::{read_log, Server};
use crate::common::{within, TestApp, TestDb, GITHUB_SECRET, LINEAR_SECRET, TELEGRAM_SECRET};
use crate::providers::github::fake::{Failure, FakeGithub};
use crate::providers::linear::fake::{default_states, FakeLinear, Issue, LINEAR_KEY};
use crate::providers::telegram::fake::FakeTelegram;
use axum::http::Method;
use pidevops::eventlog::EventStore;
use pidevops::projectors::runs::{self, RunRow, Which};
use pidevops::projectors::tasks as task_rows;
use pidevops::providers::github::webhook::sign_github;
use pidevops::providers::linear::webhook::sign_linear;
use pidevops::tasks::{Column, TaskId, GITHUB_PR, LINEAR_ISSUE};
use serde_json::{json, Value};

per_backend!(a_linear_issue_becomes_a_merged_pull_request_and_everyone_hears);

const ISSUE: &str = "9c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f";
const GITHUB_TOKEN: &str = "ghp_fake_token_for_the_fake_github";
const BOT_TOKEN: &str = "123456:fake-bot-token";
const CHAT: i64 = -100;

struct Fakes {
    github: FakeGithub,
    linear: FakeLinear,
    telegram: FakeTelegram,
}

impl Fakes {
    async fn start() -> Self {
        let linear = FakeLinear::start().await;
        linear.add_issue(Issue {
            id: ISSUE.to_owned(),
            identifier: "ENG-412".to_owned(),
            title: "Retry failed Stripe webhooks with exponential backoff".to_owned(),
            description: format!("repo: {REPO}"),
            labels: vec!["pi-dev:autonomous".to_owned()],
            state: "st-todo".to_owned(),
            states: default_states(),
            updated_at: "2026-11-29T10:15:03.120Z".to_owned(),
            team: "ENG".to_owned(),
        });
        Self {
            github: FakeGithub::start().await,
            linear,
            telegram: FakeTelegram::start().await,
        }
    }
}

/// The `issue.create` fixture for our repository, fresh.
fn linear_issue_created() -> Vec<u8> {
    let path = crate::common::fixtures_dir().join("linear/issue.create.json");
    let mut body: Value = serde_json::from_slice(&crate::common::linear_body_at(&path, 0)).unwrap();
    body["data"]["description"] = json!(format!(
        "Our Stripe webhook handler drops events.\n\nrepo: {REPO}\n\nDone when: retried with backoff."
    ));
    serde_json::to_vec(&body).unwrap()
}

fn github_fixture(path: &str) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(crate::common::fixtures_dir().join("github").join(path)).unwrap(),
    )
    .unwrap()
}

fn check_suite_failed(branch: &str, sha: &str) -> Value {
    let mut body = github_fixture("check_suite/completed.payload.json");
    body["check_suite"]["head_branch"] = json!(branch);
    body["check_suite"]["head_sha"] = json!(sha);
    body["check_suite"]["conclusion"] = json!("failure");
    body["repository"]["full_name"] = json!(REPO);
    body
}

/// The merge of pull request `number`, the one pidevops opened in `REPO` (reactions check all of it).
fn merged(branch: &str, number: u64) -> Value {
    let mut body = github_fixture("pull_request/closed.payload.json");
    body["pull_request"]["head"]["ref"] = json!(branch);
    body["pull_request"]["merged"] = json!(true);
    body["pull_request"]["number"] = json!(number);
    body["pull_request"]["head"]["repo"]["full_name"] = json!(REPO);
    body["pull_request"]["base"]["repo"]["full_name"] = json!(REPO);
    body["repository"]["full_name"] = json!(REPO);
    body
}

/// Posts a signed webhook to the server at `base`.
async fn post(base: &str, source: &str, event: Option<&str>, body: &[u8]) {
    let client = reqwest::Client::new();
    let mut request = client
        .post(format!("{base}/webhooks/{source}"))
        .header("content-type", "application/json")
        .body(body.to_vec());
    request = match event {
        Some(event) => request
            .header("x-github-event", event)
            .header("x-github-delivery", uuid::Uuid::new_v4().to_string())
            .header(
                "x-hub-signature-256",
                sign_github(GITHUB_SECRET.as_bytes(), body),
            ),
        None => request.header(
            "linear-signature",
            sign_linear(LINEAR_SECRET.as_bytes(), body),
        ),
    };
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200, "{source} {event:?}");
}

async fn task_of_issue(store: &EventStore) -> Option<TaskId> {
    let rows = task_rows::list(store, &Default::default()).await.unwrap();
    rows.into_iter()
        .find(|r| {
            r.links
                .get(LINEAR_ISSUE)
                .is_some_and(|l| l.id().to_string() == ISSUE)
        })
        .map(|r| r.id)
}

async fn ended_runs(store: &EventStore, id: TaskId, n: usize) -> Vec<RunRow> {
    within(
        Duration::from_secs(60),
        &format!("{n} runs of {id} ended"),
        || async {
            let runs = runs::query(store, Which::Task(&id.to_string()))
                .await
                .unwrap();
            runs.len() == n && runs.iter().all(|r| r.state != "running")
        },
    )
    .await;
    runs::query(store, Which::Task(&id.to_string()))
        .await
        .unwrap()
}

fn prompt_of(run: &RunRow) -> String {
    let log = Path::new(run.log_path.as_deref().unwrap());
    std::fs::read_to_string(log.with_file_name("prompt.md")).unwrap()
}

/// Drives the flow against the server at `base` (whose store is `store`), from the Linear webhook to the merge.
/// `restart` is called once, when the first pull request has been asked for, and returns the new base URL.
/// `killed`: `restart` SIGKILLs serve (a call in flight then may be cut off).
async fn the_flow<F, Fut>(base: String, store: &EventStore, fakes: &Fakes, killed: bool, restart: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = String>,
{
    let mut base = base;
    post(&base, "linear", None, &linear_issue_created()).await;
    within(
        Duration::from_secs(10),
        "the Linear issue's task",
        || async { task_of_issue(store).await.is_some() },
    )
    .await;
    let id = task_of_issue(store).await.unwrap();
    let branch = id.branch().as_str().to_owned();

    within(
        Duration::from_secs(60),
        "the pull request asked for",
        || async { !fakes.github.pulls_opened().is_empty() },
    )
    .await;
    base = restart().await;

    within(
        Duration::from_secs(60),
        "the first attempt in review with its pull request",
        || async {
            let row = board::row_in(store, id).await.unwrap();
            row.column == Column::InReview && row.links.has(GITHUB_PR)
        },
    )
    .await;
    let first = ended_runs(store, id, 1).await;
    let first_sha = first[0].commit_sha.clone().unwrap();
    within(
        Duration::from_secs(20),
        "Linear's issue In Review",
        || async { fakes.linear.state_of(ISSUE).as_deref() == Some("In Review") },
    )
    .await;
    // Told when the pull request's opening is recorded: after a SIGKILL, by the restarted serve once GitHub's late
    // answer is settled, as the Telegram notice below.
    within(
        Duration::from_secs(60),
        "Linear told of the pull request",
        || async {
            fakes
                .linear
                .comments()
                .iter()
                .any(|(_, b)| b.contains("is ready for review in [the pull request]"))
        },
    )
    .await;
    // The review's Telegram notice is asked for with the pull request, so a SIGKILL may cut it off in flight:
    // Telegram has no idempotency key, so that one is recorded in doubt and never sent (at most once); without a
    // kill it is always sent.
    within(
        Duration::from_secs(60),
        "Telegram told of the review",
        || async {
            fakes
                .telegram
                .sent()
                .iter()
                .any(|m| m.text.contains("ready for review") && m.chat == CHAT)
                || (killed && review_notice_in_doubt(store).await)
        },
    )
    .await;
    let pulls = fakes.github.pulls_opened();
    assert_eq!(pulls.len(), 1);
    let (repo, _, head, base_branch, title, body) = &pulls[0];
    assert_eq!(
        (repo.as_str(), head.as_str(), base_branch.as_str()),
        (REPO, branch.as_str(), "main")
    );
    assert!(title.contains("Retry failed Stripe webhooks"), "{title}");
    assert!(body.contains("From: Linear ENG-412"), "{body}");
    // The description's directives are read, not repeated: "Done when" once, no `repo:` line in the Scope.
    assert_eq!(body.matches("retried with backoff").count(), 1, "{body}");
    assert!(!body.contains(&format!("repo: {REPO}")), "{body}");
    assert!(fakes
        .linear
        .comments()
        .iter()
        .any(|(_, b)| b.contains(&format!("started work on this as **{id}**"))));

    // CI fails on the pushed commit: back to the agent, with the failure in the prompt.
    let suite = check_suite_failed(&branch, &first_sha);
    post(
        &base,
        "github",
        Some("check_suite"),
        suite.to_string().as_bytes(),
    )
    .await;
    let runs = ended_runs(store, id, 2).await;
    let prompt = prompt_of(&runs[1]);
    assert!(
        prompt.contains(&format!("CI failed on {}", &first_sha[..7])),
        "{prompt}"
    );
    assert_eq!(
        prompt.matches("retried with backoff").count(),
        1,
        "{prompt}"
    );
    let second_sha = runs[1].commit_sha.clone().unwrap();
    assert_ne!(first_sha, second_sha);
    within(
        Duration::from_secs(30),
        "the second attempt in review",
        || async { board::row_in(store, id).await.unwrap().column == Column::InReview },
    )
    .await;

    // Merged: done, and Linear's issue Done.
    post(
        &base,
        "github",
        Some("pull_request"),
        merged(&branch, pulls[0].1).to_string().as_bytes(),
    )
    .await;
    within(Duration::from_secs(30), "done everywhere", || async {
        board::row_in(store, id).await.unwrap().column == Column::Done
            && fakes.linear.state_of(ISSUE).as_deref() == Some("Done")
            && fakes
                .linear
                .comments()
                .iter()
                .any(|(_, b)| b.contains(&format!("**{id}** is done")))
            && fakes
                .telegram
                .sent()
                .iter()
                .any(|m| m.text.contains("✅") && m.text.contains(&id.to_string()))
    })
    .await;
    assert_eq!(fakes.github.pulls_opened().len(), 1, "one pull request");
    assert_eq!(board::row_in(store, id).await.unwrap().attempts, 2);
    // Count once every effect asked for has its outcome.
    within(Duration::from_secs(30), "every effect settled", || async {
        unsettled_effects(store).await.is_empty()
    })
    .await;
    the_receipt_holds(store, id).await;
}

/// The done task's receipt names the delivery that caused it, both attempts' runs and the merge, each line backed
/// by the chain; a line changed by hand, or a head the log does not end at, is refused.
async fn the_receipt_holds(store: &EventStore, id: TaskId) {
    use pidevops::projectors::tasks::receipt::{issue, ReceiptCheck, ReceiptError};
    let receipt = issue(store, id).await.expect("a receipt");
    let types: Vec<&str> = receipt
        .lines
        .iter()
        .map(|l| l.event_type.as_str())
        .collect();
    for wanted in [
        "linear.Issue.create",
        "task.created",
        "task.started",
        "task.completed",
    ] {
        assert!(types.contains(&wanted), "no {wanted} line: {types:?}");
    }
    assert_eq!(
        types.iter().filter(|t| **t == "task.started").count(),
        2,
        "{types:?}"
    );
    assert!(
        types.iter().any(|t| t.starts_with("run.")),
        "no run line: {types:?}"
    );
    assert!(receipt
        .lines
        .iter()
        .all(|l| l.content_hash.len() == 64 && l.chain_hash.len() == 64));
    let check = |receipt: pidevops::projectors::tasks::receipt::Receipt| async move {
        let mut check = ReceiptCheck::new(&receipt).unwrap();
        store.each_chained(|e| Ok(check.feed(&e))).await.unwrap();
        check.finish()
    };
    assert_eq!(check(receipt.clone()).await.unwrap(), receipt.lines.len());
    let mut altered = receipt.clone();
    altered.lines[1]
        .summary
        .push_str(" (and approved by the CEO)");
    match check(altered).await {
        Err(ReceiptError::Refused(why)) => {
            assert!(why.starts_with("line 2 does not match"), "{why}")
        }
        other => panic!("an altered line was not refused: {other:?}"),
    }
    let mut rewritten = receipt.clone();
    rewritten.head.chain_hash = "00".repeat(32);
    match check(rewritten).await {
        Err(ReceiptError::Refused(why)) => assert!(why.contains("was rewritten"), "{why}"),
        other => panic!("a head the log does not end at was not refused: {other:?}"),
    }
}

/// Whether the review's Telegram notice was cut off in flight and recorded in doubt (not sent, never repeated).
async fn review_notice_in_doubt(store: &EventStore) -> bool {
    let events = store.read_after(0, 100_000).await.unwrap();
    let bodies: Vec<Value> = events
        .iter()
        .filter_map(|e| serde_json::from_slice::<Value>(&e.body).ok())
        .collect();
    bodies
        .iter()
        .filter(|b| {
            b["type"] == "requested"
                && b["action"] == "telegram_send"
                && b["html"]
                    .as_str()
                    .is_some_and(|h| h.contains("ready for review"))
        })
        .any(|requested| {
            bodies.iter().any(|b| {
                b["type"] == "failed"
                    && b["key"] == requested["key"]
                    && b["retry_at"].is_null()
                    && b["error"]
                        .as_str()
                        .is_some_and(|e| e.starts_with("in doubt"))
            })
        })
}

/// Keys of the effects asked for that have no final outcome yet (succeeded, withheld, or failed for good).
async fn unsettled_effects(store: &EventStore) -> Vec<String> {
    let mut open = std::collections::BTreeSet::new();
    for event in store.read_after(0, 100_000).await.unwrap() {
        let Ok(body) = serde_json::from_slice::<Value>(&event.body) else {
            continue;
        };
        let Some(key) = body["key"].as_str().map(str::to_owned) else {
            continue;
        };
        match event.event_type.as_str() {
            "effect.requested" => {
                open.insert(key);
            }
            "effect.succeeded" | "effect.withheld" => {
                open.remove(&key);
            }
            "effect.failed" if body["retry_at"].is_null() => {
                open.remove(&key);
            }
            _ => {}
        }
    }
    open.into_iter().collect()
}

/// Where a SIGKILL cut the flow: how many calls Linear had seen, and the keys of the effects recorded as
/// succeeded by then.
struct Cut {
    linear_calls: usize,
    succeeded: Vec<String>,
}

impl Cut {
    async fn now(fakes: &Fakes, store: &EventStore) -> Self {
        let succeeded = store
            .read_after(0, 10_000)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.event_type == "effect.succeeded")
            .filter_map(|e| serde_json::from_slice::<Value>(&e.body).ok())
            .filter_map(|b| b["key"].as_str().map(str::to_owned))
            .collect();
        Cut {
            linear_calls: fakes.linear.calls().len(),
            succeeded,
        }
    }

    /// A Linear entity asked for once before the kill and once after is a call cut off in flight, repeated under
    /// its own id (Linear refuses the copy, the restarted serve finds the entity): allowed only when its effect
    /// had not been recorded as succeeded before the kill.
    fn allows_repeat(&self, id: &str, calls: &[usize]) -> bool {
        let recorded = self
            .succeeded
            .iter()
            .any(|key| pidevops::providers::linear::entity_id(key).to_string() == id);
        matches!(calls, [before, after] if *before < self.linear_calls && *after >= self.linear_calls)
            && !recorded
    }
}

/// Every call that creates something on a fake was made once; with a `cut`, a Linear call cut off in flight by the
/// kill may be made again under its own id, once.
fn assert_no_call_made_twice(fakes: &Fakes, cut: Option<&Cut>) {
    let pull_creates = fakes
        .github
        .calls()
        .iter()
        .filter(|c| c.method == "POST" && c.path.ends_with("/pulls"))
        .count();
    assert_eq!(pull_creates, 1, "POST /pulls once");
    let mut created: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (index, call) in fakes.linear.calls().iter().enumerate() {
        if call.op == "commentCreate" || call.op == "agentActivityCreate" {
            created
                .entry(call.variables["input"]["id"].as_str().unwrap().to_owned())
                .or_default()
                .push(index);
        }
    }
    assert!(!created.is_empty());
    let repeated: Vec<_> = created
        .iter()
        .filter(|(id, calls)| {
            calls.len() > 1 && !cut.is_some_and(|cut| cut.allows_repeat(id, calls))
        })
        .collect();
    assert!(
        repeated.is_empty(),
        "a Linear comment was asked for twice: {repeated:?}"
    );
    let texts: Vec<String> = fakes
        .telegram
        .sent()
        .iter()
        .map(|m| m.text.clone())
        .collect();
    let mut unique = texts.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        texts.len(),
        "a Telegram message sent twice: {texts:#?}"
    );
    // A state move cut off in flight by the kill is made again once, right after the restart.
    let calls = fakes.linear.calls();
    let moves_of = |calls: &[crate::providers::linear::fake::Call]| -> Vec<String> {
        calls
            .iter()
            .filter(|c| c.op == "issueUpdate")
            .map(|c| c.variables["input"]["stateId"].as_str().unwrap().to_owned())
            .collect()
    };
    let mut moves = moves_of(&calls);
    if let Some(cut) = cut {
        let (before, after) = calls.split_at(cut.linear_calls.min(calls.len()));
        let (before, mut after) = (moves_of(before), moves_of(after));
        if before.last().is_some() && before.last() == after.first() {
            after.remove(0);
        }
        moves = before.into_iter().chain(after).collect();
    }
    assert_eq!(
        moves,
        [
            "st-progress",
            "st-review",
            "st-progress",
            "st-review",
            "st-done"
        ],
        "each state move once, in order"
    );
}

async fn a_linear_issue_becomes_a_merged_pull_request_and_everyone_hears(db: TestDb) {
    let fakes = Fakes::start().await;
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let script = agent(scratch.path(), "edits.sh", "date +%s%N > CHANGES.md");
    let mut settings = crate::common::settings(&db);
    settings.file =
        pidevops::config::FileConfig::try_from(dispatch_file(&remote, &script, "")).unwrap();
    settings.workspace_root = scratch.path().join("ws");
    fakes.github.point_settings(&mut settings, GITHUB_TOKEN);
    fakes.linear.point_settings(&mut settings, LINEAR_KEY);
    fakes.telegram.point_settings(&mut settings, BOT_TOKEN);
    settings
        .providers
        .set("TELEGRAM_ALLOWED_CHATS", Some(&CHAT.to_string()))
        .unwrap();
    let app = TestApp::spawn(settings).await;
    let base = app.url("");
    let store = app.state.log.store().clone();
    the_flow(base.clone(), &store, &fakes, false, || async { base }).await;
    assert_no_call_made_twice(&fakes, None);
    let (status, health) = app.health().await;
    assert_eq!(status, 200, "{health}");
    app.stop().await;
}

/// The real binary, SIGKILLed while GitHub is opening the pull request (GitHub acts, the answer never arrives),
/// then restarted: the flow completes and every fake saw each call once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_in_the_middle_of_the_flow_makes_no_call_to_a_fake_twice() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let fakes = Fakes::start().await;
    // GitHub opens the pull request, then answers only after serve is dead.
    fakes
        .github
        .fail_next(Method::POST, Failure::AnswerLate(Duration::from_secs(5)));
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let script = agent(scratch.path(), "edits.sh", "date +%s%N > CHANGES.md");
    let config = scratch.path().join("pidevops.toml");
    std::fs::write(
        &config,
        toml::to_string(&dispatch_file(&remote, &script, "")).unwrap(),
    )
    .unwrap();
    let workspaces = scratch.path().join("ws").display().to_string();
    let config = config.display().to_string();
    let chat = CHAT.to_string();
    let env: Vec<(&str, &str)> = vec![
        ("PIDEVOPS_CONFIG", &config),
        ("WORKSPACE_ROOT", &workspaces),
        ("PIDEVOPS_INSTANCE_ID", "replica-a"),
        ("PIDEVOPS_LOOP_STARTUP_DELAY_S", "0.05"),
        ("PIDEVOPS_PROJECTOR_INTERVAL_S", "0.2"),
        ("LINEAR_WEBHOOK_SECRET", LINEAR_SECRET),
        ("TELEGRAM_WEBHOOK_SECRET", TELEGRAM_SECRET),
        ("GITHUB_TOKEN", GITHUB_TOKEN),
        ("GITHUB_API_URL", &fakes.github.url),
        ("LINEAR_API_KEY", LINEAR_KEY),
        ("LINEAR_API_URL", &fakes.linear.url),
        ("TELEGRAM_BOT_TOKEN", BOT_TOKEN),
        ("TELEGRAM_API_URL", &fakes.telegram.url),
        ("TELEGRAM_ALLOWED_CHATS", &chat),
    ];
    let store = EventStore::connect(&db.url, 4).await.unwrap();
    let mut first = Server::start_with(&db.url_string(), &env).await;
    let base = first.base.clone();
    let dir = first.workdir.path().to_owned();
    let second: std::sync::Arc<std::sync::Mutex<Option<Server>>> = Default::default();
    let holder = second.clone();
    let db_url = db.url_string();
    let env_for_restart = env.clone();
    let cut: std::sync::Arc<tokio::sync::Mutex<Option<Cut>>> = Default::default();
    let (cut_at_kill, store_at_kill, fakes_at_kill) = (cut.clone(), store.clone(), &fakes);
    the_flow(base, &store, &fakes, true, || async move {
        first.child.kill().unwrap();
        first.child.wait().unwrap();
        *cut_at_kill.lock().await = Some(Cut::now(fakes_at_kill, &store_at_kill).await);
        let log = read_log(&dir);
        assert!(!log.contains("panicked"), "{log}");
        let server = Server::start_with(&db_url, &env_for_restart).await;
        let base = server.base.clone();
        *holder.lock().unwrap() = Some(server);
        base
    })
    .await;
    assert_no_call_made_twice(&fakes, cut.lock().await.as_ref());
    // The pull request was found open after the restart, not opened again.
    let opened: Vec<Value> = store
        .read_after(0, 10_000)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event_type == "effect.succeeded")
        .filter_map(|e| serde_json::from_slice::<Value>(&e.body).ok())
        .filter(|b| b["produced"]["kind"] == "pull_request")
        .collect();
    assert_eq!(opened.len(), 1, "{opened:#?}");
    assert_eq!(
        opened[0]["produced"]["opened"], false,
        "the repeat after the crash found the pull request GitHub had opened"
    );
    drop(second.lock().unwrap().take());
}
