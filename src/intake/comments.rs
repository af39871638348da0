//! Comments addressed to pidevops on a code host, intake's side with I/O (the pure rule is the host's, GitHub's
//! in `providers/github/intake/comment.rs`): the comment's task is the issue's (its intake key) or the pull
//! request's (the task whose recorded pull request it is: the host's link, GitHub's `github_pr`), never one the
//! comment names; free text becomes a follow-up, or the answer when the task waits on a human; an issue with no
//! task yet becomes one; `/pidevops retry | cancel | approve` steers the board as Telegram's buttons do,
//! `/pidevops status` says where the task is. What was done is recorded once per comment (the host's record type
//! at version 1 of its stream, GitHub's `conversation.github_comment` in `github-comment:<repo>:<id>`): a
//! redelivered comment runs nothing twice, and the host's policy reacts (`eyes`) and replies from that record.

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::rules::comment::{Ask, CodeHost, Comment, CommentCommand};
use super::{Intake, IntakeProgress, INTAKE};
use crate::board::{BoardError, Steer};
use crate::domain::{EventType, NewEvent, Source};
use crate::eventlog::{AppendError, StoredEvent};
use crate::projectors::tasks as task_rows;
use crate::tasks::{Column, Command, FollowUpOrigin, FollowUpText, RepoName, TaskError, TaskId};

/// What pidevops did with a comment addressed to it: the body of its record (`CodeHost::record`, GitHub's
/// `conversation.github_comment`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommentRecord {
    pub repo: RepoName,
    /// The issue's or pull request's number.
    pub number: u64,
    pub pull_request: bool,
    /// The host's id of the comment.
    pub comment: u64,
    pub login: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskId>,
    pub outcome: CommentOutcome,
    /// The webhook event that ran it.
    pub cause_event_id: uuid::Uuid,
}

/// What a comment did, in facts the reply is worded from (the host's policy: `providers/github/effects/mod.rs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CommentOutcome {
    /// A follow-up for the task's next run; `sent_back`: it was in review and goes round again for it.
    Queued { sent_back: bool },
    /// The answer to what the task waited on: the flag cleared, the answer in its next run.
    Answered,
    /// The issue became this task, the comment its first follow-up.
    Created { column: Column },
    /// A command done; `column` where the task is now.
    Steered { command: String, column: Column },
    /// The board (or the comment's text) refused it: why, in the board's words.
    Refused { command: String, why: String },
    Status {
        column: Column,
        attempts: u32,
        max_attempts: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        needs_human: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pull_request: Option<String>,
    },
    /// `/pidevops <given>`: not a command (or none, or a bare mention).
    Unknown { given: String },
    /// No task here, and none made: why.
    NoTask { why: String },
}

impl Intake {
    /// Runs an addressed comment once: a comment with a record was run already (a redelivery), and says so.
    pub(super) async fn comment(
        &self,
        comment: &Comment,
        event: &StoredEvent,
        progress: &mut IntakeProgress,
    ) -> anyhow::Result<()> {
        let stream = comment.stream();
        if let Some(first) = self.comment_record(&stream).await? {
            if first.cause_event_id == event.id {
                // Recorded before a crash moved the checkpoint: done.
                return Ok(());
            }
            progress.ignored += 1;
            return self
                .record_ignored(
                    event,
                    &format!(
                        "comment {} on {}#{} ran already (event {}); a comment delivered again runs nothing twice",
                        comment.id, comment.repo, comment.number, first.cause_event_id
                    ),
                )
                .await;
        }
        let task = self.comment_task(comment).await?;
        let (task, outcome) = self.run_comment(comment, task, event).await?;
        if matches!(outcome, CommentOutcome::Created { .. }) {
            progress.created += 1;
        }
        let record = CommentRecord {
            repo: comment.repo.clone(),
            number: comment.number,
            pull_request: comment.pull_request,
            comment: comment.id,
            login: comment.login.clone(),
            task,
            outcome,
            cause_event_id: event.id,
        };
        let mut new = NewEvent::new(
            Source::Pidevops,
            EventType::from_stored(comment.host.record.to_owned()),
            stream.clone(),
            "application/json",
            bytes::Bytes::from(serde_json::to_vec(&record)?),
        );
        new.stream = Some((stream, 1));
        new.meta
            .insert("actor".to_owned(), serde_json::Value::from(INTAKE));
        new.meta.insert(
            "cause_event_id".to_owned(),
            serde_json::Value::from(event.id.to_string()),
        );
        new.subject.reference = task.map(|t| t.to_string());
        match self.log.append(new).await {
            // Conflict: recorded meanwhile (intake is a singleton; a second replica's lease ran out).
            Ok(_) | Err(AppendError::Conflict { .. }) => Ok(()),
            Err(error) => Err(error).context("recording what the comment did"),
        }
    }

