//! GitLab's intake rules, pure: which of its events become tasks (or plans), withdraw one, or are a follow-up,
//! and why the others do not. Built with `[intake.gitlab]` by `providers::intake_rules` ([`rules`]).
//!
//! - `gitlab.issue.open`, `reopen`, and `update` adding the label: an issue carrying `[intake.gitlab] label` in an
//!   allowed GitLab repository becomes the task `gitlab:<project path>#<iid>`, when its author asks and is
//!   trusted. GitLab's hooks carry no access level and name the issue's author only by id, so trust is
//!   `[intake.gitlab] trusted_users` and the one who asks (the hook's `user`) must be the author: an issue a
//!   trusted person labels for a stranger is refused, as GitHub refuses a stranger's issue;
//! - `gitlab.issue.close`, and `update` taking the label off: the withdrawal of its task (`Withdrawal`'s terms,
//!   GitHub's too), by the issue's clock (`updated_at`);
//! - `gitlab.note` on an issue or a merge request, `/pidevops …` or an @-mention of `bot_username` by a trusted
//!   user: intake's comment ([`HOST`]), as GitHub's comments are: a follow-up or an answer for the issue's task (or
//!   the merge request's, when it is the one pidevops recorded for it), or `/pidevops retry | cancel | approve |
//!   status`, run once per note and answered by `effects:gitlab`; a stranger's is recorded as ignored.

use serde_json::Value;

use crate::domain::Source;
use crate::intake::rules::comment::{
    strip_mentions, Ask, CodeHost, Comment, CommentCommand, ReviewRequest,
};
use crate::intake::rules::{
    agent_label, asks_for_plan, ignore, no_planner_reason, take_line, ticket_draft, Decision,
    Payload, ProviderRules, RuleConfig, Withdrawal, DONE_WHEN,
};
use crate::projectors::tasks::LinkKind;
use crate::providers::gitlab::models::{IssueEvent, NoteEvent};
use crate::providers::gitlab::settings::GitlabIntake;
use crate::tasks::{GitlabIssueRef, Links, RepoName, Spec, GITLAB_ISSUE, GITLAB_MR};

/// What GitLab's rules decide with: intake's shared settings and `[intake.gitlab]`.
pub type Config<'a> = RuleConfig<'a, GitlabIntake>;

/// GitLab's intake rules, with its `[intake.gitlab]`.
pub fn rules(own: GitlabIntake) -> ProviderRules<GitlabIntake> {
    ProviderRules {
        source: Source::Gitlab,
        own,
        reads: crate::intake::rules::every_type,
        decide,
    }
}

/// The event types intake reads; every other is not intake's, and its body is never parsed.
const INTAKE_TYPES: &[&str] = &[
    "gitlab.issue.open",
    "gitlab.issue.reopen",
    "gitlab.issue.update",
    "gitlab.issue.close",
    "gitlab.note",
];

/// Decides what intake does with GitLab's event `event_type` (`gitlab.issue.open`, …).
pub fn decide(event_type: &str, data: &Payload<'_>, config: &Config<'_>) -> Decision {
    if !INTAKE_TYPES.contains(&event_type) {
        return Decision::NotIntake;
    }
    decide_json(event_type, &data.read(), config)
}

/// [`decide`] over the body as JSON.
fn decide_json(event_type: &str, data: &Value, config: &Config<'_>) -> Decision {
    match event_type {
        "gitlab.issue.open" | "gitlab.issue.reopen" => issue(data, config),
        "gitlab.issue.update" => update(data, config),
        "gitlab.issue.close" => withdrawal(data, Withdrawal::Closed, config),
        "gitlab.note" => note(data, config),
        _ => Decision::NotIntake,
    }
}

/// The intake key of a GitLab issue: `gitlab:group/sub/name#23`.
pub fn issue_key(project: &RepoName, iid: u64) -> String {
    format!("gitlab:{project}#{iid}")
}

/// Whether a body that did not read as GitLab's still names `label` among its issue's labels.
fn names_label(data: &Value, label: &str) -> bool {
    data["object_attributes"]["labels"]
        .as_array()
        .is_some_and(|labels| labels.iter().any(|l| l["title"].as_str() == Some(label)))
}

/// An `update`: the label added is an ask, taken off a withdrawal; any other edit is not intake's.
fn update(data: &Value, config: &Config<'_>) -> Decision {
    let label = config.own.label.as_str();
    let Some(change) = data["changes"]["labels"].as_object() else {
        return Decision::NotIntake;
    };
    let had = |side: &str| {
        change
            .get(side)
            .and_then(Value::as_array)
            .is_some_and(|labels| labels.iter().any(|l| l["title"].as_str() == Some(label)))
    };
    match (had("previous"), had("current")) {
        (false, true) => issue(data, config),
        (true, false) => withdrawal(data, Withdrawal::Unasked, config),
        _ => Decision::NotIntake,
    }
}

