//! The reader against a real file system: each refusal with the attack that needs it, next to the happy path.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use super::*;

const MAX: usize = 1_024;

struct Scene {
    _dir: tempfile::TempDir,
    worktree: PathBuf,
    /// Somewhere outside the worktree, standing for another worktree, the database, the service's files.
    outside: PathBuf,
}

fn scene() -> Scene {
    let dir = tempfile::tempdir().unwrap();
    let worktree = dir.path().join("worktree");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(worktree.join(AGENT_DIR)).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.json"), br#"{"summary": "SECRET"}"#).unwrap();
    Scene {
        _dir: dir,
        worktree,
        outside,
    }
}

impl Scene {
    fn agent_dir(&self) -> PathBuf {
        self.worktree.join(AGENT_DIR)
    }

    fn write(&self, name: &str, bytes: &[u8]) {
        std::fs::write(self.agent_dir().join(name), bytes).unwrap();
    }
}

/// Runs `f` on another thread and fails the test if it has not returned within five seconds, so a read that
/// blocks (a FIFO waiting for a writer) is a failure, not a hung suite.
fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(5))
        .expect("returned within 5 s instead of blocking")
}

fn read(worktree: &Path, name: &str) -> Result<Option<Vec<u8>>, AgentFileError> {
    read_agent_file(worktree, name, MAX)
}

