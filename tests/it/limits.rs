//! A provider's usage or rate limit, end to end with the real dispatcher and agents that print what the CLIs print
//! when they hit one: the attempt ends `limited`, is given back (it never counts toward `max_attempts`), the task
//! waits until the limit lifts (the reset the CLI named, else the backoff), its profile starts nothing meanwhile
//! while other profiles go on, and `/health` says which profile is paused until when (a warning). One run's
//! report is a stranger's word (a tool can write the line to its CLI's stdout): it holds back its own task until the
//! reset it names, but its profile only for the unverified window, then one probe run; two tasks' runs agreeing
//! pause the profile longer; a person lifts a pause (API, CLI), and a cancelled task's report counts no more.

use std::path::Path;
use std::time::Duration;

use crate::common::agents::bash_agent;
use crate::common::agents::{Remote, REPO};
use crate::common::board::{self, new_task};
use crate::common::{within, TestApp, TestDb, ADMIN_TOKEN};
use pidevops::domain::runs::RunEvent;
use pidevops::projectors::runs::RunRow;
use pidevops::tasks::{Column, TaskId};

per_backend!(
    a_limit_with_a_reset_parks_the_task_and_its_profile_until_then_without_spending_an_attempt,
    a_limit_without_a_reset_waits_the_backoff_and_the_next_attempt_runs_uncounted,
    with_a_fallback_the_limited_profiles_tasks_run_on_it_at_once,
    one_runs_faked_limit_holds_its_profile_within_the_window_until_a_person_lifts_it,
    past_the_window_one_probe_runs_and_two_tasks_agreeing_pause_the_profile_longer,
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
    let app = TestApp::dispatching(
        &db,
        config(&remote, &limited, &other),
        &scratch.path().join("ws"),
    )
    .await;
    let first = new_task("Hit the wall").create(&app).await;
    let run = board::first_run_ended(&app, first, Duration::from_secs(60)).await;
    assert_eq!(run.failure.as_deref(), Some("limited"), "{run:?}");
    let RunEvent::Failed { until, detail, .. } = board::outcome(&app, &run.run_id).await else {
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
        || async { board::row(&app, first).await.column == Column::Todo },
    )
    .await;
    // The retry and the attempt given back are one append, which the projector may split across two pages:
    // drive it to the log's head before reading the row.
    app.project().await;
    let parked = board::row(&app, first).await;
    assert!(!parked.needs_human, "{:?}", parked.needs_human_reason);
    assert_eq!((parked.attempts, parked.max_attempts), (1, 2));

    // A second task on the same profile is not started while the limit holds; one on another profile is.
    let second = new_task("Would hit the same wall").create(&app).await;
    let elsewhere = new_task("Another provider")
        .agent("other")
        .create(&app)
        .await;
    within(
        Duration::from_secs(60),
        "the other profile's task runs",
        || async { board::row(&app, elsewhere).await.column == Column::InReview },
    )
    .await;
    board::dispatcher_ticks(&app, 3).await;
    assert!(
        board::runs(&app, second).await.is_empty(),
        "started against the limit"
    );
    assert_eq!(
        board::runs(&app, first).await.len(),
        1,
        "ran again before the reset"
    );
    assert_eq!(board::row(&app, second).await.column, Column::Todo);

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
    let app = TestApp::dispatching(&db, file, &scratch.path().join("ws")).await;
    let id = new_task("Wait it out").create(&app).await;
    within(Duration::from_secs(60), "in review", || async {
        board::row(&app, id).await.column == Column::InReview
    })
    .await;
    let runs = board::runs(&app, id).await;
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0].failure.as_deref(), Some("limited"));
    assert_eq!(runs[1].state, "succeeded");
    let done = board::row(&app, id).await;
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
    let app = TestApp::dispatching(&db, file, &scratch.path().join("ws")).await;
    let first = new_task("Hit the wall, then go around it")
        .create(&app)
        .await;
    within(
        Duration::from_secs(60),
        "the first task in review",
        || async { board::row(&app, first).await.column == Column::InReview },
    )
    .await;
    let runs = board::runs(&app, first).await;
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0].failure.as_deref(), Some("limited"));
    assert_eq!(runs[0].profile.as_deref(), Some("claude-like"));
    // Not the hour the limit named: its fallback ran it at once, the attempt given back.
    assert_eq!(runs[1].profile.as_deref(), Some("other"));
    assert_eq!(runs[1].state, "succeeded");
    assert_eq!(board::row(&app, first).await.state["agent"], "other");
    // A new task of the limited profile goes to the fallback too, while the limit holds.
    let second = new_task("Would hit the same wall").create(&app).await;
    within(
        Duration::from_secs(60),
        "the second task in review",
        || async { board::row(&app, second).await.column == Column::InReview },
    )
    .await;
    let runs = board::runs(&app, second).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].profile.as_deref(), Some("other"));
    app.stop().await;
}

