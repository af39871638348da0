//! The plans loop: the policy that carries an approved plan into its items and their news back to the plan. A
//! singleton loop reads the log after its checkpoint:
//!
//! - `task.plan_approved`: each item of the approved proposal becomes a task (in the plan's order, dependencies
//!   first, so each item's `depends_on` names tasks that exist), created once per item under the intake key
//!   `plan:<plan>:<revision>:<item>`; then the plan adopts them (`task.children_created`).
//! - any news of an item (started, submitted, done, failed, flagged, cancelled, …): the plan's column is rolled
//!   up from its items' (`tasks::roll_up`, pure) and recorded when it changed (`task.rolled_up`).
//! - `task.cancelled` of an item: the items that depend on it can never start; each is flagged for a person.
//! - `task.cancelled` of a plan: its open items are cancelled (a cancelled plan's agents stop).
//!
//! With `[plans] land = "combined"` the items' work lands as one: the `combine` loop ([`combine`]) merges it
//! into `pidevops/<plan>` once every open item is in review. An item that depends on another could then never
//! start (its dependency is done only when the plan's one pull request merges), so such a plan is flagged for a
//! person when its items are made.
//!
//! Every command is idempotent by key or by the task's state, so a crash before the checkpoint moves repeats
//! nothing that matters: creation dedups on the intake key, adoption of the same items is a no-op, a roll-up to
//! where the plan is changes nothing, a flag already up or a cancel already done is refused or a no-op.

pub mod combine;

use anyhow::Context;

use crate::board::{Board, BoardError, Draft};
use crate::domain::Source;
use crate::eventlog::{EventLog, StoredEvent};
use crate::loops::follow::{AsStored, Follow, Follower, Next, Wanted};
use crate::tasks::plan::Scope;
use crate::tasks::PlanLand;
use crate::tasks::{
    roll_up, ApprovalPolicy, ChildView, Command, Family, Reason, TaskEvent, TaskId, TaskKind,
};

/// The loop's name and its checkpoint's.
pub const PLANS: &str = "plans";
/// Who the plans loop's commands are from.
const ACTOR: &str = "plans";

/// What one tick did, for `/health`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PlansProgress {
    pub position: i64,
    /// Items made tasks.
    pub created: u64,
    pub rolled_up: u64,
    /// Items flagged because a task they depend on was cancelled.
    pub flagged: u64,
    /// Items cancelled with their plan.
    pub cancelled: u64,
    #[serde(skip)]
    pub out_of_time: bool,
}

#[derive(Clone, Debug)]
pub struct Plans {
    log: EventLog,
    board: Board,
    /// `[plans] land`: how the items reach GitHub.
    land: PlanLand,
    follow: Follow<StoredEvent>,
}

impl Plans {
    pub fn new(log: EventLog, board: Board, land: PlanLand) -> Self {
        Self {
            log,
            board,
            land,
            follow: Follow::default(),
        }
    }

    /// Handles what was committed since the checkpoint (see [`crate::loops::follow`]).
    pub async fn tick(&self) -> anyhow::Result<PlansProgress> {
        let followed = self.follow.tick(self.log.store(), self).await?;
        Ok(PlansProgress {
            position: followed.position,
            out_of_time: followed.out_of_time,
            ..followed.tally
        })
    }

    async fn handle_event(
        &self,
        event: &StoredEvent,
        progress: &mut PlansProgress,
    ) -> anyhow::Result<()> {
        if event.source != Source::Pidevops.as_str() {
            return Ok(());
        }
        let Some(id) = event.stream.as_deref().and_then(TaskId::from_stream) else {
            return Ok(());
        };
        let task_event = TaskEvent::from_stored(&event.event_type, &event.body)
            .with_context(|| format!("task:{id}"))?;
        match task_event {
            TaskEvent::PlanApproved { .. } => self.adopt(id, event, progress).await,
            TaskEvent::Cancelled { reason, .. } => self.cancelled(id, &reason, progress).await,
            TaskEvent::Created(_)
            | TaskEvent::Approved { .. }
            | TaskEvent::Rejected { .. }
            | TaskEvent::Started { .. }
            | TaskEvent::Resumed { .. }
            | TaskEvent::SubmittedForReview { .. }
            | TaskEvent::Completed { .. }
            | TaskEvent::Retried { .. }
            | TaskEvent::Archived { .. }
            | TaskEvent::FlaggedNeedsHuman { .. }
            | TaskEvent::NeedsHumanCleared { .. } => self.news_of_item(id, progress).await,
            TaskEvent::SpecUpdated { .. }
            | TaskEvent::FollowUpAttached { .. }
            | TaskEvent::FollowUpsDelivered { .. }
            | TaskEvent::TicketSeen { .. }
            | TaskEvent::PriorityChanged { .. }
            | TaskEvent::LinksAttached { .. }
            | TaskEvent::AttemptReturned { .. }
            | TaskEvent::AgentChosen { .. }
            | TaskEvent::TriageEnded { .. }
            | TaskEvent::PlanProposed { .. }
            | TaskEvent::PlanRejected { .. }
            | TaskEvent::ChildrenCreated { .. }
            | TaskEvent::RolledUp { .. }
            | TaskEvent::CheckPassed { .. }
            | TaskEvent::ReviewApproved { .. }
            | TaskEvent::ApprovalWithdrawn { .. }
            | TaskEvent::Combined { .. }
            | TaskEvent::Landed { .. }
            | TaskEvent::MergeQueued { .. }
            | TaskEvent::Refreshed { .. }
            | TaskEvent::WentStale { .. }
            | TaskEvent::ConflictFound { .. }
            | TaskEvent::ConflictUnresolved { .. }
            | TaskEvent::RefreshCheckDue { .. }
            | TaskEvent::RefreshCheckFailed { .. } => Ok(()),
        }
    }

