//! Which webhook events become tasks (or plans), and why the others do not. Pure: an event and the configuration
//! in, a decision out. The intake key of a decision names the external ticket (`github:acme/api#12`,
//! `linear:<issue id>`, `telegram:<chat>:<message>`), so a ticket delivered twice, seen again by a poller or
//! arriving out of order still makes one task. A ticket that would become a task becomes a plan instead when it
//! also carries `[plans] label` (or is Telegram's `/plan`), under the same key; without a planner profile it is
//! refused, saying so.
//!
//! A ticket that no longer asks for the work (closed, cancelled, deleted, its label removed, moved out of the ready
//! state) is a withdrawal, and one that still does from where its work goes on is a version seen: both carry the
//! ticket's own clock, which the task follows (`rules/withdrawal.rs`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::board::{AllowedRepos, Draft};
use crate::eventlog::StoredEvent;
use crate::tasks::{
    AgentName, LinearIssue, Links, Priority, RepoName, Spec, ValueError, LINEAR_ISSUE,
};

pub mod github_comment;
mod github_issue;
mod telegram;
mod withdrawal;
use github_issue::github_issue;
pub use telegram::{read_update, telegram_refusal, user_id, user_name};
use telegram::{telegram_ids, telegram_message};
use withdrawal::{github_withdrawal, linear_removed, ticket_time, WorkState};
pub use withdrawal::{work_states, Withdrawal, DELEGATED_KEY_PREFIX, SESSION_STREAM_PREFIX};

/// What intake does with one event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Make (or find) the task for this ticket.
    Create { key: String, draft: Box<Draft> },
    /// A candidate that does not qualify: recorded with the reason, so the refusal is visible.
    Ignore { reason: String },
    /// The ticket no longer asks for the work, as of `ticket_version` by its own clock: the task made for it is
    /// withdrawn (`Command::WithdrawTicket`: cancelled before or at work, its run stopped; in review its pull
    /// request decides; an older version than the task's changes nothing). `why` says whether a delegated task
    /// (a Linear agent session's) is withdrawn too.
    Withdraw {
        key: String,
        reason: String,
        why: Withdrawal,
        ticket_version: Option<chrono::DateTime<chrono::Utc>>,
    },
    /// The ticket, as of `ticket_version`, still asks for the work from where its work goes on (pidevops moved it
    /// there, or a person did): no candidate, and no withdrawal; its task notes the version.
    Seen {
        key: String,
        ticket_version: chrono::DateTime<chrono::Utc>,
    },
    /// A follow-up for the task of `key` (a Linear agent session's `prompted`), handed to its next run; the answer
    /// when the task waits for one. `origin` names the message, so a redelivery attaches nothing twice.
    FollowUp {
        key: String,
        text: String,
        origin: Option<crate::tasks::FollowUpOrigin>,
    },
    /// A Telegram message replying to message `to` of `chat`: when pidevops sent that message about a task, the
    /// reply is that task's answer (to a question) or follow-up; `refusal` says why its sender may not.
    TelegramReply {
        chat: i64,
        to: i64,
        text: String,
        origin: crate::tasks::FollowUpOrigin,
        refusal: Option<String>,
    },
    /// Stop the task of `key` now, its run too (a Linear agent session's `stop` signal).
    Stop { key: String, reason: String },
    /// A comment addressed to pidevops by a trusted author (`rules/github_comment.rs`): intake finds its task by
    /// the issue or pull request it is on, and records what it did in the comment's stream, once.
    GithubComment(Box<github_comment::GithubComment>),
    /// An edited comment: never run again; intake records whether it ran when it was created (its `stream`).
    GithubCommentEdited { stream: String, id: u64 },
    /// Not something intake looks at (a push, a ping, our own events).
    NotIntake,
}

/// A decision key naming a Linear agent session rather than its issue: `linear-session:<session id>`.
pub const SESSION_KEY_PREFIX: &str = "linear-session:";

