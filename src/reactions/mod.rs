//! Reactions: the policy that turns a code host's events on pidevops branches into commands on their tasks. A
//! failed check, workflow or pipeline sends the task back to `todo` with what failed (an attempt, so CI cannot loop
//! forever); a trusted review (changes requested, or comments, or a note) is a follow-up that sends the task back
//! once, and each of its line comments (file, lines, the end of its diff hunk) a follow-up the same run gets, all
//! keyed by their host's ids so a redelivery attaches nothing twice (the dispatcher's `FOLLOW_UP_SETTLE` lets the
//! parts of a review, which GitHub sends in no promised order, arrive before the run starts); a merge completes
//! the task and closing without merging cancels it. A passing check and a trusted approval are recorded as the
//! task's landing facts (auto-land, `tasks::landing`), a dismissed review withdraws its approval.
//!
//! A singleton loop reads the log after its checkpoint; each host's rules (`rules::HostRules`, one per source,
//! in its provider's folder, handed in by start-up) say what an event means, purely. A CI result counts only for
//! the commit pidevops last pushed for the task: a late result for an older attempt, or a result for a commit
//! somebody else pushed, changes nothing. A failure that moves its task may first be completed by its host
//! (`HostRules::failure_details`: GitLab's failed jobs' log tails). Commands are idempotent or refused by the
//! task's state, so a crash before the checkpoint moves repeats nothing that matters.
//!
//! Before anything moves, `HostRules::admit` holds the event to what pidevops recorded for the task (its
//! repository, its review request: `Task::review_request`, not a fork, a trusted reviewer); a refusal is recorded
//! as `reactions.ignored` with the reason.
//! A CI result on a commit that may not be a head (GitLab's merged results pipeline) is then moved to the head its
//! host says it counts for (`HostRules::result_head`), held to the commit pidevops last pushed as any result.
//!
//! A plan's pull request (`[plans] land = "combined"`, branch `pidevops/<plan>`) is held to the same, and its
//! results count only for the plan's last combined commit (`plan.rs`): merged completes each item combined (and
//! so the plan), closed unmerged, a failed check or requested changes flag the plan for a person (which item to
//! send back is theirs to say), a passing check and a trusted approval are the plan's landing facts.

mod plan;
pub mod rules;

use std::sync::Arc;

use anyhow::Context;
use chrono::Utc;
use std::collections::BTreeMap;

use crate::board::{Board, BoardError, Loaded};
use crate::dispatch::runs::{self, RunEvent};
use crate::eventlog::{EventLog, StoredEvent};
use crate::loops::follow::{AsStored, Follow, Follower, Next, Pick, Wanted};
use crate::tasks::{
    Column, Command, CommitSha, FactName, FollowUpOrigin, FollowUpText, Reason, RetryCause, RunId,
    Task, TaskEvent, TaskId,
};
pub use rules::{HostRules, Reaction};

/// The loop's name and its checkpoint's.
pub const REACTIONS: &str = "reactions";
/// How long a CI result for an unknown commit waits while the task's run is still recording its push.
const UNKNOWN_COMMIT_GRACE: chrono::Duration = chrono::Duration::seconds(120);

/// What one tick did, for `/health`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReactionsProgress {
    pub position: i64,
    pub applied: u64,
    pub ignored: u64,
    /// A CI result waits for its task's run to finish recording (the checkpoint stays before it).
    pub waiting: Option<String>,
    /// The tick handed back with events left (the loop goes again at once).
    #[serde(skip)]
    pub out_of_time: bool,
}

#[derive(Clone, Debug)]
pub struct Reactions {
    log: EventLog,
    board: Board,
    /// Each code host's rules, one per source; an event of any other source is not reactions'.
    hosts: Vec<Arc<dyn HostRules>>,
    /// Repositories on a code host other than GitHub ([`Reactions::with_code_hosts`]).
    code_hosts: BTreeMap<crate::tasks::RepoName, crate::domain::Source>,
    follow: Follow<StoredEvent>,
}

