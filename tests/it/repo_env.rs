//! A repository's own environment around its agent (`[repos."o/n"]` setup, before_run, after_run, check,
//! secrets), end to end: real git, real contained processes, the real dispatcher and event log.

use std::path::Path;
use std::time::Duration;

use crate::common::agents::{agent, dispatch_file, Remote, REPO};
use crate::common::board;
use crate::common::{within, TestApp, TestDb};
use crate::dispatch::{create_task, ended_runs, in_review};
use pidevops::tasks::Command;

per_backend!(
    a_failing_setup_is_not_an_agent_attempt,
    a_failing_check_sends_the_work_back_with_its_output_and_nothing_is_pushed,
    a_hooks_secret_never_reaches_the_agent_or_the_check,
);

/// `pidevops.toml` for dispatch to `remote` with the agent at `script`, the repository's table extended by
/// `repo_keys` (TOML).
fn file_with(remote: &Remote, script: &Path, repo_keys: &str) -> toml::Table {
    let mut file = dispatch_file(remote, script, "");
    let extra: toml::Table = repo_keys.parse().unwrap();
    let repo = file["repos"][REPO].as_table_mut().unwrap();
    repo.extend(extra);
    file
}

async fn spawn_with(db: &TestDb, file: toml::Table, dir: &Path, env: &[(&str, &str)]) -> TestApp {
    let mut settings = crate::common::settings(db);
    settings.file = pidevops::config::FileConfig::try_from(file).unwrap();
    settings.workspace_root = dir.join("ws");
    let path = std::env::var("PATH").unwrap();
    let mut pairs = vec![("PATH", path.as_str())];
    pairs.extend_from_slice(env);
    settings.env = pidevops::config::Env::from_pairs(pairs);
    TestApp::spawn(settings).await
}

fn log_of(run: &pidevops::projectors::runs::RunRow) -> String {
    std::fs::read_to_string(run.log_path.as_deref().unwrap()).unwrap_or_default()
}

/// A setup that fails (a registry down, a broken lock file) is not the agent's failure: the agent never runs and
/// the attempt is given back, so a budget of one is never spent; a setup failing again and again is stopped by
/// the bounce rule and asks a human, rather than looping.
async fn a_failing_setup_is_not_an_agent_attempt(db: TestDb) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let script = agent(dir, "agent.sh", "echo THE-AGENT-RAN; echo x > CHANGES.md");
    let setup = agent(
        dir,
        "setup.sh",
        "echo 'npm ERR! 503 Service Unavailable' >&2; exit 7",
    );
    let mut file = file_with(
        &remote,
        &script,
        &format!("setup = [\"{}\"]", setup.display()),
    );
    file["board"]
        .as_table_mut()
        .unwrap()
        .insert("max_attempts".into(), 1.into());
    let app = spawn_with(&db, file, dir, &[]).await;
    let id = create_task(&app, "Needs its dependencies").await;
    within(Duration::from_secs(60), "the task flagged", || async {
        board::row_now(&app, id)
            .await
            .is_some_and(|row| row.needs_human)
    })
    .await;
    let runs = ended_runs(&app, id).await;
    assert_eq!(runs.len(), 3, "three setups, then a human: {runs:?}");
    for run in &runs {
        assert_eq!(run.failure.as_deref(), Some("setup"), "{run:?}");
        let detail = run.detail.as_deref().unwrap();
        assert!(
            detail.contains("setup") && detail.contains("exited with status 7"),
            "{detail}"
        );
        assert!(run
            .tail
            .as_deref()
            .unwrap()
            .contains("503 Service Unavailable"));
        let log = log_of(run);
        assert!(log.contains("npm ERR! 503"), "{log}");
        assert!(
            !log.contains("THE-AGENT-RAN"),
            "the agent ran after a failed setup: {log}"
        );
    }
    let row = board::row_now(&app, id).await.unwrap();
    // Three attempts started, none of them charged: the budget of one grew with each.
    assert_eq!((row.attempts, row.max_attempts), (3, 4), "{row:?}");
    let reason = row.needs_human_reason.unwrap();
    assert!(
        reason.starts_with("bouncing between todo and in-progress: 3 attempts"),
        "{reason}"
    );
    assert!(!reason.contains("of 1 failed"), "{reason}");
    assert!(remote.branch(&format!("pidevops/{id}")).is_none());
    app.stop().await;
}

