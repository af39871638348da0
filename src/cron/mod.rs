//! Cron: schedules in `pidevops.toml` that create tasks on time, and after any downtime fire once for what they
//! missed (not once per missed slot).
//!
//! ```toml
//! [[schedules]]
//! name = "weekly-deps"             # a-z, 0-9, '-', '_'
//! cron = "0 9 * * MON"             # 5 fields, or 6 with seconds first
//! timezone = "Europe/Berlin"       # IANA name; default UTC
//! [schedules.task]                 # the task it creates
//! repo = "acme/api"
//! task = "Update the dependencies"
//! scope = "Cargo.toml"
//! done_when = "cargo test passes"
//! ```
//!
//! A schedule may send a digest of the board to the Telegram chats instead (`digest = true` in place of
//! `[schedules.task]`), and a daily digest is built in, off until `[digest]` turns it on:
//!
//! ```toml
//! [digest]
//! enabled = true
//! time = "09:00"                   # HH:MM, default 09:00
//! timezone = "Europe/Berlin"       # default UTC
//! ```
//!
//! Each schedule has a stream `cron:<name>` in the log: `cron.armed` when it is first seen (so slots before
//! that never fire), then one `cron.fired` per firing, naming the slot and the task. The task is created first,
//! under the intake key `cron:<name>:<slot>`, so a crash between the two creates it once and records it on the
//! next tick. A slot is due when it is at most now and later than both the arming and the last fired slot; the
//! latest such slot fires, the older ones were missed and are not made up.

use anyhow::Context;
use chrono::{DateTime, Utc};
use croner::parser::{CronParser, Seconds};
use croner::Cron;
use serde::{Deserialize, Serialize};

use crate::board::{Board, Draft};
use crate::domain::{EventType, NewEvent, Source};
use crate::eventlog::{AppendError, EventLog};
use crate::tasks::{Links, Priority, RepoName, Spec, TaskId};

/// The loop's name.
pub const CRON: &str = "cron";
pub const CRON_STREAM_PREFIX: &str = "cron:";

/// One schedule, checked at start-up.
#[derive(Clone, Debug)]
pub struct Schedule {
    pub name: String,
    pub pattern: String,
    pub cron: Cron,
    pub timezone: chrono_tz::Tz,
    pub action: ScheduleAction,
}

/// What a schedule does when it fires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScheduleAction {
    /// Creates this task.
    Task {
        repo: RepoName,
        spec: Spec,
        priority: Option<Priority>,
    },
    /// Sends a digest of the board to the Telegram chats (`effects:telegram` writes and sends it).
    Digest,
}

/// The built-in daily digest's schedule name.
pub const DAILY_DIGEST: &str = "daily-digest";

/// A cron pattern as `[[schedules]] cron` takes it: 5 fields, or 6 with seconds first.
pub fn parse_pattern(pattern: &str) -> Result<Cron, String> {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .build()
        .parse(pattern)
        .map_err(|e| e.to_string())
}

impl Schedule {
    /// The latest slot at or before `now` that is later than `after`: the one to fire now, if any.
    pub fn due(&self, after: DateTime<Utc>, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = now.with_timezone(&self.timezone);
        let slot = self
            .cron
            .find_previous_occurrence(&local, true)
            .ok()?
            .with_timezone(&Utc);
        (slot > after).then_some(slot)
    }

    /// The first slot after `now`.
    pub fn next_after(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = now.with_timezone(&self.timezone);
        self.cron
            .find_next_occurrence(&local, false)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }
}

/// One fact about a schedule, in its stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CronEvent {
    Armed {
        at: DateTime<Utc>,
    },
    Fired {
        at: DateTime<Utc>,
        /// The scheduled time this firing is for.
        slot: DateTime<Utc>,
        /// The task it created; none for a digest.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task: Option<TaskId>,
        /// A digest to send (`effects:telegram` sends it, keyed by schedule and slot).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        digest: bool,
    },
}

impl CronEvent {
    fn kind(&self) -> &'static str {
        match self {
            CronEvent::Armed { .. } => "cron.armed",
            CronEvent::Fired { .. } => "cron.fired",
        }
    }
}

/// What `/health` shows of a schedule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ScheduleStatus {
    pub name: String,
    pub cron: String,
    pub timezone: String,
    pub next_at: Option<DateTime<Utc>>,
    pub last_slot: Option<DateTime<Utc>>,
    pub last_task: Option<TaskId>,
    /// `task` or `digest`.
    pub sends: &'static str,
}

/// What one tick did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CronProgress {
    pub fired: u64,
    pub schedules: Vec<ScheduleStatus>,
}

