//! Dispatch end to end, in-process: real git (a local bare repository as the remote), real agent processes (small
//! shell scripts written here), the real dispatcher, watchdog, projectors and event log.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::agents::{agent, dispatch_file, Remote, REPO};
use crate::common::board::{self, new_task};
use crate::common::{within, TestApp, TestDb};
use pidevops::board::Draft;
use pidevops::projectors::runs::RunRow;
use pidevops::tasks::{Column, Links, RepoName, Spec, TaskId};

per_backend!(
    a_successful_run_pushes_its_branch_and_the_task_goes_to_review,
    each_failure_kind_gives_its_reason_and_the_third_failure_asks_a_human,
    the_agent_never_sees_a_secret_and_cannot_write_outside_its_worktree,
    pausing_stops_new_runs_and_shows_in_health,
    queued_tasks_start_in_worktrees_checked_out_ahead_and_each_starts_from_the_base,
    cancelling_a_task_stops_its_agent,
    a_task_runs_with_the_agent_it_asks_for_and_one_that_cannot_run_waits_for_a_human,
    attempts_bouncing_back_fast_are_flagged_before_the_budget_is_spent,
    when_the_base_moves_the_next_run_starts_from_the_new_base_not_an_old_spare,
);

pub async fn create_task(app: &TestApp, title: &str) -> TaskId {
    create_task_with(app, title, None).await
}

pub async fn create_task_with(app: &TestApp, title: &str, agent: Option<&str>) -> TaskId {
    let task = new_task(title)
        .scope("CHANGES.md")
        .done_when("the change is written down");
    match agent {
        Some(agent) => task.agent(agent),
        None => task,
    }
    .create(app)
    .await
}

/// Waits (up to 30 s) for `id` to reach `in-review`.
pub async fn in_review(app: &TestApp, id: TaskId) {
    within(
        Duration::from_secs(30),
        &format!("{id} in review"),
        || async {
            board::row_now(app, id)
                .await
                .is_some_and(|row| row.column == Column::InReview)
        },
    )
    .await;
}

/// A task's runs, at least one and none running, once the read models are at the log's head. For a task the board
/// already shows moved on by a run: a run's outcome is appended before the task moves, so projecting is enough.
pub async fn ended_runs(app: &TestApp, id: TaskId) -> Vec<RunRow> {
    app.project().await;
    let runs = board::runs_now(app, id).await;
    assert!(
        !runs.is_empty() && runs.iter().all(|r| r.state != "running"),
        "{id}'s runs ended: {runs:?}"
    );
    runs
}

async fn a_successful_run_pushes_its_branch_and_the_task_goes_to_review(db: TestDb) {
    let (app, rig) = TestApp::with_agent(
        "edits.sh",
        r#"echo "working on $(head -n 1 "$1")"
printf 'done by the agent\n' > CHANGES.md"#,
    )
    .spawn(&db)
    .await;
    let remote = &rig.remote;
    let id = create_task(&app, "Write the change down").await;

    in_review(&app, id).await;

    let branch = format!("pidevops/{id}");
    let pushed = remote.branch(&branch).expect("the branch is pushed");
    assert_eq!(
        remote.show(&branch, "CHANGES.md").as_deref(),
        Some("done by the agent\n")
    );
    assert_eq!(
        remote.show(&branch, "README.md").as_deref(),
        Some("# app\n"),
        "the branch starts from main"
    );
    let row = board::row_now(&app, id).await.unwrap();
    assert_eq!(row.attempts, 1);
    assert_eq!(row.state["branch"], branch.as_str());

    // The runs read model is its own projector: brought to the log's head, where the run's outcome already is.
    let runs = ended_runs(&app, id).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = &runs[0];
    assert_eq!(run.state, "succeeded");
    assert_eq!(run.commit_sha.as_deref(), Some(pushed.as_str()));
    // What it printed, counted to its end: a run shorter than one heartbeat interval too.
    assert_eq!(
        run.output_bytes,
        "working on Task: Write the change down\n".len() as i64,
        "{run:?}"
    );
    assert!(run
        .tail
        .as_deref()
        .unwrap()
        .contains("working on Task: Write the change down"));
    // The whole output is in the run's log file.
    let log = std::fs::read_to_string(run.log_path.as_deref().unwrap()).unwrap();
    assert!(
        log.contains("working on Task: Write the change down"),
        "{log}"
    );

    // The run's story is in the log: started, then exactly one outcome.
    let events: Vec<String> = app
        .all_events()
        .await
        .into_iter()
        .filter(|e| e.stream.as_deref() == Some(&format!("run:{}", run.run_id)))
        .map(|e| e.event_type)
        .collect();
    assert_eq!(events.first().map(String::as_str), Some("run.started"));
    assert_eq!(events.last().map(String::as_str), Some("run.succeeded"));
    assert_eq!(
        events.iter().filter(|t| !t.ends_with("heartbeat")).count(),
        2,
        "{events:?}"
    );

    // The recorder is process-wide and `cargo test` runs this file's tests side by side: at least ours.
    let metrics = app.metrics().await;
    assert!(
        metric(&metrics, "pidevops_runs_total{outcome=\"succeeded\"}") >= 1.0,
        "{metrics}"
    );
    let (status, health) = app.health().await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["loops"]["dispatcher"]["state"], "armed");
    assert_eq!(health["loops"]["watchdog"]["state"], "armed");
    assert_eq!(health["loops"]["gc"]["state"], "armed");
    app.stop().await;
}

