//! Slack through the real app and a fake Web API on loopback: a signed mention from an allowed user becomes a
//! task whose story is told in the mention's thread, once however often the loop runs; `/pidevops` gets a thread
//! pidevops starts, recorded so a reply in it reaches the task (a stranger's does not); a button press steers
//! only for an allowed user, and every press is answered to its presser alone, once. Per backend.

use crate::common::board::new_task;
use crate::common::{TestApp, TestDb};
use crate::providers::slack::fake::FakeSlack;
use pidevops::tasks::{ApprovalPolicy, Links, SlackThread, SLACK_THREAD};
use serde_json::{json, Value};

per_backend!(
    a_mention_from_an_allowed_user_is_told_in_its_thread_once,
    a_slash_commands_story_goes_in_the_thread_pidevops_starts,
    a_strangers_press_changes_nothing_and_an_allowed_users_approves,
    without_a_bot_token_the_loop_says_why,
    a_rate_limit_waits_what_slack_asked_and_a_refusal_flags_the_task,
);

const TOKEN: &str = "xoxb-suite-secret";
const LOOP: &str = "effects:slack";
/// The mention's `ts`: the thread's root.
const ASKED: &str = "1764400000.000100";

async fn spawn(db: &TestDb, slack: &FakeSlack) -> TestApp {
    let mut settings = crate::common::settings(db);
    slack.point_settings(&mut settings, TOKEN);
    settings
        .providers
        .set("SLACK_ALLOWED_USERS", Some("U1"))
        .unwrap();
    settings
        .providers
        .set("SLACK_ALLOWED_CHANNELS", Some("C1"))
        .unwrap();
    let file: toml::Table = "[board]\napproval = \"auto\"\n[intake]\nallow_repos = [\"acme/*\"]"
        .parse()
        .unwrap();
    settings.file = pidevops::config::file::FileConfig::from_table(&file).unwrap();
    TestApp::spawn(settings).await
}

fn mention(event_id: &str, user: &str, text: &str) -> Vec<u8> {
    json!({
        "token": "verification", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
        "event_id": event_id, "event_time": chrono::Utc::now().timestamp(),
        "event": {
            "type": "app_mention", "user": user, "text": text, "ts": ASKED,
            "channel": "C1", "event_ts": ASKED
        }
    })
    .to_string()
    .into_bytes()
}

/// A Block Kit button press as Slack posts it: a form whose `payload` is the interaction.
fn press(trigger: &str, user: &str, value: &str) -> Vec<u8> {
    let payload = json!({
        "type": "block_actions", "token": "verification",
        "team": { "id": "T1", "domain": "acme" },
        "user": { "id": user, "username": "someone", "team_id": "T1" },
        "api_app_id": "A1",
        "container": { "type": "message", "message_ts": "1764400000.000001", "channel_id": "C1", "is_ephemeral": false },
        "trigger_id": trigger,
        "channel": { "id": "C1", "name": "dev" },
        "response_url": "https://hooks.slack.com/actions/T1/1/secret",
        "actions": [{
            "type": "button", "action_id": "pidevops_approve", "block_id": "b1",
            "text": { "type": "plain_text", "text": "Approve" },
            "value": value, "action_ts": "1764400100.000001"
        }]
    });
    form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish()
        .into_bytes()
}

const FORM: &str = "application/x-www-form-urlencoded";

/// The loop as a restart would run it: a second reader of the whole log from position 0, with a fresh policy.
/// It must call nothing and append nothing: every request is keyed, and each key's stream says it was made.
async fn replay_changes_nothing(app: &TestApp, slack: &FakeSlack) {
    use pidevops::providers::slack::{effects::SlackPolicy, settings::SlackSettings, SlackClient};
    let client = SlackClient::new(&slack.url, &TOKEN.to_owned().into()).unwrap();
    let replay = pidevops::effects::runner::Effects::new(
        SlackPolicy::new(client, SlackSettings::of(&app.state.settings)),
        app.state.log.clone(),
        app.state.board.clone(),
    )
    .with_checkpoint("effects:slack:replay")
    .with_tick_budget(crate::common::WHOLE_TICK);
    let calls = slack.calls().len();
    let events = app.all_events().await.len();
    replay.tick().await.unwrap();
    assert_eq!(slack.calls().len(), calls, "a replay called Slack again");
    assert_eq!(app.all_events().await.len(), events, "a replay acted again");
}

/// The first record of the thread `slack-message:C1:<root>`, if there is one.
async fn thread_record(app: &TestApp, root: &str) -> Option<Value> {
    let stream = format!("slack-message:C1:{root}");
    let events = app.state.log.store().read_stream(&stream).await.unwrap();
    events
        .first()
        .map(|e| serde_json::from_slice(&e.body).unwrap())
}

