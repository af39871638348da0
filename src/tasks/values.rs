//! Typed values of the task board. Each one is parsed once, at the boundary, and is valid from then on: serde
//! goes through the same constructors, so a value read back from the log is checked like one typed by a user.

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// Why a value was refused. Each variant names the value and the rule it broke.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("task id {0:?} is not T-<n> with n a positive integer without leading zeros")]
    TaskId(String),
    #[error("repository {value:?} is not owner/name: {why}")]
    Repo { value: String, why: &'static str },
    #[error("branch name {value:?} is not a safe git branch name: {why}")]
    Branch { value: String, why: &'static str },
    #[error("Linear issue identifier {0:?} is not TEAM-<n>")]
    LinearIdentifier(String),
    #[error("GitHub issue or pull request number must be at least 1")]
    GithubNumber,
    #[error("Telegram chat id must not be 0 and message id must be at least 1")]
    Telegram,
    #[error("{field} must not be empty")]
    Empty { field: &'static str },
    #[error("{field} is {chars} characters; at most {max} allowed")]
    TooLong {
        field: &'static str,
        chars: usize,
        max: usize,
    },
    #[error("{field} contains a NUL character, which Postgres cannot store")]
    Nul { field: &'static str },
    #[error("max attempts {value} is outside 1..={max}")]
    MaxAttempts { value: u32, max: u32 },
    #[error("unknown priority {0:?}; expected urgent, high, normal or low")]
    Priority(String),
    #[error("unknown approval policy {0:?}; expected auto or manual")]
    Approval(String),
    #[error("unknown column {0:?}")]
    Column(String),
    #[error("agent profile name {0:?} is not 1 to 40 of a-z, 0-9, '-' and '_', starting with a letter or digit")]
    Agent(String),
}

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
/// paths under the workspace root and mirror names without escaping.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "String", into = "String")]
#[schema(value_type = String, example = "acme/api")]
pub struct RepoName(String);

impl RepoName {
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

/// How soon a task should be worked on. Ordered: `Urgent > High > Normal > Low`.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    Low,
    #[default]
    Normal,
    High,
    Urgent,
}

impl Priority {
    pub const ALL: [Priority; 4] = [
        Priority::Low,
        Priority::Normal,
        Priority::High,
        Priority::Urgent,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
            Priority::High => "high",
            Priority::Urgent => "urgent",
        }
    }

    /// Linear's scale: 0 none, 1 urgent, 2 high, 3 medium, 4 low. "None" is the board's default.
    pub fn from_linear(priority: u8) -> Self {
        match priority {
            1 => Priority::Urgent,
            2 => Priority::High,
            4 => Priority::Low,
            _ => Priority::Normal,
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Priority {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Priority::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| ValueError::Priority(s.to_owned()))
    }
}

/// Whether a new task may be worked on at once (`auto`: it goes to `todo`) or waits in `triage` for a human.
/// Configuration chooses it; the domain only receives it with `create`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalPolicy {
    Auto,
    Manual,
}

impl ApprovalPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalPolicy::Auto => "auto",
            ApprovalPolicy::Manual => "manual",
        }
    }
}

impl FromStr for ApprovalPolicy {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(ApprovalPolicy::Auto),
            "manual" => Ok(ApprovalPolicy::Manual),
            _ => Err(ValueError::Approval(s.to_owned())),
        }
    }
}

/// How many runs a task gets before it needs a human. A cap keeps a misconfiguration from burning money.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(try_from = "u32", into = "u32")]
pub struct MaxAttempts(u32);

impl MaxAttempts {
    pub const DEFAULT: MaxAttempts = MaxAttempts(3);
    pub const CAP: u32 = 100;

    pub fn new(value: u32) -> Result<Self, ValueError> {
        if (1..=Self::CAP).contains(&value) {
            Ok(MaxAttempts(value))
        } else {
            Err(ValueError::MaxAttempts {
                value,
                max: Self::CAP,
            })
        }
    }

    pub fn get(self) -> u32 {
        self.0
    }
}

