use std::path::Path;

use super::*;

const ID: &str = "0f8b6a3e-4c1d-4e2a-9b7c-5d6e7f8a9b0c";

fn id() -> Uuid {
    Uuid::parse_str(ID).unwrap()
}

fn args(argv: &[&str]) -> Vec<String> {
    argv.iter().map(|a| (*a).to_owned()).collect()
}

fn preset(name: &str) -> Vec<String> {
    let preset = crate::config::presets::PRESETS
        .iter()
        .find(|p| p.name == name)
        .unwrap();
    args(preset.command)
}

/// A Claude Code home with one transcript for `cwd`, its last line half written.
fn claude_home(home: &Path, cwd: &Path) -> PathBuf {
    let dir = home.join("projects").join(claude_project(cwd).unwrap());
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{ID}.jsonl"));
    std::fs::write(
        &file,
        "{\"type\":\"user\",\"n\":1}\n{\"type\":\"assistant\",\"n\":2}\n{\"type\":\"us",
    )
    .unwrap();
    file
}

#[test]
fn the_presets_keep_sessions_where_their_cli_can_resume_one() {
    let kept: Vec<(&str, Option<SessionStore>)> = crate::config::presets::PRESETS
        .iter()
        .map(|p| (p.name, p.session))
        .collect();
    assert_eq!(
        kept,
        [
            ("claude", Some(SessionStore::Claude)),
            ("pi", None),
            ("opencode", None),
            ("codex", Some(SessionStore::Codex)),
        ]
    );
    assert_eq!(home_var(SessionStore::Claude), "CLAUDE_CONFIG_DIR");
    assert_eq!(home_var(SessionStore::Codex), "CODEX_HOME");
}

#[test]
fn claude_resumes_with_its_flag_after_the_program() {
    let argv = resume_argv(SessionStore::Claude, preset("claude"), id()).unwrap();
    assert_eq!(argv[..3], args(&["claude", "--resume", ID])[..]);
    assert_eq!(argv.len(), preset("claude").len() + 2);
    assert_eq!(argv[3..], preset("claude")[1..]);
}

#[test]
fn codex_resumes_as_exec_resume_with_the_id_before_the_stdin_prompt() {
    let argv = resume_argv(SessionStore::Codex, preset("codex"), id()).unwrap();
    let mut expected = preset("codex");
    expected.insert(2, "resume".to_owned());
    expected.insert(expected.len() - 1, ID.to_owned());
    assert_eq!(argv, expected);
    assert_eq!(argv[..3], args(&["codex", "exec", "resume"])[..]);
    assert_eq!(argv[argv.len() - 2..], args(&[ID, "-"])[..]);
}

#[test]
fn a_command_that_names_a_session_already_or_is_shaped_otherwise_is_not_resumed() {
    for argv in [
        args(&["claude", "-p", "--resume", "x"]),
        args(&["claude", "-p", "--continue"]),
        args(&["claude", "-p", "--session-id", ID]),
    ] {
        assert!(
            matches!(
                resume_argv(SessionStore::Claude, argv.clone(), id()),
                Err(SessionError::Command(_))
            ),
            "{argv:?}"
        );
    }
    assert!(resume_argv(SessionStore::Claude, Vec::new(), id()).is_err());
    for argv in [
        args(&["codex", "exec", "--json", "{prompt}"]),
        args(&["codex", "--json", "-"]),
        args(&["codex", "exec", "resume", "--last", "-"]),
    ] {
        assert!(
            matches!(
                resume_argv(SessionStore::Codex, argv.clone(), id()),
                Err(SessionError::Command(_))
            ),
            "{argv:?}"
        );
    }
}

#[test]
fn claude_spells_its_project_directory_from_the_working_directory() {
    assert_eq!(
        claude_project(Path::new("/tmp/ws_a/runs/T-1/0190/worktree")).unwrap(),
        "-tmp-ws-a-runs-T-1-0190-worktree"
    );
    let long = format!("/{}", "a".repeat(200));
    assert_eq!(
        claude_project(Path::new(&long)),
        Err(SessionError::PathTooLong)
    );
}

