//! Shared test harness: fresh databases per test (real Postgres, real SQLite files), the real app on a real socket,
//! and signing helpers. Postgres-backed tests FAIL when `CI` is set and Postgres is unreachable; elsewhere they
//! say loudly that they were skipped and how to start Postgres.

#![allow(dead_code)]

pub mod agents;
pub mod board;
pub mod dispatching;
pub mod fake_model;
pub mod killed;
pub mod nats_server;
pub mod observer;
pub mod pg;
pub mod read;
pub mod server;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use pidevops::config::{DatabaseUrl, Settings};
use pidevops::http::AppState;
use pidevops::providers::github::webhook::sign_github;
use pidevops::providers::linear::webhook::sign_linear;
use secrecy::SecretString;
use tokio_util::sync::CancellationToken;

pub const GITHUB_SECRET: &str = "gh-test-secret";
pub const LINEAR_SECRET: &str = "lin-test-secret";
pub const TELEGRAM_SECRET: &str = "tg-test-secret";
pub const SLACK_SECRET: &str = "slack-test-signing-secret";
pub const GITLAB_SECRET: &str = "gl-test-secret";
pub const ADMIN_TOKEN: &str = "admin-test-token-of-24-chars-or-more";

pub fn postgres_admin_url() -> String {
    std::env::var("PIDEVOPS_TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

pub fn nats_url() -> String {
    std::env::var("PIDEVOPS_TEST_NATS_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "nats://127.0.0.1:4222".to_owned())
}

/// A plain client of the test NATS, signed in as `PIDEVOPS_TEST_NATS_URL` says (async-nats itself ignores the
/// credentials written in a URL; pidevops's `bus::credentials` reads them).
pub async fn nats_client() -> Result<async_nats::Client, async_nats::ConnectError> {
    let (options, servers) = pidevops::bus::credentials::client_options(&nats_url());
    options.connect(servers.as_slice()).await
}

/// A stream and subject prefix of a test's own, so tests sharing one NATS never see each other's messages.
pub fn bus_config() -> pidevops::bus::BusConfig {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    pidevops::bus::BusConfig {
        stream: format!("PIDEVOPS_TEST_{tag}"),
        subject_prefix: format!("pidevops_test_{tag}.events"),
    }
}

/// The machine's cores, between the tests that load them and the tests that time things.
///
/// In one test binary any test may run beside any other (before, an area's tests ran only beside each other), and
/// a few assertions bound a duration with little room: a failover within the TTL while the test itself floods
/// three replicas, a lease let go within 50 ms of its row's expiry, a sign-in answered within 0.9 s, a work item
/// kept by progress sent every third of its 1 s ack wait. Seen: that failover took 6.03 s against its 6 s TTL
/// beside the heavy tests below. A test that keeps the cores busy for seconds (measured alone: about half a core
/// or more over its run, or a flood of requests) holds [`heavy`]; a test with such a bound holds [`timed`]. No
/// heavy test runs beside a timed one or another heavy one; every other test runs beside anything, as before. A
/// lock rather than looser bounds: the bounds are what those tests prove.
static CORES: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Held for the whole of a test that keeps the machine's cores busy for seconds (floods of requests, several
/// servers, big replays, a browser).
pub async fn heavy() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    CORES.write().await
}

/// Held for the whole of a test whose assertions bound a duration tightly; such tests may run beside each other.
pub async fn timed() -> tokio::sync::RwLockReadGuard<'static, ()> {
    CORES.read().await
}

pub fn in_ci() -> bool {
    std::env::var("CI")
        .map(|v| !v.is_empty() && v != "false")
        .unwrap_or(false)
}

/// Whether Postgres answers; checked once per test binary.
async fn postgres_reachable() -> bool {
    static REACHABLE: OnceLock<bool> = OnceLock::new();
    if let Some(r) = REACHABLE.get() {
        return *r;
    }
    let url = postgres_admin_url();
    let ok = tokio::time::timeout(Duration::from_secs(3), async {
        use sqlx::Connection;
        sqlx::PgConnection::connect(&url).await.is_ok()
    })
    .await
    .unwrap_or(false);
    *REACHABLE.get_or_init(|| ok)
}

/// A database that exists for one test and is dropped after it (Postgres: a copy of the migrated template, dropped
/// off the test's thread: `pg`).
pub struct TestDb {
    pub url: DatabaseUrl,
    cleanup: Cleanup,
}

enum Cleanup {
    Postgres { name: String },
    Sqlite { _dir: tempfile::TempDir },
}

impl TestDb {
    pub fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("pidevops.db");
        Self {
            url: DatabaseUrl::Sqlite(format!("sqlite://{}", path.display())),
            cleanup: Cleanup::Sqlite { _dir: dir },
        }
    }

    /// A fresh Postgres database, or `None` (with a loud message) when Postgres is unreachable outside CI.
    pub async fn postgres() -> Option<Self> {
        if !postgres_reachable().await {
            let url = postgres_admin_url();
            if in_ci() {
                panic!(
                    "CI is set and Postgres is unreachable at {url}: Postgres-backed tests must run in CI. \
                     Start it (see .ci/run) or set PIDEVOPS_TEST_DATABASE_URL."
                );
            }
            eprintln!(
                "\n*** SKIPPED a Postgres-backed test: nothing answers at {url}.\n\
                 *** Start Postgres with `docker compose -f deploy/docker-compose.yml up -d postgres`\n\
                 *** and set PIDEVOPS_TEST_DATABASE_URL=postgres://postgres:postgres@127.0.0.1:5432/postgres\n"
            );
            return None;
        }
        let name = pg::new_name();
        let admin = postgres_admin_url();
        let template = pg::template(&admin).await;
        {
            use sqlx::{Connection, Executor};
            let mut conn = sqlx::PgConnection::connect(&admin)
                .await
                .expect("connect to the admin database");
            conn.execute(format!("CREATE DATABASE {name} TEMPLATE {template}").as_str())
                .await
                .expect("create a test database");
        }
        Some(Self {
            url: DatabaseUrl::Postgres(with_database(&admin, &name)),
            cleanup: Cleanup::Postgres { name },
        })
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self.url, DatabaseUrl::Postgres(_))
    }

    pub fn url_string(&self) -> String {
        match &self.url {
            DatabaseUrl::Postgres(u) | DatabaseUrl::Sqlite(u) => u.clone(),
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Cleanup::Postgres { name } = &self.cleanup {
            pg::drop_later(name.clone());
        }
    }
}

