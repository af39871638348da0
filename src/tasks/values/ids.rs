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

/// A GitHub repository, `owner/name`, checked against GitHub's own character rules so it can be used in URLs,
/// paths under the workspace root and mirror names without escaping. Two names compare (and hash and order) as
/// GitHub compares them, ignoring ASCII case, so `Local/Demo` finds `[repos."local/demo"]` in every map; the
/// spelling is kept for display, and the board stores the configured one (`AllowedRepos::spelling`).
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

impl RepoName {
    /// The name in lower case: the key a read model or a map of strings compares by.
    pub fn key(&self) -> String {
        self.0.to_ascii_lowercase()
    }

    pub fn owner(&self) -> &str {
        self.0.split_once('/').map_or("", |(owner, _)| owner)
    }

    pub fn name(&self) -> &str {
        self.0.split_once('/').map_or("", |(_, name)| name)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for RepoName {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let refuse = |why| ValueError::Repo {
            value: s.to_owned(),
            why,
        };
        let (owner, name) = s.split_once('/').ok_or_else(|| refuse("no '/'"))?;
        // GitHub logins: 1-39 of [A-Za-z0-9-], not starting with '-'.
        if owner.is_empty() || owner.len() > 39 {
            return Err(refuse("owner must be 1 to 39 characters"));
        }
        if !owner
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(refuse("owner may hold only letters, digits and '-'"));
        }
        if owner.starts_with('-') {
            return Err(refuse("owner must not start with '-'"));
        }
        // Repository names: 1-100 of [A-Za-z0-9._-]. The dot rules keep `..` and hidden names out of paths.
        if name.is_empty() || name.len() > 100 {
            return Err(refuse("name must be 1 to 100 characters"));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Err(refuse(
                "name may hold only letters, digits, '.', '_' and '-'",
            ));
        }
        if name.starts_with('.') || name.starts_with('-') {
            return Err(refuse("name must not start with '.' or '-'"));
        }
        if name.contains("..") {
            return Err(refuse("name must not contain '..'"));
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
