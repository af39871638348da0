//! The dispatcher keeps its budgets ledger from one tick to the next (`budgets::Ledger::refresh`): never at the cost
//! of a budget under-counted. A run's usage projected after a tick that kept the ledger holds its task, its
//! repository's day and the day on the next tick; a raise recorded after it lets the held task start; a new day
//! starts from nothing; events without usage (a busy log's most) leave it kept. Dispatch is paused where a tick
//! must only select (a paused tick still checks the budgets).

use std::time::Duration;

use chrono::{NaiveDate, Utc};
use pidevops::budgets::{BudgetsConfig, Ledger, Limit};
use pidevops::domain::runs::{self, RunEvent};
use pidevops::domain::usage::{RunUsage, Usage};
use pidevops::eventlog::EventStore;
use pidevops::tasks::{Column, RunId, TaskId};
use serde_json::Value;

use crate::common::agents::{bash_agent, Remote, REPO};
use crate::common::board::{self, new_task};
use crate::common::{within, TestApp, TestDb};

per_backend!(
    usage_projected_after_a_kept_ledger_holds_the_task_its_repository_and_the_day_on_the_next_tick,
    a_raise_recorded_after_a_kept_ledger_lets_the_held_task_start_on_the_next_tick,
    a_kept_ledger_is_read_again_on_a_new_day,
    events_without_usage_projected_after_a_kept_ledger_do_not_make_the_next_tick_read_it_again,
    an_empty_logs_usage_projector_leaves_the_ledgers_key_where_it_is,
);

/// The second repository.
const OTHER: &str = "acme/web";

