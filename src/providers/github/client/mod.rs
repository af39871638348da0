//! The GitHub client effects call through (octocrab), at `GITHUB_API_URL` with `GITHUB_TOKEN`. It only makes
//! calls and says how they failed; what to call, when, and what it means is the runner's and the policy's.

use std::time::Duration;

use octocrab::models::checks::{CheckSuite, ListCheckSuites};
use octocrab::models::hooks::Hook;
use octocrab::models::issues::Issue;
use octocrab::models::pulls::{MergeableState, PullRequest};
use octocrab::models::reactions::ReactionContent;
use octocrab::models::IssueState;
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

use crate::effects::{CallError, Produced};
use crate::tasks::{BranchName, CommitSha, MergeMethod, RepoName};

mod queue;

pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest wait a rate limit may impose before we try anyway (and are told again).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// `repo`'s GitHub owner and name, or a permanent refusal: a GitLab group path (`group/sub/name`) is no GitHub
/// route, and its segments must never be spliced into one.
fn parts(repo: &RepoName) -> Result<(&str, &str), CallError> {
    repo.github_parts().ok_or_else(|| CallError::Permanent {
        message: format!("{repo} is not a GitHub repository (owner/name)"),
    })
}

#[derive(Clone)]
pub struct GithubClient {
    api: octocrab::Octocrab,
}

impl std::fmt::Debug for GithubClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GithubClient")
    }
}

impl GithubClient {
    pub fn new(api_url: &str, token: &SecretString) -> Result<Self, String> {
        let api = octocrab::Octocrab::builder()
            .base_uri(api_url)
            .map_err(|e| format!("GITHUB_API_URL {api_url:?} is not a URL: {e}"))?
            .personal_token(token.expose_secret().to_owned())
            .set_connect_timeout(Some(CONNECT_TIMEOUT))
            .set_read_timeout(Some(READ_TIMEOUT))
            .build()
            .map_err(|e| format!("cannot build the GitHub client: {e}"))?;
        Ok(Self { api })
    }

    /// The open pull request from `head`, or a new one. Looking first makes a repeat (a crash after GitHub
    /// opened it, before we recorded so) find the one it opened instead of failing or opening a second.
    pub async fn open_pull_request(
        &self,
        repo: &RepoName,
        head: &BranchName,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<Produced, CallError> {
        let pulls = {
            let (owner, name) = parts(repo)?;
            self.api.pulls(owner, name)
        };
        let open = pulls
            .list()
            .state(octocrab::params::State::Open)
            .head(format!("{}:{}", parts(repo)?.0, head.as_str()))
            .per_page(1u8)
            .send()
            .await
            .map_err(|e| classify("listing open pull requests", e))?;
        if let Some(pr) = open.items.first() {
            return Ok(Produced::PullRequest {
                repo: repo.clone(),
                number: pr.number,
                url: pr
                    .html_url
                    .as_ref()
                    .map(|u| u.to_string())
                    .unwrap_or_default(),
                opened: false,
            });
        }
        let pr = pulls
            .create(title, head.as_str(), base)
            .body(body)
            .send()
            .await
            .map_err(|e| classify("opening the pull request", e))?;
        Ok(Produced::PullRequest {
            repo: repo.clone(),
            number: pr.number,
            url: pr
                .html_url
                .as_ref()
                .map(|u| u.to_string())
                .unwrap_or_default(),
            opened: true,
        })
    }
}

impl GithubClient {
    /// The account the token belongs to (`GET /user`): a read-only proof that the token works, for `doctor`.
    pub async fn whoami(&self) -> Result<String, CallError> {
        let user = self
            .api
            .current()
            .user()
            .await
            .map_err(|e| classify("reading the token's account", e))?;
        Ok(user.login)
    }

