//! GitHub comments addressed to pidevops, through the real server, signed webhooks and the fake GitHub: a trusted
//! `@bot` comment on a task's pull request reaches its next run once (redelivered or edited, still once), a task
//! waiting on a human takes one as its answer, one on an issue without a task makes one (a later label no second),
//! `/pidevops cancel | status` steer and answer, each with an `eyes` reaction and a reply. Strangers, pidevops's
//! own account, other repositories and a pull request of another repository change nothing and get no reaction
//! and no reply: each is recorded as ignored, saying why. Real agents where a prompt is read; per backend.

use pidevops::tasks::{GITHUB_ISSUE, GITHUB_PR};
use std::time::Duration;

use crate::common::agents::{agent, dispatch_file, Remote, REPO};
use crate::common::board::new_task;
use crate::common::{within, TestApp, TestDb};
use crate::providers::github::fake::FakeGithub;
use pidevops::tasks::{Column, Command, Links, Reason, TaskId};
use serde_json::{json, Value};

per_backend!(
    a_trusted_mention_on_the_tasks_pull_request_reaches_its_next_run_once,
    a_strangers_cancel_changes_nothing_and_a_members_cancels_and_status_replies,
    our_own_account_other_repositories_and_plain_comments_change_nothing,
    a_mention_on_an_issue_without_a_task_makes_one_and_a_later_label_no_second,
    a_task_waiting_on_a_human_takes_the_comment_as_its_answer,
);

const BOT: &str = "pidevops-bot";
/// The issue the tests' tasks come from, in `REPO`.
const ISSUE: u64 = 12;

use crate::providers::github::gh_fixture as fixture;

use crate::common::read::{ended_runs, prompt_of, task as load, wait_column};
use crate::providers::github::gh_post as post;

async fn ignored(app: &TestApp) -> Vec<String> {
    crate::common::read::reasons(app, "intake.ignored").await
}

/// The app with the fake GitHub, trusting members, `acme/*` allowed; with a fake agent when `remote` is given
/// (auto approval), else without dispatch and with manual approval (tasks wait in triage).
async fn spawn(
    db: &TestDb,
    github: &FakeGithub,
    dispatch: Option<(&Remote, &std::path::Path)>,
) -> (TestApp, tempfile::TempDir) {
    let scratch = tempfile::tempdir().unwrap();
    let mut file: toml::Table = match dispatch {
        Some((remote, script)) => dispatch_file(remote, script, ""),
        None => "[board]\napproval = \"manual\"".parse().unwrap(),
    };
    file.insert(
        "intake".to_owned(),
        toml::Value::Table(
            format!("allow_repos = [\"acme/*\"]\n[github]\nbot_login = \"{BOT}\"")
                .parse()
                .unwrap(),
        ),
    );
    let mut settings = crate::common::settings(db);
    settings.file = pidevops::config::FileConfig::try_from(file).unwrap();
    settings.workspace_root = scratch.path().join("ws");
    github.point_settings(&mut settings, "ghp_comments");
    (TestApp::spawn(settings).await, scratch)
}

/// Where a comment is: (repository, number, on a pull request).
type On<'a> = (&'a str, u64, bool);

/// An `issue_comment` delivery: comment `id` saying `body`, by `who` (login, association), `on` an issue or a pull
/// request.
fn comment(action: &str, on: On<'_>, id: u64, who: (&str, &str), body: &str) -> Value {
    let ((repo, number, pull), (login, association)) = (on, who);
    let mut payload = fixture(&format!("issue_comment/{action}.payload.json"));
    payload["repository"]["full_name"] = json!(repo);
    payload["issue"]["number"] = json!(number);
    payload["issue"]["title"] = json!("Fix the login redirect");
    payload["issue"]["body"] = json!("The redirect drops the query string.");
    payload["issue"]["labels"] = json!([]);
    if pull {
        // As GitHub links a pull request's issue to it.
        payload["issue"]["pull_request"] = json!({
            "url": format!("https://api.github.com/repos/{repo}/pulls/{number}"),
            "html_url": format!("https://github.com/{repo}/pull/{number}"),
            "diff_url": format!("https://github.com/{repo}/pull/{number}.diff"),
            "patch_url": format!("https://github.com/{repo}/pull/{number}.patch"),
        });
    }
    payload["comment"]["id"] = json!(id);
    payload["comment"]["body"] = json!(body);
    payload["comment"]["user"]["login"] = json!(login);
    payload["comment"]["author_association"] = json!(association);
    payload["sender"]["login"] = json!(login);
    payload
}

