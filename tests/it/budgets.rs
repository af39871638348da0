//! Budgets end to end, with the real dispatcher and agents that report their spend as they go: a hard limit stops
//! the agent mid-stream (the run ends `budget`, the task is flagged with what was spent of what), nothing more
//! starts in a spent budget (its tasks held, `/health` warns), and a person's raise (an event, through the API)
//! lets them start again; a raise that names nothing to raise is refused and changes nothing. A run whose usage
//! figures were refused (u64::MAX tokens) counts as over budget for its repository's day too (fail closed): that
//! repository's next task is held, another repository's runs, and a person's raise lets it run.

use pidevops::tasks::LINEAR_ISSUE;
use std::path::Path;
use std::time::Duration;

use crate::common::agents::bash_agent;
use crate::common::agents::{Remote, REPO};
use crate::common::board::{self, new_task};
use crate::common::{within, TestApp, TestDb, ADMIN_TOKEN};
use crate::providers::linear::fake::{default_states, FakeLinear, Issue, LINEAR_KEY};
use crate::providers::telegram::fake::FakeTelegram;
use pidevops::domain::runs::RunEvent;
use pidevops::tasks::{Column, Links};
use serde_json::{json, Value};

per_backend!(
    a_spent_budget_stops_the_agent_mid_stream_holds_the_next_task_and_a_raise_lets_it_run,
    a_run_whose_figures_were_refused_holds_its_repositorys_day_until_a_person_raises_it,
    a_queued_task_past_its_own_budget_is_held_while_the_rest_of_the_queue_starts,
);

/// Spends ten cents a tenth of a second for half a minute, unless its task is cheap.
const SPENDER: &str = r#"if grep -q "Spend little" "$1"; then
  echo "spent 1 in, 1 out, \$0.01"; echo cheap > "cheap-$$.txt"; exit 0
fi
for i in $(seq 1 300); do echo "spent 100 in, 10 out, \$0.10"; sleep 0.1; done
echo finished > finished.txt"#;

fn config(remote: &Remote, agent: &Path) -> toml::Table {
    format!(
        r#"
        [board]
        approval = "auto"

        [dispatch]
        agent = "spender"
        max_concurrent = 2
        per_repo = 2
        heartbeat_s = 0.3
        retry_backoff_s = 0.05

        [agents.spender]
        command = ["{agent}", "{{prompt_file}}"]
        usage_pattern = 'spent (?P<input>\d+) in, (?P<output>\d+) out, \$(?P<cost>[0-9.]+)'

        [budgets]
        task_usd = 0.35
        repo_daily_usd = 0.35

        [repos."{REPO}"]
        url = "{url}"
        "#,
        agent = agent.display(),
        url = remote.url(),
    )
    .parse()
    .unwrap()
}

