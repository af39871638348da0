//! `loadgen`: a bounded load generator for `POST /webhooks/github` (or `/webhooks/slack`), used by
//! `scripts/bench.sh` and `scripts/bench-sources.sh` and described in `docs/benchmarks.md`.
//!
//! N concurrent senders post the same signed body (signed once: the bytes never change), each with a fresh UUIDv4
//! `X-GitHub-Delivery`, so every request is a new event that must be durably committed before its 2xx. With
//! `--source slack` each request is an Events API callback with a fresh `event_id` and the current
//! `X-Slack-Request-Timestamp`, signed as Slack signs it (`v0:<timestamp>:<body>`), so the signing is per request,
//! as Slack's is. It stops by itself after `--duration` seconds or `--requests` requests, then reports accepted/s
//! and latency percentiles.
//! Requests started during `--warmup` are sent but left out of the figures.
//!
//! Load tests only ever hit this machine: any host that is not loopback (127.0.0.0/8, ::1, localhost) is refused
//! unless `--allow-remote` is given; proxies from the environment are ignored and redirects are not followed, so
//! the given URL is the only thing it talks to.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use bytes::Bytes;
use clap::Parser;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, USER_AGENT};
use reqwest::Url;

const DEFAULT_PAYLOAD: &str = "tests/fixtures/github/pull_request/opened.payload.json";
const DEFAULT_DURATION_S: f64 = 20.0;
const DELIVERY_HEADER: HeaderName = HeaderName::from_static("x-github-delivery");

/// Whose deliveries are sent.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Github,
    Slack,
}

/// The placeholder `event_id` a Slack body is given once; each request writes its own over it, same length.
const SLACK_EVENT_ID: &str = "Ev00000000000000000000000000000000";

