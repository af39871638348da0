//! What the log recorded, read once, in position order, into memory: the replay's own copy of what the read models
//! hold (tasks with their facts, runs with their outcome and usage, raises, each task's outbound calls) and the
//! webhook events intake could decide. Read-only: nothing is appended, no checkpoint moves.

use std::collections::{BTreeMap, HashMap};

use anyhow::Context;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::budgets::Raised;
use crate::domain::runs::{FailureKind, RunEvent, RUN_STREAM_PREFIX};
use crate::domain::usage::Usage;
use crate::domain::Source;
use crate::effects::cap::{OutboundEvent, OUTBOUND_STREAM_PREFIX};
use crate::eventlog::{EventStore, StoredEvent};
use crate::tasks::{RunId, TaskEvent, TaskId};

/// Events read per page.
const PAGE: i64 = 5_000;

/// One fact of a task's stream, with who asked for it.
#[derive(Clone, Debug)]
pub struct Fact {
    pub position: i64,
    pub actor: String,
    pub event: TaskEvent,
}

/// A task made in the range, with every fact of its stream.
#[derive(Clone, Debug)]
pub struct RecordedTask {
    pub id: TaskId,
    /// Its intake key (`github:acme/api#12`), where intake (or the API, with a key) made it.
    pub key: Option<String>,
    /// The webhook event that asked for it, where one did.
    pub cause: Option<Uuid>,
    /// `facts[0]` is its `task.created`.
    pub facts: Vec<Fact>,
    /// Its `outbound:<task>` stream: each call the effects runner counted against the cap, and each trip.
    pub outbound: Vec<(i64, OutboundEvent)>,
}

impl RecordedTask {
    pub fn created(&self) -> Option<&crate::tasks::TaskCreated> {
        match self.facts.first().map(|f| &f.event) {
            Some(TaskEvent::Created(created)) => Some(created),
            _ => None,
        }
    }
}

/// A run (of any purpose) of a task made in the range, as the runner recorded it.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedRun {
    pub run: RunId,
    pub task: TaskId,
    pub profile: String,
    pub started: DateTime<Utc>,
    pub started_position: i64,
    /// Its outcome's moment and position; `None` while it had none (still running, or lost).
    pub finished: Option<(DateTime<Utc>, i64)>,
    /// What its agent and its reviewer spent, as the outcome recorded it.
    pub usage: Usage,
    /// The meter refused figures of its output: what it spent is unknown (budgets fail closed on it).
    pub figures_refused: bool,
    /// The budget watch (or the claim's last check) stopped it.
    pub stopped_by_budget: bool,
}

/// A candidate intake refused (`intake.ignored`), with the event it refused.
#[derive(Clone, Debug)]
pub struct IgnoredCandidate {
    pub reason: String,
    pub cause: StoredEvent,
}

/// Everything the replay reads.
#[derive(Clone, Debug, Default)]
pub struct Recorded {
    pub since: DateTime<Utc>,
    /// The tasks made at or after `since`, in the order they were made.
    pub tasks: Vec<RecordedTask>,
    /// Their runs, in the order they started.
    pub runs: Vec<RecordedRun>,
    /// Intake's refusals at or after `since`.
    pub ignored: Vec<IgnoredCandidate>,
    /// Every budget raise, with its position.
    pub raises: Vec<(i64, Raised)>,
    /// The webhook events the tasks name as their cause, by id (with their bodies).
    pub causes: HashMap<Uuid, StoredEvent>,
    pub events_read: u64,
}

/// Reads the whole log once. `intake_reads` says whether a webhook event's type is one intake could decide (its
/// body is kept only then: a busy log is mostly pull request and CI news no rule reads).
pub async fn read(
    store: &EventStore,
    since: DateTime<Utc>,
    intake_reads: &(dyn Fn(&StoredEvent) -> bool + Sync),
) -> anyhow::Result<Recorded> {
    let mut reader = Reader {
        since,
        ..Reader::default()
    };
    let mut after = 0;
    loop {
        let page = store
            .read_after(after, PAGE)
            .await
            .with_context(|| format!("reading the log after position {after}"))?;
        let Some(last) = page.last() else { break };
        after = last.position;
        for event in page {
            reader.take(event, intake_reads)?;
        }
    }
    let mut recorded = reader.finish();
    with_bodies(store, &mut recorded).await?;
    Ok(recorded)
}

