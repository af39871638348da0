//! `relaybench`: relay throughput into JetStream against a publish-and-ack ceiling, used by
//! `scripts/bench-relay.sh` and described in `docs/benchmarks.md`.
//!
//! 1. Fills a throwaway Postgres database (dropped and re-created) with `--events` GitHub deliveries of the
//!    `--payload` body, appended through `EventLog` with many appends in flight (group commit). Not measured.
//! 2. Relay: the real `Relay` publishes the whole log to a fresh stream made with the crate's `stream_config`,
//!    timed from its first tick until the last event is acknowledged.
//! 3. Ceiling: the same client library publishes the same number of messages to another fresh stream with the
//!    same config: the envelope bytes the relay produced for the first event, its identity headers, a fresh
//!    `Nats-Msg-Id` each, awaiting each ack before the next publish (the reference).
//! 4. Windowed ceiling: the same, with as many acks in flight as the relay keeps (`relay::IN_FLIGHT`) and the
//!    relay's `Nats-Expected-Last-Sequence` chain: raw JetStream doing what the relay does, minus the log.
//!
//! Each round runs the relay twice (with one publish awaiting its ack at a time, as it published until 2026-12-06,
//! then with its window) and both ceilings, alternating whether the relays or the ceilings go first (this
//! machine's speed drifts), and prints the ratios.
//! Streams are deleted after each run; the database is dropped at the end unless `--keep-database`.
//! It only talks to loopback NATS and Postgres unless `--allow-remote` is given: it drops a database.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use bytes::Bytes;
use clap::Parser;
use futures::StreamExt;
use pidevops::bus::jetstream_settings::stream_config;
use pidevops::bus::relay::{BusTarget, Relay, IN_FLIGHT};
use pidevops::bus::{BusConfig, BusMessage, JetstreamBus, Tail, POSITION_HEADER};
use pidevops::config::DatabaseUrl;
use pidevops::eventlog::{EventLog, EventStore};
use tokio_util::sync::CancellationToken;

const DEFAULT_PAYLOAD: &str = "tests/fixtures/github/pull_request/opened.payload.json";

#[derive(Parser, Debug)]
#[command(
    name = "relaybench",
    about = "Relay throughput into JetStream against a minimal publish-and-ack loop, same run, same machine"
)]
struct Args {
    /// Postgres server URL without a database name.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432")]
    pg: String,
    /// Appended to database URLs, e.g. "?sslmode=disable".
    #[arg(long, default_value = "")]
    db_params: String,
    /// The throwaway database: dropped and re-created. Its name must contain "bench".
    #[arg(long, default_value = "pidevops_relaybench")]
    database: String,
    /// NATS with JetStream.
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    nats: String,
    /// Events in the log, and messages per ceiling run.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    events: u64,
    /// The delivery body (a GitHub pull_request payload by default).
    #[arg(long, default_value = DEFAULT_PAYLOAD)]
    payload: PathBuf,
    /// The X-GitHub-Event header of the stored deliveries.
    #[arg(long, default_value = "pull_request")]
    event: String,
    /// Relay + ceiling pairs.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Leave the database in place at the end.
    #[arg(long)]
    keep_database: bool,
    /// Allow Postgres or NATS hosts that are not loopback.
    #[arg(long)]
    allow_remote: bool,
}

/// The allocator `pidevops` ships with (see `src/main.rs`), so this measures what ships.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .and_then(|rt| rt.block_on(run(args)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("relaybench: {e:#}");
            ExitCode::from(1)
        }
    }
}

