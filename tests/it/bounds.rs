//! What one agent may take of the machine, through the real dispatcher and real contained processes: an agent
//! that writes 1 GiB to `/tmp`, to its TMPDIR and to its HOME meets "no space left" at `tmp_size_mib` (HOME at
//! `home_size_mib`); an agent that prints 2 GiB is stopped at `output_max_mib` (`flooded`, flagged for a person)
//! and its log keeps a head, a marker naming the bytes cut, and a tail; a workspace volume below
//! `min_free_disk_mib` holds every claim back (the dispatcher warns, no attempt is spent) until space returns.
//! `serve` answers `/health` throughout.
//!
//! The sizes are an attacker's (1 GiB, 2 GiB); the bounds in the test's configuration are small (64 MiB of
//! `/tmp`, 96 MiB of HOME, 16 MiB of output), so the agent is stopped early and the tests stay cheap.

use std::time::Duration;

use crate::common::board;
use crate::common::{within, TestApp, TestDb};
use crate::disk_full::Tmpfs;
use crate::dispatch::{create_task, ended_runs};
use pidevops::tasks::Column;

/// Whether this host mounts a cgroup2 hierarchy at all (without one, no memory limit can be in force).
pub fn host_has_cgroup2() -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| {
            l.split_once(" - ")
                .is_some_and(|(_, fs)| fs.starts_with("cgroup2 "))
        })
}

/// `/health` answers 200, the dispatcher loop is armed and ticking, and it names what bounds agents' memory.
async fn serving(app: &TestApp) -> serde_json::Value {
    let (code, health) = app.health().await;
    assert_eq!(code, 200, "{health}");
    let dispatcher = &health["loops"]["dispatcher"];
    assert_eq!(dispatcher["state"], "armed", "{health}");
    assert_eq!(dispatcher["stale"], false, "{health}");
    let memory = dispatcher["detail"]["memory"].as_str().unwrap_or_default();
    if host_has_cgroup2() {
        assert!(
            memory.starts_with("cgroup v2 limit 4096 MiB per agent")
                || memory.starts_with("not bounded, because"),
            "{memory}"
        );
    } else {
        assert!(
            memory.starts_with("not bounded, because /sys/fs/cgroup is cgroup v1"),
            "{memory}"
        );
    }
    health
}

#[tokio::test]
async fn an_agent_writing_a_gibibyte_to_tmp_meets_the_size_of_its_tmpfs() {
    let db = TestDb::sqlite();
    // Tries 1 GiB in /tmp and in its TMPDIR, and writes down how each ended and how much landed.
    let (app, rig) = TestApp::with_agent("fills-tmp.sh", r#"for dir in /tmp "$TMPDIR" "$HOME"; do
  # Its error is captured, not written to the full tmpfs.
  if said=$(head -c 1073741824 /dev/zero 2>&1 > "$dir/big"); then said=wrote-it-all; else said="refused: $said"; fi
  echo "$dir $(stat -c %s "$dir/big") $said" >> CHANGES.md
  rm -f "$dir/big"
done"#)
    .contained()
    .config("[dispatch]\ntmp_size_mib = 64\nhome_size_mib = 96")
    .spawn(&db)
    .await;
    let health = serving(&app).await;
    let named = health["loops"]["dispatcher"]["detail"]["scratch"]
        .as_str()
        .unwrap_or_default();
    if health["loops"]["dispatcher"]["detail"]["containment"] != "namespaces" {
        assert!(
            !crate::common::in_ci(),
            "CI is set and bubblewrap cannot run here: {health}"
        );
        eprintln!("\n*** SKIPPED the /tmp bound: bubblewrap cannot run here.\n");
        return;
    }
    assert_eq!(
        named, "tmpfs per agent: /tmp and TMPDIR 64 MiB each, HOME 96 MiB",
        "{health}"
    );
    let id = create_task(&app, "Fill the disk").await;
    within(Duration::from_secs(60), "the task in review", || async {
        board::row_now(&app, id)
            .await
            .is_some_and(|row| row.column == Column::InReview)
    })
    .await;
    let said = rig
        .remote
        .show(&format!("pidevops/{id}"), "CHANGES.md")
        .expect("the agent wrote down what happened");
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 3, "{said}");
    for (line, size) in lines.into_iter().zip([64u64 << 20, 64 << 20, 96 << 20]) {
        let mut words = line.splitn(3, ' ');
        let (dir, landed, how) = (
            words.next().unwrap(),
            words.next().unwrap().parse::<u64>().unwrap(),
            words.next().unwrap(),
        );
        assert!(
            how.starts_with("refused") && how.contains("No space left on device"),
            "{dir}: {line}"
        );
        assert!(landed <= size, "{dir}: {landed} bytes landed");
        // Most of the tmpfs was there to be filled: the bound is its size, not something smaller by accident.
        assert!(landed > size / 4 * 3, "{dir}: only {landed} bytes landed");
    }
    serving(&app).await;
    app.stop().await;
}