impl Default for MaxAttempts {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl TryFrom<u32> for MaxAttempts {
    type Error = ValueError;
    fn try_from(value: u32) -> Result<Self, Self::Error> {
        MaxAttempts::new(value)
    }
}

impl From<MaxAttempts> for u32 {
    fn from(max: MaxAttempts) -> Self {
        max.0
    }
}

/// Checks free text that ends up in events (JSON in Postgres) and in an agent's prompt.
fn check_text(
    field: &'static str,
    text: &str,
    max: usize,
    required: bool,
) -> Result<(), ValueError> {
    if required && text.trim().is_empty() {
        return Err(ValueError::Empty { field });
    }
    let chars = text.chars().count();
    if chars > max {
        return Err(ValueError::TooLong { field, chars, max });
    }
    // jsonb refuses \u0000, so a NUL would make the append fail long after the command was accepted.
    if text.contains('\0') {
        return Err(ValueError::Nul { field });
    }
    Ok(())
}

/// What an agent gets: `Task / Scope / Done when`. Only the task is required; each part is bounded by GitHub's
/// issue body limit so any issue fits and nothing larger slips into a prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "SpecParts")]
pub struct Spec {
    #[schema(min_length = 1, max_length = 65536)]
    task: String,
    // Optional in a request (`SpecParts` defaults them); always present in a response.
    #[schema(required = false, max_length = 65536)]
    scope: String,
    #[schema(required = false, max_length = 65536)]
    done_when: String,
}

/// The unchecked shape of a [`Spec`], for serde and for callers assembling one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecParts {
    pub task: String,
    #[serde(default)]
    pub scope: String,
    #[serde(default)]
    pub done_when: String,
}

impl Spec {
    pub const MAX_CHARS: usize = 65_536;

    pub fn new(
        task: impl Into<String>,
        scope: impl Into<String>,
        done_when: impl Into<String>,
    ) -> Result<Self, ValueError> {
        Spec::try_from(SpecParts {
            task: task.into(),
            scope: scope.into(),
            done_when: done_when.into(),
        })
    }

    pub fn task(&self) -> &str {
        &self.task
    }

    pub fn scope(&self) -> &str {
        &self.scope
    }

    pub fn done_when(&self) -> &str {
        &self.done_when
    }

    /// A one-line title for lists: the first non-empty line of the task, cut at 80 characters.
    pub fn title(&self) -> String {
        let line = self
            .task
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or_default();
        truncate(line, 80)
    }
}

impl TryFrom<SpecParts> for Spec {
    type Error = ValueError;
    fn try_from(parts: SpecParts) -> Result<Self, Self::Error> {
        check_text("spec task", &parts.task, Spec::MAX_CHARS, true)?;
        check_text("spec scope", &parts.scope, Spec::MAX_CHARS, false)?;
        check_text("spec done_when", &parts.done_when, Spec::MAX_CHARS, false)?;
        Ok(Spec {
            task: parts.task,
            scope: parts.scope,
            done_when: parts.done_when,
        })
    }
}

impl From<Spec> for SpecParts {
    fn from(spec: Spec) -> Self {
        SpecParts {
            task: spec.task,
            scope: spec.scope,
            done_when: spec.done_when,
        }
    }
}

/// Cuts `text` to at most `max` characters, marking the cut with `…`.
fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Why something was refused, cancelled, retried or flagged: short, human-readable, non-empty.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "String", into = "String")]
pub struct Reason(String);

impl Reason {
    pub const MAX_CHARS: usize = 2_000;

    pub fn new(text: impl Into<String>) -> Result<Self, ValueError> {
        let text = text.into();
        check_text("reason", &text, Self::MAX_CHARS, true)?;
        Ok(Reason(text))
    }

