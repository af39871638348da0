//! Landing facts (recorded only in review, once, per head commit, started over by a new push) and the decision,
//! exhaustively over small rule sets.

use super::super::tests::{at, new_task, reason, repo, run};
use super::super::{decide as decide_task, evolve, RetryCause};
use super::*;
use crate::tasks::values::{ApprovalPolicy, BranchName, GithubRef, RepoName};

const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

fn sha(s: &str) -> CommitSha {
    CommitSha::new(s).expect("a valid sha")
}

fn name(s: &str) -> FactName {
    FactName::new("name", s).expect("a valid name")
}

/// Decides and applies `command`, returning the task and how many events it recorded.
fn apply(task: Option<Task>, command: &Command) -> Result<(Task, usize), TaskError> {
    let events = decide_task(task.as_ref(), command, at(10))?;
    let count = events.len();
    let task = events
        .iter()
        .try_fold(task, |t, e| evolve(t, e).map(Some))?
        .expect("a task");
    Ok((task, count))
}

fn then(task: Task, command: Command) -> Task {
    apply(Some(task), &command)
        .unwrap_or_else(|e| panic!("{} refused: {e}", command.name()))
        .0
}

fn submit(run_n: u128, pr: Option<u64>) -> Command {
    Command::SubmitForReview {
        run: run(run_n),
        branch: "pidevops/T-7".parse::<BranchName>().expect("a branch"),
        pr: pr.map(|n| GithubRef::new(repo(), n).expect("a pr")),
        report: Default::default(),
    }
}

/// A task in progress on run 1, and the same task in review with pull request #3.
fn in_progress() -> Task {
    let created = apply(None, &new_task(ApprovalPolicy::Auto, 3))
        .expect("created")
        .0;
    then(created, Command::Start { run: run(1) })
}

fn in_review() -> Task {
    then(in_progress(), submit(1, Some(3)))
}

fn check(s: &str, n: &str) -> Command {
    Command::RecordCheckPassed {
        sha: sha(s),
        name: name(n),
    }
}

fn approval(by: &str, s: &str) -> Command {
    Command::RecordApproval {
        by: name(by),
        sha: sha(s),
    }
}

fn rules(approvals: u8, required: &[&str]) -> LandConfig {
    LandConfig {
        mode: LandMode::Auto,
        approvals,
        required_checks: required.iter().map(|s| (*s).to_owned()).collect(),
        merge_method: None,
        refresh: Default::default(),
    }
}

#[test]
fn values_from_webhooks_are_checked() {
    assert_eq!(sha("ABCDEF1").as_str(), "abcdef1");
    assert_eq!(sha(A).short(), "aaaaaaa");
    for bad in ["", "abc", "xyz1234", &"a".repeat(65), "abcdef1 "] {
        assert!(CommitSha::new(bad).is_err(), "{bad:?}");
    }
    assert_eq!(name("  ci ").as_str(), "ci");
    for bad in ["", "   ", "a\nb", &"x".repeat(MAX_NAME_CHARS + 1)] {
        assert!(FactName::new("check name", bad).is_err(), "{bad:?}");
    }
    // Read back from the log through the same checks.
    assert!(serde_json::from_str::<CommitSha>("\"not a sha\"").is_err());
}

#[test]
fn facts_are_recorded_only_in_review_and_each_once() {
    let refused = apply(Some(in_progress()), &check(A, "ci")).unwrap_err();
    assert!(
        matches!(
            refused,
            TaskError::WrongColumn {
                command: "record-check-passed",
                ..
            }
        ),
        "{refused}"
    );
    let task = in_review();
    let (task, n) = apply(Some(task), &check(A, "ci")).unwrap();
    assert_eq!(n, 1);
    let (task, n) = apply(Some(task), &check(A, "ci")).unwrap();
    assert_eq!(n, 0, "the same check twice records once");
    let (task, n) = apply(Some(task), &approval("alice", A)).unwrap();
    assert_eq!(n, 1);
    let (task, n) = apply(Some(task), &approval("alice", A)).unwrap();
    assert_eq!(n, 0, "the same approval twice records once");
    assert_eq!(task.landing().head(), Some(&sha(A)));
    assert_eq!(task.landing().checks_passed().len(), 1);
    assert_eq!(task.landing().approved_by().len(), 1);

    // Done: nothing more is recorded.
    let done = then(task, Command::Complete);
    assert!(apply(Some(done), &approval("bob", A)).is_err());
}

#[test]
fn a_new_push_or_a_fact_about_another_commit_starts_over() {
    let task = then(in_review(), check(A, "ci"));
    let task = then(task, approval("alice", A));
    // A fact about another commit than the facts on record: those no longer count.
    let moved = then(task.clone(), check(B, "lint"));
    assert_eq!(moved.landing().head(), Some(&sha(B)));
    assert_eq!(
        moved
            .landing()
            .checks_passed()
            .iter()
            .map(FactName::as_str)
            .collect::<Vec<_>>(),
        ["lint"]
    );
    assert!(moved.landing().approved_by().is_empty());

    // Sent back and submitted again (a new push): everything starts over.
    let back = then(
        task,
        Command::Retry {
            cause: RetryCause::ChangesRequested,
            reason: reason("rename it"),
        },
    );
    assert_eq!(
        back.landing().head(),
        Some(&sha(A)),
        "kept until the next push"
    );
    let again = then(then(back, Command::Start { run: run(2) }), submit(2, None));
    assert!(again.landing().is_empty());
    assert_eq!(
        readiness(&again, &rules(1, &["ci"])),
        Readiness::Waiting("0 of 1 approvals; check ci has not passed".into())
    );
}