    /// Posts `body` (which ends with `marker`) on issue or pull request `number`, unless a comment carrying the
    /// marker is already there (a repeat after a crash mid-call).
    pub async fn comment(
        &self,
        repo: &RepoName,
        number: u64,
        body: &str,
        marker: &str,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Produced, CallError> {
        let issues = {
            let (owner, name) = parts(repo)?;
            self.api.issues(owner, name)
        };
        let recent = issues
            .list_comments(number)
            .since(since)
            .per_page(100u8)
            .send()
            .await
            .map_err(|e| classify("listing the issue's comments", e))?;
        if let Some(found) = recent
            .items
            .iter()
            .find(|c| c.body.as_deref().is_some_and(|b| b.contains(marker)))
        {
            return Ok(Produced::Comment {
                url: found.html_url.to_string(),
                posted: false,
            });
        }
        let posted = issues
            .create_comment(number, body)
            .await
            .map_err(|e| classify("commenting", e))?;
        Ok(Produced::Comment {
            url: posted.html_url.to_string(),
            posted: true,
        })
    }
}

impl GithubClient {
    /// Reacts to issue (or pull request) comment `comment` with `content` (`eyes`, …). A repeat finds the one there
    /// (GitHub answers 200 instead of 201).
    pub async fn react_to_comment(
        &self,
        repo: &RepoName,
        comment: u64,
        content: &str,
    ) -> Result<Produced, CallError> {
        let content: ReactionContent =
            serde_json::from_value(Value::from(content)).map_err(|_| CallError::Permanent {
                message: format!("{content:?} is not one of GitHub's reactions"),
            })?;
        let (owner, name) = parts(repo)?;
        self.api
            .issues(owner, name)
            .create_comment_reaction(comment, content)
            .await
            .map_err(|e| classify("reacting to the comment", e))?;
        Ok(Produced::Done)
    }

    /// A pull request (`state`, `merged`, `head.sha`, …), for the poller and the merge.
    pub async fn pull(
        &self,
        repo: &RepoName,
        number: u64,
    ) -> Result<Answer<PullRequest>, CallError> {
        let (owner, name) = parts(repo)?;
        let route = format!("/repos/{owner}/{name}/pulls/{number}");
        let json = self
            .api
            .get::<Value, _, ()>(route, None)
            .await
            .map_err(|e| classify("reading the pull request", e))?;
        Answer::read("reading the pull request", json)
    }

    /// An issue (`state`, `labels`, `updated_at`, …), for the poller.
    pub async fn issue(&self, repo: &RepoName, number: u64) -> Result<Answer<Issue>, CallError> {
        let (owner, name) = parts(repo)?;
        let route = format!("/repos/{owner}/{name}/issues/{number}");
        let json = self
            .api
            .get::<Value, _, ()>(route, None)
            .await
            .map_err(|e| classify("reading the issue", e))?;
        Answer::read("reading the issue", json)
    }

    /// Where the repository's webhooks deliver (`config.url` of each), for `doctor`.
    pub async fn webhook_urls(&self, repo: &RepoName) -> Result<Vec<String>, CallError> {
        Ok(self
            .webhooks(repo)
            .await?
            .into_iter()
            .map(|hook| hook.config.url)
            .collect())
    }

    /// The repository's webhooks. GitHub allows 20 per event, so one page of 100 is all.
    async fn webhooks(&self, repo: &RepoName) -> Result<Vec<Hook>, CallError> {
        let (owner, name) = parts(repo)?;
        let page = self
            .api
            .repos(owner, name)
            .hooks()
            .list()
            .per_page(100u8)
            .send()
            .await
            .map_err(|e| hook_error(repo, "listing the repository's webhooks", e))?;
        Ok(page.items)
    }