#[derive(Parser, Debug)]
#[command(
    name = "loadgen",
    about = "Sends signed GitHub deliveries to a running `pidevops serve` and reports accepted/s and latency"
)]
struct Args {
    /// Base URL of the server; requests go to <url>/webhooks/github. Loopback only unless --allow-remote.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Whose deliveries: GitHub's (`/webhooks/github`) or Slack's (`/webhooks/slack`, an Events API callback).
    #[arg(long, value_enum, default_value = "github")]
    source: Source,
    /// The server's GITHUB_WEBHOOK_SECRET (or SLACK_SIGNING_SECRET with --source slack), used to sign the body.
    #[arg(long, env = "GITHUB_WEBHOOK_SECRET", hide_env_values = true)]
    secret: Option<String>,
    /// The request body, sent verbatim (with --source slack: an Events API callback whose `event_id` each request
    /// replaces).
    #[arg(long, default_value = DEFAULT_PAYLOAD)]
    payload: PathBuf,
    /// The X-GitHub-Event header.
    #[arg(long, default_value = "pull_request")]
    event: String,
    /// Concurrent senders, each with at most one request in flight.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    concurrency: u32,
    /// Measured seconds after the warmup [default: 20, or unlimited when only --requests is given].
    #[arg(long)]
    duration: Option<f64>,
    /// Stop after this many measured requests (whichever of --duration and --requests comes first).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    requests: Option<u64>,
    /// Seconds of load before measuring starts; requests started in it are not counted.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Per-request timeout in seconds (a timeout counts as a failed request).
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Runtime worker threads [default: one per CPU].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// Print the human summary to stderr and one JSON summary line to stdout.
    #[arg(long)]
    json: bool,
    /// Allow a target that is not loopback. Never point this at a server you do not own.
    #[arg(long)]
    allow_remote: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if let Some(threads) = args.threads {
        runtime.worker_threads(usize::from(threads));
    }
    let result = runtime
        .build()
        .context("cannot start the async runtime")
        .and_then(|rt| rt.block_on(run(args)));
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("loadgen: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The run as configured, validated.
struct Plan {
    endpoint: Url,
    body: Bytes,
    /// With --source slack: the secret each request is signed with, and where its `event_id` is in `body`.
    slack: Option<SlackSigning>,
    headers: HeaderMap,
    concurrency: usize,
    warmup: Duration,
    duration: Option<Duration>,
    requests: Option<u64>,
}

/// Returns whether every request (warmup included) was accepted.
async fn run(args: Args) -> anyhow::Result<bool> {
    let plan = plan(&args)?;
    let client = client(&args, &plan)?;

    eprintln!(
        "loadgen: POST {} ({} bytes, {}), {} senders, {} after {:.1} s warmup",
        plan.endpoint,
        plan.body.len(),
        match args.source {
            Source::Github => format!("X-GitHub-Event: {}", args.event),
            Source::Slack => "a signed Slack event_callback, a fresh event_id each".to_owned(),
        },
        plan.concurrency,
        match (plan.duration, plan.requests) {
            (Some(d), Some(n)) => format!("{:.1} s or {n} requests", d.as_secs_f64()),
            (Some(d), None) => format!("{:.1} s", d.as_secs_f64()),
            (None, Some(n)) => format!("{n} requests"),
            (None, None) => "no bound".to_owned(),
        },
        plan.warmup.as_secs_f64(),
    );

    let started = Instant::now();
    let shared = Arc::new(Shared {
        client,
        endpoint: plan.endpoint.clone(),
        body: plan.body.clone(),
        slack: plan.slack.clone(),
        headers: plan.headers.clone(),
        warmup_end: started + plan.warmup,
        deadline: plan.duration.map(|d| started + plan.warmup + d),
        budget: plan.requests.map(AtomicU64::new),
        expected_per_worker: expected_per_worker(&plan),
    });
    let workers: Vec<_> = (0..plan.concurrency)
        .map(|_| tokio::spawn(worker(Arc::clone(&shared))))
        .collect();
    let mut total = WorkerStats::default();
    for handle in workers {
        let stats = handle.await.context("a sender task panicked")?;
        total.merge(stats);
    }

    let summary = Summary::from_stats(total, shared.warmup_end, &args, &plan);
    let human = summary.human();
    if args.json {
        eprint!("{human}");
        println!("{}", summary.json());
    } else {
        print!("{human}");
    }
    Ok(summary.failed == 0 && summary.warmup_failed == 0)
}

fn plan(args: &Args) -> anyhow::Result<Plan> {
    let secret =
        args.secret.as_deref().filter(|s| !s.is_empty()).context(
            "no secret: pass --secret or set GITHUB_WEBHOOK_SECRET to the server's value",
        )?;

    let base = args.url.trim_end_matches('/');
    let route = match args.source {
        Source::Github => "github",
        Source::Slack => "slack",
    };
    let endpoint = Url::parse(&format!("{base}/webhooks/{route}"))
        .with_context(|| format!("--url {:?} is not a valid URL", args.url))?;
    ensure!(
        matches!(endpoint.scheme(), "http" | "https"),
        "--url must be http:// or https://, not {}://",
        endpoint.scheme()
    );
    ensure!(
        args.allow_remote || is_loopback(&endpoint),
        "refusing {}: load tests here only target loopback (127.0.0.0/8, ::1, localhost); \
         pass --allow-remote only for a server you own",
        endpoint.host_str().unwrap_or("<no host>")
    );

    let body = std::fs::read(&args.payload)
        .with_context(|| format!("cannot read the payload {}", args.payload.display()))?;
    ensure!(
        !body.is_empty(),
        "the payload {} is empty",
        args.payload.display()
    );
    let (body, slack) = match args.source {
        Source::Github => (body, None),
        Source::Slack => {
            let (body, at) = slack_template(&body)
                .with_context(|| format!("the payload {}", args.payload.display()))?;
            let signing = SlackSigning {
                secret: secret.to_owned(),
                event_id_at: at,
            };
            (body, Some(signing))
        }
    };
    let signature = pidevops::providers::github::webhook::sign_github(secret.as_bytes(), &body);

    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        HeaderName::from_static("x-github-event"),
        HeaderValue::from_str(&args.event)
            .with_context(|| format!("--event {:?} is not a valid header value", args.event))?,
    );
    headers.insert(
        HeaderName::from_static("x-hub-signature-256"),
        HeaderValue::from_str(&signature).context("the signature is not a valid header value")?,
    );
    headers.insert(
        USER_AGENT,
        HeaderValue::from_static("GitHub-Hookshot/loadgen"),
    );

    let seconds = |name: &str, value: f64, allow_zero: bool| -> anyhow::Result<Duration> {
        let ok = value.is_finite() && (value > 0.0 || (allow_zero && value == 0.0));
        ensure!(
            ok,
            "--{name} must be a positive number of seconds, not {value}"
        );
        Duration::try_from_secs_f64(value).with_context(|| format!("--{name} {value} is too large"))
    };
    let duration = match (args.duration, args.requests) {
        (Some(d), _) => Some(seconds("duration", d, false)?),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs_f64(DEFAULT_DURATION_S)),
    };
    seconds("timeout", args.timeout, false)?;

