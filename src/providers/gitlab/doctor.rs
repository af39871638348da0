//! GitLab's lines in `doctor`: its REST API with `GITLAB_TOKEN` and whose the token is; then, for each GitLab
//! project, whether the token's user can push and open merge requests there (Developer access or more: a
//! failure if not), and whether each `[intake.gitlab] trusted_users` name is a member with Developer access (a
//! warning if not: intake trusts the list, and doctor says where the list and GitLab disagree). Read-only calls,
//! each bounded.

use super::client::GitlabClient;
use super::settings::GitlabSettings;
use crate::config::Settings;
use crate::providers::{within_10s, CheckLine, CheckState};

/// GitLab's REST API at `GITLAB_URL` with `GITLAB_TOKEN`, and the access of the token and of the trusted users.
pub async fn check(settings: &Settings) -> Vec<CheckLine> {
    let label = "gitlab api";
    let gitlab = GitlabSettings::of(settings);
    let Some(token) = &gitlab.token else {
        return vec![CheckLine::new(
            label,
            CheckState::Disabled,
            "GITLAB_TOKEN is not set; GitLab hears nothing back",
        )];
    };
    let url = &gitlab.url;
    let client = match GitlabClient::new(url, token) {
        Ok(client) => client,
        Err(e) => return vec![CheckLine::answered(label, url, Err(e))],
    };
    let user = within_10s(client.current_user()).await;
    let mut lines = vec![CheckLine::answered(
        label,
        url,
        user.as_ref()
            .map(|(_, name)| format!("the token is @{name}'s"))
            .map_err(Clone::clone),
    )];
    if let Ok((id, name)) = user {
        for project in &gitlab.projects {
            lines.push(token_access(&client, project, id, &name).await);
            lines.extend(trusted_access(&client, &gitlab, project).await);
        }
    }
    lines
}

/// Whether the token's user (`id`, `@name`) has Developer access to `project`.
async fn token_access(
    client: &GitlabClient,
    project: &crate::tasks::RepoName,
    id: u64,
    name: &str,
) -> CheckLine {
    let label = format!("gitlab access {project}");
    let cannot = "pidevops cannot push or open merge requests there";
    match within_10s(client.member(project, id)).await {
        Ok(Some(access)) if access.developer() => CheckLine::new(
            label,
            CheckState::Pass,
            format!("@{name} is {} there", access.role()),
        ),
        Ok(Some(access)) => CheckLine::new(
            label,
            CheckState::Fail,
            format!(
                "@{name} is only {} (Developer or more needed): {cannot}",
                access.role()
            ),
        ),
        Ok(None) => CheckLine::new(
            label,
            CheckState::Fail,
            format!("@{name} is not a member: {cannot}"),
        ),
        Err(e) => CheckLine::new(label, CheckState::Fail, e),
    }
}

/// A warning for each trusted user who is not a member of `project` with Developer access.
async fn trusted_access(
    client: &GitlabClient,
    gitlab: &GitlabSettings,
    project: &crate::tasks::RepoName,
) -> Vec<CheckLine> {
    let label = format!("gitlab trusted {project}");
    let mut lines = Vec::new();
    for user in &gitlab.intake.trusted_users {
        let why = match within_10s(client.member_named(project, user)).await {
            Ok(Some(access)) if access.developer() => continue,
            Ok(Some(access)) => format!("only {}", access.role()),
            Ok(None) => "not a member".to_owned(),
            Err(e) => format!("not known ({e})"),
        };
        lines.push(CheckLine::new(
            label.clone(),
            CheckState::Warn,
            format!(
                "[intake.gitlab] trusted_users names {user}, who is {why} there (Developer or more expected): \
                 intake trusts them all the same"
            ),
        ));
    }
    lines
}