async fn raise(app: &TestApp, body: Value) -> (u16, Value) {
    let response = app
        .client
        .post(app.url("/api/budgets/raise"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn a_spent_budget_stops_the_agent_mid_stream_holds_the_next_task_and_a_raise_lets_it_run(
    db: TestDb,
) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let agent = bash_agent(scratch.path(), "spender.sh", SPENDER);
    let telegram = FakeTelegram::start().await;
    let mut settings = crate::common::settings(&db);
    settings.file = pidevops::config::FileConfig::try_from(config(&remote, &agent)).unwrap();
    settings.workspace_root = scratch.path().join("ws");
    telegram.point_settings(&mut settings, "123:budget-bot");
    settings
        .providers
        .set("TELEGRAM_ALLOWED_CHATS", Some("11, 22"))
        .unwrap();
    let linear = FakeLinear::start().await;
    linear.point_settings(&mut settings, LINEAR_KEY);
    let issue = uuid::Uuid::now_v7();
    linear.add_issue(Issue {
        id: issue.to_string(),
        identifier: "ENG-7".into(),
        title: "Spend a lot".into(),
        description: String::new(),
        labels: vec!["pidevops".into()],
        state: "st-todo".into(),
        states: default_states(),
        updated_at: "2026-12-02T00:00:00.000Z".into(),
        team: "team-1".into(),
    });
    let app = TestApp::spawn(settings).await;

    // The agent is stopped the moment its streamed spend reaches the task's $0.35, long before its loop ends.
    let links = Links::default().with(
        LINEAR_ISSUE,
        &pidevops::tasks::LinearIssue::new(issue, "ENG-7").unwrap(),
    );
    let costly = new_task("Spend a lot").links(links).create(&app).await;
    let run = board::first_run_ended(&app, costly, Duration::from_secs(60)).await;
    assert_eq!(run.failure.as_deref(), Some("budget"), "{run:?}");
    let detail = run.detail.clone().unwrap_or_default();
    assert!(
        detail.starts_with("budget exceeded: $")
            && detail.ends_with(&format!("of $0.35 for task {costly}")),
        "{detail}"
    );
    assert!(
        run.duration_s.unwrap_or(f64::MAX) < 20.0,
        "stopped mid-stream, not at the end: {run:?}"
    );
    assert!(
        remote.branch(&format!("pidevops/{costly}")).is_none(),
        "nothing pushed"
    );
    // The run's outcome and the task's flag are two appends: wait for the second.
    within(
        Duration::from_secs(30),
        "the costly task flagged",
        || async { board::row(&app, costly).await.needs_human },
    )
    .await;
    let flagged = board::row(&app, costly).await;
    assert!(
        flagged
            .needs_human_reason
            .as_deref()
            .is_some_and(|r| r.contains("budget exceeded")),
        "{:?}",
        flagged.needs_human_reason
    );
    // What it spent until it was stopped is on its outcome.
    let spent = app
        .all_events()
        .await
        .into_iter()
        .filter(|e| e.stream.as_deref() == Some(&format!("run:{}", run.run_id)))
        .filter_map(|e| serde_json::from_slice::<RunEvent>(&e.body).ok())
        .find_map(|e| e.usage().cloned())
        .expect("usage on the outcome");
    let cost = spent.usage.cost_usd.unwrap();
    assert!((0.35..3.0).contains(&cost), "{cost}");

    // The repository's day is spent too: the next task waits, and /health says why.
    let cheap = new_task("Spend little").create(&app).await;
    board::dispatcher_ticks(&app, 3).await;
    assert!(
        board::runs(&app, cheap).await.is_empty(),
        "started in a spent budget"
    );
    let (_, health) = app.health().await;
    assert_eq!(health["status"], "warn", "{health:#}");
    let problems = health["problems"].to_string();
    assert!(
        problems.contains(&format!("of $0.35 for {REPO} on ")),
        "{problems}"
    );

    // Each spent budget is told to every chat once: the task's (the agent stopped) and the repository's day.
    let spent_notices = || {
        telegram
            .sent()
            .into_iter()
            .filter(|s| s.text.starts_with("<b>Budget spent</b>"))
            .map(|s| (s.chat, s.text))
            .collect::<Vec<_>>()
    };
    within(
        Duration::from_secs(30),
        "the budget notices sent",
        || async {
            app.tick("effects:telegram").await;
            spent_notices().len() >= 4
        },
    )
    .await;
    for _ in 0..3 {
        app.project().await;
        app.tick("dispatcher").await;
        app.tick("effects:telegram").await;
    }
    let notices = spent_notices();
    assert_eq!(notices.len(), 4, "{notices:#?}");
    for chat in [11, 22] {
        assert!(notices
            .iter()
            .any(|(c, text)| *c == chat && text.contains(&format!("for task {costly}"))));
        assert!(notices
            .iter()
            .any(|(c, text)| *c == chat && text.contains(&format!("for {REPO} on "))));
    }

    // The task came from Linear: its issue hears its budget spent, once. (Whether it also heard "nearly spent"
    // depends on whether the meter read the stream between `soft_at` and the limit: the soft notice's own test
    // counts that one.)
    let budget_comments = || {
        linear
            .comments()
            .into_iter()
            .filter(|(on, body)| {
                *on == issue.to_string()
                    && body.contains("budget exceeded")
                    && body.contains("raise it with `pidevops budget raise")
            })
            .count()
    };
    within(
        Duration::from_secs(30),
        "the Linear budget comment",
        || async {
            app.tick("effects:linear").await;
            budget_comments() >= 1
        },
    )
    .await;
    app.tick("effects:linear").await;
    assert_eq!(budget_comments(), 1, "{:?}", linear.comments());

    // A raise of what the file leaves unlimited is refused, and raises nothing.
    let (status, refused) = raise(&app, json!({"scope": "day", "usd": 5})).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"], "bad_raise");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("budgets.daily_usd is not set")),
        "{refused}"
    );
    // A person raises today's budget of the repository (a retried request is one raise): the task runs.
    let body = json!({"scope": "repo", "repo": REPO, "usd": 10, "request_id": "raise-1"});
    let (status, first) = raise(&app, body.clone()).await;
    assert_eq!(
        (status, first["raised"].clone()),
        (200, json!(true)),
        "{first}"
    );
    let (_, again) = raise(&app, body).await;
    assert_eq!(again["raised"], json!(false), "{again}");
    let raises = app
        .all_events()
        .await
        .into_iter()
        .filter(|e| e.event_type == "budget.raised")
        .count();
    assert_eq!(raises, 1);
    within(
        Duration::from_secs(60),
        "the cheap task in review",
        || async { board::row(&app, cheap).await.column == Column::InReview },
    )
    .await;

    // The dashboard's spend page raises too, with the form's CSRF token; without it, or asking for nothing to
    // raise, nothing is raised.
    let cookie = crate::web::sign_in(&app).await;
    let (status, html) = crate::web::get(&app, "/spend", &cookie).await;
    assert_eq!(status, 200);
    assert!(html.contains("action=\"/spend/raise\""), "the raise form");
    let token = crate::web::csrf(&html);
    let post = |form: Vec<(&'static str, String)>| {
        let (app, cookie) = (&app, cookie.clone());
        async move {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap()
                .post(app.url("/spend/raise"))
                .header("cookie", cookie)
                .form(&form)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let task_raise = |csrf: String| {
        vec![
            ("csrf", csrf),
            ("scope", "task".to_owned()),
            ("target", costly.to_string()),
            ("usd", "1".to_owned()),
        ]
    };
    assert_eq!(post(task_raise("0".repeat(64))).await, 403);
    let nothing = vec![
        ("csrf", token.clone()),
        ("scope", "day".to_owned()),
        ("usd", "5".to_owned()),
    ];
    assert_eq!(post(nothing).await, 400);
    assert_eq!(post(task_raise(token)).await, 303);
    let raised: Vec<Value> = app
        .all_events()
        .await
        .into_iter()
        .filter(|e| e.event_type == "budget.raised")
        .map(|e| serde_json::from_slice(&e.body).unwrap())
        .collect();
    assert_eq!(raised.len(), 2, "{raised:?}");
    assert_eq!(raised[1]["by"], "dashboard");
    assert_eq!(
        raised[1]["scope"],
        json!({"kind": "task", "task": costly.to_string()})
    );
    app.stop().await;
}

/// A Codex-like agent: with "Overflow" in its task, a `turn.completed` claiming u64::MAX input tokens; else 110
/// tokens.
const CODEX_OR_OVERFLOW: &str = r#"if grep -q "Overflow" "$1"; then
echo '{"type":"turn.completed","usage":{"input_tokens":18446744073709551615,"cached_input_tokens":0,"output_tokens":1}}'
else
echo '{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":0,"output_tokens":10}}'
fi
echo "$RANDOM" > "hello-$$.txt""#;

/// The second repository of the refused-figures test.
const OTHER: &str = "acme/web";

async fn a_run_whose_figures_were_refused_holds_its_repositorys_day_until_a_person_raises_it(
    db: TestDb,
) {
    let (remote, other) = (Remote::new(), Remote::new());
    let scratch = tempfile::tempdir().unwrap();
    let agent = bash_agent(scratch.path(), "codex.sh", CODEX_OR_OVERFLOW);
    // Only the repositories' days are limited, far above what the agents read as spent.
    let file: toml::Table = format!(
        r#"
        [board]
        approval = "auto"
        max_attempts = 1

        [dispatch]
        agent = "codex-like"
        max_concurrent = 2
        per_repo = 2
        heartbeat_s = 0.3
        retry_backoff_s = 0.05

        [agents.codex-like]
        command = ["{agent}", "{{prompt_file}}"]
        usage = "codex"

        [budgets]
        repo_daily_tokens = 1000000

        [repos."{REPO}"]
        url = "{url}"

        [repos."{OTHER}"]
        url = "{other}"
        "#,
        agent = agent.display(),
        url = remote.url(),
        other = other.url(),
    )
    .parse()
    .unwrap();
    let config_text = toml::to_string(&file).unwrap();
    let mut settings = crate::common::settings(&db);
    settings.file = pidevops::config::FileConfig::try_from(file).unwrap();
    settings.workspace_root = scratch.path().join("ws");
    let app = TestApp::spawn(settings).await;

    // The attack: u64::MAX tokens, refused; the run ends over budget, its task flagged.
    let overflow = new_task("Overflow the books").create(&app).await;
    let run = board::first_run_ended(&app, overflow, Duration::from_secs(60)).await;
    assert_eq!(run.failure.as_deref(), Some("budget"), "{run:?}");
    assert!(
        run.detail
            .as_deref()
            .is_some_and(|d| d.contains("usage figures were refused")),
        "{run:?}"
    );

    // The repository's day counts as spent (nothing readable was, far under its limit): its next task is held;
    // another repository's runs.
    let next = new_task("Add hello").create(&app).await;
    let elsewhere = new_task("Add hello elsewhere")
        .repo(OTHER)
        .create(&app)
        .await;
    within(
        Duration::from_secs(60),
        "the other repository's task in review",
        || async { board::row(&app, elsewhere).await.column == Column::InReview },
    )
    .await;
    board::dispatcher_ticks(&app, 3).await;
    assert!(
        board::runs(&app, next).await.is_empty(),
        "started in a day whose figures were refused"
    );
    assert_eq!(board::row(&app, next).await.column, Column::Todo);
    let (_, health) = app.health().await;
    assert_eq!(health["status"], "warn", "{health:#}");
    let problems = health["problems"].to_string();
    assert!(
        problems.contains(&format!("usage figures refused for {REPO} on "))
            && !problems.contains(&format!("for {OTHER} on")),
        "{problems}"
    );
    assert_eq!(
        health["loops"]["dispatcher"]["detail"]["over_budget"], 1,
        "{health:#}"
    );

    // The API, the CLI and the spend page say so.
    let budgets: Value = app
        .client
        .get(app.url(&format!("/api/budgets?task={next}")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let standing = &budgets["standings"][0];
    assert_eq!(
        (
            standing["scope"]["repo"].as_str(),
            standing["figures_refused"].as_bool(),
            standing["refused_runs"].as_u64()
        ),
        (Some(REPO), Some(true), Some(1)),
        "{budgets:#}"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pidevops.toml"), &config_text).unwrap();
    let cli = |args: &[&str]| {
        let out = crate::common::server::command(&db.url_string(), dir.path())
            .arg("budget")
            .args(args)
            .output()
            .expect("the binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{args:?}: {stderr}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let shown = cli(&["show", &next.to_string()]);
    assert!(
        shown.contains(&format!("{REPO} on "))
            && shown.contains("SPENT: figures refused (raise it to go on)"),
        "{shown}"
    );
    let cookie = crate::web::sign_in(&app).await;
    let (status, html) = crate::web::get(&app, "/spend", &cookie).await;
    assert_eq!(status, 200);
    assert!(
        html.contains("(1 figures refused)"),
        "the refused run on the spend page"
    );

    // A person raises the repository's day (by the smallest amount): what it spent is counted again, the task runs.
    let raised = cli(&["raise", "--repo", REPO, "--tokens", "1"]);
    assert!(
        raised.starts_with(&format!("raised {REPO} on ")),
        "{raised}"
    );
    within(
        Duration::from_secs(60),
        "the held task in review after the raise",
        || async { board::row(&app, next).await.column == Column::InReview },
    )
    .await;
    let shown = cli(&["show", &next.to_string()]);
    assert!(!shown.contains("SPENT"), "{shown}");
    app.stop().await;
}

/// A run that passes `soft_at` of its task's budget (4,200 of 5,000 tokens at 0.8) and ends in review: its task is
/// no longer a candidate the claim checks, and still its budget gets its one "nearly spent" notice.
#[tokio::test]
async fn a_run_past_the_soft_limit_gets_one_nearly_spent_notice() {
    let db = TestDb::sqlite();
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let agent = bash_agent(
        scratch.path(),
        "nearly.sh",
        r#"echo "spent 4000 in, 200 out, \$0.00"; echo nearly > nearly.txt"#,
    );
    let mut file = config(&remote, &agent);
    file["budgets"] = "[budgets]\ntask_tokens = 5000\nsoft_at = 0.8"
        .parse::<toml::Table>()
        .unwrap()["budgets"]
        .clone();
    let mut settings = crate::common::settings(&db);
    settings.file = pidevops::config::FileConfig::try_from(file).unwrap();
    settings.workspace_root = scratch.path().join("ws");
    let app = TestApp::spawn(settings).await;
    let id = new_task("Spend most").create(&app).await;
    within(Duration::from_secs(60), "the task in review", || async {
        board::row(&app, id).await.column == Column::InReview
    })
    .await;
    let notices = || async {
        app.all_events()
            .await
            .into_iter()
            .filter(|e| e.event_type == pidevops::budgets::NOTICE)
            .map(|e| serde_json::from_slice::<pidevops::budgets::Notice>(&e.body).unwrap())
            .collect::<Vec<_>>()
    };
    within(Duration::from_secs(30), "the soft notice", || async {
        !notices().await.is_empty()
    })
    .await;
    let notices = notices().await;
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0].level, "soft");
    assert_eq!(
        notices[0].words,
        format!("task {id} has spent 80 % of a budget")
    );
    app.stop().await;
}

/// Past its task's 5,000 tokens at once, then works on (the meter stops it), unless its task is cheap.
const OVER_OR_CHEAP: &str = r#"if grep -q "Spend a lot" "$1"; then
  echo "spent 6000 in, 0 out, \$0.00"; sleep 30; exit 0
fi
echo "spent 10 in, 1 out, \$0.00"; echo cheap > "cheap-$$.txt""#;

/// The dispatcher reads its candidates' own spend together (one statement, not one per candidate): in one queue, the
/// task that spent past its own budget (a person cleared its flag without raising it) is held, and only it; the
/// tasks queued with it start.
async fn a_queued_task_past_its_own_budget_is_held_while_the_rest_of_the_queue_starts(db: TestDb) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let agent = bash_agent(scratch.path(), "over.sh", OVER_OR_CHEAP);
    let mut file = config(&remote, &agent);
    file["budgets"] = "[budgets]\ntask_tokens = 5000"
        .parse::<toml::Table>()
        .unwrap()["budgets"]
        .clone();
    let mut settings = crate::common::settings(&db);
    settings.file = pidevops::config::FileConfig::try_from(file).unwrap();
    settings.workspace_root = scratch.path().join("ws");
    let app = TestApp::spawn(settings).await;

    let costly = new_task("Spend a lot").create(&app).await;
    let run = board::first_run_ended(&app, costly, Duration::from_secs(60)).await;
    assert_eq!(run.failure.as_deref(), Some("budget"), "{run:?}");
    within(
        Duration::from_secs(30),
        "the costly task flagged",
        || async { board::row(&app, costly).await.needs_human },
    )
    .await;

    // One queue: the costly task, its flag cleared (its budget not raised), and three cheap ones behind it.
    pidevops::dispatch::dispatcher::set_paused(&app.state.log, true, "test", None)
        .await
        .unwrap();
    let mut cheap = Vec::new();
    for n in 0..3 {
        cheap.push(new_task(&format!("Spend little {n}")).create(&app).await);
    }
    app.state
        .board
        .execute(costly, &pidevops::tasks::Command::ClearNeedsHuman, "test")
        .await
        .unwrap();
    pidevops::dispatch::dispatcher::set_paused(&app.state.log, false, "test", None)
        .await
        .unwrap();
    board::dispatcher_ticks(&app, 1).await;
    let (_, health) = app.health().await;
    assert_eq!(
        health["loops"]["dispatcher"]["detail"]["over_budget"], 1,
        "{health:#}"
    );

    for id in &cheap {
        within(
            Duration::from_secs(60),
            "a cheap task in review",
            || async { board::row(&app, *id).await.column == Column::InReview },
        )
        .await;
    }
    board::dispatcher_ticks(&app, 3).await;
    assert_eq!(
        board::runs(&app, costly).await.len(),
        1,
        "started past its budget"
    );
    assert_eq!(board::row(&app, costly).await.column, Column::Todo);
    app.stop().await;
}
