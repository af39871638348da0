//! Auto-land's part of the task: what passed and who approved on the task's head commit while it is in review
//! (its landing facts), and the one decision whether pidevops may merge its pull request now ([`readiness`]).
//!
//! Facts are about one commit, the one pidevops last pushed: reactions only records a check or an approval it
//! has matched to that commit. A new submission for review (a new push) starts over, so approvals of older code
//! never count; a fact about another commit than the one on record also starts over, which can only delay a
//! merge, never cause one (the merge itself is made only if the pull request's head is still that commit).
//! Facts are recorded only while the task is in review, and each once: the same check or approval reported
//! twice (a redelivery, the poller) is already so.

use std::collections::BTreeSet;
use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::super::values::{Column, TaskKind, GITHUB_PR, GITLAB_MR};
use super::decision::wrong_column;
use super::{Command, Task, TaskError, TaskEvent};

/// The most approvals a repository may require (`[repos."o/n"] approvals`).
pub const MAX_REQUIRED_APPROVALS: u8 = 10;
/// Facts of each kind kept per head commit: a repository's CI (any app installed on it may create check runs)
/// cannot grow a task's stream without bound; facts past the cap are dropped, which only delays a merge.
pub const MAX_FACTS: usize = 100;
/// The longest check name or login recorded (GitHub's check names are at most 255 bytes, logins 39).
pub const MAX_NAME_CHARS: usize = 255;

/// A value from a webhook that cannot be a fact.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FactError {
    #[error("commit {0:?} is not 7 to 64 hexadecimal digits")]
    Sha(String),
    #[error("{field} {value:?} is empty, longer than {MAX_NAME_CHARS} characters or holds a control character")]
    Name { field: &'static str, value: String },
}

/// A git commit id, lower case (SHA-1 or SHA-256, abbreviations of at least 7 accepted).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "String", into = "String")]
#[schema(value_type = String)]
pub struct CommitSha(String);

