//! A provider's usage or rate limit, end to end with the real dispatcher and agents that print what the CLIs print
//! when they hit one: the attempt ends `limited`, is given back (it never counts toward `max_attempts`), the task
//! waits until the limit lifts (the reset the CLI named, else the backoff), its profile starts nothing meanwhile
//! while other profiles go on, and `/health` says which profile is paused until when (a warning).

use std::path::Path;
use std::time::Duration;

use crate::common::agents::{Remote, REPO};
use crate::common::{within, TestApp, TestDb};
use crate::plans::bash_agent;
use pidevops::board::Draft;
use pidevops::domain::runs::RunEvent;
use pidevops::projectors::runs::{self, RunRow, Which};
use pidevops::projectors::tasks as task_rows;
use pidevops::tasks::{AgentName, Column, Links, RepoName, Spec, TaskId};

per_backend!(
    a_limit_with_a_reset_parks_the_task_and_its_profile_until_then_without_spending_an_attempt,
    a_limit_without_a_reset_waits_the_backoff_and_the_next_attempt_runs_uncounted,
    with_a_fallback_the_limited_profiles_tasks_run_on_it_at_once,
);

fn config(remote: &Remote, limited: &Path, other: &Path) -> toml::Table {
    format!(
        r#"
        [board]
        approval = "auto"
        max_attempts = 1

        [dispatch]
        agent = "claude-like"
        max_concurrent = 3
        per_repo = 3
        heartbeat_s = 0.3
        retry_backoff_s = 0.05

        [agents.claude-like]
        command = ["{limited}", "{{prompt_file}}"]
        usage = "claude"

        [agents.other]
        command = ["{other}", "{{prompt_file}}"]

        [repos."{REPO}"]
        url = "{url}"
        "#,
        limited = limited.display(),
        other = other.display(),
        url = remote.url(),
    )
    .parse()
    .unwrap()
}

async fn spawn(db: &TestDb, file: toml::Table, root: &Path) -> TestApp {
    let mut settings = crate::common::settings(db);
    settings.file = pidevops::config::FileConfig::try_from(file).unwrap();
    settings.workspace_root = root.to_owned();
    TestApp::spawn(settings).await
}

async fn task(app: &TestApp, text: &str, agent: Option<&str>) -> TaskId {
    let mut draft = Draft::new(
        REPO.parse::<RepoName>().unwrap(),
        Spec::new(text, "", "it is written").unwrap(),
        Links::default(),
    );
    draft.agent = agent.map(|a| a.parse::<AgentName>().unwrap());
    let key = format!("test:{}", uuid::Uuid::now_v7());
    app.state
        .board
        .create(draft, &key, "api", None)
        .await
        .unwrap()
        .0
        .task
        .id()
}

async fn row(app: &TestApp, id: TaskId) -> task_rows::TaskRow {
    app.project().await;
    task_rows::get(app.state.log.store(), id)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{id} is on the board"))
}

async fn runs_of(app: &TestApp, id: TaskId) -> Vec<RunRow> {
    app.project().await;
    runs::query(app.state.log.store(), Which::Task(&id.to_string()))
        .await
        .unwrap()
}

async fn outcome(app: &TestApp, run: &str) -> RunEvent {
    app.all_events()
        .await
        .into_iter()
        .filter(|e| e.stream.as_deref() == Some(&format!("run:{run}")))
        .filter_map(|e| serde_json::from_slice::<RunEvent>(&e.body).ok())
        .find(RunEvent::is_terminal)
        .unwrap_or_else(|| panic!("run {run} has an outcome"))
}

/// Claude Code at its five-hour limit: the `rate_limit_event` it streams with the reset, then the error result.
const AT_THE_LIMIT: &str = r#"reset=$(( $(date +%s) + 3600 ))
echo '{"type":"system","subtype":"init","session_id":"s","tools":[],"model":"claude-sonnet-4-5"}'
echo "{\"type\":\"rate_limit_event\",\"rate_limit_info\":{\"status\":\"rejected\",\"resetsAt\":$reset,\"rateLimitType\":\"five_hour\"},\"uuid\":\"u\",\"session_id\":\"s\"}"
echo '{"type":"result","subtype":"success","is_error":true,"duration_ms":120,"num_turns":1,"result":"You'"'"'ve hit your limit","session_id":"s","total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0}}'
exit 1"#;

