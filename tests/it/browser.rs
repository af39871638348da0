//! The dashboard in a real browser: headless Chromium (Debian's `chromium` and `chromium-driver`; `.ci/run`
//! installs them) driven over WebDriver with fantoccini, against the real server. Sign in; a task that a signed
//! webhook just created appears on the board without a reload; approve it with its button and see it move; its
//! page shows the timeline; a plan's proposal approved with its button, its items appearing live; sign out and be
//! refused. A finished attempt's diff and transcript on its task's page, collapsible; the health table's row of an
//! unarmed loop in red, its JSON one click away. A flagged task in the needs-a-human lane with its reason, and the
//! board at a phone's width. A task made with the new-task form, at a desk's width and a phone's (`new_task.rs`).
//! The search box narrowing the board, and the events page paging back to the first event (`search_and_events.rs`).
//! Screenshots go to `target/screenshots/`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::{TestApp, TestDb, ADMIN_TOKEN};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

mod new_task;
mod search_and_events;

/// chromedriver on a free loopback port, killed with the test.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn find(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    names.iter().find_map(|name| {
        std::env::split_paths(&path)
            .chain([
                PathBuf::from("/usr/bin"),
                PathBuf::from("/usr/lib/chromium"),
            ])
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

/// The driver and the browser, or `None` (loudly) when they are not installed; under CI their absence fails.
async fn driver() -> Option<(Driver, PathBuf)> {
    let (Some(chromedriver), Some(chromium)) = (
        find(&["chromedriver"]),
        find(&["chromium", "chromium-browser", "google-chrome"]),
    ) else {
        assert!(
            !crate::common::in_ci(),
            "CI must have chromium and chromedriver (.ci/run installs Debian's chromium and chromium-driver)"
        );
        eprintln!("SKIPPED: chromium / chromedriver not installed (apt-get install chromium chromium-driver)");
        return None;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(chromedriver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let url = format!("http://127.0.0.1:{port}");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "chromedriver did not listen"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Some((Driver { child, url }, chromium))
}

async fn browser(driver: &Driver, chromium: &std::path::Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".to_owned(),
        json!({
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1000", "--no-first-run"],
        }),
    );
    // chromedriver listens on loopback over plain http: no TLS.
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a browser session")
}

/// Polls until `css` matches something on the current page (without navigating), or fails after `limit`.
async fn wait_for(client: &Client, css: &str, limit: Duration, what: &str) {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if !client.find_all(Locator::Css(css)).await.unwrap().is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what} ({css}); the page: {}",
            client.source().await.unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The live pages re-render themselves when events arrive, which replaces their elements: one found a moment ago
/// may be gone when it is used (a stale reference). Each try finds the element afresh; only staleness is retried.
async fn fresh<T, F, Fut>(css: &str, mut use_it: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, fantoccini::error::CmdError>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        match use_it().await {
            Ok(value) => return value,
            Err(e)
                if format!("{e:?}").contains("StaleElementReference")
                    && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{css}: {e}"),
        }
    }
}

async fn click(client: &Client, css: &str) {
    fresh(css, || async {
        client.find(Locator::Css(css)).await?.click().await
    })
    .await;
}

async fn text_of(client: &Client, css: &str) -> String {
    fresh(css, || async {
        client.find(Locator::Css(css)).await?.text().await
    })
    .await
}

async fn screenshot(client: &Client, name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, client.screenshot().await.unwrap()).unwrap();
    path
}

/// Signs in with the admin token from the sign-in page (opened first unless the browser is on it already, sent there by
/// a page it asked for) and waits for the board it lands on.
async fn sign_in(client: &Client, app: &TestApp) {
    if !client
        .current_url()
        .await
        .unwrap()
        .path()
        .starts_with("/sign-in")
    {
        client.goto(&app.url("/sign-in")).await.unwrap();
    }
    client
        .find(Locator::Css("input[name=token]"))
        .await
        .unwrap()
        .send_keys(ADMIN_TOKEN)
        .await
        .unwrap();
    click(client, "button[type=submit]").await;
    wait_for(
        client,
        "section[data-column]",
        Duration::from_secs(10),
        "the board",
    )
    .await;
}

