//! What an attempt's changes are held to before a push, beyond its scope's globs: paths that configure agents and
//! hooks ([`PROTECTED`]), symbolic links (by where they end up) and gitlinks (submodule entries). Pure: the caller
//! reads the changes from git's objects of the attempt's commit (modes 120000 and 160000, a link's target from
//! its blob, the commit's other links for a chain: [`Links`]), never from the worktree or the agent's word.
//!
//! The rules (`docs/plans.md`, "Where a scope is enforced"):
//! - a protected path is refused unless the task's scope **names** it ([`Scope::names`]), whatever the scope
//!   policy and whether or not the task has a scope: hooks and CLI settings run code on whoever checks the branch
//!   out next (a reviewer, a later agent, CI with the repository's secrets). A plan's item, whose scope a planner
//!   agent wrote, names one only where the repository lets plans name it ([`Author::Planner`]);
//! - a symbolic link is followed to its end ([`links::resolve`]: chains, linked directories, `..`, at most
//!   [`links::MAX_HOPS`] links); one that leaves the repository, loops or never ends is refused; one that ends at a
//!   protected path is refused unless the scope names that path; for a scoped task, one that ends outside the
//!   scope's globs is outside the scope;
//! - a gitlink is refused unless the scope names its path.

pub mod links;

pub use links::{Links, Resolution};

use super::scope::Scope;
pub use crate::tasks::agent_config::ConfigPath as Protected;

/// Hook, CI and editor configuration: what git, CI or an editor runs on whoever checks the branch out.
pub const HOOKS_AND_CI: &[Protected] = &[
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

/// Every protected path: the agent CLIs' project configuration (`tasks::agent_config::PATHS`, the one list of
/// it, also what is set aside before a reviewer, planner or triage run) and [`HOOKS_AND_CI`]. Matched at any depth
/// (a CLI started in a subdirectory reads its own, and a vendored copy is just as live once checked out there). A
/// directory entry covers itself (a link or a file in its place) and everything beneath it; a file entry the file.
pub const PROTECTED: [&[Protected]; 2] = [crate::tasks::agent_config::PATHS, HOOKS_AND_CI];

/// Every entry of [`PROTECTED`].
pub fn protected() -> impl Iterator<Item = &'static Protected> {
    PROTECTED.iter().flat_map(|list| list.iter())
}

/// The part of `path` that makes it protected (`pkg/.claude` for `pkg/.claude/settings.json` and for a link
/// named `pkg/.claude`, `.mcp.json` for itself), or `None` for an ordinary path.
pub fn protected_root(path: &str) -> Option<&str> {
    let segments: Vec<&str> = path.split('/').collect();
    for start in 0..segments.len() {
        for protected in protected() {
            let wanted: Vec<&str> = protected.name().split('/').collect();
            let end = start + wanted.len();
            let fits = if protected.is_dir() {
                end <= segments.len()
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

/// Who wrote a task's scope, which decides what it may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Author<'a> {
    /// A person (a ticket, the API, the CLI): a protected path its scope names is pushed, and called out.
    Person,
    /// A planner agent, a stranger's input (a plan's item): its scope names a protected path only when the path's
    /// protected part is one of these (`[repos."o/n"] plans_may_name`).
    Planner(&'a [String]),
}

impl Author<'_> {
    /// Whether a scope of this author's may name the protected part `root` (`pkg/.claude`).
    pub fn may_name(&self, root: &str) -> bool {
        match self {
            Author::Person => true,
            Author::Planner(may_name) => may_name.iter().any(|allowed| allowed == root),
        }
    }
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
/// gitlinks are held), written by `author`; `links` are the commit's links, each one a resolution met read (see
/// [`unread`]). Lists come sorted, without repeats.
pub fn judge(scope: Option<&Scope>, author: Author, changes: &[Change], links: &Links) -> Judged {
    let names = |path: &str, root: &str| scope.is_some_and(|s| s.names(path, root));
    let names_protected = |path: &str, root: &str| names(path, root) && author.may_name(root);
    let in_scope = |path: &str| scope.is_none_or(|s| s.matches(path));
    let mut judged = Judged::default();
    for change in changes {
        let path = change.path.as_str();
        if let Some(root) = protected_root(path) {
            if names_protected(path, root) {
                judged.named.push(path.to_owned());
            } else {
                judged.refused.push(format!(
                    "{path} ({})",
                    why_protected(scope, author, path, root)
                ));
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
                let (resolved, through) = match links::resolve(path, target.as_deref(), links) {
                    Resolution::Inside { path, through } => (path, through),
                    Resolution::Refused { why, through } => {
                        judged
                            .refused
                            .push(format!("{path} ({why}{})", chain(&through)));
                        continue;
                    }
                    // The caller reads every link a resolution meets first (`unread`); fail closed if it did not.
                    Resolution::Needs(at) => {
                        judged.refused.push(format!(
                            "{path} (a symbolic link through {at}, whose target was not read)"
                        ));
                        continue;
                    }
                };
                if let Some(root) = protected_root(&resolved) {
                    if !names_protected(&resolved, root) {
                        judged.refused.push(format!(
                            "{path} (a symbolic link to agent or hook configuration: {resolved}{})",
                            chain(&through)
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

/// Why a protected path is refused: named by no scope, or named by a planner's scope that may not name it.
fn why_protected(scope: Option<&Scope>, author: Author, path: &str, root: &str) -> String {
    let named = scope.is_some_and(|s| s.names(path, root));
    if named && !author.may_name(root) {
        format!(
            "agent or hook configuration: a plan's item may not name {root}; the repository's plans_may_name does \
             not list it"
        )
    } else {
        "agent or hook configuration".to_owned()
    }
}

/// `, through b -> c` for a chain's links after the first, or nothing.
fn chain(through: &[String]) -> String {
    const MAX_SHOWN: usize = 5;
    if through.is_empty() {
        return String::new();
    }
    let mut shown = through
        .iter()
        .take(MAX_SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(" -> ");
    if through.len() > MAX_SHOWN {
        shown.push_str(&format!(" -> … ({} links)", through.len()));
    }
    format!(", through {shown}")
}

/// The links that resolving `changes`' links meets whose targets `links` has not read: read them into `links` and
/// ask again, until none is left (at most [`links::MAX_HOPS`] rounds: each round takes every chain a link further).
pub fn unread(changes: &[Change], links: &Links) -> Vec<String> {
    let mut needed: Vec<String> = changes
        .iter()
        .filter_map(|change| match &change.entry {
            Entry::Symlink(target) => {
                match links::resolve(&change.path, target.as_deref(), links) {
                    Resolution::Needs(at) => Some(at),
                    _ => None,
                }
            }
            _ => None,
        })
        .collect();
    needed.sort();
    needed.dedup();
    needed
}

#[cfg(test)]
mod tests;
