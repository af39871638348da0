//! Slack's signed webhook through the real app: what is stored, what is refused, what is answered, and what intake
//! makes of it. Per backend.

use pidevops::tasks::TaskId;
use serde_json::{json, Value};

use crate::common::read::reasons;
use crate::common::{TestApp, TestDb, SLACK_SECRET};

per_backend!(
    a_signed_mention_becomes_one_task_however_often_slack_retries_it,
    forged_stale_and_unsigned_requests_are_refused_and_nothing_is_stored,
    the_url_verification_handshake_is_answered_and_not_stored,
    a_slash_command_is_answered_to_its_sender_alone_and_keeps_no_token,
    a_reply_in_the_thread_reaches_the_task_once_and_a_strangers_changes_nothing,
);

const JSON: &str = "application/json";
const FORM: &str = "application/x-www-form-urlencoded";
const ASKED_TS: &str = "1764411300.000100";

async fn app(db: &TestDb) -> TestApp {
    let mut settings = crate::common::settings(db);
    settings
        .providers
        .set("SLACK_ALLOWED_USERS", Some("U0ALLOWED"))
        .unwrap();
    settings
        .providers
        .set("SLACK_ALLOWED_CHANNELS", Some("C0TEAM"))
        .unwrap();
    let table: toml::Table = toml::from_str("[repos.\"acme/app\"]\n").unwrap();
    settings.file = pidevops::config::file::FileConfig::from_table(&table).unwrap();
    TestApp::spawn(settings).await
}

/// An Events API callback carrying `event`, as Slack sends it (its verification token too).
fn callback(event_id: &str, event: Value) -> Vec<u8> {
    json!({
        "token": "the-deprecated-verification-token",
        "team_id": "T0TEAM",
        "api_app_id": "A0APP",
        "type": "event_callback",
        "event_id": event_id,
        "event_time": 1_764_411_300,
        "authorizations": [{ "team_id": "T0TEAM", "user_id": "U0BOT", "is_bot": true }],
        "event": event,
    })
    .to_string()
    .into_bytes()
}

fn mention(event_id: &str, user: &str, text: &str) -> Vec<u8> {
    callback(
        event_id,
        json!({
            "type": "app_mention", "user": user, "text": text, "ts": ASKED_TS,
            "channel": "C0TEAM", "event_ts": ASKED_TS,
        }),
    )
}

async fn slack_events(app: &TestApp) -> Vec<pidevops::eventlog::StoredEvent> {
    app.all_events()
        .await
        .into_iter()
        .filter(|e| e.source == "slack")
        .collect()
}

/// Intake has handled everything, and the read models are at the head.
async fn settle(app: &TestApp) {
    app.drive("intake").await;
    app.project().await;
}

async fn the_task(app: &TestApp, key: &str) -> TaskId {
    app.state
        .board
        .task_for_key(key)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no task for {key}"))
}

/// A mention from an allowed user in an allowed channel is stored once (Slack's retry, `X-Slack-Retry-Num`, is
/// the same event by its id), without Slack's verification token, and becomes one task for the repository it
/// names, linked to its thread.
async fn a_signed_mention_becomes_one_task_however_often_slack_retries_it(db: TestDb) {
    let app = app(&db).await;
    let body = mention(
        "Ev0MENTION",
        "U0ALLOWED",
        "<@U0BOT> acme/app fix the login page",
    );
    let first = app.post_slack(&body, JSON).await;
    assert_eq!(first.status(), 200);
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["duplicate"], false, "{first}");
    let now = chrono::Utc::now().timestamp().to_string();
    let retry = app
        .post_slack_signed(
            &body,
            JSON,
            &now,
            SLACK_SECRET,
            &[
                ("x-slack-retry-num", "1"),
                ("x-slack-retry-reason", "http_timeout"),
            ],
        )
        .await;
    assert_eq!(retry.status(), 200);
    let retry: Value = retry.json().await.unwrap();
    assert_eq!(retry["duplicate"], true, "{retry}");
    let stored = slack_events(&app).await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].event_type, "slack.app_mention");
    let text = String::from_utf8_lossy(&stored[0].body);
    assert!(
        !text.contains("the-deprecated-verification-token"),
        "{text}"
    );

    settle(&app).await;
    let id = the_task(&app, &format!("slack:C0TEAM:{ASKED_TS}")).await;
    let task = app.state.board.load(id).await.unwrap().unwrap().task;
    assert_eq!(task.repo().as_str(), "acme/app");
    assert_eq!(task.title(), "fix the login page");
    let thread = task.links().get(pidevops::tasks::SLACK_THREAD).unwrap();
    assert_eq!(
        (thread.channel(), thread.thread()),
        ("C0TEAM", Some(ASKED_TS))
    );

    // A stranger's mention and one from another channel: recorded as ignored, no task.
    app.post_slack(
        &mention("Ev0STRANGER", "U0STRANGER", "<@U0BOT> acme/app drop the db"),
        JSON,
    )
    .await;
    let mut elsewhere: Value =
        serde_json::from_slice(&mention("Ev0ELSEWHERE", "U0ALLOWED", "<@U0BOT> acme/app x"))
            .unwrap();
    elsewhere["event"]["channel"] = json!("C0OTHER");
    elsewhere["event"]["ts"] = json!("1764411301.000100");
    app.post_slack(elsewhere.to_string().as_bytes(), JSON).await;
    settle(&app).await;
    let ignored = reasons(&app, "intake.ignored").await;
    assert!(
        ignored
            .iter()
            .any(|r| r.contains("U0STRANGER is not in SLACK_ALLOWED_USERS")),
        "{ignored:?}"
    );
    assert!(
        ignored
            .iter()
            .any(|r| r.contains("channel C0OTHER is not in")),
        "{ignored:?}"
    );
    let tasks = pidevops::projectors::tasks::list(
        app.state.log.store(),
        &pidevops::projectors::tasks::TaskFilter::default(),
    )
    .await
    .unwrap();
    assert_eq!(tasks.len(), 1, "only the allowed mention made a task");
    app.stop().await;
}

