//! What a push to a repository's base branch says, on either code host, as the `refresh` loop reads it: GitHub's
//! `push` webhook (`github.push`), GitLab's Push Hook (`gitlab.push`), and each host's poller's push shaped like
//! its webhook. Pure.
//!
//! Only a configured repository's base, and only on the host it is configured on: a GitHub push names a GitHub
//! repository (`repository.full_name`), a GitLab push a GitLab-hosted project (`project.path_with_namespace`,
//! what `[repos."group/…/name"]` names; a `project_id` that disagrees with `project.id` is a payload no GitLab
//! sent). One host's delivery naming the other host's repository is nobody's. The payload is only the signal:
//! what the base holds is fetched from the configured remote, and the head it names (`after`) is only the key that
//! keeps one head from being handled twice ([`base_key`]).

use serde::Deserialize;

use crate::board::BoardConfig;
use crate::config::dispatch::DispatchConfig;
use crate::domain::Source;
use crate::tasks::{CommitSha, RefreshMode, RepoName};

/// The base branch of `repo` whose pushes refresh its review requests: a repository on GitHub (pull requests) or
/// GitLab (merge requests) whose `refresh` is on. The refresh loop and both pollers' backstops read this one rule.
pub fn refreshed_base(
    board: &BoardConfig,
    sources: &DispatchConfig,
    repo: &RepoName,
) -> Option<String> {
    let source = sources.source(repo);
    let hosted = source.on_github() || source.on_gitlab();
    (hosted && board.land_for(repo).refresh != RefreshMode::Off).then_some(source.base)
}

/// The key of `refresh.base_handled` for `repo`'s base branch `base` at `head` (either host's).
pub fn base_key(repo: &RepoName, base: &str, head: &str) -> String {
    format!(
        "refresh-base:{}:{base}:{}",
        repo.as_str().to_ascii_lowercase(),
        head.to_ascii_lowercase()
    )
}

/// A push to a repository's base that refreshes: the repository, its base and the head the push names (`None`:
/// it names none, so nothing keys it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BasePush {
    pub repo: RepoName,
    pub base: String,
    pub head: Option<String>,
}

/// The parts of a GitHub `push` read here.
#[derive(Deserialize)]
struct GithubPush {
    #[serde(rename = "ref")]
    reference: String,
    #[serde(default)]
    deleted: bool,
    #[serde(default)]
    after: Option<String>,
    repository: GithubRepository,
}

#[derive(Deserialize)]
struct GithubRepository {
    full_name: String,
}

/// The parts of GitLab's Push Hook read here (<https://docs.gitlab.com/user/project/integrations/webhook_events/#push-events>).
#[derive(Deserialize)]
struct GitlabPush {
    #[serde(rename = "ref")]
    reference: String,
    /// All zeros when the branch was deleted (GitLab has no `deleted` field).
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    project_id: Option<u64>,
    project: GitlabProject,
}

#[derive(Deserialize)]
struct GitlabProject {
    #[serde(default)]
    id: Option<u64>,
    path_with_namespace: String,
}

/// Whether `sha` names a commit: hexadecimal of a commit's length, not the all-zero "no commit".
fn names_a_commit(sha: &str) -> bool {
    CommitSha::new(sha).is_ok() && sha.bytes().any(|b| b != b'0')
}

/// Whether [`base_push`] reads an event of `source` and `event_type` at all: a push to GitHub or GitLab.
pub fn reads(source: &str, event_type: &str) -> bool {
    (source == Source::Github.as_str() && event_type == "github.push")
        || (source == Source::Gitlab.as_str() && event_type == "gitlab.push")
}

