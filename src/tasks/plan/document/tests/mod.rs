use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::tasks::plan::{Scope, ScopeText};

mod docs;
mod errors;

fn limits() -> PlanLimits {
    PlanLimits::default()
}

fn parse(value: &Value) -> Result<PlanDocument, PlanErrors> {
    PlanDocument::parse(value.to_string().as_bytes(), &limits())
}

fn refused(value: &Value) -> PlanErrors {
    match parse(value) {
        Ok(plan) => panic!("should be refused: {value}\nparsed as {plan:?}"),
        Err(errors) => errors,
    }
}

fn item(id: &str, scope: &[&str], depends_on: &[&str]) -> Value {
    json!({
        "id": id,
        "title": format!("Do {id}"),
        "task": format!("Everything {id} needs."),
        "scope": scope,
        "done_when": format!("{id} works"),
        "depends_on": depends_on,
    })
}

fn plan(items: Vec<Value>) -> Value {
    json!({ "version": 1, "items": items })
}

fn three_items() -> Value {
    json!({
        "version": 1,
        "summary": "Orders: a table, an API over it, a page using the API.",
        "items": [
            {
                "id": "web", "title": "Show orders", "task": "A page listing orders.",
                "scope": ["web/src/orders/**"], "done_when": "The page lists orders.",
                "depends_on": ["api", "db"]
            },
            {
                "id": "api", "title": "Orders API", "task": "GET /orders.",
                "scope": ["src/api/orders.rs", "docs/{api,orders}.md"], "done_when": "curl works."
            },
            {
                "id": "db", "title": "Add the orders table", "task": "A migration.",
                "scope": ["migrations/**", "src/db/orders.rs"], "done_when": "Migrates up and down.",
                "depends_on": []
            }
        ]
    })
}

#[test]
fn a_valid_plan_is_typed_and_ordered_by_dependencies_then_file_order() {
    let plan = parse(&three_items()).expect("a valid plan");
    assert_eq!(
        plan.summary(),
        Some("Orders: a table, an API over it, a page using the API.")
    );
    let ids: Vec<&str> = plan.items().iter().map(|i| i.id().as_str()).collect();
    assert_eq!(ids, ["web", "api", "db"]);
    let order: Vec<&str> = plan
        .topological_order()
        .iter()
        .map(|i| i.id().as_str())
        .collect();
    assert_eq!(order, ["api", "db", "web"]);
    let web = plan.item(&"web".parse().unwrap()).unwrap();
    assert_eq!(web.title(), "Show orders");
    let depends: Vec<&str> = web.depends_on().iter().map(ItemId::as_str).collect();
    assert_eq!(depends, ["api", "db"]);
    let api = &plan.items()[1];
    assert!(api.depends_on().is_empty(), "depends_on may be left out");
    assert_eq!(api.scope().len(), 2);
}

