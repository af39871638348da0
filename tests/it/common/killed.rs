//! The one harness of the SIGKILL tests (land.rs, refresh.rs, refresh_check.rs, refresh_conflict.rs): the real
//! `serve` binary on a test's database and `pidevops.toml`, SIGKILLed (by the test, or by the remote's hook the
//! moment a push of a branch lands, or as it comes in, refused) and started again on the same database. No fixed sleep: a wait is on the
//! process's end or on what the log and the remote say.

use std::path::Path;
use std::time::Duration;

use super::agents::Remote;
use super::dispatching::GITHUB_TOKEN;
use super::server::{read_log, Server};
use super::{TestDb, ADMIN_TOKEN};

/// How `serve` is started, every time alike: the database, `pidevops.toml` and the workspace root under the
/// test's scratch directory, the admin token, GitHub's API at the fake, loops started at once.
pub struct Serve {
    db_url: String,
    env: Vec<(String, String)>,
}

impl Serve {
    /// `table` written as `scratch/pidevops.toml`, the workspaces under `scratch/ws`, GitHub's API at `github`.
    pub fn new(db: &TestDb, github: &str, scratch: &Path, table: &toml::Table) -> Self {
        let config = scratch.join("pidevops.toml");
        std::fs::write(&config, toml::to_string(table).unwrap()).unwrap();
        let workspaces = scratch.join("ws");
        let env = [
            ("PIDEVOPS_CONFIG", config.display().to_string()),
            ("WORKSPACE_ROOT", workspaces.display().to_string()),
            ("PIDEVOPS_ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
            ("PIDEVOPS_LOOP_STARTUP_DELAY_S", "0.05".to_owned()),
            ("PIDEVOPS_PROJECTOR_INTERVAL_S", "0.2".to_owned()),
            ("GITHUB_TOKEN", GITHUB_TOKEN.to_owned()),
            ("GITHUB_API_URL", github.to_owned()),
        ];
        Self {
            db_url: db.url_string(),
            env: env.map(|(k, v)| (k.to_owned(), v)).to_vec(),
        }
    }

    /// `serve`, once it answers.
    pub async fn start(&self) -> Server {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        Server::start_with(&self.db_url, &env).await
    }
}

/// Arms `remote`: it records every ref update it receives in `pushes.log` (as `<ref> <new commit>` lines, what
/// `refresh::pushes` reads) and SIGKILLs `server` as soon as the first update of `branch` (a full ref name) is
/// in, once.
pub fn kill_on_push(remote: &Remote, server: &Server, branch: &str) {
    let log = remote.dir.path().join("pushes.log");
    let record = format!("  echo \"$ref $new\" >> '{}'\n", log.display());
    arm(remote, server, "post-receive", &record, branch, "");
}

/// Arms `remote`: the first push of `branch` (a full ref name) SIGKILLs `server` and is refused, so it never lands,
/// once. (Pushes that land are recorded by whatever `post-receive` the remote has: `refresh::record_pushes`.)
pub fn kill_before_push(remote: &Remote, server: &Server, branch: &str) {
    arm(remote, server, "pre-receive", "", branch, " exit 1;");
}

/// Writes `remote`'s `hook`: for each ref update, `each` (shell lines), then, for `branch` while armed, the
/// SIGKILL of `server` and `then`.
fn arm(remote: &Remote, server: &Server, hook: &str, each: &str, branch: &str, then: &str) {
    use std::os::unix::fs::PermissionsExt;
    let dir = remote.dir.path();
    let (pid, armed) = (dir.join("serve.pid"), dir.join("armed"));
    std::fs::write(&pid, server.child.id().to_string()).unwrap();
    std::fs::write(&armed, "").unwrap();
    let path = dir.join("remote.git/hooks").join(hook);
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nwhile read old new ref; do\n{each}  if [ \"$ref\" = '{branch}' ] && [ -f '{armed}' ]; then rm '{armed}'; kill -9 \"$(cat '{pid}')\";{then} fi\ndone\n",
            armed = armed.display(),
            pid = pid.display(),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Waits (at most 90 s, else the test fails saying `what` never came) for `server` to be dead, killed by the
/// remote's hook; it had not panicked.
pub async fn killed(server: &mut Server, what: &str) {
    super::within(Duration::from_secs(90), what, || {
        let dead = server.child.try_wait().unwrap().is_some();
        async move { dead }
    })
    .await;
    said_no_panic(server);
}

/// SIGKILLs `server` now (no shutdown code runs) and reaps it; it had not panicked.
pub fn kill(server: &mut Server) {
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    said_no_panic(server);
}

/// `server`'s log holds no panic.
pub fn said_no_panic(server: &Server) {
    let log = read_log(server.workdir.path());
    assert!(!log.contains("panicked"), "{log}");
}
