//! What a run spent, read from the agent's own output. Pure.
//!
//! Each agent CLI reports its usage in its own shape on standard output, and only in its machine-readable mode
//! (the presets run each in that mode):
//!
//! | format | the CLI's mode | what is read |
//! | --- | --- | --- |
//! | `claude` | `claude -p --output-format stream-json` | the `result` line: `total_cost_usd`, `usage` (`input_tokens`, `output_tokens`, `cache_read_input_tokens`, `cache_creation_input_tokens`), `num_turns`; while it runs, each `assistant` message's `usage` (per message id: a message's content blocks repeat it) |
//! | `codex` | `codex exec --json` | each `turn.completed`'s `usage` (`input_tokens` includes `cached_input_tokens`, which count as cache reads) |
//! | `pi` | `pi -p --mode json` | each `message_end` of an assistant message: `usage.input`, `output`, `cacheRead`, `cacheWrite`, `cost.total` |
//! | `opencode` | `opencode run --format json` | each `step_finish`'s `part.tokens` (`input`, `output` + `reasoning`, `cache.read`, `cache.write`) and `part.cost` |
//! | `pattern` | anything | a regex with named groups `input`, `output`, `cache_read`, `cache_write`, `cost`, `turns`: each matching line adds |
//!
//! Only top-level fields of a line count: what a tool printed is a string inside a line, never a line of its own
//! (a hostile agent that writes to the CLI's stdout directly can still print lines; see docs/agents.md).
//!
//! The meter also notices a provider's usage or rate limit in the same output (`Limit`): Claude Code's
//! `rate_limit_event` with `status: "rejected"` (and its `resetsAt`), an error result naming a limit or an HTTP
//! 429 / 529, Codex's, pi's and OpenCode's error events saying the same.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use figures::{cost, tokens, turns};
pub use figures::{MAX_COST_USD, MAX_MESSAGES, MAX_TOKENS, MAX_TURNS};

/// The longest output line the meter reads; a longer one (a tool's huge output echoed in a transcript line) is
/// skipped whole: usage lines are short.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Tokens and money one run spent, as its CLI reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Usage {
    /// Input tokens not read from a prompt cache.
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// What the CLI says it cost, in US dollars; `None` where it reports no cost (Codex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Model turns (requests), where the CLI counts them.
    #[serde(default)]
    pub turns: u32,
}

impl Usage {
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_write_tokens)
    }

    pub fn is_empty(&self) -> bool {
        self.total_tokens() == 0 && self.cost_usd.is_none() && self.turns == 0
    }

    /// `other` added to this (a cost either reported counts; none reported stays none).
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        self.turns = self.turns.saturating_add(other.turns);
    }

    /// Why a figure is past the bounds ([`MAX_TOKENS`] of each kind, [`MAX_COST_USD`] finite and not negative,
    /// [`MAX_TURNS`]): `None` while every one is within them.
    pub fn out_of_bounds(&self) -> Option<String> {
        if let Some((kind, n)) = self.by_kind().into_iter().find(|(_, n)| *n > MAX_TOKENS) {
            return Some(format!("{n} {kind} tokens (at most {MAX_TOKENS})"));
        }
        if let Some(cost) = self
            .cost_usd
            .filter(|c| !(c.is_finite() && (0.0..=MAX_COST_USD).contains(c)))
        {
            return Some(format!("a cost of {cost} USD (at most {MAX_COST_USD})"));
        }
        if self.turns > MAX_TURNS {
            return Some(format!("{} turns (at most {MAX_TURNS})", self.turns));
        }
        None
    }

    /// Each figure held to the bounds: what an outcome recorded before they existed (or by a stranger) counts for
    /// at most. A cost that is not a number counts as none.
    pub fn clamped(&self) -> Usage {
        Usage {
            input_tokens: self.input_tokens.min(MAX_TOKENS),
            output_tokens: self.output_tokens.min(MAX_TOKENS),
            cache_read_tokens: self.cache_read_tokens.min(MAX_TOKENS),
            cache_write_tokens: self.cache_write_tokens.min(MAX_TOKENS),
            cost_usd: self
                .cost_usd
                .filter(|c| !c.is_nan())
                .map(|c| c.clamp(0.0, MAX_COST_USD)),
            turns: self.turns.min(MAX_TURNS),
        }
    }

    /// The token counts by kind, as `/metrics` labels them.
    pub fn by_kind(&self) -> [(&'static str, u64); 4] {
        [
            ("input", self.input_tokens),
            ("output", self.output_tokens),
            ("cache_read", self.cache_read_tokens),
            ("cache_write", self.cache_write_tokens),
        ]
    }
}

