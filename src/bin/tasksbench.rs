//! `tasksbench`: how fast `replay tasks` rebuilds the task board's read models (tasks, links), against a
//! plain `SELECT` scan of the same rows with their bodies, on the same database in the same run
//! (docs/benchmarks.md).
//!
//! It fills a throwaway Postgres database (`pidevops_tasksbench`) with `--tasks` task streams of 20 events each,
//! every event made by `tasks::decide` (so the bodies are real `TaskEvent` JSON and every stream replays), the
//! streams interleaved the way a busy board's are (about a thousand tasks in flight at any time), inserted by SQL
//! in bulk (setup, not measured). Then for each round, alternating which goes first, it times
//! (a) the reference: one `SELECT` of every column a projector receives, bodies included, streamed and decoded;
//! (b) the real `Projection::rebuild` that `pidevops replay tasks` runs, from reset to the head.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use chrono::{DateTime, Duration, TimeZone, Utc};
use clap::Parser;
use sqlx::Executor;
use uuid::Uuid;

use pidevops::eventlog::EventStore;
use pidevops::projectors::tasks::{self, TasksProjector};
use pidevops::projectors::{Projection, REPLAY_BATCH};
use pidevops::tasks::{
    decide, evolve, ApprovalPolicy, BranchName, Command, FollowUpText, GithubRef, LinearIssue,
    Links, MaxAttempts, NewTask, Priority, Reason, RetryCause, RunId, Spec, Task, TaskEvent,
    TaskId, TelegramMessage, GITHUB_ISSUE, LINEAR_ISSUE, TELEGRAM,
};

/// Events per task: the scenario below makes exactly this many.
const EVENTS_PER_TASK: usize = 20;
/// Task `i`'s event `j` sorts at `i + SPREAD * j`: each task lives over `SPREAD * 20` creations.
const SPREAD: u64 = 50;

#[derive(Parser, Debug)]
#[command(
    name = "tasksbench",
    about = "Times `replay tasks` against a raw SELECT scan of the same rows"
)]
struct Args {
    /// A Postgres URL whose user may create databases; the benchmark uses its own database on that server.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    admin_url: String,
    /// The database to create and fill (refilled when it holds a different number of events).
    #[arg(long, default_value = "pidevops_tasksbench")]
    database: String,
    /// Tasks to generate; 20 events each.
    #[arg(long, default_value_t = 50_000)]
    tasks: u64,
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Events per rebuild transaction (default: what `pidevops replay` uses).
    #[arg(long, default_value_t = REPLAY_BATCH)]
    batch: i64,
}

/// The allocator `pidevops` ships with (see `src/main.rs`), so the rebuild is measured as `replay` runs it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tasksbench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let store = pidevops::bench::open(&args.admin_url, &args.database).await?;
    let want = (args.tasks as usize * EVENTS_PER_TASK) as i64;
    if store.head().await? != want {
        eprintln!("filling {} with {} tasks …", args.database, args.tasks);
        fill(&store, args.tasks).await?;
    }
    let head = store.head().await?;
    eprintln!("{head} events in {}", args.database);

    println!("round  scan events/s  rebuild events/s  rebuild/scan  last write s");
    for round in 1..=args.rounds {
        let (scan, (rebuild, last_write)) = if round % 2 == 1 {
            let scan = pidevops::bench::scan(&store, true).await?;
            (scan, rebuild(&store, args.batch).await?)
        } else {
            let rebuild = rebuild(&store, args.batch).await?;
            (pidevops::bench::scan(&store, true).await?, rebuild)
        };
        let (scan_rate, rebuild_rate) = (head as f64 / scan, head as f64 / rebuild);
        println!(
            "{round:>5}  {scan_rate:>13.0}  {rebuild_rate:>16.0}  {:>12.2}  {last_write:>12.2}",
            rebuild_rate / scan_rate
        );
    }
    decode_rounds(args.rounds)?;
    let board = tasks::list(&store, &tasks::TaskFilter::default()).await?;
    anyhow::ensure!(
        board.len() as u64 == args.tasks,
        "the rebuilt board has {} tasks, expected {}",
        board.len(),
        args.tasks
    );
    Ok(())
}

