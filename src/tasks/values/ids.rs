//! Identifiers: tasks, repositories, agent profiles, branches and runs.

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::ValueError;

/// A task's id: `T-42`. Short enough to say aloud, and only `T`, `-` and digits, so it is safe as a path segment
/// and inside a git branch name. The canonical form has no leading zeros, so one number has one spelling.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(try_from = "String", into = "String")]
#[schema(value_type = String, example = "T-42", pattern = "^T-[1-9][0-9]*$")]
pub struct TaskId(NonZeroU64);

/// Every task's events are one stream in the log: `task:T-42`.
pub const TASK_STREAM_PREFIX: &str = "task:";

impl TaskId {
    pub fn new(number: NonZeroU64) -> Self {
        TaskId(number)
    }

    /// The task's stream in the log: `task:T-42`.
    pub fn stream(self) -> String {
        format!("{TASK_STREAM_PREFIX}{self}")
    }

    /// The task a stream belongs to; `None` for any other stream.
    pub fn from_stream(stream: &str) -> Option<Self> {
        stream.strip_prefix(TASK_STREAM_PREFIX)?.parse().ok()
    }

    /// The number after `T-`; ids are allocated by counting, so this is also the allocation order.
    pub fn number(self) -> u64 {
        self.0.get()
    }

    /// The branch a run works on: `pidevops/T-42`.
    pub fn branch(self) -> BranchName {
        BranchName(format!("pidevops/{self}"))
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "T-{}", self.0)
    }
}

impl FromStr for TaskId {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let refuse = || ValueError::TaskId(s.to_owned());
        let digits = s.strip_prefix("T-").ok_or_else(refuse)?;
        // `u64::from_str` alone would accept `+7` and `007`; neither is canonical.
        if digits.is_empty()
            || !digits.bytes().all(|b| b.is_ascii_digit())
            || digits.starts_with('0')
        {
            return Err(refuse());
        }
        let number: u64 = digits.parse().map_err(|_| refuse())?;
        NonZeroU64::new(number).map(TaskId).ok_or_else(refuse)
    }
}

impl TryFrom<String> for TaskId {
    type Error = ValueError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<TaskId> for String {
    fn from(id: TaskId) -> Self {
        id.to_string()
    }
}

/// A repository: GitHub's `owner/name`, or GitLab's `group/subgroup/…/name` (a namespace of up to
/// [`RepoName::MAX_NAMESPACE_DEPTH`] groups). Every `/`-separated segment is checked against the hosts' own
/// character rules and can never climb, hide or split a path (no `..`, no leading `.` or `-`), so the name is safe
/// in URLs, paths under the workspace root and mirror names without escaping. Two names compare (and hash and
/// order) as the hosts compare them, ignoring ASCII case, so `Local/Demo` finds `[repos."local/demo"]` in every
/// map; the spelling is kept for display, and the board stores the configured one (`AllowedRepos::spelling`).
/// GitHub's narrower rules (exactly two segments, an owner of letters, digits and `-`) are
/// [`RepoName::github_parts`]'s: where a name reaches GitHub, that is what is asked.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "String", into = "String")]
#[schema(value_type = String, example = "acme/api")]
pub struct RepoName(String);

impl PartialEq for RepoName {
    fn eq(&self, other: &Self) -> bool {
        self.0.eq_ignore_ascii_case(&other.0)
    }
}

impl Eq for RepoName {}

impl std::hash::Hash for RepoName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for b in self.0.bytes() {
            state.write_u8(b.to_ascii_lowercase());
        }
        state.write_u8(0xff);
    }
}

impl Ord for RepoName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0
            .bytes()
            .map(|b| b.to_ascii_lowercase())
            .cmp(other.0.bytes().map(|b| b.to_ascii_lowercase()))
    }
}

impl PartialOrd for RepoName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// What joins a namespace's groups in one directory name (`group+sub`): a character no segment may hold, so
/// the directory names one namespace and a name's mirror stays two levels under `mirrors/`, as GitHub's.
const NAMESPACE_DIR_JOIN: char = '+';

impl RepoName {
    /// GitLab's limit on nested groups: a project's namespace is at most 20 groups deep.
    pub const MAX_NAMESPACE_DEPTH: usize = 20;

    /// The name in lower case: the key a read model or a map of strings compares by.
    pub fn key(&self) -> String {
        self.0.to_ascii_lowercase()
    }

    /// Everything before the last `/`: GitHub's owner, GitLab's group path (`group/subgroup`).
    pub fn namespace(&self) -> &str {
        self.0
            .rsplit_once('/')
            .map_or("", |(namespace, _)| namespace)
    }

    /// The last segment: the repository's own name.
    pub fn name(&self) -> &str {
        self.0.rsplit_once('/').map_or("", |(_, name)| name)
    }

    /// The `/`-separated segments, each one safe as a path segment.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// The namespace as one directory name (`group+sub`; a GitHub owner as it is), for paths under the workspace
    /// root: `mirrors/<this>/<name>.git`. Never holds `/`, never `.` or `..`.
    pub fn namespace_dir(&self) -> String {
        self.namespace()
            .replace('/', &NAMESPACE_DIR_JOIN.to_string())
    }

