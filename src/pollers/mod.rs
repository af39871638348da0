//! Pollers: loops that ask the providers for what their webhooks should have told us, and append what the log
//! lacks in the webhook's own shape, so everything downstream (intake, reactions) handles a missed delivery as
//! if it had arrived. Each is a singleton loop (one replica polls), ticks at once on start, and is `unarmed`
//! when configured without its credential.

use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};

use crate::eventlog::EventStore;
use crate::projectors::tasks::{self as task_rows, TaskFilter, TaskRow};
use crate::tasks::Column;

/// Where a withdrawn ticket's task is cancelled (the domain's `WithdrawTicket`): the tasks whose tickets the
/// code hosts' pollers read.
const WITHDRAWABLE: [Column; 3] = [Column::Triage, Column::Todo, Column::InProgress];
/// At most this many tasks' tickets per column and poll (one request each).
const TICKETS_PER_COLUMN: u32 = 200;

/// The tasks a missed withdrawal could still cancel (triage, todo, in progress), at most
/// [`TICKETS_PER_COLUMN`] of each column.
pub async fn withdrawable_tasks(store: &EventStore) -> anyhow::Result<Vec<TaskRow>> {
    let mut rows = Vec::new();
    for column in WITHDRAWABLE {
        rows.extend(
            task_rows::list(
                store,
                &TaskFilter {
                    column: Some(column),
                    limit: Some(TICKETS_PER_COLUMN),
                    ..TaskFilter::default()
                },
            )
            .await
            .with_context(|| format!("listing the tasks in {column}"))?,
        );
    }
    Ok(rows)
}

/// The ticket version `row`'s task holds (intake notes every version it sees): one as old or older is news
/// already told.
pub fn held_version(row: &TaskRow) -> Option<DateTime<Utc>> {
    row.state["ticket_version"]
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// `[pollers.<name>]` in `pidevops.toml` (config reads it): `enabled` (default true once the table is there) and
/// `interval_s`.
#[derive(Clone, Debug, PartialEq)]
pub struct PollerConfig {
    /// The table is there (the operator asked for the poller).
    pub configured: bool,
    pub enabled: bool,
    pub interval: Duration,
}

/// `linear_poller`'s interval unless `[pollers.linear] interval_s` says otherwise.
pub const LINEAR_INTERVAL: Duration = Duration::from_secs(300);
/// `github_poller`'s interval unless `[pollers.github] interval_s` says otherwise.
pub const GITHUB_INTERVAL: Duration = Duration::from_secs(120);
/// `gitlab_poller`'s interval unless `[pollers.gitlab] interval_s` says otherwise.
pub const GITLAB_INTERVAL: Duration = Duration::from_secs(120);

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<PollerConfig, String> {
        text.parse::<crate::config::FileConfig>()
            .map(|file| file.linear_poller)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_poller_table_is_read_and_mistakes_are_named() {
        let absent = parse("").unwrap();
        assert!(!absent.configured && absent.enabled);
        assert_eq!(absent.interval, LINEAR_INTERVAL);
        assert_eq!(LINEAR_INTERVAL, Duration::from_secs(300));
        let set = parse("[pollers.linear]\ninterval_s = 30").unwrap();
        assert!(set.configured && set.enabled);
        assert_eq!(set.interval, Duration::from_secs(30));
        assert!(!parse("[pollers.linear]\nenabled = false").unwrap().enabled);
        for (text, needle) in [
            (
                "[pollers.linear]\ninterval = 30",
                "[pollers.linear] interval: unknown key; did you mean interval_s?",
            ),
            ("[pollers.linear]\ninterval_s = 0", "from 0.1 to 86400"),
            (
                "[pollers.linear]\nenabled = \"yes\"",
                "[pollers.linear] enabled: expected true or false, found the string \"yes\"",
            ),
            (
                "[pollers]\nlinear = 5",
                "[pollers] linear: expected a table, found the whole number 5",
            ),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(needle), "{text} => {error}");
        }
    }
}
