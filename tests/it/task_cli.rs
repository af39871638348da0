//! `pidevops task …` as an operator runs it: the real binary against a real database.

use crate::common::server::command;
use crate::common::TestDb;

per_backend!(
    the_board_from_a_terminal,
    dispatch_is_paused_and_resumed_from_a_terminal
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
