//! What a policy may ask of the loop that holds it, and no more: the board, the log and the loops to read (and
//! the board to steer), whether an effect was ever requested, and an effect recorded or driven now (an event that
//! is the policy's own: a bot command, a digest, an agent session). The runner (`runner/`) implements
//! [`Handle`] and hands itself down as one; the policies name this module, never the runner, so the runner may
//! build them.

use std::future::Future;

use crate::board::Board;
use crate::eventlog::EventLog;
use crate::loops::LoopRegistry;

use super::{ProviderAction, Request};

/// Who the effects loops' events and commands are from.
pub(crate) const ACTOR: &str = "effects";

/// What one tick did, for `/health`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct EffectsProgress {
    pub position: i64,
    pub succeeded: u64,
    pub failed: u64,
    /// Effects held back by the cap on their task's outbound calls.
    pub withheld: u64,
    /// An effect waits for its retry time (the checkpoint stays before its cause until then).
    pub waiting: Option<String>,
    /// The tick handed back with events left (the loop goes again at once).
    #[serde(skip)]
    pub out_of_time: bool,
}

/// How an effect stands after this tick looked at it.
pub enum Settled {
    Yes,
    /// Not before this time.
    Waiting(chrono::DateTime<chrono::Utc>),
}

/// The narrow handle a policy gets instead of the runner. Its futures are `Send` (the loop runs on any thread),
/// and a policy's futures, which hold it, are too.
pub trait Handle: Sync {
    /// The actions of the provider whose loop this is.
    type Action: ProviderAction;

    /// The board: tasks loaded, commands executed, its `[board]` configuration.
    fn board(&self) -> &Board;

    /// The log: streams read, a policy's own records appended.
    fn log(&self) -> &EventLog;

    /// The loops the bot's `/status` reports on, if the loop was given them.
    fn loops(&self) -> Option<&LoopRegistry>;

    /// Whether effect `key` was ever requested (its stream has anything).
    fn requested(&self, key: &str) -> impl Future<Output = anyhow::Result<bool>> + Send;

    /// Records the request, caused by the event at position `cause` (once per key: a repeat is a duplicate of
    /// the first).
    fn request(
        &self,
        request: &Request<Self::Action>,
        cause: i64,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// Makes the next attempt of the effect if it is due (its cap asked first); says whether it is settled.
    fn drive(
        &self,
        request: &Request<Self::Action>,
        progress: &mut EffectsProgress,
    ) -> impl Future<Output = anyhow::Result<Settled>> + Send;

    /// Records the request (once per key), then makes its next attempt if that is due.
    fn ask(
        &self,
        request: &Request<Self::Action>,
        cause: i64,
        progress: &mut EffectsProgress,
    ) -> impl Future<Output = anyhow::Result<Settled>> + Send {
        async move {
            self.request(request, cause).await?;
            self.drive(request, progress).await
        }
    }
}

/// The task's review request (`links`: its pull or merge request) attached as the task's link, and the task as it
/// is after. A closed or archived task, or one already linked to another, keeps what it has (logged, not an
/// error); `None` when the task does not exist here.
pub async fn link_review_request(
    board: &Board,
    task: crate::tasks::TaskId,
    links: crate::tasks::Links,
) -> anyhow::Result<Option<crate::tasks::Task>> {
    use anyhow::Context;
    match board
        .execute(task, &crate::tasks::Command::AttachLinks { links }, ACTOR)
        .await
    {
        Ok(outcome) => Ok(Some(outcome.task)),
        Err(crate::board::BoardError::Refused(refused)) => {
            tracing::info!(%task, %refused, "review request not linked");
            Ok(board.load(task).await?.map(|loaded| loaded.task))
        }
        Err(error) => Err(error).context("linking the review request to its task"),
    }
}
