//! The replay's decisions on hand-made records: budgets across runs and days (before a start, while running, a
//! raise, refused figures), approval, the allow-list and a plan's items, and the effect cap. Each is also replayed
//! under the configuration that recorded it: no differences.

use chrono::{DateTime, Duration, TimeZone, Utc};

use super::recorded::{Fact, Recorded, RecordedRun, RecordedTask};
use super::replay::{replay, Candidate};
use super::report::{readable, Change, ConfigReport};
use crate::board::{AllowedRepos, BoardConfig};
use crate::budgets::{BudgetsConfig, Limit, Raised, Scope};
use crate::domain::usage::Usage;
use crate::effects::cap::{EffectCap, OutboundEvent};
use crate::intake::IntakeConfig;
use crate::tasks::{
    decide, ApprovalPolicy, Command, Family, Links, MaxAttempts, NewTask, Priority, RunId, Spec,
    TaskEvent, TaskId,
};

const REPO: &str = "acme/app";

fn at(day: u32, hour: u32, minute: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, day, hour, minute, 0)
        .unwrap()
}

fn id(n: u64) -> TaskId {
    format!("T-{n}").parse().unwrap()
}

/// Task `n` made at `when` (log position `position`) under `approval`, with the facts `decide` gives.
fn task(n: u64, repo: &str, approval: ApprovalPolicy, when: DateTime<Utc>) -> RecordedTask {
    task_in_family(n, repo, approval, when, Family::default())
}

fn task_in_family(
    n: u64,
    repo: &str,
    approval: ApprovalPolicy,
    when: DateTime<Utc>,
    family: Family,
) -> RecordedTask {
    let new = NewTask {
        id: id(n),
        repo: repo.parse().unwrap(),
        spec: Spec::new(format!("Task {n}"), "src", "it works").unwrap(),
        priority: Priority::Normal,
        links: Links::default(),
        approval,
        max_attempts: MaxAttempts::new(3).unwrap(),
        ticket_version: None,
        agent: None,
        family,
    };
    let events = decide(None, &Command::Create(Box::new(new)), when).unwrap();
    let position = i64::try_from(n).unwrap() * 100;
    RecordedTask {
        id: id(n),
        key: Some(format!("test:{n}")),
        cause: None,
        facts: events
            .into_iter()
            .zip(position..)
            .map(|(event, position)| Fact {
                position,
                actor: "api".into(),
                event,
            })
            .collect(),
        outbound: Vec::new(),
    }
}

fn cost(usd: f64) -> Usage {
    Usage {
        input_tokens: 100,
        output_tokens: 10,
        cost_usd: Some(usd),
        ..Usage::default()
    }
}

/// A run of task `n` from `started` for `minutes`, at log positions `position` and `position + 1`.
fn run(n: u64, started: DateTime<Utc>, minutes: i64, position: i64, usage: Usage) -> RecordedRun {
    RecordedRun {
        run: RunId(uuid::Uuid::from_u128(
            u128::from(n) << 32 | position as u128,
        )),
        task: id(n),
        profile: "claude".into(),
        started,
        started_position: position,
        finished: Some((started + Duration::minutes(minutes), position + 1)),
        usage,
        figures_refused: false,
        stopped_by_budget: false,
    }
}

fn board(approval: ApprovalPolicy, allowed: &[&str]) -> BoardConfig {
    BoardConfig {
        approval,
        allowed: AllowedRepos::new(allowed.iter().copied()).unwrap(),
        ..BoardConfig::default()
    }
}

/// The replay under `board`, `budgets` and `cap`, with no intake rules (no task here came from a webhook).
fn under(
    recorded: &Recorded,
    board: &BoardConfig,
    budgets: &BudgetsConfig,
    cap: EffectCap,
) -> ConfigReport {
    let intake = IntakeConfig::default();
    replay(
        recorded,
        &Candidate {
            intake: &intake,
            rules: &[],
            board,
            budgets,
            cap,
        },
    )
}

fn daily(usd: f64) -> BudgetsConfig {
    BudgetsConfig {
        daily: Limit {
            usd: Some(usd),
            tokens: None,
        },
        ..BudgetsConfig::default()
    }
}