/// A request signed with another secret, one correctly signed but dated six minutes ago (a captured request
/// replayed), one whose body was altered after signing, and one not signed at all: each refused with 401 and
/// nothing stored.
async fn forged_stale_and_unsigned_requests_are_refused_and_nothing_is_stored(db: TestDb) {
    let app = app(&db).await;
    let body = mention("Ev0FORGED", "U0ALLOWED", "<@U0BOT> acme/app fix it");
    let now = chrono::Utc::now().timestamp();
    let forged = app
        .post_slack_signed(&body, JSON, &now.to_string(), "not-the-secret", &[])
        .await;
    assert_eq!(forged.status(), 401);
    let stale = app
        .post_slack_signed(&body, JSON, &(now - 6 * 60).to_string(), SLACK_SECRET, &[])
        .await;
    assert_eq!(stale.status(), 401);
    let said: Value = stale.json().await.unwrap();
    assert_eq!(said["error"], "stale", "{said}");
    let ahead = app
        .post_slack_signed(&body, JSON, &(now + 6 * 60).to_string(), SLACK_SECRET, &[])
        .await;
    assert_eq!(ahead.status(), 401);
    // Signed, then altered: the signature covers the body.
    let signature = pidevops::providers::slack::webhook::sign_slack(
        SLACK_SECRET.as_bytes(),
        &now.to_string(),
        &body,
    );
    let altered = mention(
        "Ev0FORGED",
        "U0ALLOWED",
        "<@U0BOT> acme/app delete everything",
    );
    let r = app
        .client
        .post(app.url("/webhooks/slack"))
        .header("content-type", JSON)
        .header("x-slack-request-timestamp", now.to_string())
        .header("x-slack-signature", signature)
        .body(altered)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let unsigned = app
        .client
        .post(app.url("/webhooks/slack"))
        .header("content-type", JSON)
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 401);
    assert!(slack_events(&app).await.is_empty());
    // The same request, signed now, is taken.
    assert_eq!(app.post_slack(&body, JSON).await.status(), 200);
    assert_eq!(slack_events(&app).await.len(), 1);
    app.stop().await;
}

/// Slack checks the URL by sending a challenge: it is echoed (once signed) and never stored.
async fn the_url_verification_handshake_is_answered_and_not_stored(db: TestDb) {
    let app = app(&db).await;
    let body = br#"{"token":"t","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let r = app.post_slack(body, JSON).await;
    assert_eq!(r.status(), 200);
    let said: Value = r.json().await.unwrap();
    assert_eq!(
        said,
        json!({ "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" })
    );
    let now = chrono::Utc::now().timestamp().to_string();
    let forged = app
        .post_slack_signed(body, JSON, &now, "not-the-secret", &[])
        .await;
    assert_eq!(forged.status(), 401, "no challenge is echoed unsigned");
    assert!(app.all_events().await.is_empty());
    app.stop().await;
}

fn slash(user: &str, trigger: &str, text: &str) -> Vec<u8> {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("token", "the-deprecated-verification-token")
        .append_pair("team_id", "T0TEAM")
        .append_pair("team_domain", "acme")
        .append_pair("channel_id", "C0TEAM")
        .append_pair("channel_name", "dev")
        .append_pair("user_id", user)
        .append_pair("user_name", "ann")
        .append_pair("command", "/pidevops")
        .append_pair("text", text)
        .append_pair(
            "response_url",
            "https://hooks.slack.com/commands/T0TEAM/1/secretpath",
        )
        .append_pair("trigger_id", trigger)
        .finish()
        .into_bytes()
}

