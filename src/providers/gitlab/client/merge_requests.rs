//! The merge request calls: open one for a task's branch (found first when already open, so a repeat after a
//! crash opens none twice) and merge it at the commit pidevops checked (`sha`: GitLab refuses if the head moved),
//! or put it on the project's merge train where it runs them (`trains.rs`).
//! What GitLab answers is read as little as the calls need, and checked against what was asked: a merge request
//! from a fork's branch of the same name is never taken for the task's.

use serde::Deserialize;

use super::GitlabClient;
use crate::effects::{CallError, Produced};
use crate::tasks::{BranchName, RepoName};

/// The longest `web_url` kept from GitLab's answer.
const MAX_URL: usize = 2048;

/// A merge request as GitLab answers one: the fields the calls read.
#[derive(Debug, Deserialize)]
struct MergeRequest {
    iid: u64,
    web_url: String,
    #[serde(default)]
    state: String,
    /// Its head commit.
    #[serde(default)]
    sha: Option<String>,
    #[serde(default)]
    merge_commit_sha: Option<String>,
    #[serde(default)]
    title: String,
    #[serde(default)]
    draft: bool,
    source_project_id: u64,
    target_project_id: u64,
}

impl MergeRequest {
    /// From the project's own branch: a fork's merge request into it is a stranger's.
    fn is_the_project_s_own(&self) -> bool {
        self.source_project_id == self.target_project_id
    }
}

/// A merge request as GitLab answers it now: what a train's silence (`gitlab_poller`) or a merged-results
/// pipeline's word (reactions) is checked against.
#[derive(Clone, Debug, Deserialize)]
pub struct MergeRequestNow {
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
    /// Set while it waits to merge, or to join its train, once its pipeline passes (GitLab's auto-merge).
    #[serde(default)]
    pub merge_when_pipeline_succeeds: bool,
    /// The pipeline GitLab shows for its head: on a project with merged results pipelines, the one run on the
    /// head merged into its target (`ref` `refs/merge-requests/<iid>/merge`, `sha` that merge).
    #[serde(default)]
    pub head_pipeline: Option<HeadPipeline>,
}

impl MergeRequestNow {
    /// From the project's own branch `branch` as `iid`: a fork's merge request, or another, is not it.
    pub fn is_the_project_s_own(&self, iid: u64, branch: &str) -> bool {
        self.iid == iid
            && self.source_branch == branch
            && self.source_project_id == self.target_project_id
            && self.project_id == self.target_project_id
    }
}

/// A merge request's `head_pipeline`, the part read.
#[derive(Clone, Debug, Deserialize)]
pub struct HeadPipeline {
    pub id: u64,
    #[serde(default)]
    pub project_id: Option<u64>,
    #[serde(default)]
    pub sha: Option<String>,
    #[serde(default, rename = "ref")]
    pub reference: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
}

impl GitlabClient {
    /// `project!iid` as GitLab answers it now.
    pub async fn merge_request_now(
        &self,
        project: &RepoName,
        iid: u64,
    ) -> Result<MergeRequestNow, CallError> {
        let url = format!("{}/{iid}", self.merge_requests_url(project));
        self.send("reading the merge request", self.http.get(&url))
            .await
    }

    /// `…/api/v4/projects/<path, its '/' encoded>/merge_requests`.
    fn merge_requests_url(&self, project: &RepoName) -> String {
        format!(
            "{}/api/v4/projects/{}/merge_requests",
            self.url,
            project.as_str().replace('/', "%2F")
        )
    }

    fn produced(
        project: &RepoName,
        mr: &MergeRequest,
        opened: bool,
    ) -> Result<Produced, CallError> {
        if mr.iid == 0 || mr.web_url.len() > MAX_URL {
            return Err(CallError::Permanent {
                message: format!(
                    "GitLab's merge request of {project} does not read (iid {})",
                    mr.iid
                ),
            });
        }
        Ok(Produced::PullRequest {
            repo: project.clone(),
            number: mr.iid,
            url: mr.web_url.clone(),
            opened,
        })
    }

    /// The task's merge request from `source_branch` into `target_branch`: the one already open from the
    /// project's own branch (`GET …/merge_requests?source_branch=…&state=opened`), else a new one (`POST`,
    /// `remove_source_branch` as asked: GitLab deletes the branch when the merge request merges).
    pub async fn open_merge_request(
        &self,
        project: &RepoName,
        source_branch: &BranchName,
        target_branch: &str,
        title: &str,
        description: &str,
        remove_source_branch: bool,
    ) -> Result<Produced, CallError> {
        let url = self.merge_requests_url(project);
        let open: Vec<MergeRequest> = self
            .send(
                "listing the branch's open merge requests",
                self.http.get(&url).query(&[
                    ("source_branch", source_branch.as_str()),
                    ("state", "opened"),
                    ("per_page", "20"),
                ]),
            )
            .await?;
        if let Some(found) = open.iter().find(|mr| mr.is_the_project_s_own()) {
            return Self::produced(project, found, false);
        }
        let made: MergeRequest = self
            .send(
                "opening the merge request",
                self.http.post(&url).json(&serde_json::json!({
                    "source_branch": source_branch.as_str(),
                    "target_branch": target_branch,
                    "title": title,
                    "description": super::without_quick_actions(description),
                    "remove_source_branch": remove_source_branch,
                })),
            )
            .await?;
        Self::produced(project, &made, true)
    }

