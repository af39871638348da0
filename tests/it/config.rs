//! `pidevops.toml` through the real binary: a misspelt key stops `serve` (and every other command) naming the key
//! and the one meant; `pidevops config check` prints the effective configuration without any secret, or every
//! mistake.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_pidevops");

/// The binary in `dir` with nothing of this process's environment but `PATH`, plus `env`.
fn pidevops(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PORT", "0")
        .env("PIDEVOPS_BIND", "127.0.0.1")
        .envs(env.iter().copied())
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Runs it to the end; one that does not end (a `serve` that accepted the file) is killed and fails the test.
fn run(mut command: Command) -> Output {
    let mut child = command.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after 30 s: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

const TYPOS: &str = "[dispatch]\nmax_concurent = 4\n\n[board]\nmax_attemps = 5\n";

#[test]
fn a_misspelt_key_stops_serve_naming_the_key_and_the_one_meant() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pidevops.toml"), TYPOS).unwrap();
    let out = run(pidevops(dir.path(), &[], &["serve"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for refusal in [
        "pidevops.toml: [dispatch] max_concurent: unknown key; did you mean max_concurrent?",
        "pidevops.toml: [board] max_attemps: unknown key; did you mean max_attempts?",
    ] {
        assert!(stderr.contains(refusal), "{refusal:?} in {stderr}");
    }
    assert!(
        !dir.path().join("data").exists(),
        "refused before anything is created"
    );
}

#[test]
fn every_command_that_reads_the_configuration_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("elsewhere.toml");
    std::fs::write(&path, TYPOS).unwrap();
    let config = path.to_str().unwrap();
    for args in [
        &["migrate"][..],
        &["doctor"],
        &["worker"],
        &["task", "list"],
        &["events"],
    ] {
        let out = run(pidevops(dir.path(), &[("PIDEVOPS_CONFIG", config)], args));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("[dispatch] max_concurent: unknown key; did you mean max_concurrent?"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn config_check_prints_the_effective_configuration_and_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("pidevops.toml"),
        r#"
        [dispatch]
        max_concurrent = 4
        heartbeat_s = 0.5

        [repos."acme/api"]
        base = "develop"

        [agents.mine]
        command = ["my-agent", "{prompt_file}"]
        env = ["ANTHROPIC_API_KEY"]
        "#,
    )
    .unwrap();
    let secrets = [
        ("GITHUB_TOKEN", "ghp_the-github-token-never-printed"),
        (
            "PIDEVOPS_ADMIN_TOKEN",
            "admin-token-never-printed-0123456789",
        ),
        ("GITHUB_WEBHOOK_SECRET", "webhook-secret-never-printed"),
        ("TELEGRAM_BOT_TOKEN", "12345:telegram-token-never-printed"),
        ("LINEAR_API_KEY", "lin_api_key_never_printed"),
        ("ANTHROPIC_API_KEY", "sk-ant-the-agents-key-never-printed"),
    ];
    let mut env: Vec<(&str, &str)> = secrets.to_vec();
    env.push((
        "DATABASE_URL",
        "postgres://pidevops:db-password-never-printed@db.internal:5432/pidevops",
    ));
    env.push((
        "NATS_URL",
        "nats://relay:nats-password-never-printed@nats:4222",
    ));

    let out = run(pidevops(dir.path(), &env, &["config", "check"]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for line in [
        "max_concurrent = 4",
        "heartbeat_s = 0.5",
        // Defaults are filled in: what the file left out, and the presets.
        "per_repo = 1",
        "retry_backoff_s = 60.0",
        "approval = \"manual\"",
        "[agents.claude]",
        "[agents.mine]",
        "[repos.\"acme/api\"]",
        "base = \"develop\"",
        "#   GITHUB_TOKEN = set (redacted)",
        "#   LINEAR_WEBHOOK_SECRET = unset",
        "#   DATABASE_URL = postgres://pidevops:***@db.internal:5432/pidevops",
        "#   NATS_URL = nats://relay:***@nats:4222",
    ] {
        assert!(stdout.contains(line), "{line:?} in\n{stdout}");
    }
    // What it prints is itself a valid pidevops.toml that `config check` accepts.
    std::fs::write(dir.path().join("effective.toml"), stdout.as_bytes()).unwrap();
    let again = run(pidevops(
        dir.path(),
        &[],
        &["config", "check", "effective.toml"],
    ));
    assert_eq!(
        again.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    let json = run(pidevops(
        dir.path(),
        &env,
        &["config", "check", "--format", "json"],
    ));
    assert_eq!(json.status.code(), Some(0));
    let parsed: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(parsed["file"]["dispatch"]["max_concurrent"], 4);
    assert_eq!(parsed["file"]["dispatch"]["heartbeat_s"], 0.5);
    assert_eq!(parsed["environment"]["GITHUB_TOKEN"], "set (redacted)");
    assert_eq!(parsed["config_file"], "pidevops.toml");

    let printed = [&out.stdout, &out.stderr, &json.stdout, &json.stderr]
        .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
        .join("\n");
    for (name, value) in secrets {
        assert!(!printed.contains(value), "{name}'s value was printed");
    }
    for fragment in [
        "never-printed",
        "never_printed",
        "db-password",
        "nats-password",
    ] {
        assert!(!printed.contains(fragment), "{fragment} was printed");
    }
}

#[test]
fn config_check_prints_every_mistake_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("mine.toml"),
        format!("{TYPOS}\n[pollers.githab]\ninterval_s = 60\n[telegram]\ncooldown_s = \"soon\"\n"),
    )
    .unwrap();
    let out = run(pidevops(dir.path(), &[], &["config", "check", "mine.toml"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing effective to print");
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [
            "mine.toml: [board] max_attemps: unknown key; did you mean max_attempts?",
            "mine.toml: [dispatch] max_concurent: unknown key; did you mean max_concurrent?",
            "mine.toml: [pollers.githab]: unknown table; did you mean [pollers.github]?",
            "mine.toml: [telegram] cooldown_s: expected a whole number, found the string \"soon\"",
        ]
    );
    // A file named but missing is a mistake too, and so is one in the environment (reported with the file's).
    let missing = run(pidevops(dir.path(), &[], &["config", "check", "nope.toml"]));
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("nope.toml"));
    let both = run(pidevops(
        dir.path(),
        &[("PORT", "eighty")],
        &["config", "check", "mine.toml"],
    ));
    let stderr = String::from_utf8_lossy(&both.stderr);
    assert_eq!(both.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("PORT is invalid"), "{stderr}");
    assert!(stderr.contains("[dispatch] max_concurent"), "{stderr}");
    // A threshold for a loop this process does not have: refused as serve refuses it.
    std::fs::write(
        dir.path().join("loops.toml"),
        "[loops.no_such_loop]\nfail_after_s = 900\n",
    )
    .unwrap();
    let loops = run(pidevops(
        dir.path(),
        &[],
        &["config", "check", "loops.toml"],
    ));
    let stderr = String::from_utf8_lossy(&loops.stderr);
    assert_eq!(loops.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("loops.toml: [loops.no_such_loop]: no such loop (loops: "),
        "{stderr}"
    );
}
