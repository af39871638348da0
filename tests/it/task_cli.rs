//! `pidevops task …` as an operator runs it: the real binary against a real database.

use crate::common::server::command;
use crate::common::TestDb;

per_backend!(
    the_board_from_a_terminal,
    dispatch_is_paused_and_resumed_from_a_terminal,
    plans_from_a_terminal,
);

fn run(db: &TestDb, dir: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = command(&db.url_string(), dir)
        .arg("task")
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn the_board_from_a_terminal(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("pidevops.toml"),
        "[intake]\nallow_repos = [\"acme/*\"]\n",
    )
    .unwrap();
    // A repository the configuration does not allow: refused, naming it and how to allow it; nothing written.
    let (ok, _, err) = run(
        &db,
        dir.path(),
        &["new", "other-org/app", "Push", "elsewhere"],
    );
    assert!(!ok);
    assert!(
        err.contains("other-org/app is not an allowed repository") && err.contains("allow_repos"),
        "{err}"
    );
    let (ok, out, err) = run(
        &db,
        dir.path(),
        &[
            "new",
            "acme/api",
            "Fix",
            "the",
            "login",
            "redirect",
            "--done-when",
            "tests pass",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.starts_with("created: T-1"), "{out}");
    assert!(
        out.contains("triage") && out.contains("Fix the login redirect"),
        "{out}"
    );

    let (ok, out, _) = run(&db, dir.path(), &["approve", "T-1", "--json"]);
    assert!(ok);
    let task: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(task["column"], "todo");
    let (ok, out, _) = run(&db, dir.path(), &["approve", "T-1"]);
    assert!(ok);
    assert!(
        out.starts_with("unchanged"),
        "approving twice is a no-op: {out}"
    );

    // A refused transition: exit 1 and the reason, nothing written.
    let (ok, _, err) = run(&db, dir.path(), &["archive", "T-1"]);
    assert!(!ok);
    assert!(
        err.contains("T-1 is todo; archive needs done or cancelled"),
        "{err}"
    );
    let (ok, _, err) = run(&db, dir.path(), &["show", "T-7"]);
    assert!(!ok);
    assert!(err.contains("there is no task T-7"), "{err}");
    let (ok, _, err) = run(&db, dir.path(), &["new", "not-a-repo", "x"]);
    assert!(!ok);
    assert!(err.contains("not owner/name"), "{err}");

    let (ok, out, _) = run(&db, dir.path(), &["show", "T-1", "--json"]);
    assert!(ok);
    let shown: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let types: Vec<&str> = shown["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["task.created", "task.approved"]);
    assert_eq!(shown["task"]["spec"]["done_when"], "tests pass");

    // The agent of the next attempt, picked and put back; a bad name changes nothing.
    let (ok, out, err) = run(&db, dir.path(), &["agent", "T-1", "codex", "--json"]);
    assert!(ok, "{err}");
    let task: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(task["agent"], "codex");
    let (ok, _, err) = run(&db, dir.path(), &["agent", "T-1", "Codex"]);
    assert!(!ok);
    assert!(err.contains("agent profile name \"Codex\""), "{err}");
    let (ok, out, err) = run(&db, dir.path(), &["agent", "T-1", "--default"]);
    assert!(ok && out.starts_with("updated"), "{out}{err}");
    let (ok, _, err) = run(&db, dir.path(), &["agent", "T-1"]);
    assert!(!ok, "a name or --default is required: {err}");
    let (ok, out, err) = run(
        &db,
        dir.path(),
        &["new", "acme/api", "Port", "it", "--agent", "pi", "--json"],
    );
    assert!(ok, "{err}");
    let task: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (task["id"].as_str(), task["agent"].as_str()),
        (Some("T-2"), Some("pi"))
    );

    // T-2's spec edited before it starts: the parts given change, the rest stays; a bad edit changes nothing.
    let (ok, out, err) = run(
        &db,
        dir.path(),
        &["spec", "T-2", "--done-when", "it builds", "--json"],
    );
    assert!(ok, "{err}");
    let task: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        task["spec"],
        serde_json::json!({"task": "Port it", "scope": "", "done_when": "it builds"})
    );
    let (ok, _, err) = run(&db, dir.path(), &["spec", "T-2", "--task", " "]);
    assert!(!ok);
    assert!(err.contains("spec task must not be empty"), "{err}");
    let (ok, _, err) = run(&db, dir.path(), &["spec", "T-2"]);
    assert!(!ok, "a part is required: {err}");

    // No server runs here: `list` brings the read model up to the log itself.
    let (ok, out, err) = run(&db, dir.path(), &["list"]);
    assert!(ok, "{err}");
    assert!(out.contains("todo (1)") && out.contains("T-1"), "{out}");
    assert!(out.contains("triage (1)") && out.contains("T-2"), "{out}");
    let (ok, out, _) = run(&db, dir.path(), &["list", "--column", "done", "--json"]);
    assert!(ok);
    assert_eq!(out.trim(), "[]");

    let (ok, out, _) = run(
        &db,
        dir.path(),
        &["cancel", "T-1", "--reason", "duplicate of T-9"],
    );
    assert!(ok);
    assert!(out.contains("cancelled"), "{out}");
    let (ok, out, _) = run(&db, dir.path(), &["show", "T-1"]);
    assert!(ok);
    assert!(
        out.contains("cancelled: duplicate of T-9") && out.contains("cli"),
        "{out}"
    );
}