/// A tool inside the agent that writes Claude Code's `rate_limit_event` (rejected, six days ahead) to the CLI's
/// stdout, then the run ends; told in its retry prompt that a limit stopped it, or without "Fake" in its task, it
/// works.
const FAKES_A_LIMIT: &str = r#"if grep -q "Fake" "$1" && ! grep -q "usage or rate limit stopped it" "$1"; then
reset=$(( $(date +%s) + 6 * 86400 ))
echo "{\"type\":\"rate_limit_event\",\"rate_limit_info\":{\"status\":\"rejected\",\"resetsAt\":$reset,\"rateLimitType\":\"seven_day\"}}"
exit 1
fi
echo "$RANDOM" > "work-$$.txt""#;

fn limit_problem(health: &serde_json::Value) -> Option<String> {
    health["problems"]
        .as_array()?
        .iter()
        .filter_map(|p| p.as_str())
        .find(|p| p.contains("agent profile claude-like"))
        .map(str::to_owned)
}

async fn ticks(app: &TestApp, n: usize) {
    for _ in 0..n {
        app.project().await;
        app.tick("dispatcher").await;
    }
}

async fn lifted_by(app: &TestApp) -> Vec<String> {
    app.all_events()
        .await
        .into_iter()
        .filter(|e| e.stream.as_deref() == Some("limits") && e.event_type == "limits.lifted")
        .map(|e| serde_json::from_slice::<serde_json::Value>(&e.body).unwrap()["by"].to_string())
        .collect()
}

/// The app with one run's report holding its profile for `window_s` seconds, and its file's text (for the CLI).
async fn faking(db: &TestDb, remote: &Remote, root: &Path, window_s: i64) -> (TestApp, String) {
    let agent = bash_agent(root, "fakes.sh", FAKES_A_LIMIT);
    let mut file = config(remote, &agent, &agent);
    file["dispatch"]
        .as_table_mut()
        .unwrap()
        .insert("limit_unverified_s".into(), toml::Value::Integer(window_s));
    let text = toml::to_string(&file).unwrap();
    (TestApp::dispatching(db, file, &root.join("ws")).await, text)
}

/// `id`'s first run, once it ended.
async fn reported(app: &TestApp, id: TaskId) -> RunRow {
    board::first_run_ended(app, id, Duration::from_secs(60)).await
}

/// `id` stays in `todo` with no run across dispatcher ticks.
async fn held(app: &TestApp, id: TaskId, why: &str) {
    for _ in 0..4 {
        ticks(app, 1).await;
        assert!(board::runs(app, id).await.is_empty(), "{id} started: {why}");
    }
    assert_eq!(board::row(app, id).await.column, Column::Todo, "{why}");
}

