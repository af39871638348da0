use serde_json::json;

use super::*;

fn status(value: serde_json::Value) -> Result<AgentStatus, ReportError> {
    AgentStatus::parse("status.json", value.to_string().as_bytes())
}

fn spec(value: serde_json::Value) -> Result<TriagedSpec, ReportError> {
    TriagedSpec::parse(value.to_string().as_bytes())
}

/// The error's text, which must name the file, the field and the reason.
fn says(result: Result<impl std::fmt::Debug, ReportError>) -> String {
    result.expect_err("refused").to_string()
}

// ---- status.json -------------------------------------------------------------------------------------------

#[test]
fn an_empty_status_object_is_no_claim_at_all() {
    let s = status(json!({})).unwrap();
    assert_eq!(s, AgentStatus::default());
    assert_eq!(s.resolved(), None);
    assert!(!s.needs_human() && !s.is_unresolved());
    assert_eq!(s.summary(), None);
    assert_eq!(s.needs_human_reason(), None);
    assert_eq!(s.unresolved_note(), None);
}

#[test]
fn a_full_status_is_read_field_by_field() {
    let s = status(json!({
        "resolved": false,
        "unresolved_files": ["src/a.rs", "src/b.rs", "src/a.rs"],
        "needs_human": true,
        "summary": "Two files need a decision about the API.",
    }))
    .unwrap();
    assert_eq!(s.resolved(), Some(false));
    assert_eq!(
        s.unresolved_files(),
        ["src/a.rs", "src/b.rs"],
        "deduplicated, in order"
    );
    assert!(s.needs_human() && s.is_unresolved());
    assert_eq!(
        s.summary(),
        Some("Two files need a decision about the API.")
    );
    assert_eq!(
        s.needs_human_reason().unwrap().as_str(),
        "The agent asked for a person: Two files need a decision about the API."
    );
    assert_eq!(
        s.unresolved_note().unwrap(),
        "Previously unresolved: src/a.rs, src/b.rs"
    );
}

#[test]
fn null_is_absent_and_a_blank_summary_is_none() {
    let s = status(
        json!({"resolved": null, "unresolved_files": null, "needs_human": null, "summary": "  \n"}),
    )
    .unwrap();
    assert_eq!(s, AgentStatus::default());
}

#[test]
fn a_status_that_is_not_an_object_is_refused() {
    for (body, found) in [
        ("[]", "a list"),
        ("true", "a boolean"),
        ("\"done\"", "a string"),
        ("null", "null"),
    ] {
        let error = AgentStatus::parse("status.json", body.as_bytes()).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(".pidevops/status.json must hold a JSON object ({{...}}), not {found}")
        );
    }
}

#[test]
fn a_status_that_is_not_json_names_the_file() {
    for body in ["", "{", "{\"resolved\": tru}", "\u{feff}{}"] {
        let error = says(AgentStatus::parse("status-7.json", body.as_bytes()));
        assert!(
            error.starts_with(".pidevops/status-7.json is not valid JSON: "),
            "{error}"
        );
    }
    let error = says(AgentStatus::parse(
        "status.json",
        b"{\"summary\": \"\xff\"}",
    ));
    assert!(error.contains("not valid JSON"), "{error}");
}

#[test]
fn unknown_status_fields_are_refused_by_name_with_the_closest_known_one() {
    let error = says(status(json!({"needsHuman": true})));
    assert_eq!(
        error,
        ".pidevops/status.json: `needsHuman` is not a known field (the fields are resolved, unresolved_files, \
         needs_human, summary); did you mean `needs_human`?"
    );
    assert!(says(status(json!({"resolvd": true}))).contains("did you mean `resolved`?"));
    let error = says(status(json!({"verdict": "ok"})));
    assert!(
        error.contains("`verdict` is not a known field") && !error.contains("did you mean"),
        "{error}"
    );
}

