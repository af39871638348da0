//! What an attempt's changes are held to before a push, beyond its scope's globs: paths that configure agents and
//! hooks ([`PROTECTED`]), symbolic links (by where they point) and gitlinks (submodule entries). Pure: the caller
//! reads the changes from git's objects of the attempt's commit (modes 120000 and 160000, a link's target from
//! its blob), never from the worktree or the agent's word.
//!
//! The rules (`docs/plans.md`, "Where a scope is enforced"):
//! - a protected path is refused unless the task's scope **names** it ([`Scope::names`]), whatever the scope
//!   policy and whether or not the task has a scope: hooks and CLI settings run code on whoever checks the branch
//!   out next (a reviewer, a later agent, CI with the repository's secrets);
//! - a symbolic link whose target, resolved from the link's directory, leaves the repository (absolute, `..`
//!   above the root, into `.git`) is refused; one that points at a protected path is refused unless the scope
//!   names that path; for a scoped task, one that points outside the scope's globs is outside the scope;
//! - a gitlink is refused unless the scope names its path.

use super::scope::Scope;

/// Configuration that agent CLIs, git hooks, editors or CI load and act on, matched at any depth (a CLI started in
/// a subdirectory reads its own, and a vendored copy is just as live once checked out there). A directory entry
/// covers everything beneath it; a file entry the file itself.
pub const PROTECTED: &[Protected] = &[
    // Claude Code: settings and hooks, commands, sub-agents; MCP servers.
    Protected::Dir(".claude"),
    Protected::File(".mcp.json"),
    // Codex: project config.
    Protected::Dir(".codex"),
    // OpenCode: config, plugins, agents, commands.
    Protected::Dir(".opencode"),
    Protected::File("opencode.json"),
    Protected::File("opencode.jsonc"),
    // pi: project settings and extensions.
    Protected::Dir(".pi"),
    // Git hooks and their managers; submodule URLs.
    Protected::Dir(".githooks"),
    Protected::Dir(".husky"),
    Protected::File(".pre-commit-config.yaml"),
    Protected::File("lefthook.yml"),
    Protected::File(".gitmodules"),
    // CI, which runs with the repository's secrets.
    Protected::Dir(".github/workflows"),
    Protected::Dir(".github/actions"),
    Protected::File(".gitlab-ci.yml"),
    Protected::Dir(".circleci"),
    // Editors and shells that run what a project tells them to.
    Protected::File(".vscode/settings.json"),
    Protected::File(".vscode/tasks.json"),
    Protected::Dir(".devcontainer"),
    Protected::File(".envrc"),
];

/// One protected name: a directory (with everything beneath it) or a file, as one or two path segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protected {
    Dir(&'static str),
    File(&'static str),
}

/// The part of `path` that makes it protected (`pkg/.claude` for `pkg/.claude/settings.json`, `.mcp.json` for
/// itself), or `None` for an ordinary path.
pub fn protected_root(path: &str) -> Option<&str> {
    let segments: Vec<&str> = path.split('/').collect();
    for (start, _) in segments.iter().enumerate() {
        for protected in PROTECTED {
            let (name, is_dir) = match protected {
                Protected::Dir(name) => (name, true),
                Protected::File(name) => (name, false),
            };
            let wanted: Vec<&str> = name.split('/').collect();
            let end = start + wanted.len();
            let fits = if is_dir {
                end < segments.len()
            } else {
                end == segments.len()
            };
            if fits && segments[start..end] == wanted[..] {
                let len = segments[..end].iter().map(|s| s.len()).sum::<usize>() + end - 1;
                return Some(&path[..len]);
            }
        }
    }
    None
}

/// What one changed path is in the attempt's commit (by its git mode).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A file (or a deleted path).
    File,
    /// A symbolic link (mode 120000) and its target as stored; `None` when the target is not UTF-8.
    Symlink(Option<String>),
    /// A gitlink: a submodule's commit (mode 160000).
    Gitlink,
}

/// A changed path and what it is in the attempt's commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub path: String,
    pub entry: Entry,
}

impl Change {
    pub fn file(path: &str) -> Change {
        Change {
            path: path.to_owned(),
            entry: Entry::File,
        }
    }
}

