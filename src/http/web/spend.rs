//! The spend page (`/spend`), pure: what agents spent from the `usage` read model per UTC day and repository
//! (profiles summed, with each profile's row under the sum where there are several), per repository and profile over the range, the cost per
//! merged pull request (the range's cost over the pull requests merged in it, from `task_merges`), and the tasks
//! that spent most. A cost no run reported is "unknown", never $0 (Codex reports none); one only some runs
//! reported is "at least" what they did. Every value is escaped text (a repository or profile name is whatever a
//! run's outcome recorded).

use std::collections::BTreeMap;

use chrono::NaiveDate;
use maud::{html, Markup};

use crate::projectors::usage::{total, DayRow, Spent, TaskUsageRow};
use crate::tasks::{RepoName, TaskId};

/// The ranges offered, in days (today, UTC, included).
pub const RANGES: [i64; 3] = [7, 30, 90];
/// The range when none is asked for.
pub const DEFAULT_DAYS: i64 = 30;
/// Rows the by-day table shows at most (a day and repository's, and its profiles' when it has several), newest
/// first, so the page stays under its size budget however many repositories and profiles spend; the totals count
/// every row.
pub const MAX_DAY_ROWS: usize = 400;
/// The tasks that spent most, shown.
pub const TOP_TASKS: i64 = 20;

/// What the page was asked for, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpendQuery {
    pub days: i64,
    pub repo: Option<RepoName>,
}

/// The page's query (`days`, `repo`, as sent), checked; `Err` says what is wrong, for the 400 page. An empty `repo`
/// is every repository (the form's first option).
pub fn query(days: Option<&str>, repo: Option<&str>) -> Result<SpendQuery, String> {
    let days = match days {
        None => DEFAULT_DAYS,
        Some(text) => text
            .parse::<i64>()
            .ok()
            .filter(|d| RANGES.contains(d))
            .ok_or_else(|| "days must be 7, 30 or 90.".to_owned())?,
    };
    let repo =
        match repo {
            None | Some("") => None,
            Some(text) => Some(text.parse::<RepoName>().map_err(|e| {
                format!("repo must be a repository, owner/name or group/…/name: {e}.")
            })?),
        };
    Ok(SpendQuery { days, repo })
}

/// What some runs cost, as honest as their CLIs were.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cost {
    /// No runs: nothing recorded (shown as such, not as $0).
    Nothing,
    /// Every run reported its cost.
    Known(f64),
    /// Some runs reported one: the sum of theirs, a lower bound.
    AtLeast { usd: f64, costed: i64, runs: i64 },
    /// Runs, none of which reported a cost.
    Unknown,
}

impl Cost {
    pub fn of(spent: &Spent) -> Cost {
        match (spent.runs, spent.costed_runs) {
            (0, _) => Cost::Nothing,
            (_, 0) => Cost::Unknown,
            (runs, costed) if costed >= runs => Cost::Known(spent.cost_usd),
            (runs, costed) => Cost::AtLeast {
                usd: spent.cost_usd,
                costed,
                runs,
            },
        }
    }

    /// The cost of each of `n` things (pull requests); `None` for none.
    pub fn per(self, n: i64) -> Option<Cost> {
        let each = |usd: f64| usd / n as f64;
        (n > 0).then_some(match self {
            Cost::Nothing => Cost::Nothing,
            Cost::Known(usd) => Cost::Known(each(usd)),
            Cost::AtLeast { usd, costed, runs } => Cost::AtLeast {
                usd: each(usd),
                costed,
                runs,
            },
            Cost::Unknown => Cost::Unknown,
        })
    }

    /// The words the page shows: `$1.23`, `≥ $0.40`, `unknown`, `—`.
    pub fn text(self) -> String {
        match self {
            Cost::Nothing => "—".to_owned(),
            Cost::Known(usd) => usd_text(usd),
            Cost::AtLeast { usd, .. } => format!("≥ {}", usd_text(usd)),
            Cost::Unknown => "unknown".to_owned(),
        }
    }

    fn class(self) -> &'static str {
        match self {
            Cost::Nothing | Cost::Known(_) => "n cost",
            Cost::AtLeast { .. } => "n cost partial",
            Cost::Unknown => "n cost unknown",
        }
    }

    fn title(self) -> Option<String> {
        match self {
            Cost::AtLeast { costed, runs, .. } => Some(format!(
                "{costed} of {runs} runs reported a cost: the others' is unknown"
            )),
            Cost::Unknown => Some("no run reported a cost (Codex reports none)".to_owned()),
            Cost::Nothing => Some("no run recorded what it spent".to_owned()),
            Cost::Known(_) => None,
        }
    }
}

