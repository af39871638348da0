//! What a run says about itself: `run.started`, `run.heartbeat`, and exactly one terminal event
//! (`run.succeeded` or `run.failed` with its reason), in the run's own stream `run:<run id>`. Pure.
//!
//! Exactly one terminal event holds however many writers race (the runner, the watchdog declaring the run lost,
//! a worker's late report): each carries the stream version it expects *and* the dedup key `run:<id>:end`, so the
//! second writer meets a conflict or a duplicate and adopts the outcome on record instead of writing its own.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::tail_chars;
use super::usage::RunUsage;
use crate::tasks::plan::PlanDocument;
use crate::tasks::{AttemptReport, BranchName, Checkpoint, Reason, RunId, Spec, TaskId};

pub const RUN_STREAM_PREFIX: &str = "run:";
/// The type of [`RunEvent::EgressRefused`] (the task page reads a run's by it).
pub const EGRESS_REFUSED: &str = "run.egress_refused";
/// The type of [`RunEvent::Checkpointed`] (a resume reads a run's last one by it).
pub const CHECKPOINTED: &str = "run.checkpointed";

/// Most bytes of an agent's output an event carries (the whole output is in the run's log file).
pub const TAIL_BYTES: usize = 4096;

pub fn stream(run: RunId) -> String {
    format!("{RUN_STREAM_PREFIX}{run}")
}

/// The dedup key of a run's terminal event: one per run, whoever writes it.
pub fn end_key(run: RunId) -> String {
    format!("run:{run}:end")
}

/// Why a run failed. Each kind is a different thing for a person to do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The agent exited non-zero or was killed by a signal it did not get from us.
    Exit,
    /// It ran longer than the profile's `timeout_s`.
    Timeout,
    /// It printed nothing for longer than the profile's `no_output_timeout_s`.
    Stalled,
    /// It exited 0 but left the worktree as it found it.
    NoChanges,
    /// Its work was committed but the branch could not be pushed.
    PushFailed,
    /// The worktree could not be prepared (clone, fetch, `git worktree add`) or the agent could not be started.
    Workspace,
    /// Nobody reported on it within the watchdog's bound: its process or machine died.
    Lost,
    /// The run was stopped because the task was cancelled or moved on.
    Stopped,
    /// pidevops shut down (SIGTERM, a deploy) while the agent ran: the attempt is given back.
    Interrupted,
    /// The repository's `setup` or `before_run` failed or timed out, or a secret it names is unset, before the
    /// agent ran: the attempt is given back (`RetryCause::SetupFailed`).
    Setup,
    /// The agent's work did not pass the repository's `check`: the task goes back with the check's output.
    Check,
    /// The repository's `after_run` failed on the agent's work.
    AfterRun,
    /// What the agent had to leave for pidevops (a planner's `plan.json`, a triage agent's `spec.json`) is
    /// missing or refused, or its own status file is; the detail lists every reason.
    Invalid,
    /// The agent said it needs a person (`.pidevops/status.json`): the task is flagged at once.
    NeedsHuman,
    /// The agent asked a question (`.pidevops/question.md`): nothing is pushed, the attempt is given back and the
    /// task waits for a person's answer, asked where it came from.
    Asked,
    /// The agent said its work is not resolved (`resolved: false`, `unresolved_files`): nothing is pushed.
    Unresolved,
    /// It changed files outside its task's scope (`scope = "enforce"`): nothing is pushed.
    Scope,
    /// The reviewer agent asked for changes: nothing is pushed, and the next attempt gets the review.
    Review,
    /// The reviewer agent could not review (it failed, or left no verdict): not the work's fault, so the attempt
    /// is given back, like a failed setup.
    Reviewer,
    /// The agent ran into its provider's usage or rate limit: the attempt is given back, the task waits until
    /// the limit lifts, and its profile starts nothing meanwhile.
    Limited,
    /// It took a budget (`[budgets]`) over its limit and was stopped: the task is flagged for a person.
    Budget,
    /// It was stopped to start again with a follow-up that came while it ran (`on_follow_up = "restart"`): the
    /// attempt is given back.
    Restarted,
    /// It printed more than `[dispatch] output_max_mib`, or the workspace volume fell below half of
    /// `min_free_disk_mib` while it ran, and it was stopped: the task is flagged for a person (an agent that floods
    /// once floods again).
    Flooded,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Exit => "exit",
            FailureKind::Timeout => "timeout",
            FailureKind::Stalled => "stalled",
            FailureKind::NoChanges => "no_changes",
            FailureKind::PushFailed => "push_failed",
            FailureKind::Workspace => "workspace",
            FailureKind::Lost => "lost",
            FailureKind::Stopped => "stopped",
            FailureKind::Interrupted => "interrupted",
            FailureKind::Setup => "setup",
            FailureKind::Check => "check",
            FailureKind::AfterRun => "after_run",
            FailureKind::Invalid => "invalid",
            FailureKind::NeedsHuman => "needs_human",
            FailureKind::Asked => "asked",
            FailureKind::Unresolved => "unresolved",
            FailureKind::Scope => "scope",
            FailureKind::Review => "review",
            FailureKind::Reviewer => "reviewer",
            FailureKind::Limited => "limited",
            FailureKind::Budget => "budget",
            FailureKind::Restarted => "restarted",
            FailureKind::Flooded => "flooded",
        }
    }
}