/// The verdict on an attempt's changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Judged {
    /// Outside the scope's globs (a path, or `link (links to target)`): refused or named by the scope policy.
    pub outside: Vec<String>,
    /// Never pushed unless a scope names them: each path with why.
    pub refused: Vec<String>,
    /// Protected paths the scope names, pushed: the pull request calls them out.
    pub named: Vec<String>,
}

/// Judges `changes` against `scope` (`None`: the task has no enforceable scope, so only [`PROTECTED`], links and
/// gitlinks are held). Lists come sorted, without repeats.
pub fn judge(scope: Option<&Scope>, changes: &[Change]) -> Judged {
    let names = |path: &str, root: &str| scope.is_some_and(|s| s.names(path, root));
    let in_scope = |path: &str| scope.is_none_or(|s| s.matches(path));
    let mut judged = Judged::default();
    for change in changes {
        let path = change.path.as_str();
        if let Some(root) = protected_root(path) {
            if names(path, root) {
                judged.named.push(path.to_owned());
            } else {
                judged
                    .refused
                    .push(format!("{path} (agent or hook configuration)"));
            }
        }
        if !in_scope(path) {
            judged.outside.push(path.to_owned());
        }
        match &change.entry {
            Entry::File => {}
            Entry::Gitlink => {
                if !names(path, path) {
                    judged
                        .refused
                        .push(format!("{path} (a gitlink: a submodule's commit)"));
                }
            }
            Entry::Symlink(target) => {
                let resolved = target.as_deref().and_then(|t| resolve(path, t));
                let Some(resolved) = resolved else {
                    judged
                        .refused
                        .push(format!("{path} (a symbolic link out of the repository)"));
                    continue;
                };
                if let Some(root) = protected_root(&resolved) {
                    if !names(&resolved, root) {
                        judged.refused.push(format!(
                            "{path} (a symbolic link to agent or hook configuration: {resolved})"
                        ));
                    }
                }
                if !in_scope(&resolved) {
                    judged.outside.push(format!("{path} (links to {resolved})"));
                }
            }
        }
    }
    for list in [&mut judged.outside, &mut judged.refused, &mut judged.named] {
        list.sort();
        list.dedup();
    }
    judged
}

