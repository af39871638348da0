//! What holds an attempt back while it runs: its budgets, watched against the agent's streamed usage (the agent
//! is stopped the moment one is spent), and, after a provider's usage limit stopped it, when it may run again and
//! what that holds back of its profile (`domain::limits`: one run's word only for a short window).

use std::sync::Arc;

use anyhow::Context;
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

/// What a provider's limit holds back now: each profile's hold, and the latest lift of each profile's pause.
pub(super) struct Holds {
    pub holds: std::collections::BTreeMap<String, crate::domain::limits::Hold>,
    pub lifts: std::collections::BTreeMap<String, chrono::DateTime<Utc>>,
}

impl Holds {
    /// The profiles nothing starts on, and until when.
    pub fn paused(&self) -> std::collections::BTreeMap<String, chrono::DateTime<Utc>> {
        self.holds
            .iter()
            .filter_map(|(profile, hold)| Some((profile.clone(), hold.paused_until()?)))
            .collect()
    }

    /// Whether `profile` is on probation: one run of it may start.
    pub fn probing(&self, profile: &str) -> bool {
        matches!(
            self.holds.get(profile),
            Some(crate::domain::limits::Hold::Probe { .. })
        )
    }
}

impl Dispatcher {
    /// What holds each profile back now: the runs that ended `limited` within the longest wait, not answered by
    /// a later success of the same profile, with the reset each recorded, its task, and whether that task was
    /// cancelled; weighed by `domain::limits::hold` against the profile's last lift. From the runs, not the
    /// tasks: the pause holds wherever the limited task went (its fallback).
    pub(super) async fn limit_holds(&self, now: chrono::DateTime<Utc>) -> anyhow::Result<Holds> {
        use crate::domain::limits::{hold, Report};
        let since = now - MAX_LIMIT_WAIT_NAMED;
        let limited = crate::projectors::runs::unanswered_limits(self.store(), since)
            .await
            .context("reading the runs that ended on a limit")?;
        let lifts = crate::board::pause::limit_lifts(self.store())
            .await
            .context("reading the lifts of limits")?;
        let mut reports: std::collections::BTreeMap<String, Vec<Report>> = Default::default();
        for run in limited {
            let Ok(id) = run.run_id.parse::<uuid::Uuid>() else {
                continue;
            };
            let events = self
                .store()
                .read_stream(&crate::domain::runs::stream(crate::tasks::RunId(id)))
                .await
                .with_context(|| format!("reading run {id}, which ended on a limit"))?;
            let until = events
                .iter()
                .filter_map(|e| crate::projectors::runs::decode(e).ok())
                .find_map(|e| match e {
                    crate::domain::runs::RunEvent::Failed { until, .. } => until,
                    _ => None,
                });
            let Some(until) = until else {
                continue;
            };
            let withdrawn = match run.task_id.parse() {
                Ok(task) => crate::projectors::tasks::get(self.store(), task)
                    .await
                    .with_context(|| format!("reading {task}, whose run ended on a limit"))?
                    .is_some_and(|row| row.column == crate::tasks::Column::Cancelled),
                Err(_) => false,
            };
            reports.entry(run.profile).or_default().push(Report {
                task: run.task_id,
                ended_at: run.ended_at,
                until,
                withdrawn,
            });
        }
        let window = chrono::Duration::from_std(self.inner.config.limit_unverified)
            .unwrap_or(MAX_LIMIT_WAIT_UNKNOWN);
        let holds = reports
            .iter()
            .filter_map(|(profile, reports)| {
                let lifted = lifts.get(profile).copied();
                Some((profile.clone(), hold(reports, lifted, window, now)?))
            })
            .collect();
        Ok(Holds { holds, lifts })
    }

    /// Watches the run's streamed usage against the budgets its task falls under, and stops the agent the moment
    /// one is spent, or the moment its meter refuses a usage figure (fail closed: what it spends is unknown).
    /// `None` when its profile reads no usage and there are no `[budgets]`. Budgets that cannot be read are not
    /// watched (the dispatcher checked them before the claim, and the next claim checks again).
    pub(super) async fn watch_budget(
        &self,
        task: &Task,
        meter: &runner::SharedMeter,
        agent_stop: &CancellationToken,
    ) -> Option<BudgetWatch> {
        let config = &self.inner.config.budgets;
        let reads = meter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .reads_anything();
        if !config.any() && !reads {
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
                tracing::warn!(task = %task.id(), %error, "the budgets cannot be read; this run's spend is not watched");
                Vec::new()
            }
        };
        let soft_at = config.soft_at;
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
            let mut told = std::collections::BTreeSet::new();
            loop {
                // Once more when the run ends: a run that passed `soft_at` of a budget says so though its task is
                // no longer a candidate the claim would check (`within_budgets`).
                let last = tokio::select! {
                    () = finished.cancelled() => true,
                    () = stop.cancelled() => true,
                    () = tokio::time::sleep(BUDGET_WATCH) => false,
                };
                let (usage, refused) = {
                    let meter = meter.lock().unwrap_or_else(|e| e.into_inner());
                    (meter.usage(), meter.refused().map(str::to_owned))
                };
                for standing in &standings {
                    if standing.over(&usage).is_none()
                        && standing.soft_with(&usage, soft_at)
                        && told.insert(standing.scope.key())
                    {
                        let notice = crate::budgets::Notice {
                            at: Utc::now(),
                            level: "soft".to_owned(),
                            scope: standing.scope.clone(),
                            words: standing.soft_words(soft_at),
                        };
                        if let Err(error) = crate::budgets::notify(&log, &notice).await {
                            tracing::warn!(
                                error = format!("{error:#}"),
                                "the budget's notice was not recorded"
                            );
                        }
                    }
                }
                if last {
                    return;
                }
                if let Some(why) = refused {
                    tracing::warn!(%why, "stopping the agent: its usage figures were refused");
                    *seen.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(super::ending::refused_detail(&why));
                    stop.cancel();
                    return;
                }
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
