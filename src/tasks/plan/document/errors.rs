//! Why a plan was refused: every problem found, one line each, written for the planner agent that has to fix
//! them (the lines go verbatim into its retry prompt).

use std::fmt;

/// Which rule a problem broke, for code that reacts to kinds (tests, metrics); people read [`PlanError::line`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlanErrorKind {
    NotUtf8,
    NotJson,
    /// The document, or an item, is not a JSON object.
    NotAnObject,
    UnknownField,
    MissingField,
    /// A field has the wrong JSON type.
    WrongType,
    Version,
    Summary,
    NoItems,
    TooManyItems,
    Id,
    DuplicateId,
    Title,
    Task,
    DoneWhen,
    /// The scope list itself: empty, too long, or an entry a scope line cannot hold; or scopes too costly to
    /// compare for overlap within the check's budget.
    Scope,
    /// A scope entry that is not a valid glob.
    Glob,
    /// A scope entry that names no path: a placeholder word (`n/a`, `none`, `tbd`, …), blank, or wildcards alone.
    Placeholder,
    /// A scope entry that names or covers agent, hook or CI configuration (`guard::PROTECTED`) the repository does
    /// not let plans name (`plans_may_name`).
    Protected,
    DependsOn,
    Overlap,
    Cycle,
    Nul,
}

/// One problem: its kind and the line that explains it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanError {
    kind: PlanErrorKind,
    line: String,
}

impl PlanError {
    pub(super) fn new(kind: PlanErrorKind, line: String) -> Self {
        PlanError { kind, line }
    }

    pub fn kind(&self) -> PlanErrorKind {
        self.kind
    }

    /// One line, naming the item and field and what to change.
    pub fn line(&self) -> &str {
        &self.line
    }
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line)
    }
}

/// Every problem found in a plan file (at least one). `Display` writes one per line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct PlanErrors {
    errors: Vec<PlanError>,
    /// Problems found beyond [`PlanErrors::MAX_LISTED`]: counted, not kept.
    unlisted: usize,
}

impl PlanErrors {
    /// At most this many problems are kept; a plan with more is mostly noise, and the planner fixes the first.
    pub const MAX_LISTED: usize = 100;
    /// The bound of [`PlanErrors::retry_text`], in characters.
    pub const RETRY_MAX_CHARS: usize = 2_000;
    pub const RETRY_HEADER: &'static str = "The plan in .pidevops/plan.json was refused:";

    pub(super) fn new() -> Self {
        PlanErrors {
            errors: Vec::new(),
            unlisted: 0,
        }
    }

    pub(super) fn push(&mut self, kind: PlanErrorKind, line: String) {
        if self.errors.len() < Self::MAX_LISTED {
            self.errors.push(PlanError::new(kind, line));
        } else {
            self.unlisted += 1;
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    pub fn errors(&self) -> &[PlanError] {
        &self.errors
    }

    /// How many problems were found in all, listed or not.
    pub fn count(&self) -> usize {
        self.errors.len() + self.unlisted
    }

    /// Whether any problem is of this kind.
    pub fn has(&self, kind: PlanErrorKind) -> bool {
        self.errors.iter().any(|e| e.kind == kind)
    }

    /// What a planner agent is told on its retry: [`PlanErrors::RETRY_HEADER`], then one `- ` line per problem,
    /// at most [`PlanErrors::RETRY_MAX_CHARS`] characters in all; when problems had to be left out, the last line
    /// says how many.
    pub fn retry_text(&self) -> String {
        // Room kept for the cut line ("\n- … and 1234567 more problems not shown") while more problems follow.
        const CUT_ROOM: usize = 48;
        // No single problem may crowd out the others.
        const LINE_MAX_CHARS: usize = 500;
        let mut text = String::from(Self::RETRY_HEADER);
        let mut used = text.chars().count();
        for (shown, error) in self.errors.iter().enumerate() {
            let line = format!("\n- {}", cut(error.line(), LINE_MAX_CHARS));
            let len = line.chars().count();
            let after = self.count() - shown - 1;
            let reserve = if after > 0 { CUT_ROOM } else { 0 };
            if used + len + reserve > Self::RETRY_MAX_CHARS {
                let left = self.count() - shown;
                text.push_str(&format!("\n- … and {left} more problems not shown"));
                return text;
            }
            text.push_str(&line);
            used += len;
        }
        if self.unlisted > 0 {
            let left = self.unlisted;
            text.push_str(&format!("\n- … and {left} more problems not shown"));
        }
        text
    }
}

impl fmt::Display for PlanErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            f.write_str(error.line())?;
        }
        if self.unlisted > 0 {
            write!(f, "\n… and {} more problems", self.unlisted)?;
        }
        Ok(())
    }
}

/// Cuts `text` to at most `max` characters, marking the cut with `…`.
pub(super) fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A value from the file, quoted and cut for an error line: control characters escaped, at most ~60 characters.
pub(super) fn quote(text: &str) -> String {
    format!("{:?}", cut(text, 60))
}
