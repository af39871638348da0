//! `TELEGRAM_ALLOWED_USERS` through the real app and the fake Bot API: in an allowed group only the listed members
//! command and press. Per backend.

use crate::common::board::new_task;
use crate::common::{TestApp, TestDb};
use crate::providers::telegram::fake::FakeTelegram;

use super::BOT_TOKEN;

per_backend!(with_allowed_users_other_group_members_cannot_command_or_press);

/// `TELEGRAM_ALLOWED_USERS`: in an allowed group, a member not listed can neither command (nor `/new`) nor press a
/// button, each refusal recorded; a listed one can; notifications still go to the chat.
async fn with_allowed_users_other_group_members_cannot_command_or_press(db: TestDb) {
    let telegram = FakeTelegram::start().await;
    let mut settings = crate::common::settings(&db);
    telegram.point_settings(&mut settings, BOT_TOKEN);
    settings
        .providers
        .set("TELEGRAM_ALLOWED_CHATS", Some("-100"))
        .unwrap();
    settings
        .providers
        .set("TELEGRAM_ALLOWED_USERS", Some("5, 12"))
        .unwrap();
    let app = TestApp::spawn(settings).await;
    let board = &app.state.board;
    let id = new_task("Rotate the signing keys")
        .done_when("")
        .key("test:users")
        .create_on(board)
        .await;
    app.drive(&pidevops::effects::loop_name("telegram")).await;
    assert!(
        telegram.sent().iter().any(|s| s.chat == -100),
        "the approval request in the group"
    );
    let from = |user: i64| serde_json::json!({ "id": user, "is_bot": false, "first_name": "M", "username": format!("user{user}") });
    let message = |update: i64, user: i64, text: &str| {
        serde_json::json!({
            "update_id": 700_000 + update,
            "message": {
                "message_id": 6000 + update,
                "from": from(user),
                "chat": { "id": -100, "type": "group" },
                "date": 1764411500,
                "text": text
            }
        })
        .to_string()
        .into_bytes()
    };
    let press = |update: i64, user: i64, query: &str| {
        serde_json::json!({
            "update_id": 700_000 + update,
            "callback_query": {
                "id": query,
                "from": from(user),
                "message": { "message_id": 1, "date": 1764411700, "chat": { "id": -100, "type": "group" }, "text": "…" },
                "chat_instance": "-1",
                "data": format!("approve:{id}")
            }
        })
        .to_string()
        .into_bytes()
    };
    for body in [
        message(1, 66, &format!("/approve {id}")),
        message(2, 66, "/new acme/app Delete the audit log"),
        press(3, 66, "q-member"),
    ] {
        let r = app
            .post_telegram(&body, crate::common::TELEGRAM_SECRET)
            .await;
        assert_eq!(r.status(), 200);
    }
    let recorded = |kind: &'static str| {
        let log = app.state.log.clone();
        async move {
            log.store()
                .read_after(0, 10_000)
                .await
                .unwrap()
                .into_iter()
                .filter(|e| e.event_type == kind)
                .map(|e| serde_json::from_slice::<serde_json::Value>(&e.body).unwrap())
                .collect::<Vec<_>>()
        }
    };
    // Nothing here sends a message (nothing paced): intake and the bot are driven to rest, not waited for.
    app.drive("intake").await;
    app.drive(&pidevops::effects::loop_name("telegram")).await;
    assert_eq!(recorded("telegram.command_refused").await.len(), 2);
    assert_eq!(recorded("intake.ignored").await.len(), 1);
    for body in recorded("telegram.command_refused").await {
        assert_eq!(
            body["reason"], "user 66 is not in TELEGRAM_ALLOWED_USERS",
            "{body}"
        );
    }
    let ignored = recorded("intake.ignored").await;
    assert!(
        ignored[0]["reason"]
            .as_str()
            .unwrap()
            .contains("user 66 is not in TELEGRAM_ALLOWED_USERS"),
        "{ignored:?}"
    );
    assert_eq!(
        telegram.answers()[0],
        (
            "q-member".into(),
            "You are not allowed to steer pidevops.".into()
        )
    );
    assert_eq!(
        telegram.sent().len(),
        1,
        "no reply to the member: {:#?}",
        telegram.sent()
    );
    let loaded = board.load(id).await.unwrap().unwrap();
    assert_eq!(
        loaded.task.column(),
        pidevops::tasks::Column::Triage,
        "nothing steered"
    );

    // A listed user's press approves.
    let r = app
        .post_telegram(&press(4, 12, "q-listed"), crate::common::TELEGRAM_SECRET)
        .await;
    assert_eq!(r.status(), 200);
    app.drive(&pidevops::effects::loop_name("telegram")).await;
    assert_eq!(
        telegram.answers()[1],
        ("q-listed".into(), format!("{id}: approve — now todo."))
    );
    assert_eq!(
        board.load(id).await.unwrap().unwrap().task.column(),
        pidevops::tasks::Column::Todo
    );
    app.stop().await;
}
