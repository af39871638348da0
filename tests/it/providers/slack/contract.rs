//! The Slack Web API through slack-morphism's types: every request pidevops makes reads as its method's request
//! type (the fake refuses any that does not), each answer as Slack's response type, a 429's `Retry-After` and a
//! `ratelimited` reach the caller as the wait, other codes are permanent and named, and no error carries the
//! token.

use std::time::Duration;

use pidevops::effects::{CallError, Produced};
use pidevops::providers::slack::{ephemeral_request, post_message_request, SlackClient};
use serde_json::json;

use crate::providers::slack::fake::{fits_method, FakeSlack};

const TOKEN: &str = "xoxb-contract-secret";

#[test]
fn every_request_pidevops_builds_reads_as_slacks_request_type() {
    let buttons = [
        ("Approve".to_owned(), "approve:T-7".to_owned()),
        ("Reject".to_owned(), "reject:T-7".to_owned()),
    ];
    for request in [
        post_message_request("C1", None, "root", &[]),
        post_message_request("C1", Some("1.2"), "*T-7* waits", &buttons),
    ] {
        let json = serde_json::to_value(&request).unwrap();
        fits_method("chat.postMessage", &json).unwrap();
        let back: slack_morphism::api::SlackApiChatPostMessageRequest =
            serde_json::from_value(json).unwrap();
        assert_eq!(back, request);
    }
    let ephemeral = serde_json::to_value(ephemeral_request("C1", "U1", "done")).unwrap();
    fits_method("chat.postEphemeral", &ephemeral).unwrap();
    assert_eq!(
        ephemeral,
        json!({ "channel": "C1", "user": "U1", "text": "done" })
    );
    // What Slack would refuse, the fake does too: a misspelled field, a message with nothing in it.
    assert!(fits_method("chat.postMessage", &json!({ "chan": "C1", "text": "x" })).is_err());
    assert!(fits_method("chat.postMessage", &json!({ "channel": "C1" })).is_err());
    assert!(fits_method("reactions.add", &json!({ "channel": "C1", "name": "eyes" })).is_err());
}

/// The client's every method against the fake: each request reads as its method's type, each answer as Slack's.
#[tokio::test]
async fn the_client_against_the_validating_fake() {
    let fake = FakeSlack::start(TOKEN).await;
    let client = SlackClient::new(&fake.url, &TOKEN.to_owned().into()).unwrap();
    assert_eq!(
        client.auth_test().await.unwrap(),
        "the bot is pidevops (U0BOT) in Acme"
    );
    let root = client.post_message("C1", None, "root", &[]).await.unwrap();
    let Produced::Posted {
        conversation,
        message,
    } = &root
    else {
        panic!("a post produces its channel and ts: {root:?}");
    };
    assert_eq!(conversation, "C1");
    let buttons = [("Approve".to_owned(), "approve:T-7".to_owned())];
    client
        .post_message("C1", Some(message), "in the thread", &buttons)
        .await
        .unwrap();
    let updated = client
        .update_message("C1", message, "root, updated")
        .await
        .unwrap();
    assert_eq!(
        updated,
        Produced::Posted {
            conversation: "C1".into(),
            message: message.clone()
        }
    );
    assert_eq!(
        client.post_ephemeral("C1", "U1", "only you").await.unwrap(),
        Produced::Done
    );
    assert_eq!(
        client.add_reaction("C1", message, "eyes").await.unwrap(),
        Produced::Done
    );
    // A reaction already there is the same result.
    fake.refuse_next("reactions.add", "already_reacted", None);
    assert_eq!(
        client.add_reaction("C1", message, "eyes").await.unwrap(),
        Produced::Done
    );
    assert_eq!(fake.refused(), Vec::<String>::new());
    let posts = fake.calls_of("chat.postMessage");
    assert_eq!(posts.len(), 2);
    assert_eq!(posts[1].body["thread_ts"], json!(message));
    assert_eq!(
        posts[1].body["blocks"][1]["elements"][0]["value"],
        "approve:T-7"
    );
}

#[tokio::test]
async fn a_rate_limit_is_the_wait_slack_asked_for_and_other_errors_are_named() {
    let fake = FakeSlack::start(TOKEN).await;
    let client = SlackClient::new(&fake.url, &TOKEN.to_owned().into()).unwrap();
    fake.rate_limit_next("chat.postMessage", 7);
    match client.post_message("C1", None, "x", &[]).await {
        Err(CallError::Transient { retry_after, .. }) => {
            assert_eq!(retry_after, Some(Duration::from_secs(7)))
        }
        other => panic!("a 429 with Retry-After: {other:?}"),
    }
    fake.refuse_next("chat.postMessage", "ratelimited", Some(3));
    match client.post_message("C1", None, "x", &[]).await {
        Err(CallError::Transient { retry_after, .. }) => {
            assert_eq!(retry_after, Some(Duration::from_secs(3)))
        }
        other => panic!("ok:false ratelimited with Retry-After: {other:?}"),
    }
    for code in ["channel_not_found", "not_in_channel", "invalid_auth"] {
        fake.refuse_next("chat.postMessage", code, None);
        match client.post_message("C1", None, "x", &[]).await {
            Err(CallError::Permanent { message }) => {
                assert!(message.contains(code), "{message}");
                assert!(!message.contains("contract-secret"), "{message}");
            }
            other => panic!("{code} is permanent: {other:?}"),
        }
    }
    // A wrong token: refused by Slack, and the error names the code, never the token.
    let stranger = SlackClient::new(&fake.url, &"xoxb-wrong-secret".to_owned().into()).unwrap();
    match stranger.post_message("C1", None, "x", &[]).await {
        Err(CallError::Permanent { message }) => {
            assert!(message.contains("invalid_auth"), "{message}");
            assert!(!message.contains("wrong-secret"), "{message}");
        }
        other => panic!("invalid_auth is permanent: {other:?}"),
    }
    // Nothing listening: transient, and still no token.
    let gone = SlackClient::new("http://127.0.0.1:9", &TOKEN.to_owned().into()).unwrap();
    match gone.auth_test().await {
        Err(CallError::Transient { message, .. }) => {
            assert!(!message.contains("contract-secret"), "{message}")
        }
        other => panic!("no answer is transient: {other:?}"),
    }
}
