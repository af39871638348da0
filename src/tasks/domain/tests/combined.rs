//! A plan's combination: recorded once per set of item commits, only in review, only of its items; stale once an
//! item leaves review; and auto-land merges only a current combination, at its commit.

use super::super::tests::{at, repo, run};
use super::super::{decide as decide_task, evolve, Family, NewTask};
use super::*;
use crate::tasks::plan::{PlanDocument, PlanLimits};
use crate::tasks::values::{ApprovalPolicy, GithubRef, Links, MaxAttempts, Priority, Spec};
use crate::tasks::{landing, FactName, LandConfig, LandMode, Readiness, GITHUB_PR};

const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const C: &str = "cccccccccccccccccccccccccccccccccccccccc";
const M: &str = "1111111111111111111111111111111111111111";
const N: &str = "2222222222222222222222222222222222222222";

fn sha(s: &str) -> CommitSha {
    CommitSha::new(s).expect("a valid sha")
}

fn t(n: u64) -> TaskId {
    format!("T-{n}").parse().expect("a valid id")
}

fn apply(task: Option<Task>, command: &Command) -> Result<(Task, usize), TaskError> {
    let events = decide_task(task.as_ref(), command, at(10))?;
    let count = events.len();
    let task = events
        .iter()
        .try_fold(task, |s, e| evolve(s, e).map(Some))?
        .expect("a task");
    Ok((task, count))
}

fn then(task: Task, command: Command) -> Task {
    apply(Some(task), &command)
        .unwrap_or_else(|e| panic!("{} refused: {e}", command.name()))
        .0
}

/// An approved plan T-1 whose items are T-2 and T-3, rolled up to `column`.
fn plan_in(column: Column) -> Task {
    let created = apply(
        None,
        &Command::Create(Box::new(NewTask {
            id: t(1),
            repo: repo(),
            spec: Spec::new("Two parts", "", "both exist").expect("a spec"),
            priority: Priority::Normal,
            links: Links::default(),
            approval: ApprovalPolicy::Manual,
            max_attempts: MaxAttempts::new(2).expect("a budget"),
            ticket_version: None,
            agent: None,
            family: Family::plan(),
        })),
    )
    .expect("created")
    .0;
    let document = PlanDocument::parse(
        br#"{"version": 1, "items": [
            {"id": "a", "title": "A", "task": "a", "scope": ["a/**"], "done_when": "a", "depends_on": []},
            {"id": "b", "title": "B", "task": "b", "scope": ["b/**"], "done_when": "b", "depends_on": []}
        ]}"#,
        &PlanLimits::default(),
    )
    .expect("a plan");
    let task = then(created, Command::Start { run: run(1) });
    let task = then(
        task,
        Command::ProposePlan {
            run: run(1),
            plan: Box::new(document),
        },
    );
    let task = then(task, Command::Approve);
    let task = then(
        task,
        Command::AdoptChildren {
            children: vec![t(2), t(3)],
        },
    );
    then(
        task,
        Command::RollUp {
            column,
            needs_human: Vec::new(),
        },
    )
}

fn combine(commit: &str, a: &str, b: &str) -> Command {
    Command::RecordCombined {
        commit: sha(commit),
        base: sha(C),
        items: vec![
            CombinedItem {
                task: t(2),
                commit: sha(a),
            },
            CombinedItem {
                task: t(3),
                commit: sha(b),
            },
        ],
    }
}

fn combined(task: &Task) -> &Combination {
    task.plan()
        .and_then(|p| p.combined.as_ref())
        .expect("a combination")
}

#[test]
fn a_combination_is_recorded_once_per_set_of_item_commits_and_names_the_plans_branch() {
    let plan = plan_in(Column::InReview);
    let (plan, count) = apply(Some(plan), &combine(M, A, B)).expect("recorded");
    assert_eq!(count, 1);
    assert_eq!(combined(&plan).commit, sha(M));
    assert!(combined(&plan).current);
    assert_eq!(plan.branch().map(|b| b.as_str()), Some("pidevops/T-1"));
    // The same items at the same commits again (a crash redid the merge: another merge commit) change nothing.
    let (plan, count) = apply(Some(plan), &combine(N, A, B)).expect("a no-op");
    assert_eq!(count, 0);
    assert_eq!(combined(&plan).commit, sha(M));
    // A new attempt of an item: a new set, recorded.
    let (plan, count) = apply(Some(plan), &combine(N, A, C)).expect("recorded");
    assert_eq!((count, &combined(&plan).commit), (1, &sha(N)));
}

