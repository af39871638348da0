//! Plans, triage and attempt reports on the dashboard, through the real server: a plan's proposal item by item with
//! its forms (approve as a whole; reject with a comment, which is required), its items once approved with what each
//! waits for, the board's plan and item cards, a triage agent's rewrite edited (and refused precisely) before it is
//! approved, the last attempt's report and its runs' failures in words. HTML snapshots of the new pages (redacted,
//! one for both backends), every value of a hostile plan, review and spec inert, every form refused without its
//! session or CSRF token, and a planner agent's plan approved on its page. Per backend.

use std::time::Duration;

use crate::common::agents::Remote;
use crate::common::board;
use crate::common::{within, TestApp, TestDb};
use crate::web::{client, csrf, get, redacted, sign_in, task};
use pidevops::board::Draft;
use pidevops::domain::runs::{self as run_events, FailureKind, RunEvent};
use pidevops::domain::{EventType, NewEvent, Source};
use pidevops::tasks::plan::PlanDocument;
use pidevops::tasks::values::Review;
use pidevops::tasks::{
    AttemptReport, Column, Command, Links, Reason, RetryCause, RunId, Spec, TaskId,
};
use serde_json::{json, Value};

per_backend!(
    a_plan_proposed_is_approved_on_its_page_and_its_items_wait_for_their_dependencies,
    a_plan_is_rejected_only_with_a_comment_and_its_page_says_so,
    plan_and_spec_forms_without_a_session_or_csrf_token_change_nothing,
    a_triage_rewrite_is_edited_then_approved_and_bad_input_is_refused_precisely,
    a_hostile_plan_review_and_spec_render_as_text,
    the_last_attempts_report_and_its_runs_failures_read_well,
    a_planner_agents_plan_is_approved_from_the_dashboard,
);

const REPO: &str = "acme/app";

fn item(id: &str, title: &str, scope: &[&str], depends_on: &[&str]) -> Value {
    json!({
        "id": id,
        "title": title,
        "task": format!("Do {title:?} and nothing else."),
        "scope": scope,
        "done_when": format!("{title} is in"),
        "depends_on": depends_on,
    })
}

fn document(summary: &str, items: Vec<Value>) -> PlanDocument {
    serde_json::from_value(json!({"version": 1, "summary": summary, "items": items})).unwrap()
}

/// The schema first, the API after it, the page after both.
pub(crate) fn three_parts() -> PlanDocument {
    document(
        "Store, serve and show the reports.",
        vec![
            item("schema", "Add the schema", &["migrations/**"], &[]),
            item(
                "api",
                "Serve the API",
                &["src/api/**", "docs/api.md"],
                &["schema"],
            ),
            item("page", "Show the page", &["src/web/**"], &["schema", "api"]),
        ],
    )
}

fn new_run() -> RunId {
    RunId(uuid::Uuid::now_v7())
}

/// A plan whose planner proposed `plan`, recorded through the board as the dispatcher records it: it waits in triage.
pub(crate) async fn proposed_plan(app: &TestApp, goal: &str, plan: PlanDocument) -> TaskId {
    let board = &app.state.board;
    let draft = Draft::plan(
        REPO.parse().unwrap(),
        Spec::new(goal, "", "every part is in").unwrap(),
        Links::default(),
    );
    let (outcome, _) = board
        .create(draft, &format!("test:{goal}"), "api", None)
        .await
        .unwrap();
    let id = outcome.task.id();
    propose(app, id, plan).await;
    id
}

/// The planner's next run proposes `plan`.
async fn propose(app: &TestApp, id: TaskId, plan: PlanDocument) {
    let board = &app.state.board;
    let run = new_run();
    board
        .execute(id, &Command::Start { run }, "dispatcher")
        .await
        .unwrap();
    board
        .execute(
            id,
            &Command::ProposePlan {
                run,
                plan: Box::new(plan),
            },
            "dispatcher",
        )
        .await
        .unwrap();
}

