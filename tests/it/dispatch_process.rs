//! Dispatch with the real binary: SIGKILL of `serve` mid-run and recovery after restart; two `serve` replicas
//! and one `pidevops worker` sharing Postgres and NATS JetStream. Postgres only (several processes share it).

use std::path::Path;
use std::time::Duration;

use crate::common::agents::{agent, dispatch_file, Remote};
use crate::common::observer::Observer;
use crate::common::server::{borrow, process_env, read_log, KillOnDrop, Server, BIN};
use crate::common::{within, TestDb};
use pidevops::tasks::Column;

fn write_config(dir: &Path, file: &toml::Table) -> String {
    let path = dir.join("pidevops.toml");
    std::fs::write(&path, toml::to_string(file).unwrap()).unwrap();
    path.display().to_string()
}

/// Processes whose command line mentions `needle` (the fake agents), by pid.
fn processes_running(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) {
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

/// A remote, an agent named `name` that waits silently until the test creates `go` and then makes its change,
/// and `serve`'s environment for it. Silent on purpose: one that kept printing would die of SIGPIPE when serve
/// dies, and prove nothing about serve killing it.
struct Gated {
    remote: Remote,
    /// Holds the agent, the configuration and the workspaces for as long as the test runs.
    _scratch: tempfile::TempDir,
    go: std::path::PathBuf,
    /// The agent's path: unique to this test run, so a process scan finds this run's agent, never another's.
    script: String,
    config: String,
    workspaces: String,
}

impl Gated {
    fn new(name: &str) -> Self {
        let remote = Remote::new();
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        // The gate is in a directory the agent may read (`dispatch.readable`); it sees nothing else here.
        let gates = dir.join("gates");
        std::fs::create_dir(&gates).unwrap();
        let go = gates.join("go");
        let script = agent(
            dir,
            name,
            &format!(
                r#"echo "attempt starts"
while [ ! -f {go} ]; do sleep 0.1; done
echo x > CHANGES.md"#,
                go = go.display()
            ),
        );
        let mut file = dispatch_file(&remote, &script, "");
        file["dispatch"].as_table_mut().unwrap().insert(
            "readable".into(),
            toml::Value::from(vec![gates.display().to_string()]),
        );
        let config = write_config(dir, &file);
        let workspaces = dir.join("ws").display().to_string();
        Self {
            remote,
            _scratch: scratch,
            go,
            script: script.display().to_string(),
            config,
            workspaces,
        }
    }

    /// `serve`'s environment, with `instance` as its name when given.
    fn env<'a>(&'a self, instance: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
        let mut env = vec![
            ("PIDEVOPS_CONFIG", self.config.as_str()),
            ("WORKSPACE_ROOT", self.workspaces.as_str()),
            ("PIDEVOPS_LOOP_STARTUP_DELAY_S", "0.05"),
            ("PIDEVOPS_PROJECTOR_INTERVAL_S", "0.2"),
        ];
        if let Some(instance) = instance {
            env.push(("PIDEVOPS_INSTANCE_ID", instance));
        }
        env
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_interrupted_by_sigkill_is_recovered_after_restart_and_never_runs_twice_at_once() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let gated = Gated::new("waits-for-go.sh");
    let (remote, go) = (&gated.remote, &gated.go);
    // The same name after the restart: the new process knows at once that its predecessor's run is gone.
    let env = gated.env(Some("replica-a"));
    let observer = Observer::new(&db).await;
    let mut server = Server::start_with(&db.url_string(), &env).await;
    let id = observer.create("Survive a crash", "CHANGES.md").await;

    within(
        Duration::from_secs(30),
        "the first attempt's agent running",
        || async {
            observer.runs(id).await.len() == 1 && !processes_running(&gated.script).is_empty()
        },
    )
    .await;
    let first = observer.runs(id).await.remove(0);

    // SIGKILL: no shutdown code runs. The agent must die with it (it would otherwise race the next attempt).
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    within(
        Duration::from_secs(5),
        "the orphaned agent to die with serve",
        || async { processes_running(&gated.script).is_empty() },
    )
    .await;
    // From the log itself: the read model may not have caught up with the claim before serve died.
    let task = observer.board.load(id).await.unwrap().unwrap().task;
    assert_eq!(task.column(), Column::InProgress, "nobody moved it");

    std::fs::write(go, "").unwrap();
    let server = Server::start_with(&db.url_string(), &env).await;
    observer.until_in_review(id, Duration::from_secs(60)).await;
    observer.both_outcomes(id).await;
    let runs = observer.runs(id).await;
    assert_eq!(
        runs.len(),
        2,
        "{runs:?}\n{}",
        read_log(server.workdir.path())
    );
    assert_eq!(runs[0].run_id, first.run_id);
    assert_eq!(runs[0].state, "failed");
    assert_eq!(runs[0].failure.as_deref(), Some("lost"));
    assert!(
        runs[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("replica-a restarted"),
        "{:?}",
        runs[0].detail
    );
    assert_eq!(runs[1].state, "succeeded");
    assert_eq!(runs[1].attempt, 2);
    // The second attempt started only after the first was declared over.
    assert!(runs[1].started_at.unwrap() >= runs[0].ended_at.unwrap());
    assert!(remote.branch(&format!("pidevops/{id}")).is_some());
    drop(server);
}

/// A graceful stop (SIGTERM, as in a deploy) while an agent works: serve stops the agent, records the attempt as
/// interrupted, gives it back (the budget grows by one, no backoff) and exits 0; the next start runs it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_interrupted_by_sigterm_does_not_count_as_an_attempt() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let gated = Gated::new("waits-for-go-term.sh");
    let (go, env) = (&gated.go, gated.env(None));
    let observer = Observer::new(&db).await;
    let mut server = Server::start_with(&db.url_string(), &env).await;
    let id = observer.create("Survive a deploy", "CHANGES.md").await;
    within(Duration::from_secs(30), "the agent running", || async {
        observer.runs(id).await.len() == 1 && !processes_running(&gated.script).is_empty()
    })
    .await;

    let pid = nix::unistd::Pid::from_raw(i32::try_from(server.child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = server.child.wait().unwrap();
    assert!(
        status.success(),
        "{status:?}\n{}",
        read_log(server.workdir.path())
    );
    // Nothing of the sandbox is left (bubblewrap's init once outlived serve here, the agent still running).
    let left = processes_running(&gated.script);
    assert!(left.is_empty(), "the agent was stopped: {left:?}");
    // Read from the log itself: no projector runs while serve is down.
    let run = observer.runs(id).await.remove(0).run_id;
    let outcome = observer
        .store
        .read_stream(&format!("run:{run}"))
        .await
        .unwrap();
    let types: Vec<&str> = outcome.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types.first(), Some(&"run.started"), "{types:?}");
    assert_eq!(
        types.last(),
        Some(&"run.failed"),
        "recorded before exiting: {types:?}"
    );
    let failed: serde_json::Value = serde_json::from_slice(&outcome.last().unwrap().body).unwrap();
    assert_eq!(failed["kind"], "interrupted", "{failed}");
    let task = observer.board.load(id).await.unwrap().unwrap().task;
    assert_eq!(
        (task.column(), task.attempts(), task.max_attempts().get()),
        (Column::Todo, 1, 4),
        "the attempt was given back"
    );
    assert!(task.needs_human().is_none());

    std::fs::write(go, "").unwrap();
    let server = Server::start_with(&db.url_string(), &env).await;
    observer.until_in_review(id, Duration::from_secs(60)).await;
    let runs = observer.runs(id).await;
    assert_eq!(
        runs.len(),
        2,
        "{runs:?}\n{}",
        read_log(server.workdir.path())
    );
    assert_eq!(runs[1].attempt, 2);
    drop(server);
}

/// A SIGKILLed `serve` leaves nothing of a run behind, not even what its agent double-forked: the reaper between
/// serve and the agent takes serve's death as its kill-all. Under `landlock` (no PID namespace to empty), where the
/// orphan is the reaper's alone; before, serve's death killed the reaper and handed its orphans to PID 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sigkilled_serve_leaves_no_orphan_of_its_agent_behind() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    // Named by the test's own directory: a process scan finds this run's orphan, never another's.
    let orphan = format!("orphan-of-{}", dir.display());
    let script = agent(
        dir,
        "double-forks.sh",
        &format!(
            r#"setsid sh -c 'while :; do sleep 0.1; done' {orphan} </dev/null >/dev/null 2>&1 &
while :; do sleep 0.1; done"#
        ),
    );
    let mut file = dispatch_file(&remote, &script, "");
    // No bubblewrap: Landlock and the reaper alone.
    file["dispatch"]
        .as_table_mut()
        .unwrap()
        .insert("bwrap".into(), toml::Value::from("/nonexistent/bwrap"));
    let config = write_config(dir, &file);
    let workspaces = dir.join("ws").display().to_string();
    let env = [
        ("PIDEVOPS_CONFIG", config.as_str()),
        ("WORKSPACE_ROOT", workspaces.as_str()),
        ("PIDEVOPS_LOOP_STARTUP_DELAY_S", "0.05"),
        ("PIDEVOPS_PROJECTOR_INTERVAL_S", "0.2"),
    ];
    let observer = Observer::new(&db).await;
    let mut server = Server::start_with(&db.url_string(), &env).await;
    let id = observer.create("Leave a daemon behind", "CHANGES.md").await;
    within(
        Duration::from_secs(30),
        "the agent and its orphan running",
        || async {
            !processes_running(&script.display().to_string()).is_empty()
                && !processes_running(&orphan).is_empty()
        },
    )
    .await;
    assert_eq!(observer.runs(id).await.len(), 1);

    server.child.kill().unwrap();
    server.child.wait().unwrap();
    within(
        Duration::from_secs(5),
        "the agent and its orphan to die with serve",
        || async {
            processes_running(&script.display().to_string()).is_empty()
                && processes_running(&orphan).is_empty()
        },
    )
    .await;
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_and_a_worker_run_each_task_once() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let script = agent(
        dir,
        "worker-agent.sh",
        r#"echo "run by the worker"
sleep 0.3
echo x > CHANGES.md"#,
    );
    let mut file = dispatch_file(&remote, &script, "");
    let dispatch = file["dispatch"].as_table_mut().unwrap();
    dispatch.insert("executor".into(), toml::Value::from("workers"));
    dispatch.insert("max_concurrent".into(), toml::Value::from(3));
    // Three processes on two loaded cores: a run is declared lost after three missed beats, and this test is about
    // claims, not about noticing silence, so the beat is slow enough that a busy moment never looks like a death.
    dispatch.insert("heartbeat_s".into(), toml::Value::from(2.0));
    let config = write_config(dir, &file);
    // The events stream of this test's own: the relay's, on a NATS other tests and other runs of the suite share.
    let bus = crate::common::bus_config();
    let replica = |name: &str, workspaces: &str| {
        let mut env = process_env(Path::new(&config), name, &dir.join(workspaces), &bus);
        env.push(("PIDEVOPS_LEASE_TTL_S".to_owned(), "3".to_owned()));
        env
    };
    let env_a = replica("replica-a", "ws-a");
    let env_b = replica("replica-b", "ws-b");

    let observer = Observer::new(&db).await;
    let a = Server::start_with(&db.url_string(), &borrow(&env_a)).await;
    let b = Server::start_with(&db.url_string(), &borrow(&env_b)).await;
    let mut worker_command = crate::common::server::command(&db.url_string(), dir);
    worker_command
        .arg("worker")
        .envs(replica("worker-1", "ws-w"));
    let worker = KillOnDrop::spawn_logged(worker_command, &dir.join("worker.log"));

    let mut ids = Vec::new();
    for n in 0..6 {
        ids.push(
            observer
                .create(&format!("Task number {n}"), "CHANGES.md")
                .await,
        );
    }
    for id in &ids {
        within(
            Duration::from_secs(90),
            &format!("{id} in review"),
            || async { observer.column(*id).await == Some(Column::InReview) },
        )
        .await;
    }
    within(Duration::from_secs(10), "every run's outcome", || async {
        for id in &ids {
            if observer
                .runs(*id)
                .await
                .iter()
                .any(|r| r.state == "running")
            {
                return false;
            }
        }
        true
    })
    .await;
    for id in &ids {
        let runs = observer.runs(*id).await;
        assert_eq!(
            runs.len(),
            1,
            "{id} ran {} times: {runs:?}\n{}",
            runs.len(),
            worker.log()
        );
        assert_eq!(runs[0].state, "succeeded");
        assert_eq!(runs[0].worker.as_deref(), Some("worker-1"), "{runs:?}");
        assert!(remote.branch(&format!("pidevops/{id}")).is_some());
    }
    // Only the worker ran agents: the replicas' workspaces hold no runs.
    for replica in ["ws-a", "ws-b"] {
        let runs = dir.join(replica).join("runs");
        let count = std::fs::read_dir(&runs).map(|d| d.count()).unwrap_or(0);
        assert_eq!(count, 0, "{replica} ran agents itself");
    }
    drop((worker, a, b));
    let _ = BIN;
    if let Ok(relayed) = pidevops::bus::JetstreamBus::connect(&crate::common::nats_url(), bus).await
    {
        let _ = relayed.delete_stream().await;
    }
}

/// A worker's run is alive from its claim: while its worktree is prepared (here a fetch that takes twice the
/// watchdog's bound, as a first clone of a big repository over a slow link would) its heartbeats go on, so the
/// run is not declared lost and its task not sent round again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_workers_run_is_not_lost_while_its_worktree_is_slow_to_prepare() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let script = agent(dir, "quick-agent.sh", "echo x > CHANGES.md");
    let mut file = dispatch_file(&remote, &script, "");
    let dispatch = file["dispatch"].as_table_mut().unwrap();
    dispatch.insert("executor".into(), toml::Value::from("workers"));
    // Lost after three missed beats: 4.5 s, half the fetch's 9 s (and room for a busy moment).
    dispatch.insert("heartbeat_s".into(), toml::Value::from(1.5));
    let config = write_config(dir, &file);
    let bus = crate::common::bus_config();
    let env = |name: &str, workspaces: &str| {
        process_env(Path::new(&config), name, &dir.join(workspaces), &bus)
    };

    // The worker's git: every fetch and clone waits 9 s first, then the real git runs; each is noted.
    let shim = dir.join("slow-git");
    std::fs::create_dir(&shim).unwrap();
    let real_git = std::env::var("PATH")
        .unwrap()
        .split(':')
        .map(|d| Path::new(d).join("git"))
        .find(|git| git.is_file())
        .expect("git on PATH");
    let noted = dir.join("slow-fetches");
    agent(
        &shim,
        "git",
        &format!(
            "case \" $* \" in *\" fetch \"*|*\" clone \"*) echo \"$*\" >> '{}'; sleep 9 ;; esac\nexec '{}' \"$@\"",
            noted.display(),
            real_git.display()
        ),
    );
    let path = format!("{}:{}", shim.display(), std::env::var("PATH").unwrap());

    let observer = Observer::new(&db).await;
    let server = Server::start_with(&db.url_string(), &borrow(&env("replica", "ws-s"))).await;
    let mut worker_command = crate::common::server::command(&db.url_string(), dir);
    worker_command
        .arg("worker")
        .envs(env("worker-1", "ws-w"))
        .env("PATH", path);
    let worker = KillOnDrop::spawn_logged(worker_command, &dir.join("worker.log"));

    let id = observer.create("Fetched slowly", "CHANGES.md").await;
    observer.until_in_review(id, Duration::from_secs(90)).await;
    let runs = observer.runs(id).await;
    assert_eq!(runs.len(), 1, "{runs:?}\n{}", worker.log());
    assert_eq!(runs[0].worker.as_deref(), Some("worker-1"), "{runs:?}");
    let fetches = std::fs::read_to_string(&noted).unwrap_or_default();
    assert!(!fetches.is_empty(), "the worker's git was not the slow one");
    let task = observer.board.load(id).await.unwrap().unwrap().task;
    assert_eq!(task.attempts(), 1);
    drop((worker, server));
    if let Ok(relayed) = pidevops::bus::JetstreamBus::connect(&crate::common::nats_url(), bus).await
    {
        let _ = relayed.delete_stream().await;
    }
}
