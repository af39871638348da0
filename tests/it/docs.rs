//! The documentation stands alone and cannot silently rot: every relative link in README.md and docs/*.md names a
//! file of this repository (and, into a markdown file, one of its headings), the README stays short, and nothing
//! in the repository points at files outside it.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

/// Documents linked before they are written, on another branch: tolerated only while missing, so the entry must go
/// the moment the file arrives.
const AWAITED: &[&str] = &[];

const README_MAX_LINES: usize = 260;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every markdown file under docs/, as paths relative to the repository root.
fn documents() -> Vec<PathBuf> {
    let mut docs = vec![PathBuf::from("README.md")];
    let mut under_docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.expect("a readable docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path| {
            path.strip_prefix(root())
                .expect("under the root")
                .to_path_buf()
        })
        .collect();
    under_docs.sort();
    docs.extend(under_docs);
    docs
}

/// The markdown text outside fenced code blocks, with inline code spans blanked, line by line (1-based numbers).
fn prose_lines(text: &str) -> Vec<(usize, String)> {
    let inline_code = regex::Regex::new(r"`[^`]*`").expect("a valid pattern");
    let mut in_fence = false;
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if !in_fence {
            lines.push((index + 1, inline_code.replace_all(line, "``").into_owned()));
        }
    }
    lines
}

/// `[text](target)` targets that are neither absolute URLs nor mail addresses.
fn relative_links(text: &str) -> Vec<(usize, String)> {
    let link = regex::Regex::new(r"\]\(([^()\s]+)\)").expect("a valid pattern");
    prose_lines(text)
        .into_iter()
        .flat_map(|(number, line)| {
            link.captures_iter(&line)
                .map(|c| (number, c[1].to_owned()))
                .collect::<Vec<_>>()
        })
        .filter(|(_, target)| !target.contains("://") && !target.starts_with("mailto:"))
        .collect()
}

/// GitHub's anchor for a heading: lower case, punctuation dropped (letters, digits, `-`, `_` and spaces kept),
/// spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a markdown document offers, repeated headings numbered as GitHub numbers them.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence || !line.starts_with('#') {
            continue;
        }
        let base = slug(line.trim_start_matches('#'));
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// `a/b/../c` → `a/c`, without touching the file system; `None` when it climbs above the repository root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Normal(part) => parts.push(part),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}

#[test]
fn every_relative_link_in_the_docs_names_a_file_and_heading_of_this_repository() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(root().join(&doc)).expect("a readable document");
        let dir = doc.parent().unwrap_or(Path::new(""));
        for (line, target) in relative_links(&text) {
            checked += 1;
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let resolved = if file.is_empty() {
                Some(doc.clone())
            } else {
                normalize(&dir.join(file))
            };
            let Some(resolved) = resolved else {
                broken.push(format!(
                    "{}:{line}: {target} points outside the repository",
                    doc.display()
                ));
                continue;
            };
            let awaited = AWAITED.iter().any(|a| Path::new(a) == resolved);
            if !root().join(&resolved).exists() {
                if !awaited {
                    broken.push(format!(
                        "{}:{line}: {target}: no file {}",
                        doc.display(),
                        resolved.display()
                    ));
                }
                continue;
            }
            if let Some(anchor) = anchor {
                if resolved.extension().is_some_and(|ext| ext == "md") {
                    let target_text = std::fs::read_to_string(root().join(&resolved))
                        .expect("a readable link target");
                    if !anchors(&target_text).contains(anchor) {
                        broken.push(format!(
                            "{}:{line}: {target}: {} has no heading #{anchor}",
                            doc.display(),
                            resolved.display()
                        ));
                    }
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} links found: is the extraction broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn an_awaited_document_is_no_longer_tolerated_once_it_exists() {
    for awaited in AWAITED {
        assert!(
            !root().join(awaited).exists(),
            "{awaited} exists now: remove it from AWAITED in tests/it/docs.rs so its links are checked like any other"
        );
    }
}

#[test]
fn the_readme_stays_short() {
    let lines = std::fs::read_to_string(root().join("README.md"))
        .expect("README.md")
        .lines()
        .count();
    assert!(
        lines < README_MAX_LINES,
        "README.md has {lines} lines (under {README_MAX_LINES}): move detail into docs/"
    );
}

#[test]
fn nothing_in_the_repository_points_at_files_outside_it() {
    // Spelled in pieces so this file does not match itself.
    let needles = [concat!("../", "shared"), concat!("DESIGN", ".md")];
    let mut hits = Vec::new();
    let mut stack = vec![root()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("a readable directory") {
            let path = entry.expect("a readable entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if !matches!(name, "target" | ".git" | "node_modules" | "data") {
                    stack.push(path);
                }
                continue;
            }
            // Binary files and fixtures that are not UTF-8 cannot hold a reference worth finding.
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            for needle in needles {
                if text.contains(needle) {
                    hits.push(format!(
                        "{} mentions {needle}",
                        path.strip_prefix(root()).unwrap_or(&path).display()
                    ));
                }
            }
        }
    }
    assert!(hits.is_empty(), "{}", hits.join("\n"));
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(
        slug(" Containment: the agent's process"),
        "containment-the-agents-process"
    );
    assert_eq!(slug(" `/health`"), "health");
    assert_eq!(
        slug(" Webhook bodies in memory: 100 unsigned 25 MiB posts at once"),
        "webhook-bodies-in-memory-100-unsigned-25-mib-posts-at-once"
    );
    let numbered = anchors("# A\n## Results\n```\n# not a heading\n```\n## Results\n");
    assert_eq!(
        numbered,
        ["a", "results", "results-1"]
            .map(String::from)
            .into_iter()
            .collect()
    );
    assert_eq!(
        normalize(Path::new("docs/../AGENTS.md")),
        Some(PathBuf::from("AGENTS.md"))
    );
    assert_eq!(normalize(Path::new("../outside.md")), None);
}
