//! Which webhook events become tasks (or plans), and why the others do not. Pure: an event and the configuration
//! in, a decision out. Each provider's rules live in its folder (`providers/<name>/intake.rs` or `intake/`) and
//! are handed to intake as [`SourceRules`], one per source, each built with its provider's own settings
//! (`providers::intake_rules`); intake itself names no provider's events. What stays here is what intake
//! consumes: the [`Decision`], the [`IntakeConfig`] (its shared settings), the comment it acts on (`comment.rs`), the terms of a withdrawal (`withdrawal.rs`) and the pure helpers every
//! provider's rules share.
//!
//! The intake key of a decision names the external ticket (`github:acme/api#12`, `linear:<issue id>`,
//! `telegram:<chat>:<message>`), so a ticket delivered twice, seen again by a poller or arriving out of order
//! still makes one task. A ticket that would become a task becomes a plan instead when it also carries
//! `[plans] label` (or is Telegram's `/plan`), under the same key; without a planner profile it is refused,
//! saying so.
//!
//! A ticket that no longer asks for the work (closed, cancelled, deleted, its label removed, moved out of the ready
//! state) is a withdrawal, and one that still does from where its work goes on is a version seen: both carry the
//! ticket's own clock, which the task follows (`rules/withdrawal.rs`).

use serde_json::Value;

use crate::board::{AllowedRepos, Draft};
use crate::domain::Source;
use crate::eventlog::StoredEvent;
use crate::tasks::{AgentName, Links, RepoName, Spec, ValueError};

pub mod comment;
mod withdrawal;
pub use withdrawal::{
    ticket_time, work_state, work_states, Withdrawal, WorkState, DELEGATED_KEY_PREFIX,
    SESSION_STREAM_PREFIX,
};

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
    /// A reply to `to`, a message pidevops sent (Telegram's: a message replying to another, its chat and message
    /// ids as they print): when pidevops sent that message about a task (its record, the first event of
    /// `to.stream()`), the reply is that task's answer (to a question) or follow-up; `refusal` says why its sender
    /// may not. A provider with threads (Slack's replies to pidevops's messages) decides one the same way.
    Reply {
        /// Boxed: the other decisions are smaller.
        to: Box<crate::domain::effect::MessageRef>,
        text: String,
        origin: crate::tasks::FollowUpOrigin,
        refusal: Option<String>,
    },
    /// Stop the task of `key` now, its run too (a Linear agent session's `stop` signal).
    Stop { key: String, reason: String },
    /// A comment addressed to pidevops by a trusted author on a code host (GitHub's, read by
    /// `providers/github/intake/comment.rs`): intake finds its task by the issue or pull request it is on, and
    /// records what it did in the comment's stream, once.
    Comment(Box<comment::Comment>),
    /// An edited comment: never run again; intake records whether it ran when it was created (its `stream`).
    CommentEdited { stream: String, id: u64 },
    /// Not something intake looks at (a push, a ping, our own events).
    NotIntake,
}

/// A decision key naming a Linear agent session rather than its issue: `linear-session:<session id>`.
pub const SESSION_KEY_PREFIX: &str = "linear-session:";

/// Intake's own settings, which every provider's rules share (`[intake]`, `[repos]`, `[plans]`, `[dispatch]`;
/// config reads them). A provider's own intake settings (its labels, who may command) are its own, held by its
/// rules ([`SourceRules`]) and handed to them with these as a [`RuleConfig`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntakeConfig {
    pub default_repo: Option<RepoName>,
    /// `[repos]` and `[intake] allow_repos`: a ticket for any other repository is refused.
    pub allowed_repos: AllowedRepos,
    /// `[plans] label`: an issue that would become a task becomes a plan when it also carries this label.
    pub plan_label: String,
    /// Whether `[dispatch] planner` names a profile: without a planner, a plan asked for is refused, saying why,
    /// rather than made to wait for a run that can never start.
    pub planner: bool,
    /// `[repos."…"] provider` where it names a code host other than GitHub: a repository's issues become tasks
    /// only from its own host, so a GitHub issue cannot make work for a GitLab project of the same name.
    pub code_hosts: std::collections::BTreeMap<RepoName, Source>,
}

impl Default for IntakeConfig {
    fn default() -> Self {
        Self {
            default_repo: None,
            allowed_repos: AllowedRepos::default(),
            plan_label: "pidevops:plan".to_owned(),
            planner: false,
            code_hosts: std::collections::BTreeMap::new(),
        }
    }
}

impl IntakeConfig {
    /// The code host `repo` lives on: its `[repos] provider`, GitHub when it names none.
    pub fn hosted_on(&self, repo: &RepoName) -> Source {
        self.code_hosts.get(repo).copied().unwrap_or(Source::Github)
    }

    /// Why an issue of `host` cannot make work for `repo`, if it cannot: `repo` lives on another host.
    pub fn host_refusal(&self, repo: &RepoName, host: Source) -> Option<String> {
        let home = self.hosted_on(repo);
        (home != host).then(|| {
            format!(
                "{repo} is a {home} repository ([repos] provider): its issues are taken from {home} only, not {host}"
            )
        })
    }
}

/// One source's intake rules, built by its provider from its own settings (`providers::intake_rules`): what
/// intake does with an event of [`Self::source`] (its type, its body read on demand).
pub trait SourceRules: Send + Sync + std::fmt::Debug {
    /// The source whose events these rules decide.
    fn source(&self) -> Source;

