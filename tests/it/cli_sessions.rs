//! Resuming the agent CLI's own session with its attempt (Claude Code `--resume`): the real `serve` and the real
//! Claude Code CLI against the scripted model API (common::fake_model), cut off by a SIGKILL of `serve` while the
//! model's second tool call runs. The restarted service resumes the attempt from its checkpoint and the CLI from
//! the session kept with that checkpoint: the model's first request after the restart carries the first run's
//! conversation (its first tool call and that call's result), the first call is not made again, and the work is
//! pushed once. The attack half: what the first run's agent left in the CLI's home besides the transcript (a
//! settings file, a file of its own) is not in the resumed run's home. Postgres only (two processes share it).

use std::path::Path;
use std::time::Duration;

use crate::agent_clis::{cli_dir, RUN_LIMIT};
use crate::common::agents::{Remote, REPO};
use crate::common::fake_model::{FakeModel, ToolCall, FINAL_TEXT};
use crate::common::server::{read_log, Server};
use crate::common::{within, TestDb};
use crate::resume::Observer;
use pidevops::dispatch::sessions;
use pidevops::projectors::tasks as task_rows;
use pidevops::tasks::{Column, TaskId};
use serde_json::json;

const AGENT_KEY: &str = "sk-agent-key-for-the-fake-model-sessions-0123";

/// The run directory of `run` of `id` under the workspace root `ws`.
fn run_dir(ws: &Path, id: TaskId, run: &str) -> std::path::PathBuf {
    ws.join("runs").join(id.to_string()).join(run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resumed_attempt_resumes_the_claude_session_kept_with_its_checkpoint() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let Some(clis) = cli_dir("claude") else {
        return;
    };
    let _cores = crate::common::heavy().await;
    let remote = Remote::new();
    let scratch = crate::common::contained_scratch();
    let gates = scratch.path().join("gates");
    std::fs::create_dir(&gates).unwrap();
    let gate = gates.join("go");
    let ws = scratch.path().join("ws");
    // The first call writes a line and plants things in the CLI's home; the second leaves the worktree changing
    // (so a checkpoint follows the first call's result) until the gate opens, which it does only after the cut.
    let fake = FakeModel::start(vec![
        ToolCall::function(
            "Bash",
            json!({ "command": "echo one >> work.txt; printf '%s' '{\"env\":{\"PLANTED\":\"1\"}}' > \"$CLAUDE_CONFIG_DIR/settings.json\"; echo planted > \"$CLAUDE_CONFIG_DIR/planted.txt\"", "description": "Write the first line" }),
        ),
        ToolCall::function(
            "Bash",
            json!({ "command": format!("echo waiting > wait.txt; while [ ! -f {gate} ]; do sleep 0.2; date +%s%N > tick.txt; done; rm -f tick.txt wait.txt; echo two >> work.txt", gate = gate.display()), "description": "Write the second line" }),
        ),
    ])
    .await;
    let config = scratch.path().join("pidevops.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[board]
approval = "auto"

[dispatch]
agent = "claude"
heartbeat_s = 0.3
retry_backoff_s = 0.05
checkpoint_every_s = 1
readable = ["{gates}"]

[repos."{REPO}"]
url = "{url}"
scope = "off"
"#,
            gates = gates.display(),
            url = remote.url(),
        ),
    )
    .unwrap();
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", clis.display());
    let (config, ws_text) = (config.display().to_string(), ws.display().to_string());
    let env: Vec<(&str, &str)> = vec![
        ("PIDEVOPS_CONFIG", &config),
        ("WORKSPACE_ROOT", &ws_text),
        ("PIDEVOPS_LOOP_STARTUP_DELAY_S", "0.05"),
        ("PIDEVOPS_PROJECTOR_INTERVAL_S", "0.2"),
        // The same name after the restart: the new process knows at once its predecessor's run is gone.
        ("PIDEVOPS_INSTANCE_ID", "replica-a"),
        ("PATH", &path),
        ("ANTHROPIC_API_KEY", AGENT_KEY),
        ("ANTHROPIC_BASE_URL", &fake.url),
    ];
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
                .is_some_and(|kept| {
                    String::from_utf8_lossy(&kept.bytes)
                        .contains("\"tool_use_id\":\"toolu_fake_1\"")
                })
        },
    )
    .await;
    let first = observer.runs(id).await.remove(0);
    let before = fake.model_calls().len();
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let first_home = sessions::home(&run_dir(&ws, id, &first.run_id));
    assert!(
        first_home.join("settings.json").exists() && first_home.join("planted.txt").exists(),
        "the first run's agent planted its files: {:?}",
        std::fs::read_dir(&first_home)
            .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
    );

    std::fs::write(&gate, "").unwrap();
    let server = Server::start_with(&db.url_string(), &env).await;
    within(
        RUN_LIMIT,
        "the task in review after the restart",
        || async {
            task_rows::get(&observer.store, id)
                .await
                .unwrap()
                .is_some_and(|row| row.column == Column::InReview)
        },
    )
    .await;
    observer.both_outcomes(id).await;
    let logs = read_log(server.workdir.path());
    let runs = observer.runs(id).await;
    assert_eq!(runs[0].failure.as_deref(), Some("lost"), "{runs:?}");
    assert_eq!(runs[1].state, "succeeded", "{runs:?}\n{logs}");
    assert_eq!((runs[0].attempt, runs[1].attempt), (1, 1), "{runs:?}");
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
        first_resumed.text.contains("toolu_fake_1")
            && first_resumed.text.contains("Write the first line"),
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
    assert!(second_home.join("projects").is_dir(), "{second_home:?}");
    for planted in ["settings.json", "planted.txt"] {
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
