//! The cap on noise, through the real app and a fake Telegram on loopback: a task whose events ask for more than
//! `[effects] max_per_task_per_hour` calls gets exactly that many, is flagged once, and every effect past it is
//! recorded as withheld and never reaches the provider; another task is not held; a person's clearing lifts it;
//! the count survives a restart because it is read from the log; and two followers calling for one task at once (two
//! providers' loops, or two replicas) share one cap. Per backend.

use std::time::Duration;

use crate::common::{within, TestApp, TestDb};
use crate::providers::telegram::fake::FakeTelegram;
use pidevops::board::Steer;
use pidevops::effects::cap::OutboundEvent;
use pidevops::effects::EffectEvent;
use pidevops::tasks::{ApprovalPolicy, Command, Reason, RetryCause, TaskId};
use secrecy::SecretString;

per_backend!(
    past_the_cap_nothing_more_reaches_the_provider_and_the_task_asks_a_person_once,
    the_cap_holds_across_a_restart,
    two_followers_at_once_never_pass_the_cap_together,
);

const BOT_TOKEN: &str = "4242:fake-bot-secret";
const LOOP: &str = "effects:telegram";

/// The app with Telegram telling `chats`, every notice sent (no cooldown), and at most `cap` calls per task.
async fn spawn(db: &TestDb, telegram: &FakeTelegram, chats: &str, cap: u32) -> TestApp {
    let mut settings = crate::common::settings(db);
    telegram.point_settings(&mut settings, BOT_TOKEN);
    settings
        .providers
        .set("TELEGRAM_ALLOWED_CHATS", Some(chats))
        .unwrap();
    settings.file = format!(
        "[board]\nmax_attempts = 10\n[telegram]\ncooldown_s = 0\n[effects]\nmax_per_task_per_hour = {cap}\n"
    )
    .parse()
    .unwrap();
    TestApp::spawn(settings).await
}

async fn new_task(app: &TestApp, title: &str) -> TaskId {
    crate::common::board::new_task(title)
        .scope("src/")
        .done_when("the tests pass")
        .approval(ApprovalPolicy::Auto)
        .key(&format!("test:{title}"))
        .create(app)
        .await
}

async fn execute(app: &TestApp, id: TaskId, command: Command) {
    app.state
        .board
        .execute(id, &command, "test")
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", command.name()));
}

/// An attempt that goes to review: one "ready for review" notice per chat.
async fn to_review(app: &TestApp, id: TaskId) {
    crate::common::board::to_review(app, id, None).await;
}

/// A reviewer sends it back for another attempt (no notice).
async fn back_to_work(app: &TestApp, id: TaskId) {
    let retry = Command::Retry {
        cause: RetryCause::ChangesRequested,
        reason: Reason::new("not yet").unwrap(),
    };
    execute(app, id, retry).await;
}

/// The `effect.withheld` records of `id`'s effects: (key, reason).
async fn withheld(app: &TestApp, id: TaskId) -> Vec<(String, String)> {
    app.all_events()
        .await
        .into_iter()
        .filter(|e| {
            e.event_type == "effect.withheld" && e.reference.as_deref() == Some(&id.to_string())
        })
        .map(
            |e| match serde_json::from_slice::<EffectEvent>(&e.body).unwrap() {
                EffectEvent::Withheld { key, reason, .. } => (key, reason),
                other => panic!("effect.withheld holds {other:?}"),
            },
        )
        .collect()
}

/// Ticks the effects loop until `done` holds (its own ticks go on too; Telegram's pace makes some calls wait).
async fn until<F, Fut>(app: &TestApp, what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    within(Duration::from_secs(30), what, || {
        let check = done();
        async move {
            app.tick(LOOP).await;
            check.await
        }
    })
    .await;
}

async fn flags(app: &TestApp, id: TaskId) -> Vec<String> {
    let loaded = app.state.board.load(id).await.unwrap().unwrap();
    loaded
        .events
        .iter()
        .filter(|e| e.event_type == "task.flagged_needs_human")
        .map(|e| String::from_utf8_lossy(&e.body).into_owned())
        .collect()
}