/// An app with `budgets` (the `[budgets]` table's lines) over `REPO` and `OTHER`, dispatch paused.
async fn app(db: &TestDb, budgets: &str, scratch: &std::path::Path) -> (TestApp, Remote, Remote) {
    let (remote, other) = (Remote::new(), Remote::new());
    let agent = bash_agent(scratch, "agent.sh", r#"echo "$RANDOM" > "hello-$$.txt""#);
    let file: toml::Table = format!(
        r#"
        [board]
        approval = "auto"

        [dispatch]
        agent = "quiet"
        max_concurrent = 4
        per_repo = 4

        [agents.quiet]
        command = ["{agent}", "{{prompt_file}}"]

        [budgets]
        {budgets}

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
    let mut settings = crate::common::settings(db);
    settings.file = pidevops::config::FileConfig::try_from(file).unwrap();
    settings.workspace_root = scratch.join("ws");
    let app = TestApp::spawn(settings).await;
    pidevops::dispatch::dispatcher::set_paused(&app.state.log, true, "test", None)
        .await
        .unwrap();
    (app, remote, other)
}

/// The limits of the `[budgets]` lines these tests give the app, as the ledger is asked for them: a task's USD (if
/// any) and a repository's daily USD.
fn usd_limits(task: Option<f64>, repo_daily: f64) -> BudgetsConfig {
    BudgetsConfig {
        task: Limit {
            usd: task,
            tokens: None,
        },
        repo_daily: Limit {
            usd: Some(repo_daily),
            tokens: None,
        },
        ..BudgetsConfig::default()
    }
}

/// Records a finished run of `task` in `repo` that spent `usd`, as the dispatcher's run writer would.
async fn spend(app: &TestApp, task: &str, repo: &str, usd: f64) {
    use pidevops::domain::{EventType, NewEvent, Source};
    let (run, task, at) = (
        RunId(uuid::Uuid::now_v7()),
        task.parse::<TaskId>().unwrap(),
        Utc::now(),
    );
    let started = RunEvent::Started {
        at,
        run,
        task,
        attempt: 1,
        profile: "quiet".into(),
        worker: "w".into(),
        log: "/l".into(),
    };
    let ended = RunEvent::Succeeded {
        at,
        run,
        task,
        attempt: 1,
        branch: task.branch(),
        commit: "c".repeat(40),
        duration_s: 1.0,
        tail: "ok".into(),
        report: Default::default(),
        usage: Some(RunUsage {
            repo: repo.into(),
            profile: "quiet".into(),
            usage: Usage {
                input_tokens: 10,
                output_tokens: 1,
                cost_usd: Some(usd),
                ..Usage::default()
            },
            refused: None,
        }),
        reviewer_usage: None,
    };
    for (version, event) in [(1, started), (2, ended)] {
        let key = if event.is_terminal() {
            runs::end_key(run)
        } else {
            format!("run:{run}:{version}")
        };
        let mut new = NewEvent::new(
            Source::Pidevops,
            EventType::from_stored(event.kind().to_owned()),
            key,
            "application/json",
            bytes::Bytes::from(serde_json::to_vec(&event).unwrap()),
        );
        new.stream = Some((runs::stream(run), version));
        new.occurred_at = at;
        app.state.log.append(new).await.unwrap();
    }
}

/// One dispatcher tick after the read models caught up: the tasks a budget held, and the budgets' words.
async fn tick(app: &TestApp) -> (u64, String) {
    board::dispatcher_ticks(app, 1).await;
    let (_, health) = app.health().await;
    let detail = &health["loops"]["dispatcher"]["detail"];
    (
        detail["over_budget"].as_u64().unwrap_or(u64::MAX),
        detail["budgets"].to_string(),
    )
}

async fn usage_projected_after_a_kept_ledger_holds_the_task_its_repository_and_the_day_on_the_next_tick(
    db: TestDb,
) {
    let scratch = tempfile::tempdir().unwrap();
    let budgets = "task_usd = 1.0\nrepo_daily_usd = 5.0\ndaily_usd = 10.0";
    let (app, _remote, _other) = app(&db, budgets, scratch.path()).await;
    let a = new_task("First").create(&app).await;
    let _b = new_task("Second").create(&app).await;
    let _c = new_task("Elsewhere").repo(OTHER).create(&app).await;
    assert_eq!(tick(&app).await.0, 0, "nothing spent yet");

    // The task's own: its next tick holds it, and only it.
    spend(&app, &a.to_string(), REPO, 1.5).await;
    let (held, words) = tick(&app).await;
    assert_eq!(held, 1, "{words}");
    assert!(words.contains(&format!("of $1.00 for task {a}")), "{words}");

    // Its repository's day (another task's run): both of the repository's tasks held, not the other's.
    spend(&app, "T-9001", REPO, 4.0).await;
    let (held, words) = tick(&app).await;
    assert_eq!(held, 2, "{words}");
    assert!(
        words.contains(&format!("of $5.00 for {REPO} on ")),
        "{words}"
    );

    // The day, every repository's: the other repository's task held too.
    spend(&app, "T-9002", OTHER, 4.9).await;
    let (held, words) = tick(&app).await;
    assert_eq!(held, 3, "{words}");
    assert!(
        words.contains("of $10.00 for all repositories on "),
        "{words}"
    );
    app.stop().await;
}

async fn a_raise_recorded_after_a_kept_ledger_lets_the_held_task_start_on_the_next_tick(
    db: TestDb,
) {
    let scratch = tempfile::tempdir().unwrap();
    let (app, _remote, _other) = app(&db, "task_usd = 1.0", scratch.path()).await;
    let held = new_task("Held").create(&app).await;
    spend(&app, &held.to_string(), REPO, 1.5).await;
    assert_eq!(tick(&app).await.0, 1, "past its own budget");
    assert_eq!(tick(&app).await.0, 1, "still, from the kept ledger");

    let raised = pidevops::budgets::Raised {
        at: Utc::now(),
        scope: pidevops::budgets::Scope::task(held),
        usd: Some(5.0),
        tokens: None,
        by: "test".into(),
    };
    assert!(pidevops::budgets::raise(&app.state.log, &raised, None)
        .await
        .unwrap());
    let (over, words) = tick(&app).await;
    assert_eq!(over, 0, "the raise seen: {words}");

    pidevops::dispatch::dispatcher::set_paused(&app.state.log, false, "test", None)
        .await
        .unwrap();
    within(
        Duration::from_secs(60),
        "the raised task started",
        || async {
            board::dispatcher_ticks(&app, 1).await;
            board::row(&app, held).await.column != Column::Todo
        },
    )
    .await;
    app.stop().await;
}

/// The dispatcher takes the day from the wall clock (`Utc::now()`, no clock of its own to set), so the day's turn
/// is driven here through the ledger it keeps: the same ledger, asked for the next day, is read again and starts
/// the day from nothing.
async fn a_kept_ledger_is_read_again_on_a_new_day(db: TestDb) {
    let scratch = tempfile::tempdir().unwrap();
    let (app, _remote, _other) = app(&db, "repo_daily_usd = 5.0", scratch.path()).await;
    let task = new_task("Daily").create(&app).await;
    spend(&app, "T-9001", REPO, 6.0).await;
    app.project().await;
    let config = usd_limits(None, 5.0);
    let store = app.state.log.store();
    let today: NaiveDate = Utc::now().date_naive();
    let asked = [(task, REPO)];
    let ledger = Ledger::refresh(None, store, &config, today, &asked)
        .await
        .unwrap();
    let standings = ledger.standings(store, &config, task, REPO).await.unwrap();
    assert!(
        pidevops::budgets::first_over(&standings, &Default::default()).is_some(),
        "{standings:?}"
    );
    // Kept (nothing moved), the same day: still held.
    let ledger = Ledger::refresh(Some(ledger), store, &config, today, &asked)
        .await
        .unwrap();
    let standings = ledger.standings(store, &config, task, REPO).await.unwrap();
    assert!(pidevops::budgets::first_over(&standings, &Default::default()).is_some());

    let tomorrow = today.succ_opt().unwrap();
    let ledger = Ledger::refresh(Some(ledger), store, &config, tomorrow, &asked)
        .await
        .unwrap();
    let standings = ledger.standings(store, &config, task, REPO).await.unwrap();
    let words: Value = serde_json::to_value(&standings).unwrap();
    assert_eq!(
        standings[0].scope,
        pidevops::budgets::Scope::repo(REPO, tomorrow),
        "{words}"
    );
    assert_eq!(standings[0].spent_usd, 0.0, "{words}");
    assert!(pidevops::budgets::first_over(&standings, &Default::default()).is_none());
    app.stop().await;
}

/// The usage projector's checkpoint (its `projections` row's position).
async fn usage_checkpoint(app: &TestApp) -> i64 {
    let sql = "SELECT position FROM projections WHERE name = 'usage'";
    match app.state.log.store() {
        EventStore::Postgres(s) => sqlx::query_scalar(sql).fetch_one(s.pool()).await.unwrap(),
        EventStore::Sqlite(s) => sqlx::query_scalar(sql).fetch_one(s.pool()).await.unwrap(),
    }
}

/// The usage projector follows the whole log, so its checkpoint moves with every event; the ledger's key moves
/// only when the usage rows do: GitHub pings and task events projected after a kept ledger leave it kept, a run's
/// usage does not (and `pidevops_budget_ledger_reads_total` counts the reads on /metrics).
async fn events_without_usage_projected_after_a_kept_ledger_do_not_make_the_next_tick_read_it_again(
    db: TestDb,
) {
    let scratch = tempfile::tempdir().unwrap();
    let (app, _remote, _other) =
        app(&db, "task_usd = 1.0\nrepo_daily_usd = 5.0", scratch.path()).await;
    let task = new_task("Kept").create(&app).await;
    spend(&app, "T-9001", REPO, 1.0).await;
    app.project().await;
    let config = usd_limits(Some(1.0), 5.0);
    let store = app.state.log.store();
    let today: NaiveDate = Utc::now().date_naive();
    let asked = [(task, REPO)];
    let ledger = Ledger::refresh(None, store, &config, today, &asked)
        .await
        .unwrap();
    assert_eq!(ledger.reads(), 1);
    let ledger = Ledger::refresh(Some(ledger), store, &config, today, &asked)
        .await
        .unwrap();
    assert_eq!(ledger.reads(), 1, "kept: nothing moved");

    // A busy log's events, none with usage: the usage projector's checkpoint moves past them, the ledger is kept.
    let before = usage_checkpoint(&app).await;
    for i in 0..3 {
        let ping = app
            .post_github(
                "ping",
                &format!("ledger-ping-{i}"),
                br#"{"zen":"ok","hook_id":1}"#,
            )
            .await;
        assert_eq!(ping.status(), 200);
    }
    new_task("Another").create(&app).await;
    app.project().await;
    assert!(
        usage_checkpoint(&app).await > before,
        "the usage projector followed the log"
    );
    let ledger = Ledger::refresh(Some(ledger), store, &config, today, &asked)
        .await
        .unwrap();
    assert_eq!(ledger.reads(), 1, "kept across events without usage");

    // Usage projected: read again, and it counts.
    spend(&app, &task.to_string(), REPO, 1.5).await;
    app.project().await;
    let ledger = Ledger::refresh(Some(ledger), store, &config, today, &asked)
        .await
        .unwrap();
    assert_eq!(ledger.reads(), 2, "read again after usage");
    let standings = ledger.standings(store, &config, task, REPO).await.unwrap();
    assert!(
        pidevops::budgets::first_over(&standings, &Default::default()).is_some(),
        "{standings:?}"
    );
    let metrics = app.metrics().await;
    assert!(
        metrics.contains(pidevops::budgets::READS_METRIC),
        "{metrics}"
    );
    app.stop().await;
}

/// A usage projector at position 0 empties its tables on every tick until the log's first event: tables that held
/// nothing are no change, so the ledger's key stays where it is (each such tick bumped it, an UPDATE a tick).
async fn an_empty_logs_usage_projector_leaves_the_ledgers_key_where_it_is(db: TestDb) {
    use pidevops::budgets::LedgerKey;
    use pidevops::projectors::usage::UsageProjector;
    use pidevops::projectors::Projection;

    let store = EventStore::connect(&db.url, 4).await.unwrap();
    store.migrate().await.unwrap();
    let today = Utc::now().date_naive();
    let before = LedgerKey::read(&store, today).await.unwrap();
    let projection =
        Projection::with_batch(store.clone(), std::sync::Arc::new(UsageProjector), 100);
    for _ in 0..3 {
        projection.step(100).await.unwrap();
    }
    projection.reset().await.unwrap();
    assert_eq!(LedgerKey::read(&store, today).await.unwrap(), before);
}