impl FailureKind {
    /// Every kind (a new one is added here too: the dashboard reads the runs read model's names back with it).
    pub const ALL: [FailureKind; 23] = [
        FailureKind::Exit,
        FailureKind::Timeout,
        FailureKind::Stalled,
        FailureKind::NoChanges,
        FailureKind::PushFailed,
        FailureKind::Workspace,
        FailureKind::Lost,
        FailureKind::Stopped,
        FailureKind::Interrupted,
        FailureKind::Setup,
        FailureKind::Check,
        FailureKind::AfterRun,
        FailureKind::Invalid,
        FailureKind::NeedsHuman,
        FailureKind::Asked,
        FailureKind::Unresolved,
        FailureKind::Scope,
        FailureKind::Review,
        FailureKind::Reviewer,
        FailureKind::Limited,
        FailureKind::Budget,
        FailureKind::Restarted,
        FailureKind::Flooded,
    ];

    /// What happened, for a person reading a run's row (the dashboard): the kind's name is for machines.
    pub fn for_a_person(self) -> &'static str {
        match self {
            FailureKind::Exit => "the agent exited with an error",
            FailureKind::Timeout => "it ran past its time limit",
            FailureKind::Stalled => "it printed nothing for too long",
            FailureKind::NoChanges => "it changed nothing",
            FailureKind::PushFailed => "its branch could not be pushed",
            FailureKind::Workspace => "its workspace could not be prepared",
            FailureKind::Lost => "lost: nothing reported on it",
            FailureKind::Stopped => "stopped: the task was cancelled or moved on",
            FailureKind::Interrupted => "interrupted by a pidevops shutdown (not counted)",
            FailureKind::Setup => "the repository's setup failed (not counted)",
            FailureKind::Check => "the repository's check failed",
            FailureKind::AfterRun => "the repository's after_run failed",
            FailureKind::Invalid => "what it left in .pidevops/ was refused",
            FailureKind::NeedsHuman => "the agent asked for a person",
            FailureKind::Asked => "the agent asked a question (not counted)",
            FailureKind::Unresolved => "the agent said its work is not resolved",
            FailureKind::Scope => "it changed files outside its scope",
            FailureKind::Review => "the reviewer asked for changes",
            FailureKind::Reviewer => "the reviewer could not review (not counted)",
            FailureKind::Limited => "its provider's usage or rate limit (not counted)",
            FailureKind::Budget => "stopped: over its budget",
            FailureKind::Restarted => "stopped to start again with a follow-up (not counted)",
            FailureKind::Flooded => "stopped: its output or the disk it filled went past a bound",
        }
    }
}