impl CommitSha {
    pub fn new(sha: &str) -> Result<Self, FactError> {
        let ok = (7..=64).contains(&sha.len()) && sha.chars().all(|c| c.is_ascii_hexdigit());
        if !ok {
            return Err(FactError::Sha(sha.chars().take(80).collect()));
        }
        Ok(Self(sha.to_ascii_lowercase()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The seven-digit form people read.
    pub fn short(&self) -> &str {
        &self.0[..7]
    }
}

impl TryFrom<String> for CommitSha {
    type Error = FactError;
    fn try_from(value: String) -> Result<Self, FactError> {
        Self::new(&value)
    }
}

impl From<CommitSha> for String {
    fn from(value: CommitSha) -> Self {
        value.0
    }
}

impl fmt::Display for CommitSha {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A check's name (a check run, a workflow, a check suite's app) or a GitHub login, as GitHub sent it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "String", into = "String")]
#[schema(value_type = String)]
pub struct FactName(String);

impl FactName {
    pub fn new(field: &'static str, value: &str) -> Result<Self, FactError> {
        let value = value.trim();
        if value.is_empty()
            || value.chars().count() > MAX_NAME_CHARS
            || value.chars().any(char::is_control)
        {
            return Err(FactError::Name {
                field,
                value: value.chars().take(80).collect(),
            });
        }
        Ok(Self(value.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for FactName {
    type Error = FactError;
    fn try_from(value: String) -> Result<Self, FactError> {
        Self::new("name", &value)
    }
}

impl From<FactName> for String {
    fn from(value: FactName) -> Self {
        value.0
    }
}

impl fmt::Display for FactName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What passed and who approved on the task's head commit since its last submission for review.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Landing {
    /// The commit the facts are about; `None`: nothing seen since the last submission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    head: Option<CommitSha>,
    /// Checks that concluded `success` on it: check runs and workflows by name, check suites by their app's.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    checks_passed: BTreeSet<FactName>,
    /// Trusted people (GitHub logins) whose approval of it stands.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    approved_by: BTreeSet<FactName>,
    /// The merge queue chose this head to merge next (`task.merge_queued`): its merge is in flight.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    queued: bool,
}

impl Landing {
    pub fn head(&self) -> Option<&CommitSha> {
        self.head.as_ref()
    }
    pub fn checks_passed(&self) -> &BTreeSet<FactName> {
        &self.checks_passed
    }
    pub fn approved_by(&self) -> &BTreeSet<FactName> {
        &self.approved_by
    }
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
    /// Whether the merge queue chose this head to merge next (its merge is in flight until the task leaves review
    /// or is flagged).
    pub fn queued(&self) -> bool {
        self.queued
    }
    pub(super) fn unqueue(&mut self) {
        self.queued = false;
    }

    /// Whether a fact about `sha` would start over (it is about another commit than the facts on record).
    fn is_about(&self, sha: &CommitSha) -> bool {
        self.head.as_ref() == Some(sha)
    }

    /// The facts about `sha`: these, or none if they are about another commit.
    fn for_head(&mut self, sha: &CommitSha) -> &mut Self {
        if !self.is_about(sha) {
            *self = Self {
                head: Some(sha.clone()),
                ..Self::default()
            };
        }
        self
    }
}

// ---------------------------------------------------------------------------------------------------------------
// decide and evolve for the landing commands and events (called from `decision.rs` and `evolution.rs`).
// ---------------------------------------------------------------------------------------------------------------

/// A landing command's fields: `decide` routes the three here by variant, so nothing else can arrive.
pub(super) enum LandingCommand<'a> {
    CheckPassed {
        sha: &'a CommitSha,
        name: &'a FactName,
    },
    Approval {
        by: &'a FactName,
        sha: &'a CommitSha,
    },
    Withdrawal {
        by: &'a FactName,
    },
}

/// `RecordCheckPassed`, `RecordApproval`, `WithdrawApproval`: the events to record, none (already so), or why not.
pub(super) fn decide(
    task: &Task,
    command: &Command,
    landing_command: LandingCommand<'_>,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    if task.column != Column::InReview {
        return Err(wrong_column(task, command, &[Column::InReview]));
    }
    let landing = &task.landing;
    let fresh = |sha: &CommitSha, set: &BTreeSet<FactName>, name: &FactName| {
        !landing.is_about(sha) || (!set.contains(name) && set.len() < MAX_FACTS)
    };
    Ok(match landing_command {
        LandingCommand::CheckPassed { sha, name } if fresh(sha, &landing.checks_passed, name) => {
            vec![TaskEvent::CheckPassed {
                at,
                sha: sha.clone(),
                name: name.clone(),
            }]
        }
        LandingCommand::Approval { by, sha } if fresh(sha, &landing.approved_by, by) => {
            vec![TaskEvent::ReviewApproved {
                at,
                sha: sha.clone(),
                by: by.clone(),
            }]
        }
        LandingCommand::Withdrawal { by } if landing.approved_by.contains(by) => {
            vec![TaskEvent::ApprovalWithdrawn { at, by: by.clone() }]
        }
        // Already so (or over the bound): nothing new to record.
        LandingCommand::CheckPassed { .. }
        | LandingCommand::Approval { .. }
        | LandingCommand::Withdrawal { .. } => Vec::new(),
    })
}

/// `RecordRefresh`: `task.refreshed` in review, nothing when that commit is recorded already (a restart between
/// the push and its record), else why not.
pub(super) fn decide_refresh(
    task: &Task,
    command: &Command,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    let Command::RecordRefresh {
        from,
        to,
        base,
        strategy,
    } = command
    else {
        return Ok(Vec::new());
    };
    match task.column {
        Column::InReview if task.refreshed.as_ref() == Some(to) => Ok(Vec::new()),
        Column::InReview => Ok(vec![TaskEvent::Refreshed {
            at,
            from: from.clone(),
            to: to.clone(),
            base: base.clone(),
            strategy: *strategy,
        }]),
        _ => Err(wrong_column(task, command, &[Column::InReview])),
    }
}

/// `QueueMerge`: `task.merge_queued` for the head the landing facts are about, nothing when it is queued already,
/// else why not. Whether the facts satisfy the repository's rules is [`readiness`]'s, asked by the queue first.
pub(super) fn decide_queue(
    task: &Task,
    command: &Command,
    at: DateTime<Utc>,
) -> Result<Vec<TaskEvent>, TaskError> {
    let Command::QueueMerge { sha, number } = command else {
        return Ok(Vec::new());
    };
    let number = *number;
    if task.column != Column::InReview {
        return Err(wrong_column(task, command, &[Column::InReview]));
    }
    let refuse = |why: String| Err(TaskError::NotQueued { id: task.id, why });
    if let Some(flag) = &task.needs_human {
        return refuse(format!("it needs a human: {}", flag.reason));
    }
    if task.review_request() != Some(number) {
        return refuse(format!("#{number} is not its open review request"));
    }
    if task.landing.head.as_ref() != Some(sha) {
        return refuse(format!(
            "nothing is recorded of {} (its facts are about {})",
            sha.short(),
            task.landing
                .head
                .as_ref()
                .map_or("no commit", CommitSha::short)
        ));
    }
    if task.landing.queued {
        return Ok(Vec::new());
    }
    Ok(vec![TaskEvent::MergeQueued {
        at,
        sha: sha.clone(),
        number,
    }])
}

/// What a landing event says, routed here by variant (`evolve`, `combined::apply`).
pub(super) enum LandingFact<'a> {
    /// A new push (an attempt's, or a plan's combination): facts about the code before it do not count.
    NewPush,
    /// pidevops's refresh pushed `to`: a new push too, and the branch's head until the next submission.
    Refreshed {
        to: &'a CommitSha,
    },
    CheckPassed {
        sha: &'a CommitSha,
        name: &'a FactName,
    },
    Approved {
        sha: &'a CommitSha,
        by: &'a FactName,
    },
    Withdrawn {
        by: &'a FactName,
    },
    /// The merge queue chose `sha` to merge next.
    Queued {
        sha: &'a CommitSha,
    },
}

/// Applies a landing fact of `event`, or starts over on a new submission (a new push).
pub(super) fn evolve(
    task: &mut Task,
    event: &TaskEvent,
    fact: LandingFact<'_>,
) -> Result<(), TaskError> {
    let in_review = |task: &Task| {
        if task.column == Column::InReview {
            Ok(())
        } else {
            Err(TaskError::Inapplicable {
                task: task.id.to_string(),
                event: event.kind(),
                why: format!("it is {}, not in-review", task.column),
            })
        }
    };
    match fact {
        LandingFact::NewPush => {
            task.landing = Landing::default();
            task.refreshed = None;
        }
        LandingFact::Refreshed { to } => {
            in_review(task)?;
            task.refreshed = Some(to.clone());
            task.landing = Landing::default();
        }
        LandingFact::CheckPassed { sha, name } => {
            in_review(task)?;
            task.landing
                .for_head(sha)
                .checks_passed
                .insert(name.clone());
        }
        LandingFact::Approved { sha, by } => {
            in_review(task)?;
            task.landing.for_head(sha).approved_by.insert(by.clone());
        }
        LandingFact::Withdrawn { by } => {
            in_review(task)?;
            task.landing.approved_by.remove(by);
        }
        LandingFact::Queued { sha } => {
            in_review(task)?;
            task.landing.for_head(sha).queued = true;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------------------------
// The decision.
// ---------------------------------------------------------------------------------------------------------------

/// `[repos."o/n"] land`: who merges a task's pull request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum LandMode {
    /// People merge.
    #[default]
    Manual,
    /// pidevops merges once the checks and approvals are in.
    Auto,
}

/// `[repos."o/n"] merge_method`: how GitHub merges the pull request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum MergeMethod {
    Squash,
    Merge,
    Rebase,
}

impl MergeMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            MergeMethod::Squash => "squash",
            MergeMethod::Merge => "merge",
            MergeMethod::Rebase => "rebase",
        }
    }
}