    if slack.is_some() {
        headers.remove("x-github-event");
        headers.remove("x-hub-signature-256");
        headers.insert(
            USER_AGENT,
            HeaderValue::from_static("Slackbot 1.0 (loadgen)"),
        );
    }

    Ok(Plan {
        endpoint,
        body: Bytes::from(body),
        slack,
        headers,
        concurrency: usize::try_from(args.concurrency).context("--concurrency does not fit")?,
        warmup: seconds("warmup", args.warmup, true)?,
        duration,
        requests: args.requests,
    })
}

/// How each Slack request is made its own: a fresh `event_id` written at `event_id_at`, signed with `secret`.
#[derive(Clone)]
struct SlackSigning {
    secret: String,
    event_id_at: usize,
}

/// The payload with its `event_id` set to [`SLACK_EVENT_ID`], and where that value starts in the bytes.
fn slack_template(body: &[u8]) -> anyhow::Result<(Vec<u8>, usize)> {
    let mut value: serde_json::Value =
        serde_json::from_slice(body).context("is not JSON (an Events API callback)")?;
    let object = value
        .as_object_mut()
        .context("is not a JSON object (an Events API callback)")?;
    ensure!(
        object.get("type").and_then(serde_json::Value::as_str) == Some("event_callback"),
        "is not an event_callback"
    );
    object.insert("event_id".to_owned(), SLACK_EVENT_ID.into());
    let bytes = serde_json::to_vec(&value)?;
    let needle = format!("\"{SLACK_EVENT_ID}\"");
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())
        .context("its event_id could not be placed")?;
    Ok((bytes, at + 1))
}

/// A Slack request's body (a fresh `event_id`) and its signing headers, dated now.
fn slack_request(shared: &Shared, signing: &SlackSigning) -> (Bytes, HeaderMap) {
    let mut body = shared.body.to_vec();
    let id = uuid::Uuid::new_v4()
        .simple()
        .to_string()
        .to_ascii_uppercase();
    let slot = &mut body[signing.event_id_at + 2..signing.event_id_at + SLACK_EVENT_ID.len()];
    slot.copy_from_slice(&id.as_bytes()[..slot.len()]);
    let now = chrono::Utc::now().timestamp().to_string();
    let signature =
        pidevops::providers::slack::webhook::sign_slack(signing.secret.as_bytes(), &now, &body);
    let mut headers = HeaderMap::new();
    if let (Ok(at), Ok(signed)) = (
        HeaderValue::from_str(&now),
        HeaderValue::from_str(&signature),
    ) {
        headers.insert(HeaderName::from_static("x-slack-request-timestamp"), at);
        headers.insert(HeaderName::from_static("x-slack-signature"), signed);
    }
    (Bytes::from(body), headers)
}

