//! A task page's refreshes (issue 33): every time the branch was brought onto a moved base, one row each, in order,
//! with its outcome: refreshed (`task.refreshed`), held for and then passed or failed by the repository's check
//! (`task.refresh_check_due`, then `task.refreshed` or `task.refresh_check_failed`), in conflict
//! (`task.conflict_found`: the files, the hunks), resolved by attempt N (the conflict attempt whose run pushed its
//! resolution: its `started`, then `submitted_for_review`) or not (`task.conflict_unresolved`), and a person
//! flagged (the flag that follows an unresolved one, or the `refresh` loop's own). Read from the task's own stream
//! as the page loaded it (no read of its own), folded here, pure.
//!
//! Each row's diff: a conflict's hunks and a failed check's output are in its event; what a refresh or a
//! resolution changed on the pull request's own diff was recorded beside it when it was made
//! (`dispatch::workspace::remerge`), read back for the last [`DIFFS_SHOWN`] rows (none there: the row says why).
//! All of it is branch content a stranger may have written: only ever inert text. With its code host's comparison
//! of the two commits (GitHub's, or the GitLab instance's for a GitLab-hosted repository).

use chrono::{DateTime, Utc};
use maud::{html, Markup};

use crate::dispatch::workspace::{read_remerge, RemergeDiff, REMERGE_CAP};
use crate::eventlog::StoredEvent;
use crate::projectors::runs::RunRow;
use crate::tasks::{CommitSha, RefreshMode, RunId, RunPurpose, TaskEvent, TaskId};

/// The rows whose recorded diffs are read (the newest); older ones say so.
pub const DIFFS_SHOWN: usize = 10;
/// Who the `refresh` loop's commands are from (`landing::refresh`): its flags are refreshes' too.
const REFRESH_ACTOR: &str = "refresh";

/// How a refresh ended (so far).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Brought up to date and pushed.
    Refreshed,
    /// Held for the repository's check, which has not ended.
    Checking,
    /// Held for the repository's check, which passed: pushed.
    Checked,
    /// The repository's check failed on it: nothing pushed.
    CheckFailed,
    /// In conflict with the base: an agent's attempt is to resolve it.
    Conflicted,
    /// The agent's attempt `attempt` resolved it (or made the check pass) and pushed the resolution.
    Resolved { attempt: u32 },
    /// The agent's attempt ended without a resolution pushed.
    Unresolved,
    /// Not refreshed: a person was flagged with why.
    Flagged,
}

impl Outcome {
    /// The outcome's word, as the row shows it.
    pub fn word(self) -> String {
        match self {
            Outcome::Refreshed => "refreshed".to_owned(),
            Outcome::Checking => "waiting for its check".to_owned(),
            Outcome::Checked => "refreshed after its check".to_owned(),
            Outcome::CheckFailed => "check failed".to_owned(),
            Outcome::Conflicted => "conflicted".to_owned(),
            Outcome::Resolved { attempt } => format!("resolved by attempt {attempt}"),
            Outcome::Unresolved => "unresolved".to_owned(),
            Outcome::Flagged => "a person flagged".to_owned(),
        }
    }

    /// A stable name for the row (`data-outcome`).
    pub fn kind(self) -> &'static str {
        match self {
            Outcome::Refreshed => "refreshed",
            Outcome::Checking => "checking",
            Outcome::Checked => "checked",
            Outcome::CheckFailed => "check-failed",
            Outcome::Conflicted => "conflicted",
            Outcome::Resolved { .. } => "resolved",
            Outcome::Unresolved => "unresolved",
            Outcome::Flagged => "flagged",
        }
    }
}

