//! The log's hash chain on both backends: an appended log verifies intact; a flipped byte in any column of any
//! event, a deleted event, a deleted event hidden by renumbering, a reordered pair and a row written around the
//! appender are each named by `verify` at the right position; both backends hash the same events alike; the
//! command exits 0 on an intact log and 1 at a break; an export verifies offline and names what was changed in it.

use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use pidevops::domain::{EventType, NewEvent, Source, Subject};
use pidevops::eventlog::{Break, EventLog, EventStore};
use sqlx::Row;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::common::TestDb;

per_backend!(
    an_appended_log_verifies_intact,
    a_changed_byte_in_any_column_of_any_event_is_named,
    a_deleted_event_is_named_even_when_the_positions_are_closed_up,
    a_reordered_pair_is_named,
    a_row_written_around_the_appender_is_named,
    events_from_before_the_chain_are_reported_and_the_chain_starts_after_them,
    a_receipt_from_the_command_line_holds_and_an_altered_one_is_refused,
    events_cut_off_the_end_are_named_by_a_projector_that_had_applied_them,
);

async fn open(db: &TestDb) -> (EventStore, EventLog, CancellationToken) {
    let store = EventStore::connect(&db.url, 4).await.expect("connect");
    store.migrate().await.expect("migrate");
    let stop = CancellationToken::new();
    let (log, _task) = EventLog::start(store.clone(), Duration::from_secs(20), stop.clone());
    (store, log, stop)
}

