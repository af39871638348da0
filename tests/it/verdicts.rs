//! What stands between an agent that exited 0 and a push, end to end with the real dispatcher, real git and real
//! agent processes: the task's scope (`enforce` retries with "Previously unresolved", `warn` pushes and names the
//! files), the agent's own status file (`needs_human` flags the task at once, nothing pushed), a reviewer agent
//! (changes requested are another attempt carrying the review; it cannot change what is pushed, nor see the
//! worker's HOME), and a triage agent's rewrite of a ticket waiting in triage.

use std::path::Path;
use std::time::Duration;

use crate::common::agents::bash_agent;
use crate::common::agents::{Remote, REPO};
use crate::common::board::{self, new_task};
use crate::common::{within, TestApp, TestDb};
use pidevops::tasks::{Column, TaskId};

use crate::common::read::prompt_of;

per_backend!(
    files_outside_the_scope_make_the_attempt_unresolved_and_the_retry_names_them,
    under_warn_files_outside_the_scope_are_pushed_and_named,
    an_agent_that_asks_for_a_person_flags_its_task_at_once_and_pushes_nothing,
    a_reviewer_asking_for_changes_sends_the_work_back_with_the_review,
    a_triage_agent_rewrites_the_ticket_and_the_approved_spec_is_what_runs,
);

pub(crate) fn config(
    remote: &Remote,
    worker: &Path,
    repo_extra: &str,
    dispatch_extra: &str,
) -> toml::Table {
    format!(
        r#"
        [board]
        approval = "auto"

        [dispatch]
        agent = "worker"
        max_concurrent = 2
        per_repo = 2
        heartbeat_s = 0.3
        retry_backoff_s = 0.05
        {dispatch_extra}

        [agents.worker]
        command = ["{worker}", "{{prompt_file}}"]

        [repos."{REPO}"]
        url = "{url}"
        {repo_extra}
        "#,
        worker = worker.display(),
        url = remote.url(),
    )
    .parse()
    .unwrap()
}

pub(crate) async fn in_review(app: &TestApp, id: TaskId) {
    within(
        Duration::from_secs(60),
        &format!("{id} in review"),
        || async { board::row(app, id).await.column == Column::InReview },
    )
    .await;
}

async fn files_outside_the_scope_make_the_attempt_unresolved_and_the_retry_names_them(db: TestDb) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    // First attempt: inside and outside the scope. Told so, the second stays inside.
    let worker = bash_agent(
        scratch.path(),
        "worker.sh",
        r#"mkdir -p src/api docs
echo api > src/api/orders.rs
if ! grep -q 'Previously unresolved' "$1"; then echo stray > docs/notes.md; echo stray > README.md; fi"#,
    );
    let app = TestApp::dispatching(
        &db,
        config(&remote, &worker, "", ""),
        &scratch.path().join("ws"),
    )
    .await;
    let id = new_task("Add the orders endpoint")
        .scope("src/api/**")
        .create(&app)
        .await;
    in_review(&app, id).await;
    let runs = board::runs(&app, id).await;
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0].failure.as_deref(), Some("scope"));
    assert_eq!(
        runs[0].commit_sha, None,
        "nothing pushed for the unresolved attempt"
    );
    let retry = prompt_of(&runs[1]);
    assert!(
        retry
            .contains("Previously unresolved: README.md, docs/notes.md (outside scope src/api/**)"),
        "{retry}"
    );
    let branch = id.branch();
    assert_eq!(
        remote.show(branch.as_str(), "src/api/orders.rs").as_deref(),
        Some("api\n")
    );
    assert_eq!(remote.show(branch.as_str(), "docs/notes.md"), None);
    assert_eq!(
        remote.show(branch.as_str(), "README.md").as_deref(),
        Some("# app\n")
    );
    app.stop().await;
}