/// Where a link at `link` with `target` points, as a repository-relative path: the target joined to the link's
/// directory, `.` and empty segments dropped, `..` taking one back. `None` when it leaves the repository: an
/// absolute target, `..` above the root, the root itself, or a path into `.git`.
pub fn resolve(link: &str, target: &str) -> Option<String> {
    if target.starts_with('/') || target.contains('\0') {
        return None;
    }
    let mut segments: Vec<&str> = link.split('/').collect();
    segments.pop();
    for segment in target.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop()?;
            }
            other => segments.push(other),
        }
    }
    if segments.is_empty() || segments.contains(&".git") {
        return None;
    }
    Some(segments.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::plan::ScopeText;

    fn scope(text: &str) -> Scope {
        match Scope::parse(text) {
            ScopeText::Paths(scope) => scope,
            other => panic!("{text}: {other:?}"),
        }
    }

    fn link(path: &str, target: &str) -> Change {
        Change {
            path: path.to_owned(),
            entry: Entry::Symlink(Some(target.to_owned())),
        }
    }

    #[test]
    fn protected_paths_are_found_at_any_depth_by_whole_segments() {
        for (path, root) in [
            (".claude/settings.json", Some(".claude")),
            ("pkg/.claude/hooks/x.sh", Some("pkg/.claude")),
            (".mcp.json", Some(".mcp.json")),
            ("web/.mcp.json", Some("web/.mcp.json")),
            (".github/workflows/planted.yml", Some(".github/workflows")),
            (".github/CODEOWNERS", None),
            (".github/workflows", None),
            (".vscode/settings.json", Some(".vscode/settings.json")),
            (".vscode/extensions.json", None),
            ("opencode.jsonc", Some("opencode.jsonc")),
            ("docs/.claude.md", None),
            (".claudex/a", None),
            (".husky/pre-commit", Some(".husky")),
            ("src/main.rs", None),
        ] {
            assert_eq!(protected_root(path), root, "{path}");
        }
    }

    #[test]
    fn a_protected_path_is_refused_unless_the_scope_names_it() {
        let changes = [
            Change::file(".claude/settings.json"),
            Change::file("src/a.rs"),
        ];
        for scope_text in ["**", "src/**, .c*/**", "*.json, src/**"] {
            let judged = judge(Some(&scope(scope_text)), &changes);
            assert_eq!(
                judged.refused,
                [".claude/settings.json (agent or hook configuration)"],
                "{scope_text}"
            );
        }
        let unscoped = judge(None, &changes);
        assert_eq!(unscoped.refused.len(), 1);
        assert!(unscoped.outside.is_empty());
        for naming in [
            ".claude/**, src/**",
            ".claude, src",
            ".claude/settings.json, src/*.rs",
        ] {
            let judged = judge(Some(&scope(naming)), &changes);
            assert!(judged.refused.is_empty(), "{naming}: {judged:?}");
            assert_eq!(judged.named, [".claude/settings.json"], "{naming}");
            assert!(judged.outside.is_empty(), "{naming}");
        }
    }

    #[test]
    fn links_resolve_from_their_own_directory() {
        assert_eq!(resolve("a/b/l", "c").as_deref(), Some("a/b/c"));
        assert_eq!(resolve("a/b/l", "../c/./d").as_deref(), Some("a/c/d"));
        assert_eq!(resolve("a/b/l", "../../c").as_deref(), Some("c"));
        assert_eq!(resolve("l", "x//y/").as_deref(), Some("x/y"));
        for (link, target) in [
            ("a/b/l", "../../../etc/passwd"),
            ("a/l", "/etc/passwd"),
            ("l", ".."),
            ("l", "."),
            ("a/l", "../.git/config"),
            ("a/l", "x\0y"),
        ] {
            assert_eq!(resolve(link, target), None, "{link} -> {target}");
        }
    }

    #[test]
    fn a_link_out_of_the_repository_or_the_scope_or_to_configuration_is_caught() {
        let api = scope("src/api/**");
        let judged = judge(
            Some(&api),
            &[
                link("src/api/passwd", "../../../etc/passwd"),
                link("src/api/web", "../web/page.ts"),
                link("src/api/ok", "handlers.rs"),
                link("src/api/hooks", "../../.claude/settings.json"),
                Change {
                    path: "src/api/bad".into(),
                    entry: Entry::Symlink(None),
                },
            ],
        );
        assert_eq!(
            judged.refused,
            [
                "src/api/bad (a symbolic link out of the repository)",
                "src/api/hooks (a symbolic link to agent or hook configuration: .claude/settings.json)",
                "src/api/passwd (a symbolic link out of the repository)",
            ]
        );
        assert_eq!(
            judged.outside,
            [
                "src/api/hooks (links to .claude/settings.json)",
                "src/api/web (links to src/web/page.ts)",
            ]
        );
        // Without a scope only the repository's bounds and the protected paths hold.
        let unscoped = judge(None, &[link("l", "../x"), link("docs/l", "../src/x")]);
        assert_eq!(
            unscoped.refused,
            ["l (a symbolic link out of the repository)"]
        );
        assert!(unscoped.outside.is_empty());
    }

    #[test]
    fn a_gitlink_is_refused_unless_the_scope_names_its_path() {
        let gitlink = Change {
            path: "vendor/lib".into(),
            entry: Entry::Gitlink,
        };
        for scope_text in ["vendor/**", "**", "vendor/*"] {
            let judged = judge(Some(&scope(scope_text)), std::slice::from_ref(&gitlink));
            assert_eq!(
                judged.refused,
                ["vendor/lib (a gitlink: a submodule's commit)"],
                "{scope_text}"
            );
        }
        assert_eq!(judge(None, std::slice::from_ref(&gitlink)).refused.len(), 1);
        let named = judge(Some(&scope("vendor/lib")), std::slice::from_ref(&gitlink));
        assert_eq!(named, Judged::default());
    }
}

#[cfg(test)]
mod agrees_with_agent_config {
    /// The CLI configuration a reviewer never loads (`tasks::agent_config::PATHS`) is protected here too: a path
    /// one list knows and the other does not would be set aside but pushed, or refused but loaded.
    #[test]
    fn every_agent_cli_configuration_path_is_protected() {
        for path in crate::tasks::agent_config::PATHS {
            let inside = format!("{path}/settings.json");
            assert!(
                super::protected_root(path).is_some() || super::protected_root(&inside).is_some(),
                "{path} is CLI configuration but not protected"
            );
        }
    }
}
