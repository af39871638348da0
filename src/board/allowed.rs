//! Which repositories tasks may be for: those configured under `[repos."owner/name"]` and those matching an
//! `[intake] allow_repos` pattern (`"acme/app"` or `"acme/*"`). A namespace pattern allows the repositories directly
//! in it at any depth (`"group/sub/*"`: not `group/sub/deeper/x`), though config takes only GitHub-shaped patterns
//! for now: a GitLab project is allowed by its own `[repos]` table. Pure; read by intake, the API, the CLI and the
//! dispatcher, so a task is refused at every door by the same rule. Names compare as GitHub does, ignoring case,
//! and a task is stored under the configured spelling (`spelling`), so every later comparison sees one name.

use std::collections::{BTreeMap, BTreeSet};

use crate::tasks::RepoName;

/// The allow-list; empty (nothing allowed) until configured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedRepos {
    /// `owner/name` as configured (`[repos]` first, then `allow_repos`); the key compares ignoring case.
    exact: BTreeMap<RepoName, RepoName>,
    /// Namespaces (an owner, a group path) whose every repository directly in them is allowed (`owner/*`,
    /// `group/sub/*`), lowercased.
    owners: BTreeSet<String>,
}

/// A repository the configuration does not allow, and how to allow it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{repo} is not an allowed repository: add [repos.\"{repo}\"] to pidevops.toml, or a pattern matching it \
     (\"{repo}\" or \"{owner}/*\") to [intake] allow_repos"
)]
pub struct NotAllowed {
    pub repo: String,
    owner: String,
}