async fn each_failure_kind_gives_its_reason_and_the_third_failure_asks_a_human(db: TestDb) {
    // One script that behaves by task title, so one configuration covers every kind.
    let (app, _rig) = TestApp::with_agent(
        "kinds.sh",
        r#"title=$(head -n 1 "$1")
case "$title" in
  *exits-1*) echo "error[E0425]: cannot find value x" >&2; exit 1 ;;
  *hangs*) while true; do echo still going; sleep 0.2; done ;;
  *silent*) sleep 30 ;;
  *no-change*) echo "looked, nothing to do" ;;
esac"#,
    )
    .profile("timeout_s = 2\nno_output_timeout_s = 1")
    .spawn(&db)
    .await;
    let exits = create_task(&app, "exits-1").await;
    let hangs = create_task(&app, "hangs").await;
    let silent = create_task(&app, "silent").await;
    let no_change = create_task(&app, "no-change").await;

    // Each fails three times (the default budget), then waits for a human.
    for id in [exits, hangs, silent, no_change] {
        within(
            Duration::from_secs(60),
            &format!("{id} flagged for a human"),
            || async {
                board::row_now(&app, id)
                    .await
                    .is_some_and(|row| row.needs_human)
            },
        )
        .await;
    }
    app.project().await;
    for id in [exits, hangs, silent, no_change] {
        let runs = board::runs_now(&app, id).await;
        assert!(
            runs.iter().all(|r| r.state != "running"),
            "every run's outcome: {runs:?}"
        );
    }
    for (id, kind, says) in [
        (exits, "exit", "exited with status 1"),
        (hangs, "timeout", "ran longer than 2 s"),
        (silent, "stalled", "printed nothing for 1 s"),
        (no_change, "no_changes", "changed nothing"),
    ] {
        let runs = board::runs_now(&app, id).await;
        assert_eq!(runs.len(), 3, "{id}: {runs:?}");
        for run in &runs {
            assert_eq!(run.state, "failed");
            assert_eq!(run.failure.as_deref(), Some(kind), "{id}: {run:?}");
            assert!(
                run.detail.as_deref().unwrap().contains(says),
                "{id}: {run:?}"
            );
        }
        let row = board::row_now(&app, id).await.unwrap();
        assert_eq!(row.column, Column::Todo);
        assert_eq!(row.attempts, 3);
        let reason = row.needs_human_reason.unwrap();
        assert!(reason.contains("attempt 3 of 3"), "{reason}");
        assert!(reason.contains(says), "{reason}");
    }
    // The exit's output reaches the reason the next prompt shows.
    let row = board::row_now(&app, exits).await.unwrap();
    assert!(
        row.state["last_failure"]["reason"]
            .as_str()
            .unwrap()
            .contains("error[E0425]"),
        "{}",
        row.state
    );
    // No fourth attempt: the board at the log's head and the dispatcher driven until it rests.
    app.project().await;
    app.drive(pidevops::dispatch::dispatcher::DISPATCHER).await;
    for id in [exits, hangs, silent, no_change] {
        assert_eq!(board::runs_now(&app, id).await.len(), 3, "{id}");
    }
    let metrics = app.metrics().await;
    for kind in ["exit", "timeout", "stalled", "no_changes"] {
        assert!(
            metric(
                &metrics,
                &format!("pidevops_runs_total{{outcome=\"{kind}\"}}")
            ) >= 3.0,
            "{kind}: {metrics}"
        );
    }
    app.stop().await;
}

const SECRET_TOKEN: &str = "ghp_SECRETtokenNEVERtoBEseen0123456789";
const SECRET_ADMIN: &str = "admin-SECRET-never-to-be-seen";

