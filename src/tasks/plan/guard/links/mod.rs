//! Where a symbolic link points, followed to its end against the commit's tree: a chain (`a -> b`, `b -> ../x`),
//! a link to a directory and a path through it, `..` after a link (taken from where the link led, as the kernel
//! does), all of it resolved the way a checkout of the commit would resolve it. Pure: the caller fills [`Links`]
//! from git's objects of the commit (which paths are links, then the targets a resolution asks for), never from
//! a worktree.
//!
//! A resolution is refused when it leaves the repository (an absolute target, `..` above the root, into `.git`,
//! the root itself), when a target is no path (not UTF-8, empty, a NUL), and when it follows more than
//! [`MAX_HOPS`] links, which is where a loop ends too. Its work is bounded by the targets it reads: at most
//! `MAX_HOPS` of them, each at most one link blob (4 KiB), each segment looked up once in a tree of the links.

use std::collections::{HashMap, HashSet};
use std::fmt;

/// The most links one resolution follows, the first included (Linux's `MAXSYMLINKS`).
pub const MAX_HOPS: usize = 40;

/// The commit's symbolic links: every path that is one, with its target once read. A path not here is a
/// directory, a file or nothing, never a link. Kept as a tree of segments, so a resolution looks each segment up
/// once, however deep it goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Links {
    root: Node,
    count: usize,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Node {
    children: HashMap<String, Node>,
    /// `Some` when this path is a link.
    target: Option<Target>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    /// A link whose blob (this object id) is not read yet.
    Unread(String),
    /// Read: the target, `None` when it is not UTF-8 or longer than any target.
    Read(Option<String>),
}

impl Links {
    /// The link at `path`, whose target is the blob `object`, not read yet; a target already read is kept.
    pub fn add(&mut self, path: &str, object: &str) {
        let node = node_mut(&mut self.root, path);
        if node.target.is_none() {
            node.target = Some(Target::Unread(object.to_owned()));
            self.count += 1;
        }
    }

    /// The link at `path` and its target, as read (`None`: not UTF-8, or too long to be a target).
    pub fn set_target(&mut self, path: &str, target: Option<String>) {
        let node = node_mut(&mut self.root, path);
        if node.target.is_none() {
            self.count += 1;
        }
        node.target = Some(Target::Read(target));
    }

    /// How many links are known.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The blob of the link at `path` while its target is unread.
    pub fn unread_object(&self, path: &str) -> Option<&str> {
        let mut node = &self.root;
        for segment in path.split('/') {
            node = node.children.get(segment)?;
        }
        match &node.target {
            Some(Target::Unread(object)) => Some(object),
            _ => None,
        }
    }
}

fn node_mut<'a>(root: &'a mut Node, path: &str) -> &'a mut Node {
    let mut node = root;
    for segment in path.split('/') {
        node = node.children.entry(segment.to_owned()).or_default();
    }
    node
}

/// Why a link is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// An absolute target: outside the repository wherever it is checked out.
    Absolute,
    /// `..` above the repository's root.
    AboveRoot,
    /// Into `.git` (in any case): git's own directory, its hooks and config.
    IntoGit,
    /// The repository's root itself, through which `.git` is reached.
    Root,
    /// A target that is no path: not UTF-8, empty, or with a NUL.
    NotAPath,
    /// More than [`MAX_HOPS`] links, coming back to a link already followed: it never ends.
    Loop,
    /// More than [`MAX_HOPS`] links in a row.
    TooLong,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let out = "a symbolic link out of the repository";
        match self {
            Refusal::Absolute => write!(f, "{out}: an absolute target"),
            Refusal::AboveRoot => write!(f, "{out}: .. above its root"),
            Refusal::IntoGit => write!(f, "{out}: into .git"),
            Refusal::Root => write!(f, "{out}: to its root"),
            Refusal::NotAPath => f.write_str("a symbolic link whose target is no path"),
            Refusal::Loop => f.write_str("a loop of symbolic links"),
            Refusal::TooLong => write!(f, "a chain of more than {MAX_HOPS} symbolic links"),
        }
    }
}

