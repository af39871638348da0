//! The task board's domain: typed values and the task state machine. Pure: no I/O, no clock; times come in as
//! arguments. Streams, intake and projectors build on it elsewhere.
//!
//! ```text
//! triage ─approve─► todo ─start─► in-progress ─submit-for-review─► in-review ─complete─► done ─archive─► archived
//!   │                ▲               │ retry (run failed)             │ retry (CI failed, changes requested)
//!   │                └───────────────┴────────────────────────────────┘
//!   └─ reject; or cancel from any open column ─► cancelled ─archive─► archived
//! ```
//!
//! `needs_human` is a flag on an open task, not a column: set after the last failed attempt, when attempts keep
//! bouncing back fast, or by hand; one event per episode, cleared by a human or by the task closing. An attempt
//! pidevops itself interrupted (a shutdown) is given back rather than counted.

pub mod agent_config;
pub mod domain;
pub mod plan;
pub mod values;

pub use domain::{
    decide, evolve, replay, roll_up, AttemptReport, ChildView, Combination, CombinedItem, Command,
    Failure, Family, FollowUp, NeedsHuman, NewTask, PlanLand, PlanState, RetryCause, RollUp, Task,
    TaskCreated, TaskError, TaskEvent, TriageOutcome, TriageState, MAX_FOLLOW_UPS,
    OSCILLATION_STARTS, OSCILLATION_WINDOW_S,
};
pub use domain::{
    landing, CommitSha, FactName, LandConfig, LandMode, Landing, MergeMethod, Readiness,
    RefreshMode,
};
pub use domain::{stale, Conflict, RefreshCheck, StaleAction, StaleRule};
pub use domain::{Checkpoint, Resumption, MAX_RESUMES};
pub use values::{
    is_slack_id, is_slack_ts, AgentName, ApprovalPolicy, BranchName, Column, FollowUpOrigin,
    FollowUpText, GithubRef, GitlabIssueRef, GitlabMrRef, LinearIssue, LinkConflict, LinkKey,
    Links, MaxAttempts, Priority, Reason, RepoName, ReviewPolicy, RunId, RunPurpose, ScopePolicy,
    SlackThread, Spec, SpecParts, TaskId, TaskKind, TelegramMessage, ValueError, GITHUB_ISSUE,
    GITHUB_PR, GITLAB_ISSUE, GITLAB_MR, KNOWN_LINKS, LINEAR_ISSUE, SLACK_THREAD, TELEGRAM,
};
