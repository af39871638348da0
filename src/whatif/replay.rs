//! The replay: the recorded log decided again under a candidate configuration, by the functions the service itself
//! decides with, and compared with what the service recorded. Pure.
//!
//! Each decision, in the order the service made it:
//! - intake and the allow-list: `intake::rules::decide` on the webhook event that made the task (or refused it);
//!   a task made without one (the API, the CLI) by the allow-list's `check`; a plan's item goes with its plan;
//! - approval: `BoardConfig::approval_for`;
//! - budgets: every run in the order the log holds their starts and outcomes, through `budgets::in_force` and
//!   `Standing::over`, as the claim (before a start) and the watch (while a run spends) ask them, with the
//!   spend so far being what the candidate would have let run;
//! - landing: `tasks::landing::readiness` on the task as it stood, fact by fact;
//! - the effect cap: `effects::cap::verdict` over the task's recorded outbound calls.
//!
//! A run's recorded outcome and usage stand in for it. What never happened (a run a budget held, a task intake
//! refused) has no record to stand in, and the report says so rather than guess.

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};

use super::recorded::{Recorded, RecordedRun, RecordedTask};
use super::report::{Change, ConfigReport, Spend, TaskLine};
use crate::board::BoardConfig;
use crate::budgets::{first_over, in_force, BudgetsConfig, Limit, Scope, Standing};
use crate::domain::usage::Usage;
use crate::effects::cap::{verdict, EffectCap, OutboundEvent, Verdict};
use crate::intake::rules::{self, Decision, SourceRules};
use crate::intake::IntakeConfig;
use crate::tasks::{landing, ApprovalPolicy, Column, Readiness, RunId, TaskEvent, TaskId};

/// The decisions' inputs under the candidate configuration.
pub struct Candidate<'a> {
    pub intake: &'a IntakeConfig,
    pub rules: &'a [Box<dyn SourceRules>],
    pub board: &'a BoardConfig,
    pub budgets: &'a BudgetsConfig,
    pub cap: EffectCap,
}

/// The auto-lander's and the merge queue's actors: a landing by either was pidevops's own decision.
const LANDERS: [&str; 2] = ["land", "merge_queue"];

/// The whole replay. Pure.
pub fn replay(recorded: &Recorded, candidate: &Candidate<'_>) -> ConfigReport {
    let mut lines: Vec<TaskLine> = Vec::with_capacity(recorded.tasks.len());
    // Tasks the candidate would not have made, or would have held for a person: their runs never happen.
    let mut gone: BTreeSet<TaskId> = BTreeSet::new();
    for task in &recorded.tasks {
        let mut line = line_of(task);
        let made = made(task, recorded, candidate, &gone);
        match made {
            Some(change) => {
                line.changes.push(change);
                gone.insert(task.id);
            }
            None => {
                if let Some(change) = approval(task, candidate.board) {
                    if change == Change::Gated {
                        gone.insert(task.id);
                    }
                    line.changes.push(change);
                }
            }
        }
        lines.push(line);
    }
    let index: HashMap<TaskId, usize> = recorded
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id, i))
        .collect();
    let budget = budgets(recorded, candidate.budgets, &gone, &index);
    let mut report = ConfigReport {
        since: recorded.since,
        events_read: recorded.events_read,
        tasks_compared: recorded.tasks.len() as u64,
        tickets_refused_compared: recorded.ignored.len() as u64,
        ..ConfigReport::default()
    };
    for run in &recorded.runs {
        let Some(&i) = index.get(&run.task) else {
            continue;
        };
        let line = &mut lines[i];
        line.recorded.add(&run.usage);
        report.recorded.add(&run.usage);
        let outcome = budget.get(&run.run);
        if let Some(spent) = outcome.and_then(|o| o.spent.as_ref()) {
            line.candidate.add(spent);
            report.candidate.add(spent);
        }
        if let Some(change) = outcome.and_then(|o| o.change.clone()) {
            line.changes.push(change);
        }
    }
    let stopped: BTreeSet<TaskId> = recorded
        .runs
        .iter()
        .filter(|r| {
            budget
                .get(&r.run)
                .is_some_and(|o| matches!(o.change, Some(Change::StoppedByBudget { .. })))
        })
        .map(|r| r.task)
        .collect();
    for (task, line) in recorded.tasks.iter().zip(&mut lines) {
        if gone.contains(&task.id) {
            continue;
        }
        // A task a budget would have stopped never reaches review the way it did: what landing would do is unknown.
        if !stopped.contains(&task.id) {
            line.changes.extend(land(task, candidate.board));
        }
        line.changes.extend(calls(task, candidate.cap));
    }
    report.differences = lines
        .into_iter()
        .filter(|l| !l.changes.is_empty())
        .collect();
    report
        .differences
        .extend(refused_tickets(recorded, candidate));
    report.unknowns = unknowns(&report, recorded, candidate.cap);
    report
}