/// Six events of every shape: pinned and unpinned webhooks, a streamed event, empty and binary bodies, and meta
/// whose numbers and strings `jsonb` prints differently from how they were sent.
fn events() -> Vec<NewEvent> {
    let at = DateTime::parse_from_rfc3339("2026-11-30T10:00:00.123456789Z")
        .unwrap()
        .with_timezone(&Utc);
    let mut out = Vec::new();
    for i in 0..6u8 {
        let source = [Source::Github, Source::Linear, Source::Pidevops][usize::from(i % 3)];
        let body: Vec<u8> = match i {
            2 => Vec::new(),
            4 => vec![0, 159, 146, 150, 255],
            _ => format!(r#"{{ "n": {i}, "text": "caf\u00e9" }}"#).into_bytes(),
        };
        let mut e = NewEvent::new(
            source,
            EventType::new(source, &["test", "chained"]),
            format!("key-{i}"),
            "application/json",
            Bytes::from(body),
        );
        e.id = Uuid::from_u128(0x1000 + u128::from(i));
        e.occurred_at = at + chrono::Duration::seconds(i64::from(i));
        e.subject = Subject {
            action: Some("chained".into()),
            repository: Some("acme/billing".into()),
            number: Some(40 + i64::from(i)),
            reference: Some(format!("ENG-{i}")),
        };
        e.meta = serde_json::from_str(
            r#"{"z": 1e16, "a": 1.0, "m": [0.1, -0, 18446744073709551615], "s": "é \" \u0001", "nested": {"b": 2, "a": null}}"#,
        )
        .unwrap();
        if i == 3 {
            e.stream = Some(("task:T-1".into(), 1));
        }
        if i % 3 == 0 {
            e = e.pinned();
        }
        out.push(e);
    }
    out
}

async fn append_all(log: &EventLog) {
    for e in events() {
        let appended = log.append(e).await.expect("append");
        assert!(!appended.duplicate);
    }
}

async fn verify(store: &EventStore) -> pidevops::eventlog::ChainReport {
    store.verify_chain().await.expect("the walk reads the log")
}

/// A value to write over a column.
#[derive(Clone)]
enum Val {
    Text(String),
    Int(i64),
    Bytes(Vec<u8>),
    Time(DateTime<Utc>),
    Meta(String),
    Id(Uuid),
    MaybeBytes(Option<Vec<u8>>),
}

/// Binds a [`Val`] to a query of either backend; `$id` is how that backend stores an event id.
macro_rules! bind_val {
    ($query:expr, $value:expr, |$uuid:ident| $id:expr) => {
        match $value {
            None => $query,
            Some(Val::Text(v) | Val::Meta(v)) => $query.bind(v),
            Some(Val::Int(v)) => $query.bind(v),
            Some(Val::Bytes(v)) => $query.bind(v),
            Some(Val::Time(v)) => $query.bind(v),
            Some(Val::Id($uuid)) => $query.bind($id),
            Some(Val::MaybeBytes(v)) => $query.bind(v),
        }
    };
}

/// Runs `sql` with the append-only triggers out of the way, as someone with the database's keys could.
async fn tamper(store: &EventStore, sql: &str, value: Option<Val>) {
    match store {
        EventStore::Postgres(pg) => {
            let mut tx = pg.pool().begin().await.unwrap();
            sqlx::query("SET LOCAL session_replication_role = replica")
                .execute(&mut *tx)
                .await
                .unwrap();
            let sql = sql.replace("$META", "$1::jsonb");
            let q = bind_val!(sqlx::query(&sql), value, |id| id);
            q.execute(&mut *tx).await.unwrap();
            tx.commit().await.unwrap();
        }
        EventStore::Sqlite(lite) => {
            let mut tx = lite.pool().begin().await.unwrap();
            let triggers: Vec<(String, String)> = sqlx::query_as(
                "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'events'",
            )
            .fetch_all(&mut *tx)
            .await
            .unwrap();
            for (name, _) in &triggers {
                sqlx::query(&format!("DROP TRIGGER {name}"))
                    .execute(&mut *tx)
                    .await
                    .unwrap();
            }
            let sql = sql.replace("$META", "$1");
            let q = bind_val!(sqlx::query(&sql), value, |id| id.to_string());
            q.execute(&mut *tx).await.unwrap();
            for (_, create) in &triggers {
                sqlx::query(create).execute(&mut *tx).await.unwrap();
            }
            tx.commit().await.unwrap();
        }
    }
}

/// The stored digest, content hash and chain hash of the event at `position`, read as `verify` reads them.
async fn hashes(store: &EventStore, position: i64) -> (Option<Vec<u8>>, Vec<u8>, Vec<u8>) {
    let mut found = store.chained_at(&[position]).await.unwrap();
    assert_eq!(found.len(), 1, "no event at {position}");
    let chained = found.remove(0);
    (
        chained.body_digest,
        chained.content_hash.expect("a content hash"),
        chained.chain_hash.expect("a chain hash"),
    )
}

async fn all_columns(store: &EventStore) -> Vec<String> {
    use sqlx::Column;
    let sql = "SELECT * FROM events WHERE position = 1";
    match store {
        EventStore::Postgres(pg) => {
            let row = sqlx::query(sql).fetch_one(pg.pool()).await.unwrap();
            row.columns().iter().map(|c| c.name().to_owned()).collect()
        }
        EventStore::Sqlite(lite) => {
            let row = sqlx::query(sql).fetch_one(lite.pool()).await.unwrap();
            row.columns().iter().map(|c| c.name().to_owned()).collect()
        }
    }
}

fn flip(mut bytes: Vec<u8>) -> Vec<u8> {
    if bytes.is_empty() {
        bytes.push(0);
    } else {
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x01;
    }
    bytes
}

fn flip_text(text: &str) -> String {
    let mut bytes = text.as_bytes().to_vec();
    // The last byte of an ASCII text: still valid UTF-8 after the flip.
    if let Some(last) = bytes.last_mut() {
        *last ^= 0x01;
    }
    String::from_utf8(bytes).unwrap()
}

async fn an_appended_log_verifies_intact(db: TestDb) {
    let (store, log, _stop) = open(&db).await;
    assert_eq!(verify(&store).await.events, 0);
    append_all(&log).await;
    // A duplicate writes nothing, so it leaves the chain as it was.
    let again = log.append(events().remove(0)).await.unwrap();
    assert!(again.duplicate);
    let report = verify(&store).await;
    assert_eq!(report.first_break, None, "{report:?}");
    assert_eq!(report.events, 6);
    assert_eq!(report.unchained_through, None);
    let (position, head) = report.head.clone().expect("a head");
    assert_eq!(position, 6);
    assert_eq!(head, hex::encode(hashes(&store, 6).await.2));
    assert!(pidevops::eventlog::chain_report_text(&report)
        .starts_with("intact: 6 events, chained through position 6"));
}

/// A column, a position, the value written over it, the original, and what verify must say.
type Case = (&'static str, i64, Val, Val, fn(i64) -> Break);

async fn a_changed_byte_in_any_column_of_any_event_is_named(db: TestDb) {
    let (store, log, _stop) = open(&db).await;
    append_all(&log).await;
    let stored = store.read_after(0, 10).await.unwrap();
    let at = |p: i64| &stored[usize::try_from(p - 1).unwrap()];
    let mut cases: Vec<Case> = Vec::new();
    let altered: fn(i64) -> Break = |position| Break::ContentAltered { position };
    let relinked: fn(i64) -> Break = |position| Break::LinkBroken { position };
    let text = |s: &str| Val::Text(s.to_owned());
    for (column, position) in [
        ("source", 1),
        ("event_type", 2),
        ("dedup_key", 3),
        ("stream", 4),
        ("action", 5),
        ("repository", 6),
        ("reference", 1),
        ("content_type", 2),
    ] {
        let e = at(position);
        let original = match column {
            "source" => e.source.clone(),
            "event_type" => e.event_type.clone(),
            "dedup_key" => e.dedup_key.clone(),
            "stream" => e.stream.clone().unwrap(),
            "action" => e.action.clone().unwrap(),
            "repository" => e.repository.clone().unwrap(),
            "reference" => e.reference.clone().unwrap(),
            _ => e.content_type.clone(),
        };
        cases.push((
            column,
            position,
            text(&flip_text(&original)),
            text(&original),
            altered,
        ));
    }
    let e4 = at(4);
    cases.push((
        "stream_version",
        4,
        Val::Int(2),
        Val::Int(e4.stream_version.unwrap()),
        altered,
    ));
    cases.push((
        "number",
        3,
        Val::Int(at(3).number.unwrap() ^ 1),
        Val::Int(at(3).number.unwrap()),
        altered,
    ));
    let micro = chrono::Duration::microseconds(1);
    cases.push((
        "occurred_at",
        2,
        Val::Time(at(2).occurred_at + micro),
        Val::Time(at(2).occurred_at),
        altered,
    ));
    cases.push((
        "recorded_at",
        5,
        Val::Time(at(5).recorded_at - micro),
        Val::Time(at(5).recorded_at),
        altered,
    ));
    cases.push((
        "id",
        6,
        Val::Id(Uuid::from_u128(0xbad)),
        Val::Id(at(6).id),
        altered,
    ));
    for position in 1..=6 {
        let body = at(position).body.clone();
        cases.push((
            "body",
            position,
            Val::Bytes(flip(body.clone())),
            Val::Bytes(body),
            altered,
        ));
    }
    let meta = at(3).meta.to_map();
    let mut other = meta.clone();
    other.insert("s".into(), serde_json::json!("é \" \u{1}!"));
    let as_text =
        |m: &serde_json::Map<String, serde_json::Value>| serde_json::to_string(m).unwrap();
    cases.push((
        "meta",
        3,
        Val::Meta(as_text(&other)),
        Val::Meta(as_text(&meta)),
        altered,
    ));
    for position in [1, 4, 6] {
        let (digest, content, link) = hashes(&store, position).await;
        // Position 6 is not pinned: it has no digest, and gains one.
        let changed = flip(digest.clone().unwrap_or_default());
        cases.push((
            "body_digest",
            position,
            Val::Bytes(changed),
            Val::MaybeBytes(digest),
            altered,
        ));
        cases.push((
            "content_hash",
            position,
            Val::Bytes(flip(content.clone())),
            Val::Bytes(content),
            altered,
        ));
        cases.push((
            "chain_hash",
            position,
            Val::Bytes(flip(link.clone())),
            Val::Bytes(link),
            relinked,
        ));
    }
    // Every stored column but the position (which the link covers) is changed somewhere, a column added
    // later included.
    let columns = all_columns(&store).await;
    for column in &columns {
        assert!(
            column == "position" || cases.iter().any(|c| c.0 == column),
            "no case changes column {column}"
        );
    }
    for (column, position, changed, original, expected) in cases {
        let set = if column == "meta" { "$META" } else { "$1" };
        let sql = format!("UPDATE events SET {column} = {set} WHERE position = {position}");
        tamper(&store, &sql, Some(changed)).await;
        let report = verify(&store).await;
        assert_eq!(
            report.first_break,
            Some(expected(position)),
            "{column} at {position}: {report:?}"
        );
        tamper(&store, &sql, Some(original)).await;
        let report = verify(&store).await;
        assert_eq!(
            report.first_break, None,
            "{column} at {position} restored: {report:?}"
        );
    }
}

async fn a_deleted_event_is_named_even_when_the_positions_are_closed_up(db: TestDb) {
    let (store, log, _stop) = open(&db).await;
    append_all(&log).await;
    tamper(&store, "DELETE FROM events WHERE position = 3", None).await;
    let report = verify(&store).await;
    assert_eq!(
        report.first_break,
        Some(Break::Missing { after: 2, next: 4 })
    );
    assert!(pidevops::eventlog::chain_report_text(&report).contains("positions 3..=3 are missing"));
    // Closing the gap (every later event moved down one) leaves no gap to see, but the links name it.
    for position in 4..=6 {
        tamper(
            &store,
            &format!(
                "UPDATE events SET position = {} WHERE position = {position}",
                position - 1
            ),
            None,
        )
        .await;
    }
    assert_eq!(
        verify(&store).await.first_break,
        Some(Break::LinkBroken { position: 3 })
    );
}

async fn a_reordered_pair_is_named(db: TestDb) {
    let (store, log, _stop) = open(&db).await;
    append_all(&log).await;
    for sql in [
        "UPDATE events SET position = 100 WHERE position = 2",
        "UPDATE events SET position = 2 WHERE position = 3",
        "UPDATE events SET position = 3 WHERE position = 100",
    ] {
        tamper(&store, sql, None).await;
    }
    assert_eq!(
        verify(&store).await.first_break,
        Some(Break::LinkBroken { position: 2 })
    );
}

async fn a_row_written_around_the_appender_is_named(db: TestDb) {
    let (store, log, _stop) = open(&db).await;
    append_all(&log).await;
    // A row copied from event 6 under a new key and position, without hashes (the triggers allow inserts).
    let sql = "INSERT INTO events (position, id, source, event_type, dedup_key, stream, stream_version,
                   occurred_at, recorded_at, action, repository, number, reference, content_type, body, meta)
               SELECT 7, $1, source, event_type, 'around', NULL, NULL, occurred_at, recorded_at, action,
                   repository, number, reference, content_type, body, meta FROM events WHERE position = 6";
    tamper(&store, sql, Some(Val::Id(Uuid::from_u128(0xa40)))).await;
    assert_eq!(
        verify(&store).await.first_break,
        Some(Break::Unchained { position: 7 })
    );
    // The appender chains on after it (from the genesis); the walk still stops at the unchained row.
    let mut later = events().remove(1);
    later.dedup_key = "after-the-row".into();
    later.id = Uuid::from_u128(0x2001);
    assert_eq!(log.append(later).await.unwrap().position, 8);
    assert_eq!(
        verify(&store).await.first_break,
        Some(Break::Unchained { position: 7 })
    );
}

async fn events_from_before_the_chain_are_reported_and_the_chain_starts_after_them(db: TestDb) {
    let (store, log, _stop) = open(&db).await;
    append_all(&log).await;
    // As if positions 1..=6 had been written before the migration that added the hashes.
    tamper(
        &store,
        "UPDATE events SET content_hash = NULL, chain_hash = NULL",
        None,
    )
    .await;
    let mut later = events().remove(0);
    later.dedup_key = "after-the-upgrade".into();
    later.id = Uuid::from_u128(0x2000);
    let appended = log.append(later).await.unwrap();
    assert_eq!(appended.position, 7);
    let report = verify(&store).await;
    assert_eq!(report.first_break, None, "{report:?}");
    assert_eq!(report.unchained_through, Some(6));
    assert_eq!(report.head.as_ref().map(|h| h.0), Some(7));
    assert!(pidevops::eventlog::chain_report_text(&report)
        .contains("positions 1..=6 were written before the chain began"));
}

/// The same events read back from both backends hash alike: the hashes are of the content, not of how a backend
/// stores it (jsonb's reordered keys and reprinted numbers, SQLite's text, Postgres's microseconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn both_backends_hash_the_same_events_alike() {
    let Some(pg) = TestDb::postgres().await else {
        return;
    };
    let lite = TestDb::sqlite();
    let mut hashed = Vec::new();
    for db in [&pg, &lite] {
        let (store, log, _stop) = open(db).await;
        append_all(&log).await;
        let report = verify(&store).await;
        assert_eq!(report.first_break, None, "{}: {report:?}", store.kind());
        let mut content = Vec::new();
        for mut event in store.read_after(0, 10).await.unwrap() {
            let digest = hashes(&store, event.position).await.0;
            // Each backend's batch was recorded at its own instant: the one field that may differ.
            event.recorded_at = DateTime::UNIX_EPOCH;
            content.push(pidevops::eventlog::chain::of_stored(
                &event,
                digest.as_deref(),
            ));
        }
        hashed.push(content);
    }
    assert_eq!(hashed[0].len(), 6);
    assert_eq!(
        hashed[0], hashed[1],
        "Postgres and SQLite hash the same events differently"
    );
}