#[derive(Clone, Debug)]
pub struct CronLoop {
    log: EventLog,
    board: Board,
    schedules: std::sync::Arc<Vec<Schedule>>,
    clock: crate::domain::clock::Clock,
}

impl CronLoop {
    pub fn new(
        log: EventLog,
        board: Board,
        schedules: Vec<Schedule>,
        clock: crate::domain::clock::Clock,
    ) -> Self {
        Self {
            log,
            board,
            schedules: std::sync::Arc::new(schedules),
            clock,
        }
    }

    pub async fn tick(&self) -> anyhow::Result<CronProgress> {
        let mut progress = CronProgress::default();
        for schedule in self.schedules.iter() {
            let status = self
                .tick_one(schedule, &mut progress)
                .await
                .with_context(|| format!("schedule {}", schedule.name))?;
            progress.schedules.push(status);
        }
        Ok(progress)
    }

    async fn tick_one(
        &self,
        schedule: &Schedule,
        progress: &mut CronProgress,
    ) -> anyhow::Result<ScheduleStatus> {
        let stream = format!("{CRON_STREAM_PREFIX}{}", schedule.name);
        let recorded = self.log.store().read_stream(&stream).await?;
        let events: Vec<CronEvent> = recorded
            .iter()
            .map(|e| serde_json::from_slice(&e.body))
            .collect::<Result<_, _>>()
            .with_context(|| format!("{stream} holds an event that is not a cron event"))?;
        let mut version = i64::try_from(events.len()).unwrap_or(i64::MAX);
        let now = self.clock.now();
        let mut armed = None;
        let mut last = None;
        for event in &events {
            match event {
                CronEvent::Armed { at } => armed = armed.or(Some(*at)),
                CronEvent::Fired { slot, task, .. } => last = Some((*slot, *task)),
            }
        }
        let armed = match armed {
            Some(at) => at,
            None => {
                // First sight: slots before now are not this schedule's to make up.
                self.append(&stream, version + 1, "armed", &CronEvent::Armed { at: now })
                    .await?;
                version += 1;
                now
            }
        };
        let after = last.map_or(armed, |(slot, _)| slot.max(armed));
        if let Some(slot) = schedule.due(after, now) {
            let key = format!("{stream}:{}", slot.to_rfc3339());
            let task = match &schedule.action {
                ScheduleAction::Task {
                    repo,
                    spec,
                    priority,
                } => {
                    let draft = Draft {
                        priority: *priority,
                        ..Draft::new(repo.clone(), spec.clone(), Links::default())
                    };
                    let (outcome, _) = self
                        .board
                        .create(draft, &key, CRON, None)
                        .await
                        .context("creating the scheduled task")?;
                    Some(outcome.task.id())
                }
                ScheduleAction::Digest => None,
            };
            self.append(
                &stream,
                version + 1,
                &slot.to_rfc3339(),
                &CronEvent::Fired {
                    at: now,
                    slot,
                    task,
                    digest: schedule.action == ScheduleAction::Digest,
                },
            )
            .await?;
            tracing::info!(schedule = %schedule.name, %slot, ?task, "schedule fired");
            metrics::counter!("pidevops_cron_fired_total", "schedule" => schedule.name.clone())
                .increment(1);
            progress.fired += 1;
            last = Some((slot, task));
        }
        Ok(ScheduleStatus {
            name: schedule.name.clone(),
            cron: schedule.pattern.clone(),
            timezone: schedule.timezone.name().to_owned(),
            next_at: schedule.next_after(now),
            last_slot: last.map(|(slot, _)| slot),
            last_task: last.and_then(|(_, task)| task),
            sends: match schedule.action {
                ScheduleAction::Task { .. } => "task",
                ScheduleAction::Digest => "digest",
            },
        })
    }

    async fn append(
        &self,
        stream: &str,
        version: i64,
        what: &str,
        event: &CronEvent,
    ) -> anyhow::Result<()> {
        let body = serde_json::to_vec(event)?;
        let mut new = NewEvent::new(
            Source::Pidevops,
            EventType::from_stored(event.kind().to_owned()),
            format!("{stream}:{what}"),
            "application/json",
            bytes::Bytes::from(body),
        );
        new.stream = Some((stream.to_owned(), version));
        new.meta
            .insert("actor".to_owned(), serde_json::Value::from(CRON));
        match self.log.append(new).await {
            // Already recorded (a replica in a brief split-brain, or a retry): the stream says what happened.
            Ok(_) | Err(AppendError::Conflict { .. }) => Ok(()),
            Err(error) => Err(error).with_context(|| format!("recording {}", event.kind())),
        }
    }
}

#[cfg(test)]
mod tests;
