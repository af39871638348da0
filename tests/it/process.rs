//! The real binary as an operator runs it: SIGKILL mid-traffic, SIGTERM drain, doctor, migrate, events.

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::server::{command, read_log, Server, BIN};
use crate::common::{TestDb, GITHUB_SECRET};
use pidevops::domain::{EventType, NewEvent, Source};
use pidevops::eventlog::{EventLog, EventStore};
use pidevops::providers::github::webhook::sign_github;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

per_backend!(
    acknowledged_deliveries_survive_sigkill_exactly_once,
    sigterm_drains_in_flight_deliveries_and_exits_zero,
    the_events_command_prints_json_lines_and_follows,
);

/// Acknowledged deliveries: delivery id → position.
type Acked = Arc<Mutex<BTreeMap<String, i64>>>;
/// Every delivery id a sender tried.
type Attempted = Arc<Mutex<HashSet<String>>>;

/// Senders that post signed deliveries until they are told to stop or the server stops answering.
fn start_senders(
    base: &str,
    senders: usize,
    stop: Arc<AtomicBool>,
) -> (Acked, Attempted, Vec<tokio::task::JoinHandle<()>>) {
    let body = Arc::new(
        std::fs::read(
            crate::common::fixtures_dir().join("github/pull_request/opened.payload.json"),
        )
        .unwrap(),
    );
    let signature = sign_github(GITHUB_SECRET.as_bytes(), &body);
    let acked: Acked = Arc::default();
    let attempted: Attempted = Arc::default();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    let tasks = (0..senders)
        .map(|s| {
            let (body, signature, acked, attempted, client, stop) = (
                body.clone(),
                signature.clone(),
                acked.clone(),
                attempted.clone(),
                client.clone(),
                stop.clone(),
            );
            let url = format!("{base}/webhooks/github");
            tokio::spawn(async move {
                let mut failures = 0;
                for n in 0.. {
                    if stop.load(Ordering::SeqCst) || failures >= 3 {
                        return;
                    }
                    let delivery = format!("s{s}-{n}");
                    attempted.lock().unwrap().insert(delivery.clone());
                    let sent = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .header("x-github-event", "pull_request")
                        .header("x-github-delivery", &delivery)
                        .header("x-hub-signature-256", &signature)
                        .body(body.as_ref().clone())
                        .send()
                        .await;
                    match sent {
                        Ok(r) if r.status().is_success() => {
                            let v: Value = r.json().await.expect("a 2xx carries JSON");
                            acked
                                .lock()
                                .unwrap()
                                .insert(delivery, v["position"].as_i64().unwrap());
                        }
                        _ => failures += 1,
                    }
                }
            })
        })
        .collect();
    (acked, attempted, tasks)
}

