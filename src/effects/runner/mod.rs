//! The `effects:<provider>` loop: reads the log after its checkpoint, asks its provider's policy what each event
//! wants, makes each call once (see the module doc for how), and turns what came back into commands on the task.
//! One runner for every provider: what differs is the policy it holds (`provider.rs`), never a branch here.
//!
//! The checkpoint moves past an event only when its effects are settled (succeeded, or failed for good): an
//! effect waiting for its retry time stops the tick there, and the next tick picks it up again. One provider's
//! calls are made in the order their causes were committed.
//!
//! Before a call for a task, the cap on the task's outbound calls is asked (`cap.rs`, counted from the task's
//! `outbound:<task>` stream right here, where the call is decided, in `admit.rs`): a call past it is recorded as
//! withheld.

use anyhow::Context;
use chrono::Utc;

use super::cap::EffectCap;
use super::handle::{Handle, Settled, ACTOR};
use super::provider::{loop_name, OpenedPullRequest, OwnRecord, ProviderPolicy};
use super::CallError;
use super::{
    retry_at, state, stream, EffectEvent, Produced, ProviderAction, Request, State,
    EFFECT_STREAM_PREFIX,
};
use crate::board::{Board, BoardError};
use crate::domain::{EventType, NewEvent, Source};
use crate::eventlog::{AppendError, EventLog, StoredEvent};
use crate::loops::follow::{AsStored, Follow, Follower, Next, Wanted};
use crate::loops::LoopRegistry;
use crate::tasks::{Command, Reason, TaskEvent, TaskId};

pub use super::handle::EffectsProgress;

mod admit;

/// One provider's effects loop: the shared runner around its policy `P` (`GithubPolicy`, …).
#[derive(Clone, Debug)]
pub struct Effects<P> {
    policy: P,
    log: EventLog,
    board: Board,
    /// The checkpoint's name: the loop's, unless [`Self::with_checkpoint`] says otherwise.
    checkpoint: String,
    follow: Follow<StoredEvent>,
    /// For the bot's `/status`.
    loops: Option<LoopRegistry>,
    /// `[effects] max_per_task_per_hour`.
    cap: EffectCap,
}

impl<P: ProviderPolicy> Effects<P> {
    /// The loop of `policy`'s provider (`effects:<name>`), reading `log` and steering `board`.
    pub fn new(policy: P, log: EventLog, board: Board) -> Self {
        Self {
            checkpoint: loop_name(policy.provider()),
            policy,
            log,
            board,
            follow: Follow::default(),
            loops: None,
            cap: EffectCap::default(),
        }
    }

    /// The loops the bot's `/status` reports on.
    pub fn with_loops(mut self, loops: LoopRegistry) -> Self {
        self.loops = Some(loops);
        self
    }

    /// The cap on each task's outbound calls (default: [`EffectCap::default`], the file's default).
    pub fn with_cap(mut self, cap: EffectCap) -> Self {
        self.cap = cap;
        self
    }

    /// The same worker reading the log under another checkpoint name: a second reader from position 0 (a rebuild,
    /// or a test replaying the log) settles every effect from its stream and calls nothing twice.
    pub fn with_checkpoint(mut self, name: &str) -> Self {
        self.checkpoint = name.to_owned();
        // A reader left running belongs to the other checkpoint's ticks.
        self.follow = self.follow.restarted();
        self
    }

    /// How long one tick may run before it hands back (default `follow::TICK_BUDGET`). Tests that count what one
    /// tick does give it all the time it needs: a loaded machine must not end it early.
    pub fn with_tick_budget(mut self, budget: std::time::Duration) -> Self {
        self.follow = self.follow.with_budget(budget);
        self
    }

    /// Handles what was committed since the checkpoint, up to the first effect that must wait (see
    /// [`crate::loops::follow`] for pages, checkpoint and budget).
    pub async fn tick(&self) -> anyhow::Result<EffectsProgress> {
        self.policy.prepare(self).await?;
        let followed = self.follow.tick(self.log.store(), self).await?;
        Ok(EffectsProgress {
            position: followed.position,
            waiting: followed.waiting,
            out_of_time: followed.out_of_time,
            ..followed.tally
        })
    }

