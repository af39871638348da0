//! The month of runs: a seeded generator, the repositories and profiles, each run as the dispatcher records it.

use super::*;

/// SplitMix64: small, fast, and the same log on every machine for a seed.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// In `lo..=hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    pub(crate) fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// An index into `weights`, drawn by weight.
    pub(crate) fn pick(&mut self, weights: &[u32]) -> usize {
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
pub(crate) const REPOS: [(&str, u32); 12] = [
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
pub(crate) enum Meter {
    /// Claude Code: a cost, cache writes, a handful of uncached input tokens.
    Claude,
    /// Codex: no cost, no cache writes.
    Codex,
    /// pi and OpenCode: a cost, every kind of token.
    Other,
}

/// The profiles a work run uses, with how often.
pub(crate) const WORK_PROFILES: [(&str, Meter, u32); 4] = [
    ("claude", Meter::Claude, 55),
    ("codex", Meter::Codex, 28),
    ("opencode", Meter::Other, 10),
    ("pi", Meter::Other, 7),
];

#[derive(Clone, Copy)]
pub(crate) enum Purpose {
    Work,
    Triage,
    Plan,
}

/// One run as generated: enough to write its events.
pub(crate) struct GenRun {
    pub(crate) id: RunId,
    pub(crate) task: TaskId,
    pub(crate) repo: &'static str,
    pub(crate) attempt: u32,
    pub(crate) profile: &'static str,
    pub(crate) purpose: Purpose,
    pub(crate) start_ms: i64,
    pub(crate) end_ms: i64,
    pub(crate) heartbeats: u32,
    /// `None`: succeeded (or proposed, for triage and plan runs).
    pub(crate) failure: Option<FailureKind>,
    pub(crate) usage: Option<Usage>,
    pub(crate) worker: usize,
    pub(crate) tail: usize,
}

/// One event of the log: a run's `version`th event at `at_ms`.
#[derive(Clone, Copy)]
pub(crate) struct GenEvent {
    pub(crate) at_ms: i64,
    pub(crate) run: u32,
    pub(crate) version: u32,
}

/// A month of tasks and their runs: a triage run first for a tenth of them, a planner's run for a few, then work
/// runs until one succeeds or three have failed (a failure the attempt is given back for does not count).
pub(crate) fn simulate(tasks: u64, seed: u64) -> Vec<GenRun> {
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
pub(crate) fn one_run(
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
pub(crate) fn detail(kind: FailureKind) -> &'static str {
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
pub(crate) fn tails() -> Vec<String> {
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