    /// For machine-made reasons (an exit status, a CI summary): cut to size and NULs dropped instead of refused,
    /// because refusing would lose the failure itself. Empty text still becomes a placeholder, never an error.
    pub fn summarize(text: &str) -> Self {
        let cleaned: String = text.chars().filter(|c| *c != '\0').collect();
        let trimmed = cleaned.trim();
        if trimmed.is_empty() {
            return Reason("(no reason given)".to_owned());
        }
        Reason(truncate(trimmed, Self::MAX_CHARS))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Reason {
    type Error = ValueError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Reason::new(s)
    }
}

impl From<Reason> for String {
    fn from(reason: Reason) -> Self {
        reason.0
    }
}

/// A follow-up instruction (a Linear `prompted` comment, a Telegram reply) queued for the next run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "String", into = "String")]
pub struct FollowUpText(String);

impl FollowUpText {
    pub fn new(text: impl Into<String>) -> Result<Self, ValueError> {
        let text = text.into();
        check_text("follow-up", &text, Spec::MAX_CHARS, true)?;
        Ok(FollowUpText(text))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for FollowUpText {
    type Error = ValueError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        FollowUpText::new(s)
    }
}

impl From<FollowUpText> for String {
    fn from(text: FollowUpText) -> Self {
        text.0
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

/// A Linear issue: the stable id (webhooks and the API key on it) and the identifier people read (`ENG-123`),
/// which changes when the issue moves team.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "LinearIssueParts")]
pub struct LinearIssue {
    id: Uuid,
    identifier: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinearIssueParts {
    pub id: Uuid,
    pub identifier: String,
}

impl LinearIssue {
    pub fn new(id: Uuid, identifier: &str) -> Result<Self, ValueError> {
        let refuse = || ValueError::LinearIdentifier(identifier.to_owned());
        let (team, number) = identifier.split_once('-').ok_or_else(refuse)?;
        let team_ok =
            (1..=16).contains(&team.len()) && team.bytes().all(|b| b.is_ascii_alphanumeric());
        let number_ok = !number.is_empty()
            && number.len() <= 19
            && number.bytes().all(|b| b.is_ascii_digit())
            && !number.starts_with('0');
        if !(team_ok && number_ok) {
            return Err(refuse());
        }
        Ok(LinearIssue {
            id,
            identifier: identifier.to_owned(),
        })
    }

    pub fn id(&self) -> Uuid {
        self.id
    }

    pub fn identifier(&self) -> &str {
        &self.identifier
    }
}

impl fmt::Display for LinearIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.identifier, self.id)
    }
}

impl TryFrom<LinearIssueParts> for LinearIssue {
    type Error = ValueError;
    fn try_from(parts: LinearIssueParts) -> Result<Self, Self::Error> {
        LinearIssue::new(parts.id, &parts.identifier)
    }
}

/// A GitHub issue or pull request: `owner/name#12`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub struct GithubRef {
    pub repo: RepoName,
    #[schema(value_type = u64, minimum = 1)]
    pub number: NonZeroU64,
}

impl GithubRef {
    pub fn new(repo: RepoName, number: u64) -> Result<Self, ValueError> {
        let number = NonZeroU64::new(number).ok_or(ValueError::GithubNumber)?;
        Ok(GithubRef { repo, number })
    }
}

impl fmt::Display for GithubRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.repo, self.number)
    }
}

/// A Telegram message: the chat it is in and its id there (message ids are only unique per chat).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "TelegramParts")]
pub struct TelegramMessage {
    chat: i64,
    message: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TelegramParts {
    pub chat: i64,
    pub message: i64,
}

impl TelegramMessage {
    pub fn new(chat: i64, message: i64) -> Result<Self, ValueError> {
        if chat == 0 || message < 1 {
            return Err(ValueError::Telegram);
        }
        Ok(TelegramMessage { chat, message })
    }

    pub fn chat(self) -> i64 {
        self.chat
    }

    pub fn message(self) -> i64 {
        self.message
    }
}

impl fmt::Display for TelegramMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "chat {} message {}", self.chat, self.message)
    }
}

impl TryFrom<TelegramParts> for TelegramMessage {
    type Error = ValueError;
    fn try_from(parts: TelegramParts) -> Result<Self, Self::Error> {
        TelegramMessage::new(parts.chat, parts.message)
    }
}

/// Where a task came from and what it produced. A link, once set, stays set; only `github_pr` may be replaced,
/// by a later submission's pull request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Links {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linear_issue: Option<LinearIssue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github_issue: Option<GithubRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github_pr: Option<GithubRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telegram: Option<TelegramMessage>,
}

/// The board's columns. A task is in exactly one; `needs_human` is a flag on top, not a column.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Column {
    Triage,
    Todo,
    InProgress,
    InReview,
    Done,
    Archived,
    Cancelled,
}

impl Column {
    pub const ALL: [Column; 7] = [
        Column::Triage,
        Column::Todo,
        Column::InProgress,
        Column::InReview,
        Column::Done,
        Column::Archived,
        Column::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Column::Triage => "triage",
            Column::Todo => "todo",
            Column::InProgress => "in-progress",
            Column::InReview => "in-review",
            Column::Done => "done",
            Column::Archived => "archived",
            Column::Cancelled => "cancelled",
        }
    }

    /// Columns where work is still open; only these carry `needs_human` or take follow-ups.
    pub fn is_open(self) -> bool {
        matches!(
            self,
            Column::Triage | Column::Todo | Column::InProgress | Column::InReview
        )
    }
}