    /// Whether `decide` reads an event of this type at all: intake's reader ships no other body (a busy log is
    /// mostly pull requests and CI news, tens of KB each, that no intake rule reads).
    fn reads(&self, event_type: &str) -> bool;

    /// What intake does with an event of this source.
    fn decide(&self, event_type: &str, data: &Payload<'_>, config: &IntakeConfig) -> Decision;
}

/// What one provider's rules decide with: intake's shared settings (reached through it, as a `&IntakeConfig`)
/// and the provider's own (`own`).
#[derive(Clone, Copy, Debug)]
pub struct RuleConfig<'a, T> {
    pub shared: &'a IntakeConfig,
    pub own: &'a T,
}

/// A provider's rules: its `decide`, with its own settings. The one [`SourceRules`] every provider registers.
#[derive(Clone, Debug)]
pub struct ProviderRules<T> {
    pub source: Source,
    pub own: T,
    /// Which event types `decide` is asked about ([`every_type`] unless the provider narrows it); any other is
    /// [`Decision::NotIntake`] without a look.
    pub reads: fn(event_type: &str) -> bool,
    pub decide: fn(event_type: &str, data: &Payload<'_>, config: &RuleConfig<'_, T>) -> Decision,
}

/// [`ProviderRules::reads`] for a provider whose rules may read any of its event types.
pub fn every_type(_event_type: &str) -> bool {
    true
}

impl<T: Send + Sync + std::fmt::Debug> SourceRules for ProviderRules<T> {
    fn source(&self) -> Source {
        self.source
    }

    fn reads(&self, event_type: &str) -> bool {
        (self.reads)(event_type)
    }

    fn decide(&self, event_type: &str, data: &Payload<'_>, config: &IntakeConfig) -> Decision {
        // Checked here, not by each provider: an event the reader shipped without its body is never decided.
        if !self.reads(event_type) {
            return Decision::NotIntake;
        }
        let config = RuleConfig {
            shared: config,
            own: &self.own,
        };
        (self.decide)(event_type, data, &config)
    }
}

impl<T> std::ops::Deref for RuleConfig<'_, T> {
    type Target = IntakeConfig;

    fn deref(&self) -> &IntakeConfig {
        self.shared
    }
}

/// An event's body, read as JSON only when a rule asks for it: most events are no rule's business.
pub struct Payload<'a> {
    event: &'a StoredEvent,
}

impl Payload<'_> {
    /// The body as JSON; `Null` when it does not parse (the rules refuse what they cannot read).
    pub fn read(&self) -> Value {
        serde_json::from_str::<Value>(self.event.data_json().get()).unwrap_or(Value::Null)
    }
}

/// Decides what intake does with `event`: the rules of its source, or [`Decision::NotIntake`] when none are
/// registered for it.
pub fn decide(
    event: &StoredEvent,
    config: &IntakeConfig,
    rules: &[Box<dyn SourceRules>],
) -> Decision {
    match of_source(rules, &event.source) {
        Some(rules) => rules.decide(&event.event_type, &Payload { event }, config),
        None => Decision::NotIntake,
    }
}

/// The rules that decide the events of `source`, if a provider registered some.
pub fn of_source<'a>(
    rules: &'a [Box<dyn SourceRules>],
    source: &str,
) -> Option<&'a dyn SourceRules> {
    rules
        .iter()
        .find(|r| r.source().as_str() == source)
        .map(|r| r.as_ref())
}

/// A refusal: the candidate is recorded with `reason`, so it is visible.
pub fn ignore(reason: impl Into<String>) -> Decision {
    Decision::Ignore {
        reason: reason.into(),
    }
}

/// A plan asked for where none can be made: said once, in the refusal, with the key that would allow it.
pub fn no_planner(what: &str) -> Decision {
    ignore(no_planner_reason(what))
}

/// [`no_planner`]'s reason, for a rule that returns it rather than a decision.
pub fn no_planner_reason(what: &str) -> String {
    format!(
        "{what}: it asks for a plan, and no planner profile is configured (set [dispatch] planner in \
         pidevops.toml)"
    )
}

/// Whether `labels` ask for a plan rather than a task (`[plans] label`, matched exactly like the intake labels).
pub fn asks_for_plan(labels: &[&str], config: &IntakeConfig) -> bool {
    labels.contains(&config.plan_label.as_str())
}

/// What a ticket becomes: a plan when it asks for one (its spec is the goal; its agent is the planner, whatever an
/// `agent:` label says), else a task for `agent` (or the default profile).
pub fn ticket_draft(
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
pub fn agent_label(labels: &[&str]) -> Result<Option<AgentName>, String> {
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

/// The value after `prefix` on the first line that starts with it (case-insensitive), trimmed.
pub fn line_value(text: &str, prefix: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let line = line.trim();
        (line.len() > prefix.len() && line[..prefix.len()].eq_ignore_ascii_case(prefix))
            .then(|| line[prefix.len()..].trim().to_owned())
            .filter(|v| !v.is_empty())
    })
}

/// The prefix of a ticket's "Done when:" line (any case): what the task is done when.
pub const DONE_WHEN: &str = "done when:";

/// The value of the line [`line_value`] finds, and the text without that line: a directive read out of a ticket
/// is not also part of its Scope (the prompt and the pull request would say it twice).
pub fn take_line(text: &str, prefix: &str) -> (Option<String>, String) {
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

#[cfg(test)]
mod tests;