impl Reactions {
    pub fn new(log: EventLog, board: Board, hosts: Vec<Arc<dyn HostRules>>) -> Self {
        Self {
            log,
            board,
            hosts,
            code_hosts: BTreeMap::new(),
            follow: Follow::default(),
        }
    }

    /// Each repository's code host that is not GitHub (`[repos."…"] provider`, intake's `code_hosts`): an event
    /// from another host never moves its tasks, even about a repository of the same name there.
    pub fn with_code_hosts(
        mut self,
        code_hosts: BTreeMap<crate::tasks::RepoName, crate::domain::Source>,
    ) -> Self {
        self.code_hosts = code_hosts;
        self
    }

    /// The code host of `repo` (GitHub unless configured otherwise; names compare in any case), as intake's
    /// `IntakeConfig::hosted_on` reads it.
    fn host_of(&self, repo: &crate::tasks::RepoName) -> crate::domain::Source {
        self.code_hosts
            .get(repo)
            .copied()
            .unwrap_or(crate::domain::Source::Github)
    }

    /// Handles what was committed since the checkpoint, up to a CI result that must wait (see
    /// [`crate::loops::follow`] for pages, checkpoint and budget).
    pub async fn tick(&self) -> anyhow::Result<ReactionsProgress> {
        let followed = self.follow.tick(self.log.store(), self).await?;
        Ok(ReactionsProgress {
            position: followed.position,
            waiting: followed.waiting,
            out_of_time: followed.out_of_time,
            ..followed.tally
        })
    }

    async fn handle_event(
        &self,
        event: &StoredEvent,
        progress: &mut ReactionsProgress,
    ) -> anyhow::Result<Next> {
        let Some(host) = host_reading(&self.hosts, &event.source) else {
            return Ok(Next::Done);
        };
        let host = host.as_ref();
        // The same test as the reader's pick (`Follower::bodies`): an event it passed over has no body here.
        if !host.reads(&event.event_type) {
            return Ok(Next::Done);
        }
        let payload: serde_json::Value =
            serde_json::from_str(event.data_json().get()).unwrap_or_default();
        let mut reaction = host.decide(&event.event_type, &payload);
        if let Some(id) = reaction.acting_on() {
            if let Some(loaded) = self.board.load(id).await? {
                let task = &loaded.task;
                let home = self.host_of(task.repo());
                if home != host.source() {
                    progress.ignored += 1;
                    let why = format!(
                        "from {}, but {}'s repository {} is on {}",
                        host.source().as_str(),
                        task.id(),
                        task.repo(),
                        home.as_str()
                    );
                    self.record_ignored(event, id, &why).await?;
                    return Ok(Next::Done);
                }
                let expected = rules::Expected {
                    repo: task.repo(),
                    pr: task.review_request(),
                };
                if let Err(why) = host.admit(&event.event_type, &payload, &expected) {
                    progress.ignored += 1;
                    self.record_ignored(event, id, &why).await?;
                    return Ok(Next::Done);
                }
                reaction = match self
                    .on_its_head(host, event, &payload, task.repo(), reaction)
                    .await?
                {
                    Ok(reaction) => reaction,
                    Err(next) => {
                        if next == Next::Done {
                            progress.ignored += 1;
                        }
                        return Ok(next);
                    }
                };
                // A plan's pull request (`land = "combined"`): its items do the work, a person decides.
                if loaded.task.is_plan() {
                    return self
                        .plan_reaction(event, &loaded, reaction, host, progress)
                        .await;
                }
            }
        }
        self.react(host, event, &payload, reaction, progress).await
    }