/// A run's usage with what it is rolled up by: recorded on the run's outcome, so the usage read model needs no
/// other stream to place it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunUsage {
    pub repo: String,
    pub profile: String,
    #[serde(flatten)]
    pub usage: Usage,
    /// Why the meter refused figures of the run's output (out of bounds, not numbers): they are not in `usage`,
    /// and the run counted as over budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// A provider's limit the agent ran into.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limit {
    /// When the provider says it lifts, where it says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resets_at: Option<DateTime<Utc>>,
    /// The CLI's own words (cut).
    pub message: String,
}

/// How a profile's output reports usage.
#[derive(Clone, Debug, Default)]
pub enum UsageFormat {
    /// Nothing is read.
    #[default]
    None,
    Claude,
    Codex,
    Pi,
    Opencode,
    Pattern(UsagePattern),
}

impl UsageFormat {
    pub const NAMES: [&'static str; 5] = ["claude", "codex", "pi", "opencode", "none"];

    /// A named format (`usage = "…"` in a profile).
    pub fn named(name: &str) -> Result<Self, String> {
        match name {
            "claude" => Ok(UsageFormat::Claude),
            "codex" => Ok(UsageFormat::Codex),
            "pi" => Ok(UsageFormat::Pi),
            "opencode" => Ok(UsageFormat::Opencode),
            "none" => Ok(UsageFormat::None),
            other => Err(format!(
                "unknown usage format {other:?}: one of {} (or usage_pattern for a regex)",
                Self::NAMES.join(", ")
            )),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            UsageFormat::None => "none",
            UsageFormat::Claude => "claude",
            UsageFormat::Codex => "codex",
            UsageFormat::Pi => "pi",
            UsageFormat::Opencode => "opencode",
            UsageFormat::Pattern(_) => "pattern",
        }
    }
}

impl PartialEq for UsageFormat {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (UsageFormat::Pattern(a), UsageFormat::Pattern(b)) => a == b,
            _ => self.name() == other.name(),
        }
    }
}

impl Eq for UsageFormat {}

/// Reads an agent's output as it streams: whole lines, whatever the chunks.
#[derive(Debug)]
pub struct UsageMeter {
    format: UsageFormat,
    line: Vec<u8>,
    /// The current line is over [`MAX_LINE_BYTES`]: skipped to its end.
    skipping: bool,
    /// What the lines so far add up to.
    summed: Usage,
    /// Claude Code: each message's usage while it runs (its content blocks repeat it), by message id.
    messages: BTreeMap<String, Usage>,
    /// The sum of `messages` (each within the bounds, so the sum of at most [`MAX_MESSAGES`] cannot overflow).
    messages_sum: Usage,
    /// Claude Code's final `result` line: the whole run's usage, which replaces the streamed estimate.
    result: Option<Usage>,
    limit: Option<Limit>,
    /// The CLI's own last word was an error (pi in JSON mode exits 0 after a failed request).
    error: Option<String>,
    /// The first figure refused (out of bounds, not a number), and why: the run counts as over budget.
    refused: Option<String>,
    /// The output it read ended ([`Self::finish`]): its process ran, whatever it reported.
    ran: bool,
}

impl UsageMeter {
    pub fn new(format: UsageFormat) -> Self {
        UsageMeter {
            format,
            line: Vec::new(),
            skipping: false,
            summed: Usage::default(),
            messages: BTreeMap::new(),
            messages_sum: Usage::default(),
            result: None,
            limit: None,
            error: None,
            refused: None,
            ran: false,
        }
    }