#[test]
fn an_items_spec_is_title_blank_line_task_with_a_scope_that_reads_back() {
    let plan = parse(&three_items()).unwrap();
    let api = &plan.items()[1];
    let spec = api.spec();
    assert_eq!(spec.task(), "Orders API\n\nGET /orders.");
    assert_eq!(spec.scope(), "src/api/orders.rs, docs/{api,orders}.md");
    assert_eq!(spec.done_when(), "curl works.");
    assert_eq!(spec.title(), "Orders API");
    match Scope::parse(spec.scope()) {
        ScopeText::Paths(scope) => assert_eq!(scope.globs(), api.scope()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_stored_plan_reads_back_and_is_checked_again() {
    let plan = parse(&three_items()).unwrap();
    let stored = serde_json::to_value(&plan).unwrap();
    assert_eq!(stored["version"], 1);
    assert_eq!(stored["items"][1]["depends_on"], json!([]));
    assert_eq!(
        serde_json::from_value::<PlanDocument>(stored.clone()).unwrap(),
        plan
    );
    // The stored form is a plan file.
    assert_eq!(parse(&stored).unwrap(), plan);
    let mut tampered = stored;
    tampered["items"][1]["scope"] = json!(["web/**"]);
    let error = serde_json::from_value::<PlanDocument>(tampered).unwrap_err();
    assert!(error.to_string().contains("overlap"), "{error}");
    // The operator's item limit is not applied to what was already accepted.
    let many: Vec<Value> = (0..30)
        .map(|i| item(&format!("i{i}"), &[&format!("d{i}")], &[]))
        .collect();
    assert!(serde_json::from_value::<PlanDocument>(plan_json(many)).is_ok());
}

fn plan_json(items: Vec<Value>) -> Value {
    plan(items)
}

#[test]
fn scopes_overlap_by_glob_not_by_string_and_the_error_names_a_path() {
    let errors = refused(&plan(vec![
        item("api", &["src/**"], &[]),
        item("web", &["src/web/*.ts"], &[]),
    ]));
    assert_eq!(errors.errors().len(), 1, "{errors}");
    assert_eq!(
        errors.errors()[0].line(),
        r#"items "api" and "web" overlap: "src/**" and "src/web/*.ts" both match "src/web/a.ts""#
    );
    assert_eq!(errors.errors()[0].kind(), PlanErrorKind::Overlap);
    // A path overlaps what lies beneath it; alternatives overlap their members.
    assert!(refused(&plan(vec![
        item("a", &["src/api"], &[]),
        item("b", &["src/*/x.rs"], &[])
    ]))
    .has(PlanErrorKind::Overlap));
    assert!(refused(&plan(vec![
        item("a", &["docs/{a,b}.md"], &[]),
        item("b", &["docs/b.md"], &[])
    ]))
    .has(PlanErrorKind::Overlap));
    // Disjoint globs are fine, however alike their text.
    assert!(parse(&plan(vec![
        item("a", &["src/*.rs"], &[]),
        item("b", &["src/api/x.rs"], &[]),
        item("c", &["*.md"], &[]),
        item("d", &["src/*.md"], &[]),
    ]))
    .is_ok());
}

#[test]
fn a_cycle_is_named_in_order() {
    let errors = refused(&plan(vec![
        item("a", &["a"], &["b"]),
        item("b", &["b"], &["c"]),
        item("c", &["c"], &["a"]),
        item("d", &["d"], &["a"]),
    ]));
    let lines: Vec<&str> = errors.errors().iter().map(PlanError::line).collect();
    assert_eq!(lines, ["depends_on cycle: a -> b -> c -> a"]);
    let errors = refused(&plan(vec![
        item("x", &["x"], &["y"]),
        item("y", &["y"], &["x"]),
        item("p", &["p"], &["q"]),
        item("q", &["q"], &["p"]),
    ]));
    let lines: Vec<&str> = errors.errors().iter().map(PlanError::line).collect();
    assert_eq!(
        lines,
        [
            "depends_on cycle: x -> y -> x",
            "depends_on cycle: p -> q -> p"
        ]
    );
}

#[test]
fn the_item_limit_allows_exactly_max_items() {
    let items = |n: usize| {
        (0..n)
            .map(|i| item(&format!("i{i}"), &[&format!("dir{i}")], &[]))
            .collect()
    };
    let mut limits = limits();
    limits.max_items = 3;
    let at = plan(items(3));
    assert_eq!(
        PlanDocument::parse(at.to_string().as_bytes(), &limits)
            .unwrap()
            .items()
            .len(),
        3
    );
    let over = plan(items(4));
    let errors = PlanDocument::parse(over.to_string().as_bytes(), &limits).unwrap_err();
    assert_eq!(
        errors.errors()[0].line(),
        "items has 4 entries; at most 3 are allowed: merge small items, or leave work for a later plan"
    );
    assert_eq!(PlanLimits::default().max_items, 20);
    assert!(parse(&plan(items(20))).is_ok());
    assert!(parse(&plan(items(21)))
        .unwrap_err()
        .has(PlanErrorKind::TooManyItems));
}

/// Any JSON value, nested a few levels, with the plan's own field names likely.
fn any_json() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        prop::sample::select(vec![
            "version",
            "summary",
            "items",
            "id",
            "title",
            "task",
            "scope",
            "done_when",
            "depends_on"
        ])
        .prop_map(str::to_owned),
        "[a-z\u{0}]{0,3}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        Just(json!(1)),
        "[a-z/*{},\\[\\]\u{0} .-]{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map(key.clone(), inner, 0..7)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parsing_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = PlanDocument::parse(&bytes, &limits());
    }

    #[test]
    fn parsing_never_panics_on_json_and_refusals_are_lines(value in any_json()) {
        match parse(&value) {
            Ok(plan) => {
                let stored = serde_json::to_value(&plan).unwrap();
                prop_assert_eq!(serde_json::from_value::<PlanDocument>(stored).unwrap(), plan);
            }
            Err(errors) => {
                prop_assert!(errors.count() > 0);
                prop_assert!(errors.retry_text().chars().count() <= PlanErrors::RETRY_MAX_CHARS);
                for error in errors.errors() {
                    prop_assert!(!error.line().contains('\n'), "{:?}", error.line());
                }
            }
        }
        let _ = serde_json::from_value::<PlanDocument>(value);
    }

    #[test]
    fn item_shaped_documents_never_panic(
        items in prop::collection::vec(
            (
                "[a-c]",
                prop::collection::vec("[ab*/]{1,4}", 0..3),
                prop::collection::vec("[a-d]", 0..3),
            ),
            0..6,
        )
    ) {
        let items: Vec<Value> = items
            .iter()
            .map(|(id, scope, deps)| {
                let scope: Vec<&str> = scope.iter().map(String::as_str).collect();
                let deps: Vec<&str> = deps.iter().map(String::as_str).collect();
                item(id, &scope, &deps)
            })
            .collect();
        if let Ok(plan) = parse(&plan_json(items)) {
            let order = plan.topological_order();
            prop_assert_eq!(order.len(), plan.items().len());
            for (position, it) in order.iter().enumerate() {
                for dep in it.depends_on() {
                    let before = order[..position].iter().any(|o| o.id() == dep);
                    prop_assert!(before, "{} before {}", dep, it.id());
                }
                let _ = it.spec();
            }
        }
    }
}

#[test]
fn scopes_too_costly_to_compare_are_refused_instead_of_compared_for_minutes() {
    // 20 items of 10 globs that all begin with `**/` and loop on `*`: their pairs would take ~200 times the
    // budget (at 50 globs of 300 characters, minutes); the check stops at its budget and says so.
    let items: Vec<Value> = (0..20)
        .map(|i| {
            let scope: Vec<String> = (0..10)
                .map(|j| format!("**/{}{i}_{j}", "a*".repeat(60)))
                .collect();
            let scope: Vec<&str> = scope.iter().map(String::as_str).collect();
            item(&format!("i{i}"), &scope, &[])
        })
        .collect();
    let errors = refused(&plan(items));
    assert_eq!(errors.errors().len(), 1, "{errors}");
    assert_eq!(errors.errors()[0].kind(), PlanErrorKind::Scope);
    assert!(
        errors.errors()[0]
            .line()
            .starts_with("the scopes are too many or too intricate to check for overlap: the check stopped at items \"i0\" and \"i"),
        "{errors}"
    );
}

#[test]
fn a_large_realistic_plan_is_compared_well_within_the_budget() {
    let items: Vec<Value> = (0..20)
        .map(|i| {
            let scope = [
                format!("src/mod{i}/**"),
                format!("tests/mod{i}_*.rs"),
                format!("docs/mod{i}.md"),
                format!("web/{{a,b}}{i}/*.ts"),
                format!("**/*.only{i}"),
            ];
            let scope: Vec<&str> = scope.iter().map(String::as_str).collect();
            item(&format!("i{i}"), &scope, &[])
        })
        .collect();
    let errors = refused(&plan(items));
    // `**/*.only3` overlaps every other item's `src/modN/**`: real overlaps, each with its witness, and no
    // budget refusal.
    assert!(
        !errors
            .errors()
            .iter()
            .any(|e| e.kind() == PlanErrorKind::Scope),
        "{errors}"
    );
    assert!(errors.count() > 100);
    assert!(errors.errors()[0].line().contains("both match"), "{errors}");
}

#[test]
fn a_placeholder_scope_is_refused_naming_the_item_and_the_word() {
    for word in [
        "n/a",
        "N/A",
        "na",
        "none",
        "None",
        "-",
        "—",
        "tbd",
        "TODO",
        "any",
        "all",
        "everything",
        "?",
        "*",
        "**",
        "**/*",
        "*/**",
        "",
        "   ",
        "...",
        "nothing",
    ] {
        let errors = refused(&plan(vec![
            item("api", &["src/api/**"], &[]),
            item("stray", &["docs/**", word], &[]),
        ]));
        let lines: Vec<&str> = errors.errors().iter().map(PlanError::line).collect();
        assert_eq!(errors.errors().len(), 1, "{word:?}: {lines:?}");
        assert_eq!(
            errors.errors()[0].kind(),
            PlanErrorKind::Placeholder,
            "{word:?}: {lines:?}"
        );
        let quoted = format!("{word:?}");
        assert!(
            lines[0].starts_with("items[1] \"stray\": scope[1] ") && lines[0].contains(&quoted),
            "{word:?}: {lines:?}"
        );
    }
}

#[test]
fn paths_that_look_like_words_or_have_wildcards_with_a_name_are_scopes() {
    let document = parse(&plan(vec![
        item(
            "a",
            &["Makefile", "none.md", "*.md", "**/*.rs", "n/a/b"],
            &[],
        ),
        item("b", &["docs/**/*.txt"], &[]),
    ]));
    assert!(document.is_ok(), "{document:?}");
}

#[test]
fn a_stored_plan_with_a_placeholder_scope_still_reads_back() {
    // Accepted before placeholders were refused: the log must stay readable.
    let stored = plan(vec![item("old", &["n/a"], &[])]);
    let read = serde_json::from_value::<PlanDocument>(stored).unwrap();
    assert_eq!(read.items()[0].scope()[0].as_str(), "n/a");
    assert!(refused(&plan(vec![item("old", &["n/a"], &[])])).has(PlanErrorKind::Placeholder));
}