    /// What an admitted `reaction` (or one about no task on the board) does to its task.
    async fn react(
        &self,
        host: &dyn HostRules,
        event: &StoredEvent,
        payload: &serde_json::Value,
        reaction: Reaction,
        progress: &mut ReactionsProgress,
    ) -> anyhow::Result<Next> {
        let actor = host.source().as_str();
        let (task, verdict) = match reaction {
            Reaction::None => return Ok(Next::Done),
            Reaction::Ignore { task, why } => {
                tracing::debug!(%task, why, source = actor, "a code host's event changes nothing");
                progress.ignored += 1;
                return Ok(Next::Done);
            }
            Reaction::ChecksFailed { task, sha, summary } => {
                let failed = Failed {
                    host,
                    event,
                    payload,
                };
                (
                    task,
                    self.checks_failed(&failed, task, &sha, &summary).await?,
                )
            }
            Reaction::ChecksPassed { task, sha, name } => {
                let verdict = match FactName::new("check name", &name) {
                    Ok(name) => {
                        self.landing_fact(event, task, &sha, |sha| Command::RecordCheckPassed {
                            sha,
                            name,
                        })
                        .await?
                    }
                    Err(error) => Verdict::Refused(error.to_string()),
                };
                (task, verdict)
            }
            Reaction::Approved { task, by, sha } => {
                let verdict = match FactName::new("reviewer", &by) {
                    Ok(by) => {
                        self.landing_fact(event, task, &sha, |sha| Command::RecordApproval {
                            by,
                            sha,
                        })
                        .await?
                    }
                    Err(error) => Verdict::Refused(error.to_string()),
                };
                (task, verdict)
            }
            Reaction::ReviewDismissed { task, by } => (
                task,
                match FactName::new("reviewer", &by) {
                    Ok(by) => Verdict::Apply(Command::WithdrawApproval { by }),
                    Err(error) => Verdict::Refused(error.to_string()),
                },
            ),
            // A review's body and each of its line comments are follow-ups keyed by their GitHub ids (a
            // redelivery attaches nothing twice); the review sends the task back, once, with all of them.
            Reaction::Reviewed {
                task,
                review,
                by,
                changes_requested,
                body,
            } => {
                let what = if changes_requested {
                    "requested changes"
                } else {
                    "reviewed"
                };
                let text = if body.trim().is_empty() {
                    format!("{by} {what} (see the line comments)")
                } else {
                    format!("{by} {what}: {body}")
                };
                (
                    task,
                    follow_up(
                        &text,
                        host.review_key(review),
                        &format!("{by} on {}", host.place(payload)),
                        true,
                    ),
                )
            }
            Reaction::ReviewComment { task, comment } => (
                task,
                follow_up(
                    &comment.text(),
                    host.comment_key(comment.id),
                    &format!("{} on {}", comment.by, host.place(payload)),
                    // A comment outside any review sends the task back itself.
                    comment.review.is_none(),
                ),
            ),
            Reaction::Merged { task, .. } => (task, Verdict::Apply(Command::Complete)),
            Reaction::ClosedUnmerged { task, by } => (
                task,
                Verdict::Apply(Command::Cancel {
                    reason: Reason::summarize(&format!(
                        "the pull request was closed without merging by {by}"
                    )),
                }),
            ),
            Reaction::Dequeued { task, reason } => (
                task,
                Verdict::Apply(Command::FlagNeedsHuman {
                    reason: Reason::summarize(&host.dequeued(&reason)),
                }),
            ),
        };
        let command = match verdict {
            Verdict::Apply(command) => command,
            Verdict::Nothing => {
                progress.ignored += 1;
                return Ok(Next::Done);
            }
            Verdict::Refused(why) => {
                progress.ignored += 1;
                self.record_ignored(event, task, &why).await?;
                return Ok(Next::Done);
            }
            Verdict::Wait(why) => return Ok(Next::Wait(why)),
        };
        match self.board.execute(task, &command, actor).await {
            Ok(outcome) => {
                if !outcome.appended.is_empty() {
                    progress.applied += 1;
                    tracing::info!(%task, command = command.name(), source = actor, "reacted to a code host");
                }
            }
            // The task has moved on (or never existed here): the event is history, not an instruction.
            Err(BoardError::Refused(refused)) => {
                tracing::info!(%task, %refused, source = actor, "a code host's event changes nothing");
                progress.ignored += 1;
            }
            Err(error) => return Err(error).context("applying a reaction"),
        }
        Ok(Next::Done)
    }

