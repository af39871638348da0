//! What `whatif --config` says: each task the candidate configuration would have treated differently, how, and
//! what that would have spent or saved. A task the candidate treats as the service did is not listed.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::domain::usage::Usage;

/// One difference the candidate makes to a task (or to a candidate intake refused).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// The service made the task; the candidate's intake (or allow-list) would have refused it.
    Ignored { reason: String },
    /// Intake refused the ticket; the candidate would have made a task of it. Nothing ran for it, so what it would
    /// have cost is unknown.
    Created { reason_refused: String },
    /// It ran without a person's approval; the candidate would have waited for one.
    Gated,
    /// It waited for a person's approval; the candidate would have started it without. `waited_s`: how long it
    /// waited (none: it was never approved, and what it would have cost is unknown).
    Ungated { waited_s: Option<i64> },
    /// A run the candidate's budgets would have stopped: before it started, or while it ran (`while_running`,
    /// the moment its usage took a scope over).
    StoppedByBudget {
        run: String,
        at: DateTime<Utc>,
        why: String,
        while_running: bool,
    },
    /// A run a budget stopped that the candidate's budgets would have let finish: what it would then have done is
    /// unknown.
    NotStoppedByBudget { run: String, at: DateTime<Utc> },
    /// pidevops landed its pull request; the candidate would have waited (for a person, approvals, checks).
    NotLanded { why: String },
    /// The candidate would have landed its pull request at `at`; the service did not.
    Landed { at: DateTime<Utc> },
    /// Outbound calls for it (notices, comments, pull requests) the candidate's effect cap would have held back.
    CallsHeld { count: u32, from: DateTime<Utc> },
    /// Calls the service's cap held back that the candidate's would have made.
    CallsSent { count: u32 },
}

/// What some runs spent.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Spend {
    pub runs: u64,
    /// Of those, the runs that reported a cost: below `runs`, the cost is a floor.
    pub costed_runs: u64,
    pub cost_usd: f64,
    pub tokens: u64,
}

impl Spend {
    pub fn add(&mut self, usage: &Usage) {
        self.runs += 1;
        if let Some(cost) = usage.cost_usd {
            self.costed_runs += 1;
            self.cost_usd += cost;
        }
        self.tokens = self.tokens.saturating_add(usage.total_tokens());
    }

    /// `3 runs, $0.1200, 4400 tokens`; a cost some runs did not report is a floor ("at least").
    pub fn words(&self) -> String {
        if self.runs == 0 {
            return "no runs".to_owned();
        }
        let cost = match self.costed_runs {
            0 => "cost unknown".to_owned(),
            n if n < self.runs => format!("at least ${:.4}", self.cost_usd),
            _ => format!("${:.4}", self.cost_usd),
        };
        format!("{} runs, {cost}, {} tokens", self.runs, self.tokens)
    }
}

/// A task (or a refused ticket) the candidate changes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TaskLine {
    /// `T-42`; none for a ticket intake refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// Its intake key, where it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub title: String,
    pub changes: Vec<Change>,
    /// What its runs spent.
    pub recorded: Spend,
    /// What its runs would have spent under the candidate (runs that would not have happened left out).
    pub candidate: Spend,
}

/// The report (`--json`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ConfigReport {
    pub since: DateTime<Utc>,
    pub events_read: u64,
    /// Tasks made in the range, and tickets intake refused in it, each decided again.
    pub tasks_compared: u64,
    pub tickets_refused_compared: u64,
    /// Only what changes, tasks in the order they were made, then refused tickets.
    pub differences: Vec<TaskLine>,
    pub recorded: Spend,
    pub candidate: Spend,
    /// What the replay cannot know, in words (a run that never happened has no recorded usage).
    pub unknowns: Vec<String>,
}

/// The report as a person reads it in a terminal. Every text that came from a ticket is shown inertly (control
/// characters replaced): a title is a stranger's.
pub fn readable(report: &ConfigReport) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "replayed {} events since {}: {} tasks and {} refused tickets decided again\n",
        report.events_read,
        report.since.format("%Y-%m-%d %H:%M UTC"),
        report.tasks_compared,
        report.tickets_refused_compared
    );
    if report.differences.is_empty() {
        out.push_str("no differences: the candidate decides as the service did\n");
    }
    for line in &report.differences {
        let name = line.task.as_deref().unwrap_or("(no task)");
        let _ = writeln!(out, "{name}  {}", inert(&line.title, 80));
        for change in &line.changes {
            let _ = writeln!(out, "    {}", inert(&change_words(change), 400));
        }
        if line.recorded != line.candidate {
            let _ = writeln!(
                out,
                "    spent: {}; under the candidate: {}",
                line.recorded.words(),
                line.candidate.words()
            );
        }
    }
    let _ = writeln!(
        out,
        "in all: {}; under the candidate: {}",
        report.recorded.words(),
        report.candidate.words()
    );
    if report.recorded.costed_runs > 0 || report.candidate.costed_runs > 0 {
        let _ = writeln!(
            out,
            "saved: ${:.4} (of what runs reported)",
            report.recorded.cost_usd - report.candidate.cost_usd
        );
    }
    for unknown in &report.unknowns {
        let _ = writeln!(out, "unknown: {unknown}");
    }
    out
}

/// A change in words (raw: a reason may quote a stranger's text; each surface shows it inertly).
pub fn change_words(change: &Change) -> String {
    let time = |at: &DateTime<Utc>| at.format("%Y-%m-%d %H:%M UTC").to_string();
    match change {
        Change::Ignored { reason } => format!("would not be made: {}", reason),
        Change::Created { reason_refused } => format!(
            "would be made (intake refused it: {}); what it would have cost is unknown",
            reason_refused
        ),
        Change::Gated => "would wait for a person's approval before any run".to_owned(),
        Change::Ungated {
            waited_s: Some(waited),
        } => format!("would start without a person's approval (it waited {waited} s for one)"),
        Change::Ungated { waited_s: None } => {
            "would start without a person's approval (none came); what it would have cost is unknown".to_owned()
        }
        Change::StoppedByBudget {
            run,
            at,
            why,
            while_running,
        } => format!(
            "run {run} stopped by a budget {} {}: {}",
            if *while_running { "while running, by" } else { "before starting, at" },
            time(at),
            why
        ),
        Change::NotStoppedByBudget { run, at } => format!(
            "run {run}, stopped by a budget at {}, would have gone on; what it would have done is unknown",
            time(at)
        ),
        Change::NotLanded { why } => format!(
            "pidevops would not land it: {}",
            why
        ),
        Change::Landed { at } => format!("pidevops would have landed it at {}", time(at)),
        Change::CallsHeld { count, from } => format!(
            "{count} outbound calls held back by the effect cap, from {}",
            time(from)
        ),
        Change::CallsSent { count } => {
            format!("{count} outbound calls the cap held back would have been made")
        }
    }
}

/// `text` on one line, control characters shown as `?`, at most `max` characters.
fn inert(text: &str, max: usize) -> String {
    let mut shown: String = text
        .chars()
        .take(max)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if text.chars().count() > max {
        shown.push('…');
    }
    shown
}