impl AllowedRepos {
    /// From patterns: `owner/name` or `owner/*` (`group/sub/name`, `group/sub/*`); anything wider (`*`, `*/*`,
    /// `acme/ap*`, `group/*/x`) is refused.
    pub fn new<'a>(patterns: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut allowed = Self::default();
        for pattern in patterns {
            let pattern = pattern.trim();
            match pattern.strip_suffix("/*") {
                Some(owner) => {
                    // A namespace is valid when `namespace/x` is a valid repository name.
                    format!("{owner}/x").parse::<RepoName>().map_err(|_| {
                        format!("{pattern:?} is not a pattern: use \"owner/name\" or \"owner/*\"")
                    })?;
                    allowed.owners.insert(owner.to_ascii_lowercase());
                }
                None => {
                    let repo = pattern.parse::<RepoName>().map_err(|e| {
                        format!("{pattern:?} is not a pattern (\"owner/name\" or \"owner/*\"): {e}")
                    })?;
                    allowed.exact.entry(repo.clone()).or_insert(repo);
                }
            }
        }
        Ok(allowed)
    }

    /// `more`'s repositories and owners added; a repository already here keeps its spelling.
    pub fn extend(&mut self, more: AllowedRepos) {
        for (key, spelling) in more.exact {
            self.exact.entry(key).or_insert(spelling);
        }
        self.owners.extend(more.owners);
    }

    pub fn check(&self, repo: &RepoName) -> Result<(), NotAllowed> {
        // The whole namespace, never its first segment: `group/*` does not reach `group/other/x`.
        let owner = repo.namespace().to_ascii_lowercase();
        if self.exact.contains_key(repo) || self.owners.contains(&owner) {
            return Ok(());
        }
        Err(NotAllowed {
            repo: repo.as_str().to_owned(),
            owner: repo.namespace().to_owned(),
        })
    }

    /// The one spelling a task for `repo` is stored under: the configured one (`[repos."o/n"]`, else an
    /// `allow_repos` entry), else, for a repository an `owner/*` pattern allows, the name in lower case; a name
    /// nothing allows stays as given.
    pub fn spelling(&self, repo: &RepoName) -> RepoName {
        if let Some(configured) = self.exact.get(repo) {
            return configured.clone();
        }
        if self.owners.contains(&repo.namespace().to_ascii_lowercase()) {
            if let Ok(lower) = repo.key().parse() {
                return lower;
            }
        }
        repo.clone()
    }

    /// The repositories named one by one (`[repos."o/n"]` tables, empty ones too, and `allow_repos` entries), as
    /// configured.
    pub fn repositories(&self) -> impl Iterator<Item = &RepoName> {
        self.exact.values()
    }

    /// The owners every repository of which is allowed (`owner/*` patterns), in lower case.
    pub fn owners(&self) -> impl Iterator<Item = &str> {
        self.owners.iter().map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.owners.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(name: &str) -> RepoName {
        name.parse().unwrap()
    }

    fn file(text: &str) -> Result<AllowedRepos, String> {
        text.parse::<crate::config::FileConfig>()
            .map(|file| file.board.allowed)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn configured_repositories_and_owner_patterns_are_allowed_whatever_the_case() {
        let allowed = file(
            r#"
            [repos."acme/api"]
            base = "main"
            [intake]
            allow_repos = ["acme-labs/*", "Solo/Tool"]
            "#,
        )
        .unwrap();
        for name in [
            "acme/api",
            "ACME/Api",
            "acme-labs/app",
            "Acme-Labs/anything",
            "solo/tool",
        ] {
            assert_eq!(allowed.check(&repo(name)), Ok(()), "{name}");
        }
        for name in [
            "acme/app",
            "other-org/api",
            "acme-labs2/app",
            "solo/tools",
            "acme-lab/app",
        ] {
            let refused = allowed.check(&repo(name)).unwrap_err().to_string();
            assert!(
                refused.starts_with(&format!("{name} is not an allowed repository")),
                "{refused}"
            );
            assert!(refused.contains("allow_repos"), "{refused}");
        }
    }

    #[test]
    fn a_task_is_stored_under_the_configured_spelling() {
        let allowed = file(
            r#"
            [repos."local/demo"]
            [intake]
            allow_repos = ["Solo/Tool", "acme/*"]
            "#,
        )
        .unwrap();
        for (given, stored) in [
            ("Local/Demo", "local/demo"),
            ("local/demo", "local/demo"),
            ("solo/TOOL", "Solo/Tool"),
            ("Acme/App", "acme/app"),
        ] {
            assert_eq!(allowed.spelling(&repo(given)).as_str(), stored, "{given}");
        }
        let twice = file("[repos.\"acme/api\"]\n[repos.\"Acme/API\"]").unwrap_err();
        assert!(twice.contains("name one repository"), "{twice}");
    }

    #[test]
    fn nothing_is_allowed_until_configured() {
        let allowed = file("").unwrap();
        assert!(allowed.is_empty());
        assert!(allowed.check(&repo("acme/app")).is_err());
    }

    #[test]
    fn patterns_wider_than_an_owner_are_refused_naming_the_key() {
        for bad in [
            r#"allow_repos = ["*"]"#,
            r#"allow_repos = ["*/*"]"#,
            r#"allow_repos = ["acme/ap*"]"#,
            r#"allow_repos = ["acme"]"#,
            r#"allow_repos = ["-x/*"]"#,
        ] {
            let error = file(&format!("[intake]\n{bad}")).unwrap_err();
            assert!(error.contains("intake.allow_repos"), "{bad}: {error}");
        }
        for (bad, expected) in [
            (
                r#"allow_repos = "acme/*""#,
                "[intake] allow_repos: expected a list, found the string \"acme/*\"",
            ),
            (
                r#"allow_repos = [3]"#,
                "[intake] allow_repos[0]: expected a string, found the whole number 3",
            ),
        ] {
            let error = file(&format!("[intake]\n{bad}")).unwrap_err();
            assert_eq!(error, expected, "{bad}");
        }
        assert!(file("[repos.\"not a repo\"]")
            .unwrap_err()
            .contains("[repos."));
    }

    #[test]
    fn a_group_pattern_allows_only_the_projects_directly_in_it() {
        // The primitive: config allows only GitHub-shaped patterns today (a GitLab project is named by its
        // table), but a namespace pattern means the same at any depth.
        let allowed = AllowedRepos::new(["group/sub/*", "Group/Exact/app", "flat/*"]).unwrap();
        for name in [
            "group/sub/app",
            "GROUP/Sub/other",
            "group/exact/APP",
            "flat/x",
        ] {
            assert_eq!(allowed.check(&repo(name)), Ok(()), "{name}");
        }
        // Neither a subgroup of an allowed group nor a sibling: `group/sub/*` is one namespace, not a tree.
        for name in [
            "group/sub/deeper/app",
            "group/app",
            "group/exact/other",
            "flat/sub/x",
            "group/subx/app",
        ] {
            let refused = allowed.check(&repo(name)).unwrap_err().to_string();
            let namespace = name.rsplit_once('/').unwrap().0;
            assert!(
                refused.contains(&format!("\"{namespace}/*\"")),
                "the pattern offered names the whole namespace: {refused}"
            );
        }
        assert_eq!(
            allowed.spelling(&repo("Group/Sub/App")).as_str(),
            "group/sub/app"
        );
        for bad in ["group/*/app", "group/../*", "group/.sub/*", "group/sub/**"] {
            assert!(AllowedRepos::new([bad]).is_err(), "{bad}");
        }
        // In the file, a pattern GitHub could not hold is refused, saying how a GitLab project is allowed.
        let error = file("[intake]\nallow_repos = [\"group/sub/*\"]").unwrap_err();
        assert!(error.contains("provider = \"gitlab\""), "{error}");
    }
}