async fn the_agent_never_sees_a_secret_and_cannot_write_outside_its_worktree(db: TestDb) {
    let remote = Remote::new();
    // Not under /tmp, which a contained agent has as its own empty scratch space (paths beneath it would be
    // writable there, though nothing reaches the real /tmp): as in production, a read-only root around it.
    let scratch = crate::common::contained_scratch();
    let dir = scratch.path();
    let outside = dir.join("outside.txt");
    // It prints every secret it can find, dumps its environment into the worktree (which gets committed and
    // pushed), and tries to write next to its worktree and elsewhere on disk.
    let script = agent(
        dir,
        "snoop.sh",
        &format!(
            r#"echo "token=$GITHUB_TOKEN admin=$PIDEVOPS_ADMIN_TOKEN db=$DATABASE_URL"
env > env-dump.txt
echo pwned > {outside} && echo "wrote outside"
echo pwned > ../escape.txt && echo "wrote next to the worktree"
echo pwned > "$HOME/ok.txt" && echo "wrote home"
hooks="$(git rev-parse --git-common-dir)/hooks"
echo 'echo planted' > "$hooks/post-checkout" && echo "planted a hook"
echo change >> CHANGES.md
git add CHANGES.md && git -c user.name=agent -c user.email=agent@localhost commit -q -m "by the agent" && echo "committed myself""#,
            outside = outside.display()
        ),
    );
    let mut settings = crate::common::settings(&db);
    settings.file =
        pidevops::config::FileConfig::try_from(dispatch_file(&remote, &script, "")).unwrap();
    settings.workspace_root = dir.join("ws");
    settings
        .providers
        .set("GITHUB_TOKEN", Some(SECRET_TOKEN))
        .unwrap();
    // The service's own environment holds the secrets, as on Railway.
    let path = std::env::var("PATH").unwrap();
    let db_url = db.url_string();
    settings.env = pidevops::config::Env::from_pairs([
        ("PATH", path.as_str()),
        ("GITHUB_TOKEN", SECRET_TOKEN),
        ("PIDEVOPS_ADMIN_TOKEN", SECRET_ADMIN),
        ("DATABASE_URL", db_url.as_str()),
    ]);
    let app = TestApp::spawn(settings).await;
    let id = create_task(&app, "Snoop around").await;
    in_review(&app, id).await;

    let branch = format!("pidevops/{id}");
    let dump = remote
        .show(&branch, "env-dump.txt")
        .expect("the dump is pushed");
    for secret in [SECRET_TOKEN, SECRET_ADMIN] {
        assert!(!dump.contains(secret), "the agent saw a secret: {dump}");
    }
    for name in ["GITHUB_TOKEN", "PIDEVOPS_ADMIN_TOKEN", "DATABASE_URL"] {
        assert!(
            !dump.contains(&format!("{name}=")),
            "{name} reached the agent: {dump}"
        );
    }
    assert!(dump.contains("HOME="), "{dump}");

    let run = ended_runs(&app, id).await.remove(0);
    let log = std::fs::read_to_string(run.log_path.as_deref().unwrap()).unwrap();
    assert!(log.contains("token= admin= db="), "{log}");
    assert!(log.contains("wrote home"), "{log}");
    for secret in [SECRET_TOKEN, SECRET_ADMIN] {
        assert!(!log.contains(secret));
        for event in app.all_events().await {
            assert!(
                !String::from_utf8_lossy(&event.body).contains(secret),
                "{} carries a secret",
                event.event_type
            );
        }
    }
    // No file under the workspaces holds the token (git got it through its environment only).
    for entry in walk(&dir.join("ws")) {
        if let Ok(text) = std::fs::read(&entry) {
            assert!(
                !String::from_utf8_lossy(&text).contains(SECRET_TOKEN),
                "{} holds the token",
                entry.display()
            );
        }
    }

    // Writes outside the worktree were refused by the kernel (a read-only mount, or Landlock), not merely
    // unnoticed.
    assert!(
        pidevops::dispatch::sandbox::abi().is_some(),
        "this kernel has Landlock"
    );
    assert!(!outside.exists(), "the agent wrote outside its worktree");
    assert!(!log.contains("wrote outside"), "{log}");
    assert!(!log.contains("wrote next to the worktree"), "{log}");
    assert!(
        log.contains("Read-only file system") || log.contains("Permission denied"),
        "{log}"
    );
    // Nor into the shared mirror's hooks, though its own commit (in the repository it was given) goes through.
    assert!(!log.contains("planted a hook"), "{log}");
    assert!(log.contains("committed myself"), "{log}");
    let mirror_hooks = dir.join("ws/mirrors/acme/app.git/hooks");
    assert!(!mirror_hooks.join("post-checkout").exists());
    let runs_dir = dir.join("ws/runs").join(id.to_string());
    assert!(!runs_dir.join(&run.run_id).join("escape.txt").exists());
    app.stop().await;
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

async fn pausing_stops_new_runs_and_shows_in_health(db: TestDb) {
    let (app, _rig) = TestApp::with_agent("edits.sh", "echo x > CHANGES.md")
        .spawn(&db)
        .await;
    assert!(pidevops::dispatch::dispatcher::set_paused(
        &app.state.log,
        true,
        "test",
        Some("deploy freeze")
    )
    .await
    .unwrap());
    let id = create_task(&app, "Wait while paused").await;
    within(
        Duration::from_secs(10),
        "health to show the pause",
        || async {
            let (_, health) = app.health().await;
            health["loops"]["dispatcher"]["detail"]["paused"] == true
                && health["loops"]["dispatcher"]["detail"]["queue"] == 1
        },
    )
    .await;
    let (_, health) = app.health().await;
    assert_eq!(
        health["loops"]["dispatcher"]["detail"]["paused_reason"],
        "paused by test: deploy freeze"
    );
    app.project().await;
    app.drive(pidevops::dispatch::dispatcher::DISPATCHER).await;
    assert!(
        board::runs_now(&app, id).await.is_empty(),
        "nothing starts while paused"
    );
    assert_eq!(board::row_now(&app, id).await.unwrap().column, Column::Todo);

    // The API says the same, and resumes it.
    let get = |path: &str| {
        app.client
            .get(app.url(path))
            .bearer_auth(crate::common::ADMIN_TOKEN)
    };
    let post = |path: &str| {
        app.client
            .post(app.url(path))
            .bearer_auth(crate::common::ADMIN_TOKEN)
    };
    let status: serde_json::Value = get("/api/dispatch")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["paused"], true);
    assert_eq!(status["reason"], "paused by test: deploy freeze");
    let refused = post("/api/dispatch/pause")
        .body("{\"why\": 1}")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let resumed: serde_json::Value = post("/api/dispatch/resume")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(resumed["changed"], true);
    within(
        Duration::from_secs(30),
        "the task in review after resuming",
        || async {
            board::row_now(&app, id)
                .await
                .is_some_and(|row| row.column == Column::InReview)
        },
    )
    .await;
    app.project().await;
    let runs: serde_json::Value = get(&format!("/api/runs?task={id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        runs["runs"][0]["state"], "succeeded",
        "the run in /api/runs: {runs}"
    );
    app.stop().await;
}

/// A profile that cannot run here (its command missing, no credential its CLI takes, git missing from the
/// service's PATH) holds its own tasks: no attempt spent, no run started, `/health` warns naming the profile and
/// why; the other profiles run on; installing what was missing un-blocks it without a restart.
#[tokio::test]
async fn a_profile_that_cannot_run_here_holds_only_its_tasks_and_health_names_why() {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let default = agent(dir, "default.sh", "printf 'by default\\n' > CHANGES.md");
    // A CLI pidevops knows by its name (it takes ANTHROPIC_API_KEY, CLAUDE_CODE_OAUTH_TOKEN, ANTHROPIC_AUTH_TOKEN),
    // its key unset.
    std::fs::create_dir(dir.join("bin")).unwrap();
    let claude = agent(
        &dir.join("bin"),
        "claude",
        "printf 'by claude\\n' > CHANGES.md",
    );
    let later = dir.join("later-agent");
    let mut file = dispatch_file(&remote, &default, "");
    let agents = file["agents"].as_table_mut().unwrap();
    let mut keyless = toml::toml! { command = ["claude", "{prompt_file}"]
    env = ["ANTHROPIC_API_KEY"] };
    keyless["command"].as_array_mut().unwrap()[0] = claude.display().to_string().into();
    agents.insert("keyless".into(), keyless.into());
    let mut missing = toml::toml! { command = ["later", "{prompt_file}"] };
    missing["command"].as_array_mut().unwrap()[0] = later.display().to_string().into();
    agents.insert("later".into(), missing.into());
    let db = TestDb::sqlite();
    let app = TestApp::dispatching(&db, file.clone(), &dir.join("ws")).await;
    let plain = create_task_with(&app, "plain", None).await;
    let without_key = create_task_with(&app, "keyless", Some("keyless")).await;
    let without_program = create_task_with(&app, "later", Some("later")).await;
    in_review(&app, plain).await;
    within(Duration::from_secs(30), "both held in /health", || async {
        app.health().await.1["loops"]["dispatcher"]["detail"]["unready"] == 2
    })
    .await;
    let (status, health) = app.health().await;
    assert_eq!(
        (status, health["status"].as_str()),
        (200, Some("warn")),
        "{health}"
    );
    assert_eq!(health["loops"]["dispatcher"]["state"], "armed");
    let problems: Vec<&str> = health["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p.as_str())
        .collect();
    let problems = problems.join("\n");
    for says in [
        "agent profile keyless cannot run here: no credential: ANTHROPIC_API_KEY is not set"
            .to_owned(),
        format!(
            "agent profile later cannot run here: its command {:?} is not an executable",
            later.display().to_string()
        ),
        "(2 task(s) waiting)".to_owned(),
    ] {
        assert!(problems.contains(&says), "{says} in {problems}");
    }
    for id in [without_key, without_program] {
        let row = board::row_now(&app, id).await.unwrap();
        assert_eq!(
            (row.attempts, row.column, row.needs_human),
            (0, Column::Todo, false),
            "{row:?}"
        );
        assert!(
            board::runs_now(&app, id).await.is_empty(),
            "no run started for {id}"
        );
    }
    // The program installed: the task runs, no restart.
    agent(dir, "later-agent", "printf 'later\\n' > CHANGES.md");
    in_review(&app, without_program).await;
    assert_eq!(board::row_now(&app, without_key).await.unwrap().attempts, 0);
    app.stop().await;

    // No git on the service's PATH: every profile waits, and says so (a database of its own: the keyless task
    // still waits in this one).
    let db = TestDb::sqlite();
    let mut settings = crate::common::settings(&db);
    settings.file = pidevops::config::FileConfig::try_from(file).unwrap();
    settings.workspace_root = dir.join("ws");
    // The service's PATH: its containment (bwrap, where the machine has it) and no git.
    let no_git = dir.join("no-git");
    std::fs::create_dir(&no_git).unwrap();
    if let Some(bwrap) =
        pidevops::dispatch::sandbox::find_program("bwrap", std::env::var("PATH").ok().as_deref())
    {
        std::os::unix::fs::symlink(bwrap, no_git.join("bwrap")).unwrap();
    }
    settings.env = pidevops::config::Env::from_pairs([("PATH", no_git.to_str().unwrap())]);
    let app = TestApp::spawn(settings).await;
    let stranded = create_task_with(&app, "no git", None).await;
    within(Duration::from_secs(30), "held for git", || async {
        let health = app.health().await.1;
        health["loops"]["dispatcher"]["detail"]["unready"] == 1
            && health["problems"]
                .to_string()
                .contains("agent profile fake cannot run here: git is not on the service's PATH")
    })
    .await;
    let row = board::row_now(&app, stranded).await.unwrap();
    assert_eq!(
        (row.attempts, row.column, row.needs_human),
        (0, Column::Todo, false),
        "{row:?}"
    );
    assert!(board::runs_now(&app, stranded).await.is_empty());
    app.stop().await;
}

#[tokio::test]
async fn the_dispatcher_is_unarmed_when_a_repository_cannot_be_cloned_and_health_fails() {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let db = TestDb::sqlite();
    // A repository cloned from GitHub without GITHUB_TOKEN: unarmed, naming the repository.
    let script = agent(scratch.path(), "ok.sh", "echo x > CHANGES.md");
    let mut file = dispatch_file(&remote, &script, "");
    file["repos"][REPO]["url"] = toml::Value::from("https://github.com/acme/app.git");
    let app = TestApp::dispatching(&db, file, &scratch.path().join("ws")).await;
    let (status, health) = app.health().await;
    assert_eq!(status, 503, "{health}");
    let reason = health["loops"]["dispatcher"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("acme/app") && reason.contains("GITHUB_TOKEN"),
        "{reason}"
    );
    app.stop().await;
}

#[tokio::test]
async fn without_a_dispatch_table_the_dispatch_loops_are_disabled_and_health_passes() {
    let db = TestDb::sqlite();
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let (status, health) = app.health().await;
    assert_eq!(status, 200, "{health}");
    for name in ["dispatcher", "watchdog", "gc"] {
        assert_eq!(health["loops"][name]["state"], "disabled", "{name}");
        assert!(health["loops"][name]["reason"]
            .as_str()
            .unwrap()
            .contains("[dispatch]"));
    }
    app.stop().await;
}

async fn queued_tasks_start_in_worktrees_checked_out_ahead_and_each_starts_from_the_base(
    db: TestDb,
) {
    // Each agent adds a file named after its task and checks that no other task's file is there.
    let (app, rig) = TestApp::with_agent(
        "own-file.sh",
        r#"title=$(head -n 1 "$1" | sed 's/^Task: //')
if ls | grep -q '^done-'; then echo "another task's work is here"; exit 1; fi
sleep 0.3
echo "$title" > "done-$title""#,
    )
    .config("dispatch.max_concurrent = 1")
    .spawn(&db)
    .await;
    let mut ids = Vec::new();
    for n in 0..4 {
        ids.push(create_task(&app, &format!("task{n}")).await);
    }
    for id in &ids {
        within(
            Duration::from_secs(60),
            &format!("{id} in review"),
            || async {
                board::row_now(&app, *id)
                    .await
                    .is_some_and(|row| row.column == Column::InReview)
            },
        )
        .await;
    }
    for (n, id) in ids.iter().enumerate() {
        let branch = format!("pidevops/{id}");
        assert_eq!(
            rig.remote
                .show(&branch, &format!("done-task{n}"))
                .as_deref(),
            Some(format!("task{n}\n").as_str()),
            "{branch}"
        );
        assert_eq!(ended_runs(&app, *id).await.len(), 1, "{id} ran once");
    }
    // One at a time, so the later ones waited in the queue while spares were checked out for them.
    let metrics = app.metrics().await;
    let spares = metric(&metrics, "pidevops_worktrees_total{how=\"spare\"}");
    assert!(
        spares >= 1.0,
        "no run started in a spare worktree: {metrics}"
    );
    // Finished runs' worktrees were reset and reused, and still no task saw another's work (the agent checks).
    assert!(
        metric(&metrics, "pidevops_worktrees_recycled_total") >= 1.0,
        "no finished worktree was reused: {metrics}"
    );
    app.stop().await;
}

async fn cancelling_a_task_stops_its_agent(db: TestDb) {
    let (app, _rig) = TestApp::with_agent(
        "long-job.sh",
        "while true; do echo working; sleep 0.1; done",
    )
    .spawn(&db)
    .await;
    let id = create_task(&app, "A long job").await;
    within(Duration::from_secs(30), "the agent running", || async {
        board::runs_now(&app, id).await.len() == 1
    })
    .await;
    app.state
        .board
        .steer(
            id,
            pidevops::board::Steer::Cancel,
            Some("not needed".into()),
            "test",
            "test",
        )
        .await
        .unwrap();
    within(Duration::from_secs(30), "the run stopped", || async {
        board::runs_now(&app, id)
            .await
            .iter()
            .all(|r| r.state == "failed")
    })
    .await;
    let run = board::runs_now(&app, id).await.remove(0);
    assert_eq!(run.failure.as_deref(), Some("stopped"), "{run:?}");
    assert!(run.detail.unwrap().contains("cancelled"));
    let row = board::row_now(&app, id).await.unwrap();
    assert_eq!(row.column, Column::Cancelled);
    assert_eq!(row.attempts, 1);
    app.stop().await;
}

/// A sample's value in Prometheus text (0 when absent).
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_attempt_is_retried_only_after_its_backoff() {
    let db = TestDb::sqlite();
    let (app, _rig) = TestApp::with_agent("fails.sh", "echo broken; exit 1")
        .config("dispatch.retry_backoff_s = 2")
        .spawn(&db)
        .await;
    let id = create_task(&app, "Fail then wait").await;
    within(Duration::from_secs(30), "a second attempt", || async {
        board::runs_now(&app, id).await.len() >= 2
    })
    .await;
    let runs = board::runs_now(&app, id).await;
    let (first, second) = (&runs[0], &runs[1]);
    let waited = second.started_at.unwrap() - first.ended_at.unwrap();
    // 2 s for attempt 2, plus at most 20 % jitter; never sooner.
    assert!(waited >= chrono::Duration::seconds(2), "{waited}");
    assert!(waited < chrono::Duration::milliseconds(4000), "{waited}");
    app.stop().await;
}

/// A task's own pick of agent wins over the repository's; a pick of no such profile flags the task for a human
/// without spending an attempt, and picking another one runs it; a profile whose program is missing holds it.
async fn a_task_runs_with_the_agent_it_asks_for_and_one_that_cannot_run_waits_for_a_human(
    db: TestDb,
) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let default = agent(dir, "default.sh", "printf 'by default\\n' > CHANGES.md");
    let other = agent(dir, "other.sh", "printf 'by other\\n' > CHANGES.md");
    let mut file = dispatch_file(&remote, &default, "");
    let agents = file["agents"].as_table_mut().unwrap();
    agents.insert(
        "other".into(),
        toml::toml! { command = ["placeholder", "{prompt_file}"] }.into(),
    );
    agents["other"]["command"].as_array_mut().unwrap()[0] = other.display().to_string().into();
    agents.insert(
        "missing".into(),
        toml::toml! { command = ["/nonexistent/agent", "{prompt}"] }.into(),
    );
    let app = TestApp::dispatching(&db, file, &dir.join("ws")).await;
    let picked = create_task_with(&app, "picked", Some("other")).await;
    let plain = create_task_with(&app, "plain", None).await;
    let ghost = create_task_with(&app, "ghost", Some("ghost")).await;
    let missing = create_task_with(&app, "missing", Some("missing")).await;

    for (id, says) in [(
        ghost,
        "asks for the agent profile \"ghost\", which is neither a preset nor defined",
    )] {
        within(
            Duration::from_secs(30),
            &format!("{id} flagged"),
            || async {
                board::row_now(&app, id)
                    .await
                    .is_some_and(|row| row.needs_human)
            },
        )
        .await;
        let row = board::row_now(&app, id).await.unwrap();
        assert!(
            row.needs_human_reason.as_deref().unwrap().contains(says),
            "{row:?}"
        );
        assert_eq!(
            (row.attempts, row.column),
            (0, Column::Todo),
            "no attempt spent"
        );
        assert!(board::runs_now(&app, id).await.is_empty());
    }
    // A profile whose program is missing here is no reason to ask a person: the task waits, unflagged, with no
    // attempt spent, until the machine has it (a_profile_that_cannot_run_here_holds_only_its_tasks_…).
    within(Duration::from_secs(30), "missing held", || async {
        app.health().await.1["loops"]["dispatcher"]["detail"]["unready_profiles"]["missing"]
            .as_str()
            .is_some_and(|why| why.contains("\"/nonexistent/agent\" is not an executable"))
    })
    .await;
    let row = board::row_now(&app, missing).await.unwrap();
    assert_eq!(
        (row.attempts, row.column, row.needs_human),
        (0, Column::Todo, false),
        "{row:?}"
    );
    assert!(board::runs_now(&app, missing).await.is_empty());
    for (id, by, profile) in [
        (picked, "by other\n", "other"),
        (plain, "by default\n", "fake"),
    ] {
        in_review(&app, id).await;
        let runs = ended_runs(&app, id).await;
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert_eq!(runs[0].profile.as_deref(), Some(profile));
        let branch = format!("pidevops/{id}");
        assert_eq!(
            remote.show(&branch, "CHANGES.md").as_deref(),
            Some(by),
            "{id}"
        );
    }

    // A person picks a profile that exists and says "go again": it runs, once.
    let board = &app.state.board;
    let other_agent = pidevops::tasks::Command::ChooseAgent {
        agent: Some("other".parse().unwrap()),
    };
    board.execute(ghost, &other_agent, "test").await.unwrap();
    board
        .steer(
            ghost,
            pidevops::board::Steer::Retry,
            None,
            "in a test",
            "test",
        )
        .await
        .unwrap();
    within(
        Duration::from_secs(30),
        "the re-picked task in review",
        || async {
            board::row_now(&app, ghost)
                .await
                .is_some_and(|row| row.column == Column::InReview)
        },
    )
    .await;
    let runs = ended_runs(&app, ghost).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].profile.as_deref(), Some("other"));
    let row = board::row_now(&app, missing).await.unwrap();
    assert_eq!(
        (row.attempts, row.column, row.needs_human),
        (0, Column::Todo, false),
        "still waiting, unflagged: {row:?}"
    );
    app.stop().await;
}