async fn dispatch_is_paused_and_resumed_from_a_terminal(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let dispatch = |args: &[&str]| {
        let out = command(&db.url_string(), dir.path())
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
    assert_eq!(dispatch(&["status"]).1, "running");
    let (ok, out, err) = dispatch(&["pause", "--reason", "deploy freeze"]);
    assert!(ok, "{err}");
    assert_eq!(out, "paused");
    assert_eq!(dispatch(&["pause"]).1, "already paused");
    assert_eq!(
        dispatch(&["status"]).1,
        "paused: paused by cli: deploy freeze"
    );
    let (ok, _, err) = dispatch(&["pause", "--reason", " "]);
    assert!(!ok && err.contains("--reason"), "{err}");
    assert_eq!(dispatch(&["resume"]).1, "resumed");
    assert_eq!(dispatch(&["resume"]).1, "not paused");
    assert_eq!(dispatch(&["status"]).1, "running");
}

fn plan_cli(db: &TestDb, dir: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = command(&db.url_string(), dir)
        .arg("plan")
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `pidevops plan …`: refused without a planner or for a repository not allowed; made, shown with its
/// proposal's items, rejected only with a comment, approved, and shown with its items as tasks. What the planner
/// and the plans loop would do in between is recorded here in-process, on the same database.
async fn plans_from_a_terminal(db: TestDb) {
    use pidevops::tasks::{Command, Reason, TaskId};
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("pidevops.toml");
    std::fs::write(&toml, "[intake]\nallow_repos = [\"acme/*\"]\n").unwrap();
    let (ok, _, err) = plan_cli(&db, dir.path(), &["new", "acme/api", "Build", "it"]);
    assert!(!ok);
    assert!(
        err.contains("no planner profile is configured") && err.contains("[dispatch] planner"),
        "{err}"
    );
    std::fs::write(
        &toml,
        "[dispatch]\nenabled = false\nplanner = \"claude\"\n[intake]\nallow_repos = [\"acme/*\"]\n",
    )
    .unwrap();
    let (ok, _, err) = plan_cli(
        &db,
        dir.path(),
        &["new", "other-org/app", "Push", "elsewhere"],
    );
    assert!(!ok);
    assert!(
        err.contains("other-org/app is not an allowed repository"),
        "{err}"
    );
    let (ok, out, err) = plan_cli(
        &db,
        dir.path(),
        &[
            "new",
            "acme/api",
            "Build",
            "the",
            "three",
            "parts",
            "--done-when",
            "the parts exist",
            "--json",
        ],
    );
    assert!(ok, "{err}");
    let made: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (&made["id"], &made["kind"], &made["column"]),
        (&"T-1".into(), &"plan".into(), &"todo".into()),
        "{made}"
    );
    assert_eq!(made["spec"]["done_when"], "the parts exist");
    let (ok, out, _) = plan_cli(&db, dir.path(), &["show", "T-1"]);
    assert!(ok);
    assert!(out.contains("Goal:      Build the three parts"), "{out}");
    assert!(out.contains("proposal:  none yet"), "{out}");

    // The planner proposes (in-process, as the dispatcher records it).
    let store = pidevops::eventlog::EventStore::connect(&db.url, 4)
        .await
        .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let (log, _appender) =
        pidevops::eventlog::EventLog::start(store, std::time::Duration::from_secs(5), stop.clone());
    let board = pidevops::board::Board::new(log.clone(), Default::default());
    let plan: TaskId = "T-1".parse().unwrap();
    crate::plans::propose(&board, plan, &crate::plans::three_items()).await;
    let (ok, out, _) = plan_cli(&db, dir.path(), &["show", "T-1"]);
    assert!(ok);
    for expected in [
        "proposal:  revision 1, 3 item(s), waiting for approval",
        "three parts",
        "Part A  scope: a/**",
        "Part C  scope: c/**  after: a, b",
    ] {
        assert!(out.contains(expected), "{expected:?} in:\n{out}");
    }

    // A rejection says what to change: without a comment there is nothing for the planner.
    let (ok, _, err) = plan_cli(&db, dir.path(), &["reject", "T-1"]);
    assert!(!ok && err.contains("--comment"), "{err}");
    let (ok, _, err) = plan_cli(&db, dir.path(), &["reject", "T-1", "--comment", " "]);
    assert!(!ok && err.contains("what to change"), "{err}");
    let (ok, out, err) = plan_cli(
        &db,
        dir.path(),
        &["reject", "T-1", "--comment", "Merge A and B into one item"],
    );
    assert!(ok, "{err}");
    assert!(out.starts_with("updated: T-1"), "{out}");
    let (ok, out, _) = plan_cli(&db, dir.path(), &["show", "T-1", "--json"]);
    assert!(ok);
    let shown: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(shown["plan"]["column"], "todo");
    assert_eq!(
        shown["plan"]["plan"]["rejection"],
        "Merge A and B into one item"
    );
    // Approving needs a proposal waiting.
    let (ok, _, err) = plan_cli(&db, dir.path(), &["approve", "T-1"]);
    assert!(
        !ok && err.contains("not a plan with a proposal waiting"),
        "{err}"
    );

    crate::plans::propose(&board, plan, &crate::plans::three_items()).await;
    let (ok, out, err) = plan_cli(&db, dir.path(), &["approve", "T-1"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("updated: T-1"), "{out}");
    let (ok, out, _) = plan_cli(&db, dir.path(), &["approve", "T-1"]);
    assert!(ok && out.starts_with("unchanged"), "{out}");

    // The plans loop makes the items tasks (ticked until it has: one tick hands back at its budget, which a
    // loaded machine can reach first); one of them waits for a person.
    let plans = pidevops::plans::Plans::new(
        log.clone(),
        board.clone(),
        pidevops::config::file::PlanLand::Separate,
    );
    let c: TaskId = "T-4".parse().unwrap();
    crate::common::within(
        std::time::Duration::from_secs(30),
        "the plan's items made",
        || async {
            plans.tick().await.unwrap();
            board.load(c).await.unwrap().is_some()
        },
    )
    .await;
    board
        .execute(
            c,
            &Command::FlagNeedsHuman {
                reason: Reason::new("needs a database").unwrap(),
            },
            "test",
        )
        .await
        .unwrap();
    let (ok, out, _) = plan_cli(&db, dir.path(), &["show", "T-1"]);
    assert!(ok);
    assert!(out.contains("revision 2, 3 item(s), approved"), "{out}");
    assert!(out.contains("items:"), "{out}");
    for (id, title) in [("T-2", "Part A"), ("T-3", "Part B"), ("T-4", "Part C")] {
        let item = out
            .lines()
            .find(|l| l.trim_start().starts_with(id))
            .unwrap_or_else(|| panic!("{id} in:\n{out}"));
        assert!(item.contains("todo") && item.contains(title), "{item}");
    }
    assert!(out.contains("[needs human: needs a database]"), "{out}");
    let (ok, out, _) = plan_cli(&db, dir.path(), &["show", "T-1", "--json"]);
    assert!(ok);
    let shown: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let items = shown["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert!(items.iter().all(|i| i["parent"] == "T-1"), "{shown}");

    // A task is not a plan, and a task that does not exist is named.
    let (ok, _, err) = plan_cli(&db, dir.path(), &["show", "T-2"]);
    assert!(!ok && err.contains("T-2 is a task, not a plan"), "{err}");
    let (ok, _, err) = plan_cli(&db, dir.path(), &["approve", "T-2"]);
    assert!(!ok && err.contains("T-2 is a task, not a plan"), "{err}");
    let (ok, _, err) = plan_cli(&db, dir.path(), &["show", "T-9"]);
    assert!(!ok && err.contains("there is no task T-9"), "{err}");
    stop.cancel();
}
