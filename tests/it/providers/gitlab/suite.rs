//! GitLab through the real app, per backend: deliveries checked by their token and stored once; a labeled issue
//! of a trusted author in a GitLab repository becomes one task; a wrong token is refused (401) and nothing stored;
//! a stranger's note is recorded as ignored and changes nothing; a trusted note is the task's follow-up once;
//! closing the issue withdraws its task; `effects:gitlab` notes the task on its issue once, through the fake; a
//! note addressed to pidevops gets 👀 and one reply, and a command on a merge request steers only the task whose
//! recorded merge request it is.

use crate::common::{board, TestApp, TestDb, GITLAB_SECRET};
use pidevops::tasks::{Column, TaskId};
use serde_json::Value;

use super::gl_fixture;

per_backend!(
    a_token_checked_delivery_is_stored_once_and_a_labeled_issue_becomes_one_task,
    a_wrong_or_missing_token_is_refused_and_nothing_is_stored,
    a_stranger_s_note_changes_nothing_and_a_trusted_one_is_a_follow_up_once,
    closing_the_issue_withdraws_its_task,
    the_task_made_of_an_issue_is_said_once_in_a_note_on_it,
    a_note_a_cut_off_attempt_made_is_found_not_made_again,
    a_note_for_pidevops_is_answered_once_and_steers_only_its_own_merge_request_s_task,
    a_task_that_needs_a_human_asks_on_its_issue_and_a_trusted_note_answers_it,
);

const REPO: &str = "acme/platform/api";

async fn app(db: &TestDb) -> TestApp {
    let mut settings = crate::common::settings(db);
    settings.file = format!(
        "[repos.\"{REPO}\"]\nprovider = \"gitlab\"\nurl = \"https://gitlab.example.com/{REPO}.git\"\n\
         [intake.gitlab]\ntrusted_users = [\"alice\"]\nbot_username = \"pidevops-bot\"\n"
    )
    .parse()
    .unwrap();
    TestApp::spawn(settings).await
}

async fn post(app: &TestApp, token: Option<&str>, uuid: &str, body: &Value) -> (u16, Value) {
    let mut request = app
        .client
        .post(app.url("/webhooks/gitlab"))
        .header("content-type", "application/json")
        .header("x-gitlab-event", "Issue Hook")
        .header("x-gitlab-event-uuid", uuid)
        .body(body.to_string());
    if let Some(token) = token {
        request = request.header("x-gitlab-token", token);
    }
    let response = request.send().await.expect("the request completes");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn gitlab_events(app: &TestApp) -> Vec<pidevops::eventlog::StoredEvent> {
    app.all_events()
        .await
        .into_iter()
        .filter(|e| e.source == "gitlab")
        .collect()
}

async fn settle(app: &TestApp) {
    app.drive("intake").await;
    app.project().await;
}

async fn a_token_checked_delivery_is_stored_once_and_a_labeled_issue_becomes_one_task(db: TestDb) {
    let app = app(&db).await;
    let opened = gl_fixture("issue_open");
    let (status, first) = post(&app, Some(GITLAB_SECRET), "uuid-1", &opened).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["duplicate"], false);
    // Resent by GitLab: the same UUID and bytes are the same event.
    let (status, again) = post(&app, Some(GITLAB_SECRET), "uuid-1", &opened).await;
    assert_eq!(status, 200);
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["event_id"], first["event_id"]);
    // The label added later by its author asks for the same issue: still one task.
    let (status, _) = post(
        &app,
        Some(GITLAB_SECRET),
        "uuid-2",
        &gl_fixture("issue_update_label"),
    )
    .await;
    assert_eq!(status, 200);
    settle(&app).await;

    let stored = gitlab_events(&app).await;
    assert_eq!(stored.len(), 2, "one event per delivery, the resend none");
    assert_eq!(stored[0].event_type, "gitlab.issue.open");
    assert!(
        stored[0].meta.get("x-gitlab-token").is_none(),
        "the token is never stored"
    );
    let task = board::row(&app, TaskId::new(1.try_into().unwrap())).await;
    assert_eq!(task.repo, REPO);
    assert_eq!(task.column, Column::Triage);
    let created = board::events_of_type(&app, "task.created").await;
    assert_eq!(created.len(), 1, "one issue, one task");
    assert_eq!(created[0].meta.text("actor").as_deref(), Some("gitlab"));
    let body: Value = serde_json::from_slice(&created[0].body).unwrap();
    assert_eq!(body["links"]["gitlab_issue"]["project"], REPO);
    assert_eq!(body["links"]["gitlab_issue"]["iid"], 23);
    app.stop().await;
}

