//! A reviewer agent's verdict (`.pidevops/review.json`): parsed strictly, stored in events, and rendered for the
//! next agent's prompt and for a pull request body.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::strict::{check_path, check_text, cut, kind, Fields};
use super::{field_error, ReportError, MAX_PATH_CHARS, MAX_SUMMARY_CHARS};

/// A reviewer agent's decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Approve,
    RequestChanges,
}

/// A reviewer agent's verdict on an attempt, from `.pidevops/review.json`. Checked on the way in from the file and
/// from the log alike (serde goes through the same checks).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "ReviewParts")]
pub struct Review {
    verdict: Verdict,
    #[schema(max_length = 4000)]
    summary: String,
    #[schema(max_items = 100)]
    comments: Vec<ReviewComment>,
}

/// One comment of a review, on a file and optionally a line of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "CommentParts")]
pub struct ReviewComment {
    /// Relative to the repository root, without `..`.
    #[schema(min_length = 1, max_length = 1024)]
    path: String,
    #[schema(minimum = 1)]
    line: Option<u32>,
    #[schema(min_length = 1, max_length = 2000)]
    body: String,
}

/// The unchecked shape of a [`Review`], for serde.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReviewParts {
    verdict: Verdict,
    #[serde(default)]
    summary: String,
    #[serde(default)]
    comments: Vec<CommentParts>,
}

/// The unchecked shape of a [`ReviewComment`], for serde.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CommentParts {
    path: String,
    #[serde(default)]
    line: Option<u32>,
    body: String,
}

impl Review {
    pub const FILE: &'static str = "review.json";
    /// 100 comments of 2,000 characters and a summary, with room for JSON escapes.
    pub const MAX_BYTES: usize = 1024 * 1024;
    pub const MAX_SUMMARY_CHARS: usize = MAX_SUMMARY_CHARS;
    pub const MAX_PATH_CHARS: usize = MAX_PATH_CHARS;
    pub const MAX_COMMENTS: usize = 100;
    pub const MAX_BODY_CHARS: usize = 2_000;
    /// [`Review::as_prompt_text`] is at most this long.
    pub const PROMPT_MAX_CHARS: usize = 2_000;
    /// [`Review::as_markdown`] is at most this long: a third of GitHub's pull request body limit.
    pub const MARKDOWN_MAX_CHARS: usize = 20_000;
    const FIELDS: &'static [&'static str] = &["verdict", "summary", "comments"];
    const COMMENT_FIELDS: &'static [&'static str] = &["path", "line", "body"];

    pub fn parse(bytes: &[u8]) -> Result<Self, ReportError> {
        let file = Self::FILE;
        let mut fields = Fields::top(file, bytes, Self::FIELDS)?;
        let verdict = match fields.take("verdict") {
            None => {
                return Err(field_error(
                    file,
                    "verdict",
                    "is required: \"approve\" or \"request_changes\"",
                ))
            }
            Some(Value::String(s)) if s == "approve" => Verdict::Approve,
            Some(Value::String(s)) if s == "request_changes" => Verdict::RequestChanges,
            Some(Value::String(_)) => {
                return Err(field_error(
                    file,
                    "verdict",
                    "must be \"approve\" or \"request_changes\"",
                ))
            }
            Some(other) => {
                return Err(field_error(
                    file,
                    "verdict",
                    format!(
                        "must be the string \"approve\" or \"request_changes\", not {}",
                        kind(&other)
                    ),
                ))
            }
        };
        let summary = fields
            .text("summary", MAX_SUMMARY_CHARS)?
            .unwrap_or_default();
        let mut comments = Vec::new();
        for (i, value) in fields
            .array("comments", Self::MAX_COMMENTS)?
            .into_iter()
            .enumerate()
        {
            let at = format!("comments[{i}]");
            let mut comment = Fields::nested(file, &at, value, Self::COMMENT_FIELDS)?;
            let path = comment
                .text("path", MAX_PATH_CHARS)?
                .ok_or_else(|| field_error(file, &comment.path("path"), "is required"))?;
            let line = comment.line("line")?;
            let body = comment
                .text("body", Self::MAX_BODY_CHARS)?
                .ok_or_else(|| field_error(file, &comment.path("body"), "is required"))?;
            comments.push(ReviewComment::check(
                file,
                &at,
                CommentParts { path, line, body },
            )?);
        }
        Review::check(file, verdict, summary, comments)
    }

    /// The rules the parsed shape must also meet; shared by [`Review::parse`] and serde.
    fn check(
        file: &str,
        verdict: Verdict,
        summary: String,
        comments: Vec<ReviewComment>,
    ) -> Result<Self, ReportError> {
        check_text(file, "summary", &summary, MAX_SUMMARY_CHARS)?;
        if comments.len() > Self::MAX_COMMENTS {
            return Err(field_error(
                file,
                "comments",
                format!(
                    "has {} comments; at most {} are allowed",
                    comments.len(),
                    Self::MAX_COMMENTS
                ),
            ));
        }
        // The retry carries the review to the next agent; a request with nothing in it would retry blind.
        if verdict == Verdict::RequestChanges && summary.trim().is_empty() && comments.is_empty() {
            return Err(field_error(
                file,
                "verdict",
                "is \"request_changes\" but there is neither a `summary` nor a comment saying what to change",
            ));
        }
        Ok(Review {
            verdict,
            summary,
            comments,
        })
    }

    pub fn verdict(&self) -> Verdict {
        self.verdict
    }

    pub fn summary(&self) -> &str {
        &self.summary
    }

    pub fn comments(&self) -> &[ReviewComment] {
        &self.comments
    }

    /// The review for the next agent's prompt: the verdict and summary, then one line per comment
    /// (`- src/a.rs:12: body`, the body on one line so no comment can pass for prompt structure), at most
    /// [`Review::PROMPT_MAX_CHARS`] characters, with how many comments did not fit.
    pub fn as_prompt_text(&self) -> String {
        let head = match self.verdict {
            Verdict::Approve => "The reviewer approved",
            Verdict::RequestChanges => "The reviewer asked for changes",
        };
        let summary = self.summary.trim();
        let mut text = if summary.is_empty() {
            format!("{head}.")
        } else {
            // Half the budget at most, so the comments always get room.
            format!("{head}: {}", cut(summary, Self::PROMPT_MAX_CHARS / 2))
        };
        for (i, comment) in self.comments.iter().enumerate() {
            let line = cut(&format!("\n- {}", comment.one_line()), 400);
            let left = self.comments.len() - i;
            let more = format!("\n- … and {left} more comments");
            if text.chars().count() + line.chars().count() + more.chars().count()
                > Self::PROMPT_MAX_CHARS
            {
                text.push_str(&more);
                return text;
            }
            text.push_str(&line);
        }
        text
    }

    /// The review for a pull request body. The agent's text is made plain: markdown and HTML are escaped, so it
    /// renders as the characters it is and cannot add links, images, headings, tables or markup. At most
    /// [`Review::MARKDOWN_MAX_CHARS`] characters, with how many comments did not fit.
    pub fn as_markdown(&self) -> String {
        let head = match self.verdict {
            Verdict::Approve => "**Review: approved**",
            Verdict::RequestChanges => "**Review: changes requested**",
        };
        let mut text = head.to_owned();
        if !self.summary.trim().is_empty() {
            text.push_str("\n\n");
            text.push_str(&plain_markdown(self.summary.trim()));
        }
        if !self.comments.is_empty() {
            text.push('\n');
        }
        for (i, comment) in self.comments.iter().enumerate() {
            let line = format!("\n- {}", plain_markdown(&comment.one_line()));
            let left = self.comments.len() - i;
            let more = format!("\n- … and {left} more comments");
            if text.chars().count() + line.chars().count() + more.chars().count()
                > Self::MARKDOWN_MAX_CHARS
            {
                text.push_str(&more);
                return text;
            }
            text.push_str(&line);
        }
        text
    }
}

