//! Intake: the policy that turns qualifying webhook events into tasks. A singleton loop reads the log after its
//! checkpoint; for each event the pure `rules::decide` (by the rules of the event's source, each provider's own,
//! handed in by start-up) says create, ignore (recorded as an `intake.ignored` event
//! that names the event and the reason, so a refusal is visible) or not intake's business. Creation is idempotent
//! by the ticket's intake key and the ignore record by its cause, so a crash before the checkpoint moves only
//! repeats work that changes nothing.
//!
//! Every version of a ticket that has a task is followed on it, by the ticket's own clock: an edit updates the spec
//! before work, a withdrawal withdraws the task (`Command::WithdrawTicket`: cancelled before or at work, which
//! stops its run), and every version is noted, so a late, older one changes nothing and a poller does not append
//! it again.

mod comments;
pub mod rules;

use anyhow::Context;

use crate::board::{Board, BoardError};
use crate::domain::Source;
use crate::eventlog::{EventLog, StoredEvent};
use crate::loops::follow::{AsStored, Follow, Follower, Next, Pick, Wanted};
pub use comments::{CommentOutcome, CommentRecord};
pub use rules::{Decision, IntakeConfig};

/// The loop's name and its checkpoint's.
pub const INTAKE: &str = "intake";

/// What one tick did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct IntakeProgress {
    pub position: i64,
    pub created: u64,
    pub existing: u64,
    pub ignored: u64,
    /// The tick stopped at its time budget with work left: the loop goes again without resting.
    #[serde(skip)]
    pub out_of_time: bool,
}

#[derive(Clone, Debug)]
pub struct Intake {
    log: EventLog,
    board: Board,
    config: std::sync::Arc<IntakeConfig>,
    /// Each source's rules, built by its provider (`providers::intake_rules`).
    rules: std::sync::Arc<[Box<dyn rules::SourceRules>]>,
    follow: Follow<StoredEvent>,
}

impl Intake {
    /// The loop over `log`, deciding each event by the rules of its source (`rules`: `providers::intake_rules`).
    pub fn new(
        log: EventLog,
        board: Board,
        config: IntakeConfig,
        rules: Vec<Box<dyn rules::SourceRules>>,
    ) -> Self {
        Self {
            log,
            board,
            config: std::sync::Arc::new(config),
            rules: rules.into(),
            follow: Follow::default(),
        }
    }

    /// A tick hands the loop back once it has worked this long instead of [`crate::loops::follow::TICK_BUDGET`]
    /// (tests: a zero budget handles one event per tick).
    pub fn with_tick_budget(mut self, budget: std::time::Duration) -> Self {
        self.follow = self.follow.with_budget(budget);
        self
    }

    /// Handles what was committed since the checkpoint (see [`crate::loops::follow`] for pages, checkpoint and
    /// budget).
    pub async fn tick(&self) -> anyhow::Result<IntakeProgress> {
        let followed = self.follow.tick(self.log.store(), self).await?;
        Ok(IntakeProgress {
            position: followed.position,
            out_of_time: followed.out_of_time,
            ..followed.tally
        })
    }