#[test]
fn a_regular_file_is_read() {
    let s = scene();
    s.write("status.json", br#"{"resolved": true}"#);
    assert_eq!(
        read(&s.worktree, "status.json").unwrap().unwrap(),
        br#"{"resolved": true}"#
    );
}

#[test]
fn nothing_there_is_none_not_an_error() {
    let s = scene();
    assert!(read(&s.worktree, "status.json").unwrap().is_none());
    std::fs::remove_dir(s.agent_dir()).unwrap();
    assert!(read(&s.worktree, "status.json").unwrap().is_none());
    assert!(agent_files(&s.worktree).unwrap().is_empty());
    assert!(read_status(&s.worktree).unwrap().is_none());
    assert!(read_review(&s.worktree).unwrap().is_none());
    assert!(read_spec(&s.worktree).unwrap().is_none());
}

#[test]
fn a_file_that_is_a_link_is_refused_wherever_it_points() {
    let s = scene();
    s.write("inside.json", br#"{"resolved": true}"#);
    let targets = [
        PathBuf::from("/etc/passwd"),
        s.outside.join("secret.json"),
        s.agent_dir().join("inside.json"),
        PathBuf::from("inside.json"),
        PathBuf::from("/dev/zero"),
        PathBuf::from("/nonexistent"),
    ];
    for target in targets {
        let link = s.agent_dir().join("status.json");
        let _ = std::fs::remove_file(&link);
        symlink(&target, &link).unwrap();
        let error = read(&s.worktree, "status.json").unwrap_err();
        assert_eq!(
            error.to_string(),
            ".pidevops/status.json was refused: it is a symbolic link; write a regular file there instead",
            "{}",
            target.display()
        );
    }
}

#[test]
fn a_pidevops_that_is_a_link_is_refused_and_not_followed() {
    let s = scene();
    std::fs::remove_dir(s.agent_dir()).unwrap();
    std::fs::copy(s.outside.join("secret.json"), s.outside.join("status.json")).unwrap();
    std::fs::write(s.outside.join("status-x.json"), b"{}").unwrap();
    symlink(&s.outside, s.agent_dir()).unwrap();
    let error = read(&s.worktree, "status.json").unwrap_err();
    assert_eq!(
        error.to_string(),
        ".pidevops was refused: it is a symbolic link, not a directory; pidevops never follows a link out of the \
         worktree"
    );
    assert!(matches!(
        agent_files(&s.worktree),
        Err(AgentFileError::Dir { .. })
    ));
    assert!(matches!(
        read_status(&s.worktree),
        Err(AgentFileError::Dir { .. })
    ));
    // A link to a directory inside the worktree is no better: pidevops reads .pidevops and nothing else.
    std::fs::remove_file(s.agent_dir()).unwrap();
    std::fs::create_dir(s.worktree.join("elsewhere")).unwrap();
    symlink("elsewhere", s.agent_dir()).unwrap();
    assert!(matches!(
        read(&s.worktree, "status.json"),
        Err(AgentFileError::Dir { .. })
    ));
}

#[test]
fn a_pidevops_that_is_a_file_is_refused() {
    let s = scene();
    std::fs::remove_dir(s.agent_dir()).unwrap();
    std::fs::write(s.agent_dir(), b"{}").unwrap();
    let error = read(&s.worktree, "status.json").unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with(".pidevops was refused: it is a regular file"),
        "{error}"
    );
}

#[test]
fn a_fifo_is_refused_without_blocking() {
    let s = scene();
    nix::unistd::mkfifo(
        &s.agent_dir().join("status.json"),
        Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let worktree = s.worktree.clone();
    let error = within(move || read(&worktree, "status.json")).unwrap_err();
    assert_eq!(
        error.to_string(),
        ".pidevops/status.json was refused: it is a FIFO (named pipe); write a regular file there instead"
    );
    let worktree = s.worktree.clone();
    std::fs::remove_file(s.agent_dir().join("status.json")).unwrap();
    nix::unistd::mkfifo(
        &s.agent_dir().join("status-a.json"),
        Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let error = within(move || read_status(&worktree)).unwrap_err();
    assert!(
        error
            .to_string()
            .contains(".pidevops/status-a.json was refused: it is a FIFO"),
        "{error}"
    );
}

#[test]
fn a_socket_is_refused() {
    let s = scene();
    let _listener =
        std::os::unix::net::UnixListener::bind(s.agent_dir().join("review.json")).unwrap();
    let worktree = s.worktree.clone();
    let error = within(move || read(&worktree, "review.json")).unwrap_err();
    assert!(error.to_string().contains("it is a socket"), "{error}");
}

#[test]
fn a_directory_named_like_the_file_is_refused() {
    let s = scene();
    std::fs::create_dir(s.agent_dir().join("status.json")).unwrap();
    let error = read(&s.worktree, "status.json").unwrap_err();
    assert_eq!(
        error.to_string(),
        ".pidevops/status.json was refused: it is a directory; write a regular file there instead"
    );
}

#[test]
fn a_file_over_the_cap_is_refused_and_one_at_the_cap_is_read() {
    let s = scene();
    s.write("status.json", &vec![b' '; MAX]);
    assert_eq!(
        read(&s.worktree, "status.json").unwrap().unwrap().len(),
        MAX
    );
    s.write("status.json", &vec![b' '; MAX + 1]);
    let error = read(&s.worktree, "status.json").unwrap_err();
    assert_eq!(
        error.to_string(),
        ".pidevops/status.json was refused: it is larger than 1024 bytes"
    );
}

#[test]
fn a_huge_file_is_refused_without_being_read() {
    let s = scene();
    // Sparse: 64 GiB that take no disk. Reading it would take minutes and all memory; refusing it takes a stat.
    let file = std::fs::File::create(s.agent_dir().join("review.json")).unwrap();
    file.set_len(64 << 30).unwrap();
    let worktree = s.worktree.clone();
    let error = within(move || read_review(&worktree)).unwrap_err();
    assert!(matches!(error, AgentFileError::TooLarge { .. }), "{error}");
}

#[test]
fn names_that_could_leave_the_directory_are_a_programmer_error() {
    let s = scene();
    for name in [
        "",
        ".",
        "..",
        "../status.json",
        "a/b",
        "/etc/passwd",
        "x..y",
        "a\0b",
    ] {
        let error = read(&s.worktree, name).unwrap_err();
        assert!(
            matches!(error, AgentFileError::Name { .. }),
            "{name:?}: {error}"
        );
    }
    assert!(read(&s.worktree, &"a".repeat(256)).is_err());
}

#[test]
fn the_listing_names_the_status_files_sorted_and_nothing_else() {
    let s = scene();
    for name in [
        "status-b.json",
        "status-A_1-2.json",
        "status.json",
        "review.json",
        "status-.json",
        "status-a b.json",
        "status-x.json.bak",
        "status-x.JSON",
        "status-a.b.json",
        "xstatus-a.json",
    ] {
        s.write(name, b"{}");
    }
    s.write(&format!("status-{}.json", "i".repeat(65)), b"{}");
    // A link is listed, so that reading it is refused by name rather than skipped.
    symlink("/etc/passwd", s.agent_dir().join("status-link.json")).unwrap();
    assert_eq!(
        agent_files(&s.worktree).unwrap(),
        ["status-A_1-2.json", "status-b.json", "status-link.json"]
    );
    let error = read_status(&s.worktree).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with(".pidevops/status-link.json was refused: it is a symbolic link"),
        "{error}"
    );
}

#[test]
fn a_flood_of_files_is_refused_not_listed() {
    let s = scene();
    for i in 0..=MAX_STATUS_FILES {
        s.write(&format!("status-{i}.json"), b"{}");
    }
    let error = agent_files(&s.worktree).unwrap_err();
    assert_eq!(
        error.to_string(),
        ".pidevops/ was refused: it holds more than 16 status-<id>.json files"
    );
    let s = scene();
    for i in 0..MAX_DIR_ENTRIES {
        s.write(&format!("junk-{i}"), b"");
    }
    assert!(matches!(
        agent_files(&s.worktree),
        Err(AgentFileError::TooMany {
            what: "entries",
            ..
        })
    ));
}

#[test]
fn the_status_files_are_read_parsed_and_combined() {
    let s = scene();
    s.write("status.json", br#"{"resolved": true, "summary": "done"}"#);
    s.write(
        "status-7.json",
        br#"{"unresolved_files": ["src/a.rs"], "needs_human": true}"#,
    );
    let status = read_status(&s.worktree).unwrap().unwrap();
    assert!(status.needs_human());
    assert_eq!(status.unresolved_files(), ["src/a.rs"]);
    assert_eq!(status.resolved(), Some(false));
    // Only a status-<id>.json, no status.json: that file is the verdict.
    std::fs::remove_file(s.agent_dir().join("status.json")).unwrap();
    let status = read_status(&s.worktree).unwrap().unwrap();
    assert_eq!(status.summary(), None);
    assert!(status.needs_human());
}

#[test]
fn one_invalid_status_file_refuses_the_verdict_naming_it() {
    let s = scene();
    s.write("status.json", br#"{"resolved": true}"#);
    s.write("status-2.json", br#"{"needs_human": "yes"}"#);
    let error = read_status(&s.worktree).unwrap_err();
    assert_eq!(
        error.to_string(),
        ".pidevops/status-2.json: `needs_human` must be true or false, not a string"
    );
}

#[test]
fn a_review_and_a_spec_are_read_and_parsed() {
    let s = scene();
    s.write(
        "review.json",
        br#"{"verdict": "approve", "summary": "good"}"#,
    );
    s.write(
        "spec.json",
        br#"{"task": "Add a route", "done_when": "it answers"}"#,
    );
    assert_eq!(read_review(&s.worktree).unwrap().unwrap().summary(), "good");
    assert_eq!(
        read_spec(&s.worktree).unwrap().unwrap().task(),
        "Add a route"
    );
    s.write("review.json", br#"{"verdict": "maybe"}"#);
    assert!(matches!(
        read_review(&s.worktree),
        Err(AgentFileError::Invalid(_))
    ));
}

#[test]
fn removing_the_directory_takes_everything_in_it_and_nothing_outside() {
    let s = scene();
    s.write("status.json", b"{}");
    std::fs::create_dir_all(s.agent_dir().join("deep/er")).unwrap();
    symlink(&s.outside, s.agent_dir().join("deep/to-outside")).unwrap();
    symlink(
        s.outside.join("secret.json"),
        s.agent_dir().join("secret-link"),
    )
    .unwrap();
    nix::unistd::mkfifo(&s.agent_dir().join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
    remove_agent_dir(&s.worktree).unwrap();
    assert!(std::fs::symlink_metadata(s.agent_dir()).is_err());
    assert!(
        s.outside.join("secret.json").exists(),
        "nothing outside removed"
    );
    remove_agent_dir(&s.worktree).unwrap();
}

#[test]
fn removing_a_pidevops_link_removes_the_link_not_its_target() {
    let s = scene();
    std::fs::remove_dir(s.agent_dir()).unwrap();
    symlink(&s.outside, s.agent_dir()).unwrap();
    remove_agent_dir(&s.worktree).unwrap();
    assert!(std::fs::symlink_metadata(s.agent_dir()).is_err());
    assert!(s.outside.join("secret.json").exists());
    std::fs::write(s.agent_dir(), b"a file").unwrap();
    remove_agent_dir(&s.worktree).unwrap();
    assert!(std::fs::symlink_metadata(s.agent_dir()).is_err());
}

#[test]
fn removing_a_directory_the_agent_locked_still_works() {
    use std::os::unix::fs::PermissionsExt;
    let s = scene();
    let locked = s.agent_dir().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::write(locked.join("f"), b"x").unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    std::fs::set_permissions(s.agent_dir(), std::fs::Permissions::from_mode(0o500)).unwrap();
    remove_agent_dir(&s.worktree).unwrap();
    assert!(std::fs::symlink_metadata(s.agent_dir()).is_err());
}

#[test]
fn a_question_is_read_trimmed_and_cut_to_a_reason_with_a_marker() {
    let s = scene();
    assert_eq!(
        read_question(&s.worktree).unwrap(),
        None,
        "no file, no question"
    );
    s.write("question.md", b"\n  Which currency do refunds use?\n\n");
    let question = read_question(&s.worktree).unwrap().unwrap();
    assert_eq!(question.reason().as_str(), "Which currency do refunds use?");
    let long = "why? ".repeat(1_000);
    s.write("question.md", long.as_bytes());
    let cut = read_question(&s.worktree).unwrap().unwrap();
    let text = cut.reason().as_str();
    assert!(text.chars().count() <= crate::tasks::Reason::MAX_CHARS);
    assert!(text.ends_with(AgentQuestion::CUT_MARKER), "{text}");
}

#[test]
fn an_empty_binary_oversized_or_linked_question_is_refused() {
    let s = scene();
    s.write("question.md", b"  \n\t ");
    assert!(matches!(
        read_question(&s.worktree),
        Err(AgentFileError::Invalid(_))
    ));
    s.write("question.md", &[0xff, 0xfe, b'?']);
    let error = read_question(&s.worktree).unwrap_err().to_string();
    assert!(error.contains("not UTF-8"), "{error}");
    s.write("question.md", &vec![b'a'; AgentQuestion::MAX_BYTES + 1]);
    assert!(matches!(
        read_question(&s.worktree),
        Err(AgentFileError::TooLarge { .. })
    ));
    std::fs::remove_file(s.agent_dir().join("question.md")).unwrap();
    symlink(
        s.outside.join("secret.json"),
        s.agent_dir().join("question.md"),
    )
    .unwrap();
    assert!(matches!(
        read_question(&s.worktree),
        Err(AgentFileError::NotRegular { .. })
    ));
}
