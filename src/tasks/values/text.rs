//! Free text that ends up in events and prompts: a spec, a reason, a follow-up.

use std::fmt;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::ValueError;

/// Checks free text that ends up in events (JSON in Postgres) and in an agent's prompt.
fn check_text(
    field: &'static str,
    text: &str,
    max: usize,
    required: bool,
) -> Result<(), ValueError> {
    if required && text.trim().is_empty() {
        return Err(ValueError::Empty { field });
    }
    let chars = text.chars().count();
    if chars > max {
        return Err(ValueError::TooLong { field, chars, max });
    }
    // jsonb refuses \u0000, so a NUL would make the append fail long after the command was accepted.
    if text.contains('\0') {
        return Err(ValueError::Nul { field });
    }
    Ok(())
}

/// What an agent gets: `Task / Scope / Done when`. Only the task is required; each part is bounded by GitHub's
/// issue body limit so any issue fits and nothing larger slips into a prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "SpecParts")]
pub struct Spec {
    #[schema(min_length = 1, max_length = 65536)]
    task: String,
    // Optional in a request (`SpecParts` defaults them); always present in a response.
    #[schema(required = false, max_length = 65536)]
    scope: String,
    #[schema(required = false, max_length = 65536)]
    done_when: String,
}

/// The unchecked shape of a [`Spec`], for serde and for callers assembling one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecParts {
    pub task: String,
    #[serde(default)]
    pub scope: String,
    #[serde(default)]
    pub done_when: String,
}

impl Spec {
    pub const MAX_CHARS: usize = 65_536;

    pub fn new(
        task: impl Into<String>,
        scope: impl Into<String>,
        done_when: impl Into<String>,
    ) -> Result<Self, ValueError> {
        Spec::try_from(SpecParts {
            task: task.into(),
            scope: scope.into(),
            done_when: done_when.into(),
        })
    }

    pub fn task(&self) -> &str {
        &self.task
    }

    pub fn scope(&self) -> &str {
        &self.scope
    }

    pub fn done_when(&self) -> &str {
        &self.done_when
    }

    /// A one-line title for lists: the first non-empty line of the task, cut at 80 characters.
    pub fn title(&self) -> String {
        let line = self
            .task
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or_default();
        truncate(line, 80)
    }
}

impl TryFrom<SpecParts> for Spec {
    type Error = ValueError;
    fn try_from(parts: SpecParts) -> Result<Self, Self::Error> {
        check_text("spec task", &parts.task, Spec::MAX_CHARS, true)?;
        check_text("spec scope", &parts.scope, Spec::MAX_CHARS, false)?;
        check_text("spec done_when", &parts.done_when, Spec::MAX_CHARS, false)?;
        Ok(Spec {
            task: parts.task,
            scope: parts.scope,
            done_when: parts.done_when,
        })
    }
}

impl From<Spec> for SpecParts {
    fn from(spec: Spec) -> Self {
        SpecParts {
            task: spec.task,
            scope: spec.scope,
            done_when: spec.done_when,
        }
    }
}

/// Cuts `text` to at most `max` characters, marking the cut with `…`.
fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Why something was refused, cancelled, retried or flagged: short, human-readable, non-empty.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "String", into = "String")]
pub struct Reason(String);

impl Reason {
    pub const MAX_CHARS: usize = 2_000;

    pub fn new(text: impl Into<String>) -> Result<Self, ValueError> {
        let text = text.into();
        check_text("reason", &text, Self::MAX_CHARS, true)?;
        Ok(Reason(text))
    }

    /// For machine-made reasons (an exit status, a CI summary): cut to size and NULs dropped instead of refused,
    /// because refusing would lose the failure itself. Empty text still becomes a placeholder, never an error.
    pub fn summarize(text: &str) -> Self {
        let cleaned: String = text.chars().filter(|c| *c != '\0').collect();
        let trimmed = cleaned.trim();
        if trimmed.is_empty() {
            return Reason("(no reason given)".to_owned());
        }
        Reason(truncate(trimmed, Self::MAX_CHARS))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Reason {
    type Error = ValueError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Reason::new(s)
    }
}

impl From<Reason> for String {
    fn from(reason: Reason) -> Self {
        reason.0
    }
}

/// A follow-up instruction (a Linear `prompted` comment, a Telegram reply) queued for the next run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "String", into = "String")]
pub struct FollowUpText(String);

impl FollowUpText {
    pub fn new(text: impl Into<String>) -> Result<Self, ValueError> {
        let text = text.into();
        check_text("follow-up", &text, Spec::MAX_CHARS, true)?;
        Ok(FollowUpText(text))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for FollowUpText {
    type Error = ValueError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        FollowUpText::new(s)
    }
}

impl From<FollowUpText> for String {
    fn from(text: FollowUpText) -> Self {
        text.0
    }
}

/// Where a follow-up came from: `key` names the message in its channel (`github:comment:<id>`,
/// `linear:activity:<id>`, `telegram:<chat>:<message>`), so a redelivered or edited message attaches nothing
/// twice; `from` says who wrote it and where, for the prompt and the task page. Untrusted text, made inert
/// wherever it is shown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "OriginParts", into = "OriginParts")]
pub struct FollowUpOrigin {
    key: String,
    from: String,
}

#[derive(Serialize, Deserialize)]
struct OriginParts {
    key: String,
    from: String,
}

impl FollowUpOrigin {
    pub const MAX_CHARS: usize = 200;

    pub fn new(key: impl Into<String>, from: impl Into<String>) -> Result<Self, ValueError> {
        let (key, from) = (key.into(), from.into());
        check_text("follow-up key", &key, Self::MAX_CHARS, true)?;
        check_text("follow-up author", &from, Self::MAX_CHARS, true)?;
        if key.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(ValueError::Invalid {
                field: "follow-up key",
                why: "a key has no spaces or control characters",
            });
        }
        if from.chars().any(char::is_control) {
            return Err(ValueError::Invalid {
                field: "follow-up author",
                why: "an author has no control characters",
            });
        }
        Ok(Self { key, from })
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn from(&self) -> &str {
        &self.from
    }
}

impl TryFrom<OriginParts> for FollowUpOrigin {
    type Error = ValueError;
    fn try_from(parts: OriginParts) -> Result<Self, Self::Error> {
        FollowUpOrigin::new(parts.key, parts.from)
    }
}

impl From<FollowUpOrigin> for OriginParts {
    fn from(origin: FollowUpOrigin) -> Self {
        OriginParts {
            key: origin.key,
            from: origin.from,
        }
    }
}
