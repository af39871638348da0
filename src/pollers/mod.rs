//! Pollers: loops that ask the providers for what their webhooks should have told us, and append what the log
//! lacks in the webhook's own shape, so everything downstream (intake, reactions) handles a missed delivery as
//! if it had arrived. Each is a singleton loop (one replica polls), ticks at once on start, and is `unarmed`
//! when configured without its credential.

pub mod github;
pub mod linear;

use std::time::Duration;

/// `[pollers.<name>]` in `pidevops.toml`: `enabled` (default true once the table is there) and `interval_s`.
#[derive(Clone, Debug, PartialEq)]
pub struct PollerConfig {
    /// The table is there (the operator asked for the poller).
    pub configured: bool,
    pub enabled: bool,
    pub interval: Duration,
}

impl PollerConfig {
    pub fn from_file(file: &toml::Table, name: &str, default: Duration) -> Result<Self, String> {
        let Some(table) = file.get("pollers").and_then(|p| p.get(name)) else {
            return Ok(Self {
                configured: false,
                enabled: true,
                interval: default,
            });
        };
        let table = table
            .as_table()
            .ok_or_else(|| format!("[pollers.{name}] must be a table"))?;
        let enabled = match table.get("enabled") {
            None => true,
            Some(v) => v
                .as_bool()
                .ok_or_else(|| format!("pollers.{name}.enabled must be true or false"))?,
        };
        let interval = match table.get("interval_s") {
            None => default,
            Some(v) => {
                let seconds = v
                    .as_float()
                    .or_else(|| v.as_integer().map(|i| i as f64))
                    .filter(|s| s.is_finite() && *s >= 0.1 && *s <= 86_400.0)
                    .ok_or_else(|| {
                        format!("pollers.{name}.interval_s must be a number of seconds from 0.1 to 86400")
                    })?;
                Duration::from_secs_f64(seconds)
            }
        };
        Ok(Self {
            configured: true,
            enabled,
            interval,
        })
    }
}
