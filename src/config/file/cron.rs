//! `[[schedules]]` and `[digest]`, read into `cron::Schedule`s.

use std::collections::BTreeSet;
use std::str::FromStr;

use super::{DigestTable, Tables};
use crate::cron::{parse_pattern, Schedule, ScheduleAction, DAILY_DIGEST};
use crate::tasks::{Priority, RepoName, Spec};

/// `[[schedules]]` and `[digest]`. Every mistake names its schedule and key.
pub fn schedules(tables: &Tables) -> Result<Vec<Schedule>, String> {
    let mut names = BTreeSet::new();
    let mut out = Vec::new();
    if let Some(daily) = daily_digest(&tables.digest)? {
        names.insert(daily.name.clone());
        out.push(daily);
    }
    for (i, table) in tables.schedules.iter().enumerate() {
        let name = table
            .name
            .clone()
            .ok_or_else(|| format!("schedules[{i}].name is missing"))?;
        let at = format!("schedule {name:?}");
        if name.is_empty()
            || name.len() > 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "{at}: a name is 1 to 64 of a-z, 0-9, '-' and '_' (it names a stream in the log)"
            ));
        }
        if !names.insert(name.clone()) {
            return Err(if name == DAILY_DIGEST {
                format!("{at} is the built-in daily digest's name ([digest]); pick another")
            } else {
                format!("{at} is defined twice")
            });
        }
        if table.digest && table.task.is_some() {
            return Err(format!(
                "{at}: a schedule either sends a digest (digest = true) or creates a task ([schedules.task]), not both"
            ));
        }
        let pattern = table
            .cron
            .clone()
            .ok_or_else(|| format!("{at}: cron is missing"))?;
        let cron = parse_pattern(&pattern)
            .map_err(|e| format!("{at}: cron {pattern:?} is not a 5- or 6-field pattern: {e}"))?;
        let tz = &table.timezone;
        let timezone = chrono_tz::Tz::from_str(tz)
            .map_err(|_| format!("{at}: timezone {tz:?} is not an IANA time zone name"))?;
        if table.digest {
            out.push(Schedule {
                name,
                pattern,
                cron,
                timezone,
                action: ScheduleAction::Digest,
            });
            continue;
        }
        let task = table.task.as_ref().ok_or_else(|| {
            format!("{at}: [schedules.task] is missing (what the schedule creates), or set digest = true")
        })?;
        let repo = task
            .repo
            .parse::<RepoName>()
            .map_err(|e| format!("{at}: task.repo: {e}"))?;
        let spec = Spec::new(
            task.task.clone(),
            task.scope.clone(),
            task.done_when.clone(),
        )
        .map_err(|e| format!("{at}: {e}"))?;
        let priority = match &task.priority {
            None => None,
            Some(priority) => Some(
                priority
                    .parse::<Priority>()
                    .map_err(|e| format!("{at}: task.priority: {e}"))?,
            ),
        };
        out.push(Schedule {
            name,
            pattern,
            cron,
            timezone,
            action: ScheduleAction::Task {
                repo,
                spec,
                priority,
            },
        });
    }
    Ok(out)
}

/// `[digest]`: the built-in daily digest, off unless `enabled = true`.
fn daily_digest(table: &DigestTable) -> Result<Option<Schedule>, String> {
    if !table.enabled {
        return Ok(None);
    }
    let time = &table.time;
    let (hour, minute) = time
        .split_once(':')
        .and_then(|(h, m)| Some((h.parse::<u32>().ok()?, m.parse::<u32>().ok()?)))
        .filter(|(h, m)| *h < 24 && *m < 60)
        .ok_or_else(|| format!("digest.time {time:?} is not a time of day like \"09:00\""))?;
    let name = &table.timezone;
    let timezone = chrono_tz::Tz::from_str(name)
        .map_err(|_| format!("digest.timezone {name:?} is not an IANA time zone name"))?;
    let pattern = format!("{minute} {hour} * * *");
    let cron = parse_pattern(&pattern).map_err(|e| format!("digest: {pattern:?}: {e}"))?;
    Ok(Some(Schedule {
        name: DAILY_DIGEST.to_owned(),
        pattern,
        cron,
        timezone,
        action: ScheduleAction::Digest,
    }))
}
