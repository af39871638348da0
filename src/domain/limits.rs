//! When a provider's limit, as runs reported it, holds back an agent profile. Pure.
//!
//! A run learns of its provider's limit from its CLI's output, which anything inside the agent can write to
//! (`/proc/$PPID/fd/1`): one run's report is a stranger's word. So it holds back its own task until the reset it
//! named (the task's `limited` failure), but its profile for at most [`UNVERIFIED_WINDOW_S`] (`[dispatch]
//! limit_unverified_s`); after that one probe run of the profile may start, whose success answers the report and
//! whose own limit agrees with it. A longer pause needs [`AGREEING_TASKS`] distinct tasks' runs to report a limit
//! (none answered by a later success of the profile): the profile is paused until the latest reset that many of
//! them agree on. A person's lift (`limits.lifted` in the stream [`STREAM`]) ends every report made before it; a
//! cancelled task's report counts no more.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

/// The longest one run's report pauses its profile, in seconds (the default of `limit_unverified_s`).
pub const UNVERIFIED_WINDOW_S: f64 = 3600.0;
/// How many distinct tasks' runs must report a limit for their profile to pause past the unverified window.
pub const AGREEING_TASKS: usize = 2;

/// The stream of a person's lifts.
pub const STREAM: &str = "limits";
/// A person lifted a profile's pause (the body: [`Lifted`]).
pub const LIFTED: &str = "limits.lifted";

/// A person's lift of a profile's pause.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Lifted {
    pub at: DateTime<Utc>,
    pub profile: String,
    /// Who lifted it: `api`, `cli`, `dashboard`.
    pub by: String,
}

/// One run that ended on its provider's limit, not answered by a later success of its profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub task: String,
    pub ended_at: DateTime<Utc>,
    /// The reset it named (at most a week out), else its backoff.
    pub until: DateTime<Utc>,
    /// Its task was cancelled: the report counts no more.
    pub withdrawn: bool,
}

/// What holds a profile back now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "hold", rename_all = "snake_case")]
pub enum Hold {
    /// Nothing of the profile starts until `until`.
    Paused {
        until: DateTime<Utc>,
        /// How many distinct tasks' runs reported the limit.
        tasks: usize,
        /// `false`: one task's word, held only for the unverified window.
        verified: bool,
    },
    /// One task's report, past its unverified window: one run of the profile may start to see.
    Probe { tasks: usize },
}

impl Hold {
    /// Until when nothing of the profile starts; `None` for a probe.
    pub fn paused_until(&self) -> Option<DateTime<Utc>> {
        match self {
            Hold::Paused { until, .. } => Some(*until),
            Hold::Probe { .. } => None,
        }
    }

    /// For a person (`/health`, the dashboard).
    pub fn describe(&self, profile: &str) -> String {
        match self {
            Hold::Paused {
                until,
                tasks,
                verified: true,
            } => format!(
                "agent profile {profile} is paused until {} by its provider's usage or rate limit, reported by \
                 {tasks} tasks' runs",
                until.format("%Y-%m-%d %H:%M UTC")
            ),
            Hold::Paused { until, .. } => format!(
                "agent profile {profile} is paused until {} by its provider's usage or rate limit, as one run \
                 reported it (unverified: then one probe run)",
                until.format("%Y-%m-%d %H:%M UTC")
            ),
            Hold::Probe { .. } => format!(
                "agent profile {profile} may start one probe run: one run reported its provider's limit, \
                 unverified"
            ),
        }
    }
}