    pub fn reads_anything(&self) -> bool {
        !matches!(self.format, UsageFormat::None)
    }

    /// Takes a chunk of output.
    pub fn feed(&mut self, chunk: &[u8]) {
        if !self.reads_anything() {
            return;
        }
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            self.push(&rest[..end]);
            self.end_line();
            rest = &rest[end + 1..];
        }
        self.push(rest);
    }

    /// The output ended: a last line without a newline still counts.
    pub fn finish(&mut self) {
        self.ran = true;
        if !self.line.is_empty() {
            self.end_line();
        }
    }

    /// Whether the process it read ran (its output ended), reported usage or not: the run is counted.
    pub fn ran(&self) -> bool {
        self.ran
    }

    /// The run's usage so far (its final usage once the output ended).
    /// Held to the bounds: figures refused are not in it, and a sum past a bound stops there.
    pub fn usage(&self) -> Usage {
        self.unclamped().clamped()
    }

    fn unclamped(&self) -> Usage {
        if let Some(result) = self.result {
            return result;
        }
        let mut usage = self.summed;
        usage.add(&self.messages_sum);
        if !self.messages.is_empty() && usage.turns == 0 {
            usage.turns = u32::try_from(self.messages.len()).unwrap_or(u32::MAX);
        }
        usage
    }

    /// Why figures of the output were refused (the first one), if any were: the run counts as over budget.
    pub fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    fn refuse(&mut self, why: String) {
        self.refused.get_or_insert(why);
    }

    /// Adds a line's figures, or records why they are refused; then holds the run's sum to the bounds.
    fn add_line(&mut self, figures: Result<Usage, String>) {
        match figures.and_then(|usage| match usage.out_of_bounds() {
            None => Ok(usage),
            Some(why) => Err(why),
        }) {
            Ok(usage) => self.summed.add(&usage),
            Err(why) => self.refuse(format!("a usage line said {why}")),
        }
        self.check_run();
    }

    fn check_run(&mut self) {
        if let Some(why) = self.unclamped().out_of_bounds() {
            self.refuse(format!("the run's usage adds up to {why}"));
        }
    }

    /// The provider's limit the agent ran into, if its output said so and did not get through it afterwards.
    pub fn limit(&self) -> Option<&Limit> {
        self.limit.as_ref()
    }

    /// The error the CLI's output ended with, if it ended with one (a later success clears an earlier error).
    pub fn ended_in_error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    fn push(&mut self, bytes: &[u8]) {
        if self.skipping {
            return;
        }
        if self.line.len() + bytes.len() > MAX_LINE_BYTES {
            self.line.clear();
            self.skipping = true;
            return;
        }
        self.line.extend_from_slice(bytes);
    }

    fn end_line(&mut self) {
        let line = std::mem::take(&mut self.line);
        let skipped = std::mem::replace(&mut self.skipping, false);
        if skipped {
            return;
        }
        let Ok(text) = std::str::from_utf8(&line) else {
            return;
        };
        let text = text.trim();
        match &self.format {
            UsageFormat::None => {}
            UsageFormat::Pattern(pattern) => {
                if let Some(figures) = pattern.read(text) {
                    self.add_line(figures);
                }
            }
            UsageFormat::Claude => {
                if let Some(json) = json_line(text) {
                    self.claude(&json);
                }
            }
            UsageFormat::Codex => {
                if let Some(json) = json_line(text) {
                    self.codex(&json);
                }
            }
            UsageFormat::Pi => {
                if let Some(json) = json_line(text) {
                    self.pi(&json);
                }
            }
            UsageFormat::Opencode => {
                if let Some(json) = json_line(text) {
                    self.opencode(&json);
                }
            }
        }
    }

    fn claude(&mut self, line: &Value) {
        match line["type"].as_str() {
            Some("assistant") => {
                let message = &line["message"];
                let (Some(id), Some(usage)) = (message["id"].as_str(), message.get("usage")) else {
                    return;
                };
                let usage = match claude_usage(usage) {
                    Ok(usage) => usage,
                    Err(why) => return self.refuse(format!("a usage line said {why}")),
                };
                if !self.messages.contains_key(id) && self.messages.len() >= MAX_MESSAGES {
                    return self.refuse(format!("more than {MAX_MESSAGES} messages"));
                }
                if let Some(old) = self.messages.insert(id.to_owned(), usage) {
                    // Each within the bounds: exact, no overflow (see `messages_sum`).
                    let sum = &mut self.messages_sum;
                    sum.input_tokens -= old.input_tokens;
                    sum.output_tokens -= old.output_tokens;
                    sum.cache_read_tokens -= old.cache_read_tokens;
                    sum.cache_write_tokens -= old.cache_write_tokens;
                }
                self.messages_sum.add(&usage);
                self.check_run();
            }
            Some("result") => {
                let figures = line
                    .get("usage")
                    .map(claude_usage)
                    .unwrap_or(Ok(Usage::default()))
                    .and_then(|mut usage| {
                        usage.cost_usd = cost(&line["total_cost_usd"], "total_cost_usd")?;
                        usage.turns = turns(&line["num_turns"], "num_turns")?;
                        Ok(usage)
                    });
                match figures {
                    Ok(usage) => {
                        self.result = Some(usage);
                        self.check_run();
                    }
                    Err(why) => self.refuse(format!("a usage line said {why}")),
                }
                if line["is_error"].as_bool() == Some(true) {
                    let text = line["result"].as_str().unwrap_or("an error result");
                    self.error_text(Some(text));
                } else {
                    // It got through after all (a limit it waited out, a retried 429): no limit, no error.
                    self.error = None;
                    self.limit = None;
                }
            }
            Some("rate_limit_event") => {
                let info = &line["rate_limit_info"];
                if info["status"].as_str() == Some("rejected") {
                    let resets_at = epoch(&info["resetsAt"]);
                    let kind = info["rateLimitType"].as_str().unwrap_or("usage");
                    self.limit = Some(Limit {
                        resets_at,
                        message: format!("Claude Code: {kind} limit reached"),
                    });
                }
            }
            _ => {}
        }
    }

    fn codex(&mut self, line: &Value) {
        match line["type"].as_str() {
            Some("turn.completed") => {
                self.error = None;
                self.limit = None;
                let usage = &line["usage"];
                let figures = (|| -> Result<Usage, String> {
                    let input = tokens(&usage["input_tokens"], "input_tokens")?;
                    let cached = tokens(&usage["cached_input_tokens"], "cached_input_tokens")?;
                    Ok(Usage {
                        input_tokens: input.saturating_sub(cached),
                        output_tokens: tokens(&usage["output_tokens"], "output_tokens")?,
                        cache_read_tokens: cached.min(input),
                        cache_write_tokens: 0,
                        cost_usd: None,
                        turns: 1,
                    })
                })();
                self.add_line(figures);
            }
            Some("turn.failed") => self.error_text(line["error"]["message"].as_str()),
            Some("error") => self.error_text(line["message"].as_str()),
            _ => {}
        }
    }

    fn pi(&mut self, line: &Value) {
        if line["type"].as_str() != Some("message_end") {
            return;
        }
        let message = &line["message"];
        if message["role"].as_str() != Some("assistant") {
            return;
        }
        let usage = &message["usage"];
        let figures = (|| -> Result<Usage, String> {
            Ok(Usage {
                input_tokens: tokens(&usage["input"], "input")?,
                output_tokens: tokens(&usage["output"], "output")?,
                cache_read_tokens: tokens(&usage["cacheRead"], "cacheRead")?,
                cache_write_tokens: tokens(&usage["cacheWrite"], "cacheWrite")?,
                cost_usd: cost(&usage["cost"]["total"], "cost.total")?,
                turns: 1,
            })
        })();
        self.add_line(figures);
        if message["stopReason"].as_str() == Some("error") {
            self.error_text(
                message["errorMessage"]
                    .as_str()
                    .or(Some("a failed request")),
            );
        } else {
            self.error = None;
            self.limit = None;
        }
    }

    fn opencode(&mut self, line: &Value) {
        match line["type"].as_str() {
            Some("step_finish") => {
                self.error = None;
                self.limit = None;
                let part = &line["part"];
                let counts = &part["tokens"];
                let figures = (|| -> Result<Usage, String> {
                    Ok(Usage {
                        input_tokens: tokens(&counts["input"], "tokens.input")?,
                        // Reasoning is billed as output.
                        output_tokens: tokens(&counts["output"], "tokens.output")?
                            .saturating_add(tokens(&counts["reasoning"], "tokens.reasoning")?),
                        cache_read_tokens: tokens(&counts["cache"]["read"], "tokens.cache.read")?,
                        cache_write_tokens: tokens(
                            &counts["cache"]["write"],
                            "tokens.cache.write",
                        )?,
                        cost_usd: cost(&part["cost"], "cost")?,
                        turns: 1,
                    })
                })();
                self.add_line(figures);
            }
            Some("error") => {
                let error = &line["error"];
                let text = error["data"]["message"]
                    .as_str()
                    .or_else(|| error["name"].as_str());
                self.error_text(text);
            }
            _ => {}
        }
    }

    fn error_text(&mut self, text: Option<&str>) {
        let Some(text) = text else {
            return;
        };
        if let Some(limit) = limit_in_text(text) {
            self.limit.get_or_insert(limit);
        }
        self.error = Some(super::tail_chars(text.trim(), 500).to_owned());
    }
}