    /// The approved plan's items become tasks, once each, and the plan adopts them.
    async fn adopt(
        &self,
        plan: TaskId,
        event: &StoredEvent,
        progress: &mut PlansProgress,
    ) -> anyhow::Result<()> {
        let Some(loaded) = self.board.load(plan).await? else {
            return Ok(());
        };
        let task = loaded.task;
        let Some(state) = task.plan() else {
            return Ok(());
        };
        // Cancelled since (or adopted before a crash left the checkpoint behind): nothing more to make.
        if !task.column().is_open() || !state.children.is_empty() {
            return self.roll_up(plan, progress).await;
        }
        let Some(document) = state.proposal.as_deref() else {
            return Ok(());
        };
        let mut made: Vec<(&crate::tasks::plan::ItemId, TaskId)> = Vec::new();
        for item in document.topological_order() {
            let depends_on = item
                .depends_on()
                .iter()
                .filter_map(|dep| {
                    made.iter()
                        .find(|(id, _)| *id == dep)
                        .map(|(_, task)| *task)
                })
                .collect();
            let draft = Draft {
                priority: Some(task.priority()),
                // The plan was approved as a whole: its items do not wait for another approval.
                approval: Some(ApprovalPolicy::Auto),
                family: Family {
                    kind: TaskKind::Task,
                    parent: Some(plan),
                    depends_on,
                    scope: Scope::new(item.scope().to_vec()),
                },
                ..Draft::new(task.repo().clone(), item.spec(), Default::default())
            };
            let key = format!("plan:{plan}:{}:{}", state.revision, item.id());
            let (outcome, created) = self
                .board
                .create(draft, &key, ACTOR, Some(event.id))
                .await
                .with_context(|| format!("making item {} of {plan} a task", item.id()))?;
            if created {
                progress.created += 1;
            }
            made.push((item.id(), outcome.task.id()));
        }
        let children: Vec<TaskId> = made.iter().map(|(_, id)| *id).collect();
        if self.land == PlanLand::Combined {
            self.dependents_cannot_land(plan, document, &made, progress)
                .await?;
        }
        match self
            .board
            .execute(plan, &Command::AdoptChildren { children }, ACTOR)
            .await
        {
            Ok(_) => {}
            // Cancelled meanwhile: its items are cancelled when that event is handled.
            Err(BoardError::Refused(refused)) => {
                tracing::info!(%plan, %refused, "items not adopted");
            }
            Err(error) => return Err(error).with_context(|| format!("adopting {plan}'s items")),
        }
        self.roll_up(plan, progress).await
    }

    /// Under `land = "combined"` an item waits for its dependencies to be done, and they are done only when the
    /// plan's one pull request merges, which waits for that item: it can never start. A person decides.
    async fn dependents_cannot_land(
        &self,
        plan: TaskId,
        document: &crate::tasks::plan::PlanDocument,
        made: &[(&crate::tasks::plan::ItemId, TaskId)],
        progress: &mut PlansProgress,
    ) -> anyhow::Result<()> {
        let task_of = |item: &crate::tasks::plan::ItemId| {
            made.iter()
                .find(|(id, _)| *id == item)
                .map_or_else(|| item.to_string(), |(_, task)| task.to_string())
        };
        let waiting: Vec<String> = document
            .items()
            .iter()
            .filter(|item| !item.depends_on().is_empty())
            .map(|item| {
                let on: Vec<String> = item.depends_on().iter().map(task_of).collect();
                format!("{} on {}", task_of(item.id()), on.join(" and "))
            })
            .collect();
        if waiting.is_empty() {
            return Ok(());
        }
        let why = Reason::summarize(&format!(
            "[plans] land = \"combined\" lands the items together in one pull request, so an item that depends \
             on another can never start (its dependency is done only when that pull request merges): {}. Cancel \
             the dependent items (they can be a plan of their own once this one lands), or cancel the plan",
            waiting.join("; ")
        ));
        if self
            .command(plan, Command::FlagNeedsHuman { reason: why })
            .await?
        {
            progress.flagged += 1;
        }
        Ok(())
    }

