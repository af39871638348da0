//! What a new task is made of: its spec and settings, and where it sits among others (a plan, a plan's item).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::super::plan::Scope;
use super::super::values::{
    AgentName, ApprovalPolicy, Links, MaxAttempts, Priority, RepoName, Spec, TaskId, TaskKind,
};

/// Where a new task sits among others: on its own (the default), a plan, or one of a plan's items.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Family {
    #[serde(default, skip_serializing_if = "TaskKind::is_task")]
    pub kind: TaskKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<TaskId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<TaskId>,
    /// A plan's item: the globs its plan gave it, validated with the plan. Its attempts are held to these, never
    /// to the spec's scope line (which a spec edit can change). `None`: not an item, or an item made before
    /// scopes were recorded (see `docs/plans.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
}

impl Family {
    /// A plan of its own.
    pub fn plan() -> Self {
        Family {
            kind: TaskKind::Plan,
            ..Family::default()
        }
    }
}

/// What a new task is made of. Intake builds it; the approval policy and attempt budget come from configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewTask {
    pub id: TaskId,
    pub repo: RepoName,
    pub spec: Spec,
    pub priority: Priority,
    pub links: Links,
    pub approval: ApprovalPolicy,
    pub max_attempts: MaxAttempts,
    /// The source ticket's last-change time, by its own clock, when it has one (see [`Task::ticket_version`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket_version: Option<DateTime<Utc>>,
    /// The agent profile asked for (a label, the API); `None`: the repository's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentName>,
    /// A plan, a plan's item, or a task on its own.
    #[serde(default, flatten)]
    pub family: Family,
}