/// The `issues.opened` fixture, labeled for pidevops.
fn issue_opened() -> Vec<u8> {
    let mut body: Value = serde_json::from_str(
        &std::fs::read_to_string(
            crate::common::fixtures_dir().join("github/issues/opened.payload.json"),
        )
        .unwrap(),
    )
    .unwrap();
    body["issue"]["labels"] = crate::providers::github::gh_labels(&["pidevops"]);
    body["issue"]["title"] = json!("Make the <b>redirect</b> keep the query string");
    serde_json::to_vec(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sign_in_watch_a_task_arrive_approve_it_read_its_story_and_sign_out() {
    let _cores = crate::common::heavy().await;
    let Some((driver, chromium)) = driver().await else {
        return;
    };
    let db = TestDb::sqlite();
    let mut settings = crate::common::settings(&db);
    settings.file = "[intake]\nallow_repos = [\"Codertocat/Hello-World\"]"
        .parse()
        .unwrap();
    let app = TestApp::spawn(settings).await;
    let client = browser(&driver, &chromium).await;

    // Every page sends a stranger to sign in.
    client.goto(&app.url("/")).await.unwrap();
    assert!(client
        .current_url()
        .await
        .unwrap()
        .path()
        .starts_with("/sign-in"));
    sign_in(&client, &app).await;
    assert_eq!(client.current_url().await.unwrap().path(), "/");
    // The session cookie is out of the page's reach.
    let visible: Value = client
        .execute("return document.cookie;", vec![])
        .await
        .unwrap();
    assert_eq!(
        visible,
        json!(""),
        "HttpOnly: scripts cannot read the session"
    );

    // A signed webhook makes a task; it appears without a reload.
    let r = app
        .post_github("issues", "browser-issue-1", &issue_opened())
        .await;
    assert_eq!(r.status(), 200);
    wait_for(
        &client,
        "section[data-column=triage] article.card",
        Duration::from_secs(15),
        "the new card, live",
    )
    .await;
    assert!(
        !client
            .find_all(Locator::Css("main[data-refreshed]"))
            .await
            .unwrap()
            .is_empty(),
        "the page updated itself"
    );
    let text = text_of(&client, "section[data-column=triage] article.card").await;
    assert!(
        text.contains("Make the <b>redirect</b> keep the query string"),
        "{text}"
    );
    let board_png = screenshot(&client, "board.png").await;

    // Its page: the story so far, and the actions its state allows.
    click(&client, "section[data-column=triage] article.card a").await;
    wait_for(
        &client,
        "table.timeline",
        Duration::from_secs(10),
        "the task page",
    )
    .await;
    let timeline = text_of(&client, "table.timeline").await;
    assert!(timeline.contains("task.created"), "{timeline}");
    click(&client, "button[data-action=approve]").await;
    wait_for(
        &client,
        "h1 .badge[data-column=todo]",
        Duration::from_secs(10),
        "the task in todo",
    )
    .await;
    wait_for(
        &client,
        "table.timeline",
        Duration::from_secs(5),
        "the timeline",
    )
    .await;
    let timeline = text_of(&client, "table.timeline").await;
    assert!(timeline.contains("task.approved"), "{timeline}");
    let task_png = screenshot(&client, "task.png").await;

    // Back on the board it sits in todo.
    client.goto(&app.url("/")).await.unwrap();
    wait_for(
        &client,
        "section[data-column=todo] article.card",
        Duration::from_secs(10),
        "the card in todo",
    )
    .await;

    // A planner's proposal, approved as a whole with its button: its items appear live, the last waiting for the
    // first two.
    let plan = crate::web_plans::proposed_plan(
        &app,
        "Report on the reports",
        crate::web_plans::three_parts(),
    )
    .await;
    app.project().await;
    client
        .goto(&app.url(&format!("/tasks/{plan}")))
        .await
        .unwrap();
    wait_for(
        &client,
        "section.plan ol.proposal li",
        Duration::from_secs(10),
        "the proposal",
    )
    .await;
    let proposal_png = screenshot(&client, "plan-proposed.png").await;
    click(&client, "button[data-action=approve-plan]").await;
    wait_for(
        &client,
        "section.plan table.items tbody tr:nth-child(3) td.waits a",
        Duration::from_secs(15),
        "the plan's three items, live",
    )
    .await;
    let items = text_of(&client, "section.plan table.items").await;
    assert!(
        items.contains("Add the schema") && items.contains("Show the page"),
        "{items}"
    );
    let third = text_of(&client, "section.plan table.items tbody tr:nth-child(3)").await;
    assert!(third.contains("waits for T-3, T-4"), "{third}");
    let plan_png = screenshot(&client, "plan-approved.png").await;

    // Signed out, every page is refused again.
    click(&client, "header form button").await;
    wait_for(
        &client,
        "input[name=token]",
        Duration::from_secs(10),
        "the sign-in form",
    )
    .await;
    client.goto(&app.url("/runs")).await.unwrap();
    assert!(client
        .current_url()
        .await
        .unwrap()
        .path()
        .starts_with("/sign-in"));

    for png in [board_png, task_png, proposal_png, plan_png] {
        let bytes = std::fs::read(&png).unwrap();
        assert!(
            bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
            "{}",
            png.display()
        );
    }
    client.close().await.unwrap();
    app.stop().await;
}

/// The background colour the browser computed for the first element matching `css`.
async fn background(client: &Client, css: &str) -> String {
    let script =
        format!("return getComputedStyle(document.querySelector({css:?})).backgroundColor;");
    client
        .execute(&script, vec![])
        .await
        .unwrap()
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn displayed(client: &Client, css: &str) -> bool {
    fresh(css, || async {
        client.find(Locator::Css(css)).await?.is_displayed().await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_finished_attempts_diff_and_log_on_its_page_and_an_unarmed_loop_red_on_health() {
    use crate::common::agents::{claude_like_agent, dispatch_file, Remote};
    let _cores = crate::common::heavy().await;
    let Some((driver, chromium)) = driver().await else {
        return;
    };
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let script = claude_like_agent(scratch.path());
    let db = TestDb::sqlite();
    let mut settings = crate::common::settings(&db);
    let mut file = dispatch_file(&remote, &script, "");
    // A poller asked for without its credential: unarmed, so /health fails and its row is red.
    file.insert(
        "pollers".to_owned(),
        "[linear]\ninterval_s = 60"
            .parse::<toml::Table>()
            .unwrap()
            .into(),
    );
    settings.file = pidevops::config::FileConfig::try_from(file).unwrap();
    settings.workspace_root = scratch.path().join("ws");
    let app = TestApp::spawn(settings).await;
    let id = crate::common::board::new_task("Keep the query string")
        .done_when("")
        .key("test:browser-diff")
        .create(&app)
        .await;
    let client = browser(&driver, &chromium).await;
    sign_in(&client, &app).await;

    // The task's page follows the attempt live until it has succeeded, then shows its diff and its log.
    client
        .goto(&app.url(&format!("/tasks/{id}")))
        .await
        .unwrap();
    wait_for(
        &client,
        "section.attempt[data-state=succeeded] .diff table.files",
        Duration::from_secs(60),
        "the finished attempt's diff",
    )
    .await;
    let files = text_of(&client, ".diff table.files").await;
    assert!(
        files.contains("README.md") && files.contains("redirect.rs"),
        "{files}"
    );
    assert!(
        files.contains("<img src=x onerror=alert(4)>.txt"),
        "a file name is text: {files}"
    );
    // Each file's patch is collapsible: open (a small patch), closed with a click, open again.
    let patch = "section.attempt details.patch-file:has(ins)";
    assert!(displayed(&client, &format!("{patch} pre.patch ins")).await);
    click(&client, &format!("{patch} > summary")).await;
    assert!(
        !displayed(&client, &format!("{patch} pre.patch")).await,
        "collapsed"
    );
    click(&client, &format!("{patch} > summary")).await;
    let added = text_of(&client, &format!("{patch} pre.patch")).await;
    assert!(added.contains("+"), "{added}");
    let green = background(&client, "pre.patch ins").await;
    assert_ne!(
        green,
        background(&client, "pre.patch .hunk").await,
        "added lines are highlighted"
    );
    // The log as turns and tool calls; a tool call opens to show what it ran and what came back.
    let said = text_of(&client, ".transcript .said").await;
    assert!(
        said.contains("<script>alert('said')</script>"),
        "shown as text: {said}"
    );
    click(&client, ".transcript details.tool > summary").await;
    let tool = text_of(&client, ".transcript details.tool").await;
    assert!(
        tool.contains("Bash") && tool.contains("<a href=\"javascript:alert(3)\">README.md:1</a>"),
        "{tool}"
    );
    assert!(text_of(&client, ".transcript .ended")
        .await
        .contains("The redirect keeps the query string."));
    // Nothing the agent wrote ran: no alert opened, no element came from its text.
    assert!(client.get_alert_text().await.is_err(), "no alert");
    assert!(client
        .find_all(Locator::Css("main img, main a[href^=javascript]"))
        .await
        .unwrap()
        .is_empty());
    let attempt_png = screenshot(&client, "attempt.png").await;

    // Health: the unarmed loop's row is red, a passing one is not; its JSON is one click away.
    client.goto(&app.url("/status")).await.unwrap();
    wait_for(
        &client,
        "tr[data-loop=linear_poller]",
        Duration::from_secs(10),
        "the loops table",
    )
    .await;
    let red = background(&client, "tr[data-loop=linear_poller]").await;
    assert_eq!(red, "rgb(198, 40, 40)", "the unarmed loop's row");
    assert_ne!(
        background(&client, "tr[data-loop='projector:tasks']").await,
        red
    );
    let row = text_of(&client, "tr[data-loop=linear_poller]").await;
    assert!(
        row.contains("unarmed") && row.contains("LINEAR_API_KEY"),
        "{row}"
    );
    let json = "tr[data-loop=linear_poller] details pre";
    assert!(!displayed(&client, json).await, "the JSON starts folded");
    click(&client, "tr[data-loop=linear_poller] details > summary").await;
    assert!(displayed(&client, json).await);
    assert!(text_of(&client, json)
        .await
        .contains("\"state\": \"unarmed\""));
    client
        .execute(
            "document.querySelector('tr[data-loop=linear_poller]').scrollIntoView({block: 'center'});",
            vec![],
        )
        .await
        .unwrap();
    let health_png = screenshot(&client, "health.png").await;
    for png in [attempt_png, health_png] {
        let bytes = std::fs::read(&png).unwrap();
        assert!(
            bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
            "{}",
            png.display()
        );
    }
    client.close().await.unwrap();
    app.stop().await;
}

/// Trouble first, and on a phone too: a flagged task leaves the queue for the "needs a human" lane above the board,
/// its card saying why with the reason's line breaks kept; at a phone's width the board is one column under
/// another and nothing scrolls sideways, the sign-in page included.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flagged_task_leads_the_board_with_its_reason_and_the_board_reads_on_a_phone() {
    use pidevops::tasks::{Command as TaskCommand, Reason};
    let _cores = crate::common::heavy().await;
    let Some((driver, chromium)) = driver().await else {
        return;
    };
    let db = TestDb::sqlite();
    let mut settings = crate::common::settings(&db);
    settings.file = "[intake]\nallow_repos = [\"acme/app\"]\n[dispatch]\nenabled = false"
        .parse()
        .unwrap();
    let app = TestApp::spawn(settings).await;
    let board = &app.state.board;
    let mut ids = Vec::new();
    for title in ["Queued work", "Stuck work"] {
        let draft = pidevops::board::Draft::new(
            "acme/app".parse().unwrap(),
            pidevops::tasks::Spec::new(title, "", "").unwrap(),
            pidevops::tasks::Links::default(),
        );
        let (outcome, _) = board
            .create(draft, &format!("test:lane:{title}"), "api", None)
            .await
            .unwrap();
        ids.push(outcome.task.id());
    }
    let (queued, stuck) = (ids[0], ids[1]);
    board
        .execute(
            stuck,
            &TaskCommand::FlagNeedsHuman {
                reason: Reason::new(
                    "the tests need a database\nand a key for the sandbox".to_owned(),
                )
                .unwrap(),
            },
            "test",
        )
        .await
        .unwrap();
    app.project().await;

    let client = browser(&driver, &chromium).await;
    client.goto(&app.url("/sign-in")).await.unwrap();
    let source = client.source().await.unwrap();
    assert!(
        source.contains(r#"name="viewport" content="width=device-width, initial-scale=1""#),
        "the sign-in page has no viewport: {source}"
    );
    sign_in(&client, &app).await;
    wait_for(
        &client,
        ".lane.flagged",
        Duration::from_secs(10),
        "the needs-a-human lane",
    )
    .await;
    let lane = format!(".lane.flagged article[data-task='{stuck}']");
    // innerText keeps the reason's line break where the lane's CSS keeps it (white-space: pre-line).
    let reason = text_of(&client, &format!("{lane} .reason")).await;
    assert_eq!(
        reason, "the tests need a database\nand a key for the sandbox",
        "the card does not say why, line by line"
    );
    let in_a_column: Vec<_> = client
        .find_all(Locator::Css(&format!(
            "section.column article[data-task='{stuck}']"
        )))
        .await
        .unwrap();
    assert!(
        in_a_column.is_empty(),
        "the flagged task still sits among queued work"
    );
    wait_for(
        &client,
        &format!("section.column article[data-task='{queued}']"),
        Duration::from_secs(5),
        "the queued task in its column",
    )
    .await;
    screenshot(&client, "board-flagged-lane.png").await;

    // A phone's width: no sideways scrolling, the columns stacked.
    client.set_window_size(390, 844).await.unwrap();
    client.refresh().await.unwrap();
    wait_for(
        &client,
        ".lane.flagged",
        Duration::from_secs(10),
        "the lane",
    )
    .await;
    let widths: Value = client
        .execute(
            "const columns = [...document.querySelectorAll('section.column')].map(c => c.getBoundingClientRect());
             return [document.documentElement.scrollWidth, document.documentElement.clientWidth,
                     columns[0].left, columns[1].left, columns[1].top > columns[0].top];",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        widths[0].as_f64() <= widths[1].as_f64(),
        "the board scrolls sideways on a phone: {widths}"
    );
    assert_eq!(
        widths[2], widths[3],
        "the columns are not stacked: {widths}"
    );
    assert_eq!(
        widths[4],
        json!(true),
        "the columns are not stacked: {widths}"
    );
    screenshot(&client, "board-phone.png").await;
    client.goto(&app.url("/sign-out")).await.unwrap();
    client.close().await.unwrap();
    app.stop().await;
}
