//! The refusals: each error kind's own precise line, bytes that are not a document, several problems at once,
//! the retry text's bound.

use super::*;

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