    /// The name `namespace_dir` and `name` were made of (gc reads mirrors' directories back), if it is one.
    pub fn from_dirs(namespace_dir: &str, name: &str) -> Option<Self> {
        format!("{}/{name}", namespace_dir.replace(NAMESPACE_DIR_JOIN, "/"))
            .parse()
            .ok()
    }

    /// `(owner, name)` when this is a GitHub repository name: two segments, the owner 1 to 39 of letters,
    /// digits and `-`, not starting with `-`. `None` for a GitLab namespace GitHub could not hold, so nothing
    /// builds a GitHub route from it.
    pub fn github_parts(&self) -> Option<(&str, &str)> {
        let (owner, name) = self.0.split_once('/')?;
        let owner_ok = (1..=39).contains(&owner.len())
            && owner
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !owner.starts_with('-');
        (owner_ok && !name.contains('/')).then_some((owner, name))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Why one `/`-separated segment is not a path segment a host allows, if it is not; `last`: the repository's
/// own name (GitLab's `.git` / `.atom` rule is its namespaces').
fn segment_refusal(segment: &str, last: bool) -> Option<&'static str> {
    // Letters, digits, '.', '_' and '-', 1 to 100 of them: GitHub's repository names, GitLab's paths.
    if segment.is_empty() || segment.len() > 100 {
        return Some("each segment must be 1 to 100 characters");
    }
    if !segment
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Some("a segment may hold only letters, digits, '.', '_' and '-'");
    }
    // The dot rules keep `..` and hidden names out of paths.
    if segment.starts_with('.') || segment.starts_with('-') {
        return Some("a segment must not start with '.' or '-'");
    }
    if segment.contains("..") {
        return Some("a segment must not contain '..'");
    }
    let lower = segment.to_ascii_lowercase();
    if !last && (lower.ends_with(".git") || lower.ends_with(".atom")) {
        return Some("a group must not end in '.git' or '.atom'");
    }
    None
}

impl FromStr for RepoName {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let refuse = |why| ValueError::Repo {
            value: s.to_owned(),
            why,
        };
        let segments: Vec<&str> = s.split('/').collect();
        if segments.len() < 2 {
            return Err(refuse("no '/'"));
        }
        if segments.len() > Self::MAX_NAMESPACE_DEPTH + 1 {
            return Err(refuse("a namespace is at most 20 groups deep"));
        }
        let last = segments.len() - 1;
        for (i, segment) in segments.iter().enumerate() {
            if let Some(why) = segment_refusal(segment, i == last) {
                return Err(refuse(why));
            }
        }
        Ok(RepoName(s.to_owned()))
    }
}

impl fmt::Display for RepoName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for RepoName {
    type Error = ValueError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<RepoName> for String {
    fn from(repo: RepoName) -> Self {
        repo.0
    }
}

/// The name of an agent profile (`claude`, `codex`, `claude-opus`): what a task or a repository picks in
/// `pidevops.toml`, a label (`agent:codex`) or the API. Lower-case ASCII so a label and a table key cannot
/// differ by case alone, and safe to print anywhere.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "String", into = "String")]
#[schema(value_type = String, example = "codex")]
pub struct AgentName(String);

impl AgentName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for AgentName {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let valid = (1..=40).contains(&s.len())
            && s.bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_'));
        if valid {
            Ok(AgentName(s.to_owned()))
        } else {
            Err(ValueError::Agent(s.to_owned()))
        }
    }
}

impl fmt::Display for AgentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for AgentName {
    type Error = ValueError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<AgentName> for String {
    fn from(name: AgentName) -> Self {
        name.0
    }
}

/// A git branch a run pushed. Stricter than `git check-ref-format`: ASCII letters, digits, `.`, `_`, `-` and `/`
/// only, and never starting with `-`, so the name is also safe as a path and as a command-line argument.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "String", into = "String")]
#[schema(value_type = String, example = "pidevops/T-42")]
pub struct BranchName(String);

impl BranchName {
    pub const MAX_LEN: usize = 200;

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for BranchName {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let refuse = |why| ValueError::Branch {
            value: s.to_owned(),
            why,
        };
        if s.is_empty() || s.len() > Self::MAX_LEN {
            return Err(refuse("must be 1 to 200 characters"));
        }
        if !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/'))
        {
            return Err(refuse(
                "may hold only letters, digits, '.', '_', '-' and '/'",
            ));
        }
        if s.starts_with('-') {
            return Err(refuse("must not start with '-'"));
        }
        // The rest are git's own rules (git-check-ref-format(1)) for what remains possible in this alphabet.
        if s.contains("..") {
            return Err(refuse("must not contain '..'"));
        }
        if s.ends_with('.') {
            return Err(refuse("must not end with '.'"));
        }
        for component in s.split('/') {
            if component.is_empty() {
                return Err(refuse("must not start or end with '/' or contain '//'"));
            }
            if component.starts_with('.') {
                return Err(refuse("no '/'-separated part may start with '.'"));
            }
            if component.ends_with(".lock") {
                return Err(refuse("no '/'-separated part may end with '.lock'"));
            }
        }
        Ok(BranchName(s.to_owned()))
    }
}

impl fmt::Display for BranchName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for BranchName {
    type Error = ValueError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<BranchName> for String {
    fn from(branch: BranchName) -> Self {
        branch.0
    }
}

/// One agent run (one attempt). The dispatcher mints it; the domain only checks that reports name the live run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(transparent)]
pub struct RunId(pub Uuid);

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