/// What `pidevops replay tasks` does: reset, then batches of REPLAY_BATCH to the head.
/// The rebuild's seconds, and those of its last step: from the first progress at the final position (the last
/// page folded, or applied by a batch) to the end (a fold's write of the whole board and its commit).
async fn rebuild(store: &EventStore, batch: i64) -> anyhow::Result<(f64, f64)> {
    let projection =
        Projection::with_batch(store.clone(), Arc::new(TasksProjector::default()), batch);
    let started = Instant::now();
    let mut stamps = Vec::new();
    let done = projection
        .rebuild(|p| stamps.push((p.position, Instant::now())))
        .await?;
    let elapsed = started.elapsed();
    anyhow::ensure!(done.events > 0, "the rebuild applied nothing");
    let last = stamps
        .iter()
        .find(|(position, _)| *position == done.position)
        .map_or(elapsed, |(_, at)| elapsed - at.duration_since(started));
    Ok((elapsed.as_secs_f64(), last.as_secs_f64()))
}

/// Task bodies decoded by their stored type (`TaskEvent::from_stored`, what the log's readers use) against the
/// general decoder (`serde_json::from_slice`, serde's buffered internally tagged path), on the same 200,000 bodies
/// in memory, alternating which goes first: the decode alone, without the database or the fold.
fn decode_rounds(rounds: u32) -> anyhow::Result<()> {
    let base = base()?;
    let mut bodies = Vec::with_capacity(10_000 * EVENTS_PER_TASK);
    for i in 1..=10_000 {
        for event in task_events(i, |j| {
            base + Duration::seconds((i + SPREAD * j as u64) as i64)
        })? {
            bodies.push((event.kind(), serde_json::to_vec(&event)?));
        }
    }
    // The seconds one decoder takes over every body.
    let time = |decode: &dyn Fn(&str, &[u8]) -> anyhow::Result<TaskEvent>| -> anyhow::Result<f64> {
        let started = Instant::now();
        for (kind, body) in &bodies {
            std::hint::black_box(decode(kind, body)?);
        }
        Ok(started.elapsed().as_secs_f64())
    };
    let general = |_: &str, body: &[u8]| Ok(serde_json::from_slice::<TaskEvent>(body)?);
    let by_type = |kind: &str, body: &[u8]| Ok(TaskEvent::from_stored(kind, body)?);
    println!("round  general bodies/s  by type bodies/s  by type/general");
    for round in 1..=rounds {
        let (g, t) = if round % 2 == 1 {
            (time(&general)?, time(&by_type)?)
        } else {
            let t = time(&by_type)?;
            (time(&general)?, t)
        };
        let n = bodies.len() as f64;
        println!(
            "{round:>5}  {:>16.0}  {:>16.0}  {:>15.2}",
            n / g,
            n / t,
            g / t
        );
    }
    Ok(())
}

fn base() -> anyhow::Result<DateTime<Utc>> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
        .single()
        .context("a valid base time")
}

