//! `[pollers.<name>]`, read into `pollers::PollerConfig`.

use std::time::Duration;

use super::PollerTable;
use crate::pollers::PollerConfig;

/// `[pollers.<name>]`, if the file has it; `default` is the poller's own interval.
pub fn poller_config(
    table: Option<&PollerTable>,
    name: &str,
    default: Duration,
) -> Result<PollerConfig, String> {
    let Some(table) = table else {
        return Ok(PollerConfig {
            configured: false,
            enabled: true,
            interval: default,
        });
    };
    let interval = match table.interval_s {
        None => default,
        Some(seconds) => Some(seconds)
            .filter(|s| s.is_finite() && *s >= 0.1 && *s <= 86_400.0)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| {
                format!("pollers.{name}.interval_s must be a number of seconds from 0.1 to 86400")
            })?,
    };
    Ok(PollerConfig {
        configured: true,
        enabled: table.enabled,
        interval,
    })
}