/// The task (or plan) an issue labeled for pidevops by its trusted author becomes, or why not.
fn issue(data: &Value, config: &Config<'_>) -> Decision {
    let own = config.own;
    let event = match IssueEvent::read(data) {
        Ok(event) => event,
        Err(reason) if names_label(data, &own.label) => return ignore(reason),
        Err(_) => return Decision::NotIntake,
    };
    let labels: Vec<&str> = event.labels().collect();
    if !labels.contains(&own.label.as_str()) {
        return Decision::NotIntake;
    }
    let user = &event.user;
    if own.is_bot(&user.username) {
        return ignore(format!(
            "caused by pidevops's own account {}",
            user.username
        ));
    }
    if let Err(e) = agent_label(&labels) {
        return ignore(format!("the issue cannot become a task: {e}"));
    }
    if !own.trusts(&user.username) {
        return ignore(format!(
            "{} is not in [intake.gitlab] trusted_users; tasks come only from them",
            user.username
        ));
    }
    let issue = &event.object_attributes;
    if issue.author_id != user.id {
        return ignore(format!(
            "{} asked for an issue someone else wrote (author id {}): GitLab's hook names the author only by id, \
             so an issue becomes a task only when its trusted author asks",
            user.username, issue.author_id
        ));
    }
    if issue.state != "opened" {
        // The label added to a closed issue asks for nothing: the issue is over.
        return ignore(format!("the issue is {}", issue.state));
    }
    if issue.confidential {
        return ignore("a confidential issue is not made a task: the board would show its text");
    }
    match draft(&event, &labels, config) {
        Ok((key, draft)) => Decision::Create {
            key,
            draft: Box::new(draft),
        },
        Err(reason) => ignore(format!("the issue cannot become a task: {reason}")),
    }
}

/// The draft and key of `event`'s issue, or why not: its project allowed and on GitLab, its title and
/// description, its labels (`agent:`, `[plans] label`).
fn draft(
    event: &IssueEvent,
    labels: &[&str],
    config: &Config<'_>,
) -> Result<(String, crate::board::Draft), String> {
    let repo = project(event.project.path_with_namespace.as_str(), config)?;
    let issue = &event.object_attributes;
    let plan = asks_for_plan(labels, config);
    if plan && !config.planner {
        return Err(no_planner_reason("the issue cannot become a plan"));
    }
    let agent = agent_label(labels)?;
    let body = issue.description.as_deref().unwrap_or_default();
    let (done_when, scope) = take_line(body, DONE_WHEN);
    let spec =
        Spec::new(&issue.title, scope, done_when.unwrap_or_default()).map_err(|e| e.to_string())?;
    let link = GitlabIssueRef::new(repo.clone(), issue.iid).map_err(|e| e.to_string())?;
    let links = Links::default().with(GITLAB_ISSUE, &link);
    let key = issue_key(&repo, issue.iid);
    let draft = ticket_draft(plan, agent, repo, spec, links);
    // GitLab's clock for this version of the issue: deliveries arrive out of order.
    Ok((
        key,
        crate::board::Draft {
            ticket_version: Some(issue.updated_at),
            ..draft
        },
    ))
}

/// `path` as a repository tasks may be for: a valid name, allowed, and a GitLab one (`[repos] provider`).
fn project(path: &str, config: &Config<'_>) -> Result<RepoName, String> {
    let repo: RepoName = path.parse().map_err(|e| format!("{e}"))?;
    config
        .allowed_repos
        .check(&repo)
        .map_err(|e| e.to_string())?;
    if let Some(refusal) = config.host_refusal(&repo, Source::Gitlab) {
        return Err(refusal);
    }
    Ok(repo)
}

/// The issue's task withdrawn (`why`), keyed as it was made; an event that does not read as GitLab's is refused,
/// saying why: a withdrawal is never guessed.
fn withdrawal(data: &Value, why: Withdrawal, config: &Config<'_>) -> Decision {
    let event = match IssueEvent::read(data) {
        Ok(event) => event,
        Err(reason) => return ignore(reason),
    };
    let Ok(repo) = event.project.path_with_namespace.parse::<RepoName>() else {
        return Decision::NotIntake;
    };
    let iid = event.object_attributes.iid;
    let label = &config.own.label;
    let reason = match why {
        Withdrawal::Closed => format!("{repo}#{iid} was closed on GitLab"),
        Withdrawal::Unasked => format!("{repo}#{iid} no longer carries the {label:?} label"),
    };
    Decision::Withdraw {
        key: issue_key(&repo, iid),
        reason,
        why,
        ticket_version: Some(event.object_attributes.updated_at),
    }
}