/// The bodies of the causes the replay decides on, read by position in one pass.
async fn with_bodies(store: &EventStore, recorded: &mut Recorded) -> anyhow::Result<()> {
    let positions: Vec<i64> = recorded
        .causes
        .values()
        .map(|e| e.position)
        .chain(recorded.ignored.iter().map(|i| i.cause.position))
        .collect();
    let bodies: HashMap<i64, Vec<u8>> = store
        .bodies_at(&positions)
        .await
        .context("reading the bodies of the events intake decided on")?
        .into_iter()
        .collect();
    let body_of = |event: &mut StoredEvent| {
        if let Some(body) = bodies.get(&event.position) {
            event.body.clone_from(body);
        }
    };
    recorded.causes.values_mut().for_each(body_of);
    recorded
        .ignored
        .iter_mut()
        .for_each(|i| body_of(&mut i.cause));
    Ok(())
}

#[derive(Default)]
struct Reader {
    since: DateTime<Utc>,
    read: u64,
    tasks: BTreeMap<TaskId, RecordedTask>,
    /// Outbound streams seen before their task's (a stream of a task made before the range is dropped at the end).
    outbound: HashMap<TaskId, Vec<(i64, OutboundEvent)>>,
    runs: HashMap<RunId, RecordedRun>,
    ignored: Vec<(String, Uuid)>,
    raises: Vec<(i64, Raised)>,
    sources: HashMap<Uuid, StoredEvent>,
}

impl Reader {
    fn take(
        &mut self,
        event: StoredEvent,
        intake_reads: &(dyn Fn(&StoredEvent) -> bool + Sync),
    ) -> anyhow::Result<()> {
        self.read += 1;
        if event.source != Source::Pidevops.as_str() {
            // Kept without its body (tens of KB for an issue): the few that caused a task or a refusal in the range
            // get theirs at the end.
            if intake_reads(&event) {
                self.sources.insert(
                    event.id,
                    StoredEvent {
                        body: Vec::new(),
                        ..event
                    },
                );
            }
            return Ok(());
        }
        let stream = event.stream.as_deref().unwrap_or_default();
        if let Some(id) = TaskId::from_stream(stream) {
            return self.task_fact(id, &event);
        }
        if let Some(task) = stream
            .strip_prefix(OUTBOUND_STREAM_PREFIX)
            .and_then(|t| t.parse::<TaskId>().ok())
        {
            let call = serde_json::from_slice::<OutboundEvent>(&event.body)
                .with_context(|| format!("event {} is not an outbound event", event.position))?;
            self.outbound
                .entry(task)
                .or_default()
                .push((event.position, call));
            return Ok(());
        }
        if stream.starts_with(RUN_STREAM_PREFIX) {
            self.run_fact(&event);
            return Ok(());
        }
        if stream == crate::budgets::STREAM && event.event_type == crate::budgets::RAISED {
            let raise = serde_json::from_slice::<Raised>(&event.body)
                .with_context(|| format!("event {} is not a budget raise", event.position))?;
            self.raises.push((event.position, raise));
            return Ok(());
        }
        if event.event_type == "intake.ignored" && event.recorded_at >= self.since {
            let body: serde_json::Value = serde_json::from_slice(&event.body).unwrap_or_default();
            let cause = body["cause_event_id"]
                .as_str()
                .and_then(|id| id.parse::<Uuid>().ok());
            if let Some(cause) = cause {
                let reason = body["reason"].as_str().unwrap_or_default().to_owned();
                self.ignored.push((reason, cause));
            }
        }
        Ok(())
    }

