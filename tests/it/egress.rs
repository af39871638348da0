//! An agent's network, through the real binary and the real dispatcher: the agent (a script, as ticket text could
//! make any CLI run) tries the NATS server (127.0.0.1:4222), Postgres (127.0.0.1:5432), the service's own port and
//! the cloud metadata address (169.254.169.254) directly, then the metadata address, NATS and an unlisted host
//! through its proxy, and calls its model API through the gateway. It reaches nothing but the model: the direct
//! connections fail (its own network namespace has only loopback; under Landlock only the proxy's port may be
//! connected to), the proxy answers 403 and records each refusal on the run, and the model call works through the
//! proxy, which adds the real key: the agent's environment, HOME, TMPDIR and worktree (what it pushes) hold only a
//! placeholder. Run twice: bubblewrap, and bubblewrap absent (Landlock's network rules).

use std::path::Path;
use std::time::Duration;

use crate::common::agents::{agent, Remote};
use crate::common::fake_model::FakeModel;
use crate::common::server::{read_log, Server};
use serde_json::{json, Value};

/// The model key in the service's environment: it must reach the model API and nothing the agent can read.
const REAL_KEY: &str = "sk-ant-REAL-model-key-never-in-the-sandbox-0123456789";
const ADMIN: &str = "admin-egress-test-token-0123456789abcdef";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_reaches_only_its_model_through_the_proxy_with_namespaces() {
    agent_reaches_only_its_model("bwrap", "namespaces").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_reaches_only_its_model_through_the_proxy_with_landlock() {
    agent_reaches_only_its_model("/nonexistent/bwrap", "landlock").await;
}

/// The probe: each line `<name> <http_connect> <http_code> exit=<curl's exit status>`.
const PROBE: &str = r#"port=$(head -n 1 "$1" | sed 's/[^0-9]//g')
probe() { name=$1; shift; codes=$(curl -s -o /dev/null -m 10 -w '%{http_connect} %{http_code}' "$@"); status=$?; printf '%s %s exit=%s\n' "$name" "$codes" "$status"; }
{
  probe direct-nats --noproxy '*' http://127.0.0.1:4222/
  probe direct-postgres --noproxy '*' http://127.0.0.1:5432/
  probe direct-service --noproxy '*' "http://127.0.0.1:$port/health/live"
  probe direct-metadata --noproxy '*' http://169.254.169.254/latest/meta-data/
  probe proxy-metadata --noproxy "" -x "$HTTP_PROXY" http://169.254.169.254/latest/meta-data/
  probe proxy-metadata-tls --noproxy "" -x "$HTTPS_PROXY" https://169.254.169.254/
  probe proxy-nats --noproxy "" -x "$HTTP_PROXY" http://127.0.0.1:4222/
  probe proxy-service --noproxy "" -x "$HTTPS_PROXY" "https://127.0.0.1:$port/"
  probe proxy-unlisted --noproxy "" -x "$HTTPS_PROXY" https://unlisted.example.com/
} > probes.txt 2>&1
curl -s -m 20 "$ANTHROPIC_BASE_URL/v1/messages" -H "x-api-key: $ANTHROPIC_API_KEY" \
  -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' \
  -d '{"model":"claude-test","max_tokens":16,"messages":[{"role":"user","content":"hello from the sandbox"}]}' > model-answer.txt 2>&1
env > env-dump.txt
cat "$HOME"/* "$TMPDIR"/* > home-and-tmp.txt 2>/dev/null
echo probed"#;

async fn agent_reaches_only_its_model(bwrap: &str, containment: &str) {
    let scratch = crate::common::contained_scratch();
    let agents = scratch.path().join("agents");
    std::fs::create_dir_all(&agents).unwrap();
    let ws = scratch.path().join("ws");
    let app = Remote::new();
    let model = FakeModel::start(Vec::new()).await;
    let script = agent(&agents, "prober.sh", PROBE);
    let config = format!(
        r#"
[board]
approval = "auto"

[dispatch]
agent = "prober"
max_concurrent = 1
heartbeat_s = 0.5
retry_backoff_s = 0.05
bwrap = "{bwrap}"

[agents.prober]
command = ["{script}", "{{prompt_file}}"]
env = ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"]

[repos."acme/app"]
url = "{app}"
"#,
        script = script.display(),
        app = app.url(),
    );
    let config_path = scratch.path().join("pidevops.toml");
    std::fs::write(&config_path, config).unwrap();
    let db = scratch.path().join("data").join("pidevops.db");
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    let server = Server::start_with(
        &format!("sqlite://{}", db.display()),
        &[
            ("PIDEVOPS_CONFIG", config_path.to_str().unwrap()),
            ("WORKSPACE_ROOT", ws.to_str().unwrap()),
            ("PIDEVOPS_ADMIN_TOKEN", ADMIN),
            ("ANTHROPIC_API_KEY", REAL_KEY),
            ("ANTHROPIC_BASE_URL", &model.url),
            ("GITHUB_API_URL", "http://127.0.0.1:9"),
        ],
    )
    .await;
    let client = reqwest::Client::new();
    let api = |path: &str| format!("{}{path}", server.base);
    let health: Value = client
        .get(api("/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        health
            .to_string()
            .contains(&format!("\"containment\":\"{containment}\"")),
        "{health}"
    );
    let service_port = server.base.rsplit(':').next().unwrap().to_owned();
    let created: Value = client
        .post(api("/api/tasks"))
        .bearer_auth(ADMIN)
        .json(&json!({
            "repo": "acme/app",
            "spec": { "task": format!("probe {service_port}"), "scope": "everything", "done_when": "probed" }
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let shown = loop {
        let shown: Value = client
            .get(api(&format!("/api/tasks/{id}")))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if shown["task"]["column"] == "in-review" {
            break shown;
        }
        assert!(
            tokio::time::Instant::now() < deadline && shown["task"]["needs_human"].is_null(),
            "{id} not in review: {shown}\nagent logs: {}\nserver log: {}",
            run_files(&ws, "agent.log"),
            read_log(server.workdir.path())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let branch = format!("pidevops/{id}");
    let probes = app
        .show(&branch, "probes.txt")
        .expect("the probes were pushed");

    // Nothing answered a direct connection: curl could not connect (exit 7) to anything.
    for name in [
        "direct-nats",
        "direct-postgres",
        "direct-service",
        "direct-metadata",
    ] {
        let line = probes
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {probes}"));
        assert!(line.ends_with("exit=7"), "{name} was reached: {probes}");
    }
    // The proxy refused each, with a 403 (to the tunnel, or to the plain request).
    for name in [
        "proxy-metadata",
        "proxy-metadata-tls",
        "proxy-nats",
        "proxy-service",
        "proxy-unlisted",
    ] {
        let line = probes
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {probes}"));
        assert!(
            line.contains("403"),
            "{name} was not refused by the proxy: {probes}"
        );
    }

    // The model answered through the gateway, which sent the real key; the agent sent only its placeholder.
    let answer = app.show(&branch, "model-answer.txt").unwrap_or_default();
    assert!(
        answer.contains("message"),
        "the model call failed: {answer}"
    );
    let received = model.received();
    let call = received
        .iter()
        .find(|r| r.text.contains("hello from the sandbox"))
        .unwrap_or_else(|| panic!("the model never got the call: {received:?}"));
    assert_eq!(call.header("x-api-key"), Some(REAL_KEY));

    // The agent's environment holds the placeholder and its proxy, never the key.
    let dump = app.show(&branch, "env-dump.txt").unwrap();
    assert!(
        dump.contains(&format!(
            "ANTHROPIC_API_KEY={}",
            pidevops::dispatch::egress::gateway::PLACEHOLDER_KEY
        )),
        "{dump}"
    );
    assert!(dump.contains("HTTPS_PROXY=http://127.0.0.1:"), "{dump}");
    assert!(
        !dump.contains(&model.url),
        "the agent knows the real model URL: {dump}"
    );
    // No file the agent could write or read holds the key: its branch, its worktree, HOME and TMPDIR, its log.
    for file in files_on(&app, &branch) {
        let content = app.show(&branch, &file).unwrap_or_default();
        assert!(!content.contains(REAL_KEY), "{branch}:{file} holds the key");
    }
    let on_disk = all_run_files(&ws);
    assert!(!on_disk.is_empty());
    assert!(!on_disk.contains(REAL_KEY), "a run file holds the key");

    // Every refusal is on the run, by host and port: its `run.egress_refused` event, before its outcome.
    assert_eq!(shown["task"]["column"], "in-review");
    let events: Value = client
        .get(api("/api/events?after=0&limit=1000"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let list = events
        .as_array()
        .or_else(|| events["events"].as_array())
        .unwrap();
    let refused = list
        .iter()
        .find(|e| e["type"] == "run.egress_refused")
        .unwrap_or_else(|| panic!("no run.egress_refused: {events}"))["data"]
        .to_string();
    assert!(!refused.contains(REAL_KEY));
    for (host, port) in [
        ("169.254.169.254", "80"),
        ("169.254.169.254", "443"),
        ("127.0.0.1", "4222"),
        ("127.0.0.1", service_port.as_str()),
        ("unlisted.example.com", "443"),
    ] {
        assert!(
            refused.contains(&format!("\"host\":\"{host}\",\"port\":{port}")),
            "{host}:{port} is not on the run: {refused}"
        );
    }
    let metrics = client
        .get(api("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("pidevops_agent_egress_refused_total{reason=\"ip_literal\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("pidevops_agent_egress_refused_total{reason=\"not_allowed\"}"),
        "{metrics}"
    );
}

/// Every file on a branch of the remote.
fn files_on(remote: &Remote, branch: &str) -> Vec<String> {
    let out = std::process::Command::new("git")
        .args(["ls-tree", "-r", "--name-only", branch])
        .current_dir(remote.dir.path().join("remote.git"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The named file of every run, concatenated.
fn run_files(ws: &Path, name: &str) -> String {
    let mut all = String::new();
    for task in std::fs::read_dir(ws.join("runs"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for run in std::fs::read_dir(task.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Ok(text) = std::fs::read_to_string(run.path().join(name)) {
                all.push_str(&text);
            }
        }
    }
    all
}

/// Every regular file under the runs' directories (worktrees, HOMEs, TMPDIRs, logs), lossily, concatenated.
fn all_run_files(ws: &Path) -> String {
    let mut all = String::new();
    let mut stack = vec![ws.join("runs")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                if let Ok(bytes) = std::fs::read(entry.path()) {
                    all.push_str(&String::from_utf8_lossy(&bytes));
                }
            }
        }
    }
    all
}

/// A task's page names what its attempt's proxy refused (host, port, how often), next to its log: through the real
/// dispatcher in this process (bubblewrap where it works) and the dashboard.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_task_page_shows_what_the_proxy_refused() {
    use crate::common::{within, TestApp, TestDb};
    use crate::web::{get, sign_in};
    let db = TestDb::sqlite();
    let (app, rig, id) = crate::web::app_with_agent_task(
        &db,
        TestApp::with_agent("refused.sh", r#"for i in 1 2; do curl -s -o /dev/null -m 10 --noproxy "" -x "$HTTPS_PROXY" https://169.254.169.254/; done
echo done > refused.txt"#)
            .contained(),
        "Probe the metadata service",
        "test:egress-page",
    )
    .await;
    let cookie = sign_in(&app).await;
    let page = format!("/tasks/{id}");
    within(
        Duration::from_secs(60),
        "the succeeded attempt on its page",
        || async {
            get(&app, &page, &cookie)
                .await
                .1
                .contains(r#"data-state="succeeded">"#)
        },
    )
    .await;
    let shown = "Network refused by its egress proxy: <code>169.254.169.254:443</code> ×2";
    let (status, html) = get(&app, &page, &cookie).await;
    assert_eq!(status, 200);
    assert!(html.contains(shown), "{html}");
    // Read from the log, not from a file beside the run: still there once its run directory is gone (as after gc,
    // or on another worker's page), and nothing a file there says is shown.
    let runs = rig.scratch.path().join("ws").join("runs");
    assert!(runs.is_dir(), "the runs were not under {}", runs.display());
    std::fs::remove_dir_all(&runs).unwrap();
    let (status, html) = get(&app, &page, &cookie).await;
    assert_eq!(status, 200);
    assert!(html.contains("its run directory is gone"), "{html}");
    assert!(html.contains(shown), "{html}");
}

/// A repository's hook gets the same network as its agent: its setup (repository code, contained like the agent)
/// reaches neither NATS directly nor the metadata address through its proxy, and what its proxy refused is on the
/// run with the agent's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_repository_hook_gets_the_agents_network() {
    use crate::common::{within, TestApp, TestDb};
    let db = TestDb::sqlite();
    let remote = Remote::new();
    let scratch = crate::common::contained_scratch();
    let script = agent(scratch.path(), "agent.sh", "echo x > CHANGES.md");
    let setup = agent(
        scratch.path(),
        "setup.sh",
        r#"curl -s -o /dev/null -m 10 --noproxy '*' http://127.0.0.1:4222/; echo "direct=$?" > hook-probe.txt
curl -s -o /dev/null -m 10 --noproxy "" -x "$HTTPS_PROXY" https://169.254.169.254/; echo "proxy=$?" >> hook-probe.txt"#,
    );
    let mut file = crate::common::agents::dispatch_file(&remote, &script, "");
    file["repos"][crate::common::agents::REPO]
        .as_table_mut()
        .unwrap()
        .insert(
            "setup".into(),
            toml::Value::Array(vec![toml::Value::from(setup.display().to_string())]),
        );
    let mut settings = crate::common::settings(&db);
    settings.file = pidevops::config::FileConfig::try_from(file).unwrap();
    settings.workspace_root = scratch.path().join("ws");
    let app = TestApp::spawn(settings).await;
    let id = crate::common::board::new_task("Set up and work")
        .done_when("")
        .key("test:egress-hook")
        .create(&app)
        .await;
    let branch = format!("pidevops/{id}");
    within(Duration::from_secs(60), "the attempt pushed", || async {
        remote.branch(&branch).is_some()
    })
    .await;
    let probe = remote
        .show(&branch, "hook-probe.txt")
        .expect("the hook's probe");
    // curl: 7 = could not connect; 56 = the proxy answered the CONNECT with 403.
    assert_eq!(probe, "direct=7\nproxy=56\n", "the hook reached something");
    // On the run: its `run.egress_refused` event in the log.
    let store = app.state.log.store();
    let recorded = || async {
        store
            .read_after(0, 10_000)
            .await
            .unwrap()
            .into_iter()
            .find(|e| e.event_type == pidevops::domain::runs::EGRESS_REFUSED)
            .map(|e| String::from_utf8_lossy(&e.body).into_owned())
    };
    within(
        Duration::from_secs(30),
        "the run's refusals recorded",
        || async { recorded().await.is_some() },
    )
    .await;
    let refused = recorded().await.unwrap_or_default();
    assert!(
        refused.contains(r#""host":"169.254.169.254","port":443"#),
        "the hook's refusal is not on the run: {refused}"
    );
    app.stop().await;
}

/// The bridge exec'd first inside every sandbox with its own network (src/bin/pidevops-bridge.rs).
const BRIDGE: &str = env!("CARGO_BIN_EXE_pidevops-bridge");

/// Runs `command`, its output within a minute (a forwarder outliving its command would hold the pipes open).
fn output_within_a_minute(mut command: std::process::Command) -> (u32, std::process::Output) {
    use std::process::Stdio;
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the bridge starts");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the bridge (or its forwarder) outlived its command")
        .unwrap();
    (pid, output)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The bridge listens on its port before the command starts (the command's first connection is forwarded, never
/// refused), forwards the connection to the Unix socket both ways, and becomes the command: the same process (its
/// pid), its output, its exit status.
#[test]
fn the_bridge_forwards_its_port_to_the_socket_and_becomes_the_command() {
    use std::io::{BufRead, BufReader, Write};
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("egress.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let proxy = std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        let mut line = String::new();
        BufReader::new(conn.try_clone().unwrap())
            .read_line(&mut line)
            .unwrap();
        (&conn)
            .write_all(format!("proxy saw {line}").as_bytes())
            .unwrap();
        line
    });
    let port = free_port();
    let mut bridge = std::process::Command::new(BRIDGE);
    bridge
        .args(["--socket", socket.to_str().unwrap()])
        .args(["--port", &port.to_string(), "--", "bash", "-c"])
        .arg(
            r#"exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 90
echo "hello from $$" >&3
read -r answer <&3
echo "$answer"
exit 7"#,
        )
        .args(["agent", &port.to_string()]);
    let (pid, output) = output_within_a_minute(bridge);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(7), "{stdout}{stderr}");
    assert_eq!(stdout, format!("proxy saw hello from {pid}\n"), "{stderr}");
    assert_eq!(proxy.join().unwrap(), format!("hello from {pid}\n"));
}

/// A bad command line, a port already taken and a command that cannot be exec'd each end the bridge at once
/// with a line naming what is wrong, and the exit code `env` would give (126: cannot run it, 127: no command).
#[test]
fn the_bridge_refuses_bad_arguments_by_name_with_its_exit_code() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port().to_string();
    let port = free_port().to_string();
    let cases: Vec<(Vec<&str>, i32, String)> = vec![
        (
            vec!["--socket", "/s", "--port", "http", "--", "true"],
            126,
            "pidevops-bridge: --port: \"http\" is not a port number (1-65535)".into(),
        ),
        (
            vec!["--port", port.as_str(), "--", "true"],
            126,
            "pidevops-bridge: --socket is missing".into(),
        ),
        (
            vec!["--socket", "/s", "--prot", port.as_str(), "--", "true"],
            126,
            "pidevops-bridge: unexpected argument \"--prot\"".into(),
        ),
        (
            vec!["--socket", "/s", "--port", port.as_str(), "--"],
            127,
            "pidevops-bridge: no command after `--`".into(),
        ),
        (
            vec![
                "--socket",
                "/s",
                "--port",
                taken_port.as_str(),
                "--",
                "true",
            ],
            126,
            format!("pidevops-bridge: cannot listen on 127.0.0.1:{taken_port}: "),
        ),
        (
            vec![
                "--socket",
                "/s",
                "--port",
                port.as_str(),
                "--",
                "/nonexistent/agent",
            ],
            127,
            "pidevops-bridge: cannot start \"/nonexistent/agent\": ".into(),
        ),
    ];
    for (args, code, first_line) in cases {
        let mut bridge = std::process::Command::new(BRIDGE);
        bridge.args(&args);
        let (_, output) = output_within_a_minute(bridge);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(
            stderr
                .lines()
                .next()
                .unwrap_or_default()
                .starts_with(&first_line),
            "{args:?}: {stderr}"
        );
        assert!(output.stdout.is_empty(), "{args:?}");
    }
    drop(taken);
}

/// pidevops finds the bridge beside its own executable. Without it there, and an agent that needs a network of
/// its own under bubblewrap, the dispatcher is unarmed naming the missing file, and doctor says so and fails: a
/// clear error at start-up rather than every run failing.
#[test]
fn without_the_bridge_beside_pidevops_the_dispatcher_is_unarmed_naming_the_file() {
    use crate::common::server::BIN;
    let scratch = crate::common::contained_scratch();
    // A link of the binary alone in a directory of its own (its running path is this one, not cargo's target
    // directory, where the bridge is), on the same file system as the binary.
    let lone = tempfile::tempdir_in(Path::new(BIN).parent().unwrap()).unwrap();
    let pidevops = lone.path().join("pidevops");
    std::fs::hard_link(BIN, &pidevops).unwrap();
    let script = agent(scratch.path(), "agent.sh", "echo x > CHANGES.md");
    let config = scratch.path().join("pidevops.toml");
    std::fs::write(
        &config,
        format!(
            "[dispatch]\nagent = \"a\"\nbwrap = \"bwrap\"\n[agents.a]\ncommand = [\"{}\", \"{{prompt_file}}\"]\n\
             [repos.\"acme/app\"]\nurl = \"file:///nonexistent\"\n",
            script.display()
        ),
    )
    .unwrap();
    let db = format!("sqlite://{}/doctor.db", scratch.path().display());
    let run = |program: &Path| {
        let mut cmd = std::process::Command::new(program);
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DATABASE_URL", &db)
            .env("RUST_LOG", "warn")
            .env("PIDEVOPS_CONFIG", &config)
            .env("WORKSPACE_ROOT", scratch.path().join("ws"))
            .current_dir(scratch.path())
            .arg("doctor");
        let (_, output) = output_within_a_minute(cmd);
        (
            output.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        )
    };
    let missing = pidevops.with_file_name("pidevops-bridge");
    let (code, report) = run(&pidevops);
    assert_ne!(code, Some(0), "{report}");
    assert!(
        report.contains("containment                namespaces"),
        "{report}"
    );
    let dispatcher = report
        .lines()
        .find(|l| l.starts_with("loop dispatcher "))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(
        dispatcher.contains("unarmed")
            && dispatcher.contains(&format!("{} is missing", missing.display())),
        "{dispatcher}"
    );
    assert!(
        report.contains(&format!(
            "network bridge             warn      {} is missing",
            missing.display()
        )),
        "{report}"
    );
    // Beside cargo's own binary the bridge is there: the same configuration arms the dispatcher.
    let (_, report) = run(Path::new(BIN));
    let dispatcher = report
        .lines()
        .find(|l| l.starts_with("loop dispatcher "))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(
        dispatcher.contains("armed") && !dispatcher.contains("unarmed"),
        "{dispatcher}"
    );
    assert!(
        report.contains(&format!(
            "network bridge             armed     {}",
            Path::new(BIN).with_file_name("pidevops-bridge").display()
        )),
        "{report}"
    );
}