/// Waits until at least `n` deliveries were acknowledged (at most 20 s).
async fn wait_for_acks(acked: &Acked, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while acked.lock().unwrap().len() < n {
        assert!(
            Instant::now() < deadline,
            "too few deliveries were acknowledged"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn acknowledged_deliveries_survive_sigkill_exactly_once(db: TestDb) {
    let url = db.url_string();
    let mut server = Server::start(&url).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (acked, attempted, senders) = start_senders(&server.base, 8, stop.clone());
    wait_for_acks(&acked, 150).await;
    // SIGKILL: no drain, no flush, no goodbye.
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    for s in senders {
        s.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let attempted = attempted.lock().unwrap().clone();
    assert!(
        attempted.len() > acked.len(),
        "some deliveries were in flight at the kill"
    );

    let restarted = Server::start(&url).await;
    let store = EventStore::connect(&db.url, 2).await.unwrap();
    for delivery in acked.keys() {
        assert_eq!(
            store.count_by_key(Source::Github, delivery).await.unwrap(),
            1,
            "{delivery} is stored once"
        );
    }
    let stored: Vec<_> = store.read_after(0, 100_000).await.unwrap();
    let positions: Vec<i64> = stored.iter().map(|e| e.position).collect();
    assert_eq!(
        positions,
        (1..=stored.len() as i64).collect::<Vec<_>>(),
        "no holes after a crash"
    );
    for e in &stored {
        assert!(
            attempted.contains(&e.dedup_key),
            "nothing stored that was not sent: {}",
            e.dedup_key
        );
        if let Some(p) = acked.get(&e.dedup_key) {
            assert_eq!(*p, e.position, "an acknowledged position never changes");
        }
    }

    // GitHub redelivers what it did not see acknowledged; everything ends up stored exactly once.
    let body = std::fs::read(
        crate::common::fixtures_dir().join("github/pull_request/opened.payload.json"),
    )
    .unwrap();
    let signature = sign_github(GITHUB_SECRET.as_bytes(), &body);
    let client = reqwest::Client::new();
    for delivery in &attempted {
        let r = client
            .post(format!("{}/webhooks/github", restarted.base))
            .header("x-github-event", "pull_request")
            .header("x-github-delivery", delivery)
            .header("x-hub-signature-256", &signature)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let v: Value = r.json().await.unwrap();
        if let Some(p) = acked.get(delivery) {
            assert_eq!(
                v["duplicate"], true,
                "{delivery} was acknowledged before the kill"
            );
            assert_eq!(v["position"].as_i64().unwrap(), *p);
        }
    }
    for delivery in &attempted {
        assert_eq!(
            store.count_by_key(Source::Github, delivery).await.unwrap(),
            1
        );
    }
    assert_eq!(store.head().await.unwrap(), attempted.len() as i64);
}

async fn sigterm_drains_in_flight_deliveries_and_exits_zero(db: TestDb) {
    let url = db.url_string();
    let mut server = Server::start(&url).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (acked, _attempted, senders) = start_senders(&server.base, 8, stop.clone());
    wait_for_acks(&acked, 50).await;
    let pid = nix::unistd::Pid::from_raw(server.child.id() as i32);
    let signalled = Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(10),
            "still running 10 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "exit status {status:?}");
    stop.store(true, Ordering::SeqCst);
    for s in senders {
        s.await.unwrap();
    }
    let store = EventStore::connect(&db.url, 2).await.unwrap();
    let acked = acked.lock().unwrap().clone();
    for (delivery, position) in &acked {
        assert_eq!(
            store.count_by_key(Source::Github, delivery).await.unwrap(),
            1
        );
        let stored = store.read_after(position - 1, 1).await.unwrap();
        assert_eq!(&stored[0].dedup_key, delivery);
    }
}

async fn the_events_command_prints_json_lines_and_follows(db: TestDb) {
    let workdir = tempfile::tempdir().unwrap();
    let url = db.url_string();
    let migrate = command(&url, workdir.path())
        .arg("migrate")
        .output()
        .unwrap();
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );

    let store = EventStore::connect(&db.url, 4).await.unwrap();
    let stop = CancellationToken::new();
    let (log, _task) = EventLog::start(store.clone(), Duration::from_secs(10), stop.clone());
    let append = |key: &str| {
        let log = log.clone();
        let key = key.to_owned();
        async move {
            log.append(NewEvent::new(
                Source::Telegram,
                EventType::new(Source::Telegram, &["message"]),
                key,
                "application/json",
                bytes::Bytes::from_static(br#"{"update_id":1,"message":{"text":"hi"}}"#),
            ))
            .await
            .unwrap()
        }
    };
    for i in 0..4 {
        append(&format!("bot:{i}")).await;
    }

    let out = command(&url, workdir.path())
        .args(["events", "--after", "1", "--limit", "2"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["position"], 2);
    assert_eq!(lines[1]["position"], 3);
    assert_eq!(lines[0]["type"], "telegram.message");
    assert_eq!(lines[0]["data"]["message"]["text"], "hi");

    let mut follow = command(&url, workdir.path())
        .args(["events", "--after", "4", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = follow.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    append("bot:late").await;
    let line = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("--follow prints the new event")
        .unwrap();
    let event: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(event["position"], 5);
    assert_eq!(event["dedup_key"], "bot:late");
    follow.kill().unwrap();
    follow.wait().unwrap();
    stop.cancel();
}

#[test]
fn doctor_tells_the_truth_and_fails_when_the_database_is_unreachable() {
    let workdir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/doctor.db", workdir.path().display());
    let out = command(&db, workdir.path())
        .arg("doctor")
        .env("LINEAR_WEBHOOK_SECRET", "set")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("database_heartbeat"), "{text}");
    assert!(text.contains("armed"), "{text}");
    assert!(text.contains("GITHUB_WEBHOOK_SECRET is not set"), "{text}");
    assert!(text.contains("PIDEVOPS_ADMIN_TOKEN is not set"), "{text}");
    assert!(!text.contains("LINEAR_WEBHOOK_SECRET is not set"), "{text}");

    let out = command(
        "postgres://nobody:hunter2@127.0.0.1:1/nothing",
        workdir.path(),
    )
    .arg("doctor")
    .output()
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("FAIL"), "{text}");
    assert!(
        !text.contains("hunter2"),
        "passwords are never printed: {text}"
    );

    let out = command(&db, workdir.path())
        .arg("doctor")
        .env("PORT", "eighty")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PORT is invalid"));
}

/// doctor warns when NATS_URL carries no credentials for a server off loopback (the relay publishes the whole log
/// there), and never prints the password of one that does. `0.0.0.0` is this host to a client (nothing leaves the
/// machine) but not loopback to the check.
#[test]
fn doctor_warns_when_the_bus_takes_strangers() {
    let workdir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/doctor.db", workdir.path().display());
    let doctor = |url: &str| {
        let out = command(&db, workdir.path())
            .arg("doctor")
            .env("NATS_URL", url)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = doctor("nats://0.0.0.0:1");
    let line = text
        .lines()
        .find(|l| l.starts_with("bus credentials"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("warn") && line.contains("no credentials for 0.0.0.0"),
        "{line}"
    );
    let text = doctor("nats://pidevops:hunter2hunter2@0.0.0.0:1");
    assert!(!text.contains("bus credentials"), "{text}");
    assert!(
        !text.contains("hunter2"),
        "passwords are never printed: {text}"
    );
    let text = doctor("nats://127.0.0.1:1");
    assert!(!text.contains("bus credentials"), "{text}");
}

/// doctor says how agents are contained here, and warns when no repository is allowed (every ticket refused).
#[test]
fn doctor_names_the_containment_and_an_empty_allow_list() {
    let workdir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/doctor.db", workdir.path().display());
    let out = command(&db, workdir.path()).arg("doctor").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("allowed repos") && text.contains("every task is refused"),
        "{text}"
    );
    assert!(!text.contains("containment "), "dispatch is off: {text}");

    let config = workdir.path().join("pidevops.toml");
    std::fs::write(
        &config,
        "[dispatch]\nagent = \"sh\"\n[agents.sh]\ncommand = [\"sh\", \"{prompt_file}\"]\n\
         [repos.\"acme/app\"]\nurl = \"file:///nonexistent/app.git\"\n",
    )
    .unwrap();
    let out = command(&db, workdir.path())
        .arg("doctor")
        .env("PIDEVOPS_CONFIG", &config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("containment "))
        .unwrap_or_else(|| panic!("{text}"));
    // bubblewrap is installed where the suite runs (.ci/run installs it).
    assert!(line.contains("namespaces"), "{line}");
    assert!(!text.contains("allowed repos"), "{text}");
    // What bounds an agent's memory, in force or not and why: never a limit on a host that cannot hold one.
    let memory = text
        .lines()
        .find(|l| l.starts_with("memory "))
        .unwrap_or_else(|| panic!("{text}"));
    if crate::bounds::host_has_cgroup2() {
        assert!(
            memory.contains("cgroup v2 limit 4096 MiB per agent")
                || memory.contains("not bounded, because"),
            "{memory}"
        );
    } else {
        assert!(
            memory.contains("warn")
                && memory.contains("not bounded, because /sys/fs/cgroup is cgroup v1"),
            "{memory}"
        );
    }
}

/// doctor says whether WORKSPACE_ROOT is on a mounted volume (the images declare none: Railway refuses VOLUME).
#[test]
fn doctor_says_whether_the_workspace_root_is_on_a_mounted_volume() {
    let workdir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/doctor.db", workdir.path().display());
    let config = workdir.path().join("pidevops.toml");
    std::fs::write(
        &config,
        "[dispatch]\nagent = \"sh\"\n[agents.sh]\ncommand = [\"sh\", \"{prompt_file}\"]\n",
    )
    .unwrap();
    let line = |root: &std::path::Path| {
        let out = command(&db, workdir.path())
            .arg("doctor")
            .env("PIDEVOPS_CONFIG", &config)
            .env("WORKSPACE_ROOT", root)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .find(|l| l.starts_with("workspace "))
            .unwrap_or_else(|| panic!("{text}"))
            .to_owned()
    };
    // /dev/shm is a mount of its own on Linux; a directory there that does not exist yet is on it too.
    let on_tmpfs = line(std::path::Path::new("/dev/shm/pidevops-doctor-not-made"));
    assert!(
        on_tmpfs.contains("volume") && on_tmpfs.contains("on the mount at /dev/shm"),
        "{on_tmpfs}"
    );
    assert!(
        !std::path::Path::new("/dev/shm/pidevops-doctor-not-made").exists(),
        "doctor writes nothing"
    );
    let tmp_is_a_mount = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some("/tmp"));
    if !tmp_is_a_mount {
        // Here /tmp is on the root filesystem, as on most machines: the tempdir is not on a volume.
        let on_root = line(&workdir.path().join("workspaces"));
        assert!(
            on_root.contains("warn") && on_root.contains("not a mounted volume"),
            "{on_root}"
        );
    }
}

#[test]
fn serve_on_the_embedded_default_creates_its_database() {
    let workdir = tempfile::tempdir().unwrap();
    // No DATABASE_URL at all: ./data/pidevops.db appears.
    let out = Command::new(BIN)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .current_dir(workdir.path())
        .arg("migrate")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(workdir.path().join("data/pidevops.db").exists());
}

#[test]
fn serve_refuses_an_agent_profile_that_would_hand_the_agent_a_secret() {
    let workdir = tempfile::tempdir().unwrap();
    std::fs::write(
        workdir.path().join("pidevops.toml"),
        "[agents.leaky]\ncommand = [\"agent\", \"{prompt}\"]\nenv = [\"GITHUB_TOKEN\"]\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PORT", "0")
        .current_dir(workdir.path())
        .arg("serve")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("agents.leaky.env lists GITHUB_TOKEN"),
        "the key is named: {stderr}"
    );
}

#[test]
fn serve_refuses_a_short_admin_token() {
    let workdir = tempfile::tempdir().unwrap();
    let short = "short-admin-token-23chr";
    assert_eq!(short.len(), 23);
    let mut out = Command::new(BIN)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PORT", "0")
        .env("PIDEVOPS_ADMIN_TOKEN", short)
        .current_dir(workdir.path())
        .arg("serve")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A serve that accepted the token would run forever: give it a while to refuse, then fail.
    let deadline = Instant::now() + Duration::from_secs(30);
    while out.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            out.kill().unwrap();
            out.wait().unwrap();
            panic!("serve started with a 23-character admin token");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = out.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("PIDEVOPS_ADMIN_TOKEN is invalid: needs at least 24 characters"),
        "the variable and the minimum are named: {stderr}"
    );
    assert!(!stderr.contains(short), "the token is not echoed: {stderr}");
    assert!(
        !workdir.path().join("data").exists(),
        "refused before anything is created"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_reach_the_logs_even_at_debug() {
    let workdir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/logs.db", workdir.path().display());
    let mut server = Server::start_with(
        &db,
        &[
            ("RUST_LOG", "debug"),
            ("TELEGRAM_WEBHOOK_SECRET", crate::common::TELEGRAM_SECRET),
            ("PIDEVOPS_ADMIN_TOKEN", crate::common::ADMIN_TOKEN),
            ("TELEGRAM_BOT_TOKEN", "4242:bot-token-secret-part"),
        ],
    )
    .await;
    let base = server.base.clone();
    let client = reqwest::Client::new();
    let body = br#"{"zen":"z"}"#;
    for signature in [
        sign_github(GITHUB_SECRET.as_bytes(), body),
        "sha256=00".to_owned(),
    ] {
        client
            .post(format!("{base}/webhooks/github"))
            .header("x-github-event", "ping")
            .header("x-github-delivery", "log-test")
            .header("x-hub-signature-256", signature)
            .body(body.to_vec())
            .send()
            .await
            .unwrap();
    }
    for token in [crate::common::TELEGRAM_SECRET, "wrong"] {
        client
            .post(format!("{base}/webhooks/telegram"))
            .header("x-telegram-bot-api-secret-token", token)
            .body(r#"{"update_id":1,"message":{"text":"hi"}}"#)
            .send()
            .await
            .unwrap();
    }
    for token in [crate::common::ADMIN_TOKEN, "wrong-token"] {
        client
            .get(format!("{base}/api/events"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(server.child.wait().unwrap().success());

    let log = read_log(server.workdir.path());
    assert!(log.lines().count() > 5, "debug logging was on: {log}");
    for secret in [
        GITHUB_SECRET,
        crate::common::TELEGRAM_SECRET,
        crate::common::ADMIN_TOKEN,
        "bot-token-secret-part",
    ] {
        assert!(
            !log.contains(secret),
            "{secret:?} appears in the log:\n{log}"
        );
    }
    for line in log.lines() {
        serde_json::from_str::<Value>(line)
            .unwrap_or_else(|e| panic!("LOG_FORMAT=json gives JSON lines ({e}): {line}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_health_is_logged_once_per_change_not_once_per_probe() {
    let config = tempfile::tempdir().unwrap();
    let file = config.path().join("pidevops.toml");
    // Asked for without its credential: linear_poller is unarmed, so /health fails from the start.
    std::fs::write(&file, "[pollers.linear]\ninterval_s = 60\n").unwrap();
    let db = format!("sqlite://{}/health-log.db", config.path().display());
    let mut server = Server::start_with(&db, &[("PIDEVOPS_CONFIG", file.to_str().unwrap())]).await;
    let client = reqwest::Client::new();
    for _ in 0..5 {
        let r = client
            .get(format!("{}/health", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503);
        let body: Value = r.json().await.unwrap();
        assert!(
            body["problems"][0]
                .as_str()
                .is_some_and(|p| p.starts_with("loop linear_poller is unarmed")),
            "{body}"
        );
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(server.child.wait().unwrap().success());
    let log = read_log(server.workdir.path());
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(r#""level":"ERROR""#))
        .collect();
    assert_eq!(
        errors.len(),
        1,
        "one ERROR for the change, none per probe:\n{log}"
    );
    assert!(
        errors[0].contains("health changed") && errors[0].contains("linear_poller"),
        "{log}"
    );
}

/// The server's peak resident memory (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/<pid>/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmHWM in kB");
    kib * 1024
}

/// Anyone can post 25 MiB bodies to /webhooks/github; until a body is read whole its signature cannot be checked.
/// A hundred at once must not make the server hold them all (2.5 GiB), and signed deliveries must keep landing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_large_bodies_stay_bounded_in_memory_while_signed_ones_flow() {
    let _cores = crate::common::heavy().await;
    // The bound: the ingress budget (32 MiB small + 64 MiB large lane) plus the runtime, the SQLite pool and
    // a hundred connections' read buffers, with room for allocator slack. Unbounded, the same load holds
    // 100 × 25 MiB = 2.5 GiB. docs/benchmarks.md has the measured figure.
    const BOUND: u64 = 400 * 1024 * 1024;
    let workdir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/rss.db", workdir.path().display());
    let server = Server::start(&db).await;
    let pid = server.child.id();
    let idle = peak_rss(pid);

    let junk = bytes::Bytes::from(vec![b'x'; pidevops::ingress::GITHUB_BODY_LIMIT]);
    let url = format!("{}/webhooks/github", server.base);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let flood: Vec<_> = (0..100)
        .map(|i| {
            let (client, url, junk) = (client.clone(), url.clone(), junk.clone());
            tokio::spawn(async move {
                client
                    .post(url)
                    .header("x-github-event", "push")
                    .header("x-github-delivery", format!("junk-{i}"))
                    .body(junk)
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
            })
        })
        .collect();
    // Meanwhile, ordinary signed deliveries, one after another: each is accepted.
    let body = std::fs::read(
        crate::common::fixtures_dir().join("github/pull_request/opened.payload.json"),
    )
    .unwrap();
    for i in 0..20 {
        let response = client
            .post(&url)
            .header("content-type", "application/json")
            .header("x-github-event", "pull_request")
            .header("x-github-delivery", format!("signed-{i}"))
            .header(
                "x-hub-signature-256",
                sign_github(GITHUB_SECRET.as_bytes(), &body),
            )
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            200,
            "signed delivery {i} during the flood"
        );
    }
    let mut statuses = BTreeMap::new();
    for sender in flood {
        // A refusal may reach the client as a reset while it is still sending: that is a refusal too.
        let outcome = match sender.await.unwrap() {
            Ok(status) => status.to_string(),
            Err(_) => "reset".to_owned(),
        };
        *statuses.entry(outcome).or_insert(0) += 1;
    }
    let peak = peak_rss(pid);
    eprintln!(
        "peak RSS: idle {} MiB, after the flood {} MiB; outcomes {statuses:?}",
        idle >> 20,
        peak >> 20
    );
    assert!(
        peak < BOUND,
        "peak RSS {} MiB is over {} MiB: {statuses:?}",
        peak >> 20,
        BOUND >> 20
    );
    assert!(
        statuses
            .keys()
            .all(|s| ["401", "503", "reset"].contains(&s.as_str())),
        "{statuses:?}"
    );
    assert!(
        statuses.get("503").copied().unwrap_or(0) + statuses.get("reset").copied().unwrap_or(0) > 0,
        "some were turned away, unkept: {statuses:?}"
    );
    // Nothing unsigned was stored; every signed one was, once.
    let store = EventStore::connect(&pidevops::config::DatabaseUrl::parse(&db).unwrap(), 2)
        .await
        .unwrap();
    for i in 0..20 {
        assert_eq!(
            store
                .count_by_key(Source::Github, &format!("signed-{i}"))
                .await
                .unwrap(),
            1
        );
    }
    for i in 0..100 {
        assert_eq!(
            store
                .count_by_key(Source::Github, &format!("junk-{i}"))
                .await
                .unwrap(),
            0
        );
    }
}

/// The first run on a laptop: `serve` on loopback with no admin token makes one (0600, in the data directory, the
/// same on a restart) and prints a link that signs the dashboard in once; the link's second use, and any other
/// code, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_run_on_loopback_prints_a_sign_in_link_that_works_once() {
    use std::os::unix::fs::PermissionsExt;
    let data = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/first.db", data.path().display());
    let data_dir = data.path().join("data");
    let env = [("PIDEVOPS_DATA_DIR", data_dir.to_str().unwrap())];
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let link_in = |log: &str| -> String {
        let at = log
            .find("/sign-in/once?code=")
            .unwrap_or_else(|| panic!("no sign-in link printed: {log}"));
        log[at..].split_whitespace().next().unwrap().to_owned()
    };

    let server = Server::start_with(&db, &env).await;
    let log = read_log(server.workdir.path());
    let link = link_in(&log);
    let token_file = data_dir.join("admin-token");
    let token = std::fs::read_to_string(&token_file).unwrap();
    assert_eq!(
        std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(!log.contains(&token), "the token itself is never printed");

    let opened = client
        .get(format!("{}{link}", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(opened.status(), 303);
    assert_eq!(opened.headers()["location"], "/");
    let cookie = opened.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    assert!(cookie.starts_with("pidevops_session="), "{cookie}");
    let board = client
        .get(format!("{}/", server.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(board.status(), 200, "signed in by the link");

    let again = client
        .get(format!("{}{link}", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 401, "the link works once");
    assert!(again.headers().get("set-cookie").is_none());
    let forged = client
        .get(format!(
            "{}/sign-in/once?code={}",
            server.base,
            "0".repeat(64)
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);
    // The token in the file is the admin token: the API takes it.
    let api = client
        .get(format!("{}/api/tasks", server.base))
        .bearer_auth(token.trim())
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), 200);
    drop(server);

    // A restart keeps the token and prints a new link; the old one is dead.
    let restarted = Server::start_with(&db, &env).await;
    let second = link_in(&read_log(restarted.workdir.path()));
    assert_ne!(second, link);
    assert_eq!(std::fs::read_to_string(&token_file).unwrap(), token);
    let old = client
        .get(format!("{}{link}", restarted.base))
        .send()
        .await
        .unwrap();
    assert_eq!(old.status(), 401);
    let new = client
        .get(format!("{}{second}", restarted.base))
        .send()
        .await
        .unwrap();
    assert_eq!(new.status(), 303);
}
