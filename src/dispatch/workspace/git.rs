//! pidevops's own git: every command with a clean environment (no inherited `GIT_*`, no global or system config,
//! no hooks, no fsmonitor), and the token only in git's environment, scoped to the configured remote's host.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use base64::Engine as _;
use secrecy::{ExposeSecret, SecretString};
use tokio::process::Command;

use super::{WorkspaceError, Workspaces};
use crate::config::dispatch::RepoSource;
use crate::dispatch::sandbox::find_program;
use crate::tasks::RepoName;

impl Workspaces {
    /// A git command with a clean environment: no inherited `GIT_*`, no global or system config, no prompts, no
    /// hooks, no fsmonitor, and the token (when the source needs it) as an HTTP header for the configured remote's
    /// host only, in git's own environment.
    pub(super) fn git(&self, source: Option<&RepoSource>) -> Command {
        let (program, path) = git_program(std::env::var_os("PATH").unwrap_or_default());
        let mut command = Command::new(program);
        command
            .env_clear()
            .env("PATH", path)
            .env("HOME", self.root.join(".home"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_AUTHOR_NAME", "pidevops")
            .env("GIT_AUTHOR_EMAIL", "pidevops@localhost")
            .env("GIT_COMMITTER_NAME", "pidevops")
            .env("GIT_COMMITTER_EMAIL", "pidevops@localhost")
            .args([
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "core.fsmonitor=false",
                "-c",
                "protocol.ext.allow=never",
            ])
            .stdin(Stdio::null())
            .kill_on_drop(true);
        // Callers check a needed token against a missing one first (`check_token`), with the repository to name
        // in the error.
        if let Some((origin, user, token)) = source.and_then(|s| self.credential(s)) {
            // Scoped to the configured remote's origin: a redirect or a rewritten URL to any other host gets
            // no credential.
            let basic = base64::engine::general_purpose::STANDARD
                .encode(format!("{user}:{}", token.expose_secret()));
            command
                .env("GIT_CONFIG_COUNT", "2")
                .env("GIT_CONFIG_KEY_0", format!("http.{origin}/.extraHeader"))
                .env(
                    "GIT_CONFIG_VALUE_0",
                    format!("Authorization: Basic {basic}"),
                )
                .env("GIT_CONFIG_KEY_1", "http.followRedirects")
                .env("GIT_CONFIG_VALUE_1", "false");
        }
        command
    }

    /// A git command on one worktree, never discovered from it: pidevops's own administrative directory for it
    /// and its files, named explicitly. What the agent left in the worktree (`.git`, config, hooks) is not read.
    pub(super) async fn in_worktree(
        &self,
        what: &str,
        admin: &Path,
        worktree: &Path,
        args: &[&str],
    ) -> Result<String, WorkspaceError> {
        let git_dir = format!("--git-dir={}", admin.to_string_lossy());
        let work_tree = format!("--work-tree={}", worktree.to_string_lossy());
        let mut all = vec![git_dir.as_str(), work_tree.as_str()];
        all.extend_from_slice(args);
        self.run_git(what, None, &all, Some(worktree)).await
    }

    /// The paths a merge or rebase in `worktree` left unmerged, as git names them (an agent chose them: show
    /// them through [`printable`]).
    pub(super) async fn unmerged(
        &self,
        admin: &Path,
        worktree: &Path,
    ) -> Result<Vec<String>, WorkspaceError> {
        let listed = self
            .in_worktree(
                "listing conflicts",
                admin,
                worktree,
                &["diff", "--name-only", "--diff-filter=U", "-z"],
            )
            .await?;
        Ok(listed
            .split('\0')
            .filter(|f| !f.is_empty())
            .map(str::to_owned)
            .collect())
    }

    /// The credential `source`'s remote gets, if any: the origin it is scoped to, the user GitHub or GitLab
    /// reads over HTTPS (`x-access-token`; `oauth2` for a GitLab personal access token) and the token. GitHub's
    /// only for a GitHub repository on github.com; GitLab's only for a GitLab-hosted repository whose remote is
    /// on `GITLAB_URL`'s origin (another host, a mirror say, gets nothing).
    fn credential(&self, source: &RepoSource) -> Option<(String, &'static str, &SecretString)> {
        let origin = http_origin(&source.url)?;
        if source.needs_github_token() {
            return Some((origin, "x-access-token", self.credentials.github.as_ref()?));
        }
        if source.needs_gitlab_token() {
            let gitlab = self.credentials.gitlab.as_ref()?;
            let ours = http_origin(gitlab.url.trim_end_matches('/'))?;
            return ours
                .eq_ignore_ascii_case(&origin)
                .then_some((origin, "oauth2", &gitlab.token));
        }
        None
    }

    pub(super) fn check_token(
        &self,
        repo: &RepoName,
        source: &RepoSource,
    ) -> Result<(), WorkspaceError> {
        let missing = if source.needs_github_token() && self.credentials.github.is_none() {
            Some("GITHUB_TOKEN")
        } else if source.needs_gitlab_token() && self.credentials.gitlab.is_none() {
            Some("GITLAB_TOKEN")
        } else {
            None
        };
        match missing {
            Some(variable) => Err(WorkspaceError::NoToken {
                repo: repo.clone(),
                url: source.url.clone(),
                variable,
            }),
            None => Ok(()),
        }
    }

    pub(super) async fn run_git(
        &self,
        what: &str,
        source: Option<&RepoSource>,
        args: &[&str],
        cwd: Option<&Path>,
    ) -> Result<String, WorkspaceError> {
        let mut command = self.git(source);
        command.args(args);
        if let Some(cwd) = cwd {
            command.current_dir(cwd);
        }
        output_of(what, command).await
    }
}

/// A git command's trimmed standard output, or its error (its standard error and status) as `what` failing.
pub(super) async fn output_of(what: &str, mut command: Command) -> Result<String, WorkspaceError> {
    let output = command.output().await.map_err(|e| WorkspaceError::Git {
        what: what.to_owned(),
        detail: format!("cannot run git: {e}"),
    })?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        Err(WorkspaceError::Git {
            what: what.to_owned(),
            detail: format!("{} ({})", stderr.trim(), output.status),
        })
    }
}

/// git's program and PATH, from the service's PATH. By its full path, as `execvp` would find it: given a bare name
/// beside a PATH of its own, std forks the whole process (every mapping's page tables copied, then torn down at
/// exec) instead of `posix_spawn`'s vfork. Only the absolute directories, for the lookup and for git's own: a
/// relative one names whatever directory git runs in, an agent's worktree. Not found, the bare name fails at
/// spawn. A PATH that is not UTF-8 is passed on as it is.
fn git_program(path: OsString) -> (PathBuf, OsString) {
    let Some(text) = path.to_str() else {
        return ("git".into(), path);
    };
    let absolute = text
        .split(':')
        .filter(|dir| dir.starts_with('/'))
        .collect::<Vec<_>>()
        .join(":");
    let program = find_program("git", Some(&absolute)).unwrap_or_else(|| "git".into());
    (program, absolute.into())
}

/// `scheme://host[:port]` of an http(s) URL, for scoping the credential; `None` for other transports.
fn http_origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    if !matches!(scheme, "https" | "http") {
        return None;
    }
    let authority = rest.split('/').next()?;
    // Credentials in the URL itself are not ours to scope.
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    Some(format!("{scheme}://{authority}"))
}

