//! `gitlab_poller` through the real app, per backend, against the fake GitLab: a task's merge request merged
//! while its webhook was missed is appended once, shaped like that webhook; one whose webhook came is not
//! appended again; pages are followed (keyset, `Link` rel=next); a fork's `pidevops/<task>` branch and a merge
//! request the task never recorded are a stranger's and append nothing; without `GITLAB_TOKEN` (or without a
//! GitLab repository) the loop is not armed and says why.

use crate::common::board::new_task;
use crate::common::{TestApp, TestDb, GITLAB_SECRET};
use pidevops::eventlog::StoredEvent;
use pidevops::tasks::{Column, GitlabMrRef, Links, TaskId, GITLAB_MR};
use serde_json::Value;

use super::fake::FakeGitlab;
use super::gl_fixture;

per_backend!(
    a_merge_the_webhook_missed_is_appended_once_and_strangers_merges_not_at_all,
    a_merge_whose_webhook_came_is_not_appended_again,
    pages_are_followed_and_the_cursor_moves_on,
    an_issue_closed_or_unlabeled_while_its_webhook_was_missed_withdraws_its_task,
);

const REPO: &str = "acme/platform/api";
const POLLER: &str = "gitlab_poller";

fn config() -> String {
    format!(
        "[repos.\"{REPO}\"]\nprovider = \"gitlab\"\nurl = \"https://gitlab.example.com/{REPO}.git\"\n\
         [intake.gitlab]\ntrusted_users = [\"alice\"]\n[pollers.gitlab]\ninterval_s = 3600\n"
    )
}

async fn app(db: &TestDb, fake: &FakeGitlab) -> TestApp {
    let mut settings = crate::common::settings(db);
    fake.point_settings(&mut settings, "glpat-poller");
    settings.file = config().parse().unwrap();
    let app = TestApp::spawn(settings).await;
    first_tick_over(&app).await;
    app
}

/// Waits until the loop's own first tick, at start, is over, so that it never runs in the middle of a test that
/// changes GitLab (a singleton's first tick waits for its lease's first try, outside the turn a test's tick
/// takes): driven by the test from here on.
pub(crate) async fn first_tick_over(app: &TestApp) {
    crate::common::within(
        std::time::Duration::from_secs(20),
        "gitlab_poller's own first tick",
        || async {
            app.state
                .loops
                .report()
                .get(POLLER)
                .is_some_and(|report| report.ticks >= 1)
        },
    )
    .await;
}

/// A task on the project whose recorded merge request is `!iid`.
async fn task_with_mr(app: &TestApp, iid: u64) -> TaskId {
    let mr = GitlabMrRef::new(REPO.parse().unwrap(), iid).unwrap();
    new_task("Fix the login redirect")
        .repo(REPO)
        .links(Links::default().with(GITLAB_MR, &mr))
        .create(app)
        .await
}

