//! What an agent reports back in `.pidevops/` of its worktree (docs/agent-files.md): its own verdict
//! (`status.json`, and `status-<id>.json` as pi's diff-review extension is taken to write it), a reviewer's verdict
//! (`review.json`) and a triage agent's rewrite of a vague ticket (`spec.json`). Pure: bytes in, a checked value or
//! a precise error out; reading the bytes safely is `dispatch::agent_files`.
//!
//! Every byte here was written by an agent, which does what ticket text tells it, so the parsers are strict: a
//! duplicate key, an unknown field, a wrong type, oversize text, a NUL or a path that climbs is refused with the
//! file, the field and the reason. The message is phrased so that it can go both to the person on the board and
//! into the agent's retry prompt.

mod review;
mod strict;

pub use review::{plain_markdown, Review, ReviewComment, Verdict};

use super::{Reason, Spec};
use strict::{check_path, cut, string, Fields};

/// Summaries (status and review) are at most this many characters: enough for a paragraph or two, small enough
/// for a pull request body, an event and a prompt.
const MAX_SUMMARY_CHARS: usize = 4_000;
/// A path named in a report (an unresolved file, a review comment's file).
const MAX_PATH_CHARS: usize = 1_024;

/// Why a report was refused. `file` is the name under `.pidevops/`, `field` a path into the JSON
/// (`comments[3].line`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    #[error(".pidevops/{file} is not valid JSON: {why}")]
    Json { file: String, why: String },
    #[error(".pidevops/{file} must hold a JSON object ({{...}}), not {found}")]
    NotObject { file: String, found: &'static str },
    #[error(".pidevops/{file}: `{field}` {why}")]
    Field {
        file: String,
        field: String,
        why: String,
    },
}

fn field_error(file: &str, field: &str, why: impl Into<String>) -> ReportError {
    ReportError::Field {
        file: file.to_owned(),
        field: field.to_owned(),
        why: why.into(),
    }
}

/// The agent's own verdict on its attempt. Every field is optional in the file; absent means no claim:
/// `resolved` None (pidevops judges by itself), no unresolved files, no call for a person, no summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentStatus {
    resolved: Option<bool>,
    unresolved_files: Vec<String>,
    needs_human: bool,
    summary: Option<String>,
}

