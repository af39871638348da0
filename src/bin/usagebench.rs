//! `usagebench`: how fast `replay usage` rebuilds the usage read model (`usage_daily`, `usage_tasks`), against a
//! plain `SELECT` scan of the same rows with their bodies, on the same database in the same run
//! (docs/benchmarks.md, "Usage roll-up").
//!
//! It fills a throwaway Postgres database (`pidevops_usagebench`) with a month of agent runs as the dispatcher
//! records them: each run's stream `run:<id>` holds `run.started`, a few `run.heartbeat`s and one outcome
//! (`run.succeeded`, `run.failed` or `run.proposed`) carrying what the run spent, over a dozen repositories and
//! six profiles, some outcomes with no usage. Every body is a real `RunEvent`; the log is the first `--events`
//! events of the month in time order (the runs still going at the cut have no outcome yet). Inserted by SQL in
//! bulk: setup, not measured. Then for each round, alternating which goes first, it times
//! (a) the reference: one `SELECT` of every column a projector receives, bodies included, streamed and decoded;
//! (b) the real `Projection::rebuild` that `pidevops replay usage` runs, from reset to the head.
//! At the end it checks every row of the rebuilt read model against what was generated.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use chrono::{DateTime, Duration, TimeZone, Utc};
use clap::Parser;
use sqlx::{Executor, Row};
use uuid::Uuid;

use pidevops::domain::runs::{self, FailureKind, Proposal, RunEvent};
use pidevops::domain::usage::{RunUsage, Usage};
use pidevops::eventlog::EventStore;
use pidevops::projectors::usage::{day_of, UsageProjector};
use pidevops::projectors::{Projection, REPLAY_BATCH};
use pidevops::tasks::plan::{PlanDocument, PlanLimits};
use pidevops::tasks::{AttemptReport, RunId, Spec, TaskId};

/// The target: the rebuild's rate at least this share of the scan's (docs/benchmarks.md).
const TARGET: f64 = 0.30;
const MINUTE_MS: i64 = 60_000;
const DAY_MS: i64 = 24 * 60 * MINUTE_MS;
/// The month the runs fall in.
const DAYS: i64 = 30;

#[derive(Parser, Debug)]
#[command(
    name = "usagebench",
    about = "Times `replay usage` against a raw SELECT scan of the same rows"
)]
struct Args {
    /// A Postgres URL whose user may create databases; the benchmark uses its own database on that server.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    admin_url: String,
    /// The database to create and fill (refilled when it holds a different number of events).
    #[arg(long, default_value = "pidevops_usagebench")]
    database: String,
    #[arg(long, default_value_t = 1_000_000)]
    events: usize,
    #[arg(long, default_value_t = 5)]
    rounds: u32,
    /// Events per rebuild transaction (default: what `pidevops replay` uses).
    #[arg(long, default_value_t = REPLAY_BATCH)]
    batch: i64,
    /// The generator's seed: the same seed and --events make the same log.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// The allocator `pidevops` ships with (see `src/main.rs`), so the rebuild is measured as `replay` runs it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("usagebench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<bool> {
    let started = Instant::now();
    let log = Log::generate(args.events, args.seed)?;
    eprintln!(
        "generated {} events of {} runs over {} tasks ({} outcomes, {} with usage) in {:.1} s",
        log.events.len(),
        log.runs.len(),
        log.tasks,
        log.outcomes,
        log.expected.total.runs,
        started.elapsed().as_secs_f64()
    );
    let store = pidevops::bench::open(&args.admin_url, &args.database).await?;
    if store.head().await? != args.events as i64 || !log.matches(&store).await? {
        eprintln!("filling {} …", args.database);
        log.fill(&store).await?;
    }
    let head = store.head().await?;
    eprintln!("{head} events in {}", args.database);