/// The check is the agent's claim put to the test: while it fails nothing is committed or pushed, the task goes
/// back with the check's output in the next prompt, and the next attempt that passes it is pushed.
async fn a_failing_check_sends_the_work_back_with_its_output_and_nothing_is_pushed(db: TestDb) {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    // It gets it right only once it has read the check's complaint in its prompt.
    let script = agent(
        dir,
        "agent.sh",
        r#"if grep -q 'CHECK-SAYS: CHANGES.md is not fixed' "$1"; then
  echo fixed > CHANGES.md; cp "$1" prompt-seen.txt
else
  echo broken > CHANGES.md
fi"#,
    );
    let check = agent(
        dir,
        "check.sh",
        r#"grep -q fixed CHANGES.md && exit 0
echo "running 3 tests"; echo "CHECK-SAYS: CHANGES.md is not fixed (it says $(cat CHANGES.md))"; exit 101"#,
    );
    let mut file = file_with(
        &remote,
        &script,
        &format!("check = [\"{}\"]", check.display()),
    );
    file["board"]
        .as_table_mut()
        .unwrap()
        .insert("max_attempts".into(), 1.into());
    let app = spawn_with(&db, file, dir, &[]).await;
    let id = create_task(&app, "Fix the changes file").await;
    within(Duration::from_secs(60), "the task flagged", || async {
        board::row_now(&app, id)
            .await
            .is_some_and(|row| row.needs_human)
    })
    .await;
    let branch = format!("pidevops/{id}");
    assert!(
        remote.branch(&branch).is_none(),
        "work that failed its check was pushed"
    );
    let runs = ended_runs(&app, id).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].failure.as_deref(), Some("check"), "{:?}", runs[0]);
    assert!(
        runs[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("exited with status 101"),
        "{:?}",
        runs[0]
    );
    assert!(runs[0].commit_sha.is_none());
    let row = board::row_now(&app, id).await.unwrap();
    assert_eq!(
        (row.attempts, row.max_attempts),
        (1, 1),
        "a check failure is an attempt"
    );
    let reason = row.state["last_failure"]["reason"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        reason.contains("CHECK-SAYS: CHANGES.md is not fixed (it says broken)"),
        "{reason}"
    );

    // A person lets it go again: the next prompt carries the check's output, and the passing work is pushed.
    app.state
        .board
        .execute(id, &Command::ClearNeedsHuman, "api")
        .await
        .unwrap();
    in_review(&app, id).await;
    assert_eq!(
        remote.show(&branch, "CHANGES.md").as_deref(),
        Some("fixed\n")
    );
    let seen = remote.show(&branch, "prompt-seen.txt").unwrap();
    assert!(seen.contains("Attempt 1 did not succeed"), "{seen}");
    assert!(seen.contains("run check (attempt 1)"), "{seen}");
    let runs = ended_runs(&app, id).await;
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1].state, "succeeded");
    let log = log_of(&runs[1]);
    assert!(
        log.contains("=== pidevops: the repository's check: "),
        "{log}"
    );
    app.stop().await;
}

const NPM_TOKEN: &str = "npm_SECRETvalueNEVERforTHEagent42";
const GITHUB_TOKEN: &str = "ghp_SERVICEtokenNEVERforHOOKS0123";

