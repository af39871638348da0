//! A GitLab-hosted task's merge request through the real app, per backend, only GitLab's API faked: submitted
//! for review, it gets exactly one merge request (its branch, the repository's base, `<task>: <title>`), linked to
//! the task as `gitlab_mr` and pointed at from its GitLab issue once; a repeat (the effect driven again, or the
//! merge request already open) opens none twice, while a fork's merge request of the same branch name is never
//! taken for it; the fake GitHub, armed, gets no pull request. With `land = "auto"` and the landing facts
//! recorded, the merge queue chooses it and the merge call carries the checked head once, and a head moved since
//! is never merged. And
//! pidevops's own git, against a loopback git host, sends `GITLAB_TOKEN` only to `GITLAB_URL`'s host.

use crate::common::board::{self, new_task};
use crate::common::{TestApp, TestDb};
use crate::providers::github::fake::FakeGithub;
use pidevops::tasks::{
    ApprovalPolicy, Command, CommitSha, FactName, GitlabIssueRef, Links, TaskId, GITHUB_PR,
    GITLAB_ISSUE, GITLAB_MR,
};
use serde_json::Value;

use super::fake::FakeGitlab;

per_backend!(
    a_submitted_gitlab_task_gets_one_merge_request_linked_and_noted_and_no_pull_request,
    a_merge_request_already_open_is_found_and_a_fork_s_is_never_taken,
    auto_land_merges_the_merge_request_at_the_checked_head_once,
    a_merge_request_whose_head_moved_is_never_merged_and_its_task_is_flagged,
);

const REPO: &str = "acme/platform/api";
const TOKEN: &str = "glpat-mr-token";

/// The app with both fakes armed: `REPO` on GitLab, base `develop`, landed by `land`.
async fn app(db: &TestDb, gitlab: &FakeGitlab, github: &FakeGithub, land: &str) -> TestApp {
    let mut settings = crate::common::settings(db);
    gitlab.point_settings(&mut settings, TOKEN);
    github.point_settings(&mut settings, "ghp-not-for-gitlab");
    settings.file = format!(
        "[repos.\"{REPO}\"]\nprovider = \"gitlab\"\nurl = \"https://gitlab.example.com/{REPO}.git\"\n\
         base = \"develop\"\nland = \"{land}\"\napprovals = 1\nrequired_checks = [\"test\"]\n\
         [intake.gitlab]\ntrusted_users = [\"alice\"]\n"
    )
    .parse()
    .unwrap();
    TestApp::spawn(settings).await
}

/// A task of GitLab issue 23 of `REPO`, taken to review as an attempt would (its branch `pidevops/<task>`).
async fn submitted(app: &TestApp) -> TaskId {
    let issue = GitlabIssueRef::new(REPO.parse().unwrap(), 23).unwrap();
    let id = new_task("Paginate the list")
        .repo(REPO)
        .links(Links::default().with(GITLAB_ISSUE, &issue))
        .approval(ApprovalPolicy::Auto)
        .create(app)
        .await;
    board::to_review(app, id, None).await;
    id
}

/// Auto-land's turn: the merge queue (reading the tasks in review) chooses, then effects:gitlab merges.
async fn land(app: &TestApp) {
    app.project().await;
    app.drive("merge_queue").await;
    app.project().await;
    app.drive("effects:gitlab").await;
}

async fn task_links(app: &TestApp, id: TaskId) -> Links {
    app.state
        .board
        .load(id)
        .await
        .unwrap()
        .unwrap()
        .task
        .links()
        .clone()
}

