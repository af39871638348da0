//! The real `pidevops` binary as an operator runs it, on a free loopback port.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::GITHUB_SECRET;

pub const BIN: &str = env!("CARGO_BIN_EXE_pidevops");

pub fn command(db_url: &str, workdir: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DATABASE_URL", db_url)
        .env("RUST_LOG", "warn")
        .env("LOG_FORMAT", "json")
        .current_dir(workdir);
    cmd
}

/// `pidevops <args>` against `db_url` in `workdir`, run to its end: its exit code, stdout and stderr.
pub fn cli(db_url: &str, workdir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = command(db_url, workdir)
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub struct Server {
    pub child: Child,
    pub base: String,
    pub workdir: tempfile::TempDir,
}

impl Server {
    pub async fn start(db_url: &str) -> Self {
        Self::start_with(db_url, &[]).await
    }

    /// `serve` on a free loopback port with the GitHub secret set, plus `env`; returns once it answers.
    pub async fn start_with(db_url: &str, env: &[(&str, &str)]) -> Self {
        let workdir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(workdir.path().join("server.log")).unwrap();
        let child = command(db_url, workdir.path())
            .arg("serve")
            .env("PORT", port.to_string())
            .env("PIDEVOPS_BIND", "127.0.0.1")
            .env("GITHUB_WEBHOOK_SECRET", GITHUB_SECRET)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the binary starts");
        let base = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = client.get(format!("{base}/health/live")).send().await {
                if r.status().is_success() {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the server did not come up: {}",
                read_log(workdir.path())
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self {
            child,
            base,
            workdir,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A failing test shows what its server said last (the log goes with the working directory).
        if std::thread::panicking() {
            let log = read_log(self.workdir.path());
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(80)..].join("\n");
            eprintln!(
                "--- the last lines of {}'s server log ---\n{tail}",
                self.base
            );
        }
    }
}

/// A child process of the test's (a `pidevops worker`, say) killed when the test ends, panics included: a leaked
/// worker would go on pulling from the run queue long after its test and its database are gone. A failing test
/// shows the last lines of the child's log, as `Server` does.
pub struct KillOnDrop {
    child: Child,
    log: std::path::PathBuf,
}

impl KillOnDrop {
    /// Spawns `command` with its standard error written to `log`.
    pub fn spawn_logged(mut command: Command, log: &Path) -> Self {
        let file = std::fs::File::create(log).expect("the child's log is created");
        let child = command.stderr(file).spawn().expect("the child starts");
        Self {
            child,
            log: log.to_owned(),
        }
    }

    /// What the child has written to its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(80)..].join("\n");
            eprintln!("--- the last lines of {} ---\n{tail}", self.log.display());
        }
    }
}

/// The environment of one `serve` or `worker` of a test that runs several: its configuration file, workspaces
/// and instance name, the test's own events stream on the shared NATS (`bus`), and quick loops.
pub fn process_env(
    config: &Path,
    name: &str,
    workspaces: &Path,
    bus: &pidevops::bus::BusConfig,
) -> Vec<(String, String)> {
    [
        ("PIDEVOPS_CONFIG", config.display().to_string()),
        ("WORKSPACE_ROOT", workspaces.display().to_string()),
        ("PIDEVOPS_INSTANCE_ID", name.to_owned()),
        ("NATS_URL", super::nats_url()),
        ("PIDEVOPS_NATS_STREAM", bus.stream.clone()),
        ("PIDEVOPS_NATS_SUBJECT_PREFIX", bus.subject_prefix.clone()),
        ("PIDEVOPS_LOOP_STARTUP_DELAY_S", "0.05".to_owned()),
        ("PIDEVOPS_PROJECTOR_INTERVAL_S", "0.2".to_owned()),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value))
    .collect()
}

/// `env` as `Server::start_with` takes it.
pub fn borrow(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

pub fn read_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
}
