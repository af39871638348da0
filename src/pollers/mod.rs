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
        if let Some(key) = table
            .keys()
            .find(|k| !["enabled", "interval_s"].contains(&k.as_str()))
        {
            return Err(format!(
                "pollers.{name}.{key} is not a poller setting (enabled, interval_s)"
            ));
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<PollerConfig, String> {
        PollerConfig::from_file(
            &text.parse::<toml::Table>().unwrap(),
            "linear",
            Duration::from_secs(300),
        )
    }

    #[test]
    fn a_poller_table_is_read_and_mistakes_are_named() {
        let absent = parse("").unwrap();
        assert!(!absent.configured && absent.enabled);
        assert_eq!(absent.interval, Duration::from_secs(300));
        let set = parse("[pollers.linear]\ninterval_s = 30").unwrap();
        assert!(set.configured && set.enabled);
        assert_eq!(set.interval, Duration::from_secs(30));
        assert!(!parse("[pollers.linear]\nenabled = false").unwrap().enabled);
        for (text, needle) in [
            (
                "[pollers.linear]\ninterval = 30",
                "pollers.linear.interval is not a poller setting",
            ),
            ("[pollers.linear]\ninterval_s = 0", "from 0.1 to 86400"),
            (
                "[pollers.linear]\nenabled = \"yes\"",
                "enabled must be true or false",
            ),
            ("[pollers]\nlinear = 5", "[pollers.linear] must be a table"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(needle), "{text} => {error}");
        }
    }
}
