//! The board's "behind" mark (issue 33): a task whose review request its host finds `behind` its base or `dirty`
//! (in conflict with it), as its poller recorded it (`refresh.due`, keyed `refresh-due:<task>:<head>:<state>`),
//! until the task's next push (`task.refreshed`, `task.submitted_for_review`) or until its branch is found holding
//! the base (`refresh.current`, keyed `refresh-current:<task>:<head>:<base>`: by the refresh loop's git, the host's
//! word being stale; or by the host's poller, which no longer finds it behind: a person brought it up to date).
//! A push to its base marks it too, `base_moved`, from when the refresh loop takes the push up until that task's
//! refresh ends (`refresh.base_moved`, keyed `refresh-moved:<task>:<head>:<push position>`): refreshes are one at
//! a time, and the ones waiting show as possibly behind.
//! A repository whose `refresh` is `"off"` is marked too (its poller still records what the host says; nothing
//! refreshes it): a person must act. Read from the events' headers only (the key and the type: no body is read),
//! folded in log order, the last word per task written in the batch's transaction. A mark about a head the task
//! was refreshed from since is dropped when the row is read.

use std::collections::HashMap;

use super::{is_task_event, ProjectorTx};
use crate::eventlog::StoredEvent;
use crate::tasks::TaskId;

/// The type of the event a host's poller appends for a review request behind or in conflict with its base.
pub const REFRESH_DUE: &str = "refresh.due";
/// How `refresh.due`'s key starts (`landing::refresh::Due::key`).
const DUE_KEY_PREFIX: &str = "refresh-due:";
/// The type of the event the refresh loop appends when a task it was asked to refresh (a `refresh.due`) holds
/// its base already.
pub const REFRESH_CURRENT: &str = "refresh.current";
/// How `refresh.current`'s key starts (`landing::refresh::Current::key`).
const CURRENT_KEY_PREFIX: &str = "refresh-current:";
/// The type of the event the refresh loop appends for each task it is about to refresh on a push to its base
/// (`landing::refresh::BaseMoved`): possibly behind until that refresh ends.
pub const REFRESH_BASE_MOVED: &str = "refresh.base_moved";
/// How `refresh.base_moved`'s key starts (`landing::refresh::BaseMoved::key`).
const MOVED_KEY_PREFIX: &str = "refresh-moved:";
/// The mark's state for a `refresh.base_moved`: the base moved, the refresh is still to come.
pub const BASE_MOVED: &str = "base_moved";
/// The task events after which a branch is pushed anew: what was behind is not any more.
const PUSHED: [&str; 2] = ["task.refreshed", "task.submitted_for_review"];

/// A mark as `tasks.behind` and `tasks.behind_head` hold it: the state and the head.
pub(super) type Mark = (String, String);

/// A `refresh.due` key's task, head and state (`behind`, `dirty`); none for another key.
pub fn due_key_parts(key: &str) -> Option<(TaskId, &str, &str)> {
    let mut parts = key.strip_prefix(DUE_KEY_PREFIX)?.splitn(3, ':');
    let task = parts.next()?.parse().ok()?;
    let (head, state) = (parts.next()?, parts.next()?);
    (!head.is_empty() && !state.is_empty()).then_some((task, head, state))
}

/// A `refresh.base_moved` key's task and head; none for another key.
fn moved_key_parts(key: &str) -> Option<(TaskId, &str)> {
    let mut parts = key.strip_prefix(MOVED_KEY_PREFIX)?.splitn(3, ':');
    let task = parts.next()?.parse().ok()?;
    let head = parts.next()?;
    let push = parts.next()?;
    (!head.is_empty() && push.parse::<i64>().is_ok()).then_some((task, head))
}

/// A `refresh.current` key's task; none for another key.
fn current_key_task(key: &str) -> Option<TaskId> {
    key.strip_prefix(CURRENT_KEY_PREFIX)?
        .split(':')
        .next()?
        .parse()
        .ok()
}

/// Each task's last word in `events`, in first-seen order: marked behind (its state and head), or cleared.
pub(super) fn marks(events: &[StoredEvent]) -> Vec<(TaskId, Option<(String, String)>)> {
    let mut order: Vec<(TaskId, Option<(String, String)>)> = Vec::new();
    let mut at: HashMap<TaskId, usize> = HashMap::new();
    let mut set = |task: TaskId, mark: Option<(String, String)>| match at.get(&task) {
        Some(i) => order[*i].1 = mark,
        None => {
            at.insert(task, order.len());
            order.push((task, mark));
        }
    };
    for event in events {
        if event.source == super::SOURCE && event.event_type == REFRESH_DUE {
            if let Some((task, head, state)) = due_key_parts(&event.dedup_key) {
                set(task, Some((state.to_owned(), head.to_ascii_lowercase())));
            }
        } else if event.source == super::SOURCE && event.event_type == REFRESH_BASE_MOVED {
            if let Some((task, head)) = moved_key_parts(&event.dedup_key) {
                set(
                    task,
                    Some((BASE_MOVED.to_owned(), head.to_ascii_lowercase())),
                );
            }
        } else if event.source == super::SOURCE && event.event_type == REFRESH_CURRENT {
            if let Some(task) = current_key_task(&event.dedup_key) {
                set(task, None);
            }
        } else if is_task_event(event) && PUSHED.contains(&event.event_type.as_str()) {
            let stream = event.stream.as_deref().unwrap_or_default();
            if let Ok(task) = stream[super::STREAM_PREFIX.len()..].parse() {
                set(task, None);
            }
        }
    }
    order
}