fn changes(report: &ConfigReport, n: u64) -> Vec<Change> {
    report
        .differences
        .iter()
        .find(|l| l.task.as_deref() == Some(id(n).to_string().as_str()))
        .map(|l| l.changes.clone())
        .unwrap_or_default()
}

/// Five tasks, one run each at 40 cents: four on the 2nd (the fourth starts after the third ended), one on the 3rd.
fn five_runs() -> Recorded {
    let tasks = (1..=5)
        .map(|n| task(n, REPO, ApprovalPolicy::Auto, at(2, 8, 0)))
        .collect();
    let runs = vec![
        run(1, at(2, 9, 0), 10, 1_000, cost(0.4)),
        run(2, at(2, 10, 0), 10, 1_010, cost(0.4)),
        run(3, at(2, 11, 0), 10, 1_020, cost(0.4)),
        run(4, at(2, 12, 0), 10, 1_030, cost(0.4)),
        run(5, at(3, 9, 0), 10, 1_040, cost(0.4)),
    ];
    Recorded {
        since: at(1, 0, 0),
        tasks,
        runs,
        ..Recorded::default()
    }
}

#[test]
fn a_lower_daily_budget_stops_the_run_that_crosses_it_holds_the_next_and_the_next_day_starts_afresh(
) {
    let recorded = five_runs();
    let board = board(ApprovalPolicy::Auto, &[REPO]);
    let same = under(
        &recorded,
        &board,
        &BudgetsConfig::default(),
        EffectCap::default(),
    );
    assert!(same.differences.is_empty(), "{}", readable(&same));
    assert_eq!(same.recorded, same.candidate);

    let lower = under(&recorded, &board, &daily(1.0), EffectCap::default());
    assert!(changes(&lower, 1).is_empty() && changes(&lower, 2).is_empty());
    match changes(&lower, 3).as_slice() {
        [Change::StoppedByBudget {
            while_running: true,
            why,
            at: when,
            ..
        }] => {
            assert!(why.contains("$1.20 of $1.00"), "{why}");
            assert_eq!(*when, at(2, 11, 10));
        }
        other => panic!("{other:?}"),
    }
    match changes(&lower, 4).as_slice() {
        [Change::StoppedByBudget {
            while_running: false,
            at: when,
            ..
        }] => assert_eq!(*when, at(2, 12, 0)),
        other => panic!("{other:?}"),
    }
    assert!(
        changes(&lower, 5).is_empty(),
        "a new day starts from nothing"
    );
    // The third spent up to the limit (half its run), the fourth nothing.
    assert!((lower.recorded.cost_usd - 2.0).abs() < 1e-9);
    assert!((lower.candidate.cost_usd - 1.4).abs() < 1e-9, "{lower:?}");
    assert_eq!(lower.candidate.runs, 4, "the held run never ran");
    let text = readable(&lower);
    assert!(
        text.contains("before starting, at 2026-11-02 12:00 UTC"),
        "{text}"
    );
    assert!(text.contains("saved: $0.6000"), "{text}");
}

#[test]
fn a_raise_recorded_before_a_start_lets_it_run_and_one_after_does_not() {
    let mut recorded = five_runs();
    let raise = |position| {
        (
            position,
            Raised {
                at: at(2, 11, 30),
                scope: Scope::day(at(2, 0, 0).date_naive()),
                usd: Some(1.0),
                tokens: None,
                by: "cli".into(),
            },
        )
    };
    let board = board(ApprovalPolicy::Auto, &[REPO]);
    recorded.raises = vec![raise(1_035)];
    let late = under(&recorded, &board, &daily(1.0), EffectCap::default());
    assert!(
        matches!(
            changes(&late, 4).as_slice(),
            [Change::StoppedByBudget {
                while_running: false,
                ..
            }]
        ),
        "{late:?}"
    );
    recorded.raises = vec![raise(1_025)];
    let early = under(&recorded, &board, &daily(1.0), EffectCap::default());
    assert!(changes(&early, 4).is_empty(), "{early:?}");
}

