//! The dashboard's new-task form (`/tasks/new`) through the real server: the task it makes is exactly what the form
//! said (repository, title and details, scope, done when, approval), through the same board command as the API and
//! the CLI; a resubmitted form makes nothing twice; a repository outside the allow-list (posted by hand), an empty
//! title, an oversized field, a bad approval and a body too large are each refused precisely, the form shown again
//! with what was typed (inert) and nothing created; without a session or its CSRF token nothing happens; with an
//! `owner/*` pattern any repository of that owner may be typed, and no other. Per backend.

use crate::common::{TestApp, TestDb};
use crate::web::{client, csrf, get, redacted, sign_in};
use pidevops::tasks::{ApprovalPolicy, Column, Spec, TaskId};

per_backend!(
    the_form_creates_exactly_the_task_it_was_given_once,
    bad_input_is_refused_precisely_and_creates_nothing,
    the_form_without_a_session_or_csrf_token_creates_nothing,
    an_owner_pattern_lets_any_repository_of_its_owner_be_typed,
);

/// Two repositories named, one of them approving its tasks itself.
fn app_settings(db: &TestDb) -> pidevops::config::Settings {
    let mut settings = crate::common::settings(db);
    settings.file =
        "[intake]\nallow_repos = [\"acme/app\"]\n[repos.\"acme/lib\"]\napproval = \"auto\"\n\
                     [dispatch]\nenabled = false"
            .parse()
            .unwrap();
    settings
}

/// A form's fields, in order.
type Form = Vec<(String, String)>;

