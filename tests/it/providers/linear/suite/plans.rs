//! A Linear agent session on an issue with the plan label makes the plan, and its checklist (the session's
//! `plan`) is kept current through the real server and the fake Linear: proposed (every item pending), rejected
//! (emptied), proposed again, approved, and as each item moves (pending, in progress, completed, canceled), one
//! state per change, in order, even when it returns to a state it had; the plan done ends the session. A replay
//! sends nothing again.

use crate::common::{TestApp, TestDb};
use crate::providers::linear::fake::FakeLinear;
use pidevops::board::Steer;
use pidevops::tasks::{Command, Reason, RetryCause, RunId, TaskId};
use secrecy::SecretString;
use serde_json::{json, Value};

per_backend!(an_agent_sessions_plan_checklist_follows_the_plan_and_its_items);

fn file() -> toml::Table {
    r#"
    [board]
    approval = "manual"
    [dispatch]
    enabled = false
    planner = "claude"
    [intake]
    default_repo = "acme/billing"
    allow_repos = ["acme/*"]
    "#
    .parse()
    .unwrap()
}

/// The session's checklists so far, each as `(content, status)` pairs.
fn checklists(linear: &FakeLinear) -> Vec<Vec<(String, String)>> {
    linear
        .session_plans(super::SESSION)
        .iter()
        .map(|plan| {
            plan.as_array()
                .unwrap()
                .iter()
                .map(|step| {
                    (
                        step["content"].as_str().unwrap().to_owned(),
                        step["status"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        })
        .collect()
}

fn parts(statuses: [&str; 3]) -> Vec<(String, String)> {
    ["Part A", "Part B", "Part C"]
        .into_iter()
        .zip(statuses)
        .map(|(part, status)| (part.to_owned(), status.to_owned()))
        .collect()
}

/// Runs `command` on `id`, then lets the plans loop and the Linear policy handle everything it caused.
async fn step(app: &TestApp, id: TaskId, command: Command) {
    super::execute(app, id, command).await;
    settle(app).await;
}

async fn settle(app: &TestApp) {
    app.drive("plans").await;
    app.drive("effects:linear").await;
}

async fn an_agent_sessions_plan_checklist_follows_the_plan_and_its_items(db: TestDb) {
    let linear = FakeLinear::start().await;
    linear.add_issue(super::issue_412());
    let app = super::spawn(&db, &linear, file()).await;
    let created = super::delivery("agent_session.created.json", |body| {
        body["promptContext"] = json!(
            "<issue identifier=\"ENG-412\">\n<title>Make billing retries safe</title>\n<description>repo: acme/billing</description>\n<labels><label>pidevops:plan</label><label>backend</label></labels>\n</issue>"
        );
    });
    assert_eq!(app.post_linear(&created).await.status(), 200);
    app.drive("intake").await;
    let board = &app.state.board;
    let plan = board
        .task_for_key(&format!("linear:{}", super::ISSUE))
        .await
        .unwrap()
        .expect("the session's plan");
    assert!(board.load(plan).await.unwrap().unwrap().task.is_plan());

    // Proposed: every item pending, and the session asks for approval. Rejected: the checklist empties, and the
    // next proposal fills it again (the same state as the first, after another: sent again).
    crate::plans::propose(board, plan, &crate::plans::three_items()).await;
    settle(&app).await;
    assert_eq!(checklists(&linear), [parts(["pending"; 3])]);
    board
        .steer(
            plan,
            Steer::Reject,
            Some("One item per service".into()),
            "test",
            "test",
        )
        .await
        .unwrap();
    settle(&app).await;
    crate::plans::propose(board, plan, &crate::plans::three_items()).await;
    settle(&app).await;
    assert_eq!(
        checklists(&linear),
        [parts(["pending"; 3]), Vec::new(), parts(["pending"; 3])]
    );

    // Approved: its items become tasks, all still pending (nothing new to show).
    board
        .steer(plan, Steer::Approve, None, "test", "test")
        .await
        .unwrap();
    settle(&app).await;
    assert_eq!(checklists(&linear).len(), 3);
    let items = board
        .load(plan)
        .await
        .unwrap()
        .unwrap()
        .task
        .plan()
        .unwrap()
        .children
        .clone();
    let (a, b, c) = (items[0], items[1], items[2]);

    // A starts, fails (pending again: a state seen before, sent again after the newer one), starts, goes to
    // review (still in progress) and is done; B is cancelled, then C: the plan is done.
    let run = RunId(uuid::Uuid::now_v7());
    step(&app, a, Command::Start { run }).await;
    let failed = Command::Retry {
        cause: RetryCause::RunFailed { run },
        reason: Reason::new("the agent exited with status 1").unwrap(),
    };
    step(&app, a, failed).await;
    let run = RunId(uuid::Uuid::now_v7());
    step(&app, a, Command::Start { run }).await;
    let submitted = Command::SubmitForReview {
        run,
        branch: a.branch(),
        pr: None,
        report: Default::default(),
    };
    step(&app, a, submitted).await;
    step(&app, a, Command::Complete).await;
    let cancel = || Command::Cancel {
        reason: Reason::new("not needed after all").unwrap(),
    };
    step(&app, b, cancel()).await;
    step(&app, c, cancel()).await;
    let states = checklists(&linear);
    assert_eq!(
        states[3..],
        [
            parts(["inProgress", "pending", "pending"]),
            parts(["pending", "pending", "pending"]),
            parts(["inProgress", "pending", "pending"]),
            parts(["completed", "pending", "pending"]),
            parts(["completed", "canceled", "pending"]),
            parts(["completed", "canceled", "canceled"]),
        ],
        "{states:#?}"
    );
    // Each state was its own effect, numbered in the order they were asked for.
    let keys: Vec<String> = app
        .all_events()
        .await
        .iter()
        .filter(|e| e.event_type == "effect.requested")
        .filter_map(|e| {
            let body: Value = serde_json::from_slice(&e.body).unwrap();
            (body["action"] == "linear_session_plan")
                .then(|| body["key"].as_str().unwrap().to_owned())
        })
        .collect();
    let want: Vec<String> = (1..=9)
        .map(|n| format!("linear:plan:{}:{n}", super::SESSION))
        .collect();
    assert_eq!(keys, want);

    // The session: its thought, then per planner run a Planning action and, at its proposal, the ask for an
    // approval (a rejection between them); the plan done ends it, and the issue is done.
    let activities = linear.activities();
    assert_eq!(
        super::kinds(&activities),
        [
            "thought",
            "action",
            "elicitation",
            "thought",
            "action",
            "elicitation",
            "response"
        ],
        "{activities:#?}"
    );
    assert_eq!(activities[1].1["action"], "Planning");
    assert!(
        activities[2].1["body"]
            .as_str()
            .unwrap()
            .contains(&format!("pidevops plan approve {plan}")),
        "{activities:#?}"
    );
    assert!(activities[3].1["body"]
        .as_str()
        .unwrap()
        .contains("One item per service"));
    assert!(activities[6].1["body"]
        .as_str()
        .unwrap()
        .contains("is done"));
    assert_eq!(linear.state_of(super::ISSUE).as_deref(), Some("Done"));

    // Read again from the start: every state is settled, nothing is sent twice or out of order.
    let calls = linear.calls().len();
    let replay = pidevops::effects::runner::Effects::new(
        pidevops::providers::linear::effects::LinearPolicy::new(
            pidevops::providers::linear::LinearClient::new(
                &linear.url,
                &SecretString::from(crate::providers::linear::fake::LINEAR_KEY),
            )
            .unwrap(),
            Default::default(),
            Default::default(),
        ),
        app.state.log.clone(),
        app.state.board.clone(),
    )
    .with_checkpoint("effects:linear:replay")
    .with_tick_budget(crate::common::WHOLE_TICK);
    replay.tick().await.unwrap();
    assert_eq!(linear.calls().len(), calls, "a replay called Linear");
    assert_eq!(checklists(&linear).len(), 9);
    app.stop().await;
}
