//! A refresh's conflict goes to an agent (issue 33 point 3), through the real app, real git and the fake GitHub:
//! two tasks edit the same lines; once the first lands, the second's refresh conflicts and it gets a conflict
//! attempt whose prompt names the file and the hunk; the agent's resolution is committed as the merge and pushed
//! once, leased on the commit pidevops recorded. A person's push to a branch while its conflict attempt runs is
//! never overwritten: the lease refuses and the task says so. (An agent that leaves the markers: refresh.rs.)
//! Per backend.

use std::path::{Path, PathBuf};
use std::process::Command as Git;
use std::time::Duration;

use pidevops::eventlog::EventStore;
use pidevops::tasks::{Column, TaskId};

use crate::common::agents::{git, Remote, REPO};
use crate::common::{board, within, TestApp, TestDb};
use crate::land::{app, create_task, in_review, merged, post, settle};
use crate::providers::github::fake::FakeGithub;
use crate::refresh::{file, push, pushes, record_pushes, refresh, shared};

per_backend!(
    two_tasks_on_the_same_lines_the_seconds_conflict_goes_to_an_agent_and_a_persons_push_is_never_overwritten,
);

/// Work: line 25 made the task's own. A conflict attempt: the markers taken out, both sides kept; T-3's waits for
/// `.go` in its worktree first (the test pushes to its branch meanwhile).
const SCRIPT: &str = r#"task=$(grep -o 'pidevops/T-[0-9]*' "$1" | head -1 | cut -d/ -f2)
if grep -q 'Resolve the conflict' "$1"; then
  if [ "$task" = T-3 ]; then
    touch .waiting
    while [ ! -f .go ]; do sleep 0.05; done
    rm -f .waiting .go
  fi
  awk '!/^(<<<<<<< |=======$|>>>>>>> )/' shared.txt > shared.new && mv shared.new shared.txt
else
  sed -i "s|^line 25\$|line 25 by $task <script>alert(1)</script>|" shared.txt
fi"#;

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

/// The prompt of `id`'s conflict attempt, as the dispatcher wrote it beside the run.
fn conflict_prompt(ws: &Path, id: TaskId) -> String {
    let runs = ws.join("runs").join(id.to_string());
    std::fs::read_dir(&runs)
        .unwrap()
        .filter_map(|run| std::fs::read_to_string(run.unwrap().path().join("prompt.md")).ok())
        .find(|prompt| prompt.contains("Resolve the conflict"))
        .unwrap_or_else(|| panic!("no conflict prompt under {}", runs.display()))
}

/// The worktree of `id`'s run whose agent left `.waiting` in it, if one has.
fn waiting_worktree(ws: &Path, id: TaskId) -> Option<PathBuf> {
    std::fs::read_dir(ws.join("runs").join(id.to_string()))
        .ok()?
        .filter_map(Result::ok)
        .map(|run| run.path().join("worktree"))
        .find(|worktree| worktree.join(".waiting").exists())
}

