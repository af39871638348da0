//! Questions both ways, through the real app, the real dispatcher and a fake agent script that asks on its first
//! run (`.pidevops/question.md`, with a half-done change beside it) and records its prompt on the next: the
//! question reaches Linear as an `elicitation` in the task's session (never an `error`) and Telegram as a message
//! with a reply prompt; the first answer (a signed Linear `prompted`, a Telegram reply to that message, the
//! dashboard's form, the API) is the next run's follow-up; a redelivered answer, a second answer and a reply from a
//! chat that may not command change nothing, and a late reply to an earlier question answers no later one. A task
//! flagged for another reason is asked the same way. Per backend.

use std::time::Duration;

use crate::common::agents::{agent, dispatch_file, Remote, REPO};
use crate::common::board::new_task;
use crate::common::{within, TestApp, TestDb, ADMIN_TOKEN};
use crate::providers::github::fake::FakeGithub;
use crate::providers::linear::fake::{default_states, FakeLinear, Issue};
use crate::providers::telegram::fake::{FakeTelegram, Sent};
use pidevops::tasks::{Column, Command, Reason, TaskId};
use serde_json::{json, Value};

use crate::common::read::task;

async fn ignored(app: &TestApp) -> Vec<String> {
    crate::common::read::reasons(app, "intake.ignored").await
}

per_backend!(
    a_question_reaches_linear_as_an_elicitation_and_the_prompt_answers_it_once,
    a_question_reaches_telegram_with_a_reply_prompt_and_only_an_allowed_reply_answers_it,
    a_task_flagged_for_another_reason_is_asked_the_same_way_and_the_dashboard_answers_it,
    the_api_answers_once_per_request_and_refuses_a_second_answer,
    a_question_from_a_github_issue_is_asked_there_once_saying_how_to_answer,
    a_reply_to_an_earlier_question_does_not_answer_a_later_one,
);

/// The issue of the `agent_session.*` fixtures.
const ISSUE: &str = "9c2d1f3e-5b6a-4c7d-8e9f-0a1b2c3d4e5f";
const SESSION: &str = "as-0000-4000-8000-000000000501";
const QUESTION: &str = "Which currency do refunds use: the order's or the account's?";
const BOT_TOKEN: &str = "4242:fake-bot-secret";
const WAIT: Duration = Duration::from_secs(60);

/// Asks on the run whose prompt carries no answer (leaving a half-done change that must not be pushed); with
/// one, writes the prompt down (pushed, so the test reads it from the branch).
const ASKING_AGENT: &str = r#"if grep -q 'you asked a question' "$1"; then
  cp "$1" PROMPT.md
else
  echo half-done > HALF.md
  mkdir -p .pidevops
  printf '\n  %s\n\n' "Which currency do refunds use: the order's or the account's?" > .pidevops/question.md
fi"#;

fn issue_412() -> Issue {
    Issue {
        id: ISSUE.to_owned(),
        identifier: "ENG-412".to_owned(),
        title: "Retry failed Stripe webhooks with exponential backoff".to_owned(),
        description: "repo: acme/app".to_owned(),
        labels: vec!["pi-dev:autonomous".to_owned()],
        state: "st-todo".to_owned(),
        states: default_states(),
        updated_at: "2026-11-29T10:15:03.120Z".to_owned(),
        team: "ENG".to_owned(),
    }
}

/// A Linear fixture with a fresh `webhookTimestamp` (a new delivery), changed by `edit`.
fn linear_delivery(name: &str, edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let path = crate::common::fixtures_dir().join("linear").join(name);
    let mut body: Value = serde_json::from_slice(&crate::common::linear_body_at(&path, 0)).unwrap();
    edit(&mut body);
    serde_json::to_vec(&body).unwrap()
}

struct Scene {
    app: TestApp,
    rig: crate::common::dispatching::Rig,
}