fn messages_about(telegram: &FakeTelegram, id: TaskId) -> Vec<String> {
    telegram
        .sent()
        .into_iter()
        .filter(|s| s.text.contains(&format!("<b>{id}</b>")))
        .map(|s| s.text)
        .collect()
}

async fn past_the_cap_nothing_more_reaches_the_provider_and_the_task_asks_a_person_once(
    db: TestDb,
) {
    let telegram = FakeTelegram::start().await;
    let app = spawn(&db, &telegram, "11, 22", 4).await;
    let id = new_task(&app, "Fix the flaky login test").await;

    // Three attempts go to review at once: each asks for a notice in both chats, six calls for a cap of four.
    to_review(&app, id).await;
    back_to_work(&app, id).await;
    to_review(&app, id).await;
    back_to_work(&app, id).await;
    to_review(&app, id).await;
    // The third review's two notices are held, and so are the two of the flag the cap raised.
    until(
        &app,
        "four effects of the task withheld (or a fifth call made)",
        || async { withheld(&app, id).await.len() >= 4 || messages_about(&telegram, id).len() > 4 },
    )
    .await;
    app.drive(LOOP).await;

    let about = messages_about(&telegram, id);
    assert_eq!(
        about.len(),
        4,
        "exactly the cap reached Telegram: {about:#?}"
    );
    assert!(
        about.iter().all(|text| text.contains("ready for review")),
        "{about:#?}"
    );
    let held = withheld(&app, id).await;
    assert_eq!(held.len(), 4, "{held:#?}");
    let keys: Vec<&str> = held.iter().map(|(key, _)| key.as_str()).collect();
    assert!(
        keys.iter().all(|k| k.starts_with("telegram:notify:")),
        "{keys:?}"
    );
    for (_, reason) in &held {
        assert!(
            reason.starts_with("effect cap: 4 outbound calls for "),
            "{reason}"
        );
    }
    // Flagged once, saying why; the cap's record in the task's outbound stream: four calls, one trip.
    let loaded = app.state.board.load(id).await.unwrap().unwrap();
    let flag = loaded.task.needs_human().expect("flagged");
    assert!(
        flag.reason.as_str().starts_with(&format!(
            "effect cap: 4 outbound calls for {id} in the last hour (at most 4)"
        )),
        "{}",
        flag.reason
    );
    assert_eq!(flags(&app, id).await.len(), 1);
    let outbound: Vec<OutboundEvent> = app
        .state
        .log
        .store()
        .read_stream(&pidevops::effects::cap::stream(id))
        .await
        .unwrap()
        .iter()
        .map(|e| serde_json::from_slice(&e.body).unwrap())
        .collect();
    let kinds: Vec<&str> = outbound.iter().map(OutboundEvent::kind).collect();
    assert_eq!(
        kinds,
        [
            "outbound.call",
            "outbound.call",
            "outbound.call",
            "outbound.call",
            "outbound.capped"
        ]
    );

    // Another task is not held back by this one's cap.
    let other = new_task(&app, "Update the changelog").await;
    to_review(&app, other).await;
    until(&app, "the other task's notices in both chats", || async {
        messages_about(&telegram, other).len() >= 2
    })
    .await;
    assert!(withheld(&app, other).await.is_empty());
    assert!(app
        .state
        .board
        .load(other)
        .await
        .unwrap()
        .unwrap()
        .task
        .needs_human()
        .is_none());

    // The hour does not lift the cap; a person does: after the clearing, the task is heard from again.
    app.state
        .board
        .steer(id, Steer::Retry, None, "from the test", "test")
        .await
        .unwrap();
    execute(
        &app,
        id,
        Command::Cancel {
            reason: Reason::new("looked at it: not worth it").unwrap(),
        },
    )
    .await;
    until(&app, "the cancellation in both chats", || async {
        messages_about(&telegram, id)
            .iter()
            .filter(|text| text.contains("cancelled"))
            .count()
            >= 2
    })
    .await;
    app.drive(LOOP).await;
    assert_eq!(messages_about(&telegram, id).len(), 6);
    assert_eq!(
        withheld(&app, id).await.len(),
        4,
        "nothing held later is sent"
    );
    assert_eq!(flags(&app, id).await.len(), 1);
    app.stop().await;
}

