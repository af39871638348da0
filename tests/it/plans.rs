//! Plans end to end, through the API, signed webhooks, the real dispatcher, real git and real agent processes (shell
//! scripts), with the fake GitHub on loopback: a planner proposes three items, a person approves, two run at the
//! same time, the third waits for both to be merged, and the plan is done with them. A refused plan (overlapping
//! scopes, a cycle) is a failed attempt whose retry prompt says why; a rejection re-plans with the comment; a
//! cancelled dependency flags its dependents; a triage agent's spec is what the approver approves.

use pidevops::tasks::GITHUB_PR;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::agents::{bash_agent, Remote, REPO};
use crate::common::board;
use crate::common::{within, TestApp, TestDb, ADMIN_TOKEN, GITHUB_SECRET};
use crate::providers::github::fake::FakeGithub;
use pidevops::eventlog::StoredEvent;
use pidevops::providers::github::webhook::sign_github;
use pidevops::tasks::{Column, TaskId};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

per_backend!(
    a_plan_of_three_runs_two_at_once_then_the_third_after_both_and_is_done,
    a_plan_with_overlapping_scopes_and_a_cycle_is_refused_with_the_reasons_in_the_retry_prompt,
    a_rejected_plan_is_planned_again_with_the_comment,
    a_cancelled_item_flags_the_items_that_depend_on_it,
);

/// A planner that writes `plan` as `.pidevops/plan.json`.
pub(crate) fn planner(dir: &Path, name: &str, plan: &Value) -> PathBuf {
    bash_agent(
        dir,
        name,
        &format!(
            "mkdir -p .pidevops\ncat > .pidevops/plan.json <<'JSON'\n{}\nJSON",
            serde_json::to_string_pretty(plan).unwrap()
        ),
    )
}

pub(crate) fn item(id: &str, scope: &[&str], depends_on: &[&str]) -> Value {
    json!({
        "id": id,
        "title": format!("Part {}", id.to_uppercase()),
        "task": format!("Write {id}/done.txt"),
        "scope": scope,
        "done_when": format!("{id}/done.txt exists"),
        "depends_on": depends_on,
    })
}

/// Two independent items and one that depends on both.
pub fn three_items() -> Value {
    json!({"version": 1, "summary": "three parts", "items": [
        item("a", &["a/**"], &[]),
        item("b", &["b/**"], &[]),
        item("c", &["c/**"], &["a", "b"]),
    ]})
}

/// A planner's run on plan `id` that proposes `plan`, recorded as the dispatcher would (for tests about what
/// follows a proposal, with no agent to run).
pub async fn propose(board: &pidevops::board::Board, id: TaskId, plan: &Value) {
    use pidevops::tasks::plan::PlanDocument;
    use pidevops::tasks::{Command, RunId};
    let document = PlanDocument::parse(
        plan.to_string().as_bytes(),
        &pidevops::config::plans::PlansConfig::default().limits(),
    )
    .unwrap_or_else(|e| panic!("a valid plan: {e:?}"));
    let run = RunId(uuid::Uuid::now_v7());
    for command in [
        Command::Start { run },
        Command::ProposePlan {
            run,
            plan: Box::new(document),
        },
    ] {
        board
            .execute(id, &command, "test")
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", command.name()));
    }
}

/// `pidevops.toml`: the planner and worker profiles, plans approved by a person, items dispatched four at once.
pub(crate) fn config(remote: &Remote, planner: &Path, worker: &Path) -> toml::Table {
    format!(
        r#"
        [board]
        approval = "manual"

        [dispatch]
        agent = "worker"
        planner = "planner"
        max_concurrent = 4
        per_repo = 4
        heartbeat_s = 0.3
        retry_backoff_s = 0.05

        [agents.worker]
        command = ["{worker}", "{{prompt_file}}"]
        # The items meet at a TCP barrier on the host's loopback (a test device, not egress): the worker keeps
        # the host's network.
        network = "host"

        [agents.planner]
        command = ["{planner}", "{{prompt_file}}"]

        [repos."{REPO}"]
        url = "{url}"
        "#,
        worker = worker.display(),
        planner = planner.display(),
        url = remote.url(),
    )
    .parse()
    .unwrap()
}

pub(crate) async fn spawn(
    db: &TestDb,
    file: toml::Table,
    root: &Path,
    github: Option<&FakeGithub>,
) -> TestApp {
    TestApp::dispatching_github(db, file, root, github).await
}

