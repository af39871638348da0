//! A refresh on a repository with a `check` (issue 33 point 2), through the real app, real git, the real dispatcher
//! and contained processes, and the fake GitHub: the base moves cleanly, and the refresh loop pushes nothing itself.
//! The dispatcher runs the repository's setup and check on the refreshed tree (no agent) and only then pushes it,
//! once, leased on the commit pidevops recorded; `task.refreshed` follows. A check the base change breaks pushes
//! nothing and goes to an agent with its output, whose fix (the merge) is pushed once; the check never sees a
//! secret; a person's push while the check runs is never overwritten; a SIGKILL during the check or between its
//! push and its record neither loses nor repeats the push. (A repository without a check: refresh.rs, unchanged.)
//! Per backend.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pidevops::eventlog::EventStore;
use pidevops::projectors::runs::{self, Which};
use pidevops::tasks::{Column, TaskId};
use serde_json::json;

use crate::common::agents::{agent, git, Remote, REPO};
use crate::common::dispatching::{use_github, GITHUB_TOKEN};
use crate::common::killed::{kill, kill_on_push, killed, Serve};
use crate::common::{board, within, TestApp, TestDb};
use crate::land::{create_task, in_review, post};
use crate::providers::github::fake::FakeGithub;
use crate::refresh::{file, push, pushes, record_pushes, refresh, refreshes, shared};

per_backend!(
    a_clean_refresh_is_checked_on_the_refreshed_tree_without_secrets_then_pushed_once,
    a_refresh_the_base_breaks_pushes_nothing_and_goes_to_an_agent_with_the_checks_output,
    a_persons_push_while_the_refresh_is_checked_is_never_overwritten,
    sigkill_between_a_checked_refreshs_push_and_its_record_pushes_once_and_records_it,
    sigkill_while_the_refresh_is_checked_checks_it_again_and_pushes_once,
);

/// The hook's secret: setup gets it, the check never does.
const NPM_TOKEN: &str = "npm-secret-for-the-setup-only";

/// The agent's work: line 25 made its own.
const AGENT: &str = "sed -i 's/^line 25$/line 25 by the agent/' shared.txt";

/// The app with the agent, `setup` and `check` (scripts with these bodies) on `REPO`, `NPM_TOKEN` its hooks'
/// secret, GitHub's API at the fake; the workspace under `scratch`.
async fn app(
    db: &TestDb,
    fake: &FakeGithub,
    remote: &Remote,
    scratch: &Path,
    work: &str,
    check: &str,
) -> TestApp {
    let setup = agent(scratch, "setup.sh", r#"echo "SETUP-RAN token=$NPM_TOKEN""#);
    let check = agent(scratch, "check.sh", check);
    let mut file = file(remote, scratch, work);
    let keys: toml::Table = format!(
        "setup = [\"{}\"]\ncheck = [\"{}\"]\nsecrets = [\"NPM_TOKEN\"]",
        setup.display(),
        check.display()
    )
    .parse()
    .unwrap();
    file["repos"][REPO].as_table_mut().unwrap().extend(keys);
    let mut settings = crate::common::settings(db);
    settings.file = pidevops::config::FileConfig::try_from(file).unwrap();
    settings.workspace_root = scratch.join("ws");
    use_github(&mut settings, fake);
    let path = std::env::var("PATH").unwrap();
    settings.env =
        pidevops::config::Env::from_pairs([("PATH", path.as_str()), ("NPM_TOKEN", NPM_TOKEN)]);
    TestApp::spawn(settings).await
}

/// The events of `id`'s stream of type `kind`.
async fn count(store: &EventStore, id: TaskId, kind: &str) -> usize {
    store
        .read_stream(&format!("task:{id}"))
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event_type == kind)
        .count()
}

/// The log of `id`'s run of attempt `attempt`.
async fn run_log(store: &EventStore, id: TaskId, attempt: i64) -> String {
    let runs = runs::query(store, Which::Task(&id.to_string()))
        .await
        .unwrap();
    let run = runs
        .iter()
        .find(|r| r.attempt == attempt)
        .unwrap_or_else(|| panic!("no attempt {attempt} of {id}: {runs:?}"));
    std::fs::read_to_string(run.log_path.as_deref().unwrap()).unwrap_or_default()
}

/// The part of `log` one repository command printed (`step`: setup, check), framed as hooks.rs frames it.
fn section<'a>(log: &'a str, step: &str) -> &'a str {
    let start = log
        .find(&format!("=== pidevops: the repository's {step}: "))
        .unwrap_or_else(|| panic!("no {step} in:\n{log}"));
    let end = log[start..]
        .find(&format!("=== pidevops: end of the repository's {step} ==="))
        .map_or(log.len(), |end| start + end);
    &log[start..end]
}