/// `[repos."o/n"] refresh`: how pidevops brings its branch up to date when the base moved under a pull request
/// in review.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RefreshMode {
    /// Its commits replayed on the new base (a linear history; the branch is pushed with a lease).
    #[default]
    Rebase,
    /// The new base merged into the branch (its commits untouched).
    Merge,
    /// Never: a stale pull request waits for a person.
    Off,
}

impl RefreshMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RefreshMode::Rebase => "rebase",
            RefreshMode::Merge => "merge",
            RefreshMode::Off => "off",
        }
    }
}

/// A repository's landing rules (`[repos."o/n"]` `land`, `approvals`, `required_checks`, `merge_method`,
/// `refresh`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LandConfig {
    pub mode: LandMode,
    /// Approvals by trusted people required, 0 to [`MAX_REQUIRED_APPROVALS`].
    pub approvals: u8,
    /// Checks that must have passed on the head, by name; empty: at least one check passed (and, since a failed
    /// check sends the task back, none failed).
    pub required_checks: Vec<String>,
    /// `None`: the repository's allowed method, as GitHub reports it when merging.
    pub merge_method: Option<MergeMethod>,
    /// How a stale branch is brought up to date.
    pub refresh: RefreshMode,
}

/// Whether pidevops may merge the task's pull request now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// Merge pull request (or GitLab merge request) `number` in the task's repository at commit `sha`.
    Ready { sha: CommitSha, number: u64 },
    /// Not now, and why, in words a person reads ("1 of 2 approvals; check lint has not passed").
    Waiting(String),
}