/// One task's life: intake, approval, three failed attempts (run failed, checks failed, changes requested), a
/// human clearing the flag, a fourth attempt; a third of the tasks end there (in progress), a third stay
/// flagged, the rest are completed and archived. Follow-ups fill each to exactly 20 events.
fn task_events(i: u64, at: impl Fn(usize) -> DateTime<Utc>) -> anyhow::Result<Vec<TaskEvent>> {
    let id = TaskId::new(std::num::NonZeroU64::new(i).context("task numbers start at 1")?);
    let repo = format!("acme/repo-{}", i % 10).parse()?;
    let links = match i % 4 {
        0 => Links::default().with(
            LINEAR_ISSUE,
            &LinearIssue::new(Uuid::from_u128(u128::from(i)), &format!("ENG-{i}"))?,
        ),
        1 => Links::default().with(
            GITHUB_ISSUE,
            &GithubRef::new(format!("acme/repo-{}", i % 10).parse()?, i)?,
        ),
        2 => Links::default().with(
            TELEGRAM,
            &TelegramMessage::new(-1_000_000 - (i % 7) as i64, i as i64)?,
        ),
        _ => Links::default(),
    };
    let run = |k: u64| RunId(Uuid::from_u128(u128::from(i) * 16 + u128::from(k)));
    let pr = |k: u64| {
        GithubRef::new(
            format!("acme/repo-{}", i % 10).parse()?,
            100_000 + i * 8 + k,
        )
    };
    let reason = |s: &str| Reason::new(format!("{s} (task {i})"));
    let follow_up = |k: usize| {
        FollowUpText::new(format!(
            "follow-up {k} on task {i}: please also check the edge cases"
        ))
    };
    let mut script = vec![
        Command::Create(Box::new(NewTask {
            id,
            repo,
            spec: Spec::new(
                format!("Fix issue {i} in the request pipeline"),
                "src/http, src/eventlog",
                "the integration tests pass and the benchmark holds",
            )?,
            priority: Priority::ALL[(i % 4) as usize],
            links,
            approval: ApprovalPolicy::Manual,
            max_attempts: MaxAttempts::new(3)?,
            ticket_version: None,
            agent: None,
            family: Default::default(),
        })),
        Command::Approve,
        Command::AttachFollowUp {
            text: follow_up(1)?,
            origin: None,
            send_back: true,
        },
        Command::Start { run: run(1) },
        Command::Retry {
            cause: RetryCause::RunFailed { run: run(1) },
            reason: reason("the agent timed out")?,
        },
        Command::Start { run: run(2) },
        Command::SubmitForReview {
            run: run(2),
            branch: id.branch(),
            pr: Some(pr(2)?),
            report: Default::default(),
        },
        Command::Retry {
            cause: RetryCause::ChecksFailed,
            reason: reason("CI failed")?,
        },
        Command::Start { run: run(3) },
        Command::SubmitForReview {
            run: run(3),
            branch: BranchName::try_from(format!("pidevops/{id}-3"))?,
            pr: Some(pr(3)?),
            report: Default::default(),
        },
        // The last of three attempts: retried and flagged for a human (two events).
        Command::Retry {
            cause: RetryCause::ChangesRequested,
            reason: reason("the reviewer wants tests")?,
        },
    ];
    match i % 3 {
        0 => {}
        1 => script.extend([
            Command::ClearNeedsHuman,
            Command::Reprioritize {
                priority: Priority::ALL[((i + 1) % 4) as usize],
            },
            Command::Start { run: run(4) },
        ]),
        _ => script.extend([
            Command::ClearNeedsHuman,
            Command::Start { run: run(4) },
            Command::SubmitForReview {
                run: run(4),
                branch: id.branch(),
                pr: Some(pr(4)?),
                report: Default::default(),
            },
            Command::AttachFollowUp {
                text: follow_up(2)?,
                origin: None,
                send_back: true,
            },
            Command::AttachFollowUp {
                text: follow_up(3)?,
                origin: None,
                send_back: true,
            },
            Command::AttachFollowUp {
                text: follow_up(4)?,
                origin: None,
                send_back: true,
            },
            Command::Complete,
            Command::Archive,
        ]),
    }
    let mut state: Option<Task> = None;
    let mut events = Vec::with_capacity(EVENTS_PER_TASK);
    let mut follow_ups = 4;
    let mut commands = script.into_iter();
    while events.len() < EVENTS_PER_TASK {
        let command = match commands.next() {
            Some(c) => c,
            // Pad with follow-ups: the tasks that end open take them.
            None => {
                follow_ups += 1;
                Command::AttachFollowUp {
                    text: follow_up(follow_ups)?,
                    origin: None,
                    send_back: true,
                }
            }
        };
        let produced = decide(state.as_ref(), &command, at(events.len()))
            .with_context(|| format!("T-{i}: {}", command.name()))?;
        for event in produced {
            state = Some(evolve(state, &event)?);
            events.push(event);
        }
    }
    anyhow::ensure!(
        events.len() == EVENTS_PER_TASK,
        "T-{i}: the scenario made {} events",
        events.len()
    );
    Ok(events)
}