    /// The repository's webhook to `url`, with this secret and these events, JSON, active: the one already
    /// delivering to `url` is updated (so a second run changes it rather than adding one), else one is created.
    /// Hooks to other URLs are left alone. The secret goes in the request body only. The body is ours rather
    /// than octocrab's `Hook`, which would send its own `id` and `type` too; GitHub's answer is read as a `Hook`.
    pub async fn ensure_webhook(
        &self,
        repo: &RepoName,
        url: &str,
        secret: &SecretString,
        events: &[&str],
    ) -> Result<Webhook, CallError> {
        let body = serde_json::json!({
            "name": "web",
            "active": true,
            "events": events,
            "config": {
                "url": url,
                "content_type": "json",
                "insecure_ssl": "0",
                "secret": secret.expose_secret(),
            },
        });
        let existing = self
            .webhooks(repo)
            .await?
            .into_iter()
            .find(|hook| hook.config.url == url);
        let (owner, name) = parts(repo)?;
        match existing {
            Some(Hook { id, .. }) => {
                self.api
                    .patch::<Hook, _, _>(format!("/repos/{owner}/{name}/hooks/{id}"), Some(&body))
                    .await
                    .map_err(|e| hook_error(repo, "updating the webhook", e))?;
                Ok(Webhook { id, created: false })
            }
            None => {
                let created = self
                    .api
                    .post::<_, Hook>(format!("/repos/{owner}/{name}/hooks"), Some(&body))
                    .await
                    .map_err(|e| hook_error(repo, "creating the webhook", e))?;
                Ok(Webhook {
                    id: created.id,
                    created: true,
                })
            }
        }
    }

    /// The check suites of a commit (`status`, `conclusion`, `head_branch`, …), each with its JSON as GitHub
    /// sent it: octocrab keeps a suite's `app` private, and the poller records the suite as it came.
    pub async fn check_suites(
        &self,
        repo: &RepoName,
        sha: &str,
    ) -> Result<Vec<Answer<CheckSuite>>, CallError> {
        const WHAT: &str = "reading the commit's check suites";
        let (owner, name) = parts(repo)?;
        let route = format!("/repos/{owner}/{name}/commits/{sha}/check-suites");
        let json = self
            .api
            .get::<Value, _, ()>(route, None)
            .await
            .map_err(|e| classify(WHAT, e))?;
        let listed = Answer::<ListCheckSuites>::read(WHAT, json)?;
        let raw = match listed.json {
            Value::Object(mut fields) => fields.remove("check_suites"),
            _ => None,
        };
        let Some(Value::Array(raw)) = raw else {
            // Unreachable: the model read an array there.
            return Ok(Vec::new());
        };
        Ok(listed
            .model
            .check_suites
            .into_iter()
            .zip(raw)
            .map(|(model, json)| Answer { model, json })
            .collect())
    }
}

impl GithubClient {
    /// Merges pull request `number` at commit `sha`, once: the pull request is read first, and one already
    /// merged is a success without merging (so a repeat after a crash between GitHub's merge and our record of
    /// it merges nothing). A pull request whose head is no longer `sha` (the branch moved) or that is closed is
    /// a permanent failure, and so are GitHub's refusals (405 not mergeable, 409 the head moved meanwhile), except
    /// a 405 for a pull request GitHub then says is `behind` or `dirty`: that is [`Produced::Unmerged`] (see
    /// [`GithubClient::refused`]). A base that merges only through GitHub's merge queue gets the pull request
    /// enqueued instead (`queue.rs`).
    /// `method`: the configured one, else the first the repository allows of squash, merge and rebase.
    pub async fn merge_pull_request(
        &self,
        repo: &RepoName,
        number: u64,
        sha: &str,
        method: Option<MergeMethod>,
    ) -> Result<Produced, CallError> {
        let pull = self.pull(repo, number).await?.model;
        if pull.merged == Some(true) {
            return Ok(Produced::Merge {
                number,
                merged: false,
                sha: pull.merge_commit_sha,
                method: None,
            });
        }
        if pull.state != Some(IssueState::Open) {
            let state = pull
                .state
                .map_or_else(|| "unknown".to_owned(), |s| format!("{s:?}").to_lowercase());
            return Err(CallError::Permanent {
                message: format!("pull request #{number} is {state}, not open: nothing to merge"),
            });
        }
        let base = pull.base.ref_field.as_str();
        if self.merge_queue_required(repo, base).await? {
            return self.enqueue_pull_request(repo, number, sha).await;
        }
        let head = pull.head.sha.as_str();
        if !head.eq_ignore_ascii_case(sha) {
            return Err(CallError::Permanent {
                message: format!(
                    "the branch moved: pull request #{number}'s head is {}, not {} which was checked and approved",
                    short(head),
                    short(sha)
                ),
            });
        }
        let method = match method {
            Some(method) => method,
            None => self.allowed_method(repo).await?,
        };
        // An answer that does not read as octocrab's `Merge` is transient (`classify`): the repeat reads the
        // pull request first and finds it merged.
        let (owner, name) = parts(repo)?;
        let answer = self
            .api
            .pulls(owner, name)
            .merge(number)
            .sha(sha)
            .method(match method {
                MergeMethod::Merge => octocrab::params::pulls::MergeMethod::Merge,
                MergeMethod::Squash => octocrab::params::pulls::MergeMethod::Squash,
                MergeMethod::Rebase => octocrab::params::pulls::MergeMethod::Rebase,
            })
            .send()
            .await;
        let merged = match answer {
            Ok(merged) => merged,
            Err(error) if status_of(&error) == Some(405) => {
                let refusal = classify("merging the pull request", error);
                return self.refused(repo, number, sha, refusal).await;
            }
            Err(error) => return Err(classify("merging the pull request", error)),
        };
        Ok(Produced::Merge {
            number,
            merged: true,
            sha: merged.sha,
            method: Some(method.as_str().to_owned()),
        })
    }

