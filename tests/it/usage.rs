//! What agents spend, end to end: fake agents print what the real CLIs print (Claude Code's stream-json with its
//! `result` line, Codex's `exec --json` events, a custom agent's line read by a pattern), the real dispatcher
//! reads it from the output as it streams, the run's outcome records it exactly, the `usage` read model rolls it
//! up per day, repository, profile and task, and `/api/usage` and `/metrics` show it. A failed attempt's spend
//! counts too; a tool's output that imitates a usage line does not. A usage line past the bounds (u64::MAX
//! tokens, 1.7e308 dollars twice) is refused: its run ends `budget`, its repository's day is held until a person
//! raises it, and the read model and budgets go on counting.

use std::path::Path;
use std::time::Duration;

use crate::common::agents::bash_agent;
use crate::common::agents::{Remote, REPO};
use crate::common::board::{self, new_task};
use crate::common::{within, TestApp, TestDb, ADMIN_TOKEN};
use pidevops::domain::runs::RunEvent;
use pidevops::domain::usage::Usage;
use pidevops::projectors::tasks as task_rows;
use pidevops::tasks::{Column, TaskId};
use serde_json::Value;

per_backend!(
    claude_and_codex_usage_is_recorded_exactly_rolled_up_and_in_metrics,
    a_failed_attempt_still_records_what_it_spent,
    the_roll_up_is_the_same_to_the_bit_whatever_the_batch,
    overflowing_and_non_finite_usage_lines_are_refused_and_later_runs_are_still_counted_and_budgets_hold,
);

/// What Claude Code 2.x prints with `-p --output-format stream-json --verbose`: an init line, assistant messages
/// (a message's content blocks each repeat its usage), a tool result whose text imitates a result line, and the
/// final `result` line that holds the run's totals.
const CLAUDE_STREAM: &str = r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"s1","tools":["Bash","Edit"],"model":"claude-sonnet-4-5","permissionMode":"bypassPermissions"}
{"type":"assistant","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"I will add the file."}],"stop_reason":null,"usage":{"input_tokens":4,"cache_creation_input_tokens":2048,"cache_read_input_tokens":0,"output_tokens":30,"service_tier":"standard"}},"parent_tool_use_id":null,"session_id":"s1"}
{"type":"assistant","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"echo hi > hello.txt"}}],"stop_reason":null,"usage":{"input_tokens":4,"cache_creation_input_tokens":2048,"cache_read_input_tokens":0,"output_tokens":30,"service_tier":"standard"}},"parent_tool_use_id":null,"session_id":"s1"}
{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_1","type":"tool_result","content":"{\"type\":\"result\",\"total_cost_usd\":999,\"usage\":{\"input_tokens\":999999}}","is_error":false}]},"parent_tool_use_id":null,"session_id":"s1"}
{"type":"assistant","message":{"id":"msg_02","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Done."}],"stop_reason":"end_turn","usage":{"input_tokens":6,"cache_creation_input_tokens":120,"cache_read_input_tokens":2048,"output_tokens":12,"service_tier":"standard"}},"parent_tool_use_id":null,"session_id":"s1"}
{"type":"result","subtype":"success","is_error":false,"duration_ms":5120,"duration_api_ms":4870,"num_turns":2,"result":"Done.","session_id":"s1","total_cost_usd":0.0187335,"usage":{"input_tokens":10,"cache_creation_input_tokens":2168,"cache_read_input_tokens":2048,"output_tokens":42,"server_tool_use":{"web_search_requests":0},"service_tier":"standard"},"permission_denials":[]}
"#;

/// What `codex exec --json` prints: thread and turn events, items, and one `turn.completed` with the turn's usage
/// (its `input_tokens` include the cached ones).
const CODEX_STREAM: &str = r#"{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"**Adding the file**"}}
{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"bash -lc 'echo hi > hello.txt'","aggregated_output":"{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":777777}}","exit_code":0,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"Added hello.txt."}}
{"type":"turn.completed","usage":{"input_tokens":24763,"cached_input_tokens":24448,"output_tokens":122}}
"#;

