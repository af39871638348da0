//! The task state machine: `decide(state, command, now) -> events | error` and `evolve(state, event) -> state`.
//!
//! `decide` holds every rule; `evolve` only applies facts, and refuses an event that cannot follow the state so a
//! corrupt stream fails loudly on replay instead of building a wrong board. Neither reads a clock or does I/O.
//!
//! Idempotency: commands that name a desired state (approve, reject, cancel, complete, flag/clear needs-human,
//! reprioritize, update the spec, attach links, choose the agent) return no events when the state already holds, so a double click
//! or two racing approvals give one event and one no-op. Commands that report what a particular run did (start,
//! submit-for-review, retry) are refused when the state does not match: a mismatched report means its sender's
//! view is stale, and it should hear so. `archived` is final: every command on it is refused.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

mod combined;
mod conflict;
mod creation;
mod decision;
mod error;
mod event;
mod evolution;
mod family;
pub mod landing;
mod refresh_check;
pub mod resume;
mod retry_cause;
pub mod stale;
pub mod stored;
mod ticket;

pub use combined::{Combination, CombinedItem, PlanLand};
pub use conflict::Conflict;
pub use creation::{Family, NewTask};
pub use decision::decide;
use error::join;

fn is_zero(n: &u32) -> bool {
    *n == 0
}
pub use error::TaskError;
pub use event::{TaskCreated, TaskEvent, TaskEventKind};
pub use evolution::{evolve, replay};
pub use family::{roll_up, ChildView, PlanState, RollUp, TriageOutcome, TriageState};
pub use landing::{
    CommitSha, FactName, LandConfig, LandMode, Landing, MergeMethod, Readiness, RefreshMode,
};
pub use refresh_check::RefreshCheck;
pub use resume::{Checkpoint, Resumption, MAX_RESUMES};
pub use retry_cause::RetryCause;
pub use stale::{StaleAction, StaleRule};

use super::plan::{PlanDocument, Scope};
use super::values::{
    AgentName, ApprovalPolicy, BranchName, Column, FollowUpOrigin, FollowUpText, GithubRef, Links,
    MaxAttempts, Priority, Reason, RepoName, Review, RunId, RunPurpose, Spec, TaskId, TaskKind,
};

/// At most this many follow-ups per task, delivered or not, so a chatty thread cannot grow a task without bound.
pub const MAX_FOLLOW_UPS: usize = 50;

/// A task whose attempts keep coming back to `todo` fast is bouncing, not progressing: this many attempts
/// started within [`OSCILLATION_WINDOW_S`] that each came back flag it for a human instead of starting another,
/// whatever budget remains (a task allowed ten attempts should not burn them in minutes on the same wall).
pub const OSCILLATION_STARTS: usize = 3;
pub const OSCILLATION_WINDOW_S: i64 = 15 * 60;

