//! The one shape every provider's policy has. The runner follows the log and makes each call once; a policy says
//! which events concern its provider, what requests they produce, and makes its provider's calls. Each one is
//! in its own file (`github.rs`, `linear.rs`, `telegram.rs`: the Telegram bot is that policy's), built from the
//! pure request builders next to it; what it needs from the log or the board it asks the [`Handle`] it is given
//! (`handle.rs`: the runner, seen that narrowly). The runner holds one of them (`runner/policies.rs`).

use chrono::{DateTime, Utc};

use super::handle::{EffectsProgress, Handle, Settled};
use super::{Action, Produced, Provider, Request};
use crate::board::Loaded;
use crate::eventlog::StoredEvent;
use crate::providers::CallError;
use crate::tasks::{RepoName, TaskEvent, TaskId};

/// What a provider's policy answers the runner. Crate-private: `async fn` in a public trait could not promise
/// `Send`, and the runner needs its futures to be.
pub(crate) trait ProviderPolicy {
    /// The provider whose calls this policy makes (one loop each).
    fn provider(&self) -> Provider;

    /// Work due before the tick reads the log (the bot's command menu).
    async fn prepare(&self, _fx: &impl Handle) -> anyhow::Result<()> {
        Ok(())
    }

    /// An event that is not a task's and concerns this provider alone (a bot command, an agent session, a
    /// digest): how it stands once handled. `None`: the shared path decides (effect follow-ups, task events).
    async fn own_event(
        &self,
        _fx: &impl Handle,
        _event: &StoredEvent,
        _progress: &mut EffectsProgress,
    ) -> anyhow::Result<Option<Settled>> {
        Ok(None)
    }

    /// Whether a task event may ask for anything: the cheap test, before the task is loaded.
    fn notifies(&self, event: &TaskEvent) -> bool;

    /// The requests a task event (`task_event`, stored as `event`) asks for, the task loaded.
    async fn requests(
        &self,
        fx: &impl Handle,
        event: &StoredEvent,
        task_event: &TaskEvent,
        loaded: &Loaded,
    ) -> anyhow::Result<Vec<Request>>;

    /// What the task's pull request opening (`github:pr:<task>` succeeded) asks of this provider.
    async fn pull_request_opened(
        &self,
        _fx: &impl Handle,
        _opened: &OpenedPullRequest<'_>,
    ) -> anyhow::Result<Vec<Request>> {
        Ok(Vec::new())
    }

    /// When the provider's rate limits let `action` go, if not now.
    fn not_before(&self, _action: &Action) -> Option<DateTime<Utc>> {
        None
    }

    /// `action` was just sent (for the rate limits).
    fn sent(&self, _action: &Action) {}

    /// Makes the call. Only this provider's actions get here (the runner leaves the others to their loops).
    async fn call(&self, key: &str, action: &Action) -> Result<Produced, CallError>;
}

/// The task's pull request, as its opening effect produced it.
pub(crate) struct OpenedPullRequest<'a> {
    pub task: TaskId,
    pub repo: &'a RepoName,
    pub number: u64,
    pub url: &'a str,
}

/// The error for an action another provider's loop makes: never reached (the runner checks first).
pub(super) fn not_mine(provider: Provider, action: &Action) -> CallError {
    CallError::Permanent {
        message: format!("{} does not make {}", provider.loop_name(), action.name()),
    }
}