/// The labeled issue `REPO#ISSUE` from a member: the tests' task.
fn labeled_issue() -> Value {
    let mut body = fixture("issues/labeled.payload.json");
    body["repository"]["full_name"] = json!(REPO);
    body["issue"]["number"] = json!(ISSUE);
    body["issue"]["title"] = json!("Fix the login redirect");
    body["issue"]["body"] = json!("The redirect drops the query string.");
    body["issue"]["labels"] = crate::providers::github::gh_labels(&["pidevops"]);
    body["issue"]["author_association"] = json!("MEMBER");
    body["label"] = crate::providers::github::gh_label("pidevops");
    body
}

/// Intake and effects:github have handled everything, the read models at the head.
async fn settle(app: &TestApp) {
    app.drive("intake").await;
    app.project().await;
    app.drive("effects:github").await;
}

async fn issue_task(app: &TestApp) -> TaskId {
    app.drive("intake").await;
    app.state
        .board
        .task_for_key(&format!("github:{REPO}#{ISSUE}"))
        .await
        .unwrap()
        .expect("the issue's task")
}

/// pidevops's replies to comments: (repo, number, body), in order.
fn replies(github: &FakeGithub) -> Vec<(String, u64, String)> {
    github
        .comments()
        .into_iter()
        .filter(|(_, _, body)| body.contains("<!-- pidevops:github:reply:"))
        .collect()
}

async fn a_trusted_mention_on_the_tasks_pull_request_reaches_its_next_run_once(db: TestDb) {
    let github = FakeGithub::start().await;
    let remote = Remote::new();
    let scripts = tempfile::tempdir().unwrap();
    let script = agent(scripts.path(), "edits.sh", "date +%s%N > CHANGES.md");
    let (app, _scratch) = spawn(&db, &github, Some((&remote, &script))).await;
    let id = new_task("Fix the login redirect")
        .scope("src/auth")
        .done_when("CI is green")
        .key("test:comments")
        .create(&app)
        .await;
    wait_column(&app, id, Column::InReview, "the first attempt in review").await;
    // effects:github opens the pull request and links it to the task.
    within(
        Duration::from_secs(60),
        "the pull request linked",
        || async { load(&app, id).await.links().has(GITHUB_PR) },
    )
    .await;
    let pr = load(&app, id).await.links().get(GITHUB_PR).unwrap();
    assert_eq!(pr.repo.as_str(), REPO);
    app.project().await;

    let said = "Use a max of 5 retries, not 3.";
    let on_pr = (REPO, pr.number.get(), true);
    let created = comment(
        "created",
        on_pr,
        7001,
        ("ada", "MEMBER"),
        &format!("@{BOT} {said}"),
    );
    post(&app, "issue_comment", &created).await;
    // GitHub delivers it again (a new delivery id), then it is edited.
    post(&app, "issue_comment", &created).await;
    let mut edited = comment(
        "edited",
        on_pr,
        7001,
        ("ada", "MEMBER"),
        &format!("@{BOT} Use a max of 9 retries."),
    );
    edited["changes"] = json!({ "body": { "from": created["comment"]["body"] } });
    post(&app, "issue_comment", &edited).await;
    settle(&app).await;

    let runs = ended_runs(&app, id, 2).await;
    let prompt = prompt_of(&runs[1]);
    // Once among the follow-ups (the retry's reason quotes the last one too).
    assert_eq!(
        prompt
            .lines()
            .filter(|l| l.starts_with("- From ada on ") && l.ends_with(&format!(": {said}")))
            .count(),
        1,
        "{prompt}"
    );
    assert!(
        !prompt.contains("9 retries"),
        "an edit runs nothing: {prompt}"
    );
    assert!(!prompt_of(&runs[0]).contains(said));
    wait_column(&app, id, Column::InReview, "the second attempt in review").await;
    let task = load(&app, id).await;
    assert_eq!(task.follow_ups().len(), 1, "{:?}", task.follow_ups());
    let origin = task.follow_ups()[0].origin.clone().unwrap();
    assert_eq!(origin.key(), "github:comment:7001");
    assert_eq!(origin.from(), format!("ada on {REPO}#{}", pr.number));

    let reasons = ignored(&app).await;
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("comment 7001") && r.contains("ran already")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("ran when it was created")),
        "{reasons:?}"
    );
    settle(&app).await;
    assert_eq!(
        github.reactions(),
        vec![(REPO.to_owned(), 7001, "eyes".to_owned())]
    );
    let replies = replies(&github);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(
        (replies[0].0.as_str(), replies[0].1),
        (REPO, pr.number.get())
    );
    assert!(
        replies[0].2.starts_with(&format!(
            "{id} was in review; it goes round again with this."
        )),
        "{replies:?}"
    );
    app.stop().await;
}