    /// An edited comment never runs again; the record says whether it ran when it was created.
    pub(super) async fn comment_edited(
        &self,
        stream: &str,
        id: u64,
        event: &StoredEvent,
    ) -> anyhow::Result<()> {
        let reason = match self.comment_record(stream).await? {
            Some(first) => format!(
                "comment {id} was edited: an edited comment ran when it was created (event {}), and does not run \
                 again",
                first.cause_event_id
            ),
            None => format!(
                "comment {id} was edited: an edit never runs, and the comment did not run when it was created \
                 (not addressed to pidevops, not from a trusted author, or not in an allowed repository); a new \
                 comment asks again"
            ),
        };
        self.record_ignored(event, &reason).await
    }

    async fn comment_record(&self, stream: &str) -> anyhow::Result<Option<CommentRecord>> {
        let events = self
            .log
            .store()
            .read_stream(stream)
            .await
            .with_context(|| format!("reading {stream}"))?;
        events
            .first()
            .map(|e| serde_json::from_slice::<CommentRecord>(&e.body))
            .transpose()
            .with_context(|| format!("{stream}: its record cannot be read"))
    }

    /// The comment's task: the issue's (its intake key), or the pull request's (the task whose recorded pull
    /// request it is, in the task's own repository).
    async fn comment_task(&self, comment: &Comment) -> anyhow::Result<Option<TaskId>> {
        if !comment.pull_request {
            return Ok(self.board.task_for_key(&comment.issue_key()).await?);
        }
        let value = format!("{}#{}", comment.repo, comment.number);
        let host = comment.host;
        let found = task_rows::task_for_link(self.log.store(), host.pull_request_kind, &value)
            .await
            .context("looking up the pull request's task")?;
        let Some(id) = found else {
            return Ok(None);
        };
        let Some(loaded) = self.board.load(id).await? else {
            return Ok(None);
        };
        let task = &loaded.task;
        let same = |repo: &RepoName| repo.as_str().eq_ignore_ascii_case(comment.repo.as_str());
        let ours = same(task.repo())
            && (host.pull_request)(task.links())
                .is_some_and(|pr| same(&pr.repo) && pr.number == comment.number);
        Ok(ours.then_some(id))
    }

    async fn run_comment(
        &self,
        comment: &Comment,
        task: Option<TaskId>,
        event: &StoredEvent,
    ) -> anyhow::Result<(Option<TaskId>, CommentOutcome)> {
        let outcome = match (task, &comment.ask) {
            (_, Ask::Unknown(given)) => CommentOutcome::Unknown {
                given: given.clone(),
            },
            (Some(id), Ask::Text(text)) => self.follow_up_from(comment, id, text).await?,
            (Some(id), Ask::Command { command, reason }) => {
                self.command_from(comment, id, *command, reason.clone())
                    .await?
            }
            (None, Ask::Text(text)) => return self.create_from(comment, text, event).await,
            (None, Ask::Command { .. }) => CommentOutcome::NoTask {
                why: if comment.pull_request {
                    "this pull request is no pidevops task's".to_owned()
                } else {
                    "this issue is no pidevops task yet; a comment saying what to do makes it one"
                        .to_owned()
                },
            },
        };
        Ok((task, outcome))
    }

    /// An issue with no task: made one under the issue's intake key (a later label finds it), the comment its
    /// first follow-up.
    async fn create_from(
        &self,
        comment: &Comment,
        text: &str,
        event: &StoredEvent,
    ) -> anyhow::Result<(Option<TaskId>, CommentOutcome)> {
        let (key, draft) = match &comment.draft {
            Some(Ok((key, draft))) => (key, draft),
            Some(Err(why)) => return Ok((None, CommentOutcome::NoTask { why: why.clone() })),
            None => {
                return Ok((
                    None,
                    CommentOutcome::NoTask {
                        why: "this pull request is no pidevops task's".to_owned(),
                    },
                ))
            }
        };
        let created = match self
            .board
            .create((**draft).clone(), key, &event.source, Some(event.id))
            .await
        {
            Ok((outcome, created)) => {
                if created {
                    metrics::counter!("pidevops_intake_tasks_created_total", "source" => event.source.clone())
                        .increment(1);
                }
                outcome.task.id()
            }
            Err(BoardError::Refused(refused)) => {
                return Ok((
                    None,
                    CommentOutcome::NoTask {
                        why: format!("the board refused the task: {refused}"),
                    },
                ))
            }
            Err(other) => return Err(other).context("making the issue's task"),
        };
        let outcome = match self.follow_up_from(comment, created, text).await? {
            CommentOutcome::Queued { .. } | CommentOutcome::Answered => {
                let column = match self.board.load(created).await? {
                    Some(loaded) => loaded.task.column(),
                    None => Column::Triage,
                };
                CommentOutcome::Created { column }
            }
            other => other,
        };
        Ok((Some(created), outcome))
    }