/// Runs `id` once to review with `report`, and merges it.
async fn finish(app: &TestApp, id: TaskId, report: AttemptReport) {
    let board = &app.state.board;
    let run = new_run();
    board
        .execute(id, &Command::Start { run }, "dispatcher")
        .await
        .unwrap();
    board
        .execute(
            id,
            &Command::SubmitForReview {
                run,
                branch: id.branch(),
                pr: None,
                report: Box::new(report),
            },
            "dispatcher",
        )
        .await
        .unwrap();
    board
        .execute(id, &Command::Complete, "reactions")
        .await
        .unwrap();
}

/// Posts a form with `cookie`; the status and where it redirects (or the page it answers with).
async fn post(
    app: &TestApp,
    path: &str,
    cookie: Option<&str>,
    form: &[(&str, &str)],
) -> (u16, String) {
    let mut request = client().post(app.url(path)).form(form);
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let location = response
        .headers()
        .get("location")
        .map(|l| l.to_str().unwrap().to_owned());
    match location {
        Some(location) => (status, location),
        None => (status, response.text().await.unwrap()),
    }
}

/// `fields`, with a CSRF token if one is given.
fn with<'a>(fields: &[(&'a str, &'a str)], csrf: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
    let mut form = fields.to_vec();
    form.extend(csrf.map(|csrf| ("csrf", csrf)));
    form
}

async fn version(app: &TestApp, id: TaskId) -> i64 {
    app.state.board.load(id).await.unwrap().unwrap().version
}