    async fn handle_event(
        &self,
        event: &StoredEvent,
        progress: &mut IntakeProgress,
    ) -> anyhow::Result<()> {
        // Our own events are never intake (and never loop back into it).
        if event.source == Source::Pidevops.as_str() {
            return Ok(());
        }
        match rules::decide(event, &self.config, &self.rules) {
            Decision::NotIntake => Ok(()),
            Decision::Withdraw {
                key,
                reason,
                why,
                ticket_version,
            } => {
                self.withdraw(&key, &reason, why, ticket_version, event)
                    .await
            }
            Decision::Seen {
                key,
                ticket_version,
            } => match self.board.task_for_key(&key).await? {
                Some(id) => self.note(id, ticket_version, &key, event).await,
                None => Ok(()),
            },
            Decision::FollowUp { key, text, origin } => {
                let Some(id) = self.task_for(&key).await? else {
                    return self
                        .record_ignored(event, &format!("a follow-up for {key}, which has no task"))
                        .await;
                };
                self.reply(id, &text, origin, true, event).await
            }
            Decision::Reply {
                to,
                text,
                origin,
                refusal,
            } => {
                self.reply_to_message(&to, &text, origin, refusal, event)
                    .await
            }
            Decision::Stop { key, reason } => self.stop(&key, &reason, event).await,
            Decision::Comment(comment) => self.comment(&comment, event, progress).await,
            Decision::CommentEdited { stream, id } => {
                progress.ignored += 1;
                self.comment_edited(&stream, id, event).await
            }
            Decision::Ignore { reason } => {
                progress.ignored += 1;
                self.record_ignored(event, &reason).await
            }
            Decision::Create { key, draft } => {
                let (spec, ticket_version) = (draft.spec.clone(), draft.ticket_version);
                match self
                    .board
                    .create(*draft, &key, &event.source, Some(event.id))
                    .await
                {
                    Ok((outcome, created)) => {
                        self.remember_delegation(&key, event).await?;
                        if created {
                            progress.created += 1;
                            metrics::counter!("pidevops_intake_tasks_created_total", "source" => event.source.clone())
                                .increment(1);
                            return Ok(());
                        }
                        progress.existing += 1;
                        self.follow_edits(&outcome.task, spec, ticket_version, &key, event)
                            .await
                    }
                    // The domain refused what the ticket asks for: a fact about the ticket, not an outage.
                    Err(BoardError::Refused(refusal)) => {
                        progress.ignored += 1;
                        self.record_ignored(event, &format!("refused by the board: {refusal}"))
                            .await
                    }
                    Err(other) => Err(other.into()),
                }
            }
        }
    }

    /// A ticket seen again after its task exists: a changed title or description updates the spec until work
    /// starts (the domain refuses it after, which is expected, not an error), and its version is noted in any
    /// column. An edit older, by the ticket's own clock, than the version on record arrived late and changes
    /// nothing (the domain decides that too).
    async fn follow_edits(
        &self,
        task: &crate::tasks::Task,
        spec: crate::tasks::Spec,
        ticket_version: Option<chrono::DateTime<chrono::Utc>>,
        key: &str,
        event: &StoredEvent,
    ) -> anyhow::Result<()> {
        if spec != *task.spec() && before_work(task) {
            let command = crate::tasks::Command::UpdateSpec {
                spec,
                ticket_version,
            };
            match self.board.execute(task.id(), &command, &event.source).await {
                // Updated, or stale: either way the version on record is at least this one.
                Ok(_) => return Ok(()),
                // Work started meanwhile: the version is still noted.
                Err(BoardError::Refused(_)) => {}
                Err(other) => {
                    return Err(other)
                        .with_context(|| format!("updating the spec of {} ({key})", task.id()))
                }
            }
        }
        match ticket_version {
            Some(version) => self.note(task.id(), version, key, event).await,
            None => Ok(()),
        }
    }

    /// Notes that the ticket of `key` was seen at `version` (nothing when its task holds that one or newer).
    async fn note(
        &self,
        id: crate::tasks::TaskId,
        version: chrono::DateTime<chrono::Utc>,
        key: &str,
        event: &StoredEvent,
    ) -> anyhow::Result<()> {
        let command = crate::tasks::Command::NoteTicketVersion {
            ticket_version: version,
        };
        match self.board.execute(id, &command, &event.source).await {
            Ok(_) | Err(BoardError::Refused(_)) => Ok(()),
            Err(other) => {
                Err(other).with_context(|| format!("noting the ticket version of {id} ({key})"))
            }
        }
    }

