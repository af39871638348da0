//! A refresh's conflict goes to an agent (issue 33 point 3), through the real app, real git and the fake GitHub:
//! two tasks edit the same lines; once the first lands, the second's refresh conflicts and it gets a conflict
//! attempt whose prompt names the file and the hunk; the agent's resolution is committed as the merge and pushed
//! once, leased on the commit pidevops recorded. A person's push to a branch while its conflict attempt runs is
//! never overwritten: the lease refuses and the task says so. And the real binary, SIGKILLed the moment the
//! resolution lands on the branch, before the attempt's outcome is recorded: after the restart the resolution is
//! recorded once, never pushed or handed to an agent again, and no person is asked. (An agent that leaves the
//! markers: refresh.rs.) Per backend.

use std::path::{Path, PathBuf};
use std::process::Command as Git;
use std::time::Duration;

use pidevops::eventlog::EventStore;
use pidevops::projectors::runs::{self, Which};
use pidevops::tasks::{Column, TaskId};

use crate::common::agents::{git, Remote, REPO};
use crate::common::killed::{kill_before_push, kill_on_push, killed, Serve};
use crate::common::server::Server;
use crate::common::{board, within, TestApp, TestDb};
use crate::land::{app, create_task, in_review, merged, post, settle};
use crate::providers::github::fake::FakeGithub;
use crate::refresh::{file, push, pushes, record_pushes, refresh, shared};

