//! `pidevops init` creating each repository's GitHub webhook through the API, with `GITHUB_TOKEN`: asked at a
//! terminal, only with `--create-hooks` under `--yes`. Idempotent: a hook already delivering to the same URL is
//! updated (secret, events, content type), not duplicated; hooks to other URLs are left alone. A repository whose
//! hook cannot be made (no admin rights: GitHub answers 404 or 403) is named with the reason, after `init` has
//! written its files; the token and the secret are never printed.

use std::io::BufRead;

use anyhow::bail;
use secrecy::SecretString;

use super::{ask, yes, Answers, InitArgs};
use crate::config::Env;
use crate::providers::github::GithubClient;

/// The GitHub events pidevops acts on: (the API's name, the name on GitHub's webhook page).
pub const EVENTS: &[(&str, &str)] = &[
    ("issues", "Issues"),
    ("issue_comment", "Issue comments"),
    ("pull_request", "Pull requests"),
    ("pull_request_review", "Pull request reviews"),
    (
        "pull_request_review_comment",
        "Pull request review comments",
    ),
    ("check_suite", "Check suites"),
    ("check_run", "Check runs"),
    ("workflow_run", "Workflow runs"),
    ("push", "Pushes"),
];

/// Where `init` reaches GitHub: `GITHUB_TOKEN` and `GITHUB_API_URL` from its environment, as `serve` reads them.
pub struct GithubAccess {
    pub api_url: String,
    pub token: Option<SecretString>,
}

impl GithubAccess {
    pub fn from_env(env: &Env) -> Self {
        use crate::providers::github::settings::{GithubSettings, API_URL, TOKEN};
        // Read as `serve` reads them; neither has a check that could refuse it.
        let mut vars = crate::config::ProviderEnv::default();
        for name in [TOKEN, API_URL] {
            let _ = vars.set(name, env.get(name));
        }
        let github = GithubSettings::from_vars(&vars);
        Self {
            api_url: github.api_url,
            token: github.token,
        }
    }
}

/// The URL a provider (`github`, `gitlab`) would deliver to, if `public_url` is one it can be given (not the
/// `https://<host>` placeholder).
pub fn delivery_url(public_url: &str, provider: &str) -> Option<String> {
    let url = reqwest::Url::parse(public_url.trim_end_matches('/')).ok()?;
    (matches!(url.scheme(), "https" | "http")
        && url.host_str().is_some()
        && url.host_str() != Some("<host>"))
    .then(|| format!("{}/webhooks/{provider}", public_url.trim_end_matches('/')))
}

/// Whether to create the hooks, and where they deliver; refused (before anything is written) when asked for
/// without what it needs.
pub fn wanted(
    args: &InitArgs,
    answers: &Answers,
    token_set: bool,
    input: &mut impl BufRead,
    interactive: bool,
) -> anyhow::Result<Option<String>> {
    let possible = answers.github && !answers.repos.is_empty();
    let create = if args.create_hooks {
        if !possible {
            bail!("--create-hooks: no GitHub repository to make a webhook on (name them with --repo owner/name)");
        }
        if !token_set {
            bail!(
                "--create-hooks needs GITHUB_TOKEN in the environment: a token with admin rights on the \
                 repositories (classic: admin:repo_hook; fine-grained: Webhooks read and write)"
            );
        }
        true
    } else if interactive && possible && token_set {
        let names: Vec<&str> = answers.repos.iter().map(|r| r.as_str()).collect();
        yes(&ask(
            input,
            &format!(
                "GITHUB_TOKEN is set: create the webhook of {} on GitHub now? (y/n)",
                names.join(", ")
            ),
            "y",
        )?)
    } else {
        false
    };
    if !create {
        return Ok(None);
    }
    match delivery_url(&answers.public_url, "github") {
        Some(url) => Ok(Some(url)),
        None => bail!(
            "creating webhooks needs the URL GitHub delivers to: pass --public-url https://<your host> (got {:?})",
            answers.public_url
        ),
    }
}

/// Makes or updates each repository's hook to `url`; returns what to print and whether every one is in place.
pub async fn create(
    answers: &Answers,
    access: &GithubAccess,
    url: &str,
    secret: &SecretString,
) -> (String, bool) {
    let Some(token) = &access.token else {
        return (
            "GitHub webhooks not created: GITHUB_TOKEN is not set.\n".to_owned(),
            false,
        );
    };
    let client = match GithubClient::new(&access.api_url, token) {
        Ok(client) => client,
        Err(e) => return (format!("GitHub webhooks not created: {e}\n"), false),
    };
    let events: Vec<&str> = EVENTS.iter().map(|(name, _)| *name).collect();
    let mut out = String::new();
    let mut all = true;
    for repo in &answers.repos {
        match client.ensure_webhook(repo, url, secret, &events).await {
            Ok(hook) => out.push_str(&format!(
                "GitHub webhook of {repo}: {} (id {}), delivering to {url}.\n",
                if hook.created { "created" } else { "updated" },
                hook.id
            )),
            Err(e) => {
                all = false;
                out.push_str(&format!(
                    "GitHub webhook of {repo} NOT created: {e}. Add it by hand as below.\n"
                ));
            }
        }
    }
    (out, all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scripted(create_hooks: bool, public_url: Option<&str>) -> (InitArgs, Answers) {
        let args = InitArgs {
            repos: vec!["acme/api".into()],
            public_url: public_url.map(str::to_owned),
            create_hooks,
            yes: true,
            ..InitArgs::default()
        };
        let answers = super::super::answers(&args, &mut std::io::empty(), false).unwrap();
        (args, answers)
    }

    #[test]
    fn yes_creates_hooks_only_when_a_flag_asks() {
        let (args, answers) = scripted(false, Some("https://ops.example"));
        assert_eq!(
            wanted(&args, &answers, true, &mut std::io::empty(), false).unwrap(),
            None
        );
        let (args, answers) = scripted(true, Some("https://ops.example/"));
        assert_eq!(
            wanted(&args, &answers, true, &mut std::io::empty(), false).unwrap(),
            Some("https://ops.example/webhooks/github".to_owned())
        );
    }

    #[test]
    fn the_flag_without_a_token_or_a_real_url_is_refused() {
        let (args, answers) = scripted(true, Some("https://ops.example"));
        let error = wanted(&args, &answers, false, &mut std::io::empty(), false)
            .unwrap_err()
            .to_string();
        assert!(error.contains("needs GITHUB_TOKEN"), "{error}");
        let (args, answers) = scripted(true, None);
        let error = wanted(&args, &answers, true, &mut std::io::empty(), false)
            .unwrap_err()
            .to_string();
        assert!(error.contains("--public-url"), "{error}");
    }

    #[test]
    fn a_terminal_asks_when_a_token_is_set() {
        let (mut args, answers) = scripted(false, Some("https://ops.example"));
        args.yes = false;
        let mut input = std::io::Cursor::new("\n");
        assert_eq!(
            wanted(&args, &answers, true, &mut input, true).unwrap(),
            Some("https://ops.example/webhooks/github".to_owned()),
            "the default is yes"
        );
        let mut input = std::io::Cursor::new("n\n");
        assert_eq!(
            wanted(&args, &answers, true, &mut input, true).unwrap(),
            None
        );
        let mut input = std::io::Cursor::new("y\n");
        assert_eq!(
            wanted(&args, &answers, false, &mut input, true).unwrap(),
            None,
            "no token, no question"
        );
        assert_eq!(input.position(), 0, "nothing was read");
    }
}
