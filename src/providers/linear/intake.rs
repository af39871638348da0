//! Linear's intake rules, pure: which of its webhook events become tasks (or plans), withdraw one, follow one up or
//! stop it, and why the others do not. Built with its settings by `providers::intake_rules` ([`rules`]); intake
//! calls them for every event of source `linear` and acts on the [`Decision`].
//!
//! - `Issue` events: the task an issue in the ready state with the intake label becomes (its repository from a
//!   `repo:` label or line, its team, else `intake.default_repo`); cancelled, deleted, unlabeled or moved back, its
//!   withdrawal; moved on to where work goes on, a version seen (`intake/rules/withdrawal.rs`'s terms). Its clock:
//!   `data.updatedAt` (a deletion without one: `archivedAt`).
//! - `AgentSessionEvent` `created`: someone delegated an issue to pidevops, its task (made now if the issue webhook
//!   has not made it already); `prompted`: a follow-up for it, or its stop signal.

use serde_json::Value;

use crate::board::Draft;
use crate::domain::Source;
use crate::intake::rules::{
    agent_label, asks_for_plan, ignore, line_value, no_planner, take_line, ticket_draft,
    ticket_time, work_state, Decision, Payload, ProviderRules, RuleConfig, Withdrawal, WorkState,
    DONE_WHEN, SESSION_KEY_PREFIX,
};
use crate::providers::linear::settings::LinearIntake;
use crate::tasks::{
    AgentName, LinearIssue, Links, Priority, RepoName, Spec, ValueError, LINEAR_ISSUE,
};

/// What Linear's rules decide with: intake's shared settings and `[intake.linear]`.
pub type Config<'a> = RuleConfig<'a, LinearIntake>;

/// Linear's intake rules, with its `[intake.linear]` (`providers::intake_rules` builds them).
pub fn rules(own: LinearIntake) -> ProviderRules<LinearIntake> {
    ProviderRules {
        source: Source::Linear,
        own,
        reads: crate::intake::rules::every_type,
        decide,
    }
}

/// Decides what intake does with Linear's event `event_type` (`linear.Issue.update`, …).
pub fn decide(event_type: &str, data: &Payload<'_>, config: &Config<'_>) -> Decision {
    match event_type {
        t if t.starts_with("linear.Issue.") && t.ends_with(".remove") => {
            linear_removed(&data.read())
        }
        t if t.starts_with("linear.Issue.") => linear_issue(&data.read(), config),
        "linear.AgentSessionEvent.created" => agent_session_created(&data.read(), config),
        "linear.AgentSessionEvent.prompted" => agent_session_prompted(&data.read()),
        _ => Decision::NotIntake,
    }
}

/// `linear.Issue.create`, `update`: the task (or plan) an issue in the ready state with the intake label becomes,
/// its withdrawal, a version seen, or why not.
pub fn linear_issue(data: &Value, config: &Config<'_>) -> Decision {
    let issue = &data["data"];
    let labels: Vec<&str> = issue["labels"]
        .as_array()
        .map(|l| l.iter().filter_map(|l| l["name"].as_str()).collect())
        .unwrap_or_default();
    let identifier = issue["identifier"].as_str().unwrap_or("the issue");
    let key = issue["id"].as_str().map(|id| format!("linear:{id}"));
    let ticket_version = ticket_time(&issue["updatedAt"]);
    let withdraw = |why: Withdrawal, reason: String| match &key {
        Some(key) => Decision::Withdraw {
            key: key.clone(),
            reason,
            why,
            ticket_version,
        },
        None => Decision::NotIntake,
    };
    if issue["state"]["type"].as_str() == Some("canceled") {
        return withdraw(
            Withdrawal::Closed,
            format!("{identifier} was cancelled in Linear"),
        );
    }
    if !labels.contains(&config.own.label.as_str()) {
        // Never handed to pidevops (the common case), or the label was taken away: a task made for it is
        // withdrawn; without one this changes nothing.
        return withdraw(
            Withdrawal::Unasked,
            format!(
                "{identifier} no longer carries the {:?} label",
                config.own.label
            ),
        );
    }
    // A payload without a state says nothing about where the issue is: neither creates nor withdraws.
    let Some(state) = issue["state"]["name"].as_str() else {
        return Decision::NotIntake;
    };
    if state != config.own.state {
        return match (
            work_state(&issue["state"], &config.own.work_states),
            &key,
            ticket_version,
        ) {
            // Where pidevops moves its issues (or a person who works on it): the ticket still asks.
            (WorkState::AtWork, Some(key), Some(version)) => Decision::Seen {
                key: key.clone(),
                ticket_version: version,
            },
            (WorkState::AtWork, _, _) => Decision::NotIntake,
            // Back to the backlog, or any state before work other than the ready one: no longer asked.
            (WorkState::NotReady, _, _) => withdraw(
                Withdrawal::Unasked,
                format!(
                    "{identifier} was moved to {state:?}, out of {:?}",
                    config.own.state
                ),
            ),
        };
    }
    if let Some(skip) = labels.iter().find(|l| config.own.skip_labels.contains(**l)) {
        return ignore(format!("{identifier} carries the skip label {skip:?}"));
    }
    let agent = match agent_label(&labels) {
        Ok(agent) => agent,
        Err(e) => return ignore(format!("{identifier} cannot become a task: {e}")),
    };
    let description = issue["description"].as_str().unwrap_or_default();
    let repo = match linear_repo(issue, &labels, description, config, identifier) {
        Ok(repo) => repo,
        Err(decision) => return decision,
    };
    if let Err(refused) = config.allowed_repos.check(&repo) {
        return ignore(format!("{identifier} cannot become a task: {refused}"));
    }
    let plan = asks_for_plan(&labels, config);
    if plan && !config.planner {
        return no_planner(&format!("{identifier} cannot become a plan"));
    }
    match linear_draft(issue, identifier, description, repo, agent, plan) {
        Ok((key, draft)) => Decision::Create {
            key,
            draft: Box::new(draft),
        },
        Err(e) => ignore(format!("{identifier} cannot become a task: {e}")),
    }
}