/// Intake settings from `pidevops.toml` (`[intake.github]`, `[intake.linear]`; config reads them) and
/// `TELEGRAM_ALLOWED_CHATS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntakeConfig {
    pub github_label: String,
    pub github_associations: BTreeSet<String>,
    /// pidevops's own GitHub account: what it causes never creates work.
    pub github_bot_login: Option<String>,
    pub linear_state: String,
    pub linear_label: String,
    /// The states pidevops moves Linear issues to (`[linear.states]`, every name, trimmed and lower case): an
    /// issue there has not been withdrawn, whoever moved it.
    pub linear_work_states: BTreeSet<String>,
    pub linear_skip_labels: BTreeSet<String>,
    /// Linear team key → repository.
    pub linear_teams: BTreeMap<String, RepoName>,
    pub default_repo: Option<RepoName>,
    pub telegram_allowed_chats: BTreeSet<i64>,
    /// `TELEGRAM_ALLOWED_USERS`: when set, only these users may command; unset, anyone in an allowed chat may.
    pub telegram_allowed_users: Option<BTreeSet<i64>>,
    /// `[repos]` and `[intake] allow_repos`: a ticket for any other repository is refused.
    pub allowed_repos: AllowedRepos,
    /// `[plans] label`: an issue that would become a task becomes a plan when it also carries this label.
    pub plan_label: String,
    /// Whether `[dispatch] planner` names a profile: without a planner, a plan asked for is refused, saying why,
    /// rather than made to wait for a run that can never start.
    pub planner: bool,
}

impl Default for IntakeConfig {
    fn default() -> Self {
        Self {
            github_label: "pidevops".to_owned(),
            github_associations: ["OWNER", "MEMBER", "COLLABORATOR"]
                .into_iter()
                .map(str::to_owned)
                .collect(),
            github_bot_login: None,
            linear_state: "Ready for Pi-Dev".to_owned(),
            linear_label: "pi-dev:autonomous".to_owned(),
            linear_work_states: work_states(crate::domain::effect::LinearStates::default().names()),
            linear_skip_labels: ["no-code", "manual-action", "legal"]
                .into_iter()
                .map(str::to_owned)
                .collect(),
            linear_teams: BTreeMap::new(),
            default_repo: None,
            telegram_allowed_chats: BTreeSet::new(),
            telegram_allowed_users: None,
            allowed_repos: AllowedRepos::default(),
            plan_label: "pidevops:plan".to_owned(),
            planner: false,
        }
    }
}

impl IntakeConfig {
    /// The allowed Telegram chats and users (`TELEGRAM_ALLOWED_CHATS`, `TELEGRAM_ALLOWED_USERS`, comma-separated
    /// ids).
    pub fn with_telegram(
        mut self,
        allowed_chats: Option<&str>,
        allowed_users: Option<&str>,
    ) -> Result<Self, String> {
        if let Some(chats) = allowed_chats {
            self.telegram_allowed_chats = telegram_ids(chats, "TELEGRAM_ALLOWED_CHATS", "chat")?;
        }
        if let Some(users) = allowed_users {
            self.telegram_allowed_users =
                Some(telegram_ids(users, "TELEGRAM_ALLOWED_USERS", "user")?);
        }
        Ok(self)
    }
}