async fn a_mention_from_an_allowed_user_is_told_in_its_thread_once(db: TestDb) {
    let slack = FakeSlack::start(TOKEN).await;
    let app = spawn(&db, &slack).await;
    // A stranger's mention first: no task, nothing said in Slack.
    let r = app
        .post_slack(
            &mention("Ev0", "U9", "<@U0BOT> acme/app drop the tables"),
            "application/json",
        )
        .await;
    assert_eq!(r.status(), 200);
    let r = app
        .post_slack(
            &mention("Ev1", "U1", "<@U0BOT> acme/app fix the login redirect"),
            "application/json",
        )
        .await;
    assert_eq!(r.status(), 200);
    app.drive("intake").await;
    let id = app
        .state
        .board
        .task_for_key(&format!("slack:C1:{ASKED}"))
        .await
        .unwrap()
        .expect("intake made the task");
    app.drive(LOOP).await;
    // Driven again, and read again from the start as a restart would: nothing is said twice.
    app.drive(LOOP).await;
    replay_changes_nothing(&app, &slack).await;
    let posts = slack.calls_of("chat.postMessage");
    assert_eq!(posts.len(), 1, "one story message so far: {posts:#?}");
    let story = &posts[0].body;
    assert_eq!(story["channel"], "C1");
    assert_eq!(story["thread_ts"], ASKED, "in the mention's thread");
    let text = story["text"].as_str().unwrap();
    assert!(
        text.starts_with(&format!(
            "👀 *{id}* fix the login redirect _(acme/app)_\non it"
        )),
        "{text}"
    );
    let reactions = slack.calls_of("reactions.add");
    assert_eq!(reactions.len(), 1, "{reactions:#?}");
    assert_eq!(
        reactions[0].body,
        json!({ "channel": "C1", "name": "eyes", "timestamp": ASKED })
    );
    assert_eq!(slack.refused(), Vec::<String>::new());
    // The thread is recorded: a reply in it finds the task.
    let record = thread_record(&app, ASKED)
        .await
        .expect("the thread's record");
    assert_eq!(record["task"], id.to_string());
    assert_eq!(record["thread_ts"], ASKED);
    // No event carries the bot token or the response URL.
    for event in app.all_events().await {
        let body = String::from_utf8_lossy(&event.body);
        assert!(!body.contains("suite-secret"), "{event:?}");
    }
    app.stop().await;
}

async fn a_slash_commands_story_goes_in_the_thread_pidevops_starts(db: TestDb) {
    let slack = FakeSlack::start(TOKEN).await;
    let app = spawn(&db, &slack).await;
    let body = "token=verification&team_id=T1&team_domain=acme&channel_id=C1&channel_name=dev&user_id=U1\
                &user_name=ada&command=%2Fpidevops&text=acme%2Fapp+warm+the+cache\
                &response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1%2F1%2Fsecret&trigger_id=77.88.99&api_app_id=A1";
    let r = app.post_slack(body.as_bytes(), FORM).await;
    assert_eq!(r.status(), 200);
    app.drive("intake").await;
    let id = app
        .state
        .board
        .task_for_key("slack-command:C1:77.88.99")
        .await
        .unwrap()
        .expect("intake made the task");
    app.drive(LOOP).await;
    // The story's message waits its turn in the channel (a second after the root): driven until it is there.
    crate::common::within(
        std::time::Duration::from_secs(10),
        "the story in the thread",
        || async {
            app.drive(LOOP).await;
            slack.calls_of("chat.postMessage").len() >= 2
        },
    )
    .await;
    app.drive(LOOP).await;
    let posts = slack.calls_of("chat.postMessage");
    assert_eq!(posts.len(), 2, "{posts:#?}");
    let root = posts[0].ts.clone().unwrap();
    assert!(
        posts[0].body.get("thread_ts").is_none(),
        "the root starts the thread"
    );
    assert!(posts[0].body["text"]
        .as_str()
        .unwrap()
        .contains(&id.to_string()));
    assert_eq!(
        posts[1].body["thread_ts"],
        root.as_str(),
        "the story in the root's thread"
    );
    assert!(posts[1].body["text"].as_str().unwrap().contains("on it"));
    assert!(
        slack.calls_of("reactions.add").is_empty(),
        "a command has no message to react to"
    );
    let record = thread_record(&app, &root)
        .await
        .expect("the thread's record");
    assert_eq!(record["task"], id.to_string());
    // A reply in that thread reaches the task through the record; a stranger's changes nothing.
    for (event_id, user, ts) in [
        ("Ev8", "U9", "1764400050.000100"),
        ("Ev9", "U1", "1764400050.000200"),
    ] {
        let reply = json!({
            "token": "verification", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
            "event_id": event_id, "event_time": chrono::Utc::now().timestamp(),
            "event": {
                "type": "message", "channel": "C1", "channel_type": "channel", "user": user,
                "text": format!("also the footer, says {user}"), "ts": ts, "thread_ts": root
            }
        });
        let r = app
            .post_slack(reply.to_string().as_bytes(), "application/json")
            .await;
        assert_eq!(r.status(), 200);
    }
    app.drive("intake").await;
    let loaded = app.state.board.load(id).await.unwrap().unwrap();
    let follow_ups: Vec<String> = loaded
        .events
        .iter()
        .filter(|e| e.event_type == "task.follow_up_attached")
        .map(|e| String::from_utf8_lossy(&e.body).into_owned())
        .collect();
    assert_eq!(follow_ups.len(), 1, "{follow_ups:#?}");
    assert!(follow_ups[0].contains("says U1"), "{}", follow_ups[0]);
    app.stop().await;
}