/// With attempts to spare, runs that keep failing fast are stopped after three and a person is asked.
async fn attempts_bouncing_back_fast_are_flagged_before_the_budget_is_spent(db: TestDb) {
    let (app, _rig) = TestApp::with_agent("fails.sh", "echo 'segfault at 0x0' >&2; exit 139")
        .config("board.max_attempts = 10")
        .spawn(&db)
        .await;
    let id = create_task(&app, "crashes at once").await;
    within(Duration::from_secs(60), "the task flagged", || async {
        board::row_now(&app, id)
            .await
            .is_some_and(|row| row.needs_human)
    })
    .await;
    let row = board::row_now(&app, id).await.unwrap();
    let reason = row.needs_human_reason.clone().unwrap();
    assert!(
        reason.starts_with("bouncing between todo and in-progress: 3 attempts in 15 minutes came back (attempt 3 of 10)"),
        "{reason}"
    );
    assert!(reason.contains("exited with status 139"), "{reason}");
    app.project().await;
    app.drive(pidevops::dispatch::dispatcher::DISPATCHER).await;
    let runs = board::runs_now(&app, id).await;
    assert_eq!(runs.len(), 3, "no fourth attempt: {runs:?}");
    assert_eq!(board::row_now(&app, id).await.unwrap().attempts, 3);
    app.stop().await;
}