async fn under_warn_files_outside_the_scope_are_pushed_and_named(db: TestDb) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let worker = bash_agent(
        scratch.path(),
        "worker.sh",
        "mkdir -p src/api && echo api > src/api/orders.rs && echo stray > stray.txt",
    );
    let app = TestApp::dispatching(
        &db,
        config(&remote, &worker, r#"scope = "warn""#, ""),
        &scratch.path().join("ws"),
    )
    .await;
    let id = new_task("Add the orders endpoint")
        .scope("src/api")
        .create(&app)
        .await;
    in_review(&app, id).await;
    assert_eq!(board::runs(&app, id).await.len(), 1);
    assert_eq!(
        board::row(&app, id).await.state["report"]["outside_scope"],
        serde_json::json!(["stray.txt"])
    );
    assert_eq!(
        remote.show(id.branch().as_str(), "stray.txt").as_deref(),
        Some("stray\n")
    );
    app.stop().await;
}

async fn an_agent_that_asks_for_a_person_flags_its_task_at_once_and_pushes_nothing(db: TestDb) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let worker = bash_agent(
        scratch.path(),
        "worker.sh",
        r#"echo half > CHANGES.md
mkdir -p .pidevops
cat > .pidevops/status.json <<'JSON'
{"resolved": false, "needs_human": true, "summary": "Which database should orders live in, Postgres or Redis?"}
JSON"#,
    );
    let app = TestApp::dispatching(
        &db,
        config(&remote, &worker, "", ""),
        &scratch.path().join("ws"),
    )
    .await;
    let id = new_task("Store the orders").scope("").create(&app).await;
    within(Duration::from_secs(60), "the task flagged", || async {
        board::row(&app, id).await.needs_human
    })
    .await;
    let flagged = board::row(&app, id).await;
    let reason = flagged.needs_human_reason.unwrap();
    assert!(
        reason.contains("Which database should orders live in"),
        "{reason}"
    );
    assert_eq!(
        (flagged.attempts, flagged.max_attempts),
        (1, 3),
        "flagged at once, not after the budget"
    );
    assert_eq!(flagged.column, Column::Todo);
    let runs = board::runs(&app, id).await;
    assert_eq!(runs[0].failure.as_deref(), Some("needs_human"));
    assert_eq!(remote.branch(id.branch().as_str()), None, "nothing pushed");
    // The flag holds: no second attempt starts while a person is needed.
    app.tick("dispatcher").await;
    assert_eq!(board::runs(&app, id).await.len(), 1);
    app.stop().await;
}

async fn a_reviewer_asking_for_changes_sends_the_work_back_with_the_review(db: TestDb) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let worker = bash_agent(
        scratch.path(),
        "worker.sh",
        r#"echo "the worker's secret note" > "$HOME/planted"
if grep -q 'handle the empty list' "$1"; then echo v2 > CHANGES.md; else echo v1 > CHANGES.md; fi"#,
    );
    // The reviewer asks for changes on v1 and approves v2. It also tries to change the work and looks for what the
    // worker left in its HOME: neither may work.
    let reviewer = bash_agent(
        scratch.path(),
        "reviewer.sh",
        r#"echo "reviewed: 7 in, 3 out, \$0.02"
wrote=no; if (echo hijacked >> CHANGES.md) 2>/dev/null; then wrote=yes; fi
seen=clean; [ -e "$HOME/planted" ] && seen=planted
seen="$seen, wrote $wrote"
if grep -q v1 CHANGES.md; then
cat > .pidevops/review.json <<JSON
{"verdict": "request_changes", "summary": "Close, but not done ($seen)", "comments": [{"path": "CHANGES.md", "line": 1, "body": "handle the empty list"}]}
JSON
else
cat > .pidevops/review.json <<JSON
{"verdict": "approve", "summary": "Looks right ($seen)", "comments": []}
JSON
fi"#,
    );
    let app = TestApp::dispatching(
        &db,
        config(
            &remote,
            &worker,
            r#"review = "agent""#,
            &format!(
                "reviewer = \"reviewer\"\n[agents.reviewer]\ncommand = [\"{}\", \"{{prompt_file}}\"]\n\
                 usage_pattern = 'reviewed: (?P<input>\\d+) in, (?P<output>\\d+) out, \\$(?P<cost>[0-9.]+)'",
                reviewer.display()
            ),
        ),
        &scratch.path().join("ws"),
    )
    .await;
    let id = new_task("Write the change down")
        .scope("CHANGES.md")
        .create(&app)
        .await;
    in_review(&app, id).await;
    let runs = board::runs(&app, id).await;
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0].failure.as_deref(), Some("review"));
    assert_eq!(
        runs[0].commit_sha, None,
        "nothing pushed before the approval"
    );
    let retry = prompt_of(&runs[1]);
    assert!(retry.contains("The reviewer asked for changes"), "{retry}");
    assert!(retry.contains("CHANGES.md:1"), "{retry}");
    assert!(retry.contains("handle the empty list"), "{retry}");
    // What was pushed is the worker's second attempt, untouched by the reviewer.
    assert_eq!(
        remote.show(id.branch().as_str(), "CHANGES.md").as_deref(),
        Some("v2\n")
    );
    let review = &board::row(&app, id).await.state["report"]["review"];
    assert_eq!(review["verdict"], "approve", "{review}");
    // The reviewer's spend is the attempt's too, under its own profile: two reviews.
    let day = pidevops::projectors::usage::days(
        app.state.log.store(),
        &pidevops::projectors::usage::UsageFilter::default(),
    )
    .await
    .unwrap();
    let reviewer_spent = day
        .iter()
        .find(|d| d.profile == "reviewer")
        .unwrap_or_else(|| panic!("the reviewer's usage: {day:?}"));
    assert_eq!(
        (reviewer_spent.spent.runs, reviewer_spent.spent.input_tokens),
        (2, 14)
    );
    assert_eq!(
        review["summary"], "Looks right (clean, wrote no)",
        "the reviewer never saw the worker's HOME, nor could it write the work"
    );
    app.stop().await;
}