/// One refresh of the task, as the page shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refresh {
    pub at: DateTime<Utc>,
    pub outcome: Outcome,
    /// The commit pidevops had pushed, brought onto `base`.
    pub from: Option<CommitSha>,
    /// The commit the refresh made (a conflict's: none).
    pub to: Option<CommitSha>,
    pub base: Option<CommitSha>,
    pub strategy: Option<RefreshMode>,
    /// The files in conflict, for a person (`a, b and 3 more`).
    pub files: Option<String>,
    /// The conflicting hunks, or the failing check's output, as recorded.
    pub hunks: Option<String>,
    /// Why it did not end refreshed (the run's failure, the flag's reason).
    pub why: Option<String>,
    /// A person was flagged after it.
    pub flagged: bool,
    /// The conflict attempt working on it (its number), and the run that pushed its resolution.
    pub attempt: Option<u32>,
    pub run: Option<RunId>,
}

impl Refresh {
    fn new(at: DateTime<Utc>, outcome: Outcome) -> Self {
        Self {
            at,
            outcome,
            from: None,
            to: None,
            base: None,
            strategy: None,
            files: None,
            hunks: None,
            why: None,
            flagged: false,
            attempt: None,
            run: None,
        }
    }
}

/// The refreshes in task events `events` (its stream, in order), oldest first.
pub fn of(events: &[StoredEvent]) -> Vec<Refresh> {
    let mut rows: Vec<Refresh> = Vec::new();
    // The row whose ending is still to come (a check running, a conflict with an agent).
    let mut open: Option<usize> = None;
    // The row that just ended without a push: the flag that follows it (same command) is its.
    let mut ended: Option<usize> = None;
    for stored in events {
        let Ok(event) = TaskEvent::from_stored(&stored.event_type, &stored.body) else {
            continue;
        };
        let just_ended = ended.take();
        let at = event.at();
        if let TaskEvent::RefreshCheckDue { check, .. } = &event {
            let mut row = Refresh::new(at, Outcome::Checking);
            row.from = Some(check.from.clone());
            row.to = Some(check.to.clone());
            row.base = Some(check.base.clone());
            row.strategy = Some(check.strategy);
            rows.push(row);
            open = Some(rows.len() - 1);
        } else if let TaskEvent::Refreshed {
            from,
            to,
            base,
            strategy,
            ..
        } = &event
        {
            match open.take().and_then(|i| rows.get_mut(i)) {
                Some(row) if row.outcome == Outcome::Checking && row.to.as_ref() == Some(to) => {
                    row.outcome = Outcome::Checked;
                }
                _ => {
                    let mut row = Refresh::new(at, Outcome::Refreshed);
                    row.from = Some(from.clone());
                    row.to = Some(to.clone());
                    row.base = Some(base.clone());
                    row.strategy = Some(*strategy);
                    rows.push(row);
                }
            }
        } else if let TaskEvent::RefreshCheckFailed { reason, .. } = &event {
            if let Some(i) = open.take() {
                if let Some(row) = rows.get_mut(i) {
                    row.outcome = Outcome::CheckFailed;
                    row.why = Some(reason.as_str().to_owned());
                    ended = Some(i);
                }
            }
        } else if let TaskEvent::ConflictFound { conflict, .. } = &event {
            // A failed check handed to an agent continues its row; a conflict git found is a row of its own.
            let continued = just_ended.filter(|i| {
                rows.get(*i).is_some_and(|row| {
                    conflict.check.is_some()
                        && row.outcome == Outcome::CheckFailed
                        && row.from.as_ref() == Some(&conflict.from)
                        && row.base.as_ref() == Some(&conflict.base)
                })
            });
            let i = continued.unwrap_or_else(|| {
                let mut row = Refresh::new(at, Outcome::Conflicted);
                row.from = Some(conflict.from.clone());
                row.base = Some(conflict.base.clone());
                if !conflict.files.is_empty() {
                    row.files = Some(conflict.named());
                }
                rows.push(row);
                rows.len() - 1
            });
            if let Some(row) = rows.get_mut(i) {
                row.hunks = conflict
                    .check
                    .clone()
                    .or_else(|| Some(conflict.hunks.clone()).filter(|h| !h.is_empty()));
            }
            open = Some(i);
        } else if let TaskEvent::Started {
            attempt, purpose, ..
        } = &event
        {
            if *purpose == RunPurpose::Resolve {
                if let Some(row) = open.and_then(|i| rows.get_mut(i)) {
                    row.attempt = Some(*attempt);
                }
            }
        } else if let TaskEvent::SubmittedForReview { run, .. } = &event {
            if let Some(row) = open.take().and_then(|i| rows.get_mut(i)) {
                if let Some(attempt) = row.attempt {
                    row.outcome = Outcome::Resolved { attempt };
                    row.run = Some(*run);
                }
            }
        } else if let TaskEvent::ConflictUnresolved { reason, .. } = &event {
            if let Some(i) = open.take() {
                if let Some(row) = rows.get_mut(i) {
                    row.outcome = Outcome::Unresolved;
                    row.why = Some(reason.as_str().to_owned());
                    ended = Some(i);
                }
            }
        } else if let TaskEvent::FlaggedNeedsHuman {
            reason,
            question: false,
            ..
        } = &event
        {
            if let Some(row) = just_ended.and_then(|i| rows.get_mut(i)) {
                row.flagged = true;
            } else if stored.meta.text("actor").as_deref() == Some(REFRESH_ACTOR) {
                let mut row = Refresh::new(at, Outcome::Flagged);
                row.why = Some(reason.as_str().to_owned());
                row.flagged = true;
                rows.push(row);
            }
        }
    }
    rows
}