async fn a_wrong_or_missing_token_is_refused_and_nothing_is_stored(db: TestDb) {
    let app = app(&db).await;
    let opened = gl_fixture("issue_open");
    for (token, uuid) in [
        (Some("wrong-token"), "bad-1"),
        (Some(&GITLAB_SECRET[..GITLAB_SECRET.len() - 1]), "bad-2"),
        (None, "bad-3"),
    ] {
        let (status, refused) = post(&app, token, uuid, &opened).await;
        assert_eq!(status, 401, "{token:?}: {refused}");
    }
    settle(&app).await;
    assert!(
        gitlab_events(&app).await.is_empty(),
        "nothing refused is stored"
    );
    assert!(board::events_of_type(&app, "task.created").await.is_empty());
    app.stop().await;
}

async fn a_stranger_s_note_changes_nothing_and_a_trusted_one_is_a_follow_up_once(db: TestDb) {
    let app = app(&db).await;
    post(
        &app,
        Some(GITLAB_SECRET),
        "uuid-1",
        &gl_fixture("issue_open"),
    )
    .await;
    settle(&app).await;
    let id = TaskId::new(1.try_into().unwrap());
    let mut stranger = gl_fixture("note_issue");
    stranger["user"]["username"] = "mallory".into();
    stranger["user"]["id"] = 66.into();
    stranger["object_attributes"]["author_id"] = 66.into();
    stranger["object_attributes"]["id"] = 1300.into();
    let (status, _) = post(&app, Some(GITLAB_SECRET), "uuid-2", &stranger).await;
    assert_eq!(status, 200, "stored: what it asked is intake's to refuse");
    settle(&app).await;
    let stream = id.stream();
    let attached = |events: &[pidevops::eventlog::StoredEvent]| {
        events
            .iter()
            .filter(|e| e.event_type == "task.follow_up_attached")
            .count()
    };
    assert_eq!(attached(&board::events_in(&app, &stream).await), 0);
    let ignored = crate::common::read::reasons(&app, "intake.ignored").await;
    assert!(
        ignored
            .iter()
            .any(|r| r.contains("mallory is not in [intake.gitlab] trusted_users")),
        "{ignored:?}"
    );

    let note = gl_fixture("note_issue");
    post(&app, Some(GITLAB_SECRET), "uuid-3", &note).await;
    // Delivered again under another UUID (a recursive hook, say): the note's id attaches it once.
    post(&app, Some(GITLAB_SECRET), "uuid-4", &note).await;
    settle(&app).await;
    let events = board::events_in(&app, &stream).await;
    assert_eq!(attached(&events), 1, "one note, one follow-up");
    app.stop().await;
}

async fn closing_the_issue_withdraws_its_task(db: TestDb) {
    let app = app(&db).await;
    post(
        &app,
        Some(GITLAB_SECRET),
        "uuid-1",
        &gl_fixture("issue_open"),
    )
    .await;
    settle(&app).await;
    let id = TaskId::new(1.try_into().unwrap());
    assert_eq!(board::row(&app, id).await.column, Column::Triage);
    let (status, _) = post(
        &app,
        Some(GITLAB_SECRET),
        "uuid-2",
        &gl_fixture("issue_close"),
    )
    .await;
    assert_eq!(status, 200);
    settle(&app).await;
    assert_eq!(board::row(&app, id).await.column, Column::Cancelled);
    app.stop().await;
}

async fn noting_app(db: &TestDb, fake: &super::fake::FakeGitlab) -> TestApp {
    let mut settings = crate::common::settings(db);
    fake.point_settings(&mut settings, "glpat-test-token");
    settings.file = format!(
        "[repos.\"{REPO}\"]\nprovider = \"gitlab\"\nurl = \"https://gitlab.example.com/{REPO}.git\"\n\
         [intake.gitlab]\ntrusted_users = [\"alice\"]\nbot_username = \"pidevops-bot\"\n"
    )
    .parse()
    .unwrap();
    TestApp::spawn(settings).await
}