async fn a_strangers_press_changes_nothing_and_an_allowed_users_approves(db: TestDb) {
    let slack = FakeSlack::start(TOKEN).await;
    let app = spawn(&db, &slack).await;
    let board = &app.state.board;
    let thread = SlackThread::new("C1", Some(ASKED)).unwrap();
    let id = new_task("Rotate the signing keys")
        .done_when("")
        .approval(ApprovalPolicy::Manual)
        .links(Links::default().with(SLACK_THREAD, &thread))
        .key("test:slack-button")
        .create_on(board)
        .await;
    app.drive(LOOP).await;
    let posts = slack.calls_of("chat.postMessage");
    assert_eq!(posts.len(), 1, "{posts:#?}");
    let buttons = &posts[0].body["blocks"][1]["elements"];
    assert_eq!(buttons[0]["value"], format!("approve:{id}"));
    assert_eq!(buttons[1]["value"], format!("reject:{id}"));
    let approved = || async {
        let loaded = board.load(id).await.unwrap().unwrap();
        loaded
            .events
            .iter()
            .any(|e| e.event_type == "task.approved")
    };
    // A stranger presses Approve; an allowed user presses a button pidevops never made.
    for (trigger, user, value) in [
        ("1.1.stranger", "U9", format!("approve:{id}")),
        ("1.2.odd", "U1", format!("approve:{id} now")),
    ] {
        let r = app.post_slack(&press(trigger, user, &value), FORM).await;
        assert_eq!(r.status(), 200);
    }
    app.drive(LOOP).await;
    app.drive(LOOP).await;
    assert!(!approved().await, "neither press approved it");
    let answers = slack.calls_of("chat.postEphemeral");
    assert_eq!(answers.len(), 2, "each press answered once: {answers:#?}");
    assert_eq!(answers[0].body["user"], "U9");
    assert!(answers[0].body["text"]
        .as_str()
        .unwrap()
        .contains("may not steer"));
    assert_eq!(answers[1].body["user"], "U1");
    assert!(answers[1].body["text"]
        .as_str()
        .unwrap()
        .contains("Unknown button"));
    let refused: Vec<_> = app
        .all_events()
        .await
        .into_iter()
        .filter(|e| e.event_type == "slack.button_refused")
        .collect();
    assert_eq!(refused.len(), 1, "the stranger's press is recorded");

    // The allowed user's Approve.
    let r = app
        .post_slack(&press("1.3.ada", "U1", &format!("approve:{id}")), FORM)
        .await;
    assert_eq!(r.status(), 200);
    app.drive(LOOP).await;
    app.drive(LOOP).await;
    assert!(approved().await, "approved by the press");
    let answers = slack.calls_of("chat.postEphemeral");
    assert_eq!(answers.len(), 3, "{answers:#?}");
    assert!(
        answers[2].body["text"]
            .as_str()
            .unwrap()
            .contains("approve"),
        "{}",
        answers[2].body
    );
    // The approval is news in the thread, after its channel's pause.
    crate::common::within(
        std::time::Duration::from_secs(10),
        "the approval in the thread",
        || async {
            app.drive(LOOP).await;
            slack.calls_of("chat.postMessage").len() >= 2
        },
    )
    .await;
    let posts = slack.calls_of("chat.postMessage");
    assert_eq!(posts.len(), 2, "{posts:#?}");
    assert!(posts[1].body["text"]
        .as_str()
        .unwrap()
        .contains("approved: on it"));
    // The first message, which carried the buttons, now says where the task stands, its buttons gone.
    let updates = slack.calls_of("chat.update");
    assert_eq!(updates.len(), 1, "{updates:#?}");
    assert_eq!(updates[0].body["ts"], posts[0].ts.clone().unwrap().as_str());
    assert!(
        updates[0].body["text"]
            .as_str()
            .unwrap()
            .contains("now: todo"),
        "{}",
        updates[0].body
    );
    assert!(
        updates[0].body.get("blocks").is_none(),
        "{}",
        updates[0].body
    );
    assert_eq!(slack.refused(), Vec::<String>::new());
    // Read again from the start: no press answered or steered twice.
    replay_changes_nothing(&app, &slack).await;
    app.stop().await;
}

