//! A `nats-server` of the test's own: the relay's outage tests kill it and bring it back on the same port and
//! store; the deployment test runs it with `deploy/nats/nats.conf` (users and permissions) as deployed.

use std::time::Duration;

use bytes::Bytes;

pub struct NatsServer {
    binary: std::path::PathBuf,
    port: u16,
    store: tempfile::TempDir,
    child: Option<std::process::Child>,
    /// `-c <file>` and the variables the file reads, for a server configured as deployed.
    config: Option<(std::path::PathBuf, Vec<(String, String)>)>,
    /// Credentials for the readiness probe (a configured server refuses anonymous clients).
    probe_user: Option<(String, String)>,
}

impl NatsServer {
    /// Finds `nats-server` on PATH or in /usr/sbin (Debian's package puts it there, often off a user's PATH).
    fn binary() -> std::path::PathBuf {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .chain([std::path::PathBuf::from("/usr/sbin")])
            .map(|dir| dir.join("nats-server"))
            .find(|candidate| candidate.is_file())
            .unwrap_or_else(|| {
                panic!(
                    "this test runs its own nats-server and none is on PATH or in /usr/sbin: \
                     install it (`apt-get install nats-server`, as .ci/run does)"
                )
            })
    }

    fn new() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Self {
            binary: Self::binary(),
            port,
            store: tempfile::tempdir().unwrap(),
            child: None,
            config: None,
            probe_user: None,
        }
    }

    /// A server with JetStream and no configuration file: anyone who reaches it may do anything.
    pub async fn start() -> Self {
        let mut server = Self::new();
        server.restart().await;
        server
    }

    /// A server run from `config` (a nats-server configuration file) with `env` set for it; `probe` are the
    /// credentials the readiness check connects with.
    pub async fn start_configured(
        config: &std::path::Path,
        env: &[(&str, &str)],
        probe: (&str, &str),
    ) -> Self {
        let mut server = Self::new();
        server.config = Some((
            config.to_owned(),
            env.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ));
        server.probe_user = Some((probe.0.to_owned(), probe.1.to_owned()));
        server.restart().await;
        server
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The URL with credentials in it, as `NATS_URL` carries them.
    pub fn url_as(&self, user: &str, password: &str) -> String {
        format!("nats://{user}:{password}@127.0.0.1:{}", self.port)
    }

    /// A plain client that signs in as `user` (async-nats ignores credentials written in a URL).
    pub async fn client_as(
        &self,
        user: &str,
        password: &str,
    ) -> Result<async_nats::Client, async_nats::ConnectError> {
        async_nats::ConnectOptions::with_user_and_password(user.to_owned(), password.to_owned())
            .connect(self.url())
            .await
    }

    /// Starts the server (again) on the same port and store, and waits until JetStream answers.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "the server is already running");
        let mut command = std::process::Command::new(&self.binary);
        if let Some((file, env)) = &self.config {
            command.arg("-c").arg(file).envs(env.iter().cloned());
        } else {
            command.arg("-js");
        }
        let child = command
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-sd"])
            .arg(self.store.path())
            .arg("-l")
            .arg(self.store.path().join("nats-server.log"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.binary.display()));
        self.child = Some(child);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            // The raw account-info request: async-nats 0.42 cannot parse nats-server 2.9's typed answer.
            let client = match &self.probe_user {
                Some((user, password)) => self.client_as(user, password).await,
                None => async_nats::connect(self.url()).await,
            };
            if let Ok(client) = client {
                if let Ok(reply) = client.request("$JS.API.INFO", Bytes::new()).await {
                    let info: serde_json::Value =
                        serde_json::from_slice(&reply.payload).unwrap_or_default();
                    if info["type"] == "io.nats.jetstream.api.v1.account_info_response"
                        && info["error"].is_null()
                    {
                        return;
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "nats-server did not answer on port {} within 20 s; its log:\n{}",
                    self.port,
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What the server wrote to its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.store.path().join("nats-server.log")).unwrap_or_default()
    }

    /// The next start begins with an empty store, as a server whose volume was lost would.
    pub fn lose_store(&mut self) {
        assert!(self.child.is_none(), "stop the server first");
        self.store = tempfile::tempdir().unwrap();
    }

    /// SIGKILL: the outage a crash or an OOM kill causes; nothing is flushed on the way out.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}
