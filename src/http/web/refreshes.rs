//! A task page's refreshes: each `task.refreshed` of the task (when, the commit it started from and the one it
//! pushed, the base it was brought onto, rebase or merge), read from the task's own stream (one indexed read), with
//! GitHub's comparison of the two commits: what the refresh changed on the pull request.

use chrono::{DateTime, Utc};
use maud::{html, Markup};

use crate::eventlog::{EventStore, StoreError};
use crate::tasks::{CommitSha, RefreshMode, TaskEvent, TaskId};

/// One refresh of the task, as the page shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refresh {
    pub at: DateTime<Utc>,
    pub from: CommitSha,
    pub to: CommitSha,
    pub base: CommitSha,
    pub strategy: RefreshMode,
}

/// The refreshes of task `id`, oldest first.
pub async fn of(store: &EventStore, id: TaskId) -> Result<Vec<Refresh>, StoreError> {
    let events = store
        .read_stream_of_type(&format!("task:{id}"), "task.refreshed")
        .await?;
    Ok(events
        .iter()
        .filter_map(|event| {
            let TaskEvent::Refreshed {
                at,
                from,
                to,
                base,
                strategy,
            } = serde_json::from_slice(&event.body).ok()?
            else {
                return None;
            };
            Some(Refresh {
                at,
                from,
                to,
                base,
                strategy,
            })
        })
        .collect())
}

/// The section: nothing for a task never refreshed. `repo`: its GitHub repository, for the comparison link.
pub fn section(refreshes: &[Refresh], repo: &str, now: DateTime<Utc>) -> Markup {
    html! {
        @if !refreshes.is_empty() {
            h2 { "Refreshes" }
            table.refreshes {
                thead { tr { th { "at" } th { "from → to" } th { "onto base" } th { "how" } th { "changed" } } }
                tbody {
                    @for refresh in refreshes {
                        tr {
                            td {
                                time datetime=(refresh.at.to_rfc3339()) { (refresh.at.format("%Y-%m-%d %H:%M:%S UTC")) }
                                " " span.muted.age { "(" (super::words::age(now - refresh.at)) " ago)" }
                            }
                            td { code { (refresh.from.short()) } " → " code { (refresh.to.short()) } }
                            td { code { (refresh.base.short()) } }
                            td { (refresh.strategy.as_str()) }
                            td {
                                a href={ "https://github.com/" (repo) "/compare/" (refresh.from.as_str()) "..." (refresh.to.as_str()) } {
                                    "compare"
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