/// Dollars: cents from a dollar up, else four decimals, or as many as its first two significant digits need (a
/// short run costs a fraction of a cent: $0.00042 is not $0.00).
pub fn usd_text(usd: f64) -> String {
    if usd == 0.0 || !usd.is_finite() || usd.abs() >= 1.0 {
        return format!("${usd:.2}");
    }
    // 0.00042: log10 is -3.4, its first significant digit the 4th decimal, two of them need 5.
    let first = (-usd.abs().log10().floor()) as usize;
    let decimals = (first + 1).clamp(4, 12);
    format!("${usd:.decimals$}")
}

/// A count with thousands separated: `1,234,567`.
pub fn count(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What the handler read for the page.
pub struct SpendView {
    pub days: i64,
    pub repo: Option<String>,
    /// The first day covered (UTC); the last is today.
    pub since: NaiveDate,
    /// The repositories the filter offers.
    pub repos: Vec<String>,
    /// The read model's rows in the range: per day, repository and profile, newest day first.
    pub rows: Vec<DayRow>,
    /// Pull requests merged in the range, per repository.
    pub merged: BTreeMap<String, i64>,
    /// The tasks that spent most, with their titles where the board has them.
    pub tasks: Vec<(TaskUsageRow, Option<String>)>,
    /// The form's CSRF token when `[budgets]` sets a limit (a person may raise one); `None`: no raise form.
    pub raise: Option<String>,
}

/// One repository's spend over the range, with its profiles'.
struct RepoSpend<'a> {
    spent: Spent,
    profiles: BTreeMap<&'a str, Spent>,
    merged: i64,
}

fn by_repo(view: &SpendView) -> BTreeMap<&str, RepoSpend<'_>> {
    let mut repos: BTreeMap<&str, RepoSpend<'_>> = BTreeMap::new();
    let empty = || RepoSpend {
        spent: Spent::default(),
        profiles: BTreeMap::new(),
        merged: 0,
    };
    for row in &view.rows {
        let repo = repos.entry(row.repo.as_str()).or_insert_with(empty);
        repo.spent = total([&repo.spent, &row.spent]);
        let profile = repo.profiles.entry(row.profile.as_str()).or_default();
        *profile = total([&*profile, &row.spent]);
    }
    for (name, merged) in &view.merged {
        repos.entry(name.as_str()).or_insert_with(empty).merged = *merged;
    }
    repos
}

/// The rows of one day and repository (profiles in the read model's order).
struct DayGroup<'a> {
    day: &'a str,
    repo: &'a str,
    rows: Vec<&'a DayRow>,
}

impl DayGroup<'_> {
    /// The table rows it takes: its sum, and each profile's when it has several.
    fn rows_shown(&self) -> usize {
        match self.rows.len() {
            1 => 1,
            n => 1 + n,
        }
    }
}

/// The day × repository groups that fit in [`MAX_DAY_ROWS`] table rows (whole groups only), and whether any were
/// left out.
fn by_day(rows: &[DayRow]) -> (Vec<DayGroup<'_>>, bool) {
    let mut groups: Vec<DayGroup<'_>> = Vec::new();
    for row in rows {
        match groups.last_mut() {
            Some(group) if group.day == row.day && group.repo == row.repo => group.rows.push(row),
            _ => groups.push(DayGroup {
                day: &row.day,
                repo: &row.repo,
                rows: vec![row],
            }),
        }
    }
    let mut shown = 0;
    let fit = groups
        .iter()
        .take_while(|g| {
            shown += g.rows_shown();
            shown <= MAX_DAY_ROWS
        })
        .count();
    let cut = fit < groups.len();
    groups.truncate(fit);
    (groups, cut)
}

fn cost_cell(cost: Cost) -> Markup {
    html! { td class=(cost.class()) title=[cost.title()] { (cost.text()) } }
}

/// The token and cost cells of some runs.
fn spent_cells(spent: &Spent) -> Markup {
    html! {
        td.n {
            (count(spent.runs))
            // What those runs spent is unknown: their budgets are held until a person raises them.
            @if spent.refused_runs > 0 {
                " " span.refused title="their usage figures were out of bounds: what they spent is unknown" {
                    "(" (count(spent.refused_runs)) " figures refused)"
                }
            }
        }
        td.n { (count(spent.input_tokens)) }
        td.n { (count(spent.output_tokens)) }
        td.n { (count(spent.cache_read_tokens)) }
        td.n { (count(spent.cache_write_tokens)) }
        (cost_cell(Cost::of(spent)))
    }
}

fn spent_heads() -> Markup {
    html! {
        th.n { "runs" } th.n { "input" } th.n { "output" } th.n { "cache read" } th.n { "cache write" } th.n { "cost" }
    }
}

