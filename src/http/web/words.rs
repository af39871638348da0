//! Words the pages share (a column's label, how long ago), here rather than in pages.rs so that the sections
//! pages.rs lays out (plan.rs, triage.rs, follow_ups.rs) need nothing of it.

use crate::tasks::Column;

pub(super) fn column_label(column: Column) -> &'static str {
    match column {
        Column::Triage => "triage",
        Column::Todo => "todo",
        Column::InProgress => "in progress",
        Column::InReview => "in review",
        Column::Done => "done",
        Column::Archived => "archived",
        Column::Cancelled => "cancelled",
    }
}

/// "3 min", "2 h", "5 d".
pub fn age(elapsed: chrono::Duration) -> String {
    let s = elapsed.num_seconds().max(0);
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..86400 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86400),
    }
}