#[test]
fn claudes_transcript_is_found_kept_to_its_whole_lines_and_put_back_for_another_worktree() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let cwd = dir.path().join("runs/T-1/a/worktree");
    claude_home(&home, &cwd);
    // What else the agent left in the CLI's home is never part of it.
    std::fs::write(home.join("settings.json"), r#"{"hooks":{"Stop":[]}}"#).unwrap();
    let found = find(SessionStore::Claude, &home, &cwd).unwrap().unwrap();
    assert_eq!(found.id, id());
    assert_eq!(
        found.bytes,
        b"{\"type\":\"user\",\"n\":1}\n{\"type\":\"assistant\",\"n\":2}\n"
    );

    let root = dir.path().join("root");
    let task: TaskId = "T-1".parse().unwrap();
    keep(&root, task, "c1", &found).unwrap();
    assert_eq!(kept(&root, task, "c1").unwrap().as_ref(), Some(&found));
    // Newer checkpoints' sessions replace the oldest: three are kept.
    for commit in ["c2", "c3", "c4"] {
        std::thread::sleep(std::time::Duration::from_millis(20));
        keep(&root, task, commit, &found).unwrap();
    }
    assert_eq!(kept(&root, task, "c1").unwrap(), None);
    assert!(kept(&root, task, "c4").unwrap().is_some());
    let mut left: Vec<_> = std::fs::read_dir(tasks_dir(&root, task))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["c2", "c3", "c4"]);

    let fresh = dir.path().join("fresh");
    let other = dir.path().join("runs/T-1/b/worktree");
    put_back(SessionStore::Claude, &found, &fresh, &other).unwrap();
    let put = fresh
        .join("projects")
        .join(claude_project(&other).unwrap())
        .join(format!("{ID}.jsonl"));
    assert_eq!(std::fs::read(&put).unwrap(), found.bytes);
    assert_eq!(
        std::fs::read_dir(&fresh)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect::<Vec<_>>(),
        ["projects"],
        "nothing but the transcript"
    );
    assert_eq!(
        find(SessionStore::Claude, &fresh, &other).unwrap(),
        Some(found)
    );
}

#[test]
fn no_session_is_none_and_names_the_cli_does_not_use_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().join("w");
    assert_eq!(
        find(SessionStore::Claude, &dir.path().join("none"), &cwd),
        Ok(None)
    );
    let home = dir.path().join("home");
    let project = home.join("projects").join(claude_project(&cwd).unwrap());
    std::fs::create_dir_all(&project).unwrap();
    assert_eq!(find(SessionStore::Claude, &home, &cwd), Ok(None));
    for name in [
        "notes.jsonl",
        "0F8B6A3E-4C1D-4E2A-9B7C-5D6E7F8A9B0C.jsonl",
        "x.json",
    ] {
        std::fs::write(project.join(name), "{}\n").unwrap();
    }
    assert_eq!(find(SessionStore::Claude, &home, &cwd), Ok(None));
    // A transcript with nothing whole in it yet is no session.
    std::fs::write(project.join(format!("{ID}.jsonl")), "{\"half\":").unwrap();
    assert_eq!(find(SessionStore::Claude, &home, &cwd), Ok(None));
}

#[test]
fn a_link_anywhere_on_the_way_is_refused_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().join("w");
    // Another task's session, which a planted link would make pidevops copy into this task's next run.
    let elsewhere = dir.path().join("elsewhere");
    claude_home(&elsewhere, &cwd);

    let home = dir.path().join("linked-projects");
    std::fs::create_dir_all(&home).unwrap();
    std::os::unix::fs::symlink(elsewhere.join("projects"), home.join("projects")).unwrap();
    assert!(matches!(
        find(SessionStore::Claude, &home, &cwd),
        Err(SessionError::NotDirectory { .. })
    ));

    let home = dir.path().join("linked-project");
    std::fs::create_dir_all(home.join("projects")).unwrap();
    std::os::unix::fs::symlink(
        elsewhere
            .join("projects")
            .join(claude_project(&cwd).unwrap()),
        home.join("projects").join(claude_project(&cwd).unwrap()),
    )
    .unwrap();
    assert!(matches!(
        find(SessionStore::Claude, &home, &cwd),
        Err(SessionError::NotDirectory { .. })
    ));

    let home = dir.path().join("linked-file");
    let project = home.join("projects").join(claude_project(&cwd).unwrap());
    std::fs::create_dir_all(&project).unwrap();
    std::os::unix::fs::symlink(
        elsewhere
            .join("projects")
            .join(claude_project(&cwd).unwrap())
            .join(format!("{ID}.jsonl")),
        project.join(format!("{ID}.jsonl")),
    )
    .unwrap();
    assert!(matches!(
        find(SessionStore::Claude, &home, &cwd),
        Err(SessionError::NotRegular { .. })
    ));
}