/// The issue's repository: a `repo:` label, else a `repo:` line of the description, else its team's, else
/// `intake.default_repo`; `Err`: the decision to record instead.
fn linear_repo(
    issue: &Value,
    labels: &[&str],
    description: &str,
    config: &Config<'_>,
    identifier: &str,
) -> Result<RepoName, Decision> {
    let repo = labels
        .iter()
        .find_map(|l| l.strip_prefix("repo:"))
        .map(|r| r.trim().to_owned())
        .or_else(|| line_value(description, "repo:"))
        .map(|r| r.parse::<RepoName>())
        .or_else(|| {
            issue["team"]["key"]
                .as_str()
                .and_then(|team| config.own.teams.get(team))
                .cloned()
                .map(Ok)
        })
        .or_else(|| config.default_repo.clone().map(Ok));
    match repo {
        Some(Ok(repo)) => Ok(repo),
        Some(Err(e)) => Err(ignore(format!("{identifier} names a repository that is not valid: {e}"))),
        None => Err(ignore(format!(
            "{identifier} names no repository (a repo:owner/name label, a `repo:` line, a team mapping or \
             intake.default_repo)"
        ))),
    }
}

/// The task a qualifying issue becomes, keyed by the issue's id.
fn linear_draft(
    issue: &Value,
    identifier: &str,
    description: &str,
    repo: RepoName,
    agent: Option<AgentName>,
    plan: bool,
) -> Result<(String, Draft), ValueError> {
    let id = issue["id"].as_str().unwrap_or_default();
    let linear = LinearIssue::new(
        id.parse().map_err(|_| ValueError::Empty {
            field: "linear issue id",
        })?,
        identifier,
    )?;
    let spec = Spec::new(
        issue["title"].as_str().unwrap_or_default(),
        linear_scope(description),
        done_when(description).unwrap_or_default(),
    )?;
    // Linear's webhooks send an integer; its schema says Float, so a polled issue's is 2.0.
    let priority = issue["priority"]
        .as_u64()
        .or_else(|| {
            issue["priority"]
                .as_f64()
                .filter(|p| p.fract() == 0.0 && (0.0..=4.0).contains(p))
                .map(|p| p as u64)
        })
        .map(|p| Priority::from_linear(u8::try_from(p).unwrap_or(0)));
    // Linear's own clock for this version of the issue: deliveries and polls can arrive out of order.
    let ticket_version = ticket_time(&issue["updatedAt"]);
    let links = Links::default().with(LINEAR_ISSUE, &linear);
    let draft = ticket_draft(plan, agent, repo, spec, links);
    Ok((
        format!("linear:{id}"),
        Draft {
            priority,
            ticket_version,
            ..draft
        },
    ))
}

/// `linear.Issue.remove`: the issue was deleted.
pub fn linear_removed(data: &Value) -> Decision {
    let issue = &data["data"];
    let identifier = issue["identifier"].as_str().unwrap_or("the issue");
    match issue["id"].as_str() {
        Some(id) => Decision::Withdraw {
            key: format!("linear:{id}"),
            reason: format!("{identifier} was deleted in Linear"),
            why: Withdrawal::Closed,
            ticket_version: ticket_time(&issue["updatedAt"])
                .or_else(|| ticket_time(&issue["archivedAt"])),
        },
        None => Decision::NotIntake,
    }
}

/// A "Done when:" line in a ticket's text.
pub fn done_when(text: &str) -> Option<String> {
    line_value(text, DONE_WHEN)
}

/// A Linear description as a Scope: without its `repo:` and `Done when:` lines, which pidevops reads itself.
pub fn linear_scope(description: &str) -> String {
    let (_, rest) = take_line(description, "repo:");
    take_line(&rest, DONE_WHEN).1
}