fn line_of(task: &RecordedTask) -> TaskLine {
    TaskLine {
        task: Some(task.id.to_string()),
        key: task.key.clone(),
        title: task.created().map(|c| c.spec.title()).unwrap_or_default(),
        changes: Vec::new(),
        recorded: Spend::default(),
        candidate: Spend::default(),
    }
}

/// Whether the candidate would have made the task: `Some(Ignored)` when it would not.
fn made(
    task: &RecordedTask,
    recorded: &Recorded,
    candidate: &Candidate<'_>,
    gone: &BTreeSet<TaskId>,
) -> Option<Change> {
    let created = task.created()?;
    if let Some(parent) = created.family.parent {
        return gone.contains(&parent).then(|| Change::Ignored {
            reason: format!("its plan {parent} would not be made, or would wait for a person"),
        });
    }
    if let Some(cause) = task.cause.and_then(|id| recorded.causes.get(&id)) {
        match rules::decide(cause, candidate.intake, candidate.rules) {
            Decision::Ignore { reason } => return Some(Change::Ignored { reason }),
            Decision::NotIntake => {
                return Some(Change::Ignored {
                    reason: format!(
                        "the candidate's intake does not take {} events of {}",
                        cause.event_type, cause.source
                    ),
                })
            }
            _ => {}
        }
    }
    candidate
        .board
        .allowed
        .check(&created.repo)
        .err()
        .map(|refused| Change::Ignored {
            reason: refused.to_string(),
        })
}

/// The approval gate under the candidate, against the one the task was made with (a plan's item takes its
/// plan's approval, whatever the repository's).
fn approval(task: &RecordedTask, board: &BoardConfig) -> Option<Change> {
    let created = task.created()?;
    if created.family.parent.is_some() {
        return None;
    }
    match (created.approval, board.approval_for(&created.repo)) {
        (ApprovalPolicy::Auto, ApprovalPolicy::Manual) => Some(Change::Gated),
        (ApprovalPolicy::Manual, ApprovalPolicy::Auto) => {
            let approved = task.facts.iter().find_map(|f| {
                let TaskEvent::Approved { at, .. } = f.event else {
                    return None;
                };
                Some(at)
            });
            Some(Change::Ungated {
                waited_s: approved.map(|at| (at - created.at).num_seconds()),
            })
        }
        _ => None,
    }
}

/// What the candidate's budgets did to one run.
#[derive(Debug, Default)]
struct RunOutcome {
    /// What it would have spent; `None`: it would not have run.
    spent: Option<Usage>,
    change: Option<Change>,
}

/// A scope's spend so far under the candidate.
#[derive(Clone, Copy, Debug, Default)]
struct ScopeSpend {
    usd: f64,
    tokens: u64,
    /// The position of the last run whose figures were refused.
    refused: Option<i64>,
}

