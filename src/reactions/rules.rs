//! What a code host's event on a pidevops branch means for its task, the shape every host's rules answer in. Pure:
//! event type and payload in, a [`Reaction`] out. The task is the branch's (`pidevops/T-7` is T-7's), so no lookup
//! is needed and no other branch is touched. A branch name proves nothing (anyone can push `pidevops/T-1` to a
//! fork), so [`HostRules::admit`] then checks the event against what pidevops recorded for that task
//! ([`Expected`]) before it may move it.
//!
//! Each host's rules are in its provider's folder (GitHub's `providers/github/reactions`, GitLab's
//! `providers/gitlab/reactions.rs`), built with its own settings and handed to [`super::Reactions`] by start-up;
//! this module names none of them.

use futures::future::BoxFuture;
use serde_json::Value;

use crate::domain::Source;
use crate::tasks::{RepoName, TaskId};

/// Longest CI summary or review text carried into a retry's reason (the prompt shows it).
pub const MAX_TEXT: usize = 1500;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reaction {
    /// Not about a pidevops branch, or not a kind of event reactions care about.
    None,
    /// About a pidevops branch, but nothing to do, and why (our own account, a passing check, …).
    Ignore {
        task: TaskId,
        why: String,
    },
    /// A check (run, suite, workflow, pipeline or job) concluded `success` on commit `sha` of the task's branch: a
    /// landing fact if `sha` is the commit pidevops last pushed.
    ChecksPassed {
        task: TaskId,
        sha: String,
        name: String,
    },
    /// Someone other than pidevops approved the task's review request at commit `sha` (a landing fact, once
    /// `admit` found them trusted and `sha` is the commit pidevops last pushed).
    Approved {
        task: TaskId,
        by: String,
        sha: String,
    },
    /// `by`'s review was dismissed (or approval taken back): an approval of theirs no longer counts.
    ReviewDismissed {
        task: TaskId,
        by: String,
    },
    /// CI failed on commit `sha` of the task's branch.
    ChecksFailed {
        task: TaskId,
        sha: String,
        summary: String,
    },
    /// A review that asks for more: changes requested, or comments (its line comments come as their own
    /// events, in no promised order). One review sends the task back once, with its body and its line comments.
    Reviewed {
        task: TaskId,
        review: u64,
        by: String,
        changes_requested: bool,
        body: String,
    },
    /// A reviewer's line comment, with where it is: handed to the next attempt, which its review sends back (one
    /// outside any review sends it back itself).
    ReviewComment {
        task: TaskId,
        comment: LineComment,
    },
    Merged {
        task: TaskId,
        by: String,
    },
    ClosedUnmerged {
        task: TaskId,
        by: String,
    },
    /// The host's merge queue took the review request out without merging it (GitHub's `dequeued`, with its
    /// reason: a failed check on the queue's merge group, a conflict, a person; GitLab's merge train, which says
    /// nothing: `gitlab_poller` finds its car gone): the merge asked for will not happen. Worded for a person by
    /// [`HostRules::dequeued`].
    Dequeued {
        task: TaskId,
        reason: String,
    },
}

impl Reaction {
    /// The task a reaction would move; none for `None` and `Ignore`.
    pub fn acting_on(&self) -> Option<TaskId> {
        match self {
            Self::None | Self::Ignore { .. } => None,
            Self::ChecksFailed { task, .. }
            | Self::ChecksPassed { task, .. }
            | Self::Approved { task, .. }
            | Self::ReviewDismissed { task, .. }
            | Self::Reviewed { task, .. }
            | Self::ReviewComment { task, .. }
            | Self::Merged { task, .. }
            | Self::ClosedUnmerged { task, .. }
            | Self::Dequeued { task, .. } => Some(*task),
        }
    }
}

/// A reviewer's comment on a line of the task's review request, with the diff it is on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineComment {
    pub id: u64,
    /// The review it belongs to: every comment GitHub sends today has one; a GitLab diff note none.
    pub review: Option<u64>,
    pub by: String,
    pub path: String,
    /// The line (or `start_line`-`line` range) in the file as the reviewer saw it; none on an outdated diff.
    pub lines: Option<(u64, u64)>,
    pub body: String,
    /// The end of the diff hunk the comment is on (its last lines, which end at the commented line); empty when
    /// the host sends none.
    pub hunk: String,
}

/// At most this many of a hunk's last lines go into a prompt: they end at the line commented on.
pub const HUNK_LINES: usize = 20;

impl LineComment {
    /// Where it is: `src/a.rs:12` or `src/a.rs:10-12`.
    pub fn place(&self) -> String {
        match self.lines {
            Some((start, end)) if start != end => format!("{}:{start}-{end}", self.path),
            Some((_, line)) => format!("{}:{line}", self.path),
            None => format!("{} (an outdated line)", self.path),
        }
    }

