//! GitHub's own merge queue: a base branch whose rules require one (a ruleset's `merge_queue` rule) merges only
//! through it, so auto-land enqueues the pull request instead of merging it (`PUT …/merge` would be refused).
//! GitHub then tests it on top of what is ahead of it in the queue and merges it; its `closed` webhook (merged)
//! completes the task as on any merge, and a `dequeued` one flags it for a person with GitHub's reason.
//!
//! Detected, not configured: `GET /repos/{o}/{r}/rules/branches/{branch}` lists the rules that apply to the
//! branch; one of type `merge_queue` means the queue. Enqueued through GraphQL (`enqueuePullRequest`, the only
//! API GitHub offers for it), with `expectedHeadOid` the commit that was checked: a branch that moved since is
//! refused by GitHub itself. A pull request already in the queue (a repeat after a crash) is not enqueued again.

use serde_json::{json, Value};

use super::{classify, parts, short, status_of, GithubClient};
use crate::effects::{CallError, Produced};
use crate::tasks::RepoName;

/// The rule type GitHub names a merge queue by.
const MERGE_QUEUE_RULE: &str = "merge_queue";

/// The pull request as the queue needs it: its node id, whether it is queued already, its head.
const READ_PULL: &str =
    "query($owner: String!, $name: String!, $number: Int!) { repository(owner: $owner, \
    name: $name) { pullRequest(number: $number) { id isInMergeQueue headRefOid } } }";

const ENQUEUE: &str =
    "mutation($id: ID!, $sha: GitObjectID!) { enqueuePullRequest(input: {pullRequestId: $id, \
    expectedHeadOid: $sha}) { mergeQueueEntry { position state } } }";

impl GithubClient {
    /// Whether `branch` of `repo` merges only through GitHub's merge queue. A branch without rules (404: no
    /// branch by that name, or rules the token may not read) has none.
    pub async fn merge_queue_required(
        &self,
        repo: &RepoName,
        branch: &str,
    ) -> Result<bool, CallError> {
        const WHAT: &str = "reading the base branch's rules";
        let (owner, name) = parts(repo)?;
        let route = format!("/repos/{owner}/{name}/rules/branches/{branch}");
        match self.api.get::<Value, _, ()>(route, None).await {
            Ok(Value::Array(rules)) => Ok(rules
                .iter()
                .any(|rule| rule["type"].as_str() == Some(MERGE_QUEUE_RULE))),
            Ok(other) => Err(CallError::Transient {
                message: format!("{WHAT}: GitHub's answer is not a list of rules: {other:.200}"),
                retry_after: None,
            }),
            Err(e) if status_of(&e) == Some(404) => Ok(false),
            Err(e) => Err(classify(WHAT, e)),
        }
    }

    /// Puts pull request `number` of `repo` into its base's merge queue at commit `sha`, once: one already in the
    /// queue is left there ([`Produced::Enqueued`] with `enqueued` false); one whose head is no longer `sha` is
    /// a permanent failure (the branch moved), as is GitHub's refusal.
    pub async fn enqueue_pull_request(
        &self,
        repo: &RepoName,
        number: u64,
        sha: &str,
    ) -> Result<Produced, CallError> {
        let (owner, name) = parts(repo)?;
        let read = json!({
            "query": READ_PULL,
            "variables": { "owner": owner, "name": name, "number": number },
        });
        let data: Value = self
            .api
            .graphql(&read)
            .await
            .map_err(|e| graphql_error("reading the pull request for the merge queue", e))?;
        let pull = &data["repository"]["pullRequest"];
        let (Some(id), Some(head)) = (pull["id"].as_str(), pull["headRefOid"].as_str()) else {
            return Err(CallError::Permanent {
                message: format!("pull request #{number} of {repo} is not there to enqueue"),
            });
        };
        if !head.eq_ignore_ascii_case(sha) {
            return Err(CallError::Permanent {
                message: format!(
                    "the branch moved: pull request #{number}'s head is {}, not {} which was checked and approved",
                    short(head),
                    short(sha)
                ),
            });
        }
        if pull["isInMergeQueue"].as_bool() == Some(true) {
            return Ok(Produced::Enqueued {
                number,
                enqueued: false,
                position: None,
            });
        }
        let enqueue = json!({ "query": ENQUEUE, "variables": { "id": id, "sha": sha } });
        let data: Value = self
            .api
            .graphql(&enqueue)
            .await
            .map_err(|e| graphql_error("adding the pull request to the merge queue", e))?;
        let position = data["enqueuePullRequest"]["mergeQueueEntry"]["position"].as_u64();
        Ok(Produced::Enqueued {
            number,
            enqueued: true,
            position,
        })
    }
}

/// GraphQL's own errors (an answer with `errors`: not mergeable, the head moved, no queue) are GitHub's refusal,
/// permanent; the rest is classified as REST's are.
fn graphql_error(what: &str, error: octocrab::Error) -> CallError {
    match error {
        octocrab::Error::Graphql { source, .. } => CallError::Permanent {
            message: format!("{what}: GitHub refused: {source}"),
        },
        other => classify(what, other),
    }
}