async fn a_strangers_cancel_changes_nothing_and_a_members_cancels_and_status_replies(db: TestDb) {
    let github = FakeGithub::start().await;
    let (app, _scratch) = spawn(&db, &github, None).await;
    post(&app, "issues", &labeled_issue()).await;
    let id = issue_task(&app).await;
    assert_eq!(load(&app, id).await.column(), Column::Triage);

    let stranger = comment(
        "created",
        (REPO, ISSUE, false),
        8001,
        ("mallory", "NONE"),
        "/pidevops cancel",
    );
    post(&app, "issue_comment", &stranger).await;
    settle(&app).await;
    assert_eq!(load(&app, id).await.column(), Column::Triage);
    assert!(github.reactions().is_empty());
    assert!(replies(&github).is_empty());
    let reasons = ignored(&app).await;
    assert!(
        reasons.iter().any(|r| r.contains("mallory is NONE")),
        "{reasons:?}"
    );

    for (n, body) in [
        (8002, "/pidevops status"),
        (8003, "/pidevops frobnicate"),
        (8004, "/pidevops cancel not needed after all"),
        (8005, "/pidevops approve"),
    ] {
        let c = comment("created", (REPO, ISSUE, false), n, ("ada", "MEMBER"), body);
        post(&app, "issue_comment", &c).await;
    }
    settle(&app).await;
    let task = load(&app, id).await;
    assert_eq!(task.column(), Column::Cancelled);
    let ids: Vec<u64> = github.reactions().iter().map(|r| r.1).collect();
    assert_eq!(ids, vec![8002, 8003, 8004, 8005]);
    let said: Vec<String> = replies(&github)
        .into_iter()
        .map(|(repo, n, body)| {
            assert_eq!((repo.as_str(), n), (REPO, ISSUE));
            body.lines().next().unwrap().to_owned()
        })
        .collect();
    assert_eq!(said.len(), 4, "{said:?}");
    assert_eq!(said[0], format!("{id} is in triage, attempt 0 of 3."));
    assert_eq!(
        said[1],
        "`/pidevops frobnicate` is not a command; the commands are retry, cancel, approve, status."
    );
    assert_eq!(said[2], format!("{id} cancelled."));
    assert!(
        said[3].starts_with(&format!("{id}: approve refused:")),
        "{said:?}"
    );
    app.stop().await;
}