#[tokio::test]
async fn an_agent_printing_two_gibibytes_is_stopped_at_its_output_budget_and_its_log_is_bounded() {
    let _cores = crate::common::heavy().await;
    let db = TestDb::sqlite();
    let (app, rig) = TestApp::with_agent("floods.sh", r#"echo "FIRST LINE of the flood"
yes "flood flood flood flood flood flood flood flood flood flood flood flood flood flood" | head -c 2147483648
echo x > CHANGES.md"#)
    .config("[dispatch]\noutput_max_mib = 16\nlog_keep_mib = 1")
    .spawn(&db)
    .await;
    let id = create_task(&app, "Print everything").await;
    within(
        Duration::from_secs(60),
        "the task flagged for a person",
        || async {
            board::row_now(&app, id)
                .await
                .is_some_and(|row| row.needs_human)
        },
    )
    .await;
    serving(&app).await;

    let runs = ended_runs(&app, id).await;
    assert_eq!(runs.len(), 1, "flagged at once, not retried: {runs:?}");
    let run = &runs[0];
    assert_eq!(run.state, "failed");
    assert_eq!(run.failure.as_deref(), Some("flooded"), "{run:?}");
    let detail = run.detail.as_deref().unwrap();
    assert!(
        detail.contains(&format!("output budget of {} bytes", 16u64 << 20)),
        "{detail}"
    );
    let row = board::row_now(&app, id).await.unwrap();
    assert_eq!(row.column, Column::Todo);
    assert_eq!(row.attempts, 1);
    assert!(
        row.needs_human_reason
            .as_deref()
            .is_some_and(|r| r.contains("output budget")),
        "{row:?}"
    );
    assert!(
        rig.remote.branch(&format!("pidevops/{id}")).is_none(),
        "nothing is pushed"
    );

    // The log: the first MiB, one marker naming the bytes cut, the last MiB; nowhere near 2 GiB.
    let log = std::fs::read(run.log_path.as_deref().unwrap()).unwrap();
    assert!(log.len() <= (2 << 20) + 200, "{} bytes", log.len());
    assert!(log.starts_with(b"FIRST LINE of the flood\n"));
    let text = String::from_utf8_lossy(&log);
    let markers: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("=== pidevops: ") && l.contains("bytes of output cut here"))
        .collect();
    assert_eq!(markers.len(), 1, "one marker");
    let cut: u64 = markers[0]
        .trim_start_matches("=== pidevops: ")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // At least the budget was printed, of which 2 MiB is kept; the agent never got near its 2 GiB.
    assert!(cut >= (16 << 20) - (2 << 20), "{cut} bytes cut");
    assert!(cut < 1 << 30, "{cut} bytes cut");
    let tail = &log[log.len() - 1024..];
    assert!(
        String::from_utf8_lossy(tail).contains("flood flood"),
        "the tail is the end of the flood"
    );
    app.stop().await;
}