/// A task as the board sees it. Built only by [`evolve`] from its events, so it can never hold a state the
/// events do not explain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct Task {
    id: TaskId,
    repo: RepoName,
    spec: Spec,
    priority: Priority,
    links: Links,
    column: Column,
    approval: ApprovalPolicy,
    needs_human: Option<NeedsHuman>,
    attempts: u32,
    max_attempts: MaxAttempts,
    run: Option<RunId>,
    branch: Option<BranchName>,
    last_failure: Option<Failure>,
    closed_reason: Option<Reason>,
    follow_ups: Vec<FollowUp>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    /// The newest version of the source ticket seen, by its own clock (Linear's `updatedAt`, GitHub's
    /// `updated_at`), when the ticket has one: an edit or a withdrawal older than this arrived late and is stale.
    #[serde(skip_serializing_if = "Option::is_none")]
    ticket_version: Option<DateTime<Utc>>,
    /// The agent profile this task asked for; `None`: its repository's (or the default) profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    agent: Option<AgentName>,
    /// When the last few attempts started (at most [`OSCILLATION_STARTS`]), for the bounce rule; forgotten
    /// when a human clears a flag.
    #[serde(skip)]
    recent_starts: Vec<DateTime<Utc>>,
    /// How many times the attempt in progress (or the last one) resumed from a checkpoint (`resume.rs`).
    #[serde(skip_serializing_if = "is_zero")]
    resumes: u32,
    /// The checkpoint the attempt in progress (or the last one) resumed.
    #[serde(skip_serializing_if = "Option::is_none")]
    resumption: Option<Resumption>,
    /// The last attempt cut off was given back (`task.attempt_returned`): a resume takes it back.
    #[serde(skip)]
    given_back: bool,
    /// A task, or a plan (whose planner proposes tasks and whose column then follows theirs).
    #[serde(skip_serializing_if = "TaskKind::is_task")]
    kind: TaskKind,
    /// The plan this task is an item of.
    #[serde(skip_serializing_if = "Option::is_none")]
    parent: Option<TaskId>,
    /// Tasks that must be done before this one may start (a plan's items name them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    depends_on: Vec<TaskId>,
    /// A plan's item: the globs it may change, as its plan gave them (fixed at creation; a spec edit does not
    /// change them).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<String>>)]
    scope: Option<Scope>,
    /// What the live run is for; set exactly while the task is in progress with a run.
    #[serde(skip_serializing_if = "Option::is_none")]
    purpose: Option<RunPurpose>,
    /// A plan's proposal, approval and items (plans only).
    #[serde(skip_serializing_if = "Option::is_none")]
    plan: Option<PlanState>,
    /// What the triage agent made of the ticket, once it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    triage: Option<TriageState>,
    /// What the last attempt submitted for review said of itself (its summary, its review, files out of scope).
    #[serde(skip_serializing_if = "AttemptReport::is_empty")]
    report: AttemptReport,
    /// What passed and who approved on the head commit while in review (auto-land's facts).
    #[serde(skip_serializing_if = "Landing::is_empty")]
    landing: Landing,
    /// The run whose push is in review (set by its submission): what `pidevops task land` merges.
    #[serde(skip)]
    reviewed_run: Option<RunId>,
    /// The commit pidevops's last refresh pushed for the review in progress; `None`: the reviewed run's own
    /// commit is the branch's head. A new submission for review clears it.
    #[serde(skip_serializing_if = "Option::is_none")]
    refreshed: Option<CommitSha>,
    /// When this review episode went stale (`went_stale`); cleared by the next submission for review or refresh.
    /// Kept in the row's state: the board marks a stale pull request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stale_since: Option<DateTime<Utc>>,
    /// A refresh's conflict waiting for (or in) its conflict attempt (`conflict.rs`); cleared when it ends.
    #[serde(skip)]
    conflict: Option<Conflict>,
    /// The (commit, base) pairs whose conflicts were handed to an agent already (the last few): never twice.
    #[serde(skip)]
    conflicts_tried: Vec<(CommitSha, CommitSha)>,
    /// A refresh held for the repository's check, waiting for (or in) its attempt (`refresh_check.rs`).
    #[serde(skip)]
    refresh_check: Option<RefreshCheck>,
    /// The (commit, base) pairs whose refreshes were held for a check already (the last few): never twice.
    #[serde(skip)]
    checks_tried: Vec<(CommitSha, CommitSha)>,
}

/// What an attempt submitted for review says of itself, for its pull request and its page: the agent's own
/// summary (`.pidevops/status.json`), the reviewer agent's approval, and the files it changed outside its scope
/// (`scope = "warn"`). Untrusted text: made inert wherever it is shown.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AttemptReport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<Review>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outside_scope: Vec<String>,
    /// Agent or hook configuration (`tasks::plan::guard::PROTECTED`) pushed because the task's scope names it:
    /// the pull request calls it out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent_config: Vec<String>,
}

impl AttemptReport {
    pub fn is_empty(&self) -> bool {
        self.summary.is_none()
            && self.review.is_none()
            && self.outside_scope.is_empty()
            && self.agent_config.is_empty()
    }
}

/// Why a human is needed, and since when (the start of this episode; one alert per episode).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NeedsHuman {
    pub reason: Reason,
    pub since: DateTime<Utc>,
    /// The reason is the agent's own question (`.pidevops/question.md`), asked where the task came from; any
    /// other reason is asked there too, in pidevops's words.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub question: bool,
}

/// What went wrong last time; the next run's prompt includes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Failure {
    pub attempt: u32,
    pub cause: RetryCause,
    pub reason: Reason,
    pub at: DateTime<Utc>,
}

/// A follow-up and the attempt it was handed to (`None`: waiting for the next run).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FollowUp {
    pub text: FollowUpText,
    pub at: DateTime<Utc>,
    pub delivered_to_attempt: Option<u32>,
    /// Who wrote it and where (its message's key); `None` for one made without (an old event, a CI note).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<FollowUpOrigin>,
    /// Handed to the running agent while it ran (its live input), rather than in a run's prompt.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub live: bool,
}

