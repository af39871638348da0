//! Effects through the real app and a fake GitHub on loopback: a task that goes to review gets one pull request
//! and its link; transient failures (429 with Retry-After, 5xx) are retried and a permanent one asks a human;
//! replaying the log calls nothing twice. Per backend. `cap.rs`: the cap on a task's outbound calls.

use pidevops::tasks::GITHUB_ISSUE;
use std::time::Duration;

use crate::common::board::new_task;
use crate::common::{within, TestApp, TestDb};
use crate::providers::github::fake::{Failure, FakeGithub};
use axum::http::Method;
use pidevops::board::Draft;
use pidevops::effects::EffectEvent;
use pidevops::projectors::tasks as task_rows;
use pidevops::tasks::{ApprovalPolicy, Links, Spec, TaskId};
use secrecy::SecretString;

mod cap;

per_backend!(
    a_task_in_review_gets_one_pull_request_and_its_link,
    transient_failures_are_retried_and_a_permanent_one_asks_a_human,
    without_a_token_the_loop_is_disabled_and_says_why,
    a_call_cut_off_after_github_acted_is_not_made_twice,
    doctor_proves_the_token_with_a_read_only_call,
    turned_on_for_a_log_with_history_it_acts_only_on_news,
    a_loop_first_started_on_an_empty_log_catches_up_after_a_restart,
    hostile_ticket_text_pings_nobody_and_closes_nothing,
    a_real_attempts_commit_message_and_summary_carry_nothing_github_acts_on,
);

const TOKEN: &str = "ghp_fake_token_for_the_fake_github";

async fn spawn(db: &TestDb, github: &FakeGithub) -> TestApp {
    let mut settings = crate::common::settings(db);
    github.point_settings(&mut settings, TOKEN);
    TestApp::spawn(settings).await
}

/// A task taken to review by hand, as a successful run would: created, started, submitted with its branch.
async fn task_in_review(app: &TestApp, title: &str) -> TaskId {
    task_in_review_from(app, title, Links::default()).await
}

async fn task_in_review_from(app: &TestApp, title: &str, links: Links) -> TaskId {
    let board = &app.state.board;
    let id = new_task(title)
        .scope("src/")
        .done_when("the tests pass")
        .links(links)
        .approval(ApprovalPolicy::Auto)
        .key(&format!("test:{title}"))
        .create_on(board)
        .await;
    crate::common::board::to_review(app, id, None).await;
    id
}

async fn effect_events(app: &TestApp, key: &str) -> Vec<EffectEvent> {
    app.state
        .log
        .store()
        .read_stream(&pidevops::effects::stream(key))
        .await
        .unwrap()
        .iter()
        .map(|e| serde_json::from_slice(&e.body).unwrap())
        .collect()
}