/// The app with the dispatcher running `body` as its agent, `extra` TOML tables merged into the file, and the
/// Linear and Telegram fakes where given.
async fn scene(
    db: &TestDb,
    body: &str,
    extra: &str,
    linear: Option<&FakeLinear>,
    telegram: Option<&FakeTelegram>,
) -> Scene {
    let mut app = TestApp::with_agent("asks.sh", body).config(extra);
    if let Some(linear) = linear {
        app = app.linear(linear);
    }
    if let Some(telegram) = telegram {
        let url = telegram.url.clone();
        app = app.settings(move |settings| {
            settings
                .providers
                .set("TELEGRAM_BOT_TOKEN", Some(BOT_TOKEN))
                .unwrap();
            settings
                .providers
                .set("TELEGRAM_API_URL", Some(&url))
                .unwrap();
            settings
                .providers
                .set("TELEGRAM_ALLOWED_CHATS", Some("-100"))
                .unwrap();
            settings
                .providers
                .set("TELEGRAM_ALLOWED_USERS", Some("5"))
                .unwrap();
        });
    }
    let (app, rig) = app.spawn(db).await;
    Scene { app, rig }
}

/// Waits until the task waits for a person with `question` (the agent's own words) or any reason.
async fn wait_for_question(app: &TestApp, id: TaskId, question: bool) {
    within(WAIT, "the task waiting for a person", || async {
        task(app, id)
            .await
            .needs_human()
            .is_some_and(|flag| flag.question == question)
    })
    .await;
}

/// The prompt the agent's answered run wrote down, once its branch is pushed.
async fn answered_prompt(scene: &Scene, id: TaskId) -> String {
    let branch = format!("pidevops/{id}");
    within(WAIT, "the answered run's branch", || async {
        scene.rig.remote.show(&branch, "PROMPT.md").is_some()
    })
    .await;
    scene.rig.remote.show(&branch, "PROMPT.md").unwrap()
}

fn answers(task: &pidevops::tasks::Task) -> Vec<String> {
    task.follow_ups()
        .iter()
        .map(|f| f.text.as_str().to_owned())
        .collect()
}

/// The task a Linear agent session on ENG-412 becomes (delivered signed, intake driven).
async fn session_task(app: &TestApp) -> TaskId {
    let r = app
        .post_linear(&linear_delivery("agent_session.created.json", |_| {}))
        .await;
    assert_eq!(r.status(), 200);
    app.drive("intake").await;
    app.state
        .board
        .task_for_key(&format!("linear:{ISSUE}"))
        .await
        .unwrap()
        .expect("the session's task")
}