impl Task {
    pub fn id(&self) -> TaskId {
        self.id
    }
    pub fn repo(&self) -> &RepoName {
        &self.repo
    }
    pub fn spec(&self) -> &Spec {
        &self.spec
    }
    pub fn title(&self) -> String {
        self.spec.title()
    }
    pub fn priority(&self) -> Priority {
        self.priority
    }
    pub fn links(&self) -> &Links {
        &self.links
    }
    /// The number of the task's review request in its own repository: its GitHub pull request, or its GitLab
    /// merge request's iid. A link to another repository's is not the task's (auto-land and reactions hold to it).
    pub fn review_request(&self) -> Option<u64> {
        let same = |repo: &RepoName| repo.as_str().eq_ignore_ascii_case(self.repo.as_str());
        self.links
            .get(super::values::GITHUB_PR)
            .filter(|pr| same(&pr.repo))
            .map(|pr| pr.number.get())
            .or_else(|| {
                self.links
                    .get(super::values::GITLAB_MR)
                    .filter(|mr| same(&mr.project))
                    .map(|mr| mr.iid.get())
            })
    }
    pub fn column(&self) -> Column {
        self.column
    }
    pub fn approval(&self) -> ApprovalPolicy {
        self.approval
    }
    pub fn needs_human(&self) -> Option<&NeedsHuman> {
        self.needs_human.as_ref()
    }
    /// Runs started so far; the current or last run is attempt number `attempts`.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
    pub fn max_attempts(&self) -> MaxAttempts {
        self.max_attempts
    }
    /// The live run, set exactly while the task is in progress.
    pub fn run(&self) -> Option<RunId> {
        self.run
    }
    /// The branch of the last submission for review.
    pub fn branch(&self) -> Option<&BranchName> {
        self.branch.as_ref()
    }
    /// The run whose push put the task in review (the last submission's).
    pub fn reviewed_run(&self) -> Option<RunId> {
        self.reviewed_run
    }

    /// The commit pidevops's last refresh of the review in progress pushed, if any.
    pub fn refreshed(&self) -> Option<&CommitSha> {
        self.refreshed.as_ref()
    }
    /// The refresh's conflict the next (or running) attempt resolves, if any.
    pub fn conflict(&self) -> Option<&Conflict> {
        self.conflict.as_ref()
    }
    /// The refresh the next (or running) attempt checks before it is pushed, if any.
    pub fn refresh_check(&self) -> Option<&RefreshCheck> {
        self.refresh_check.as_ref()
    }
    pub fn last_failure(&self) -> Option<&Failure> {
        self.last_failure.as_ref()
    }
    /// Why the task was rejected or cancelled.
    pub fn closed_reason(&self) -> Option<&Reason> {
        self.closed_reason.as_ref()
    }
    pub fn follow_ups(&self) -> &[FollowUp] {
        &self.follow_ups
    }
    /// Follow-ups not handed over yet, oldest first: the next run gets them, or the running agent does.
    pub fn pending_follow_ups(&self) -> impl Iterator<Item = &FollowUp> {
        self.follow_ups
            .iter()
            .filter(|f| f.delivered_to_attempt.is_none())
    }
    /// The positions (in [`Task::follow_ups`]) of the follow-ups not handed over yet, oldest first.
    pub fn pending_follow_up_indices(&self) -> Vec<u32> {
        (0u32..)
            .zip(&self.follow_ups)
            .filter(|(_, f)| f.delivered_to_attempt.is_none())
            .map(|(i, _)| i)
            .collect()
    }
    pub fn created_at(&self) -> DateTime<Utc> {
        self.created_at
    }
    pub fn updated_at(&self) -> DateTime<Utc> {
        self.updated_at
    }
    pub fn ticket_version(&self) -> Option<DateTime<Utc>> {
        self.ticket_version
    }
    /// The agent profile the task asked for, if it asked.
    pub fn agent(&self) -> Option<&AgentName> {
        self.agent.as_ref()
    }
    /// When this review episode went stale, if it did (see [`stale`]).
    pub fn stale_since(&self) -> Option<DateTime<Utc>> {
        self.stale_since
    }
    /// What passed and who approved on the head commit since the last submission for review.
    pub fn landing(&self) -> &Landing {
        &self.landing
    }