/// Spares are checked out ahead at the base of their time; when the base moves on before they are used, the next
/// run still starts from the new base (the spare is dropped, not used).
async fn when_the_base_moves_the_next_run_starts_from_the_new_base_not_an_old_spare(db: TestDb) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    // The gate is in a directory the agent is allowed to read (`dispatch.readable`); it sees nothing else here.
    let gates = scratch.path().join("gates");
    std::fs::create_dir(&gates).unwrap();
    let gate = gates.join("go");
    // The first task waits for the gate; later ones need the teammate's file.
    let script = agent(
        scratch.path(),
        "gated.sh",
        &format!(
            r#"title=$(head -n 1 "$1" | sed 's/^Task: //')
if [ "$title" = first ]; then
  while [ ! -e '{gate}' ]; do sleep 0.05; done
elif [ ! -e moved.txt ]; then
  echo "started from an old base"; exit 1
fi
echo "$title" > "done-$title""#,
            gate = gate.display()
        ),
    );
    let mut file = dispatch_file(&remote, &script, "");
    let dispatch = file["dispatch"].as_table_mut().unwrap();
    dispatch.insert("max_concurrent".into(), toml::Value::from(1));
    dispatch.insert(
        "readable".into(),
        toml::Value::from(vec![gates.display().to_string()]),
    );
    let app = TestApp::dispatching(&db, file, &scratch.path().join("ws")).await;
    let first = create_task(&app, "first").await;
    let second = create_task(&app, "second").await;
    within(
        Duration::from_secs(30),
        "a spare ready for the queued task",
        || async {
            let metrics = app.metrics().await;
            board::row_now(&app, first)
                .await
                .is_some_and(|r| r.column == Column::InProgress)
                && metric(&metrics, "pidevops_worktree_spares") >= 1.0
        },
    )
    .await;
    remote.commit_to_main("moved.txt", "a teammate's change\n");
    std::fs::write(&gate, "").unwrap();
    for id in [first, second] {
        in_review(&app, id).await;
    }
    assert_eq!(
        remote
            .show(&format!("pidevops/{second}"), "moved.txt")
            .as_deref(),
        Some("a teammate's change\n"),
        "the second run's branch is built on the new base"
    );
    let runs = ended_runs(&app, second).await;
    assert_eq!(
        runs.iter().map(|r| r.state.as_str()).collect::<Vec<_>>(),
        ["succeeded"],
        "it ran once, and succeeded"
    );
    app.stop().await;
}

