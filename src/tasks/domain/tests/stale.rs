//! Staleness: due only in review past the age, recorded once per review episode, a new submission starting
//! another; a touch after the loop looked, or a closed task, records nothing; `close` cancels with its reason.

use super::super::tests::{at, reason, run, task_in, then};
use super::super::{decide as decide_task, evolve, Command, Task, TaskEvent};
use super::*;

fn rule(after_h: u32, action: StaleAction) -> StaleRule {
    StaleRule { after_h, action }
}

fn hours_after(task: &Task, h: i64) -> DateTime<Utc> {
    task.updated_at() + chrono::Duration::hours(h)
}

/// Decides and applies, returning the task and the kinds of the events recorded.
fn apply(task: Task, command: &Command, now: DateTime<Utc>) -> (Task, Vec<&'static str>) {
    let events = decide_task(Some(&task), command, now).expect("accepted");
    let kinds = events.iter().map(TaskEvent::kind).collect();
    let task = events
        .iter()
        .try_fold(task, |t, e| evolve(Some(t), e))
        .expect("decide's events apply");
    (task, kinds)
}

#[test]
fn a_review_is_due_only_past_its_age_and_only_once_per_episode() {
    let rule = rule(24, StaleAction::Remind);
    let task = task_in(Column::InReview);
    assert!(!rule.is_due(&task, hours_after(&task, 23)));
    assert!(rule.is_due(&task, hours_after(&task, 24)));
    let now = hours_after(&task, 30);
    let (stale, kinds) = apply(task, &rule.command(&task_in(Column::InReview)), now);
    assert_eq!(kinds, ["task.went_stale"]);
    assert_eq!(stale.column(), Column::InReview);
    assert_eq!(stale.stale_since(), Some(now));
    // A second tick, a restart, another replica: the episode is marked, nothing more is due or recorded.
    assert!(!rule.is_due(&stale, hours_after(&stale, 100)));
    let again = Command::MarkStale {
        after_h: 24,
        action: StaleAction::Remind,
        last_activity: stale.updated_at(),
    };
    assert_eq!(
        decide_task(Some(&stale), &again, hours_after(&stale, 100)),
        Ok(Vec::new())
    );
    // A new push (a follow-up sent it round, a new submission) starts a new episode.
    let round = then(
        stale,
        Command::Retry {
            cause: crate::tasks::RetryCause::ChangesRequested,
            reason: reason("more please"),
        },
    );
    let round = then(round, Command::Start { run: run(2) });
    let resubmitted = then(
        round,
        Command::SubmitForReview {
            run: run(2),
            branch: "pidevops/T-7".parse().expect("a branch"),
            pr: None,
            report: Default::default(),
        },
    );
    assert_eq!(resubmitted.stale_since(), None);
    assert!(rule.is_due(&resubmitted, hours_after(&resubmitted, 24)));
}

#[test]
fn a_task_touched_since_the_loop_looked_or_out_of_review_records_nothing() {
    let rule = rule(1, StaleAction::Remind);
    let task = task_in(Column::InReview);
    let seen = rule.command(&task);
    // Touched after the loop judged its age (a check passed, a comment): the command is stale itself.
    let touched = {
        let mut later = task.clone();
        later.updated_at = task.updated_at + chrono::Duration::minutes(5);
        later
    };
    assert_eq!(
        decide_task(Some(&touched), &seen, hours_after(&task, 2)),
        Ok(Vec::new())
    );
    for column in [
        Column::Triage,
        Column::Todo,
        Column::InProgress,
        Column::Done,
        Column::Cancelled,
    ] {
        let other = task_in(column);
        assert!(!rule.is_due(&other, hours_after(&other, 1000)), "{column}");
        assert_eq!(
            decide_task(
                Some(&other),
                &rule.command(&other),
                hours_after(&other, 1000)
            ),
            Ok(Vec::new()),
            "{column}"
        );
    }
}

#[test]
fn close_cancels_the_task_with_the_reason_on_its_page() {
    let rule = rule(48, StaleAction::Close);
    let task = task_in(Column::InReview);
    let (closed, kinds) = apply(task.clone(), &rule.command(&task), hours_after(&task, 49));
    assert_eq!(kinds, ["task.went_stale", "task.cancelled"]);
    assert_eq!(closed.column(), Column::Cancelled);
    assert_eq!(
        closed.closed_reason().map(Reason::as_str),
        Some("no activity in review for 48 h: pull request #3 closed (stale_action = \"close\")")
    );
}

#[test]
fn went_stale_applies_only_in_review() {
    let event = TaskEvent::WentStale {
        at: at(5),
        after_h: 1,
        action: StaleAction::Remind,
    };
    assert!(evolve(Some(task_in(Column::Todo)), &event).is_err());
    assert!(evolve(Some(task_in(Column::InReview)), &event).is_ok());
}

#[test]
fn the_action_reads_and_writes_as_configured() {
    assert_eq!(
        serde_json::to_string(&StaleAction::Close).expect("json"),
        "\"close\""
    );
    assert_eq!(StaleAction::default(), StaleAction::Remind);
    assert_eq!(StaleAction::Remind.as_str(), "remind");
}

#[test]
fn close_waits_only_on_a_github_pull_request_a_reminder_on_any_review_request() {
    use crate::tasks::values::{GitlabMrRef, Links, GITLAB_MR};
    let mut on_gitlab = task_in(Column::InReview);
    let mr = GitlabMrRef::new(on_gitlab.repo().clone(), 4).expect("an iid");
    on_gitlab.links = Links::default().with(GITLAB_MR, &mr);
    let later = hours_after(&on_gitlab, 10);
    assert!(rule(1, StaleAction::Remind).is_due(&on_gitlab, later));
    assert!(
        !rule(1, StaleAction::Close).is_due(&on_gitlab, later),
        "nothing would close it"
    );
    let on_github = task_in(Column::InReview);
    assert!(rule(1, StaleAction::Close).is_due(&on_github, hours_after(&on_github, 10)));
}
