//! `pidevops whatif --agent`, the real binary over the read models: what each profile cost per merged pull
//! request in the range, from runs recorded as the runner records them and tasks merged through the board.

use chrono::{Duration, Utc};

use crate::common::server::cli;
use crate::common::{TestApp, TestDb};
use crate::web_spend::{merge, new_run, run_spent, spent, start, task_in};

per_backend!(a_profiles_cost_per_merged_pull_request_against_another_is_read_from_the_log);

async fn a_profiles_cost_per_merged_pull_request_against_another_is_read_from_the_log(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let now = Utc::now();
    // claude: two tasks merged, $1.50 spent over three runs (one on a task that was not merged).
    for (n, cost, merged) in [(1, 0.5, true), (2, 0.75, true), (3, 0.25, false)] {
        let id = task_in(&app, "acme/app", &format!("claude task {n}")).await;
        let run = new_run();
        start(&app, id, run).await;
        run_spent(
            &app,
            id,
            run,
            ("acme/app", "claude"),
            spent(100, 10, 0, 0, Some(cost)),
            now,
        )
        .await;
        if merged {
            merge(&app, id, run, "acme/app", 10 + n).await;
        }
    }
    // codex: one task merged; Codex reports no cost.
    let id = task_in(&app, "acme/app", "codex task").await;
    let run = new_run();
    start(&app, id, run).await;
    run_spent(
        &app,
        id,
        run,
        ("acme/app", "codex"),
        spent(300, 30, 0, 0, None),
        now,
    )
    .await;
    merge(&app, id, run, "acme/app", 20).await;
    // pi: spent long before the range.
    let id = task_in(&app, "acme/app", "old pi task").await;
    let run = new_run();
    start(&app, id, run).await;
    run_spent(
        &app,
        id,
        run,
        ("acme/app", "pi"),
        spent(1, 1, 0, 0, Some(9.0)),
        now - Duration::days(60),
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let run_cli = |args: &[&str]| cli(&db.url_string(), dir.path(), &[&["whatif"], args].concat());
    let (code, json, err) = run_cli(&["--agent", "claude", "--against", "codex", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let profiles = report["profiles"].as_array().unwrap();
    let line = |i: usize, key: &str| profiles[i][key].clone();
    assert_eq!(profiles.len(), 2, "{json}");
    assert_eq!(line(0, "profile"), "claude");
    assert_eq!(line(0, "merged_pull_requests"), 2);
    assert_eq!(profiles[0]["spent"]["runs"], 3);
    let per = line(0, "cost_per_merged_pull_request").as_f64().unwrap();
    assert!((per - 0.75).abs() < 1e-9, "{json}");
    assert_eq!(line(1, "profile"), "codex");
    assert_eq!(line(1, "merged_pull_requests"), 1);
    assert_eq!(
        line(1, "cost_per_merged_pull_request"),
        serde_json::Value::Null,
        "unknown, never $0"
    );

    // Readable, every profile that ran in the range (pi's runs are older: not there).
    let (code, text, err) = run_cli(&["--agent", "codex", "--days", "30"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(text.contains("$0.7500 per merged pull request"), "{text}");
    assert!(text.contains("cost unknown"), "{text}");
    assert!(!text.contains("pi "), "{text}");
    let (_, ninety, _) = run_cli(&["--agent", "pi", "--days", "90"]);
    assert!(ninety.contains("$9.0000"), "{ninety}");
    assert!(ninety.contains("no pull request merged"), "{ninety}");

    // Bad input: a precise error, exit 1, nothing printed on stdout.
    for (args, says) in [
        (
            &["--agent", "claude", "--days", "0"][..],
            "days must be from 1 to 366",
        ),
        (&["--agent", ""][..], "is not a profile name"),
    ] {
        let (code, out, err) = run_cli(args);
        assert_ne!(code, Some(0), "{args:?}");
        assert!(out.is_empty(), "{out}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