    /// How many recent attempts started within the bounce window before `now`.
    fn starts_within_window(&self, now: DateTime<Utc>) -> usize {
        let window = chrono::Duration::seconds(OSCILLATION_WINDOW_S);
        self.recent_starts
            .iter()
            .filter(|at| now.signed_duration_since(**at) <= window)
            .count()
    }

    pub fn kind(&self) -> TaskKind {
        self.kind
    }
    /// A plan landed as one (`[plans] land = "combined"`): the head of its branch pidevops pushed last (its current
    /// combination's commit, or that brought up to date with the base), `None` while it has no current one.
    pub fn combined_head(&self) -> Option<&CommitSha> {
        combined::landing_commit(self).ok()
    }
    pub fn is_plan(&self) -> bool {
        self.kind == TaskKind::Plan
    }
    pub fn parent(&self) -> Option<TaskId> {
        self.parent
    }
    pub fn depends_on(&self) -> &[TaskId] {
        &self.depends_on
    }
    /// A plan's item's scope, recorded when it was made; `None` for other tasks (and items made before).
    pub fn scope(&self) -> Option<&Scope> {
        self.scope.as_ref()
    }
    /// What the live run is for (`None` when no run is live).
    pub fn purpose(&self) -> Option<RunPurpose> {
        self.purpose
    }
    /// What its next attempt is for: a plan's is its planner's, a task's is the work.
    pub fn next_purpose(&self) -> RunPurpose {
        match self.kind {
            TaskKind::Task if self.conflict.is_some() => RunPurpose::Resolve,
            TaskKind::Task if self.refresh_check.is_some() => RunPurpose::Refresh,
            TaskKind::Task => RunPurpose::Work,
            TaskKind::Plan => RunPurpose::Plan,
        }
    }
    pub fn plan(&self) -> Option<&PlanState> {
        self.plan.as_ref()
    }
    pub fn triage(&self) -> Option<&TriageState> {
        self.triage.as_ref()
    }
    /// What the attempt last submitted for review said of itself.
    pub fn report(&self) -> &AttemptReport {
        &self.report
    }
    /// A plan approved as a whole: its items do the work, and its column follows theirs.
    pub fn is_approved_plan(&self) -> bool {
        self.plan.as_ref().is_some_and(|p| p.approved_at.is_some())
    }

