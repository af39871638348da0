//! A task's follow-ups on its page, oldest first: what was written, by whom and where (the origin's `from`), when,
//! and whether it was handed over: to which attempt, live to the running agent or in its prompt. Pure; every
//! value is untrusted text, escaped by maud.

use chrono::{DateTime, Utc};
use maud::{html, Markup};

use super::words::age;
use crate::tasks::{FollowUp, Task};

pub fn follow_ups_section(task: &Task, now: DateTime<Utc>) -> Markup {
    html! {
        @if !task.follow_ups().is_empty() {
            section.follow-ups {
                h2 { "Follow-ups" }
                ol {
                    @for follow_up in task.follow_ups() {
                        li data-handed=(handed_key(follow_up)) {
                            p.muted {
                                (follow_up.origin.as_ref().map_or("someone (no origin recorded)", |o| o.from()))
                                " · " (age(now - follow_up.at)) " ago · " (handed(follow_up))
                            }
                            pre { (follow_up.text.as_str()) }
                        }
                    }
                }
            }
        }
    }
}

fn handed_key(follow_up: &FollowUp) -> &'static str {
    match (follow_up.delivered_to_attempt, follow_up.live) {
        (None, _) => "waiting",
        (Some(_), true) => "live",
        (Some(_), false) => "prompt",
    }
}

fn handed(follow_up: &FollowUp) -> String {
    match (follow_up.delivered_to_attempt, follow_up.live) {
        (None, _) => "not handed over yet".to_owned(),
        (Some(attempt), true) => format!("handed to the running agent, attempt {attempt}"),
        (Some(attempt), false) => format!("in attempt {attempt}'s prompt"),
    }
}
