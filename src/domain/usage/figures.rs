//! The bounds on what an agent's usage lines may say, and their readers: every figure is a stranger's (a tool can
//! write to its CLI's stdout), so one outside the bounds is refused, named, never summed.

use serde_json::Value;

/// The most tokens of one kind a figure may say: per line, and a run's sum. An agent prints its own usage lines
/// (a tool can write to its CLI's stdout), so every figure is a stranger's: past this it is refused, not summed.
pub const MAX_TOKENS: u64 = 1_000_000_000;
/// The most US dollars a cost may say, per line and a run's sum; a cost must also be finite and not negative.
pub const MAX_COST_USD: f64 = 10_000.0;
/// The most model turns a run may count.
pub const MAX_TURNS: u32 = 1_000_000;
/// The most Claude Code messages a run's estimate keeps apart (each repeats its usage per content block).
pub const MAX_MESSAGES: usize = 100_000;

/// A token count as a line says it: absent (or null) is none; anything but a whole number from 0 to
/// [`MAX_TOKENS`] is refused, named.
pub(super) fn tokens(value: &Value, what: &str) -> Result<u64, String> {
    if value.is_null() {
        return Ok(0);
    }
    value.as_u64().filter(|n| *n <= MAX_TOKENS).ok_or_else(|| {
        format!(
            "{what} = {}: not a count from 0 to {MAX_TOKENS}",
            cut(&value.to_string())
        )
    })
}

/// A run's turns, as [`tokens`], within [`MAX_TURNS`].
pub(super) fn turns(value: &Value, what: &str) -> Result<u32, String> {
    if value.is_null() {
        return Ok(0);
    }
    value
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n <= MAX_TURNS)
        .ok_or_else(|| {
            format!(
                "{what} = {}: not a count from 0 to {MAX_TURNS}",
                cut(&value.to_string())
            )
        })
}

/// A cost in US dollars: absent (or null) is none; anything but a finite number from 0 to [`MAX_COST_USD`] is
/// refused, named.
pub(super) fn cost(value: &Value, what: &str) -> Result<Option<f64>, String> {
    if value.is_null() {
        return Ok(None);
    }
    value
        .as_f64()
        .filter(|c| c.is_finite() && (0.0..=MAX_COST_USD).contains(c))
        .map(Some)
        .ok_or_else(|| {
            format!(
                "{what} = {}: not a number of US dollars from 0 to {MAX_COST_USD}",
                cut(&value.to_string())
            )
        })
}

/// A stranger's text quoted in a reason: its first 40 characters.
pub(super) fn cut(text: &str) -> &str {
    text.char_indices()
        .nth(40)
        .map_or(text, |(at, _)| &text[..at])
}