impl fmt::Display for Column {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Column {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Column::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| ValueError::Column(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// git-check-ref-format(1) for `git check-ref-format --branch`, written out so the test needs no git.
    pub(crate) fn git_accepts_branch(name: &str) -> bool {
        let forbidden = |c: char| c.is_ascii_control() || " ~^:?*[\\".contains(c);
        !name.is_empty()
            && name != "@"
            && !name.starts_with('-')
            && !name.starts_with('/')
            && !name.ends_with('/')
            && !name.ends_with('.')
            && !name.contains("..")
            && !name.contains("//")
            && !name.contains("@{")
            && !name.chars().any(forbidden)
            && name
                .split('/')
                .all(|part| !part.starts_with('.') && !part.ends_with(".lock"))
    }

    /// A single path segment that cannot climb, hide or split.
    fn safe_path_segment(s: &str) -> bool {
        !s.is_empty()
            && s != "."
            && s != ".."
            && !s.starts_with('.')
            && !s.starts_with('-')
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    }

    #[test]
    fn task_ids_parse_only_in_canonical_form() {
        for ok in ["T-1", "T-42", "T-18446744073709551615"] {
            assert_eq!(ok.parse::<TaskId>().unwrap().to_string(), ok);
        }
        for bad in [
            "",
            "T-",
            "T-0",
            "T-007",
            "t-1",
            "T-+1",
            "T--1",
            "T-1a",
            "T- 1",
            "T-1 ",
            "42",
            "T42",
            "T-1/..",
            "T-18446744073709551616",
            "Т-1",
        ] {
            assert_eq!(
                bad.parse::<TaskId>(),
                Err(ValueError::TaskId(bad.into())),
                "{bad:?}"
            );
        }
        assert!(serde_json::from_str::<TaskId>("\"T-0\"").is_err());
        assert!(serde_json::from_str::<TaskId>("7").is_err());
        assert_eq!(
            "T-7".parse::<TaskId>().unwrap().branch().as_str(),
            "pidevops/T-7"
        );
    }

    proptest! {
        #[test]
        fn every_task_id_round_trips_and_is_safe_in_paths_and_branches(n in 1u64..) {
            let id = TaskId::new(NonZeroU64::new(n).unwrap());
            let text = id.to_string();
            prop_assert_eq!(text.parse::<TaskId>(), Ok(id));
            prop_assert_eq!(serde_json::to_string(&id).unwrap(), format!("\"{text}\""));
            prop_assert_eq!(serde_json::from_str::<TaskId>(&format!("\"{text}\"")).unwrap(), id);
            prop_assert!(safe_path_segment(&text), "{text}");
            prop_assert!(git_accepts_branch(&text));
            let branch = id.branch();
            prop_assert!(git_accepts_branch(branch.as_str()));
            prop_assert_eq!(branch.as_str().parse::<BranchName>(), Ok(branch.clone()));
        }

        /// Whatever BranchName accepts, git accepts too.
        #[test]
        fn branch_names_are_a_subset_of_git_branch_names(s in "[a-zA-Z0-9._/@{}~^: -]{0,40}") {
            if let Ok(branch) = s.parse::<BranchName>() {
                prop_assert!(git_accepts_branch(branch.as_str()), "{s:?}");
            }
        }

        /// Whatever RepoName accepts is two safe path segments (dots allowed in the name, never as `..`).
        #[test]
        fn repo_names_are_safe_path_segments(s in "[a-zA-Z0-9._/ -]{0,30}") {
            if let Ok(repo) = s.parse::<RepoName>() {
                prop_assert!(!repo.owner().is_empty() && !repo.name().is_empty());
                prop_assert!(!repo.name().contains('/'));
                prop_assert!(!repo.name().starts_with('.') && !repo.name().contains(".."));
                prop_assert_eq!(format!("{}/{}", repo.owner(), repo.name()), s);
            }
        }
    }

    #[test]
    fn branch_names_refuse_what_git_or_a_shell_would_trip_on() {
        for ok in ["pidevops/T-7", "main", "feature/a.b_c-d", "v1.2"] {
            assert!(ok.parse::<BranchName>().is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-x",
            "/a",
            "a/",
            "a//b",
            "a..b",
            "a.",
            ".a",
            "a/.b",
            "a.lock",
            "a/b.lock/c",
            "a b",
            "a~1",
            "a^",
            "a:b",
            "a?",
            "a*",
            "a[b",
            "a\\b",
            "a@{1}",
            "é",
        ] {
            assert!(
                matches!(bad.parse::<BranchName>(), Err(ValueError::Branch { .. })),
                "{bad:?}"
            );
        }
        assert!("a".repeat(201).parse::<BranchName>().is_err());
    }

    #[test]
    fn agent_names_are_lower_case_words() {
        for ok in [
            "claude",
            "codex",
            "claude-opus",
            "pi",
            "gpt_5",
            "4o",
            &"a".repeat(40),
        ] {
            let name: AgentName = ok.parse().unwrap();
            assert_eq!(name.as_str(), ok);
            assert_eq!(
                serde_json::from_str::<AgentName>(&format!("\"{ok}\"")).unwrap(),
                name
            );
        }
        for bad in [
            "",
            "Claude",
            "-x",
            "_x",
            "a b",
            "a/b",
            "../x",
            "é",
            &"a".repeat(41),
        ] {
            assert_eq!(
                bad.parse::<AgentName>(),
                Err(ValueError::Agent(bad.to_owned())),
                "{bad:?}"
            );
        }
        assert!(serde_json::from_str::<AgentName>("\"Codex\"").is_err());
    }

    #[test]
    fn repo_names_follow_github_rules() {
        for ok in ["rust-lang/rust", "a/b", "o-1/x.y_z", "owner/github.io"] {
            let repo: RepoName = ok.parse().unwrap();
            assert_eq!(repo.as_str(), ok);
        }
        let repo: RepoName = "acme/web.app".parse().unwrap();
        assert_eq!((repo.owner(), repo.name()), ("acme", "web.app"));
        for (bad, why) in [
            ("", "no '/'"),
            ("acme", "no '/'"),
            ("/x", "owner must be 1 to 39 characters"),
            ("acme/", "name must be 1 to 100 characters"),
            (
                "acme/a/b",
                "name may hold only letters, digits, '.', '_' and '-'",
            ),
            ("-acme/x", "owner must not start with '-'"),
            ("ac_me/x", "owner may hold only letters, digits and '-'"),
            ("acme/.x", "name must not start with '.' or '-'"),
            ("acme/-x", "name must not start with '.' or '-'"),
            ("acme/..", "name must not start with '.' or '-'"),
            ("acme/a..b", "name must not contain '..'"),
            (
                "acme/a b",
                "name may hold only letters, digits, '.', '_' and '-'",
            ),
        ] {
            assert_eq!(
                bad.parse::<RepoName>(),
                Err(ValueError::Repo {
                    value: bad.into(),
                    why
                }),
                "{bad:?}"
            );
        }
        assert!(format!("{}/x", "a".repeat(40)).parse::<RepoName>().is_err());
        assert!(format!("a/{}", "x".repeat(101))
            .parse::<RepoName>()
            .is_err());
        assert!(serde_json::from_str::<RepoName>("\"a/..\"").is_err());
    }

    #[test]
    fn priorities_are_ordered_and_named() {
        assert!(Priority::Urgent > Priority::High);
        assert!(Priority::High > Priority::Normal);
        assert!(Priority::Normal > Priority::Low);
        assert_eq!(Priority::default(), Priority::Normal);
        for p in Priority::ALL {
            assert_eq!(p.as_str().parse::<Priority>(), Ok(p));
            assert_eq!(serde_json::to_string(&p).unwrap(), format!("\"{p}\""));
        }
        let linear: Vec<_> = (0..=5).map(Priority::from_linear).collect();
        use Priority::*;
        assert_eq!(linear, [Normal, Urgent, High, Normal, Low, Normal]);
        assert!("medium".parse::<Priority>().is_err());
    }

    #[test]
    fn columns_have_the_board_names() {
        let names: Vec<_> = Column::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            names,
            [
                "triage",
                "todo",
                "in-progress",
                "in-review",
                "done",
                "archived",
                "cancelled"
            ]
        );
        for c in Column::ALL {
            assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{c}\""));
            assert_eq!(c.as_str().parse::<Column>(), Ok(c));
        }
    }

