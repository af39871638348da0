//! `gitlab_poller`'s merge trains: GitLab takes a merge request off its train (its train pipeline failed, a person
//! removed it, a new push) with no webhook, only a system note, and the merge queue would wait for it forever.
//!
//! For each task in review, not flagged, whose merge the queue chose (`task.merge_queued`) and whose merge effect
//! (`gitlab:merge:<task>:<head>`) says it put the merge request on the train (`Produced::Enqueued`), its car is
//! read (`client/trains.rs`); with none, the merge request is read too, so that a merge that just happened, a
//! close, or a merge request still waiting to join the train once its pipeline passes (GitLab's auto-merge set)
//! is not taken for a removal. Still open, no car, no auto-merge: appended as `gitlab.merge_train.left`
//! (`poll:merge_train:<project>!<iid>:<head>:left`, once per task and head), which GitLab's reactions turn into
//! `Reaction::Dequeued`: the task is flagged for a person, and the base it held is free. At most [`MAX_CARS`]
//! cars are read a tick, the next tick going on after the last one read.
//!
//! Only merge requests pidevops recorded: the task's `gitlab_mr` link names the task's own repository, one of the
//! configured projects; GitLab's answer is held to it (that iid, from `pidevops/<task>` of the project itself).

use std::sync::atomic::Ordering;

use anyhow::Context;
use serde_json::{json, Value};

use super::{GitlabPollProgress, GitlabPoller, GITLAB_POLLER};
use crate::domain::effect::{gitlab_merge_key, stream};
use crate::domain::{EventType, NewEvent, Source};
use crate::effects::CallError;
use crate::projectors::tasks::{self as task_rows, TaskFilter};
use crate::providers::gitlab::client::{CarStatus, MergeRequestNow};
use crate::tasks::{Column, CommitSha, RepoName, TaskId, GITLAB_MR};

/// At most this many cars are read a tick (each maybe with its merge request).
pub const MAX_CARS: usize = 20;

/// A task whose merge request pidevops put on a train at `head`.
struct Riding {
    task: TaskId,
    project: RepoName,
    iid: u64,
    head: CommitSha,
}

impl GitlabPoller {
    /// Reads the cars of the merge requests pidevops put on a train; one gone unmerged is appended (see the
    /// module doc).
    pub(super) async fn trains(&self, progress: &mut GitlabPollProgress) -> anyhow::Result<()> {
        let riding = self.riding().await?;
        if riding.is_empty() {
            return Ok(());
        }
        // Round robin past the cap: each tick starts after the last car the previous one read.
        let start = self.train_cursor.load(Ordering::Relaxed) % riding.len();
        let reads = riding.len().min(MAX_CARS);
        for at in 0..reads {
            let one = &riding[(start + at) % riding.len()];
            progress.cars += 1;
            self.car(one, progress)
                .await
                .with_context(|| format!("{} ({}!{})", one.task, one.project, one.iid))?;
        }
        self.train_cursor
            .store((start + reads) % riding.len(), Ordering::Relaxed);
        Ok(())
    }

    /// The tasks in review whose merge request pidevops put on a train, in task order.
    async fn riding(&self) -> anyhow::Result<Vec<Riding>> {
        let rows = task_rows::list(
            self.log.store(),
            &TaskFilter {
                column: Some(Column::InReview),
                needs_human: Some(false),
                limit: Some(500),
                ..TaskFilter::default()
            },
        )
        .await
        .context("listing the tasks in review")?;
        let mut riding = Vec::new();
        for row in rows {
            // The row may lag; the task's own events decide below.
            if row.state.pointer("/landing/queued") != Some(&Value::Bool(true)) {
                continue;
            }
            let Some(mr) = row.links.get(GITLAB_MR) else {
                continue;
            };
            let configured = self
                .projects
                .iter()
                .any(|p| p.as_str().eq_ignore_ascii_case(mr.project.as_str()));
            if !configured || !mr.project.as_str().eq_ignore_ascii_case(&row.repo) {
                continue;
            }
            let Some(loaded) = self.board.load(row.id).await? else {
                continue;
            };
            let task = &loaded.task;
            let landing = task.landing();
            let (true, Column::InReview, None, Some(head)) = (
                landing.queued(),
                task.column(),
                task.needs_human(),
                landing.head(),
            ) else {
                continue;
            };
            if self.enqueued(task.id(), head).await? {
                riding.push(Riding {
                    task: task.id(),
                    project: mr.project,
                    iid: mr.iid.get(),
                    head: head.clone(),
                });
            }
        }
        riding.sort_by_key(|r| r.task);
        Ok(riding)
    }

    /// Whether the merge effect of `task` at `head` says it put the merge request on a train.
    async fn enqueued(&self, task: TaskId, head: &CommitSha) -> anyhow::Result<bool> {
        let name = stream(&gitlab_merge_key(task, head));
        let events = self
            .log
            .store()
            .read_stream(&name)
            .await
            .with_context(|| format!("reading {name}"))?;
        Ok(events.last().is_some_and(|last| {
            last.event_type == "effect.succeeded"
                && serde_json::from_slice::<Value>(&last.body)
                    .is_ok_and(|body| body["produced"]["kind"] == "enqueued")
        }))
    }