/// 127.0.0.0/8, ::1 (also as ::ffff:127.x.y.z) or the name localhost.
fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(ip) => ip.to_canonical().is_loopback(),
        Err(_) => bare.eq_ignore_ascii_case("localhost"),
    }
}

fn client(args: &Args, plan: &Plan) -> anyhow::Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder()
        .pool_max_idle_per_host(plan.concurrency)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs_f64(args.timeout));
    if !args.allow_remote && plan.endpoint.host_str() == Some("localhost") {
        // Pin the name, so a resolver that maps localhost elsewhere cannot send the load off this machine.
        let port = plan
            .endpoint
            .port_or_known_default()
            .context("the URL has no port")?;
        builder = builder.resolve(
            "localhost",
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
        );
    }
    builder.build().context("cannot build the HTTP client")
}

/// What every sender reads; built once.
struct Shared {
    client: reqwest::Client,
    endpoint: Url,
    body: Bytes,
    slack: Option<SlackSigning>,
    headers: HeaderMap,
    warmup_end: Instant,
    deadline: Option<Instant>,
    /// Measured requests still to send, when `--requests` bounds the run.
    budget: Option<AtomicU64>,
    expected_per_worker: usize,
}

/// A capacity guess so the latency vectors rarely reallocate mid-run (about 2,000 requests/s per sender at most).
fn expected_per_worker(plan: &Plan) -> usize {
    let by_time = plan
        .duration
        .map(|d| (d.as_secs_f64() * 2_000.0 / plan.concurrency as f64) as usize);
    let by_count = plan
        .requests
        .and_then(|n| usize::try_from(n / plan.concurrency as u64 + 1).ok());
    by_time
        .into_iter()
        .chain(by_count)
        .min()
        .unwrap_or(1024)
        .clamp(16, 1 << 20)
}

#[derive(Default)]
struct WorkerStats {
    /// Latency of every measured request that finished, whatever its outcome, in microseconds.
    latencies_us: Vec<u32>,
    accepted: u64,
    /// Failure kind -> (count, first message seen).
    failures: BTreeMap<String, (u64, String)>,
    warmup_requests: u64,
    warmup_failures: BTreeMap<String, (u64, String)>,
    last_done: Option<Instant>,
}

impl WorkerStats {
    fn merge(&mut self, other: WorkerStats) {
        self.latencies_us.extend(other.latencies_us);
        self.accepted += other.accepted;
        merge_failures(&mut self.failures, other.failures);
        self.warmup_requests += other.warmup_requests;
        merge_failures(&mut self.warmup_failures, other.warmup_failures);
        self.last_done = self.last_done.max(other.last_done);
    }
}

fn merge_failures(
    into: &mut BTreeMap<String, (u64, String)>,
    from: BTreeMap<String, (u64, String)>,
) {
    for (kind, (count, sample)) in from {
        into.entry(kind).or_insert((0, sample)).0 += count;
    }
}

fn record_failure(map: &mut BTreeMap<String, (u64, String)>, kind: String, message: String) {
    map.entry(kind).or_insert((0, message)).0 += 1;
}

async fn worker(shared: Arc<Shared>) -> WorkerStats {
    let mut stats = WorkerStats {
        latencies_us: Vec::with_capacity(shared.expected_per_worker),
        ..WorkerStats::default()
    };
    loop {
        let now = Instant::now();
        if shared.deadline.is_some_and(|deadline| now >= deadline) {
            break;
        }
        let measured = now >= shared.warmup_end;
        if measured {
            if let Some(budget) = &shared.budget {
                let claimed =
                    budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
                if claimed.is_err() {
                    break;
                }
            }
        }

        let sent = Instant::now();
        let outcome = send(&shared).await;
        let done = Instant::now();

        if !measured {
            stats.warmup_requests += 1;
            if let Err((kind, message)) = outcome {
                record_failure(&mut stats.warmup_failures, kind, message);
            }
            continue;
        }
        let micros = u32::try_from(done.duration_since(sent).as_micros()).unwrap_or(u32::MAX);
        stats.latencies_us.push(micros);
        stats.last_done = Some(done);
        match outcome {
            Ok(()) => stats.accepted += 1,
            Err((kind, message)) => record_failure(&mut stats.failures, kind, message),
        }
    }
    stats
}

