//! Sizes the tools cannot see: every `.rs` file under `src/` is at most `MAX_LINES` lines (functions are held to
//! 150 lines by clippy's `too_many_lines`, clippy.toml). A file that grows past it is split by topic: tests into
//! sibling files, a binary into a module folder.

use std::path::{Path, PathBuf};

const MAX_LINES: usize = 700;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The files of `src` over `max` lines, with their sizes, largest first.
fn offenders(src: &Path, max: usize) -> Vec<(usize, String)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut over: Vec<(usize, String)> = files
        .iter()
        .map(|f| {
            let lines = std::fs::read_to_string(f).unwrap().lines().count();
            (lines, f.strip_prefix(src).unwrap().display().to_string())
        })
        .filter(|(lines, _)| *lines > max)
        .collect();
    over.sort_by(|a, b| b.cmp(a));
    over
}

#[test]
fn every_source_file_is_at_most_700_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let over = offenders(&src, MAX_LINES);
    assert!(
        over.is_empty(),
        "files over {MAX_LINES} lines (split them by topic):\n{}",
        over.iter()
            .map(|(lines, file)| format!("{lines:>6}  src/{file}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_check_sees_a_long_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("a")).unwrap();
    std::fs::write(dir.path().join("a/long.rs"), "//\n".repeat(MAX_LINES + 1)).unwrap();
    std::fs::write(dir.path().join("short.rs"), "//\n".repeat(MAX_LINES)).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "x\n".repeat(MAX_LINES + 1)).unwrap();
    assert_eq!(
        offenders(dir.path(), MAX_LINES),
        [(MAX_LINES + 1, "a/long.rs".to_owned())]
    );
}

/// One module style: a module with children is `x/mod.rs`, never `x.rs` beside a folder `x/` (the two styles
/// mixed make a reader look in two places). The files named `x.rs` that have a folder `x/` beside them.
fn mixed_style(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut mixed: Vec<String> = files
        .iter()
        .filter(|f| f.with_extension("").is_dir())
        .map(|f| f.strip_prefix(src).unwrap().display().to_string())
        .collect();
    mixed.sort();
    mixed
}

#[test]
fn every_module_with_children_is_a_folder_with_its_mod_rs() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mixed = mixed_style(&src);
    assert!(
        mixed.is_empty(),
        "move each to its folder's mod.rs (git mv x.rs x/mod.rs; its include_str! paths lose one level): {mixed:?}"
    );
}

#[test]
fn the_style_check_sees_a_file_beside_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
    std::fs::write(dir.path().join("a/b.rs"), "mod c;\n").unwrap();
    std::fs::write(dir.path().join("a/b/c.rs"), "\n").unwrap();
    std::fs::create_dir_all(dir.path().join("d")).unwrap();
    std::fs::write(dir.path().join("d/mod.rs"), "\n").unwrap();
    assert_eq!(mixed_style(dir.path()), ["a/b.rs"]);
}
