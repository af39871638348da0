//! A task's facts: `TaskCreated`, the first of every task's stream, and `TaskEvent`, one fact each, with their kind
//! and time.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{
    AttemptReport, Checkpoint, CombinedItem, CommitSha, Conflict, FactName, Family, RefreshCheck,
    RefreshMode, RetryCause, StaleAction, TriageOutcome,
};
use crate::tasks::plan::PlanDocument;
use crate::tasks::values::{
    AgentName, ApprovalPolicy, BranchName, Column, FollowUpOrigin, FollowUpText, GithubRef, Links,
    MaxAttempts, Priority, Reason, RepoName, RunId, RunPurpose, Spec, TaskId,
};

/// The first fact of every task's stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCreated {
    pub at: DateTime<Utc>,
    pub id: TaskId,
    pub repo: RepoName,
    pub spec: Spec,
    pub priority: Priority,
    pub links: Links,
    pub approval: ApprovalPolicy,
    pub max_attempts: MaxAttempts,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket_version: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentName>,
    #[serde(default, flatten)]
    pub family: Family,
}

/// Declares `TaskEvent` and, from the same variants, `ByKind`: a remote twin whose derive builds a `TaskEvent` from
/// a variant's fields once the variant is known (`stored.rs`). serde's internally tagged derive buffers every body
/// into an intermediate tree to find its `type` first; a stored event's type is in its own column, so the log's
/// readers need not (`TaskEvent::from_stored`). One list of variants: the two cannot drift.
macro_rules! task_events {
    ($(#[$attr:meta])* pub enum TaskEvent { $($variants:tt)* }) => {
        $(#[$attr])*
        pub enum TaskEvent { $($variants)* }

        #[derive(Deserialize)]
        #[serde(remote = "TaskEvent", rename_all = "snake_case")]
        #[allow(dead_code, clippy::large_enum_variant)]
        pub(super) enum ByKind { $($variants)* }
    };
}

task_events! {
/// One fact about a task. The stream (one per task) says which task; `at` is when `decide` accepted it.
///
/// `TaskEventKind` is derived from the variants: its names are the log's event types (`task.created`, …), the same
/// snake case as the serde tag (a test holds the two together), so a new variant gets its type with no table to keep.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, strum::EnumDiscriminants)]
#[serde(tag = "type", rename_all = "snake_case")]
#[strum_discriminants(
    name(TaskEventKind),
    derive(strum::IntoStaticStr, strum::EnumIter, Hash, PartialOrd, Ord),
    strum(serialize_all = "snake_case", prefix = "task.")
)]
pub enum TaskEvent {
    Created(Box<TaskCreated>),
    Approved {
        at: DateTime<Utc>,
        /// True when the `auto` approval policy approved it at creation.
        automatic: bool,
    },
    Rejected {
        at: DateTime<Utc>,
        reason: Reason,
    },
    Started {
        at: DateTime<Utc>,
        run: RunId,
        /// The attempt it is; 0 for a triage run, which is not one.
        attempt: u32,
        #[serde(default, skip_serializing_if = "RunPurpose::is_work")]
        purpose: RunPurpose,
    },
    /// The attempt cut off goes on from a checkpoint: the same attempt, not a new one (`resume.rs`).
    Resumed {
        at: DateTime<Utc>,
        run: RunId,
        /// The attempt it goes on with (unchanged).
        attempt: u32,
        checkpoint: Box<Checkpoint>,
    },
    SubmittedForReview {
        at: DateTime<Utc>,
        run: RunId,
        branch: BranchName,
        pr: Option<GithubRef>,
        #[serde(default, skip_serializing_if = "AttemptReport::is_empty")]
        report: Box<AttemptReport>,
    },
    Completed {
        at: DateTime<Utc>,
    },
    Retried {
        at: DateTime<Utc>,
        cause: RetryCause,
        reason: Reason,
        /// The attempt that failed.
        attempt: u32,
    },
    Cancelled {
        at: DateTime<Utc>,
        reason: Reason,
    },
    Archived {
        at: DateTime<Utc>,
    },
    /// Opens a needs-human episode; the alert policy sends one alert per such event, asked as a question where
    /// the task came from.
    FlaggedNeedsHuman {
        at: DateTime<Utc>,
        reason: Reason,
        /// The reason is the agent's own question.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        question: bool,
    },
    NeedsHumanCleared {
        at: DateTime<Utc>,
        /// The attempt budget from now on (raised by one when the budget was spent).
        max_attempts: MaxAttempts,
    },
    SpecUpdated {
        at: DateTime<Utc>,
        spec: Spec,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ticket_version: Option<DateTime<Utc>>,
    },
    FollowUpAttached {
        at: DateTime<Utc>,
        text: FollowUpText,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<FollowUpOrigin>,
        /// A person's answer to the question the task waited on.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        answer: bool,
    },
    /// These follow-ups (positions in the task's list, oldest first) were handed to attempt `attempt` of run
    /// `run`: in its prompt when it started, or live while it ran.
    FollowUpsDelivered {
        at: DateTime<Utc>,
        run: RunId,
        attempt: u32,
        indices: Vec<u32>,
        live: bool,
    },
    /// A newer version of the source ticket was seen (`Command::NoteTicketVersion`, or a withdrawal's).
    TicketSeen {
        at: DateTime<Utc>,
        ticket_version: DateTime<Utc>,
    },
    PriorityChanged {
        at: DateTime<Utc>,
        priority: Priority,
    },
    /// Only the links that were added.
    LinksAttached {
        at: DateTime<Utc>,
        links: Links,
    },
    /// An interrupted attempt, or one whose setup failed, does not count: the budget grows by one (follows its
    /// `retried`).
    AttemptReturned {
        at: DateTime<Utc>,
        max_attempts: MaxAttempts,
    },
    AgentChosen {
        at: DateTime<Utc>,
        /// `None`: the repository's profile again.
        agent: Option<AgentName>,
    },
    /// A triage run ended: its spec proposed, or why not.
    TriageEnded {
        at: DateTime<Utc>,
        run: RunId,
        outcome: TriageOutcome,
    },
    /// The planner's run proposed this plan; it waits in triage for approval.
    PlanProposed {
        at: DateTime<Utc>,
        run: RunId,
        plan: Box<PlanDocument>,
    },
    /// The proposed plan was approved as a whole: its items become tasks.
    PlanApproved {
        at: DateTime<Utc>,
        /// True when the `auto` approval policy approved it as it was proposed.
        automatic: bool,
    },
    /// The proposed plan was rejected with a comment: the planner runs again with it.
    PlanRejected {
        at: DateTime<Utc>,
        reason: Reason,
        /// The attempt budget from now on (raised by one when it was spent, so a person's "try again" works).
        max_attempts: MaxAttempts,
    },
    /// The approved plan's items, as tasks.
    ChildrenCreated {
        at: DateTime<Utc>,
        children: Vec<TaskId>,
    },
    /// The plan's column (or the items waiting for a person) changed with its items'.
    RolledUp {
        at: DateTime<Utc>,
        column: Column,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        needs_human: Vec<TaskId>,
    },
    /// A check passed on `sha`; facts about another commit than the last ones start over.
    CheckPassed {
        at: DateTime<Utc>,
        sha: CommitSha,
        name: FactName,
    },
    ReviewApproved {
        at: DateTime<Utc>,
        sha: CommitSha,
        by: FactName,
    },
    ApprovalWithdrawn {
        at: DateTime<Utc>,
        by: FactName,
    },
    /// The plan's items were merged into `commit`, pushed as `pidevops/<plan>` (`land = "combined"`): its one
    /// pull request is opened from it, and facts about an earlier combination start over.
    Combined {
        at: DateTime<Utc>,
        commit: CommitSha,
        base: CommitSha,
        items: Vec<CombinedItem>,
    },
    /// pidevops merged `commit` (what run `run` pushed for review) into the repository's base and pushed it
    /// (`pidevops task land`, or `land = "auto"` on a repository that is not on GitHub): the base is now `onto`.
    /// Always followed by `completed`.
    Landed {
        at: DateTime<Utc>,
        run: RunId,
        commit: CommitSha,
        onto: CommitSha,
        /// The base moved to `commit` itself; otherwise `onto` is a merge commit (or the base held it already).
        fast_forward: bool,
    },
    /// pidevops brought the task's branch up to date with its base by its own git (`[repos."o/n"] refresh`):
    /// `from`, the commit it had pushed, rebased onto (or merged with) the base at `base`, is `to`, pushed with a
    /// lease on `from`. The landing facts start over: checks run again on `to`.
    Refreshed {
        at: DateTime<Utc>,
        from: CommitSha,
        to: CommitSha,
        base: CommitSha,
        strategy: RefreshMode,
    },
    /// The merge queue (`land = "auto"` on GitHub, `landing::queue`) chose pull request `number` at `sha`, the
    /// task's head up to date with its base and its checks passed there, as the next merge on its base: the one
    /// merge in flight there until the task leaves review or is flagged. Once per head commit.
    MergeQueued {
        at: DateTime<Utc>,
        sha: CommitSha,
        number: u64,
    },
    /// In review with no activity for `after_h` hours (`[repos."o/n"] stale_after_h`), once per review episode:
    /// its source is reminded (`remind`), or its pull request is closed and `cancelled` follows (`close`).
    WentStale {
        at: DateTime<Utc>,
        after_h: u32,
        action: StaleAction,
    },
    /// The `refresh` loop found the pushed commit in conflict with the moved base: the task goes to `todo` for an
    /// attempt that resolves it (`RunPurpose::Resolve`), its budget one larger so that attempt costs the work none.
    ConflictFound {
        at: DateTime<Utc>,
        conflict: Box<Conflict>,
        max_attempts: MaxAttempts,
    },
    /// The conflict attempt ended without its resolution pushed: back in review on the commit it had (a flag
    /// naming the files follows).
    ConflictUnresolved {
        at: DateTime<Utc>,
        reason: Reason,
    },
    /// The `refresh` loop brought the branch up to date with the moved base and, the repository having a `check`,
    /// did not push it: the task goes to `todo` for an attempt that runs the check on it (`RunPurpose::Refresh`,
    /// no agent), its budget one larger so that attempt costs the work none. Its success is `refreshed`.
    RefreshCheckDue {
        at: DateTime<Utc>,
        check: Box<RefreshCheck>,
        max_attempts: MaxAttempts,
    },
    /// The refresh check's run ended without its push (the check failed, someone else pushed): back in review on
    /// the commit it had (a flag with why follows).
    RefreshCheckFailed {
        at: DateTime<Utc>,
        reason: Reason,
    },
}
}