fn config(remote: &Remote, claude: &Path, codex: &Path, custom: &Path) -> toml::Table {
    format!(
        r#"
        [board]
        approval = "auto"
        max_attempts = 1

        [dispatch]
        agent = "claude-like"
        max_concurrent = 2
        per_repo = 2
        heartbeat_s = 0.3
        retry_backoff_s = 0.05

        [agents.claude-like]
        command = ["{claude}", "{{prompt_file}}"]
        usage = "claude"

        [agents.codex-like]
        command = ["{codex}", "{{prompt_file}}"]
        usage = "codex"

        [agents.custom]
        command = ["{custom}", "{{prompt_file}}"]
        usage_pattern = 'spent (?P<input>\d+) in, (?P<output>\d+) out, \$(?P<cost>[0-9.]+)'

        [repos."{REPO}"]
        url = "{url}"
        "#,
        claude = claude.display(),
        codex = codex.display(),
        custom = custom.display(),
        url = remote.url(),
    )
    .parse()
    .unwrap()
}

/// An agent that prints `stream` (as its CLI would), makes a change, and exits with `status`. The stream is in
/// the script itself: a contained agent sees nothing of the test's directory but its own program.
fn printing_agent(dir: &Path, name: &str, stream: &str, status: i32) -> std::path::PathBuf {
    bash_agent(
        dir,
        name,
        &format!(
            "cat <<'STREAM'\n{stream}STREAM\necho \"$RANDOM\" > \"hello-$$.txt\"\nexit {status}"
        ),
    )
}

async fn settled(app: &TestApp, id: TaskId, column: Column) {
    within(
        Duration::from_secs(60),
        &format!("{id} in {column:?}"),
        || async {
            app.project().await;
            task_rows::get(app.state.log.store(), id)
                .await
                .unwrap()
                .is_some_and(|row| row.column == column)
        },
    )
    .await;
}