/// What a row shows as its diff.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shown {
    /// What the refresh (or the resolution) changed on the pull request's own diff, as recorded.
    Recorded(RemergeDiff),
    /// Why there is none to show.
    Away(String),
    /// Nothing to look for (a conflict, a check, a flag: its event says it all).
    Nothing,
}

/// The recorded diff of each row (the newest [`DIFFS_SHOWN`]): a refresh's commit's, a resolution's (its run's
/// commit, from `runs`), under this machine's workspace root `root`.
pub async fn diffs(
    root: &std::path::Path,
    task: TaskId,
    rows: &[Refresh],
    runs: &[RunRow],
) -> Vec<Shown> {
    let mut shown = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let commit = match (row.outcome, &row.to, row.run) {
            (Outcome::Refreshed | Outcome::Checked, Some(to), _) => Some(to.as_str().to_owned()),
            (Outcome::Resolved { .. }, _, Some(run)) => {
                let run = run.to_string();
                runs.iter()
                    .find(|r| r.run_id == run)
                    .and_then(|r| r.commit_sha.clone())
            }
            _ => {
                shown.push(Shown::Nothing);
                continue;
            }
        };
        let found = if i + DIFFS_SHOWN < rows.len() {
            Shown::Away(format!(
                "Its diff is not shown: only the last {DIFFS_SHOWN} refreshes' are."
            ))
        } else {
            match commit {
                Some(commit) => match read_remerge(root, task, &commit).await {
                    Some(diff) => Shown::Recorded(diff),
                    None => Shown::Away(format!(
                        "No diff of {} is recorded on this machine (made on another, or removed after [dispatch] worktree_ttl_h).",
                        commit.get(..7).unwrap_or(&commit)
                    )),
                },
                None => Shown::Away("The resolution's commit is not known.".to_owned()),
            }
        };
        shown.push(found);
    }
    shown
}

/// Where the task's code host compares two commits, up to `<from>...<to>`: GitHub's for a GitHub repository, the
/// GitLab instance's (`GITLAB_URL`) for a GitLab-hosted one; none for any other remote.
pub fn compare_prefix(
    source: &crate::config::dispatch::RepoSource,
    repo: &str,
    gitlab_url: &str,
) -> Option<String> {
    if source.on_gitlab() {
        Some(format!(
            "{}/{repo}/-/compare/",
            gitlab_url.trim_end_matches('/')
        ))
    } else if source.on_github() {
        Some(format!("https://github.com/{repo}/compare/"))
    } else {
        None
    }
}

