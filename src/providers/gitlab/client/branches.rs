//! What `gitlab_poller`'s refresh backstop asks: a branch's head commit (`GET …/repository/branches/:branch`,
//! the base a Push Hook would have told of) and one merge request as it stands (`GET …/merge_requests/:iid`: its
//! head, where it comes from, and `detailed_merge_status`, GitLab's word on whether it needs a rebase or
//! conflicts). Read as little as the poller decides on; whether an answer is a task's is the poller's to check.

use serde::Deserialize;

use super::GitlabClient;
use crate::effects::CallError;
use crate::tasks::RepoName;

/// A branch as GitLab answers one: only its head commit.
#[derive(Debug, Deserialize)]
struct Branch {
    commit: BranchCommit,
}

#[derive(Debug, Deserialize)]
struct BranchCommit {
    id: String,
}

/// One merge request as GitLab answers for it: what the backstop decides on.
#[derive(Clone, Debug, Deserialize)]
pub struct MergeStatus {
    pub iid: u64,
    /// The target project's id.
    pub project_id: u64,
    pub source_project_id: u64,
    pub target_project_id: u64,
    pub source_branch: String,
    /// `opened`, `closed`, `locked`, `merged`.
    pub state: String,
    /// Its head commit.
    #[serde(default)]
    pub sha: Option<String>,
    /// `mergeable`, `need_rebase`, `conflict`, `checking`, `ci_still_running`, … (GitLab 15.6 and later; absent
    /// before, which reads as nothing to say).
    #[serde(default)]
    pub detailed_merge_status: Option<String>,
    /// The commits its diff is between: `start_sha` is the target branch's head it was made against.
    #[serde(default)]
    pub diff_refs: Option<DiffRefs>,
}

/// A merge request's `diff_refs`, the part read.
#[derive(Clone, Debug, Deserialize)]
pub struct DiffRefs {
    #[serde(default)]
    pub start_sha: Option<String>,
}

impl GitlabClient {
    /// The head commit of `project`'s branch `branch`.
    pub async fn branch_head(&self, project: &RepoName, branch: &str) -> Result<String, CallError> {
        let what = "reading the base branch";
        let url = self
            .branch_url(project, branch)
            .map_err(|why| CallError::Permanent {
                message: format!("{what}: {why}"),
            })?;
        let branch: Branch = self.send(what, self.http.get(url)).await?;
        Ok(branch.commit.id)
    }

    /// `…/projects/<path>/repository/branches/<branch>`, the branch's name one encoded path segment
    /// (`release/1.2` too).
    fn branch_url(&self, project: &RepoName, branch: &str) -> Result<reqwest::Url, String> {
        let mut url = reqwest::Url::parse(&format!(
            "{}/repository/branches",
            self.project_url(project)
        ))
        .map_err(|e| format!("the branch's address does not read: {e}"))?;
        url.path_segments_mut()
            .map_err(|()| "GITLAB_URL cannot hold a path".to_owned())?
            .push(branch);
        Ok(url)
    }

    /// `project`'s merge request `iid` as it stands now.
    pub async fn merge_status(
        &self,
        project: &RepoName,
        iid: u64,
    ) -> Result<MergeStatus, CallError> {
        let url = format!("{}/merge_requests/{iid}", self.project_url(project));
        self.send("reading the merge request", self.http.get(url))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_branch_s_name_is_one_encoded_segment_after_the_encoded_project() {
        let client = GitlabClient::new(
            "https://gitlab.example.com/",
            &secrecy::SecretString::from("t"),
        )
        .unwrap();
        let project: RepoName = "acme/platform/api".parse().unwrap();
        assert_eq!(
            client.branch_url(&project, "release/1.2").unwrap().as_str(),
            "https://gitlab.example.com/api/v4/projects/acme%2Fplatform%2Fapi/repository/branches/release%2F1.2"
        );
    }

    #[test]
    fn a_merge_request_s_status_reads_with_or_without_gitlab_s_detailed_word() {
        let read: MergeStatus = serde_json::from_value(serde_json::json!({
            "id": 9001, "iid": 7, "project_id": 42, "source_project_id": 42, "target_project_id": 42,
            "source_branch": "pidevops/T-3", "target_branch": "main", "state": "opened",
            "sha": "0123456789abcdef0123456789abcdef01234567", "detailed_merge_status": "need_rebase",
            "merge_status": "can_be_merged", "title": "T-3: x",
        }))
        .unwrap();
        assert_eq!(read.detailed_merge_status.as_deref(), Some("need_rebase"));
        let older: MergeStatus = serde_json::from_value(serde_json::json!({
            "iid": 7, "project_id": 42, "source_project_id": 42, "target_project_id": 42,
            "source_branch": "pidevops/T-3", "state": "opened",
        }))
        .unwrap();
        assert_eq!(older.detailed_merge_status, None);
        assert_eq!(older.sha, None);
    }
}