    /// Why the task waits for a person, if it does: its own flag, or (a plan) its items that need one.
    pub fn waiting_for_human(&self) -> Option<String> {
        if let Some(flag) = &self.needs_human {
            return Some(flag.reason.as_str().to_owned());
        }
        let plan = self.plan.as_ref()?;
        match plan.children_needing_human.as_slice() {
            [] => None,
            [one] => Some(format!("{one} needs a human")),
            many => Some(format!(
                "{} need a human",
                many.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// Whether `start` would be accepted: what the dispatcher asks before it spends a run.
    pub fn can_start(&self) -> bool {
        self.column == Column::Todo
            && self.needs_human.is_none()
            && self.attempts < self.max_attempts.get()
            && !self.is_approved_plan()
    }

    /// Whether a triage run may start: a task (not a plan) waiting in triage that no triage agent has seen.
    pub fn can_triage(&self) -> bool {
        self.column == Column::Triage
            && self.kind == TaskKind::Task
            && self.needs_human.is_none()
            && self.triage.is_none()
    }
}

/// Everything that may be asked of a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Create(Box<NewTask>),
    Approve,
    Reject {
        reason: Reason,
    },
    Start {
        run: RunId,
    },
    /// The same attempt again, from a checkpoint one of its runs made (`resume.rs`).
    Resume {
        run: RunId,
        checkpoint: Box<Checkpoint>,
    },
    SubmitForReview {
        run: RunId,
        branch: BranchName,
        pr: Option<GithubRef>,
        report: Box<AttemptReport>,
    },
    Complete,
    /// The attempt failed: counts against the budget; back to `todo`, flagged for a human after the last one.
    Retry {
        cause: RetryCause,
        reason: Reason,
    },
    Cancel {
        reason: Reason,
    },
    Archive,
    FlagNeedsHuman {
        reason: Reason,
    },
    /// Ends a needs-human episode. After the last attempt it also buys exactly one more attempt, so a human's
    /// "go again" works and the next failure asks a human again.
    ClearNeedsHuman,
    /// Only in `triage` or `todo`: a run's prompt must match the spec on record. With a `ticket_version` not
    /// newer than the task's, the edit arrived out of order and changes nothing.
    UpdateSpec {
        spec: Spec,
        ticket_version: Option<DateTime<Utc>>,
    },
    /// Queues a follow-up for the running agent or the next run. One with the `origin` key of a follow-up on
    /// record changes nothing (a redelivered or edited message). In review, with `send_back`, it sends the task
    /// back for it; without, something else will (a review's line comments wait for the review itself).
    AttachFollowUp {
        text: FollowUpText,
        origin: Option<FollowUpOrigin>,
        send_back: bool,
    },
    /// The running agent `run` was handed these follow-ups (positions in [`Task::follow_ups`]), live, in order:
    /// they must be the oldest pending ones. Ones already handed over change nothing.
    DeliverFollowUps {
        run: RunId,
        indices: Vec<u32>,
    },
    /// A person's answer to the question a task waits on (any needs-human): it becomes the next run's follow-up
    /// and ends the episode. The first answer wins; a later one is refused, and a repeat of one on record (same
    /// `origin` key) changes nothing.
    Answer {
        text: FollowUpText,
        origin: Option<FollowUpOrigin>,
    },
    /// The source ticket no longer asks for the work (closed, cancelled, deleted, its label removed, moved out of
    /// the ready state) as of `ticket_version`, by the ticket's own clock. Cancels the task before or at work (the
    /// dispatcher stops a running attempt); in review its pull request decides, and a closed task stays as it is.
    /// A version older than the one on record arrived late and changes nothing. See `ticket.rs`.
    WithdrawTicket {
        reason: Reason,
        ticket_version: Option<DateTime<Utc>>,
    },
    /// The source ticket seen at `ticket_version`, still asking for the work: recorded (never backwards), so a
    /// late, older withdrawal changes nothing and a poller does not append that version again.
    NoteTicketVersion {
        ticket_version: DateTime<Utc>,
    },
    Reprioritize {
        priority: Priority,
    },
    /// Adds links that are not set yet; a different value for a set link is a conflict.
    AttachLinks {
        links: Links,
    },
    /// Picks the agent profile of the next attempt (`None`: back to the repository's). Not while one runs: the
    /// running attempt already has its agent.
    ChooseAgent {
        agent: Option<AgentName>,
    },
    /// Starts a triage run on a task waiting in triage (not an attempt).
    StartTriage {
        run: RunId,
    },
    /// The triage run rewrote the ticket into `spec`, for its approver.
    ProposeSpec {
        run: RunId,
        spec: Spec,
    },
    /// The planner's run proposed a valid plan: it waits for approval (or is approved at once under `auto`).
    ProposePlan {
        run: RunId,
        plan: Box<PlanDocument>,
    },
    /// An approved plan's items became these tasks (in the plan's order).
    AdoptChildren {
        children: Vec<TaskId>,
    },
    /// An approved plan's column follows its items'; `needs_human` lists those waiting for a person.
    RollUp {
        column: Column,
        needs_human: Vec<TaskId>,
    },
    /// A check concluded `success` on `sha`, the commit pidevops last pushed (only in review; see `landing`).
    RecordCheckPassed {
        sha: CommitSha,
        name: FactName,
    },
    /// A trusted person approved the pull request at `sha` (only in review).
    RecordApproval {
        by: FactName,
        sha: CommitSha,
    },
    /// `by`'s approval was dismissed on GitHub: it no longer counts.
    WithdrawApproval {
        by: FactName,
    },
    /// The plan's items (open, all in review) were merged at their recorded commits into `commit` on
    /// `pidevops/<plan>` from `base` and pushed (`land = "combined"`).
    RecordCombined {
        commit: CommitSha,
        base: CommitSha,
        items: Vec<CombinedItem>,
    },
    /// pidevops merged `commit`, what run `run` pushed for review, into the base (now `onto`) and pushed it: the
    /// task is done. Refused unless `run` is the run that put the task in review (a newer attempt's work is not
    /// what landed); in `done` already, nothing to do.
    RecordLanded {
        run: RunId,
        commit: CommitSha,
        onto: CommitSha,
        fast_forward: bool,
    },
    /// pidevops pushed `to`, its branch's `from` brought up to date with the base at `base` (the `refresh` loop).
    RecordRefresh {
        from: CommitSha,
        to: CommitSha,
        base: CommitSha,
        strategy: RefreshMode,
    },
    /// The merge queue chose the task's pull request `number` at `sha` to merge next (`landing::queue`): refused
    /// unless it is in review, not flagged, `number` is its review request and `sha` the head its landing facts
    /// are about; nothing when that head is queued already.
    QueueMerge {
        sha: CommitSha,
        number: u64,
    },
    /// The loop `stale_reviews` saw the task in review untouched since `last_activity` for `after_h` hours:
    /// `went_stale` (and, under `close`, its cancellation), unless it was touched since or marked already in this
    /// review episode (then nothing). See `stale.rs`.
    MarkStale {
        after_h: u32,
        action: StaleAction,
        last_activity: DateTime<Utc>,
    },
    /// The `refresh` loop found the task's pushed commit in conflict with its moved base: an agent resolves it in
    /// an attempt of its own kind, or a person is flagged (see `conflict.rs`). Only in review.
    ResolveConflict {
        conflict: Box<Conflict>,
    },
    /// The `refresh` loop brought the branch up to date but the repository has a `check`: it runs first, in an
    /// attempt of its own kind, and only then is the refresh pushed (see `refresh_check.rs`). Only in review.
    CheckRefresh {
        check: Box<RefreshCheck>,
    },
    /// Run `run`, the refresh check, found the repository's check failing on the refresh (`reason`: its failure
    /// and output): nothing pushed; an agent makes it pass, or a person is flagged (see `refresh_check.rs`).
    FailRefreshCheck {
        run: RunId,
        reason: Reason,
    },
}

impl Command {
    /// The command's name in errors and in the CLI.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Create(_) => "create",
            Command::Approve => "approve",
            Command::Reject { .. } => "reject",
            Command::Start { .. } => "start",
            Command::Resume { .. } => "resume",
            Command::SubmitForReview { .. } => "submit-for-review",
            Command::Complete => "complete",
            Command::Retry { .. } => "retry",
            Command::Cancel { .. } => "cancel",
            Command::Archive => "archive",
            Command::FlagNeedsHuman { .. } => "flag-needs-human",
            Command::ClearNeedsHuman => "clear-needs-human",
            Command::UpdateSpec { .. } => "update-spec",
            Command::AttachFollowUp { .. } => "attach-follow-up",
            Command::DeliverFollowUps { .. } => "deliver-follow-ups",
            Command::Answer { .. } => "answer",
            Command::WithdrawTicket { .. } => "withdraw-ticket",
            Command::NoteTicketVersion { .. } => "note-ticket-version",
            Command::Reprioritize { .. } => "reprioritize",
            Command::AttachLinks { .. } => "attach-links",
            Command::ChooseAgent { .. } => "choose-agent",
            Command::StartTriage { .. } => "start-triage",
            Command::ProposeSpec { .. } => "propose-spec",
            Command::ProposePlan { .. } => "propose-plan",
            Command::AdoptChildren { .. } => "adopt-children",
            Command::RollUp { .. } => "roll-up",
            Command::RecordCheckPassed { .. } => "record-check-passed",
            Command::RecordApproval { .. } => "record-approval",
            Command::WithdrawApproval { .. } => "withdraw-approval",
            Command::RecordCombined { .. } => "record-combined",
            Command::RecordLanded { .. } => "record-landed",
            Command::RecordRefresh { .. } => "record-refresh",
            Command::QueueMerge { .. } => "queue-merge",
            Command::MarkStale { .. } => "mark-stale",
            Command::ResolveConflict { .. } => "resolve-conflict",
            Command::CheckRefresh { .. } => "check-refresh",
            Command::FailRefreshCheck { .. } => "fail-refresh-check",
        }
    }
}

const OPEN: &[Column] = &[
    Column::Triage,
    Column::Todo,
    Column::InProgress,
    Column::InReview,
];
const BEFORE_WORK: &[Column] = &[Column::Triage, Column::Todo];
/// Where no attempt is running and another may come.
const BETWEEN_ATTEMPTS: &[Column] = &[Column::Triage, Column::Todo, Column::InReview];
const CLOSED: &[Column] = &[Column::Done, Column::Cancelled];
const NOT_ARCHIVED: &[Column] = &[
    Column::Triage,
    Column::Todo,
    Column::InProgress,
    Column::InReview,
    Column::Done,
    Column::Cancelled,
];

#[cfg(test)]
mod tests;
