//! SQLite on a full disk, for real: the database lives on a small tmpfs, a filler file takes the rest. Appends
//! must fail with 503 and fail `/health` while the disk is full, and commit again once space is back, with no
//! restart. Needs root for `mount` (CI runs as root); elsewhere it skips loudly, under CI it fails.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{TestApp, TestDb};
use pidevops::config::DatabaseUrl;
use serde_json::Value;

/// A tmpfs mounted for one test, unmounted when dropped, whether the test passed or panicked (`bounds.rs` too).
pub(crate) struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    pub(crate) fn mount(size: &str) -> Option<Self> {
        let dir = tempfile::tempdir().expect("a mount point");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            assert!(
                !crate::common::in_ci(),
                "CI is set and `mount -t tmpfs` failed: this test needs root"
            );
            eprintln!("\n*** SKIPPED the disk-full test: `mount -t tmpfs` needs root.\n");
            return None;
        }
        Some(Self { dir })
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: the app's pool may still hold the database open while the test unwinds.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Writes until the filesystem refuses; returns the filler's path.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).expect("the filler file");
    let chunk = vec![0xA5u8; 64 * 1024];
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
            Err(e) => panic!("filling the disk: {e}"),
        }
    }
    // Whatever a partial write left: one byte at a time until the last block is gone too.
    while file.write(&[0]).is_ok_and(|n| n > 0) {}
    path
}

/// A GitHub `issues` body of about `size` bytes (padding in a field nothing reads).
fn issue_body(n: u32, size: usize) -> Vec<u8> {
    let padding = "x".repeat(size);
    serde_json::to_vec(&serde_json::json!({
        "action": "opened",
        "issue": { "number": n, "title": "disk full", "body": padding },
        "repository": { "full_name": "acme/billing" },
    }))
    .unwrap()
}

async fn post(app: &TestApp, delivery: &str, body: &[u8]) -> (u16, Value) {
    let response = app.post_github("issues", delivery, body).await;
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON answer"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_disk_fails_appends_and_health_then_recovers_without_a_restart() {
    let Some(tmpfs) = Tmpfs::mount("8m") else {
        return;
    };
    let db = TestDb::sqlite();
    let mut settings = crate::common::settings(&db);
    settings.database = DatabaseUrl::Sqlite(format!(
        "sqlite://{}",
        tmpfs.path().join("pidevops.db").display()
    ));
    let app = TestApp::spawn(settings).await;

    let (status, first) = post(&app, "before-full", &issue_body(1, 10_000)).await;
    assert_eq!(status, 200, "{first}");

    let filler = fill(tmpfs.path());
    // Several deliveries, each larger than anything SQLite could squeeze into pages it already has.
    for n in 0..3 {
        let (status, refused) = post(
            &app,
            &format!("while-full-{n}"),
            &issue_body(2 + n, 300_000),
        )
        .await;
        assert_eq!(status, 503, "never 2xx without a commit: {refused}");
        assert_eq!(refused["error"], "unavailable");
    }
    // The heartbeat's probe (a small real append) fails too, so health stays failed with no traffic.
    crate::common::eventually("the heartbeat's probe append fails", || async {
        app.health().await.1["loops"]["database_heartbeat"]["errors"]
            .as_u64()
            .unwrap_or(0)
            >= 1
    })
    .await;
    let (status, health) = app.health().await;
    assert_eq!(status, 503, "appends fail, so health fails: {health}");
    let heartbeat_error = health["loops"]["database_heartbeat"]["last_error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        heartbeat_error.contains("appends still fail"),
        "{heartbeat_error}"
    );
    assert_eq!(health["status"], "fail");
    let database = &health["checks"]["database"];
    assert_eq!(database["status"], "fail", "{database}");
    assert_eq!(database["appends"]["status"], "fail", "{database}");
    let error = database["appends"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("full"),
        "the reason names the cause: {error}"
    );

    std::fs::remove_file(&filler).expect("remove the filler");
    // The same process, no restart: the refused delivery's retry commits, and so do new ones.
    let (status, retried) = post(&app, "while-full-0", &issue_body(2, 300_000)).await;
    assert_eq!(status, 200, "appends recover by themselves: {retried}");
    assert_eq!(retried["duplicate"], false, "nothing was stored while full");
    for n in 0..3 {
        let (status, again) = post(
            &app,
            &format!("after-full-{n}"),
            &issue_body(10 + n, 10_000),
        )
        .await;
        assert_eq!(status, 200, "{again}");
    }
    let (status, health) = app.health().await;
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["checks"]["database"]["status"], "pass");
    assert!(health["checks"]["database"].get("appends").is_none());

    let keys: Vec<String> = app
        .webhook_events()
        .await
        .into_iter()
        .map(|e| e.dedup_key)
        .collect();
    assert_eq!(
        keys,
        vec![
            "before-full",
            "while-full-0",
            "after-full-0",
            "after-full-1",
            "after-full-2"
        ]
    );
    app.stop().await;
    drop(tmpfs);
}

/// Postgres answering pings but refusing every append (here a trigger raising, as a full disk or a read-only
/// replica would): `/health` fails while appends fail, and passes again with no traffic once they can commit
/// (the heartbeat's probe append finds out).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_refusing_appends_fails_health_until_they_commit_again() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let app = TestApp::spawn(crate::common::settings(&db)).await;
    let (status, first) = post(&app, "before", &issue_body(1, 100)).await;
    assert_eq!(status, 200, "{first}");

    crate::common::execute(
        app.state.log.store(),
        "CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'could not extend file: No space left on device'; END $$;
         CREATE TRIGGER test_refuse BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION test_refuse();",
    )
    .await;
    let (status, refused) = post(&app, "while-refused", &issue_body(2, 100)).await;
    assert_eq!(status, 503, "{refused}");
    let (status, health) = app.health().await;
    assert_eq!(status, 503, "{health}");
    let database = &health["checks"]["database"];
    assert_eq!(database["status"], "fail", "{database}");
    assert!(
        database["latency_ms"].is_number(),
        "pings still pass: {database}"
    );
    let error = database["appends"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("No space left"), "{error}");

    crate::common::execute(app.state.log.store(), "DROP TRIGGER test_refuse ON events").await;
    crate::common::eventually("health passes again without a delivery", || async {
        app.health().await.0 == 200
    })
    .await;
    let recovered: Vec<_> = app
        .all_events()
        .await
        .into_iter()
        .filter(|e| e.event_type == "eventlog.recovered")
        .collect();
    assert_eq!(
        recovered.len(),
        1,
        "the probe that found it recorded it once"
    );
    let (status, retried) = post(&app, "while-refused", &issue_body(2, 100)).await;
    assert_eq!(
        (status, retried["duplicate"].clone()),
        (200, Value::Bool(false))
    );
    app.stop().await;
}