/// The section: nothing for a task never refreshed. `shown`: [`diffs`], row for row; `compare`:
/// [`compare_prefix`], for the comparison link.
pub fn section(
    refreshes: &[Refresh],
    shown: &[Shown],
    compare: Option<&str>,
    now: DateTime<Utc>,
) -> Markup {
    html! {
        @if !refreshes.is_empty() {
            h2 { "Refreshes" }
            table.refreshes {
                thead { tr { th { "at" } th { "outcome" } th { "from → to" } th { "onto base" } th { "how" } th { "changed" } } }
                tbody {
                    @for (i, refresh) in refreshes.iter().enumerate() {
                        tr data-outcome=(refresh.outcome.kind()) {
                            td {
                                time datetime=(refresh.at.to_rfc3339()) { (refresh.at.format("%Y-%m-%d %H:%M:%S UTC")) }
                                " " span.muted.age { "(" (super::words::age(now - refresh.at)) " ago)" }
                            }
                            td.outcome {
                                (refresh.outcome.word())
                                @if refresh.flagged && refresh.outcome != Outcome::Flagged { ", a person flagged" }
                            }
                            td {
                                @if let Some(from) = &refresh.from { code { (from.short()) } }
                                @if let Some(to) = &refresh.to { " → " code { (to.short()) } }
                            }
                            td { @if let Some(base) = &refresh.base { code { (base.short()) } } }
                            td { @if let Some(strategy) = refresh.strategy { (strategy.as_str()) } }
                            td {
                                @if let (Some(compare), Some(from), Some(to)) = (compare, &refresh.from, &refresh.to) {
                                    a href={ (compare) (from.as_str()) "..." (to.as_str()) } { "compare" }
                                }
                            }
                        }
                        tr.refresh-detail { td colspan="6" { (detail(refresh, shown.get(i).unwrap_or(&Shown::Nothing))) } }
                    }
                }
            }
        }
    }
}

