use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::tasks::plan::{Scope, ScopeText};

mod docs;

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

/// Each case: a document, the kind of its one problem, and words its line must contain.
fn error_cases() -> Vec<(Value, PlanErrorKind, &'static str)> {
    use PlanErrorKind::*;
    let ok = || item("a", &["src/a"], &[]);
    let with = |field: &str, value: Value| {
        let mut it = ok();
        it[field] = value;
        plan(vec![it])
    };
    let without = |field: &str| {
        let mut it = ok();
        it.as_object_mut().unwrap().remove(field);
        plan(vec![it])
    };
    vec![
        (json!([1]), NotAnObject, "must be a JSON object"),
        (
            json!({"version": 1, "items": [ok()], "notes": "x"}),
            UnknownField,
            "unknown field \"notes\" at the top level",
        ),
        (json!({"items": [ok()]}), Version, "version is missing"),
        (
            json!({"version": 2, "items": [ok()]}),
            Version,
            "version 2 is not understood; this pidevops reads plan version 1",
        ),
        (
            json!({"version": "1", "items": [ok()]}),
            Version,
            "version \"1\" is not understood",
        ),
        (json!({"version": 1}), MissingField, "items is missing"),
        (
            json!({"version": 1, "items": {}}),
            WrongType,
            "items must be an array",
        ),
        (plan(vec![]), NoItems, "items is empty"),
        (
            json!({"version": 1, "summary": 3, "items": [ok()]}),
            WrongType,
            "summary must be a string",
        ),
        (
            json!({"version": 1, "summary": "x".repeat(4001), "items": [ok()]}),
            Summary,
            "summary is 4001 characters",
        ),
        (
            plan(vec![json!("a")]),
            NotAnObject,
            "items[0] must be an object",
        ),
        (
            with("files", json!([])),
            UnknownField,
            "items[0] \"a\": unknown field \"files\"",
        ),
        (without("id"), MissingField, "items[0]: id is missing"),
        (with("id", json!("")), Id, "items[0]: id is empty"),
        (
            with("id", json!("API")),
            Id,
            "id \"API\" must match ^[a-z0-9][a-z0-9_-]{0,39}$",
        ),
        (with("id", json!("-a")), Id, "must match"),
        (with("id", json!("a".repeat(41))), Id, "must match"),
        (
            with("id", json!(7)),
            WrongType,
            "items[0]: id must be a string, not a number",
        ),
        (
            plan(vec![ok(), item("a", &["src/b"], &[])]),
            DuplicateId,
            "items[1] \"a\": id \"a\" is already used by items[0]",
        ),
        (with("title", json!(" ")), Title, "title is empty"),
        (
            with("title", json!("x".repeat(201))),
            Title,
            "title is 201 characters; at most 200",
        ),
        (
            with("title", json!("one\ntwo")),
            Title,
            "title must be one line",
        ),
        (
            without("title"),
            MissingField,
            "items[0] \"a\": title is missing",
        ),
        (with("task", json!("")), Task, "task is empty"),
        (
            with("task", json!("x".repeat(PlanItem::TASK_MAX_CHARS + 1))),
            Task,
            "task is 65335 characters; at most 65334",
        ),
        (
            with("task", json!(null)),
            WrongType,
            "task must be a string, not null",
        ),
        (with("done_when", json!("")), DoneWhen, "done_when is empty"),
        (
            with("done_when", json!("x".repeat(Spec::MAX_CHARS + 1))),
            DoneWhen,
            "done_when is 65537 characters",
        ),
        (without("done_when"), MissingField, "done_when is missing"),
        (without("scope"), MissingField, "scope is missing"),
        (with("scope", json!([])), Scope, "scope is empty"),
        (
            with("scope", json!("src/**")),
            WrongType,
            "scope must be an array of paths or globs, not a string",
        ),
        (
            with("scope", json!(["src/a", 1])),
            WrongType,
            "scope[1] must be a string",
        ),
        (
            with("scope", json!(vec!["a"; 51])),
            Scope,
            "scope has 51 entries; at most 50",
        ),
        (
            with("scope", json!(["src//a"])),
            Glob,
            "items[0] \"a\": scope[0]: glob \"src//a\" has an empty segment",
        ),
        (with("scope", json!(["/etc"])), Glob, "is absolute"),
        (
            with("scope", json!(["n/a"])),
            Placeholder,
            "items[0] \"a\": scope[0] \"n/a\" is a placeholder, not a path",
        ),
        (
            with("scope", json!(["my docs/**"])),
            Scope,
            "scope[0] \"my docs/**\" contains whitespace",
        ),
        (
            with("depends_on", json!(["zz"])),
            DependsOn,
            "depends_on[0] \"zz\" is not the id of any item (the ids are: a)",
        ),
        (
            with("depends_on", json!(["a"])),
            DependsOn,
            "depends_on[0] names the item itself",
        ),
        (
            with("depends_on", json!("b")),
            WrongType,
            "depends_on must be an array of item ids",
        ),
        (
            with("depends_on", json!([1])),
            WrongType,
            "depends_on[0] must be an item id",
        ),
        (
            plan(vec![ok(), item("b", &["src/b"], &["a", "a"])]),
            DependsOn,
            "items[1] \"b\": depends_on lists \"a\" more than once",
        ),
        (
            with("task", json!("a\u{0}b")),
            Nul,
            "items[0].task contains a NUL character",
        ),
        (
            with("scope", json!(["a\u{0}"])),
            Nul,
            "items[0].scope[0] contains a NUL character",
        ),
        (
            json!({"version": 1, "summary": "\u{0}", "items": [ok()]}),
            Nul,
            "summary contains a NUL",
        ),
    ]
}

