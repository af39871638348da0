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
/// worker would go on pulling from the run queue long after its test and its database are gone.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn read_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
}