/// Where nothing can contain agents, `containment = "required"` (the default) leaves the dispatcher unarmed with
/// the reason, so `/health` fails; `"best-effort"` runs them, and `/health` says they run uncontained.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_containment_the_dispatcher_is_unarmed_unless_best_effort_is_chosen() {
    use pidevops::dispatch::sandbox::{pin, Containment};
    // This host has bubblewrap and Landlock; a host with neither is what the pinned name answers.
    const NOTHING: &str = "no-containment-on-this-host";
    let path = std::env::var("PATH").unwrap_or_default();
    pin(
        NOTHING,
        Some(path.as_str()),
        Containment::None {
            why: "bubblewrap cannot run and this kernel has no Landlock".into(),
        },
    );
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let script = agent(scratch.path(), "ok.sh", "echo x > CHANGES.md");
    let db = TestDb::sqlite();
    let mut file = dispatch_file(&remote, &script, "");
    file["dispatch"]
        .as_table_mut()
        .unwrap()
        .insert("bwrap".into(), toml::Value::from(NOTHING));
    let app = TestApp::dispatching(&db, file.clone(), &scratch.path().join("ws")).await;
    let (status, health) = app.health().await;
    assert_eq!(status, 503, "{health}");
    assert_eq!(health["loops"]["dispatcher"]["state"], "unarmed");
    let reason = health["loops"]["dispatcher"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("nothing can contain agents")
            && reason.contains("containment = \"best-effort\""),
        "{reason}"
    );
    app.stop().await;

    file["dispatch"]
        .as_table_mut()
        .unwrap()
        .insert("containment".into(), toml::Value::from("best-effort"));
    let app = TestApp::dispatching(&db, file, &scratch.path().join("ws")).await;
    let id = create_task(&app, "Run without a sandbox").await;
    in_review(&app, id).await;
    let (status, health) = app.health().await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(
        health["loops"]["dispatcher"]["detail"]["containment"],
        "none"
    );
    app.stop().await;
}