async fn our_own_account_other_repositories_and_plain_comments_change_nothing(db: TestDb) {
    let github = FakeGithub::start().await;
    let (app, _scratch) = spawn(&db, &github, None).await;
    post(&app, "issues", &labeled_issue()).await;
    let id = issue_task(&app).await;
    // The task's pull request, as effects:github would have linked it.
    let links = Links::default().with(
        GITHUB_PR,
        &pidevops::tasks::GithubRef::new(REPO.parse().unwrap(), 3).unwrap(),
    );
    app.state
        .board
        .execute(id, &Command::AttachLinks { links }, "test")
        .await
        .unwrap();
    app.project().await;

    let attacks = [
        // pidevops's own account, mentioning itself.
        comment(
            "created",
            (REPO, ISSUE, false),
            9001,
            ("PiDevOps-Bot", "OWNER"),
            &format!("@{BOT} /pidevops cancel"),
        ),
        comment(
            "created",
            (REPO, 3, true),
            9002,
            (BOT, "OWNER"),
            &format!("@{BOT} start over"),
        ),
        // A repository not allowed, with the task's numbers.
        comment(
            "created",
            ("other-org/app", ISSUE, false),
            9003,
            ("ada", "OWNER"),
            "/pidevops cancel",
        ),
        comment(
            "created",
            ("other-org/app", 3, true),
            9004,
            ("ada", "OWNER"),
            &format!("@{BOT} start over"),
        ),
        // Not addressed to pidevops.
        comment(
            "created",
            (REPO, ISSUE, false),
            9005,
            ("ada", "OWNER"),
            "cancel this please, pidevops-bot",
        ),
        // A deleted comment.
        comment(
            "deleted",
            (REPO, ISSUE, false),
            9006,
            ("ada", "OWNER"),
            "/pidevops cancel",
        ),
    ];
    for attack in &attacks {
        post(&app, "issue_comment", attack).await;
    }
    settle(&app).await;
    let task = load(&app, id).await;
    assert_eq!(task.column(), Column::Triage);
    assert!(task.follow_ups().is_empty());
    assert!(github.reactions().is_empty(), "{:?}", github.reactions());
    assert!(replies(&github).is_empty());
    let reasons = ignored(&app).await;
    assert_eq!(reasons.len(), attacks.len(), "{reasons:?}");
    assert!(reasons[0].contains("own account"), "{reasons:?}");
    assert!(reasons[1].contains("own account"), "{reasons:?}");
    assert!(reasons[2].contains("other-org/app"), "{reasons:?}");
    assert!(reasons[3].contains("other-org/app"), "{reasons:?}");
    assert!(
        reasons[4].contains("not addressed to pidevops"),
        "{reasons:?}"
    );
    assert!(reasons[5].contains("deleted"), "{reasons:?}");

    // The same numbers in another allowed repository are another issue and another pull request: no task of
    // theirs, whatever the comment says of T-1 (said so to the trusted author, on their own issue).
    for c in [
        comment(
            "created",
            ("acme/other", ISSUE, false),
            9101,
            ("ada", "OWNER"),
            &format!("/pidevops cancel {id}"),
        ),
        comment(
            "created",
            ("acme/other", 3, true),
            9102,
            ("ada", "OWNER"),
            &format!("@{BOT} this is {id}: start over"),
        ),
    ] {
        post(&app, "issue_comment", &c).await;
    }
    settle(&app).await;
    let task = load(&app, id).await;
    assert_eq!(task.column(), Column::Triage);
    assert!(task.follow_ups().is_empty());
    let other: Vec<(String, u64, String)> = replies(&github);
    assert_eq!(other.len(), 2, "{other:?}");
    for (repo, _, body) in &other {
        assert_eq!(repo, "acme/other");
        assert!(body.starts_with("No task:"), "{body}");
    }
    let none = app
        .state
        .board
        .task_for_key("github:acme/other#12")
        .await
        .unwrap();
    assert_eq!(none, None, "a command makes no task");

    // GitHub names the repository in its own case, which need not be the configuration's: the task's pull request
    // is still found (GitHub matches repositories in any case), and the trusted status command answered there.
    let spelled = REPO.to_ascii_uppercase();
    let status = comment(
        "created",
        (&spelled, 3, true),
        9201,
        ("ada", "OWNER"),
        "/pidevops status",
    );
    post(&app, "issue_comment", &status).await;
    settle(&app).await;
    let answered: Vec<(String, u64, String)> = replies(&github)
        .into_iter()
        .filter(|(repo, _, _)| repo.eq_ignore_ascii_case(REPO))
        .collect();
    assert_eq!(answered.len(), 1, "{answered:?}");
    assert_eq!(answered[0].1, 3);
    assert!(
        answered[0].2.starts_with(&format!("{id} is in triage")),
        "{answered:?}"
    );
    app.stop().await;
}