/// The row of the items table for `id`.
fn item_row(html: &str, id: TaskId) -> String {
    html.split("<tr ")
        .find(|r| r.starts_with(&format!(r#"data-task="{id}""#)))
        .unwrap_or_else(|| panic!("no row for {id} in {html}"))
        .split("</tr>")
        .next()
        .unwrap()
        .to_owned()
}

/// The board's card of `id`.
fn card(html: &str, id: TaskId) -> String {
    html.split("<article ")
        .find(|c| c.starts_with(&format!(r#"class="card" data-task="{id}""#)))
        .unwrap_or_else(|| panic!("no card for {id} in {html}"))
        .split("</article>")
        .next()
        .unwrap()
        .to_owned()
}

fn waits_for(ids: &[TaskId]) -> String {
    let links: Vec<String> = ids
        .iter()
        .map(|id| format!(r#"<a href="/tasks/{id}">{id}</a>"#))
        .collect();
    format!("waits for {}", links.join(", "))
}

async fn a_plan_proposed_is_approved_on_its_page_and_its_items_wait_for_their_dependencies(
    db: TestDb,
) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let plan = proposed_plan(&app, "Report on the reports", three_parts()).await;
    app.project().await;
    let cookie = sign_in(&app).await;

    // The proposal, item by item, with the two forms; no other approve or reject button.
    let (status, html) = get(&app, &format!("/tasks/{plan}"), &cookie).await;
    assert_eq!(status, 200);
    for expected in [
        "Add the schema",
        "Serve the API",
        "<code>src/api/**</code>",
        "<code>docs/api.md</code>",
        "Show the page is in",
        "revision 1",
        r#"data-action="approve-plan""#,
        r#"data-action="reject-plan""#,
        r#"<textarea id="reject-comment" name="reason" rows="3" maxlength="2000" required>"#,
    ] {
        assert!(html.contains(expected), "{expected} in {html}");
    }
    assert!(!html.contains(r#"data-action="approve""#), "{html}");
    insta::assert_snapshot!("plan_proposed", redacted(&html));
    let (_, board) = get(&app, "/", &cookie).await;
    let plan_card = card(&board, plan);
    assert!(
        plan_card.contains(r#"<span class="badge plan">plan</span>"#)
            && plan_card.contains("proposal waiting for approval"),
        "{plan_card}"
    );

    // Approved with its button: the plans loop makes its items, which the page lists in the plan's order.
    let (status, to) = post(
        &app,
        &format!("/tasks/{plan}/approve"),
        Some(&cookie),
        &[("csrf", &csrf(&html))],
    )
    .await;
    assert_eq!(status, 303, "{to}");
    assert!(to.starts_with(&format!("/tasks/{plan}?at=")), "{to}");
    app.drive("plans").await;
    app.project().await;
    let items = app
        .state
        .board
        .load(plan)
        .await
        .unwrap()
        .unwrap()
        .task
        .plan()
        .unwrap()
        .children
        .clone();
    let [schema, api, page] = items[..] else {
        panic!("three items: {items:?}")
    };
    let (_, html) = get(&app, &to, &cookie).await;
    assert!(!html.contains("reject-comment"), "no forms once approved");
    let rows: Vec<usize> = items
        .iter()
        .map(|id| html.find(&format!(r#"data-task="{id}""#)).unwrap())
        .collect();
    assert!(rows.windows(2).all(|w| w[0] < w[1]), "in the plan's order");
    assert!(item_row(&html, schema).contains(r#"<td class="waits"></td>"#));
    assert!(item_row(&html, api).contains(&waits_for(&[schema])));
    assert!(item_row(&html, page).contains(&waits_for(&[schema, api])));

    // The schema merged: the API waits for nothing, the page for the API.
    finish(&app, schema, AttemptReport::default()).await;
    app.drive("plans").await;
    app.project().await;
    let (_, html) = get(&app, &format!("/tasks/{plan}"), &cookie).await;
    assert!(item_row(&html, schema).contains(r#"data-column="done""#));
    assert!(item_row(&html, api).contains(r#"<td class="waits"></td>"#));
    assert!(item_row(&html, page).contains(&waits_for(&[api])));
    insta::assert_snapshot!("plan_approved", redacted(&html));

    // The board: the plan's progress, and each item's plan and what it waits for.
    let (_, board) = get(&app, "/", &cookie).await;
    assert!(card(&board, plan).contains("1 of 3 done"), "{board}");
    let page_card = card(&board, page);
    assert!(
        page_card.contains(&format!(r#"item of <a href="/tasks/{plan}">{plan}</a>"#))
            && page_card.contains(&waits_for(&[api])),
        "{page_card}"
    );
    assert!(!card(&board, api).contains("waits for"));
    insta::assert_snapshot!("board_with_a_plan", redacted(&board));

    // An item's own page: its plan, its dependencies, what it still waits for.
    let (_, html) = get(&app, &format!("/tasks/{page}"), &cookie).await;
    assert!(
        html.contains(&format!(
            r#"An item of plan <a href="/tasks/{plan}">{plan}</a>."#
        )) && html.contains(&format!(
            "Waits for <a href=\"/tasks/{api}\">{api}</a> to be done."
        )),
        "{html}"
    );
    app.stop().await;
}

async fn a_plan_is_rejected_only_with_a_comment_and_its_page_says_so(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let plan = proposed_plan(&app, "Split the app", three_parts()).await;
    app.project().await;
    let cookie = sign_in(&app).await;
    let (_, html) = get(&app, &format!("/tasks/{plan}"), &cookie).await;
    let token = csrf(&html);
    let reject = format!("/tasks/{plan}/reject");
    let before = version(&app, plan).await;

    // A plan goes back to its planner with the comment: without one (or with only spaces) nothing happens.
    for form in [
        vec![("csrf", token.as_str())],
        vec![("csrf", token.as_str()), ("reason", "")],
        vec![("csrf", token.as_str()), ("reason", " \r\n ")],
    ] {
        let (status, body) = post(&app, &reject, Some(&cookie), &form).await;
        assert_eq!(status, 400, "{form:?}: {body}");
        assert!(body.contains("rejected with a comment"), "{body}");
    }
    // A comment longer than a reason may be is refused, saying why.
    let long = "x".repeat(Reason::MAX_CHARS + 1);
    let (status, body) = post(
        &app,
        &reject,
        Some(&cookie),
        &[("csrf", &token), ("reason", &long)],
    )
    .await;
    assert_eq!(status, 400);
    assert!(body.contains("at most 2000"), "{body}");
    assert_eq!(version(&app, plan).await, before, "nothing appended");

    // With one, the proposal goes; the comment (its lines as typed) is what the planner gets.
    let (status, to) = post(
        &app,
        &reject,
        Some(&cookie),
        &[
            ("csrf", &token),
            ("reason", "Merge the API\r\ninto the schema item"),
        ],
    )
    .await;
    assert_eq!(status, 303, "{to}");
    let task = app.state.board.load(plan).await.unwrap().unwrap().task;
    let state = task.plan().unwrap();
    assert_eq!(
        state.rejection.as_ref().map(|r| r.as_str()),
        Some("Merge the API\ninto the schema item")
    );
    assert!(state.proposal.is_none());
    assert_eq!(task.column(), Column::Todo);
    let (_, html) = get(&app, &to, &cookie).await;
    assert!(
        html.contains("The last proposal was rejected: <q>Merge the API\ninto the schema item</q>")
            && html.contains("The planner plans again with the comment."),
        "{html}"
    );
    assert!(
        html.contains("plan rejected: Merge the API"),
        "the timeline: {html}"
    );
    assert!(!html.contains("approve-plan"));

    // The planner's next proposal is revision 2.
    propose(
        &app,
        plan,
        document("", vec![item("all", "Do it all", &["src/**"], &[])]),
    )
    .await;
    app.project().await;
    let (_, html) = get(&app, &format!("/tasks/{plan}"), &cookie).await;
    assert!(
        html.contains(r#"data-revision="2""#) && html.contains("revision 2"),
        "{html}"
    );
    assert!(html.contains("Do it all") && !html.contains("Serve the API"));
    app.stop().await;
}

async fn plan_and_spec_forms_without_a_session_or_csrf_token_change_nothing(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let plan = proposed_plan(&app, "Guard the forms", three_parts()).await;
    let waiting = task(&app, "Fix the login redirect", Links::default()).await;
    app.project().await;
    let cookie = sign_in(&app).await;
    let (_, html) = get(&app, &format!("/tasks/{waiting}"), &cookie).await;
    assert!(
        html.contains(&format!(r#"action="/tasks/{waiting}/spec""#)),
        "{html}"
    );
    let token = csrf(&html);
    let before = (version(&app, plan).await, version(&app, waiting).await);
    let spec = [
        ("task", "Something else entirely"),
        ("scope", "everything"),
        ("done_when", "never"),
        ("then", "approve"),
    ];
    let forms: Vec<(String, Vec<(&str, &str)>)> = vec![
        (format!("/tasks/{plan}/approve"), vec![]),
        (
            format!("/tasks/{plan}/reject"),
            vec![("reason", "Not like this")],
        ),
        (format!("/tasks/{waiting}/spec"), spec.to_vec()),
        (format!("/tasks/{waiting}/approve"), vec![]),
    ];
    let wrong = "0".repeat(64);
    for (path, fields) in &forms {
        let (status, _) = post(&app, path, None, &with(fields, Some(&token))).await;
        assert_eq!(status, 401, "{path} without a session");
        let (status, _) = post(&app, path, Some(&cookie), &with(fields, None)).await;
        assert_eq!(status, 403, "{path} without the token");
        let (status, _) = post(&app, path, Some(&cookie), &with(fields, Some(&wrong))).await;
        assert_eq!(status, 403, "{path} with a wrong token");
    }
    assert_eq!(
        (version(&app, plan).await, version(&app, waiting).await),
        before,
        "nothing appended"
    );
    app.project().await;
    assert_eq!(
        board::row_now(&app, waiting).await.unwrap().column,
        Column::Triage
    );
    app.stop().await;
}

async fn a_triage_rewrite_is_edited_then_approved_and_bad_input_is_refused_precisely(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let board = &app.state.board;
    let id = task(&app, "login broken??", Links::default()).await;
    let run = new_run();
    board
        .execute(id, &Command::StartTriage { run }, "dispatcher")
        .await
        .unwrap();
    let rewrite = Spec::new(
        "Keep the query string on the login redirect\n\nThe redirect after login drops `?next=`.",
        "src/auth/**",
        "a test signs in with ?next=/a and lands on /a",
    )
    .unwrap();
    board
        .execute(
            id,
            &Command::ProposeSpec {
                run,
                spec: rewrite.clone(),
            },
            "dispatcher",
        )
        .await
        .unwrap();
    app.project().await;
    let cookie = sign_in(&app).await;
    let (_, html) = get(&app, &format!("/tasks/{id}"), &cookie).await;
    assert!(
        html.contains("rewritten by the triage agent")
            && html.contains("edit it before you approve"),
        "{html}"
    );
    assert!(
        html.contains(
            "<textarea id=\"spec-task\" name=\"task\" rows=\"8\" required>\nKeep the query string"
        ),
        "{html}"
    );
    // Approving is the form's "Save and approve": what is approved is what the form shows.
    assert_eq!(html.matches(r#"data-action="approve""#).count(), 1);
    assert!(html.contains(r#"name="then" value="approve" data-action="approve""#));
    insta::assert_snapshot!("triage_proposed", redacted(&html));
    let token = csrf(&html);
    let path = format!("/tasks/{id}/spec");
    let before = version(&app, id).await;

    // Bad input: refused with why, the form shown again as sent, nothing changed.
    let too_long = "x".repeat(Spec::MAX_CHARS + 1);
    for (task_text, scope, expected) in [
        (
            "  ",
            "src/auth/** and tests/",
            "spec task must not be empty",
        ),
        (
            too_long.as_str(),
            "src/auth/**",
            "spec task is 65537 characters; at most 65536 allowed",
        ),
        ("Fine", "src/\0auth", "spec scope contains a NUL character"),
    ] {
        let (status, page) = post(
            &app,
            &path,
            Some(&cookie),
            &[
                ("csrf", &token),
                ("task", task_text),
                ("scope", scope),
                ("done_when", "it works"),
                ("then", "approve"),
            ],
        )
        .await;
        assert_eq!(status, 400, "{expected}");
        assert!(page.contains(&format!("Not saved: {expected}")), "{page}");
        if !scope.contains('\0') {
            assert!(
                page.contains(&format!("name=\"scope\" rows=\"3\">\n{scope}</textarea>")),
                "the input is kept: {page}"
            );
        }
    }
    let (status, page) = post(
        &app,
        &path,
        Some(&cookie),
        &[("csrf", &token), ("task", "Only the task")],
    )
    .await;
    assert_eq!(status, 400);
    assert!(page.contains("sends task, scope and done_when"), "{page}");
    assert_eq!(version(&app, id).await, before, "nothing appended");

    // The form saved untouched, as a browser sends it (CRLF lines): nothing to record.
    let crlf = |text: &str| text.replace('\n', "\r\n");
    let (status, _) = post(
        &app,
        &path,
        Some(&cookie),
        &[
            ("csrf", &token),
            ("task", &crlf(rewrite.task())),
            ("scope", &crlf(rewrite.scope())),
            ("done_when", &crlf(rewrite.done_when())),
            ("then", "save"),
        ],
    )
    .await;
    assert_eq!(status, 303);
    assert_eq!(
        version(&app, id).await,
        before,
        "an untouched spec is no edit"
    );

    // Edited, then approved with it.
    let (status, to) = post(
        &app,
        &path,
        Some(&cookie),
        &[
            ("csrf", &token),
            ("task", &crlf(rewrite.task())),
            ("scope", "src/auth/**\r\ntests/login.rs"),
            ("done_when", &crlf(rewrite.done_when())),
            ("then", "approve"),
        ],
    )
    .await;
    assert_eq!(status, 303, "{to}");
    let task = board.load(id).await.unwrap().unwrap();
    assert_eq!(task.task.column(), Column::Todo);
    assert_eq!(task.task.spec().scope(), "src/auth/**\ntests/login.rs");
    assert_eq!(task.task.spec().task(), rewrite.task());
    let types: Vec<&str> = task.events[task.events.len() - 2..]
        .iter()
        .map(|e| e.event_type.as_str())
        .collect();
    assert_eq!(types, ["task.spec_updated", "task.approved"]);
    let (_, html) = get(&app, &to, &cookie).await;
    assert!(!html.contains("spec-edit"), "no form once approved");
    assert!(html.contains("rewritten by the triage agent"), "{html}");

    // A failed triage says so, with why, over the ticket as it came.
    let failed = crate::web::task(&app, "flaky thing", Links::default()).await;
    let run = new_run();
    board
        .execute(failed, &Command::StartTriage { run }, "dispatcher")
        .await
        .unwrap();
    board
        .execute(
            failed,
            &Command::Retry {
                cause: RetryCause::RunFailed { run },
                reason: Reason::new("no .pidevops/spec.json was left").unwrap(),
            },
            "dispatcher",
        )
        .await
        .unwrap();
    app.project().await;
    let (_, html) = get(&app, &format!("/tasks/{failed}"), &cookie).await;
    assert!(
        html.contains("triage failed")
            && html.contains("<q>no .pidevops/spec.json was left</q>")
            && html.contains("The spec below is the ticket as it came."),
        "{html}"
    );
    assert!(html.contains("name=\"task\" rows=\"8\" required>\nflaky thing</textarea>"));
    app.stop().await;
}

async fn a_hostile_plan_review_and_spec_render_as_text(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let board = &app.state.board;
    // Ids must be plain (the plan file refuses anything else) and scopes hold no whitespace; everything else a
    // planner writes may carry markup.
    let hostile = document(
        "<b onmouseover=alert(1)>summary</b>",
        vec![
            json!({
                "id": "a",
                "title": "<script>alert('title')</script>",
                "task": r#"<a href="javascript:alert(3)">click</a>"#,
                "scope": ["<img/src=x/onerror=alert(2)>", "javascript:alert(4)"],
                "done_when": "</dd></dl><script>alert(5)</script>",
                "depends_on": [],
            }),
            json!({
                "id": "b",
                "title": "<iframe src=javascript:alert(7)>",
                "task": "<i>x</i>",
                "scope": ["src/<svg/onload=alert(8)>/**"],
                "done_when": "y\"><script>alert(6)</script>",
                "depends_on": ["a"],
            }),
        ],
    );
    let plan = proposed_plan(&app, "<script>alert('goal')</script>", hostile).await;

    // A triage agent's spec that tries to close the form's textarea.
    let rewritten = task(&app, "a ticket", Links::default()).await;
    let run = new_run();
    board
        .execute(rewritten, &Command::StartTriage { run }, "dispatcher")
        .await
        .unwrap();
    board
        .execute(
            rewritten,
            &Command::ProposeSpec {
                run,
                spec: Spec::new(
                    "</textarea><script>alert(9)</script>",
                    "</textarea><img src=x onerror=alert(10)>",
                    "\"><a href=\"javascript:alert(11)\">x</a>",
                )
                .unwrap(),
            },
            "dispatcher",
        )
        .await
        .unwrap();

    // An attempt whose summary, review and out-of-scope files carry markup.
    let reviewed = task(&app, "reviewed", Links::default()).await;
    board
        .execute(reviewed, &Command::Approve, "test")
        .await
        .unwrap();
    let review: Review = serde_json::from_value(json!({
        "verdict": "request_changes",
        "summary": "<iframe src=javascript:alert(12)></iframe>",
        "comments": [{
            "path": "src/<img src=x onerror=alert(13)>.rs",
            "line": 3,
            "body": "<a href=\"javascript:alert(14)\">see</a>",
        }],
    }))
    .unwrap();
    finish(
        &app,
        reviewed,
        AttemptReport {
            summary: Some("<script>alert(15)</script>".into()),
            review: Some(review),
            outside_scope: vec!["<svg onload=alert(16)>.txt".into()],
            agent_config: Vec::new(),
        },
    )
    .await;
    app.project().await;
    let cookie = sign_in(&app).await;
    for path in [
        format!("/tasks/{plan}"),
        format!("/tasks/{rewritten}"),
        format!("/tasks/{reviewed}"),
        "/".to_owned(),
    ] {
        let (status, html) = get(&app, &path, &cookie).await;
        assert_eq!(status, 200, "{path}");
        // Our own script is the only one, by address; no element came from the text.
        assert_eq!(html.matches("<script").count(), 1, "{path}: {html}");
        for tag in ["<img", "<iframe", "<svg", "<i>", "<b "] {
            assert!(!html.contains(tag), "{path}: {tag} in {html}");
        }
        assert_eq!(
            html.matches("<textarea").count(),
            html.matches("</textarea>").count(),
            "{path}: no textarea closed early"
        );
        assert!(
            !html.to_lowercase().contains("href=\"javascript:"),
            "{path}: {html}"
        );
        assert!(html.contains("&lt;script&gt;alert("), "{path}: {html}");
    }
    let (_, html) = get(&app, &format!("/tasks/{plan}"), &cookie).await;
    for escaped in [
        "&lt;img/src=x/onerror=alert(2)&gt;",
        "&lt;i&gt;x&lt;/i&gt;",
        "y&quot;&gt;&lt;script&gt;alert(6)&lt;/script&gt;",
        "&lt;/dd&gt;&lt;/dl&gt;&lt;script&gt;alert(5)&lt;/script&gt;",
        "&lt;b onmouseover=alert(1)&gt;summary&lt;/b&gt;",
    ] {
        assert!(html.contains(escaped), "{escaped} in {html}");
    }
    let (_, html) = get(&app, &format!("/tasks/{rewritten}"), &cookie).await;
    assert!(
        html.contains(
            "required>\n&lt;/textarea&gt;&lt;script&gt;alert(9)&lt;/script&gt;</textarea>"
        ),
        "{html}"
    );
    let (_, html) = get(&app, &format!("/tasks/{reviewed}"), &cookie).await;
    assert!(
        html.contains("src/&lt;img src=x onerror=alert(13)&gt;.rs:3")
            && html.contains("&lt;svg onload=alert(16)&gt;.txt"),
        "{html}"
    );
    app.stop().await;
}

/// Appends a run's `started` and its outcome, as a worker records them.
async fn run_recorded(
    app: &TestApp,
    task: TaskId,
    run: RunId,
    attempt: u32,
    outcome: Option<FailureKind>,
) {
    let at = chrono::Utc::now();
    let started = RunEvent::Started {
        at,
        run,
        task,
        attempt,
        profile: "claude".into(),
        worker: "worker-far-away".into(),
        log: format!("/srv/pidevops/runs/{task}/{run}/agent.log"),
    };
    let end = match outcome {
        Some(kind) => RunEvent::Failed {
            at,
            run,
            task,
            attempt,
            kind,
            detail: format!("attempt {attempt} said no"),
            duration_s: 1.5,
            tail: String::new(),
            usage: None,
            until: None,
            reviewer_usage: None,
        },
        None => RunEvent::Succeeded {
            at,
            run,
            task,
            attempt,
            branch: task.branch(),
            commit: "0123456789abcdef0123456789abcdef01234567".into(),
            duration_s: 2.5,
            tail: String::new(),
            report: Box::default(),
            usage: None,
            reviewer_usage: None,
        },
    };
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

async fn the_last_attempts_report_and_its_runs_failures_read_well(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let board = &app.state.board;
    let id = task(&app, "Keep the query string", Links::default()).await;
    board.execute(id, &Command::Approve, "test").await.unwrap();
    for (attempt, kind) in [(1, FailureKind::Review), (2, FailureKind::Scope)] {
        let run = new_run();
        board
            .execute(id, &Command::Start { run }, "dispatcher")
            .await
            .unwrap();
        run_recorded(&app, id, run, attempt, Some(kind)).await;
        board
            .execute(
                id,
                &Command::Retry {
                    cause: RetryCause::RunFailed { run },
                    reason: Reason::new(format!("attempt {attempt} said no")).unwrap(),
                },
                "dispatcher",
            )
            .await
            .unwrap();
    }
    let run = new_run();
    board
        .execute(id, &Command::Start { run }, "dispatcher")
        .await
        .unwrap();
    run_recorded(&app, id, run, 3, None).await;
    let review: Review = serde_json::from_value(json!({
        "verdict": "approve",
        "summary": "Small and tested.",
        "comments": [
            {"path": "src/auth/redirect.rs", "line": 12, "body": "This clone is not needed."},
            {"path": "tests/login.rs", "body": "Name the test after what it proves."},
        ],
    }))
    .unwrap();
    board
        .execute(
            id,
            &Command::SubmitForReview {
                run,
                branch: id.branch(),
                pr: None,
                report: Box::new(AttemptReport {
                    summary: Some("The redirect keeps ?next=.\nA test covers it.".into()),
                    review: Some(review),
                    outside_scope: vec!["Cargo.lock".into()],
                    agent_config: Vec::new(),
                }),
            },
            "dispatcher",
        )
        .await
        .unwrap();
    app.project().await;
    let cookie = sign_in(&app).await;
    let (_, html) = get(&app, &format!("/tasks/{id}"), &cookie).await;
    for expected in [
        "The redirect keeps ?next=.\nA test covers it.",
        r#"<span class="badge verdict good">approved</span>"#,
        "<code class=\"at\">src/auth/redirect.rs:12</code>",
        "<code class=\"at\">tests/login.rs</code>",
        "This clone is not needed.",
        "<code>Cargo.lock</code>",
        r#"title="review">the reviewer asked for changes</span>"#,
        r#"title="scope">it changed files outside its scope</span>"#,
    ] {
        assert!(html.contains(expected), "{expected} in {html}");
    }
    insta::assert_snapshot!("task_report", redacted(&html));
    let (_, runs) = get(&app, "/runs", &cookie).await;
    assert!(runs.contains("the reviewer asked for changes"), "{runs}");
    app.stop().await;
}

async fn a_planner_agents_plan_is_approved_from_the_dashboard(db: TestDb) {
    use crate::common::agents::bash_agent;
    use crate::plans::{config, items_of, new_plan, planner, proposed, spawn, three_items};
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let planner = planner(scratch.path(), "planner.sh", &three_items());
    // Each item writes its own part (in its scope) and is submitted for review; nothing merges here.
    let worker = bash_agent(
        scratch.path(),
        "worker.sh",
        r#"part=$(sed -n 's/^Task: Part \(.\)$/\1/p' "$1" | tr A-Z a-z)
mkdir -p "$part" && echo done > "$part/done.txt""#,
    );
    let app = spawn(
        &db,
        config(&remote, &planner, &worker),
        &scratch.path().join("ws"),
        None,
    )
    .await;
    let plan = new_plan(&app, "Build the three parts").await;
    proposed(&app, plan).await;
    app.project().await;
    let cookie = sign_in(&app).await;
    let (_, html) = get(&app, &format!("/tasks/{plan}"), &cookie).await;
    for expected in [
        "Part A",
        "Part B",
        "Part C",
        "<code>c/**</code>",
        "approve-plan",
    ] {
        assert!(html.contains(expected), "{expected} in {html}");
    }
    let (status, _) = post(
        &app,
        &format!("/tasks/{plan}/approve"),
        Some(&cookie),
        &[("csrf", &csrf(&html))],
    )
    .await;
    assert_eq!(status, 303);
    let items = items_of(&app, plan, 3).await;
    let (a, b, c) = (items[0], items[1], items[2]);
    // A and B run; C waits for both (neither is merged), on the plan's page and on the board.
    within(Duration::from_secs(60), "A and B in review", || async {
        let (a, b) = (
            board::row_now(&app, a).await.unwrap(),
            board::row_now(&app, b).await.unwrap(),
        );
        a.column == Column::InReview && b.column == Column::InReview
    })
    .await;
    let (_, html) = get(&app, &format!("/tasks/{plan}"), &cookie).await;
    assert!(
        item_row(&html, a).contains(r#"data-column="in-review""#),
        "{html}"
    );
    assert!(item_row(&html, c).contains(&waits_for(&[a, b])), "{html}");
    let (_, board) = get(&app, "/", &cookie).await;
    assert!(card(&board, plan).contains("0 of 3 done"), "{board}");
    assert!(card(&board, c).contains(&waits_for(&[a, b])), "{board}");
    app.stop().await;
}