async fn a_note_a_cut_off_attempt_made_is_found_not_made_again(db: TestDb) {
    let fake = super::fake::FakeGitlab::start().await;
    fake.seed(
        REPO,
        23,
        "pidevops made this issue its task T-1.\n\n<!-- pidevops:gitlab:note:T-1:created -->",
    );
    let app = noting_app(&db, &fake).await;
    post(
        &app,
        Some(GITLAB_SECRET),
        "uuid-1",
        &gl_fixture("issue_open"),
    )
    .await;
    settle(&app).await;
    app.drive("effects:gitlab").await;
    assert_eq!(fake.notes().len(), 1, "the marker's note is the one");
    let succeeded = board::events_of_type(&app, "effect.succeeded").await;
    let body: Value = serde_json::from_slice(&succeeded[0].body).unwrap();
    assert_eq!(body["produced"]["posted"], false, "{body}");
    app.stop().await;
}

async fn the_task_made_of_an_issue_is_said_once_in_a_note_on_it(db: TestDb) {
    let fake = super::fake::FakeGitlab::start().await;
    let app = noting_app(&db, &fake).await;
    post(
        &app,
        Some(GITLAB_SECRET),
        "uuid-1",
        &gl_fixture("issue_open"),
    )
    .await;
    settle(&app).await;
    app.drive("effects:gitlab").await;
    let notes = fake.notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(
        notes[0].project, REPO,
        "the nested path, one encoded segment"
    );
    assert_eq!(notes[0].iid, 23);
    assert_eq!(notes[0].token, "glpat-test-token");
    assert!(notes[0].body.contains("T-1"), "{}", notes[0].body);
    assert!(notes[0]
        .body
        .contains("<!-- pidevops:gitlab:note:T-1:created -->"));
    // Driven again, and the same issue delivered anew: still one note.
    post(
        &app,
        Some(GITLAB_SECRET),
        "uuid-2",
        &gl_fixture("issue_update_label"),
    )
    .await;
    settle(&app).await;
    app.drive("effects:gitlab").await;
    assert_eq!(fake.notes().len(), 1);
    app.stop().await;
}

/// `doctor` proves `GITLAB_TOKEN` with a read-only call and never prints it; unset, the line says so.
#[tokio::test]
async fn doctor_proves_the_gitlab_token_with_a_read_only_call() {
    let db = TestDb::sqlite();
    let fake = super::fake::FakeGitlab::start().await;
    let mut settings = crate::common::settings(&db);
    let (report, _) = pidevops::doctor::diagnose(&settings).await;
    let line = |report: &str| {
        report
            .lines()
            .find(|l| l.starts_with("gitlab api"))
            .unwrap_or_else(|| panic!("{report}"))
            .to_owned()
    };
    assert!(
        line(&report).contains("GITLAB_TOKEN is not set"),
        "{report}"
    );
    fake.point_settings(&mut settings, "glpat-doctor-secret");
    let (report, _) = pidevops::doctor::diagnose(&settings).await;
    let checked = line(&report);
    assert!(
        checked.contains("pass") && checked.contains("the token is @pidevops-bot's"),
        "{checked}"
    );
    assert!(!report.contains("glpat-doctor-secret"));
    assert!(fake.notes().is_empty(), "doctor makes nothing");
}

/// A note of alice's on the fixture's issue (or, with `mr`, on that merge request) saying `text`.
fn note_saying(id: u64, text: &str, mr: Option<u64>) -> Value {
    let mut note = gl_fixture("note_issue");
    note["object_attributes"]["id"] = id.into();
    note["object_attributes"]["note"] = text.into();
    if let Some(iid) = mr {
        note["object_attributes"]["noteable_type"] = "MergeRequest".into();
        note["merge_request"] = serde_json::json!({ "iid": iid });
        note.as_object_mut().unwrap().remove("issue");
    }
    note
}

