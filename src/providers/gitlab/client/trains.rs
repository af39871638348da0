//! GitLab's merge trains: a project that runs them merges through the train (each merge request tested on top of
//! what is ahead of it), so auto-land puts the merge request on the train instead of merging it. GitLab merges it
//! when its train pipeline passes; its Merge Request Hook (merged), or `gitlab_poller`, completes the task.
//!
//! Detected, not configured: `GET /projects/:id` says `merge_trains_enabled` (with `merge_pipelines_enabled`,
//! which trains need; both absent below Premium, which reads as no train). Added with
//! `POST /projects/:id/merge_trains/merge_requests/:iid` and `sha` the commit that was checked (GitLab refuses a
//! branch that moved since); one already on the train (`GET` of the same path answers its car, 404 when it has
//! none: a repeat after a crash) is not added again.
//!
//! Read back by `gitlab_poller` ([`GitlabClient::train_car`]): GitLab takes a merge request off its train (its
//! train pipeline failed, a person removed it, a new push) with no webhook, only a system note; its car is then
//! gone (404). A car's `status` ([`CarStatus`]): `idle` (no train pipeline yet), `stale` (to be run again: one
//! ahead changed), `fresh` (its pipeline runs on what is ahead), `merging` are on the train; `merged` and
//! `skip_merged` (merged around the train) are done. A word not known reads as on the train: only GitLab's
//! silence (no car) says it left.

use serde::Deserialize;

use super::{read_json, GitlabClient};
use crate::effects::{CallError, Produced};
use crate::tasks::RepoName;

/// A project as GitLab answers one: only its merge train settings.
#[derive(Debug, Deserialize)]
struct Project {
    #[serde(default)]
    merge_pipelines_enabled: bool,
    #[serde(default)]
    merge_trains_enabled: bool,
}

/// A merge request's place on a train (GitLab's "car"): its merge request.
#[derive(Debug, Deserialize)]
struct Car {
    merge_request: CarRequest,
}

#[derive(Debug, Deserialize)]
struct CarRequest {
    iid: u64,
}

/// A car as `GET …/merge_trains/merge_requests/:iid` answers it: its status and whose it is.
#[derive(Debug, Deserialize)]
struct CarRead {
    #[serde(default)]
    status: String,
    merge_request: CarRequest,
}

/// Where a merge request's car stands, from its `status` (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CarStatus {
    /// On the train (`idle`, `stale`, `fresh`, `merging`, or a word not known, kept at most 40 characters).
    Riding(String),
    /// Merged by the train, or around it (`merged`, `skip_merged`).
    Merged,
}

impl CarStatus {
    pub fn read(status: &str) -> Self {
        match status {
            "merged" | "skip_merged" => Self::Merged,
            other => Self::Riding(other.chars().take(40).collect()),
        }
    }
}

impl GitlabClient {
    /// `project!iid`'s car on its target branch's merge train, as its status says; `None` when it has none (404:
    /// not on a train). A car answered for another merge request is none of its.
    pub async fn train_car(
        &self,
        project: &RepoName,
        iid: u64,
    ) -> Result<Option<CarStatus>, CallError> {
        let what = "reading the merge request's place on the merge train";
        let url = format!(
            "{}/merge_trains/merge_requests/{iid}",
            self.project_url(project)
        );
        let response = match self.attempt(what, self.http.get(&url)).await {
            Ok(response) => response,
            Err(refused) if refused.status == Some(404) => return Ok(None),
            Err(refused) => return Err(refused.error),
        };
        let car: CarRead = read_json(what, response).await?;
        if car.merge_request.iid != iid {
            return Err(CallError::Permanent {
                message: format!(
                    "{what}: GitLab answered the car of !{}, not !{iid}",
                    car.merge_request.iid
                ),
            });
        }
        Ok(Some(CarStatus::read(&car.status)))
    }

    /// Whether `project` merges its merge requests through merge trains.
    pub async fn merge_trains_enabled(&self, project: &RepoName) -> Result<bool, CallError> {
        let read: Project = self
            .send(
                "reading the project's settings",
                self.http.get(self.project_url(project)),
            )
            .await?;
        Ok(read.merge_trains_enabled && read.merge_pipelines_enabled)
    }

    /// Puts `project!iid` on the merge train of its target branch at commit `sha`, once: one on the train already
    /// is left there ([`Produced::Enqueued`] with `enqueued` false). `position`: its place, counted from 1, in
    /// the train GitLab answers.
    pub async fn add_to_merge_train(
        &self,
        project: &RepoName,
        iid: u64,
        sha: &str,
    ) -> Result<Produced, CallError> {
        let url = format!(
            "{}/merge_trains/merge_requests/{iid}",
            self.project_url(project)
        );
        match self
            .attempt(
                "reading the merge request's place on the merge train",
                self.http.get(&url),
            )
            .await
        {
            Ok(_) => {
                return Ok(Produced::Enqueued {
                    number: iid,
                    enqueued: false,
                    position: None,
                })
            }
            Err(refused) if refused.status == Some(404) => {}
            Err(refused) => return Err(refused.error),
        }
        let what = "adding the merge request to the merge train";
        let response = self
            .answer(
                what,
                self.http.post(&url).json(&serde_json::json!({
                    "sha": sha,
                    "when_pipeline_succeeds": true,
                })),
            )
            .await?;
        let train: Vec<Car> = read_json(what, response).await?;
        let position = train
            .iter()
            .position(|car| car.merge_request.iid == iid)
            .and_then(|at| u64::try_from(at + 1).ok());
        Ok(Produced::Enqueued {
            number: iid,
            enqueued: true,
            position,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_project_runs_trains_only_with_both_settings_and_not_below_premium() {
        let read = |v| serde_json::from_value::<Project>(v).unwrap();
        let both = read(serde_json::json!({
            "id": 42, "merge_pipelines_enabled": true, "merge_trains_enabled": true
        }));
        assert!(both.merge_trains_enabled && both.merge_pipelines_enabled);
        let free = read(serde_json::json!({ "id": 42, "path_with_namespace": "acme/api" }));
        assert!(!free.merge_trains_enabled && !free.merge_pipelines_enabled);
    }

    #[test]
    fn a_car_is_on_the_train_unless_its_status_says_merged() {
        for riding in ["idle", "stale", "fresh", "merging", "a_word_not_known"] {
            assert_eq!(
                CarStatus::read(riding),
                CarStatus::Riding(riding.to_owned()),
                "{riding}"
            );
        }
        for done in ["merged", "skip_merged"] {
            assert_eq!(CarStatus::read(done), CarStatus::Merged, "{done}");
        }
        let long = CarStatus::read(&"x".repeat(500));
        assert_eq!(long, CarStatus::Riding("x".repeat(40)));
        let car: CarRead = serde_json::from_value(serde_json::json!({
            "id": 267, "status": "fresh", "target_branch": "main", "pipeline": null,
            "merge_request": { "id": 9007, "iid": 7, "project_id": 42, "state": "opened" },
        }))
        .unwrap();
        assert_eq!((car.merge_request.iid, car.status.as_str()), (7, "fresh"));
    }
}
