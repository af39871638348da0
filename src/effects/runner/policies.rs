//! The policy a runner holds: one of the providers', chosen when the loop is built, asked without asking which.

use chrono::{DateTime, Utc};

use crate::board::Loaded;
use crate::effects::github::GithubPolicy;
use crate::effects::handle::{EffectsProgress, Handle, Settled};
use crate::effects::linear::LinearPolicy;
use crate::effects::provider::{OpenedPullRequest, ProviderPolicy};
use crate::effects::telegram::TelegramPolicy;
use crate::effects::{Action, Produced, Provider, Request};
use crate::eventlog::StoredEvent;
use crate::providers::CallError;
use crate::tasks::TaskEvent;

/// One of the policies, chosen when the loop is built: the runner holds one and never asks which.
#[derive(Clone, Debug)]
pub(crate) enum Policy {
    Github(GithubPolicy),
    Linear(LinearPolicy),
    Telegram(TelegramPolicy),
}

/// Calls the same method on whichever policy it is.
macro_rules! each {
    ($self:ident, $p:ident => $call:expr) => {
        match $self {
            Policy::Github($p) => $call,
            Policy::Linear($p) => $call,
            Policy::Telegram($p) => $call,
        }
    };
}

impl ProviderPolicy for Policy {
    fn provider(&self) -> Provider {
        each!(self, p => p.provider())
    }

    async fn prepare(&self, fx: &impl Handle) -> anyhow::Result<()> {
        each!(self, p => p.prepare(fx).await)
    }

    async fn own_event(
        &self,
        fx: &impl Handle,
        event: &StoredEvent,
        progress: &mut EffectsProgress,
    ) -> anyhow::Result<Option<Settled>> {
        each!(self, p => p.own_event(fx, event, progress).await)
    }

    fn notifies(&self, event: &TaskEvent) -> bool {
        each!(self, p => p.notifies(event))
    }

    async fn requests(
        &self,
        fx: &impl Handle,
        event: &StoredEvent,
        task_event: &TaskEvent,
        loaded: &Loaded,
    ) -> anyhow::Result<Vec<Request>> {
        each!(self, p => p.requests(fx, event, task_event, loaded).await)
    }

    async fn pull_request_opened(
        &self,
        fx: &impl Handle,
        opened: &OpenedPullRequest<'_>,
    ) -> anyhow::Result<Vec<Request>> {
        each!(self, p => p.pull_request_opened(fx, opened).await)
    }

    fn not_before(&self, action: &Action) -> Option<DateTime<Utc>> {
        each!(self, p => p.not_before(action))
    }

    fn sent(&self, action: &Action) {
        each!(self, p => p.sent(action))
    }

    async fn call(&self, key: &str, action: &Action) -> Result<Produced, CallError> {
        each!(self, p => p.call(key, action).await)
    }
}