async fn a_question_reaches_linear_as_an_elicitation_and_the_prompt_answers_it_once(db: TestDb) {
    let linear = FakeLinear::start().await;
    linear.add_issue(issue_412());
    let scene = scene(
        &db,
        ASKING_AGENT,
        "[intake]\ndefault_repo = \"acme/app\"",
        Some(&linear),
        None,
    )
    .await;
    let app = &scene.app;
    let id = session_task(app).await;
    wait_for_question(app, id, true).await;
    let asked = task(app, id).await;
    assert_eq!(
        asked.needs_human().unwrap().reason.as_str(),
        QUESTION,
        "the question, trimmed"
    );
    assert_eq!(asked.column(), Column::Todo, "given back, waiting");
    assert_eq!(
        scene.rig.remote.branch(&format!("pidevops/{id}")),
        None,
        "nothing of the asking run is pushed"
    );

    app.drive("effects:linear").await;
    let activities = linear.activities();
    let kinds: Vec<&str> = activities
        .iter()
        .map(|(_, c)| c["type"].as_str().unwrap_or_default())
        .collect();
    assert!(!kinds.contains(&"error"), "no error activity: {kinds:?}");
    let elicitations: Vec<&Value> = activities
        .iter()
        .filter(|(s, c)| s == SESSION && c["type"] == "elicitation")
        .map(|(_, c)| c)
        .collect();
    assert_eq!(elicitations.len(), 1, "{activities:#?}");
    let body = elicitations[0]["body"].as_str().unwrap();
    assert!(body.contains("the agent asks"), "{body}");
    assert!(body.contains(&format!("> {QUESTION}")), "{body}");
    assert!(body.contains("Reply in this session"), "{body}");
    let created_elicitation = linear
        .calls()
        .iter()
        .filter(|c| c.op == "agentActivityCreate")
        .count();
    assert!(created_elicitation >= 1);

    // The person's reply in the session is the answer: the next run's prompt holds it.
    let answer = |body: &mut Value| {
        body["agentActivity"]["id"] = json!("aa-0000-4000-8000-000000000777");
        body["agentActivity"]["content"]["body"] = json!("The order's currency.");
    };
    let r = app
        .post_linear(&linear_delivery("agent_session.prompted.json", answer))
        .await;
    assert_eq!(r.status(), 200);
    let prompt = answered_prompt(&scene, id).await;
    assert!(prompt.contains("you asked a question"), "{prompt}");
    assert!(prompt.contains("The order's currency."), "{prompt}");
    assert!(
        scene
            .rig
            .remote
            .show(&format!("pidevops/{id}"), "HALF.md")
            .is_none(),
        "the asking run's half-done change is not on the branch"
    );
    // Delivered again under another webhook id, so ingress stores it as a new event (the same delivery would be a
    // duplicate there already): the answer's key is on record, so nothing twice.
    let r = app
        .post_linear(&linear_delivery("agent_session.prompted.json", |body| {
            answer(body);
            body["webhookId"] = json!("b0c1d2e3-0000-4000-8000-0000000000ef");
        }))
        .await;
    assert_eq!(r.status(), 200);
    let prompted = app
        .all_events()
        .await
        .into_iter()
        .filter(|e| e.event_type == "linear.AgentSessionEvent.prompted")
        .count();
    assert_eq!(prompted, 2, "both deliveries are in the log");
    app.drive("intake").await;
    let answered = task(app, id).await;
    assert_eq!(answers(&answered), ["The order's currency."]);
    assert!(answered.follow_ups()[0]
        .origin
        .as_ref()
        .is_some_and(|o| o.key() == "linear:activity:aa-0000-4000-8000-000000000777"));
    app.drive("effects:linear").await;
    let kinds: Vec<String> = linear
        .activities()
        .iter()
        .map(|(_, c)| c["type"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(!kinds.iter().any(|k| k == "error"), "{kinds:?}");
    scene.app.stop().await;
}

/// A Telegram message update from `user` in `chat` replying to message `to`.
fn reply(update: i64, chat: i64, user: i64, to: i64, text: &str) -> Vec<u8> {
    json!({
        "update_id": 910_000 + update,
        "message": {
            "message_id": 8000 + update,
            "from": { "id": user, "is_bot": false, "first_name": "Ada", "username": "ada_l" },
            "chat": { "id": chat, "type": if chat < 0 { "group" } else { "private" } },
            "date": 1764411500,
            "text": text,
            "reply_to_message": {
                "message_id": to,
                "from": { "id": 4242, "is_bot": true, "first_name": "pidevops" },
                "chat": { "id": chat, "type": "group" },
                "date": 1764411400,
                "text": "the question"
            }
        }
    })
    .to_string()
    .into_bytes()
}

async fn a_question_reaches_telegram_with_a_reply_prompt_and_only_an_allowed_reply_answers_it(
    db: TestDb,
) {
    let telegram = FakeTelegram::start().await;
    let scene = scene(&db, ASKING_AGENT, "", None, Some(&telegram)).await;
    let app = &scene.app;
    let id = new_task("Refund in the right currency")
        .done_when("")
        .create(app)
        .await;
    wait_for_question(app, id, true).await;
    // Recorded under its own name, so a reply finds its task.
    let question = notice(app, &telegram, "the agent asks").await;
    assert_eq!(question.chat, -100);
    assert!(
        question
            .text
            .contains("Which currency do refunds use: the order&#x27;s")
            || question
                .text
                .contains("Which currency do refunds use: the order's"),
        "{}",
        question.text
    );
    assert_eq!(question.reply_markup["force_reply"], true, "{question:?}");
    assert!(question.reply_markup["input_field_placeholder"]
        .as_str()
        .unwrap()
        .contains(&id.to_string()));

    // A reply from a chat that may not command (to a message of that number there), and one in the chat from a
    // member who may not (TELEGRAM_ALLOWED_USERS): nothing, the second recorded.
    for (update, chat, user) in [(1, 31337, 5), (4, -100, 666)] {
        let r = app
            .post_telegram(
                &reply(update, chat, user, question.message_id, "Use dollars."),
                crate::common::TELEGRAM_SECRET,
            )
            .await;
        assert_eq!(r.status(), 200);
    }
    app.drive("intake").await;
    let still = task(app, id).await;
    assert!(still.needs_human().is_some(), "a stranger answered");
    assert!(answers(&still).is_empty());
    let reasons = ignored(app).await;
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("user 666 is not in TELEGRAM_ALLOWED_USERS")),
        "{reasons:?}"
    );

    // The allowed chat's reply to the question is the answer.
    let r = app
        .post_telegram(
            &reply(2, -100, 5, question.message_id, "The account's currency."),
            crate::common::TELEGRAM_SECRET,
        )
        .await;
    assert_eq!(r.status(), 200);
    let prompt = answered_prompt(&scene, id).await;
    assert!(prompt.contains("The account's currency."), "{prompt}");
    assert!(!prompt.contains("Use dollars."), "{prompt}");

    // A second reply to the question, once answered: recorded as ignored, not a second follow-up.
    let r = app
        .post_telegram(
            &reply(3, -100, 5, question.message_id, "Actually, dollars."),
            crate::common::TELEGRAM_SECRET,
        )
        .await;
    assert_eq!(r.status(), 200);
    app.drive("intake").await;
    let answered = task(app, id).await;
    assert_eq!(answers(&answered), ["The account's currency."]);
    let reasons = ignored(app).await;
    assert!(
        reasons.iter().any(|r| r.contains("answered already")),
        "{reasons:?}"
    );

    // A reply to another message about the task (its review notice) is a follow-up, which sends it back.
    let review = notice(app, &telegram, "ready for review").await;
    assert!(review.reply_markup.is_null(), "no reply prompt: {review:?}");
    let r = app
        .post_telegram(
            &reply(5, -100, 5, review.message_id, "Also log each refund."),
            crate::common::TELEGRAM_SECRET,
        )
        .await;
    assert_eq!(r.status(), 200);
    app.drive("intake").await;
    let followed = task(app, id).await;
    assert_eq!(
        answers(&followed),
        ["The account's currency.", "Also log each refund."]
    );
    assert!(followed.follow_ups()[1].origin.is_some());
    scene.app.stop().await;
}