/// Writes each mark on its task's row (none yet: nothing).
pub(super) async fn write(
    tx: &mut ProjectorTx,
    marks: &[(TaskId, Option<(String, String)>)],
) -> anyhow::Result<()> {
    for (task, mark) in marks {
        let (state, head) = match mark {
            Some((state, head)) => (Some(state.as_str()), Some(head.as_str())),
            None => (None, None),
        };
        on_tx!(tx, |conn| sqlx::query(
            "UPDATE tasks SET behind = $1, behind_head = $2 WHERE task_id = $3"
        )
        .bind(state)
        .bind(head)
        .bind(task.to_string())
        .execute(conn)
        .await
        .map(|_| ()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(position: i64, event_type: &str, stream: Option<&str>, key: &str) -> StoredEvent {
        StoredEvent {
            position,
            id: uuid::Uuid::now_v7(),
            source: "pidevops".into(),
            event_type: event_type.into(),
            dedup_key: key.into(),
            stream: stream.map(str::to_owned),
            stream_version: stream.map(|_| position),
            occurred_at: chrono::Utc::now(),
            recorded_at: chrono::Utc::now(),
            action: None,
            repository: None,
            number: None,
            reference: None,
            content_type: "application/json".into(),
            body: Vec::new(),
            meta: Default::default(),
        }
    }

    #[test]
    fn the_last_word_per_task_wins_a_push_or_a_current_head_clears_and_a_due_marks() {
        let head = "b".repeat(40);
        let due = |p: i64, task: &str, state: &str| {
            header(
                p,
                REFRESH_DUE,
                None,
                &format!("refresh-due:{task}:{head}:{state}"),
            )
        };
        let moved = |p: i64, task: &str, push: &str| {
            header(
                p,
                REFRESH_BASE_MOVED,
                None,
                &format!("refresh-moved:{task}:{head}:{push}"),
            )
        };
        let pushed = |p: i64, task: &str, kind: &str| {
            header(p, kind, Some(&format!("task:{task}")), &p.to_string())
        };
        let marks = marks(&[
            due(1, "T-1", "behind"),
            pushed(2, "T-1", "task.refreshed"),
            pushed(3, "T-2", "task.submitted_for_review"),
            due(4, "T-2", "dirty"),
            due(5, "T-3", "behind"),
            pushed(6, "T-3", "task.submitted_for_review"),
            pushed(7, "T-4", "task.check_passed"),
            due(8, "T-4", "behind"),
            header(9, "task.refreshed", Some("refresh:T-4"), "9"),
            due(10, "T-5", "behind"),
            header(
                11,
                REFRESH_CURRENT,
                None,
                &format!("refresh-current:T-5:{head}:{head}"),
            ),
            due(12, "T-6", "behind"),
            header(13, REFRESH_CURRENT, None, "refresh-current:nope:x:y"),
            moved(14, "T-7", "14"),
            moved(15, "T-8", "15"),
            pushed(16, "T-8", "task.refreshed"),
            moved(17, "T-9", "not-a-position"),
            moved(18, "T-10", "18"),
            header(
                19,
                REFRESH_CURRENT,
                None,
                &format!("refresh-current:T-10:{head}:{head}"),
            ),
        ]);
        let shown: Vec<(String, Option<&str>)> = marks
            .iter()
            .map(|(task, mark)| {
                (
                    task.to_string(),
                    mark.as_ref().map(|(state, _)| state.as_str()),
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                ("T-1".to_owned(), None),
                ("T-2".to_owned(), Some("dirty")),
                ("T-3".to_owned(), None),
                ("T-4".to_owned(), Some("behind")),
                ("T-5".to_owned(), None),
                ("T-6".to_owned(), Some("behind")),
                ("T-7".to_owned(), Some(BASE_MOVED)),
                ("T-8".to_owned(), None),
                ("T-10".to_owned(), None),
            ]
        );
    }

    #[test]
    fn a_due_key_names_its_task_head_and_state_and_nothing_else_does() {
        let head = "a".repeat(40);
        let key = format!("refresh-due:T-7:{head}:dirty");
        let (task, h, state) = due_key_parts(&key).unwrap();
        assert_eq!(
            (task.to_string().as_str(), h, state),
            ("T-7", head.as_str(), "dirty")
        );
        for other in [
            "refresh-due:T-7:",
            "refresh-due:nope:abc:behind",
            "refresh-base:o/n:main:abc",
            "refresh-due:T-7::behind",
        ] {
            assert!(due_key_parts(other).is_none(), "{other}");
        }
    }
}