async fn a_submitted_gitlab_task_gets_one_merge_request_linked_and_noted_and_no_pull_request(
    db: TestDb,
) {
    let gitlab = FakeGitlab::start().await;
    let github = FakeGithub::start().await;
    let app = app(&db, &gitlab, &github, "manual").await;
    let id = submitted(&app).await;
    app.drive("effects:gitlab").await;
    app.drive("effects:github").await;

    let opened = gitlab.merge_requests();
    assert_eq!(opened.len(), 1, "{opened:?}");
    let mr = &opened[0];
    assert_eq!(mr.project, REPO, "the nested path, one encoded segment");
    assert_eq!(mr.source_branch, format!("pidevops/{id}"));
    assert_eq!(mr.target_branch, "develop");
    assert_eq!(mr.title, format!("{id}: Paginate the list"));
    assert!(mr
        .description
        .contains(&format!("Opened by pidevops for {id}")));
    // `[repos] delete_branch` unset (true): GitLab deletes the branch when the merge request merges.
    assert_eq!(mr.remove_source_branch, Some(true));
    assert_eq!(mr.token, TOKEN);
    let links = task_links(&app, id).await;
    let linked = links.get(GITLAB_MR).expect("linked");
    assert_eq!((linked.project.as_str(), linked.iid.get()), (REPO, mr.iid));
    assert!(
        links.get(GITHUB_PR).is_none(),
        "GitHub's policy links no merge request as its pull request: {links:?}"
    );
    let pointing: Vec<_> = gitlab
        .notes()
        .into_iter()
        .filter(|n| n.body.contains("for review"))
        .collect();
    assert_eq!(pointing.len(), 1, "{pointing:?}");
    assert_eq!((pointing[0].project.as_str(), pointing[0].iid), (REPO, 23));
    assert!(pointing[0].body.contains(&format!("opened !{}", mr.iid)));
    assert!(
        github.pulls_opened().is_empty(),
        "GitHub opens nothing for it"
    );
    assert!(
        board::events_in(&app, &format!("effect:github:pr:{id}"))
            .await
            .is_empty(),
        "effects:github asks for no pull request"
    );

    // A GitHub repository's task is GitHub's: its pull request, no merge request, and nothing of it linked as one.
    let on_github = new_task("Fix the header")
        .repo("acme/app")
        .approval(ApprovalPolicy::Auto)
        .create(&app)
        .await;
    board::to_review(&app, on_github, None).await;
    app.drive("effects:github").await;
    app.drive("effects:gitlab").await;
    assert_eq!(github.pulls_opened().len(), 1);
    let links = task_links(&app, on_github).await;
    assert!(links.get(GITHUB_PR).is_some(), "{links:?}");
    assert!(links.get(GITLAB_MR).is_none(), "{links:?}");
    assert_eq!(gitlab.merge_requests().len(), 1);

    // The effect's stream driven again, and the same submission's event re-read: nothing twice.
    app.drive("effects:gitlab").await;
    assert_eq!(gitlab.merge_requests().len(), 1);
    assert_eq!(
        gitlab
            .notes()
            .iter()
            .filter(|n| n.body.contains("for review"))
            .count(),
        1
    );
    app.stop().await;
}

async fn a_merge_request_already_open_is_found_and_a_fork_s_is_never_taken(db: TestDb) {
    let gitlab = FakeGitlab::start().await;
    let github = FakeGithub::start().await;
    let app = app(&db, &gitlab, &github, "manual").await;
    // A stranger's fork opened a merge request from a branch of the task's name before pidevops did.
    let fork = gitlab.seed_merge_request(REPO, "pidevops/T-1", true);
    let id = submitted(&app).await;
    assert_eq!(id.to_string(), "T-1");
    app.drive("effects:gitlab").await;
    let ours: Vec<_> = gitlab
        .merge_requests()
        .into_iter()
        .filter(|m| m.iid != fork)
        .collect();
    assert_eq!(ours.len(), 1, "pidevops opens its own: {ours:?}");
    let linked = task_links(&app, id).await.get(GITLAB_MR).expect("linked");
    assert_eq!(linked.iid.get(), ours[0].iid, "never the fork's");

    // A second task whose merge request a cut-off attempt opened: found, none opened.
    let before = gitlab.merge_requests().len();
    let held = gitlab.seed_merge_request(REPO, "pidevops/T-2", false);
    let second = submitted(&app).await;
    app.drive("effects:gitlab").await;
    assert_eq!(
        gitlab.merge_requests().len(),
        before + 1,
        "none opened twice"
    );
    let linked = task_links(&app, second)
        .await
        .get(GITLAB_MR)
        .expect("linked");
    assert_eq!(linked.iid.get(), held);
    let succeeded = board::events_in(&app, &format!("effect:gitlab:mr:{second}")).await;
    let body: Value = serde_json::from_slice(&succeeded.last().unwrap().body).unwrap();
    assert_eq!(body["produced"]["opened"], false, "{body}");
    app.stop().await;
}

