//! What GitLab's merge trains and merged results pipelines mean for a task.
//!
//! - `gitlab.merge_train.left`: `gitlab_poller`'s word that the task's merge request left its train unmerged
//!   (GitLab sends no webhook for it; no delivery can carry this type: `merge_train` is no kind with an action in
//!   `webhook.rs`). [`Reaction::Dequeued`], worded from what the poller read: its head moved (a new push), or
//!   not (its train pipeline failed, or a person took it off).
//! - A pipeline of a merge request's ref (`refs/merge-requests/<iid>/…`, GitLab's merge request pipelines) is
//!   the task whose branch its `merge_request` names; `…/head` runs on the head itself, `…/merge` on the head
//!   merged into its target (a merged result: its `sha` is that merge, no commit pidevops pushed), `…/train` on
//!   the train (the train merges or drops it: not a task's fact). A merged result counts for the head it was made
//!   from only as GitLab's API says it ([`result_head`]): the merge request read now is the project's own, open,
//!   and its `head_pipeline` is this very pipeline (id, ref, commit, status); its `sha` is the head, which the
//!   loop then holds to the commit pidevops last pushed.

use serde_json::Value;

use crate::providers::gitlab::client::{GitlabClient, MergeRequestNow};
use crate::reactions::rules::{clip, task_of, Reaction, ResultHead};
use crate::tasks::{RepoName, TaskId};

/// How long reading the merge request may take before the result waits for the next tick.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Which of a merge request's refs a pipeline ran on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeRequestRef {
    /// `refs/merge-requests/<iid>/head`: its head.
    Head(u64),
    /// `refs/merge-requests/<iid>/merge`: its head merged into its target.
    Merged(u64),
    /// `refs/merge-requests/<iid>/train`: its place on the merge train.
    Train(u64),
}

impl MergeRequestRef {
    /// The merge request ref `reference` is, if it is one.
    pub fn read(reference: &str) -> Option<Self> {
        let rest = reference.strip_prefix("refs/merge-requests/")?;
        let (iid, kind) = rest.split_once('/')?;
        let iid = iid.parse().ok().filter(|iid| *iid > 0)?;
        match kind {
            "head" => Some(Self::Head(iid)),
            "merge" => Some(Self::Merged(iid)),
            "train" => Some(Self::Train(iid)),
            _ => None,
        }
    }

    pub fn iid(self) -> u64 {
        match self {
            Self::Head(iid) | Self::Merged(iid) | Self::Train(iid) => iid,
        }
    }
}

/// The task of a pipeline of a merge request's ref: the one whose branch its `merge_request` names.
pub fn task_of_merge_request(payload: &Value) -> Option<TaskId> {
    payload["merge_request"]["source_branch"]
        .as_str()
        .and_then(task_of)
}

/// `gitlab_poller`'s word that the task's merge request left its train without merging.
pub fn left(payload: &Value) -> Reaction {
    let attributes = &payload["object_attributes"];
    let Some(task) = attributes["source_branch"].as_str().and_then(task_of) else {
        return Reaction::None;
    };
    let iid = attributes["iid"].as_u64().unwrap_or(0);
    let short = |field: &str| -> String {
        attributes[field]
            .as_str()
            .unwrap_or("")
            .chars()
            .take(7)
            .collect()
    };
    let (queued, head) = (short("queued_sha"), short("sha"));
    let why = if head.is_empty() || head.eq_ignore_ascii_case(&queued) {
        "its train pipeline failed, or a person took it off: GitLab's system note on it says which"
            .to_owned()
    } else {
        format!("a new push: its head is {head} now")
    };
    Reaction::Dequeued {
        task,
        reason: clip(&format!(
            "merge request !{iid} left GitLab's merge train at {queued} without merging ({why})"
        )),
    }
}

/// The head a pipeline's result counts for (see the module doc), `client` GitLab's (or why there is none).
pub async fn result_head(
    client: Result<&GitlabClient, &String>,
    repo: &RepoName,
    payload: &Value,
) -> ResultHead {
    let attributes = &payload["object_attributes"];
    let reference = attributes["ref"].as_str().unwrap_or("");
    let Some(MergeRequestRef::Merged(iid)) = MergeRequestRef::read(reference) else {
        return ResultHead::Own;
    };
    let client = match client {
        Ok(client) => client,
        Err(why) => {
            return ResultHead::Unchecked(format!(
                "a merged results pipeline of !{iid} is checked with GitLab's API, and {why}"
            ))
        }
    };
    let mr = match tokio::time::timeout(READ_TIMEOUT, client.merge_request_now(repo, iid)).await {
        Ok(Ok(mr)) => mr,
        Ok(Err(crate::effects::CallError::Permanent { message })) => {
            return ResultHead::Unchecked(message)
        }
        Ok(Err(error)) => return ResultHead::Unanswered(error.to_string()),
        Err(_) => {
            return ResultHead::Unanswered(format!(
                "reading !{iid}: no answer within {} s",
                READ_TIMEOUT.as_secs()
            ))
        }
    };
    match merged_result_of(&mr, iid, payload) {
        Ok(head) => ResultHead::Head(head),
        Err(why) => ResultHead::Unchecked(why),
    }
}