    /// Withdraws the task made for a ticket that no longer asks for it, as of the ticket's `version`: the domain
    /// cancels it before or at work (the dispatcher then stops its run), leaves it to its pull request in review,
    /// and ignores a version older than the one on record. A ticket delegated to pidevops (a Linear agent session)
    /// is withdrawn only by being closed: its label and state never handed it over.
    async fn withdraw(
        &self,
        key: &str,
        reason: &str,
        why: rules::Withdrawal,
        version: Option<chrono::DateTime<chrono::Utc>>,
        event: &StoredEvent,
    ) -> anyhow::Result<()> {
        // Only the task made for this very ticket: the key names its source (repository and number, or issue id).
        let Some(id) = self.board.task_for_key(key).await? else {
            return Ok(());
        };
        if !why.withdraws_delegated() && self.delegated(key).await? {
            return match version {
                Some(version) => self.note(id, version, key, event).await,
                None => Ok(()),
            };
        }
        let command = crate::tasks::Command::WithdrawTicket {
            reason: crate::tasks::Reason::new(reason.to_owned())?,
            ticket_version: version,
        };
        match self.board.execute(id, &command, &event.source).await {
            Ok(_) | Err(BoardError::Refused(_)) => Ok(()),
            Err(other) => Err(other).with_context(|| format!("withdrawing {id} ({key})")),
        }
    }

    /// Whether the Linear issue of `key` was delegated to pidevops: intake's own record of its agent session, or
    /// (sessions from before that record) the session `effects:linear` remembered.
    async fn delegated(&self, key: &str) -> anyhow::Result<bool> {
        let Some(issue) = key.strip_prefix("linear:") else {
            return Ok(false);
        };
        let store = self.log.store();
        let recorded = store
            .find_by_key(
                Source::Pidevops,
                &format!("{}{issue}", rules::DELEGATED_KEY_PREFIX),
            )
            .await
            .context("looking up the issue's delegation")?;
        if recorded.is_some() {
            return Ok(true);
        }
        let sessions = store
            .stream_version(&format!("{}{issue}", rules::SESSION_STREAM_PREFIX))
            .await
            .context("looking up the issue's agent sessions")?;
        Ok(sessions > 0)
    }

    /// After an agent session made or joined its issue's task: records that the issue was delegated (once per
    /// issue), so a later label or state change, in log order, does not withdraw it.
    async fn remember_delegation(&self, key: &str, event: &StoredEvent) -> anyhow::Result<()> {
        let Some(issue) = key.strip_prefix("linear:") else {
            return Ok(());
        };
        if event.event_type != "linear.AgentSessionEvent.created" {
            return Ok(());
        }
        let body = serde_json::json!({ "issue": issue, "cause_event_id": event.id });
        let mut record = crate::domain::NewEvent::new(
            Source::Pidevops,
            crate::domain::EventType::from_stored("intake.delegated".to_owned()),
            format!("{}{issue}", rules::DELEGATED_KEY_PREFIX),
            "application/json",
            bytes::Bytes::from(serde_json::to_vec(&body)?),
        );
        record
            .meta
            .insert("actor".to_owned(), serde_json::Value::from(INTAKE));
        self.log
            .append(record)
            .await
            .context("recording the issue's delegation")?;
        Ok(())
    }

    /// The task of a decision key: an intake key, or `linear-session:<id>`, resolved through the record of the
    /// session's opening (`linear.session_opened`, deduplicated on that key) to its issue's task.
    async fn task_for(&self, key: &str) -> anyhow::Result<Option<crate::tasks::TaskId>> {
        if !key.starts_with(rules::SESSION_KEY_PREFIX) {
            return Ok(self.board.task_for_key(key).await?);
        }
        let Some(opened) = self
            .log
            .store()
            .find_by_key(Source::Pidevops, key)
            .await
            .context("looking up the agent session")?
        else {
            return Ok(None);
        };
        let issue = serde_json::from_slice::<serde_json::Value>(&opened.body)
            .ok()
            .and_then(|body| body["issue"].as_str().map(str::to_owned));
        match issue {
            Some(issue) => Ok(self.board.task_for_key(&format!("linear:{issue}")).await?),
            None => Ok(None),
        }
    }