/// Every run of a task still made, in log order of its start and its outcome, through the claim's check (before
/// it starts) and the watch's (when its usage is in).
fn budgets(
    recorded: &Recorded,
    config: &BudgetsConfig,
    gone: &BTreeSet<TaskId>,
    index: &HashMap<TaskId, usize>,
) -> HashMap<RunId, RunOutcome> {
    let repo_of = |run: &RecordedRun| {
        index
            .get(&run.task)
            .and_then(|&i| recorded.tasks[i].created())
            .map(|c| c.repo.as_str().to_owned())
            .unwrap_or_default()
    };
    let mut moments: Vec<(i64, bool, &RecordedRun)> = Vec::new();
    for run in recorded.runs.iter().filter(|r| !gone.contains(&r.task)) {
        moments.push((run.started_position, true, run));
        if let Some((_, position)) = run.finished {
            moments.push((position, false, run));
        }
    }
    moments.sort_by_key(|(position, ..)| *position);
    let mut spent: HashMap<String, ScopeSpend> = HashMap::new();
    let mut outcomes: HashMap<RunId, RunOutcome> = HashMap::new();
    for (position, start, run) in moments {
        let repo = repo_of(run);
        if start {
            let mut outcome = RunOutcome {
                spent: Some(Usage::default()),
                change: None,
            };
            let standings = standings(config, recorded, &spent, run, &repo, run.started, position);
            if let Some((_, why)) = first_over(&standings, &Usage::default()) {
                outcome.spent = None;
                outcome.change = (!run.stopped_by_budget).then(|| Change::StoppedByBudget {
                    run: run.run.to_string(),
                    at: run.started,
                    why,
                    while_running: false,
                });
            }
            outcomes.insert(run.run, outcome);
            continue;
        }
        let Some(outcome) = outcomes.get_mut(&run.run).filter(|o| o.spent.is_some()) else {
            continue;
        };
        let Some((at, _)) = run.finished else {
            continue;
        };
        let standings = standings(config, recorded, &spent, run, &repo, at, position);
        let over = first_over(&standings, &run.usage);
        let usage = match &over {
            Some(_) => share_within(&standings, &run.usage),
            None => run.usage,
        };
        outcome.change = match (over, run.stopped_by_budget) {
            (Some((_, why)), false) => Some(Change::StoppedByBudget {
                run: run.run.to_string(),
                at,
                why,
                while_running: true,
            }),
            (None, true) => Some(Change::NotStoppedByBudget {
                run: run.run.to_string(),
                at,
            }),
            _ => None,
        };
        outcome.spent = Some(usage);
        for scope in scopes(run.task, &repo, at) {
            let entry = spent.entry(scope.key()).or_default();
            entry.usd += usage.cost_usd.unwrap_or(0.0);
            entry.tokens = entry.tokens.saturating_add(usage.total_tokens());
            if run.figures_refused {
                entry.refused = Some(position);
            }
        }
    }
    outcomes
}

/// The scopes a run of `task` in `repo` at `at` spends in: the task's, its repository's day, the day.
fn scopes(task: TaskId, repo: &str, at: DateTime<Utc>) -> [Scope; 3] {
    let day = at.date_naive();
    [Scope::task(task), Scope::repo(repo, day), Scope::day(day)]
}

/// The standings the service would read at `position` (`budgets::standings`' shape: only scopes with a limit,
/// each limit with the raises recorded before `position`, a refused run held until a raise after it).
fn standings(
    config: &BudgetsConfig,
    recorded: &Recorded,
    spent: &HashMap<String, ScopeSpend>,
    run: &RecordedRun,
    repo: &str,
    at: DateTime<Utc>,
    position: i64,
) -> Vec<Standing> {
    let raises: Vec<crate::budgets::Raised> = recorded
        .raises
        .iter()
        .filter(|(p, _)| *p < position)
        .map(|(_, r)| r.clone())
        .collect();
    let configured: [Limit; 3] = [config.task, config.repo_daily, config.daily];
    scopes(run.task, repo, at)
        .into_iter()
        .zip(configured)
        .filter(|(_, limit)| limit.is_set())
        .map(|(scope, configured)| {
            let limit = in_force(configured, &raises, &scope);
            let so_far = spent.get(&scope.key()).copied().unwrap_or_default();
            let figures_refused = so_far.refused.is_some_and(|refused| {
                !recorded
                    .raises
                    .iter()
                    .any(|(p, r)| *p > refused && *p < position && r.scope == scope)
            });
            Standing {
                scope,
                spent_usd: so_far.usd,
                spent_tokens: so_far.tokens,
                limit_usd: limit.usd,
                limit_tokens: limit.tokens,
                refused_runs: u64::from(so_far.refused.is_some()),
                figures_refused,
            }
        })
        .collect()
}