    /// An admitted CI result moved to the head commit it counts for, as its host says ([`HostRules::result_head`]:
    /// a GitLab merged-results pipeline's is the head it was made from); `Err` what the loop does instead: the
    /// result recorded as ignored (it counts for no head pidevops can check), or a wait while the host does not
    /// answer (for [`UNKNOWN_COMMIT_GRACE`], then ignored too).
    async fn on_its_head(
        &self,
        host: &dyn HostRules,
        event: &StoredEvent,
        payload: &serde_json::Value,
        repo: &crate::tasks::RepoName,
        reaction: Reaction,
    ) -> anyhow::Result<Result<Reaction, Next>> {
        let (Reaction::ChecksPassed { task, .. } | Reaction::ChecksFailed { task, .. }) = &reaction
        else {
            return Ok(Ok(reaction));
        };
        let task = *task;
        let why = match host.result_head(repo, &event.event_type, payload).await {
            rules::ResultHead::Own => return Ok(Ok(reaction)),
            rules::ResultHead::Head(head) => {
                return Ok(Ok(match reaction {
                    Reaction::ChecksPassed { task, name, .. } => Reaction::ChecksPassed {
                        task,
                        sha: head,
                        name,
                    },
                    Reaction::ChecksFailed { task, summary, .. } => Reaction::ChecksFailed {
                        task,
                        sha: head,
                        summary,
                    },
                    other => other,
                }))
            }
            rules::ResultHead::Unanswered(why)
                if Utc::now() - event.recorded_at < UNKNOWN_COMMIT_GRACE =>
            {
                return Ok(Err(Next::Wait(why)));
            }
            rules::ResultHead::Unanswered(why) | rules::ResultHead::Unchecked(why) => why,
        };
        self.record_ignored(event, task, &why).await?;
        Ok(Err(Next::Done))
    }

    /// What a failed CI result on `sha` means now: a retry when `sha` is the commit pidevops last pushed for a
    /// task in review; a follow-up when that task was already sent back for this very commit (another check of
    /// it failing too); nothing for an older attempt's commit or one pidevops never pushed. Only a failure that
    /// may move the task asks its host for details (a log tail), so nothing else costs a call.
    async fn checks_failed(
        &self,
        failed: &Failed<'_>,
        id: TaskId,
        sha: &str,
        summary: &str,
    ) -> anyhow::Result<Verdict> {
        let Some(loaded) = self.board.load(id).await? else {
            return Ok(Verdict::Nothing);
        };
        let short = sha.get(..7).unwrap_or(sha);
        let task = &loaded.task;
        match self.pushed(&loaded, sha).await? {
            Pushed::Latest { .. } => {}
            Pushed::Earlier => {
                tracing::info!(%id, sha = short, "CI result for an earlier attempt's commit: ignored");
                return Ok(Verdict::Nothing);
            }
            Pushed::Unknown => return Ok(unknown_commit(failed.event, task, short)),
        }
        let moves = match task.column() {
            Column::InReview => true,
            Column::Todo => already_sent_back(task, short),
            _ => false,
        };
        if !moves {
            return Ok(Verdict::Nothing);
        }
        let details = failed
            .host
            .failure_details(task.repo(), &failed.event.event_type, failed.payload)
            .await;
        let reason = match details {
            Some(details) => format!("CI failed on {short}: {summary}\n{details}"),
            None => format!("CI failed on {short}: {summary}"),
        };
        Ok(Verdict::Apply(match task.column() {
            Column::InReview => Command::Retry {
                cause: RetryCause::ChecksFailed,
                reason: Reason::summarize(&reason),
            },
            // The same failure reported twice (a webhook and the poller) is no news.
            Column::Todo if already_sent_back(task, short) && !same_failure(task, &reason) => {
                Command::AttachFollowUp {
                    text: FollowUpText::new(format!("Also {reason}"))
                        .context("a CI failure as a follow-up")?,
                    origin: None,
                    send_back: true,
                }
            }
            _ => return Ok(Verdict::Nothing),
        }))
    }