fn json_line(text: &str) -> Option<Value> {
    if !text.starts_with('{') {
        return None;
    }
    serde_json::from_str(text).ok()
}

fn claude_usage(usage: &Value) -> Result<Usage, String> {
    Ok(Usage {
        input_tokens: tokens(&usage["input_tokens"], "input_tokens")?,
        output_tokens: tokens(&usage["output_tokens"], "output_tokens")?,
        cache_read_tokens: tokens(&usage["cache_read_input_tokens"], "cache_read_input_tokens")?,
        cache_write_tokens: tokens(
            &usage["cache_creation_input_tokens"],
            "cache_creation_input_tokens",
        )?,
        cost_usd: None,
        turns: 0,
    })
}

/// A Unix time in seconds (or milliseconds, as some CLIs write it).
fn epoch(value: &Value) -> Option<DateTime<Utc>> {
    let n = value.as_i64()?;
    let seconds = if n > 100_000_000_000 { n / 1000 } else { n };
    Utc.timestamp_opt(seconds, 0).single()
}

/// Whether an error text is a provider's usage or rate limit, and when it lifts where it says. Matched on the
/// CLIs' own messages: "usage limit", "rate limit", "hit your limit", "limit reached", HTTP 429 and 529
/// (Anthropic's "overloaded").
pub fn limit_in_text(text: &str) -> Option<Limit> {
    let lower = text.to_ascii_lowercase();
    let says_limit = [
        "usage limit",
        "rate limit",
        "rate_limit",
        "hit your limit",
        "limit reached",
        "too many requests",
        "overloaded",
        "quota exceeded",
        "insufficient_quota",
    ]
    .iter()
    .any(|p| lower.contains(p))
        || status_code(&lower, "429")
        || status_code(&lower, "529");
    if !says_limit {
        return None;
    }
    // Claude Code's older form: "Claude AI usage limit reached|<unix seconds>".
    let resets_at = text
        .rsplit_once('|')
        .and_then(|(_, n)| n.trim().parse::<i64>().ok())
        .and_then(|n| epoch(&Value::from(n)));
    Some(Limit {
        resets_at,
        message: super::tail_chars(text.trim(), 300).to_owned(),
    })
}

/// `code` as a number of its own in `text` (not a part of a longer number).
fn status_code(text: &str, code: &str) -> bool {
    text.match_indices(code).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + code.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric())
            && !after.is_some_and(|c| c.is_ascii_alphanumeric())
    })
}

mod figures;
mod pattern;
pub use pattern::UsagePattern;
#[cfg(test)]
mod tests;
