//! The dashboard through the real server: each page rendered from seeded read models (HTML snapshots with the
//! volatile values redacted, the same snapshot for both backends), sign-in and sessions, CSRF, and stored webhook
//! bodies rendered inert. Per backend.

use std::time::Duration;

use crate::common::{within, TestApp, TestDb, ADMIN_TOKEN};
use pidevops::board::Draft;
use pidevops::projectors::tasks as task_rows;
use pidevops::tasks::{
    Column, Command, FollowUpOrigin, FollowUpText, GithubRef, Links, Reason, RunId, Spec, TaskId,
    GITHUB_ISSUE,
};
use serde_json::json;

per_backend!(
    every_page_renders_from_the_read_models,
    signing_in_takes_the_admin_token_and_gives_a_safe_cookie,
    actions_without_a_session_or_csrf_token_are_refused_and_change_nothing,
    a_stored_script_renders_as_text,
    the_health_page_turns_red_when_health_fails,
    a_running_attempt_shows_its_log_tail_on_its_page,
    wrong_tokens_are_answered_slowly_and_a_few_at_a_time,
    a_flood_of_wrong_tokens_from_one_address_never_refuses_the_right_one_from_another,
    next_accepts_only_a_same_origin_path,
    a_copied_cookie_is_refused_after_sign_out_on_every_replica,
);