/// One delivery. `Ok` only for a 2xx whose body says `"duplicate": false`; otherwise the failure's kind and a
/// message.
async fn send(shared: &Shared) -> Result<(), (String, String)> {
    let delivery = uuid::Uuid::new_v4().hyphenated().to_string();
    let delivery = HeaderValue::from_str(&delivery).map_err(|e| {
        (
            "client: delivery header".to_owned(),
            format!("the delivery id is not a header value: {e}"),
        )
    })?;
    let request = shared
        .client
        .post(shared.endpoint.clone())
        .headers(shared.headers.clone());
    let request = match &shared.slack {
        Some(signing) => {
            let (body, signed) = slack_request(shared, signing);
            request.headers(signed).body(body)
        }
        None => request
            .header(DELIVERY_HEADER, delivery)
            .body(shared.body.clone()),
    };
    let response = request.send().await.map_err(transport)?;
    let status = response.status();
    let body = response.bytes().await.map_err(transport)?;
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
        return Err((format!("http {}", status.as_u16()), text));
    }
    let json: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
        (
            format!("http {} unparseable body", status.as_u16()),
            e.to_string(),
        )
    })?;
    match json.get("duplicate").and_then(serde_json::Value::as_bool) {
        Some(false) => Ok(()),
        Some(true) => Err((
            format!("http {} duplicate", status.as_u16()),
            "a unique delivery id was reported as a duplicate".to_owned(),
        )),
        None => Err((
            format!("http {} without \"duplicate\"", status.as_u16()),
            json.to_string(),
        )),
    }
}

fn transport(e: reqwest::Error) -> (String, String) {
    let kind = if e.is_timeout() {
        "transport: timeout"
    } else if e.is_connect() {
        "transport: connect"
    } else if e.is_body() || e.is_decode() {
        "transport: body"
    } else if e.is_request() {
        "transport: request"
    } else {
        "transport: other"
    };
    // The whole source chain: reqwest's own message is often just "error sending request".
    let mut message = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    (kind.to_owned(), message)
}

struct Summary {
    url: String,
    event: String,
    payload_bytes: usize,
    concurrency: usize,
    warmup_s: f64,
    requests: u64,
    accepted: u64,
    failed: u64,
    failures: BTreeMap<String, (u64, String)>,
    warmup_requests: u64,
    warmup_failed: u64,
    warmup_failures: BTreeMap<String, (u64, String)>,
    elapsed_s: f64,
    accepted_per_s: f64,
    /// p50, p90, p99, max and mean in milliseconds; `None` when nothing was measured.
    latency_ms: Option<[f64; 5]>,
}

