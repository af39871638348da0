//! The dashboard's spend page through the real server: runs' outcomes carrying what they spent (as the runner
//! records them, Claude-like with a cost, Codex-like without) rolled up by the `usage` read model, tasks merged
//! through the board (their `task.completed`, as reactions record a merged pull request) counted by `task_merges`;
//! the numbers shown are the read models', the cost per merged pull request is the range's cost over the pull
//! requests merged in it, a cost no run reported is "unknown", the range and repository filters narrow it. A
//! repository or profile name with markup renders as text; a query the page does not take is a 400 page and
//! nothing else. An HTML snapshot (redacted, one for both backends). Per backend.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};

use crate::common::board::new_task;
use crate::common::{TestApp, TestDb};
use crate::web::{client, get, redacted, sign_in};
use pidevops::domain::runs::{self as run_events, RunEvent};
use pidevops::domain::usage::{RunUsage, Usage};
use pidevops::domain::{EventType, NewEvent, Source};
use pidevops::projectors::tasks as task_rows;
use pidevops::projectors::usage::{self, total, Spent, UsageFilter};
use pidevops::projectors::{tasks::TasksProjector, Projection};
use pidevops::tasks::{AttemptReport, Command, GithubRef, RunId, TaskId};

per_backend!(
    the_spend_page_shows_the_read_models_numbers_and_the_cost_per_merged_pull_request,
    markup_in_a_repository_or_profile_name_is_inert_and_bad_queries_are_refused,
    ninety_days_of_many_repositories_stay_under_the_page_budget,
    every_run_that_ran_is_counted_one_that_reported_nothing_too,
);

pub(crate) async fn task_in(app: &TestApp, repo: &str, title: &str) -> TaskId {
    new_task(title)
        .repo(repo)
        .done_when("it is done")
        .key(&format!("test:{title}"))
        .create(app)
        .await
}

/// Starts `id`'s attempt `run` as the dispatcher does.
pub(crate) async fn start(app: &TestApp, id: TaskId, run: RunId) {
    let board = &app.state.board;
    board.execute(id, &Command::Approve, "test").await.unwrap();
    board
        .execute(id, &Command::Start { run }, "dispatcher")
        .await
        .unwrap();
}

/// Puts `id` in review with `repo`'s pull request `pr`, and merges it (what reactions do on `pull_request` closed,
/// merged).
pub(crate) async fn merge(app: &TestApp, id: TaskId, run: RunId, repo: &str, pr: u64) {
    let board = &app.state.board;
    let pr = Some(GithubRef::new(repo.parse().unwrap(), pr).unwrap());
    board
        .execute(
            id,
            &Command::SubmitForReview {
                run,
                branch: id.branch(),
                pr,
                report: Box::new(AttemptReport::default()),
            },
            "dispatcher",
        )
        .await
        .unwrap();
    board
        .execute(id, &Command::Complete, "github")
        .await
        .unwrap();
}

/// What a run spent, as a CLI reported it.
pub(crate) fn spent(
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
    cost: Option<f64>,
) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: cache_read,
        cache_write_tokens: cache_write,
        cost_usd: cost,
        turns: 1,
    }
}

/// Appends run `run`'s `started` and its outcome at `at` with what it spent, as the runner records them.
pub(crate) async fn run_spent(
    app: &TestApp,
    task: TaskId,
    run: RunId,
    (repo, profile): (&str, &str),
    usage: Usage,
    at: DateTime<Utc>,
) {
    let started = RunEvent::Started {
        at,
        run,
        task,
        attempt: 1,
        profile: profile.to_owned(),
        worker: "worker-here".into(),
        log: format!("/srv/pidevops/runs/{task}/{run}/agent.log"),
    };
    let end = RunEvent::Succeeded {
        at,
        run,
        task,
        attempt: 1,
        branch: task.branch(),
        commit: "0123456789abcdef0123456789abcdef01234567".into(),
        duration_s: 2.5,
        tail: String::new(),
        report: Box::default(),
        usage: None,
        reviewer_usage: None,
    }
    .with_usage(Some(RunUsage {
        repo: repo.to_owned(),
        profile: profile.to_owned(),
        usage,
        refused: None,
    }));
    for (version, event, key) in [
        (1, started, format!("run:{run}:1")),
        (2, end, run_events::end_key(run)),
    ] {
        let mut new = NewEvent::new(
            Source::Pidevops,
            EventType::from_stored(event.kind().to_owned()),
            key,
            "application/json",
            bytes::Bytes::from(serde_json::to_vec(&event).unwrap()),
        );
        new.stream = Some((run_events::stream(run), version));
        app.state.log.append(new).await.unwrap();
    }
}

