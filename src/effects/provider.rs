//! The one shape every provider's policy has. The runner follows the log and makes each call once; a policy says
//! which events concern its provider, what requests they produce, and makes its provider's calls. Each one is
//! in its own folder (`github/`, `linear/`, `telegram/`: the Telegram bot is that policy's), built from the
//! pure request builders next to it; what it needs from the log or the board it asks the [`Handle`] it is given
//! (`handle.rs`: the runner, seen that narrowly). The runner is generic over it (`Effects<P>`) and names none.

use std::future::Future;

use chrono::{DateTime, Utc};

use super::handle::{EffectsProgress, Handle, Settled};
use super::CallError;
use super::{Produced, ProviderAction, Request};
use crate::board::Loaded;
use crate::eventlog::{Bodies, StoredEvent};
use crate::tasks::{RepoName, TaskEvent, TaskId};

/// What a provider's policy answers the runner. Its futures are `Send`: the runner is generic over the policy and
/// runs on any thread. An implementation writes them as `async fn`s.
pub trait ProviderPolicy: Send + Sync {
    /// What this provider's loop can be asked to do.
    type Action: ProviderAction;

    /// The provider whose calls this policy makes (its name in `domain::registry::PROVIDERS`; one loop each,
    /// `effects:<name>`).
    fn provider(&self) -> &'static str;

    /// The bodies [`ProviderPolicy::own_event`] and the runner read: the loop's reader ships no other. All, unless
    /// the provider acts on pidevops's own records alone.
    fn bodies(&self) -> Bodies {
        Bodies::All
    }

    /// Work due before the tick reads the log (the bot's command menu).
    fn prepare(
        &self,
        _fx: &impl Handle<Action = Self::Action>,
    ) -> impl Future<Output = anyhow::Result<()>> + Send {
        async { Ok(()) }
    }

    /// An event that is not a task's and concerns this provider alone (a bot command, an agent session, a
    /// digest): how it stands once handled. `None`: the shared path decides (effect follow-ups, task events).
    fn own_event(
        &self,
        _fx: &impl Handle<Action = Self::Action>,
        _event: &StoredEvent,
        _progress: &mut EffectsProgress,
    ) -> impl Future<Output = anyhow::Result<Option<Settled>>> + Send {
        async { Ok(None) }
    }

    /// Whether a task event may ask for anything: the cheap test, before the task is loaded.
    fn notifies(&self, event: &TaskEvent) -> bool;

    /// The requests a task event (`task_event`, stored as `event`) asks for, the task loaded.
    fn requests(
        &self,
        fx: &impl Handle<Action = Self::Action>,
        event: &StoredEvent,
        task_event: &TaskEvent,
        loaded: &Loaded,
    ) -> impl Future<Output = anyhow::Result<Vec<Request<Self::Action>>>> + Send;

    /// What the task's review request opening (`github:pr:<task>` or `gitlab:mr:<task>` succeeded) asks of this
    /// provider.
    fn pull_request_opened(
        &self,
        _fx: &impl Handle<Action = Self::Action>,
        _opened: &OpenedPullRequest<'_>,
    ) -> impl Future<Output = anyhow::Result<Vec<Request<Self::Action>>>> + Send {
        async { Ok(Vec::new()) }
    }

    /// When the provider's rate limits let `action` go, if not now.
    fn not_before(&self, _action: &Self::Action) -> Option<DateTime<Utc>> {
        None
    }

    /// `action` was just sent (for the rate limits).
    fn sent(&self, _action: &Self::Action) {}

    /// A record of its own the provider keeps of a call that succeeded (Telegram: which task a message was
    /// about, so a reply to it finds the task), appended once, at its stream's first version.
    fn record_of(
        &self,
        _request: &Request<Self::Action>,
        _produced: &Produced,
    ) -> Option<OwnRecord> {
        None
    }

    /// Makes the call: one of this provider's own actions (its type says so; another provider's are its loop's).
    fn call(
        &self,
        key: &str,
        action: &Self::Action,
    ) -> impl Future<Output = Result<Produced, CallError>> + Send;
}

/// The task's pull request (or GitLab merge request: `number` is its iid), as its opening effect produced it.
pub struct OpenedPullRequest<'a> {
    pub task: TaskId,
    /// The code host it was opened on (its effect's key says which).
    pub host: crate::domain::Source,
    pub repo: &'a RepoName,
    pub number: u64,
    pub url: &'a str,
}

/// A record a provider keeps of one of its calls (see [`ProviderPolicy::record_of`]).
pub struct OwnRecord {
    pub stream: String,
    pub kind: &'static str,
    pub task: Option<TaskId>,
    pub body: Vec<u8>,
}

/// The loop that makes `provider`'s calls.
pub fn loop_name(provider: &str) -> String {
    format!("effects:{provider}")
}
