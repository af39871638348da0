use super::*;

fn limit(usd: Option<f64>, tokens: Option<u64>) -> Limit {
    Limit { usd, tokens }
}

fn day() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 12, 2).unwrap()
}

fn raise(scope: Scope, usd: Option<f64>, tokens: Option<u64>) -> Raised {
    Raised {
        at: Utc::now(),
        scope,
        usd,
        tokens,
        by: "cli".into(),
    }
}

#[test]
fn raises_add_to_their_own_scope_only_and_never_limit_what_the_file_leaves_open() {
    let repo = Scope::repo("acme/api", day());
    let other_day = Scope::repo("acme/api", day().succ_opt().unwrap());
    let raises = vec![
        raise(repo.clone(), Some(10.0), Some(1000)),
        raise(repo.clone(), Some(2.5), None),
        raise(other_day.clone(), Some(100.0), None),
    ];
    assert_eq!(
        in_force(limit(Some(50.0), None), &raises, &repo),
        limit(Some(62.5), None)
    );
    assert_eq!(
        in_force(limit(Some(50.0), Some(10)), &raises, &repo),
        limit(Some(62.5), Some(1010))
    );
    assert_eq!(
        in_force(limit(Some(50.0), None), &raises, &Scope::day(day())),
        limit(Some(50.0), None)
    );
}

#[test]
fn a_scope_is_over_when_what_it_spent_and_the_run_so_far_reach_a_limit() {
    let standing = Standing {
        scope: Scope::task("T-3".parse().unwrap()),
        spent_usd: 0.30,
        spent_tokens: 900,
        limit_usd: Some(0.50),
        limit_tokens: Some(1000),
        refused_runs: 0,
        figures_refused: false,
    };
    assert_eq!(standing.over(&Usage::default()), None);
    let costly = Usage {
        cost_usd: Some(0.25),
        ..Usage::default()
    };
    assert_eq!(
        standing.over(&costly).as_deref(),
        Some("budget exceeded: $0.55 of $0.50 for task T-3")
    );
    let wordy = Usage {
        output_tokens: 100,
        ..Usage::default()
    };
    assert_eq!(
        standing.over(&wordy).as_deref(),
        Some("budget exceeded: 1000 of 1000 tokens for task T-3")
    );
    assert!(standing.soft(0.5));
    assert!(!standing.soft(0.95));
}

fn refused_spent(position: i64) -> usage_rows::Spent {
    usage_rows::Spent {
        runs: 2,
        refused_runs: 1,
        refused_position: Some(position),
        ..usage_rows::Spent::default()
    }
}

#[test]
fn a_scope_holding_a_run_whose_figures_were_refused_is_over_whatever_it_spent_until_a_raise_after_it(
) {
    let repo = Scope::repo("acme/api", day());
    let limit = limit(Some(50.0), Some(1_000_000));
    // Nothing readable spent, far under both limits: over all the same (fail closed).
    let held = standing(repo.clone(), &refused_spent(10), limit, &[]);
    assert!(held.figures_refused && held.refused_runs == 1, "{held:?}");
    assert_eq!(
        held.over(&Usage::default()).as_deref(),
        Some(
            "budget exceeded: usage figures refused for acme/api on 2026-12-02: a run printed figures out of \
             bounds, so what it spent is unknown; held until a person raises it or the day ends (UTC)"
        )
    );
    assert_eq!(
        first_over(&[held], &Usage::default()).map(|(scope, _)| scope),
        Some(repo.clone())
    );
    // A raise before the run, or of another scope (another day, everyone's), lifts nothing.
    let before = [(5, raise(repo.clone(), Some(1.0), None))];
    assert!(standing(repo.clone(), &refused_spent(10), limit, &before).figures_refused);
    let elsewhere = [
        (20, raise(Scope::day(day()), Some(1.0), None)),
        (
            21,
            raise(
                Scope::repo("acme/api", day().succ_opt().unwrap()),
                None,
                Some(1),
            ),
        ),
        (22, raise(Scope::repo("acme/web", day()), Some(1.0), None)),
    ];
    assert!(standing(repo.clone(), &refused_spent(10), limit, &elsewhere).figures_refused);
    // A person's raise after it: the scope counts what it did read again, the run still on record.
    let after = [(20, raise(repo.clone(), None, Some(1)))];
    let lifted = standing(repo.clone(), &refused_spent(10), limit, &after);
    assert!(
        !lifted.figures_refused && lifted.refused_runs == 1,
        "{lifted:?}"
    );
    assert_eq!(lifted.over(&Usage::default()), None);
    // Another refused run after that raise holds it again.
    assert!(standing(repo.clone(), &refused_spent(30), limit, &after).figures_refused);
    // A task's scope has no day to end.
    let task = standing(
        Scope::task("T-5".parse().unwrap()),
        &refused_spent(10),
        limit,
        &[],
    );
    let why = task.over(&Usage::default()).unwrap();
    assert!(
        why.starts_with("budget exceeded: usage figures refused for task T-5")
            && why.ends_with("held until a person raises it"),
        "{why}"
    );
    // No refused run: the ordinary limits alone.
    let clean = standing(repo, &usage_rows::Spent::default(), limit, &[]);
    assert!(!clean.figures_refused && clean.refused_runs == 0);
    assert_eq!(clean.over(&Usage::default()), None);
}