/// What holds `reports`' profile back at `now`, given the last lift of its pause, if any: `None` when nothing does.
pub fn hold(
    reports: &[Report],
    lifted_at: Option<DateTime<Utc>>,
    window: Duration,
    now: DateTime<Utc>,
) -> Option<Hold> {
    // Per task, the latest reset it still reports.
    let mut by_task: BTreeMap<&str, (DateTime<Utc>, DateTime<Utc>)> = BTreeMap::new();
    for r in reports
        .iter()
        .filter(|r| !r.withdrawn && r.until > now)
        .filter(|r| lifted_at.is_none_or(|lifted| r.ended_at > lifted))
    {
        let entry = by_task
            .entry(r.task.as_str())
            .or_insert((r.ended_at, r.until));
        entry.0 = entry.0.max(r.ended_at);
        entry.1 = entry.1.max(r.until);
    }
    if by_task.is_empty() {
        return None;
    }
    let tasks = by_task.len();
    // The latest reset at least AGREEING_TASKS tasks report.
    let mut untils: Vec<DateTime<Utc>> = by_task.values().map(|(_, until)| *until).collect();
    untils.sort_unstable_by(|a, b| b.cmp(a));
    if let Some(agreed) = untils.get(AGREEING_TASKS - 1).filter(|at| **at > now) {
        let single = by_task
            .values()
            .map(|(ended, until)| (*until).min(*ended + window))
            .max()
            .filter(|at| at > agreed);
        return Some(Hold::Paused {
            until: single.unwrap_or(*agreed),
            tasks,
            verified: true,
        });
    }
    let unverified = by_task
        .values()
        .map(|(ended, until)| (*until).min(*ended + window))
        .max()
        .filter(|at| *at > now);
    Some(match unverified {
        Some(until) => Hold::Paused {
            until,
            tasks,
            verified: false,
        },
        None => Hold::Probe { tasks },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        "2026-12-04T12:00:00Z".parse().unwrap()
    }

    fn report(task: &str, ended_ago_min: i64, until_in_h: i64) -> Report {
        Report {
            task: task.into(),
            ended_at: now() - Duration::minutes(ended_ago_min),
            until: now() + Duration::hours(until_in_h),
            withdrawn: false,
        }
    }

    const HOUR: Duration = Duration::hours(1);

    #[test]
    fn one_runs_six_day_limit_pauses_its_profile_for_the_window_then_allows_a_probe() {
        let six_days = report("T-1", 10, 144);
        assert_eq!(
            hold(std::slice::from_ref(&six_days), None, HOUR, now()),
            Some(Hold::Paused {
                until: now() + Duration::minutes(50),
                tasks: 1,
                verified: false
            })
        );
        let past_the_window = Report {
            ended_at: now() - Duration::minutes(61),
            ..six_days.clone()
        };
        assert_eq!(
            hold(std::slice::from_ref(&past_the_window), None, HOUR, now()),
            Some(Hold::Probe { tasks: 1 })
        );
        // The same task's runs reporting again are still one task's word.
        let again = Report {
            ended_at: now() - Duration::minutes(90),
            ..past_the_window.clone()
        };
        assert_eq!(
            hold(&[past_the_window, again], None, HOUR, now()),
            Some(Hold::Probe { tasks: 1 })
        );
        // A reset sooner than the window: until then.
        assert_eq!(
            hold(&[report("T-1", 0, 0)], None, HOUR, now()),
            None,
            "a reset already past holds nothing"
        );
        let soon = Report {
            until: now() + Duration::minutes(5),
            ..report("T-1", 0, 0)
        };
        assert_eq!(
            hold(&[soon], None, HOUR, now()).and_then(|h| h.paused_until()),
            Some(now() + Duration::minutes(5))
        );
    }

    #[test]
    fn two_distinct_tasks_agreeing_pause_until_the_latest_reset_both_name() {
        let reports = [report("T-1", 120, 144), report("T-2", 90, 5)];
        assert_eq!(
            hold(&reports, None, HOUR, now()),
            Some(Hold::Paused {
                until: now() + Duration::hours(5),
                tasks: 2,
                verified: true
            })
        );
        let reports = [
            report("T-1", 120, 144),
            report("T-2", 90, 100),
            report("T-3", 1, 50),
        ];
        assert_eq!(
            hold(&reports, None, HOUR, now()).and_then(|h| h.paused_until()),
            Some(now() + Duration::hours(100))
        );
    }

    #[test]
    fn a_lift_ends_the_reports_before_it_and_a_cancelled_tasks_report_counts_no_more() {
        let reports = [report("T-1", 120, 144), report("T-2", 90, 100)];
        let lifted = now() - Duration::minutes(30);
        assert_eq!(hold(&reports, Some(lifted), HOUR, now()), None);
        // A report after the lift counts (one task's: unverified).
        let later = [report("T-1", 120, 144), report("T-3", 10, 100)];
        assert!(matches!(
            hold(&later, Some(lifted), HOUR, now()),
            Some(Hold::Paused {
                verified: false,
                tasks: 1,
                ..
            })
        ));
        let withdrawn = [
            Report {
                withdrawn: true,
                ..report("T-1", 120, 144)
            },
            report("T-2", 90, 100),
        ];
        assert_eq!(
            hold(&withdrawn, None, HOUR, now()),
            Some(Hold::Probe { tasks: 1 })
        );
        assert_eq!(hold(&[], None, HOUR, now()), None);
    }

    #[test]
    fn a_hold_says_in_words_whose_word_it_is() {
        let unverified = hold(&[report("T-1", 10, 144)], None, HOUR, now()).unwrap();
        assert!(unverified
            .describe("claude")
            .starts_with("agent profile claude is paused until 2026-12-04 12:50 UTC"));
        assert!(unverified.describe("claude").contains("unverified"));
        let probe = Hold::Probe { tasks: 1 };
        assert!(probe.describe("claude").contains("one probe run"));
    }
}