    /// A landing fact about commit `sha` (a check passed, an approval): recorded by `command` when `sha` is the
    /// commit pidevops last pushed and the task is in review. While the run that pushed it is still recording
    /// its submission, it waits (a fact is never lost to that race); about any other commit it is nothing.
    async fn landing_fact(
        &self,
        event: &StoredEvent,
        id: TaskId,
        sha: &str,
        command: impl FnOnce(CommitSha) -> Command,
    ) -> anyhow::Result<Verdict> {
        let sha = match CommitSha::new(sha) {
            Ok(sha) => sha,
            Err(error) => return Ok(Verdict::Refused(error.to_string())),
        };
        let Some(loaded) = self.board.load(id).await? else {
            return Ok(Verdict::Nothing);
        };
        let task = &loaded.task;
        let run = match self.pushed(&loaded, sha.as_str()).await? {
            Pushed::Latest { run } => run,
            Pushed::Earlier => {
                tracing::info!(%id, sha = sha.short(), "a check or approval of an earlier attempt's commit: ignored");
                return Ok(Verdict::Nothing);
            }
            Pushed::Unknown => return Ok(unknown_commit(event, task, sha.short())),
        };
        Ok(match task.column() {
            Column::InReview => Verdict::Apply(command(sha)),
            Column::InProgress
                if task.run() == Some(run)
                    && Utc::now() - event.recorded_at < UNKNOWN_COMMIT_GRACE =>
            {
                Verdict::Wait(format!(
                    "a check or approval of {} waits while {id}'s run records its submission",
                    sha.short()
                ))
            }
            _ => Verdict::Nothing,
        })
    }

    /// Where `sha` stands among the commits pidevops pushed for the loaded task.
    async fn pushed(&self, loaded: &Loaded, sha: &str) -> anyhow::Result<Pushed> {
        let pushed = self.pushed_commits(&loaded.events).await?;
        Ok(match pushed.last() {
            Some((run, latest)) if latest.eq_ignore_ascii_case(sha) => Pushed::Latest { run: *run },
            _ if pushed.iter().any(|(_, c)| c.eq_ignore_ascii_case(sha)) => Pushed::Earlier,
            _ => Pushed::Unknown,
        })
    }

    /// Records why `event` did not move `task`; once per event, however often the loop sees it.
    async fn record_ignored(
        &self,
        event: &StoredEvent,
        task: TaskId,
        reason: &str,
    ) -> anyhow::Result<()> {
        let mut task_field = serde_json::Map::new();
        task_field.insert("task".to_owned(), task.to_string().into());
        let record = event.ignored_by("reactions", reason, task_field);
        tracing::info!(event = event.position, r#type = %event.event_type, %task, %reason, "reactions ignored an event");
        metrics::counter!("pidevops_reactions_ignored_total").increment(1);
        self.log
            .append(record)
            .await
            .context("recording an ignored code host's event")?;
        Ok(())
    }

    /// The commits pidevops pushed for the task with the runs that pushed them, oldest first, from its runs'
    /// streams in the log; a refresh's commit (`task.refreshed`) counts as its run's latest push.
    async fn pushed_commits(&self, events: &[StoredEvent]) -> anyhow::Result<Vec<(RunId, String)>> {
        let mut commits: Vec<(RunId, String)> = Vec::new();
        for event in events {
            let run = match serde_json::from_slice(&event.body) {
                Ok(TaskEvent::Started { run, .. }) => run,
                Ok(TaskEvent::Refreshed { to, .. }) => {
                    if let Some(run) = commits.last().map(|(run, _)| *run) {
                        commits.push((run, to.as_str().to_owned()));
                    }
                    continue;
                }
                _ => continue,
            };
            let stream = self
                .log
                .store()
                .read_stream(&runs::stream(run))
                .await
                .with_context(|| format!("reading run {run}"))?;
            for recorded in stream {
                if let Ok(RunEvent::Succeeded { commit, .. }) =
                    serde_json::from_slice(&recorded.body)
                {
                    commits.push((run, commit));
                }
            }
        }
        Ok(commits)
    }
}

/// The host whose rules read `source`'s events, if any.
fn host_reading<'a>(
    hosts: &'a [Arc<dyn HostRules>],
    source: &str,
) -> Option<&'a Arc<dyn HostRules>> {
    hosts.iter().find(|h| h.source().as_str() == source)
}