    /// GitHub refused to merge pull request `number` at `sha` (405): why, as GitHub itself says it after the
    /// refusal (`mergeable_state`, read, not guessed from the message). Still open at `sha` and `behind` its base
    /// or `dirty` (conflicting with it): [`Produced::Unmerged`], the merge queue's to bring up to date (not a
    /// person's yet). Anything else is the refusal, a permanent failure, as before.
    async fn refused(
        &self,
        repo: &RepoName,
        number: u64,
        sha: &str,
        refusal: CallError,
    ) -> Result<Produced, CallError> {
        let pull = self.pull(repo, number).await?.model;
        let state = match pull.mergeable_state {
            Some(MergeableState::Behind) => "behind",
            Some(MergeableState::Dirty) => "dirty",
            _ => return Err(refusal),
        };
        if pull.state != Some(IssueState::Open) || !pull.head.sha.eq_ignore_ascii_case(sha) {
            return Err(refusal);
        }
        Ok(Produced::Unmerged {
            number,
            state: state.to_owned(),
            message: refusal.to_string(),
        })
    }

    /// Closes pull request `number` without merging it (a stale review under `stale_action = "close"`). Reads it
    /// first: one merged or closed already (a repeat after a crash, a person first) is left as it is.
    pub async fn close_pull_request(
        &self,
        repo: &RepoName,
        number: u64,
    ) -> Result<Produced, CallError> {
        let pull = self.pull(repo, number).await?.model;
        if pull.state != Some(IssueState::Open) {
            return Ok(Produced::Done);
        }
        let (owner, name) = parts(repo)?;
        self.api
            .pulls(owner, name)
            .update(number)
            .state(octocrab::params::pulls::State::Closed)
            .send()
            .await
            .map_err(|e| classify("closing the pull request", e))?;
        Ok(Produced::Done)
    }