async fn the_cap_holds_across_a_restart(db: TestDb) {
    let telegram = FakeTelegram::start().await;
    let first = spawn(&db, &telegram, "11", 2).await;
    let id = new_task(&first, "Bump the dependencies").await;
    to_review(&first, id).await;
    back_to_work(&first, id).await;
    to_review(&first, id).await;
    until(&first, "the cap's two notices sent", || async {
        messages_about(&telegram, id).len() >= 2
    })
    .await;
    first.drive(LOOP).await;
    first.stop().await;

    // A new process on the same database knows nothing in memory: the log holds the count.
    let app = spawn(&db, &telegram, "11", 2).await;
    back_to_work(&app, id).await;
    to_review(&app, id).await;
    until(
        &app,
        "the review notice and the flag's notice withheld (or a third call made)",
        || async { withheld(&app, id).await.len() >= 2 || messages_about(&telegram, id).len() > 2 },
    )
    .await;
    app.drive(LOOP).await;
    assert_eq!(
        messages_about(&telegram, id).len(),
        2,
        "nothing past the cap after the restart: {:#?}",
        telegram.sent()
    );
    assert_eq!(flags(&app, id).await.len(), 1);
    assert!(app
        .state
        .board
        .load(id)
        .await
        .unwrap()
        .unwrap()
        .task
        .needs_human()
        .is_some_and(|flag| flag
            .reason
            .as_str()
            .starts_with("effect cap: 2 outbound calls")));
    app.stop().await;
}

/// Two followers with their own checkpoints and chats (as two providers' loops, or two replicas, would be) tick at
/// once over one task's news: the compare-and-set on the task's outbound stream lets exactly the cap through
/// between them.
async fn two_followers_at_once_never_pass_the_cap_together(db: TestDb) {
    let telegram = FakeTelegram::start().await;
    // The app's own effects:telegram is off (no token): only the two followers below call out.
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let follower = |name: &str, chats: Vec<i64>| {
        pidevops::effects::runner::Effects::new(
            pidevops::providers::telegram::effects::TelegramPolicy::new(
                pidevops::providers::telegram::TelegramClient::new(
                    &telegram.url,
                    &SecretString::from(BOT_TOKEN),
                )
                .unwrap(),
                pidevops::providers::telegram::settings::TelegramSettings {
                    allowed_chats: chats.into_iter().collect(),
                    ..pidevops::providers::telegram::settings::TelegramSettings::of(
                        &app.state.settings,
                    )
                },
            ),
            app.state.log.clone(),
            app.state.board.clone(),
        )
        .with_checkpoint(name)
        .with_cap(pidevops::effects::cap::EffectCap::per_hour(4))
    };
    let a = follower("cap-test:a", vec![1, 2, 3]);
    let b = follower("cap-test:b", vec![4, 5, 6]);
    let id = new_task(&app, "Rename the settings page").await;
    // Six notices asked for at once (three by each), for a cap of four; then the flag's six, all held.
    to_review(&app, id).await;
    within(
        Duration::from_secs(30),
        "the review's and the flag's notices settled",
        || async {
            let (ticked_a, ticked_b) = tokio::join!(a.tick(), b.tick());
            ticked_a.unwrap();
            ticked_b.unwrap();
            withheld(&app, id).await.len() >= 8 || messages_about(&telegram, id).len() > 4
        },
    )
    .await;
    let (ticked_a, ticked_b) = tokio::join!(a.tick(), b.tick());
    ticked_a.unwrap();
    ticked_b.unwrap();
    let about = messages_about(&telegram, id);
    assert_eq!(about.len(), 4, "the cap between them: {about:#?}");
    assert_eq!(withheld(&app, id).await.len(), 8);
    assert_eq!(flags(&app, id).await.len(), 1);
    app.stop().await;
}
