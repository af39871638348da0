//! GitHub's intake rules, pure: which of its events become tasks (or plans), withdraw one, or address pidevops in a
//! comment, and why the others do not. Built with its settings by `providers::intake_rules` ([`rules`]); intake
//! calls them for every event of source `github` and acts on the [`Decision`].
//!
//! - `issue.rs`: `issues` `opened`, `labeled`, `reopened`: the task an issue labeled for pidevops becomes;
//! - `closed`, `deleted`, `unlabeled` (here): the withdrawal of its task (`intake/rules/withdrawal.rs`'s terms);
//! - `comment.rs`: `issue_comment` `created` and `edited`: a comment addressed to pidevops, or why not.

pub mod comment;
pub mod issue;

use serde_json::Value;

use crate::domain::Source;
use crate::intake::rules::{ignore, Decision, Payload, ProviderRules, RuleConfig, Withdrawal};
use crate::providers::github::settings::GithubIntake;
use crate::tasks::RepoName;
use issue::{github_issue, IssuesEvent};

/// What GitHub's rules decide with: intake's shared settings and `[intake.github]`.
pub type Config<'a> = RuleConfig<'a, GithubIntake>;

/// Github's intake rules, with its `[intake.github]` (`providers::intake_rules` builds them).
pub fn rules(own: GithubIntake) -> ProviderRules<GithubIntake> {
    ProviderRules {
        source: Source::Github,
        own,
        reads,
        decide,
    }
}

/// The types [`decide`] reads: issues and their comments (never pull requests, pushes or CI news).
pub fn reads(event_type: &str) -> bool {
    event_type.starts_with("github.issues.") || event_type.starts_with("github.issue_comment.")
}

/// Decides what intake does with GitHub's event `event_type` (`github.issues.opened`, …).
pub fn decide(event_type: &str, data: &Payload<'_>, config: &Config<'_>) -> Decision {
    match event_type {
        "github.issues.opened" | "github.issues.labeled" | "github.issues.reopened" => {
            github_issue(&data.read(), config)
        }
        "github.issues.closed" | "github.issues.deleted" | "github.issues.unlabeled" => {
            github_withdrawal(&event_type["github.issues.".len()..], &data.read(), config)
        }
        "github.issue_comment.created" => comment::created(&data.read(), config),
        "github.issue_comment.edited" => comment::edited(&data.read()),
        "github.issue_comment.deleted" => ignore("a deleted comment changes nothing"),
        _ => Decision::NotIntake,
    }
}

/// `github.issues.closed`, `deleted`, `unlabeled` (`action`): a withdrawal of the issue's task, keyed like the
/// task was made (`github:owner/name#n`), or not intake's business. An event that does not read as GitHub's is
/// refused, saying why: a withdrawal is never guessed from a payload that cannot be read. Its clock:
/// `issue.updated_at`.
pub fn github_withdrawal(action: &str, data: &Value, config: &Config<'_>) -> Decision {
    let event = match IssuesEvent::read(data) {
        Ok(event) => event,
        Err(reason) => return ignore(reason),
    };
    let Ok(repo) = event.repository.full_name.parse::<RepoName>() else {
        return Decision::NotIntake;
    };
    let number = event.issue.number;
    if number == 0 {
        return Decision::NotIntake;
    }
    let label = config.own.label.as_str();
    let (why, reason) = match action {
        "closed" => (
            Withdrawal::Closed,
            format!("{repo}#{number} was closed on GitHub"),
        ),
        "deleted" => (
            Withdrawal::Closed,
            format!("{repo}#{number} was deleted on GitHub"),
        ),
        "unlabeled" => {
            let removed = event.label.as_ref().map(|l| l.name.as_str());
            if event.labels().contains(&label) && removed != Some(label) {
                // Another label came off; the issue still asks for the work.
                return Decision::NotIntake;
            }
            (
                Withdrawal::Unasked,
                format!("{repo}#{number} no longer carries the {label:?} label"),
            )
        }
        _ => return Decision::NotIntake,
    };
    Decision::Withdraw {
        key: format!("github:{repo}#{number}"),
        reason,
        why,
        ticket_version: Some(event.issue.updated_at),
    }
}