/// The parents of `commit` in the remote.
fn parents(remote: &Remote, commit: &str) -> Vec<String> {
    let out = Git::new("git")
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

/// Task `id`'s page, and its Refreshes section onwards.
async fn refreshes_section(app: &TestApp, id: TaskId, cookie: &str) -> (String, String) {
    let (status, page) = crate::web::get(app, &format!("/tasks/{id}"), cookie).await;
    assert_eq!(status, 200, "{page}");
    let at = page
        .find("<h2>Refreshes</h2>")
        .expect("a Refreshes section");
    (page.clone(), page[at..].to_owned())
}

async fn two_tasks_on_the_same_lines_the_seconds_conflict_goes_to_an_agent_and_a_persons_push_is_never_overwritten(
    db: TestDb,
) {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    record_pushes(&remote);
    let scratch = tempfile::tempdir().unwrap();
    let ws = scratch.path().join("ws");
    let app = app(
        &db,
        &fake,
        file(&remote, scratch.path(), SCRIPT),
        scratch.path(),
    )
    .await;
    let (base, store) = (app.url(""), app.state.log.store().clone());
    let first = create_task(&base, REPO).await;
    let (first_pr, first_sha) = in_review(&store, first, 1).await;
    let second = create_task(&base, REPO).await;
    let (_, second_sha) = in_review(&store, second, 1).await;
    let third = create_task(&base, REPO).await;
    let (_, third_sha) = in_review(&store, third, 1).await;
    assert_eq!(
        [first, second, third].map(|id| id.to_string()),
        ["T-1", "T-2", "T-3"],
        "the agent script tells them apart by id"
    );

    // The first lands (its commit is the base now, its pull request merged): the others' line 25 conflicts.
    git(
        remote.dir.path(),
        &[
            "--git-dir=remote.git",
            "update-ref",
            "refs/heads/main",
            &first_sha,
        ],
    );
    post(&base, "pull_request", "merged-1", &merged(first, first_pr)).await;
    settle(&app).await;
    assert_eq!(
        board::row_in(&store, first).await.unwrap().column,
        Column::Done
    );
    post(&base, "push", "main-1", &push(REPO, "refs/heads/main")).await;
    refresh(&app).await;
    for id in [second, third] {
        assert_eq!(count(&store, id, "task.conflict_found").await, 1, "{id}");
    }

    // The second's conflict attempt: its prompt names the file, the hunk, the base's commit and the task.
    let (_, resolved) = in_review(&store, second, 2).await;
    let prompt = conflict_prompt(&ws, second);
    for said in [
        "Task: Fix the login redirect",
        "Files in conflict: shared.txt",
        "<<<<<<<",
        "line 25 by T-2",
        "line 25 by T-1",
        "T-1: attempt 1 (pidevops)",
    ] {
        assert!(prompt.contains(said), "{said:?} not in:\n{prompt}");
    }
    // Its resolution: the merge of what pidevops pushed and the base, both sides kept, pushed once.
    assert_eq!(
        parents(&remote, &resolved),
        [second_sha.clone(), first_sha.clone()]
    );
    let both = shared(&[(
        25,
        "line 25 by T-2 <script>alert(1)</script>\nline 25 by T-1 <script>alert(1)</script>",
    )]);
    assert_eq!(
        remote
            .show(second.branch().as_str(), "shared.txt")
            .as_deref(),
        Some(both.as_str())
    );
    let branch = format!("refs/heads/{}", second.branch());
    assert_eq!(
        pushes(&remote, &branch),
        [
            format!("{branch} {second_sha}"),
            format!("{branch} {resolved}")
        ]
    );
    let row = board::row_in(&store, second).await.unwrap();
    assert!(!row.needs_human, "{row:?}");
    assert_eq!(row.column, Column::InReview);
    // Its page shows the refresh: in conflict in shared.txt, resolved by attempt 2, the conflict's hunks and what
    // the resolution changed against the plain merge (the markers gone) inline, a stranger's `<script>` as text.
    let cookie = crate::web::sign_in(&app).await;
    let (page, section) = refreshes_section(&app, second, &cookie).await;
    for shown in [
        "<tr data-outcome=\"resolved\">",
        "<td class=\"outcome\">resolved by attempt 2</td>",
        "Files in conflict: <code>shared.txt</code>",
        "line 25 by T-1 &lt;script&gt;alert(1)&lt;/script&gt;",
        "What it changed on the pull request",
        "<del>-&lt;&lt;&lt;&lt;&lt;&lt;&lt; ",
    ] {
        assert!(section.contains(shown), "{shown} in {section}");
    }
    assert!(!page.contains("<script>alert"), "{page}");

    // The third's conflict attempt runs; a person pushes to its branch meanwhile: the lease refuses, theirs stays.
    let mut worktree = None;
    within(
        Duration::from_secs(90),
        "T-3's conflict attempt waiting",
        || {
            worktree = waiting_worktree(&ws, third);
            let found = worktree.is_some();
            async move { found }
        },
    )
    .await;
    let clone = remote.dir.path().join("person");
    git(
        remote.dir.path(),
        &["clone", "--quiet", "remote.git", clone.to_str().unwrap()],
    );
    git(&clone, &["checkout", "--quiet", third.branch().as_str()]);
    std::fs::write(clone.join("theirs.txt"), "a person's change\n").unwrap();
    git(&clone, &["add", "."]);
    git(&clone, &["commit", "--quiet", "-m", "a person's change"]);
    git(
        &clone,
        &["push", "--quiet", "origin", third.branch().as_str()],
    );
    let theirs = remote.branch(third.branch().as_str()).unwrap();
    std::fs::write(worktree.unwrap().join(".go"), "").unwrap();
    within(Duration::from_secs(90), "T-3 flagged", || async {
        board::row_in(&store, third)
            .await
            .is_some_and(|r| r.needs_human)
    })
    .await;
    let row = board::row_in(&store, third).await.unwrap();
    let flag = row.needs_human_reason.clone().unwrap();
    assert!(
        flag.contains("someone else pushed") && flag.contains("not overwritten"),
        "{flag}"
    );
    assert!(flag.contains("shared.txt"), "{flag}");
    // Its page: the conflict, unresolved, a person flagged, with why.
    let (_, section) = refreshes_section(&app, third, &cookie).await;
    for shown in [
        "<tr data-outcome=\"unresolved\">",
        "unresolved, a person flagged",
        "someone else pushed",
    ] {
        assert!(section.contains(shown), "{shown} in {section}");
    }
    assert_eq!(row.column, Column::InReview);
    assert_eq!(remote.branch(third.branch().as_str()), Some(theirs.clone()));
    let branch = format!("refs/heads/{}", third.branch());
    assert_eq!(
        pushes(&remote, &branch),
        [
            format!("{branch} {third_sha}"),
            format!("{branch} {theirs}")
        ],
        "the person's push only"
    );

    // Told again: the second is current, the third waits for its person; no second conflict attempt anywhere.
    post(&base, "push", "main-1", &push(REPO, "refs/heads/main")).await;
    post(&base, "push", "main-2", &push(REPO, "refs/heads/main")).await;
    refresh(&app).await;
    for id in [second, third] {
        assert_eq!(count(&store, id, "task.conflict_found").await, 1, "{id}");
    }
    assert_eq!(
        pushes(&remote, &format!("refs/heads/{}", second.branch())).len(),
        2
    );
}
