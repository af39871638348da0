//! `slackbench`: how long a Slack mention takes to be answered in its thread, end to end, with the real server.
//!
//! It starts a fake Slack Web API on loopback (answers `chat.postMessage`, `reactions.add` and `chat.update` as
//! Slack does and notes when each arrives), runs `pidevops serve` (the binary given, on a fresh SQLite file, with
//! `SLACK_API_URL` pointing at the fake), then sends `--mentions` signed `app_mention` callbacks from an allowed
//! user, each in its own channel (Slack paces posts per channel; one channel per mention measures the path, not
//! the pacing), `--rate` a second, after `--warmup` mentions answered one by one and left out (the loops' first
//! ticks are start-up, not the path). For each it measures from the request's send to the fake receiving the first
//! `chat.postMessage` in that mention's thread, and reports the percentiles. Loopback only; it stops by itself.
//!
//! ```text
//! cargo build --release --features bench-bins --bin pidevops --bin slackbench
//! target/release/slackbench --pidevops target/release/pidevops --mentions 200 --rate 10
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use axum::extract::{Path, State};
use axum::routing::post;
use axum::{Json, Router};
use clap::Parser;
use serde_json::{json, Value};

#[derive(Parser, Debug)]
#[command(
    name = "slackbench",
    about = "A Slack mention to its first thread message, end to end"
)]
struct Args {
    /// The `pidevops` binary to run.
    #[arg(long, default_value = "target/release/pidevops")]
    pidevops: PathBuf,
    /// Mentions to send (each in its own channel).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=5000))]
    mentions: u32,
    /// Mentions a second.
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
    /// How long to wait for a mention's thread message before counting it lost.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Mentions sent first, one at a time, each answered before the next, and left out of the figures: the
    /// service's first ticks (the loops' start delay, their leases) are start-up, not the path.
    #[arg(long, default_value_t = 5)]
    warmup: u32,
}

const SECRET: &str = "slackbench-signing-secret";
const TOKEN: &str = "xoxb-slackbench";
const USER: &str = "U0BENCH";

/// When each thread's first post arrived, by `<channel>:<thread ts>`.
#[derive(Clone, Default)]
struct Fake {
    first_post: Arc<Mutex<HashMap<String, Instant>>>,
    next_ts: Arc<Mutex<u64>>,
}

async fn method(
    State(fake): State<Fake>,
    Path(method): Path<String>,
    Json(body): Json<Value>,
) -> Json<Value> {
    let ts = {
        let mut next = fake.next_ts.lock().unwrap_or_else(|p| p.into_inner());
        *next += 1;
        format!("1800000000.{:06}", *next)
    };
    let channel = body["channel"].as_str().unwrap_or_default().to_owned();
    if method == "chat.postMessage" {
        if let Some(thread) = body["thread_ts"].as_str() {
            let mut first = fake.first_post.lock().unwrap_or_else(|p| p.into_inner());
            first
                .entry(format!("{channel}:{thread}"))
                .or_insert_with(Instant::now);
        }
    }
    Json(json!({ "ok": true, "channel": channel, "ts": ts, "message": { "ts": ts, "text": "" } }))
}