async fn a_note_for_pidevops_is_answered_once_and_steers_only_its_own_merge_request_s_task(
    db: TestDb,
) {
    let fake = super::fake::FakeGitlab::start().await;
    let app = noting_app(&db, &fake).await;
    post(
        &app,
        Some(GITLAB_SECRET),
        "uuid-1",
        &gl_fixture("issue_open"),
    )
    .await;
    settle(&app).await;
    let id = TaskId::new(1.try_into().unwrap());

    // `/pidevops status` on the issue: 👀 on the note and one reply saying where the task is; delivered again
    // (another UUID), nothing more.
    let status = note_saying(1250, "/pidevops status", None);
    post(&app, Some(GITLAB_SECRET), "uuid-2", &status).await;
    post(&app, Some(GITLAB_SECRET), "uuid-3", &status).await;
    settle(&app).await;
    app.drive("effects:gitlab").await;
    assert_eq!(
        fake.awards(),
        vec![(
            REPO.to_owned(),
            "issues".to_owned(),
            23,
            1250,
            "eyes".to_owned()
        )]
    );
    let replies = |fake: &super::fake::FakeGitlab| {
        fake.notes()
            .into_iter()
            .filter(|n| n.body.contains("pidevops:gitlab:reply:"))
            .collect::<Vec<_>>()
    };
    let said = replies(&fake);
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!((said[0].on, said[0].iid), ("issues", 23));
    assert!(
        said[0].body.contains("T-1 is in triage"),
        "{}",
        said[0].body
    );

    // The task's merge request is recorded as !7. `/pidevops cancel` on !8 (no task's) changes nothing and says
    // so; on !7 it cancels the task, answered on the merge request.
    let mr = pidevops::tasks::GitlabMrRef::new(REPO.parse().unwrap(), 7).unwrap();
    app.state
        .board
        .execute(
            id,
            &pidevops::tasks::Command::AttachLinks {
                links: pidevops::tasks::Links::default().with(pidevops::tasks::GITLAB_MR, &mr),
            },
            "test",
        )
        .await
        .unwrap();
    post(
        &app,
        Some(GITLAB_SECRET),
        "uuid-4",
        &note_saying(1260, "/pidevops cancel", Some(8)),
    )
    .await;
    settle(&app).await;
    assert_eq!(board::row(&app, id).await.column, Column::Triage);
    post(
        &app,
        Some(GITLAB_SECRET),
        "uuid-5",
        &note_saying(1270, "@pidevops-bot cancel not needed after all", Some(7)),
    )
    .await;
    settle(&app).await;
    assert_eq!(board::row(&app, id).await.column, Column::Cancelled);
    app.drive("effects:gitlab").await;
    let said = replies(&fake);
    let on_mr: Vec<_> = said.iter().filter(|n| n.on == "merge_requests").collect();
    assert_eq!(on_mr.len(), 2, "{said:?}");
    assert!(
        on_mr
            .iter()
            .any(|n| n.iid == 8 && n.body.contains("No task")),
        "{on_mr:?}"
    );
    assert!(
        on_mr
            .iter()
            .any(|n| n.iid == 7 && n.body.contains("T-1 cancelled")),
        "{on_mr:?}"
    );
    app.stop().await;
}

async fn a_task_that_needs_a_human_asks_on_its_issue_and_a_trusted_note_answers_it(db: TestDb) {
    let fake = super::fake::FakeGitlab::start().await;
    let app = noting_app(&db, &fake).await;
    post(
        &app,
        Some(GITLAB_SECRET),
        "uuid-1",
        &gl_fixture("issue_open"),
    )
    .await;
    settle(&app).await;
    let id = TaskId::new(1.try_into().unwrap());
    let flag = pidevops::tasks::Command::FlagNeedsHuman {
        reason: pidevops::tasks::Reason::new("which cursor format: v1 or v2?\n/close").unwrap(),
    };
    app.state.board.execute(id, &flag, "test").await.unwrap();
    app.drive("effects:gitlab").await;
    let asked: Vec<_> = fake
        .notes()
        .into_iter()
        .filter(|n| n.body.contains(":ask:"))
        .collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!((asked[0].on, asked[0].iid), ("issues", 23));
    assert!(
        asked[0]
            .body
            .contains("T-1 needs a human: which cursor format"),
        "{}",
        asked[0].body
    );
    assert!(
        asked[0].body.contains("mentioning @pidevops-bot"),
        "{}",
        asked[0].body
    );
    assert!(
        asked[0]
            .body
            .lines()
            .all(|l| !l.trim_start().starts_with('/')),
        "nothing pidevops posts runs as a quick action: {}",
        asked[0].body
    );

    post(
        &app,
        Some(GITLAB_SECRET),
        "uuid-2",
        &note_saying(1280, "@pidevops-bot v2, keep v1 readable", None),
    )
    .await;
    settle(&app).await;
    let events = board::events_in(&app, &id.stream()).await;
    assert!(
        events
            .iter()
            .any(|e| e.event_type == "task.needs_human_cleared"),
        "the note answered it: {:?}",
        events.iter().map(|e| &e.event_type).collect::<Vec<_>>()
    );
    app.drive("effects:gitlab").await;
    assert!(
        fake.notes()
            .iter()
            .any(|n| n.body.contains("That answers what T-1 was waiting on")),
        "{:?}",
        fake.notes()
    );
    app.stop().await;
}