    /// Cancels the task of `key` whatever it is doing: the dispatcher stops a run of a cancelled task.
    async fn stop(&self, key: &str, reason: &str, event: &StoredEvent) -> anyhow::Result<()> {
        let Some(id) = self.task_for(key).await? else {
            return self
                .record_ignored(
                    event,
                    &format!("a stop signal for {key}, which has no task"),
                )
                .await;
        };
        let reason = crate::tasks::Reason::new(reason.to_owned())?;
        match self
            .board
            .execute(id, &crate::tasks::Command::Cancel { reason }, &event.source)
            .await
        {
            Ok(_) => Ok(()),
            Err(BoardError::Refused(refusal)) => {
                self.record_ignored(event, &format!("stop refused by the board: {refusal}"))
                    .await
            }
            Err(other) => Err(other).with_context(|| format!("stopping {id} ({key})")),
        }
    }

    /// A person's words for task `id` (a Linear prompt, a Telegram reply): the answer when the task waits for one
    /// (`Command::Answer`), else a follow-up for its next run that sends it back from review
    /// (`AttachFollowUp`). Only a reply to a question (`may_follow_up` false) is never a follow-up: after its
    /// answer, it is recorded as ignored. The origin names the message: a redelivery changes nothing.
    async fn reply(
        &self,
        id: crate::tasks::TaskId,
        text: &str,
        origin: Option<crate::tasks::FollowUpOrigin>,
        may_follow_up: bool,
        event: &StoredEvent,
    ) -> anyhow::Result<()> {
        use crate::tasks::{Command, TaskError};
        let text = match crate::tasks::FollowUpText::new(text.to_owned()) {
            Ok(text) => text,
            Err(e) => {
                return self
                    .record_ignored(event, &format!("follow-up refused: {e}"))
                    .await
            }
        };
        let answer = Command::Answer {
            text: text.clone(),
            origin: origin.clone(),
        };
        let refusal = match self.board.execute(id, &answer, &event.source).await {
            Ok(_) => return Ok(()),
            Err(BoardError::Refused(refusal)) => refusal,
            Err(other) => return Err(other).with_context(|| format!("answering {id}")),
        };
        if !matches!(refusal, TaskError::NoQuestion { .. }) || !may_follow_up {
            let why = match refusal {
                TaskError::NoQuestion { .. } => format!(
                    "an answer to {id}'s question, which was answered already (or no longer waits): not a second \
                     follow-up"
                ),
                other => format!("answer refused by the board: {other}"),
            };
            return self.record_ignored(event, &why).await;
        }
        let follow_up = Command::AttachFollowUp {
            text,
            origin,
            send_back: true,
        };
        match self.board.execute(id, &follow_up, &event.source).await {
            Ok(_) => Ok(()),
            Err(BoardError::Refused(refusal)) => {
                self.record_ignored(event, &format!("follow-up refused by the board: {refusal}"))
                    .await
            }
            Err(other) => Err(other).with_context(|| format!("attaching a follow-up to {id}")),
        }
    }

    /// A reply to `to`, a message pidevops sent (Telegram's: a message replying to another): when pidevops sent
    /// that message about a task (its record, the first event of `to.stream()`, Telegram's
    /// `telegram-message:<chat>:<message id>`), the reply answers the task's question, or is a follow-up when the
    /// message asked none. A reply to anything else is none of intake's business; one from a sender who may not
    /// command changes nothing and is recorded.
    async fn reply_to_message(
        &self,
        to: &crate::domain::effect::MessageRef,
        text: &str,
        origin: crate::tasks::FollowUpOrigin,
        refusal: Option<String>,
        event: &StoredEvent,
    ) -> anyhow::Result<()> {
        use crate::domain::effect::SentMessage;
        let stream = to.stream();
        let records = self
            .log
            .store()
            .read_stream(&stream)
            .await
            .with_context(|| format!("reading {stream}"))?;
        let recorded = records
            .first()
            .and_then(|e| serde_json::from_slice::<SentMessage>(&e.body).ok());
        let sent = match recorded {
            Some(sent) => sent,
            // No record yet (a reply in a Slack thread before pidevops first spoke there): the message replied
            // to may be the one that asked for a task.
            None => match self.task_for(&to.asked_key()).await? {
                Some(task) => SentMessage {
                    task,
                    key: to.asked_key(),
                    question: false,
                },
                None => return Ok(()),
            },
        };
        if let Some(why) = refusal {
            return self
                .record_ignored(
                    event,
                    &format!("a reply about {} refused: {why}", sent.task),
                )
                .await;
        }
        if sent.question && self.asked_again(to, &sent).await? {
            return self
                .record_ignored(
                    event,
                    &format!(
                        "a reply to an earlier question of {}, which has been asked something again since, in a \
                         later message to this chat: not its answer (reply to that message)",
                        sent.task
                    ),
                )
                .await;
        }
        self.reply(sent.task, text, Some(origin), !sent.question, event)
            .await
    }