#[test]
fn an_unknown_field_name_is_shown_quoted_and_cut() {
    let long = "x".repeat(10_000);
    let error = says(status(json!({ long: 1 })));
    assert!(error.len() < 400, "bounded: {error}");
    let error = says(status(json!({"a\nb`c": 1})));
    assert!(
        error.contains(r#"`"a\nb`c"`"#),
        "quoted, newline escaped: {error}"
    );
}

#[test]
fn status_types_are_checked_with_the_field_named() {
    let cases = [
        (
            json!({"resolved": "yes"}),
            "`resolved` must be true or false, not a string",
        ),
        (
            json!({"needs_human": 1}),
            "`needs_human` must be true or false, not a number",
        ),
        (
            json!({"summary": ["a"]}),
            "`summary` must be a string, not a list",
        ),
        (
            json!({"unresolved_files": "src/a.rs"}),
            "`unresolved_files` must be a list ([...]), not a string",
        ),
        (
            json!({"unresolved_files": [1]}),
            "`unresolved_files[0]` must be a string, not a number",
        ),
        (
            json!({"unresolved_files": ["a", {"p": 1}]}),
            "`unresolved_files[1]` must be a string, not an object",
        ),
    ];
    for (value, expected) in cases {
        assert_eq!(
            says(status(value)),
            format!(".pidevops/status.json: {expected}")
        );
    }
}

#[test]
fn a_status_summary_is_bounded_and_has_no_nul() {
    let at_limit = "é".repeat(AgentStatus::MAX_SUMMARY_CHARS);
    assert_eq!(
        status(json!({ "summary": at_limit }))
            .unwrap()
            .summary()
            .unwrap()
            .chars()
            .count(),
        4_000
    );
    let over = "a".repeat(AgentStatus::MAX_SUMMARY_CHARS + 1);
    assert_eq!(
        says(status(json!({ "summary": over }))),
        ".pidevops/status.json: `summary` is 4001 characters; at most 4000 are allowed"
    );
    assert!(
        says(status(json!({"summary": "a\u{0}b"}))).contains("`summary` contains a NUL character")
    );
}

#[test]
fn unresolved_files_are_bounded_and_must_be_paths_in_the_repository() {
    let many: Vec<String> = (0..=AgentStatus::MAX_UNRESOLVED_FILES)
        .map(|i| format!("f{i}"))
        .collect();
    assert_eq!(
        says(status(json!({ "unresolved_files": many }))),
        ".pidevops/status.json: `unresolved_files` has 101 entries; at most 100 are allowed"
    );
    let refused = [
        ("", "must not be empty"),
        ("/etc/passwd", "must be relative"),
        ("../other/secret", "must not climb out with `..`"),
        ("src/../../x", "must not climb out with `..`"),
        ("src/..", "must not climb out with `..`"),
        ("./src/a.rs", "empty or `.` part"),
        ("src//a.rs", "empty or `.` part"),
        ("src/", "empty or `.` part"),
        ("src/a\u{0}.rs", "NUL"),
        ("src/a.rs\n- fake line", "control character"),
    ];
    for (path, why) in refused {
        let error = says(status(json!({ "unresolved_files": ["ok.rs", path] })));
        assert!(
            error.starts_with(".pidevops/status.json: `unresolved_files[1]` "),
            "{path:?}: {error}"
        );
        assert!(error.contains(why), "{path:?}: {error}");
    }
    let long = "a/".repeat(600) + "b";
    assert!(says(status(json!({ "unresolved_files": [long] }))).contains("longer than 1024"));
    let fine =
        status(json!({"unresolved_files": ["src/a..b.rs", ".github/x.yml", "a b/c.rs"]})).unwrap();
    assert_eq!(
        fine.unresolved_files().len(),
        3,
        "dots inside a name and spaces are fine"
    );
}

#[test]
fn resolved_true_with_unresolved_files_is_a_contradiction_refused() {
    let error = says(status(
        json!({"resolved": true, "unresolved_files": ["src/a.rs"]}),
    ));
    assert_eq!(
        error,
        ".pidevops/status.json: `resolved` is true but `unresolved_files` lists 1 file(s); set `resolved` to \
         false or empty the list"
    );
    assert!(status(json!({"resolved": true, "unresolved_files": []})).is_ok());
}

#[test]
fn a_duplicate_key_is_refused_at_any_depth() {
    let error = says(AgentStatus::parse(
        "status.json",
        br#"{"needs_human": true, "needs_human": false}"#,
    ));
    assert!(
        error.contains("the key needs_human appears twice"),
        "{error}"
    );
    let error = says(Review::parse(
        br#"{"verdict": "request_changes", "comments": [{"path": "a", "body": "x", "body": "y"}]}"#,
    ));
    assert!(error.contains("the key body appears twice"), "{error}");
}

#[test]
fn deep_nesting_is_refused_by_the_parser_not_by_the_stack() {
    let deep = "[".repeat(100_000) + &"]".repeat(100_000);
    let body = format!("{{\"summary\": {deep}}}");
    assert!(says(AgentStatus::parse("status.json", body.as_bytes())).contains("not valid JSON"));
}

#[test]
fn the_unresolved_note_is_bounded() {
    let paths: Vec<String> = (0..100)
        .map(|i| format!("{}/{i}.rs", "d".repeat(900)))
        .collect();
    let s = status(json!({ "unresolved_files": paths })).unwrap();
    let note = s.unresolved_note().unwrap();
    assert!(note.chars().count() <= 2_000, "{}", note.chars().count());
    assert!(note.ends_with(", and 98 more"), "{note}");
}

#[test]
fn needs_human_without_a_summary_still_has_a_reason() {
    let s = status(json!({"needs_human": true})).unwrap();
    assert_eq!(
        s.needs_human_reason().unwrap().as_str(),
        "The agent asked for a person: (it gave no summary)"
    );
    let long = status(json!({"needs_human": true, "summary": "x".repeat(4_000)})).unwrap();
    assert!(long.needs_human_reason().unwrap().as_str().chars().count() <= Reason::MAX_CHARS);
}

// ---- status-<id>.json (pi's diff-review extension) and the rule for several files ---------------------------

#[test]
fn a_pi_status_file_has_the_same_shape_and_its_name_in_errors() {
    let body = br#"{"resolved": false, "unresolved_files": ["src/lib.rs"], "needs_human": false, "summary": "one left"}"#;
    let s = AgentStatus::parse("status-3f2a.json", body).unwrap();
    assert_eq!(s.unresolved_files(), ["src/lib.rs"]);
    let error = says(AgentStatus::parse(
        "status-3f2a.json",
        br#"{"resolved": "no"}"#,
    ));
    assert!(
        error.starts_with(".pidevops/status-3f2a.json: `resolved`"),
        "{error}"
    );
}

fn named(name: &str, value: serde_json::Value) -> (String, AgentStatus) {
    let status = AgentStatus::parse(name, value.to_string().as_bytes()).unwrap();
    (name.to_owned(), status)
}

#[test]
fn no_status_file_is_no_verdict_and_one_file_is_its_own_verdict() {
    assert_eq!(AgentStatus::combine(Vec::new()), None);
    let one = named(
        "status-a.json",
        json!({"resolved": true, "summary": "done"}),
    );
    assert_eq!(AgentStatus::combine(vec![one.clone()]), Some(one.1));
}

#[test]
fn several_status_files_merge_conservatively() {
    let merged = AgentStatus::combine(vec![
        named(
            "status-b.json",
            json!({"resolved": true, "summary": "b done"}),
        ),
        named(
            "status-a.json",
            json!({"unresolved_files": ["x.rs", "y.rs"], "needs_human": true}),
        ),
        named(
            "status.json",
            json!({"resolved": true, "unresolved_files": [], "summary": "all done"}),
        ),
        named(
            "status-c.json",
            json!({"unresolved_files": ["y.rs", "z.rs"]}),
        ),
    ])
    .unwrap();
    assert!(merged.needs_human(), "any file asking for a person wins");
    assert_eq!(
        merged.unresolved_files(),
        ["x.rs", "y.rs", "z.rs"],
        "the union, by file name"
    );
    assert_eq!(
        merged.resolved(),
        Some(false),
        "unresolved files make it unresolved"
    );
    assert_eq!(
        merged.summary(),
        Some("status.json: all done\n\nstatus-b.json: b done"),
        "status.json first, then by name"
    );
}

#[test]
fn resolved_is_true_only_if_every_file_says_so() {
    let combine = |a: serde_json::Value, b: serde_json::Value| {
        AgentStatus::combine(vec![named("status.json", a), named("status-1.json", b)])
            .unwrap()
            .resolved()
    };
    assert_eq!(
        combine(json!({"resolved": true}), json!({"resolved": true})),
        Some(true)
    );
    assert_eq!(combine(json!({"resolved": true}), json!({})), None);
    assert_eq!(combine(json!({}), json!({"resolved": false})), Some(false));
    assert_eq!(
        combine(json!({"resolved": false}), json!({"resolved": true})),
        Some(false)
    );
    assert_eq!(combine(json!({}), json!({})), None);
}

#[test]
fn the_merge_does_not_depend_on_the_order_found() {
    let files = vec![
        named(
            "status-2.json",
            json!({"unresolved_files": ["b"], "summary": "two"}),
        ),
        named(
            "status.json",
            json!({"unresolved_files": ["a"], "summary": "main"}),
        ),
        named(
            "status-1.json",
            json!({"unresolved_files": ["c"], "summary": "one"}),
        ),
    ];
    let mut reversed = files.clone();
    reversed.reverse();
    let merged = AgentStatus::combine(files).unwrap();
    assert_eq!(Some(merged.clone()), AgentStatus::combine(reversed));
    assert_eq!(merged.unresolved_files(), ["a", "c", "b"]);
}

#[test]
fn merged_summaries_stay_bounded() {
    let big = json!({"summary": "s".repeat(4_000)});
    let merged = AgentStatus::combine(vec![
        named("status.json", big.clone()),
        named("status-1.json", big),
    ])
    .unwrap();
    assert_eq!(
        merged.summary().unwrap().chars().count(),
        AgentStatus::MAX_SUMMARY_CHARS
    );
    assert!(merged.summary().unwrap().ends_with('…'));
}

// ---- spec.json ---------------------------------------------------------------------------------------------

#[test]
fn a_triaged_spec_becomes_the_tasks_spec() {
    let t = spec(json!({"task": "Add a /health route", "scope": "src/http only", "done_when": "GET /health is 200"}))
        .unwrap();
    let expected = Spec::new("Add a /health route", "src/http only", "GET /health is 200").unwrap();
    assert_eq!(t.spec(), &expected);
    assert_eq!(Spec::from(t.clone()), expected);
    assert_eq!(t.into_spec(), expected);
    let only_task = spec(json!({"task": "Fix the typo", "scope": null})).unwrap();
    assert_eq!(
        (only_task.spec().scope(), only_task.spec().done_when()),
        ("", "")
    );
}

#[test]
fn a_triaged_spec_is_strict() {
    let over = "t".repeat(Spec::MAX_CHARS + 1);
    let cases = [
        (json!({}), "`task` is required and must not be empty"),
        (
            json!({"task": "  "}),
            "`task` is required and must not be empty",
        ),
        (json!({"task": 1}), "`task` must be a string, not a number"),
        (
            json!({"task": "t", "scope": ["a"]}),
            "`scope` must be a string, not a list",
        ),
        (
            json!({"task": "t", "done": "x"}),
            "`done` is not a known field (the fields are task, scope, done_when)",
        ),
        (
            json!({"task": "t", "doneWhen": "x"}),
            "did you mean `done_when`?",
        ),
        (
            json!({"task": over}),
            "`task` is 65537 characters; at most 65536",
        ),
        (
            json!({"task": "t", "done_when": "a\u{0}"}),
            "`done_when` contains a NUL",
        ),
    ];
    for (value, expected) in cases {
        let error = says(spec(value.clone()));
        assert!(
            error.starts_with(".pidevops/spec.json: "),
            "{value}: {error}"
        );
        assert!(error.contains(expected), "{value}: {error}");
    }
    assert!(says(TriagedSpec::parse(b"[\"task\"]")).contains("must hold a JSON object"));
}
