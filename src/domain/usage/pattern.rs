//! A custom agent's usage line: a regex with named groups, each matching line adding what it names.

use std::fmt;

use regex::Regex;

use super::figures::cut;
use super::{Usage, MAX_COST_USD, MAX_TOKENS, MAX_TURNS};

/// A custom agent's usage line: a regex with named groups.
#[derive(Clone, Debug)]
pub struct UsagePattern {
    regex: Regex,
}

impl UsagePattern {
    pub const GROUPS: [&'static str; 6] = [
        "input",
        "output",
        "cache_read",
        "cache_write",
        "cost",
        "turns",
    ];

    pub fn new(pattern: &str) -> Result<Self, String> {
        let regex = Regex::new(pattern).map_err(|e| format!("not a regex: {e}"))?;
        let names: Vec<&str> = regex.capture_names().flatten().collect();
        if let Some(unknown) = names.iter().find(|n| !Self::GROUPS.contains(n)) {
            return Err(format!(
                "unknown group (?P<{unknown}>…): the groups are {}",
                Self::GROUPS.join(", ")
            ));
        }
        if names.is_empty() {
            return Err(format!(
                "the regex names no group: name at least one of {}",
                Self::GROUPS.join(", ")
            ));
        }
        Ok(UsagePattern { regex })
    }

    /// The figures of a matching line; `Err` names one a stranger made up (not a number, out of bounds).
    pub(super) fn read(&self, line: &str) -> Option<Result<Usage, String>> {
        let captures = self.regex.captures(line)?;
        let number = |name: &str| -> Result<u64, String> {
            let Some(m) = captures.name(name) else {
                return Ok(0);
            };
            m.as_str()
                .replace([',', '_'], "")
                .parse::<u64>()
                .ok()
                .filter(|n| *n <= MAX_TOKENS)
                .ok_or_else(|| {
                    format!(
                        "{name} = {:?}: not a count from 0 to {MAX_TOKENS}",
                        cut(m.as_str())
                    )
                })
        };
        let read = || -> Result<Usage, String> {
            let cost = match captures.name("cost") {
                None => None,
                Some(m) => Some(
                    m.as_str()
                        .parse::<f64>()
                        .ok()
                        .filter(|c| c.is_finite() && (0.0..=MAX_COST_USD).contains(c))
                        .ok_or_else(|| {
                            format!(
                                "cost = {:?}: not a number of US dollars from 0 to {MAX_COST_USD}",
                                cut(m.as_str())
                            )
                        })?,
                ),
            };
            let turns = number("turns")?;
            Ok(Usage {
                input_tokens: number("input")?,
                output_tokens: number("output")?,
                cache_read_tokens: number("cache_read")?,
                cache_write_tokens: number("cache_write")?,
                cost_usd: cost,
                turns: u32::try_from(turns)
                    .ok()
                    .filter(|t| *t <= MAX_TURNS)
                    .ok_or_else(|| format!("turns = {turns}: at most {MAX_TURNS}"))?,
            })
        };
        Some(read())
    }
}

impl PartialEq for UsagePattern {
    fn eq(&self, other: &Self) -> bool {
        self.regex.as_str() == other.regex.as_str()
    }
}

impl fmt::Display for UsagePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.regex.as_str())
    }
}