#[test]
fn a_raise_is_checked_against_what_the_file_limits() {
    let config = BudgetsConfig {
        task: limit(Some(5.0), None),
        repo_daily: limit(None, Some(1000)),
        ..BudgetsConfig::default()
    };
    let ask = |scope: &str, task: Option<&str>, repo: Option<&str>, usd, tokens| RaiseRequest {
        scope: scope.into(),
        task: task.map(Into::into),
        repo: repo.map(Into::into),
        usd,
        tokens,
        request_id: None,
    };
    let ok = raise_of_request(
        &ask("task", Some("T-4"), None, Some(2.0), None),
        &config,
        day(),
        "cli",
    )
    .unwrap();
    assert_eq!(ok.scope, Scope::task("T-4".parse().unwrap()));
    let repo = raise_of_request(
        &ask("repo", None, Some("acme/api"), None, Some(10)),
        &config,
        day(),
        "api",
    )
    .unwrap();
    assert_eq!(repo.scope, Scope::repo("acme/api", day()));
    for (request, refusal) in [
        (
            ask("task", Some("T-4"), None, None, None),
            "name usd, tokens or both",
        ),
        (
            ask("task", Some("T-4"), None, Some(-1.0), None),
            "usd must be a positive number",
        ),
        (
            ask("task", Some("T-4"), None, None, Some(0)),
            "tokens must be at least 1",
        ),
        (ask("task", None, None, Some(1.0), None), "needs task"),
        (ask("task", Some("nope"), None, Some(1.0), None), "task:"),
        (
            ask("repo", None, Some("not a repo"), None, Some(1)),
            "repo:",
        ),
        (
            ask("task", Some("T-4"), None, None, Some(5)),
            "budgets.task_tokens is not set",
        ),
        (
            ask("day", None, None, Some(5.0), None),
            "budgets.daily_usd is not set",
        ),
        (
            ask("week", None, None, Some(5.0), None),
            "scope must be task, repo or day",
        ),
    ] {
        let error = raise_of_request(&request, &config, day(), "cli").unwrap_err();
        assert!(error.contains(refusal), "{request:?}: {error}");
    }
}

#[test]
fn scopes_describe_themselves_and_round_trip() {
    for (scope, words) in [
        (Scope::task("T-9".parse().unwrap()), "task T-9"),
        (Scope::repo("acme/api", day()), "acme/api on 2026-12-02"),
        (Scope::day(day()), "all repositories on 2026-12-02"),
    ] {
        assert_eq!(scope.describe(), words);
        let json = serde_json::to_value(&scope).unwrap();
        assert_eq!(serde_json::from_value::<Scope>(json).unwrap(), scope);
    }
}