pub use pidevops::bench::with_database;

/// Test settings with every secret configured.
pub fn settings(db: &TestDb) -> Settings {
    // What reads the containment (doctor, the dispatcher) finds the real bridge built with the tests, whether or
    // not an app was spawned first in this process: a test run alone sees what the whole suite sees.
    pidevops::dispatch::egress::pin_bridge_program(env!("CARGO_BIN_EXE_pidevops-bridge"));
    let mut s = Settings::for_tests(db.url.clone());
    for (provider, secret) in [
        ("github", GITHUB_SECRET),
        ("linear", LINEAR_SECRET),
        ("telegram", TELEGRAM_SECRET),
        ("slack", SLACK_SECRET),
        ("gitlab", GITLAB_SECRET),
    ] {
        assert!(s
            .webhook_secrets
            .set(provider, Some(SecretString::from(secret))));
    }
    s.admin_token = Some(SecretString::from(ADMIN_TOKEN));
    s
}

/// `PIDEVOPS_TEST_LOG=<filter>` (e.g. `pidevops=debug`): the apps' logs, for a test that misbehaves. Under CI,
/// `pidevops=warn` unless set: a test that fails there shows what its app warned of. Through libtest's capture,
/// so each test's lines show with its failure (or at once with `--nocapture`) and a passing test's not at all.
fn log_if_asked() {
    let filter = std::env::var("PIDEVOPS_TEST_LOG")
        .ok()
        .or_else(|| std::env::var_os("CI").map(|_| "pidevops=warn".to_owned()));
    if let Some(filter) = filter {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

/// The real app, serving on a real loopback socket.
pub struct TestApp {
    pub base: String,
    pub state: AppState,
    pub shutdown: CancellationToken,
    pub client: reqwest::Client,
    pub tracker: tokio_util::task::TaskTracker,
    /// The armed loops, to drive a tick at a time ([`Self::tick`]).
    pub loops: pidevops::startup::catalog::ArmedLoops,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl TestApp {
    pub async fn spawn(settings: Settings) -> Self {
        log_if_asked();
        // The dispatcher runs in this test binary, not beside the bridge: its sandboxes' network bridge is the real
        // pidevops-bridge binary, built with the tests.
        pidevops::dispatch::egress::pin_bridge_program(env!("CARGO_BIN_EXE_pidevops-bridge"));
        let app = pidevops::startup::build(settings)
            .await
            .expect("the app builds");
        let base = format!("http://{}", app.local_addr());
        let state = app.state().clone();
        let shutdown = app.shutdown_token();
        let tracker = app.tracker();
        let loops = app.armed_loops();
        let server = tokio::spawn(app.run());
        Self {
            base,
            state,
            shutdown,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("a client"),
            tracker,
            loops,
            server: Some(server),
        }
    }

    /// Runs one tick of the armed loop `name` now, after any tick of it under way, instead of waiting for the
    /// loop; says whether it left work (`Pace::Again`).
    pub async fn tick(&self, name: &str) -> pidevops::loops::Pace {
        self.loops
            .tick(&self.state.loops, name)
            .await
            .unwrap_or_else(|e| panic!("a tick of {name} failed: {e:#}"))
    }

    /// Ticks `name` until a tick rests having appended nothing: it has handled the whole log, including what its
    /// own ticks appended.
    pub async fn drive(&self, name: &str) {
        let store = self.state.log.store();
        loop {
            let head = store.head().await.expect("the log's head");
            let pace = self.tick(name).await;
            if pace == pidevops::loops::Pace::Rest
                && store.head().await.expect("the log's head") == head
            {
                return;
            }
        }
    }

    /// Brings every read model to the log's head.
    pub async fn project(&self) {
        let projectors: Vec<String> = self
            .loops
            .names()
            .filter(|n| n.starts_with("projector:"))
            .map(str::to_owned)
            .collect();
        for name in projectors {
            self.drive(&name).await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(server) = self.server.take() {
            server
                .await
                .expect("the server task")
                .expect("the server stops cleanly");
        }
    }

    pub async fn post_github(&self, event: &str, delivery: &str, body: &[u8]) -> reqwest::Response {
        self.post_github_signed(
            event,
            delivery,
            body,
            &sign_github(GITHUB_SECRET.as_bytes(), body),
        )
        .await
    }

    pub async fn post_github_signed(
        &self,
        event: &str,
        delivery: &str,
        body: &[u8],
        signature: &str,
    ) -> reqwest::Response {
        self.client
            .post(self.url("/webhooks/github"))
            .header("content-type", "application/json")
            .header("x-github-event", event)
            .header("x-github-delivery", delivery)
            .header("x-hub-signature-256", signature)
            .body(body.to_vec())
            .send()
            .await
            .expect("the request completes")
    }

    pub async fn post_linear(&self, body: &[u8]) -> reqwest::Response {
        self.client
            .post(self.url("/webhooks/linear"))
            .header("content-type", "application/json")
            .header(
                "linear-signature",
                sign_linear(LINEAR_SECRET.as_bytes(), body),
            )
            .body(body.to_vec())
            .send()
            .await
            .expect("the request completes")
    }

    /// A Slack request signed with the test's signing secret, dated now (`content_type`: JSON for the Events
    /// API, a form for interactivity and slash commands).
    pub async fn post_slack(&self, body: &[u8], content_type: &str) -> reqwest::Response {
        let now = chrono::Utc::now().timestamp().to_string();
        self.post_slack_signed(body, content_type, &now, SLACK_SECRET, &[])
            .await
    }

    /// A Slack request dated `timestamp`, signed with `secret`, with more headers (`X-Slack-Retry-Num`).
    pub async fn post_slack_signed(
        &self,
        body: &[u8],
        content_type: &str,
        timestamp: &str,
        secret: &str,
        more: &[(&str, &str)],
    ) -> reqwest::Response {
        let signature =
            pidevops::providers::slack::webhook::sign_slack(secret.as_bytes(), timestamp, body);
        let mut request = self
            .client
            .post(self.url("/webhooks/slack"))
            .header("content-type", content_type)
            .header("x-slack-request-timestamp", timestamp)
            .header("x-slack-signature", signature);
        for (name, value) in more {
            request = request.header(*name, *value);
        }
        request
            .body(body.to_vec())
            .send()
            .await
            .expect("the request completes")
    }

    pub async fn post_telegram(&self, body: &[u8], token: &str) -> reqwest::Response {
        self.client
            .post(self.url("/webhooks/telegram"))
            .header("content-type", "application/json")
            .header("x-telegram-bot-api-secret-token", token)
            .body(body.to_vec())
            .send()
            .await
            .expect("the request completes")
    }

    pub async fn health(&self) -> (u16, serde_json::Value) {
        let response = self
            .client
            .get(self.url("/health"))
            .send()
            .await
            .expect("health answers");
        let status = response.status().as_u16();
        (status, response.json().await.expect("health is JSON"))
    }

    /// The `/metrics` text.
    pub async fn metrics(&self) -> String {
        let response = self
            .client
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("metrics answers");
        response.text().await.expect("metrics is text")
    }

    /// Every stored event, in position order.
    /// What ingress stored: every event but pidevops's own (intake and the board append theirs as they run, at
    /// times a test does not control).
    pub async fn webhook_events(&self) -> Vec<pidevops::eventlog::StoredEvent> {
        self.all_events()
            .await
            .into_iter()
            .filter(|e| e.source != pidevops::domain::Source::Pidevops.as_str())
            .collect()
    }

    pub async fn all_events(&self) -> Vec<pidevops::eventlog::StoredEvent> {
        let mut out = Vec::new();
        let mut after = 0;
        loop {
            let page = self
                .state
                .log
                .store()
                .read_after(after, 500)
                .await
                .expect("read events");
            let Some(last) = page.last() else { return out };
            after = last.position;
            out.extend(page);
        }
    }
}

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// `(event header, file path)` for every GitHub fixture; the folder name is the `X-GitHub-Event` value.
pub fn github_fixtures() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let root = fixtures_dir().join("github");
    for dir in std::fs::read_dir(&root).expect("github fixtures") {
        let dir = dir.expect("entry").path();
        if !dir.is_dir() {
            continue;
        }
        let event = dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("name")
            .to_owned();
        for file in std::fs::read_dir(&dir).expect("event dir") {
            let file = file.expect("entry").path();
            if file.extension().and_then(|e| e.to_str()) == Some("json") {
                out.push((event.clone(), file));
            }
        }
    }
    out.sort();
    assert!(
        out.len() > 100,
        "expected the full octokit fixture set, found {}",
        out.len()
    );
    out
}

pub fn fixture_files(provider: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(fixtures_dir().join(provider))
        .expect("fixtures")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("json"))
        .collect();
    out.sort();
    out
}

/// A Linear fixture with `webhookTimestamp` rewritten to `now + offset_ms`, keeping every other byte.
pub fn linear_body_at(path: &Path, offset_ms: i64) -> Vec<u8> {
    let text = std::fs::read_to_string(path).expect("fixture");
    let now = chrono::Utc::now().timestamp_millis() + offset_ms;
    let start = text
        .find("\"webhookTimestamp\"")
        .expect("fixture has webhookTimestamp");
    let colon = start + text[start..].find(':').expect("colon");
    let digits_start = colon
        + 1
        + text[colon + 1..]
            .find(|c: char| c.is_ascii_digit())
            .expect("digits");
    let digits_end = digits_start
        + text[digits_start..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len() - digits_start);
    format!("{}{}{}", &text[..digits_start], now, &text[digits_end..]).into_bytes()
}

/// A follower's tick budget for tests that count what ONE tick did (`Relay::with_tick_budget`,
/// `Effects::with_tick_budget`): the service's 150 ms budget could end a tick early on a loaded two-core machine.
pub const WHOLE_TICK: Duration = Duration::from_secs(120);

/// Polls until `check` holds or `limit` passes (for waits longer than `eventually`'s 10 s: agent runs, restarts).
pub async fn within<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls until `check` holds or 10 s pass.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Runs each listed test body against Postgres and SQLite: the same body, one module per backend.
#[macro_export]
macro_rules! per_backend {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let Some(db) = $crate::common::TestDb::postgres().await else { return };
                    super::$name(db).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::common::TestDb::sqlite()).await;
                }
            )*
        }
    };
}