    println!("round  scan events/s  rebuild events/s  rebuild/scan");
    let mut ratios = Vec::new();
    for round in 1..=args.rounds {
        let (scan, rebuild) = if round % 2 == 1 {
            let scan = pidevops::bench::scan(&store, true).await?;
            (scan, rebuild(&store, args.batch).await?)
        } else {
            let rebuild = rebuild(&store, args.batch).await?;
            (pidevops::bench::scan(&store, true).await?, rebuild)
        };
        let (scan_rate, rebuild_rate) = (head as f64 / scan, head as f64 / rebuild);
        let ratio = rebuild_rate / scan_rate;
        ratios.push(ratio);
        println!("{round:>5}  {scan_rate:>13.0}  {rebuild_rate:>16.0}  {ratio:>12.2}");
    }
    log.expected.check(&store).await?;
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    let met = median >= TARGET;
    println!(
        "median rebuild/scan {median:.2} over {} rounds (lowest {:.2}, highest {:.2}); target >= {TARGET:.2}: {}",
        ratios.len(),
        ratios[0],
        ratios[ratios.len() - 1],
        if met { "met" } else { "NOT met" }
    );
    Ok(met)
}

/// What `pidevops replay usage` does: reset, then batches of REPLAY_BATCH to the head.
async fn rebuild(store: &EventStore, batch: i64) -> anyhow::Result<f64> {
    let projection = Projection::with_batch(store.clone(), Arc::new(UsageProjector), batch);
    let started = Instant::now();
    let done = projection.rebuild(|_| {}).await?;
    let elapsed = started.elapsed().as_secs_f64();
    anyhow::ensure!(done.events > 0, "the rebuild applied nothing");
    Ok(elapsed)
}

/// SplitMix64: small, fast, and the same log on every machine for a seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// In `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// An index into `weights`, drawn by weight.
    fn pick(&mut self, weights: &[u32]) -> usize {
        let total: u32 = weights.iter().sum();
        let mut at = self.range(0, u64::from(total) - 1) as u32;
        for (i, w) in weights.iter().enumerate() {
            if at < *w {
                return i;
            }
            at -= w;
        }
        weights.len() - 1
    }
}

/// Repositories, with how often a task is in each (a few busy ones, a long tail).
const REPOS: [(&str, u32); 12] = [
    ("acme/api", 30),
    ("acme/web", 22),
    ("acme/mobile", 12),
    ("acme/billing", 8),
    ("acme/infra", 7),
    ("acme/search", 5),
    ("acme/auth", 4),
    ("acme/data-pipeline", 4),
    ("acme/docs", 3),
    ("acme/sdk-python", 2),
    ("acme/sdk-go", 2),
    ("acme/design-system", 1),
];

/// How a profile's CLI reports what it spent.
#[derive(Clone, Copy, PartialEq)]
enum Meter {
    /// Claude Code: a cost, cache writes, a handful of uncached input tokens.
    Claude,
    /// Codex: no cost, no cache writes.
    Codex,
    /// pi and OpenCode: a cost, every kind of token.
    Other,
}

/// The profiles a work run uses, with how often.
const WORK_PROFILES: [(&str, Meter, u32); 4] = [
    ("claude", Meter::Claude, 55),
    ("codex", Meter::Codex, 28),
    ("opencode", Meter::Other, 10),
    ("pi", Meter::Other, 7),
];

#[derive(Clone, Copy)]
enum Purpose {
    Work,
    Triage,
    Plan,
}

/// One run as generated: enough to write its events.
struct GenRun {
    id: RunId,
    task: TaskId,
    repo: &'static str,
    attempt: u32,
    profile: &'static str,
    purpose: Purpose,
    start_ms: i64,
    end_ms: i64,
    heartbeats: u32,
    /// `None`: succeeded (or proposed, for triage and plan runs).
    failure: Option<FailureKind>,
    usage: Option<Usage>,
    worker: usize,
    tail: usize,
}

/// One event of the log: a run's `version`th event at `at_ms`.
#[derive(Clone, Copy)]
struct GenEvent {
    at_ms: i64,
    run: u32,
    version: u32,
}

/// What the read model must hold once every outcome in the log is applied.
#[derive(Default)]
struct Expected {
    daily: BTreeMap<(String, String, String), Totals>,
    tasks: BTreeMap<String, (String, DateTime<Utc>, Totals)>,
    total: Totals,
}

/// The benchmark's own sum of some runs' usage (kept apart from the projector's code, which it checks).
#[derive(Clone, Debug, Default, PartialEq)]
struct Totals {
    runs: i64,
    input_tokens: i64,
    output_tokens: i64,
    cache_read_tokens: i64,
    cache_write_tokens: i64,
    cost_usd: f64,
    costed_runs: i64,
    turns: i64,
}