#[tokio::test]
async fn claims_wait_while_the_workspace_volume_is_below_its_free_space_and_resume_by_themselves() {
    let db = TestDb::sqlite();
    let Some(volume) = Tmpfs::mount("96m") else {
        return;
    };
    let ws = volume.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    // 64 MiB of the 96 taken: 32 left, below the 48 the configuration asks for.
    let filler = volume.path().join("filler");
    std::fs::write(&filler, vec![0xA5u8; 64 << 20]).unwrap();
    let (app, _rig) = TestApp::with_agent("edits.sh", "echo x > CHANGES.md")
        .config("[dispatch]\nmin_free_disk_mib = 48")
        .workspaces(&ws)
        .spawn(&db)
        .await;
    let id = create_task(&app, "Wait for room").await;
    // The dispatcher sees the task: nothing but the volume holds it back.
    app.project().await;
    within(
        Duration::from_secs(30),
        "/health to warn of the full volume",
        || async {
            let (code, health) = app.health().await;
            code == 200
                && health["status"] == "warn"
                && health["problems"].as_array().is_some_and(|p| {
                    p.iter().any(|l| {
                        l.as_str().is_some_and(|l| {
                            l.starts_with("loop dispatcher: claims wait: the workspace volume")
                                && l.contains("below dispatch.min_free_disk_mib = 48")
                        })
                    })
                })
        },
    )
    .await;
    // Ticks that find the volume full start nothing and spend nothing.
    for _ in 0..3 {
        app.tick("dispatcher").await;
    }
    app.project().await;
    let row = board::row_now(&app, id).await.unwrap();
    assert_eq!(row.column, Column::Todo);
    assert_eq!(row.attempts, 0);
    assert!(!row.needs_human);
    assert!(board::runs_now(&app, id).await.is_empty());
    let (_, health) = app.health().await;
    let detail = &health["loops"]["dispatcher"]["detail"];
    assert_eq!(detail["queue"], 1, "the task waits in the queue: {detail}");
    assert!(
        detail["workspace_free_bytes"].as_u64().unwrap() < 48 << 20,
        "{detail}"
    );

    // Space returns: the next tick claims, with no restart and no person.
    std::fs::remove_file(&filler).unwrap();
    within(Duration::from_secs(30), "the task in review", || async {
        board::row_now(&app, id)
            .await
            .is_some_and(|row| row.column == Column::InReview)
    })
    .await;
    let (code, health) = app.health().await;
    assert_eq!(code, 200);
    assert!(
        health["loops"]["dispatcher"]["detail"]["disk_low"].is_null(),
        "{health}"
    );
    assert_eq!(ended_runs(&app, id).await.len(), 1);
    app.stop().await;
}

#[tokio::test]
async fn an_agent_filling_the_workspace_volume_while_it_runs_is_stopped_and_its_worktree_goes() {
    let db = TestDb::sqlite();
    let Some(volume) = Tmpfs::mount("96m") else {
        return;
    };
    // 80 MiB into its worktree, on a 96 MiB volume, then waits to be stopped.
    let ws = volume.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let (app, _rig) = TestApp::with_agent(
        "fills-disk.sh",
        "head -c 83886080 /dev/zero > big.bin\necho filled\nsleep 60",
    )
    .config("[dispatch]\nmin_free_disk_mib = 48")
    .workspaces(&ws)
    .spawn(&db)
    .await;
    let id = create_task(&app, "Fill the volume").await;
    within(
        Duration::from_secs(60),
        "the task flagged for a person",
        || async {
            board::row_now(&app, id)
                .await
                .is_some_and(|row| row.needs_human)
        },
    )
    .await;
    let runs = ended_runs(&app, id).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = &runs[0];
    assert_eq!(run.failure.as_deref(), Some("flooded"), "{run:?}");
    assert!(
        run.detail
            .as_deref()
            .is_some_and(|d| d.contains("workspace volume fell below 24 MiB free")),
        "{run:?}"
    );
    // Its worktree is gone, and with it what it wrote: the volume has room again, and says so.
    within(
        Duration::from_secs(30),
        "the volume's room back",
        || async {
            app.tick("dispatcher").await;
            let (code, health) = app.health().await;
            let detail = &health["loops"]["dispatcher"]["detail"];
            code == 200
                && detail["disk_low"].is_null()
                && detail["workspace_free_bytes"]
                    .as_u64()
                    .is_some_and(|f| f > 64 << 20)
        },
    )
    .await;
    serving(&app).await;
    app.stop().await;
}