/// The hooks get the repository's secret and use it; a hostile agent that dumps its environment and searches its
/// worktree, HOME, TMPDIR and the hooks' directories finds nothing; what a hook leaves running ends with it; the
/// check (agent code) gets no secret; the hooks never see pidevops's own; the run's log and events hold the
/// secret only masked. Under bubblewrap here, and under Landlock and the reaper below.
async fn a_hooks_secret_never_reaches_the_agent_or_the_check(db: TestDb) {
    hooks_secret_stays_with_the_hooks(db, "bwrap", "namespaces").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hooks_secret_never_reaches_the_agent_under_landlock_either() {
    hooks_secret_stays_with_the_hooks(TestDb::sqlite(), "/nonexistent/bwrap", "landlock").await;
}

async fn hooks_secret_stays_with_the_hooks(db: TestDb, bwrap: &str, containment: &str) {
    let remote = Remote::new();
    let scratch = crate::common::contained_scratch();
    let dir = scratch.path();
    // Each hook proves it has the token, prints it (to be masked) and its environment, and leaves it in its
    // HOME as npm would (.npmrc).
    let hook = |name: &str| {
        agent(
            dir,
            &format!("{name}.sh"),
            &format!(
                r#"test "$NPM_TOKEN" = "{NPM_TOKEN}" && echo "{name} has the token: $NPM_TOKEN"
echo "//npm.example.test/:_authToken=$NPM_TOKEN" > "$HOME/.npmrc"
echo "{name}-HOME=$HOME"
env | sort
echo ok > {name}-ran.txt
# A process it leaves behind, in a session of its own, that would write the token into the worktree while the
# agent runs: it must end with the hook.
setsid sh -c 'sleep 1; echo "LATE $NPM_TOKEN" > {name}-late-leak.txt' </dev/null >/dev/null 2>&1 &"#
            ),
        )
    };
    let (setup, before, after) = (hook("setup"), hook("before_run"), hook("after_run"));
    let script = agent(
        dir,
        "snoop.sh",
        &format!(
            r#"sleep 2
env > env-dump.txt
{{
  grep -r "{NPM_TOKEN}" . "$HOME" "$TMPDIR" 2>&1
  grep -r "{NPM_TOKEN}" "$HOME/../hook-home" "$HOME/../hook-tmp" 2>&1
  cat "$HOME/../hook-home/.npmrc" 2>&1
  cat /proc/*/environ 2>/dev/null | tr '\0' '\n' | grep NPM_TOKEN
  ls setup-ran.txt before_run-ran.txt
}} > agent-saw.txt
echo change >> CHANGES.md"#
        ),
    );
    let check = agent(dir, "check.sh", "env > check-env.txt; exit 0");
    let mut file = file_with(
        &remote,
        &script,
        &format!(
            "setup = [\"{}\"]\nbefore_run = [\"{}\"]\nafter_run = [\"{}\"]\ncheck = [\"{}\"]\nsecrets = [\"NPM_TOKEN\"]",
            setup.display(),
            before.display(),
            after.display(),
            check.display()
        ),
    );
    file["dispatch"]
        .as_table_mut()
        .unwrap()
        .insert("bwrap".into(), bwrap.into());
    let db_url = db.url_string();
    let app = spawn_with(
        &db,
        file,
        dir,
        &[
            ("NPM_TOKEN", NPM_TOKEN),
            ("GITHUB_TOKEN", GITHUB_TOKEN),
            ("DATABASE_URL", db_url.as_str()),
        ],
    )
    .await;
    let (_, health) = app.health().await;
    assert!(
        health
            .to_string()
            .contains(&format!("\"containment\":\"{containment}\"")),
        "{health}"
    );
    let id = create_task(&app, "Snoop for the registry token").await;
    in_review(&app, id).await;
    let branch = format!("pidevops/{id}");

    let dump = remote.show(&branch, "env-dump.txt").unwrap();
    assert!(
        !dump.contains(NPM_TOKEN),
        "the agent's env holds the secret: {dump}"
    );
    assert!(!dump.contains("NPM_TOKEN"), "{dump}");
    let saw = remote.show(&branch, "agent-saw.txt").unwrap();
    assert!(
        !saw.contains(NPM_TOKEN),
        "the agent found the secret: {saw}"
    );
    assert!(
        saw.contains("setup-ran.txt") && saw.contains("before_run-ran.txt"),
        "the hooks ran before the agent: {saw}"
    );
    let check_env = remote.show(&branch, "check-env.txt").unwrap();
    assert!(
        !check_env.contains(NPM_TOKEN),
        "the check got the secret: {check_env}"
    );
    assert!(!check_env.contains("GITHUB_TOKEN"), "{check_env}");
    assert!(remote.show(&branch, "after_run-ran.txt").is_some());
    for name in ["setup", "before_run"] {
        assert!(
            remote
                .show(&branch, &format!("{name}-late-leak.txt"))
                .is_none(),
            "a process the {name} hook left outlived it"
        );
    }
    // Nothing pushed holds it (the whole tree of the branch).
    let listed = std::process::Command::new("git")
        .args(["grep", "-c", NPM_TOKEN, &branch])
        .current_dir(remote.dir.path().join("remote.git"))
        .output()
        .unwrap();
    assert!(
        listed.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&listed.stdout)
    );

    let run = ended_runs(&app, id).await.remove(0);
    let log = log_of(&run);
    for name in ["setup", "before_run", "after_run"] {
        assert!(
            log.contains(&format!("{name} has the token: [NPM_TOKEN]")),
            "{name}: {log}"
        );
    }
    assert!(log.contains("NPM_TOKEN=[NPM_TOKEN]"), "{log}");
    assert!(!log.contains(NPM_TOKEN), "the log holds the secret: {log}");
    // pidevops's own environment reaches no hook.
    assert!(
        !log.contains("GITHUB_TOKEN") && !log.contains("DATABASE_URL"),
        "{log}"
    );
    assert!(!log.contains(GITHUB_TOKEN));
    for event in app.all_events().await {
        let body = String::from_utf8_lossy(&event.body);
        assert!(
            !body.contains(NPM_TOKEN),
            "{} carries the secret",
            event.event_type
        );
    }
    // The hooks' HOME is not the agent's.
    let hook_home = Path::new(run.log_path.as_deref().unwrap())
        .parent()
        .unwrap()
        .join("hook-home");
    assert!(
        log.contains(&format!("setup-HOME={}", hook_home.display())),
        "{log}"
    );
    assert!(!dump.contains(&hook_home.display().to_string()), "{dump}");
    // Nor does what the hooks cached (the .npmrc) outlive the attempt.
    assert!(
        !hook_home.exists(),
        "{} is left on disk",
        hook_home.display()
    );
    app.stop().await;
}

/// A secret the file names but the environment lacks fails the run closed, as `setup`, naming the variable:
/// no hook runs without it, and the agent does not run either.
/// The check runs the agent's work, but never with what the agent left in its HOME or TMPDIR (a `.gitconfig` whose
/// aliases or hooks would run, an `.npmrc` pointing at another registry): it gets its own, under bubblewrap and
/// under Landlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_check_never_runs_with_what_the_agent_left_in_its_home() {
    check_has_a_home_of_its_own("bwrap", "namespaces").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_check_never_runs_with_what_the_agent_left_in_its_home_under_landlock() {
    check_has_a_home_of_its_own("/nonexistent/bwrap", "landlock").await;
}

async fn check_has_a_home_of_its_own(bwrap: &str, containment: &str) {
    let db = TestDb::sqlite();
    let remote = Remote::new();
    let scratch = crate::common::contained_scratch();
    let dir = scratch.path();
    let script = agent(
        dir,
        "plants.sh",
        r#"echo planted > "$HOME/.planted"; echo planted > "$TMPDIR/planted"
printf '[core]\n\tpager = touch /tmp/PAGER-RAN\n' > "$HOME/.gitconfig"
echo change >> CHANGES.md"#,
    );
    // Fails (the work goes back, nothing is pushed) if anything the agent planted is where the check looks.
    let check = agent(
        dir,
        "check.sh",
        r#"for f in "$HOME/.planted" "$HOME/.gitconfig" "$TMPDIR/planted"; do
  if [ -e "$f" ]; then echo "the agent's $f is here"; exit 1; fi
done
echo "check-HOME=$HOME"; exit 0"#,
    );
    let mut file = file_with(
        &remote,
        &script,
        &format!("check = [\"{}\"]", check.display()),
    );
    file["dispatch"]
        .as_table_mut()
        .unwrap()
        .insert("bwrap".into(), bwrap.into());
    let app = spawn_with(&db, file, dir, &[]).await;
    let (_, health) = app.health().await;
    assert_eq!(
        health["loops"]["dispatcher"]["detail"]["containment"], containment,
        "{health}"
    );
    let id = create_task(&app, "Plant configuration for the check").await;
    in_review(&app, id).await;
    let runs = board::runs_now(&app, id).await;
    assert_eq!(
        runs.len(),
        1,
        "the check failed on the agent's HOME: {runs:?}"
    );
    let log = log_of(&runs[0]);
    assert!(log.contains("check-HOME="), "{log}");
    assert!(!log.contains("is here"), "{log}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_secret_fails_the_run_as_setup_and_names_it() {
    let db = TestDb::sqlite();
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let script = agent(dir, "agent.sh", "echo THE-AGENT-RAN; echo x > CHANGES.md");
    let setup = agent(dir, "setup.sh", "echo SETUP-RAN");
    let file = file_with(
        &remote,
        &script,
        &format!(
            "setup = [\"{}\"]\nsecrets = [\"NPM_TOKEN\", \"REGISTRY_PASSWORD\"]",
            setup.display()
        ),
    );
    // One of the two is set; the other is empty, which counts as missing.
    let app = spawn_with(
        &db,
        file,
        dir,
        &[("NPM_TOKEN", "present"), ("REGISTRY_PASSWORD", "")],
    )
    .await;
    let id = create_task(&app, "Install with a private registry").await;
    within(Duration::from_secs(30), "a failed run", || async {
        app.project().await;
        board::runs_now(&app, id)
            .await
            .iter()
            .any(|r| r.state == "failed")
    })
    .await;
    let run = board::runs_now(&app, id)
        .await
        .into_iter()
        .find(|r| r.state == "failed")
        .unwrap();
    assert_eq!(run.failure.as_deref(), Some("setup"));
    let detail = run.detail.as_deref().unwrap();
    assert!(
        detail.contains("secret REGISTRY_PASSWORD is not set"),
        "{detail}"
    );
    assert!(!detail.contains("present"), "{detail}");
    let log = log_of(&run);
    assert!(
        !log.contains("SETUP-RAN") && !log.contains("THE-AGENT-RAN"),
        "{log}"
    );
    app.stop().await;
}

/// A setup that hangs is killed at `hook_timeout_s` and recorded as `setup`, and the agent never starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_setup_that_runs_too_long_is_killed_and_recorded_as_setup() {
    let db = TestDb::sqlite();
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let script = agent(dir, "agent.sh", "echo THE-AGENT-RAN; echo x > CHANGES.md");
    let setup = agent(
        dir,
        "setup.sh",
        "echo installing; sleep 60; echo NEVER-FINISHED",
    );
    let file = file_with(
        &remote,
        &script,
        &format!("setup = [\"{}\"]\nhook_timeout_s = 1", setup.display()),
    );
    let app = spawn_with(&db, file, dir, &[]).await;
    let id = create_task(&app, "Install forever").await;
    within(Duration::from_secs(30), "a failed run", || async {
        app.project().await;
        board::runs_now(&app, id)
            .await
            .iter()
            .any(|r| r.state == "failed")
    })
    .await;
    let run = board::runs_now(&app, id)
        .await
        .into_iter()
        .find(|r| r.state == "failed")
        .unwrap();
    assert_eq!(run.failure.as_deref(), Some("setup"), "{run:?}");
    let detail = run.detail.as_deref().unwrap();
    assert!(
        detail.contains("ran longer than 1 s and was killed"),
        "{detail}"
    );
    // Killed, not waited for: the run ended well before the sleep would have.
    assert!(run.duration_s.unwrap() < 30.0, "{run:?}");
    let log = log_of(&run);
    assert!(log.contains("installing"), "{log}");
    assert!(
        !log.contains("NEVER-FINISHED") && !log.contains("THE-AGENT-RAN"),
        "{log}"
    );
    within(
        Duration::from_secs(30),
        "the attempt given back",
        || async {
            board::row_now(&app, id)
                .await
                .is_some_and(|row| row.max_attempts > 3)
        },
    )
    .await;
    app.stop().await;
}

/// Setup runs once per attempt, before the agent, in the worktree it prepares. A finished worktree reused for the
/// next task keeps its tracked files (the same inodes) but not what setup made, so setup runs again there and
/// finds nothing of the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn setup_runs_once_per_fresh_worktree_and_a_reused_one_keeps_nothing_of_it() {
    let db = TestDb::sqlite();
    let remote = Remote::new();
    remote.commit_to_main(".gitignore", "node_modules/\n");
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let script = agent(
        dir,
        "agent.sh",
        r#"test -e node_modules/.stamp && echo "the agent sees the setup's output"
head -n 1 "$1" > CHANGES.md"#,
    );
    let setup = agent(
        dir,
        "setup.sh",
        r#"echo "SETUP-RUN readme-inode=$(stat -c %i README.md)"
test -e node_modules/.stamp && echo "STALE: an earlier setup's output is here"
mkdir -p node_modules && echo installed > node_modules/.stamp"#,
    );
    let mut file = file_with(
        &remote,
        &script,
        &format!("setup = [\"{}\"]", setup.display()),
    );
    // One at a time, so the second task can only start in the first one's worktree.
    let dispatch = file["dispatch"].as_table_mut().unwrap();
    dispatch.insert("max_concurrent".into(), 1.into());
    dispatch.insert("per_repo".into(), 1.into());
    let app = spawn_with(&db, file, dir, &[]).await;
    let first = create_task(&app, "First").await;
    in_review(&app, first).await;
    let second = create_task(&app, "Second").await;
    in_review(&app, second).await;
    let mut inodes = Vec::new();
    for id in [first, second] {
        let run = ended_runs(&app, id).await.remove(0);
        let log = log_of(&run);
        assert_eq!(log.matches("SETUP-RUN").count(), 1, "once: {log}");
        assert_eq!(
            log.matches("=== pidevops: the repository's setup:").count(),
            1,
            "{log}"
        );
        assert!(!log.contains("STALE"), "{log}");
        assert!(log.contains("the agent sees the setup's output"), "{log}");
        let inode = log
            .split("readme-inode=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap()
            .to_owned();
        inodes.push(inode);
        // Ignored files are not committed: setup's output stays out of the branch.
        assert!(remote
            .show(&format!("pidevops/{id}"), "node_modules/.stamp")
            .is_none());
    }
    assert_eq!(
        inodes[0], inodes[1],
        "the second task ran in the first one's worktree, reused"
    );
    app.stop().await;
}

/// A repository command that names a program this host lacks would fail every attempt: the dispatcher is unarmed
/// instead, naming the repository, the step and the program.
#[tokio::test]
async fn a_repository_command_that_cannot_start_leaves_the_dispatcher_unarmed() {
    let remote = Remote::new();
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let script = agent(dir, "agent.sh", "echo x > CHANGES.md");
    let file = file_with(
        &remote,
        &script,
        "check = [\"no-such-test-runner\", \"test\"]",
    );
    let app = spawn_with(&TestDb::sqlite(), file, dir, &[]).await;
    let (status, health) = app.health().await;
    assert_eq!(status, 503, "{health}");
    assert_eq!(health["loops"]["dispatcher"]["state"], "unarmed");
    let reason = health["loops"]["dispatcher"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("acme/app's check runs \"no-such-test-runner\""),
        "{reason}"
    );
    app.stop().await;
}
