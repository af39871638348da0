//! Stale reviews through the real app, a fake GitHub and the service's clock moved forward (never waited for):
//! a task in review past its repository's `stale_after_h` gets exactly one reminder on the GitHub issue it came
//! from however often the loop ticks and the effects replay, none before the age and none without the key; under
//! `stale_action = "close"` its pull request is closed once, with one comment, and the task is cancelled with the
//! reason on it. Per backend.

use crate::common::board::{events_of_type, new_task};
use crate::common::{within, TestApp, TestDb};
use crate::providers::github::fake::FakeGithub;
use crate::providers::telegram::fake::FakeTelegram;
use pidevops::domain::clock::Clock;
use pidevops::projectors::tasks as task_rows;
use pidevops::tasks::{ApprovalPolicy, Column, GithubRef, Links, TaskId, GITHUB_ISSUE};

per_backend!(
    a_review_past_its_age_reminds_its_issue_once,
    without_stale_after_h_nothing_is_reminded_and_health_says_why,
    close_closes_its_pull_request_once_and_cancels_the_task,
    a_telegram_task_s_chat_hears_once,
);

const TOKEN: &str = "ghp_fake_token_for_the_fake_github";

async fn spawn(db: &TestDb, github: &FakeGithub, file: &str) -> (TestApp, Clock) {
    let mut settings = crate::common::settings(db);
    github.point_settings(&mut settings, TOKEN);
    settings.file = file.parse().unwrap();
    let clock = settings.clock.clone();
    (TestApp::spawn(settings).await, clock)
}

/// A task from issue acme/app#12 taken to review, its pull request (#1) opened and linked.
async fn in_review_with_pull_request(app: &TestApp) -> TaskId {
    let issue = GithubRef::new("acme/app".parse().unwrap(), 12).unwrap();
    let id = new_task("Fix the login redirect")
        .scope("src/")
        .done_when("the tests pass")
        .links(Links::default().with(GITHUB_ISSUE, &issue))
        .approval(ApprovalPolicy::Auto)
        .key("test:stale")
        .create_on(&app.state.board)
        .await;
    crate::common::board::to_review(app, id, None).await;
    app.drive("effects:github").await;
    app.project().await;
    id
}

/// Ticks the loop and drives what follows, `times` times over.
async fn tick_and_settle(app: &TestApp, times: usize) {
    for _ in 0..times {
        app.tick("stale_reviews").await;
        app.drive("effects:github").await;
        app.project().await;
    }
}

fn stale_comments(github: &FakeGithub) -> Vec<(String, u64, String)> {
    github
        .comments()
        .into_iter()
        .filter(|(_, _, body)| body.contains(":stale"))
        .collect()
}