impl Totals {
    fn add_usage(&mut self, u: &Usage) {
        self.runs += 1;
        self.input_tokens += u.input_tokens as i64;
        self.output_tokens += u.output_tokens as i64;
        self.cache_read_tokens += u.cache_read_tokens as i64;
        self.cache_write_tokens += u.cache_write_tokens as i64;
        self.cost_usd += u.cost_usd.unwrap_or(0.0);
        self.costed_runs += i64::from(u.cost_usd.is_some());
        self.turns += i64::from(u.turns);
    }

    fn tokens(&self) -> i64 {
        self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens
    }

    fn of_row(row: &sqlx::postgres::PgRow) -> Result<Totals, sqlx::Error> {
        Ok(Totals {
            runs: row.try_get("runs")?,
            input_tokens: row.try_get("input_tokens")?,
            output_tokens: row.try_get("output_tokens")?,
            cache_read_tokens: row.try_get("cache_read_tokens")?,
            cache_write_tokens: row.try_get("cache_write_tokens")?,
            cost_usd: row.try_get("cost_usd")?,
            costed_runs: row.try_get("costed_runs")?,
            turns: row.try_get("turns")?,
        })
    }

    /// Every count equal, the cost within rounding (sums of doubles in another order differ in the last bits).
    /// Returns the cost's difference.
    fn agrees(&self, other: &Totals, what: &str) -> anyhow::Result<f64> {
        let exact = |t: &Totals| Totals {
            cost_usd: 0.0,
            ..t.clone()
        };
        anyhow::ensure!(
            exact(self) == exact(other),
            "{what}: read model {self:?}, generated {other:?}"
        );
        let diff = (self.cost_usd - other.cost_usd).abs();
        anyhow::ensure!(
            diff <= 1e-9 * other.cost_usd.abs().max(1.0),
            "{what}: cost {} in the read model, {} generated",
            self.cost_usd,
            other.cost_usd
        );
        Ok(diff)
    }
}

struct Log {
    runs: Vec<GenRun>,
    /// The log in position order (position = index + 1).
    events: Vec<GenEvent>,
    tasks: u64,
    outcomes: usize,
    expected: Expected,
    tails: Vec<String>,
    plans: Vec<PlanDocument>,
    base: DateTime<Utc>,
}