async fn usage_report(app: &TestApp, query: &str) -> Value {
    app.project().await;
    let response = app
        .client
        .get(app.url(&format!("/api/usage{query}")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

async fn claude_and_codex_usage_is_recorded_exactly_rolled_up_and_in_metrics(db: TestDb) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let claude = printing_agent(scratch.path(), "claude.sh", CLAUDE_STREAM, 0);
    let codex = printing_agent(scratch.path(), "codex.sh", CODEX_STREAM, 0);
    let custom = printing_agent(
        scratch.path(),
        "custom.sh",
        "working\nspent 100 in, 7 out, $0.25\nspent 1 in, 1 out, $0.5\n",
        0,
    );
    let app = TestApp::dispatching(
        &db,
        config(&remote, &claude, &codex, &custom),
        &scratch.path().join("ws"),
    )
    .await;
    let by_claude = new_task("Add hello with claude")
        .agent("claude-like")
        .create(&app)
        .await;
    let by_codex = new_task("Add hello with codex")
        .agent("codex-like")
        .create(&app)
        .await;
    let by_custom = new_task("Add hello with a custom agent")
        .agent("custom")
        .create(&app)
        .await;
    for id in [by_claude, by_codex, by_custom] {
        settled(&app, id, Column::InReview).await;
    }

    // The outcome records what the CLI said, exactly: Claude's result line (not the per-message estimate, not
    // the tool's imitation), Codex's turn with cached input counted as cache reads.
    let claude_usage = board::outcomes(&app, by_claude).await;
    assert_eq!(claude_usage.len(), 1);
    let recorded = claude_usage[0].usage().expect("usage on the outcome");
    assert_eq!(
        (recorded.repo.as_str(), recorded.profile.as_str()),
        (REPO, "claude-like")
    );
    assert_eq!(
        recorded.usage,
        Usage {
            input_tokens: 10,
            output_tokens: 42,
            cache_read_tokens: 2048,
            cache_write_tokens: 2168,
            cost_usd: Some(0.0187335),
            turns: 2,
        }
    );
    let codex_usage = board::outcomes(&app, by_codex).await;
    assert_eq!(
        codex_usage[0].usage().unwrap().usage,
        Usage {
            input_tokens: 315,
            output_tokens: 122,
            cache_read_tokens: 24448,
            cache_write_tokens: 0,
            cost_usd: None,
            turns: 1,
        }
    );
    let custom_usage = board::outcomes(&app, by_custom).await;
    assert_eq!(
        custom_usage[0].usage().unwrap().usage,
        Usage {
            input_tokens: 101,
            output_tokens: 8,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            cost_usd: Some(0.75),
            turns: 0,
        }
    );

    // Rolled up: one row per profile today, their total, and each task's.
    let report = usage_report(&app, &format!("?days=1&repo={REPO}")).await;
    let days = report["days"].as_array().unwrap();
    assert_eq!(days.len(), 3, "{report:#}");
    let row = |profile: &str| {
        days.iter()
            .find(|d| d["profile"] == profile)
            .unwrap_or_else(|| panic!("no row for {profile}: {report:#}"))
            .clone()
    };
    assert_eq!(row("claude-like")["cache_write_tokens"], 2168);
    assert_eq!(row("claude-like")["runs"], 1);
    assert_eq!(row("codex-like")["input_tokens"], 315);
    assert_eq!(row("codex-like")["costed_runs"], 0);
    assert_eq!(report["total"]["runs"], 3);
    assert_eq!(report["total"]["output_tokens"], 42 + 122 + 8);
    let total_cost = report["total"]["cost_usd"].as_f64().unwrap();
    assert!(
        (total_cost - (0.0187335 + 0.75)).abs() < 1e-9,
        "{total_cost}"
    );
    let tasks = report["tasks"].as_array().unwrap();
    assert_eq!(
        tasks[0]["task_id"],
        by_custom.to_string(),
        "most costly first: {report:#}"
    );

    // /metrics: counters from the read model.
    let metrics = app.metrics().await;
    let series = |name: &str, profile: &str, kind: Option<&str>| match kind {
        Some(kind) => format!("{name}{{repo=\"{REPO}\",profile=\"{profile}\",kind=\"{kind}\"}}"),
        None => format!("{name}{{repo=\"{REPO}\",profile=\"{profile}\"}}"),
    };
    assert_eq!(
        metric(
            &metrics,
            &series(
                "pidevops_agent_tokens_total",
                "claude-like",
                Some("cache_read")
            )
        ),
        Some(2048.0),
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            &series("pidevops_agent_tokens_total", "codex-like", Some("input"))
        ),
        Some(315.0)
    );
    assert_eq!(
        metric(
            &metrics,
            &series("pidevops_agent_cost_usd_total", "custom", None)
        ),
        Some(0.75)
    );
    assert!(metrics.contains("# TYPE pidevops_agent_cost_usd_total counter"));

    // Bad bounds are refused, precisely.
    let refused = app
        .client
        .get(app.url("/api/usage?days=0"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    assert_eq!(refused.json::<Value>().await.unwrap()["error"], "bad_days");
    app.stop().await;
}

async fn a_failed_attempt_still_records_what_it_spent(db: TestDb) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let claude = printing_agent(scratch.path(), "claude.sh", CLAUDE_STREAM, 3);
    let app = TestApp::dispatching(
        &db,
        config(&remote, &claude, &claude, &claude),
        &scratch.path().join("ws"),
    )
    .await;
    let id = new_task("Fail but spend")
        .agent("claude-like")
        .create(&app)
        .await;
    within(Duration::from_secs(60), "the attempt failed", || async {
        !board::outcomes(&app, id).await.is_empty()
    })
    .await;
    let outcome = board::outcomes(&app, id).await.remove(0);
    assert!(matches!(outcome, RunEvent::Failed { .. }), "{outcome:?}");
    assert_eq!(outcome.usage().unwrap().usage.cost_usd, Some(0.0187335));
    let report = usage_report(&app, "?days=1").await;
    let task_row = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task_id"] == id.to_string())
        .cloned()
        .unwrap_or_else(|| panic!("{id} in the report: {report:#}"));
    assert_eq!(task_row["input_tokens"], 10);
    app.stop().await;
}

/// Appends a run's event as the dispatcher's `RunWriter` does (stream, version, keys).
async fn record(log: &pidevops::eventlog::EventLog, event: &RunEvent, version: i64) {
    use pidevops::domain::runs;
    use pidevops::domain::{EventType, NewEvent, Source};
    let key = if event.is_terminal() {
        runs::end_key(event.run())
    } else {
        format!("run:{}:{version}", event.run())
    };
    let mut new = NewEvent::new(
        Source::Pidevops,
        EventType::from_stored(event.kind().to_owned()),
        key,
        "application/json",
        bytes::Bytes::from(serde_json::to_vec(event).unwrap()),
    );
    new.stream = Some((runs::stream(event.run()), version));
    new.occurred_at = event.at();
    log.append(new).await.unwrap();
}

/// Everything the read model holds: every day's rows and every task's.
async fn read_model(
    store: &pidevops::eventlog::EventStore,
) -> (
    Vec<pidevops::projectors::usage::DayRow>,
    Vec<pidevops::projectors::usage::TaskUsageRow>,
) {
    use pidevops::projectors::usage;
    let days = usage::days(store, &usage::UsageFilter::default())
        .await
        .unwrap();
    let mut tasks = usage::top_tasks(store, None, 10_000).await.unwrap();
    tasks.sort_by(|a, b| a.task_id.cmp(&b.task_id));
    (days, tasks)
}

/// The projector adds a batch's outcomes in memory and writes each row once: one event a transaction (what an
/// upsert per outcome did), batches of 25 and a rebuild in batches of 40 read ahead must leave the very same rows,
/// the cost's doubles equal to the bit (a batch summed first, then added to its stored row, would not be), and
/// those rows must be the runs' own sums in log order.
async fn the_roll_up_is_the_same_to_the_bit_whatever_the_batch(db: TestDb) {
    use chrono::{Duration as Days, TimeZone, Utc};
    use pidevops::domain::runs::FailureKind;
    use pidevops::domain::usage::RunUsage;
    use pidevops::projectors::usage::UsageProjector;
    use pidevops::projectors::{Projection, Step};
    use pidevops::tasks::RunId;
    use std::sync::Arc;

    let store = pidevops::eventlog::EventStore::connect(&db.url, 8)
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let (log, _appender) =
        pidevops::eventlog::EventLog::start(store.clone(), Duration::from_secs(30), stop.clone());

    let base = Utc.with_ymd_and_hms(2026, 11, 29, 22, 0, 0).unwrap();
    let mut expected_cost = std::collections::BTreeMap::<String, f64>::new();
    for i in 0..90u64 {
        let at = base + Days::minutes(37 * i as i64);
        let run = RunId(uuid::Uuid::from_u128(0xfeed_0000 + u128::from(i)));
        let task: TaskId = format!("T-{}", 1 + i % 5).parse().unwrap();
        let repo = ["acme/api", "acme/web"][(i % 2) as usize];
        let profile = ["claude", "codex", "pi"][(i % 3) as usize];
        let started = RunEvent::Started {
            at,
            run,
            task,
            attempt: 1,
            profile: profile.into(),
            worker: "w".into(),
            log: "/l".into(),
        };
        record(&log, &started, 1).await;
        // Costs whose sums depend on their order: 0.1 + 0.2 + 0.3 is not 0.1 + (0.2 + 0.3).
        let cost = (profile != "codex").then_some([0.1, 0.2, 0.3, 0.7][(i % 4) as usize]);
        let usage = (i % 11 != 5).then(|| RunUsage {
            repo: repo.into(),
            profile: profile.into(),
            usage: Usage {
                input_tokens: 1_000 + i,
                output_tokens: 200 + i,
                cache_read_tokens: 50_000 * i,
                cache_write_tokens: 7 * i,
                cost_usd: cost,
                turns: (i % 9) as u32,
            },
            refused: None,
        });
        if let Some(c) = usage.as_ref().and_then(|u| u.usage.cost_usd) {
            *expected_cost.entry(task.to_string()).or_default() += c;
        }
        let end = at + Days::minutes(30);
        let outcome = if i % 3 == 0 {
            RunEvent::Failed {
                at: end,
                run,
                task,
                attempt: 1,
                kind: FailureKind::Check,
                detail: "check failed".into(),
                duration_s: 1800.0,
                tail: "error".into(),
                usage,
                until: None,
                reviewer_usage: None,
            }
        } else {
            RunEvent::Succeeded {
                at: end,
                run,
                task,
                attempt: 1,
                branch: task.branch(),
                commit: "c".repeat(40),
                duration_s: 1800.0,
                tail: "ok".into(),
                report: Default::default(),
                usage,
                reviewer_usage: None,
            }
        };
        record(&log, &outcome, 2).await;
    }

    let projection = |batch| Projection::with_batch(store.clone(), Arc::new(UsageProjector), batch);
    // One event a transaction, through `apply`.
    let one = projection(1);
    one.reset().await.unwrap();
    while !matches!(one.step(1).await.unwrap(), Step::CaughtUp { .. }) {}
    let by_one = read_model(&store).await;
    // Batches of 25 events, through `apply`: a row is stored and a batch adds several outcomes to it.
    let many = projection(25);
    many.reset().await.unwrap();
    while !matches!(many.step(25).await.unwrap(), Step::CaughtUp { .. }) {}
    let by_many = read_model(&store).await;
    // A rebuild in batches of 40, each page decoded ahead (`prepare`).
    projection(40).rebuild(|_| {}).await.unwrap();
    let rebuilt = read_model(&store).await;

    assert!(by_one.0.len() > 6 && by_one.1.len() == 5, "{by_one:?}");
    // `PartialEq` on the rows compares the cost's doubles exactly.
    assert_eq!(by_many, by_one);
    assert_eq!(rebuilt, by_one);
    for task in &by_one.1 {
        assert_eq!(
            task.spent.cost_usd.to_bits(),
            expected_cost[&task.task_id].to_bits(),
            "{}",
            task.task_id
        );
    }
    stop.cancel();
}

/// A Codex-like agent: with "Overflow" in its prompt, a `turn.completed` claiming u64::MAX input tokens; else what
/// `codex exec --json` prints.
const CODEX_OR_OVERFLOW: &str = r#"if grep -q "Overflow" "$1"; then
echo '{"type":"turn.completed","usage":{"input_tokens":18446744073709551615,"cached_input_tokens":0,"output_tokens":1}}'
else
cat <<'STREAM'
{"type":"thread.started","thread_id":"t"}
{"type":"turn.completed","usage":{"input_tokens":24763,"cached_input_tokens":24448,"output_tokens":122}}
STREAM
fi
echo "$RANDOM" > "hello-$$.txt""#;

/// An OpenCode-like agent: with "Infinite" in its prompt, two steps of $1.7e308 each (their sum is +inf); else
/// one step of 25 cents.
const OPENCODE_OR_INFINITE: &str = r#"if grep -q "Infinite" "$1"; then
for i in 1 2; do echo '{"type":"step_finish","part":{"tokens":{"input":1,"output":1,"reasoning":0,"cache":{"read":0,"write":0}},"cost":1.7e308}}'; done
else
echo '{"type":"step_finish","part":{"tokens":{"input":100,"output":20,"reasoning":0,"cache":{"read":0,"write":0}},"cost":0.25}}'
fi
echo "$RANDOM" > "hello-$$.txt""#;

async fn ended(app: &TestApp, id: TaskId) -> RunEvent {
    within(
        Duration::from_secs(60),
        &format!("{id}'s run ends"),
        || async { !board::outcomes(app, id).await.is_empty() },
    )
    .await;
    board::outcomes(app, id).await.remove(0)
}

async fn overflowing_and_non_finite_usage_lines_are_refused_and_later_runs_are_still_counted_and_budgets_hold(
    db: TestDb,
) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let codex = bash_agent(scratch.path(), "codex.sh", CODEX_OR_OVERFLOW);
    let opencode = bash_agent(scratch.path(), "opencode.sh", OPENCODE_OR_INFINITE);
    let mut file = config(&remote, &codex, &codex, &opencode);
    let custom = file["agents"]["custom"].as_table_mut().unwrap();
    custom.remove("usage_pattern");
    custom.insert("usage".into(), toml::Value::String("opencode".into()));
    // The repository's day may spend 25,000 tokens: one normal Codex run (24,885) and a bit.
    file.insert(
        "budgets".into(),
        toml::toml! { repo_daily_tokens = 25000 }.into(),
    );
    let app = TestApp::dispatching(&db, file, &scratch.path().join("ws")).await;

    // The attacks, one at a time: each run's figures refused, the run over budget (fail closed), its task flagged,
    // nothing pushed; and the repository's day held (what it spent is unknown) until a person raises it. A raise
    // lifts what was refused before it, not a refusal after it.
    let overflow = new_task("Overflow the books")
        .agent("codex-like")
        .create(&app)
        .await;
    refused(&app, &remote, overflow, "18446744073709551615").await;
    let infinite = new_task("Infinite cost").agent("custom").create(&app).await;
    held_until_raised(&app, infinite).await;
    refused(&app, &remote, infinite, "1.7e+308").await;

    // Later runs of the same profiles, the same day, are counted exactly (once a person raised the day again).
    let codex_run = new_task("Add hello").agent("codex-like").create(&app).await;
    held_until_raised(&app, codex_run).await;
    settled(&app, codex_run, Column::InReview).await;
    let opencode_run = new_task("Add hello too").agent("custom").create(&app).await;
    let outcome = ended(&app, opencode_run).await;
    assert_eq!(
        outcome.usage().unwrap().usage.cost_usd,
        Some(0.25),
        "{outcome:?}"
    );
    let report = usage_report(&app, "?days=1").await;
    let row = |id: TaskId| {
        report["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["task_id"] == id.to_string())
            .cloned()
            .unwrap_or_else(|| panic!("{id} in the report: {report:#}"))
    };
    assert_eq!(row(codex_run)["input_tokens"], 315);
    assert_eq!(row(codex_run)["cache_read_tokens"], 24448);
    assert_eq!(row(opencode_run)["cost_usd"], 0.25);
    let day = |profile: &str| {
        report["days"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["profile"] == profile)
            .cloned()
            .unwrap_or_else(|| panic!("{profile} in the report: {report:#}"))
    };
    // The refused runs count as runs that spent nothing readable; the cost is a number, never null.
    assert_eq!(day("codex-like")["input_tokens"], 315, "{report:#}");
    assert_eq!(day("codex-like")["runs"], 2, "{report:#}");
    // Each refused run is counted as one, so budgets hold its scope.
    assert_eq!(day("codex-like")["refused_runs"], 1, "{report:#}");
    assert_eq!(day("custom")["refused_runs"], 1, "{report:#}");
    assert_eq!(report["total"]["refused_runs"], 2, "{report:#}");
    assert_eq!(row(codex_run)["refused_runs"], 0, "{report:#}");
    assert_eq!(day("custom")["cost_usd"], 0.25, "{report:#}");
    assert_eq!(report["total"]["output_tokens"], 122 + 20, "{report:#}");
    let metrics = app.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            &format!("pidevops_agent_cost_usd_total{{repo=\"{REPO}\",profile=\"custom\"}}")
        ),
        Some(0.25),
        "{metrics}"
    );

    // The budget holds: the repository's day is spent (24,885 + 120 tokens of 25,000 and the two raises' 2), the
    // next task waits.
    let held = new_task("Add hello again")
        .agent("codex-like")
        .create(&app)
        .await;
    board::dispatcher_ticks(&app, 3).await;
    assert!(
        board::outcomes(&app, held).await.is_empty(),
        "started in a spent budget"
    );
    let (_, health) = app.health().await;
    let problems = health["problems"].to_string();
    assert!(problems.contains("budget"), "{problems}");
    app.stop().await;
}

