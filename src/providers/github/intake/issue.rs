//! GitHub's `issues` events as intake reads them: the issue through octocrab's model of it (`Issue`: number,
//! title, body, labels, author and association, state, clock), so a field GitHub renames or retypes fails here,
//! in the tests over GitHub's own payloads, rather than reading as "no label" in production. An issue that does
//! not read so is refused with serde's reason, never guessed at.
//!
//! Read by name, on purpose: the repository and the sender, which octocrab keeps outside its payload models
//! (`WebhookEvent`), and which the GitHub poller's bodies (`providers/github/poller.rs`) carry as their names only; and the
//! label an `unlabeled` event took off, of which the poller knows only the name. Those are the fields intake needs
//! from them, and nothing else of theirs is read.

use octocrab::models::issues::Issue;
use octocrab::models::AuthorAssociation;
use serde::Deserialize;
use serde_json::Value;

use crate::board::Draft;
use crate::intake::rules::{
    agent_label, asks_for_plan, ignore, no_planner_reason, take_line, ticket_draft, Decision,
    IntakeConfig, DONE_WHEN,
};
use crate::tasks::{GithubRef, Links, RepoName, Spec, ValueError, GITHUB_ISSUE};

/// An `issues` event (`opened`, `labeled`, `closed`, …; the action comes from the event's type).
#[derive(Clone, Debug, Deserialize)]
pub struct IssuesEvent {
    pub issue: Issue,
    /// The label an `unlabeled` (or `labeled`) event is about, by name.
    #[serde(default)]
    pub label: Option<Named>,
    pub repository: Repository,
    #[serde(default)]
    pub sender: Option<Login>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Named {
    pub name: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Repository {
    pub full_name: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Login {
    pub login: String,
}

impl IssuesEvent {
    /// The event, or why it does not read as GitHub's `issues` event (serde's words: the field and what it found).
    pub fn read(data: &Value) -> Result<Self, String> {
        Self::deserialize(data).map_err(|e| {
            format!("an issues event that does not read as GitHub's issues event: {e}")
        })
    }

    pub fn labels(&self) -> Vec<&str> {
        self.issue.labels.iter().map(|l| l.name.as_str()).collect()
    }
}

/// Whether a body that did not read as GitHub's still names `label` among its issue's labels.
fn names_label(data: &Value, label: &str) -> bool {
    data["issue"]["labels"]
        .as_array()
        .is_some_and(|labels| labels.iter().any(|l| l["name"].as_str() == Some(label)))
}

/// GitHub's own spelling of an author association (`MEMBER`), as `[intake.github] associations` lists it; none
/// given reads as `NONE`.
pub fn association_name(association: Option<&AuthorAssociation>) -> String {
    association
        .and_then(|a| serde_json::to_value(a).ok())
        .and_then(|a| a.as_str().map(str::to_owned))
        .unwrap_or_else(|| "NONE".to_owned())
}

/// `, `-joined associations tasks may come from, for a refusal.
pub fn trusted(config: &super::Config<'_>) -> String {
    config
        .own
        .associations
        .iter()
        .cloned()
        .collect::<Vec<_>>()
        .join(", ")
}

/// `github.issues.opened`, `labeled`, `reopened`: the task (or plan) an issue labeled for pidevops by a trusted
/// author becomes, or why not.
pub fn github_issue(data: &Value, config: &super::Config<'_>) -> Decision {
    let event = match IssuesEvent::read(data) {
        Ok(event) => event,
        // Refused, saying why, when it names the intake label; any other unreadable body is no more intake's
        // business than any other unlabeled issue.
        Err(reason) if names_label(data, &config.own.label) => return ignore(reason),
        Err(_) => return Decision::NotIntake,
    };
    let labels = event.labels();
    if !labels.contains(&config.own.label.as_str()) {
        // Most issues are not meant for an agent; that is not worth an audit record.
        return Decision::NotIntake;
    }
    let sender = event.sender.as_ref().map_or("", |s| s.login.as_str());
    if config
        .own
        .bot_login
        .as_deref()
        .is_some_and(|bot| bot.eq_ignore_ascii_case(sender))
    {
        return ignore(format!("caused by pidevops's own account {sender}"));
    }
    if let Err(e) = agent_label(&labels) {
        return ignore(format!("the issue cannot become a task: {e}"));
    }
    let association = association_name(event.issue.author_association.as_ref());
    if !config.own.associations.contains(&association) {
        return ignore(format!(
            "{} is {association} on the repository; tasks come only from {}",
            event.issue.user.login,
            trusted(config)
        ));
    }
    match github_issue_draft(&event.repository.full_name, &event.issue, config) {
        Ok((key, draft)) => Decision::Create {
            key,
            draft: Box::new(draft),
        },
        Err(reason) => ignore(reason),
    }
}

/// The task (or plan) `issue` of `repo` becomes, under its intake key `github:owner/name#12`, or why it cannot:
/// its labels (`agent:`, `[plans] label`), title and body, the repository allowed. Who asked is the caller's
/// business (the issue's author for a label, the commenter for a comment).
pub fn github_issue_draft(
    repo: &str,
    issue: &Issue,
    config: &IntakeConfig,
) -> Result<(String, Draft), String> {
    let labels: Vec<&str> = issue.labels.iter().map(|l| l.name.as_str()).collect();
    let plan = asks_for_plan(&labels, config);
    let agent = agent_label(&labels).map_err(|e| format!("the issue cannot become a task: {e}"))?;
    let built = (|| -> Result<(String, Draft), ValueError> {
        let repo: RepoName = repo.parse()?;
        let number = issue.number;
        let body = issue.body.as_deref().unwrap_or_default();
        let (done_when, scope) = take_line(body, DONE_WHEN);
        let spec = Spec::new(&issue.title, scope, done_when.unwrap_or_default())?;
        let links = Links::default().with(GITHUB_ISSUE, &GithubRef::new(repo.clone(), number)?);
        let key = format!("github:{repo}#{number}");
        let draft = ticket_draft(plan, agent, repo, spec, links);
        // GitHub's clock for this version of the issue (whole seconds): deliveries arrive out of order.
        Ok((
            key,
            Draft {
                ticket_version: Some(issue.updated_at),
                ..draft
            },
        ))
    })();
    let (key, draft) = built.map_err(|e| format!("the issue cannot become a task: {e}"))?;
    // A GitLab project of the same name is not this repository: its work comes from GitLab alone.
    if let Some(refusal) = config.host_refusal(&draft.repo, crate::domain::Source::Github) {
        return Err(format!("the issue cannot become a task: {refusal}"));
    }
    match config.allowed_repos.check(&draft.repo) {
        Ok(()) if plan && !config.planner => {
            Err(no_planner_reason("the issue cannot become a plan"))
        }
        Ok(()) => Ok((key, draft)),
        Err(refused) => Err(format!("the issue cannot become a task: {refused}")),
    }
}