/// A spec longer than one command-line argument may be: the presets' way (stdin) runs it whole; a profile that
/// puts `{prompt}` in its argv is refused before any attempt, with the way out, instead of failing with E2BIG.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_spec_runs_on_stdin_and_an_argv_profile_refuses_it_without_spending_an_attempt() {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let script = agent(
        dir,
        "counts.sh",
        "wc -c | tr -d ' ' > stdin-bytes.txt\necho x > CHANGES.md",
    );
    let mut file = dispatch_file(&remote, &script, "stdin = \"prompt\"");
    let agents = file["agents"].as_table_mut().unwrap();
    agents.insert(
        "argv".into(),
        toml::toml! { command = ["placeholder", "{prompt}"] }.into(),
    );
    agents["argv"]["command"].as_array_mut().unwrap()[0] = script.display().to_string().into();
    let db = TestDb::sqlite();
    let app = TestApp::dispatching(&db, file, &dir.join("ws")).await;
    // 60,000 two-byte characters: 120,000 bytes, over Linux's 128 KiB per argument once the prompt's frame is added.
    let long = "é".repeat(60_000);
    let piped = create_task_with(&app, &long, None).await;
    let refused = create_task_with(&app, &long, Some("argv")).await;

    in_review(&app, piped).await;
    let bytes: usize = remote
        .show(&format!("pidevops/{piped}"), "stdin-bytes.txt")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(bytes > 120_000, "the agent read {bytes} bytes on stdin");

    within(Duration::from_secs(30), "the argv task flagged", || async {
        board::row_now(&app, refused)
            .await
            .is_some_and(|row| row.needs_human)
    })
    .await;
    let row = board::row_now(&app, refused).await.unwrap();
    let reason = row.needs_human_reason.as_deref().unwrap();
    assert!(
        reason.contains("command-line argument") && reason.contains("stdin = \"prompt\""),
        "{reason}"
    );
    assert_eq!(
        (row.attempts, row.column),
        (0, Column::Todo),
        "no attempt spent"
    );
    app.stop().await;
}