impl TaskEvent {
    /// The event type in the log (`task.created`, …).
    pub fn kind(&self) -> &'static str {
        TaskEventKind::from(self).into()
    }

    pub fn at(&self) -> DateTime<Utc> {
        match self {
            TaskEvent::Created(created) => created.at,
            TaskEvent::Approved { at, .. }
            | TaskEvent::Rejected { at, .. }
            | TaskEvent::Started { at, .. }
            | TaskEvent::Resumed { at, .. }
            | TaskEvent::SubmittedForReview { at, .. }
            | TaskEvent::Completed { at }
            | TaskEvent::Retried { at, .. }
            | TaskEvent::Cancelled { at, .. }
            | TaskEvent::Archived { at }
            | TaskEvent::FlaggedNeedsHuman { at, .. }
            | TaskEvent::NeedsHumanCleared { at, .. }
            | TaskEvent::SpecUpdated { at, .. }
            | TaskEvent::FollowUpAttached { at, .. }
            | TaskEvent::FollowUpsDelivered { at, .. }
            | TaskEvent::TicketSeen { at, .. }
            | TaskEvent::PriorityChanged { at, .. }
            | TaskEvent::LinksAttached { at, .. }
            | TaskEvent::AgentChosen { at, .. }
            | TaskEvent::AttemptReturned { at, .. }
            | TaskEvent::TriageEnded { at, .. }
            | TaskEvent::PlanProposed { at, .. }
            | TaskEvent::PlanApproved { at, .. }
            | TaskEvent::PlanRejected { at, .. }
            | TaskEvent::ChildrenCreated { at, .. }
            | TaskEvent::RolledUp { at, .. }
            | TaskEvent::CheckPassed { at, .. }
            | TaskEvent::ReviewApproved { at, .. }
            | TaskEvent::ApprovalWithdrawn { at, .. }
            | TaskEvent::Combined { at, .. }
            | TaskEvent::Landed { at, .. }
            | TaskEvent::Refreshed { at, .. }
            | TaskEvent::WentStale { at, .. }
            | TaskEvent::ConflictFound { at, .. }
            | TaskEvent::ConflictUnresolved { at, .. }
            | TaskEvent::RefreshCheckDue { at, .. }
            | TaskEvent::RefreshCheckFailed { at, .. }
            | TaskEvent::MergeQueued { at, .. } => *at,
        }
    }
}