/// The base push an event of `source` and `event_type` with `body` is, if it is a push to a configured
/// repository's base branch on the host the event came from, whose pushes refresh.
pub fn base_push(
    source: &str,
    event_type: &str,
    body: &[u8],
    board: &BoardConfig,
    sources: &DispatchConfig,
) -> Option<BasePush> {
    // The refresher's reader ships the bodies `reads` picks: nothing else may be decided here.
    if !reads(source, event_type) {
        return None;
    }
    let (repo, reference, after) =
        if source == Source::Github.as_str() && event_type == "github.push" {
            let push: GithubPush = serde_json::from_slice(body).ok()?;
            let repo: RepoName = push.repository.full_name.parse().ok()?;
            if push.deleted || !sources.source(&repo).on_github() {
                return None;
            }
            // GitHub's all-zero `after` names no commit: no key, as for a head not given.
            (
                repo,
                push.reference,
                push.after.filter(|a| names_a_commit(a)),
            )
        } else if source == Source::Gitlab.as_str() && event_type == "gitlab.push" {
            let push: GitlabPush = serde_json::from_slice(body).ok()?;
            if let (Some(outer), Some(inner)) = (push.project_id, push.project.id) {
                if outer != inner {
                    return None;
                }
            }
            let repo: RepoName = push.project.path_with_namespace.parse().ok()?;
            if !sources.source(&repo).on_gitlab() {
                return None;
            }
            // GitLab tells a deleted branch by an all-zero `after`: nothing to refresh onto.
            let after = push.after.filter(|a| CommitSha::new(a).is_ok());
            if after.as_deref().is_some_and(|a| !names_a_commit(a)) {
                return None;
            }
            (repo, push.reference, after)
        } else {
            return None;
        };
    let base = refreshed_base(board, sources, &repo)?;
    if reference != format!("refs/heads/{base}") {
        return None;
    }
    Some(BasePush {
        repo,
        base,
        head: after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    const HEAD: &str = "da1560886d4f094c3e6c9ef40349f7d38b5d27d7";

    fn config() -> crate::config::file::FileConfig {
        let table: toml::Table = toml::from_str(
            r#"
            [repos."acme/platform/api"]
            provider = "gitlab"
            url = "https://gitlab.example.com/acme/platform/api.git"
            base = "develop"

            [repos."acme/platform/quiet"]
            provider = "gitlab"
            url = "https://gitlab.example.com/acme/platform/quiet.git"
            refresh = "off"

            [repos."acme/app"]
            url = "https://github.com/acme/app.git"
            "#,
        )
        .unwrap();
        crate::config::file::FileConfig::from_table(&table).unwrap()
    }

    fn gitlab(project: &str, reference: &str, after: &str) -> Value {
        json!({
            "object_kind": "push", "event_name": "push", "ref": reference,
            "before": "95790bf891e76fee5e1747ab589903a6a1f80f22", "after": after, "checkout_sha": after,
            "project_id": 42, "user_username": "alice",
            "project": { "id": 42, "path_with_namespace": project },
        })
    }

    fn github(repo: &str, reference: &str, after: &str) -> Value {
        json!({ "ref": reference, "after": after, "deleted": false, "repository": { "full_name": repo } })
    }

    fn read(source: Source, event_type: &str, body: &Value) -> Option<BasePush> {
        let file = config();
        base_push(
            source.as_str(),
            event_type,
            body.to_string().as_bytes(),
            &file.board,
            &file.dispatch,
        )
    }

    #[test]
    fn a_gitlab_push_to_a_configured_project_s_base_is_a_base_push() {
        let push = read(
            Source::Gitlab,
            "gitlab.push",
            &gitlab("acme/platform/api", "refs/heads/develop", HEAD),
        )
        .expect("a base push");
        assert_eq!(push.repo.as_str(), "acme/platform/api");
        assert_eq!(push.base, "develop");
        assert_eq!(push.head.as_deref(), Some(HEAD));
        let file = config();
        assert_eq!(
            refreshed_base(&file.board, &file.dispatch, &push.repo).as_deref(),
            Some("develop")
        );
        assert_eq!(
            base_key(&push.repo, "develop", &HEAD.to_uppercase()),
            format!("refresh-base:acme/platform/api:develop:{HEAD}")
        );
    }

    #[test]
    fn what_is_not_a_configured_gitlab_project_s_base_is_nothing() {
        let zeros = "0".repeat(40);
        for (why, source, event_type, body) in [
            (
                "another project",
                Source::Gitlab,
                "gitlab.push",
                gitlab("stranger/api", "refs/heads/develop", HEAD),
            ),
            (
                "another branch",
                Source::Gitlab,
                "gitlab.push",
                gitlab("acme/platform/api", "refs/heads/main", HEAD),
            ),
            (
                "a tag",
                Source::Gitlab,
                "gitlab.tag_push",
                gitlab("acme/platform/api", "refs/heads/develop", HEAD),
            ),
            (
                "the base deleted",
                Source::Gitlab,
                "gitlab.push",
                gitlab("acme/platform/api", "refs/heads/develop", &zeros),
            ),
            (
                "refresh = off",
                Source::Gitlab,
                "gitlab.push",
                gitlab("acme/platform/quiet", "refs/heads/main", HEAD),
            ),
            (
                "a GitHub repository named by GitLab",
                Source::Gitlab,
                "gitlab.push",
                gitlab("acme/app", "refs/heads/main", HEAD),
            ),
            (
                "a GitLab project named by GitHub",
                Source::Github,
                "github.push",
                github("acme/platform/api", "refs/heads/develop", HEAD),
            ),
            (
                "a GitLab push stored as another source's",
                Source::Github,
                "gitlab.push",
                gitlab("acme/platform/api", "refs/heads/develop", HEAD),
            ),
        ] {
            assert_eq!(read(source, event_type, &body), None, "{why}");
        }
        let mut disagreeing = gitlab("acme/platform/api", "refs/heads/develop", HEAD);
        disagreeing["project_id"] = json!(77);
        assert_eq!(
            read(Source::Gitlab, "gitlab.push", &disagreeing),
            None,
            "project_id and project.id disagree"
        );
        // Not a commit's name: still the base's push (the remote is read), keyed by nothing.
        let push = read(
            Source::Gitlab,
            "gitlab.push",
            &gitlab("acme/platform/api", "refs/heads/develop", "trust me"),
        )
        .expect("a base push");
        assert_eq!(push.head, None);
    }

    #[test]
    fn a_github_push_reads_as_it_always_did() {
        let push = read(
            Source::Github,
            "github.push",
            &github("acme/app", "refs/heads/main", HEAD),
        )
        .expect("a base push");
        assert_eq!(
            (push.repo.as_str(), push.base.as_str()),
            ("acme/app", "main")
        );
        assert_eq!(push.head.as_deref(), Some(HEAD));
        // An unconfigured repository is on GitHub with the defaults, as before.
        assert!(read(
            Source::Github,
            "github.push",
            &github("acme/other", "refs/heads/main", HEAD)
        )
        .is_some());
        let zeros = read(
            Source::Github,
            "github.push",
            &github("acme/app", "refs/heads/main", &"0".repeat(40)),
        )
        .expect("a base push");
        assert_eq!(zeros.head, None, "no commit named: no key");
        let mut deleted = github("acme/app", "refs/heads/main", HEAD);
        deleted["deleted"] = json!(true);
        assert_eq!(read(Source::Github, "github.push", &deleted), None);
    }
}
