//! `[intake]` and what intake needs of `[plans]` and `[dispatch]`, read into `intake::IntakeConfig`; `[intake.github]`
//! and `[intake.linear]` (and `[slack.channels]`) checked here and typed by their providers' settings.

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