impl AgentStatus {
    /// The file an agent is told to write.
    pub const FILE: &'static str = "status.json";
    /// Bigger than any valid status (100 paths of 1,024 characters, a 4,000-character summary) needs, allowing for
    /// JSON escapes; the reader refuses a larger file before reading it.
    pub const MAX_BYTES: usize = 512 * 1024;
    pub const MAX_SUMMARY_CHARS: usize = MAX_SUMMARY_CHARS;
    pub const MAX_PATH_CHARS: usize = MAX_PATH_CHARS;
    pub const MAX_UNRESOLVED_FILES: usize = 100;
    const FIELDS: &'static [&'static str] =
        &["resolved", "unresolved_files", "needs_human", "summary"];

    /// Parses one status file; `name` (`status.json`, `status-<id>.json`) is only used in errors.
    pub fn parse(name: &str, bytes: &[u8]) -> Result<Self, ReportError> {
        let mut fields = Fields::top(name, bytes, Self::FIELDS)?;
        let resolved = fields.bool("resolved")?;
        let needs_human = fields.bool("needs_human")?.unwrap_or(false);
        let summary = fields
            .text("summary", MAX_SUMMARY_CHARS)?
            .filter(|s| !s.trim().is_empty());
        let mut unresolved_files: Vec<String> = Vec::new();
        for (i, value) in fields
            .array("unresolved_files", Self::MAX_UNRESOLVED_FILES)?
            .into_iter()
            .enumerate()
        {
            let field = format!("unresolved_files[{i}]");
            let path = string(name, &field, value)?;
            check_path(name, &field, &path)?;
            if !unresolved_files.contains(&path) {
                unresolved_files.push(path);
            }
        }
        // A file that says both is either a mistake or an attempt to slip unresolved work past the check; asking
        // is cheaper than guessing which.
        if resolved == Some(true) && !unresolved_files.is_empty() {
            return Err(field_error(
                name,
                "resolved",
                format!(
                    "is true but `unresolved_files` lists {} file(s); set `resolved` to false or empty the list",
                    unresolved_files.len()
                ),
            ));
        }
        Ok(AgentStatus {
            resolved,
            unresolved_files,
            needs_human,
            summary,
        })
    }

    /// One verdict from every status file found, `(name, status)`. Deterministic whatever the order given, and
    /// conservative, so that no file can hide what another one says: a person is needed if any file says so; the
    /// unresolved files are the union (`status.json`'s first, then each `status-<id>.json` by name); resolved is
    /// true only if every file says true, false if any says false or any file is unresolved, else no claim; the
    /// summaries are joined, each after its file's name, cut to [`AgentStatus::MAX_SUMMARY_CHARS`]. No file, no verdict.
    pub fn combine(mut found: Vec<(String, AgentStatus)>) -> Option<AgentStatus> {
        found.sort_by(|(a, _), (b, _)| {
            (a.as_str() != Self::FILE, a.as_str()).cmp(&(b.as_str() != Self::FILE, b.as_str()))
        });
        if found.len() <= 1 {
            return found.pop().map(|(_, status)| status);
        }
        let mut merged = AgentStatus {
            resolved: Some(true),
            ..AgentStatus::default()
        };
        let mut summaries = Vec::new();
        for (name, status) in &found {
            merged.needs_human |= status.needs_human;
            merged.resolved = match (merged.resolved, status.resolved) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            };
            for path in &status.unresolved_files {
                if !merged.unresolved_files.contains(path) {
                    merged.unresolved_files.push(path.clone());
                }
            }
            if let Some(summary) = &status.summary {
                summaries.push(format!("{name}: {summary}"));
            }
        }
        if !merged.unresolved_files.is_empty() {
            merged.resolved = Some(false);
        }
        if !summaries.is_empty() {
            merged.summary = Some(cut(&summaries.join("\n\n"), MAX_SUMMARY_CHARS));
        }
        Some(merged)
    }

    pub fn resolved(&self) -> Option<bool> {
        self.resolved
    }

    pub fn unresolved_files(&self) -> &[String] {
        &self.unresolved_files
    }

    pub fn needs_human(&self) -> bool {
        self.needs_human
    }

    pub fn summary(&self) -> Option<&str> {
        self.summary.as_deref()
    }

    /// The agent itself says the work is not done: `resolved: false`, or files it could not resolve.
    pub fn is_unresolved(&self) -> bool {
        self.resolved == Some(false) || !self.unresolved_files.is_empty()
    }

    /// Why the task is flagged when the agent asks for a person: its summary, cut to a [`Reason`].
    pub fn needs_human_reason(&self) -> Option<Reason> {
        self.needs_human.then(|| {
            Reason::summarize(&format!(
                "The agent asked for a person: {}",
                self.summary().unwrap_or("(it gave no summary)")
            ))
        })
    }

    /// `Previously unresolved: a, b, …` for the next attempt's prompt, at most 2,000 characters.
    pub fn unresolved_note(&self) -> Option<String> {
        const MAX: usize = 2_000;
        if self.unresolved_files.is_empty() {
            return None;
        }
        let mut note = String::from("Previously unresolved: ");
        for (i, path) in self.unresolved_files.iter().enumerate() {
            let rest = self.unresolved_files.len() - i;
            let part = if i == 0 {
                path.clone()
            } else {
                format!(", {path}")
            };
            // Room for the ", and N more" that would follow if this path were the last one to fit.
            let tail = format!(", and {} more", rest - 1).chars().count();
            if note.chars().count() + part.chars().count() + tail > MAX {
                note.push_str(&format!(", and {rest} more"));
                return Some(note);
            }
            note.push_str(&part);
        }
        Some(note)
    }
}