pub(crate) async fn api(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = app
        .client
        .request(method, app.url(path))
        .bearer_auth(ADMIN_TOKEN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

pub(crate) async fn new_plan(app: &TestApp, goal: &str) -> TaskId {
    let (status, body) = api(
        app,
        reqwest::Method::POST,
        "/api/plans",
        Some(json!({"repo": REPO, "goal": goal, "done_when": "the three parts exist"})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    body["task"]["id"].as_str().unwrap().parse().unwrap()
}

pub(crate) async fn plan_of(app: &TestApp, id: TaskId) -> Value {
    let (status, body) = api(app, reqwest::Method::GET, &format!("/api/plans/{id}"), None).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Waits until the plan's proposal waits in triage, and returns the plan.
pub(crate) async fn proposed(app: &TestApp, id: TaskId) -> Value {
    within(Duration::from_secs(60), "the plan proposed", || async {
        let plan = plan_of(app, id).await;
        plan["plan"]["column"] == "triage" && !plan["plan"]["plan"]["proposal"].is_null()
    })
    .await;
    plan_of(app, id).await
}

/// The items of an approved plan, once all are made and on the board.
pub(crate) async fn items_of(app: &TestApp, id: TaskId, n: usize) -> Vec<TaskId> {
    within(Duration::from_secs(30), "the plan's items made", || async {
        plan_of(app, id).await["items"].as_array().map(Vec::len) == Some(n)
    })
    .await;
    plan_of(app, id).await["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap().parse().unwrap())
        .collect()
}

/// A TCP barrier on loopback: each connection says who it is, and none hears "go" until `n` are connected. An
/// agent that waits on it finishes only if the others run at the same time.
async fn barrier(n: usize) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut waiting = Vec::new();
        while waiting.len() < n {
            let (stream, _) = listener.accept().await.unwrap();
            let mut stream = BufReader::new(stream);
            let mut who = String::new();
            stream.read_line(&mut who).await.unwrap();
            waiting.push(stream);
        }
        for mut stream in waiting {
            let _ = stream.get_mut().write_all(b"go\n").await;
        }
    });
    port
}

/// The merge of `branch`'s pull request `number` in `REPO`, signed.
pub(crate) async fn merge(app: &TestApp, branch: &str, number: u64) {
    let mut body: Value = serde_json::from_str(
        &std::fs::read_to_string(
            crate::common::fixtures_dir().join("github/pull_request/closed.payload.json"),
        )
        .unwrap(),
    )
    .unwrap();
    body["pull_request"]["head"]["ref"] = json!(branch);
    body["pull_request"]["merged"] = json!(true);
    body["pull_request"]["number"] = json!(number);
    body["pull_request"]["head"]["repo"]["full_name"] = json!(REPO);
    body["pull_request"]["base"]["repo"]["full_name"] = json!(REPO);
    body["repository"]["full_name"] = json!(REPO);
    let bytes = body.to_string().into_bytes();
    let response = app
        .post_github_signed(
            "pull_request",
            &uuid::Uuid::new_v4().to_string(),
            &bytes,
            &sign_github(GITHUB_SECRET.as_bytes(), &bytes),
        )
        .await;
    assert_eq!(response.status(), 200);
}

/// The pull request pidevops opened for `id`, once the task is linked to it.
pub(crate) async fn pull_request_of(app: &TestApp, id: TaskId) -> u64 {
    within(
        Duration::from_secs(30),
        &format!("{id}'s pull request linked"),
        || async { board::row(app, id).await.links.has(GITHUB_PR) },
    )
    .await;
    board::row(app, id)
        .await
        .links
        .get(GITHUB_PR)
        .unwrap()
        .number
        .get()
}

/// The log position of the first `event_type` in `id`'s stream.
fn position_of(events: &[StoredEvent], id: TaskId, event_type: &str) -> i64 {
    events
        .iter()
        .find(|e| e.stream.as_deref() == Some(id.stream().as_str()) && e.event_type == event_type)
        .unwrap_or_else(|| panic!("{id} has no {event_type}"))
        .position
}

async fn a_plan_of_three_runs_two_at_once_then_the_third_after_both_and_is_done(db: TestDb) {
    let github = FakeGithub::start().await;
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let port = barrier(2).await;
    let planner = planner(scratch.path(), "planner.sh", &three_items());
    let worker = bash_agent(
        scratch.path(),
        "worker.sh",
        &format!(
            r#"part=$(sed -n 's/^Task: Part \(.\)$/\1/p' "$1" | tr A-Z a-z)
if [ "$part" != c ]; then
  exec 3<>/dev/tcp/127.0.0.1/{port}
  echo "$part" >&3
  read -r go <&3
fi
mkdir -p "$part" && echo done > "$part/done.txt""#
        ),
    );
    let app = spawn(
        &db,
        config(&remote, &planner, &worker),
        &scratch.path().join("ws"),
        Some(&github),
    )
    .await;

    let plan = new_plan(&app, "Build the three parts").await;
    let proposal = proposed(&app, plan).await;
    assert_eq!(proposal["plan"]["kind"], "plan");
    assert_eq!(
        proposal["plan"]["plan"]["proposal"]["items"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert!(
        proposal["items"].as_array().unwrap().is_empty(),
        "nothing made before approval"
    );
    // The planner's attempt pushed nothing.
    assert_eq!(remote.branch(&format!("pidevops/{plan}")), None);

    let (status, body) = api(
        &app,
        reqwest::Method::POST,
        &format!("/api/tasks/{plan}/approve"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let items = items_of(&app, plan, 3).await;
    let (a, b, c) = (items[0], items[1], items[2]);
    for (item, title) in [(a, "Part A"), (b, "Part B"), (c, "Part C")] {
        let item_row = board::row(&app, item).await;
        assert_eq!(item_row.title, title);
        assert_eq!(item_row.state["parent"], plan.to_string());
    }
    assert_eq!(
        board::row(&app, c).await.state["depends_on"],
        json!([a.to_string(), b.to_string()])
    );

    // A and B run together (each waits at the barrier for the other), and C waits for both.
    let in_review = |id: TaskId| {
        let app = &app;
        async move { board::row(app, id).await.column == Column::InReview }
    };
    within(Duration::from_secs(90), "A and B in review", || async {
        in_review(a).await && in_review(b).await
    })
    .await;
    app.project().await;
    let (run_a, run_b) = (
        &board::runs_now(&app, a).await[0],
        &board::runs_now(&app, b).await[0],
    );
    let overlap = run_a.started_at.unwrap() < run_b.ended_at.unwrap()
        && run_b.started_at.unwrap() < run_a.ended_at.unwrap();
    assert!(overlap, "the two runs overlap: {run_a:?} {run_b:?}");
    app.tick("dispatcher").await;
    assert_eq!(
        board::row(&app, c).await.column,
        Column::Todo,
        "C waits for A and B"
    );
    assert!(board::runs_now(&app, c).await.is_empty());
    let (_, health) = app.health().await;
    assert_eq!(
        health["loops"]["dispatcher"]["detail"]["waiting_on_dependencies"], 1,
        "{health}"
    );
    assert_eq!(plan_of(&app, plan).await["plan"]["column"], "in-progress");

    // One of the two merged: C still waits.
    merge(&app, a.branch().as_str(), pull_request_of(&app, a).await).await;
    within(Duration::from_secs(30), "A done", || async {
        board::row(&app, a).await.column == Column::Done
    })
    .await;
    app.tick("dispatcher").await;
    assert_eq!(
        board::row(&app, c).await.column,
        Column::Todo,
        "C waits for B too"
    );

    // Both merged: C runs, and the plan follows it.
    merge(&app, b.branch().as_str(), pull_request_of(&app, b).await).await;
    within(Duration::from_secs(60), "C in review", || in_review(c)).await;
    within(
        Duration::from_secs(30),
        "the plan in review with its items",
        || async { plan_of(&app, plan).await["plan"]["column"] == "in-review" },
    )
    .await;
    merge(&app, c.branch().as_str(), pull_request_of(&app, c).await).await;
    within(Duration::from_secs(30), "the plan done", || async {
        plan_of(&app, plan).await["plan"]["column"] == "done"
    })
    .await;

    let events = app.all_events().await;
    let c_started = position_of(&events, c, "task.started");
    assert!(c_started > position_of(&events, a, "task.completed"));
    assert!(c_started > position_of(&events, b, "task.completed"));
    for (item, part) in [(a, "a"), (b, "b"), (c, "c")] {
        assert_eq!(
            remote
                .show(item.branch().as_str(), &format!("{part}/done.txt"))
                .as_deref(),
            Some("done\n")
        );
    }
    assert_eq!(github.pulls_opened().len(), 3, "a pull request per item");
    app.stop().await;
}

async fn a_plan_with_overlapping_scopes_and_a_cycle_is_refused_with_the_reasons_in_the_retry_prompt(
    db: TestDb,
) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let bad = json!({"version": 1, "items": [
        item("api", &["src/**"], &["web"]),
        item("web", &["src/web/*.ts"], &["api"]),
    ]});
    let good = three_items();
    // The first plan is refused; the second attempt, told why, writes a good one.
    let planner = bash_agent(
        scratch.path(),
        "planner.sh",
        &format!(
            "mkdir -p .pidevops\nif grep -q 'was refused' \"$1\"; then\ncat > .pidevops/plan.json <<'JSON'\n{good}\nJSON\nelse\ncat > .pidevops/plan.json <<'JSON'\n{bad}\nJSON\nfi"
        ),
    );
    let worker = bash_agent(scratch.path(), "worker.sh", "echo x > x");
    let app = spawn(
        &db,
        config(&remote, &planner, &worker),
        &scratch.path().join("ws"),
        None,
    )
    .await;
    let plan = new_plan(&app, "Split the app").await;
    proposed(&app, plan).await;
    app.project().await;
    let runs = board::runs_now(&app, plan).await;
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0].state, "failed");
    assert_eq!(runs[0].failure.as_deref(), Some("invalid"));
    assert_eq!(runs[1].state, "proposed");
    let retry_prompt = std::fs::read_to_string(
        Path::new(runs[1].log_path.as_deref().unwrap()).with_file_name("prompt.md"),
    )
    .unwrap();
    for expected in [
        "The plan in .pidevops/plan.json was refused",
        "overlap",
        "src/**",
        "src/web/*.ts",
        "cycle",
        "attempt 2 of 3",
    ] {
        assert!(
            retry_prompt.contains(expected),
            "{expected:?} in:\n{retry_prompt}"
        );
    }
    let plan_row = board::row(&app, plan).await;
    assert_eq!((plan_row.attempts, plan_row.needs_human), (2, false));
    app.stop().await;
}

async fn a_rejected_plan_is_planned_again_with_the_comment(db: TestDb) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let planner = planner(scratch.path(), "planner.sh", &three_items());
    let worker = bash_agent(scratch.path(), "worker.sh", "echo x > x");
    let app = spawn(
        &db,
        config(&remote, &planner, &worker),
        &scratch.path().join("ws"),
        None,
    )
    .await;
    let plan = new_plan(&app, "Build the parts").await;
    proposed(&app, plan).await;
    let (status, body) = api(
        &app,
        reqwest::Method::POST,
        &format!("/api/tasks/{plan}/reject"),
        Some(json!({"reason": "Merge A and B into one item"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    within(Duration::from_secs(60), "the second proposal", || async {
        plan_of(&app, plan).await["plan"]["plan"]["revision"] == 2
    })
    .await;
    app.project().await;
    let runs = board::runs_now(&app, plan).await;
    let prompt = std::fs::read_to_string(
        Path::new(runs[1].log_path.as_deref().unwrap()).with_file_name("prompt.md"),
    )
    .unwrap();
    assert!(
        prompt.contains("A person rejected the last plan"),
        "{prompt}"
    );
    assert!(prompt.contains("Merge A and B into one item"), "{prompt}");
    assert!(plan_of(&app, plan).await["items"]
        .as_array()
        .unwrap()
        .is_empty());
    app.stop().await;
}

async fn a_cancelled_item_flags_the_items_that_depend_on_it(db: TestDb) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let planner = planner(scratch.path(), "planner.sh", &three_items());
    // Items A and B never finish on their own: the test cancels A while it runs.
    let worker = bash_agent(scratch.path(), "worker.sh", "sleep 120");
    let mut file = config(&remote, &planner, &worker);
    file["board"]["approval"] = "auto".into();
    let app = spawn(&db, file, &scratch.path().join("ws"), None).await;
    let plan = new_plan(&app, "Build the parts").await;
    let items = items_of(&app, plan, 3).await;
    let (a, c) = (items[0], items[2]);
    within(Duration::from_secs(60), "A in progress", || async {
        board::row(&app, a).await.column == Column::InProgress
    })
    .await;
    let (status, body) = api(
        &app,
        reqwest::Method::POST,
        &format!("/api/tasks/{a}/cancel"),
        Some(json!({"reason": "not needed after all"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    within(Duration::from_secs(30), "C flagged", || async {
        board::row(&app, c).await.needs_human
    })
    .await;
    let reason = board::row(&app, c).await.needs_human_reason.unwrap();
    assert!(
        reason.contains(&format!("depends on {a}, which was cancelled")),
        "{reason}"
    );
    within(
        Duration::from_secs(30),
        "the plan waits for a human",
        || async {
            let plan = plan_of(&app, plan).await;
            plan["plan"]["plan"]["children_needing_human"] == json!([c.to_string()])
        },
    )
    .await;
    // Cancelling the plan cancels what is left of it.
    let (status, _) = api(
        &app,
        reqwest::Method::POST,
        &format!("/api/tasks/{plan}/cancel"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    within(Duration::from_secs(30), "every item cancelled", || async {
        let mut all = true;
        for item in &items {
            all &= board::row(&app, *item).await.column == Column::Cancelled;
        }
        all
    })
    .await;
    app.stop().await;
}
