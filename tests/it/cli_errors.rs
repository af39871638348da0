//! The command line's errors through the real binary: each said once with its cause, a read-only command that
//! creates nothing, a refused database named as refused, a busy port that names `PORT`, `serve --help` with the
//! environment it reads, and `config check`'s warning for a profile that cannot run here.

use std::path::Path;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_pidevops");

/// The binary in `dir` with nothing of this process's environment but `PATH`, plus `env`.
fn pidevops(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(BIN)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_read_only_command_on_a_mistyped_sqlite_path_is_an_error_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("dta/pidevops.db");
    let url = format!("sqlite://{}", typo.display());
    for args in [
        &["task", "list"][..],
        &["task", "show", "T-1"],
        &["events"],
        &["usage"],
        &["budget", "show", "T-1"],
    ] {
        let out = pidevops(dir.path(), &[("DATABASE_URL", &url)], args);
        let err = format!("{}{}", stderr(&out), String::from_utf8_lossy(&out.stdout));
        assert!(!out.status.success(), "{args:?}: {err}");
        let says = format!("there is no database at {}", typo.display());
        assert_eq!(err.matches(&says).count(), 1, "{args:?}, once: {err}");
        assert!(
            !dir.path().join("dta").exists(),
            "{args:?} made its directory"
        );
    }
}

#[test]
fn an_error_is_printed_once_and_a_refused_database_says_refused() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on port 1.
    let url = "postgres://postgres@127.0.0.1:1/pidevops";
    let out = pidevops(
        dir.path(),
        &[("DATABASE_URL", url), ("LOG_FORMAT", "json")],
        &["task", "list"],
    );
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.to_lowercase().contains("connection refused"),
        "the cause: {err}"
    );
    assert!(!err.contains("pool timed out"), "{err}");
    assert_eq!(
        err.matches("Connection refused").count(),
        1,
        "each cause once: {err}"
    );
}

#[test]
fn a_busy_port_names_port_and_is_not_blamed_on_ipv6() {
    let dir = tempfile::tempdir().unwrap();
    // Held on every address (dual-stack where the host has IPv6), as another server would.
    let held = std::net::TcpListener::bind("[::]:0")
        .or_else(|_| std::net::TcpListener::bind("0.0.0.0:0"))
        .unwrap();
    let port = held.local_addr().unwrap().port().to_string();
    // The default bind ([::]) and an explicit one.
    for bind in [None, Some("127.0.0.1")] {
        let mut env = vec![("PORT", port.as_str())];
        env.extend(bind.map(|b| ("PIDEVOPS_BIND", b)));
        let out = pidevops(dir.path(), &env, &["serve"]);
        let err = stderr(&out);
        assert!(!out.status.success(), "{bind:?}: {err}");
        assert!(
            err.contains(&format!("port {port} is already in use")) && err.contains("set PORT"),
            "{bind:?}: {err}"
        );
        assert!(!err.contains("IPv6 is unavailable"), "{bind:?}: {err}");
        assert_eq!(err.matches("already in use").count(), 1, "once: {err}");
    }
}

#[test]
fn serve_help_lists_the_environment_it_reads() {
    let dir = tempfile::tempdir().unwrap();
    let out = pidevops(dir.path(), &[], &["serve", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    for (name, _) in pidevops::config::variables() {
        assert!(help.contains(name), "{name} in {help}");
    }
}

#[test]
fn config_check_warns_of_a_profile_whose_command_is_missing_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("pidevops.toml"),
        "[dispatch]\nagent = \"mine\"\n\n[agents.mine]\ncommand = [\"no-such-agent-cli\", \"{prompt_file}\"]\n",
    )
    .unwrap();
    let out = pidevops(dir.path(), &[], &["config", "check"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(
            "warning: agent profile \"mine\" (the default profile) cannot run here: its command \
             \"no-such-agent-cli\" is not an executable on the agents' PATH"
        ),
        "{err}"
    );
}