#[test]
fn a_dismissed_approval_no_longer_counts() {
    let task = then(then(in_review(), check(A, "ci")), approval("alice", A));
    assert!(matches!(
        readiness(&task, &rules(1, &[])),
        Readiness::Ready { .. }
    ));
    let withdraw = Command::WithdrawApproval { by: name("alice") };
    let (task, n) = apply(Some(task), &withdraw).unwrap();
    assert_eq!(n, 1);
    let (task, n) = apply(Some(task), &withdraw).unwrap();
    assert_eq!(n, 0, "already so");
    assert_eq!(
        readiness(&task, &rules(1, &[])),
        Readiness::Waiting("0 of 1 approvals".into())
    );
}

#[test]
fn facts_past_the_cap_are_dropped() {
    let mut task = in_review();
    for i in 0..MAX_FACTS {
        task = then(task, check(A, &format!("check-{i}")));
    }
    let (task, n) = apply(Some(task), &check(A, "one-too-many")).unwrap();
    assert_eq!(n, 0);
    assert_eq!(task.landing().checks_passed().len(), MAX_FACTS);
}

/// Every combination of up to three approvals required and held, and of required checks over what passed.
#[test]
fn the_decision_over_every_small_combination() {
    let reviewers = ["alice", "bob", "carol"];
    let names = ["ci", "lint", "other"];
    let requirements: [&[&str]; 4] = [&[], &["ci"], &["ci", "lint"], &["lint"]];
    for required_approvals in 0..=3u8 {
        for held in 0..=3usize {
            for required in requirements {
                // Every subset of `names` as the checks that passed.
                for mask in 0..(1u8 << names.len()) {
                    let passed: Vec<&str> = names
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| mask & (1 << i) != 0)
                        .map(|(_, n)| *n)
                        .collect();
                    let mut task = in_review();
                    for n in &passed {
                        task = then(task, check(A, n));
                    }
                    for by in &reviewers[..held] {
                        task = then(task, approval(by, A));
                    }
                    let checks_ok = if required.is_empty() {
                        !passed.is_empty()
                    } else {
                        required.iter().all(|r| passed.contains(r))
                    };
                    let want = held >= usize::from(required_approvals) && checks_ok;
                    let got = readiness(&task, &rules(required_approvals, required));
                    let case = format!(
                        "{required_approvals} required, {held} held, {required:?} required, {passed:?} passed: {got:?}"
                    );
                    match got {
                        Readiness::Ready { sha: s, number } => {
                            assert!(want, "{case}");
                            assert_eq!((s, number), (sha(A), 3), "{case}");
                        }
                        Readiness::Waiting(why) => {
                            assert!(!want, "{case}");
                            let short = held < usize::from(required_approvals);
                            assert_eq!(
                                why.contains(&format!("{held} of {required_approvals} approvals")),
                                short,
                                "{case}"
                            );
                            assert_eq!(
                                why.contains("not passed") || why.contains("no check"),
                                !checks_ok,
                                "{case}"
                            );
                        }
                    }
                    // Manual never lands, whatever the facts.
                    let manual = LandConfig {
                        mode: LandMode::Manual,
                        ..rules(required_approvals, required)
                    };
                    assert!(
                        matches!(readiness(&task, &manual), Readiness::Waiting(_)),
                        "{case}"
                    );
                }
            }
        }
    }
}

#[test]
fn the_why_names_what_is_missing() {
    let task = then(in_review(), check(A, "build"));
    assert_eq!(
        readiness(&task, &rules(2, &["ci", "lint"])),
        Readiness::Waiting(
            "0 of 2 approvals; checks ci, lint have not passed (passed: build)".into()
        )
    );
    assert_eq!(
        readiness(&in_review(), &rules(0, &[])),
        Readiness::Waiting("no check has passed on the head commit yet".into())
    );
    assert_eq!(
        readiness(&task, &LandConfig::default()),
        Readiness::Waiting("land = manual: a person merges".into())
    );
}