async fn a_triage_agent_rewrites_the_ticket_and_the_approved_spec_is_what_runs(db: TestDb) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let triager = bash_agent(
        scratch.path(),
        "triager.sh",
        r#"grep -q '^Ticket: orders are slow' "$1"
mkdir -p .pidevops
cat > .pidevops/spec.json <<'JSON'
{"task": "Add an index on orders(customer_id)", "scope": "migrations/**", "done_when": "EXPLAIN uses the index"}
JSON"#,
    );
    let worker = bash_agent(
        scratch.path(),
        "worker.sh",
        r#"grep -q '^Task: Add an index on orders(customer_id)' "$1"
mkdir -p migrations && echo 'create index' > migrations/001.sql"#,
    );
    let mut file = config(
        &remote,
        &worker,
        "",
        &format!(
            "triage = \"triager\"\n[agents.triager]\ncommand = [\"{}\", \"{{prompt_file}}\"]",
            triager.display()
        ),
    );
    file["board"]["approval"] = "manual".into();
    let app = TestApp::dispatching(&db, file, &scratch.path().join("ws")).await;
    let id = new_task("orders are slow").scope("").create(&app).await;
    within(Duration::from_secs(60), "the spec proposed", || async {
        board::row(&app, id).await.state["triage"]["state"] == "proposed"
    })
    .await;
    let waiting = board::row(&app, id).await;
    assert_eq!(
        waiting.column,
        Column::Triage,
        "still waiting for its approver"
    );
    assert_eq!(waiting.title, "Add an index on orders(customer_id)");
    assert_eq!(waiting.attempts, 0, "triage is not an attempt");
    // Counted by what it ended in (the recorder is process-wide: at least ours).
    let metrics = app.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("pidevops_runs_total{outcome=\"proposed\"} ")),
        "{metrics}"
    );
    // The approver approves what the agent wrote; the worker gets it (its script fails on any other prompt).
    app.state
        .board
        .steer(
            id,
            pidevops::board::Steer::Approve,
            None,
            "in a test",
            "test",
        )
        .await
        .unwrap();
    in_review(&app, id).await;
    assert_eq!(
        remote
            .show(id.branch().as_str(), "migrations/001.sql")
            .as_deref(),
        Some("create index\n")
    );
    app.stop().await;
}
