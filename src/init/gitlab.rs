//! `pidevops init --gitlab`: the GitLab projects to work on and their instance (flags, or asked at a terminal),
//! rendered as `[repos."group/…/name"] provider = "gitlab"` with the clone `url`; `GITLAB_WEBHOOK_SECRET` made in
//! `.env`; and, with `GITLAB_TOKEN` in the environment and a public URL GitLab can reach, each project's webhook
//! made or put right through the API (`GitlabClient::ensure_webhook`: one hook per project however often `init`
//! runs). A project whose hook cannot be made (the token lacks Maintainer rights: GitLab answers 403 or 404) is
//! named with the reason after the files are written; the token and the secret are never printed.

use std::io::BufRead;

use anyhow::Context;
use secrecy::SecretString;

use super::{ask, quoted, InitArgs};
use crate::providers::gitlab::client::GitlabClient;
use crate::tasks::RepoName;

/// gitlab.com, unless `--gitlab-url` (or `GITLAB_URL`) names a self-managed instance.
pub const DEFAULT_URL: &str = "https://gitlab.com";
/// The webhook's secret token in `.env`.
pub const SECRET: &str = "GITLAB_WEBHOOK_SECRET";

/// The GitLab part of `init`'s answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitlabAnswers {
    pub projects: Vec<RepoName>,
    /// The instance, no trailing `/`.
    pub url: String,
}

/// The GitLab answers, if `--gitlab` (or a `--gitlab-project`) asks for GitLab: what the flags leave open asked
/// at a terminal.
pub fn answers(
    args: &InitArgs,
    input: &mut impl BufRead,
    interactive: bool,
) -> anyhow::Result<Option<GitlabAnswers>> {
    if !args.gitlab && args.gitlab_projects.is_empty() {
        return Ok(None);
    }
    let mut projects = args.gitlab_projects.clone();
    let mut url = args.gitlab_url.clone();
    if interactive {
        if projects.is_empty() {
            projects = ask(
                input,
                "GitLab projects to work on (group/…/name, comma-separated)",
                "",
            )?
            .split(',')
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
            .collect();
        }
        if url.is_none() {
            url = Some(ask(input, "The GitLab instance", DEFAULT_URL)?);
        }
    }
    let projects = super::repo_names(&projects, "--gitlab-project")?;
    if projects.is_empty() {
        anyhow::bail!("--gitlab: name the projects with --gitlab-project group/…/name");
    }
    let url = url.unwrap_or_else(|| DEFAULT_URL.to_owned());
    let parsed =
        reqwest::Url::parse(&url).map_err(|e| anyhow::anyhow!("--gitlab-url {url:?}: {e}"))?;
    if !matches!(parsed.scheme(), "https" | "http") || parsed.host_str().is_none() {
        anyhow::bail!("--gitlab-url {url:?}: expected the instance's https:// address");
    }
    Ok(Some(GitlabAnswers {
        projects,
        url: url.trim_end_matches('/').to_owned(),
    }))
}

/// Each project's `[repos]` entry: a GitLab project names its clone URL on its instance.
pub fn render(gitlab: &GitlabAnswers) -> String {
    gitlab
        .projects
        .iter()
        .map(|project| {
            format!(
                "[repos.{}]\nprovider = \"gitlab\"\nurl = {}\n\n",
                quoted(project.as_str()),
                quoted(&format!("{}/{project}.git", gitlab.url))
            )
        })
        .collect()
}

/// How to add the webhook by hand (no secret printed: it is in `.env`).
pub fn instructions(public_url: &str) -> String {
    format!(
        "\nGitLab, for each project (Settings → Webhooks → Add new webhook):\n  URL          {public_url}/webhooks/gitlab\n  \
         secret token GITLAB_WEBHOOK_SECRET from .env; SSL verification on\n  triggers     Push events, Issues events, \
         Comments, Merge request events, Pipeline events, Job events\n"
    )
}

/// Makes or updates each project's hook to `hook_url` with `secret`; returns what to print and whether every one
/// is in place.
pub async fn create_hooks(
    gitlab: &GitlabAnswers,
    token: &SecretString,
    hook_url: &str,
    secret: &SecretString,
) -> (String, bool) {
    let client = match GitlabClient::new(&gitlab.url, token) {
        Ok(client) => client,
        Err(e) => return (format!("GitLab webhooks not created: {e}\n"), false),
    };
    let mut out = String::new();
    let mut all = true;
    for project in &gitlab.projects {
        match client.ensure_webhook(project, hook_url, secret).await {
            Ok(hook) => out.push_str(&format!(
                "GitLab webhook of {project}: {} (id {}), delivering to {hook_url}.\n",
                if hook.created { "created" } else { "updated" },
                hook.id
            )),
            Err(e) => {
                all = false;
                out.push_str(&format!(
                    "GitLab webhook of {project} NOT created: {e}. Add it by hand as below.\n"
                ));
            }
        }
    }
    (out, all)
}

/// The secret `init` wrote to `.env`, for the hooks it makes.
pub fn secret_of(env: &[(String, String)]) -> anyhow::Result<SecretString> {
    env.iter()
        .find(|(k, _)| k == SECRET)
        .map(|(_, v)| SecretString::from(v.clone()))
        .with_context(|| format!(".env has no {SECRET}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projects_render_as_gitlab_repositories_serve_accepts() {
        let args = InitArgs {
            gitlab: true,
            gitlab_projects: vec!["acme/platform/api".into()],
            gitlab_url: Some("https://gitlab.corp.example/".into()),
            yes: true,
            ..InitArgs::default()
        };
        let answers = super::super::answers(&args, &mut std::io::empty(), false).unwrap();
        let gitlab = answers.gitlab.clone().unwrap();
        assert_eq!(gitlab.url, "https://gitlab.corp.example");
        assert!(!answers.github, "no GitHub repository, no GitHub webhooks");
        let toml = super::super::render_toml(&answers);
        let file = toml.parse::<crate::config::FileConfig>().expect("valid");
        let project: RepoName = "acme/platform/api".parse().unwrap();
        assert_eq!(
            file.dispatch.source(&project).url,
            "https://gitlab.corp.example/acme/platform/api.git"
        );
        assert_eq!(
            file.intake.code_hosts.get(&project),
            Some(&crate::domain::Source::Gitlab)
        );
        assert!(super::super::wanted_secrets(&answers).contains(&SECRET));
        let mut input = std::io::Cursor::new("acme/api, acme/sub/web\n\n");
        let asked = answers_at_terminal(&mut input);
        assert_eq!(asked.projects.len(), 2);
        assert_eq!(asked.url, DEFAULT_URL);
        let bad = InitArgs {
            gitlab: true,
            yes: true,
            ..InitArgs::default()
        };
        let error = super::answers(&bad, &mut std::io::empty(), false)
            .unwrap_err()
            .to_string();
        assert!(error.contains("--gitlab-project"), "{error}");
    }

    fn answers_at_terminal(input: &mut impl BufRead) -> GitlabAnswers {
        let args = InitArgs {
            gitlab: true,
            ..InitArgs::default()
        };
        super::answers(&args, input, true).unwrap().unwrap()
    }
}