impl Summary {
    fn from_stats(mut stats: WorkerStats, warmup_end: Instant, args: &Args, plan: &Plan) -> Self {
        stats.latencies_us.sort_unstable();
        let lat = &stats.latencies_us;
        let requests = lat.len() as u64;
        let failed: u64 = stats.failures.values().map(|(n, _)| n).sum();
        let warmup_failed: u64 = stats.warmup_failures.values().map(|(n, _)| n).sum();
        // From the end of the warmup to the last measured completion: requests still in flight at the deadline are
        // counted, so is the time they took.
        let elapsed_s = stats
            .last_done
            .map(|done| done.saturating_duration_since(warmup_end).as_secs_f64())
            .unwrap_or(0.0);
        let ms = |us: u32| f64::from(us) / 1000.0;
        let latency_ms = lat.last().map(|&max| {
            let mean = lat.iter().map(|&us| u64::from(us)).sum::<u64>() as f64 / lat.len() as f64;
            [
                ms(percentile(lat, 50.0)),
                ms(percentile(lat, 90.0)),
                ms(percentile(lat, 99.0)),
                ms(max),
                mean / 1000.0,
            ]
        });
        Self {
            url: plan.endpoint.to_string(),
            event: match args.source {
                Source::Github => args.event.clone(),
                Source::Slack => "slack event_callback".to_owned(),
            },
            payload_bytes: plan.body.len(),
            concurrency: plan.concurrency,
            warmup_s: plan.warmup.as_secs_f64(),
            requests,
            accepted: stats.accepted,
            failed,
            failures: stats.failures,
            warmup_requests: stats.warmup_requests,
            warmup_failed,
            warmup_failures: stats.warmup_failures,
            elapsed_s,
            accepted_per_s: if elapsed_s > 0.0 {
                stats.accepted as f64 / elapsed_s
            } else {
                0.0
            },
            latency_ms,
        }
    }

    fn human(&self) -> String {
        let mut out = String::new();
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        line(format!(
            "target       {} (event: {}, {} byte body)",
            self.url, self.event, self.payload_bytes
        ));
        line(format!("concurrency  {}", self.concurrency));
        line(format!(
            "warmup       {:.1} s, {} requests, {} failed (not in the figures below)",
            self.warmup_s, self.warmup_requests, self.warmup_failed
        ));
        line(format!("requests     {}", self.requests));
        line(format!("accepted     {}", self.accepted));
        line(format!("failed       {}", self.failed));
        for (kind, (count, sample)) in &self.failures {
            line(format!("  {count:>9}  {kind}  (first: {sample})"));
        }
        for (kind, (count, sample)) in &self.warmup_failures {
            line(format!(
                "  {count:>9}  {kind} during warmup  (first: {sample})"
            ));
        }
        line(format!("elapsed      {:.3} s", self.elapsed_s));
        line(format!("accepted/s   {:.1}", self.accepted_per_s));
        match self.latency_ms {
            Some([p50, p90, p99, max, mean]) => line(format!(
                "latency ms   p50 {p50:.2}  p90 {p90:.2}  p99 {p99:.2}  max {max:.2}  mean {mean:.2}"
            )),
            None => line("latency ms   (no measured requests)".to_owned()),
        }
        out
    }

    fn json(&self) -> serde_json::Value {
        let kinds =
            |map: &BTreeMap<String, (u64, String)>| -> serde_json::Map<String, serde_json::Value> {
                map.iter()
                    .map(|(kind, (count, _))| (kind.clone(), serde_json::Value::from(*count)))
                    .collect()
            };
        let [p50, p90, p99, max, mean] = self.latency_ms.unwrap_or([0.0; 5]);
        serde_json::json!({
            "url": self.url,
            "event": self.event,
            "payload_bytes": self.payload_bytes,
            "concurrency": self.concurrency,
            "warmup_s": self.warmup_s,
            "warmup_requests": self.warmup_requests,
            "warmup_failed": self.warmup_failed,
            "requests": self.requests,
            "accepted": self.accepted,
            "failed": self.failed,
            "errors": kinds(&self.failures),
            "warmup_errors": kinds(&self.warmup_failures),
            "elapsed_s": round3(self.elapsed_s),
            "accepted_per_s": round3(self.accepted_per_s),
            "p50_ms": round3(p50),
            "p90_ms": round3(p90),
            "p99_ms": round3(p99),
            "max_ms": round3(max),
            "mean_ms": round3(mean),
        })
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Nearest-rank percentile of a sorted, non-empty slice.
fn percentile(sorted: &[u32], p: f64) -> u32 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