/// A teammate's change to line 2 merged into the base, and its push told: the refresh loop handles it.
async fn base_moves(app: &TestApp, remote: &Remote, delivery: &str) {
    remote.commit_to_main("shared.txt", &shared(&[(2, "line 2 by a teammate")]));
    post(
        &app.url(""),
        "push",
        delivery,
        &push(REPO, "refs/heads/main"),
    )
    .await;
    refresh(app).await;
}

async fn a_clean_refresh_is_checked_on_the_refreshed_tree_without_secrets_then_pushed_once(
    db: TestDb,
) {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    record_pushes(&remote);
    let scratch = tempfile::tempdir().unwrap();
    // It passes on the agent's work, and says which tree it saw and what it was given.
    let check = r#"echo "CHECK-SAW: $(sed -n 2p shared.txt) / $(sed -n 25p shared.txt)"
env
grep -q '^line 25 by the agent$' shared.txt"#;
    let app = app(&db, &fake, &remote, scratch.path(), AGENT, check).await;
    let store = app.state.log.store().clone();
    let id = create_task(&app.url(""), REPO).await;
    let (_, sha) = in_review(&store, id, 1).await;
    let budget = board::row_in(&store, id).await.unwrap().max_attempts;
    let branch = format!("refs/heads/{}", id.branch());

    base_moves(&app, &remote, "main-1").await;
    assert_eq!(count(&store, id, "task.refresh_check_due").await, 1);
    within(
        Duration::from_secs(90),
        "the refresh checked and recorded",
        || async {
            !refreshes(&store, id).await.is_empty()
                && board::row_in(&store, id)
                    .await
                    .is_some_and(|r| r.column == Column::InReview)
        },
    )
    .await;
    let recorded = refreshes(&store, id).await;
    assert_eq!(recorded.len(), 1, "{recorded:#?}");
    let to = remote.branch(id.branch().as_str()).unwrap();
    assert_eq!(recorded[0]["from"], json!(sha));
    assert_eq!(recorded[0]["to"], json!(to));
    assert_eq!(recorded[0]["base"], json!(remote.branch("main").unwrap()));
    assert_eq!(recorded[0]["strategy"], json!("rebase"));
    assert_eq!(
        pushes(&remote, &branch),
        [format!("{branch} {sha}"), format!("{branch} {to}")],
        "one push of the refresh, after its check"
    );

    // The check ran on the refreshed tree, after setup, and saw no secret: not the hooks', not pidevops's.
    let log = run_log(&store, id, 2).await;
    assert!(
        section(&log, "setup").contains("SETUP-RAN token=[NPM_TOKEN]"),
        "{log}"
    );
    let checked = section(&log, "check");
    assert!(
        checked.contains("CHECK-SAW: line 2 by a teammate / line 25 by the agent"),
        "{checked}"
    );
    assert!(log.find("SETUP-RAN") < log.find("CHECK-SAW"), "{log}");
    for secret in ["NPM_TOKEN", NPM_TOKEN, GITHUB_TOKEN, "GITHUB_TOKEN"] {
        assert!(
            !checked.contains(secret),
            "{secret} in the check's run:\n{checked}"
        );
    }
    assert!(!log.contains(NPM_TOKEN), "{log}");

    // Neither a failure nor a bounce: back in review, nobody asked, the check's attempt added to the budget.
    let row = board::row_in(&store, id).await.unwrap();
    assert!(!row.needs_human, "{row:?}");
    assert_eq!((row.attempts, row.max_attempts), (2, budget + 1), "{row:?}");
    // Its page: one row, refreshed after its check, and what it changed on the pull request's diff (nothing).
    let section = refreshes_section(&app, id).await;
    for shown in [
        "<tr data-outcome=\"checked\">",
        "<td class=\"outcome\">refreshed after its check</td>",
        "No change to the pull request",
    ] {
        assert!(section.contains(shown), "{shown} in {section}");
    }

    // Told again: current now, nothing held, checked or pushed again.
    post(
        &app.url(""),
        "push",
        "main-1",
        &push(REPO, "refs/heads/main"),
    )
    .await;
    post(
        &app.url(""),
        "push",
        "main-2",
        &push(REPO, "refs/heads/main"),
    )
    .await;
    refresh(&app).await;
    assert_eq!(count(&store, id, "task.refresh_check_due").await, 1);
    assert_eq!(refreshes(&store, id).await.len(), 1);
    assert_eq!(pushes(&remote, &branch).len(), 2);
    app.stop().await;
}

