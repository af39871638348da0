//! Auto-land (`[repos."o/n"] land = "auto"`) through the real app: a real agent run pushes, effects:github opens
//! the pull request on the fake GitHub, and signed webhooks bring the check results and reviews. Once the
//! required check passed on the commit pidevops pushed and a trusted person approved that commit, the pull
//! request is merged exactly once with the repository's allowed method; a redelivery or another approval merges
//! nothing more, and GitHub's merged webhook completes the task. Untrusted, own-account, fork and stale
//! approvals, checks of older commits and `land = "manual"` never merge. And the real binary, SIGKILLed
//! between GitHub's merge and its record, merges once in total and records the effect as succeeded after the
//! restart. Per backend.

use pidevops::tasks::GITHUB_PR;
use std::time::Duration;

use crate::common::agents::{agent, dispatch_file, Remote, REPO};
use crate::common::board;
use crate::common::killed::{kill, said_no_panic, Serve};
use crate::common::{within, TestApp, TestDb, ADMIN_TOKEN, GITHUB_SECRET};
use crate::providers::github::fake::FakeGithub;
use pidevops::eventlog::EventStore;
use pidevops::projectors::runs::{self, Which};
use pidevops::providers::github::webhook::sign_github;
use pidevops::tasks::{Column, TaskId};
use serde_json::{json, Value};

per_backend!(
    a_passing_check_and_a_trusted_approval_merge_the_pull_request_once,
    strangers_our_own_account_forks_older_commits_and_manual_repositories_never_merge,
    sigkill_between_the_merge_and_its_record_merges_once_and_records_it,
);

use crate::common::dispatching::GITHUB_TOKEN;
/// pidevops's own GitHub account (`[intake.github] bot_login`).
const BOT: &str = "pidevops-bot";
/// A second repository, landed by people.
const MANUAL_REPO: &str = "acme/site";

/// `pidevops.toml`: dispatch to `remote` with an agent that changes a file each run, `REPO` landed by pidevops
/// after one approval and the `ci` check, and (with `manual`) `MANUAL_REPO` at `manual` with the same rules.
pub(crate) fn config(
    remote: &Remote,
    script: &std::path::Path,
    manual: Option<&Remote>,
) -> toml::Table {
    let mut file = dispatch_file(remote, script, "");
    let rules = |table: &mut toml::Table, land: &str| {
        // A local remote stands in for GitHub (the fake API opens the pull requests): said outright.
        table.insert("forge".into(), "github".into());
        table.insert("land".into(), land.into());
        table.insert("approvals".into(), 1.into());
        table.insert(
            "required_checks".into(),
            toml::Value::Array(vec!["ci".into()]),
        );
    };
    let repos = file["repos"].as_table_mut().unwrap();
    rules(repos[REPO].as_table_mut().unwrap(), "auto");
    if let Some(other) = manual {
        let mut table = toml::Table::new();
        table.insert("url".into(), other.url().into());
        // Like `REPO` (dispatch_file's): this suite is about landing, not scopes.
        table.insert("scope".into(), "off".into());
        rules(&mut table, "manual");
        repos.insert(MANUAL_REPO.into(), table.into());
    }
    let mut github = toml::Table::new();
    github.insert("bot_login".into(), BOT.into());
    let mut intake = toml::Table::new();
    intake.insert("github".into(), github.into());
    file.insert("intake".into(), intake.into());
    file
}

/// The app with the fake GitHub and the agent; the workspace and the agent script live in `scratch`.
pub(crate) async fn app(
    db: &TestDb,
    fake: &FakeGithub,
    file: toml::Table,
    scratch: &std::path::Path,
) -> TestApp {
    TestApp::dispatching_github(db, file, &scratch.join("ws"), Some(fake)).await
}

pub(crate) fn edits(scratch: &std::path::Path) -> std::path::PathBuf {
    agent(scratch, "edits.sh", "date +%s%N > CHANGES.md")
}

/// A signed GitHub webhook to the server at `base`; `delivery` names it (the same one is a redelivery).
pub(crate) async fn post(base: &str, event: &str, delivery: &str, body: &Value) -> Value {
    let bytes = body.to_string().into_bytes();
    let response = reqwest::Client::new()
        .post(format!("{base}/webhooks/github"))
        .header("content-type", "application/json")
        .header("x-github-event", event)
        .header("x-github-delivery", delivery)
        .header(
            "x-hub-signature-256",
            sign_github(GITHUB_SECRET.as_bytes(), &bytes),
        )
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{event}");
    response.json().await.unwrap()
}