#[test]
fn a_run_whose_figures_were_refused_holds_its_tasks_next_run_until_a_raise() {
    let mut recorded = five_runs();
    recorded.runs[0].figures_refused = true;
    recorded
        .runs
        .push(run(1, at(2, 9, 30), 10, 1_005, cost(0.01)));
    recorded.runs.sort_by_key(|r| r.started_position);
    let board = board(ApprovalPolicy::Auto, &[REPO]);
    let task_budget = BudgetsConfig {
        task: Limit {
            usd: Some(100.0),
            tokens: None,
        },
        ..BudgetsConfig::default()
    };
    let held = under(&recorded, &board, &task_budget, EffectCap::default());
    match changes(&held, 1).as_slice() {
        [Change::StoppedByBudget { why, .. }] => assert!(why.contains("figures refused"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(
        changes(&held, 2).is_empty(),
        "another task's scope is its own"
    );
    recorded.raises = vec![(
        1_003,
        Raised {
            at: at(2, 9, 20),
            scope: Scope::task(id(1)),
            usd: Some(1.0),
            tokens: None,
            by: "api".into(),
        },
    )];
    let raised = under(&recorded, &board, &task_budget, EffectCap::default());
    assert!(changes(&raised, 1).is_empty(), "{raised:?}");
}

#[test]
fn a_run_a_budget_stopped_goes_on_under_a_looser_one_and_is_stopped_again_under_the_same() {
    let mut recorded = five_runs();
    recorded.runs[2].stopped_by_budget = true;
    recorded.runs[2].usage = cost(0.2);
    recorded.runs.remove(3);
    let board = board(ApprovalPolicy::Auto, &[REPO]);
    let same = under(&recorded, &board, &daily(1.0), EffectCap::default());
    assert!(same.differences.is_empty(), "{}", readable(&same));
    let looser = under(
        &recorded,
        &board,
        &BudgetsConfig::default(),
        EffectCap::default(),
    );
    assert!(matches!(
        changes(&looser, 3).as_slice(),
        [Change::NotStoppedByBudget { .. }]
    ));
    assert!(readable(&looser).contains("would have gone on"));
    assert!(
        looser
            .unknowns
            .iter()
            .any(|u| u.contains("a budget stopped")),
        "{:?}",
        looser.unknowns
    );
}

#[test]
fn approval_the_candidate_would_ask_for_or_skip_is_named_and_a_gated_tasks_runs_are_not_spent() {
    let mut recorded = five_runs();
    let mut manual = task(6, REPO, ApprovalPolicy::Manual, at(2, 8, 0));
    manual.facts.push(Fact {
        position: 700,
        actor: "telegram".into(),
        event: TaskEvent::Approved {
            at: at(2, 9, 0),
            automatic: false,
        },
    });
    recorded.tasks.push(manual);
    let gate_all = board(ApprovalPolicy::Manual, &[REPO]);
    let gated = under(
        &recorded,
        &gate_all,
        &BudgetsConfig::default(),
        EffectCap::default(),
    );
    for n in 1..=5 {
        assert_eq!(changes(&gated, n), [Change::Gated], "T-{n}");
    }
    assert!(
        changes(&gated, 6).is_empty(),
        "it waited for a person already"
    );
    assert_eq!(gated.candidate.runs, 0);
    assert!(
        gated
            .unknowns
            .iter()
            .any(|u| u.starts_with("5 tasks would have waited")),
        "{:?}",
        gated.unknowns
    );
    let open = board(ApprovalPolicy::Auto, &[REPO]);
    let ungated = under(
        &recorded,
        &open,
        &BudgetsConfig::default(),
        EffectCap::default(),
    );
    assert_eq!(
        changes(&ungated, 6),
        [Change::Ungated {
            waited_s: Some(3600)
        }]
    );
    assert_eq!(ungated.differences.len(), 1);
}

#[test]
fn a_task_of_a_repository_the_candidate_does_not_allow_is_not_made_nor_are_its_plans_items() {
    let mut recorded = five_runs();
    recorded
        .tasks
        .push(task(6, "acme/old", ApprovalPolicy::Auto, at(2, 8, 0)));
    let item = Family {
        parent: Some(id(6)),
        ..Family::default()
    };
    recorded.tasks.push(task_in_family(
        7,
        "acme/app",
        ApprovalPolicy::Auto,
        at(2, 8, 30),
        item,
    ));
    recorded
        .runs
        .push(run(7, at(4, 9, 0), 10, 2_000, cost(1.0)));
    let both = board(ApprovalPolicy::Auto, &[REPO, "acme/old"]);
    assert!(under(
        &recorded,
        &both,
        &BudgetsConfig::default(),
        EffectCap::default()
    )
    .differences
    .is_empty());
    let stricter = board(ApprovalPolicy::Auto, &[REPO]);
    let report = under(
        &recorded,
        &stricter,
        &BudgetsConfig::default(),
        EffectCap::default(),
    );
    match changes(&report, 6).as_slice() {
        [Change::Ignored { reason }] => {
            assert!(reason.contains("acme/old is not an allowed"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    match changes(&report, 7).as_slice() {
        [Change::Ignored { reason }] => assert!(reason.contains("its plan T-6"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!((report.recorded.cost_usd - report.candidate.cost_usd - 1.0).abs() < 1e-9);
}

/// Task 1's outbound calls: `n` calls a minute apart from 09:00, then (where `capped`) the trip the service's
/// cap recorded.
fn calls(recorded: &mut Recorded, n: u32, capped: Option<u32>) {
    let task = &mut recorded.tasks[0];
    for i in 0..n {
        task.outbound.push((
            5_000 + 10 * i64::from(i),
            OutboundEvent::Call {
                at: at(2, 9, i),
                key: format!("effect-{i}"),
                action: "comment".into(),
            },
        ));
    }
    if let Some(cap) = capped {
        task.outbound.push((
            5_000 + 10 * i64::from(n),
            OutboundEvent::Capped {
                at: at(2, 9, n),
                calls: n,
                cap,
                key: "one-too-many".into(),
            },
        ));
    }
}

#[test]
fn a_stricter_effect_cap_holds_the_calls_past_it_and_a_looser_one_sends_what_was_held() {
    let board = board(ApprovalPolicy::Auto, &[REPO]);
    let mut recorded = five_runs();
    calls(&mut recorded, 5, None);
    let same = under(
        &recorded,
        &board,
        &BudgetsConfig::default(),
        EffectCap::per_hour(20),
    );
    assert!(same.differences.is_empty(), "{same:?}");
    let strict = under(
        &recorded,
        &board,
        &BudgetsConfig::default(),
        EffectCap::per_hour(3),
    );
    assert_eq!(
        changes(&strict, 1),
        [Change::CallsHeld {
            count: 2,
            from: at(2, 9, 3)
        }]
    );
    // A person's clearing after the trip: the calls after it are counted afresh.
    recorded.tasks[0].facts.push(Fact {
        position: 5_035,
        actor: "api".into(),
        event: TaskEvent::NeedsHumanCleared {
            at: at(2, 9, 3),
            max_attempts: MaxAttempts::new(3).unwrap(),
        },
    });
    let cleared = under(
        &recorded,
        &board,
        &BudgetsConfig::default(),
        EffectCap::per_hour(3),
    );
    assert_eq!(
        changes(&cleared, 1),
        [Change::CallsHeld {
            count: 1,
            from: at(2, 9, 3)
        }],
        "the trip itself is held; the one after the clearing is sent"
    );

    let mut tripped = five_runs();
    calls(&mut tripped, 3, Some(3));
    let same = under(
        &tripped,
        &board,
        &BudgetsConfig::default(),
        EffectCap::per_hour(3),
    );
    assert!(same.differences.is_empty(), "{same:?}");
    let looser = under(
        &tripped,
        &board,
        &BudgetsConfig::default(),
        EffectCap::off(),
    );
    assert_eq!(changes(&looser, 1), [Change::CallsSent { count: 1 }]);
}

#[test]
fn the_readable_report_shows_a_strangers_title_inertly() {
    let mut recorded = five_runs();
    recorded.tasks.truncate(1);
    recorded.runs.truncate(1);
    recorded
        .tasks
        .push(task(9, "acme/old", ApprovalPolicy::Auto, at(2, 8, 0)));
    if let Some(Fact {
        event: TaskEvent::Created(created),
        ..
    }) = recorded.tasks[1].facts.first_mut()
    {
        created.spec = Spec::new("Title\u{1b}[2J with an escape", "src", "done").unwrap();
    }
    let board = board(ApprovalPolicy::Auto, &[REPO]);
    let text = readable(&under(
        &recorded,
        &board,
        &BudgetsConfig::default(),
        EffectCap::default(),
    ));
    assert!(text.contains("T-9  Title?[2J with an escape"), "{text}");
    assert!(!text.contains('\u{1b}'));
}