    fn task_fact(&mut self, id: TaskId, event: &StoredEvent) -> anyhow::Result<()> {
        let fact = TaskEvent::from_stored(&event.event_type, &event.body)
            .with_context(|| format!("event {} of {id} cannot be read", event.position))?;
        let actor = event
            .meta
            .get("actor")
            .and_then(|a| a.as_str().map(str::to_owned))
            .unwrap_or_default();
        let fact = Fact {
            position: event.position,
            actor,
            event: fact,
        };
        if let TaskEvent::Created(created) = &fact.event {
            if created.at < self.since {
                return Ok(());
            }
            let cause = event
                .meta
                .get("cause_event_id")
                .and_then(|c| c.as_str().and_then(|c| c.parse::<Uuid>().ok()));
            self.tasks.insert(
                id,
                RecordedTask {
                    id,
                    key: event.dedup_key.strip_prefix("intake:").map(str::to_owned),
                    cause,
                    facts: vec![fact],
                    outbound: Vec::new(),
                },
            );
        } else if let Some(task) = self.tasks.get_mut(&id) {
            task.facts.push(fact);
        }
        Ok(())
    }

    fn run_fact(&mut self, event: &StoredEvent) {
        // A run event that cannot be read (an older shape) tells the replay nothing it decides on.
        let Ok(fact) = serde_json::from_slice::<RunEvent>(&event.body) else {
            return;
        };
        match fact {
            RunEvent::Started {
                at,
                run,
                task,
                profile,
                ..
            } if self.tasks.contains_key(&task) => {
                self.runs.insert(
                    run,
                    RecordedRun {
                        run,
                        task,
                        profile,
                        started: at,
                        started_position: event.position,
                        finished: None,
                        usage: Usage::default(),
                        figures_refused: false,
                        stopped_by_budget: false,
                    },
                );
            }
            RunEvent::Succeeded {
                at,
                run,
                usage,
                reviewer_usage,
                ..
            } => self.run_finished(run, (at, event.position), [usage, reviewer_usage], false),
            RunEvent::Failed {
                at,
                run,
                kind,
                usage,
                reviewer_usage,
                ..
            } => self.run_finished(
                run,
                (at, event.position),
                [usage, reviewer_usage],
                kind == FailureKind::Budget,
            ),
            _ => {}
        }
    }

    fn run_finished(
        &mut self,
        run: RunId,
        at: (DateTime<Utc>, i64),
        spent: [Option<crate::domain::usage::RunUsage>; 2],
        stopped_by_budget: bool,
    ) {
        let Some(recorded) = self.runs.get_mut(&run) else {
            return;
        };
        recorded.finished = Some(at);
        recorded.stopped_by_budget = stopped_by_budget;
        for spent in spent.into_iter().flatten() {
            recorded.usage.add(&spent.usage);
            recorded.figures_refused |= spent.refused.is_some();
        }
    }

    fn finish(self) -> Recorded {
        let Reader {
            since,
            read,
            mut tasks,
            mut outbound,
            runs,
            ignored,
            raises,
            mut sources,
        } = self;
        for (id, task) in &mut tasks {
            task.outbound = outbound.remove(id).unwrap_or_default();
        }
        let causes = tasks
            .values()
            .filter_map(|t| t.cause)
            .filter_map(|id| sources.get(&id).map(|e| (id, e.clone())))
            .collect();
        let ignored = ignored
            .into_iter()
            .filter_map(|(reason, cause)| {
                Some(IgnoredCandidate {
                    reason,
                    cause: sources.remove(&cause)?,
                })
            })
            .collect();
        let mut runs: Vec<RecordedRun> = runs.into_values().collect();
        runs.sort_by_key(|r| r.started_position);
        let mut tasks: Vec<RecordedTask> = tasks.into_values().collect();
        tasks.sort_by_key(|t| t.facts.first().map_or(0, |f| f.position));
        Recorded {
            since,
            tasks,
            runs,
            ignored,
            raises,
            causes,
            events_read: read,
        }
    }
}
