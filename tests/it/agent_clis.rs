//! The presets with the real agent CLIs (the pinned versions `deploy/install-runtime.sh` installs under
//! /opt/pidevops-agents/bin, or `PIDEVOPS_AGENT_CLIS`), each run by the real dispatcher, contained, on its own
//! network (`network = "proxy"`, the default), against a scripted model API on loopback (common::fake_model) that
//! speaks the CLI's own protocol: the model asks the CLI's shell tool to dump its environment and what it can read
//! of its configuration into the worktree, then its file tool to write CHANGES.md, then ends the turn. The test
//! sees the edit committed on `pidevops/<task>` of the remote and the run succeed, which pins each preset's argv,
//! input mode (the prompt on stdin), exit code and output; and, from the fake's record, that the prompt reached the
//! model, the real key arrived (added by the run's model gateway, where the deployment configured the endpoint the
//! CLI's own way: a variable, pi's models.json, OpenCode's configuration, Codex's base-URL variable), and every
//! tool result came back.
//!
//! The attack half: the model is whoever wrote the ticket (prompt injection), and here it runs `env`, reads the
//! CLI's configuration and sends its key variable's value out through the CLI. The dump is pushed, so whatever the
//! CLI could see is on the branch: the placeholder key and the preset's switches are there, never the real key, the
//! real endpoint or pidevops's secrets, which sit in the same service environment; what it sent out carried the
//! placeholder; no file of the run holds the key.
//!
//! The happy path runs twice: contained by bubblewrap, and with bubblewrap absent (Landlock and the reaper), as on
//! container hosts that refuse user namespaces. A missing CLI fails under `CI` (naming it and the install script)
//! and is skipped loudly elsewhere.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::agents::{Remote, REPO};
use crate::common::board;
use crate::common::fake_model::{FakeModel, ToolCall, FINAL_TEXT};
use crate::common::{in_ci, within, TestApp, TestDb};
use crate::dispatch::create_task_with;
use key::probe;
use pidevops::config::profiles::{presets, AgentProfile};
use pidevops::projectors::runs::RunRow;
use pidevops::tasks::{Column, TaskId};
use serde_json::json;

mod key;

/// The agent's own provider key: it must reach the CLI (and the fake).
const AGENT_KEY: &str = "sk-agent-key-for-the-fake-model-0123456789";
/// pidevops's secrets, in the same service environment: they must not reach the CLI.
const GITHUB_TOKEN: &str = "ghp_CLItestTOKENneverTOreachAGENTS0123456";
const ADMIN_TOKEN: &str = "admin-CLI-test-never-to-reach-agents-0123";
const WRITTEN: &str = "edited by the model through the CLI\n";
/// How long one CLI may take for its two turns on a loaded two-core machine (opencode alone took 36 s).
pub(crate) const RUN_LIMIT: Duration = Duration::from_secs(300);

