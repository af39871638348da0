//! Plans through intake, with signed webhooks and the repository's real fixtures made to carry `[plans] label`:
//! an issue that would become a task (trusted author, the intake label, an allowed repository; Linear's state and
//! labels) becomes a plan, once per ticket; an agent session on such an issue makes the plan too. An untrusted
//! author's plan label makes nothing, and without a planner nothing is made and intake says why.

use crate::common::{TestApp, TestDb};
use pidevops::tasks::{Column, TaskId, TaskKind, GITHUB_ISSUE, LINEAR_ISSUE};
use serde_json::{json, Value};

async fn reasons(app: &TestApp) -> Vec<String> {
    crate::common::read::reasons(app, "intake.ignored").await
}

per_backend!(
    issues_and_sessions_with_the_plan_label_become_one_plan_each,
    without_a_planner_the_plan_label_is_refused_and_recorded,
);

async fn app(db: &TestDb, planner: bool) -> TestApp {
    let mut settings = crate::common::settings(db);
    let dispatch = if planner {
        "[dispatch]\nenabled = false\nplanner = \"claude\"\n"
    } else {
        ""
    };
    settings.file = format!(
        "{dispatch}[intake]\nallow_repos = [\"acme/*\", \"Codertocat/Hello-World\"]\ndefault_repo = \"acme/billing\"\n"
    )
    .parse()
    .unwrap();
    TestApp::spawn(settings).await
}

/// Linear's labels, by name.
fn labels(names: &[&str]) -> Value {
    json!(names
        .iter()
        .map(|n| json!({ "name": n }))
        .collect::<Vec<_>>())
}

/// The `issues/opened` fixture with `labels`, from an author of `association`.
fn github_issue(number: u64, names: &[&str], association: &str) -> Value {
    let mut body = super::fixture("github/issues/opened.payload.json");
    body["issue"]["number"] = json!(number);
    body["issue"]["labels"] = crate::providers::github::gh_labels(names);
    body["issue"]["author_association"] = json!(association);
    body
}

/// The `issue.create` fixture carrying the plan label.
fn linear_issue() -> Vec<u8> {
    let mut body = super::fixture("linear/issue.create.json");
    body["data"]["labels"] = labels(&["pi-dev:autonomous", "pidevops:plan"]);
    super::linear(body, "2026-11-29T10:15:03.120Z")
}

/// The `agent_session.created` fixture on another issue whose prompt context lists the plan label.
fn session() -> Vec<u8> {
    let mut body = super::fixture("linear/agent_session.created.json");
    let issue = "4c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f";
    body["agentSession"]["issueId"] = json!(issue);
    body["agentSession"]["issue"]["id"] = json!(issue);
    body["agentSession"]["issue"]["identifier"] = json!("ENG-500");
    body["agentSession"]["id"] = json!("as-0000-4000-8000-000000000777");
    body["promptContext"] = json!(
        "<issue identifier=\"ENG-500\">\n<title>Split billing into services</title>\n<description>repo: acme/billing</description>\n<labels><label>pidevops:plan</label></labels>\n</issue>"
    );
    super::fresh(body)
}

async fn issues_and_sessions_with_the_plan_label_become_one_plan_each(db: TestDb) {
    let app = app(&db, true).await;
    let plan = github_issue(12, &["pidevops", "pidevops:plan"], "MEMBER");
    // Delivered, redelivered as a new delivery, and labeled again: one plan.
    super::post_github(&app, "issues", "p-1", &plan).await;
    super::post_github(&app, "issues", "p-2", &plan).await;
    let mut labeled = plan.clone();
    labeled["action"] = json!("labeled");
    labeled["label"] = crate::providers::github::gh_label("pidevops:plan");
    super::post_github(&app, "issues", "p-3", &labeled).await;
    // An untrusted author's plan label, and the plan label without the intake label.
    super::post_github(
        &app,
        "issues",
        "p-4",
        &github_issue(13, &["pidevops", "pidevops:plan"], "NONE"),
    )
    .await;
    super::post_github(
        &app,
        "issues",
        "p-5",
        &github_issue(14, &["pidevops:plan"], "OWNER"),
    )
    .await;
    assert_eq!(app.post_linear(&linear_issue()).await.status(), 200);
    assert_eq!(app.post_linear(&linear_issue()).await.status(), 200);
    assert_eq!(app.post_linear(&session()).await.status(), 200);
    super::settle(&app).await;

    let board = &app.state.board;
    let made = |key: &'static str| async move {
        let id = board
            .task_for_key(key)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("a plan for {key}"));
        board.load(id).await.unwrap().unwrap().task
    };
    let from_github = made("github:Codertocat/Hello-World#12").await;
    assert_eq!(from_github.kind(), TaskKind::Plan);
    assert_eq!(
        from_github.column(),
        Column::Todo,
        "a plan waits for its planner"
    );
    assert_eq!(from_github.spec().task(), plan["issue"]["title"]);
    assert_eq!(
        from_github
            .links()
            .get(GITHUB_ISSUE)
            .map(|i| i.number.get()),
        Some(12)
    );
    let from_linear = made("linear:9c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f").await;
    assert_eq!(from_linear.kind(), TaskKind::Plan);
    assert_eq!(from_linear.repo().as_str(), "acme/billing");
    assert_eq!(
        from_linear
            .links()
            .get(LINEAR_ISSUE)
            .map(|l| l.identifier().to_owned()),
        Some("ENG-412".to_owned())
    );
    let from_session = made("linear:4c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f").await;
    assert_eq!(from_session.kind(), TaskKind::Plan);
    assert_eq!(from_session.spec().task(), "Split billing into services");
    assert!(
        board
            .load(TaskId::new(std::num::NonZeroU64::new(4).unwrap()))
            .await
            .unwrap()
            .is_none(),
        "three tickets, three plans"
    );
    let reasons = reasons(&app).await;
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(
        reasons[0].contains("is NONE on the repository"),
        "{reasons:?}"
    );
    app.stop().await;
}

async fn without_a_planner_the_plan_label_is_refused_and_recorded(db: TestDb) {
    let app = app(&db, false).await;
    super::post_github(
        &app,
        "issues",
        "n-1",
        &github_issue(12, &["pidevops", "pidevops:plan"], "MEMBER"),
    )
    .await;
    assert_eq!(app.post_linear(&linear_issue()).await.status(), 200);
    assert_eq!(app.post_linear(&session()).await.status(), 200);
    super::settle(&app).await;
    assert!(
        super::events_of(&app, "task.created").await.is_empty(),
        "no plan, and no task in its place"
    );
    let reasons = reasons(&app).await;
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    for (reason, who) in reasons.iter().zip([
        "the issue cannot become a plan",
        "ENG-412 cannot become a plan",
        "agent session on ENG-500",
    ]) {
        assert!(
            reason.starts_with(who)
                && reason.contains("no planner profile is configured (set [dispatch] planner"),
            "{reason}"
        );
    }
    app.stop().await;
}