    /// The first merge method the repository allows, of squash, merge and rebase (`allow_*_merge` of
    /// `GET /repos/{o}/{r}`). A flag GitHub leaves out (a token that may not see it) is not a refusal: GitHub
    /// itself refuses a method it does not allow, with a message that names it.
    async fn allowed_method(&self, repo: &RepoName) -> Result<MergeMethod, CallError> {
        let (owner, name) = parts(repo)?;
        let settings = self
            .api
            .repos(owner, name)
            .get()
            .await
            .map_err(|e| classify("reading the repository's merge methods", e))?;
        [
            (settings.allow_squash_merge, MergeMethod::Squash),
            (settings.allow_merge_commit, MergeMethod::Merge),
            (settings.allow_rebase_merge, MergeMethod::Rebase),
        ]
        .into_iter()
        .find(|(allowed, _)| *allowed != Some(false))
        .map(|(_, method)| method)
        .ok_or_else(|| CallError::Permanent {
            message: format!(
                "{repo} allows no merge method (squash, merge and rebase are all off)"
            ),
        })
    }
}

impl GithubClient {
    /// Deletes `branch` of `repo` if its head is one of `ours` (the commits pidevops pushed for it): the branch
    /// is read first (`GET …/git/ref/heads/<branch>`), and one whose head is anything else (a person pushed to
    /// it) is kept, the answer saying why. Gone already (404 on the read; 404 or GitHub's 422 "Reference does
    /// not exist" on the delete) is a success, so a repeat after a crash deletes nothing more. GitHub's delete
    /// takes no lease: a push between the read and the delete is the one window this cannot close.
    pub async fn delete_branch(
        &self,
        repo: &RepoName,
        branch: &BranchName,
        ours: &[CommitSha],
    ) -> Result<Produced, CallError> {
        use octocrab::models::repos::Object;
        use octocrab::params::repos::Reference;
        let gone = || Produced::Branch {
            branch: branch.as_str().to_owned(),
            deleted: false,
            kept: None,
        };
        let reference = Reference::Branch(branch.as_str().to_owned());
        let (owner, name) = parts(repo)?;
        let repos = self.api.repos(owner, name);
        let head = match repos.get_ref(&reference).await {
            Ok(found) => found.object,
            Err(e) if status_of(&e) == Some(404) => return Ok(gone()),
            Err(e) => return Err(classify("reading the branch", e)),
        };
        let sha = match &head {
            Object::Commit { sha, .. } => Some(sha.as_str()),
            _ => None,
        };
        let Some(sha) = sha.filter(|sha| ours.iter().any(|c| c.as_str().eq_ignore_ascii_case(sha)))
        else {
            let what = sha.map_or_else(
                || "is not a commit".to_owned(),
                |sha| format!("is {}", short(sha)),
            );
            return Ok(Produced::Branch {
                branch: branch.as_str().to_owned(),
                deleted: false,
                kept: Some(format!(
                    "its head {what}, not a commit pidevops pushed for the task: someone else's work is on it"
                )),
            });
        };
        match repos.delete_ref(&reference).await {
            Ok(()) => {
                tracing::info!(%repo, branch = branch.as_str(), head = short(sha), "branch deleted");
                Ok(Produced::Branch {
                    branch: branch.as_str().to_owned(),
                    deleted: true,
                    kept: None,
                })
            }
            Err(e) if matches!(status_of(&e), Some(404 | 422)) => Ok(gone()),
            Err(e) => Err(classify("deleting the branch", e)),
        }
    }
}

impl GithubClient {
    /// The commit branch `branch` of `repo` is at (`GET …/git/ref/heads/<branch>`), `None` when GitHub has no such
    /// branch (404) or it is not a commit; for the poller's backstop of a base push.
    pub async fn branch_head(
        &self,
        repo: &RepoName,
        branch: &str,
    ) -> Result<Option<String>, CallError> {
        use octocrab::models::repos::Object;
        use octocrab::params::repos::Reference;
        let (owner, name) = parts(repo)?;
        let reference = Reference::Branch(branch.to_owned());
        match self.api.repos(owner, name).get_ref(&reference).await {
            Ok(found) => Ok(match found.object {
                Object::Commit { sha, .. } => Some(sha),
                _ => None,
            }),
            Err(e) if status_of(&e) == Some(404) => Ok(None),
            Err(e) => Err(classify("reading the base branch", e)),
        }
    }
}

/// The HTTP status GitHub answered with, when it answered.
fn status_of(error: &octocrab::Error) -> Option<u16> {
    match error {
        octocrab::Error::GitHub { source, .. } => Some(source.status_code.as_u16()),
        _ => None,
    }
}

/// What GitHub answered, read as octocrab's model, with its JSON as it came: callers decide on the model's fields
/// and record the JSON (an event appended "as the webhook would have said" keeps what GitHub said, field for
/// field, which is what reactions and intake read back, including what octocrab's models leave out).
#[derive(Clone, Debug)]
pub struct Answer<T> {
    pub model: T,
    pub json: Value,
}

impl<T: serde::de::DeserializeOwned> Answer<T> {
    /// `json` read as `T`. An answer that does not fit the model is transient, as `classify` has octocrab's own
    /// reading failures: every call here is safe to repeat, and the error names the field.
    pub fn read(what: &str, json: Value) -> Result<Self, CallError> {
        let model = serde_path_to_error::deserialize(&json).map_err(|e| CallError::Transient {
            message: format!(
                "{what}: GitHub's answer does not read as octocrab's {}: {e}",
                std::any::type_name::<T>()
                    .rsplit("::")
                    .next()
                    .unwrap_or("model")
            ),
            retry_after: None,
        })?;
        Ok(Self { model, json })
    }
}

fn short(sha: &str) -> &str {
    sha.get(..7).unwrap_or(sha)
}

/// A repository webhook [`GithubClient::ensure_webhook`] left in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Webhook {
    pub id: u64,
    /// False when one to the same URL was there and was updated.
    pub created: bool,
}

/// [`classify`], with what a 404 or 403 on a repository's hooks means: GitHub answers 404 (not 403) to a token
/// that may read the repository but not administer it, and to one that cannot see it at all.
fn hook_error(repo: &RepoName, what: &str, error: octocrab::Error) -> CallError {
    let status = status_of(&error);
    match classify(what, error) {
        CallError::Permanent { message } if matches!(status, Some(403 | 404)) => CallError::Permanent {
            message: format!(
                "{message} (the token cannot manage {repo}'s webhooks: that needs admin rights on the repository, \
                 and a classic token with the admin:repo_hook scope or a fine-grained token with \"Webhooks: read \
                 and write\")"
            ),
        },
        other => other,
    }
}

/// Transient: GitHub's 5xx, 429, a 403 that is a rate limit, and anything that never got an answer (connection,
/// timeout). Permanent: every other answer (bad token, no such repository, a validation error).
fn classify(what: &str, error: octocrab::Error) -> CallError {
    match error {
        octocrab::Error::GitHub { source, .. } => {
            let status = source.status_code;
            let header = |name: &str| {
                source
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(name))
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            let rate_limited = status.as_u16() == 429
                || (status.as_u16() == 403
                    && (header("retry-after").is_some()
                        || header("x-ratelimit-remaining").as_deref() == Some("0")));
            let message = format!("{what}: GitHub answered {status}: {}", source.message);
            if status.is_server_error() || rate_limited {
                let retry_after = header("retry-after")
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs)
                    .or_else(|| {
                        let reset = source.rate_limit_reset_at()?;
                        (reset - chrono::Utc::now()).to_std().ok()
                    })
                    .map(|d| d.min(MAX_RETRY_AFTER));
                CallError::Transient {
                    message,
                    retry_after,
                }
            } else {
                CallError::Permanent { message }
            }
        }
        error @ (octocrab::Error::Serde { .. } | octocrab::Error::Json { .. }) => {
            CallError::Transient {
                message: format!(
                    "{what}: GitHub's answer does not read as octocrab's model: {error}"
                ),
                retry_after: None,
            }
        }
        other => CallError::Transient {
            message: format!("{what}: no answer from GitHub: {other}"),
            retry_after: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_github_route_is_built_from_a_gitlab_group_path() {
        let github: RepoName = "acme/api".parse().unwrap();
        assert_eq!(parts(&github).unwrap(), ("acme", "api"));
        for nested in ["group/sub/api", "my_group/api"] {
            let repo: RepoName = nested.parse().unwrap();
            assert!(
                matches!(parts(&repo), Err(CallError::Permanent { .. })),
                "{nested}"
            );
        }
    }
}
