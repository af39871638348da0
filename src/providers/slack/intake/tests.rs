use serde_json::json;

use super::*;
use crate::intake::rules::IntakeConfig;

fn own() -> SlackIntake {
    SlackIntake {
        allowed_users: ["U1".to_owned()].into(),
        allowed_channels: ["C1".to_owned(), "C2".to_owned()].into(),
        channel_repos: [("C2".to_owned(), "o/chan".parse().unwrap())].into(),
    }
}

fn shared() -> IntakeConfig {
    IntakeConfig {
        allowed_repos: crate::board::AllowedRepos::new(["acme/*", "o/*"]).unwrap(),
        ..IntakeConfig::default()
    }
}

fn callback(event: serde_json::Value) -> serde_json::Value {
    json!({
        "team_id": "T1", "api_app_id": "A1", "type": "event_callback", "event_id": "Ev1",
        "event_time": 1_700_000_000, "event": event,
    })
}

fn mention(channel: &str, user: &str, text: &str) -> serde_json::Value {
    callback(json!({
        "type": "app_mention", "user": user, "text": text, "ts": "1700000000.000100",
        "channel": channel, "event_ts": "1700000000.000100",
    }))
}

fn decide_on(event_type: &str, data: &serde_json::Value) -> Decision {
    let shared = shared();
    let own = own();
    let config = Config {
        shared: &shared,
        own: &own,
    };
    match event_type {
        "slack.slash_command" => command(data, &config),
        _ => message(event_type, data, &config),
    }
}

#[test]
fn a_mention_from_an_allowed_user_in_an_allowed_channel_makes_a_task_for_the_repository_it_names() {
    let decision = decide_on(
        "slack.app_mention",
        &mention("C1", "U1", "<@U0BOT> acme/api fix the login page"),
    );
    let Decision::Create { key, draft } = decision else {
        panic!("{decision:?}")
    };
    assert_eq!(key, "slack:C1:1700000000.000100");
    assert_eq!(draft.repo.as_str(), "acme/api");
    assert_eq!(draft.spec.title(), "fix the login page");
    let thread = draft.links.get(SLACK_THREAD).unwrap();
    assert_eq!(
        (thread.channel(), thread.thread()),
        ("C1", Some("1700000000.000100"))
    );
}

#[test]
fn a_mention_without_a_repository_takes_the_channels_or_is_refused_saying_how() {
    let Decision::Create { draft, .. } = decide_on(
        "slack.app_mention",
        &mention("C2", "U1", "<@U0BOT> tidy the README"),
    ) else {
        panic!()
    };
    assert_eq!(draft.repo.as_str(), "o/chan");
    let Decision::Ignore { reason } = decide_on(
        "slack.app_mention",
        &mention("C1", "U1", "<@U0BOT> tidy the README"),
    ) else {
        panic!()
    };
    assert!(reason.contains("[slack.channels.C1] repo"), "{reason}");
}

#[test]
fn strangers_and_other_channels_are_recorded_as_ignored() {
    for (channel, user, why) in [
        ("C1", "U9", "user U9 is not in SLACK_ALLOWED_USERS"),
        ("C9", "U1", "channel C9 is not in SLACK_ALLOWED_CHANNELS"),
    ] {
        let decision = decide_on(
            "slack.app_mention",
            &mention(channel, user, "<@U0BOT> o/n x"),
        );
        let Decision::Ignore { reason } = decision else {
            panic!("{decision:?}")
        };
        assert!(reason.contains(why), "{reason}");
    }
}

#[test]
fn a_direct_message_asks_and_channel_chatter_does_not() {
    let dm = callback(json!({
        "type": "message", "user": "U1", "text": "o/n fix it", "ts": "5.6", "channel": "D7",
        "channel_type": "im",
    }));
    let Decision::Create { key, .. } = decide_on("slack.message", &dm) else {
        panic!()
    };
    assert_eq!(key, "slack:D7:5.6");
    let chatter = callback(json!({
        "type": "message", "user": "U1", "text": "o/n fix it", "ts": "5.6", "channel": "C1",
        "channel_type": "channel",
    }));
    assert_eq!(decide_on("slack.message", &chatter), Decision::NotIntake);
    // A bot's post (pidevops's own among them) and an edit are nobody's ask.
    let bot = callback(json!({
        "type": "message", "subtype": "bot_message", "bot_id": "B1", "text": "o/n x", "ts": "5.7",
        "channel": "D7", "channel_type": "im",
    }));
    assert_eq!(decide_on("slack.message", &bot), Decision::NotIntake);
}

#[test]
fn a_reply_in_a_thread_names_the_thread_and_says_whether_its_sender_may() {
    let reply = |user: &str| {
        callback(json!({
            "type": "message", "user": user, "text": "use the v2 endpoint", "ts": "9.1",
            "thread_ts": "1700000000.000100", "channel": "C1", "channel_type": "channel",
        }))
    };
    let Decision::Reply {
        to,
        text,
        origin,
        refusal,
    } = decide_on("slack.message", &reply("U1"))
    else {
        panic!()
    };
    assert_eq!(to.stream(), "slack-message:C1:1700000000.000100");
    assert_eq!(text, "use the v2 endpoint");
    assert_eq!(origin.key(), "slack:C1:9.1");
    assert_eq!(refusal, None);
    let Decision::Reply { refusal, .. } = decide_on("slack.message", &reply("U9")) else {
        panic!()
    };
    assert!(refusal.unwrap().contains("U9"));
}

#[test]
fn a_slash_command_asks_like_a_mention_and_pidevops_starts_its_thread() {
    let data = json!({
        "team_id": "T1", "channel_id": "C1", "user_id": "U1", "command": "/pidevops",
        "text": "acme/api add a health check", "trigger_id": "9.8.7",
    });
    let Decision::Create { key, draft } = decide_on("slack.slash_command", &data) else {
        panic!()
    };
    assert_eq!(key, "slack-command:C1:9.8.7");
    let thread = draft.links.get(SLACK_THREAD).unwrap();
    assert_eq!((thread.channel(), thread.thread()), ("C1", None));
    let stranger = json!({
        "team_id": "T1", "channel_id": "C1", "user_id": "U9", "command": "/pidevops",
        "text": "acme/api x", "trigger_id": "9.8.8",
    });
    assert!(matches!(
        decide_on("slack.slash_command", &stranger),
        Decision::Ignore { .. }
    ));
    assert!(matches!(
        decide_on("slack.slash_command", &json!({"text": "x"})),
        Decision::Ignore { .. }
    ));
}

#[test]
fn a_plan_needs_a_planner() {
    let decision = decide_on(
        "slack.app_mention",
        &mention("C1", "U1", "<@U0BOT> plan acme/api split the monolith"),
    );
    let Decision::Ignore { reason } = decision else {
        panic!("{decision:?}")
    };
    assert!(reason.contains("[dispatch] planner"), "{reason}");
}

#[test]
fn mentions_are_stripped_wherever_they_are() {
    assert_eq!(strip_mentions("<@U0BOT> fix  it"), "fix it");
    assert_eq!(strip_mentions("ask <@U1|ann> and <@U2>"), "ask and");
    assert_eq!(strip_mentions("<@U0BOT"), "<@U0BOT");
}