/// Bulk setup: events generated in Rust, positions in interleaved order, inserted by `unnest` 20 000 at a time.
async fn fill(store: &EventStore, tasks: u64) -> anyhow::Result<()> {
    let EventStore::Postgres(pg) = store else {
        anyhow::bail!("tasksbench runs on Postgres");
    };
    let started = Instant::now();
    let base = base()?;
    // (sort key, task, version, event)
    let mut all: Vec<(u64, u64, usize, TaskEvent)> =
        Vec::with_capacity(tasks as usize * EVENTS_PER_TASK);
    for i in 1..=tasks {
        let key = |j: usize| i + SPREAD * j as u64;
        let events = task_events(i, |j| base + Duration::seconds(key(j) as i64))?;
        for (j, event) in events.into_iter().enumerate() {
            all.push((key(j), i, j + 1, event));
        }
    }
    all.sort_unstable_by_key(|(key, i, _, _)| (*key, *i));
    eprintln!(
        "generated {} events in {:.1} s",
        all.len(),
        started.elapsed().as_secs_f64()
    );

    let mut conn = pg.pool().acquire().await?;
    conn.execute("TRUNCATE events, projections, source_activity, checkpoints, tasks, task_links, task_merges")
        .await
        .context("emptying the benchmark database (it is a throwaway)")?;
    let actors = ["linear", "github", "telegram", "api"];
    for (chunk_index, chunk) in all.chunks(20_000).enumerate() {
        let first = (chunk_index * 20_000) as i64 + 1;
        let n = chunk.len();
        let mut position = Vec::with_capacity(n);
        let mut id = Vec::with_capacity(n);
        let mut event_type = Vec::with_capacity(n);
        let mut dedup_key = Vec::with_capacity(n);
        let mut stream = Vec::with_capacity(n);
        let mut version = Vec::with_capacity(n);
        let mut at = Vec::with_capacity(n);
        let mut body = Vec::with_capacity(n);
        let mut meta = Vec::with_capacity(n);
        for (k, (_, task, v, event)) in chunk.iter().enumerate() {
            position.push(first + k as i64);
            id.push(Uuid::now_v7());
            event_type.push(event.kind());
            dedup_key.push(format!("T-{task}/{v}"));
            stream.push(format!("task:T-{task}"));
            version.push(*v as i64);
            at.push(event.at());
            body.push(serde_json::to_vec(event)?);
            let mut m = serde_json::Map::new();
            m.insert("actor".into(), actors[(*task % 4) as usize].into());
            m.insert(
                "cause_event_id".into(),
                Uuid::from_u128(u128::from(*task) << 8 | *v as u128)
                    .to_string()
                    .into(),
            );
            meta.push(serde_json::Value::Object(m).to_string());
        }
        sqlx::query(
            "INSERT INTO events (position, id, source, event_type, dedup_key, stream, stream_version,
                                 occurred_at, recorded_at, content_type, body, meta)
             SELECT p, i, 'pidevops', t, k, s, v, a, a, 'application/json', b, m::jsonb
             FROM unnest($1::int8[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::int8[],
                         $7::timestamptz[], $8::bytea[], $9::text[]) AS x(p, i, t, k, s, v, a, b, m)",
        )
        .bind(position)
        .bind(id)
        .bind(event_type)
        .bind(dedup_key)
        .bind(stream)
        .bind(version)
        .bind(at)
        .bind(body)
        .bind(meta)
        .execute(&mut *conn)
        .await
        .with_context(|| format!("inserting events from {first}"))?;
    }
    conn.execute("VACUUM ANALYZE events").await?;
    eprintln!("filled in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