    /// The follow-up an agent reads: who, where, what, and the diff it is on.
    pub fn text(&self) -> String {
        let mut text = format!(
            "Line comment by {} on {}:\n{}",
            self.by,
            self.place(),
            clip(&self.body)
        );
        if !self.hunk.trim().is_empty() {
            text.push_str(&format!("\nOn this diff:\n```diff\n{}\n```", self.hunk));
        }
        text
    }
}

/// What pidevops recorded of a task, which an event about it must match.
#[derive(Clone, Copy, Debug)]
pub struct Expected<'a> {
    pub repo: &'a RepoName,
    /// The review request pidevops opened for it in its repository (a pull request's number, a merge request's
    /// iid: `Task::review_request`), if any.
    pub pr: Option<u64>,
}

/// One code host's reactions: which source's events it reads, what they mean (pure), whether one may move the
/// task it names, and how what it says is keyed and placed. Start-up builds one per host with the host's own
/// settings (who is trusted, its own account, its client).
pub trait HostRules: Send + Sync + std::fmt::Debug {
    /// The source whose events these rules read; also the board's actor for what they do.
    fn source(&self) -> Source;

    /// Whether `decide` reads `event_type` at all: for any other type it asks nothing, and the loop does not
    /// parse the payload (most of a busy log: a 28 KB pull request parsed into a tree was a fifth of the service's
    /// CPU under a 64-sender ingest).
    fn reads(&self, event_type: &str) -> bool;

    /// What `event_type` with `payload` asks of its task.
    fn decide(&self, event_type: &str, payload: &Value) -> Reaction;

    /// Whether an event `decide` tied to a task may move it: from the task's repository, about its own review
    /// request (never a fork's), and a review or comment by someone trusted. `Err` says why not. CI results are
    /// held to the task's last pushed commit by the loop.
    fn admit(
        &self,
        event_type: &str,
        payload: &Value,
        expected: &Expected<'_>,
    ) -> Result<(), String>;

    /// What a failure's event leaves out and the host must be asked for (GitLab's failed jobs' log tails), added
    /// to its summary; asked only for a failure that moves its task, in `repo` (what pidevops recorded). Never an
    /// error and never long: what it could not fetch, it says. None: the event said it all (GitHub).
    fn failure_details<'a>(
        &'a self,
        _repo: &'a RepoName,
        _event_type: &'a str,
        _payload: &'a Value,
    ) -> BoxFuture<'a, Option<String>> {
        Box::pin(async { None })
    }

    /// The head commit a CI result counts for when the event's own commit may not be a head (GitLab's
    /// merged-results pipeline runs on the head merged into its target), as the host says now: asked only for an
    /// admitted `ChecksPassed` or `ChecksFailed` about a task on the board in `repo`. Default: its own commit.
    fn result_head<'a>(
        &'a self,
        _repo: &'a RepoName,
        _event_type: &'a str,
        _payload: &'a Value,
    ) -> BoxFuture<'a, ResultHead> {
        Box::pin(async { ResultHead::Own })
    }

    /// Why a task whose review request the host's merge queue took out ([`Reaction::Dequeued`]'s `reason`) waits
    /// for a person, in the host's words.
    fn dequeued(&self, reason: &str) -> String;

    /// The follow-up key of a review's body (`github:review:<id>`): a redelivery attaches nothing twice.
    fn review_key(&self, review: u64) -> String;

    /// The follow-up key of a line comment (`github:review-comment:<id>`).
    fn comment_key(&self, comment: u64) -> String;

    /// Where the event's words were said, for a follow-up's origin: `acme/app#2`, `group/app!7`.
    fn place(&self, payload: &Value) -> String;
}

/// The head commit a CI result counts for ([`HostRules::result_head`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResultHead {
    /// The event's own commit.
    Own,
    /// This head commit: the host said the result is of it (a merged result made from it).
    Head(String),
    /// None pidevops can check, and why (recorded as ignored).
    Unchecked(String),
    /// The host did not answer now, and why: asked again on the next tick, for a while.
    Unanswered(String),
}

/// Whether review request `number` is the one pidevops opened for the task (`ours`, `Expected::pr`); `Err` says
/// why not, naming them as `kind` does: `pull request #` (`pull request #9, not the task's #2`), `merge request !`.
pub fn own_request(ours: Option<u64>, number: u64, kind: &str) -> Result<(), String> {
    let sigil = kind.chars().last().unwrap_or('#');
    match ours {
        None => Err(format!(
            "{kind}{number}, but pidevops opened none for this task"
        )),
        Some(ours) if ours != number => {
            Err(format!("{kind}{number}, not the task's {sigil}{ours}"))
        }
        Some(_) => Ok(()),
    }
}

/// The task whose branch this is: `pidevops/T-7` → T-7; any other branch → none.
pub fn task_of(branch: &str) -> Option<TaskId> {
    branch.strip_prefix("pidevops/")?.parse().ok()
}

/// Text cut to [`MAX_TEXT`] characters, trimmed.
pub fn clip(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(MAX_TEXT) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}