/// A client that keeps no cookies and follows no redirects: every step is explicit.
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Signs in; returns the session cookie (`name=value`).
pub(crate) async fn sign_in(app: &TestApp) -> String {
    let response = client()
        .post(app.url("/sign-in"))
        .form(&[("token", ADMIN_TOKEN), ("next", "/")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    let cookie = response
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    cookie.split(';').next().unwrap().to_owned()
}

pub(crate) async fn get(app: &TestApp, path: &str, cookie: &str) -> (u16, String) {
    let response = client()
        .get(app.url(path))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// The CSRF token in a page's forms.
pub(crate) fn csrf(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .expect("a form with a CSRF token")
        + 19;
    html[at..at + 64].to_owned()
}

pub(crate) async fn task(app: &TestApp, title: &str, links: Links) -> TaskId {
    let draft = Draft::new(
        "acme/app".parse().unwrap(),
        Spec::new(title, "src/auth", "the tests pass").unwrap(),
        links,
    );
    let (outcome, _) = app
        .state
        .board
        .create(draft, &format!("test:{title}"), "api", None)
        .await
        .unwrap();
    outcome.task.id()
}

pub(crate) async fn row(app: &TestApp, id: TaskId) -> Option<task_rows::TaskRow> {
    task_rows::get(app.state.log.store(), id).await.unwrap()
}

/// Redacts what changes from run to run: times, ages, positions, tokens, ids, durations.
pub(crate) fn redacted(html: &str) -> String {
    let rules: [(&str, &str); 9] = [
        (
            r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?",
            "[time]",
        ),
        (r"\b\d{2}:\d{2}:\d{2}\b", "[clock]"),
        (r"\b\d+ (s|min|h|d)\b", "[age]"),
        (r#"data-after="\d+""#, r#"data-after="[position]""#),
        (r"[0-9a-f]{64}", "[token]"),
        (
            r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            "[uuid]",
        ),
        (r"\d+\.\d s", "[duration]"),
        (r"(vm|host)-[\w-]+", "[instance]"),
        (r#"href="/events/\d+""#, r#"href="/events/[position]""#),
    ];
    let mut text = html.to_owned();
    for (pattern, with) in rules {
        text = regex::Regex::new(pattern)
            .unwrap()
            .replace_all(&text, with)
            .into_owned();
    }
    // One tag per line: the snapshot shows the structure.
    text.replace("><", ">\n<")
}

/// Only the tags and their attributes, every number and text redacted: the health page's values (latencies,
/// ticks, lease holders, details) change from one run to the next, its structure does not. A loop's "12 s ago"
/// (a `<time>`) is there once it has ticked, which the snapshot does not wait for: times are left out.
fn structure(html: &str) -> String {
    let tags_only = regex::Regex::new(r">[^<]*<")
        .unwrap()
        .replace_all(&redacted(html), ">\n<")
        .into_owned();
    let tags_only = regex::Regex::new(r"<time[^>]*>\n</time>\n")
        .unwrap()
        .replace_all(&tags_only, "")
        .into_owned();
    regex::Regex::new(r"\d+")
        .unwrap()
        .replace_all(&tags_only, "N")
        .into_owned()
}

async fn every_page_renders_from_the_read_models(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let board = &app.state.board;
    let waiting = task(&app, "Fix the login redirect", Links::default()).await;
    let issue = GithubRef::new("acme/app".parse().unwrap(), 12).unwrap();
    let flagged = task(
        &app,
        "Tame the flaky test",
        Links::default().with(GITHUB_ISSUE, &issue),
    )
    .await;
    board
        .execute(flagged, &Command::Approve, "test")
        .await
        .unwrap();
    // Follow-ups: one in attempt 1's prompt, one handed to its running agent, one waiting (markup in who and what).
    let attach = |n: u32, text: &str, from: &str| Command::AttachFollowUp {
        text: FollowUpText::new(text).unwrap(),
        origin: Some(FollowUpOrigin::new(format!("dashboard:web-{n}"), from).unwrap()),
        send_back: true,
    };
    board
        .execute(
            flagged,
            &attach(1, "Run it against Postgres too.", "@octocat on acme/app#12"),
            "test",
        )
        .await
        .unwrap();
    let run = RunId(uuid::Uuid::now_v7());
    board
        .execute(flagged, &Command::Start { run }, "test")
        .await
        .unwrap();
    board
        .execute(
            flagged,
            &attach(2, "Skip the retries.", "Ann on Telegram"),
            "test",
        )
        .await
        .unwrap();
    board
        .execute(
            flagged,
            &Command::DeliverFollowUps {
                run,
                indices: vec![1],
            },
            "test",
        )
        .await
        .unwrap();
    board
        .execute(
            flagged,
            &attach(
                3,
                "<script>alert('said')</script>",
                "<b>Mallory</b> on Linear",
            ),
            "test",
        )
        .await
        .unwrap();
    board
        .execute(
            flagged,
            &Command::FlagNeedsHuman {
                reason: Reason::new("the test needs a database".to_owned()).unwrap(),
            },
            "test",
        )
        .await
        .unwrap();
    app.project().await;
    assert!(row(&app, waiting).await.is_some());
    assert!(row(&app, flagged).await.is_some_and(|r| r.needs_human));
    let cookie = sign_in(&app).await;

    let (status, board_html) = get(&app, "/", &cookie).await;
    assert_eq!(status, 200);
    assert!(board_html.len() < 200 * 1024);
    insta::assert_snapshot!("board", redacted(&board_html));

    let (status, task_html) = get(&app, &format!("/tasks/{flagged}"), &cookie).await;
    assert_eq!(status, 200);
    insta::assert_snapshot!("task", redacted(&task_html));
    // The actions the state allows: a flagged task in progress can be retried or cancelled, not approved.
    assert!(
        task_html.contains(r#"data-action="retry""#)
            && task_html.contains(r#"data-action="cancel""#)
    );
    assert!(!task_html.contains(r#"data-action="approve""#));

    let (status, runs_html) = get(&app, "/runs", &cookie).await;
    assert_eq!(status, 200);
    insta::assert_snapshot!("runs", redacted(&runs_html));

    let (status, health_html) = get(&app, "/status", &cookie).await;
    assert_eq!(status, 200);
    assert!(
        health_html.contains(r#"data-status="pass""#),
        "{health_html}"
    );
    assert!(health_html.contains(r#"data-loop="projector:tasks""#));
    insta::assert_snapshot!("health", structure(&health_html));

    let (status, events_html) = get(&app, "/events?source=pidevops&type=task.", &cookie).await;
    assert_eq!(status, 200);
    assert!(events_html.contains("task.flagged_needs_human"));
    assert!(!events_html.contains("<td>github</td>"));
    insta::assert_snapshot!("events", redacted(&events_html));

    let (status, missing) = get(&app, "/tasks/T-999", &cookie).await;
    assert_eq!(status, 404, "{missing}");
    app.stop().await;
}

async fn signing_in_takes_the_admin_token_and_gives_a_safe_cookie(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    // Without a session every page sends you to sign in, remembering where you were going.
    for path in ["/", "/runs", "/spend", "/status", "/events", "/tasks/T-1"] {
        let response = client().get(app.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 303, "{path}");
        let to = response.headers()["location"].to_str().unwrap();
        assert!(to.starts_with("/sign-in?next="), "{to}");
    }
    let live = client().get(app.url("/live")).send().await.unwrap();
    assert_eq!(live.status(), 401);

    let wrong = client()
        .post(app.url("/sign-in"))
        .form(&[("token", "not-the-token"), ("next", "/")])
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    assert!(wrong.headers().get("set-cookie").is_none());

    // Somewhere else after signing in? Only on this site.
    let response = client()
        .post(app.url("/sign-in"))
        .form(&[("token", ADMIN_TOKEN), ("next", "//evil.example/")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(response.headers()["location"], "/");
    let set_cookie = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(set_cookie.contains(flag), "{set_cookie}");
    }
    assert!(
        !set_cookie.contains(ADMIN_TOKEN),
        "the cookie is not the token"
    );
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    let (status, html) = get(&app, "/", &cookie).await;
    assert_eq!(status, 200);
    assert!(!html.contains(ADMIN_TOKEN), "no page shows a secret");
    let pages = ["/", "/runs", "/status", "/events"];
    for path in pages {
        let (_, html) = get(&app, path, &cookie).await;
        for secret in [
            ADMIN_TOKEN,
            crate::common::GITHUB_SECRET,
            crate::common::LINEAR_SECRET,
            crate::common::TELEGRAM_SECRET,
        ] {
            assert!(!html.contains(secret), "{path} shows a secret");
        }
    }
    // A forged or tampered cookie is no session.
    let tampered = format!(
        "{}0",
        cookie.trim_end_matches(|c: char| c.is_ascii_hexdigit())
    );
    assert_eq!(get(&app, "/", &tampered).await.0, 303);

    // Signing out needs the form's token, and ends the session for this browser.
    let token = csrf(&html);
    let out = client()
        .post(app.url("/sign-out"))
        .header("cookie", &cookie)
        .form(&[("csrf", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 303);
    assert!(out.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .contains("Max-Age=0"));
    app.stop().await;

    // Without PIDEVOPS_ADMIN_TOKEN the dashboard is closed.
    let mut settings = crate::common::settings(&db);
    settings.admin_token = None;
    let closed = TestApp::spawn(settings).await;
    let page = client().get(closed.url("/sign-in")).send().await.unwrap();
    assert_eq!(page.status(), 503);
    assert!(page
        .text()
        .await
        .unwrap()
        .contains("PIDEVOPS_ADMIN_TOKEN is not set"));
    let refused = client()
        .post(closed.url("/sign-in"))
        .form(&[("token", ""), ("next", "/")])
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().get("set-cookie").is_none());
    closed.stop().await;
}

async fn actions_without_a_session_or_csrf_token_are_refused_and_change_nothing(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let id = task(&app, "Needs approval", Links::default()).await;
    app.project().await;
    assert!(row(&app, id)
        .await
        .is_some_and(|r| r.column == Column::Triage));
    let cookie = sign_in(&app).await;
    let (_, html) = get(&app, &format!("/tasks/{id}"), &cookie).await;
    let token = csrf(&html);
    let approve = app.url(&format!("/tasks/{id}/approve"));
    let version = app.state.board.load(id).await.unwrap().unwrap().version;

    let no_session = client()
        .post(&approve)
        .form(&[("csrf", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(no_session.status(), 401);
    let no_token = client()
        .post(&approve)
        .header("cookie", &cookie)
        .form(&[("other", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(no_token.status(), 403);
    let wrong_token = client()
        .post(&approve)
        .header("cookie", &cookie)
        .form(&[("csrf", "0".repeat(64).as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_token.status(), 403);
    // Another session's token does not fit this one.
    let other = sign_in(&app).await;
    let (_, other_html) = get(&app, "/", &other).await;
    let crossed = client()
        .post(&approve)
        .header("cookie", &cookie)
        .form(&[("csrf", csrf(&other_html).as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(crossed.status(), 403);
    assert_eq!(
        app.state.board.load(id).await.unwrap().unwrap().version,
        version,
        "nothing changed"
    );

    // With both, it goes through, and the page then offers what the new state allows.
    let approved = client()
        .post(&approve)
        .header("cookie", &cookie)
        .form(&[("csrf", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(approved.status(), 303);
    assert_eq!(
        app.state
            .board
            .load(id)
            .await
            .unwrap()
            .unwrap()
            .task
            .column(),
        Column::Todo
    );
    let again = client()
        .post(&approve)
        .header("cookie", &cookie)
        .form(&[("csrf", token.as_str())])
        .send()
        .await
        .unwrap();
    // A second press (a double click) changes nothing.
    assert_eq!(again.status(), 303);
    let approved_version = app.state.board.load(id).await.unwrap().unwrap().version;
    assert_eq!(approved_version, version + 1, "one approval");
    // An action the state does not allow is refused with why.
    let reject = client()
        .post(app.url(&format!("/tasks/{id}/archive")))
        .header("cookie", &cookie)
        .form(&[("csrf", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(reject.status(), 409);
    assert!(reject.text().await.unwrap().contains("archive"));
    app.stop().await;
}

async fn a_stored_script_renders_as_text(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let body = json!({ "zen": "<script>alert('owned')</script>", "hook_id": 1 }).to_string();
    let response = app
        .post_github("ping", "delivery-script-1", body.as_bytes())
        .await;
    assert_eq!(response.status(), 200);
    let position: i64 = response.json::<serde_json::Value>().await.unwrap()["position"]
        .as_i64()
        .unwrap();
    let id = task(&app, "<script>alert('title')</script>", Links::default()).await;
    app.project().await;
    assert!(row(&app, id).await.is_some());
    let cookie = sign_in(&app).await;
    for path in [
        format!("/events/{position}"),
        format!("/tasks/{id}"),
        "/".to_owned(),
    ] {
        let response = client()
            .get(app.url(&path))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        let csp = response.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(csp.contains("script-src 'self'"), "{csp}");
        let html = response.text().await.unwrap();
        assert!(!html.contains("<script>alert"), "{path}: {html}");
        assert!(html.contains("&lt;script&gt;alert"), "{path}: {html}");
        // Our own script is the only one, by address.
        assert_eq!(html.matches("<script").count(), 1, "{path}");
    }
    // The live stream tells a page where the log is and what happened, never a body.
    let mut live = client()
        .get(app.url(&format!("/live?after={}", position - 1)))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(live.status(), 200);
    let first = tokio::time::timeout(Duration::from_secs(5), live.chunk())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&first).into_owned();
    assert!(
        text.contains(&format!("id: {position}")) && text.contains("data: github.ping"),
        "{text}"
    );
    assert!(!text.contains("script"), "{text}");
    drop(live);
    app.stop().await;
}

async fn the_health_page_turns_red_when_health_fails(db: TestDb) {
    let mut settings = crate::common::settings(&db);
    // A poller asked for without its credential: /health fails, and so must the page.
    settings.file = "[pollers.linear]\ninterval_s = 60".parse().unwrap();
    let app = TestApp::spawn(settings).await;
    assert_eq!(app.health().await.0, 503);
    let cookie = sign_in(&app).await;
    let (status, html) = get(&app, "/status", &cookie).await;
    assert_eq!(status, 200);
    assert!(html.contains(r#"data-status="fail""#), "{html}");
    let row = html
        .split("<tr ")
        .find(|r| r.contains(r#"data-loop="linear_poller""#))
        .unwrap_or_else(|| panic!("{html}"));
    assert!(
        row.contains("status-fail") && row.contains("LINEAR_API_KEY"),
        "{row}"
    );
    // Only what fails is red: a loop that ticks is not.
    let passing = html
        .split("<tr ")
        .find(|r| r.contains(r#"data-loop="projector:tasks""#))
        .unwrap_or_else(|| panic!("{html}"));
    assert!(
        passing.contains(r#"data-health="pass""#) && !passing.contains("status-"),
        "{passing}"
    );
    app.stop().await;
}

async fn a_running_attempt_shows_its_log_tail_on_its_page(db: TestDb) {
    use crate::common::agents::{agent, Remote};
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let script = agent(
        scratch.path(),
        "talks.sh",
        "echo 'reading the <code> & thinking'; sleep 600",
    );
    let (app, id) = crate::web::app_with_agent_task(
        &db,
        &remote,
        &script,
        scratch.path(),
        "Think out loud",
        "test:tail",
    )
    .await;
    let cookie = sign_in(&app).await;
    within(
        Duration::from_secs(30),
        "the log tail on the page",
        || async {
            let (_, html) = get(&app, &format!("/tasks/{id}"), &cookie).await;
            html.contains("reading the &lt;code&gt; &amp; thinking")
        },
    )
    .await;
    let (_, html) = get(&app, &format!("/tasks/{id}"), &cookie).await;
    assert!(html.contains(r#"<tr data-state="running">"#), "{html}");
    assert!(html.contains(r#"data-action="cancel""#));
    app.state
        .board
        .steer(id, pidevops::board::Steer::Cancel, None, "test", "test")
        .await
        .unwrap();
    app.stop().await;
}

async fn wrong_tokens_are_answered_slowly_and_a_few_at_a_time(db: TestDb) {
    let _cores = crate::common::timed().await;
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let url = app.url("/sign-in");
    let wrong = |timeout: Duration| {
        let url = url.clone();
        async move {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(timeout)
                .build()
                .unwrap()
                .post(url)
                .form(&[("token", "a-guess"), ("next", "/")])
                .send()
                .await
        }
    };
    // Clients that give up mid-wait leave nothing counted behind.
    for _ in 0..6 {
        assert!(wrong(Duration::from_millis(100)).await.is_err());
    }
    // They let go of their slots (at the latest when their second is up; a client gone mid-wait ends it sooner).
    within(
        Duration::from_secs(10),
        "the abandoned sign-ins let go",
        || async { app.state.sign_ins.addresses() == 0 },
    )
    .await;
    let started = std::time::Instant::now();
    let single = wrong(Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        single.status(),
        401,
        "the abandoned ones were not left counted"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "a wrong token waits"
    );

    // A wave of guesses: a few are checked (slowly), the rest turned away unchecked.
    let wave: Vec<_> = (0..10).map(|_| wrong(Duration::from_secs(10))).collect();
    let statuses: Vec<u16> = futures::future::join_all(wave)
        .await
        .into_iter()
        .map(|r| r.unwrap().status().as_u16())
        .collect();
    let checked = statuses.iter().filter(|s| **s == 401).count();
    let refused = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!(checked + refused, 10, "{statuses:?}");
    assert!(refused >= 1 && checked >= 1, "{statuses:?}");
    // Once they are answered, the right token signs in at once.
    let started = std::time::Instant::now();
    sign_in(&app).await;
    assert!(started.elapsed() < Duration::from_millis(900));
    app.stop().await;
}

/// A client without cookies or redirects whose connections come from `local` (any 127/8 address is loopback).
fn client_from(local: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address(std::net::IpAddr::from(local))
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

async fn a_flood_of_wrong_tokens_from_one_address_never_refuses_the_right_one_from_another(
    db: TestDb,
) {
    let _cores = crate::common::heavy().await;
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let url = app.url("/sign-in");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let turned_away = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Six guessers from 127.0.0.1, each sending its next guess as soon as the last is answered: four are held
    // a second each, the others are turned away at once, over and over.
    let flood: Vec<_> = (0..6)
        .map(|_| {
            let (url, stop, turned_away) = (url.clone(), stop.clone(), turned_away.clone());
            tokio::spawn(async move {
                let guesser = client_from([127, 0, 0, 1]);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let status = guesser
                        .post(&url)
                        .form(&[("token", "a-guess"), ("next", "/")])
                        .send()
                        .await
                        .unwrap()
                        .status();
                    assert!(status == 401 || status == 429, "{status}");
                    if status == 429 {
                        turned_away.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    within(
        Duration::from_secs(20),
        "the flood saturates its address",
        || async { turned_away.load(std::sync::atomic::Ordering::Relaxed) >= 3 },
    )
    .await;

    let sign_in_from = |local: [u8; 4], token: &'static str| {
        let url = url.clone();
        async move {
            let started = std::time::Instant::now();
            let response = client_from(local)
                .post(url)
                .form(&[("token", token), ("next", "/runs")])
                .send()
                .await
                .unwrap();
            (response.status().as_u16(), started.elapsed())
        }
    };
    // While it floods: the right token from other addresses signs in at once.
    for local in [[127, 0, 0, 2], [127, 0, 0, 3]] {
        let (status, took) = sign_in_from(local, ADMIN_TOKEN).await;
        assert_eq!(status, 303, "the right token from {local:?} while flooded");
        assert!(
            took < Duration::from_millis(900),
            "not queued behind a wrong guess: {took:?}"
        );
    }
    // The flooding address learns nothing from being turned away: once its share is taken, even the right token
    // gets the same 429, unchecked (a 429 for wrong tokens only would tell a fast guesser which one was right).
    let mut statuses = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let (status, _) = sign_in_from([127, 0, 0, 1], ADMIN_TOKEN).await;
        statuses.insert(status);
        if status == 429 {
            break;
        }
    }
    assert!(statuses.contains(&429), "{statuses:?}");
    // A wrong token from another address is checked and answered (slowly), not turned away.
    let (status, _) = sign_in_from([127, 0, 0, 2], "another-guess").await;
    assert_eq!(status, 401, "another address has its own share");

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for guesser in flood {
        guesser.await.unwrap();
    }
    // Nothing is remembered once every wrong guess is answered.
    within(
        Duration::from_secs(10),
        "no address left counted",
        || async { app.state.sign_ins.addresses() == 0 },
    )
    .await;
    app.stop().await;
}

async fn next_accepts_only_a_same_origin_path(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let table: &[(&str, &str)] = &[
        ("/tasks/T-1", "/tasks/T-1"),
        (
            "/events?source=github&type=task.",
            "/events?source=github&type=task.",
        ),
        ("/caf%C3%A9", "/caf%C3%A9"),
        ("//evil.example/", "/"),
        ("///evil.example/", "/"),
        ("/\\evil.example/", "/"),
        ("\\\\evil.example/", "/"),
        ("/\t/evil.example/", "/"),
        ("\t//evil.example/", "/"),
        ("/a\r\nSet-Cookie: x=1", "/"),
        ("/a\u{0}b", "/"),
        ("/%2F%2Fevil.example/", "/"),
        ("%2F%2Fevil.example/", "/"),
        ("/%2f/evil.example/", "/"),
        ("/%5Cevil.example/", "/"),
        ("/%5c%5cevil.example/", "/"),
        ("/%09/evil.example/", "/"),
        ("/%0d%0aLocation:%20https://evil.example/", "/"),
        ("/%00", "/"),
        ("/%252F%252Fevil.example/", "/"),
        ("/caf\u{e9}", "/"),
        ("https://evil.example/", "/"),
        ("javascript:alert(1)", "/"),
        ("", "/"),
    ];
    for (next, expected) in table {
        // The form after signing in redirects there, or home.
        let response = client()
            .post(app.url("/sign-in"))
            .form(&[("token", ADMIN_TOKEN), ("next", next)])
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 303, "{next:?}");
        assert_eq!(response.headers()["location"], *expected, "{next:?}");
        // The sign-in page carries the same value in its form, and never fails.
        let page = client()
            .get(app.url("/sign-in"))
            .query(&[("next", next)])
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 200, "{next:?}");
        let html = page.text().await.unwrap();
        let escaped = expected.replace('&', "&amp;");
        assert!(
            html.contains(&format!(r#"name="next" value="{escaped}""#)),
            "{next:?}: {html}"
        );
    }
    app.stop().await;
}

async fn a_copied_cookie_is_refused_after_sign_out_on_every_replica(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let other = TestApp::spawn(crate::common::settings(&db)).await;
    let id = task(&app, "Still in triage", Links::default()).await;
    app.project().await;
    assert!(row(&app, id)
        .await
        .is_some_and(|r| r.column == Column::Triage));
    let cookie = sign_in(&app).await;
    let copied = cookie.clone();
    let (status, html) = get(&app, &format!("/tasks/{id}"), &cookie).await;
    assert_eq!(status, 200);
    let token = csrf(&html);
    assert_eq!(
        get(&other, "/", &copied).await.0,
        200,
        "a session works on every replica"
    );

    let out = client()
        .post(app.url("/sign-out"))
        .header("cookie", &cookie)
        .form(&[("csrf", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 303);

    // The copy is no session anywhere: pages send it to sign in, the live feed and actions refuse it.
    for replica in [&app, &other] {
        for path in ["/", "/runs", "/events", "/status"] {
            let (status, _) = get(replica, path, &copied).await;
            assert_eq!(status, 303, "{path} after sign-out");
        }
        let live = client()
            .get(replica.url("/live"))
            .header("cookie", &copied)
            .send()
            .await
            .unwrap();
        assert_eq!(live.status(), 401);
        let action = client()
            .post(replica.url(&format!("/tasks/{id}/cancel")))
            .header("cookie", &copied)
            .form(&[("csrf", token.as_str())])
            .send()
            .await
            .unwrap();
        assert_eq!(action.status(), 401, "an action with the copied cookie");
    }
    let row = row(&app, id).await.unwrap();
    assert_eq!(row.column, Column::Triage, "nothing changed");

    // The sign-out is on the record, by the session's id: nothing in it makes a cookie.
    let events = app.all_events().await;
    let signed_out: Vec<_> = events
        .iter()
        .filter(|e| e.event_type == "pidevops.dashboard.signed_out")
        .collect();
    assert_eq!(signed_out.len(), 1);
    let body = String::from_utf8_lossy(&signed_out[0].body).into_owned();
    let value = cookie.split_once('=').unwrap().1;
    for part in value.split('.').skip(2) {
        assert!(!body.contains(part), "{body}");
    }
    // Signing in again makes a new session that works.
    let fresh = sign_in(&other).await;
    assert_eq!(get(&app, "/", &fresh).await.0, 200);
    other.stop().await;
    app.stop().await;
}

/// An app whose dispatcher runs `script` against `remote` (workspaces under `scratch`), and a task it will run.
pub(crate) async fn app_with_agent_task(
    db: &TestDb,
    remote: &crate::common::agents::Remote,
    script: &std::path::Path,
    scratch: &std::path::Path,
    title: &str,
    key: &str,
) -> (TestApp, TaskId) {
    app_with_agent_profile_task(db, remote, (script, ""), scratch, title, key).await
}

/// [`app_with_agent_task`] with more of the agent's profile (`profile_extra`: TOML lines of `[agents.fake]`).
pub(crate) async fn app_with_agent_profile_task(
    db: &TestDb,
    remote: &crate::common::agents::Remote,
    (script, profile_extra): (&std::path::Path, &str),
    scratch: &std::path::Path,
    title: &str,
    key: &str,
) -> (TestApp, TaskId) {
    let mut settings = crate::common::settings(db);
    settings.file = pidevops::config::FileConfig::try_from(crate::common::agents::dispatch_file(
        remote,
        script,
        profile_extra,
    ))
    .unwrap();
    settings.workspace_root = scratch.join("ws");
    let app = TestApp::spawn(settings).await;
    let draft = Draft::new(
        crate::common::agents::REPO.parse().unwrap(),
        Spec::new(title, "", "").unwrap(),
        Links::default(),
    );
    let (outcome, _) = app
        .state
        .board
        .create(draft, key, "api", None)
        .await
        .unwrap();
    let id = outcome.task.id();
    (app, id)
}