per_backend!(
    two_tasks_on_the_same_lines_the_seconds_conflict_goes_to_an_agent_and_a_persons_push_is_never_overwritten,
    sigkill_between_a_resolutions_push_and_its_record_pushes_once_and_records_it,
    sigkill_before_a_resolution_lands_gives_the_conflict_to_the_agent_again,
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

/// The prompts of `id`'s conflict attempts, as the dispatcher wrote them beside their runs.
fn conflict_prompts(ws: &Path, id: TaskId) -> Vec<String> {
    let runs = ws.join("runs").join(id.to_string());
    std::fs::read_dir(&runs)
        .unwrap()
        .filter_map(|run| std::fs::read_to_string(run.unwrap().path().join("prompt.md")).ok())
        .filter(|prompt| prompt.contains("Resolve the conflict"))
        .collect()
}

/// The prompt of `id`'s conflict attempt.
fn conflict_prompt(ws: &Path, id: TaskId) -> String {
    conflict_prompts(ws, id)
        .pop()
        .unwrap_or_else(|| panic!("no conflict prompt for {id} under {}", ws.display()))
}

/// The types of the events of `id`'s stream, in order.
async fn kinds(store: &EventStore, id: TaskId) -> Vec<String> {
    store
        .read_stream(&format!("task:{id}"))
        .await
        .unwrap()
        .iter()
        .map(|e| e.event_type.clone())
        .collect()
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

/// Two tasks on the same lines, in review through the real binary: T-1's pull request and commit, T-2's commit.
struct SameLines {
    one: TaskId,
    one_pr: u64,
    one_sha: String,
    two: TaskId,
    two_sha: String,
}

impl SameLines {
    async fn in_review(store: &EventStore, server: &Server) -> Self {
        let one = create_task(&server.base, REPO).await;
        let (one_pr, one_sha) = in_review(store, one, 1).await;
        let two = create_task(&server.base, REPO).await;
        let (_, two_sha) = in_review(store, two, 1).await;
        assert_eq!(
            [one, two].map(|id| id.to_string()),
            ["T-1", "T-2"],
            "the agent script tells them apart by id"
        );
        Self {
            one,
            one_pr,
            one_sha,
            two,
            two_sha,
        }
    }

    /// T-1 lands (its commit is the base, its pull request merged, the task done) and the base push is told:
    /// T-2's line 25 conflicts.
    async fn land_the_first(&self, remote: &Remote, store: &EventStore, server: &Server) {
        git(
            remote.dir.path(),
            &[
                "--git-dir=remote.git",
                "update-ref",
                "refs/heads/main",
                &self.one_sha,
            ],
        );
        let merged = merged(self.one, self.one_pr);
        post(&server.base, "pull_request", "merged-1", &merged).await;
        within(Duration::from_secs(60), "T-1 done", || async {
            board::row_in(store, self.one)
                .await
                .is_some_and(|r| r.column == Column::Done)
        })
        .await;
        post(
            &server.base,
            "push",
            "main-1",
            &push(REPO, "refs/heads/main"),
        )
        .await;
    }
}

/// Waits until T-2's conflict attempt, round again after the restart, settled (after the `before` events of its
/// stream): resolved, or a person asked; then neither a person nor an unresolved conflict is in its stream, and
/// the conflict was handed over once.
async fn settled_unasked(store: &EventStore, two: TaskId, before: usize) {
    let settled = |kinds: &[String]| {
        kinds.iter().any(|k| {
            [
                "task.submitted_for_review",
                "task.flagged_needs_human",
                "task.conflict_unresolved",
            ]
            .contains(&k.as_str())
        })
    };
    within(
        Duration::from_secs(90),
        "T-2's conflict settled",
        || async { settled(&kinds(store, two).await[before..]) },
    )
    .await;
    let after = kinds(store, two).await;
    for unwanted in ["task.flagged_needs_human", "task.conflict_unresolved"] {
        assert!(!after.contains(&unwanted.to_owned()), "{after:?}");
    }
    assert_eq!(count(store, two, "task.conflict_found").await, 1);
}

/// Waits until T-2 is in review on `commit`, the run that recorded it says so, nobody asked.
async fn in_review_on(store: &EventStore, two: TaskId, commit: &str) {
    let head = || async {
        runs::query(store, Which::Task(&two.to_string()))
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.state == "succeeded")
            .max_by_key(|r| r.attempt)
            .and_then(|r| r.commit_sha)
    };
    within(
        Duration::from_secs(30),
        "T-2 in review on the resolution",
        || async {
            head().await.as_deref() == Some(commit)
                && board::row_in(store, two)
                    .await
                    .is_some_and(|r| r.column == Column::InReview && !r.needs_human)
        },
    )
    .await;
}

/// The real binary, SIGKILLed by the remote the moment the second task's conflict attempt's resolution lands on its
/// branch (before the attempt's outcome is recorded): the restarted serve finds the run lost, and the conflict
/// attempt that goes round again finds the branch at the very resolution its predecessor said it would push and
/// records it: the agent is not given the conflict again, nothing is pushed twice, nobody is asked.
async fn sigkill_between_a_resolutions_push_and_its_record_pushes_once_and_records_it(db: TestDb) {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    record_pushes(&remote);
    let scratch = tempfile::tempdir().unwrap();
    let ws = scratch.path().join("ws");
    let table = file(&remote, scratch.path(), SCRIPT);
    let serve = Serve::new(&db, &fake.url, scratch.path(), &table);
    let store = &EventStore::connect(&db.url, 4).await.unwrap();
    let mut first = serve.start().await;
    let tasks = SameLines::in_review(store, &first).await;
    let (two, two_sha) = (tasks.two, tasks.two_sha.clone());

    // The remote SIGKILLs serve once T-2's branch moves.
    let branch = format!("refs/heads/{}", two.branch());
    kill_on_push(&remote, &first, &branch);
    tasks.land_the_first(&remote, store, &first).await;
    killed(&mut first, "the resolution's push").await;
    let resolved = remote.branch(two.branch().as_str()).unwrap();
    assert_ne!(resolved, two_sha, "the resolution landed before the kill");
    assert_eq!(
        parents(&remote, &resolved),
        [two_sha.clone(), tasks.one_sha.clone()]
    );
    let before = kinds(store, two).await;
    assert_eq!(
        before.last().map(String::as_str),
        Some("task.started"),
        "cut off before its outcome: {before:?}"
    );

    // The restarted serve records the resolution; no one is asked, nothing is handed over or pushed again.
    let second = serve.start().await;
    settled_unasked(store, two, before.len()).await;
    assert_eq!(
        conflict_prompts(&ws, two).len(),
        1,
        "the agent resolved it once"
    );
    assert_eq!(
        pushes(&remote, &branch),
        [
            format!("{branch} {two_sha}"),
            format!("{branch} {resolved}")
        ],
        "the resolution pushed once"
    );
    in_review_on(store, two, &resolved).await;
    drop(second);
}

/// The real binary, SIGKILLed as the conflict attempt's resolution is pushed, before it lands (the remote refuses
/// it): the restarted serve finds the run lost, not the conflict unresolved; the agent is given the conflict again
/// and its resolution is pushed once; nobody is asked.
async fn sigkill_before_a_resolution_lands_gives_the_conflict_to_the_agent_again(db: TestDb) {
    let fake = FakeGithub::start().await;
    let remote = Remote::new();
    remote.commit_to_main("shared.txt", &shared(&[]));
    record_pushes(&remote);
    let scratch = tempfile::tempdir().unwrap();
    let ws = scratch.path().join("ws");
    let table = file(&remote, scratch.path(), SCRIPT);
    let serve = Serve::new(&db, &fake.url, scratch.path(), &table);
    let store = &EventStore::connect(&db.url, 4).await.unwrap();
    let mut first = serve.start().await;
    let tasks = SameLines::in_review(store, &first).await;
    let (two, two_sha) = (tasks.two, tasks.two_sha.clone());

    // The remote SIGKILLs serve as T-2's branch is pushed, and refuses that push.
    let branch = format!("refs/heads/{}", two.branch());
    kill_before_push(&remote, &first, &branch);
    tasks.land_the_first(&remote, store, &first).await;
    killed(&mut first, "the resolution's push").await;
    assert_eq!(remote.branch(two.branch().as_str()), Some(two_sha.clone()));
    let before = kinds(store, two).await;
    assert_eq!(
        before.last().map(String::as_str),
        Some("task.started"),
        "cut off before its outcome: {before:?}"
    );

    let second = serve.start().await;
    settled_unasked(store, two, before.len()).await;
    assert_eq!(
        conflict_prompts(&ws, two).len(),
        2,
        "nothing landed: the agent was given the conflict again"
    );
    let resolved = remote.branch(two.branch().as_str()).unwrap();
    assert_eq!(
        parents(&remote, &resolved),
        [two_sha.clone(), tasks.one_sha.clone()]
    );
    assert_eq!(
        pushes(&remote, &branch),
        [
            format!("{branch} {two_sha}"),
            format!("{branch} {resolved}")
        ],
        "the resolution pushed once"
    );
    in_review_on(store, two, &resolved).await;
    drop(second);
}