pub(crate) async fn api(
    base: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Value {
    let mut request = reqwest::Client::new()
        .request(method, format!("{base}{path}"))
        .bearer_auth(ADMIN_TOKEN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    assert!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
    response.json().await.unwrap()
}

/// A task for `repo` through the API (`[board] approval = "auto"`: straight to the dispatcher).
pub(crate) async fn create_task(base: &str, repo: &str) -> TaskId {
    let body = json!({ "repo": repo, "spec": { "task": "Fix the login redirect", "scope": "src/auth", "done_when": "CI is green" } });
    let created = api(base, reqwest::Method::POST, "/api/tasks", Some(body)).await;
    created["task"]["id"].as_str().unwrap().parse().unwrap()
}

use crate::providers::github::gh_fixture as fixture;

/// `check_run.completed` for check `name` on `sha` of `task`'s branch in `repo`.
pub(crate) fn check_run(
    repo: &str,
    task: TaskId,
    sha: &str,
    name: &str,
    conclusion: &str,
) -> Value {
    let mut body = fixture("check_run/completed.payload.json");
    body["check_run"]["check_suite"]["head_branch"] = json!(task.branch().as_str());
    body["check_run"]["check_suite"]["head_sha"] = json!(sha);
    body["check_run"]["head_sha"] = json!(sha);
    body["check_run"]["name"] = json!(name);
    body["check_run"]["conclusion"] = json!(conclusion);
    body["repository"]["full_name"] = json!(repo);
    body
}

/// A review by `login` (`association` on the repository) of commit `sha` on pull request `number` of `task`'s
/// branch in `repo`, from the repository itself unless `head_repo` says otherwise (a fork).
#[derive(Clone, Copy)]
struct Review<'a> {
    repo: &'a str,
    task: TaskId,
    number: u64,
    sha: &'a str,
    login: &'a str,
    association: &'a str,
    state: &'a str,
    head_repo: &'a str,
}

impl Review<'_> {
    fn body(&self) -> Value {
        let mut body = fixture("pull_request_review/submitted.payload.json");
        let pr = &mut body["pull_request"];
        pr["number"] = json!(self.number);
        pr["head"]["ref"] = json!(self.task.branch().as_str());
        pr["head"]["sha"] = json!(self.sha);
        pr["head"]["repo"]["full_name"] = json!(self.head_repo);
        pr["base"]["repo"]["full_name"] = json!(self.repo);
        let review = &mut body["review"];
        review["state"] = json!(self.state);
        review["commit_id"] = json!(self.sha);
        review["user"]["login"] = json!(self.login);
        review["author_association"] = json!(self.association);
        body["repository"]["full_name"] = json!(self.repo);
        body
    }
}

/// GitHub's `pull_request.closed` for the merged pull request `number` of `task`.
pub(crate) fn merged(task: TaskId, number: u64) -> Value {
    let mut body = fixture("pull_request/closed.payload.json");
    let pr = &mut body["pull_request"];
    pr["number"] = json!(number);
    pr["merged"] = json!(true);
    // A whole user, as GitHub sends it: the sender's, named BOT.
    let mut by = body["sender"].clone();
    by["login"] = json!(BOT);
    let pr = &mut body["pull_request"];
    pr["merged_by"] = by;
    pr["head"]["ref"] = json!(task.branch().as_str());
    pr["head"]["repo"]["full_name"] = json!(REPO);
    pr["base"]["repo"]["full_name"] = json!(REPO);
    body["repository"]["full_name"] = json!(REPO);
    body
}

/// Waits until `id` is in review with its pull request linked and `attempts` runs ended; returns the pull
/// request's number and the commit the last run pushed.
pub(crate) async fn in_review(store: &EventStore, id: TaskId, attempts: usize) -> (u64, String) {
    within(
        Duration::from_secs(90),
        &format!("{id} in review after attempt {attempts}, its pull request linked"),
        || async {
            let ended = runs::query(store, Which::Task(&id.to_string()))
                .await
                .unwrap()
                .iter()
                .filter(|r| r.state != "running")
                .count();
            board::row_in(store, id).await.is_some_and(|r| {
                r.column == Column::InReview
                    && r.links.has(GITHUB_PR)
                    && r.attempts == attempts as i64
            }) && ended == attempts
        },
    )
    .await;
    let row = board::row_in(store, id).await.unwrap();
    let number = row.links.get(GITHUB_PR).unwrap().number.get();
    let runs = runs::query(store, Which::Task(&id.to_string()))
        .await
        .unwrap();
    let sha = runs
        .iter()
        .max_by_key(|r| r.attempt)
        .and_then(|r| r.commit_sha.clone())
        .unwrap();
    (number, sha)
}