pub(crate) fn new_run() -> RunId {
    RunId(uuid::Uuid::now_v7())
}

/// The row of a table whose `<tr …>` starts with `head`, up to its `</tr>`.
fn table_row(html: &str, head: &str) -> String {
    html.split("<tr ")
        .find(|r| r.starts_with(head))
        .unwrap_or_else(|| panic!("no row {head} in {html}"))
        .split("</tr>")
        .next()
        .unwrap()
        .to_owned()
}

/// `1,234,567`, as the page writes counts.
fn count(n: i64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Dollars as the page writes them: cents from a dollar up, else four decimals.
fn usd(v: f64) -> String {
    if v == 0.0 || v >= 1.0 {
        format!("${v:.2}")
    } else {
        format!("${v:.4}")
    }
}

/// The cost cell of some runs: known, at least (some runs reported one), unknown (none did), or nothing.
fn cost_cell(spent: &Spent) -> String {
    match (spent.runs, spent.costed_runs) {
        (0, _) => r#"<td class="n cost" title="no run recorded what it spent">—</td>"#.to_owned(),
        (_, 0) => r#"<td class="n cost unknown" title="no run reported a cost (Codex reports none)">unknown</td>"#
            .to_owned(),
        (runs, costed) if costed < runs => format!(
            r#"<td class="n cost partial" title="{costed} of {runs} runs reported a cost: the others' is unknown">≥ {}</td>"#,
            usd(spent.cost_usd)
        ),
        _ => format!(r#"<td class="n cost">{}</td>"#, usd(spent.cost_usd)),
    }
}

/// The cells a row of some runs shows, as the page writes them.
fn cells(spent: &Spent) -> String {
    let n = |v: i64| format!(r#"<td class="n">{}</td>"#, count(v));
    format!(
        "{}{}{}{}{}{}",
        n(spent.runs),
        n(spent.input_tokens),
        n(spent.output_tokens),
        n(spent.cache_read_tokens),
        n(spent.cache_write_tokens),
        cost_cell(spent)
    )
}

/// The read model's rows of the last `days` days (today included), per repository, profiles summed.
async fn read_model(app: &TestApp, days: i64) -> (BTreeMap<String, Spent>, Spent) {
    let filter = UsageFilter {
        since: Some(Utc::now().date_naive() - Duration::days(days - 1)),
        repo: None,
    };
    let rows = usage::days(app.state.log.store(), &filter).await.unwrap();
    let mut by_repo: BTreeMap<String, Vec<&Spent>> = BTreeMap::new();
    for row in &rows {
        by_repo
            .entry(row.repo.clone())
            .or_default()
            .push(&row.spent);
    }
    (
        by_repo
            .into_iter()
            .map(|(repo, spent)| (repo, total(spent)))
            .collect(),
        total(rows.iter().map(|r| &r.spent)),
    )
}

/// What changes from run to run besides what `web::redacted` hides: the days, and the last run's minute.
fn days_redacted(html: &str) -> String {
    regex::Regex::new(r"\d{4}-\d{2}-\d{2}( \d{2}:\d{2})?")
        .unwrap()
        .replace_all(&redacted(html), "[day]")
        .into_owned()
}

async fn the_spend_page_shows_the_read_models_numbers_and_the_cost_per_merged_pull_request(
    db: TestDb,
) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let now = Utc::now();
    // acme/app: two tasks merged by their pull requests, every run costed (one by a reviewer profile too), and one
    // run 40 days ago.
    let first = task_in(&app, "acme/app", "Fix the login redirect").await;
    let second = task_in(&app, "acme/app", "Tame the flaky test").await;
    for (id, pr, cost) in [(first, 11, 0.75), (second, 12, 0.25)] {
        let run = new_run();
        start(&app, id, run).await;
        run_spent(
            &app,
            id,
            run,
            ("acme/app", "claude"),
            spent(10, 42, 2048, 2168, Some(cost)),
            now,
        )
        .await;
        merge(&app, id, run, "acme/app", pr).await;
    }
    run_spent(
        &app,
        second,
        new_run(),
        ("acme/app", "reviewer"),
        spent(5, 7, 0, 0, Some(0.4)),
        now,
    )
    .await;
    run_spent(
        &app,
        first,
        new_run(),
        ("acme/app", "claude"),
        spent(1000, 1000, 0, 0, Some(10.0)),
        now - Duration::days(40),
    )
    .await;
    // acme/lib: a Codex run (no cost reported), merged: its cost per merged pull request is unknown too.
    let codex = task_in(&app, "acme/lib", "Port the parser").await;
    let run = new_run();
    start(&app, codex, run).await;
    run_spent(
        &app,
        codex,
        run,
        ("acme/lib", "codex"),
        spent(315, 122, 24448, 0, None),
        now,
    )
    .await;
    merge(&app, codex, run, "acme/lib", 3).await;
    // acme/docs: one run of two reported a cost; nothing merged.
    let docs = task_in(&app, "acme/docs", "Document the API").await;
    for cost in [Some(0.2), None] {
        run_spent(
            &app,
            docs,
            new_run(),
            ("acme/docs", "pi"),
            spent(100, 10, 0, 0, cost),
            now,
        )
        .await;
    }
    // acme/app: a task whose only run was 40 days ago (in 90 days, not in 30).
    let old = task_in(&app, "acme/app", "Old work").await;
    run_spent(
        &app,
        old,
        new_run(),
        ("acme/app", "claude"),
        spent(1, 1, 0, 0, Some(0.6)),
        now - Duration::days(40),
    )
    .await;
    app.project().await;

    // The read model's merged pull requests: each once.
    let store = app.state.log.store();
    let today = now.date_naive();
    let merged = task_rows::merged_pull_requests(store, today, None)
        .await
        .unwrap();
    assert_eq!(
        merged,
        BTreeMap::from([("acme/app".to_owned(), 2), ("acme/lib".to_owned(), 1)])
    );

    let cookie = sign_in(&app).await;
    let (status, html) = get(&app, "/spend", &cookie).await;
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains(r#"<a href="/spend" class="here">Spend</a>"#),
        "{html}"
    );
    let (by_repo, all) = read_model(&app, 30).await;
    assert_eq!(all.runs, 6, "the run 40 days ago is outside 30 days");
    for (repo, spent) in &by_repo {
        let row = table_row(&html, &format!(r#"data-repo="{repo}">"#));
        assert!(row.contains(&cells(spent)), "{repo}: {row}");
    }
    // acme/app: $1.40 over 2 merged pull requests.
    let app_row = table_row(&html, r#"data-repo="acme/app">"#);
    assert!(
        app_row.ends_with(
            r#"<td class="n cost">$1.40</td><td class="n">2</td><td class="n cost">$0.7000</td>"#
        ),
        "{app_row}"
    );
    // Codex reports no cost: unknown, never $0, per merged pull request too.
    let lib_row = table_row(&html, r#"data-repo="acme/lib">"#);
    assert!(
        lib_row.contains(r#"<td class="n cost unknown" title="no run reported a cost (Codex reports none)">unknown</td><td class="n">1</td><td class="n cost unknown""#),
        "{lib_row}"
    );
    assert!(!lib_row.contains("$0"), "{lib_row}");
    let docs_row = table_row(&html, r#"data-repo="acme/docs">"#);
    assert!(docs_row.contains("≥ $0.2000"), "{docs_row}");
    assert!(docs_row.contains("no pull request merged"), "{docs_row}");
    // The profiles of a repository, over the range.
    let reviewer = table_row(
        &html,
        r#"class="profile" data-repo="acme/app" data-profile="reviewer">"#,
    );
    assert!(
        reviewer.contains(r#"<td class="n">5</td><td class="n">7</td>"#),
        "{reviewer}"
    );
    // The total: every repository's runs, and the range's cost is partly unknown.
    let total_row = table_row(&html, r#"data-total="">"#);
    assert!(total_row.contains(&cells(&all)), "{total_row}");
    assert!(total_row.contains(r#"<td class="n">3</td>"#), "{total_row}");
    // By day: today's acme/app is its two profiles summed, each profile's row under it.
    let day = table_row(
        &html,
        &format!(
            r#"data-day="{}" data-repo="acme/app">"#,
            today.format("%Y-%m-%d")
        ),
    );
    assert!(day.contains(&cells(&by_repo["acme/app"])), "{day}");
    assert!(
        day.contains(r#"<td class="muted">2 profiles</td>"#),
        "{day}"
    );
    let reviewer_today = table_row(
        &html,
        &format!(
            r#"class="profile" data-day="{}" data-repo="acme/app" data-profile="reviewer">"#,
            today.format("%Y-%m-%d")
        ),
    );
    assert!(
        reviewer_today.contains(r#"<td class="n">5</td><td class="n">7</td>"#),
        "{reviewer_today}"
    );
    // The tasks that spent most, each linked to its page: acme/app's first (its whole spend: $10.75).
    let tasks = html.split("<h2>Tasks that spent most</h2>").nth(1).unwrap();
    let first_row = table_row(tasks, r#"data-task=""#);
    assert!(
        first_row.contains(&format!(
            r#"<a href="/tasks/{first}">{first}</a> Fix the login redirect"#
        )) && first_row.contains("$10.75"),
        "{first_row}"
    );
    assert!(!tasks.contains(&format!(r#"data-task="{old}""#)), "{tasks}");
    insta::assert_snapshot!("spend", days_redacted(&html));

    // 90 days take the old runs in: acme/app's cost per merged pull request is ($1.40 + $10 + $0.60) / 2.
    let (status, html) = get(&app, "/spend?days=90&repo=acme/app", &cookie).await;
    assert_eq!(status, 200);
    let (by_repo, _) = read_model(&app, 90).await;
    let app_row = table_row(&html, r#"data-repo="acme/app">"#);
    assert!(app_row.contains(&cells(&by_repo["acme/app"])), "{app_row}");
    assert!(
        app_row.ends_with(r#"<td class="n">2</td><td class="n cost">$6.00</td>"#),
        "{app_row}"
    );
    assert!(
        !html.contains(r#"data-repo="acme/lib""#),
        "filtered to acme/app"
    );
    assert!(
        html.contains(&format!(r#"<a href="/tasks/{old}">{old}</a> Old work"#)),
        "{html}"
    );
    assert!(html.contains(r#"<option value="90" selected>"#), "{html}");
    assert!(
        html.contains(r#"<option value="acme/app" selected>"#),
        "{html}"
    );

    // Rebuilt from the log, the merges are the same.
    Projection::new(
        store.clone(),
        std::sync::Arc::new(TasksProjector::default()),
    )
    .rebuild(|_| {})
    .await
    .unwrap();
    assert_eq!(
        task_rows::merged_pull_requests(store, today, None)
            .await
            .unwrap(),
        merged
    );
    app.stop().await;
}

async fn markup_in_a_repository_or_profile_name_is_inert_and_bad_queries_are_refused(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let id = task_in(
        &app,
        "acme/app",
        "<b>bold</b> title <script>alert(0)</script>",
    )
    .await;
    let hostile_repo = "acme/<script>alert(1)</script>";
    for profile in ["<img src=x onerror=alert(2)>", "x\" onmouseover=\"alert(3)"] {
        run_spent(
            &app,
            id,
            new_run(),
            (hostile_repo, profile),
            spent(1, 1, 0, 0, Some(0.1)),
            Utc::now(),
        )
        .await;
    }
    app.project().await;
    let cookie = sign_in(&app).await;

    // Without a session, to sign in (and back).
    let response = client().get(app.url("/spend?days=7")).send().await.unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(
        response.headers()["location"],
        "/sign-in?next=%2Fspend%3Fdays%3D7"
    );

    let (status, html) = get(&app, "/spend", &cookie).await;
    assert_eq!(status, 200, "{html}");
    for inert in [
        "acme/&lt;script&gt;alert(1)&lt;/script&gt;",
        "&lt;img src=x onerror=alert(2)&gt;",
        "x&quot; onmouseover=&quot;alert(3)",
        "&lt;b&gt;bold&lt;/b&gt; title &lt;script&gt;alert(0)&lt;/script&gt;",
    ] {
        assert!(html.contains(inert), "{inert} in {html}");
    }
    for live in [
        "<script>alert",
        "<img src=x",
        "\" onmouseover=\"",
        "<b>bold",
    ] {
        assert!(!html.contains(live), "{live} in {html}");
    }
    // A recorded name that is no repository cannot be asked for: not offered.
    assert!(
        !html.contains(r#"<option value="acme/&lt;script"#),
        "{html}"
    );

    for bad in [
        "days=8",
        "days=abc",
        "days=",
        "days=-7",
        "days=7&days=30",
        "repo=acme",
        "repo=acme/../x",
        "repo=%3Cscript%3Ealert(4)%3C/script%3E/x",
        "repo=acme/app&repo=acme/lib",
        "tasks=5",
    ] {
        let (status, html) = get(&app, &format!("/spend?{bad}"), &cookie).await;
        assert_eq!(status, 400, "{bad}: {html}");
        assert!(html.contains("<h1>Not a spend query</h1>"), "{bad}: {html}");
        assert!(
            !html.contains("class=\"spend"),
            "nothing else: {bad}: {html}"
        );
        assert!(!html.contains("<script>alert"), "{bad}: {html}");
    }
    let (_, html) = get(&app, "/spend?days=8", &cookie).await;
    assert!(html.contains("days must be 7, 30 or 90."), "{html}");
    let (_, html) = get(&app, "/spend?repo=acme", &cookie).await;
    assert!(
        html.contains("repo must be a repository, owner/name"),
        "{html}"
    );
    app.stop().await;
}

async fn ninety_days_of_many_repositories_stay_under_the_page_budget(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let id = task_in(&app, "acme/app", "Spend a lot").await;
    let now = Utc::now();
    // 90 days × 3 repositories × 2 profiles: more rows than the page shows by day.
    let mut appends = Vec::new();
    for day in 0..90 {
        for repo in ["acme/app", "acme/lib", "acme/docs"] {
            for profile in ["claude", "codex"] {
                let cost = (profile == "claude").then_some(1.25);
                appends.push((repo, profile, cost, now - Duration::days(day)));
            }
        }
    }
    assert!(appends.len() > 400, "more than the page shows by day");
    for (repo, profile, cost, at) in appends {
        run_spent(
            &app,
            id,
            new_run(),
            (repo, profile),
            spent(123_456, 7_890, 1_000_000, 20_000, cost),
            at,
        )
        .await;
    }
    app.project().await;
    let cookie = sign_in(&app).await;
    let response = client()
        .get(app.url("/spend?days=90"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let timing = response.headers()["server-timing"]
        .to_str()
        .unwrap()
        .to_owned();
    let html = response.text().await.unwrap();
    assert!(html.len() < 200 * 1024, "{} bytes", html.len());
    assert!(
        html.contains("Older days are not shown"),
        "cut, and says so"
    );
    // The totals count every row, shown by day or not.
    let (_, all) = read_model(&app, 90).await;
    assert_eq!(all.runs, 90 * 6);
    let total_row = table_row(&html, r#"data-total="">"#);
    assert!(total_row.contains(&cells(&all)), "{total_row}");
    eprintln!("spend page, 540 rows: {} bytes, {timing}", html.len());
    app.stop().await;
}

/// The spend page counts the runs that happened: through the real dispatcher, a Claude-format agent that reports
/// its usage and cost (one run, in review) and one that reports nothing and fails until its task is flagged (each
/// attempt a run). Every one of them is a run on the page; the cost, which only one reported, is "at least" its
/// figure, not the exact sum. A run whose agent reported nothing was left out before, and the cost said exact.
async fn every_run_that_ran_is_counted_one_that_reported_nothing_too(db: TestDb) {
    use crate::common::agents::REPO;
    use crate::common::within;
    let (app, _rig) = TestApp::with_agent(
        "claude-or-silent.sh",
        r#"if grep -q silent "$1"; then echo "no key: nothing reported" >&2; exit 1; fi
echo '{"type":"result","subtype":"success","is_error":false,"num_turns":2,"result":"Done.","total_cost_usd":0.05,"usage":{"input_tokens":10,"output_tokens":5}}'
echo done > done.txt"#,
    )
    .profile(r#"usage = "claude""#)
    .config("board.max_attempts = 2")
    .spawn(&db)
    .await;
    let mut ids = Vec::new();
    for (title, key) in [
        ("Report usage", "test:reports"),
        ("Stay silent", "test:silent"),
    ] {
        ids.push(new_task(title).done_when("").key(key).create(&app).await);
    }
    let (reports, silent) = (ids[0], ids[1]);
    within(
        std::time::Duration::from_secs(90),
        "one in review, the silent one flagged",
        || async {
            app.project().await;
            let store = app.state.log.store();
            let reported = task_rows::get(store, reports).await.unwrap().unwrap();
            let silenced = task_rows::get(store, silent).await.unwrap().unwrap();
            reported.column == pidevops::tasks::Column::InReview && silenced.needs_human
        },
    )
    .await;
    app.project().await;
    let mut ran = Vec::new();
    for id in [reports, silent] {
        let rows = pidevops::projectors::runs::query(
            app.state.log.store(),
            pidevops::projectors::runs::Which::Task(&id.to_string()),
        )
        .await
        .unwrap();
        ran.push(rows.len() as i64);
    }
    assert_eq!(ran, [1, 2], "the runs that happened");
    let (by_repo, _) = read_model(&app, 7).await;
    let spent = by_repo.get(REPO).cloned().unwrap_or_default();
    assert_eq!(
        (
            spent.runs,
            spent.costed_runs,
            spent.input_tokens,
            spent.output_tokens
        ),
        (3, 1, 10, 5),
        "every run counted, one of them costed: {spent:?}"
    );
    let cookie = sign_in(&app).await;
    let (status, html) = get(&app, "/spend?days=7", &cookie).await;
    assert_eq!(status, 200);
    assert!(html.contains(&cells(&spent)), "{html}");
    assert!(
        html.contains("1 of 3 runs reported a cost: the others' is unknown\">≥ $0.0500"),
        "{html}"
    );
    app.stop().await;
}