/// `task new Local/Demo` for `[repos."local/demo"]`: GitHub ignores case, so the task is the configured
/// repository's, stored under its configured spelling, and runs from its configured `url` (not github.com).
#[tokio::test]
async fn a_repository_named_in_another_case_runs_with_its_configured_settings() {
    let db = TestDb::sqlite();
    let (app, rig) = TestApp::with_agent("edits.sh", "printf 'done by the agent\\n' > CHANGES.md")
        .spawn(&db)
        .await;
    let shouted: RepoName = REPO.to_ascii_uppercase().parse().unwrap();
    app.state.board.config().allowed.check(&shouted).unwrap();
    let (outcome, _) = app
        .state
        .board
        .create(
            Draft::new(
                shouted,
                Spec::new("Write it down", "CHANGES.md", "written").unwrap(),
                Links::default(),
            ),
            "test:shouted",
            "cli",
            None,
        )
        .await
        .unwrap();
    let id = outcome.task.id();
    assert_eq!(outcome.task.repo().as_str(), REPO);
    in_review(&app, id).await;
    assert_eq!(
        rig.remote
            .show(&format!("pidevops/{id}"), "CHANGES.md")
            .as_deref(),
        Some("done by the agent\n")
    );
    assert_eq!(board::row_now(&app, id).await.unwrap().repo, REPO);
    app.stop().await;
}