/// Reactions, the merge queue (where it is armed: it reads the tasks in review), then effects:github, each until
/// it has handled the whole log.
pub(crate) async fn settle(app: &TestApp) {
    app.drive("reactions").await;
    if app.loops.names().any(|name| name == "merge_queue") {
        app.project().await;
        app.drive("merge_queue").await;
    }
    app.drive("effects:github").await;
    app.project().await;
}

/// The bodies of the events of `stream`, in order.
async fn stream(store: &EventStore, name: &str) -> Vec<Value> {
    store
        .read_stream(name)
        .await
        .unwrap()
        .iter()
        .map(|e| {
            let mut body: Value = serde_json::from_slice(&e.body).unwrap();
            body["event_type"] = json!(e.event_type);
            body
        })
        .collect()
}

async fn a_passing_check_and_a_trusted_approval_merge_the_pull_request_once(db: TestDb) {
    let fake = FakeGithub::start().await;
    // The repository does not allow squash merges: pidevops asks GitHub and merges with a merge commit.
    fake.set_merge_methods(REPO, false, true, true);
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let file = config(&remote, &edits(scratch.path()), None);
    let app = app(&db, &fake, file, scratch.path()).await;
    let (base, store) = (app.url(""), app.state.log.store().clone());
    let id = create_task(&base, REPO).await;
    let (number, sha) = in_review(&store, id, 1).await;
    fake.set_head(REPO, number, &sha);

    // CI passed: one approval is still missing, and the task says so.
    let ci = check_run(REPO, id, &sha, "ci", "success");
    post(&base, "check_run", "ci-1", &ci).await;
    settle(&app).await;
    assert!(fake.merge_calls().is_empty(), "no approval yet");
    let shown = api(
        &base,
        reqwest::Method::GET,
        &format!("/api/tasks/{id}"),
        None,
    )
    .await;
    assert_eq!(
        shown["landing"],
        json!({ "land": "auto", "ready": false, "waiting_for": "0 of 1 approvals" }),
        "{shown}"
    );
    assert_eq!(shown["task"]["landing"]["head"], json!(sha));
    assert_eq!(shown["task"]["landing"]["checks_passed"], json!(["ci"]));

    // A trusted person approves the pushed commit: merged once, at that commit, with the allowed method.
    let approval = Review {
        repo: REPO,
        task: id,
        number,
        sha: &sha,
        login: "octocat",
        association: "OWNER",
        state: "approved",
        head_repo: REPO,
    };
    post(&base, "pull_request_review", "review-1", &approval.body()).await;
    settle(&app).await;
    let calls = fake.merge_calls();
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert_eq!(calls[0].path, format!("/repos/{REPO}/pulls/{number}/merge"));
    assert_eq!(calls[0].body["sha"], json!(sha));
    assert_eq!(calls[0].body["merge_method"], json!("merge"));
    assert!(calls[0]
        .authorization
        .as_deref()
        .unwrap()
        .contains(GITHUB_TOKEN));
    assert!(fake.is_merged(REPO, number));
    let key = format!("effect:github:merge:{id}:{sha}");
    let effect = stream(&store, &key).await;
    let kinds: Vec<&str> = effect
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["effect.requested", "effect.started", "effect.succeeded"]
    );
    assert_eq!(effect[2]["produced"]["merged"], json!(true));
    assert_eq!(effect[2]["produced"]["method"], json!("merge"));

    // The same delivery again, the check again under a new delivery, a second approval: nothing more.
    let again = post(&base, "pull_request_review", "review-1", &approval.body()).await;
    assert_eq!(again["duplicate"], json!(true), "{again}");
    post(&base, "check_run", "ci-2", &ci).await;
    let second = Review {
        login: "hubot",
        association: "MEMBER",
        ..approval
    };
    post(&base, "pull_request_review", "review-2", &second.body()).await;
    settle(&app).await;
    assert_eq!(fake.merge_calls().len(), 1, "merged exactly once");
    assert_eq!(stream(&store, &key).await.len(), 3);

    // GitHub's webhook of the merge completes the task, once.
    post(&base, "pull_request", "closed-1", &merged(id, number)).await;
    settle(&app).await;
    assert_eq!(
        board::row_in(&store, id).await.unwrap().column,
        Column::Done
    );
    let completions = app
        .all_events()
        .await
        .iter()
        .filter(|e| e.event_type == "task.completed")
        .count();
    assert_eq!(completions, 1);
    assert_eq!(fake.merge_calls().len(), 1);
    app.stop().await;
}