/// An agent's question for a person (`question.md`): plain UTF-8 text, trimmed, not empty; a question longer than
/// a [`Reason`] is cut with a marker saying so (the task's flag, the Linear elicitation and the Telegram message
/// carry it). NULs and other control characters but newlines and tabs are dropped: they only hide text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentQuestion(Reason);

impl AgentQuestion {
    pub const FILE: &'static str = "question.md";
    /// Far more than a question needs; the reader refuses a larger file before reading it.
    pub const MAX_BYTES: usize = 64 * 1024;
    /// What replaces the end of a question cut to size.
    pub const CUT_MARKER: &'static str =
        "[… the question was cut: read the rest in the attempt's log]";

    pub fn parse(bytes: &[u8]) -> Result<Self, ReportError> {
        let file = Self::FILE;
        let text = std::str::from_utf8(bytes).map_err(|e| ReportError::Field {
            file: file.to_owned(),
            field: "(text)".to_owned(),
            why: format!("is not UTF-8 text ({e})"),
        })?;
        let cleaned: String = text
            .chars()
            .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
            .collect();
        let trimmed = cleaned.trim();
        if trimmed.is_empty() {
            return Err(ReportError::Field {
                file: file.to_owned(),
                field: "(text)".to_owned(),
                why: "is empty; write the question for a person there, or remove the file"
                    .to_owned(),
            });
        }
        let max = Reason::MAX_CHARS;
        let shown = if trimmed.chars().count() > max {
            let keep = max - Self::CUT_MARKER.chars().count() - 1;
            let head: String = trimmed.chars().take(keep).collect();
            format!("{}\n{}", head.trim_end(), Self::CUT_MARKER)
        } else {
            trimmed.to_owned()
        };
        Ok(AgentQuestion(Reason::summarize(&shown)))
    }

    pub fn reason(&self) -> &Reason {
        &self.0
    }

    pub fn into_reason(self) -> Reason {
        self.0
    }
}

/// A triage agent's rewrite of a vague ticket (`spec.json`: `task` required, `scope` and `done_when` optional),
/// which becomes the task's [`Spec`] once the approver has seen (and perhaps edited) it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TriagedSpec(Spec);

impl TriagedSpec {
    pub const FILE: &'static str = "spec.json";
    /// Three parts of [`Spec::MAX_CHARS`] characters, with room for JSON escapes.
    pub const MAX_BYTES: usize = 1024 * 1024;
    const FIELDS: &'static [&'static str] = &["task", "scope", "done_when"];

    pub fn parse(bytes: &[u8]) -> Result<Self, ReportError> {
        let file = Self::FILE;
        let mut fields = Fields::top(file, bytes, Self::FIELDS)?;
        let task = fields.text("task", Spec::MAX_CHARS)?.unwrap_or_default();
        if task.trim().is_empty() {
            return Err(field_error(
                file,
                "task",
                "is required and must not be empty",
            ));
        }
        let scope = fields.text("scope", Spec::MAX_CHARS)?.unwrap_or_default();
        let done_when = fields
            .text("done_when", Spec::MAX_CHARS)?
            .unwrap_or_default();
        // Every rule of Spec is checked above with the field named; this only fails if Spec gains a rule.
        Spec::new(task, scope, done_when)
            .map(TriagedSpec)
            .map_err(|e| field_error(file, "task", format!("does not make a spec: {e}")))
    }

    pub fn spec(&self) -> &Spec {
        &self.0
    }

    pub fn into_spec(self) -> Spec {
        self.0
    }
}

impl From<TriagedSpec> for Spec {
    fn from(triaged: TriagedSpec) -> Self {
        triaged.0
    }
}

#[cfg(test)]
mod tests;