async fn without_a_bot_token_the_loop_says_why(db: TestDb) {
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let (_, health) = app.health().await;
    let state = &health["loops"][LOOP];
    assert_eq!(state["state"], "disabled", "{health}");
    assert!(
        state["reason"]
            .as_str()
            .unwrap()
            .contains("SLACK_BOT_TOKEN is not set"),
        "{health}"
    );
    app.stop().await;
}

/// A 429 waits what `Retry-After` asked and the post goes once after it; a channel pidevops is not in is a
/// refusal for good, named, which flags the task instead of retrying.
async fn a_rate_limit_waits_what_slack_asked_and_a_refusal_flags_the_task(db: TestDb) {
    use pidevops::effects::EffectEvent;
    let slack = FakeSlack::start(TOKEN).await;
    let app = spawn(&db, &slack).await;
    slack.rate_limit_next("chat.postMessage", 1);
    let thread = SlackThread::new("C1", Some(ASKED)).unwrap();
    new_task("Tidy the changelog")
        .links(Links::default().with(SLACK_THREAD, &thread))
        .key("test:slack-429")
        .create_on(&app.state.board)
        .await;
    app.drive(LOOP).await;
    crate::common::within(
        std::time::Duration::from_secs(10),
        "the post after the wait",
        || async {
            app.drive(LOOP).await;
            slack.calls_of("chat.postMessage").len() >= 2
        },
    )
    .await;
    let posts = slack.calls_of("chat.postMessage");
    assert_eq!(posts.len(), 2, "the refused call and the post: {posts:#?}");
    let waited = posts[1].at.duration_since(posts[0].at);
    assert!(
        waited >= std::time::Duration::from_millis(950),
        "{waited:?}"
    );
    let failed: Vec<EffectEvent> = app
        .all_events()
        .await
        .into_iter()
        .filter(|e| e.event_type == "effect.failed")
        .map(|e| serde_json::from_slice(&e.body).unwrap())
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let EffectEvent::Failed {
        at,
        retry_at,
        error,
        ..
    } = &failed[0]
    else {
        unreachable!()
    };
    let wait = (retry_at.unwrap() - *at).num_milliseconds();
    assert!(
        (900..=1100).contains(&wait),
        "waits what Slack asked: {wait} ms"
    );
    assert!(error.contains("429"), "{error}");

    // Not in the channel: permanent, named, never retried, and the task is flagged for a person (whose flag is
    // then told in the thread, once Slack takes posts again).
    slack.refuse_next("chat.postMessage", "not_in_channel", None);
    let second = new_task("Tidy the readme")
        .links(Links::default().with(SLACK_THREAD, &thread))
        .key("test:slack-refused")
        .create_on(&app.state.board)
        .await;
    crate::common::within(
        std::time::Duration::from_secs(10),
        "the refusal and the flag's post",
        || async {
            app.drive(LOOP).await;
            slack.calls_of("chat.postMessage").len() >= 4
        },
    )
    .await;
    app.drive(LOOP).await;
    let gave_up: Vec<String> = app
        .all_events()
        .await
        .into_iter()
        .filter(|e| e.event_type == "effect.failed")
        .map(|e| String::from_utf8_lossy(&e.body).into_owned())
        .filter(|body| body.contains("not_in_channel"))
        .collect();
    assert_eq!(gave_up.len(), 1, "{gave_up:#?}");
    let flagged = app.state.board.load(second).await.unwrap().unwrap();
    let reason = flagged
        .task
        .needs_human()
        .map(|n| n.reason.as_str().to_owned());
    assert!(
        reason
            .as_deref()
            .is_some_and(|r| r.contains("not_in_channel")),
        "{reason:?}"
    );
    let posts = slack.calls_of("chat.postMessage");
    assert_eq!(posts.len(), 4, "never retried: {posts:#?}");
    assert!(posts[3].body["text"]
        .as_str()
        .unwrap()
        .contains("not_in_channel"));
    app.stop().await;
}