    async fn handle_event(
        &self,
        event: &StoredEvent,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Settled> {
        if let Some(settled) = self.policy.own_event(self, event, progress).await? {
            return Ok(settled);
        }
        if event.source != Source::Pidevops.as_str() {
            return Ok(Settled::Yes);
        }
        let stream = event.stream.as_deref().unwrap_or_default();
        if stream.starts_with(EFFECT_STREAM_PREFIX) {
            if let Ok(EffectEvent::Succeeded { produced, key, .. }) =
                serde_json::from_slice::<EffectEvent>(&event.body)
            {
                let requests = self.follow_up(&key, &produced).await?;
                return self.ask_each(&requests, event.position, progress).await;
            }
            return Ok(Settled::Yes);
        }
        let Some(id) = TaskId::from_stream(stream) else {
            return Ok(Settled::Yes);
        };
        let task_event = TaskEvent::from_stored(&event.event_type, &event.body)
            .with_context(|| stream.to_owned())?;
        // The cheap test first: most task events ask for nothing, and need no load.
        if !self.policy.notifies(&task_event) {
            return Ok(Settled::Yes);
        }
        let Some(loaded) = self.board.load(id).await? else {
            return Ok(Settled::Yes);
        };
        let requests = self
            .policy
            .requests(self, event, &task_event, &loaded)
            .await?;
        self.ask_each(&requests, event.position, progress).await
    }

    /// Asks for each request in order, stopping at the first that must wait.
    async fn ask_each(
        &self,
        requests: &[Request<P::Action>],
        cause: i64,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Settled> {
        for request in requests {
            if let waiting @ Settled::Waiting(_) = self.ask(request, cause, progress).await? {
                return Ok(waiting);
            }
        }
        Ok(Settled::Yes)
    }

    /// What a success asks for next: the task's pull request opening is news for the policy.
    async fn follow_up(
        &self,
        key: &str,
        produced: &Produced,
    ) -> anyhow::Result<Vec<Request<P::Action>>> {
        let Produced::PullRequest {
            repo, number, url, ..
        } = produced
        else {
            return Ok(Vec::new());
        };
        let Some((host, task)) = crate::domain::effect::review_request_of(key) else {
            return Ok(Vec::new());
        };
        let opened = OpenedPullRequest {
            task,
            host,
            repo,
            number: *number,
            url,
        };
        self.policy.pull_request_opened(self, &opened).await
    }

    /// Attempt `attempt` of the effect, its stream at `version` when read at `now`: `started` claims it, then
    /// the call is made and its outcome recorded (a success, a retry time, or a failure for good that flags the
    /// task).
    async fn attempt(
        &self,
        request: &Request<P::Action>,
        action: &P::Action,
        attempt: u32,
        version: i64,
        now: chrono::DateTime<Utc>,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Settled> {
        let started = EffectEvent::Started {
            at: now,
            key: request.key.clone(),
            attempt,
        };
        let claimed = self
            .append(&request.key, request.task, version + 1, &started)
            .await
            .context("recording the attempt's start")?;
        if !claimed {
            // Someone else (a replica in a brief split-brain) started this attempt: theirs to finish.
            return Ok(Settled::Waiting(now + chrono::Duration::seconds(1)));
        }
        let outcome = self.policy.call(&request.key, action).await;
        self.policy.sent(action);
        let label = match &outcome {
            Ok(_) => "succeeded",
            Err(CallError::Transient { .. }) => "transient",
            Err(CallError::Permanent { .. }) => "permanent",
        };
        metrics::counter!("pidevops_effects_total", "provider" => self.policy.provider(), "action" => action.name(), "outcome" => label)
            .increment(1);
        let own_record = match &outcome {
            Ok(produced) => self.policy.record_of(request, produced),
            Err(_) => None,
        };
        let (recorded, settled) = match outcome {
            Ok(produced) => {
                progress.succeeded += 1;
                (
                    EffectEvent::Succeeded {
                        at: Utc::now(),
                        key: request.key.clone(),
                        attempt,
                        produced,
                    },
                    Settled::Yes,
                )
            }
            Err(error) => {
                let retry = match &error {
                    CallError::Transient { retry_after, .. } => {
                        retry_at(Utc::now(), attempt, *retry_after)
                    }
                    CallError::Permanent { .. } => None,
                };
                if retry.is_none() {
                    progress.failed += 1;
                    self.surface(request, &error, attempt).await?;
                }
                tracing::warn!(key = %request.key, attempt, %error, retry_at = ?retry, "effect failed");
                (
                    EffectEvent::Failed {
                        at: Utc::now(),
                        key: request.key.clone(),
                        attempt,
                        error: error.to_string(),
                        retry_at: retry,
                    },
                    retry.map_or(Settled::Yes, Settled::Waiting),
                )
            }
        };
        self.append(&request.key, request.task, version + 2, &recorded)
            .await
            .context("recording the attempt's outcome")?;
        if let Some(record) = own_record {
            self.record(record).await?;
        }
        Ok(settled)
    }

    /// Appends the provider's own record of a call, once (its stream's first version); a crash just before it
    /// loses only that record: the call was made and is not made again.
    async fn record(&self, record: OwnRecord) -> anyhow::Result<()> {
        self.append_to(
            &record.stream,
            1,
            record.kind,
            Utc::now(),
            record.task,
            record.body,
        )
        .await
        .with_context(|| format!("recording {} in {}", record.kind, record.stream))?;
        Ok(())
    }

    /// A permanent failure is the task's business: a person must look.
    async fn surface(
        &self,
        request: &Request<P::Action>,
        error: &CallError,
        attempt: u32,
    ) -> anyhow::Result<()> {
        let reason = Reason::summarize(&format!(
            "{} failed for good after {attempt} attempt(s): {error}",
            request.action.name().replace('_', " ")
        ));
        let Some(task) = request.task else {
            return Ok(());
        };
        match self
            .board
            .execute(task, &Command::FlagNeedsHuman { reason }, ACTOR)
            .await
        {
            Ok(_) | Err(BoardError::Refused(_)) => Ok(()),
            Err(error) => Err(error).context("flagging the task after a failed effect"),
        }
    }

    /// Appends `event` as version `version` of the effect's stream. `Ok(false)`: that version is taken (someone
    /// else wrote it, or this very write was made before a crash).
    async fn append(
        &self,
        key: &str,
        task: Option<TaskId>,
        version: i64,
        event: &EffectEvent<P::Action>,
    ) -> Result<bool, AppendError> {
        let body = serde_json::to_vec(event)
            .map_err(|e| AppendError::Unavailable(format!("encoding {}: {e}", event.kind())))?;
        self.append_to(&stream(key), version, event.kind(), event.at(), task, body)
            .await
    }

    /// Appends one of the effects loops' events as version `version` of stream `name` (keyed by both).
    async fn append_to(
        &self,
        name: &str,
        version: i64,
        kind: &str,
        at: chrono::DateTime<Utc>,
        task: Option<TaskId>,
        body: Vec<u8>,
    ) -> Result<bool, AppendError> {
        let mut new = NewEvent::new(
            Source::Pidevops,
            EventType::from_stored(kind.to_owned()),
            format!("{name}:{version}"),
            "application/json",
            bytes::Bytes::from(body),
        );
        new.stream = Some((name.to_owned(), version));
        new.occurred_at = at;
        new.subject.reference = task.map(|t| t.to_string());
        new.meta
            .insert("actor".to_owned(), serde_json::Value::from(ACTOR));
        match self.log.append(new).await {
            Ok(appended) => Ok(!appended.duplicate),
            Err(AppendError::Conflict { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }
}

/// What the policies get of the runner: the board, the log, the loops, and an effect recorded or driven.
impl<P: ProviderPolicy> Handle for Effects<P> {
    type Action = P::Action;

    fn board(&self) -> &Board {
        &self.board
    }

    fn log(&self) -> &EventLog {
        &self.log
    }

    fn loops(&self) -> Option<&LoopRegistry> {
        self.loops.as_ref()
    }

    async fn requested(&self, key: &str) -> anyhow::Result<bool> {
        let events = self
            .log
            .store()
            .read_stream(&stream(key))
            .await
            .with_context(|| format!("reading {}", stream(key)))?;
        Ok(!events.is_empty())
    }

    async fn request(&self, request: &Request<P::Action>, cause: i64) -> anyhow::Result<()> {
        let event = EffectEvent::Requested {
            at: Utc::now(),
            key: request.key.clone(),
            task: request.task,
            action: request.action.clone(),
            cause_position: cause,
        };
        self.append(&request.key, request.task, 1, &event)
            .await
            .with_context(|| format!("requesting {}", request.key))?;
        Ok(())
    }

    async fn drive(
        &self,
        request: &Request<P::Action>,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Settled> {
        let recorded = self
            .log
            .store()
            .read_stream(&stream(&request.key))
            .await
            .with_context(|| format!("reading {}", stream(&request.key)))?;
        let events: Vec<EffectEvent<P::Action>> = recorded
            .iter()
            .map(|e| serde_json::from_slice(&e.body))
            .collect::<Result<_, _>>()
            .with_context(|| {
                format!(
                    "{} holds an event that is not an effect event of {}",
                    request.key,
                    self.policy.provider()
                )
            })?;
        let version = i64::try_from(recorded.len()).unwrap_or(i64::MAX);
        // The action as first requested: a later request (a retried task) asks for the same thing.
        let action = events
            .iter()
            .find_map(|e| match e {
                EffectEvent::Requested { action, .. } => Some(action.clone()),
                _ => None,
            })
            .unwrap_or_else(|| request.action.clone());
        let now = Utc::now();
        let attempt = match state(&events) {
            State::Succeeded | State::Failed | State::Withheld | State::Unknown => {
                return Ok(Settled::Yes)
            }
            State::Pending { due: Some(due), .. } if due > now => return Ok(Settled::Waiting(due)),
            State::Pending { attempts, .. } => attempts + 1,
            State::InDoubt { attempt } if !action.safe_to_repeat() => {
                let failed = EffectEvent::Failed {
                    at: now,
                    key: request.key.clone(),
                    attempt,
                    error: "in doubt: the call was cut off (a crash) and is not safe to repeat"
                        .into(),
                    retry_at: None,
                };
                self.append(&request.key, request.task, version + 1, &failed)
                    .await
                    .context("recording an attempt in doubt")?;
                progress.failed += 1;
                return Ok(Settled::Yes);
            }
            State::InDoubt { attempt } => attempt + 1,
        };
        if let Some(free) = self.policy.not_before(&action) {
            // A call the cap holds back anyway does not wait for the provider's pace.
            return Ok(self
                .admit(request, &action, version, false, progress)
                .await?
                .unwrap_or(Settled::Waiting(free)));
        }
        if let Some(held) = self
            .admit(request, &action, version, true, progress)
            .await?
        {
            return Ok(held);
        }
        self.attempt(request, &action, attempt, version, now, progress)
            .await
    }
}

impl<P: ProviderPolicy> Follower for Effects<P> {
    type Prepare = AsStored;
    type Tally = EffectsProgress;

    fn checkpoint(&self) -> &str {
        &self.checkpoint
    }

    fn prepare(&self) -> AsStored {
        AsStored
    }

    fn bodies(&self) -> Wanted {
        self.policy.bodies().into()
    }

    async fn handle(
        &self,
        event: &StoredEvent,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Next> {
        let settled = self.handle_event(event, progress).await.with_context(|| {
            format!("effects of event {} ({})", event.position, event.event_type)
        })?;
        Ok(match settled {
            Settled::Yes => Next::Done,
            Settled::Waiting(until) => Next::Wait(format!(
                "event {} waits for its retry at {}",
                event.position,
                until.to_rfc3339()
            )),
        })
    }
}