    /// Free text for task `id`: the answer when it waits on a human, else a follow-up (which sends a task in
    /// review round again). Keyed by the comment, so a repeat attaches nothing.
    async fn follow_up_from(
        &self,
        comment: &Comment,
        id: TaskId,
        text: &str,
    ) -> anyhow::Result<CommentOutcome> {
        let refused = |why: String| CommentOutcome::Refused {
            command: "follow-up".to_owned(),
            why,
        };
        let (text, origin) = match (
            FollowUpText::new(text.to_owned()),
            FollowUpOrigin::new(comment.origin_key(), comment.from()),
        ) {
            (Ok(text), Ok(origin)) => (text, Some(origin)),
            (Err(e), _) | (_, Err(e)) => return Ok(refused(e.to_string())),
        };
        let Some(loaded) = self.board.load(id).await? else {
            return Ok(refused(format!("{id} does not exist")));
        };
        let actor = comment.host.source.as_str();
        let before = loaded.task.column();
        if loaded.task.needs_human().is_some() {
            let answer = Command::Answer {
                text: text.clone(),
                origin: origin.clone(),
            };
            match self.board.execute(id, &answer, actor).await {
                Ok(_) => return Ok(CommentOutcome::Answered),
                // Answered meanwhile: a follow-up like any other.
                Err(BoardError::Refused(TaskError::NoQuestion { .. })) => {}
                Err(BoardError::Refused(refusal)) => return Ok(refused(refusal.to_string())),
                Err(other) => return Err(other).with_context(|| format!("answering {id}")),
            }
        }
        let attach = Command::AttachFollowUp {
            text,
            origin,
            send_back: true,
        };
        match self.board.execute(id, &attach, actor).await {
            Ok(outcome) => Ok(CommentOutcome::Queued {
                sent_back: before == Column::InReview && outcome.task.column() != Column::InReview,
            }),
            Err(BoardError::Refused(refusal)) => Ok(refused(refusal.to_string())),
            Err(other) => Err(other).with_context(|| format!("attaching a follow-up to {id}")),
        }
    }

    /// `/pidevops <command>` on task `id`: the board's command as Telegram's would be, or where it stands.
    async fn command_from(
        &self,
        comment: &Comment,
        id: TaskId,
        command: CommentCommand,
        reason: Option<String>,
    ) -> anyhow::Result<CommentOutcome> {
        let steer = match command {
            CommentCommand::Status => return self.status_of(id, comment.host).await,
            CommentCommand::Retry => Steer::Retry,
            CommentCommand::Cancel => Steer::Cancel,
            CommentCommand::Approve => Steer::Approve,
        };
        let via = format!(
            "by {} on {} ({}#{})",
            comment.login, comment.host.name, comment.repo, comment.number
        );
        let name = command.name().to_owned();
        let actor = comment.host.source.as_str();
        match self.board.steer(id, steer, reason, &via, actor).await {
            Ok(outcome) => Ok(CommentOutcome::Steered {
                command: name,
                column: outcome.task.column(),
            }),
            Err(BoardError::Refused(refusal)) => Ok(CommentOutcome::Refused {
                command: name,
                why: refusal.to_string(),
            }),
            Err(BoardError::Invalid(invalid)) => Ok(CommentOutcome::Refused {
                command: name,
                why: invalid.to_string(),
            }),
            Err(other) => Err(other).with_context(|| format!("{name} {id} from a comment")),
        }
    }

    async fn status_of(&self, id: TaskId, host: &CodeHost) -> anyhow::Result<CommentOutcome> {
        let Some(loaded) = self.board.load(id).await? else {
            return Ok(CommentOutcome::NoTask {
                why: format!("{id} does not exist"),
            });
        };
        let task = &loaded.task;
        Ok(CommentOutcome::Status {
            column: task.column(),
            attempts: task.attempts(),
            max_attempts: task.max_attempts().get(),
            needs_human: task.needs_human().map(|n| n.reason.as_str().to_owned()),
            pull_request: (host.pull_request)(task.links()).map(|pr| pr.shown),
        })
    }
}