    /// Merges `project!iid` at `sha`, once: read first, a merge request already merged is a success with
    /// `merged` false; one not open, from a fork, or whose head is not `sha` is refused for good. A draft is marked
    /// ready first (auto-land's rules, its checks and approvals, are what the repository asked for). A project
    /// that runs merge trains gets it put on the train instead (`trains.rs`). The merge asks
    /// `merge_when_pipeline_succeeds` (a pipeline still running on the head merges it when it passes) with `sha`,
    /// and leaves the source branch to the merge request's own setting (ours when opened: `[repos]
    /// delete_branch`). GitLab's refusals (405, 406, 409, 422: not mergeable, conflicts, head moved) are
    /// permanent (the task is flagged), except one for a merge request GitLab then finds `need_rebase` or in
    /// `conflict` with its base at that head: [`Produced::Unmerged`], the merge queue's to bring up to date.
    pub async fn merge_merge_request(
        &self,
        project: &RepoName,
        iid: u64,
        sha: &str,
    ) -> Result<Produced, CallError> {
        let url = format!("{}/{iid}", self.merge_requests_url(project));
        let mr: MergeRequest = self
            .send("reading the merge request", self.http.get(&url))
            .await?;
        if mr.state == "merged" {
            return Ok(Produced::Merge {
                number: iid,
                merged: false,
                sha: mr.merge_commit_sha,
                method: None,
            });
        }
        if mr.state != "opened" {
            return Err(CallError::Permanent {
                message: format!(
                    "merge request !{iid} is {}, not open: nothing to merge",
                    short_text(&mr.state)
                ),
            });
        }
        if !mr.is_the_project_s_own() {
            return Err(CallError::Permanent {
                message: format!("merge request !{iid} is from another project (a fork): pidevops does not merge it"),
            });
        }
        let head = mr.sha.as_deref().unwrap_or_default();
        if !head.eq_ignore_ascii_case(sha) {
            return Err(CallError::Permanent {
                message: format!(
                    "the branch moved: merge request !{iid}'s head is {}, not {} which was checked and approved",
                    short_text(head),
                    short_text(sha)
                ),
            });
        }
        if mr.draft {
            let title = ready_title(&mr.title);
            let _: serde_json::Value = self
                .send(
                    "marking the merge request ready",
                    self.http
                        .put(&url)
                        .json(&serde_json::json!({ "title": title })),
                )
                .await?;
        }
        if self.merge_trains_enabled(project).await? {
            return self.add_to_merge_train(project, iid, sha).await;
        }
        let what = "merging the merge request";
        let answer = self
            .attempt(
                what,
                self.http
                    .put(format!("{url}/merge"))
                    .json(&serde_json::json!({
                        "sha": sha,
                        "merge_when_pipeline_succeeds": true,
                    })),
            )
            .await;
        let response = match answer {
            Ok(response) => response,
            Err(refused) if matches!(refused.status, Some(405 | 406 | 422)) => {
                return self.refused(project, iid, sha, refused.error).await;
            }
            Err(refused) => return Err(refused.error),
        };
        let merged: MergeRequest = super::read_json(what, response).await?;
        Ok(Produced::Merge {
            number: iid,
            merged: merged.state == "merged",
            sha: merged.merge_commit_sha,
            method: Some(
                if merged.state == "merged" {
                    "merge"
                } else {
                    "merge_when_pipeline_succeeds"
                }
                .to_owned(),
            ),
        })
    }

    /// GitLab refused to merge `project!iid` at `sha`: why, as GitLab itself says it after the refusal
    /// (`detailed_merge_status`, read, not guessed from the message). Still open at `sha` and `need_rebase` or in
    /// `conflict` with its base: [`Produced::Unmerged`], the merge queue's to bring up to date (not a person's
    /// yet). Anything else is the refusal, a permanent failure, as before.
    async fn refused(
        &self,
        project: &RepoName,
        iid: u64,
        sha: &str,
        refusal: CallError,
    ) -> Result<Produced, CallError> {
        let now = self.merge_status(project, iid).await?;
        let state = match now.detailed_merge_status.as_deref() {
            Some(state @ ("need_rebase" | "conflict")) => state.to_owned(),
            _ => return Err(refusal),
        };
        let head = now.sha.as_deref().unwrap_or_default();
        if now.state != "opened" || !head.eq_ignore_ascii_case(sha) {
            return Err(refusal);
        }
        Ok(Produced::Unmerged {
            number: iid,
            state,
            message: refusal.to_string(),
        })
    }
}

/// A draft's title without GitLab's draft prefixes (`Draft:`, `[Draft]`, `(Draft)`, any case): the title that
/// marks it ready.
fn ready_title(title: &str) -> String {
    let mut rest = title.trim_start();
    loop {
        let lower = rest.to_ascii_lowercase();
        let Some(prefix) = ["draft:", "[draft]", "(draft)", "draft -"]
            .into_iter()
            .find(|p| lower.starts_with(p))
        else {
            return rest.to_owned();
        };
        rest = rest[prefix.len()..].trim_start();
    }
}

/// At most 40 characters of what GitLab said, for a message.
fn short_text(text: &str) -> String {
    text.chars().take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draft_s_title_is_its_title_without_the_prefix() {
        assert_eq!(ready_title("Draft: T-1: Paginate"), "T-1: Paginate");
        assert_eq!(ready_title("[Draft] (draft) T-1: x"), "T-1: x");
        assert_eq!(ready_title("T-1: Draft: kept"), "T-1: Draft: kept");
    }
}