/// `(bwrap, the containment /health names)`: bubblewrap, and none (the Landlock fallback of container hosts).
pub(crate) type Containment = (&'static str, &'static str);
pub(crate) const NAMESPACES: Containment = ("bwrap", "namespaces");
pub(crate) const LANDLOCK: Containment = ("/nonexistent/bwrap", "landlock");

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claude_preset_edits_through_the_anthropic_api_and_the_edit_is_pushed() {
    run(claude(), NAMESPACES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claude_preset_edits_with_landlock_when_bubblewrap_is_absent() {
    run(claude(), LANDLOCK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claude_preset_fails_the_attempt_when_the_model_api_refuses_the_account() {
    refused(claude()).await;
}

/// Claude Code's live input: a follow-up attached while its turn runs (its shell tool waits for the test) reaches
/// the real CLI on its standard input and the model in a later request, once; the run succeeds and the task
/// does not go round again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claude_preset_takes_a_follow_up_while_it_runs() {
    steered(claude_waiting()).await;
}

/// The Claude case whose shell tool waits for `go` in the worktree: a turn as long as the test needs.
fn claude_waiting() -> Case {
    let mut case = claude();
    case.script[0] = ToolCall::function(
        "Bash",
        json!({ "command": "while [ ! -f go ]; do sleep 0.2; done; rm go; env > agent-env.txt", "description": "Wait, then dump the environment" }),
    );
    case
}

fn claude() -> Case {
    Case {
        preset: "claude",
        key_var: "ANTHROPIC_API_KEY",
        wire: Wire::Anthropic,
        script: vec![
            ToolCall::function(
                "Bash",
                json!({ "command": probe("ANTHROPIC_API_KEY"), "description": "Dump the environment" }),
            ),
            ToolCall::function(
                "Write",
                json!({ "file_path": "CHANGES.md", "content": WRITTEN }),
            ),
        ],
        setup: Box::new(|fake, _| Setup {
            env: vec![
                ("ANTHROPIC_API_KEY".into(), AGENT_KEY.into()),
                ("ANTHROPIC_BASE_URL".into(), fake.to_owned()),
            ],
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn codex_preset_edits_through_the_responses_api_and_the_edit_is_pushed() {
    run(codex(), NAMESPACES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn codex_preset_edits_with_landlock_when_bubblewrap_is_absent() {
    run(codex(), LANDLOCK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn codex_preset_fails_the_attempt_when_the_model_api_refuses_the_account() {
    refused(codex()).await;
}

// Codex's default model works through one freeform tool, `exec`, that runs JavaScript calling its tools.
fn codex() -> Case {
    Case {
        preset: "codex",
        key_var: "CODEX_API_KEY",
        wire: Wire::Responses,
        script: vec![
            ToolCall::custom(
                "exec",
                &format!(
                    "const r = await tools.exec_command({{ cmd: {:?} }});\ntext(JSON.stringify(r));",
                    probe("CODEX_API_KEY")
                ),
            ),
            ToolCall::custom(
                "exec",
                &format!(
                    "await tools.apply_patch({:?});\ntext(\"patched\");",
                    format!(
                        "*** Begin Patch\n*** Add File: CHANGES.md\n+{}*** End Patch\n",
                        WRITTEN
                    )
                ),
            ),
        ],
        // The deployment's endpoint in OPENAI_BASE_URL (Codex itself reads no variable for it: pidevops points it
        // at the gateway with `-c openai_base_url=…`).
        setup: Box::new(|fake, _| Setup {
            env: vec![
                ("CODEX_API_KEY".into(), AGENT_KEY.into()),
                ("OPENAI_BASE_URL".into(), format!("{fake}/v1")),
            ],
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pi_preset_edits_through_the_anthropic_api_and_the_edit_is_pushed() {
    run(pi(), NAMESPACES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pi_preset_edits_with_landlock_when_bubblewrap_is_absent() {
    run(pi(), LANDLOCK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pi_preset_fails_the_attempt_when_the_model_api_refuses_the_account() {
    refused(pi()).await;
}

fn pi() -> Case {
    Case {
        preset: "pi",
        key_var: "ANTHROPIC_API_KEY",
        wire: Wire::Anthropic,
        script: vec![
            ToolCall::function("bash", json!({ "command": probe("ANTHROPIC_API_KEY") })),
            ToolCall::function("write", json!({ "path": "CHANGES.md", "content": WRITTEN })),
        ],
        setup: Box::new(|fake, scratch| {
            // pi takes its endpoint from models.json in its agent directory: the deployment's, which pidevops reads
            // (the agent never gets it). This one also holds the key written in, and a pi login (auth.json): neither
            // reaches the agent.
            let dir = scratch.join("pi-agent");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("models.json"),
                json!({ "providers": { "anthropic": { "baseUrl": fake, "apiKey": AGENT_KEY } } })
                    .to_string(),
            )
            .unwrap();
            std::fs::write(
                dir.join("auth.json"),
                json!({ "anthropic": { "type": "api_key", "key": AGENT_KEY } }).to_string(),
            )
            .unwrap();
            Setup {
                env: vec![
                    ("ANTHROPIC_API_KEY".into(), AGENT_KEY.into()),
                    ("PI_CODING_AGENT_DIR".into(), dir.display().to_string()),
                ],
            }
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn opencode_preset_edits_through_the_anthropic_api_and_the_edit_is_pushed() {
    run(opencode(), NAMESPACES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn opencode_preset_edits_with_landlock_when_bubblewrap_is_absent() {
    run(opencode(), LANDLOCK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn opencode_preset_fails_the_attempt_when_the_model_api_refuses_the_account() {
    refused(opencode()).await;
}

fn opencode() -> Case {
    Case {
        preset: "opencode",
        key_var: "ANTHROPIC_API_KEY",
        wire: Wire::Anthropic,
        script: vec![
            ToolCall::function(
                "bash",
                json!({ "command": probe("ANTHROPIC_API_KEY"), "description": "Dump the environment" }),
            ),
            ToolCall::function(
                "write",
                json!({ "filePath": "CHANGES.md", "content": WRITTEN }),
            ),
        ],
        // The deployment's endpoint in OpenCode's configuration (with the key written in too: it does not reach
        // the agent), which pidevops merges its gateway into.
        setup: Box::new(|fake, _| Setup {
            env: vec![
                ("ANTHROPIC_API_KEY".into(), AGENT_KEY.into()),
                (
                    "OPENCODE_CONFIG_CONTENT".into(),
                    json!({ "provider": { "anthropic": { "options": {
                        "baseURL": format!("{fake}/v1"), "apiKey": AGENT_KEY
                    } } } })
                    .to_string(),
                ),
            ],
        }),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Wire {
    Anthropic,
    Responses,
}

/// What a deployment configures for one CLI: the service's environment (the agent's key, its endpoint).
struct Setup {
    env: Vec<(String, String)>,
}

struct Case {
    preset: &'static str,
    /// The variable its key is passed in.
    key_var: &'static str,
    wire: Wire,
    script: Vec<ToolCall>,
    /// From the fake's URL and a scratch directory outside the workspaces.
    setup: SetupFn,
}

type SetupFn = Box<dyn FnOnce(&str, &Path) -> Setup + Send>;

fn preset(name: &str) -> AgentProfile {
    presets()
        .into_iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no preset {name}"))
}

/// Runs `case` (its first tool call waits for `go` in the worktree), attaches a follow-up while it waits, and
/// checks it reached the model once, live, in a later request.
async fn steered(mut case: Case) {
    const MARKER: &str = "STEERING-MARKER: also mention the changelog";
    let fake = FakeModel::start(case.script.clone()).await;
    let Some(scene) = start(&mut case, &fake, LANDLOCK).await else {
        return;
    };
    let (app, id) = (&scene.app, scene.id);
    within(RUN_LIMIT, "the model asked for its first tool", || async {
        !fake.model_calls().is_empty()
    })
    .await;
    app.state
        .board
        .execute(
            id,
            &pidevops::tasks::Command::AttachFollowUp {
                text: pidevops::tasks::FollowUpText::new(MARKER).unwrap(),
                origin: Some(
                    pidevops::tasks::FollowUpOrigin::new("dashboard:steer", "tester").unwrap(),
                ),
                send_back: true,
            },
            "test",
        )
        .await
        .unwrap();
    within(RUN_LIMIT, "the follow-up handed over live", || async {
        let task = app.state.board.load(id).await.unwrap().unwrap().task;
        task.follow_ups()
            .first()
            .is_some_and(|f| f.live && f.delivered_to_attempt == Some(1))
    })
    .await;
    let runs = scene
        ._scratch
        .path()
        .join("ws")
        .join("runs")
        .join(id.to_string());
    let worktree = std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path()
        .join("worktree");
    std::fs::write(worktree.join("go"), "").unwrap();
    let (run, log) = first_run(&scene).await;
    assert_eq!(
        run.state, "succeeded",
        "{:?}: {:?}\n{log}",
        run.failure, run.detail
    );
    let calls = fake.model_calls();
    let first_seen = calls.iter().position(|c| c.text.contains(MARKER));
    assert!(
        first_seen.is_some_and(|n| n > 0),
        "the follow-up never reached the model\n{log}"
    );
    // Once in the conversation: one user message, not two.
    let last = calls.last().unwrap();
    assert_eq!(last.text.matches(MARKER).count(), 1, "{}", last.text);
    within(Duration::from_secs(30), "in review", || async {
        board::row_now(app, id)
            .await
            .is_some_and(|row| row.column == Column::InReview)
    })
    .await;
    let task = app.state.board.load(id).await.unwrap().unwrap().task;
    assert_eq!(task.attempts(), 1);
    assert!(task.pending_follow_up_indices().is_empty());
    scene.app.stop().await;
}

/// The directory holding the CLI, or `None` (loudly) outside CI when it is not installed.
pub(crate) fn cli_dir(program: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("PIDEVOPS_AGENT_CLIS")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from("/opt/pidevops-agents/bin"), PathBuf::from);
    if pidevops::dispatch::sandbox::find_program(program, dir.to_str()).is_some() {
        return Some(dir);
    }
    if in_ci() {
        panic!(
            "CI is set and the {program} CLI is not in {}: the real-CLI tests must run in CI. Install the pinned \
             CLIs with deploy/install-runtime.sh (as root), or set PIDEVOPS_AGENT_CLIS to their directory.",
            dir.display()
        );
    }
    eprintln!(
        "\n*** SKIPPED the {program} preset against its real CLI: no {program} in {}.\n\
         *** Install the pinned agent CLIs with `sudo deploy/install-runtime.sh`\n\
         *** (or set PIDEVOPS_AGENT_CLIS to the directory that holds them).\n",
        dir.display()
    );
    None
}

/// One task with one preset, its CLI against `fake`, the service's environment holding pidevops's secrets too.
struct Scene {
    app: TestApp,
    remote: Remote,
    id: TaskId,
    title: String,
    db_url: String,
    _db: TestDb,
    _scratch: tempfile::TempDir,
    _cores: tokio::sync::RwLockWriteGuard<'static, ()>,
}

/// Starts the service with `case`'s preset against `fake` and creates a task; `None` when the CLI is absent
/// (outside CI).
async fn start(case: &mut Case, fake: &FakeModel, containment: Containment) -> Option<Scene> {
    let dir = cli_dir(case.preset)?;
    // A CLI run keeps a core busy for seconds (node, bun, a V8 isolate): not beside the timed tests.
    let cores = crate::common::heavy().await;
    let remote = Remote::new();
    let scratch = crate::common::contained_scratch();
    let setup = std::mem::replace(&mut case.setup, Box::new(|_, _| unreachable!()))(
        &fake.url,
        scratch.path(),
    );
    let file = format!(
        r#"
[board]
approval = "auto"

[dispatch]
agent = "{preset}"
heartbeat_s = 1
retry_backoff_s = 0.05
bwrap = "{bwrap}"

# Not about scopes: the scripted model writes its environment down beside the change.
[repos."{REPO}"]
url = "{url}"
scope = "off"
"#,
        preset = case.preset,
        bwrap = containment.0,
        url = remote.url(),
    );
    let db = TestDb::sqlite();
    let mut settings = crate::common::settings(&db);
    settings.file = pidevops::config::FileConfig::try_from(file.parse::<toml::Table>().unwrap())
        .unwrap_or_else(|e| panic!("{e}\n{file}"));
    settings.workspace_root = scratch.path().join("ws");
    settings
        .providers
        .set("GITHUB_TOKEN", Some(GITHUB_TOKEN))
        .unwrap();
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", dir.display());
    let db_url = db.url_string();
    let mut env: Vec<(&str, &str)> = vec![
        ("PATH", &path),
        ("GITHUB_TOKEN", GITHUB_TOKEN),
        ("PIDEVOPS_ADMIN_TOKEN", ADMIN_TOKEN),
        ("DATABASE_URL", &db_url),
    ];
    env.extend(setup.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    settings.env = pidevops::config::Env::from_pairs(env);
    let app = TestApp::spawn(settings).await;
    let (_, health) = app.health().await;
    assert!(
        health
            .to_string()
            .contains(&format!("\"containment\":\"{}\"", containment.1)),
        "{health}"
    );
    let title = format!("Write the change down for {}", case.preset);
    let id = create_task_with(&app, &title, None).await;
    Some(Scene {
        app,
        remote,
        id,
        title,
        db_url,
        _db: db,
        _scratch: scratch,
        _cores: cores,
    })
}

/// The task's first run, once it ended (read from the read model, brought to the log's head), and its log.
async fn first_run(scene: &Scene) -> (RunRow, String) {
    let (app, id) = (&scene.app, scene.id);
    let run = board::first_run_ended(app, id, RUN_LIMIT).await;
    let log = run
        .log_path
        .as_deref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    (run, log)
}

/// When the provider refuses the account (no credit, a wrong key), the CLI fails: it exits non-zero, pidevops
/// records the attempt failed (`exit`) with the CLI's output in its tail, and pushes nothing.
async fn refused(mut case: Case) {
    let fake = FakeModel::refusing().await;
    let Some(scene) = start(&mut case, &fake, NAMESPACES).await else {
        return;
    };
    let (run, log) = first_run(&scene).await;
    assert_eq!(run.state, "failed", "{}: {log}", case.preset);
    assert_eq!(
        run.failure.as_deref(),
        Some("exit"),
        "{}: {:?}\n{log}",
        case.preset,
        run.detail
    );
    assert!(
        !fake.model_calls().is_empty(),
        "{} never called the model",
        case.preset
    );
    assert!(
        scene
            .remote
            .branch(&format!("pidevops/{}", scene.id))
            .is_none(),
        "a failed attempt pushed its branch"
    );
    scene.app.stop().await;
}

async fn run(mut case: Case, containment: Containment) {
    let fake = FakeModel::start(case.script.clone()).await;
    let Some(scene) = start(&mut case, &fake, containment).await else {
        return;
    };
    let (run, log) = first_run(&scene).await;
    let Scene {
        app,
        remote,
        id,
        title,
        db_url,
        ..
    } = &scene;
    let (app, id) = (app, *id);
    let requests = fake.received();
    assert_eq!(
        run.state,
        "succeeded",
        "{} failed ({:?}: {:?})\nagent log:\n{log}\nthe model saw: {:#?}",
        case.preset,
        run.failure,
        run.detail,
        requests
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect::<Vec<_>>()
    );
    // The CLI printed the model's last words: its output reached the run's log and tail.
    assert!(log.contains(FINAL_TEXT), "{log}");
    assert!(
        run.tail.as_deref().unwrap_or_default().contains(FINAL_TEXT),
        "{:?}",
        run.tail
    );
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

    // What the CLI reported it spent, read from its own output by the preset's usage format (the fake model
    // reports tokens on every answer).
    app.project().await;
    let spent = pidevops::projectors::usage::task(app.state.log.store(), &id.to_string())
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{}: no usage read from its output\n{log}", case.preset))
        .spent;
    // Every answer of the fake says 10 tokens in and 5 out: what the CLI reports is their sum, exactly. OpenCode
    // leaves out one request: the session title it asks for on the side is in none of its step events.
    let answers = fake
        .model_calls()
        .iter()
        .filter(|c| !c.text.contains("You are a title generator"))
        .count() as i64;
    assert_eq!(
        (
            spent.input_tokens + spent.cache_read_tokens,
            spent.output_tokens
        ),
        (10 * answers, 5 * answers),
        "{}: {spent:?}\n{log}",
        case.preset
    );
    assert_eq!(spent.runs, 1);

    // The edit the model asked for, made by the CLI's own file tool, is what pidevops pushed.
    let branch = format!("pidevops/{id}");
    assert_eq!(
        remote.show(&branch, "CHANGES.md").as_deref(),
        Some(WRITTEN),
        "{log}"
    );
    assert_eq!(run.branch.as_deref(), Some(branch.as_str()));

    // What the CLI sent the model.
    let calls = fake.model_calls();
    let unexpected: Vec<_> = requests
        .iter()
        .filter(|r| {
            let model_call =
                r.method == "POST" && (r.path == "/v1/messages" || r.path == "/v1/responses");
            // Codex tries a WebSocket first and falls back to HTTPS when it is refused.
            let websocket =
                case.wire == Wire::Responses && r.method == "GET" && r.path == "/v1/responses";
            // The attack's request (below).
            let exfil = r.path.ends_with("/exfil");
            !(model_call || websocket || exfil)
        })
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(unexpected.is_empty(), "{unexpected:?}");
    assert!(calls.len() > case.script.len(), "{} calls", calls.len());
    for call in &calls {
        let key = match case.wire {
            Wire::Anthropic => call.header("x-api-key").map(str::to_owned),
            Wire::Responses => call.header("authorization").map(str::to_owned),
        };
        let expected = match case.wire {
            Wire::Anthropic => AGENT_KEY.to_owned(),
            Wire::Responses => format!("Bearer {AGENT_KEY}"),
        };
        assert_eq!(key.as_deref(), Some(expected.as_str()), "{}", call.path);
        assert!(
            call.body["model"].as_str().is_some_and(|m| !m.is_empty()),
            "a call names no model: {}",
            call.body
        );
        for secret in [GITHUB_TOKEN, ADMIN_TOKEN] {
            assert!(!call.text.contains(secret), "the model was sent {secret}");
        }
    }
    if case.wire == Wire::Responses {
        // The preset's `-c analytics.enabled=false` took: Codex reports it in every turn's metadata.
        for call in &calls {
            let metadata = call.header("x-codex-turn-metadata").unwrap_or_default();
            assert!(
                metadata.contains("\"analytics_enabled\":false"),
                "{metadata}"
            );
        }
    }
    assert!(
        calls.iter().any(|c| c.text.contains(title.as_str())),
        "the task's prompt never reached the model"
    );
    for n in 1..=case.script.len() {
        let came_back = calls.iter().any(|c| match case.wire {
            Wire::Anthropic => c.body["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| {
                    m["content"].as_array().into_iter().flatten().any(|b| {
                        b["type"] == "tool_result" && b["tool_use_id"] == format!("toolu_fake_{n}")
                    })
                }),
            Wire::Responses => c.body["input"].as_array().into_iter().flatten().any(|i| {
                i["type"]
                    .as_str()
                    .is_some_and(|t| t.ends_with("_call_output"))
                    && i["call_id"] == format!("call_fake_{n}")
            }),
        });
        assert!(came_back, "the result of tool call {n} never came back");
    }

    // The attack: what the CLI's shell saw, pushed for anyone to read.
    let seen = remote
        .show(&branch, "agent-env.txt")
        .unwrap_or_else(|| panic!("the environment dump was not pushed\n{log}"));
    let profile = preset(case.preset);
    key::stays_outside(
        &case,
        &key::Seen {
            env: &seen,
            config: &remote.show(&branch, "agent-config.txt").unwrap_or_default(),
            log: &log,
            requests: &requests,
            runs: &scene._scratch.path().join("ws").join("runs"),
        },
        &fake.url,
    );
    for (name, value) in &profile.set_env {
        assert!(
            seen.lines().any(|l| l == format!("{name}={value}")),
            "{name}={value} did not reach the CLI: {seen}"
        );
    }
    for secret in [GITHUB_TOKEN, ADMIN_TOKEN, db_url.as_str()] {
        assert!(!seen.contains(secret), "the agent saw {secret}: {seen}");
        assert!(!log.contains(secret), "the agent's log holds {secret}");
    }
    for name in ["GITHUB_TOKEN=", "PIDEVOPS_ADMIN_TOKEN=", "DATABASE_URL="] {
        assert!(!seen.lines().any(|l| l.starts_with(name)), "{name}: {seen}");
    }
    scene.app.stop().await;
}
