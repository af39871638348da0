//! `[[schedules]]`: a task or a digest on a cron pattern.

use serde::{Deserialize, Serialize};

/// `[[schedules]]`: a task (or a digest) on a cron pattern.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScheduleTable {
    /// Required (checked with the schedule's other rules, so the message can name the schedule).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    pub timezone: String,
    pub digest: bool,
    /// Required unless `digest = true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<ScheduleTaskTable>,
}

impl Default for ScheduleTable {
    fn default() -> Self {
        Self {
            name: None,
            cron: None,
            timezone: "UTC".to_owned(),
            digest: false,
            task: None,
        }
    }
}

/// `[schedules.task]`: the task a schedule creates.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScheduleTaskTable {
    pub repo: String,
    pub task: String,
    pub scope: String,
    pub done_when: String,
    /// Default: normal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
}

/// `[digest]`: the built-in daily digest.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DigestTable {
    pub enabled: bool,
    pub time: String,
    pub timezone: String,
}

impl Default for DigestTable {
    fn default() -> Self {
        Self {
            enabled: false,
            time: "09:00".to_owned(),
            timezone: "UTC".to_owned(),
        }
    }
}