    /// Whether the task waits for a person again, in a needs-human episode later than the one `sent` (message
    /// `to`) asked about, and that later one was asked in `to`'s conversation too (its notice requested there: a
    /// notice held back by the cooldown leaves `sent` the latest message to answer).
    async fn asked_again(
        &self,
        to: &crate::domain::effect::MessageRef,
        sent: &crate::domain::effect::SentMessage,
    ) -> anyhow::Result<bool> {
        use crate::domain::effect::stream;
        let Some(loaded) = self.board.load(sent.task).await? else {
            return Ok(false);
        };
        if loaded.task.needs_human().is_none() {
            // Nothing waits: the answer is refused as answered already, whichever episode it was for.
            return Ok(false);
        }
        let Some(latest) = loaded
            .events
            .iter()
            .rev()
            .find(|e| e.event_type == "task.flagged_needs_human")
        else {
            return Ok(false);
        };
        let latest_key = to.notice_key(&latest.id.to_string());
        if latest_key == sent.key {
            return Ok(false);
        }
        let notice = stream(&latest_key);
        let requested = self
            .log
            .store()
            .read_stream(&notice)
            .await
            .with_context(|| format!("reading {notice}"))?;
        Ok(!requested.is_empty())
    }

    /// Records why `event` made no task; once per event, however often intake sees it.
    async fn record_ignored(&self, event: &StoredEvent, reason: &str) -> anyhow::Result<()> {
        let record = event.ignored_by("intake", reason, serde_json::Map::new());
        tracing::info!(event = event.position, r#type = %event.event_type, %reason, "intake ignored an event");
        metrics::counter!("pidevops_intake_ignored_total", "source" => event.source.clone())
            .increment(1);
        self.log
            .append(record)
            .await
            .context("recording an ignored intake candidate")?;
        Ok(())
    }
}

impl Follower for Intake {
    type Prepare = AsStored;
    type Tally = IntakeProgress;

    fn checkpoint(&self) -> &str {
        INTAKE
    }

    fn prepare(&self) -> AsStored {
        AsStored
    }

    /// The bodies of the event types its source's rules read (`SourceRules::reads`, which their `decide` checks
    /// first); no other is shipped.
    fn bodies(&self) -> Wanted {
        let rules = self.rules.clone();
        let pick: Pick = std::sync::Arc::new(move |source, event_type| {
            rules::of_source(&rules, source).is_some_and(|r| r.reads(event_type))
        });
        Wanted::Picked(pick)
    }

    async fn handle(
        &self,
        event: &StoredEvent,
        progress: &mut IntakeProgress,
    ) -> anyhow::Result<Next> {
        self.handle_event(event, progress).await.with_context(|| {
            format!("intake of event {} ({})", event.position, event.event_type)
        })?;
        Ok(Next::Done)
    }
}

/// Triage or todo: nothing has run yet, so the ticket still governs the task.
fn before_work(task: &crate::tasks::Task) -> bool {
    matches!(
        task.column(),
        crate::tasks::Column::Triage | crate::tasks::Column::Todo
    )
}