    /// Something happened to a task: if it is a plan's item, the plan follows.
    async fn news_of_item(&self, id: TaskId, progress: &mut PlansProgress) -> anyhow::Result<()> {
        let Some(loaded) = self.board.load(id).await? else {
            return Ok(());
        };
        match loaded.task.parent() {
            Some(plan) => self.roll_up(plan, progress).await,
            None => Ok(()),
        }
    }

    /// The plan's column, from its items'.
    async fn roll_up(&self, plan: TaskId, progress: &mut PlansProgress) -> anyhow::Result<()> {
        let Some(loaded) = self.board.load(plan).await? else {
            return Ok(());
        };
        let Some(state) = loaded.task.plan() else {
            return Ok(());
        };
        let mut views = Vec::with_capacity(state.children.len());
        for child in &state.children {
            if let Some(item) = self.board.load(*child).await? {
                views.push(ChildView {
                    id: *child,
                    column: item.task.column(),
                    needs_human: item.task.needs_human().is_some(),
                });
            }
        }
        let Some(rolled) = roll_up(&views) else {
            return Ok(());
        };
        let command = Command::RollUp {
            column: rolled.column,
            needs_human: rolled.needs_human,
        };
        match self.board.execute(plan, &command, ACTOR).await {
            Ok(outcome) => {
                if !outcome.appended.is_empty() {
                    progress.rolled_up += 1;
                }
                Ok(())
            }
            Err(BoardError::Refused(refused)) => {
                tracing::info!(%plan, %refused, "plan not rolled up");
                Ok(())
            }
            Err(error) => Err(error).with_context(|| format!("rolling up {plan}")),
        }
    }

    /// A cancelled plan takes its open items with it; a cancelled item leaves its dependents unable to start.
    async fn cancelled(
        &self,
        id: TaskId,
        reason: &Reason,
        progress: &mut PlansProgress,
    ) -> anyhow::Result<()> {
        let Some(loaded) = self.board.load(id).await? else {
            return Ok(());
        };
        let task = loaded.task;
        if let Some(state) = task.plan() {
            for child in &state.children {
                let why = Reason::summarize(&format!("its plan {id} was cancelled: {reason}"));
                if self
                    .command(*child, Command::Cancel { reason: why })
                    .await?
                {
                    progress.cancelled += 1;
                }
            }
            return Ok(());
        }
        let Some(plan) = task.parent() else {
            return Ok(());
        };
        if let Some(parent) = self.board.load(plan).await? {
            for sibling in parent
                .task
                .plan()
                .map(|p| p.children.clone())
                .unwrap_or_default()
            {
                let Some(dependent) = self.board.load(sibling).await? else {
                    continue;
                };
                if !dependent.task.depends_on().contains(&id) || !dependent.task.column().is_open()
                {
                    continue;
                }
                let why = Reason::summarize(&format!(
                    "{sibling} depends on {id}, which was cancelled ({reason}): it cannot start until a \
                     person decides (cancel it, or make the work another way)"
                ));
                if self
                    .command(sibling, Command::FlagNeedsHuman { reason: why })
                    .await?
                {
                    progress.flagged += 1;
                }
            }
        }
        self.roll_up(plan, progress).await
    }

    /// Runs `command` on `id`; `true` when it changed something. A refusal (the task moved on) is not an error.
    async fn command(&self, id: TaskId, command: Command) -> anyhow::Result<bool> {
        match self.board.execute(id, &command, ACTOR).await {
            Ok(outcome) => Ok(!outcome.appended.is_empty()),
            Err(BoardError::Refused(refused)) => {
                tracing::debug!(task = %id, %refused, command = command.name(), "plans: refused");
                Ok(false)
            }
            Err(error) => Err(error).with_context(|| format!("{} on {id}", command.name())),
        }
    }
}

impl Follower for Plans {
    type Prepare = AsStored;
    type Tally = PlansProgress;

    fn checkpoint(&self) -> &str {
        PLANS
    }

    fn prepare(&self) -> AsStored {
        AsStored
    }

    /// Only task events: every other event is passed over before its body is read.
    fn bodies(&self) -> Wanted {
        crate::projectors::tasks::TASK_EVENT_BODIES.into()
    }

    async fn handle(
        &self,
        event: &StoredEvent,
        progress: &mut PlansProgress,
    ) -> anyhow::Result<Next> {
        self.handle_event(event, progress)
            .await
            .with_context(|| format!("plans: event {} ({})", event.position, event.event_type))?;
        Ok(Next::Done)
    }
}
