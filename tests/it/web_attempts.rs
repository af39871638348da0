//! A task's page shows its attempts' work: each attempt's diff (recorded by our git from commit ids we made) and its
//! agent's log as turns and tool calls, all of it agent-written and rendered inert; giant diffs and logs cut and
//! said so; run files read only under this machine's workspace root. Per backend, through the real server and real
//! dispatch (git remotes, agent scripts).

use std::time::Duration;

use crate::common::{within, TestApp, TestDb};
use crate::web::{get, sign_in, task};
use pidevops::tasks::{Links, RunId};

per_backend!(
    a_finished_attempt_shows_its_diff_and_transcript_inert,
    a_giant_diff_and_log_are_cut_and_the_page_says_so,
    a_run_elsewhere_or_outside_the_workspace_root_is_not_read,
    stdout_and_stderr_are_shown_in_the_order_written_each_line_whole,
    a_failed_runs_timeline_entry_reads_as_its_error_the_json_collapsed,
);

/// A task's page shows what its attempt changed (files with +/−, the patch by line kind) and what its agent said
/// (Claude's stream-json as turns and tool calls), all of it agent-written and all of it inert: no `<script>`, no
/// element from a file name, no `javascript:` link.
async fn a_finished_attempt_shows_its_diff_and_transcript_inert(db: TestDb) {
    let (app, rig, id) = crate::web::app_with_agent_task(
        &db,
        TestApp::with_agent_from(|dir, _| crate::common::agents::claude_like_agent(dir)),
        "Keep the query string",
        "test:diff",
    )
    .await;
    let cookie = sign_in(&app).await;
    let page = format!("/tasks/{id}");
    within(
        Duration::from_secs(60),
        "the succeeded attempt on its page",
        || async {
            get(&app, &page, &cookie)
                .await
                .1
                .contains(r#"data-state="succeeded">"#)
        },
    )
    .await;
    let (status, html) = get(&app, &page, &cookie).await;
    assert_eq!(status, 200);

    // The diff: from the base our git recorded to the commit on record.
    let runs = pidevops::projectors::runs::query(
        app.state.log.store(),
        pidevops::projectors::runs::Which::Task(&id.to_string()),
    )
    .await
    .unwrap();
    let run = &runs[0];
    let commit = run.commit_sha.clone().unwrap();
    let dir = std::path::Path::new(run.log_path.as_deref().unwrap())
        .parent()
        .unwrap()
        .to_owned();
    let record: pidevops::dispatch::workspace::diff::DiffRecord =
        serde_json::from_slice(&std::fs::read(dir.join("diff.json")).unwrap()).unwrap();
    assert_eq!(record.commit, commit);
    assert_eq!(Some(record.base.clone()), rig.remote.branch("main"));
    assert!(
        html.contains(&format!("{}..{}", &record.base[..7], &commit[..7])),
        "{html}"
    );
    for (file, added) in [("README.md", "+1"), ("redirect.rs", "+2")] {
        let row = html
            .split("<tr>")
            .find(|r| r.contains(&format!("<code>{file}</code>")))
            .unwrap_or_else(|| panic!("{file} in the files: {html}"));
        assert!(
            row.contains(&format!(r#"<td class="added">{added}</td>"#)),
            "{row}"
        );
    }
    assert!(
        html.contains("<ins>+The redirect keeps the query string.</ins>"),
        "{html}"
    );
    assert!(
        html.contains(r#"<span class="del">-</span>"#) || html.contains(r#"<span class="hunk">@@"#)
    );
    // The log: turns and tool calls, the result, and the raw stderr line kept.
    assert!(
        html.contains(r#"<span class="tool-name">Bash</span>"#),
        "{html}"
    );
    assert!(
        html.contains("session started · model claude-sonnet-4-5"),
        "{html}"
    );
    assert!(html.contains("success · 2 turns"), "{html}");
    assert!(html.contains("a line of stderr"), "{html}");

    // Inert: every agent-written value is text.
    assert_eq!(
        html.matches("<script").count(),
        1,
        "only our own script: {html}"
    );
    assert!(!html.contains("<img"), "{html}");
    assert!(
        !html.to_lowercase().contains("href=\"javascript:"),
        "{html}"
    );
    for escaped in [
        "&lt;script&gt;alert('said')&lt;/script&gt;",
        "&lt;img src=x onerror=alert(2)&gt;",
        "&lt;a href=&quot;javascript:alert(3)&quot;&gt;",
        "&lt;script&gt;alert(&quot;patch&quot;)&lt;/script&gt;",
        "&lt;img src=x onerror=alert(4)&gt;.txt",
        "&lt;script&gt;alert('raw')&lt;/script&gt;",
    ] {
        assert!(html.contains(escaped), "{escaped} in {html}");
    }
    app.stop().await;
}

/// An agent that writes megabytes (a generated file, a chatty build) costs the page a bounded read: the patch is
/// kept to its cap and the log to its end, and the page says what it left out.
async fn a_giant_diff_and_log_are_cut_and_the_page_says_so(db: TestDb) {
    let (app, _rig, id) = crate::web::app_with_agent_task(
        &db,
        TestApp::with_agent("chatty.sh", "seq 1 200000; seq 1 300000 > numbers.txt"),
        "Generate the numbers",
        "test:giant",
    )
    .await;
    let cookie = sign_in(&app).await;
    let page = format!("/tasks/{id}");
    within(Duration::from_secs(60), "the succeeded attempt", || async {
        get(&app, &page, &cookie)
            .await
            .1
            .contains(r#"data-state="succeeded">"#)
    })
    .await;
    let started = std::time::Instant::now();
    let (status, html) = get(&app, &page, &cookie).await;
    let took = started.elapsed();
    assert_eq!(status, 200);
    // `seq 1 300000` is 2.2 MB of patch: 512 KiB kept, the total said.
    assert!(
        html.contains("The patch is 2.2 MiB; the first 512.0 KiB are shown."),
        "{}",
        html.split("<div class=\"diff\">")
            .nth(1)
            .map_or("", |d| &d[..d.len().min(2000)])
    );
    assert!(html.contains(r#"<td class="added">+300000</td>"#));
    assert!(html.contains("<ins>+70000</ins>") && !html.contains("<ins>+80000</ins>"));
    // `seq 1 200000` is 1.2 MB of log: its last 512 KiB from a whole line, the rest counted.
    assert!(
        html.contains("200000\n</pre>") || html.contains("200000\n"),
        "the log's end"
    );
    let skipped = regex::Regex::new(r"The first (\d+\.\d) KiB are not shown")
        .unwrap()
        .captures(&html)
        .unwrap_or_else(|| panic!("the log says it is cut"))[1]
        .to_owned();
    // 1,288,895 bytes printed, 524,288 kept (less the cut first line).
    assert!(
        skipped.starts_with("746."),
        "about 747 KiB skipped: {skipped}"
    );
    assert!(
        html.len() < 2 * 1024 * 1024 + 512 * 1024,
        "{} bytes",
        html.len()
    );
    eprintln!(
        "giant diff and log: {} bytes of page in {took:?}",
        html.len()
    );
    app.stop().await;
}

/// A run's files are read only under this machine's workspace root: one that ran on another worker says where its
/// files are, and a run whose recorded log path points anywhere else (a forged or corrupted event) is not read.
async fn a_run_elsewhere_or_outside_the_workspace_root_is_not_read(db: TestDb) {
    use pidevops::domain::runs::RunEvent;
    use pidevops::domain::{EventType, NewEvent, Source};
    let scratch = tempfile::tempdir().unwrap();
    let outside = scratch.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(
        outside.join("agent.log"),
        "SECRET-CONTENT of another file\n",
    )
    .unwrap();
    let planted = scratch.path().join("ws/runs/T-1/r/worktree");
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::write(planted.join("agent.log"), "PLANTED by the agent\n").unwrap();
    let mut settings = crate::common::settings(&db);
    settings.workspace_root = scratch.path().join("ws");
    let instance = settings.instance_id.clone();
    let app = TestApp::spawn(settings).await;
    let id = task(&app, "Ran somewhere", Links::default()).await;
    for (n, (worker, log)) in [
        // Only the last three attempts are read: this one is shown by its row.
        (
            "worker-long-ago".to_owned(),
            "/srv/pidevops/runs/T-1/q/agent.log".to_owned(),
        ),
        (
            "worker-far-away".to_owned(),
            "/srv/pidevops/runs/T-1/r/agent.log".to_owned(),
        ),
        (
            instance.clone(),
            outside.join("agent.log").display().to_string(),
        ),
        // Inside the workspace root, but in a worktree (the agent's own files), not a run's directory.
        (instance, planted.join("agent.log").display().to_string()),
        (
            "worker-far-away".to_owned(),
            "/srv/pidevops/runs/T-1/s/agent.log".to_owned(),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let run = RunId(uuid::Uuid::now_v7());
        let event = RunEvent::Started {
            at: chrono::Utc::now(),
            run,
            task: id,
            attempt: n as u32 + 1,
            profile: "claude".into(),
            worker,
            log,
        };
        let mut new = NewEvent::new(
            Source::Pidevops,
            EventType::from_stored(event.kind().to_owned()),
            format!("run:{run}:1"),
            "application/json",
            bytes::Bytes::from(serde_json::to_vec(&event).unwrap()),
        );
        new.stream = Some((pidevops::domain::runs::stream(run), 1));
        app.state.log.append(new).await.unwrap();
    }
    app.project().await;
    let cookie = sign_in(&app).await;
    let (status, html) = get(&app, &format!("/tasks/{id}"), &cookie).await;
    assert_eq!(status, 200);
    assert!(!html.contains("SECRET-CONTENT"), "{html}");
    assert!(!html.contains("PLANTED"), "{html}");
    assert!(
        html.contains("Log: only the last 3 attempts are shown in full"),
        "{html}"
    );
    assert!(!html.contains("worker-long-ago;"), "{html}");
    assert!(
        html.contains("the attempt ran on worker-far-away; its files are on that machine (/srv/pidevops/runs/T-1/s)"),
        "{html}"
    );
    assert!(
        html.contains("is not under this machine&#39;s workspace root; not read")
            || html.contains("is not under this machine's workspace root; not read"),
        "{html}"
    );
    app.stop().await;
}

/// An agent that alternates stdout and stderr, and writes lines in parts with the other stream's lines between the
/// parts, is shown line by line in the order its lines were completed: each line whole, stderr's marked as such.
/// The agent (Python, through the real dispatcher) waits after each write until pidevops has read its pipe, so the
/// order written is an order a reader of two pipes can know.
async fn stdout_and_stderr_are_shown_in_the_order_written_each_line_whole(db: TestDb) {
    let (app, _rig, id) = crate::web::app_with_agent_task(
        &db,
        TestApp::with_agent(
            "two-streams.sh",
            r#"exec /usr/bin/python3 - <<'PY'
import fcntl, os, struct, termios, time
def write(fd, text):
    os.write(fd, text.encode())
    # Flushed, then read by pidevops: nothing left in the pipe.
    while struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]:
        time.sleep(0.001)
for n in (1, 2, 3):
    write(1, "out %d\n" % n)
    write(2, "err %d\n" % n)
write(1, "out par")
write(2, "err 4\n")
write(1, "tial\n")
write(2, "err par")
write(1, "out 5\n")
write(2, "tial\n")
write(1, "out last, no newline")
open("order.txt", "w").write("written\n")
PY"#,
        ),
        "Write in two streams",
        "test:order",
    )
    .await;
    let cookie = sign_in(&app).await;
    let page = format!("/tasks/{id}");
    within(Duration::from_secs(60), "the succeeded attempt", || async {
        get(&app, &page, &cookie)
            .await
            .1
            .contains(r#"data-state="succeeded">"#)
    })
    .await;
    let (status, html) = get(&app, &page, &cookie).await;
    assert_eq!(status, 200);
    let log = html
        .split("<pre class=\"log\">")
        .nth(1)
        .and_then(|rest| rest.split("</pre>").next())
        .unwrap_or_else(|| panic!("the log as printed: {html}"));
    let err = |text: &str| format!(r#"<span class="stderr">{text}</span>"#);
    let expected = [
        "out 1".to_owned(),
        err("err 1"),
        "out 2".to_owned(),
        err("err 2"),
        "out 3".to_owned(),
        err("err 3"),
        err("err 4"),
        "out partial".to_owned(),
        "out 5".to_owned(),
        err("err partial"),
        "out last, no newline".to_owned(),
    ];
    let shown: Vec<&str> = log.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(shown, expected, "{log}");
    app.stop().await;
}

/// A run that fails as a missing key fails (Claude Code's `result` with `is_error` and "Invalid API key", exit 1):
/// its timeline entry says what failed and the CLI's error in words; the JSON it printed is not dumped in the
/// entry but kept inside a collapsed `<details>`.
async fn a_failed_runs_timeline_entry_reads_as_its_error_the_json_collapsed(db: TestDb) {
    let (app, _rig, id) = crate::web::app_with_agent_task(
        &db,
        TestApp::with_agent("no-key.sh", r#"echo '{"type":"system","subtype":"init","cwd":"/work","session_id":"s","tools":["Bash"],"model":"claude-sonnet-4-5","apiKeySource":"none"}'
echo '{"type":"result","subtype":"success","is_error":true,"duration_ms":120,"num_turns":1,"result":"Invalid API key · Please run /login <script>alert(1)</script>","session_id":"s","total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"permission_denials":[],"uuid":"0f3c"}'
exit 1"#)
            .profile(r#"usage = "claude""#),
        "Fail without a key",
        "test:no-key",
    )
    .await;
    let cookie = sign_in(&app).await;
    let page = format!("/tasks/{id}");
    let row = |html: &str| {
        html.split("<table class=\"timeline\">")
            .nth(1)
            .and_then(|t| t.split("</table>").next())
            .and_then(|t| {
                t.split("<tr>")
                    .find(|r| r.contains("task.retried"))
                    .map(str::to_owned)
            })
    };
    within(
        Duration::from_secs(60),
        "the failed attempt on the timeline",
        || async { row(&get(&app, &page, &cookie).await.1).is_some() },
    )
    .await;
    let (status, html) = get(&app, &page, &cookie).await;
    assert_eq!(status, 200);
    let row = row(&html).unwrap();
    let (shown, collapsed) = row
        .split_once("<details class=\"raw-output\">")
        .unwrap_or_else(|| panic!("the output collapsed: {row}"));
    assert!(
        shown.contains("the agent exited with status 1: its CLI said: Invalid API key"),
        "{row}"
    );
    assert!(
        shown.contains("<li>error · 1 turns · 0.1 s"),
        "the readable line: {row}"
    );
    assert!(!shown.contains("&quot;type&quot;"), "no JSON inline: {row}");
    assert!(!shown.contains("session_id"), "no JSON inline: {row}");
    assert!(
        collapsed.contains("{&quot;type&quot;:&quot;result&quot;"),
        "{row}"
    );
    assert!(!row.contains("<script>"), "{row}");
    assert!(
        row.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{row}"
    );
    app.stop().await;
}