async fn a_task_in_review_gets_one_pull_request_and_its_link(db: TestDb) {
    let github = FakeGithub::start().await;
    let app = spawn(&db, &github).await;
    let issue = pidevops::tasks::GithubRef::new("acme/app".parse().unwrap(), 12).unwrap();
    let id = task_in_review_from(
        &app,
        "Fix the login redirect",
        Links::default().with(GITHUB_ISSUE, &issue),
    )
    .await;

    // Driven, not waited for: the pull request, then (a tick later) its link and the issue's comment.
    app.drive("effects:github").await;
    app.project().await;
    assert!(task_rows::get(app.state.log.store(), id)
        .await
        .unwrap()
        .is_some_and(|row| row.state["links"]["github_pr"]["number"] == 1));
    let opened = github.pulls_opened();
    assert_eq!(opened.len(), 1, "{opened:?}");
    let (repo, number, head, base, title, body) = &opened[0];
    assert_eq!((repo.as_str(), *number), ("acme/app", 1));
    assert_eq!(
        (head.as_str(), base.as_str()),
        (id.branch().as_str(), "main")
    );
    assert_eq!(title, &format!("{id}: Fix the login redirect"));
    assert!(body.contains("## Task\nFix the login redirect"), "{body}");
    assert!(body.contains("## Done when\nthe tests pass"), "{body}");
    assert!(body.contains("after attempt 1 of 3"), "{body}");
    assert!(body.contains("Closes #12"), "{body}");
    // The issue the task came from hears of it, once.
    let comments = github.comments();
    assert_eq!(comments.len(), 1, "{comments:?}");
    assert_eq!((comments[0].0.as_str(), comments[0].1), ("acme/app", 12));
    assert!(
        comments[0].2.starts_with(&format!(
            "pidevops worked on this as {id} and opened #1 for review"
        )) && comments[0].2.ends_with(&format!(
            "<!-- pidevops:github:comment:{id}:pull-request -->"
        )),
        "{comments:?}"
    );
    assert_eq!(
        effect_events(&app, &format!("github:comment:{id}:pull-request"))
            .await
            .len(),
        3,
        "the comment recorded"
    );
    let calls = github.calls();
    assert!(
        calls
            .iter()
            .all(|c| c.authorization.as_deref() == Some(&format!("Bearer {TOKEN}"))),
        "{calls:?}"
    );
    let types: Vec<&str> = effect_events(&app, &format!("github:pr:{id}"))
        .await
        .iter()
        .map(EffectEvent::kind)
        .collect();
    assert_eq!(
        types,
        ["effect.requested", "effect.started", "effect.succeeded"]
    );

    // A second reader over the whole log (a rebuild, a lost checkpoint) settles everything from the effects'
    // streams: no call, no new effect event.
    let replay = pidevops::effects::runner::Effects::new(
        pidevops::providers::github::effects::GithubPolicy::new(
            pidevops::providers::github::GithubClient::new(&github.url, &SecretString::from(TOKEN))
                .unwrap(),
            Default::default(),
            None,
        ),
        app.state.log.clone(),
        app.state.board.clone(),
    )
    .with_checkpoint("effects:github:replay")
    .with_tick_budget(crate::common::WHOLE_TICK);
    let progress = replay.tick().await.unwrap();
    assert_eq!((progress.succeeded, progress.failed), (0, 0));
    assert_eq!(github.calls().len(), calls.len(), "a replay called GitHub");
    assert_eq!(
        effect_events(&app, &format!("github:pr:{id}")).await.len(),
        3
    );
    assert_eq!(
        effect_events(&app, &format!("github:comment:{id}:pull-request"))
            .await
            .len(),
        3
    );
    assert_eq!(github.comments().len(), 1);

    let health: serde_json::Value = app
        .client
        .get(app.url("/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        health["loops"][pidevops::effects::loop_name("github")]["state"],
        "armed",
        "{health}"
    );
    app.stop().await;
}

async fn transient_failures_are_retried_and_a_permanent_one_asks_a_human(db: TestDb) {
    let github = FakeGithub::start().await;
    // Rate limited on the first look, a 502 on the first opening: two retries, one pull request.
    github.fail_next(Method::GET, Failure::RateLimited { retry_after_s: 1 });
    github.fail_next(Method::POST, Failure::Status(502));
    let app = spawn(&db, &github).await;
    let id = task_in_review(&app, "Survive a flaky GitHub").await;
    let key = format!("github:pr:{id}");
    within(
        Duration::from_secs(30),
        "the pull request opened after retries",
        || async {
            effect_events(&app, &key)
                .await
                .iter()
                .any(|e| matches!(e, EffectEvent::Succeeded { .. }))
        },
    )
    .await;
    assert_eq!(github.pulls_opened().len(), 1);
    let methods: Vec<String> = github.calls().iter().map(|c| c.method.clone()).collect();
    assert_eq!(methods, ["GET", "GET", "POST", "GET", "POST"]);
    let events = effect_events(&app, &key).await;
    let failures: Vec<(u32, i64)> = events
        .iter()
        .filter_map(|e| match e {
            EffectEvent::Failed {
                attempt,
                retry_at: Some(retry),
                at,
                ..
            } => Some((*attempt, (*retry - *at).num_milliseconds())),
            _ => None,
        })
        .collect();
    assert_eq!(failures.len(), 2, "{events:?}");
    assert_eq!(failures[0].0, 1);
    assert!(
        (900..=1100).contains(&failures[0].1),
        "the first retry waits what Retry-After said: {failures:?}"
    );
    assert_eq!(failures[1].0, 2);
    assert!(
        (3900..=4100).contains(&failures[1].1),
        "then backoff: {failures:?}"
    );

    // A permanent refusal: recorded once, not retried, and the task asks a human why.
    github.fail_next(Method::GET, Failure::Status(404));
    let other = task_in_review(&app, "A repository the token cannot see").await;
    app.drive("effects:github").await;
    app.project().await;
    let row = task_rows::get(app.state.log.store(), other)
        .await
        .unwrap()
        .unwrap();
    assert!(row.needs_human, "the task flagged: {row:?}");
    let reason = row.needs_human_reason.unwrap();
    assert!(
        reason.contains("github open pull request failed for good after 1 attempt(s)")
            && reason.contains("404"),
        "{reason}"
    );
    let calls_then = github.calls().len();
    // Driven, not waited for: the loop's ticks until it rests would make any retry that is due.
    app.drive("effects:github").await;
    assert_eq!(
        github.calls().len(),
        calls_then,
        "a permanent failure is not retried"
    );
    let last = effect_events(&app, &format!("github:pr:{other}")).await;
    assert!(
        matches!(
            last.last(),
            Some(EffectEvent::Failed { retry_at: None, .. })
        ),
        "{last:?}"
    );
    app.stop().await;
}

async fn without_a_token_the_loop_is_disabled_and_says_why(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let health: serde_json::Value = app
        .client
        .get(app.url("/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let effects = &health["loops"][pidevops::effects::loop_name("github")];
    assert_eq!(effects["state"], "disabled", "{health}");
    assert!(
        effects["reason"]
            .as_str()
            .unwrap()
            .contains("GITHUB_TOKEN is not set"),
        "{health}"
    );
    app.stop().await;
}

/// The crash window: GitHub opened the pull request but the caller never heard (a crash, a timeout). The attempt
/// is in doubt; the next one looks before it opens, finds it, and opens nothing.
async fn a_call_cut_off_after_github_acted_is_not_made_twice(db: TestDb) {
    let github = FakeGithub::start().await;
    // No token for the app: its own loop stays off, and this test drives the worker tick by tick.
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let effects = pidevops::effects::runner::Effects::new(
        pidevops::providers::github::effects::GithubPolicy::new(
            pidevops::providers::github::GithubClient::new(&github.url, &SecretString::from(TOKEN))
                .unwrap(),
            Default::default(),
            None,
        ),
        app.state.log.clone(),
        app.state.board.clone(),
    )
    .with_tick_budget(crate::common::WHOLE_TICK);
    let id = task_in_review(&app, "Open it exactly once").await;
    github.fail_next(Method::POST, Failure::AnswerLate(Duration::from_secs(30)));
    let cut_off = tokio::time::timeout(Duration::from_millis(700), effects.tick()).await;
    assert!(cut_off.is_err(), "the tick was to be cut off mid-call");
    assert_eq!(github.pulls_opened().len(), 1, "GitHub acted");
    let key = format!("github:pr:{id}");
    let kinds = |events: &[EffectEvent]| events.iter().map(EffectEvent::kind).collect::<Vec<_>>();
    assert_eq!(
        kinds(&effect_events(&app, &key).await),
        ["effect.requested", "effect.started"]
    );

    effects.tick().await.unwrap();
    let events = effect_events(&app, &key).await;
    assert_eq!(
        kinds(&events),
        [
            "effect.requested",
            "effect.started",
            "effect.started",
            "effect.succeeded"
        ]
    );
    assert!(
        matches!(
            events.last(),
            Some(EffectEvent::Succeeded {
                produced: pidevops::effects::Produced::PullRequest {
                    number: 1,
                    opened: false,
                    ..
                },
                ..
            })
        ),
        "{events:?}"
    );
    let posts = github.calls().iter().filter(|c| c.method == "POST").count();
    assert_eq!(posts, 1, "opened once");
    assert_eq!(github.pulls_opened().len(), 1);
    app.stop().await;
}

/// `doctor` asks GitHub who the token belongs to: a pass names the account, a refused token fails doctor.
async fn doctor_proves_the_token_with_a_read_only_call(db: TestDb) {
    let github = FakeGithub::start().await;
    let mut settings = crate::common::settings(&db);
    github.point_settings(&mut settings, TOKEN);
    let (report, ok) = pidevops::doctor::diagnose(&settings).await;
    let line = report
        .lines()
        .find(|l| l.starts_with("github api"))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(
        line.contains("pass") && line.contains("GITHUB_TOKEN is Codertocat's"),
        "{line}"
    );
    assert!(ok, "{report}");
    assert!(!report.contains(TOKEN), "doctor printed the token");

    github.fail_next(Method::GET, Failure::Status(401));
    let (report, ok) = pidevops::doctor::diagnose(&settings).await;
    let line = report
        .lines()
        .find(|l| l.starts_with("github api"))
        .unwrap();
    assert!(line.contains("FAIL") && line.contains("401"), "{line}");
    assert!(!ok, "a refused token fails doctor");
    assert_eq!(
        github.calls().iter().filter(|c| c.path == "/user").count(),
        2
    );

    // With repositories configured, each one's webhook is looked for (reported, never failed).
    settings.file = r#"
        [dispatch]
        agent = "sh"
        [agents.sh]
        command = ["sh", "-c", "true", "{prompt_file}"]
        [repos."acme/app"]
        url = "file:///nowhere/app.git"
        [repos."acme/api"]
        url = "file:///nowhere/api.git"
        # As `init` writes it: an empty table is a configured repository too.
        [repos."acme/web"]
    "#
    .parse()
    .unwrap();
    github.add_hook("acme/app", "https://pidevops.example/webhooks/github");
    github.add_hook("acme/web", "https://pidevops.example/webhooks/github");
    let (report, ok) = pidevops::doctor::diagnose(&settings).await;
    let hook = |repo: &str| {
        report
            .lines()
            .find(|l| l.starts_with(&format!("github webhook {repo}")))
            .unwrap_or_else(|| panic!("{report}"))
            .to_owned()
    };
    assert!(
        hook("acme/app").contains("pass      delivers to https://pidevops.example/webhooks/github"),
        "{report}"
    );
    assert!(
        hook("acme/api").contains("warn      no webhook"),
        "{report}"
    );
    assert!(
        hook("acme/web").contains("pass      delivers to https://pidevops.example/webhooks/github"),
        "{report}"
    );
    assert!(ok, "{report}");

    settings.providers.set("GITHUB_TOKEN", None).unwrap();
    let (report, _) = pidevops::doctor::diagnose(&settings).await;
    assert!(
        report.contains("github api                 disabled  GITHUB_TOKEN is not set"),
        "{report}"
    );
}

/// GitHub effects switched on for a log that already has tasks in review: the old ones are history (no pull
/// request for last month's task); what happens from then on is acted on.
async fn turned_on_for_a_log_with_history_it_acts_only_on_news(db: TestDb) {
    let github = FakeGithub::start().await;
    let before = TestApp::spawn(crate::common::settings(&db)).await;
    let old = task_in_review(&before, "Last month's task").await;
    before.stop().await;

    let app = spawn(&db, &github).await;
    let new = task_in_review(&app, "Today's task").await;
    // Driven to rest: the loop has handled the whole log, old and new.
    app.drive("effects:github").await;
    let opened = github.pulls_opened();
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert_eq!(opened[0].2, new.branch().as_str());
    assert!(effect_events(&app, &format!("github:pr:{old}"))
        .await
        .is_empty());
    app.stop().await;
}

/// A loop first started on an empty log has checkpoint 0 like one never started; it must not take the restart for
/// a first start and skip what arrived while it was down.
async fn a_loop_first_started_on_an_empty_log_catches_up_after_a_restart(db: TestDb) {
    let github = FakeGithub::start().await;
    let first = spawn(&db, &github).await;
    first.stop().await;
    let down = TestApp::spawn(crate::common::settings(&db)).await;
    let id = task_in_review(&down, "Arrived while effects were off").await;
    down.stop().await;

    let app = spawn(&db, &github).await;
    app.drive("effects:github").await;
    assert_eq!(github.pulls_opened().len(), 1, "its pull request");
    assert_eq!(github.pulls_opened()[0].2, id.branch().as_str());
    app.stop().await;
}

/// Ticket text cannot mention anyone or close an issue through the pull request pidevops opens; only its own
/// `Closes #12` line links the source issue.
async fn hostile_ticket_text_pings_nobody_and_closes_nothing(db: TestDb) {
    let github = FakeGithub::start().await;
    let app = spawn(&db, &github).await;
    let board = &app.state.board;
    let issue = pidevops::tasks::GithubRef::new("acme/app".parse().unwrap(), 12).unwrap();
    let draft = Draft {
        approval: Some(ApprovalPolicy::Auto),
        ..Draft::new(
            "acme/app".parse().unwrap(),
            Spec::new(
                "Fixes #1 for @acme/everyone",
                "closes acme/app#2 and resolves https://github.com/acme/app/issues/3, cc @octocat",
                "FIXED: GH-4 &#64;admin",
            )
            .unwrap(),
            Links::default().with(GITHUB_ISSUE, &issue),
        )
    };
    let (outcome, _) = board
        .create(draft, "test:hostile", "api", None)
        .await
        .unwrap();
    let id = outcome.task.id();
    crate::common::board::to_review(&app, id, None).await;
    app.drive("effects:github").await;
    assert_eq!(github.pulls_opened().len(), 1, "the pull request opened");
    let (_, _, _, _, title, body) = github.pulls_opened().remove(0);
    let mention = regex::Regex::new(r"(^|[^\w`])@[A-Za-z0-9]").unwrap();
    let reference = regex::Regex::new(r"#\d|(?i)gh-\d|&#").unwrap();
    let closing = regex::Regex::new(
        r"(?i)\b(close[sd]?|fix(e[sd])?|resolve[sd]?):?\s+(#|[\w.-]+/[\w.-]+#|https?://|gh-\d)",
    )
    .unwrap();
    let (ticket, ours) = body.split_once("\n---\n").expect("pidevops's own footer");
    for text in [title.as_str(), ticket] {
        assert!(!mention.is_match(text), "a live mention in {text:?}");
        assert!(!reference.is_match(text), "a live reference in {text:?}");
        assert!(!closing.is_match(text), "a closing keyword in {text:?}");
    }
    assert_eq!(
        closing
            .find_iter(&body)
            .map(|m| m.as_str())
            .collect::<Vec<_>>(),
        ["Closes #"],
        "only pidevops's own line closes the source issue: {ours:?}"
    );
    // Still readable: the words are all there.
    let shown = body.replace('\u{200B}', "");
    assert!(
        shown.contains("Fixes #1 for @acme/everyone")
            || title
                .replace('\u{200B}', "")
                .contains("Fixes #1 for @acme/everyone")
    );
    assert!(
        shown.contains("cc @octocat") && shown.contains("FIXED: GH-4 &amp;#64;admin"),
        "{shown}"
    );
    app.stop().await;
}

/// Through a real attempt (dispatcher, git, a worker that leaves a hostile summary in `.pidevops/status.json`) and
/// the fake GitHub: the pushed commit's message names the task, never its hostile title; the pull request shows
/// the agent's summary as plain, inert text.
async fn a_real_attempts_commit_message_and_summary_carry_nothing_github_acts_on(db: TestDb) {
    use crate::common::agents::Remote;
    let github = FakeGithub::start().await;
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let worker = crate::common::agents::bash_agent(
        scratch.path(),
        "worker.sh",
        r###"echo done > CHANGES.md
mkdir -p .pidevops
cat > .pidevops/status.json <<'JSON'
{"resolved": true, "summary": "## Merged\n[Approve](https://evil.example) <img src=x> Fixes #1 @acme/everyone"}
JSON"###,
    );
    let mut settings = crate::common::settings(&db);
    github.point_settings(&mut settings, TOKEN);
    settings.workspace_root = scratch.path().join("ws");
    let file: toml::Table = format!(
        r#"
        [board]
        approval = "auto"
        [dispatch]
        agent = "worker"
        heartbeat_s = 0.3
        [agents.worker]
        command = ["{}", "{{prompt_file}}"]
        [repos."acme/app"]
        url = "{}"
        "#,
        worker.display(),
        remote.url()
    )
    .parse()
    .unwrap();
    settings.file = pidevops::config::FileConfig::try_from(file).unwrap();
    let app = TestApp::spawn(settings).await;
    let title = "Fixes #7, closes acme/app#3 for @acme/everyone";
    let (outcome, _) = app
        .state
        .board
        .create(
            Draft::new(
                "acme/app".parse().unwrap(),
                Spec::new(title, "", "").unwrap(),
                Links::default(),
            ),
            "test:inert-commit",
            "api",
            None,
        )
        .await
        .unwrap();
    let id = outcome.task.id();
    within(
        Duration::from_secs(60),
        "the pull request opened",
        || async {
            app.drive("effects:github").await;
            !github.pulls_opened().is_empty()
        },
    )
    .await;
    let message = std::process::Command::new("git")
        .args(["log", "-1", "--format=%B", id.branch().as_str()])
        .current_dir(remote.dir.path().join("remote.git"))
        .output()
        .unwrap();
    let message = String::from_utf8_lossy(&message.stdout).into_owned();
    assert!(
        message.starts_with(&format!("{id}: attempt 1\n")),
        "{message}"
    );
    for hostile in ["Fixes", "closes", "#7", "#3", "@"] {
        assert!(!message.contains(hostile), "{hostile} in {message:?}");
    }
    let (_, _, _, _, _, body) = github.pulls_opened().remove(0);
    let summary = body
        .split_once("## The agent's summary\n")
        .and_then(|(_, rest)| rest.split_once("\n---\n"))
        .map(|(summary, _)| summary.to_owned())
        .unwrap_or_else(|| panic!("no summary in {body:?}"));
    let mention = regex::Regex::new(r"(^|[^\w`])@[A-Za-z0-9]").unwrap();
    let closing = regex::Regex::new(r"(?i)\bfix(e[sd])?:?\s+#").unwrap();
    assert!(!mention.is_match(&summary), "{summary:?}");
    assert!(!closing.is_match(&summary), "{summary:?}");
    assert!(!summary.contains("#1"), "{summary:?}");
    assert!(!summary.starts_with('#'), "a heading: {summary:?}");
    assert!(!summary.contains("[Approve]("), "a live link: {summary:?}");
    let html = regex::Regex::new(r"(^|[^\\])<").unwrap();
    assert!(!html.is_match(&summary), "live HTML: {summary:?}");
    app.stop().await;
}
