//! Resuming the agent CLI's own session with its attempt (Claude Code `--resume`, Codex `exec resume`): the real
//! `serve` and the real CLI against the scripted model API (common::fake_model), cut off by a SIGKILL of `serve`
//! while the model's second tool call runs. The restarted service resumes the attempt from its checkpoint and the CLI from
//! the session kept with that checkpoint: the model's first request after the restart carries the first run's
//! conversation (its first tool call and that call's result), the first call is not made again, and the work is
//! pushed once. The attack half: what the first run's agent left in the CLI's home besides the transcript (a
//! settings file, a file of its own) is not in the resumed run's home. Postgres only (two processes share it).

use std::path::Path;
use std::time::Duration;

use crate::agent_clis::{cli_dir, RUN_LIMIT};
use crate::common::agents::{Remote, REPO};
use crate::common::fake_model::{FakeModel, ToolCall, FINAL_TEXT};
use crate::common::observer::Observer;
use crate::common::server::{read_log, Server};
use crate::common::{within, TestDb};
use pidevops::dispatch::sessions;
use pidevops::tasks::TaskId;
use serde_json::json;

const AGENT_KEY: &str = "sk-agent-key-for-the-fake-model-sessions-0123";

/// One CLI's side of the test.
struct Cli {
    preset: &'static str,
    /// The model's two calls, each running `command` (the second waits at the gate).
    script: fn(&str, &str) -> Vec<ToolCall>,
    /// The service's environment for its key and endpoint, from the fake's URL.
    env: fn(&str) -> Vec<(&'static str, String)>,
    /// The files the first call plants in the CLI's home, the settings the CLI would read first among them.
    planted: [&'static str; 2],
    /// Whether a kept transcript holds the first call's result.
    holds_first_result: fn(&str) -> bool,
    /// The first call's id in the model's requests.
    first_call: &'static str,
}

/// The first call: a line, and files planted in the CLI's home (`$var`).
fn first_command(var: &str, planted: [&str; 2]) -> String {
    format!(
        "echo one >> work.txt; echo planted > \"${var}/{}\"; echo planted > \"${var}/{}\"",
        planted[0], planted[1]
    )
}

/// The second call: the worktree kept changing (so a checkpoint follows the first call's result) until `gate`.
fn second_command(gate: &str) -> String {
    format!(
        "echo waiting > wait.txt; while [ ! -f {gate} ]; do sleep 0.2; date +%s%N > tick.txt; done; \
         unlink tick.txt; unlink wait.txt; echo two >> work.txt"
    )
}

fn claude() -> Cli {
    const PLANTED: [&str; 2] = ["settings.json", "planted.txt"];
    Cli {
        preset: "claude",
        script: |first, second| {
            vec![
                ToolCall::function(
                    "Bash",
                    json!({ "command": first, "description": "Write the first line" }),
                ),
                ToolCall::function(
                    "Bash",
                    json!({ "command": second, "description": "Write the second line" }),
                ),
            ]
        },
        env: |fake| {
            vec![
                ("ANTHROPIC_API_KEY", AGENT_KEY.to_owned()),
                ("ANTHROPIC_BASE_URL", fake.to_owned()),
            ]
        },
        planted: PLANTED,
        holds_first_result: |transcript| transcript.contains("\"tool_use_id\":\"toolu_fake_1\""),
        first_call: "toolu_fake_1",
    }
}

// Codex's default model works through one freeform tool, `exec`, that runs JavaScript calling its tools; the
// second call's command may wait as long as the test does.
fn codex() -> Cli {
    Cli {
        preset: "codex",
        script: |first, second| {
            let call = |cmd: &str| {
                ToolCall::custom(
                    "exec",
                    &format!(
                        "const r = await tools.exec_command({{ cmd: {cmd:?}, yield_time_ms: 300000 }});\ntext(JSON.stringify(r));"
                    ),
                )
            };
            vec![call(first), call(second)]
        },
        env: |fake| {
            vec![
                ("CODEX_API_KEY", AGENT_KEY.to_owned()),
                ("OPENAI_BASE_URL", format!("{fake}/v1")),
            ]
        },
        planted: ["config.toml", "planted.txt"],
        holds_first_result: |transcript| {
            transcript
                .lines()
                .any(|line| line.contains("_call_output") && line.contains("\"call_fake_1\""))
        },
        first_call: "call_fake_1",
    }
}

/// The run directory of `run` of `id` under the workspace root `ws`.
fn run_dir(ws: &Path, id: TaskId, run: &str) -> std::path::PathBuf {
    ws.join("runs").join(id.to_string()).join(run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resumed_attempt_resumes_the_claude_session_kept_with_its_checkpoint() {
    resume_session(claude()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resumed_attempt_resumes_the_codex_session_kept_with_its_checkpoint() {
    resume_session(codex()).await;
}

async fn resume_session(cli: Cli) {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let Some(clis) = cli_dir(cli.preset) else {
        return;
    };
    let _cores = crate::common::heavy().await;
    let remote = Remote::new();
    let scratch = crate::common::contained_scratch();
    let gates = scratch.path().join("gates");
    std::fs::create_dir(&gates).unwrap();
    let gate = gates.join("go");
    let ws = scratch.path().join("ws");
    let store = pidevops::config::presets::by_program(cli.preset)
        .and_then(|p| p.session)
        .unwrap();
    let first = first_command(sessions::home_var(store), cli.planted);
    let fake = FakeModel::start((cli.script)(
        &first,
        &second_command(&gate.to_string_lossy()),
    ))
    .await;
    let config = scratch.path().join("pidevops.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[board]
approval = "auto"

[dispatch]
agent = "{preset}"
heartbeat_s = 0.3
retry_backoff_s = 0.05
checkpoint_every_s = 1
readable = ["{gates}"]

[repos."{REPO}"]
url = "{url}"
scope = "off"
"#,
            preset = cli.preset,
            gates = gates.display(),
            url = remote.url(),
        ),
    )
    .unwrap();
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", clis.display());
    let (config, ws_text) = (config.display().to_string(), ws.display().to_string());
    let passed = (cli.env)(&fake.url);
    let mut env: Vec<(&str, &str)> = vec![
        ("PIDEVOPS_CONFIG", &config),
        ("WORKSPACE_ROOT", &ws_text),
        ("PIDEVOPS_LOOP_STARTUP_DELAY_S", "0.05"),
        ("PIDEVOPS_PROJECTOR_INTERVAL_S", "0.2"),
        // The same name after the restart: the new process knows at once its predecessor's run is gone.
        ("PIDEVOPS_INSTANCE_ID", "replica-a"),
        ("PATH", &path),
    ];
    env.extend(passed.iter().map(|(k, v)| (*k, v.as_str())));
    let observer = Observer::new(&db).await;
    let mut server = Server::start_with(&db.url_string(), &env).await;
    let id = crate::common::board::new_task("Two lines")
        .done_when("two lines")
        .approval(pidevops::tasks::ApprovalPolicy::Auto)
        .key("test:two-lines")
        .create_on(&observer.board)
        .await;

    // A checkpoint recorded after the first call's result, with the session kept beside it.
    within(
        RUN_LIMIT,
        "a checkpoint whose kept session holds the first call's result",
        || async {
            let Some(first) = observer.runs(id).await.into_iter().next() else {
                return false;
            };
            let Some(last) = observer.checkpoints(&first.run_id).await.pop() else {
                return false;
            };
            sessions::kept(&ws, id, last.commit.as_str())
                .unwrap()
                .is_some_and(|kept| (cli.holds_first_result)(&String::from_utf8_lossy(&kept.bytes)))
        },
    )
    .await;
    let first = observer.runs(id).await.remove(0);
    let before = fake.model_calls().len();
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let first_home = sessions::home(&run_dir(&ws, id, &first.run_id));
    assert!(
        cli.planted.iter().all(|f| first_home.join(f).exists()),
        "the first run's agent planted its files: {:?}",
        std::fs::read_dir(&first_home)
            .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
    );

    std::fs::write(&gate, "").unwrap();
    let server = Server::start_with(&db.url_string(), &env).await;
    observer.until_in_review(id, RUN_LIMIT).await;
    let logs = read_log(server.workdir.path());
    let runs = observer.lost_then_resumed(id, &logs).await;
    assert_eq!(observer.resumed(id).await.len(), 1);

    // The resumed CLI's first request holds the first run's conversation, and then the resume notice.
    let calls = fake.model_calls();
    let resumed: Vec<_> = calls[before..]
        .iter()
        .filter(|c| c.text.contains("This attempt resumes attempt"))
        .collect();
    let first_resumed = resumed.first().unwrap_or_else(|| {
        panic!(
            "no request after the restart told the model it resumes: {:#?}\n{logs}",
            calls[before..].iter().map(|c| &c.text).collect::<Vec<_>>()
        )
    });
    assert!(
        first_resumed.text.contains(cli.first_call)
            && first_resumed.text.contains("echo one >> work.txt"),
        "the resumed session did not carry the first run's conversation: {}",
        first_resumed.text
    );
    assert!(
        first_resumed
            .text
            .contains("Your session goes on from that same checkpoint"),
        "{}",
        first_resumed.text
    );
    let second_log =
        std::fs::read_to_string(runs[1].log_path.as_deref().unwrap()).unwrap_or_default();
    assert!(second_log.contains(FINAL_TEXT), "{second_log}");

    // The first call was not made again: its line is there once, then the second call's.
    let branch = format!("pidevops/{id}");
    assert_eq!(
        remote.show(&branch, "work.txt").as_deref(),
        Some("one\ntwo\n")
    );
    assert_eq!(remote.show(&branch, "tick.txt"), None);

    // Only the transcript crossed: nothing else the first run's agent left in the CLI's home.
    let second_home = sessions::home(&run_dir(&ws, id, &runs[1].run_id));
    let resumed_from = sessions::find(
        store,
        &second_home,
        &run_dir(&ws, id, &runs[1].run_id).join("worktree"),
    );
    assert!(
        resumed_from.as_ref().is_ok_and(|t| t
            .as_ref()
            .is_some_and(|t| (cli.holds_first_result)(&String::from_utf8_lossy(&t.bytes)))),
        "{resumed_from:?}"
    );
    for planted in cli.planted {
        assert!(
            !second_home.join(planted).exists(),
            "{planted} reached the resumed run's CLI home"
        );
    }
    // The work pushed, the task's kept sessions are forgotten.
    within(
        Duration::from_secs(10),
        "the kept sessions forgotten",
        || async { !sessions::tasks_dir(&ws, id).exists() },
    )
    .await;
    drop(server);
}
