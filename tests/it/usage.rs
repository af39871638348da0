//! What agents spend, end to end: fake agents print what the real CLIs print (Claude Code's stream-json with its
//! `result` line, Codex's `exec --json` events, a custom agent's line read by a pattern), the real dispatcher
//! reads it from the output as it streams, the run's outcome records it exactly, the `usage` read model rolls it
//! up per day, repository, profile and task, and `/api/usage` and `/metrics` show it. A failed attempt's spend
//! counts too; a tool's output that imitates a usage line does not.

use std::path::Path;
use std::time::Duration;

use crate::common::agents::{Remote, REPO};
use crate::common::{within, TestApp, TestDb, ADMIN_TOKEN};
use crate::plans::bash_agent;
use pidevops::board::Draft;
use pidevops::domain::runs::RunEvent;
use pidevops::domain::usage::Usage;
use pidevops::projectors::tasks as task_rows;
use pidevops::tasks::{AgentName, Column, Links, RepoName, Spec, TaskId};
use serde_json::Value;

per_backend!(
    claude_and_codex_usage_is_recorded_exactly_rolled_up_and_in_metrics,
    a_failed_attempt_still_records_what_it_spent,
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

async fn spawn(db: &TestDb, file: toml::Table, root: &Path) -> TestApp {
    let mut settings = crate::common::settings(db);
    settings.file = pidevops::config::FileConfig::try_from(file).unwrap();
    settings.workspace_root = root.to_owned();
    TestApp::spawn(settings).await
}

async fn task(app: &TestApp, text: &str, agent: &str) -> TaskId {
    let mut draft = Draft::new(
        REPO.parse::<RepoName>().unwrap(),
        Spec::new(text, "", "it is written").unwrap(),
        Links::default(),
    );
    draft.agent = Some(agent.parse::<AgentName>().unwrap());
    let key = format!("test:{}", uuid::Uuid::now_v7());
    app.state
        .board
        .create(draft, &key, "api", None)
        .await
        .unwrap()
        .0
        .task
        .id()
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

/// The outcome events of a task's runs.
async fn outcomes(app: &TestApp, id: TaskId) -> Vec<RunEvent> {
    app.all_events()
        .await
        .into_iter()
        .filter(|e| {
            e.event_type.starts_with("run.")
                && e.stream.as_deref().is_some_and(|s| s.starts_with("run:"))
        })
        .filter_map(|e| serde_json::from_slice::<RunEvent>(&e.body).ok())
        .filter(|e| e.task() == id && e.is_terminal())
        .collect()
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
    let app = spawn(
        &db,
        config(&remote, &claude, &codex, &custom),
        &scratch.path().join("ws"),
    )
    .await;
    let by_claude = task(&app, "Add hello with claude", "claude-like").await;
    let by_codex = task(&app, "Add hello with codex", "codex-like").await;
    let by_custom = task(&app, "Add hello with a custom agent", "custom").await;
    for id in [by_claude, by_codex, by_custom] {
        settled(&app, id, Column::InReview).await;
    }

    // The outcome records what the CLI said, exactly: Claude's result line (not the per-message estimate, not
    // the tool's imitation), Codex's turn with cached input counted as cache reads.
    let claude_usage = outcomes(&app, by_claude).await;
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
    let codex_usage = outcomes(&app, by_codex).await;
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
    let custom_usage = outcomes(&app, by_custom).await;
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
    let app = spawn(
        &db,
        config(&remote, &claude, &claude, &claude),
        &scratch.path().join("ws"),
    )
    .await;
    let id = task(&app, "Fail but spend", "claude-like").await;
    within(Duration::from_secs(60), "the attempt failed", || async {
        !outcomes(&app, id).await.is_empty()
    })
    .await;
    let outcome = outcomes(&app, id).await.remove(0);
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