/// Paths are the agents' to choose: a control character is shown as `?`, never a new line.
pub(super) fn printable(path: &str) -> String {
    path.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::file::CodeHost;
    use std::collections::HashMap;
    #[test]
    fn the_credential_is_scoped_to_the_configured_origin() {
        assert_eq!(
            http_origin("https://github.com/acme/app.git").as_deref(),
            Some("https://github.com")
        );
        assert_eq!(
            http_origin("http://127.0.0.1:8080/acme/app.git").as_deref(),
            Some("http://127.0.0.1:8080")
        );
        assert_eq!(http_origin("file:///srv/git/app.git"), None);
        assert_eq!(http_origin("git@github.com:acme/app.git"), None);
        assert_eq!(http_origin("https://user:pw@github.com/acme/app.git"), None);
    }

    #[test]
    fn our_git_reads_no_global_or_system_config_and_sends_the_token_only_to_its_host() {
        let root = tempfile::tempdir().unwrap();
        let workspaces = Workspaces::new(
            root.path(),
            super::super::GitCredentials {
                github: Some("ghp_secret".to_owned().into()),
                gitlab: None,
            },
        )
        .unwrap();
        let source = RepoSource {
            url: "https://github.com/acme/app.git".to_owned(),
            base: "main".to_owned(),
            forge: None,
            host: CodeHost::Github,
            keeps_branches: false,
        };
        let command = workspaces.git(Some(&source));
        let env: HashMap<String, String> = command
            .as_std()
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_str()?.to_owned(), v?.to_str()?.to_owned())))
            .collect();
        assert_eq!(env["GIT_CONFIG_NOSYSTEM"], "1");
        assert_eq!(env["GIT_CONFIG_GLOBAL"], "/dev/null");
        assert_eq!(
            env["GIT_CONFIG_KEY_0"],
            "http.https://github.com/.extraHeader"
        );
        assert!(env["GIT_CONFIG_VALUE_0"].starts_with("Authorization: Basic "));
        assert_eq!(env["GIT_CONFIG_KEY_1"], "http.followRedirects");
        assert_eq!(env["GIT_CONFIG_VALUE_1"], "false");
        let args: Vec<String> = command
            .as_std()
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        for setting in ["core.hooksPath=/dev/null", "core.fsmonitor=false"] {
            assert!(args.contains(&setting.to_owned()), "{args:?}");
        }
        // No token for a source that does not need one.
        let local = RepoSource {
            url: "file:///srv/git/app.git".to_owned(),
            base: "main".to_owned(),
            forge: None,
            host: CodeHost::Github,
            keeps_branches: false,
        };
        assert!(env_of(&workspaces.git(Some(&local))).is_empty());
    }

    /// The `GIT_CONFIG_*` of a command: what credential it carries, and to which origin.
    fn env_of(command: &Command) -> HashMap<String, String> {
        command
            .as_std()
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_str()?.to_owned(), v?.to_str()?.to_owned())))
            .filter(|(k, _)| k.starts_with("GIT_CONFIG_KEY") || k.starts_with("GIT_CONFIG_VALUE"))
            .collect()
    }

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
    fn the_gitlab_token_goes_only_to_its_host_for_a_gitlab_repository_never_to_github() {
        let root = tempfile::tempdir().unwrap();
        let workspaces = Workspaces::new(
            root.path(),
            super::super::GitCredentials {
                github: Some("ghp_secret".to_owned().into()),
                gitlab: Some(super::super::GitlabCredential {
                    url: "https://gitlab.example.com/".to_owned(),
                    token: "glpat-secret".to_owned().into(),
                }),
            },
        )
        .unwrap();
        let basic = |user: &str, token: &str| {
            format!(
                "Authorization: Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{token}"))
            )
        };
        // A GitLab repository on GITLAB_URL's host: GitLab's token, as oauth2, to that origin only.
        let gitlab = env_of(&workspaces.git(Some(&source(
            "https://gitlab.example.com/acme/platform/api.git",
            CodeHost::Gitlab,
        ))));
        assert_eq!(
            gitlab["GIT_CONFIG_KEY_0"],
            "http.https://gitlab.example.com/.extraHeader"
        );
        assert_eq!(
            gitlab["GIT_CONFIG_VALUE_0"],
            basic("oauth2", "glpat-secret")
        );
        assert_eq!(gitlab["GIT_CONFIG_VALUE_1"], "false", "no redirects");
        // GitHub's repositories get GitHub's token, never GitLab's.
        let github = env_of(&workspaces.git(Some(&source(
            "https://github.com/acme/app.git",
            CodeHost::Github,
        ))));
        assert_eq!(
            github["GIT_CONFIG_VALUE_0"],
            basic("x-access-token", "ghp_secret")
        );
        // A GitLab repository elsewhere than GITLAB_URL (a mirror), or cloned over ssh: nothing.
        for elsewhere in [
            "https://git.other.example/acme/platform/api.git",
            "git@gitlab.example.com:acme/platform/api.git",
        ] {
            assert!(
                env_of(&workspaces.git(Some(&source(elsewhere, CodeHost::Gitlab)))).is_empty(),
                "{elsewhere}"
            );
        }
        // A repository not on GitLab, even on GITLAB_URL's host: no GitLab token.
        let not_gitlab = env_of(&workspaces.git(Some(&source(
            "https://gitlab.example.com/acme/platform/api.git",
            CodeHost::Github,
        ))));
        assert!(not_gitlab.is_empty(), "{not_gitlab:?}");
        // No GITLAB_TOKEN: a GitLab https remote is refused with the variable named.
        let without =
            Workspaces::new(root.path(), super::super::GitCredentials::default()).unwrap();
        let repo: RepoName = "acme/platform/api".parse().unwrap();
        let refused = without
            .check_token(
                &repo,
                &source(
                    "https://gitlab.example.com/acme/platform/api.git",
                    CodeHost::Gitlab,
                ),
            )
            .unwrap_err()
            .to_string();
        assert!(refused.contains("needs GITLAB_TOKEN"), "{refused}");
        assert!(without
            .check_token(
                &repo,
                &source("git@gitlab.example.com:a/b.git", CodeHost::Gitlab)
            )
            .is_ok());
    }

    /// git is spawned by its full path: a bare name beside a PATH of its own makes std fork the whole process
    /// instead of `posix_spawn` (measured: the test suite's system time 489 s -> 199 s).
    #[test]
    fn git_is_spawned_by_its_full_path_as_found_on_path() {
        let root = tempfile::tempdir().unwrap();
        let workspaces =
            Workspaces::new(root.path(), super::super::GitCredentials::default()).unwrap();
        let command = workspaces.git(None);
        let program = Path::new(command.as_std().get_program());
        assert!(program.is_absolute(), "{program:?}");
        assert_eq!(program.file_name().and_then(|n| n.to_str()), Some("git"));
        let path = std::env::var("PATH").unwrap_or_default();
        assert_eq!(
            Some(program.to_path_buf()),
            find_program("git", Some(&path))
        );
    }

    /// A relative PATH directory is neither searched nor handed to git: it would name a `git` (or a helper git
    /// runs) in the directory the command runs in, an agent's worktree.
    #[test]
    fn git_is_never_found_in_a_relative_path_directory() {
        use std::os::unix::fs::PermissionsExt;
        let bin = tempfile::tempdir().unwrap();
        let fake = bin.path().join("git");
        std::fs::write(&fake, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = bin.path().to_str().unwrap();

        let (program, path) = git_program(format!(".:bin::{dir}:/nonexistent").into());
        assert_eq!(program, fake);
        assert_eq!(path, OsString::from(format!("{dir}:/nonexistent")));

        // Only relative directories: nothing to find, and git gets an empty PATH rather than theirs.
        let (program, path) = git_program(".:bin".into());
        assert_eq!(program, PathBuf::from("git"));
        assert_eq!(path, OsString::new());
    }
}