impl std::str::FromStr for FailureKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        FailureKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == s)
            .ok_or_else(|| format!("no failure kind {s:?}"))
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One fact about a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    Started {
        at: DateTime<Utc>,
        run: RunId,
        task: TaskId,
        attempt: u32,
        profile: String,
        /// The process running it (`PIDEVOPS_INSTANCE_ID` of a `serve` or a `worker`).
        worker: String,
        /// The run's log file, on the worker's machine.
        log: String,
    },
    Heartbeat {
        at: DateTime<Utc>,
        run: RunId,
        task: TaskId,
        /// Output bytes so far: a person sees whether the agent is doing anything.
        output_bytes: u64,
    },
    Succeeded {
        at: DateTime<Utc>,
        run: RunId,
        task: TaskId,
        attempt: u32,
        branch: BranchName,
        commit: String,
        duration_s: f64,
        tail: String,
        /// What the attempt says of itself: the agent's summary, the reviewer's approval, files out of scope.
        #[serde(default, skip_serializing_if = "AttemptReport::is_empty")]
        report: Box<AttemptReport>,
        /// What the agent spent, where its profile reads usage from its output.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<RunUsage>,
        /// What the reviewer agent spent on this attempt, where a reviewer ran.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reviewer_usage: Option<RunUsage>,
    },
    Failed {
        at: DateTime<Utc>,
        run: RunId,
        task: TaskId,
        attempt: u32,
        kind: FailureKind,
        /// What a person (and the next attempt's prompt) reads: the exit status, the limit hit, git's error.
        detail: String,
        duration_s: f64,
        tail: String,
        /// What the agent spent, where its profile reads usage from its output.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<RunUsage>,
        /// `limited`: when the task (and its profile) may run again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        until: Option<DateTime<Utc>>,
        /// What the reviewer agent spent on this attempt, where a reviewer ran.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reviewer_usage: Option<RunUsage>,
    },
    /// pidevops saved the worktree while the agent worked (a commit on a private ref): where a resumed attempt
    /// starts (`tasks::domain::resume`).
    Checkpointed {
        at: DateTime<Utc>,
        run: RunId,
        task: TaskId,
        checkpoint: Box<Checkpoint>,
    },
    /// What the run's egress proxies refused (its agent, its hooks, its reviewer), by host and port: appended
    /// once, before the outcome, when anything was refused.
    EgressRefused {
        at: DateTime<Utc>,
        run: RunId,
        task: TaskId,
        refused: Vec<RefusedEgress>,
    },
    /// A planner or triage run ended with what it was asked for: nothing pushed, a proposal for a person.
    Proposed {
        at: DateTime<Utc>,
        run: RunId,
        task: TaskId,
        attempt: u32,
        proposal: Proposal,
        duration_s: f64,
        tail: String,
        /// What the agent spent, where its profile reads usage from its output.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<RunUsage>,
    },
}

/// One destination an agent's egress proxy refused during a run, and how often (dispatch/egress).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedEgress {
    pub host: String,
    pub port: u16,
    pub count: u64,
}

impl RefusedEgress {
    /// A run's refusals from all its `EgressRefused` events, one line per (host, port), counts added (saturating:
    /// the counts are ours, but a sum must never wrap), in host and port order.
    pub fn merged<'a>(lists: impl IntoIterator<Item = &'a [RefusedEgress]>) -> Vec<RefusedEgress> {
        let mut by_destination: std::collections::BTreeMap<(&str, u16), u64> = Default::default();
        for refused in lists.into_iter().flatten() {
            let count = by_destination
                .entry((refused.host.as_str(), refused.port))
                .or_default();
            *count = count.saturating_add(refused.count);
        }
        by_destination
            .into_iter()
            .map(|((host, port), count)| RefusedEgress {
                host: host.to_owned(),
                port,
                count,
            })
            .collect()
    }
}