/// Records a passed `test` check and alice's approval on `sha` for task `id`.
async fn facts(app: &TestApp, id: TaskId, sha: &str) {
    let sha = CommitSha::new(sha).unwrap();
    for command in [
        Command::RecordCheckPassed {
            sha: sha.clone(),
            name: FactName::new("check", "test").unwrap(),
        },
        Command::RecordApproval {
            by: FactName::new("login", "alice").unwrap(),
            sha: sha.clone(),
        },
    ] {
        app.state.board.execute(id, &command, "test").await.unwrap();
    }
}

async fn a_merge_request_whose_head_moved_is_never_merged_and_its_task_is_flagged(db: TestDb) {
    let gitlab = FakeGitlab::start().await;
    let github = FakeGithub::start().await;
    let app = app(&db, &gitlab, &github, "auto").await;
    let id = submitted(&app).await;
    app.drive("effects:gitlab").await;
    let iid = task_links(&app, id)
        .await
        .get(GITLAB_MR)
        .expect("linked")
        .iid
        .get();
    // Someone pushed to the branch after the checks and the approval of pidevops's commit.
    gitlab.set_head(REPO, iid, "ffffffffffffffffffffffffffffffffffffffff");
    facts(&app, id, "0123456789abcdef0123456789abcdef01234567").await;
    land(&app).await;
    assert!(gitlab.merges().is_empty(), "{:?}", gitlab.merges());
    let task = app.state.board.load(id).await.unwrap().unwrap().task;
    let flag = task.needs_human().expect("flagged").reason.to_string();
    assert!(flag.contains("the branch moved"), "{flag}");
    app.stop().await;
}

async fn auto_land_merges_the_merge_request_at_the_checked_head_once(db: TestDb) {
    let gitlab = FakeGitlab::start().await;
    let github = FakeGithub::start().await;
    let app = app(&db, &gitlab, &github, "auto").await;
    let id = submitted(&app).await;
    app.drive("effects:gitlab").await;
    let iid = task_links(&app, id)
        .await
        .get(GITLAB_MR)
        .expect("linked")
        .iid
        .get();
    let sha = "0123456789abcdef0123456789abcdef01234567";
    gitlab.set_head(REPO, iid, sha);
    let sha_fact = CommitSha::new(sha).unwrap();
    app.state
        .board
        .execute(
            id,
            &Command::RecordCheckPassed {
                sha: sha_fact.clone(),
                name: FactName::new("check", "test").unwrap(),
            },
            "test",
        )
        .await
        .unwrap();
    land(&app).await;
    assert!(gitlab.merges().is_empty(), "0 of 1 approvals: no merge");
    app.state
        .board
        .execute(
            id,
            &Command::RecordApproval {
                by: FactName::new("login", "alice").unwrap(),
                sha: sha_fact,
            },
            "test",
        )
        .await
        .unwrap();
    land(&app).await;
    app.drive("effects:github").await;
    let merges = gitlab.merges();
    assert_eq!(merges.len(), 1, "{merges:?}");
    assert_eq!((merges[0].project.as_str(), merges[0].iid), (REPO, iid));
    assert_eq!(merges[0].sha.as_deref(), Some(sha));
    assert_eq!(merges[0].when_pipeline_succeeds, Some(true));
    assert_eq!(merges[0].token, TOKEN);
    assert!(
        github.calls().iter().all(|c| !c.path.contains("/merge")),
        "GitHub merges nothing for it"
    );
    let asked_github: Vec<String> = app
        .all_events()
        .await
        .into_iter()
        .filter_map(|e| e.stream)
        .filter(|s| s.starts_with("effect:github:"))
        .collect();
    assert!(asked_github.is_empty(), "{asked_github:?}");
    // pidevops's own git never lands it: its merge request does.
    let refused = app
        .client
        .post(app.url(&format!("/api/tasks/{id}/land")))
        .bearer_auth(crate::common::ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 409);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"], "on_gitlab", "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains(&format!("merge request {REPO}!{iid}")),
        "{body}"
    );

    // Driven again: the merge was made once for this head.
    land(&app).await;
    assert_eq!(gitlab.merges().len(), 1);
    app.stop().await;
}