#[test]
fn only_a_plan_in_review_records_a_combination_and_only_of_its_own_items_each_once() {
    let plan = plan_in(Column::InProgress);
    assert!(matches!(
        apply(Some(plan), &combine(M, A, B)),
        Err(TaskError::WrongColumn { .. })
    ));
    let plan = plan_in(Column::InReview);
    let stranger = Command::RecordCombined {
        commit: sha(M),
        base: sha(C),
        items: vec![CombinedItem {
            task: t(9),
            commit: sha(A),
        }],
    };
    assert!(matches!(
        apply(Some(plan.clone()), &stranger),
        Err(TaskError::NotItems { .. })
    ));
    let twice = Command::RecordCombined {
        commit: sha(M),
        base: sha(C),
        items: vec![
            CombinedItem {
                task: t(2),
                commit: sha(A),
            },
            CombinedItem {
                task: t(2),
                commit: sha(B),
            },
        ],
    };
    assert!(matches!(
        apply(Some(plan.clone()), &twice),
        Err(TaskError::NotItems { .. })
    ));
    let none = Command::RecordCombined {
        commit: sha(M),
        base: sha(C),
        items: Vec::new(),
    };
    assert!(matches!(
        apply(Some(plan), &none),
        Err(TaskError::NotItems { .. })
    ));
}

#[test]
fn an_item_leaving_review_makes_the_combination_stale_and_the_same_set_may_be_recorded_again() {
    let plan = then(plan_in(Column::InReview), combine(M, A, B));
    let plan = then(
        plan,
        Command::RollUp {
            column: Column::InProgress,
            needs_human: Vec::new(),
        },
    );
    assert!(!combined(&plan).current);
    let plan = then(
        plan,
        Command::RollUp {
            column: Column::InReview,
            needs_human: Vec::new(),
        },
    );
    assert!(!combined(&plan).current, "still stale until combined again");
    let (plan, count) = apply(Some(plan), &combine(N, A, B)).expect("recorded");
    assert_eq!(count, 1);
    assert!(combined(&plan).current);
}

#[test]
fn auto_land_merges_a_plan_only_at_its_current_combination_with_the_facts_about_it() {
    let rules = LandConfig {
        mode: LandMode::Auto,
        approvals: 0,
        required_checks: Vec::new(),
        merge_method: None,
        refresh: Default::default(),
    };
    let check = |s: &str| Command::RecordCheckPassed {
        sha: sha(s),
        name: FactName::new("name", "ci").expect("a name"),
    };
    let linked = |plan: Task| {
        then(
            plan,
            Command::AttachLinks {
                links: Links::default().with(GITHUB_PR, &GithubRef::new(repo(), 8).expect("a pr")),
            },
        )
    };
    // Not combined yet: nothing to merge, whatever passed.
    let plan = linked(plan_in(Column::InReview));
    assert!(matches!(
        landing::readiness(&then(plan.clone(), check(M)), &rules),
        Readiness::Waiting(why) if why.contains("not combined")
    ));
    // Combined at M, a check passed on M: ready, at M.
    let plan = then(plan, combine(M, A, B));
    let ready = then(plan.clone(), check(M));
    assert_eq!(
        landing::readiness(&ready, &rules),
        Readiness::Ready {
            sha: sha(M),
            number: 8
        }
    );
    // A check on another commit than the combination's is not about it.
    assert!(matches!(
        landing::readiness(&then(plan, check(N)), &rules),
        Readiness::Waiting(_)
    ));
    // An item sent back since: stale, not merged, even with the facts about M still on record.
    let stale = then(
        ready,
        Command::RollUp {
            column: Column::InProgress,
            needs_human: Vec::new(),
        },
    );
    let stale = then(
        stale,
        Command::RollUp {
            column: Column::InReview,
            needs_human: Vec::new(),
        },
    );
    assert!(matches!(
        landing::readiness(&stale, &rules),
        Readiness::Waiting(why) if why.contains("combined again")
    ));
    // A new combination starts the facts over.
    let again = then(stale, combine(N, A, C));
    assert!(again.landing().is_empty());
}