fn seconds_ago(seconds: i64) -> String {
    (chrono::Utc::now() - chrono::Duration::seconds(seconds))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

async fn merge_request_events(app: &TestApp) -> Vec<StoredEvent> {
    app.all_events()
        .await
        .into_iter()
        .filter(|e| e.event_type.starts_with("gitlab.merge_request."))
        .collect()
}

async fn a_merge_the_webhook_missed_is_appended_once_and_strangers_merges_not_at_all(db: TestDb) {
    let fake = FakeGitlab::start().await;
    let app = app(&db, &fake).await;
    let id = task_with_mr(&app, 7).await;
    let branch = id.branch().as_str().to_owned();
    fake.put_merge_request(REPO, 7, &branch, "merged", &seconds_ago(30), 42);
    // Another task's recorded merge request, whose source is a fork's branch of that task's name: a stranger's.
    let other = task_with_mr(&app, 8).await;
    fake.put_merge_request(
        REPO,
        8,
        other.branch().as_str(),
        "merged",
        &seconds_ago(29),
        77,
    );
    // A merge request the task never recorded, on its branch: not the task's.
    fake.put_merge_request(REPO, 9, &branch, "closed", &seconds_ago(28), 42);
    // Still open, and another branch: nothing to say.
    fake.put_merge_request(REPO, 10, &branch, "opened", &seconds_ago(27), 42);
    fake.put_merge_request(REPO, 11, "feature/x", "merged", &seconds_ago(26), 42);

    app.tick(POLLER).await;
    let events = merge_request_events(&app).await;
    assert_eq!(events.len(), 1, "{events:#?}");
    let merged = &events[0];
    assert_eq!(merged.event_type, "gitlab.merge_request.merge");
    assert_eq!(
        merged.dedup_key,
        format!("poll:merge_request:{REPO}!7:merged")
    );
    assert_eq!(merged.source, "gitlab");
    assert_eq!(merged.repository.as_deref(), Some(REPO));
    assert_eq!(merged.number, Some(7));
    assert_eq!(merged.action.as_deref(), Some("merge"));
    assert_eq!(merged.meta.text("poller").as_deref(), Some(POLLER));
    let body: Value = serde_json::from_slice(&merged.body).unwrap();
    assert_eq!(body["object_kind"], "merge_request");
    assert_eq!(body["project"]["path_with_namespace"], REPO);
    assert_eq!(body["object_attributes"]["iid"], 7);
    assert_eq!(body["object_attributes"]["source_branch"], branch);
    assert_eq!(body["object_attributes"]["state"], "merged");
    assert_eq!(body["user"]["username"], "alice");

    // Polled again: nothing new.
    app.tick(POLLER).await;
    assert_eq!(merge_request_events(&app).await.len(), 1, "appended once");
    let health = app.health().await.1["loops"][POLLER].clone();
    assert_eq!(health["state"], "armed", "{health}");
    app.stop().await;
}

async fn a_merge_whose_webhook_came_is_not_appended_again(db: TestDb) {
    let fake = FakeGitlab::start().await;
    let app = app(&db, &fake).await;
    let id = task_with_mr(&app, 7).await;
    let branch = id.branch().as_str().to_owned();
    let mut delivered = gl_fixture("merge_request_merge");
    delivered["object_attributes"]["source_branch"] = branch.clone().into();
    let response = app
        .client
        .post(app.url("/webhooks/gitlab"))
        .header("content-type", "application/json")
        .header("x-gitlab-event", "Merge Request Hook")
        .header("x-gitlab-event-uuid", "mr-merge-1")
        .header("x-gitlab-token", GITLAB_SECRET)
        .body(delivered.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    fake.put_merge_request(REPO, 7, &branch, "merged", &seconds_ago(30), 42);
    app.tick(POLLER).await;
    let events = merge_request_events(&app).await;
    assert_eq!(events.len(), 1, "the webhook's only: {events:#?}");
    assert!(events[0].meta.get("poller").is_none(), "{:?}", events[0]);
    app.stop().await;
}

async fn pages_are_followed_and_the_cursor_moves_on(db: TestDb) {
    let fake = FakeGitlab::start().await;
    fake.page_size(2);
    let app = app(&db, &fake).await;
    let id = task_with_mr(&app, 7).await;
    let branch = id.branch().as_str().to_owned();
    for iid in 1..=4 {
        fake.put_merge_request(
            REPO,
            iid,
            &format!("feature/{iid}"),
            "opened",
            &seconds_ago(60 - iid as i64),
            42,
        );
    }
    // The task's merge request changed last: on the third page.
    fake.put_merge_request(REPO, 7, &branch, "closed", &seconds_ago(10), 42);
    let before = fake.list_calls().len();
    app.tick(POLLER).await;
    let calls = fake.list_calls()[before..].to_vec();
    assert_eq!(
        calls.iter().map(|(_, cursor)| *cursor).collect::<Vec<_>>(),
        [false, true, true],
        "three pages, the second and third by GitLab's next link: {calls:?}"
    );
    let events = merge_request_events(&app).await;
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0].event_type, "gitlab.merge_request.close");
    assert_eq!(
        events[0].dedup_key,
        format!("poll:merge_request:{REPO}!7:closed")
    );

    // The next poll asks from the newest change seen (less the overlap), not from the first look-back; the
    // cursor is kept in the log's checkpoints, so a restart would ask the same.
    app.tick(POLLER).await;
    let (since, _) = fake.list_calls().last().unwrap().clone();
    let since = chrono::DateTime::parse_from_rfc3339(&since).unwrap();
    assert!(
        since > chrono::Utc::now() - chrono::Duration::minutes(5),
        "asked from {since}"
    );
    let name =
        pidevops::providers::gitlab::poller::GitlabPoller::cursor_name(&REPO.parse().unwrap());
    assert!(app.state.log.store().checkpoint(&name).await.unwrap() > 0);
    assert_eq!(merge_request_events(&app).await.len(), 1);
    app.stop().await;
}