/// What a planner or triage run proposes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Proposal {
    Plan { plan: Box<PlanDocument> },
    Spec { spec: Spec },
}

impl RunEvent {
    pub fn kind(&self) -> &'static str {
        match self {
            RunEvent::Started { .. } => "run.started",
            RunEvent::Heartbeat { .. } => "run.heartbeat",
            RunEvent::Succeeded { .. } => "run.succeeded",
            RunEvent::Failed { .. } => "run.failed",
            RunEvent::Proposed { .. } => "run.proposed",
            RunEvent::EgressRefused { .. } => EGRESS_REFUSED,
            RunEvent::Checkpointed { .. } => CHECKPOINTED,
        }
    }

    pub fn run(&self) -> RunId {
        match self {
            RunEvent::Started { run, .. }
            | RunEvent::Heartbeat { run, .. }
            | RunEvent::Succeeded { run, .. }
            | RunEvent::Failed { run, .. }
            | RunEvent::Proposed { run, .. }
            | RunEvent::EgressRefused { run, .. }
            | RunEvent::Checkpointed { run, .. } => *run,
        }
    }

    pub fn task(&self) -> TaskId {
        match self {
            RunEvent::Started { task, .. }
            | RunEvent::Heartbeat { task, .. }
            | RunEvent::Succeeded { task, .. }
            | RunEvent::Failed { task, .. }
            | RunEvent::Proposed { task, .. }
            | RunEvent::EgressRefused { task, .. }
            | RunEvent::Checkpointed { task, .. } => *task,
        }
    }

    pub fn at(&self) -> DateTime<Utc> {
        match self {
            RunEvent::Started { at, .. }
            | RunEvent::Heartbeat { at, .. }
            | RunEvent::Succeeded { at, .. }
            | RunEvent::Failed { at, .. }
            | RunEvent::Proposed { at, .. }
            | RunEvent::EgressRefused { at, .. }
            | RunEvent::Checkpointed { at, .. } => *at,
        }
    }

    /// What the run's reviewer spent, on its outcome.
    pub fn reviewer_usage(&self) -> Option<&RunUsage> {
        match self {
            RunEvent::Succeeded { reviewer_usage, .. }
            | RunEvent::Failed { reviewer_usage, .. } => reviewer_usage.as_ref(),
            _ => None,
        }
    }

    /// The outcome with what its reviewer spent: `Some` for a reviewer that ran, though it reported nothing (its
    /// run is counted, its cost unknown), `None` for none.
    pub fn with_reviewer_usage(mut self, spent: Option<RunUsage>) -> Self {
        match &mut self {
            RunEvent::Succeeded { reviewer_usage, .. }
            | RunEvent::Failed { reviewer_usage, .. } => *reviewer_usage = spent,
            _ => {}
        }
        self
    }

    /// What the run spent, on its outcome.
    pub fn usage(&self) -> Option<&RunUsage> {
        match self {
            RunEvent::Succeeded { usage, .. }
            | RunEvent::Failed { usage, .. }
            | RunEvent::Proposed { usage, .. } => usage.as_ref(),
            RunEvent::Started { .. }
            | RunEvent::Heartbeat { .. }
            | RunEvent::Checkpointed { .. }
            | RunEvent::EgressRefused { .. } => None,
        }
    }

    /// The outcome with what the run spent: `Some` for a run whose agent ran, though it reported nothing (the
    /// usage read model counts the run, its cost unknown) or only figures refused; `None` where no agent ran.
    pub fn with_usage(mut self, spent: Option<RunUsage>) -> Self {
        match &mut self {
            RunEvent::Succeeded { usage, .. }
            | RunEvent::Failed { usage, .. }
            | RunEvent::Proposed { usage, .. } => *usage = spent,
            RunEvent::Started { .. }
            | RunEvent::Heartbeat { .. }
            | RunEvent::Checkpointed { .. }
            | RunEvent::EgressRefused { .. } => {}
        }
        self
    }

    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            RunEvent::Succeeded { .. } | RunEvent::Failed { .. } | RunEvent::Proposed { .. }
        )
    }

    /// The reason the task's retry records (and the next prompt shows): kind, detail and the output's tail.
    pub fn failure_reason(&self) -> Option<Reason> {
        match self {
            RunEvent::Failed {
                attempt,
                kind,
                detail,
                tail,
                ..
            } => {
                let mut text = format!("run {kind} (attempt {attempt}): {detail}");
                let tail = tail.trim();
                if !tail.is_empty() {
                    // The end of the output says most about a failure; keep the end when it must be cut.
                    let room = Reason::MAX_CHARS.saturating_sub(text.len() + 32);
                    text.push_str("\nlast output:\n");
                    text.push_str(tail_chars(tail, room));
                }
                Some(Reason::summarize(&text))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(tail: &str) -> RunEvent {
        RunEvent::Failed {
            at: Utc::now(),
            run: RunId(uuid::Uuid::now_v7()),
            task: "T-7".parse().unwrap(),
            attempt: 2,
            kind: FailureKind::Exit,
            detail: "exited with status 1".into(),
            duration_s: 1.5,
            tail: tail.into(),
            usage: None,
            until: None,
            reviewer_usage: None,
        }
    }

    #[test]
    fn every_failure_kind_reads_back_from_its_name_and_has_words_for_a_person() {
        for kind in FailureKind::ALL {
            assert_eq!(kind.as_str().parse::<FailureKind>(), Ok(kind));
            // The name as serde writes it is the one the runs read model stores.
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                serde_json::json!(kind.as_str())
            );
            assert!(!kind.for_a_person().is_empty(), "{kind}");
        }
        assert!("nonsense".parse::<FailureKind>().is_err());
    }

    #[test]
    fn a_failure_reason_names_the_kind_the_attempt_and_the_end_of_the_output() {
        let reason = failed("compiling\nerror: it broke\n")
            .failure_reason()
            .unwrap();
        assert_eq!(
            reason.as_str(),
            "run exit (attempt 2): exited with status 1\nlast output:\ncompiling\nerror: it broke"
        );
    }

    #[test]
    fn a_long_tail_keeps_its_end_and_the_reason_fits() {
        let tail = format!("{}THE END", "é".repeat(10_000));
        let reason = failed(&tail).failure_reason().unwrap();
        assert!(reason.as_str().len() <= Reason::MAX_CHARS);
        assert!(reason.as_str().ends_with("THE END"));
        assert!(reason.as_str().starts_with("run exit (attempt 2)"));
    }

    #[test]
    fn only_failures_give_a_reason_and_only_outcomes_are_terminal() {
        let started = RunEvent::Heartbeat {
            at: Utc::now(),
            run: RunId(uuid::Uuid::now_v7()),
            task: "T-1".parse().unwrap(),
            output_bytes: 3,
        };
        assert!(started.failure_reason().is_none());
        assert!(!started.is_terminal());
        assert!(failed("").is_terminal());
    }

    #[test]
    fn refusals_merge_per_destination_and_never_wrap() {
        let line = |host: &str, port, count| RefusedEgress {
            host: host.to_owned(),
            port,
            count,
        };
        let agent = [line("b.example", 443, 2), line("a.example", 443, 1)];
        let reviewer = [
            line("b.example", 443, u64::MAX),
            line("b.example", 80, 1),
            line("a.example", 443, 4),
        ];
        assert_eq!(
            RefusedEgress::merged([&agent[..], &reviewer[..]]),
            vec![
                line("a.example", 443, 5),
                line("b.example", 80, 1),
                line("b.example", 443, u64::MAX),
            ]
        );
        assert!(RefusedEgress::merged(std::iter::empty()).is_empty());
    }

    #[test]
    fn events_round_trip_with_their_type_tag() {
        let event = failed("x");
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["type"], "failed");
        assert_eq!(json["kind"], "exit");
        assert_eq!(serde_json::from_value::<RunEvent>(json).unwrap(), event);
    }
}