impl Log {
    /// The first `events` events of a month of runs. The number of tasks is tuned until the month holds just
    /// over `events`, so the cut falls at its end and every day of it has runs.
    fn generate(events: usize, seed: u64) -> anyhow::Result<Log> {
        anyhow::ensure!(events > 0, "--events must be positive");
        let base = Utc
            .with_ymd_and_hms(2026, 11, 1, 0, 0, 0)
            .single()
            .context("a valid base time")?;
        let mut tasks = (events as u64 / 7).max(1);
        let runs = loop {
            let runs = simulate(tasks, seed);
            let made: usize = runs.iter().map(|r| r.heartbeats as usize + 2).sum();
            if made >= events && made <= events + events / 100 + 50 {
                break runs;
            }
            tasks = ((tasks as f64 * (events as f64 * 1.003 + 20.0) / made as f64) as u64).max(1);
        };
        let mut all: Vec<GenEvent> = Vec::with_capacity(events + events / 100 + 50);
        for (i, run) in runs.iter().enumerate() {
            let last = run.heartbeats + 2;
            for version in 1..=last {
                let at_ms = if version == last {
                    run.end_ms
                } else {
                    run.start_ms
                        + (run.end_ms - run.start_ms) * i64::from(version - 1) / i64::from(last - 1)
                };
                all.push(GenEvent {
                    at_ms,
                    run: i as u32,
                    version,
                });
            }
        }
        all.sort_unstable_by_key(|e| (e.at_ms, e.run, e.version));
        all.truncate(events);

        let mut expected = Expected::default();
        let mut outcomes = 0;
        for event in &all {
            let run = &runs[event.run as usize];
            if event.version != run.heartbeats + 2 {
                continue;
            }
            outcomes += 1;
            let Some(mut usage) = run.usage else { continue };
            // The cost as the projector reads it back from the body's JSON (serde_json's default parser may
            // land a bit off a double it printed), so the check can hold the sums to the bit.
            usage.cost_usd = usage
                .cost_usd
                .map(|c| serde_json::to_string(&c).and_then(|s| serde_json::from_str(&s)))
                .transpose()?;
            let usage = &usage;
            let at = base + Duration::milliseconds(event.at_ms);
            expected
                .daily
                .entry((day_of(at), run.repo.to_owned(), run.profile.to_owned()))
                .or_default()
                .add_usage(usage);
            let task = expected
                .tasks
                .entry(run.task.to_string())
                .or_insert_with(|| (run.repo.to_owned(), at, Totals::default()));
            task.1 = task.1.max(at);
            task.2.add_usage(usage);
            expected.total.add_usage(usage);
        }
        let plans = [3, 5, 8]
            .into_iter()
            .map(|n| {
                let items: Vec<_> = (1..=n)
                    .map(|k| {
                        serde_json::json!({
                            "id": format!("part-{k}"),
                            "title": format!("Part {k} of the migration"),
                            "task": format!("Move module {k} to the new storage layer and keep its tests green."),
                            "scope": [format!("src/module{k}/**")],
                            "done_when": "cargo test passes and the module reads the new tables",
                            "depends_on": if k > 1 { vec!["part-1".to_owned()] } else { vec![] },
                        })
                    })
                    .collect();
                let plan = serde_json::json!({"version": 1, "summary": "the storage migration, in parts", "items": items});
                PlanDocument::parse(plan.to_string().as_bytes(), &PlanLimits::default())
                    .map_err(|e| anyhow::anyhow!("the benchmark's plan: {e}"))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Log {
            tasks: runs.iter().map(|r| r.task.number()).max().unwrap_or(0),
            runs,
            events: all,
            outcomes,
            expected,
            tails: tails(),
            plans,
            base,
        })
    }

    /// The `RunEvent` of a log event.
    fn body(&self, event: &GenEvent) -> anyhow::Result<RunEvent> {
        let run = &self.runs[event.run as usize];
        let at = self.base + Duration::milliseconds(event.at_ms);
        let last = run.heartbeats + 2;
        if event.version == 1 {
            return Ok(RunEvent::Started {
                at,
                run: run.id,
                task: run.task,
                attempt: run.attempt,
                profile: run.profile.to_owned(),
                worker: format!("pidevops-{}", ["7f3a9c", "b81e02", "4d6c55"][run.worker]),
                log: format!("/data/workspaces/.runs/{}/agent.log", run.id),
            });
        }
        if event.version < last {
            return Ok(RunEvent::Heartbeat {
                at,
                run: run.id,
                task: run.task,
                output_bytes: u64::from(event.version - 1) * 41_873,
            });
        }
        let duration_s = (run.end_ms - run.start_ms) as f64 / 1000.0;
        let usage = run.usage.map(|usage| RunUsage {
            repo: run.repo.to_owned(),
            profile: run.profile.to_owned(),
            usage,
            refused: None,
        });
        let tail = match run.failure {
            Some(FailureKind::Setup | FailureKind::Workspace) => format!(
                "+ npm ci\nnpm ERR! code ECONNRESET\nnpm ERR! network request to https://registry.npmjs.org/ failed (run {})\n",
                run.id
            ),
            _ => self.tails[run.tail].clone(),
        };
        Ok(match (run.purpose, run.failure) {
            (_, Some(kind)) => RunEvent::Failed {
                at,
                run: run.id,
                task: run.task,
                attempt: run.attempt,
                kind,
                detail: detail(kind).to_owned(),
                duration_s,
                tail,
                usage,
                until: (kind == FailureKind::Limited).then(|| at + Duration::hours(3)),
                reviewer_usage: None,
            },
            (Purpose::Work, None) => RunEvent::Succeeded {
                at,
                run: run.id,
                task: run.task,
                attempt: run.attempt,
                branch: run.task.branch(),
                commit: format!(
                    "{:040x}",
                    run.id.0.as_u128() & ((1u128 << 120) - 1) | 1 << 118
                ),
                duration_s,
                tail,
                report: Box::new(AttemptReport {
                    summary: run.tail.is_multiple_of(2).then(|| {
                        format!(
                            "Fixed the bug in {} and added a regression test; the suite passes.",
                            run.repo
                        )
                    }),
                    ..AttemptReport::default()
                }),
                usage,
                reviewer_usage: None,
            },
            (Purpose::Triage, None) => RunEvent::Proposed {
                at,
                run: run.id,
                task: run.task,
                attempt: run.attempt,
                proposal: Proposal::Spec {
                    spec: Spec::new(
                        format!(
                            "Pagination of /v1/orders returns duplicates across pages ({})",
                            run.task
                        ),
                        "src/http/orders.rs, src/store/orders.rs",
                        "a page boundary test passes and the cursor is stable under inserts",
                    )?,
                },
                duration_s,
                tail,
                usage,
            },
            (Purpose::Plan, None) => RunEvent::Proposed {
                at,
                run: run.id,
                task: run.task,
                attempt: run.attempt,
                proposal: Proposal::Plan {
                    plan: Box::new(self.plans[run.tail % self.plans.len()].clone()),
                },
                duration_s,
                tail,
                usage,
            },
        })
    }

    /// Whether the database holds this very log: its last event's key and body.
    async fn matches(&self, store: &EventStore) -> anyhow::Result<bool> {
        let EventStore::Postgres(pg) = store else {
            anyhow::bail!("usagebench runs on Postgres");
        };
        let Some(last) = self.events.last() else {
            return Ok(false);
        };
        let body = serde_json::to_vec(&self.body(last)?)?;
        let stored: Option<Vec<u8>> =
            sqlx::query_scalar("SELECT body FROM events WHERE position = $1")
                .bind(self.events.len() as i64)
                .fetch_optional(pg.pool())
                .await?;
        Ok(stored.as_deref() == Some(body.as_slice()))
    }

    /// Bulk setup: bodies serialized in Rust, inserted by `unnest` 10,000 at a time, then `VACUUM ANALYZE`.
    async fn fill(&self, store: &EventStore) -> anyhow::Result<()> {
        let EventStore::Postgres(pg) = store else {
            anyhow::bail!("usagebench runs on Postgres");
        };
        let started = Instant::now();
        let mut conn = pg.pool().acquire().await?;
        conn.execute("TRUNCATE events, projections, checkpoints, usage_daily, usage_tasks")
            .await
            .context("emptying the benchmark database (it is a throwaway)")?;
        const CHUNK: usize = 10_000;
        let mut bytes = 0usize;
        for (chunk_index, chunk) in self.events.chunks(CHUNK).enumerate() {
            let first = (chunk_index * CHUNK) as i64 + 1;
            let n = chunk.len();
            let mut position = Vec::with_capacity(n);
            let mut id = Vec::with_capacity(n);
            let mut event_type = Vec::with_capacity(n);
            let mut dedup_key = Vec::with_capacity(n);
            let mut stream = Vec::with_capacity(n);
            let mut version = Vec::with_capacity(n);
            let mut at = Vec::with_capacity(n);
            let mut reference = Vec::with_capacity(n);
            let mut body = Vec::with_capacity(n);
            for (k, event) in chunk.iter().enumerate() {
                let run = &self.runs[event.run as usize];
                let decoded = self.body(event)?;
                position.push(first + k as i64);
                id.push(Uuid::from_u128(
                    run.id.0.as_u128() ^ u128::from(event.version) << 64,
                ));
                event_type.push(decoded.kind());
                dedup_key.push(if decoded.is_terminal() {
                    runs::end_key(run.id)
                } else {
                    format!("run:{}:{}", run.id, event.version)
                });
                stream.push(runs::stream(run.id));
                version.push(i64::from(event.version));
                at.push(decoded.at());
                reference.push(run.task.to_string());
                let json = serde_json::to_vec(&decoded)?;
                bytes += json.len();
                body.push(json);
            }
            sqlx::query(
                "INSERT INTO events (position, id, source, event_type, dedup_key, stream, stream_version,
                                     occurred_at, recorded_at, reference, content_type, body, meta)
                 SELECT p, i, 'pidevops', t, k, s, v, a, a + interval '3 milliseconds', r,
                        'application/json', b, '{\"actor\": \"dispatcher\"}'::jsonb
                 FROM unnest($1::int8[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::int8[],
                             $7::timestamptz[], $8::text[], $9::bytea[]) AS x(p, i, t, k, s, v, a, r, b)",
            )
            .bind(position)
            .bind(id)
            .bind(event_type)
            .bind(dedup_key)
            .bind(stream)
            .bind(version)
            .bind(at)
            .bind(reference)
            .bind(body)
            .execute(&mut *conn)
            .await
            .with_context(|| format!("inserting events from {first}"))?;
        }
        conn.execute("VACUUM ANALYZE events").await?;
        eprintln!(
            "filled in {:.1} s ({:.0} MB of bodies, {:.0} bytes each on average)",
            started.elapsed().as_secs_f64(),
            bytes as f64 / 1e6,
            bytes as f64 / self.events.len() as f64
        );
        Ok(())
    }
}

impl Expected {
    /// Every row of both tables against what was generated, and the totals.
    async fn check(&self, store: &EventStore) -> anyhow::Result<()> {
        let EventStore::Postgres(pg) = store else {
            anyhow::bail!("usagebench runs on Postgres");
        };
        const SPENT: &str =
            "runs, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, \
                             cost_usd, costed_runs, turns";
        let mut worst = 0f64;
        let rows = sqlx::query(&format!(
            "SELECT day, repo, profile, {SPENT} FROM usage_daily"
        ))
        .fetch_all(pg.pool())
        .await?;
        anyhow::ensure!(
            rows.len() == self.daily.len(),
            "usage_daily has {} rows, expected {}",
            rows.len(),
            self.daily.len()
        );
        let mut total = Totals::default();
        for row in &rows {
            let key: (String, String, String) = (
                row.try_get("day")?,
                row.try_get("repo")?,
                row.try_get("profile")?,
            );
            let got = Totals::of_row(row)?;
            let want = self
                .daily
                .get(&key)
                .with_context(|| format!("usage_daily has an unexpected row {key:?}"))?;
            worst = worst.max(got.agrees(want, &format!("usage_daily {key:?}"))?);
            total.runs += got.runs;
            total.input_tokens += got.input_tokens;
            total.output_tokens += got.output_tokens;
            total.cache_read_tokens += got.cache_read_tokens;
            total.cache_write_tokens += got.cache_write_tokens;
            total.cost_usd += got.cost_usd;
            total.costed_runs += got.costed_runs;
            total.turns += got.turns;
        }
        total.agrees(&self.total, "the sum of usage_daily")?;

        let rows = sqlx::query(&format!(
            "SELECT task_id, repo, last_at, {SPENT} FROM usage_tasks"
        ))
        .fetch_all(pg.pool())
        .await?;
        anyhow::ensure!(
            rows.len() == self.tasks.len(),
            "usage_tasks has {} rows, expected {}",
            rows.len(),
            self.tasks.len()
        );
        for row in &rows {
            let task: String = row.try_get("task_id")?;
            let (repo, last_at, want) = self
                .tasks
                .get(&task)
                .with_context(|| format!("usage_tasks has an unexpected task {task}"))?;
            let got_repo: String = row.try_get("repo")?;
            let got_last: DateTime<Utc> = row.try_get("last_at")?;
            anyhow::ensure!(
                &got_repo == repo && &got_last == last_at,
                "usage_tasks {task}: {got_repo} {got_last}, expected {repo} {last_at}"
            );
            worst = worst.max(Totals::of_row(row)?.agrees(want, &format!("usage_tasks {task}"))?);
        }
        println!(
            "read model checked: {} daily rows and {} task rows equal to the generated runs ({} runs with usage, \
             {} tokens, ${:.2}; largest cost difference in a row {worst:e} USD)",
            self.daily.len(),
            self.tasks.len(),
            self.total.runs,
            self.total.tokens(),
            self.total.cost_usd
        );
        Ok(())
    }
}

/// A month of tasks and their runs: a triage run first for a tenth of them, a planner's run for a few, then work
/// runs until one succeeds or three have failed (a failure the attempt is given back for does not count).
fn simulate(tasks: u64, seed: u64) -> Vec<GenRun> {
    let mut rng = Rng(seed);
    let mut runs = Vec::with_capacity(tasks as usize * 2);
    let repo_weights: Vec<u32> = REPOS.iter().map(|r| r.1).collect();
    let profile_weights: Vec<u32> = WORK_PROFILES.iter().map(|p| p.2).collect();
    for t in 1..=tasks {
        let Some(task) = std::num::NonZeroU64::new(t).map(TaskId::new) else {
            continue;
        };
        let repo = REPOS[rng.pick(&repo_weights)].0;
        let (profile, meter, _) = WORK_PROFILES[rng.pick(&profile_weights)];
        let mut at = rng.range(0, (DAYS * DAY_MS) as u64 - 1) as i64;
        let mut attempt = 0;
        let mut first: Vec<(Purpose, &'static str, Meter)> = Vec::new();
        if rng.chance(0.10) {
            first.push((Purpose::Triage, "triage", Meter::Claude));
        }
        let planned = rng.chance(0.03);
        if planned {
            first.push((Purpose::Plan, "planner", Meter::Claude));
        }
        let mut counted = 0;
        let mut queue = first.into_iter();
        loop {
            let (purpose, profile, meter) = match queue.next() {
                Some(run) => run,
                None if planned => break,
                None => (Purpose::Work, profile, meter),
            };
            attempt += 1;
            at += rng.range(5_000, 5 * MINUTE_MS as u64) as i64;
            let run = one_run(&mut rng, task, repo, attempt, profile, meter, purpose, at);
            at = run.end_ms;
            let failure = run.failure;
            runs.push(run);
            if !matches!(purpose, Purpose::Work) {
                continue;
            }
            match failure {
                None => break,
                Some(
                    FailureKind::Setup
                    | FailureKind::Workspace
                    | FailureKind::Interrupted
                    | FailureKind::Limited,
                ) => {}
                Some(_) => counted += 1,
            }
            if counted == 3 || attempt >= 6 || rng.chance(0.2) {
                break;
            }
            // Backoff, or a person looking at the last failure.
            at += rng.range(MINUTE_MS as u64, 90 * MINUTE_MS as u64) as i64;
        }
    }
    runs
}

#[allow(clippy::too_many_arguments)]
fn one_run(
    rng: &mut Rng,
    task: TaskId,
    repo: &'static str,
    attempt: u32,
    profile: &'static str,
    meter: Meter,
    purpose: Purpose,
    start_ms: i64,
) -> GenRun {
    use FailureKind::*;
    let failure = match purpose {
        Purpose::Work if rng.chance(0.42) => {
            const KINDS: [(FailureKind, u32); 12] = [
                (Exit, 18),
                (Check, 22),
                (Review, 12),
                (NoChanges, 10),
                (Timeout, 8),
                (Stalled, 5),
                (Limited, 6),
                (Setup, 6),
                (Workspace, 3),
                (Interrupted, 4),
                (Scope, 4),
                (Budget, 2),
            ];
            let weights: Vec<u32> = KINDS.iter().map(|k| k.1).collect();
            Some(KINDS[rng.pick(&weights)].0)
        }
        Purpose::Triage | Purpose::Plan if rng.chance(0.08) => Some(Exit),
        _ => None,
    };
    let (agent_ran, minutes) = match (purpose, failure) {
        (_, Some(Setup | Workspace)) => (false, 0),
        (Purpose::Triage, _) => (true, rng.range(1, 6)),
        (Purpose::Plan, _) => (true, rng.range(4, 20)),
        (Purpose::Work, Some(Timeout)) => (true, 60),
        (Purpose::Work, _) => (true, rng.range(3, 45)),
    };
    let duration_ms = if agent_ran {
        minutes as i64 * MINUTE_MS + rng.range(0, 59_999) as i64
    } else {
        rng.range(2_000, 60_000) as i64
    };
    // What its CLI printed of its spend: nothing when the agent never ran, or died before the totals line.
    let usage = (agent_ran && !(failure.is_some() && rng.chance(0.06))).then(|| {
        let scale = match purpose {
            Purpose::Triage => 0.15,
            Purpose::Plan => 0.6,
            Purpose::Work => minutes.max(1) as f64 / 20.0,
        };
        let n = |rng: &mut Rng, lo: u64, hi: u64| (rng.range(lo, hi) as f64 * scale) as u64;
        let turns = (rng.range(4, 70) as f64 * scale).max(1.0) as u32;
        match meter {
            Meter::Claude => {
                let (input, output) = (n(rng, 8, 900), n(rng, 2_000, 45_000));
                let (read, write) = (n(rng, 150_000, 5_000_000), n(rng, 20_000, 350_000));
                Usage {
                    input_tokens: input,
                    output_tokens: output,
                    cache_read_tokens: read,
                    cache_write_tokens: write,
                    cost_usd: Some(
                        input as f64 * 3e-6
                            + output as f64 * 15e-6
                            + read as f64 * 0.3e-6
                            + write as f64 * 3.75e-6,
                    ),
                    turns,
                }
            }
            Meter::Codex => Usage {
                input_tokens: n(rng, 10_000, 400_000),
                output_tokens: n(rng, 1_500, 40_000),
                cache_read_tokens: n(rng, 100_000, 3_500_000),
                cache_write_tokens: 0,
                cost_usd: None,
                turns,
            },
            Meter::Other => {
                let (input, output) = (n(rng, 5_000, 200_000), n(rng, 1_000, 30_000));
                let (read, write) = (n(rng, 50_000, 2_000_000), n(rng, 5_000, 120_000));
                Usage {
                    input_tokens: input,
                    output_tokens: output,
                    cache_read_tokens: read,
                    cache_write_tokens: write,
                    cost_usd: Some(
                        input as f64 * 1.25e-6
                            + output as f64 * 10e-6
                            + read as f64 * 0.125e-6
                            + write as f64 * 1.25e-6,
                    ),
                    turns,
                }
            }
        }
    });
    let id = RunId(Uuid::from_u64_pair(rng.next(), rng.next()));
    GenRun {
        id,
        task,
        repo,
        attempt,
        profile,
        purpose,
        start_ms,
        end_ms: start_ms + duration_ms,
        heartbeats: rng.range(1, 6) as u32,
        failure,
        usage,
        worker: rng.range(0, 2) as usize,
        tail: rng.range(0, 31) as usize,
    }
}

/// What a failure's `detail` says, roughly as the dispatcher words it.
fn detail(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::Exit => "the agent exited with status 1",
        FailureKind::Check => "the check `cargo test --workspace` exited with status 101",
        FailureKind::Review => {
            "the reviewer asked for changes: the new endpoint has no test for an empty page"
        }
        FailureKind::NoChanges => "the agent exited 0 and changed nothing",
        FailureKind::Timeout => "ran longer than timeout_s = 3600",
        FailureKind::Stalled => "no output for 600 s (no_output_timeout_s)",
        FailureKind::Limited => {
            "the provider's usage limit: 5-hour limit reached, resets 3pm (UTC)"
        }
        FailureKind::Setup => "setup exited with status 1",
        FailureKind::Workspace => "git fetch: could not read from remote repository",
        FailureKind::Interrupted => "pidevops shut down while the agent ran",
        FailureKind::Scope => {
            "changed files outside the task's scope: Cargo.lock, deploy/Dockerfile"
        }
        FailureKind::Budget => "stopped: the repository's daily budget of $200.00 is spent",
        _ => "failed",
    }
}

/// The last 4,096 bytes of an agent's output, as the runner keeps them: Claude Code's stream-json lines, each
/// tail cut from a different end of one long transcript.
fn tails() -> Vec<String> {
    let mut transcript = String::new();
    for k in 0..400 {
        transcript.push_str(&format!(
            r#"{{"type":"assistant","message":{{"id":"msg_01{k:04}","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{{"type":"tool_use","id":"toolu_{k:04}","name":"Bash","input":{{"command":"cargo test -p api -- orders::pagination_{k}"}}}}],"stop_reason":null,"usage":{{"input_tokens":4,"cache_creation_input_tokens":{},"cache_read_input_tokens":{},"output_tokens":{}}}}},"parent_tool_use_id":null,"session_id":"5e1c"}}"#,
            300 + k * 7,
            40_000 + k * 913,
            60 + k % 90
        ));
        transcript.push('\n');
        transcript.push_str(&format!(
            r#"{{"type":"user","message":{{"role":"user","content":[{{"tool_use_id":"toolu_{k:04}","type":"tool_result","content":"running 1 test\ntest orders::pagination_{k} ... ok\n\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 211 filtered out; finished in 0.0{k}s\n","is_error":false}}]}},"parent_tool_use_id":null,"session_id":"5e1c"}}"#
        ));
        transcript.push('\n');
    }
    (0..32)
        .map(|i| {
            let end = transcript.len() - i * 2_917;
            transcript[end - runs::TAIL_BYTES..end].to_owned()
        })
        .collect()
}
