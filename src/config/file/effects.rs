//! `[linear.states]`, `[telegram]` and `[effects]`: what the `effects:<provider>` loops are told of the file.

use super::Tables;
use crate::domain::effect::LinearStates;
use crate::effects::cap::{EffectCap, MAX_PER_HOUR};

/// `[linear.states]`: `in_progress`, `in_review`, `done`, `blocked`, each a name or a list of names.
pub fn linear_states(tables: &Tables) -> Result<LinearStates, String> {
    let table = &tables.linear.states;
    let mut states = LinearStates::default();
    for (key, names, into) in [
        ("in_progress", &table.in_progress, &mut states.in_progress),
        ("in_review", &table.in_review, &mut states.in_review),
        ("done", &table.done, &mut states.done),
        ("blocked", &table.blocked, &mut states.blocked),
    ] {
        if names.0.is_empty() || names.0.iter().any(|n| n.trim().is_empty()) {
            return Err(format!("linear.states.{key} names an empty state"));
        }
        into.clone_from(&names.0);
    }
    Ok(states)
}

/// The Telegram cooldown from `[telegram] cooldown_s` (default 600).
pub fn telegram_cooldown(tables: &Tables) -> Result<chrono::Duration, String> {
    Some(tables.telegram.cooldown_s)
        .filter(|s| (0..=86_400).contains(s))
        .map(chrono::Duration::seconds)
        .ok_or_else(|| {
            "telegram.cooldown_s must be a whole number of seconds from 0 to 86400".to_owned()
        })
}

/// `[effects] max_per_task_per_hour`: a whole number from 0 (no cap) to [`MAX_PER_HOUR`].
pub fn effect_cap(tables: &Tables) -> Result<EffectCap, String> {
    let calls = tables.effects.max_per_task_per_hour;
    u32::try_from(calls)
        .ok()
        .filter(|c| i64::from(*c) <= MAX_PER_HOUR)
        .map(EffectCap::per_hour)
        .ok_or_else(|| {
            format!(
                "effects.max_per_task_per_hour must be a whole number from 0 (no cap) to {MAX_PER_HOUR}, \
                 not {calls}"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configured_cap_is_checked() {
        let tables = |calls: i64| {
            let mut tables = Tables::default();
            tables.effects.max_per_task_per_hour = calls;
            tables
        };
        assert_eq!(effect_cap(&Tables::default()), Ok(EffectCap::per_hour(20)));
        assert_eq!(effect_cap(&tables(0)), Ok(EffectCap::off()));
        assert_eq!(effect_cap(&tables(3600)), Ok(EffectCap::per_hour(3600)));
        for bad in [-1, 3601, i64::MAX] {
            assert_eq!(
                effect_cap(&tables(bad)),
                Err(format!(
                    "effects.max_per_task_per_hour must be a whole number from 0 (no cap) to 3600, not {bad}"
                ))
            );
        }
    }
}
