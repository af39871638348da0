//! `[intake]`, `[intake.github]`, `[intake.linear]` and what intake needs of `[linear.states]`, `[plans]` and
//! `[dispatch]`, read into `intake::IntakeConfig`.

use super::Tables;
use crate::intake::rules::work_states;
use crate::intake::IntakeConfig;
use crate::tasks::RepoName;

/// `[intake]`, `[intake.github]`, `[intake.linear]` (and `.teams`) and the allow-list; the Telegram chats and
/// users come from the environment (`IntakeConfig::with_telegram`).
pub fn intake_config(tables: &Tables) -> Result<IntakeConfig, String> {
    let intake = &tables.intake;
    let mut config = IntakeConfig {
        allowed_repos: super::board::allowed_repos(tables)?,
        ..IntakeConfig::default()
    };
    if let Some(repo) = &intake.default_repo {
        config.default_repo = Some(repo_value(repo, "intake.default_repo")?);
    }
    config.github_label = string(&intake.github.label, "intake.github.label")?;
    config.github_associations = intake
        .github
        .associations
        .iter()
        .map(|s| s.to_ascii_uppercase())
        .collect();
    if let Some(login) = &intake.github.bot_login {
        config.github_bot_login = Some(string(login, "intake.github.bot_login")?);
    }
    config.linear_state = string(&intake.linear.state, "intake.linear.state")?;
    config.linear_label = string(&intake.linear.label, "intake.linear.label")?;
    config.linear_skip_labels = intake.linear.skip_labels.iter().cloned().collect();
    let states = &tables.linear.states;
    config.linear_work_states = work_states(
        [
            &states.in_progress,
            &states.in_review,
            &states.done,
            &states.blocked,
        ]
        .into_iter()
        .flat_map(|names| names.0.iter().map(String::as_str)),
    );
    for (team, repo) in &intake.linear.teams {
        let repo = repo_value(repo, &format!("intake.linear.teams.{team}"))?;
        config.linear_teams.insert(team.clone(), repo);
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
