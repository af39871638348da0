//! The board's mark for a base push being handled: before the `refresh` loop refreshes a base push's tasks one at
//! a time (each a fetch, a rebase or merge and a push), it marks every one it is about to refresh as possibly
//! behind (`refresh.base_moved`), so the board shows them stale while they wait their turn. Each mark ends with its
//! refresh: a push (`task.refreshed`), or the branch found holding the base already (`refresh.current`). A conflict
//! handed to an agent keeps it until the agent's resolution is pushed; a flagged task keeps it (nothing brought it
//! up to date).

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::Refresher;
use crate::domain::{EventType, NewEvent, Source};
use crate::landing::merges::in_host_queue;
use crate::projectors::tasks::REFRESH_BASE_MOVED;
use crate::tasks::{CommitSha, RepoName, TaskId};

/// `refresh.base_moved`: `task`'s review request at `head` is possibly behind `repo`'s base, which the push at log
/// position `push` moved. Keyed `refresh-moved:<task>:<head>:<push>` (once per head and push: a restart that
/// handles the push again marks nothing twice).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseMoved {
    pub task: TaskId,
    pub repo: RepoName,
    pub base: String,
    pub head: CommitSha,
    pub push: i64,
}

impl BaseMoved {
    /// `refresh-moved:<task>:<head>:<push>`; the tasks projector reads the mark from it
    /// (`projectors::tasks::moved_key_parts`).
    pub fn key(&self) -> String {
        format!(
            "refresh-moved:{}:{}:{}",
            self.task,
            self.head.as_str().to_ascii_lowercase(),
            self.push
        )
    }

    fn event(&self) -> anyhow::Result<NewEvent> {
        Ok(NewEvent::new(
            Source::Pidevops,
            EventType::from_stored(REFRESH_BASE_MOVED.to_owned()),
            self.key(),
            "application/json",
            bytes::Bytes::from(serde_json::to_vec(self).context("encoding refresh.base_moved")?),
        ))
    }
}

impl Refresher {
    /// Marks each of `tasks` this loop refreshes now as possibly behind `repo`'s `base`, moved by the push at log
    /// position `push`; the ones marked, in order (each of them is then refreshed, and a branch found current
    /// already is recorded so, which clears its mark).
    pub(super) async fn mark_base_moved(
        &self,
        tasks: &[TaskId],
        repo: &RepoName,
        base: &str,
        push: i64,
    ) -> anyhow::Result<Vec<TaskId>> {
        let mut marked = Vec::with_capacity(tasks.len());
        for id in tasks {
            let Some(loaded) = self.lander.board.load(*id).await? else {
                continue;
            };
            // The same tasks its refresh takes: not one in the host's own queue, which is left alone.
            if !self.refreshes(&loaded.task) || in_host_queue(&self.lander, &loaded.task).await? {
                continue;
            }
            let Some(head) = self.head(&loaded.task).await? else {
                continue;
            };
            let mark = BaseMoved {
                task: *id,
                repo: repo.clone(),
                base: base.to_owned(),
                head,
                push,
            };
            let key = mark.key();
            self.log
                .append(mark.event()?)
                .await
                .with_context(|| format!("recording {key}"))?;
            marked.push(*id);
        }
        Ok(marked)
    }
}
