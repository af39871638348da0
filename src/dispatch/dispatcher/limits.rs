//! What holds an attempt back while it runs: its budgets, watched against the agent's streamed usage (the agent
//! is stopped the moment one is spent), and, after a provider's usage limit stopped it, when it may run again.

use std::sync::Arc;

use chrono::Utc;
use tokio_util::sync::CancellationToken;

use super::Dispatcher;
use crate::dispatch::runner;
use crate::tasks::Task;

/// How often a running agent's usage is held against its budgets.
const BUDGET_WATCH: std::time::Duration = std::time::Duration::from_millis(200);

/// A run's budget watcher: what it found, and the token that ends it.
pub(super) struct BudgetWatch {
    exceeded: Arc<std::sync::Mutex<Option<String>>>,
    done: CancellationToken,
}

impl BudgetWatch {
    /// Ends the watch; why the budget stopped the agent, if it did.
    pub(super) fn exceeded(&self) -> Option<String> {
        self.done.cancel();
        self.exceeded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

/// However the attempt ends (lost, a step failed), its watcher ends with it.
impl Drop for BudgetWatch {
    fn drop(&mut self) {
        self.done.cancel();
    }
}

/// The longest a provider's named reset is waited for (a later one is likely wrong, or an agent's lie).
pub(super) const MAX_LIMIT_WAIT_NAMED: chrono::Duration = chrono::Duration::days(7);
/// The longest wait when the provider named no reset.
pub(super) const MAX_LIMIT_WAIT_UNKNOWN: chrono::Duration = chrono::Duration::hours(1);

impl Dispatcher {
    /// Watches the run's streamed usage against the budgets its task falls under, and stops the agent the moment
    /// one is spent. `None` without `[budgets]` (or when they cannot be read: the dispatcher checked them before
    /// the claim, and the next claim checks again).
    pub(super) async fn watch_budget(
        &self,
        task: &Task,
        meter: &runner::SharedMeter,
        agent_stop: &CancellationToken,
    ) -> Option<BudgetWatch> {
        let config = &self.inner.config.budgets;
        if !config.any() {
            return None;
        }
        let standings = match crate::budgets::standings(
            self.store(),
            config,
            task.id(),
            task.repo().as_str(),
            Utc::now().date_naive(),
        )
        .await
        {
            Ok(standings) => standings,
            Err(error) => {
                tracing::warn!(task = %task.id(), %error, "the budgets cannot be read; this run is not watched");
                return None;
            }
        };
        let exceeded = Arc::new(std::sync::Mutex::new(None));
        let done = CancellationToken::new();
        let (meter, stop, seen, finished, log) = (
            meter.clone(),
            agent_stop.clone(),
            exceeded.clone(),
            done.clone(),
            self.inner.log.clone(),
        );
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = finished.cancelled() => return,
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(BUDGET_WATCH) => {}
                }
                let usage = meter.lock().unwrap_or_else(|e| e.into_inner()).usage();
                if let Some((scope, why)) = crate::budgets::first_over(&standings, &usage) {
                    tracing::warn!(%why, "stopping the agent: a budget is spent");
                    *seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
                    stop.cancel();
                    let notice = crate::budgets::Notice {
                        at: Utc::now(),
                        level: "exceeded".to_owned(),
                        scope,
                        words: why,
                    };
                    if let Err(error) = crate::budgets::notify(&log, &notice).await {
                        tracing::warn!(
                            error = format!("{error:#}"),
                            "the budget's notice was not recorded"
                        );
                    }
                    return;
                }
            }
        });
        Some(BudgetWatch { exceeded, done })
    }

    /// When a task stopped by its provider's limit (and its profile) may run again: the reset the provider named,
    /// at most a week out; else the retry backoff, at most an hour.
    pub(super) fn limit_lifts(
        &self,
        limit: Option<&crate::domain::usage::Limit>,
        attempt: u32,
        now: chrono::DateTime<Utc>,
    ) -> chrono::DateTime<Utc> {
        match limit.and_then(|l| l.resets_at) {
            Some(at) if at > now => at.min(now + MAX_LIMIT_WAIT_NAMED),
            _ => {
                let backoff = chrono::Duration::from_std(self.inner.config.backoff(attempt, 0.0))
                    .unwrap_or(MAX_LIMIT_WAIT_UNKNOWN);
                now + backoff.min(MAX_LIMIT_WAIT_UNKNOWN)
            }
        }
    }
}
