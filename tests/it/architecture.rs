//! The module graph keeps data flowing one way: a top-level module of `src/` that reaches, through `crate::` paths,
//! back into a module that reaches it closes an import cycle. There is none; a new one fails here, naming the
//! modules and the file that closes it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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

/// The source without its tests: test modules may reach anywhere (they build whole apps).
fn non_test_source(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let name = path.file_name().unwrap().to_string_lossy();
    if name == "tests.rs" || path.components().any(|c| c.as_os_str() == "tests") {
        return String::new();
    }
    match text.find("#[cfg(test)]") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

/// Top-level module -> the top-level modules its non-test code names through `crate::`, with one file each.
fn graph() -> BTreeMap<String, BTreeMap<String, PathBuf>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if ["lib", "main", "bin"].contains(&name.as_str()) {
            continue;
        }
        modules.insert(name, path);
    }
    let mut edges: BTreeMap<String, BTreeMap<String, PathBuf>> = BTreeMap::new();
    for (name, path) in &modules {
        let mut files = Vec::new();
        if path.is_dir() {
            rust_files(path, &mut files);
        } else {
            files.push(path.clone());
        }
        let targets = edges.entry(name.clone()).or_default();
        for file in files {
            let text = non_test_source(&file);
            for (at, _) in text.match_indices("crate::") {
                let rest = &text[at + "crate::".len()..];
                let target: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if target != *name && modules.contains_key(&target) {
                    targets.entry(target).or_insert_with(|| file.clone());
                }
            }
        }
    }
    edges
}

/// A path from `from` to `to`, if there is one.
fn path_between(
    edges: &BTreeMap<String, BTreeMap<String, PathBuf>>,
    from: &str,
    to: &str,
) -> Option<Vec<String>> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![vec![from.to_owned()]];
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap().clone();
        if last == to && path.len() > 1 {
            return Some(path);
        }
        if !seen.insert(last.clone()) {
            continue;
        }
        for next in edges.get(&last).into_iter().flat_map(|t| t.keys()) {
            let mut longer = path.clone();
            longer.push(next.clone());
            stack.push(longer);
        }
    }
    None
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    let edges = graph();
    assert!(edges.len() > 10, "the scan found the modules: {edges:?}");
    let mut cycles = Vec::new();
    for (from, targets) in &edges {
        for (to, file) in targets {
            if let Some(back) = path_between(&edges, to, from) {
                cycles.push(format!(
                    "{from} -> {to} (in {}) and back: {}",
                    file.strip_prefix(env!("CARGO_MANIFEST_DIR"))
                        .unwrap_or(file)
                        .display(),
                    back.join(" -> ")
                ));
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "import cycles (data flows one way: ingress -> log -> projectors/relay -> policies -> effects):\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_scan_sees_a_cycle_when_there_is_one() {
    let mut edges = graph();
    // Pretend the log imported the HTTP surface: the one-way flow would be broken, and the test must say so.
    assert!(path_between(&edges, "eventlog", "http").is_none());
    edges
        .entry("eventlog".to_owned())
        .or_default()
        .insert("http".to_owned(), PathBuf::from("src/eventlog/mod.rs"));
    assert!(path_between(&edges, "http", "eventlog").is_some());
    assert!(path_between(&edges, "eventlog", "http").is_some());
}