/// One run's six-day claim with a window longer than the test (an hour): its own task parked until its reset, its
/// profile held across dispatcher ticks, `/health` saying whose word it is; a person lifts it (API, CLI, dashboard)
/// and a cancelled task's report ends at once. Nothing here waits for the window, so nothing depends on timing.
async fn one_runs_faked_limit_holds_its_profile_within_the_window_until_a_person_lifts_it(
    db: TestDb,
) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let (app, config_text) = faking(&db, &remote, scratch.path(), 3600).await;

    let fake = new_task("Fake a limit").create(&app).await;
    let run = reported(&app, fake).await;
    assert_eq!(run.failure.as_deref(), Some("limited"), "{run:?}");
    let RunEvent::Failed { until, .. } = board::outcome(&app, &run.run_id).await else {
        panic!("the run failed");
    };
    let until = until.expect("a limited run says until when");
    assert!(
        until - chrono::Utc::now() > chrono::Duration::days(5),
        "its own task parked until the reset it named: {until}"
    );
    // Its profile: paused for the window (an hour from the report, not the six days), one run's word.
    let other = new_task("Other work").create(&app).await;
    held(&app, other, "within the unverified window").await;
    let (status, health) = app.health().await;
    assert_eq!(
        (status, health["status"].as_str()),
        (200, Some("warn")),
        "{health:#}"
    );
    let problem = limit_problem(&health).unwrap_or_else(|| panic!("{health:#}"));
    assert!(
        problem.contains("is paused until")
            && problem.contains("as one run reported it (unverified: then one probe run)"),
        "{problem}"
    );
    let paused_until = health["loops"]["dispatcher"]["detail"]["limited_profiles"]["claude-like"]
        .as_str()
        .and_then(|at| at.parse::<chrono::DateTime<chrono::Utc>>().ok())
        .unwrap_or_else(|| panic!("{health:#}"));
    assert!(
        paused_until <= chrono::Utc::now() + chrono::Duration::minutes(61)
            && paused_until > chrono::Utc::now() + chrono::Duration::minutes(50),
        "the window, not the claim: {paused_until}"
    );
    assert_eq!(
        board::runs(&app, fake).await.len(),
        1,
        "ran before its reset"
    );

    // A person lifts it through the API: an event; the held task and the reporting one start.
    let response = app
        .client
        .post(app.url("/api/dispatch/limits/claude-like/lift"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(
        (body["profile"].as_str(), body["by"].as_str()),
        (Some("claude-like"), Some("api"))
    );
    let unknown = app
        .client
        .post(app.url("/api/dispatch/limits/nobody/lift"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    assert_eq!(lifted_by(&app).await, ["\"api\""]);
    for id in [other, fake] {
        within(
            Duration::from_secs(60),
            &format!("{id} runs after the lift"),
            || async { board::row(&app, id).await.column == Column::InReview },
        )
        .await;
    }
    let (_, health) = app.health().await;
    assert_eq!(limit_problem(&health), None, "{health:#}");

    // Cancelling the reporting task ends its report's hold at once, within its window.
    let cancelled = new_task("Fake it once more").create(&app).await;
    reported(&app, cancelled).await;
    ticks(&app, 1).await;
    assert!(limit_problem(&app.health().await.1).is_some());
    let cancel = pidevops::tasks::Command::Cancel {
        reason: pidevops::tasks::Reason::new("a tool faked that limit").unwrap(),
    };
    app.state
        .board
        .execute(cancelled, &cancel, "api")
        .await
        .unwrap();
    ticks(&app, 2).await;
    assert_eq!(limit_problem(&app.health().await.1), None);

    // And through the CLI: another report, its profile held, lifted by `pidevops dispatch lift`, an event.
    let last = new_task("Fake it for the terminal").create(&app).await;
    reported(&app, last).await;
    let after = new_task("After the terminal's lift").create(&app).await;
    held(&app, after, "within the window, before the terminal's lift").await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pidevops.toml"), &config_text).unwrap();
    let cli = |args: &[&str]| {
        let out = crate::common::server::command(&db.url_string(), dir.path())
            .arg("dispatch")
            .args(args)
            .output()
            .expect("the binary runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, _, err) = cli(&["lift", "nobody"]);
    assert!(!ok && err.contains("no agent profile"), "{err}");
    let (ok, out, err) = cli(&["lift", "claude-like"]);
    assert!(ok, "{err}");
    assert_eq!(out, "lifted the limit's pause of claude-like");
    assert_eq!(lifted_by(&app).await, ["\"api\"", "\"cli\""]);
    // Another process's commit does not wake this one's dispatcher (it wakes at its interval): drive it.
    within(
        Duration::from_secs(60),
        "the task after the lift runs",
        || async {
            ticks(&app, 1).await;
            board::row(&app, after).await.column == Column::InReview
        },
    )
    .await;

    // And from the dashboard: the Runs page shows the hold with a Lift button; the form needs its CSRF token.
    let dash = new_task("Fake it for the dashboard").create(&app).await;
    reported(&app, dash).await;
    ticks(&app, 1).await;
    let cookie = crate::web::sign_in(&app).await;
    let (status, html) = crate::web::get(&app, "/runs", &cookie).await;
    assert_eq!(status, 200);
    assert!(
        html.contains("agent profile claude-like"),
        "the hold on the page"
    );
    assert!(
        html.contains("action=\"/runs/limits/claude-like/lift\""),
        "the Lift form"
    );
    let token = crate::web::csrf(&html);
    let lift = |csrf: String| {
        let cookie = cookie.clone();
        let app = &app;
        async move {
            crate::web::client()
                .post(app.url("/runs/limits/claude-like/lift"))
                .header("cookie", cookie)
                .form(&[("csrf", csrf)])
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(lift("0".repeat(64)).await, 403);
    assert_eq!(
        lifted_by(&app).await.len(),
        2,
        "nothing lifted without the token"
    );
    assert_eq!(lift(token).await, 303);
    assert_eq!(
        lifted_by(&app).await,
        ["\"api\"", "\"cli\"", "\"dashboard\""]
    );
    ticks(&app, 1).await;
    assert_eq!(limit_problem(&app.health().await.1), None);
    app.stop().await;
}

/// With a short window (1 s), what happens after it: one probe run of the profile starts and its success answers
/// the report, while the reporting task stays parked until its own reset; two distinct tasks' runs agreeing pause
/// the profile until the reset they name, held across ticks. Only what holds after the window is asserted, so a
/// slow machine (a tick later than the window) changes nothing.
async fn past_the_window_one_probe_runs_and_two_tasks_agreeing_pause_the_profile_longer(
    db: TestDb,
) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let (app, _) = faking(&db, &remote, scratch.path(), 1).await;

    let fake = new_task("Fake a limit").create(&app).await;
    let run = reported(&app, fake).await;
    assert_eq!(run.failure.as_deref(), Some("limited"), "{run:?}");
    // Past the window, the other task starts as the probe, and succeeds: the report is answered.
    let other = new_task("Other work").create(&app).await;
    within(Duration::from_secs(90), "the other task runs", || async {
        board::row(&app, other).await.column == Column::InReview
    })
    .await;
    ticks(&app, 3).await;
    assert_eq!(
        board::runs(&app, fake).await.len(),
        1,
        "the reporting task ran before its reset"
    );
    assert_eq!(board::row(&app, fake).await.column, Column::Todo);
    let (_, health) = app.health().await;
    assert_eq!(limit_problem(&health), None, "{health:#}");

    // Two distinct tasks' runs agreeing: the second reports as the probe after the first's window.
    let first = new_task("Fake it again").create(&app).await;
    reported(&app, first).await;
    let second = new_task("Fake it too").create(&app).await;
    let probe = reported(&app, second).await;
    assert_eq!(probe.failure.as_deref(), Some("limited"), "{probe:?}");
    let waiting = new_task("Held by the agreed limit").create(&app).await;
    held(&app, waiting, "against an agreed limit").await;
    let (status, health) = app.health().await;
    assert_eq!(
        (status, health["status"].as_str()),
        (200, Some("warn")),
        "{health:#}"
    );
    let problem = limit_problem(&health).unwrap_or_else(|| panic!("{health:#}"));
    let six_days = (chrono::Utc::now() + chrono::Duration::days(6))
        .format("%Y-%m-%d")
        .to_string();
    assert!(
        problem.contains(&format!("is paused until {six_days}"))
            && problem.contains("reported by 2 tasks' runs"),
        "{problem}"
    );
    app.stop().await;
}