/// The value of the hidden input `name` in a page's form.
fn hidden(html: &str, name: &str) -> String {
    let marker = format!(r#"type="hidden" name="{name}" value=""#);
    let at = html
        .find(&marker)
        .unwrap_or_else(|| panic!("a hidden {name}: {html}"))
        + marker.len();
    html[at..].split('"').next().unwrap().to_owned()
}

/// The form's fields as a person fills them, with the page's CSRF token and key.
fn filled(page: &str) -> Vec<(String, String)> {
    [
        ("csrf", csrf(page)),
        ("key", hidden(page, "key")),
        ("repo", "acme/lib".to_owned()),
        ("title", "Keep the <b>query</b> string".to_owned()),
        (
            "details",
            "The login redirect drops it.\r\nKeep it & test it.".to_owned(),
        ),
        ("scope", "src/auth/**".to_owned()),
        ("done_when", "a test shows the query kept".to_owned()),
        ("approval", "manual".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

fn with(form: &[(String, String)], name: &str, value: &str) -> Vec<(String, String)> {
    form.iter()
        .map(|(k, v)| {
            (
                k.clone(),
                if k == name {
                    value.to_owned()
                } else {
                    v.clone()
                },
            )
        })
        .collect()
}

async fn post(
    app: &TestApp,
    cookie: Option<&str>,
    form: &[(String, String)],
) -> (u16, String, String) {
    let mut request = client().post(app.url("/tasks/new")).form(form);
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let location = response
        .headers()
        .get("location")
        .map(|l| l.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, location, response.text().await.unwrap())
}

async fn created(app: &TestApp) -> usize {
    app.all_events()
        .await
        .iter()
        .filter(|e| e.event_type == "task.created")
        .count()
}

async fn the_form_creates_exactly_the_task_it_was_given_once(db: TestDb) {
    let app = TestApp::spawn(app_settings(&db)).await;
    let cookie = sign_in(&app).await;
    // The board links to the form; the form offers the allowed repositories, each with its approval.
    let (status, board) = get(&app, "/", &cookie).await;
    assert_eq!(status, 200);
    assert!(
        board.contains(r#"href="/tasks/new""#),
        "no way to the form: {board}"
    );
    let (status, page) = get(&app, "/tasks/new", &cookie).await;
    assert_eq!(status, 200, "{page}");
    insta::assert_snapshot!("new_task", redacted(&page));
    assert!(
        page.contains(r#"<option value="acme/app">"#)
            && page.contains(r#"<option value="acme/lib">"#),
        "{page}"
    );

    let form = filled(&page);
    let (status, location, body) = post(&app, Some(&cookie), &form).await;
    assert_eq!(status, 303, "{body}");
    let id: TaskId = location
        .strip_prefix("/tasks/")
        .and_then(|rest| rest.split('?').next())
        .unwrap_or_else(|| panic!("redirected to {location}"))
        .parse()
        .unwrap();
    let task = app.state.board.load(id).await.unwrap().unwrap().task;
    assert_eq!(task.repo().as_str(), "acme/lib");
    assert_eq!(
        task.spec(),
        &Spec::new(
            "Keep the <b>query</b> string\n\nThe login redirect drops it.\nKeep it & test it.",
            "src/auth/**",
            "a test shows the query kept",
        )
        .unwrap(),
        "the title, a blank line, the details; lines as LF"
    );
    assert_eq!(
        task.approval(),
        ApprovalPolicy::Manual,
        "the form's approval, not the repository's auto"
    );
    assert_eq!(task.column(), Column::Triage);
    // The redirect lands on the task's page once the read models show it, the title inert.
    let (status, task_page) = get(&app, &location, &cookie).await;
    assert_eq!(status, 200, "{task_page}");
    assert!(
        task_page.contains("Keep the &lt;b&gt;query&lt;/b&gt; string"),
        "{task_page}"
    );
    assert!(!task_page.contains("<b>query"), "{task_page}");

    // The same form again (a double click, a resubmission) is the same task.
    let (status, again, _) = post(&app, Some(&cookie), &form).await;
    assert_eq!(status, 303);
    assert!(again.starts_with(&format!("/tasks/{id}")), "{again}");
    assert_eq!(created(&app).await, 1);

    // The repository's own approval when the form leaves it to the repository: auto, straight to todo.
    let (_, page) = get(&app, "/tasks/new", &cookie).await;
    let form = with(&with(&filled(&page), "approval", ""), "title", "Second");
    let (status, location, body) = post(&app, Some(&cookie), &form).await;
    assert_eq!(status, 303, "{body}");
    let second: TaskId = location
        .trim_start_matches("/tasks/")
        .split('?')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(second, id);
    let task = app.state.board.load(second).await.unwrap().unwrap().task;
    assert_eq!(task.approval(), ApprovalPolicy::Auto);
    assert_eq!(task.column(), Column::Todo);
    assert_eq!(
        task.spec().task(),
        "Second\n\nThe login redirect drops it.\nKeep it & test it."
    );
    let (_, board) = get(&app, &location, &cookie).await;
    assert!(board.contains("Second"), "{board}");
    let (_, board) = get(&app, "/", &cookie).await;
    assert!(
        board.contains(&format!(r#"data-task="{id}""#))
            && board.contains(&format!(r#"data-task="{second}""#)),
        "{board}"
    );
    app.stop().await;
}

async fn bad_input_is_refused_precisely_and_creates_nothing(db: TestDb) {
    let app = TestApp::spawn(app_settings(&db)).await;
    let cookie = sign_in(&app).await;
    let (_, page) = get(&app, "/tasks/new", &cookie).await;
    let form = filled(&page);
    let long = "x".repeat(Spec::MAX_CHARS + 1);
    let cases: Vec<(Form, u16, String)> = vec![
        (
            with(&form, "repo", "evil/repo"),
            403,
            "evil/repo is not an allowed repository".to_owned(),
        ),
        (
            with(&form, "repo", "not a repository"),
            400,
            "repository".to_owned(),
        ),
        (
            with(&form, "repo", ""),
            400,
            "Choose a repository".to_owned(),
        ),
        (
            with(&form, "title", ""),
            400,
            "title must not be empty".to_owned(),
        ),
        (
            with(&form, "title", "  "),
            400,
            "title must not be empty".to_owned(),
        ),
        (
            with(&form, "title", "two\nlines"),
            400,
            "title is one line".to_owned(),
        ),
        (
            with(&form, "scope", &long),
            400,
            format!(
                "spec scope is {} characters; at most {} allowed",
                Spec::MAX_CHARS + 1,
                Spec::MAX_CHARS
            ),
        ),
        (
            with(&form, "details", &long),
            400,
            "spec task is".to_owned(),
        ),
        (
            with(&form, "done_when", "nul\0here"),
            400,
            "spec done_when contains a NUL character".to_owned(),
        ),
        (
            with(&form, "approval", "sometimes"),
            400,
            "unknown approval policy \"sometimes\"".to_owned(),
        ),
    ];
    for (form, status, why) in cases {
        let (got, location, body) = post(&app, Some(&cookie), &form).await;
        assert_eq!(got, status, "{why}: {body}");
        assert!(location.is_empty(), "{why}: redirected to {location}");
        let escaped = why.replace('"', "&quot;");
        assert!(
            body.contains("Not created: ") && body.contains(&escaped),
            "{why}: {body}"
        );
        // The form again, with what was typed, inert.
        assert!(body.contains("<form class=\"new-task\""), "{why}: {body}");
        assert!(
            body.contains("The login redirect drops it.") || why.starts_with("spec task"),
            "{why}: the details kept"
        );
        assert!(!body.contains("<b>query"), "{why}: {body}");
    }
    // A body larger than any form of ours.
    let huge = with(&form, "details", &"y".repeat(1536 * 1024));
    let (status, _, body) = post(&app, Some(&cookie), &huge).await;
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("POST /api/tasks"), "{body}");
    assert_eq!(created(&app).await, 0, "nothing was created");
    app.stop().await;
}

async fn the_form_without_a_session_or_csrf_token_creates_nothing(db: TestDb) {
    let app = TestApp::spawn(app_settings(&db)).await;
    // The form itself is for the signed-in.
    let response = client().get(app.url("/tasks/new")).send().await.unwrap();
    assert_eq!(response.status(), 303);
    assert!(response.headers()["location"]
        .to_str()
        .unwrap()
        .starts_with("/sign-in?next=%2Ftasks%2Fnew"));
    let cookie = sign_in(&app).await;
    let (_, page) = get(&app, "/tasks/new", &cookie).await;
    let form = filled(&page);
    let (status, _, _) = post(&app, None, &form).await;
    assert_eq!(status, 401, "no session");
    let (status, _, _) = post(&app, Some(&cookie), &with(&form, "csrf", "")).await;
    assert_eq!(status, 403, "no CSRF token");
    let (status, _, _) = post(&app, Some(&cookie), &with(&form, "csrf", &"0".repeat(64))).await;
    assert_eq!(status, 403, "a wrong CSRF token");
    let other = sign_in(&app).await;
    let (_, other_page) = get(&app, "/", &other).await;
    let (status, _, _) = post(
        &app,
        Some(&cookie),
        &with(&form, "csrf", &csrf(&other_page)),
    )
    .await;
    assert_eq!(status, 403, "another session's token");
    // A refused post shows nothing of what was posted.
    let (_, _, body) = post(&app, Some(&cookie), &with(&form, "csrf", "")).await;
    assert!(!body.contains("Keep the"), "{body}");
    assert_eq!(created(&app).await, 0, "nothing was created");
    // With both, it goes through.
    let (status, _, body) = post(&app, Some(&cookie), &form).await;
    assert_eq!(status, 303, "{body}");
    assert_eq!(created(&app).await, 1);
    app.stop().await;
}

async fn an_owner_pattern_lets_any_repository_of_its_owner_be_typed(db: TestDb) {
    let mut settings = crate::common::settings(&db);
    settings.file =
        "[intake]\nallow_repos = [\"acme/app\", \"Tools/*\"]\n[dispatch]\nenabled = false"
            .parse()
            .unwrap();
    let app = TestApp::spawn(settings).await;
    let cookie = sign_in(&app).await;
    let (_, page) = get(&app, "/tasks/new", &cookie).await;
    // A name to type, the named repositories offered, and the owner said.
    assert!(
        page.contains(r#"<input id="new-repo" type="text" name="repo" list="new-repos""#)
            && page.contains(r#"<option value="acme/app">"#)
            && page.contains("<code>tools/*</code>"),
        "{page}"
    );
    let form = with(&with(&filled(&page), "repo", "Tools/Lint"), "approval", "");
    let (status, location, body) = post(&app, Some(&cookie), &form).await;
    assert_eq!(status, 303, "{body}");
    let id: TaskId = location
        .trim_start_matches("/tasks/")
        .split('?')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let task = app.state.board.load(id).await.unwrap().unwrap().task;
    assert_eq!(
        task.repo().as_str(),
        "tools/lint",
        "stored under the one spelling"
    );
    // Another owner is still refused, typed or not.
    let (status, _, body) = post(&app, Some(&cookie), &with(&form, "repo", "toolsmith/lint")).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("toolsmith/lint is not an allowed repository"),
        "{body}"
    );
    assert_eq!(created(&app).await, 1);
    app.stop().await;
}