/// Decides what intake does with `event`.
pub fn decide(event: &StoredEvent, config: &IntakeConfig) -> Decision {
    let data = || serde_json::from_str::<Value>(event.data_json().get()).unwrap_or(Value::Null);
    match event.event_type.as_str() {
        "github.issues.opened" | "github.issues.labeled" | "github.issues.reopened" => {
            github_issue(&data(), config)
        }
        "github.issues.closed" | "github.issues.deleted" | "github.issues.unlabeled" => {
            github_withdrawal(&event.event_type["github.issues.".len()..], &data(), config)
        }
        "github.issue_comment.created" => github_comment::created(&data(), config),
        "github.issue_comment.edited" => github_comment::edited(&data()),
        "github.issue_comment.deleted" => ignore("a deleted comment changes nothing"),
        "telegram.message" => telegram_message(&data(), config),
        t if t.starts_with("linear.Issue.") && t.ends_with(".remove") => linear_removed(&data()),
        t if t.starts_with("linear.Issue.") => linear_issue(&data(), config),
        "linear.AgentSessionEvent.created" => agent_session_created(&data(), config),
        "linear.AgentSessionEvent.prompted" => {
            let data = data();
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
        _ => Decision::NotIntake,
    }
}

fn ignore(reason: impl Into<String>) -> Decision {
    Decision::Ignore {
        reason: reason.into(),
    }
}

/// A plan asked for where none can be made: said once, in the refusal, with the key that would allow it.
fn no_planner(what: &str) -> Decision {
    ignore(no_planner_reason(what))
}

fn no_planner_reason(what: &str) -> String {
    format!(
        "{what}: it asks for a plan, and no planner profile is configured (set [dispatch] planner in \
         pidevops.toml)"
    )
}

/// Whether `labels` ask for a plan rather than a task (`[plans] label`, matched exactly like the intake labels).
fn asks_for_plan(labels: &[&str], config: &IntakeConfig) -> bool {
    labels.contains(&config.plan_label.as_str())
}

/// What a ticket becomes: a plan when it asks for one (its spec is the goal; its agent is the planner, whatever an
/// `agent:` label says), else a task for `agent` (or the default profile).
fn ticket_draft(
    plan: bool,
    agent: Option<AgentName>,
    repo: RepoName,
    spec: Spec,
    links: Links,
) -> Draft {
    if plan {
        Draft::plan(repo, spec, links)
    } else {
        Draft {
            agent,
            ..Draft::new(repo, spec, links)
        }
    }
}

/// The agent profile an `agent:<name>` label asks for; two different ones are a mistake, not a coin toss.
fn agent_label(labels: &[&str]) -> Result<Option<AgentName>, String> {
    let mut asked: Vec<&str> = labels
        .iter()
        .filter_map(|l| l.strip_prefix("agent:"))
        .map(str::trim)
        .collect();
    asked.sort_unstable();
    asked.dedup();
    match asked.as_slice() {
        [] => Ok(None),
        [one] => one
            .parse()
            .map(Some)
            .map_err(|e: ValueError| format!("its agent: label is not valid: {e}")),
        many => Err(format!(
            "it carries {} agent: labels ({}); keep one",
            many.len(),
            many.join(", ")
        )),
    }
}

fn linear_issue(data: &Value, config: &IntakeConfig) -> Decision {
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
    if !labels.contains(&config.linear_label.as_str()) {
        // Never handed to pidevops (the common case), or the label was taken away: a task made for it is
        // withdrawn; without one this changes nothing.
        return withdraw(
            Withdrawal::Unasked,
            format!(
                "{identifier} no longer carries the {:?} label",
                config.linear_label
            ),
        );
    }
    // A payload without a state says nothing about where the issue is: neither creates nor withdraws.
    let Some(state) = issue["state"]["name"].as_str() else {
        return Decision::NotIntake;
    };
    if state != config.linear_state {
        return match (
            withdrawal::work_state(&issue["state"], config),
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
                    config.linear_state
                ),
            ),
        };
    }
    if let Some(skip) = labels
        .iter()
        .find(|l| config.linear_skip_labels.contains(**l))
    {
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
    config: &IntakeConfig,
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
                .and_then(|team| config.linear_teams.get(team))
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

/// The value after `prefix` on the first line that starts with it (case-insensitive), trimmed.
fn line_value(text: &str, prefix: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let line = line.trim();
        (line.len() > prefix.len() && line[..prefix.len()].eq_ignore_ascii_case(prefix))
            .then(|| line[prefix.len()..].trim().to_owned())
            .filter(|v| !v.is_empty())
    })
}

const DONE_WHEN: &str = "done when:";

/// A "Done when:" line in a ticket's text.
fn done_when(text: &str) -> Option<String> {
    line_value(text, DONE_WHEN)
}

/// The value of the line [`line_value`] finds, and the text without that line: a directive read out of a ticket
/// is not also part of its Scope (the prompt and the pull request would say it twice).
fn take_line(text: &str, prefix: &str) -> (Option<String>, String) {
    let mut value = None;
    let kept: Vec<&str> = text
        .lines()
        .filter(|line| {
            if value.is_some() {
                return true;
            }
            value = line_value(line, prefix);
            value.is_none()
        })
        .collect();
    (value, kept.join("\n").trim().to_owned())
}

/// A Linear description as a Scope: without its `repo:` and `Done when:` lines, which pidevops reads itself.
fn linear_scope(description: &str) -> String {
    let (_, rest) = take_line(description, "repo:");
    take_line(&rest, DONE_WHEN).1
}

/// A Linear agent session (someone delegated an issue to pidevops): the issue's task, made now if the issue
/// webhook has not made it already. Both use the issue's key, so they meet on one task.
fn agent_session_created(data: &Value, config: &IntakeConfig) -> Decision {
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

#[cfg(test)]
mod tests;
