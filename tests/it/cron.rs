//! Cron through the real app: a schedule creates its task on time, shows its next fire time in `/health`, and
//! after downtime fires once for what it missed, not once per missed slot. Per backend.

use std::time::Duration;

use crate::common::{within, TestApp, TestDb};
use chrono::{DateTime, Utc};
use pidevops::cron::CronEvent;
use pidevops::projectors::tasks as task_rows;

per_backend!(
    a_schedule_creates_its_task_on_time_and_after_downtime_fires_once,
    a_bad_schedule_stops_serve_and_names_the_key,
);

fn settings(db: &TestDb) -> pidevops::config::Settings {
    let mut settings = crate::common::settings(db);
    settings.file = r#"
        [[schedules]]
        name = "every-two-seconds"
        cron = "*/2 * * * * *"
        [schedules.task]
        repo = "acme/app"
        task = "Look at the nightly report"
        done_when = "the report is read"
        priority = "high"
    "#
    .parse()
    .unwrap();
    settings
}

async fn fired(app: &TestApp) -> Vec<(DateTime<Utc>, pidevops::tasks::TaskId)> {
    app.state
        .log
        .store()
        .read_stream("cron:every-two-seconds")
        .await
        .unwrap()
        .iter()
        .filter_map(|e| match serde_json::from_slice(&e.body).unwrap() {
            CronEvent::Fired { slot, task, .. } => Some((slot, task.expect("a task schedule"))),
            CronEvent::Armed { .. } => None,
        })
        .collect()
}

async fn a_schedule_creates_its_task_on_time_and_after_downtime_fires_once(db: TestDb) {
    let app = TestApp::spawn(settings(&db)).await;
    within(Duration::from_secs(10), "two firings", || async {
        fired(&app).await.len() >= 2
    })
    .await;
    let before = fired(&app).await;
    let (slot, task) = before[0];
    assert_eq!(slot.timestamp() % 2, 0, "on a slot: {slot}");
    // The board's read model, brought to the log's head.
    app.project().await;
    let row = task_rows::get(app.state.log.store(), task)
        .await
        .unwrap()
        .expect("the scheduled task on the board");
    assert_eq!(row.title, "Look at the nightly report");
    assert_eq!(row.priority, pidevops::tasks::Priority::High);
    let (_, health) = app.health().await;
    let schedule = &health["loops"]["cron"]["detail"]["schedules"][0];
    assert_eq!(schedule["name"], "every-two-seconds", "{health}");
    let next: DateTime<Utc> = schedule["next_at"].as_str().unwrap().parse().unwrap();
    assert!(
        next > Utc::now() - chrono::Duration::seconds(3),
        "{schedule}"
    );
    app.stop().await;

    // Down for long enough to miss three slots: the restarted service's clock is 7 s ahead (no waiting for it).
    let last = fired_after_stop(&db).await;
    let restarted = settings(&db);
    restarted.clock.advance(chrono::Duration::seconds(7));
    let restarted_at = restarted.clock.now();
    let app = TestApp::spawn(restarted).await;
    within(
        Duration::from_secs(10),
        "a firing after the restart",
        || async { fired(&app).await.iter().any(|(slot, _)| *slot > last) },
    )
    .await;
    let after = fired(&app).await;
    let first_after = after.iter().find(|(slot, _)| *slot > last).unwrap().0;
    assert!(
        first_after >= restarted_at - chrono::Duration::seconds(2),
        "the latest missed slot fires, not the oldest: last {last}, then {first_after}, restarted {restarted_at}"
    );
    let missed = after
        .iter()
        .filter(|(slot, _)| *slot > last && *slot < first_after)
        .count();
    assert_eq!(
        missed, 0,
        "missed slots are not made up one by one: {after:?}"
    );
    // Each firing made its own task, and no slot fired twice.
    let mut tasks: Vec<_> = after.iter().map(|(_, task)| *task).collect();
    tasks.dedup();
    assert_eq!(tasks.len(), after.len());
    let mut slots: Vec<_> = after.iter().map(|(slot, _)| *slot).collect();
    slots.dedup();
    assert_eq!(slots.len(), after.len());
    app.stop().await;
}

/// The last fired slot as the log has it once the app is stopped.
async fn fired_after_stop(db: &TestDb) -> DateTime<Utc> {
    let store = pidevops::eventlog::EventStore::connect(&db.url, 2)
        .await
        .unwrap();
    let events = store.read_stream("cron:every-two-seconds").await.unwrap();
    events
        .iter()
        .filter_map(|e| match serde_json::from_slice(&e.body).unwrap() {
            CronEvent::Fired { slot, .. } => Some(slot),
            CronEvent::Armed { .. } => None,
        })
        .max()
        .unwrap()
}

async fn a_bad_schedule_stops_serve_and_names_the_key(db: TestDb) {
    // Serve reads its settings (and with them the file) before anything else: they refuse it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pidevops.toml");
    std::fs::write(
        &path,
        "[[schedules]]\nname = \"x\"\ncron = \"* * * *\"\n[schedules.task]\nrepo = \"acme/app\"\ntask = \"t\"",
    )
    .unwrap();
    let url = db.url_string();
    let env = pidevops::config::Env::from_pairs([
        ("DATABASE_URL", url.as_str()),
        ("PIDEVOPS_CONFIG", path.to_str().unwrap()),
    ]);
    let error = match pidevops::config::Settings::from_env(&env) {
        Ok(_) => panic!("serve started with a bad schedule"),
        Err(error) => error.to_string(),
    };
    assert!(
        error.contains("schedule \"x\": cron \"* * * *\" is not a 5- or 6-field pattern"),
        "{error}"
    );
}
