//! What-if on the past: the recorded log replayed under a candidate configuration (`pidevops whatif --config`,
//! the dashboard's `/whatif`), with no outbound call and no agent run; each run's recorded outcome and usage stand
//! in for it. Nothing is written: the replay builds its own state in memory from the log.
//!
//! - `recorded.rs` reads the log once, in position order, into the replay's own copy of what the read models hold;
//! - `replay.rs` asks each decision again of the function the service decides with, and compares (pure);
//! - `report.rs` says what differs, task by task, with the cost spent or saved and what cannot be known.

mod recorded;
mod replay;
mod report;
#[cfg(test)]
mod tests;

use chrono::{DateTime, Utc};

use crate::config::FileConfig;
use crate::eventlog::{EventStore, StoredEvent};
use crate::intake::rules::{self, SourceRules};
pub use recorded::Recorded;
pub use replay::{replay, Candidate};
pub use report::{change_words, readable, Change, ConfigReport, Spend, TaskLine};

/// The longest candidate configuration the dashboard takes (a whole pidevops.toml is a few KB).
pub const MAX_CANDIDATE_BYTES: usize = 64 * 1024;

/// The most days back a replay reaches.
pub const MAX_DAYS: i64 = 3660;

/// The log since `since` replayed under `candidate`, whose intake rules are `rules` (each provider's, built from
/// the candidate's settings by `providers::intake_rules`); `service_rules` are the service's own, so a webhook
/// event either would decide is kept.
pub async fn replay_log(
    store: &EventStore,
    candidate: &FileConfig,
    rules: &[Box<dyn SourceRules>],
    service_rules: &[Box<dyn SourceRules>],
    since: DateTime<Utc>,
) -> anyhow::Result<ConfigReport> {
    let reads = |event: &StoredEvent| {
        [rules, service_rules]
            .iter()
            .any(|r| rules::of_source(r, &event.source).is_some_and(|s| s.reads(&event.event_type)))
    };
    let recorded = recorded::read(store, since, &reads).await?;
    Ok(replay(
        &recorded,
        &Candidate {
            intake: &candidate.intake,
            rules,
            board: &candidate.board,
            budgets: &candidate.dispatch.budgets,
            cap: candidate.effect_cap,
        },
    ))
}