/// Task `id`'s page from its Refreshes section on.
async fn refreshes_section(app: &TestApp, id: TaskId) -> String {
    let cookie = crate::web::sign_in(app).await;
    let (status, page) = crate::web::get(app, &format!("/tasks/{id}"), &cookie).await;
    assert_eq!(status, 200, "{page}");
    page[page
        .find("<h2>Refreshes</h2>")
        .expect("a Refreshes section")..]
        .to_owned()
}

/// The parents of `commit` in the remote.
fn parents(remote: &Remote, commit: &str) -> Vec<String> {
    let out = std::process::Command::new("git")
        .args(["rev-list", "--parents", "-n", "1", commit])
        .current_dir(remote.dir.path().join("remote.git"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .skip(1)
        .map(str::to_owned)
        .collect()
}

async fn a_refresh_the_base_breaks_pushes_nothing_and_goes_to_an_agent_with_the_checks_output(
    db: TestDb,
) {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    record_pushes(&remote);
    let scratch = tempfile::tempdir().unwrap();
    // The teammate's line 2 needs a compat.txt: true of the agent's work, false once their change is in.
    let check = r#"grep -q 'line 2 by a teammate' shared.txt && [ ! -f compat.txt ] || exit 0
echo "running 1 test"; echo "CHECK-SAYS: compat.txt is missing for '$(sed -n 2p shared.txt)'"; exit 3"#;
    // Work: line 25. Told the check fails and why: the file it asks for.
    let work = r#"if grep -q 'CHECK-SAYS: compat.txt is missing' "$1"; then
  echo compatible > compat.txt
else
  sed -i 's/^line 25$/line 25 by the agent/' shared.txt
fi"#;
    let app = app(&db, &fake, &remote, scratch.path(), work, check).await;
    let store = app.state.log.store().clone();
    let id = create_task(&app.url(""), REPO).await;
    let (_, sha) = in_review(&store, id, 1).await;
    let branch = format!("refs/heads/{}", id.branch());

    base_moves(&app, &remote, "main-1").await;
    let main = remote.branch("main").unwrap();
    // The check fails on the refresh: nothing pushed, the failure handed to an agent, which makes it pass.
    let (_, resolved) = in_review(&store, id, 3).await;
    assert_eq!(count(&store, id, "task.refresh_check_failed").await, 1);
    assert_eq!(count(&store, id, "task.conflict_found").await, 1);
    assert!(
        refreshes(&store, id).await.is_empty(),
        "the failing refresh was not recorded"
    );
    let prompt = std::fs::read_dir(scratch.path().join("ws/runs").join(id.to_string()))
        .unwrap()
        .filter_map(|run| std::fs::read_to_string(run.unwrap().path().join("prompt.md")).ok())
        .find(|prompt| prompt.contains("fails the repository's check"))
        .expect("the agent's prompt for the check");
    for said in [
        "Task: Fix the login redirect",
        "exited with status 3",
        "CHECK-SAYS: compat.txt is missing for 'line 2 by a teammate'",
        "```text",
    ] {
        assert!(prompt.contains(said), "{said:?} not in:\n{prompt}");
    }
    // Its fix: the merge of what pidevops pushed and the base, with the file, pushed once and leased.
    assert_eq!(parents(&remote, &resolved), [sha.clone(), main]);
    assert_eq!(
        remote.show(id.branch().as_str(), "compat.txt").as_deref(),
        Some("compatible\n")
    );
    assert_eq!(
        pushes(&remote, &branch),
        [format!("{branch} {sha}"), format!("{branch} {resolved}")],
        "nothing pushed before the check passed"
    );
    let row = board::row_in(&store, id).await.unwrap();
    assert!(!row.needs_human, "{row:?}");
    assert_eq!(row.column, Column::InReview);
    // Its page: one row, the check's failure and output, then resolved by the agent's attempt 3.
    let section = refreshes_section(&app, id).await;
    assert_eq!(section.matches("<tr data-outcome=").count(), 1, "{section}");
    for shown in [
        "<tr data-outcome=\"resolved\">",
        "<td class=\"outcome\">resolved by attempt 3</td>",
        "output</summary>",
    ] {
        assert!(section.contains(shown), "{shown} in {section}");
    }

    // Told again: current with that base; no second check.
    post(
        &app.url(""),
        "push",
        "main-1",
        &push(REPO, "refs/heads/main"),
    )
    .await;
    refresh(&app).await;
    assert_eq!(count(&store, id, "task.refresh_check_due").await, 1);
    assert_eq!(pushes(&remote, &branch).len(), 2);
    app.stop().await;
}

/// The worktree of `id`'s run whose check left `.waiting` in it, if one has (other than `but`).
fn waiting_worktree(ws: &Path, id: TaskId, but: Option<&Path>) -> Option<PathBuf> {
    std::fs::read_dir(ws.join("runs").join(id.to_string()))
        .ok()?
        .filter_map(Result::ok)
        .map(|run| run.path().join("worktree"))
        .find(|worktree| worktree.join(".waiting").exists() && Some(worktree.as_path()) != but)
}

/// A check that, on the refreshed tree only, says it waits and waits for `.go` (at most a minute), then passes.
const WAITS_ON_THE_REFRESH: &str = r#"if grep -q 'line 2 by a teammate' shared.txt; then
  echo CHECK-WAITED
  touch .waiting
  for _ in $(seq 1 1200); do [ -f .go ] && break; sleep 0.05; done
fi
exit 0"#;

async fn a_persons_push_while_the_refresh_is_checked_is_never_overwritten(db: TestDb) {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    record_pushes(&remote);
    let scratch = tempfile::tempdir().unwrap();
    // On the refreshed tree only, it waits for `.go` (the test pushes meanwhile), then passes.
    let app = app(
        &db,
        &fake,
        &remote,
        scratch.path(),
        AGENT,
        WAITS_ON_THE_REFRESH,
    )
    .await;
    let store = app.state.log.store().clone();
    let id = create_task(&app.url(""), REPO).await;
    let (_, sha) = in_review(&store, id, 1).await;
    let branch = format!("refs/heads/{}", id.branch());

    base_moves(&app, &remote, "main-1").await;
    let ws = scratch.path().join("ws");
    let mut worktree = None;
    within(Duration::from_secs(90), "the check waiting", || {
        worktree = waiting_worktree(&ws, id, None);
        let found = worktree.is_some();
        async move { found }
    })
    .await;
    let clone = remote.dir.path().join("person");
    git(
        remote.dir.path(),
        &["clone", "--quiet", "remote.git", clone.to_str().unwrap()],
    );
    git(&clone, &["checkout", "--quiet", id.branch().as_str()]);
    std::fs::write(clone.join("theirs.txt"), "a person's change\n").unwrap();
    git(&clone, &["add", "."]);
    git(&clone, &["commit", "--quiet", "-m", "a person's change"]);
    git(&clone, &["push", "--quiet", "origin", id.branch().as_str()]);
    let theirs = remote.branch(id.branch().as_str()).unwrap();
    std::fs::write(worktree.unwrap().join(".go"), "").unwrap();

    within(Duration::from_secs(90), "the task flagged", || async {
        board::row_in(&store, id)
            .await
            .is_some_and(|r| r.needs_human)
    })
    .await;
    let row = board::row_in(&store, id).await.unwrap();
    let flag = row.needs_human_reason.clone().unwrap();
    assert!(
        flag.contains("someone else pushed") && flag.contains("not overwritten"),
        "{flag}"
    );
    assert_eq!(row.column, Column::InReview);
    assert_eq!(remote.branch(id.branch().as_str()), Some(theirs.clone()));
    assert_eq!(
        pushes(&remote, &branch),
        [format!("{branch} {sha}"), format!("{branch} {theirs}")],
        "the person's push only"
    );
    assert!(refreshes(&store, id).await.is_empty());
    app.stop().await;
}

/// The real binary, SIGKILLed by the remote the moment the checked refresh's push lands (before its run's outcome
/// and `task.refreshed` are recorded): the restarted serve finds the run lost, runs the refresh check again, finds
/// the branch at the very commit it would push and records it, without running the check or pushing again; nobody
/// is asked.
async fn sigkill_between_a_checked_refreshs_push_and_its_record_pushes_once_and_records_it(
    db: TestDb,
) {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    record_pushes(&remote);
    let scratch = tempfile::tempdir().unwrap();
    let check = agent(scratch.path(), "check.sh", "echo CHECK-RAN");
    let mut table = file(&remote, scratch.path(), AGENT);
    table["repos"][REPO]
        .as_table_mut()
        .unwrap()
        .insert("check".into(), vec![check.display().to_string()].into());
    let serve = Serve::new(&db, &fake.url, scratch.path(), &table);
    let store = &EventStore::connect(&db.url, 4).await.unwrap();
    let mut first = serve.start().await;
    let id = create_task(&first.base, REPO).await;
    let (_, sha) = in_review(store, id, 1).await;
    let branch = format!("refs/heads/{}", id.branch());

    // The remote records each push and, once armed, SIGKILLs serve as soon as the branch's update is in.
    kill_on_push(&remote, &first, &branch);

    remote.commit_to_main("shared.txt", &shared(&[(2, "line 2 by a teammate")]));
    post(
        &first.base,
        "push",
        "main-1",
        &push(REPO, "refs/heads/main"),
    )
    .await;
    killed(&mut first, "the checked refresh's push").await;
    let killed_at = remote.branch(id.branch().as_str()).unwrap();
    assert_ne!(killed_at, sha, "the push landed before the kill");
    assert!(
        refreshes(store, id).await.is_empty(),
        "cut off before its record"
    );
    assert!(
        section(&run_log(store, id, 2).await, "check").contains("CHECK-RAN"),
        "checked before its push"
    );

    let second = serve.start().await;
    within(Duration::from_secs(90), "the refresh recorded", || async {
        refreshes(store, id).await.len() == 1
            && board::row_in(store, id)
                .await
                .is_some_and(|r| r.column == Column::InReview)
    })
    .await;
    let recorded = refreshes(store, id).await;
    assert_eq!(recorded[0]["from"], json!(sha));
    assert_eq!(
        recorded[0]["to"],
        json!(killed_at),
        "its own push, recorded"
    );
    assert_eq!(
        pushes(&remote, &branch),
        [format!("{branch} {sha}"), format!("{branch} {killed_at}")],
        "pushed once"
    );
    // The run cut off went round again, and that run neither checked nor pushed again.
    let again = run_log(store, id, 3).await;
    assert!(!again.contains("CHECK-RAN"), "{again}");
    let row = board::row_in(store, id).await.unwrap();
    assert!(!row.needs_human, "{row:?}");
    drop(second);
}

/// The real binary, SIGKILLed while its refresh check runs (before anything is pushed): the restarted serve finds
/// the run lost and checks the refresh again, not a person's matter; the refresh is pushed once and recorded once.
async fn sigkill_while_the_refresh_is_checked_checks_it_again_and_pushes_once(db: TestDb) {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    record_pushes(&remote);
    let scratch = tempfile::tempdir().unwrap();
    let check = agent(scratch.path(), "check.sh", WAITS_ON_THE_REFRESH);
    let mut table = file(&remote, scratch.path(), AGENT);
    table["repos"][REPO]
        .as_table_mut()
        .unwrap()
        .insert("check".into(), vec![check.display().to_string()].into());
    let ws = scratch.path().join("ws");
    let serve = Serve::new(&db, &fake.url, scratch.path(), &table);
    let store = &EventStore::connect(&db.url, 4).await.unwrap();
    let mut first = serve.start().await;
    let id = create_task(&first.base, REPO).await;
    let (_, sha) = in_review(store, id, 1).await;
    let branch = format!("refs/heads/{}", id.branch());

    remote.commit_to_main("shared.txt", &shared(&[(2, "line 2 by a teammate")]));
    post(
        &first.base,
        "push",
        "main-1",
        &push(REPO, "refs/heads/main"),
    )
    .await;
    let mut waiting = None;
    within(Duration::from_secs(90), "the check waiting", || {
        waiting = waiting_worktree(&ws, id, None);
        let found = waiting.is_some();
        async move { found }
    })
    .await;
    let killed = waiting.unwrap();
    kill(&mut first);
    // Whatever of the first check outlived its serve finishes; nothing it does is pushed.
    std::fs::write(killed.join(".go"), "").unwrap();
    assert_eq!(pushes(&remote, &branch), [format!("{branch} {sha}")]);

    let second = serve.start().await;
    let mut again = None;
    within(Duration::from_secs(90), "the check waiting again", || {
        again = waiting_worktree(&ws, id, Some(&killed));
        let found = again.is_some();
        async move { found }
    })
    .await;
    std::fs::write(again.unwrap().join(".go"), "").unwrap();
    within(Duration::from_secs(90), "the refresh recorded", || async {
        refreshes(store, id).await.len() == 1
            && board::row_in(store, id)
                .await
                .is_some_and(|r| r.column == Column::InReview)
    })
    .await;
    let to = remote.branch(id.branch().as_str()).unwrap();
    let recorded = refreshes(store, id).await;
    assert_eq!(recorded[0]["from"], json!(sha));
    assert_eq!(recorded[0]["to"], json!(to));
    assert_eq!(
        pushes(&remote, &branch),
        [format!("{branch} {sha}"), format!("{branch} {to}")],
        "pushed once, after the check that ran to its end"
    );
    assert!(section(&run_log(store, id, 3).await, "check").contains("CHECK-WAITED"));
    let row = board::row_in(store, id).await.unwrap();
    assert!(!row.needs_human, "{row:?}");
    drop(second);
}