async fn strangers_our_own_account_forks_older_commits_and_manual_repositories_never_merge(
    db: TestDb,
) {
    let fake = FakeGithub::start().await;
    let (remote, other) = (Remote::new(), Remote::new());
    let scratch = tempfile::tempdir().unwrap();
    let file = config(&remote, &edits(scratch.path()), Some(&other));
    let app = app(&db, &fake, file, scratch.path()).await;
    let (base, store) = (app.url(""), app.state.log.store().clone());
    let id = create_task(&base, REPO).await;
    let manual = create_task(&base, MANUAL_REPO).await;

    // A first attempt whose CI fails: the second attempt's commit is the head, the first's is older.
    let (number, older) = in_review(&store, id, 1).await;
    post(
        &base,
        "check_run",
        "ci-fail",
        &check_run(REPO, id, &older, "ci", "failure"),
    )
    .await;
    let (again, head) = in_review(&store, id, 2).await;
    assert_eq!(
        again, number,
        "one pull request, updated by the second push"
    );
    assert_ne!(head, older);
    fake.set_head(REPO, number, &head);

    let trusted = Review {
        repo: REPO,
        task: id,
        number,
        sha: &head,
        login: "octocat",
        association: "OWNER",
        state: "approved",
        head_repo: REPO,
    };
    let attacks = [
        (
            "a stranger",
            Review {
                login: "mallory",
                association: "CONTRIBUTOR",
                ..trusted
            },
        ),
        (
            "no association",
            Review {
                login: "eve",
                association: "NONE",
                ..trusted
            },
        ),
        (
            "our own account",
            Review {
                login: BOT,
                association: "MEMBER",
                ..trusted
            },
        ),
        (
            "a fork's pull request",
            Review {
                head_repo: "mallory/app",
                ..trusted
            },
        ),
        (
            "another pull request",
            Review {
                number: number + 41,
                ..trusted
            },
        ),
        (
            "the older commit",
            Review {
                sha: &older,
                ..trusted
            },
        ),
    ];
    for (i, (_, review)) in attacks.iter().enumerate() {
        post(
            &base,
            "pull_request_review",
            &format!("attack-{i}"),
            &review.body(),
        )
        .await;
    }
    // CI passing on the older commit is history; on the head it counts.
    post(
        &base,
        "check_run",
        "ci-older",
        &check_run(REPO, id, &older, "ci", "success"),
    )
    .await;
    settle(&app).await;
    let shown = api(
        &base,
        reqwest::Method::GET,
        &format!("/api/tasks/{id}"),
        None,
    )
    .await;
    assert!(shown["task"].get("landing").is_none(), "no fact: {shown}");
    assert_eq!(
        shown["landing"]["waiting_for"],
        json!("0 of 1 approvals; check ci has not passed")
    );
    post(
        &base,
        "check_run",
        "ci-head",
        &check_run(REPO, id, &head, "ci", "success"),
    )
    .await;
    settle(&app).await;
    let shown = api(
        &base,
        reqwest::Method::GET,
        &format!("/api/tasks/{id}"),
        None,
    )
    .await;
    assert_eq!(
        shown["landing"]["waiting_for"],
        json!("0 of 1 approvals"),
        "{shown}"
    );
    assert!(fake.merge_calls().is_empty());
    let ignored: Vec<String> = app
        .all_events()
        .await
        .iter()
        .filter(|e| e.event_type == "reactions.ignored")
        .map(|e| {
            serde_json::from_slice::<Value>(&e.body).unwrap()["reason"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    for needle in [
        "mallory is CONTRIBUTOR",
        "eve is NONE",
        "a fork",
        &format!("not the task's #{number}"),
    ] {
        assert!(
            ignored.iter().any(|r| r.contains(needle)),
            "{needle}: {ignored:#?}"
        );
    }

    // land = "manual": a passed check and a trusted approval, and still people merge.
    let (manual_number, manual_head) = in_review(&store, manual, 1).await;
    fake.set_head(MANUAL_REPO, manual_number, &manual_head);
    let ci = check_run(MANUAL_REPO, manual, &manual_head, "ci", "success");
    post(&base, "check_run", "manual-ci", &ci).await;
    let approval = Review {
        repo: MANUAL_REPO,
        task: manual,
        number: manual_number,
        sha: &manual_head,
        head_repo: MANUAL_REPO,
        ..trusted
    };
    post(
        &base,
        "pull_request_review",
        "manual-review",
        &approval.body(),
    )
    .await;
    settle(&app).await;
    let shown = api(
        &base,
        reqwest::Method::GET,
        &format!("/api/tasks/{manual}"),
        None,
    )
    .await;
    assert_eq!(
        shown["task"]["landing"]["approved_by"],
        json!(["octocat"]),
        "{shown}"
    );
    assert_eq!(
        shown["landing"],
        json!({ "land": "manual", "ready": false, "waiting_for": "land = manual: a person merges" })
    );
    assert!(fake.merge_calls().is_empty(), "{:#?}", fake.merge_calls());
    app.stop().await;
}

/// The real binary, SIGKILLed after GitHub merged and before its answer arrived, then restarted on the same
/// database: the merge endpoint was called once in all, and the effect ends succeeded (the repeat found the
/// pull request merged).
async fn sigkill_between_the_merge_and_its_record_merges_once_and_records_it(db: TestDb) {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let file = config(&remote, &edits(scratch.path()), None);
    let serve = Serve::new(&db, &fake.url, scratch.path(), &file);
    let store = &EventStore::connect(&db.url, 4).await.unwrap();
    let mut first = serve.start().await;
    let id = create_task(&first.base, REPO).await;
    let (number, sha) = in_review(store, id, 1).await;
    fake.set_head(REPO, number, &sha);

    let held = fake.hold_next_merge();
    post(
        &first.base,
        "check_run",
        "ci-1",
        &check_run(REPO, id, &sha, "ci", "success"),
    )
    .await;
    let approval = Review {
        repo: REPO,
        task: id,
        number,
        sha: &sha,
        login: "octocat",
        association: "OWNER",
        state: "approved",
        head_repo: REPO,
    };
    post(
        &first.base,
        "pull_request_review",
        "review-1",
        &approval.body(),
    )
    .await;
    // GitHub merged; its answer is held until serve is dead.
    tokio::time::timeout(Duration::from_secs(90), held.merged)
        .await
        .expect("the merge was asked for")
        .expect("the fake merged");
    kill(&mut first);
    // The fake may have dropped the held answer already, with the connection of the process that died.
    let _ = held.release.send(());
    let key = &format!("effect:github:merge:{id}:{sha}");
    let kinds = |events: &[Value]| -> Vec<String> {
        events
            .iter()
            .map(|e| e["event_type"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        kinds(&stream(store, key).await),
        ["effect.requested", "effect.started"],
        "cut off mid-call"
    );

    let second = serve.start().await;
    within(
        Duration::from_secs(60),
        "the repeat after the restart settled",
        || async move {
            stream(store, key).await.iter().any(|e| {
                e["type"] == "succeeded" || (e["type"] == "failed" && e["retry_at"].is_null())
            })
        },
    )
    .await;
    let effect = stream(store, key).await;
    assert_eq!(
        kinds(&effect),
        [
            "effect.requested",
            "effect.started",
            "effect.started",
            "effect.succeeded"
        ],
        "{effect:#?}"
    );
    assert_eq!(effect[3]["attempt"], json!(2));
    assert_eq!(
        effect[3]["produced"]["merged"],
        json!(false),
        "found merged, not merged again"
    );
    assert_eq!(
        fake.merge_calls().len(),
        1,
        "the merge endpoint was called once in all"
    );

    // GitHub's webhook of the merge completes the task; nothing merges again.
    post(
        &second.base,
        "pull_request",
        "closed-1",
        &merged(id, number),
    )
    .await;
    within(Duration::from_secs(30), "the task done", || async move {
        board::row_in(store, id)
            .await
            .is_some_and(|r| r.column == Column::Done)
    })
    .await;
    assert_eq!(fake.merge_calls().len(), 1);
    said_no_panic(&second);
}
