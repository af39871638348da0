//! The log: the month cut at `--events`, written to the database in bulk (setup, not measured).

use super::*;

pub(crate) struct Log {
    pub(crate) runs: Vec<GenRun>,
    /// The log in position order (position = index + 1).
    pub(crate) events: Vec<GenEvent>,
    pub(crate) tasks: u64,
    pub(crate) outcomes: usize,
    pub(crate) expected: Expected,
    pub(crate) tails: Vec<String>,
    pub(crate) plans: Vec<PlanDocument>,
    pub(crate) base: DateTime<Utc>,
}

impl Log {
    /// The first `events` events of a month of runs. The number of tasks is tuned until the month holds just
    /// over `events`, so the cut falls at its end and every day of it has runs.
    pub(crate) fn generate(events: usize, seed: u64) -> anyhow::Result<Log> {
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
    pub(crate) fn body(&self, event: &GenEvent) -> anyhow::Result<RunEvent> {
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
    pub(crate) async fn matches(&self, store: &EventStore) -> anyhow::Result<bool> {
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
    pub(crate) async fn fill(&self, store: &EventStore) -> anyhow::Result<()> {
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