/// A Linear agent session (someone delegated an issue to pidevops): the issue's task, made now if the issue
/// webhook has not made it already. Both use the issue's key, so they meet on one task.
pub fn agent_session_created(data: &Value, config: &Config<'_>) -> Decision {
    let session = &data["agentSession"];
    let issue = &session["issue"];
    let Some(issue_id) = session["issueId"].as_str().or_else(|| issue["id"].as_str()) else {
        return ignore("an agent session without an issue");
    };
    let identifier = issue["identifier"].as_str().unwrap_or("the issue");
    let context = data["promptContext"].as_str().unwrap_or_default();
    let title = tag(context, "title")
        .or_else(|| issue["title"].as_str().map(str::to_owned))
        .unwrap_or_default();
    let description = tag(context, "description").unwrap_or_default();
    let repo = match line_value(&description, "repo:")
        .map(|r| r.parse::<RepoName>())
        .or_else(|| config.default_repo.clone().map(Ok))
    {
        Some(Ok(repo)) => match config.allowed_repos.check(&repo) {
            Ok(()) => repo,
            Err(refused) => return ignore(format!("agent session on {identifier}: {refused}")),
        },
        Some(Err(e)) => {
            return ignore(format!(
                "{identifier} names a repository that is not valid: {e}"
            ))
        }
        None => {
            return ignore(format!(
                "agent session on {identifier}: its issue names no repository (a `repo:` line) and \
                 intake.default_repo is not set"
            ))
        }
    };
    let labels = session_labels(issue, context);
    let plan = asks_for_plan(
        &labels.iter().map(String::as_str).collect::<Vec<_>>(),
        config,
    );
    if plan && !config.planner {
        return no_planner(&format!("agent session on {identifier}"));
    }
    let built = (|| -> Result<Draft, ValueError> {
        let linear = LinearIssue::new(
            issue_id.parse().map_err(|_| ValueError::Empty {
                field: "linear issue id",
            })?,
            identifier,
        )?;
        let spec = Spec::new(
            title,
            linear_scope(&description),
            done_when(&description).unwrap_or_default(),
        )?;
        let links = Links::default().with(LINEAR_ISSUE, &linear);
        Ok(if plan {
            Draft::plan(repo, spec, links)
        } else {
            Draft::new(repo, spec, links)
        })
    })();
    match built {
        Ok(draft) => Decision::Create {
            key: format!("linear:{issue_id}"),
            draft: Box::new(draft),
        },
        Err(e) => ignore(format!(
            "agent session on {identifier} cannot become a task: {e}"
        )),
    }
}

/// The text inside `<name>…</name>` in Linear's prompt context.
fn tag(text: &str, name: &str) -> Option<String> {
    tags(text, name).into_iter().next()
}

/// The text inside every `<name>…</name>` in Linear's prompt context, in order.
fn tags(text: &str, name: &str) -> Vec<String> {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(&open).map(|at| at + open.len()) {
        let Some(end) = rest[start..].find(&close).map(|at| start + at) else {
            break;
        };
        found.push(rest[start..end].trim().to_owned());
        rest = &rest[end + close.len()..];
    }
    found
}

/// The labels of an agent session's issue: the session's `created` payload does not carry them as a field, so
/// they are read from its prompt context (`<labels><label>…</label></labels>`), and from `issue.labels` should
/// Linear send them there.
fn session_labels(issue: &Value, context: &str) -> Vec<String> {
    let listed = issue["labels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|label| {
            label
                .as_str()
                .or_else(|| label["name"].as_str())
                .map(str::to_owned)
        });
    let in_context = tags(&tag(context, "labels").unwrap_or_default(), "label");
    listed.chain(in_context).collect()
}

/// `linear.AgentSessionEvent.prompted`: a follow-up for the session's task, or its stop signal.
pub fn agent_session_prompted(data: &Value) -> Decision {
    // The session's issue names the task; a payload without it names the session, which the
    // `linear.session_opened` record maps to its issue (intake resolves `linear-session:` keys).
    let session_key = data["agentSession"]["id"]
        .as_str()
        .map(|id| format!("{SESSION_KEY_PREFIX}{id}"));
    let issue_key = data["agentSession"]["issueId"]
        .as_str()
        .map(|issue| format!("linear:{issue}"));
    let issue = issue_key.or(session_key);
    let issue = issue.as_deref();
    let text = data["agentActivity"]["content"]["body"].as_str();
    if data["agentActivity"]["signal"].as_str() == Some("stop") {
        return match issue {
            Some(key) => Decision::Stop {
                key: key.to_owned(),
                reason: "stopped from Linear (the agent session's stop signal)".to_owned(),
            },
            None => ignore("a stop signal without an issue"),
        };
    }
    // The activity's id names the message: a redelivery (a fresh timestamp, so a new event) is known.
    let origin = data["agentActivity"]["id"].as_str().and_then(|id| {
        let who = data["agentActivity"]["user"]["name"]
            .as_str()
            .or_else(|| data["agentSession"]["creator"]["name"].as_str())
            .unwrap_or("someone");
        crate::tasks::FollowUpOrigin::new(
            format!("linear:activity:{id}"),
            format!("{who} in Linear"),
        )
        .ok()
    });
    match (issue, text) {
        (Some(key), Some(text)) if !text.trim().is_empty() => Decision::FollowUp {
            key: key.to_owned(),
            text: text.to_owned(),
            origin,
        },
        _ => ignore("a prompted agent session event without an issue or a prompt body"),
    }
}