/// GitLab as intake's comments know it: what a note does is done as `gitlab`, said to be `on GitLab`, recorded as
/// `conversation.gitlab_note` in `gitlab-note:<project>:<note id>`, and a note on a merge request finds the task
/// whose `gitlab_mr` it is. Stored names: they never change.
pub static HOST: CodeHost = CodeHost {
    source: Source::Gitlab,
    name: "GitLab",
    record: "conversation.gitlab_note",
    stream_prefix: "gitlab-note:",
    pull_request: |links| {
        links.get(GITLAB_MR).map(|mr| ReviewRequest {
            shown: mr.to_string(),
            repo: mr.project,
            number: mr.iid.get(),
        })
    },
    pull_request_kind: LinkKind::GitlabMr,
};

/// The command prefix: a note starting with it is for pidevops even when no bot username is configured.
const PREFIX: &str = "/pidevops";

/// What a note addressed to pidevops says: the text after a leading `/pidevops`, or around an @-mention of the
/// bot. `None`: not for pidevops.
pub fn addressed(note: &str, bot: Option<&str>) -> Option<String> {
    let mentioned = bot.and_then(|bot| strip_mentions(note, bot));
    let text = mentioned.as_deref().unwrap_or(note).trim();
    if let Some(head) = text.get(..PREFIX.len()) {
        let rest = &text[PREFIX.len()..];
        if head.eq_ignore_ascii_case(PREFIX)
            && (rest.is_empty() || rest.starts_with(char::is_whitespace))
        {
            return Some(rest.trim().to_owned());
        }
    }
    mentioned
}

/// What an addressed note asks: a command when its first word names one (`retry`, `cancel`, `approve`,
/// `status`; the rest of its line the reason), else its words (a follow-up or an answer); nothing after the
/// prefix or mention asks nothing, and the reply lists the commands.
pub fn asked(note: &str, bot: Option<&str>) -> Option<Ask> {
    let text = addressed(note, bot)?;
    let line = text.lines().next().unwrap_or_default().trim();
    let (word, reason) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    if let Some(command) = CommentCommand::ALL
        .into_iter()
        .find(|c| c.name().eq_ignore_ascii_case(word))
    {
        let reason = Some(reason.trim().to_owned()).filter(|r| !r.is_empty());
        return Some(Ask::Command { command, reason });
    }
    Some(if text.is_empty() {
        Ask::Unknown(String::new())
    } else {
        Ask::Text(text)
    })
}

/// A note on an issue or a merge request, addressed to pidevops (`/pidevops …` or an @-mention of
/// `bot_username`) by a trusted user: intake's comment (a follow-up, the answer to a question, or
/// `/pidevops retry | cancel | approve | status`); else why not. Notes not addressed to pidevops are not intake's
/// (a review note on pidevops's own merge request is the reactions' to read).
fn note(data: &Value, config: &Config<'_>) -> Decision {
    let own = config.own;
    let bot = own.bot_username.as_deref();
    let event = match NoteEvent::read(data) {
        Ok(event) => event,
        Err(reason) => {
            let text = data["object_attributes"]["note"]
                .as_str()
                .unwrap_or_default();
            return match addressed(text, bot) {
                Some(_) => ignore(reason),
                None => Decision::NotIntake,
            };
        }
    };
    let attributes = &event.object_attributes;
    if attributes.system {
        return Decision::NotIntake;
    }
    let Some(asked) = asked(&attributes.note, bot) else {
        return Decision::NotIntake;
    };
    let user = &event.user;
    if own.is_bot(&user.username) {
        return ignore("pidevops's own note");
    }
    if attributes.action.as_deref().is_some_and(|a| a != "create") {
        return ignore("an edited note is never run again");
    }
    let (number, pull_request) = match (
        attributes.noteable_type.as_str(),
        &event.issue,
        &event.merge_request,
    ) {
        ("Issue", Some(issue), _) => (issue.iid, false),
        ("MergeRequest", _, Some(mr)) => (mr.iid, true),
        (other, _, _) => {
            return ignore(format!(
                "a note on a {other} is not for pidevops: only issues and merge requests are"
            ))
        }
    };
    if !own.trusts(&user.username) || attributes.author_id != user.id {
        return ignore(format!(
            "{} is not in [intake.gitlab] trusted_users: their note changes nothing",
            user.username
        ));
    }
    let repo = match project(&event.project.path_with_namespace, config) {
        Ok(repo) => repo,
        Err(reason) => return ignore(format!("the note cannot reach a task: {reason}")),
    };
    // A GitLab issue becomes a task by its label; a note never makes one (the note's hook carries too little of
    // the issue to draft it from, and a stranger's label must not be bypassed).
    let draft = (!pull_request).then(|| {
        Err(format!(
            "a GitLab issue becomes a task when its trusted author labels it {:?}",
            own.label
        ))
    });
    Decision::Comment(Box::new(Comment {
        host: &HOST,
        repo,
        number,
        pull_request,
        id: attributes.id,
        login: user.username.clone(),
        ask: asked,
        draft,
    }))
}

#[cfg(test)]
mod tests;