struct Round {
    /// The relay with one publish awaiting its ack at a time (as it published until 2026-12-06).
    serial: f64,
    relay: f64,
    ceiling: f64,
    windowed: f64,
}
async fn run(args: Args) -> anyhow::Result<()> {
    check_target(&args)?;
    let body = Bytes::from(
        std::fs::read(&args.payload)
            .with_context(|| format!("reading {}", args.payload.display()))?,
    );
    let db_url = format!("{}/{}{}", args.pg, args.database, args.db_params);
    recreate_database(&args).await?;
    let store = EventStore::connect(&DatabaseUrl::Postgres(db_url), 8)
        .await
        .context("connecting to the bench database")?;
    store
        .migrate()
        .await
        .context("migrating the bench database")?;
    fill(&store, &args, body.clone()).await?;

    // The ceiling publishes exactly what the relay would for an event of this size.
    let first = store
        .read_after(0, 1)
        .await
        .context("reading the first event")?
        .pop()
        .context("the log is empty after filling it")?;
    let template = BusMessage::from_event(&BusConfig::default(), &first)
        .context("encoding the first event")?;
    eprintln!(
        "relaybench: {} events, envelope {} bytes (body {} bytes), {} rounds, NATS {}",
        args.events,
        template.payload.len(),
        body.len(),
        args.rounds,
        args.nats
    );

    let mut rounds = Vec::new();
    for round in 1..=args.rounds {
        let relays_first = round % 2 == 1;
        let mut r = Round {
            serial: 0.0,
            relay: 0.0,
            ceiling: 0.0,
            windowed: 0.0,
        };
        for part in 0..2 {
            if (part == 0) == relays_first {
                r.serial = relay_run(&store, &args, 1).await?;
                r.relay = relay_run(&store, &args, IN_FLIGHT).await?;
            } else {
                r.ceiling = ceiling_run(&args, &template, 1).await?;
                r.windowed = ceiling_run(&args, &template, IN_FLIGHT).await?;
            }
        }
        eprintln!(
            "relaybench: round {round} ({} first): relay {:.0} events/s (1 in flight: {:.0}), ceiling {:.0}, \
             windowed ceiling {:.0}; relay / ceiling {:.2}",
            if relays_first { "relays" } else { "ceilings" },
            r.relay,
            r.serial,
            r.ceiling,
            r.windowed,
            r.relay / r.ceiling
        );
        rounds.push(r);
    }

    println!(
        "| round | first | relay, 1 in flight | relay, {IN_FLIGHT} in flight | ceiling | relay / ceiling | \
         1 in flight / ceiling | windowed ceiling | relay / windowed ceiling |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for (i, r) in rounds.iter().enumerate() {
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {:.0} | {:.2} |",
            i + 1,
            if i % 2 == 0 { "relays" } else { "ceilings" },
            r.serial,
            r.relay,
            r.ceiling,
            r.relay / r.ceiling,
            r.serial / r.ceiling,
            r.windowed,
            r.relay / r.windowed
        );
    }
    let median = |ratio: fn(&Round) -> f64| {
        let mut ratios: Vec<f64> = rounds.iter().map(ratio).collect();
        ratios.sort_by(f64::total_cmp);
        ratios[ratios.len() / 2]
    };
    let against_ceiling = median(|r| r.relay / r.ceiling);
    println!(
        "\nmedians: relay / ceiling {against_ceiling:.2} (target >= 0.90: {}); 1 in flight / ceiling {:.2}; \
         relay / windowed ceiling {:.2}",
        if against_ceiling >= 0.9 { "met" } else { "NOT met" },
        median(|r| r.serial / r.ceiling),
        median(|r| r.relay / r.windowed)
    );

    drop(store);
    if !args.keep_database {
        drop_database(&args).await?;
    }
    Ok(())
}

/// Refuses a database name that does not look throwaway, and hosts off this machine unless allowed.
fn check_target(args: &Args) -> anyhow::Result<()> {
    ensure!(
        args.database.contains("bench")
            && args
                .database
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
        "--database {:?} is dropped and re-created, so it must be lower-case [a-z0-9_] and contain \"bench\"",
        args.database
    );
    if !args.allow_remote {
        for url in [&args.pg, &args.nats] {
            let host = host_of(url).with_context(|| format!("no host in {url}"))?;
            let loopback = host == "localhost"
                || host
                    .trim_matches(|c| c == '[' || c == ']')
                    .parse::<IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            ensure!(
                loopback,
                "{host} is not loopback; pass --allow-remote to benchmark (and drop a database on) another host"
            );
        }
    }
    Ok(())
}