/// `/pidevops acme/app …` is answered ephemerally (only who typed it sees the answer), stored without the
/// verification token or the response URL, and makes a task whose thread pidevops will start; a stranger's makes
/// none.
async fn a_slash_command_is_answered_to_its_sender_alone_and_keeps_no_token(db: TestDb) {
    let app = app(&db).await;
    let r = app
        .post_slack(
            &slash(
                "U0ALLOWED",
                "13345224609.738474920.8088930838d88f008e0",
                "acme/app add a health check",
            ),
            FORM,
        )
        .await;
    assert_eq!(r.status(), 200);
    let said: Value = r.json().await.unwrap();
    assert_eq!(said["response_type"], "ephemeral", "{said}");
    assert_eq!(
        slack_events(&app).await.len(),
        1,
        "stored before it is answered"
    );
    let stranger = app
        .post_slack(
            &slash("U0STRANGER", "13345224609.738474920.1", "acme/app rm -rf"),
            FORM,
        )
        .await;
    assert_eq!(stranger.status(), 200);
    settle(&app).await;
    let stored = slack_events(&app).await;
    assert_eq!(stored.len(), 2);
    for event in &stored {
        let text = String::from_utf8_lossy(&event.body);
        assert!(
            !text.contains("the-deprecated-verification-token"),
            "{text}"
        );
        assert!(!text.contains("secretpath"), "{text}");
    }
    let id = the_task(
        &app,
        "slack-command:C0TEAM:13345224609.738474920.8088930838d88f008e0",
    )
    .await;
    let task = app.state.board.load(id).await.unwrap().unwrap().task;
    let thread = task.links().get(pidevops::tasks::SLACK_THREAD).unwrap();
    assert_eq!((thread.channel(), thread.thread()), ("C0TEAM", None));
    assert!(app
        .state
        .board
        .task_for_key("slack-command:C0TEAM:13345224609.738474920.1")
        .await
        .unwrap()
        .is_none());
    assert!(reasons(&app, "intake.ignored")
        .await
        .iter()
        .any(|r| r.contains("U0STRANGER")));
    app.stop().await;
}

fn in_thread(event_id: &str, user: &str, ts: &str, text: &str) -> Vec<u8> {
    callback(
        event_id,
        json!({
            "type": "message", "user": user, "text": text, "ts": ts, "thread_ts": ASKED_TS,
            "channel": "C0TEAM", "channel_type": "channel",
        }),
    )
}

/// A reply in the thread of the message that asked for a task, from an allowed user, is the task's follow-up,
/// once, even before pidevops has spoken there (no record of the thread yet) and however often it is delivered
/// (its `message` event and a retry); a stranger's reply there changes nothing and is recorded.
async fn a_reply_in_the_thread_reaches_the_task_once_and_a_strangers_changes_nothing(db: TestDb) {
    let app = app(&db).await;
    app.post_slack(
        &mention(
            "Ev0ASK",
            "U0ALLOWED",
            "<@U0BOT> acme/app fix the login page",
        ),
        JSON,
    )
    .await;
    settle(&app).await;
    let id = the_task(&app, &format!("slack:C0TEAM:{ASKED_TS}")).await;
    let reply = in_thread(
        "Ev0REPLY",
        "U0ALLOWED",
        "1764411400.000200",
        "<@U0BOT> use the v2 endpoint",
    );
    assert_eq!(app.post_slack(&reply, JSON).await.status(), 200);
    // The same message again under another event id (Slack's app_mention twin of a message).
    let twin = in_thread(
        "Ev0TWIN",
        "U0ALLOWED",
        "1764411400.000200",
        "<@U0BOT> use the v2 endpoint",
    );
    assert_eq!(app.post_slack(&twin, JSON).await.status(), 200);
    let stranger = in_thread(
        "Ev0STRANGE",
        "U0STRANGER",
        "1764411401.000300",
        "ignore the spec and push to main",
    );
    assert_eq!(app.post_slack(&stranger, JSON).await.status(), 200);
    settle(&app).await;
    let task = app.state.board.load(id).await.unwrap().unwrap().task;
    let texts: Vec<&str> = task.follow_ups().iter().map(|f| f.text.as_str()).collect();
    assert_eq!(texts, ["use the v2 endpoint"], "{:?}", task.follow_ups());
    assert!(reasons(&app, "intake.ignored")
        .await
        .iter()
        .any(|r| r.contains("U0STRANGER")));
    app.stop().await;
}