/// A directory of its own under the system's temporary one, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> anyhow::Result<Self> {
        let path = std::env::temp_dir().join(format!("slackbench-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self(path))
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn channel(n: u32) -> String {
    format!("C0BENCH{n:05}")
}

fn mention(n: u32, ts: &str) -> Vec<u8> {
    json!({
        "token": "XXYYZZ", "team_id": "T0BENCH", "api_app_id": "A0BENCH", "type": "event_callback",
        "event_id": format!("Ev0BENCH{n:06}"), "event_time": chrono::Utc::now().timestamp(),
        "event": {
            "type": "app_mention", "user": USER, "ts": ts, "channel": channel(n), "event_ts": ts,
            "text": format!("<@U0PIDEVOPS> acme/app bench task {n}"),
        }
    })
    .to_string()
    .into_bytes()
}

/// `pidevops serve` on a fresh SQLite file in `dir`, its Slack pointed at the fake, answering `/health`; its base
/// URL and a client for it.
async fn start_server(
    args: &Args,
    dir: &Scratch,
    fake_addr: SocketAddr,
    total: u32,
) -> anyhow::Result<(tokio::process::Child, String, reqwest::Client)> {
    let config = dir.path().join("pidevops.toml");
    std::fs::write(
        &config,
        "[board]\napproval = \"auto\"\n[repos.\"acme/app\"]\n",
    )?;
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0")?;
        probe.local_addr()?.port()
    };
    let channels: Vec<String> = (0..total).map(channel).collect();
    let mut server = tokio::process::Command::new(&args.pidevops)
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .env(
            "DATABASE_URL",
            format!("sqlite://{}", dir.path().join("bench.db").display()),
        )
        .env("PORT", port.to_string())
        .env("PIDEVOPS_BIND", "127.0.0.1")
        .env("PIDEVOPS_CONFIG", &config)
        .env("PIDEVOPS_DATA_DIR", dir.path().join("data"))
        .env("SLACK_SIGNING_SECRET", SECRET)
        .env("SLACK_BOT_TOKEN", TOKEN)
        .env("SLACK_API_URL", format!("http://{fake_addr}"))
        .env("SLACK_ALLOWED_USERS", USER)
        .env("SLACK_ALLOWED_CHANNELS", channels.join(","))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot run {}", args.pidevops.display()))?;
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::builder().no_proxy().build()?;
    let started = Instant::now();
    loop {
        let up = client.get(format!("{base}/health")).send().await;
        if up.is_ok_and(|r| r.status().is_success()) {
            break;
        }
        ensure!(
            started.elapsed() < Duration::from_secs(30),
            "pidevops serve did not answer /health within 30 s"
        );
        if let Some(status) = server.try_wait()? {
            anyhow::bail!("pidevops serve exited: {status}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok((server, base, client))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(
        args.rate.is_finite() && args.rate > 0.0,
        "--rate must be positive"
    );
    let fake = Fake::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let fake_addr: SocketAddr = listener.local_addr()?;
    let app = Router::new()
        .route("/{method}", post(method))
        .with_state(fake.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = Scratch::new()?;
    let total = args.warmup + args.mentions;
    let (mut server, base, client) = start_server(&args, &dir, fake_addr, total).await?;

    let send = |n: u32| {
        let (client, base) = (client.clone(), base.clone());
        async move {
            let ts = format!("1700000000.{:06}", n + 1);
            let body = mention(n, &ts);
            let now = chrono::Utc::now().timestamp().to_string();
            let signature =
                pidevops::providers::slack::webhook::sign_slack(SECRET.as_bytes(), &now, &body);
            let at = Instant::now();
            let response = client
                .post(format!("{base}/webhooks/slack"))
                .header("content-type", "application/json")
                .header("x-slack-request-timestamp", now)
                .header("x-slack-signature", signature)
                .body(body)
                .send()
                .await?;
            ensure!(
                response.status().is_success(),
                "mention {n}: {}",
                response.status()
            );
            anyhow::Ok((format!("{}:{ts}", channel(n)), at))
        }
    };
    for n in 0..args.warmup {
        let (key, _) = send(n).await?;
        let deadline = Instant::now() + Duration::from_secs_f64(args.timeout);
        while !fake
            .first_post
            .lock()
            .map(|m| m.contains_key(&key))
            .unwrap_or(false)
        {
            ensure!(
                Instant::now() < deadline,
                "warm-up mention {n} was never answered in its thread"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let gap = Duration::from_secs_f64(1.0 / args.rate);
    let mut sent: Vec<(String, Instant)> = Vec::new();
    let mut next = Instant::now();
    for n in args.warmup..total {
        tokio::time::sleep_until(next.into()).await;
        next += gap;
        sent.push(send(n).await?);
    }
    let deadline = Instant::now() + Duration::from_secs_f64(args.timeout);
    loop {
        let answered = fake.first_post.lock().map(|m| m.len()).unwrap_or(0);
        if answered >= sent.len() + args.warmup as usize || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = server.kill().await;

    let first = fake
        .first_post
        .lock()
        .map(|m| m.clone())
        .unwrap_or_default();
    let mut latencies: Vec<f64> = sent
        .iter()
        .filter_map(|(key, at)| {
            first
                .get(key)
                .map(|done| done.duration_since(*at).as_secs_f64() * 1000.0)
        })
        .collect();
    let lost = sent.len() - latencies.len();
    ensure!(
        !latencies.is_empty(),
        "no mention was answered in its thread"
    );
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        let rank = ((p / 100.0) * latencies.len() as f64).ceil() as usize;
        latencies[rank.clamp(1, latencies.len()) - 1]
    };
    println!(
        "mentions {} at {:.1}/s, answered {}, lost {lost}",
        sent.len(),
        args.rate,
        latencies.len()
    );
    println!(
        "mention → first thread message, ms: p50 {:.1}  p90 {:.1}  p99 {:.1}  max {:.1}",
        pct(50.0),
        pct(90.0),
        pct(99.0),
        pct(100.0)
    );
    println!("target: p99 < 1000 ms");
    ensure!(
        lost == 0,
        "{lost} mention(s) never answered in their thread"
    );
    Ok(())
}