/// Under a row: the files, why, and its diff (a recorded one, or the conflict's hunks or the check's output).
fn detail(refresh: &Refresh, shown: &Shown) -> Markup {
    html! {
        @if let Some(files) = &refresh.files { p { "Files in conflict: " code { (files) } } }
        @if let Some(why) = &refresh.why { p.reason { (why) } }
        @if let Some(hunks) = &refresh.hunks {
            details.refresh-hunks open {
                summary { @if refresh.outcome == Outcome::CheckFailed || refresh.files.is_none() { "The check's output" } @else { "The conflict" } }
                pre.patch { (hunks) }
            }
        }
        @match shown {
            Shown::Recorded(diff) => {
                @if diff.patch.is_empty() {
                    p.muted.refresh-diff { "No change to the pull request's own diff: only the base's changes came in." }
                } @else {
                    details.refresh-diff open {
                        summary { "What it changed on the pull request's diff (against a plain merge with the base)" }
                        @if diff.cut() {
                            p.cut {
                                "Truncated: the diff is " (super::attempt::bytes(diff.bytes))
                                @if diff.timed_out { " or more (git was stopped)" }
                                "; the first " (super::attempt::bytes(REMERGE_CAP as u64)) " are shown."
                            }
                        }
                        pre.patch {
                            @for line in diff.patch.lines() {
                                @match super::attempt::line_class(line) {
                                    "add" => { ins { (line) } }
                                    "del" => { del { (line) } }
                                    "ctx" => { (line) }
                                    class => { span class=(class) { (line) } }
                                }
                                "\n"
                            }
                        }
                    }
                }
            },
            Shown::Away(why) => p.muted.refresh-diff { (why) },
            Shown::Nothing => {},
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::dispatch::RepoSource;
    use crate::config::file::CodeHost;
    use crate::tasks::{Conflict, MaxAttempts, Reason, RefreshCheck};

    fn sha(c: char) -> CommitSha {
        CommitSha::new(&c.to_string().repeat(40)).unwrap()
    }

    fn stored(position: i64, event: &TaskEvent, actor: &str) -> StoredEvent {
        StoredEvent {
            position,
            id: uuid::Uuid::now_v7(),
            source: "pidevops".into(),
            event_type: event.kind().into(),
            dedup_key: position.to_string(),
            stream: Some("task:T-1".into()),
            stream_version: Some(position),
            occurred_at: Utc::now(),
            recorded_at: Utc::now(),
            action: None,
            repository: None,
            number: None,
            reference: None,
            content_type: "application/json".into(),
            body: serde_json::to_vec(event).unwrap(),
            meta: crate::eventlog::Meta::from_json(format!("{{\"actor\":\"{actor}\"}}")).unwrap(),
        }
    }

    /// A task's stream with every kind of refresh: clean, checked, a failed check an agent fixed, a conflict left
    /// unresolved, a flag of the `refresh` loop's, one waiting for its check; and flags that are not refreshes'.
    fn history() -> Vec<StoredEvent> {
        let at = Utc::now();
        let budget = MaxAttempts::new(5).unwrap();
        let reason = |text: &str| Reason::summarize(text);
        let flag = |text: &str, question: bool| TaskEvent::FlaggedNeedsHuman {
            at,
            reason: reason(text),
            question,
        };
        let started = |attempt: u32, purpose: RunPurpose| TaskEvent::Started {
            at,
            run: RunId(uuid::Uuid::now_v7()),
            attempt,
            purpose,
        };
        let submitted = TaskEvent::SubmittedForReview {
            at,
            run: RunId(uuid::Uuid::now_v7()),
            branch: "T-1".parse::<TaskId>().unwrap().branch(),
            pr: None,
            report: Box::default(),
        };
        let check = RefreshCheck {
            from: sha('a'),
            to: sha('b'),
            base: sha('c'),
            strategy: RefreshMode::Rebase,
            stamp: 1,
        };
        let conflict = Conflict::new(
            sha('d'),
            sha('e'),
            &["src/<b>.rs".to_owned()],
            3,
            "<<<<<<< x",
        );
        let events = [
            (
                TaskEvent::Refreshed {
                    at,
                    from: sha('1'),
                    to: sha('2'),
                    base: sha('3'),
                    strategy: RefreshMode::Merge,
                },
                "refresh",
            ),
            (
                TaskEvent::RefreshCheckDue {
                    at,
                    check: Box::new(check.clone()),
                    max_attempts: budget,
                },
                "refresh",
            ),
            (started(2, RunPurpose::Refresh), "dispatcher"),
            (
                TaskEvent::Refreshed {
                    at,
                    from: sha('a'),
                    to: sha('b'),
                    base: sha('c'),
                    strategy: RefreshMode::Rebase,
                },
                "dispatcher",
            ),
            (
                TaskEvent::RefreshCheckDue {
                    at,
                    check: Box::new(check.clone()),
                    max_attempts: budget,
                },
                "refresh",
            ),
            (
                TaskEvent::RefreshCheckFailed {
                    at,
                    reason: reason("the check failed"),
                },
                "dispatcher",
            ),
            (
                TaskEvent::ConflictFound {
                    at,
                    conflict: Box::new(Conflict::failed_check(sha('a'), sha('c'), "1 test failed")),
                    max_attempts: budget,
                },
                "dispatcher",
            ),
            (started(3, RunPurpose::Resolve), "dispatcher"),
            (submitted.clone(), "dispatcher"),
            (
                TaskEvent::ConflictFound {
                    at,
                    conflict: Box::new(conflict),
                    max_attempts: budget,
                },
                "refresh",
            ),
            (started(4, RunPurpose::Resolve), "dispatcher"),
            (
                TaskEvent::ConflictUnresolved {
                    at,
                    reason: reason("markers left"),
                },
                "dispatcher",
            ),
            (flag("the base moved and …", false), "dispatcher"),
            (
                flag("an agent was given this conflict already", false),
                "refresh",
            ),
            (flag("what should I do?", true), "refresh"),
            (flag("out of attempts", false), "dispatcher"),
            (
                TaskEvent::RefreshCheckDue {
                    at,
                    check: Box::new(check),
                    max_attempts: budget,
                },
                "refresh",
            ),
        ];
        let stored: Vec<StoredEvent> = events
            .iter()
            .enumerate()
            .map(|(i, (event, actor))| stored(i as i64 + 1, event, actor))
            .collect();
        stored
    }

    #[test]
    fn every_refresh_is_one_row_with_its_outcome_in_order() {
        let rows = of(&history());
        let words: Vec<String> = rows.iter().map(|r| r.outcome.word()).collect();
        assert_eq!(
            words,
            [
                "refreshed",
                "refreshed after its check",
                "resolved by attempt 3",
                "unresolved",
                "a person flagged",
                "waiting for its check",
            ]
        );
        assert_eq!(rows[0].strategy, Some(RefreshMode::Merge));
        assert_eq!(rows[2].hunks.as_deref(), Some("1 test failed"));
        assert_eq!(rows[2].why.as_deref(), Some("the check failed"));
        assert!(rows[2].run.is_some());
        assert_eq!(rows[3].files.as_deref(), Some("src/<b>.rs and 2 more"));
        assert_eq!(rows[3].hunks.as_deref(), Some("<<<<<<< x"));
        assert!(rows[3].flagged && !rows[1].flagged);
        assert_eq!(
            rows[4].why.as_deref(),
            Some("an agent was given this conflict already")
        );

        // Rendered: every word, and the branch's text inert.
        let shown = vec![Shown::Nothing; rows.len()];
        let html = section(&rows, &shown, None, Utc::now()).into_string();
        assert!(html.contains("src/&lt;b&gt;.rs and 2 more"), "{html}");
        assert!(html.contains("&lt;&lt;&lt;&lt;&lt;&lt;&lt; x"), "{html}");
        assert!(html.contains("unresolved, a person flagged"), "{html}");
    }

    #[test]
    fn a_recorded_diff_is_shown_inert_and_a_cut_one_says_truncated() {
        let rows = of(&history());
        let diff = |patch: &str, bytes: u64| {
            Shown::Recorded(RemergeDiff {
                base: "c".repeat(40),
                from: "a".repeat(40),
                to: "b".repeat(40),
                patch: patch.to_owned(),
                bytes,
                timed_out: false,
            })
        };
        let patch = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-<script>alert(1)</script>\n+</pre><img src=x onerror=alert(1)>\n";
        let shown = [
            diff("", 0),
            diff(patch, patch.len() as u64),
            diff(patch, REMERGE_CAP as u64 * 3),
            Shown::Away("No diff of bbbbbbb is recorded on this machine".to_owned()),
        ];
        let html = section(&rows[..4], &shown, None, Utc::now()).into_string();
        assert!(html.contains("No change to the pull request"), "{html}");
        assert!(
            html.contains("<del>-&lt;script&gt;alert(1)&lt;/script&gt;</del>"),
            "{html}"
        );
        assert!(
            html.contains("<ins>+&lt;/pre&gt;&lt;img src=x onerror=alert(1)&gt;</ins>"),
            "{html}"
        );
        assert!(
            !html.contains("<script>") && !html.contains("<img"),
            "{html}"
        );
        assert_eq!(html.matches("Truncated: the diff is").count(), 1, "{html}");
        assert!(html.contains("is recorded on this machine"), "{html}");
    }

    fn source(url: &str, host: CodeHost) -> RepoSource {
        RepoSource {
            url: url.to_owned(),
            base: "main".to_owned(),
            forge: None,
            host,
            keeps_branches: false,
        }
    }

    #[test]
    fn each_host_compares_at_its_own_address_and_another_remote_nowhere() {
        let gitlab = "https://gitlab.corp.example/";
        assert_eq!(
            compare_prefix(
                &source(
                    "https://gitlab.corp.example/acme/platform/api.git",
                    CodeHost::Gitlab
                ),
                "acme/platform/api",
                gitlab
            )
            .as_deref(),
            Some("https://gitlab.corp.example/acme/platform/api/-/compare/")
        );
        assert_eq!(
            compare_prefix(
                &source("https://github.com/acme/app.git", CodeHost::Github),
                "acme/app",
                gitlab
            )
            .as_deref(),
            Some("https://github.com/acme/app/compare/")
        );
        assert_eq!(
            compare_prefix(
                &source("file:///srv/git/app.git", CodeHost::Github),
                "acme/app",
                gitlab
            ),
            None
        );
    }
}