async fn a_review_past_its_age_reminds_its_issue_once(db: TestDb) {
    let github = FakeGithub::start().await;
    let (app, clock) = spawn(&db, &github, "[repos.\"acme/app\"]\nstale_after_h = 2\n").await;
    let id = in_review_with_pull_request(&app).await;
    assert_eq!(
        github.comments().len(),
        1,
        "the pull request's notice on the issue"
    );

    // Before the age: nothing, however often the loop looks.
    clock.advance(chrono::Duration::minutes(110));
    tick_and_settle(&app, 3).await;
    assert!(
        stale_comments(&github).is_empty(),
        "{:?}",
        github.comments()
    );
    assert!(events_of_type(&app, "task.went_stale").await.is_empty());

    // Past it: one reminder, on the issue the task came from, whatever more ticks and replays come.
    clock.advance(chrono::Duration::minutes(20));
    tick_and_settle(&app, 4).await;
    let reminders = stale_comments(&github);
    assert_eq!(reminders.len(), 1, "{reminders:?}");
    let (repo, number, body) = &reminders[0];
    assert_eq!((repo.as_str(), *number), ("acme/app", 12));
    assert!(
        body.starts_with(&format!(
            "{id} has waited in review for 2 h without activity: #1 needs a reviewer"
        )),
        "{body}"
    );
    assert_eq!(events_of_type(&app, "task.went_stale").await.len(), 1);
    let row = task_rows::get(app.state.log.store(), id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        row.column,
        Column::InReview,
        "a reminder leaves it in review"
    );
    // The board and the task page mark the stale review.
    let cookie = crate::web::sign_in(&app).await;
    let (_, board) = crate::web::get(&app, "/", &cookie).await;
    let card = &board[board
        .find(&format!(r#"data-task="{id}""#))
        .expect("its card")..];
    let card = &card[..card.find("</article>").unwrap()];
    assert!(card.contains(r#"data-stale="1""#), "{card}");
    let (_, page) = crate::web::get(&app, &format!("/tasks/{id}"), &cookie).await;
    assert!(page.contains(r#"data-stale="1""#));
    // Days later, still untouched: the episode had its reminder.
    clock.advance(chrono::Duration::hours(48));
    tick_and_settle(&app, 2).await;
    assert_eq!(stale_comments(&github).len(), 1);
    assert!(github.pulls_closed().is_empty());

    // A second reader over the whole log (a restart, a lost checkpoint) sends nothing again.
    let calls = github.calls().len();
    let replay = pidevops::effects::runner::Effects::new(
        pidevops::providers::github::effects::GithubPolicy::new(
            pidevops::providers::github::GithubClient::new(
                &github.url,
                &secrecy::SecretString::from(TOKEN),
            )
            .unwrap(),
            Default::default(),
            None,
        ),
        app.state.log.clone(),
        app.state.board.clone(),
    )
    .with_checkpoint("effects:github:replay")
    .with_tick_budget(crate::common::WHOLE_TICK);
    let progress = replay.tick().await.unwrap();
    assert_eq!((progress.succeeded, progress.failed), (0, 0));
    assert_eq!(github.calls().len(), calls, "a replay called GitHub");
    let (_, health) = app.health().await;
    assert_eq!(
        health["loops"]["stale_reviews"]["state"], "armed",
        "{health}"
    );
    app.stop().await;
}

async fn without_stale_after_h_nothing_is_reminded_and_health_says_why(db: TestDb) {
    let github = FakeGithub::start().await;
    let (app, _) = spawn(&db, &github, "[repos.\"acme/app\"]\nstale_after_h = 0\n").await;
    let (_, health) = app.health().await;
    let stale = &health["loops"]["stale_reviews"];
    assert_eq!(stale["state"], "disabled", "{health}");
    assert_eq!(
        stale["reason"], "no repository sets stale_after_h",
        "{health}"
    );
    app.stop().await;

    // Another repository's age is not this one's.
    let (app, clock) = spawn(
        &db,
        &github,
        "[repos.\"acme/app\"]\n[repos.\"acme/other\"]\nstale_after_h = 1\n",
    )
    .await;
    let id = in_review_with_pull_request(&app).await;
    clock.advance(chrono::Duration::hours(30));
    tick_and_settle(&app, 3).await;
    assert!(
        stale_comments(&github).is_empty(),
        "{:?}",
        github.comments()
    );
    assert!(events_of_type(&app, "task.went_stale").await.is_empty());
    let row = task_rows::get(app.state.log.store(), id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.column, Column::InReview);
    app.stop().await;
}

async fn close_closes_its_pull_request_once_and_cancels_the_task(db: TestDb) {
    let github = FakeGithub::start().await;
    let (app, clock) = spawn(
        &db,
        &github,
        "[repos.\"acme/app\"]\nstale_after_h = 24\nstale_action = \"close\"\n",
    )
    .await;
    let id = in_review_with_pull_request(&app).await;
    clock.advance(chrono::Duration::hours(23));
    tick_and_settle(&app, 2).await;
    assert!(github.pulls_closed().is_empty());

    clock.advance(chrono::Duration::hours(2));
    tick_and_settle(&app, 4).await;
    assert_eq!(github.pulls_closed(), [("acme/app".to_owned(), 1)]);
    let on_pr: Vec<_> = github
        .comments()
        .into_iter()
        .filter(|(_, number, _)| *number == 1)
        .collect();
    assert_eq!(on_pr.len(), 1, "{on_pr:?}");
    assert!(
        on_pr[0].2.starts_with(
            "pidevops closed this: no activity in review for 24 h: pull request #1 closed (stale_action = \"close\")"
        ),
        "{on_pr:?}"
    );
    let row = task_rows::get(app.state.log.store(), id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.column, Column::Cancelled);
    assert_eq!(
        row.state["closed_reason"],
        "no activity in review for 24 h: pull request #1 closed (stale_action = \"close\")",
        "the reason on its page"
    );
    // No reminder besides: the close is the news.
    assert!(stale_comments(&github).iter().all(|(_, n, _)| *n == 1));
    clock.advance(chrono::Duration::hours(48));
    tick_and_settle(&app, 2).await;
    assert_eq!(github.pulls_closed().len(), 1);
    assert_eq!(events_of_type(&app, "task.went_stale").await.len(), 1);
    app.stop().await;
}

/// A task from Telegram: its chat hears of the stale review once, in pidevops's words, beside its other news.
async fn a_telegram_task_s_chat_hears_once(db: TestDb) {
    let telegram = FakeTelegram::start().await;
    let mut settings = crate::common::settings(&db);
    telegram.point_settings(&mut settings, "4242:fake-bot-secret");
    settings
        .providers
        .set("TELEGRAM_ALLOWED_CHATS", Some("-100"))
        .unwrap();
    settings.file = "[repos.\"acme/app\"]\nstale_after_h = 5\n".parse().unwrap();
    let clock = settings.clock.clone();
    let app = TestApp::spawn(settings).await;
    let id = new_task("Fix the login redirect")
        .scope("src/")
        .done_when("the tests pass")
        .approval(ApprovalPolicy::Auto)
        .key("test:stale-telegram")
        .create_on(&app.state.board)
        .await;
    let pr = GithubRef::new("acme/app".parse().unwrap(), 7).unwrap();
    crate::common::board::to_review(&app, id, Some(pr)).await;
    app.project().await;
    within(
        std::time::Duration::from_secs(20),
        "the review notice",
        || async { !telegram.sent().is_empty() },
    )
    .await;
    clock.advance(chrono::Duration::hours(6));
    for _ in 0..3 {
        app.tick("stale_reviews").await;
        app.project().await;
    }
    within(
        std::time::Duration::from_secs(20),
        "the reminder",
        || async { telegram.sent().len() >= 2 },
    )
    .await;
    app.drive("effects:telegram").await;
    app.tick("stale_reviews").await;
    app.drive("effects:telegram").await;
    let sent = telegram.sent();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[1].chat, -100);
    assert!(
        sent[1].text.starts_with(&format!(
            "⏰ <b>{id}</b> Fix the login redirect <i>(acme/app)</i>\nin review for 5 h without activity"
        )),
        "{}",
        sent[1].text
    );
    app.stop().await;
}