/// Runs SQL (several statements allowed) on whichever backend the store is.
pub async fn execute(store: &pidevops::eventlog::EventStore, sql: &str) {
    use pidevops::eventlog::EventStore;
    match store {
        EventStore::Postgres(s) => {
            sqlx::raw_sql(sql).execute(s.pool()).await.unwrap();
        }
        EventStore::Sqlite(s) => {
            sqlx::raw_sql(sql).execute(s.pool()).await.unwrap();
        }
    }
}

/// What the `sources` read model must hold, computed by SQL straight from the log: the oracle projector tests
/// compare with.
pub async fn sources_oracle(
    store: &pidevops::eventlog::EventStore,
) -> Vec<pidevops::projectors::sources::SourceActivity> {
    use pidevops::eventlog::EventStore;
    const SQL: &str = "SELECT g.source, g.event_type, g.events, f.recorded_at AS first_at,
                              g.first_position, l.recorded_at AS last_at, g.last_position
                       FROM (SELECT source, event_type, count(*) AS events, min(position) AS first_position,
                                    max(position) AS last_position
                             FROM events GROUP BY source, event_type) g
                       JOIN events f ON f.position = g.first_position
                       JOIN events l ON l.position = g.last_position
                       ORDER BY g.source, g.event_type";
    match store {
        EventStore::Postgres(s) => sqlx::query_as(SQL).fetch_all(s.pool()).await.unwrap(),
        EventStore::Sqlite(s) => sqlx::query_as(SQL).fetch_all(s.pool()).await.unwrap(),
    }
}

/// A scratch directory for tests whose agents run contained. Agents get a private `/tmp` (bubblewrap mounts a
/// tmpfs there), so under a checkout in `/tmp` the scratch would be invisible to the agent and its writes would
/// land in that tmpfs instead of being refused: the containment tests assert the refusal, so their scratch lives
/// outside `/tmp` (`/var/tmp`) whenever the target directory is inside it.
pub fn contained_scratch() -> tempfile::TempDir {
    let target_tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    if target_tmp.starts_with("/tmp") {
        tempfile::Builder::new()
            .prefix("pidevops-test-")
            .tempdir_in("/var/tmp")
            .unwrap()
    } else {
        tempfile::tempdir_in(target_tmp).unwrap()
    }
}
