//! How a task sits on the board: priority, approval policy, attempt budget and column.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::ValueError;

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

/// What happens when an attempt changes files outside its task's scope (`[repos."o/n"] scope`; the dispatcher
/// decides with it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ScopePolicy {
    /// The attempt is unresolved: nothing is pushed, and it is retried with the files named.
    #[default]
    Enforce,
    /// The attempt goes on; the files outside are named on the run and in the pull request.
    Warn,
    Off,
}

/// Who reads an attempt's work before its pull request (`[repos."o/n"] review`; the dispatcher decides with it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReviewPolicy {
    /// Nobody before the pull request (people review it there).
    #[default]
    Off,
    /// The reviewer profile reads the diff with the spec: changes requested are another attempt.
    Agent,
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

/// What a task is: work for one agent, or a plan whose planner decomposes a goal into tasks of their own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TaskKind {
    #[default]
    Task,
    Plan,
}

impl TaskKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::Task => "task",
            TaskKind::Plan => "plan",
        }
    }

    pub fn is_task(&self) -> bool {
        *self == TaskKind::Task
    }
}

impl fmt::Display for TaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a run is for. A `work` run is an attempt at the task (it counts against the budget and its work is
/// pushed); a `plan` run is a plan's attempt (its planner writes `.pidevops/plan.json`, nothing is pushed); a
/// `triage` run rewrites a ticket waiting in triage into a spec for its approver (not an attempt).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunPurpose {
    #[default]
    Work,
    Plan,
    Triage,
    /// An attempt at a refresh's conflict: the recorded commit with the base merged in, the markers to resolve.
    Resolve,
    /// A refresh held for the repository's check: no agent, the refresh made again, setup and check run, pushed.
    Refresh,
}

impl RunPurpose {
    pub fn as_str(self) -> &'static str {
        match self {
            RunPurpose::Work => "work",
            RunPurpose::Plan => "plan",
            RunPurpose::Triage => "triage",
            RunPurpose::Resolve => "resolve",
            RunPurpose::Refresh => "refresh",
        }
    }

    pub fn is_work(&self) -> bool {
        *self == RunPurpose::Work
    }

    /// Whether a run for this purpose is one of the task's attempts.
    pub fn is_attempt(self) -> bool {
        !matches!(self, RunPurpose::Triage)
    }
}

impl fmt::Display for RunPurpose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
