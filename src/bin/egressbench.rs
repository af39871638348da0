//! `egressbench`: what the egress proxy's model gateway adds to a model call (docs/benchmarks.md, "Egress").
//!
//! A scripted model API on loopback (`POST /v1/messages`, a fixed JSON answer) is called `--samples` times
//! directly and `--samples` times through a run's proxy as the agent calls it (its gateway URL and a placeholder
//! key; the proxy adds the real key and forwards), interleaved, each after `--warmup` calls of both, one at a
//! time, over kept-alive connections as a CLI's HTTP client makes them. Prints p50 and p99 of each and what the
//! gateway adds at p99.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;

use pidevops::dispatch::egress::gateway::{Gateway, PLACEHOLDER_KEY};
use pidevops::dispatch::egress::policy::Policy;
use pidevops::dispatch::egress::routes::{ModelRoute, OperatorFiles};
use pidevops::dispatch::egress::{Proxy, Refusals};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "egressbench",
    about = "A model call through the egress gateway against a direct one"
)]
struct Args {
    #[arg(long, default_value_t = 2000)]
    samples: usize,
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// Bytes of the request body (a model request carries its conversation).
    #[arg(long, default_value_t = 16 * 1024)]
    body_bytes: usize,
}

const REAL_KEY: &str = "sk-egressbench-real-key";

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("egressbench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

async fn run(args: Args) -> anyhow::Result<()> {
    let answer = serde_json::json!({
        "id": "msg_bench", "type": "message", "role": "assistant", "model": "bench",
        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 1}
    });
    let model = axum::Router::new().route(
        "/v1/messages",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, _body: axum::body::Bytes| {
                let answer = answer.clone();
                async move {
                    // The gateway must have put the real key in.
                    let keyed = headers.get("x-api-key").is_some_and(|k| k == REAL_KEY);
                    if keyed {
                        (axum::http::StatusCode::OK, axum::Json(answer))
                    } else {
                        (
                            axum::http::StatusCode::UNAUTHORIZED,
                            axum::Json(serde_json::json!({})),
                        )
                    }
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let model_url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, model).await });

    let names = vec![
        "ANTHROPIC_API_KEY".to_owned(),
        "ANTHROPIC_BASE_URL".to_owned(),
    ];
    let passed = vec![
        ("ANTHROPIC_API_KEY".to_owned(), REAL_KEY.to_owned()),
        ("ANTHROPIC_BASE_URL".to_owned(), model_url.clone()),
    ];
    let gateway = Gateway::for_run(
        ModelRoute::BaseUrlVariable,
        &names,
        &passed,
        &[],
        &OperatorFiles::default(),
    )
    .map_err(|e| anyhow::anyhow!(e))?
    .ok_or_else(|| anyhow::anyhow!("no gateway"))?;
    let policy = Policy {
        model: Some(gateway.host()),
        allowed: Vec::new(),
    };
    let proxy = Proxy::start(policy, Some(gateway), None, Arc::new(Refusals::default()))?;
    let through_url = proxy.endpoint.agent_url();

    let client = reqwest::Client::builder().no_proxy().build()?;
    let body = format!(
        "{{\"model\":\"bench\",\"max_tokens\":16,\"messages\":[{{\"role\":\"user\",\"content\":\"{}\"}}]}}",
        "x".repeat(args.body_bytes)
    );
    let call = |base: String, key: &'static str| {
        let request = client
            .post(format!("{base}/v1/messages"))
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
            .header("content-type", "application/json")
            .body(body.clone());
        async move {
            let started = Instant::now();
            let response = request.send().await?;
            anyhow::ensure!(response.status().is_success(), "{}", response.status());
            response.bytes().await?;
            anyhow::Ok(started.elapsed())
        }
    };
    for _ in 0..args.warmup {
        call(model_url.clone(), REAL_KEY).await?;
        call(through_url.clone(), PLACEHOLDER_KEY).await?;
    }
    let (mut direct, mut through) = (Vec::new(), Vec::new());
    for _ in 0..args.samples {
        direct.push(call(model_url.clone(), REAL_KEY).await?);
        through.push(call(through_url.clone(), PLACEHOLDER_KEY).await?);
    }
    let ms = |v: Vec<Duration>| {
        let mut v: Vec<f64> = v.into_iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let (direct, through) = (ms(direct), ms(through));
    println!(
        "samples {} (after {} warm-up calls each), request body {} bytes",
        args.samples, args.warmup, args.body_bytes
    );
    let line = |name: &str, v: &[f64]| {
        println!(
            "{name:<28} p50 {:>7.3} ms   p99 {:>7.3} ms",
            percentile(v, 50.0),
            percentile(v, 99.0)
        );
    };
    line("direct (reference)", &direct);
    line("through the gateway", &through);
    let added = percentile(&through, 99.0) - percentile(&direct, 99.0);
    println!(
        "added at p99: {added:.3} ms (target < 5 ms); p99 ratio {:.2}x, p50 ratio {:.2}x",
        percentile(&through, 99.0) / percentile(&direct, 99.0),
        percentile(&through, 50.0) / percentile(&direct, 50.0)
    );
    drop(proxy);
    Ok(())
}