impl TryFrom<ReviewParts> for Review {
    type Error = ReportError;
    fn try_from(parts: ReviewParts) -> Result<Self, Self::Error> {
        let file = Review::FILE;
        let comments = parts
            .comments
            .into_iter()
            .enumerate()
            .map(|(i, c)| ReviewComment::check(file, &format!("comments[{i}]"), c))
            .collect::<Result<Vec<_>, _>>()?;
        Review::check(file, parts.verdict, parts.summary, comments)
    }
}

impl ReviewComment {
    fn check(file: &str, at: &str, parts: CommentParts) -> Result<Self, ReportError> {
        check_path(file, &format!("{at}.path"), &parts.path)?;
        if parts.line == Some(0) {
            return Err(field_error(
                file,
                &format!("{at}.line"),
                "must be at least 1 (lines count from 1)",
            ));
        }
        check_text(
            file,
            &format!("{at}.body"),
            &parts.body,
            Review::MAX_BODY_CHARS,
        )?;
        if parts.body.trim().is_empty() {
            return Err(field_error(
                file,
                &format!("{at}.body"),
                "must not be empty",
            ));
        }
        Ok(ReviewComment {
            path: parts.path,
            line: parts.line,
            body: parts.body,
        })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn line(&self) -> Option<u32> {
        self.line
    }

    pub fn body(&self) -> &str {
        &self.body
    }

    /// `src/a.rs:12: body`, the body's lines joined with spaces.
    fn one_line(&self) -> String {
        let body = self.body.split_whitespace().collect::<Vec<_>>().join(" ");
        match self.line {
            Some(line) => format!("{}:{line}: {body}", self.path),
            None => format!("{}: {body}", self.path),
        }
    }
}

impl TryFrom<CommentParts> for ReviewComment {
    type Error = ReportError;
    fn try_from(parts: CommentParts) -> Result<Self, Self::Error> {
        ReviewComment::check(Review::FILE, "comment", parts)
    }
}

/// Untrusted text made plain for markdown: every character that starts inline markup or HTML is
/// backslash-escaped, and what would start a block at the beginning of a line (a heading, a list, a quote, an
/// indented code block, a rule) is escaped or trimmed, so the text renders as itself. `@` and `#` references are
/// made inert elsewhere, before anything is sent.
pub fn plain_markdown(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for (i, line) in text.lines().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let line = line.trim_start();
        let digits = line.chars().take_while(char::is_ascii_digit).count();
        for (j, c) in line.chars().enumerate() {
            let block_start = (j == 0 && matches!(c, '#' | '-' | '+' | '='))
                || (j == digits && digits > 0 && matches!(c, '.' | ')'));
            if block_start
                || matches!(
                    c,
                    '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '!' | '|' | '~' | '&'
                )
            {
                out.push('\\');
            }
            if c != '\r' {
                out.push(c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
