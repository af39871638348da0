//! What `gitlab_poller` asks: a project's merge requests changed since a time, oldest change first, a page at a
//! time with keyset pagination (GitLab's `Link: <…>; rel="next"`). The next page's address is GitLab's to give,
//! so it is a stranger's input: followed only when it is a project's merge request list on this instance (this
//! project's path, or a numeric project id, which GitLab may write instead; anything else would carry
//! `GITLAB_TOKEN` elsewhere). A page under another id lists another project's merge requests: the poller holds
//! each to the first page's project id.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;

use super::{read_json, GitlabClient};
use crate::effects::CallError;
use crate::providers::gitlab::models::User;
use crate::tasks::RepoName;

/// A merge request as the API lists it: the fields the poller decides on (GitLab's JSON is kept beside it).
#[derive(Clone, Debug, Deserialize)]
pub struct MergeRequest {
    pub id: u64,
    pub iid: u64,
    /// The target project's id.
    pub project_id: u64,
    pub source_project_id: u64,
    pub target_project_id: u64,
    pub source_branch: String,
    pub target_branch: String,
    /// `opened`, `closed`, `locked`, `merged`.
    pub state: String,
    pub updated_at: DateTime<Utc>,
    /// The head commit.
    #[serde(default)]
    pub sha: Option<String>,
    #[serde(default)]
    pub merge_commit_sha: Option<String>,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub web_url: Option<String>,
    pub author: User,
    #[serde(default)]
    pub merged_by: Option<User>,
    #[serde(default)]
    pub closed_by: Option<User>,
}

/// An issue as the API answers one: the fields the poller decides on and builds the hook's shape from.
#[derive(Clone, Debug, Deserialize)]
pub struct Issue {
    pub id: u64,
    pub iid: u64,
    pub project_id: u64,
    pub title: String,
    #[serde(default)]
    pub description: Option<String>,
    /// `opened`, `closed`.
    pub state: String,
    /// Label names (the API lists names; hooks list `{title}` objects).
    #[serde(default)]
    pub labels: Vec<String>,
    pub updated_at: DateTime<Utc>,
    pub author: User,
    #[serde(default)]
    pub closed_by: Option<User>,
    #[serde(default)]
    pub confidential: bool,
}

/// One page of merge requests, and the address of the next one if GitLab named one.
#[derive(Debug)]
pub struct MergeRequestPage {
    pub merge_requests: Vec<MergeRequest>,
    pub next: Option<String>,
}

/// At most this many merge requests a page (GitLab's own maximum).
pub const PER_PAGE: u32 = 100;

impl GitlabClient {
    /// The first page of `project`'s merge requests updated after `since`, oldest change first; or, with `next`
    /// (a page's [`MergeRequestPage::next`]), the page it names.
    pub async fn merge_requests(
        &self,
        project: &RepoName,
        since: DateTime<Utc>,
        next: Option<&str>,
    ) -> Result<MergeRequestPage, CallError> {
        let what = "listing the merge requests";
        let list = format!("{}/merge_requests", self.project_url(project));
        let request = match next {
            Some(next) => {
                if !next_is_ours(next, &list, &format!("{}/api/v4/projects/", self.url)) {
                    return Err(CallError::Permanent {
                        message: format!(
                            "{what}: GitLab's next page is not {project}'s merge requests on {}",
                            self.url
                        ),
                    });
                }
                self.http.get(next)
            }
            None => self.http.get(&list).query(&[
                (
                    "updated_after",
                    since.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                ),
                ("order_by", "updated_at".to_owned()),
                ("sort", "asc".to_owned()),
                ("per_page", PER_PAGE.to_string()),
                ("pagination", "keyset".to_owned()),
            ]),
        };
        let response = self.answer(what, request).await?;
        let next = response
            .headers()
            .get_all(reqwest::header::LINK)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(next_link);
        let rows: Vec<Value> = read_json(what, response).await?;
        let merge_requests = rows
            .iter()
            .map(MergeRequest::deserialize)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| CallError::Transient {
                message: format!("{what}: a merge request does not read: {e}"),
                retry_after: None,
            })?;
        Ok(MergeRequestPage {
            merge_requests,
            next,
        })
    }
}

impl GitlabClient {
    /// `project#iid` as GitLab has it now.
    pub async fn issue(&self, project: &RepoName, iid: u64) -> Result<Issue, CallError> {
        self.send(
            "reading the issue",
            self.http
                .get(format!("{}/issues/{iid}", self.project_url(project))),
        )
        .await
    }
}

/// The `rel="next"` address of a `Link` header (`<https://…>; rel="next", <…>; rel="prev"`).
fn next_link(header: &str) -> Option<String> {
    header.split(',').find_map(|part| {
        let (url, params) = part.trim().split_once(';')?;
        let url = url.trim().strip_prefix('<')?.strip_suffix('>')?;
        params
            .split(';')
            .any(|p| {
                matches!(
                    p.trim().replace(' ', "").as_str(),
                    "rel=\"next\"" | "rel=next"
                )
            })
            .then(|| url.to_owned())
    })
}

/// Whether `next` is `list` (this project's merge requests on this instance), or the same list under a numeric
/// project id (`projects`: the instance's `…/api/v4/projects/`), with a query: the only pages a poll follows.
fn next_is_ours(next: &str, list: &str, projects: &str) -> bool {
    let query = |rest: &str| rest.starts_with('?') && !rest.contains('#');
    next.strip_prefix(list).is_some_and(query)
        || next.strip_prefix(projects).is_some_and(|rest| {
            rest.split_once("/merge_requests")
                .is_some_and(|(id, rest)| {
                    !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) && query(rest)
                })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_page_is_read_from_link_and_followed_only_on_this_project_s_list() {
        let header = "<https://gitlab.example.com/api/v4/projects/acme%2Fapi/merge_requests?cursor=eyJ9&per_page=2>; \
                      rel=\"next\", <https://gitlab.example.com/api/v4/projects/acme%2Fapi/merge_requests?per_page=2>; rel=\"first\"";
        let next = next_link(header).unwrap();
        assert!(next.ends_with("cursor=eyJ9&per_page=2"), "{next}");
        assert_eq!(next_link("<https://x/a>; rel=\"prev\""), None);
        let list = "https://gitlab.example.com/api/v4/projects/acme%2Fapi/merge_requests";
        let projects = "https://gitlab.example.com/api/v4/projects/";
        assert!(next_is_ours(&next, list, projects));
        assert!(next_is_ours(
            "https://gitlab.example.com/api/v4/projects/42/merge_requests?cursor=x",
            list,
            projects
        ));
        for elsewhere in [
            "https://evil.example/api/v4/projects/acme%2Fapi/merge_requests?cursor=x",
            "https://gitlab.example.com.evil.example/api/v4/projects/acme%2Fapi/merge_requests?c=x",
            "https://gitlab.example.com/api/v4/projects/acme%2Fother/merge_requests?cursor=x",
            "https://gitlab.example.com/api/v4/projects/acme%2Fapi/merge_requests/../../user?x",
            "https://gitlab.example.com/api/v4/projects/acme%2Fapi/merge_requests",
            "https://gitlab.example.com/api/v4/projects/42/issues?x",
            "https://gitlab.example.com/api/v4/projects/42x/merge_requests?x",
            "https://gitlab.example.com/api/v4/projects//merge_requests?x",
            "https://gitlab.example.com/api/v4/projects/42/merge_requests/../../../user?x",
        ] {
            assert!(!next_is_ours(elsewhere, list, projects), "{elsewhere}");
        }
    }
}
