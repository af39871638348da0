//! A task page's refreshes: each `task.refreshed` of the task (when, the commit it started from and the one it
//! pushed, the base it was brought onto, rebase or merge), read from the task's own stream (one indexed read), with
//! its code host's comparison of the two commits (GitHub's, or the GitLab instance's for a GitLab-hosted
//! repository): what the refresh changed on the pull request or merge request.

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

/// Where the task's code host compares two commits, up to `<from>...<to>`: GitHub's for a GitHub repository, the
/// GitLab instance's (`GITLAB_URL`) for a GitLab-hosted one; none for any other remote.
pub fn compare_prefix(
    source: &crate::config::dispatch::RepoSource,
    repo: &str,
    gitlab_url: &str,
) -> Option<String> {
    if source.on_gitlab() {
        Some(format!(
            "{}/{repo}/-/compare/",
            gitlab_url.trim_end_matches('/')
        ))
    } else if source.on_github() {
        Some(format!("https://github.com/{repo}/compare/"))
    } else {
        None
    }
}

/// The section: nothing for a task never refreshed. `compare`: [`compare_prefix`], for the comparison link.
pub fn section(refreshes: &[Refresh], compare: Option<&str>, now: DateTime<Utc>) -> Markup {
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
                                @if let Some(compare) = compare {
                                    a href={ (compare) (refresh.from.as_str()) "..." (refresh.to.as_str()) } {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::dispatch::RepoSource;
    use crate::config::file::CodeHost;

    fn source(url: &str, host: CodeHost) -> RepoSource {
        RepoSource {
            url: url.to_owned(),
            base: "main".to_owned(),
            forge: None,
            host,
            keeps_branches: false,
        }
    }

    #[test]
    fn each_host_compares_at_its_own_address_and_another_remote_nowhere() {
        let gitlab = "https://gitlab.corp.example/";
        assert_eq!(
            compare_prefix(
                &source(
                    "https://gitlab.corp.example/acme/platform/api.git",
                    CodeHost::Gitlab
                ),
                "acme/platform/api",
                gitlab
            )
            .as_deref(),
            Some("https://gitlab.corp.example/acme/platform/api/-/compare/")
        );
        assert_eq!(
            compare_prefix(
                &source("https://github.com/acme/app.git", CodeHost::Github),
                "acme/app",
                gitlab
            )
            .as_deref(),
            Some("https://github.com/acme/app/compare/")
        );
        assert_eq!(
            compare_prefix(
                &source("file:///srv/git/app.git", CodeHost::Github),
                "acme/app",
                gitlab
            ),
            None
        );
    }
}