async fn a_mention_on_an_issue_without_a_task_makes_one_and_a_later_label_no_second(db: TestDb) {
    let github = FakeGithub::start().await;
    let (app, _scratch) = spawn(&db, &github, None).await;
    let said = "Keep the old route working too.";
    let c = comment(
        "created",
        (REPO, ISSUE, false),
        6001,
        ("ada", "OWNER"),
        &format!("@{BOT}: {said}"),
    );
    post(&app, "issue_comment", &c).await;
    let id = issue_task(&app).await;
    let mut label = labeled_issue();
    label["sender"]["login"] = json!("ada");
    post(&app, "issues", &label).await;
    settle(&app).await;

    let task = load(&app, id).await;
    assert_eq!(task.spec().task(), "Fix the login redirect");
    assert_eq!(task.links().get(GITHUB_ISSUE).unwrap().number.get(), ISSUE);
    let pending: Vec<&str> = task.pending_follow_ups().map(|f| f.text.as_str()).collect();
    assert_eq!(pending, vec![said]);
    let created = app
        .all_events()
        .await
        .into_iter()
        .filter(|e| e.event_type == "task.created")
        .count();
    assert_eq!(created, 1, "one issue, one task");
    assert_eq!(
        github.reactions(),
        vec![(REPO.to_owned(), 6001, "eyes".to_owned())]
    );
    let replies = replies(&github);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert!(
        replies[0].2.starts_with(&format!(
            "Made {id} from this issue, with this comment for its first run; it is in triage, waiting for approval."
        )),
        "{replies:?}"
    );
    app.stop().await;
}

async fn a_task_waiting_on_a_human_takes_the_comment_as_its_answer(db: TestDb) {
    let github = FakeGithub::start().await;
    let remote = Remote::new();
    let scripts = tempfile::tempdir().unwrap();
    let script = agent(scripts.path(), "edits.sh", "date +%s%N > CHANGES.md");
    let (app, _scratch) = spawn(&db, &github, Some((&remote, &script))).await;
    post(&app, "issues", &labeled_issue()).await;
    let id = issue_task(&app).await;
    wait_column(&app, id, Column::InReview, "the first attempt in review").await;
    app.state
        .board
        .execute(
            id,
            &Command::FlagNeedsHuman {
                reason: Reason::new("Which route should the redirect keep?".to_owned()).unwrap(),
            },
            "test",
        )
        .await
        .unwrap();
    assert!(load(&app, id).await.needs_human().is_some());

    let said = "Keep /login/next.";
    let c = comment(
        "created",
        (REPO, ISSUE, false),
        5001,
        ("ada", "MEMBER"),
        &format!("@{BOT} {said}"),
    );
    post(&app, "issue_comment", &c).await;
    settle(&app).await;
    let runs = ended_runs(&app, id, 2).await;
    assert!(
        prompt_of(&runs[1]).contains(said),
        "{}",
        prompt_of(&runs[1])
    );
    let task = load(&app, id).await;
    assert!(task.needs_human().is_none());
    assert_eq!(
        task.follow_ups()[0].origin.as_ref().unwrap().key(),
        "github:comment:5001"
    );
    settle(&app).await;
    let replies = replies(&github);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert!(
        replies[0].2.starts_with(&format!(
            "That answers what {id} was waiting on; its next run has your answer."
        )),
        "{replies:?}"
    );
    app.stop().await;
}