/// THE decision: whether the task's pull request may be merged by pidevops now, from the task (its column, flag,
/// pull request and landing facts) and its repository's rules. Pure.
pub fn readiness(task: &Task, land: &LandConfig) -> Readiness {
    if land.mode == LandMode::Manual {
        return Readiness::Waiting("land = manual: a person merges".into());
    }
    if task.column != Column::InReview {
        return Readiness::Waiting(format!("it is {}, not in review", task.column));
    }
    if let Some(flag) = &task.needs_human {
        return Readiness::Waiting(format!("it needs a human: {}", flag.reason));
    }
    let Some(number) = task.review_request() else {
        return Readiness::Waiting("its pull request is not open yet".into());
    };
    // A plan's pull request is its combined branch: only the combination of its items as they stand may land.
    let combined = if task.kind == TaskKind::Plan {
        match super::combined::landing_commit(task) {
            Ok(commit) => Some(commit),
            Err(why) => return Readiness::Waiting(why),
        }
    } else {
        None
    };
    match facts(&task.landing, land) {
        Ok(sha) if combined.is_some_and(|c| c != sha) => Readiness::Waiting(format!(
            "nothing has passed on its combined commit {} yet",
            combined.map_or("", CommitSha::short)
        )),
        Ok(sha) => Readiness::Ready {
            sha: sha.clone(),
            number,
        },
        Err(missing) => Readiness::Waiting(missing.join("; ")),
    }
}

/// Whether `event` can make a task ready to land (or its readiness worth a look again): each code host's policy
/// asks [`readiness`] on these (a link to either host's review request among them).
pub fn may_land(event: &TaskEvent) -> bool {
    match event {
        TaskEvent::LinksAttached { links, .. } => links.has(GITHUB_PR) || links.has(GITLAB_MR),
        TaskEvent::SubmittedForReview { .. }
        | TaskEvent::CheckPassed { .. }
        | TaskEvent::ReviewApproved { .. }
        | TaskEvent::NeedsHumanCleared { .. } => true,
        TaskEvent::Created(_)
        | TaskEvent::Approved { .. }
        | TaskEvent::Rejected { .. }
        | TaskEvent::Started { .. }
        | TaskEvent::Resumed { .. }
        | TaskEvent::Completed { .. }
        | TaskEvent::Retried { .. }
        | TaskEvent::Cancelled { .. }
        | TaskEvent::Archived { .. }
        | TaskEvent::FlaggedNeedsHuman { .. }
        | TaskEvent::SpecUpdated { .. }
        | TaskEvent::FollowUpAttached { .. }
        | TaskEvent::FollowUpsDelivered { .. }
        | TaskEvent::TicketSeen { .. }
        | TaskEvent::PriorityChanged { .. }
        | TaskEvent::AttemptReturned { .. }
        | TaskEvent::AgentChosen { .. }
        | TaskEvent::TriageEnded { .. }
        | TaskEvent::PlanProposed { .. }
        | TaskEvent::PlanApproved { .. }
        | TaskEvent::PlanRejected { .. }
        | TaskEvent::ChildrenCreated { .. }
        | TaskEvent::RolledUp { .. }
        | TaskEvent::ApprovalWithdrawn { .. }
        | TaskEvent::Combined { .. }
        | TaskEvent::Landed { .. }
        | TaskEvent::WentStale { .. }
        | TaskEvent::ConflictFound { .. }
        | TaskEvent::ConflictUnresolved { .. }
        | TaskEvent::RefreshCheckDue { .. }
        | TaskEvent::RefreshCheckFailed { .. } => false,
        // Its checks run again on the refreshed head: nothing is ready until they pass there.
        TaskEvent::Refreshed { .. } => false,
        // The queue's own choice: it asked readiness first.
        TaskEvent::MergeQueued { .. } => false,
    }
}

/// The head commit when the facts satisfy the rules, else everything still missing.
fn facts<'a>(landing: &'a Landing, land: &LandConfig) -> Result<&'a CommitSha, Vec<String>> {
    let mut missing = Vec::new();
    let approvals = landing.approved_by.len();
    let required = usize::from(land.approvals);
    if approvals < required {
        missing.push(format!("{approvals} of {required} approvals"));
    }
    let passed = &landing.checks_passed;
    if land.required_checks.is_empty() {
        if passed.is_empty() {
            missing.push("no check has passed on the head commit yet".to_owned());
        }
    } else {
        let absent: Vec<&str> = land
            .required_checks
            .iter()
            .filter(|name| !passed.iter().any(|p| p.as_str() == name.as_str()))
            .map(String::as_str)
            .collect();
        if !absent.is_empty() {
            let (noun, verb) = if absent.len() == 1 {
                ("check", "has")
            } else {
                ("checks", "have")
            };
            let mut line = format!("{noun} {} {verb} not passed", absent.join(", "));
            if !passed.is_empty() {
                let seen: Vec<&str> = passed.iter().map(FactName::as_str).collect();
                line.push_str(&format!(" (passed: {})", seen.join(", ")));
            }
            missing.push(line);
        }
    }
    match (&landing.head, missing.is_empty()) {
        (Some(head), true) => Ok(head),
        // Not reached (every rule asks for a passed check, which sets the head); kept so no head is invented.
        (None, true) => Err(vec!["nothing has passed on the head commit yet".to_owned()]),
        (_, false) => Err(missing),
    }
}

#[cfg(test)]
#[path = "tests/landing.rs"]
mod tests;