/// The host of `scheme://[user@]host[:port][/...]`.
fn host_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if host_port.starts_with('[') {
        host_port.split_inclusive(']').next()?
    } else {
        host_port.split(':').next()?
    };
    (!host.is_empty()).then_some(host)
}

async fn admin(args: &Args) -> anyhow::Result<sqlx::PgConnection> {
    use sqlx::Connection;
    let url = format!("{}/postgres{}", args.pg, args.db_params);
    sqlx::PgConnection::connect(&url)
        .await
        .with_context(|| format!("connecting to {}/postgres", args.pg))
}

async fn recreate_database(args: &Args) -> anyhow::Result<()> {
    use sqlx::Executor;
    let mut conn = admin(args).await?;
    // The name was checked to be [a-z0-9_] above, so it is safe to splice.
    conn.execute(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", args.database).as_str())
        .await
        .context("dropping the bench database")?;
    conn.execute(format!("CREATE DATABASE {}", args.database).as_str())
        .await
        .context("creating the bench database")?;
    Ok(())
}

async fn drop_database(args: &Args) -> anyhow::Result<()> {
    use sqlx::Executor;
    admin(args)
        .await?
        .execute(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", args.database).as_str())
        .await
        .context("dropping the bench database")?;
    Ok(())
}

/// Appends `--events` deliveries with many appends in flight, so the appenders commit them in big batches.
async fn fill(store: &EventStore, args: &Args, body: Bytes) -> anyhow::Result<()> {
    let stop = CancellationToken::new();
    let (log, appender) = EventLog::start(store.clone(), Duration::from_secs(60), stop.clone());
    let started = Instant::now();
    let mut appends = futures::stream::iter(0..args.events)
        .map(|i| {
            let log = log.clone();
            let body = body.clone();
            async move {
                let mut headers = axum::http::HeaderMap::new();
                headers.insert(
                    "x-github-event",
                    args.event
                        .parse()
                        .context("--event is not a header value")?,
                );
                headers.insert("x-github-delivery", format!("relaybench-{i}").parse()?);
                headers.insert("content-type", "application/json".parse()?);
                let event = pidevops::providers::github::webhook::parse(&headers, body)
                    .map_err(|e| anyhow::anyhow!("the payload is not a GitHub delivery: {e}"))?;
                log.append(event).await.context("appending")?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(1024);
    while let Some(result) = appends.next().await {
        result?;
    }
    drop(appends);
    let head = store.head().await.context("reading the log head")?;
    ensure!(
        u64::try_from(head).ok() == Some(args.events),
        "the log holds {head} events, expected {}",
        args.events
    );
    eprintln!(
        "relaybench: filled the log with {head} events in {:.1} s (not measured)",
        started.elapsed().as_secs_f64()
    );
    stop.cancel();
    drop(log);
    appender.await.context("the appender task")?;
    Ok(())
}

/// A stream and subjects of this run's own.
fn fresh_config(kind: &str) -> BusConfig {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    BusConfig {
        stream: format!("RELAYBENCH_{}_{tag}", kind.to_ascii_uppercase()),
        subject_prefix: format!("relaybench_{kind}_{tag}.events"),
    }
}

/// The real relay, with `in_flight` publishes awaiting their acks at most, from an empty stream to the log's head;
/// events/s.
async fn relay_run(store: &EventStore, args: &Args, in_flight: usize) -> anyhow::Result<f64> {
    let config = fresh_config("relay");
    // Created here with the crate's own settings (the relay would do the same on its first tick).
    let bus = JetstreamBus::connect(&args.nats, config.clone())
        .await
        .context("creating the relay's stream")?;
    let relay = Relay::new(
        store.clone(),
        BusTarget::Nats {
            url: args.nats.clone(),
            config,
        },
    )
    .with_in_flight(in_flight);
    let head = store.head().await.context("reading the log head")?;
    let started = Instant::now();
    let (mut published, mut duplicates) = (0, 0);
    loop {
        let progress = relay.tick().await.context("a relay tick")?;
        published += progress.published;
        duplicates += progress.duplicates;
        if progress.position >= head {
            break;
        }
    }
    let elapsed = started.elapsed();
    let tail = bus.tail().await.context("reading the relay's stream")?;
    bus.delete_stream()
        .await
        .context("deleting the relay's stream")?;
    ensure!(
        tail == Tail::Last(head) && published == args.events && duplicates == 0,
        "the relay published {published} ({duplicates} duplicates), stream tail {tail:?}, log head {head}"
    );
    Ok(args.events as f64 / elapsed.as_secs_f64())
}

/// The ceiling: publish, keep up to `window` acks in flight (1: await each before the next publish), await them in
/// order; events/s. With a window, each message expects its predecessor's sequence, as the relay's do.
async fn ceiling_run(args: &Args, template: &BusMessage, window: usize) -> anyhow::Result<f64> {
    let config = fresh_config("ceiling");
    let client = async_nats::ConnectOptions::new()
        .name("relaybench-ceiling")
        .connect(&args.nats)
        .await
        .context("connecting to NATS")?;
    let js = async_nats::jetstream::new(client);
    let mut stream = js
        .create_stream(stream_config(&config))
        .await
        .context("creating the ceiling's stream")?;
    let subject = config.subject("github", "github.pull_request.opened");
    let started = Instant::now();
    let mut in_flight = std::collections::VecDeque::new();
    for position in 1..=args.events {
        // The relay's headers: the event id (dedup) and the position.
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", uuid::Uuid::now_v7().to_string().as_str());
        headers.insert(POSITION_HEADER, position.to_string().as_str());
        if window > 1 {
            headers.insert(
                async_nats::header::NATS_EXPECTED_LAST_SEQUENCE,
                (position - 1).to_string().as_str(),
            );
        }
        let pending = js
            .publish_with_headers(subject.clone(), headers, template.payload.clone())
            .await
            .context("publishing")?;
        in_flight.push_back((position, pending));
        while in_flight.len() >= window {
            await_ack(in_flight.pop_front()).await?;
        }
    }
    while !in_flight.is_empty() {
        await_ack(in_flight.pop_front()).await?;
    }
    let elapsed = started.elapsed();
    let held = stream
        .info()
        .await
        .context("reading the ceiling's stream")?
        .state
        .messages;
    js.delete_stream(&config.stream)
        .await
        .context("deleting the ceiling's stream")?;
    ensure!(
        held == args.events,
        "the ceiling's stream holds {held} messages"
    );
    Ok(args.events as f64 / elapsed.as_secs_f64())
}

async fn await_ack(
    sent: Option<(u64, async_nats::jetstream::context::PublishAckFuture)>,
) -> anyhow::Result<()> {
    let Some((position, pending)) = sent else {
        return Ok(());
    };
    let ack = pending.await.context("awaiting the ack")?;
    if ack.duplicate {
        bail!("message {position} was answered as a duplicate");
    }
    ensure!(
        ack.sequence == position,
        "message {position} got sequence {}",
        ack.sequence
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn hosts_are_found() {
        assert_eq!(
            host_of("postgres://postgres@127.0.0.1:5432"),
            Some("127.0.0.1")
        );
        assert_eq!(host_of("nats://localhost:4222"), Some("localhost"));
        assert_eq!(host_of("nats://[::1]:4222/x"), Some("[::1]"));
        assert_eq!(
            host_of("postgres://u:p@db.example.com/x"),
            Some("db.example.com")
        );
    }
}