/// What a link resolves to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// A path inside the repository with no link in it, and the links followed on the way after the first.
    Inside { path: String, through: Vec<String> },
    /// Refused, and the links followed before it was.
    Refused { why: Refusal, through: Vec<String> },
    /// The link at this path is on the way and its target is not read: read it into [`Links`] and resolve again.
    Needs(String),
}

/// Resolves the link at `link` whose target is `target` (`None`: not UTF-8) against `links`, the commit's other
/// links. The link's own directory holds no link (git stores no path beneath a link), so resolution starts there.
pub fn resolve<'a>(link: &'a str, target: Option<&'a str>, links: &'a Links) -> Resolution {
    let mut through: Vec<String> = Vec::new();
    // The real directories reached so far: each segment with its node in the tree of links, if any.
    let mut dir: Vec<(&'a str, Option<&'a Node>)> = Vec::new();
    let mut at = Some(&links.root);
    let mut segments: Vec<&str> = link.split('/').collect();
    segments.pop();
    for segment in segments {
        at = at.and_then(|n| n.children.get(segment));
        dir.push((segment, at));
    }
    // The segments still to walk, the next one last.
    let mut pending: Vec<&'a str> = Vec::new();
    let mut seen: HashSet<String> = HashSet::from([link.to_owned()]);
    let (mut hops, mut revisited) = (1, false);
    if let Err(why) = push_target(target, &mut pending) {
        return Resolution::Refused { why, through };
    }
    while let Some(segment) = pending.pop() {
        match segment {
            "" | "." => continue,
            ".." => {
                if dir.pop().is_none() {
                    return Resolution::Refused {
                        why: Refusal::AboveRoot,
                        through,
                    };
                }
                continue;
            }
            _ if segment.eq_ignore_ascii_case(".git") => {
                return Resolution::Refused {
                    why: Refusal::IntoGit,
                    through,
                }
            }
            _ => {}
        }
        let parent = dir.last().map_or(Some(&links.root), |(_, node)| *node);
        let node = parent.and_then(|n| n.children.get(segment));
        let Some(target) = node.and_then(|n| n.target.as_ref()) else {
            dir.push((segment, node));
            continue;
        };
        let here = joined(&dir, segment);
        let next = match target {
            Target::Unread(_) => return Resolution::Needs(here),
            Target::Read(next) => next.as_deref(),
        };
        hops += 1;
        revisited |= !seen.insert(here.clone());
        through.push(here);
        if hops > MAX_HOPS {
            let why = if revisited {
                Refusal::Loop
            } else {
                Refusal::TooLong
            };
            return Resolution::Refused { why, through };
        }
        // The link's target is walked from the link's own directory, where `dir` stands.
        if let Err(why) = push_target(next, &mut pending) {
            return Resolution::Refused { why, through };
        }
    }
    if dir.is_empty() {
        return Resolution::Refused {
            why: Refusal::Root,
            through,
        };
    }
    let path = dir.iter().map(|(s, _)| *s).collect::<Vec<_>>().join("/");
    Resolution::Inside { path, through }
}

/// Puts a target's segments on the stack, its first segment last.
fn push_target<'a>(target: Option<&'a str>, pending: &mut Vec<&'a str>) -> Result<(), Refusal> {
    let target = target.ok_or(Refusal::NotAPath)?;
    if target.is_empty() || target.contains('\0') {
        return Err(Refusal::NotAPath);
    }
    if target.starts_with('/') {
        return Err(Refusal::Absolute);
    }
    pending.extend(target.split('/').rev());
    Ok(())
}

/// The path of `dir` and then `segment`.
fn joined(dir: &[(&str, Option<&Node>)], segment: &str) -> String {
    let mut path = String::new();
    for (s, _) in dir {
        path.push_str(s);
        path.push('/');
    }
    path.push_str(segment);
    path
}

#[cfg(test)]
mod tests;
