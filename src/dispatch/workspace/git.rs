//! pidevops's own git: every command with a clean environment (no inherited `GIT_*`, no global or system config,
//! no hooks, no fsmonitor), and the token only in git's environment, scoped to the configured remote's host.

use std::path::Path;
use std::process::Stdio;

use base64::Engine as _;
use secrecy::ExposeSecret;
use tokio::process::Command;

use super::{WorkspaceError, Workspaces};
use crate::config::dispatch::RepoSource;
use crate::tasks::RepoName;

impl Workspaces {
    /// A git command with a clean environment: no inherited `GIT_*`, no global or system config, no prompts, no
    /// hooks, no fsmonitor, and the token (when the source needs it) as an HTTP header for the configured remote's
    /// host only, in git's own environment.
    pub(super) fn git(&self, source: Option<&RepoSource>) -> Command {
        let mut command = Command::new("git");
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
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
        // Callers check `needs_github_token` against a missing token first (`check_token`), with the repository
        // to name in the error.
        if let (Some(source), Some(token)) =
            (source.filter(|s| s.needs_github_token()), &self.token)
        {
            // Scoped to the configured remote's origin: a redirect or a rewritten URL to any other host gets
            // no credential.
            if let Some(origin) = http_origin(&source.url) {
                let basic = base64::engine::general_purpose::STANDARD
                    .encode(format!("x-access-token:{}", token.expose_secret()));
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

    pub(super) fn check_token(
        &self,
        repo: &RepoName,
        source: &RepoSource,
    ) -> Result<(), WorkspaceError> {
        if source.needs_github_token() && self.token.is_none() {
            return Err(WorkspaceError::NoToken {
                repo: repo.clone(),
                url: source.url.clone(),
            });
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let workspaces =
            Workspaces::new(root.path(), Some("ghp_secret".to_owned().into())).unwrap();
        let source = RepoSource {
            url: "https://github.com/acme/app.git".to_owned(),
            base: "main".to_owned(),
            forge: None,
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
        };
        let command = workspaces.git(Some(&local));
        assert!(!command
            .as_std()
            .get_envs()
            .any(|(k, _)| k.to_string_lossy().starts_with("GIT_CONFIG_KEY")));
    }
}