impl Follower for Reactions {
    type Prepare = AsStored;
    type Tally = ReactionsProgress;

    fn checkpoint(&self) -> &str {
        REACTIONS
    }

    fn prepare(&self) -> AsStored {
        AsStored
    }

    /// The bodies of the event types some host reads; no other is shipped (most of a busy log).
    fn bodies(&self) -> Wanted {
        let hosts = self.hosts.clone();
        let pick: Pick = Arc::new(move |source, event_type| {
            host_reading(&hosts, source).is_some_and(|h| h.reads(event_type))
        });
        Wanted::Picked(pick)
    }

    async fn handle(
        &self,
        event: &StoredEvent,
        progress: &mut ReactionsProgress,
    ) -> anyhow::Result<Next> {
        self.handle_event(event, progress).await.with_context(|| {
            format!(
                "reacting to event {} ({})",
                event.position, event.event_type
            )
        })
    }
}

/// A follow-up from a code host, keyed by `key` (its host's id for it), said at `place` (`who on acme/app#2`).
fn follow_up(text: &str, key: String, place: &str, send_back: bool) -> Verdict {
    let origin = match FollowUpOrigin::new(key, place) {
        Ok(origin) => origin,
        Err(error) => return Verdict::Refused(error.to_string()),
    };
    let text = match FollowUpText::new(text) {
        Ok(text) => text,
        Err(error) => return Verdict::Refused(error.to_string()),
    };
    Verdict::Apply(Command::AttachFollowUp {
        text,
        origin: Some(origin),
        send_back,
    })
}

/// A failed CI result as its host sent it: what its details are asked with.
struct Failed<'a> {
    host: &'a dyn HostRules,
    event: &'a StoredEvent,
    payload: &'a serde_json::Value,
}

/// The task's last failure is this very report.
fn same_failure(task: &Task, reason: &str) -> bool {
    task.last_failure()
        .is_some_and(|f| f.reason == Reason::summarize(reason))
}

/// The task's last failure was a CI failure on this commit.
fn already_sent_back(task: &Task, short_sha: &str) -> bool {
    task.last_failure().is_some_and(|f| {
        f.cause == RetryCause::ChecksFailed
            && f.reason.as_str().contains(&format!("on {short_sha}:"))
    })
}

/// A CI result for a commit pidevops never pushed: while the task's attempt runs it is probably that attempt's
/// push, not yet recorded, so the next tick looks again (for a while); otherwise it changes nothing.
fn unknown_commit(event: &StoredEvent, task: &Task, short: &str) -> Verdict {
    let id = task.id();
    if task.column() == Column::InProgress && Utc::now() - event.recorded_at < UNKNOWN_COMMIT_GRACE
    {
        return Verdict::Wait(format!(
            "a CI result for {short} waits while {id}'s run records its push"
        ));
    }
    tracing::info!(%id, sha = short, "CI result for a commit pidevops did not push: ignored");
    Verdict::Nothing
}

/// Where a commit stands among those pidevops pushed for a task.
enum Pushed {
    /// The last one, pushed by `run`.
    Latest {
        run: RunId,
    },
    Earlier,
    Unknown,
}

/// What a code host's event comes to for its task.
enum Verdict {
    Apply(Command),
    /// Changes nothing (history, or not about pidevops's commits).
    Nothing,
    /// Changes nothing, and is recorded as `reactions.ignored` with the reason (a value its host should not send).
    Refused(String),
    /// Look again on the next tick.
    Wait(String),
}