/// `id`'s run ended over budget because its usage figures (`says`) were refused; its task is flagged.
async fn refused(app: &TestApp, remote: &Remote, id: TaskId, says: &str) {
    let outcome = ended(app, id).await;
    let RunEvent::Failed { kind, detail, .. } = &outcome else {
        panic!("{id} failed: {outcome:?}");
    };
    assert_eq!(kind.as_str(), "budget", "{detail}");
    assert!(
        detail.contains("usage figures were refused") && detail.contains(says),
        "{detail}"
    );
    let usage = outcome.usage().expect("what it spent is on the outcome");
    assert!(
        usage.refused.as_deref().is_some_and(|r| r.contains(says)),
        "{usage:?}"
    );
    assert!(usage.usage.out_of_bounds().is_none(), "{usage:?}");
    assert!(
        remote.branch(&format!("pidevops/{id}")).is_none(),
        "nothing pushed for {id}"
    );
    settled_flagged(app, id).await;
}

/// `id` is held across dispatcher ticks because its repository's day holds a run whose figures were refused
/// (`/health` says so), until a person raises that budget (by one token): then it starts.
async fn held_until_raised(app: &TestApp, id: TaskId) {
    board::dispatcher_ticks(app, 3).await;
    assert!(
        board::outcomes(app, id).await.is_empty(),
        "{id} started in a day whose figures were refused"
    );
    let (_, health) = app.health().await;
    let problems = health["problems"].to_string();
    assert!(
        problems.contains(&format!("usage figures refused for {REPO} on ")),
        "{problems}"
    );
    let raised = app
        .client
        .post(app.url("/api/budgets/raise"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({"scope": "repo", "repo": REPO, "tokens": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(raised.status(), 200);
    within(Duration::from_secs(60), &format!("{id} starts"), || async {
        app.project().await;
        task_rows::get(app.state.log.store(), id)
            .await
            .unwrap()
            .is_some_and(|row| row.column != Column::Todo)
    })
    .await;
}

async fn settled_flagged(app: &TestApp, id: TaskId) {
    within(
        Duration::from_secs(60),
        &format!("{id} flagged"),
        || async {
            app.project().await;
            task_rows::get(app.state.log.store(), id)
                .await
                .unwrap()
                .is_some_and(|row| row.needs_human)
        },
    )
    .await;
}