/// The head `payload`'s merged results pipeline was made from, as GitLab's answer `mr` (merge request `iid`, read
/// now) says it; else why not.
pub fn merged_result_of(mr: &MergeRequestNow, iid: u64, payload: &Value) -> Result<String, String> {
    let attributes = &payload["object_attributes"];
    let branch = payload["merge_request"]["source_branch"]
        .as_str()
        .unwrap_or("");
    if !mr.is_the_project_s_own(iid, branch) || mr.state != "opened" {
        return Err(format!(
            "GitLab's !{} is not the open merge request of the project's own {branch}: a merged result of no \
             head pidevops can check",
            mr.iid
        ));
    }
    let id = attributes["id"].as_u64().unwrap_or(0);
    let same = |ours: Option<&str>, theirs: &Value| {
        ours.zip(theirs.as_str())
            .is_some_and(|(a, b)| a.eq_ignore_ascii_case(b))
    };
    let Some(pipeline) = mr.head_pipeline.as_ref().filter(|p| {
        p.id == id
            && same(p.reference.as_deref(), &attributes["ref"])
            && same(p.sha.as_deref(), &attributes["sha"])
            && same(p.status.as_deref(), &attributes["status"])
            && p.project_id.is_none_or(|project| project == mr.project_id)
    }) else {
        let shown = mr
            .head_pipeline
            .as_ref()
            .map_or("none".to_owned(), |p| format!("#{}", p.id));
        return Err(format!(
            "pipeline #{id} is not what GitLab shows as !{iid}'s head pipeline now ({shown}): a merged result of \
             another head, or news GitLab does not confirm"
        ));
    };
    match mr.sha.as_deref().filter(|sha| !sha.is_empty()) {
        Some(head) => Ok(head.to_owned()),
        None => Err(format!(
            "GitLab names no head for !{iid}, whose head pipeline is #{}",
            pipeline.id
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_merge_request_s_refs_read_as_their_kind() {
        assert_eq!(
            MergeRequestRef::read("refs/merge-requests/7/merge"),
            Some(MergeRequestRef::Merged(7))
        );
        assert_eq!(
            MergeRequestRef::read("refs/merge-requests/7/head"),
            Some(MergeRequestRef::Head(7))
        );
        assert_eq!(
            MergeRequestRef::read("refs/merge-requests/12/train"),
            Some(MergeRequestRef::Train(12))
        );
        for other in [
            "pidevops/T-1",
            "refs/merge-requests/0/merge",
            "refs/merge-requests/x/merge",
            "refs/merge-requests/7/other",
            "refs/heads/main",
        ] {
            assert_eq!(MergeRequestRef::read(other), None, "{other}");
        }
    }

    const HEAD: &str = "1111111111111111111111111111111111111111";
    const MERGED: &str = "2222222222222222222222222222222222222222";

    fn hook() -> Value {
        json!({
            "object_attributes": {
                "id": 2366, "ref": "refs/merge-requests/7/merge", "sha": MERGED, "status": "success",
            },
            "merge_request": { "iid": 7, "source_branch": "pidevops/T-3" },
        })
    }

    fn now(pipeline: Value) -> MergeRequestNow {
        serde_json::from_value(json!({
            "iid": 7, "project_id": 42, "source_project_id": 42, "target_project_id": 42,
            "source_branch": "pidevops/T-3", "state": "opened", "sha": HEAD,
            "head_pipeline": pipeline,
        }))
        .unwrap()
    }

    fn shown(id: u64, sha: &str, status: &str) -> Value {
        json!({ "id": id, "project_id": 42, "sha": sha, "ref": "refs/merge-requests/7/merge", "status": status })
    }

    #[test]
    fn a_merged_result_counts_for_the_head_only_as_gitlab_s_head_pipeline_says() {
        let ok = now(shown(2366, MERGED, "success"));
        assert_eq!(merged_result_of(&ok, 7, &hook()), Ok(HEAD.to_owned()));
        for (why, mr) in [
            ("another pipeline", now(shown(2367, MERGED, "success"))),
            ("another merge", now(shown(2366, HEAD, "success"))),
            ("another status", now(shown(2366, MERGED, "failed"))),
            ("no head pipeline", now(Value::Null)),
        ] {
            assert!(merged_result_of(&mr, 7, &hook()).is_err(), "{why}");
        }
        let mut fork = now(shown(2366, MERGED, "success"));
        fork.source_project_id = 77;
        assert!(merged_result_of(&fork, 7, &hook()).is_err(), "a fork's");
        let mut merged = now(shown(2366, MERGED, "success"));
        merged.state = "merged".to_owned();
        assert!(merged_result_of(&merged, 7, &hook()).is_err(), "not open");
        assert!(merged_result_of(&ok, 8, &hook()).is_err(), "another iid");
        let mut other_branch = hook();
        other_branch["merge_request"]["source_branch"] = json!("pidevops/T-4");
        assert!(merged_result_of(&ok, 7, &other_branch).is_err());
        let mut headless = now(shown(2366, MERGED, "success"));
        headless.sha = None;
        assert!(merged_result_of(&headless, 7, &hook()).is_err());
    }

    #[test]
    fn leaving_the_train_says_which_merge_request_and_whether_its_head_moved() {
        let body = |sha: &str| {
            json!({
                "object_kind": "merge_train",
                "object_attributes": {
                    "iid": 7, "source_branch": "pidevops/T-3", "queued_sha": HEAD, "sha": sha,
                },
            })
        };
        let Reaction::Dequeued { task, reason } = left(&body(HEAD)) else {
            panic!("not dequeued");
        };
        assert_eq!(task.to_string(), "T-3");
        assert!(
            reason.contains("!7 left GitLab's merge train at 1111111"),
            "{reason}"
        );
        assert!(reason.contains("train pipeline failed"), "{reason}");
        let Reaction::Dequeued { reason, .. } = left(&body(MERGED)) else {
            panic!("not dequeued");
        };
        assert!(
            reason.contains("a new push: its head is 2222222 now"),
            "{reason}"
        );
        let mut stranger = body(HEAD);
        stranger["object_attributes"]["source_branch"] = json!("feature/x");
        assert_eq!(left(&stranger), Reaction::None);
    }
}