/// The cost per merged pull request, or why there is none.
fn per_pr_cell(spent: &Spent, merged: i64) -> Markup {
    match Cost::of(spent).per(merged) {
        Some(cost) => cost_cell(cost),
        None => html! { td.n.muted { "no pull request merged" } },
    }
}

pub fn spend(view: &SpendView) -> Markup {
    let repos = by_repo(view);
    let all = total(view.rows.iter().map(|r| &r.spent));
    let merged: i64 = view.merged.values().sum();
    let (days, cut) = by_day(&view.rows);
    html! {
        h1 { "Spend" }
        form.filters method="get" action="/spend" {
            select name="days" {
                @for days in RANGES {
                    option value=(days) selected[view.days == days] { "last " (days) " days" }
                }
            }
            select name="repo" {
                option value="" { "every repository" }
                @for repo in &view.repos {
                    option value=(repo) selected[view.repo.as_deref() == Some(repo.as_str())] { (repo) }
                }
            }
            button type="submit" { "Show" }
        }
        @if let Some(csrf) = &view.raise {
            form.raise method="post" action="/spend/raise" {
                input type="hidden" name="csrf" value=(csrf);
                "Raise a budget: "
                select name="scope" {
                    option value="task" { "a task's" }
                    option value="repo" { "a repository's, today" }
                    option value="day" { "everyone's, today" }
                }
                input type="text" name="target" placeholder="T-n or owner/name" size="18";
                " by $" input type="number" name="usd" min="0" step="0.01" size="8";
                " and/or " input type="number" name="tokens" min="1" step="1" size="10"; " tokens "
                button type="submit" { "Raise" }
            }
        }
        p.muted {
            "From " (view.since.format("%Y-%m-%d")) " to today (UTC), as the agents' CLIs reported it. A cost no run "
            "reported is unknown (Codex reports none); one only some runs reported is at least theirs. The cost per "
            "merged pull request is the range's cost over the pull requests merged in it."
        }
        table.spend.total {
            thead { tr { (spent_heads()) th.n { "pull requests merged" } th.n { "per merged pull request" } } }
            tbody { tr data-total="" { (spent_cells(&all)) td.n { (count(merged)) } (per_pr_cell(&all, merged)) } }
        }
        h2 { "By repository" }
        @if repos.is_empty() {
            p.muted { "Nothing spent and no pull request merged in this range." }
        } @else {
            table.spend.repos {
                thead { tr {
                    th { "repository" } th { "profile" } (spent_heads())
                    th.n { "pull requests merged" } th.n { "per merged pull request" }
                } }
                tbody {
                    @for (name, repo) in &repos {
                        tr data-repo=(name) {
                            td { (name) }
                            @match repo.profiles.len() {
                                0 => td {},
                                1 => td { @for profile in repo.profiles.keys() { (profile) } },
                                n => td.muted { (n) " profiles" },
                            }
                            (spent_cells(&repo.spent)) td.n { (count(repo.merged)) }
                            (per_pr_cell(&repo.spent, repo.merged))
                        }
                        @if repo.profiles.len() > 1 {
                            @for (profile, spent) in &repo.profiles {
                                tr.profile data-repo=(name) data-profile=(profile) {
                                    td {} td { (profile) } (spent_cells(spent)) td {} td {}
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "By day" }
        @if days.is_empty() {
            p.muted { "No run spent anything in this range." }
        } @else {
            table.spend.days {
                thead { tr { th { "day (UTC)" } th { "repository" } th { "profile" } (spent_heads()) } }
                tbody {
                    @for group in &days {
                        @let sum = total(group.rows.iter().map(|r| &r.spent));
                        tr data-day=(group.day) data-repo=(group.repo) {
                            td { (group.day) } td { (group.repo) }
                            @if let [only] = group.rows.as_slice() {
                                td { (only.profile) }
                            } @else {
                                td.muted { (group.rows.len()) " profiles" }
                            }
                            (spent_cells(&sum))
                        }
                        @if group.rows.len() > 1 {
                            @for row in &group.rows {
                                tr.profile data-day=(group.day) data-repo=(group.repo) data-profile=(row.profile) {
                                    td {} td {} td { (row.profile) } (spent_cells(&row.spent))
                                }
                            }
                        }
                    }
                }
            }
            @if cut {
                p.muted { "Older days are not shown: choose a shorter range or one repository. The totals count them." }
            }
        }
        h2 { "Tasks that spent most" }
        p.muted { "Each task's whole spend, among the tasks whose last run ended in this range." }
        @if view.tasks.is_empty() {
            p.muted { "No task ran in this range." }
        } @else {
            table.spend.tasks {
                thead { tr { th { "task" } th { "repository" } (spent_heads()) th { "last run" } } }
                tbody {
                    @for (row, title) in &view.tasks {
                        tr data-task=(row.task_id) {
                            td {
                                @match row.task_id.parse::<TaskId>() {
                                    Ok(id) => { a href={ "/tasks/" (id) } { (id) } }
                                    Err(_) => { (row.task_id) }
                                }
                                @if let Some(title) = title { " " (title) }
                            }
                            td { (row.repo) } (spent_cells(&row.spent))
                            td { time datetime=(row.last_at.to_rfc3339()) { (row.last_at.format("%Y-%m-%d %H:%M UTC")) } }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spent(runs: i64, costed_runs: i64, cost_usd: f64) -> Spent {
        Spent {
            runs,
            costed_runs,
            cost_usd,
            ..Spent::default()
        }
    }

    #[test]
    fn the_query_takes_the_ranges_offered_and_a_repository() {
        assert_eq!(
            query(None, None),
            Ok(SpendQuery {
                days: 30,
                repo: None
            })
        );
        let asked = query(Some("7"), Some("acme/app")).unwrap();
        assert_eq!((asked.days, asked.repo.unwrap().as_str()), (7, "acme/app"));
        assert_eq!(query(Some("90"), Some("")).unwrap().repo, None);
        for bad in ["8", "0", "-7", "365", "abc", "", "7.0", " 7"] {
            assert!(query(Some(bad), None).is_err(), "{bad:?}");
        }
        let nested = query(None, Some("group/sub/app")).unwrap();
        assert_eq!(nested.repo.unwrap().as_str(), "group/sub/app");
        for bad in ["acme", "a b/c", "<script>/x", "acme/../x", "/app"] {
            let refused = query(None, Some(bad)).unwrap_err();
            assert!(refused.starts_with("repo must be"), "{bad:?}: {refused}");
        }
    }

    #[test]
    fn a_cost_no_run_reported_is_unknown_never_zero() {
        assert_eq!(Cost::of(&spent(3, 0, 0.0)).text(), "unknown");
        assert_eq!(Cost::of(&spent(3, 0, 0.0)).per(2), Some(Cost::Unknown));
        assert_eq!(Cost::of(&spent(0, 0, 0.0)).text(), "—");
        assert_eq!(Cost::of(&spent(0, 0, 0.0)).per(2), Some(Cost::Nothing));
        assert_eq!(Cost::of(&spent(2, 2, 1.5)).text(), "$1.50");
        assert_eq!(
            Cost::of(&spent(2, 2, 1.5)).per(2).unwrap().text(),
            "$0.7500"
        );
        assert_eq!(Cost::of(&spent(3, 1, 0.25)).text(), "≥ $0.2500");
        assert_eq!(Cost::of(&spent(2, 2, 1.5)).per(0), None);
        assert_eq!(usd_text(0.0187335), "$0.0187");
        assert_eq!(usd_text(12.345), "$12.35");
        assert_eq!(usd_text(0.0), "$0.00");
        assert_eq!(usd_text(0.00042), "$0.00042");
        assert_eq!(usd_text(0.0000071), "$0.0000071");
        assert_eq!(usd_text(0.5), "$0.5000");
    }

    #[test]
    fn counts_read_in_thousands() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(24448), "24,448");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(count(-1234), "-1,234");
    }

    fn row(day: &str, repo: &str, profile: &str) -> DayRow {
        DayRow {
            day: day.to_owned(),
            repo: repo.to_owned(),
            profile: profile.to_owned(),
            spent: spent(1, 1, 0.1),
        }
    }

    #[test]
    fn the_days_shown_are_whole_groups_up_to_the_cap() {
        // Two profiles a day: three table rows each (the sum, then each profile).
        let rows: Vec<DayRow> = (0..MAX_DAY_ROWS)
            .map(|i| {
                row(
                    &format!("day-{:04}", i / 2),
                    "acme/app",
                    &format!("p{}", i % 2),
                )
            })
            .collect();
        let (groups, cut) = by_day(&rows);
        assert!(cut);
        assert_eq!(groups.len(), MAX_DAY_ROWS / 3);
        assert!(groups.iter().all(|g| g.rows.len() == 2));
        let (groups, cut) = by_day(&rows[..4]);
        assert!(!cut);
        assert_eq!(groups.len(), 2);
        // One profile a day: one row each, so exactly the cap.
        let rows: Vec<DayRow> = (0..=MAX_DAY_ROWS)
            .map(|i| row(&format!("day-{i:04}"), "acme/app", "claude"))
            .collect();
        let (groups, cut) = by_day(&rows);
        assert_eq!((groups.len(), cut), (MAX_DAY_ROWS, true));
        assert!(!by_day(&rows[..MAX_DAY_ROWS]).1);
    }
}