async fn a_task_flagged_for_another_reason_is_asked_the_same_way_and_the_dashboard_answers_it(
    db: TestDb,
) {
    let linear = FakeLinear::start().await;
    linear.add_issue(issue_412());
    // Fails until a person's answer is in its prompt; one attempt only, so the first failure asks a person.
    let body = r#"if grep -q 'Use the sandbox keys' "$1"; then cp "$1" PROMPT.md; else echo no keys >&2; exit 3; fi"#;
    let scene = scene(
        &db,
        body,
        "[intake]\ndefault_repo = \"acme/app\"\n[board]\nmax_attempts = 1",
        Some(&linear),
        None,
    )
    .await;
    let app = &scene.app;
    let id = session_task(app).await;
    wait_for_question(app, id, false).await;
    app.drive("effects:linear").await;
    let elicitations: Vec<String> = linear
        .activities()
        .iter()
        .filter(|(_, c)| c["type"] == "elicitation")
        .map(|(_, c)| c["body"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(elicitations.len(), 1, "{:#?}", linear.activities());
    // A failed attempt ends nothing in the session: no `error`, the elicitation asks.
    assert!(
        linear
            .activities()
            .iter()
            .all(|(_, c)| c["type"] != "error"),
        "{:#?}",
        linear.activities()
    );
    assert!(
        elicitations[0].contains("needs a human")
            && elicitations[0].contains("Reply in this session"),
        "{}",
        elicitations[0]
    );

    // The dashboard shows the question's form; a POST without its CSRF token changes nothing.
    let cookie = crate::web::sign_in(app).await;
    app.project().await;
    let (status, html) = crate::web::get(app, &format!("/tasks/{id}"), &cookie).await;
    assert_eq!(status, 200);
    assert!(
        html.contains(&format!("action=\"/tasks/{id}/answer\"")),
        "{html}"
    );
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let forged = client
        .post(app.url(&format!("/tasks/{id}/answer")))
        .header("cookie", &cookie)
        .form(&[("csrf", "0".repeat(64).as_str()), ("text", "forged")])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    assert!(task(app, id).await.needs_human().is_some());
    let token = crate::web::csrf(&html);
    let answered = client
        .post(app.url(&format!("/tasks/{id}/answer")))
        .header("cookie", &cookie)
        .form(&[("csrf", token.as_str()), ("text", "Use the sandbox keys.")])
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 303);
    let prompt = answered_prompt(&scene, id).await;
    assert!(prompt.contains("Use the sandbox keys."), "{prompt}");

    // A second answer after the first is refused, and is no follow-up.
    let second = client
        .post(app.url(&format!("/tasks/{id}/answer")))
        .header("cookie", &cookie)
        .form(&[("csrf", token.as_str()), ("text", "Or the live keys.")])
        .send()
        .await
        .unwrap();
    assert_eq!(second.status(), 409);
    assert_eq!(answers(&task(app, id).await), ["Use the sandbox keys."]);
    scene.app.stop().await;
}

async fn the_api_answers_once_per_request_and_refuses_a_second_answer(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let id = new_task("Answer me").done_when("").create(&app).await;
    let answer = |body: Value| {
        let client = app.client.clone();
        let url = app.url(&format!("/api/tasks/{id}/answer"));
        async move {
            let r = client
                .post(url)
                .bearer_auth(ADMIN_TOKEN)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap())
        }
    };
    // Nothing asked yet: refused.
    let (status, body) = answer(json!({ "text": "too early" })).await;
    assert_eq!(status, 409, "{body}");
    app.state
        .board
        .execute(
            id,
            &Command::FlagNeedsHuman {
                reason: Reason::new("which database?").unwrap(),
            },
            "test",
        )
        .await
        .unwrap();
    let (status, body) = answer(json!({ "text": "Postgres.", "request_id": "r-1" })).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["changed"], true);
    // The same request again (a retried call): unchanged.
    let (status, body) = answer(json!({ "text": "Postgres.", "request_id": "r-1" })).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["changed"], false);
    // Another answer: refused.
    let (status, body) = answer(json!({ "text": "SQLite.", "request_id": "r-2" })).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"], "refused", "{body}");
    for bad in [
        json!({ "text": "" }),
        json!({ "text": "x", "request_id": "has space" }),
        json!({ "text": "x", "extra": 1 }),
    ] {
        let (status, body) = answer(bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"], "bad_answer", "{body}");
    }
    let loaded = task(&app, id).await;
    assert_eq!(answers(&loaded), ["Postgres."]);
    assert!(loaded.follow_ups()[0]
        .origin
        .as_ref()
        .is_some_and(|o| o.key() == "api:r-1"));

    // From a terminal, the same: the first answer of an episode, then a refusal.
    app.state
        .board
        .execute(
            id,
            &Command::FlagNeedsHuman {
                reason: Reason::new("which port?").unwrap(),
            },
            "test",
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cli = |text: &str| {
        let out = crate::common::server::command(&db.url_string(), dir.path())
            .args(["task", "answer", &id.to_string(), text])
            .output()
            .expect("the binary runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, err) = cli("8080");
    assert!(ok, "{err}");
    assert!(out.starts_with("updated"), "{out}");
    let (ok, _, err) = cli("9090");
    assert!(!ok);
    assert!(err.contains("waits on no question"), "{err}");
    assert_eq!(answers(&task(&app, id).await), ["Postgres.", "8080"]);
    app.stop().await;
}

async fn a_question_from_a_github_issue_is_asked_there_once_saying_how_to_answer(db: TestDb) {
    let github = FakeGithub::start().await;
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let script = agent(scratch.path(), "asks.sh", ASKING_AGENT);
    let mut file = dispatch_file(&remote, &script, "");
    file.insert(
        "intake".to_owned(),
        toml::Value::Table("[github]\nbot_login = \"pidevops-bot\"".parse().unwrap()),
    );
    let mut settings = crate::common::settings(&db);
    settings.file = pidevops::config::FileConfig::try_from(file).unwrap();
    settings.workspace_root = scratch.path().join("ws");
    github.point_settings(&mut settings, "ghp_fake_token_for_the_fake_github");
    let app = TestApp::spawn(settings).await;
    let mut issue =
        crate::providers::github::gh_issue_event("labeled", REPO, 12, &["pidevops"], "OWNER");
    issue["issue"]["title"] = json!("Refund in the right currency");
    issue["issue"]["body"] = json!("Refunds use the wrong currency.");
    issue["issue"]["updated_at"] = json!("2026-11-29T10:15:03Z");
    let r = app
        .post_github("issues", "question-issue-1", issue.to_string().as_bytes())
        .await;
    assert_eq!(r.status(), 200);
    app.drive("intake").await;
    let id = app
        .state
        .board
        .task_for_key(&format!("github:{REPO}#12"))
        .await
        .unwrap()
        .expect("the issue's task");
    wait_for_question(&app, id, true).await;
    app.drive(&pidevops::effects::loop_name("github")).await;
    let comments: Vec<(String, u64, String)> = github
        .comments()
        .into_iter()
        .filter(|(_, _, body)| body.contains("asks"))
        .collect();
    assert_eq!(comments.len(), 1, "{:#?}", github.comments());
    let (repo, number, body) = &comments[0];
    assert_eq!((repo.as_str(), *number), (REPO, 12));
    assert!(body.contains(&format!("> {QUESTION}")), "{body}");
    assert!(body.contains("mentioning @pidevops-bot"), "{body}");
    // Read again, nothing is posted twice.
    app.drive(&pidevops::effects::loop_name("github")).await;
    assert_eq!(
        github
            .comments()
            .iter()
            .filter(|(_, _, body)| body.contains("asks"))
            .count(),
        1
    );
    app.stop().await;
}

/// The first Telegram message saying `words`, once sent and recorded under its own name (so a reply finds it).
async fn notice(app: &TestApp, telegram: &FakeTelegram, words: &str) -> Sent {
    within(WAIT, &format!("the message saying {words:?}"), || async {
        telegram.sent().iter().any(|m| m.text.contains(words))
    })
    .await;
    let sent = telegram
        .sent()
        .into_iter()
        .find(|m| m.text.contains(words))
        .unwrap();
    let stream = pidevops::providers::telegram::message_stream(sent.chat, sent.message_id);
    within(WAIT, "the message's record", || async {
        !app.state
            .log
            .store()
            .read_stream(&stream)
            .await
            .unwrap()
            .is_empty()
    })
    .await;
    sent
}

async fn a_reply_to_an_earlier_question_does_not_answer_a_later_one(db: TestDb) {
    let telegram = FakeTelegram::start().await;
    let mut settings = crate::common::settings(&db);
    let file = "[board]\napproval = \"manual\"\n[telegram]\ncooldown_s = 0";
    settings.file =
        pidevops::config::FileConfig::try_from(file.parse::<toml::Table>().unwrap()).unwrap();
    telegram.point_settings(&mut settings, BOT_TOKEN);
    settings
        .providers
        .set("TELEGRAM_ALLOWED_CHATS", Some("-100"))
        .unwrap();
    let app = TestApp::spawn(settings).await;
    let id = new_task("Refund in the right currency")
        .done_when("")
        .create(&app)
        .await;
    let flag = |reason: &str| Command::FlagNeedsHuman {
        reason: Reason::new(reason).unwrap(),
    };
    let board = &app.state.board;
    board
        .execute(id, &flag("which currency?"), "test")
        .await
        .unwrap();
    let first = notice(&app, &telegram, "which currency?").await.message_id;
    board
        .execute(id, &Command::ClearNeedsHuman, "test")
        .await
        .unwrap();
    board
        .execute(id, &flag("which account?"), "test")
        .await
        .unwrap();
    let second = notice(&app, &telegram, "which account?").await.message_id;
    assert_ne!(first, second);

    // The answer to the first question, sent late: not the answer to the second.
    let r = app
        .post_telegram(
            &reply(21, -100, 5, first, "The order's currency."),
            crate::common::TELEGRAM_SECRET,
        )
        .await;
    assert_eq!(r.status(), 200);
    app.drive("intake").await;
    let waiting = task(&app, id).await;
    assert!(waiting.needs_human().is_some(), "an old answer answered");
    assert!(answers(&waiting).is_empty(), "{:?}", answers(&waiting));
    let reasons = ignored(&app).await;
    assert!(
        reasons
            .iter()
            .any(|r| r.contains(&format!("a reply to an earlier question of {id}"))),
        "{reasons:?}"
    );

    // The reply to the latest question is its answer.
    let r = app
        .post_telegram(
            &reply(22, -100, 5, second, "The main account."),
            crate::common::TELEGRAM_SECRET,
        )
        .await;
    assert_eq!(r.status(), 200);
    app.drive("intake").await;
    let answered = task(&app, id).await;
    assert!(answered.needs_human().is_none());
    assert_eq!(answers(&answered), ["The main account."]);
    app.stop().await;
}
