//! The new-task form in a real browser: from the board to the form, filled and sent, onto the new task's page, and
//! the task on the board; at a desk's width, then at a phone's (390 px), where the form fits without sideways
//! scrolling.

use std::time::Duration;

use fantoccini::{Client, Locator};
use serde_json::Value;

use super::{browser, click, driver, screenshot, sign_in, text_of, wait_for};
use crate::common::{TestApp, TestDb};

struct Filled<'a> {
    repo: &'a str,
    title: &'a str,
    details: &'a str,
    scope: &'a str,
    done_when: &'a str,
    approval: &'a str,
}

async fn type_into(client: &Client, css: &str, text: &str) {
    client
        .find(Locator::Css(css))
        .await
        .unwrap()
        .send_keys(text)
        .await
        .unwrap();
}

/// From the board: the form opened with its button, filled as `task` says, sent; back on the new task's page.
async fn create(client: &Client, task: &Filled<'_>) -> String {
    click(client, "a[data-action=new-task]").await;
    wait_for(
        client,
        "form.new-task",
        Duration::from_secs(10),
        "the new-task form",
    )
    .await;
    assert_eq!(client.current_url().await.unwrap().path(), "/tasks/new");
    click(
        client,
        &format!("select[name=repo] option[value='{}']", task.repo),
    )
    .await;
    type_into(client, "#new-title", task.title).await;
    type_into(client, "#new-details", task.details).await;
    type_into(client, "#new-scope", task.scope).await;
    type_into(client, "#new-done-when", task.done_when).await;
    click(
        client,
        &format!("input[name=approval][value='{}']", task.approval),
    )
    .await;
    click(client, "button[data-action=create-task]").await;
    wait_for(
        client,
        "table.timeline",
        Duration::from_secs(10),
        "the new task's page",
    )
    .await;
    let path = client.current_url().await.unwrap().path().to_owned();
    let id = path
        .strip_prefix("/tasks/T-")
        .unwrap_or_else(|| panic!("not a task's page: {path}"));
    format!("T-{id}")
}

/// Whether the page scrolls sideways, and the form's right edge against the window's width.
async fn fits(client: &Client, css: &str) -> Value {
    client
        .execute(
            &format!(
                "const r = document.querySelector({css:?}).getBoundingClientRect();
                 return [document.documentElement.scrollWidth <= document.documentElement.clientWidth,
                         r.right <= document.documentElement.clientWidth];"
            ),
            vec![],
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_made_with_the_form_opens_its_page_and_sits_on_the_board_on_a_desk_and_a_phone() {
    let _cores = crate::common::heavy().await;
    let Some((driver, chromium)) = driver().await else {
        return;
    };
    let db = TestDb::sqlite();
    let mut settings = crate::common::settings(&db);
    settings.file =
        "[intake]\nallow_repos = [\"acme/app\", \"acme/lib\"]\n[dispatch]\nenabled = false"
            .parse()
            .unwrap();
    let app = TestApp::spawn(settings).await;
    let client = browser(&driver, &chromium).await;
    client.goto(&app.url("/")).await.unwrap();
    sign_in(&client, &app).await;

    // At a desk: a task for acme/lib waiting for approval, its markup text.
    let desk = create(
        &client,
        &Filled {
            repo: "acme/lib",
            title: "Keep the <b>query</b> string",
            details: "The login redirect drops it.",
            scope: "src/auth/**",
            done_when: "a test shows the query kept",
            approval: "manual",
        },
    )
    .await;
    let heading = text_of(&client, "main h1").await;
    assert!(
        heading.contains(&desk) && heading.contains("Keep the <b>query</b> string"),
        "{heading}"
    );
    wait_for(
        &client,
        "h1 .badge[data-column=triage]",
        Duration::from_secs(5),
        "the task in triage",
    )
    .await;
    let spec = field_value(&client, "#spec-task").await;
    assert_eq!(
        spec,
        "Keep the <b>query</b> string\n\nThe login redirect drops it."
    );
    assert_eq!(field_value(&client, "#spec-scope").await, "src/auth/**");
    assert_eq!(
        field_value(&client, "#spec-done-when").await,
        "a test shows the query kept"
    );
    screenshot(&client, "new-task-created.png").await;
    client.goto(&app.url("/")).await.unwrap();
    wait_for(
        &client,
        &format!("section[data-column=triage] article[data-task='{desk}']"),
        Duration::from_secs(10),
        "the new task on the board",
    )
    .await;
    let card = text_of(&client, &format!("article[data-task='{desk}']")).await;
    assert!(card.contains("acme/lib"), "{card}");

    // On a phone: the form fits the screen, and a task approved at once lands in todo.
    client.set_window_size(390, 844).await.unwrap();
    client.refresh().await.unwrap();
    wait_for(
        &client,
        "a[data-action=new-task]",
        Duration::from_secs(10),
        "the board's new-task button",
    )
    .await;
    click(&client, "a[data-action=new-task]").await;
    wait_for(
        &client,
        "form.new-task",
        Duration::from_secs(10),
        "the form",
    )
    .await;
    assert_eq!(
        fits(&client, "form.new-task").await,
        serde_json::json!([true, true]),
        "the form scrolls sideways on a phone"
    );
    screenshot(&client, "new-task-phone.png").await;
    client.back().await.unwrap();
    wait_for(
        &client,
        "a[data-action=new-task]",
        Duration::from_secs(10),
        "the board again",
    )
    .await;
    let phone = create(
        &client,
        &Filled {
            repo: "acme/app",
            title: "Typed on a phone",
            details: "",
            scope: "",
            done_when: "it reads well",
            approval: "auto",
        },
    )
    .await;
    assert_ne!(phone, desk);
    wait_for(
        &client,
        "h1 .badge[data-column=todo]",
        Duration::from_secs(5),
        "the auto-approved task in todo",
    )
    .await;
    assert!(text_of(&client, "main h1")
        .await
        .contains("Typed on a phone"));
    client.goto(&app.url("/")).await.unwrap();
    wait_for(
        &client,
        &format!("section[data-column=todo] article[data-task='{phone}']"),
        Duration::from_secs(10),
        "the phone's task on the board",
    )
    .await;
    screenshot(&client, "new-task-board-phone.png").await;
    client.close().await.unwrap();
    app.stop().await;
}

/// A form field's current value (a textarea's text as the browser holds it).
async fn field_value(client: &Client, css: &str) -> String {
    client
        .find(Locator::Css(css))
        .await
        .unwrap()
        .prop("value")
        .await
        .unwrap()
        .unwrap_or_default()
}
