//! The board's search box and the events page's paging in a real browser: a word typed into the box and sent with
//! Enter leaves only the cards whose title or spec holds it (the spec's done-when too, any case); the events page
//! shows the newest hundred, and its "older" link pages back to the log's first event.

use std::time::Duration;

use fantoccini::{key::Key, Locator};

use super::{browser, click, driver, screenshot, sign_in, wait_for};
use crate::common::{TestApp, TestDb};

/// More tasks than the events page shows at once, so its first page cannot hold the first event.
const TASKS: usize = 130;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_search_box_narrows_the_board_and_the_events_page_pages_back_to_the_first_event() {
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
    for n in 0..TASKS {
        // Two of them hold the word searched for: one in its title, one only in its done-when, in capitals.
        let (title, done_when) = match n {
            7 => ("Fix the flaky Pelican importer".to_owned(), String::new()),
            90 => (
                format!("Routine task {n}"),
                "the PELICAN fixture passes".to_owned(),
            ),
            _ => (format!("Routine task {n}"), String::new()),
        };
        let draft = pidevops::board::Draft::new(
            "acme/app".parse().unwrap(),
            pidevops::tasks::Spec::new(title, "", done_when).unwrap(),
            pidevops::tasks::Links::default(),
        );
        let (outcome, _) = board
            .create(draft, &format!("test:search:{n}"), "api", None)
            .await
            .unwrap();
        ids.push(outcome.task.id());
    }
    app.project().await;
    let (title_match, spec_match, other) = (ids[7], ids[90], ids[3]);

    let client = browser(&driver, &chromium).await;
    sign_in(&client, &app).await;
    wait_for(
        &client,
        &format!("article[data-task='{other}']"),
        Duration::from_secs(10),
        "an ordinary card before the search",
    )
    .await;
    let search = client
        .find(Locator::Css("form.filters input[name=q]"))
        .await
        .unwrap();
    search.send_keys("pelican").await.unwrap();
    search.send_keys(&Key::Enter.to_string()).await.unwrap();
    wait_for(
        &client,
        &format!("article[data-task='{spec_match}']"),
        Duration::from_secs(10),
        "the card whose done-when holds the word",
    )
    .await;
    // Read in one script: the live board may re-render between two WebDriver calls.
    let shown = client
        .execute(
            "return [...new Set([...document.querySelectorAll('article[data-task]')].map(a => a.dataset.task))].sort();",
            vec![],
        )
        .await
        .unwrap();
    let shown: Vec<String> = serde_json::from_value(shown).unwrap();
    let mut expected = vec![title_match.to_string(), spec_match.to_string()];
    expected.sort();
    assert_eq!(shown, expected, "the board searched shows only the matches");
    let kept = client
        .execute(
            "return document.querySelector('form.filters input[name=q]').value;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(kept, "pelican", "the box says what it searched");
    screenshot(&client, "board-searched.png").await;

    // The events page: the newest hundred, then "older" back to the first event.
    client.goto(&app.url("/events")).await.unwrap();
    wait_for(
        &client,
        "table.events tbody tr",
        Duration::from_secs(10),
        "the events page",
    )
    .await;
    let first_page = client
        .find_all(Locator::Css("table.events tbody tr"))
        .await
        .unwrap()
        .len();
    assert_eq!(first_page, 100, "the events page shows a hundred at a time");
    assert!(
        client
            .find_all(Locator::Css("a[href='/events/1']"))
            .await
            .unwrap()
            .is_empty(),
        "the first event is on the first page already: nothing to page back to"
    );
    click(&client, "a[href^='/events?before=']").await;
    wait_for(
        &client,
        "a[href='/events/1']",
        Duration::from_secs(10),
        "the log's first event, one page back",
    )
    .await;
    screenshot(&client, "events-older.png").await;
    client.goto(&app.url("/sign-out")).await.unwrap();
    client.close().await.unwrap();
    app.stop().await;
}