/// `pidevops verify` through the real binary: 0 and "intact" on an intact log, 1 and the position at a break.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_verify_command_exits_by_what_it_found() {
    let db = TestDb::sqlite();
    let (store, log, _stop) = open(&db).await;
    append_all(&log).await;
    let pidevops::config::DatabaseUrl::Sqlite(url) = &db.url else {
        unreachable!("TestDb::sqlite")
    };
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_pidevops"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DATABASE_URL", url)
            .args(args)
            .output()
            .expect("the binary runs")
    };
    let out = run(&["verify"]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.starts_with("intact: 6 events, chained through position 6, head hash "),
        "{said}"
    );
    tamper(
        &store,
        "UPDATE events SET dedup_key = 'key-X' WHERE position = 5",
        None,
    )
    .await;
    let out = run(&["verify", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        report["first_break"],
        serde_json::json!({"kind": "content_altered", "position": 5})
    );
}

/// `pidevops export` then `pidevops verify --export`, offline: intact as exported; a changed body, a dropped
/// line and two swapped lines are each named; a line that is not an event is an error (exit 2) naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_export_verifies_offline_and_names_what_was_changed_in_it() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let (_store, log, _stop) = open(&db).await;
    append_all(&log).await;
    let pidevops::config::DatabaseUrl::Postgres(url) = &db.url else {
        unreachable!("TestDb::postgres")
    };
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str], database: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_pidevops"));
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .current_dir(dir.path())
            .args(args);
        if let Some(url) = database {
            command.env("DATABASE_URL", url);
        }
        command.output().expect("the binary runs")
    };
    let out = run(&["export"], Some(url));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 6);
    let check = |name: &str, lines: &[String]| {
        let file = dir.path().join(name);
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        // No DATABASE_URL: the export alone is read.
        let out = run(
            &["verify", "--json", "--export", file.to_str().unwrap()],
            None,
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        (
            out.status.code(),
            report,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, report, err) = check("intact.jsonl", &lines);
    assert_eq!(code, Some(0), "{report} {err}");
    assert_eq!(report["head"][0], 6);

    let mut changed = lines.clone();
    let mut third: serde_json::Value = serde_json::from_str(&changed[2]).unwrap();
    third["body"] = serde_json::json!("e30=");
    changed[2] = third.to_string();
    let (code, report, _) = check("changed.jsonl", &changed);
    assert_eq!(
        (code, &report["first_break"]),
        (
            Some(1),
            &serde_json::json!({"kind": "content_altered", "position": 3})
        )
    );

    let mut dropped = lines.clone();
    dropped.remove(3);
    let (code, report, _) = check("dropped.jsonl", &dropped);
    assert_eq!(
        (code, &report["first_break"]),
        (
            Some(1),
            &serde_json::json!({"kind": "missing", "after": 3, "next": 5})
        )
    );

    let mut swapped = lines.clone();
    swapped.swap(1, 2);
    let (code, report, _) = check("swapped.jsonl", &swapped);
    assert_eq!(
        (code, &report["first_break"]),
        (
            Some(1),
            &serde_json::json!({"kind": "missing", "after": 1, "next": 3})
        )
    );

    let mut garbled = lines.clone();
    garbled[4].truncate(20);
    let (code, _, err) = check("garbled.jsonl", &garbled);
    assert_eq!(code, Some(2));
    assert!(err.contains("line 5 is not an exported event"), "{err}");
}

/// `pidevops receipt T-1` and `pidevops verify --receipt`, through the real binary: it holds against the log and
/// against an export; a line changed, a line dropped, or a log changed under it is refused (exit 1) naming why.
async fn a_receipt_from_the_command_line_holds_and_an_altered_one_is_refused(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("pidevops.toml"),
        "[intake]\nallow_repos = [\"acme/*\"]\n",
    )
    .unwrap();
    let url = db.url_string();
    let run = |args: &[&str]| crate::common::server::cli(&url, dir.path(), args);
    let (code, _, err) = run(&["task", "new", "acme/api", "Fix", "the", "login"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = run(&["task", "approve", "T-1"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, receipt, err) = run(&["receipt", "T-1"]);
    assert_eq!(code, Some(0), "{err}");
    let receipt: serde_json::Value = serde_json::from_str(&receipt).expect("JSON");
    let types: Vec<&str> = receipt["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["task.created", "task.approved"], "{receipt}");
    let write = |name: &str, value: &serde_json::Value| {
        let file = dir.path().join(name);
        std::fs::write(&file, value.to_string()).unwrap();
        file.to_str().unwrap().to_owned()
    };
    let file = write("receipt.json", &receipt);
    let (code, said, err) = run(&["verify", "--receipt", &file]);
    assert_eq!(code, Some(0), "{said}{err}");
    assert_eq!(
        said.trim(),
        "receipt of T-1 holds: 2 lines checked against the log"
    );
    let (code, export, _) = run(&["export"]);
    assert_eq!(code, Some(0));
    let export_file = dir.path().join("log.jsonl");
    std::fs::write(&export_file, export).unwrap();
    let export_file = export_file.to_str().unwrap().to_owned();
    let (code, said, err) = run(&["verify", "--receipt", &file, "--export", &export_file]);
    assert_eq!(code, Some(0), "{said}{err}");

    let mut altered = receipt.clone();
    altered["lines"][1]["actor"] = serde_json::json!("the-ceo");
    let (code, said, _) = run(&["verify", "--receipt", &write("altered.json", &altered)]);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.starts_with("receipt of T-1 REFUSED: line 2 does not match the event at position 2"),
        "{said}"
    );
    let mut early_head = receipt.clone();
    early_head["head"]["position"] = serde_json::json!(1);
    let (code, said, _) = run(&[
        "verify",
        "--receipt",
        &write("head.json", &early_head),
        "--export",
        &export_file,
    ]);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("was rewritten before that position"),
        "{said}"
    );
    let (code, _, err) = run(&[
        "verify",
        "--receipt",
        &write("junk.json", &serde_json::json!({"lines": []})),
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("is not a pidevops receipt"), "{err}");

    // The log changed under the receipt: the approval's actor rewritten in place.
    let store = EventStore::connect(&db.url, 2).await.unwrap();
    tamper(
        &store,
        "UPDATE events SET meta = $META WHERE position = 2",
        Some(Val::Meta(r#"{"actor":"the-ceo"}"#.into())),
    )
    .await;
    let (code, said, _) = run(&["verify", "--receipt", &file]);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("the log's chain is broken: position 2"),
        "{said}"
    );
}

/// The newest events cut off the end leave a chain with nothing wrong in it; a projector that had applied them
/// names the cut.
async fn events_cut_off_the_end_are_named_by_a_projector_that_had_applied_them(db: TestDb) {
    use pidevops::projectors::{sources::SourcesProjector, Projection};
    let (store, log, _stop) = open(&db).await;
    append_all(&log).await;
    Projection::new(store.clone(), std::sync::Arc::new(SourcesProjector))
        .rebuild(|_| {})
        .await
        .expect("the sources projector catches up");
    assert_eq!(verify(&store).await.first_break, None);
    tamper(&store, "DELETE FROM events WHERE position >= 5", None).await;
    let report = verify(&store).await;
    assert_eq!(
        report.first_break,
        Some(Break::CutOff {
            last: 4,
            consumer: "sources".into(),
            position: 6
        }),
        "{report:?}"
    );
    assert!(
        pidevops::eventlog::chain_report_text(&report).contains("the newest events were cut off")
    );
}
