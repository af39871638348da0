//! When a `todo` candidate may start: no spent budget holds it (and each spent budget's notice, once), and for a
//! task that failed, its backoff or its provider's limit, unless a person lifted that limit.

use std::collections::BTreeMap;

use anyhow::Context;
use chrono::{DateTime, Utc};

use super::super::Dispatcher;
use super::FOLLOW_UP_SETTLE;
use crate::dispatch::schedule::Candidate;
use crate::projectors::tasks::TaskRow;
use crate::tasks::{Column, Failure, RepoName, RetryCause, TaskId};

impl Dispatcher {
    /// The candidates no spent budget holds back, how many were, and each budget spent or past its soft limit in
    /// words (for `/health`). Reads the raises, today's usage and the candidates' own spend once per tick (one
    /// statement for all of them, not one per candidate), and then only when what they were read from moved: the
    /// ledger is kept for the next tick (`budgets::Ledger::refresh`). Only when `[budgets]` sets a limit.
    pub(super) async fn within_budgets(
        &self,
        candidates: Vec<Candidate>,
    ) -> anyhow::Result<(Vec<Candidate>, usize, Vec<String>)> {
        let config = &self.inner.config.budgets;
        if !config.any() {
            return Ok((candidates, 0, Vec::new()));
        }
        let today = Utc::now().date_naive();
        let mut kept = Vec::with_capacity(candidates.len());
        let mut held = 0;
        let mut words = std::collections::BTreeSet::new();
        let asked: Vec<(TaskId, &str)> =
            candidates.iter().map(|c| (c.id, c.repo.as_str())).collect();
        let last = self.local().ledger.take();
        let ledger = crate::budgets::Ledger::refresh(last, self.store(), config, today, &asked)
            .await
            .context("reading the budgets' raises, today's spend and the candidates' own")?;
        for candidate in candidates {
            let standings = ledger
                .standings(self.store(), config, candidate.id, candidate.repo.as_str())
                .await
                .with_context(|| format!("reading the budgets of {}", candidate.id))?;
            for standing in &standings {
                let notice = match standing.over(&Default::default()) {
                    Some(why) => Some(("exceeded", why)),
                    None if standing.soft(config.soft_at) => {
                        Some(("soft", standing.soft_words(config.soft_at)))
                    }
                    None => None,
                };
                if let Some((level, why)) = notice {
                    if level == "soft" {
                        words.insert(why.clone());
                    }
                    self.notice_once(level, &standing.scope, why).await?;
                }
            }
            match crate::budgets::first_over(&standings, &Default::default()) {
                Some((_, why)) => {
                    held += 1;
                    words.insert(why);
                }
                None => kept.push(candidate),
            }
        }
        self.local().ledger = Some(ledger);
        Ok((kept, held, words.into_iter().collect()))
    }

    /// A budget's notice at `level`, recorded once (the log's key makes it once across replicas and restarts; the
    /// set spares this process the appends).
    pub(super) async fn notice_once(
        &self,
        level: &str,
        scope: &crate::budgets::Scope,
        words: String,
    ) -> anyhow::Result<()> {
        let key = crate::budgets::notice_key(level, scope);
        if self.local().budget_notices.contains(&key) {
            return Ok(());
        }
        let notice = crate::budgets::Notice {
            at: Utc::now(),
            level: level.to_owned(),
            scope: scope.clone(),
            words,
        };
        crate::budgets::notify(&self.inner.log, &notice)
            .await
            .context("recording a budget's notice")?;
        self.local().budget_notices.insert(key);
        Ok(())
    }

    /// The profile a queued task's next run would use, from its row (the claim checks it again on the task).
    pub(super) fn profile_name_of<'a>(&'a self, row: &'a TaskRow) -> &'a str {
        let profiles = &self.inner.profiles;
        if row.column == Column::Triage {
            if let Some(triage) = profiles.triager() {
                return &triage.name;
            }
        }
        if row.is_plan() {
            if let Some(planner) = profiles.planner() {
                return &planner.name;
            }
        }
        if let Some(agent) = row.state.get("agent").and_then(|a| a.as_str()) {
            return agent;
        }
        match row.repo.parse::<RepoName>() {
            Ok(repo) => &profiles.for_repo(&repo).name,
            Err(_) => "",
        }
    }

    /// When a task that failed may start again: its last failure plus the backoff for the next attempt, with a
    /// jitter derived from the task and attempt (the same on every replica and after every restart); after its
    /// provider's limit, when the limit lifts.
    pub(super) fn ready_at(
        &self,
        row: &TaskRow,
        limited_profiles: &BTreeMap<String, DateTime<Utc>>,
        lifts: &BTreeMap<String, DateTime<Utc>>,
    ) -> Option<DateTime<Utc>> {
        let failure: Failure =
            serde_json::from_value(row.state.get("last_failure")?.clone()).ok()?;
        if lifted(&failure, lifts.get(self.profile_name_of(row))) {
            return None;
        }
        // Its profile's fallback runs it now, instead of its waiting for the limit.
        let fallback = matches!(failure.cause, RetryCause::Limited { .. })
            && self
                .inner
                .profiles
                .fallback_for(self.profile_name_of(row), limited_profiles)
                .is_some();
        self.failure_ready_at(
            row.id,
            u32::try_from(row.attempts).ok()?,
            &failure,
            fallback,
        )
    }

    /// When `task`, whose last attempt (of `attempts`) ended in `failure`, may start again. An interrupted
    /// attempt, or one stopped to start again with a follow-up, was not the task's failure (no backoff); a person
    /// asking for more waits only a moment for the rest of what they are sending; a provider's limit waits until
    /// it lifts, unless a `fallback` profile runs the work.
    pub(super) fn failure_ready_at(
        &self,
        task: TaskId,
        attempts: u32,
        failure: &Failure,
        fallback: bool,
    ) -> Option<DateTime<Utc>> {
        match failure.cause {
            RetryCause::Interrupted { .. } | RetryCause::Restarted { .. } => None,
            RetryCause::FollowUp => Some(failure.at + FOLLOW_UP_SETTLE),
            RetryCause::Limited { .. } if fallback => None,
            RetryCause::Limited { until, .. } => Some(until),
            _ => self.after_backoff(task, attempts, failure.at),
        }
    }

    /// When attempt `attempts + 1` of `task`, whose last attempt failed at `failed_at`, may start.
    pub(super) fn after_backoff(
        &self,
        task: TaskId,
        attempts: u32,
        failed_at: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let next = attempts.saturating_add(1);
        let jitter = {
            use sha2::Digest;
            let digest = sha2::Sha256::digest(format!("{task}:{next}"));
            f64::from(digest[0]) / 255.0 * 0.2
        };
        let delay = self.inner.config.backoff(next, jitter);
        Some(failed_at + chrono::Duration::from_std(delay).ok()?)
    }
}

/// Whether a person lifted the pause of the task's profile after its provider's limit held the task back.
pub(super) fn lifted(failure: &Failure, lift: Option<&DateTime<Utc>>) -> bool {
    matches!(failure.cause, RetryCause::Limited { .. }) && lift.is_some_and(|at| *at > failure.at)
}
