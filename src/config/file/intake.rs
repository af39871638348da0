//! `[intake]` and what intake needs of `[plans]`, `[dispatch]` and `[repos] provider`, read into
//! `intake::IntakeConfig`; `[intake.github]`, `[intake.gitlab]` and `[intake.linear]` (and `[slack.channels]`)
//! checked here and typed by their providers' settings.

use super::Tables;
use crate::intake::IntakeConfig;
use crate::tasks::RepoName;

/// `[intake]` and the allow-list, with `[intake.github]` and `[intake.linear]` (and `.teams`) checked.
pub fn intake_config(tables: &Tables) -> Result<IntakeConfig, String> {
    let intake = &tables.intake;
    let mut config = IntakeConfig {
        allowed_repos: super::board::allowed_repos(tables)?,
        ..IntakeConfig::default()
    };
    if let Some(repo) = &intake.default_repo {
        config.default_repo = Some(repo_value(repo, "intake.default_repo")?);
    }
    // The providers' sections are checked here, where the file is read, and typed by each provider's
    // settings.rs (`GithubIntake`, `LinearIntake`).
    string(&intake.github.label, "intake.github.label")?;
    if let Some(login) = &intake.github.bot_login {
        string(login, "intake.github.bot_login")?;
    }
    string(&intake.gitlab.label, "intake.gitlab.label")?;
    if let Some(name) = &intake.gitlab.bot_username {
        gitlab_username(name, "intake.gitlab.bot_username")?;
    }
    for name in &intake.gitlab.trusted_users {
        gitlab_username(name, "intake.gitlab.trusted_users")?;
    }
    config.code_hosts = code_hosts(tables)?;
    string(&intake.linear.state, "intake.linear.state")?;
    string(&intake.linear.label, "intake.linear.label")?;
    for (team, repo) in &intake.linear.teams {
        repo_value(repo, &format!("intake.linear.teams.{team}"))?;
    }
    for (channel, table) in &tables.slack.channels {
        if !crate::tasks::is_slack_id(channel) {
            return Err(format!(
                "slack.channels.{channel:?} is not a Slack channel id (upper-case letters and digits, as C0123ABCD)"
            ));
        }
        if let Some(repo) = &table.repo {
            let repo = repo_value(repo, &format!("slack.channels.{channel}.repo"))?;
            config
                .allowed_repos
                .check(&repo)
                .map_err(|e| format!("slack.channels.{channel}.repo: {e}"))?;
        }
    }
    config.plan_label = string(tables.plans.label.trim(), "plans.label")?;
    config.planner = tables
        .dispatch
        .as_ref()
        .is_some_and(|dispatch| dispatch.planner.is_some());
    Ok(config)
}

/// Each `[repos]` repository's code host, checked: a GitHub one (the default) is `owner/name` as GitHub spells
/// it; a GitLab one names its `url` (the file does not know `GITLAB_URL`, and a default on github.com would clone
/// another project of the same name) and does not land as GitHub's. Only the non-GitHub ones are kept.
fn code_hosts(
    tables: &Tables,
) -> Result<std::collections::BTreeMap<RepoName, crate::domain::Source>, String> {
    use super::CodeHost;
    let mut hosts = std::collections::BTreeMap::new();
    for (name, repo) in &tables.repos {
        let key = format!("repos.\"{name}\"");
        let parsed = name
            .parse::<RepoName>()
            .map_err(|e| format!("[{key}]: {e}"))?;
        match repo.provider.unwrap_or_default() {
            CodeHost::Github => {
                if repo.draft.is_some() {
                    return Err(format!(
                        "{key}.draft: only a GitLab repository's merge requests open as drafts (provider = \"gitlab\")"
                    ));
                }
                if parsed.github_parts().is_none() {
                    return Err(format!(
                        "[{key}]: a GitHub repository is owner/name (letters, digits and '-' in the owner); \
                         a GitLab project's path takes provider = \"gitlab\""
                    ));
                }
            }
            CodeHost::Gitlab => {
                if repo.url.is_none() {
                    return Err(format!(
                        "{key}.url: a GitLab repository names its clone URL (as \"https://gitlab.com/{name}.git\")"
                    ));
                }
                if repo.forge == Some(super::Forge::Github) {
                    return Err(format!(
                        "{key}.forge: a GitLab repository does not land through GitHub's pull requests"
                    ));
                }
                hosts.insert(parsed, crate::domain::Source::Gitlab);
            }
        }
    }
    Ok(hosts)
}

/// A GitLab username: 1 to 255 of letters, digits, `_`, `-` and `.`, not starting with `-` or `.`.
fn gitlab_username(value: &str, field: &str) -> Result<(), String> {
    let ok = (1..=255).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && !value.starts_with(['-', '.']);
    if ok {
        Ok(())
    } else {
        Err(format!("{field}: {value:?} is not a GitLab username"))
    }
}

fn string(value: &str, field: &str) -> Result<String, String> {
    Some(value)
        .filter(|s| !s.trim().is_empty())
        .map(str::to_owned)
        .ok_or_else(|| format!("{field} must be a non-empty string"))
}

fn repo_value(value: &str, field: &str) -> Result<RepoName, String> {
    let text = string(value, field)?;
    text.parse::<RepoName>()
        .map_err(|e| format!("{field}: {e}"))
}