async fn a_limit_with_a_reset_parks_the_task_and_its_profile_until_then_without_spending_an_attempt(
    db: TestDb,
) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let limited = bash_agent(scratch.path(), "limited.sh", AT_THE_LIMIT);
    let other = bash_agent(
        scratch.path(),
        "other.sh",
        r#"echo "$RANDOM" > "other-$$.txt""#,
    );
    let app = spawn(
        &db,
        config(&remote, &limited, &other),
        &scratch.path().join("ws"),
    )
    .await;
    let first = task(&app, "Hit the wall", None).await;
    within(
        Duration::from_secs(60),
        "the first attempt ends",
        || async {
            runs_of(&app, first)
                .await
                .first()
                .is_some_and(|r| r.state != "running")
        },
    )
    .await;
    let run = runs_of(&app, first).await.remove(0);
    assert_eq!(run.failure.as_deref(), Some("limited"), "{run:?}");
    let RunEvent::Failed { until, detail, .. } = outcome(&app, &run.run_id).await else {
        panic!("the run failed");
    };
    let until = until.expect("a limited run says until when");
    let wait = until - chrono::Utc::now();
    assert!(
        wait > chrono::Duration::minutes(55) && wait <= chrono::Duration::minutes(60),
        "parked until the reset the CLI named, not a backoff: {until} ({detail})"
    );
    assert!(detail.contains("five_hour"), "{detail}");

    // Back in todo, the attempt given back (max_attempts = 1, yet it may run again), nobody asked for.
    within(
        Duration::from_secs(30),
        "the first task back in todo",
        || async { row(&app, first).await.column == Column::Todo },
    )
    .await;
    // The retry and the attempt given back are one append, which the projector may split across two pages:
    // drive it to the log's head before reading the row.
    app.project().await;
    let parked = row(&app, first).await;
    assert!(!parked.needs_human, "{:?}", parked.needs_human_reason);
    assert_eq!((parked.attempts, parked.max_attempts), (1, 2));

    // A second task on the same profile is not started while the limit holds; one on another profile is.
    let second = task(&app, "Would hit the same wall", None).await;
    let elsewhere = task(&app, "Another provider", Some("other")).await;
    within(
        Duration::from_secs(60),
        "the other profile's task runs",
        || async { row(&app, elsewhere).await.column == Column::InReview },
    )
    .await;
    for _ in 0..3 {
        app.project().await;
        app.tick("dispatcher").await;
    }
    assert!(
        runs_of(&app, second).await.is_empty(),
        "started against the limit"
    );
    assert_eq!(
        runs_of(&app, first).await.len(),
        1,
        "ran again before the reset"
    );
    assert_eq!(row(&app, second).await.column, Column::Todo);

    // /health: a warning that names the profile and until when.
    let (status, health) = app.health().await;
    assert_eq!(status, 200, "{health:#}");
    assert_eq!(health["status"], "warn", "{health:#}");
    let problems = health["problems"].to_string();
    assert!(
        problems.contains("agent profile claude-like is paused until")
            && problems.contains("2 task(s) waiting"),
        "{problems}"
    );
    app.stop().await;
}

async fn a_limit_without_a_reset_waits_the_backoff_and_the_next_attempt_runs_uncounted(db: TestDb) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    // Codex's way: an error event naming the limit, no reset. Told so in its retry prompt, it works.
    let codex = bash_agent(
        scratch.path(),
        "codex.sh",
        r#"if grep -q "usage or rate limit stopped it" "$1"; then echo done > done.txt; exit 0; fi
echo '{"type":"thread.started","thread_id":"t"}'
echo '{"type":"error","message":"You'"'"'ve hit your usage limit. Upgrade to Pro or try again later."}'
echo '{"type":"turn.failed","error":{"message":"You'"'"'ve hit your usage limit."}}'
exit 1"#,
    );
    let mut file = config(&remote, &codex, &codex);
    file["agents"]["claude-like"]["usage"] = toml::Value::String("codex".into());
    let app = spawn(&db, file, &scratch.path().join("ws")).await;
    let id = task(&app, "Wait it out", None).await;
    within(Duration::from_secs(60), "in review", || async {
        row(&app, id).await.column == Column::InReview
    })
    .await;
    let runs = runs_of(&app, id).await;
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0].failure.as_deref(), Some("limited"));
    assert_eq!(runs[1].state, "succeeded");
    let done = row(&app, id).await;
    // max_attempts = 1 in the file: the second attempt ran because the first was given back.
    assert_eq!((done.attempts, done.max_attempts), (2, 2));
    app.stop().await;
}

async fn with_a_fallback_the_limited_profiles_tasks_run_on_it_at_once(db: TestDb) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let limited = bash_agent(scratch.path(), "limited.sh", AT_THE_LIMIT);
    let other = bash_agent(
        scratch.path(),
        "other.sh",
        r#"echo "$RANDOM" > "other-$$.txt""#,
    );
    let mut file = config(&remote, &limited, &other);
    file["agents"]["claude-like"]
        .as_table_mut()
        .unwrap()
        .insert("fallback".into(), toml::Value::String("other".into()));
    let app = spawn(&db, file, &scratch.path().join("ws")).await;
    let first = task(&app, "Hit the wall, then go around it", None).await;
    within(
        Duration::from_secs(60),
        "the first task in review",
        || async { row(&app, first).await.column == Column::InReview },
    )
    .await;
    let runs = runs_of(&app, first).await;
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0].failure.as_deref(), Some("limited"));
    assert_eq!(runs[0].profile.as_deref(), Some("claude-like"));
    // Not the hour the limit named: its fallback ran it at once, the attempt given back.
    assert_eq!(runs[1].profile.as_deref(), Some("other"));
    assert_eq!(runs[1].state, "succeeded");
    assert_eq!(row(&app, first).await.state["agent"], "other");
    // A new task of the limited profile goes to the fallback too, while the limit holds.
    let second = task(&app, "Would hit the same wall", None).await;
    within(
        Duration::from_secs(60),
        "the second task in review",
        || async { row(&app, second).await.column == Column::InReview },
    )
    .await;
    let runs = runs_of(&app, second).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].profile.as_deref(), Some("other"));
    app.stop().await;
}