/// Without `GITLAB_TOKEN` the loop is not armed, and says so in its plan and in `/health`; without a GitLab
/// repository it has nothing to ask about.
#[tokio::test]
async fn the_loop_is_not_armed_without_a_token_or_a_gitlab_repository() {
    let db = TestDb::sqlite();
    let mut settings = crate::common::settings(&db);
    settings.file = config().parse().unwrap();
    let planned = |settings: &pidevops::config::Settings| {
        pidevops::startup::catalog::plan(settings)
            .into_iter()
            .find(|p| p.name == POLLER)
            .expect("planned")
    };
    let no_token = planned(&settings);
    assert_eq!(no_token.state, pidevops::loops::LoopState::Unarmed);
    assert!(
        no_token
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("GITLAB_TOKEN is not")),
        "{no_token:?}"
    );
    let app = TestApp::spawn(settings.clone()).await;
    let health = app.health().await.1["loops"][POLLER].clone();
    assert_eq!(health["state"], "unarmed", "{health}");
    assert!(health.to_string().contains("GITLAB_TOKEN"), "{health}");
    app.stop().await;

    let fake = FakeGitlab::start().await;
    fake.point_settings(&mut settings, "glpat-x");
    settings.file = "".parse().unwrap();
    let no_repo = planned(&settings);
    assert_eq!(no_repo.state, pidevops::loops::LoopState::Disabled);
    assert!(
        no_repo
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("no GitLab repository")),
        "{no_repo:?}"
    );
}

async fn post_issue(app: &TestApp, uuid: &str, body: &Value) {
    let response = app
        .client
        .post(app.url("/webhooks/gitlab"))
        .header("content-type", "application/json")
        .header("x-gitlab-event", "Issue Hook")
        .header("x-gitlab-event-uuid", uuid)
        .header("x-gitlab-token", GITLAB_SECRET)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

async fn an_issue_closed_or_unlabeled_while_its_webhook_was_missed_withdraws_its_task(db: TestDb) {
    let fake = FakeGitlab::start().await;
    let app = app(&db, &fake).await;
    // Two issues, each a task by its webhook.
    post_issue(&app, "open-23", &gl_fixture("issue_open")).await;
    let mut other = gl_fixture("issue_open");
    other["object_attributes"]["iid"] = 24.into();
    other["object_attributes"]["id"] = 302.into();
    post_issue(&app, "open-24", &other).await;
    app.drive("intake").await;
    app.project().await;
    let first = TaskId::new(1.try_into().unwrap());
    let second = TaskId::new(2.try_into().unwrap());
    // Still asking (open, labeled): nothing to say.
    fake.put_issue(REPO, 23, "opened", &["pidevops"], &seconds_ago(20));
    fake.put_issue(REPO, 24, "opened", &["pidevops"], &seconds_ago(20));
    app.tick(POLLER).await;
    assert!(polled_issues(&app).await.is_empty());

    // #23 closed and #24's label taken off; neither webhook comes.
    fake.put_issue(REPO, 23, "closed", &["pidevops"], &seconds_ago(10));
    fake.put_issue(REPO, 24, "opened", &["bug"], &seconds_ago(10));
    app.tick(POLLER).await;
    app.tick(POLLER).await;
    let polled = polled_issues(&app).await;
    assert_eq!(
        polled
            .iter()
            .map(|e| e.event_type.as_str())
            .collect::<Vec<_>>(),
        ["gitlab.issue.close", "gitlab.issue.update"],
        "each once: {polled:#?}"
    );
    app.drive("intake").await;
    app.project().await;
    for id in [first, second] {
        assert_eq!(
            crate::common::board::row(&app, id).await.column,
            Column::Cancelled,
            "{id}"
        );
    }
    app.stop().await;
}

async fn polled_issues(app: &TestApp) -> Vec<StoredEvent> {
    app.all_events()
        .await
        .into_iter()
        .filter(|e| e.event_type.starts_with("gitlab.issue.") && e.meta.get("poller").is_some())
        .collect()
}