/// What a run stopped while running spent: its usage up to the first limit it reached (the watch stops it there),
/// in proportion, money and tokens alike.
fn share_within(standings: &[Standing], usage: &Usage) -> Usage {
    let mut share: f64 = 1.0;
    for standing in standings {
        if let (Some(limit), Some(cost)) = (standing.limit_usd, usage.cost_usd) {
            if cost > 0.0 {
                share = share.min(((limit - standing.spent_usd) / cost).clamp(0.0, 1.0));
            }
        }
        if let Some(limit) = standing.limit_tokens {
            let tokens = usage.total_tokens();
            if tokens > 0 {
                let room = limit.saturating_sub(standing.spent_tokens) as f64;
                share = share.min((room / tokens as f64).clamp(0.0, 1.0));
            }
        }
    }
    if standings.iter().any(|s| s.figures_refused) {
        share = 0.0;
    }
    let part = |n: u64| (n as f64 * share).round() as u64;
    Usage {
        input_tokens: part(usage.input_tokens),
        output_tokens: part(usage.output_tokens),
        cache_read_tokens: part(usage.cache_read_tokens),
        cache_write_tokens: part(usage.cache_write_tokens),
        cost_usd: usage.cost_usd.map(|c| c * share),
        turns: usage.turns,
    }
}

/// Landing under the candidate: a landing pidevops made, asked again on the task as it stood just before; a task
/// pidevops did not land, asked at each fact while it was in review.
fn land(task: &RecordedTask, board: &BoardConfig) -> Option<Change> {
    let created = task.created()?;
    let rules = board.land_for(&created.repo);
    let mut state: Option<crate::tasks::Task> = None;
    let landed_by_pidevops = task.facts.iter().any(landed_by);
    for fact in &task.facts {
        if landed_by_pidevops && landed_by(fact) {
            let before = state.as_ref()?;
            return match landing::readiness(before, &rules) {
                Readiness::Waiting(why) => Some(Change::NotLanded { why }),
                Readiness::Ready { .. } => None,
            };
        }
        state = Some(crate::tasks::evolve(state, &fact.event).ok()?);
        let now = state.as_ref()?;
        if !landed_by_pidevops
            && now.column() == Column::InReview
            && matches!(landing::readiness(now, &rules), Readiness::Ready { .. })
        {
            return Some(Change::Landed {
                at: fact.event.at(),
            });
        }
    }
    None
}

fn landed_by(fact: &super::recorded::Fact) -> bool {
    matches!(fact.event, TaskEvent::MergeQueued { .. })
        || matches!(fact.event, TaskEvent::Landed { .. }) && LANDERS.contains(&fact.actor.as_str())
}