/// pidevops's own git, against a git HTTP server on loopback that records what each request carried: a GitLab
/// repository on `GITLAB_URL`'s host gets `GITLAB_TOKEN` as `oauth2` Basic; the same repository on another host,
/// and a GitHub repository on GitLab's host, get nothing (and GitHub's token never goes there).
#[tokio::test]
async fn our_git_sends_the_gitlab_token_only_to_gitlab_s_host_for_a_gitlab_repository() {
    use base64::Engine as _;
    use pidevops::config::dispatch::RepoSource;
    use pidevops::config::file::CodeHost;
    use pidevops::dispatch::workspace::{GitCredentials, GitlabCredential, Workspaces};
    use std::sync::{Arc, Mutex};

    async fn git_host() -> (String, Arc<Mutex<Vec<Option<String>>>>) {
        let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
        let kept = seen.clone();
        let router = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
            let kept = kept.clone();
            async move {
                kept.lock().unwrap().push(
                    headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned),
                );
                axum::http::StatusCode::NOT_FOUND
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        (url, seen)
    }
    let (gitlab_url, at_gitlab) = git_host().await;
    let (other_url, at_other) = git_host().await;
    let root = tempfile::tempdir().unwrap();
    let workspaces = Workspaces::new(
        root.path(),
        GitCredentials {
            github: Some("ghp-never-to-gitlab".to_owned().into()),
            gitlab: Some(GitlabCredential {
                url: gitlab_url.clone(),
                token: "glpat-push".to_owned().into(),
            }),
        },
    )
    .unwrap();
    let source = |url: &str, host: CodeHost| RepoSource {
        url: format!("{url}/{REPO}.git"),
        base: "main".to_owned(),
        forge: None,
        host,
        keeps_branches: false,
    };
    let repo = REPO.parse().unwrap();
    // Each fetch fails (the fake has no repository): what matters is what its requests carried.
    let _ = workspaces
        .refresh_mirror(&repo, &source(&gitlab_url, CodeHost::Gitlab))
        .await;
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("oauth2:glpat-push")
    );
    let carried = at_gitlab.lock().unwrap().clone();
    assert!(!carried.is_empty(), "git asked GitLab's host");
    assert!(
        carried
            .iter()
            .all(|h| h.as_deref() == Some(expected.as_str())),
        "{carried:?}"
    );
    let _ = workspaces
        .refresh_mirror(&repo, &source(&other_url, CodeHost::Gitlab))
        .await;
    let _ = workspaces
        .refresh_mirror(
            &"acme/app".parse().unwrap(),
            &source(&gitlab_url, CodeHost::Github),
        )
        .await;
    let elsewhere = at_other.lock().unwrap().clone();
    assert!(
        !elsewhere.is_empty() && elsewhere.iter().all(Option::is_none),
        "{elsewhere:?}"
    );
    let at_gitlab_now = at_gitlab.lock().unwrap().clone();
    assert!(
        at_gitlab_now[carried.len()..].iter().all(Option::is_none),
        "a GitHub repository gets no GitLab token: {at_gitlab_now:?}"
    );
    assert!(at_gitlab_now.len() > carried.len(), "git asked again");
}
