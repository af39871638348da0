//! Which `todo` tasks start now: the most urgent first, then the oldest, within a global concurrency limit and a
//! per-repository one. Pure; what does not fit stays queued (never rejected) and is picked on a later tick.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

pub use crate::config::dispatch::Limits;
use crate::tasks::{Priority, RepoName, TaskId};

/// A task waiting in `todo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub id: TaskId,
    pub repo: RepoName,
    pub priority: Priority,
    pub created_at: DateTime<Utc>,
}

/// The tasks to start, in the order to start them, given what already runs per repository. A repository at its
/// limit does not hold up the others (no head-of-line blocking).
pub fn pick(
    candidates: &[Candidate],
    running: &BTreeMap<RepoName, usize>,
    limits: &Limits,
) -> Vec<TaskId> {
    let mut order: Vec<&Candidate> = candidates.iter().collect();
    order.sort_by_key(|c| (Reverse(c.priority), c.created_at, c.id.number()));
    let mut total: usize = running.values().sum();
    let mut per_repo = running.clone();
    let mut picked = Vec::new();
    for candidate in order {
        if total >= limits.global {
            break;
        }
        let in_repo = per_repo.entry(candidate.repo.clone()).or_insert(0);
        if *in_repo >= limits.for_repo(&candidate.repo) {
            continue;
        }
        *in_repo += 1;
        total += 1;
        picked.push(candidate.id);
    }
    picked
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn candidate(n: u64, repo: &str, priority: Priority, minute: u32) -> Candidate {
        Candidate {
            id: format!("T-{n}").parse().unwrap(),
            repo: repo.parse().unwrap(),
            priority,
            created_at: Utc.with_ymd_and_hms(2026, 11, 30, 9, minute, 0).unwrap(),
        }
    }

    fn numbers(ids: Vec<TaskId>) -> Vec<u64> {
        ids.into_iter().map(|id| id.number()).collect()
    }

    fn limits(global: usize, per_repo_default: usize) -> Limits {
        Limits {
            global,
            per_repo_default,
            per_repo: BTreeMap::new(),
        }
    }

    #[test]
    fn the_most_urgent_then_the_oldest_go_first() {
        let todo = [
            candidate(1, "acme/api", Priority::Normal, 1),
            candidate(2, "acme/web", Priority::Urgent, 5),
            candidate(3, "acme/app", Priority::Normal, 0),
            candidate(4, "acme/ops", Priority::Low, 0),
            candidate(5, "acme/db", Priority::High, 9),
        ];
        assert_eq!(
            numbers(pick(&todo, &BTreeMap::new(), &limits(10, 10))),
            [2, 5, 3, 1, 4]
        );
        assert_eq!(
            numbers(pick(&todo, &BTreeMap::new(), &limits(2, 10))),
            [2, 5],
            "the rest stays queued"
        );
    }

    #[test]
    fn a_busy_repository_does_not_hold_up_the_others() {
        let todo = [
            candidate(1, "acme/api", Priority::Urgent, 0),
            candidate(2, "acme/api", Priority::Urgent, 1),
            candidate(3, "acme/web", Priority::Low, 2),
        ];
        let running = BTreeMap::from([("acme/api".parse().unwrap(), 1)]);
        let mut l = limits(3, 1);
        assert_eq!(numbers(pick(&todo, &running, &l)), [3]);
        l.per_repo.insert("acme/api".parse().unwrap(), 2);
        assert_eq!(numbers(pick(&todo, &running, &l)), [1, 3]);
        // What already runs counts against the global limit too.
        let running = BTreeMap::from([("acme/ops".parse().unwrap(), 3)]);
        assert!(pick(&todo, &running, &l).is_empty());
        assert!(pick(&todo, &BTreeMap::new(), &limits(0, 5)).is_empty());
    }
}