    /// Reads `one`'s car, and its merge request when it has none; appends its leaving when it left unmerged.
    async fn car(&self, one: &Riding, progress: &mut GitlabPollProgress) -> anyhow::Result<()> {
        let Riding {
            task,
            project,
            iid,
            head,
        } = one;
        match self.client.train_car(project, *iid).await {
            Ok(Some(CarStatus::Riding(_) | CarStatus::Merged)) => return Ok(()),
            Ok(None) => {}
            Err(CallError::Permanent { message }) => {
                tracing::info!(%task, %project, iid, %message, "the poller cannot read the merge request's car");
                return Ok(());
            }
            Err(error) => return Err(anyhow::anyhow!(error)),
        }
        let mr = match self.client.merge_request_now(project, *iid).await {
            Ok(mr) => mr,
            Err(CallError::Permanent { message }) => {
                tracing::info!(%task, %project, iid, %message, "the poller cannot read the task's merge request");
                return Ok(());
            }
            Err(error) => return Err(anyhow::anyhow!(error)),
        };
        if !mr.is_the_project_s_own(*iid, task.branch().as_str()) {
            tracing::info!(%task, %project, iid, "GitLab's merge request is not the one pidevops recorded: not read");
            return Ok(());
        }
        if !left_unmerged(&mr) {
            return Ok(());
        }
        let key = format!("poll:merge_train:{project}!{iid}:{head}:left");
        let mut event = NewEvent::new(
            Source::Gitlab,
            EventType::from_stored("gitlab.merge_train.left".to_owned()),
            key.clone(),
            "application/json",
            bytes::Bytes::from(serde_json::to_vec(&left_shaped(project, &mr, head))?),
        );
        event.subject.action = Some("left".to_owned());
        event.subject.repository = Some(project.as_str().to_owned());
        event.subject.number = i64::try_from(*iid).ok();
        event
            .meta
            .insert("poller".to_owned(), Value::from(GITLAB_POLLER));
        let appended = self
            .log
            .append(event)
            .await
            .with_context(|| format!("appending {key}"))?;
        if !appended.duplicate {
            progress.appended += 1;
            progress.left_trains += 1;
        }
        Ok(())
    }
}

/// Whether a merge request with no car left its train unmerged: still open, and not waiting to join it once its
/// pipeline passes (GitLab's auto-merge, which a removal clears). Merged or closed is its hook's (or the poll's)
/// news; `locked` is a merge under way.
fn left_unmerged(mr: &MergeRequestNow) -> bool {
    mr.state == "opened" && !mr.merge_when_pipeline_succeeds
}

/// What the poller found, as the event GitLab's reactions read (`gitlab.merge_train.left`): the project and the
/// merge request as a Merge Request Hook names them (so `admit` holds it to the task's), the head put on the train
/// (`queued_sha`) and its head now (`sha`).
fn left_shaped(project: &RepoName, mr: &MergeRequestNow, queued: &CommitSha) -> Value {
    json!({
        "object_kind": "merge_train",
        "project": { "id": mr.project_id, "path_with_namespace": project.as_str() },
        "object_attributes": {
            "iid": mr.iid,
            "source_branch": mr.source_branch,
            "source_project_id": mr.source_project_id,
            "target_project_id": mr.target_project_id,
            "state": mr.state,
            "action": "left",
            "queued_sha": queued.as_str(),
            "sha": mr.sha,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now(state: &str, waiting: bool) -> MergeRequestNow {
        serde_json::from_value(json!({
            "iid": 7, "project_id": 42, "source_project_id": 42, "target_project_id": 42,
            "source_branch": "pidevops/T-3", "state": state, "sha": "1111111111111111111111111111111111111111",
            "merge_when_pipeline_succeeds": waiting,
        }))
        .unwrap()
    }

    #[test]
    fn only_an_open_merge_request_not_waiting_to_join_left_its_train() {
        assert!(left_unmerged(&now("opened", false)));
        assert!(!left_unmerged(&now("opened", true)), "waits to join");
        for state in ["merged", "closed", "locked"] {
            assert!(!left_unmerged(&now(state, false)), "{state}");
        }
    }

    #[test]
    fn leaving_reads_as_the_task_s_merge_request_for_reactions() {
        use crate::providers::gitlab::reactions::decide;
        let project: RepoName = "acme/platform/api".parse().unwrap();
        let queued = CommitSha::new("2222222222222222222222222222222222222222").unwrap();
        let body = left_shaped(&project, &now("opened", false), &queued);
        let own = crate::providers::gitlab::settings::GitlabIntake {
            label: "pidevops".into(),
            trusted_users: Default::default(),
            bot_username: None,
        };
        let crate::reactions::Reaction::Dequeued { task, reason } =
            decide("gitlab.merge_train.left", &body, &own)
        else {
            panic!("not dequeued: {body}");
        };
        assert_eq!(task.to_string(), "T-3");
        assert!(
            reason.contains("a new push: its head is 1111111 now"),
            "{reason}"
        );
    }
}