#[test]
fn every_error_kind_has_its_own_precise_line() {
    for (document, kind, words) in error_cases() {
        let errors = refused(&document);
        let lines: Vec<&str> = errors.errors().iter().map(PlanError::line).collect();
        assert_eq!(
            errors.errors().len(),
            1,
            "one problem in {document}: {lines:?}"
        );
        assert_eq!(errors.errors()[0].kind(), kind, "{lines:?}");
        assert!(
            lines[0].contains(words),
            "{:?} should contain {words:?}",
            lines[0]
        );
    }
}

#[test]
fn bytes_that_are_not_utf8_or_json_are_refused_with_their_place() {
    let errors =
        PlanDocument::parse(b"{\"version\": 1,\n \"items\": \xff}", &limits()).unwrap_err();
    assert_eq!(errors.errors()[0].kind(), PlanErrorKind::NotUtf8);
    assert!(
        errors.errors()[0].line().contains("byte 25 (line 2)"),
        "{errors}"
    );
    let errors = PlanDocument::parse(b"{\"version\": 1,\n  \"items\": [}", &limits()).unwrap_err();
    assert_eq!(errors.errors()[0].kind(), PlanErrorKind::NotJson);
    assert!(
        errors.errors()[0]
            .line()
            .starts_with(".pidevops/plan.json is not valid JSON: "),
        "{errors}"
    );
    assert!(
        errors.errors()[0].line().ends_with("at line 2, column 13"),
        "{errors}"
    );
    let errors = PlanDocument::parse(b"", &limits()).unwrap_err();
    assert_eq!(errors.errors()[0].kind(), PlanErrorKind::NotJson);
    let with_bom = [
        b"\xef\xbb\xbf".as_slice(),
        three_items().to_string().as_bytes(),
    ]
    .concat();
    assert!(PlanDocument::parse(&with_bom, &limits()).is_ok());
}

#[test]
fn several_problems_are_all_reported_and_good_fields_still_count() {
    let errors = refused(&json!({
        "version": 1,
        "extra": true,
        "items": [
            {"id": "API", "title": "", "task": "t", "scope": ["src/**"], "done_when": "d", "owner": "me"},
            {"id": "web", "title": "t", "task": "t", "scope": ["src/web/**", "a//b"], "done_when": ""},
            {"id": "web", "title": "t", "task": "t", "scope": ["docs"], "done_when": "d", "depends_on": ["nope"]}
        ]
    }));
    use PlanErrorKind::*;
    let kinds: Vec<PlanErrorKind> = errors.errors().iter().map(PlanError::kind).collect();
    for kind in [
        UnknownField,
        Id,
        Title,
        Glob,
        DoneWhen,
        DuplicateId,
        DependsOn,
        Overlap,
    ] {
        assert!(kinds.contains(&kind), "{kind:?} missing from:\n{errors}");
    }
    // The first item's id is invalid, but its scope still takes part in the overlap check.
    assert!(
        errors
            .to_string()
            .contains(r#"items[0] and items[1] "web" overlap: "src/**" and "src/web/**""#),
        "{errors}"
    );
    assert_eq!(errors.to_string().lines().count(), errors.errors().len());
}

#[test]
fn the_retry_text_lists_the_problems_within_its_bound() {
    let errors = refused(&plan(vec![
        item("a", &["src"], &[]),
        item("b", &["src/x"], &["zz"]),
    ]));
    let text = errors.retry_text();
    assert!(
        text.starts_with("The plan in .pidevops/plan.json was refused:\n- "),
        "{text}"
    );
    assert_eq!(text.lines().count(), 3, "{text}");
    // Hundreds of problems: cut at 2000 characters, the cut said.
    let many: Vec<Value> = (0..300).map(|i| json!({"id": format!("I{i}")})).collect();
    let errors = refused(&plan(many));
    assert_eq!(errors.errors().len(), PlanErrors::MAX_LISTED);
    assert!(errors.count() > PlanErrors::MAX_LISTED);
    let text = errors.retry_text();
    assert!(
        text.chars().count() <= PlanErrors::RETRY_MAX_CHARS,
        "{}",
        text.chars().count()
    );
    assert!(
        text.lines()
            .last()
            .unwrap()
            .ends_with("more problems not shown"),
        "{text}"
    );
    assert!(errors
        .to_string()
        .lines()
        .last()
        .unwrap()
        .contains("more problems"));
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