    #[test]
    fn specs_need_a_task_and_stay_bounded() {
        let spec = Spec::new("Fix login\n\nIt 500s", "src/auth only", "tests pass").unwrap();
        assert_eq!(spec.title(), "Fix login");
        assert_eq!(
            Spec::new("  \n", "", ""),
            Err(ValueError::Empty { field: "spec task" })
        );
        assert_eq!(
            Spec::new("x", "a\0b", ""),
            Err(ValueError::Nul {
                field: "spec scope"
            })
        );
        let long = "é".repeat(Spec::MAX_CHARS + 1);
        assert_eq!(
            Spec::new("x", "", long),
            Err(ValueError::TooLong {
                field: "spec done_when",
                chars: Spec::MAX_CHARS + 1,
                max: Spec::MAX_CHARS
            })
        );
        assert!(Spec::new("é".repeat(Spec::MAX_CHARS), "", "").is_ok());
        let json = serde_json::to_string(&spec).unwrap();
        assert_eq!(serde_json::from_str::<Spec>(&json).unwrap(), spec);
        assert!(serde_json::from_str::<Spec>(r#"{"task":""}"#).is_err());
        assert_eq!(
            serde_json::from_str::<Spec>(r#"{"task":"t"}"#).unwrap(),
            Spec::new("t", "", "").unwrap()
        );
        assert_eq!(
            Spec::new("a".repeat(100), "", "")
                .unwrap()
                .title()
                .chars()
                .count(),
            80
        );
    }

    #[test]
    fn reasons_are_checked_or_summarized() {
        assert_eq!(Reason::new(" "), Err(ValueError::Empty { field: "reason" }));
        assert!(Reason::new("x".repeat(Reason::MAX_CHARS + 1)).is_err());
        assert_eq!(Reason::summarize("  a\0b  ").as_str(), "ab");
        assert_eq!(Reason::summarize("\0 ").as_str(), "(no reason given)");
        let long = Reason::summarize(&"x".repeat(10_000));
        assert_eq!(long.as_str().chars().count(), Reason::MAX_CHARS);
        assert!(long.as_str().ends_with('…'));
        assert!(serde_json::from_str::<Reason>("\"\"").is_err());
        assert!(FollowUpText::new("").is_err());
    }

    #[test]
    fn attempts_budget_is_bounded() {
        assert_eq!(MaxAttempts::default().get(), 3);
        assert!(MaxAttempts::new(0).is_err());
        assert!(MaxAttempts::new(MaxAttempts::CAP).is_ok());
        assert!(MaxAttempts::new(MaxAttempts::CAP + 1).is_err());
        assert!(serde_json::from_str::<MaxAttempts>("0").is_err());
        assert_eq!("auto".parse::<ApprovalPolicy>(), Ok(ApprovalPolicy::Auto));
        assert_eq!(
            serde_json::to_string(&ApprovalPolicy::Manual).unwrap(),
            "\"manual\""
        );
        assert!("Auto".parse::<ApprovalPolicy>().is_err());
    }

    #[test]
    fn links_are_validated() {
        let id = Uuid::nil();
        assert!(LinearIssue::new(id, "ENG-123").is_ok());
        for bad in ["ENG", "ENG-", "ENG-0", "ENG-01", "-1", "E NG-1", "ENG-1-2"] {
            assert!(LinearIssue::new(id, bad).is_err(), "{bad}");
        }
        assert!(serde_json::from_str::<LinearIssue>(&format!(
            r#"{{"id":"{id}","identifier":"x"}}"#
        ))
        .is_err());
        let repo: RepoName = "a/b".parse().unwrap();
        assert_eq!(
            GithubRef::new(repo.clone(), 0),
            Err(ValueError::GithubNumber)
        );
        assert_eq!(GithubRef::new(repo, 12).unwrap().to_string(), "a/b#12");
        assert!(TelegramMessage::new(0, 1).is_err());
        assert!(TelegramMessage::new(-100, 0).is_err());
        assert!(TelegramMessage::new(-100, 1).is_ok());
        assert!(serde_json::from_str::<TelegramMessage>(r#"{"chat":0,"message":1}"#).is_err());
        assert_eq!(
            serde_json::to_string(&Links::default()).unwrap(),
            "{}",
            "unset links stay out of events"
        );
    }
}