#[test]
fn a_fifo_an_oversized_file_and_a_line_that_is_not_json_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().join("w");
    let home = dir.path().join("home");
    let file = claude_home(&home, &cwd);

    std::fs::remove_file(&file).unwrap();
    nix::unistd::mkfifo(&file, Mode::from_bits_truncate(0o600)).unwrap();
    // Opened without blocking (no writer ever comes), refused from what it is.
    assert!(matches!(
        find(SessionStore::Claude, &home, &cwd),
        Err(SessionError::NotRegular { .. })
    ));

    std::fs::remove_file(&file).unwrap();
    let big = File::create(&file).unwrap();
    big.set_len(MAX_TRANSCRIPT_BYTES as u64 + 1).unwrap();
    assert!(matches!(
        find(SessionStore::Claude, &home, &cwd),
        Err(SessionError::TooLarge { .. })
    ));

    std::fs::write(&file, "{\"ok\":1}\nrm -rf /\n{\"ok\":2}\n").unwrap();
    let refused = find(SessionStore::Claude, &home, &cwd).unwrap_err();
    assert!(
        matches!(refused, SessionError::NotJson { line: 2, .. }),
        "{refused}"
    );
    assert!(
        refused.to_string().contains(&format!("{ID}.jsonl")),
        "{refused}"
    );
}

#[test]
fn codexs_newest_rollout_is_found_and_put_back_at_its_own_path() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("codex");
    let older = home.join("sessions/2026/12/06");
    let newer = home.join("sessions/2026/12/07");
    std::fs::create_dir_all(&older).unwrap();
    std::fs::create_dir_all(&newer).unwrap();
    let other = "11111111-2222-4333-8444-555555555555";
    std::fs::write(
        older.join(format!("rollout-2026-12-06T10-00-00-{other}.jsonl")),
        "{\"old\":true}\n",
    )
    .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let name = format!("rollout-2026-12-07T09-30-01-{ID}.jsonl");
    std::fs::write(newer.join(&name), "{\"type\":\"session_meta\"}\n").unwrap();
    // Not Codex's: skipped whatever their content.
    std::fs::write(newer.join("config.toml"), "model = \"x\"\n").unwrap();
    std::fs::create_dir_all(home.join("sessions/latest")).unwrap();

    let found = find(SessionStore::Codex, &home, Path::new("/w"))
        .unwrap()
        .unwrap();
    assert_eq!(found.id, id());
    assert_eq!(found.name, format!("sessions/2026/12/07/{name}"));
    let fresh = dir.path().join("fresh");
    put_back(SessionStore::Codex, &found, &fresh, Path::new("/other")).unwrap();
    assert_eq!(std::fs::read(fresh.join(&found.name)).unwrap(), found.bytes);

    // A kept record naming anything else is not written anywhere.
    for name in [
        format!("sessions/2026/12/07/../../../../x-{ID}.jsonl"),
        format!("config.toml/{ID}"),
        format!("sessions/2026/12/07/rollout-2026-12-07T09-30-01-{other}.jsonl"),
    ] {
        let forged = Transcript {
            name,
            ..found.clone()
        };
        assert!(put_back(SessionStore::Codex, &forged, &fresh, Path::new("/w")).is_err());
    }
}

#[test]
fn codex_names_are_read_strictly() {
    assert_eq!(
        codex_id(&format!("rollout-2026-12-07T09-30-01-{ID}.jsonl")),
        Some(id())
    );
    for name in [
        format!("rollout-{ID}.jsonl"),
        format!("rollout-2026 x-{ID}.jsonl"),
        format!("rollout-2026-12-07T09-30-01-{ID}.json"),
        format!("x-2026-12-07T09-30-01-{ID}.jsonl"),
        "rollout-.jsonl".to_owned(),
    ] {
        assert_eq!(codex_id(&name), None, "{name}");
    }
}

#[test]
fn a_flood_of_dated_directories_is_refused_not_walked() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("codex");
    for month in 0..=MAX_DATED_DIRS {
        std::fs::create_dir_all(home.join(format!("sessions/2026/{:02}/01", month % 100))).unwrap();
        std::fs::create_dir_all(home.join(format!("sessions/{}/01", 2000 + month))).unwrap();
    }
    assert!(matches!(
        find(SessionStore::Codex, &home, Path::new("/w")),
        Err(SessionError::TooMany { .. })
    ));
}