/// The task's recorded outbound calls (and the calls its cap held back) through the candidate's cap, each at the
/// moment it was asked for, with the clearings a person made.
fn calls(task: &RecordedTask, cap: EffectCap) -> Vec<Change> {
    let cleared: Vec<i64> = task
        .facts
        .iter()
        .filter(|f| matches!(f.event, TaskEvent::NeedsHumanCleared { .. }))
        .map(|f| f.position)
        .collect();
    let mut ledger: Vec<(i64, OutboundEvent)> = Vec::with_capacity(task.outbound.len());
    let (mut held, mut sent) = (0u32, 0u32);
    let mut first_held: Option<DateTime<Utc>> = None;
    for (position, event) in &task.outbound {
        let last_cleared = cleared.iter().rev().find(|c| **c < *position).copied();
        let at = event.at();
        let call = match event {
            OutboundEvent::Call { key, action, .. } => (key.clone(), action.clone(), true),
            OutboundEvent::Capped { key, .. } => (key.clone(), String::new(), false),
        };
        match verdict(cap, task.id, &ledger, last_cleared, at) {
            Verdict::Send => {
                if !call.2 {
                    sent += 1;
                }
                ledger.push((
                    *position,
                    OutboundEvent::Call {
                        at,
                        key: call.0,
                        action: call.1,
                    },
                ));
            }
            Verdict::Trip { calls, cap, .. } => {
                if call.2 {
                    held += 1;
                    first_held.get_or_insert(at);
                }
                ledger.push((
                    *position,
                    OutboundEvent::Capped {
                        at,
                        calls,
                        cap,
                        key: call.0,
                    },
                ));
            }
            Verdict::Held { .. } => {
                if call.2 {
                    held += 1;
                    first_held.get_or_insert(at);
                }
            }
        }
    }
    let mut changes = Vec::new();
    if let Some(from) = first_held {
        changes.push(Change::CallsHeld { count: held, from });
    }
    if sent > 0 {
        changes.push(Change::CallsSent { count: sent });
    }
    changes
}

/// Tickets intake refused that the candidate would have made tasks of: one line per ticket (its key), none for a
/// ticket that has a task anyway.
fn refused_tickets(recorded: &Recorded, candidate: &Candidate<'_>) -> Vec<TaskLine> {
    let mut keys: BTreeSet<String> = recorded
        .tasks
        .iter()
        .filter_map(|t| t.key.clone())
        .collect();
    let mut lines = Vec::new();
    for refused in &recorded.ignored {
        let Decision::Create { key, draft } =
            rules::decide(&refused.cause, candidate.intake, candidate.rules)
        else {
            continue;
        };
        if candidate.board.allowed.check(&draft.repo).is_err() || !keys.insert(key.clone()) {
            continue;
        }
        lines.push(TaskLine {
            task: None,
            key: Some(key),
            title: draft.spec.title(),
            changes: vec![Change::Created {
                reason_refused: refused.reason.clone(),
            }],
            recorded: Spend::default(),
            candidate: Spend::default(),
        });
    }
    lines
}

fn unknowns(report: &ConfigReport, recorded: &Recorded, cap: EffectCap) -> Vec<String> {
    let mut unknowns = Vec::new();
    let count = |pick: fn(&Change) -> bool| {
        report
            .differences
            .iter()
            .filter(|l| l.changes.iter().any(pick))
            .count()
    };
    let created = count(|c| matches!(c, Change::Created { .. }));
    if created > 0 {
        unknowns.push(format!(
            "{created} refused tickets would have become tasks: nothing ran for them, so what they would have \
             cost is not counted"
        ));
    }
    let ungated = count(|c| matches!(c, Change::Ungated { waited_s: None }));
    if ungated > 0 {
        unknowns.push(format!(
            "{ungated} tasks never approved would have run: their runs are not counted"
        ));
    }
    let gated = count(|c| matches!(c, Change::Gated));
    if gated > 0 {
        unknowns.push(format!(
            "{gated} tasks would have waited for a person's approval: their runs are counted as not spent, though a \
             person might have approved them"
        ));
    }
    let gone_on = count(|c| matches!(c, Change::NotStoppedByBudget { .. }));
    if gone_on > 0 {
        unknowns.push(format!(
            "{gone_on} tasks had a run a budget stopped that the candidate would have let go on: what it would \
             have spent after is not counted"
        ));
    }
    let counted = recorded.tasks.iter().any(|t| !t.outbound.is_empty());
    if cap.limit().is_some() && !counted && !recorded.tasks.is_empty() {
        unknowns.push(
            "no task in the range has outbound calls on record (none were made, or the cap was off): the \
             candidate's cap is tried only on calls the service counted"
                .to_owned(),
        );
    }
    unknowns
}