#[test]
fn only_an_unflagged_task_in_review_with_its_own_pull_request_lands() {
    let ready = |task: &Task| matches!(readiness(task, &rules(0, &[])), Readiness::Ready { .. });
    let task = then(in_review(), check(A, "ci"));
    assert!(ready(&task));

    let flagged = then(
        task.clone(),
        Command::FlagNeedsHuman {
            reason: reason("the Linear comment failed"),
        },
    );
    assert_eq!(
        readiness(&flagged, &rules(0, &[])),
        Readiness::Waiting("it needs a human: the Linear comment failed".into())
    );
    assert!(ready(&then(flagged, Command::ClearNeedsHuman)));

    assert_eq!(
        readiness(&then(task.clone(), Command::Complete), &rules(0, &[])),
        Readiness::Waiting("it is done, not in review".into())
    );

    // Submitted without a pull request, then linked to one in another repository: not ours to merge.
    let bare = then(then(in_progress(), submit(1, None)), check(A, "ci"));
    assert_eq!(
        readiness(&bare, &rules(0, &[])),
        Readiness::Waiting("its pull request is not open yet".into())
    );
    let elsewhere: RepoName = "acme/other".parse().expect("a repo");
    let linked = then(
        bare,
        Command::AttachLinks {
            links: crate::tasks::Links::default().with(
                crate::tasks::GITHUB_PR,
                &GithubRef::new(elsewhere, 9).expect("a pr"),
            ),
        },
    );
    assert!(!ready(&linked));
}

fn refresh(from: &str, to: &str) -> Command {
    Command::RecordRefresh {
        from: sha(from),
        to: sha(to),
        base: sha("cccccccccccccccccccccccccccccccccccccccc"),
        strategy: RefreshMode::Rebase,
    }
}

#[test]
fn a_refresh_is_a_new_push_recorded_once_in_review_only_and_a_new_submission_forgets_it() {
    let passed = then(then(in_review(), check(A, "ci")), approval("octocat", A));
    assert!(!passed.landing.is_empty());
    let (refreshed, count) = apply(Some(passed), &refresh(A, B)).expect("recorded");
    assert_eq!(count, 1);
    assert_eq!(refreshed.refreshed(), Some(&sha(B)));
    assert!(
        refreshed.landing.is_empty(),
        "the old head's check and approval count no more"
    );
    assert!(matches!(
        readiness(&refreshed, &rules(0, &["ci"])),
        Readiness::Waiting(_)
    ));
    // The same refresh again (a restart between its push and its record): nothing more.
    let (again, count) = apply(Some(refreshed.clone()), &refresh(A, B)).expect("already so");
    assert_eq!((count, again.refreshed()), (0, Some(&sha(B))));
    // Checks on the refreshed head make it ready at that head.
    let ready = then(refreshed.clone(), check(B, "ci"));
    assert_eq!(
        readiness(&ready, &rules(0, &["ci"])),
        Readiness::Ready {
            sha: sha(B),
            number: 3
        }
    );
    // Only in review.
    assert!(apply(Some(in_progress()), &refresh(A, B)).is_err());
    // Sent back and submitted again: the new attempt's push is the head, the refresh forgotten.
    let retried = then(
        refreshed,
        Command::Retry {
            cause: RetryCause::ChangesRequested,
            reason: reason("again"),
        },
    );
    let resubmitted = then(
        then(retried, Command::Start { run: run(2) }),
        submit(2, Some(3)),
    );
    assert_eq!(resubmitted.refreshed(), None);
}

fn queue(s: &str, number: u64) -> Command {
    Command::QueueMerge {
        sha: sha(s),
        number,
    }
}

#[test]
fn a_merge_is_queued_once_for_the_head_its_facts_are_about_and_a_flag_or_new_push_unqueues_it() {
    let ready = then(in_review(), check(A, "ci"));
    // Only the head the facts are about, on its own pull request, in review, unflagged.
    assert!(matches!(
        apply(Some(ready.clone()), &queue(B, 3)),
        Err(TaskError::NotQueued { .. })
    ));
    assert!(matches!(
        apply(Some(ready.clone()), &queue(A, 4)),
        Err(TaskError::NotQueued { .. })
    ));
    assert!(apply(Some(in_progress()), &queue(A, 3)).is_err());
    let flagged = then(
        ready.clone(),
        Command::FlagNeedsHuman {
            reason: reason("look"),
        },
    );
    assert!(matches!(
        apply(Some(flagged), &queue(A, 3)),
        Err(TaskError::NotQueued { .. })
    ));
    // Once: the same choice again (a restart) records nothing; the facts stay, the merge is in flight.
    let (queued, count) = apply(Some(ready), &queue(A, 3)).expect("queued");
    assert_eq!(count, 1);
    assert!(queued.landing().queued());
    assert_eq!(
        readiness(&queued, &rules(0, &["ci"])),
        Readiness::Ready {
            sha: sha(A),
            number: 3
        }
    );
    let (again, count) = apply(Some(queued.clone()), &queue(A, 3)).expect("already so");
    assert_eq!((count, again.landing().queued()), (0, true));
    // A flag stops it (the merge failed, or a person has to look): once cleared, the queue chooses again.
    let flagged = then(
        queued.clone(),
        Command::FlagNeedsHuman {
            reason: reason("GitHub refused the merge"),
        },
    );
    assert!(!flagged.landing().queued());
    let cleared = then(flagged, Command::ClearNeedsHuman);
    assert_eq!(
        apply(Some(cleared), &queue(A, 3)).expect("queued again").1,
        1
    );
    // A refresh is a new head: nothing of the old one is in flight.
    let refreshed = then(queued, refresh(A, B));
    assert!(!refreshed.landing().queued());
}
