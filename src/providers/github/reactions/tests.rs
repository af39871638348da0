use serde_json::json;

use super::*;

fn fixture(path: &str) -> Value {
    let text = std::fs::read_to_string(format!(
        "{}/tests/fixtures/github/{path}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("a fixture");
    serde_json::from_str(&text).expect("json")
}

fn t7() -> TaskId {
    "T-7".parse().unwrap()
}

#[test]
fn a_failed_check_on_a_pidevops_branch_sends_its_task_back_with_what_failed() {
    let mut suite = fixture("check_suite/completed.payload.json");
    assert_eq!(
        decide("github.check_suite.completed", &suite, None),
        Reaction::None,
        "not our branch"
    );
    suite["check_suite"]["head_branch"] = json!("pidevops/T-7");
    assert_eq!(
        decide("github.check_suite.completed", &suite, None),
        Reaction::ChecksPassed {
            task: t7(),
            sha: "ec26c3e57ca3a959ca5aad62de7213c562f8c821".into(),
            name: "octocoders-linter".into()
        },
        "a passing suite is a landing fact, named by its app"
    );
    suite["check_suite"]["conclusion"] = json!("neutral");
    assert_eq!(
        decide("github.check_suite.completed", &suite, None),
        Reaction::Ignore {
            task: t7(),
            why: "check suite concluded neutral".into()
        }
    );
    suite["check_suite"]["conclusion"] = json!("failure");
    assert_eq!(
        decide("github.check_suite.completed", &suite, None),
        Reaction::ChecksFailed {
            task: t7(),
            sha: "ec26c3e57ca3a959ca5aad62de7213c562f8c821".into(),
            summary: "octocoders-linter check suite concluded failure".into()
        }
    );

    let mut run = fixture("check_run/completed.payload.json");
    run["check_run"]["check_suite"]["head_branch"] = json!("pidevops/T-7");
    assert_eq!(
        decide("github.check_run.completed", &run, None),
        Reaction::ChecksPassed {
            task: t7(),
            sha: "ec26c3e57ca3a959ca5aad62de7213c562f8c821".into(),
            name: "Octocoders-linter".into()
        }
    );
    run["check_run"]["conclusion"] = json!("timed_out");
    run["check_run"]["output"]["title"] = json!("2 tests failed");
    run["check_run"]["output"]["summary"] = json!("login_redirects_home failed");
    let Reaction::ChecksFailed { summary, .. } = decide("github.check_run.completed", &run, None)
    else {
        panic!("a failed check run");
    };
    assert!(
        summary.starts_with(
            "Octocoders-linter concluded timed_out\n2 tests failed\nlogin_redirects_home failed"
        ),
        "{summary}"
    );

    let mut workflow = fixture("workflow_run/completed.payload.json");
    workflow["workflow_run"]["head_branch"] = json!("pidevops/T-7");
    assert_eq!(
        decide("github.workflow_run.completed", &workflow, None),
        Reaction::ChecksPassed {
            task: t7(),
            sha: "3484a3fb816e0859fd6e1cea078d76385ff50625".into(),
            name: "test".into()
        },
        "an unnamed run goes by its workflow's name"
    );
    workflow["workflow_run"]["conclusion"] = json!("failure");
    let Reaction::ChecksFailed { summary, sha, .. } =
        decide("github.workflow_run.completed", &workflow, None)
    else {
        panic!("a failed workflow run");
    };
    assert_eq!(sha, "3484a3fb816e0859fd6e1cea078d76385ff50625");
    assert!(
        summary.contains(
            "concluded failure (https://github.com/octo-org/octo-repo/actions/runs/289782451)"
        ),
        "{summary}"
    );
    // Not the code's fault.
    workflow["workflow_run"]["conclusion"] = json!("cancelled");
    assert!(matches!(
        decide("github.workflow_run.completed", &workflow, None),
        Reaction::Ignore { .. }
    ));
}

#[test]
fn reviews_comments_and_closing_reach_the_task_but_never_our_own() {
    let mut review = fixture("pull_request_review/submitted.payload.json");
    review["pull_request"]["head"]["ref"] = json!("pidevops/T-7");
    assert!(
        matches!(
            decide("github.pull_request_review.submitted", &review, None),
            Reaction::Reviewed {
                changes_requested: false,
                ..
            }
        ),
        "a comment review sends its line comments"
    );
    review["review"]["state"] = json!("approved");
    assert_eq!(
        decide("github.pull_request_review.submitted", &review, None),
        Reaction::Approved {
            task: t7(),
            by: "Codertocat".into(),
            sha: "ec26c3e57ca3a959ca5aad62de7213c562f8c821".into()
        },
        "an approval names the commit the reviewer saw"
    );
    assert!(
        matches!(
            decide(
                "github.pull_request_review.submitted",
                &review,
                Some("Codertocat")
            ),
            Reaction::Ignore { .. }
        ),
        "our own account's approval"
    );
    let mut dismissed = fixture("pull_request_review/dismissed.payload.json");
    dismissed["pull_request"]["head"]["ref"] = json!("pidevops/T-7");
    assert_eq!(
        decide("github.pull_request_review.dismissed", &dismissed, None),
        Reaction::ReviewDismissed {
            task: t7(),
            by: dismissed["review"]["user"]["login"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    );
    review["review"]["state"] = json!("changes_requested");
    review["review"]["body"] = json!("Please keep the old redirect for API clients.");
    assert_eq!(
        decide("github.pull_request_review.submitted", &review, None),
        Reaction::Reviewed {
            task: t7(),
            review: 237895671,
            by: "Codertocat".into(),
            changes_requested: true,
            body: "Please keep the old redirect for API clients.".into()
        }
    );
    // A review that only comments asks for more too (its line comments are its substance).
    review["review"]["state"] = json!("commented");
    review["review"]["body"] = json!(null);
    assert_eq!(
        decide("github.pull_request_review.submitted", &review, None),
        Reaction::Reviewed {
            task: t7(),
            review: 237895671,
            by: "Codertocat".into(),
            changes_requested: false,
            body: String::new(),
        }
    );
    review["review"]["state"] = json!("pending");
    assert!(matches!(
        decide("github.pull_request_review.submitted", &review, None),
        Reaction::Ignore { .. }
    ));
    review["review"]["state"] = json!("changes_requested");
    assert!(
        matches!(
            decide(
                "github.pull_request_review.submitted",
                &review,
                Some("codertocat")
            ),
            Reaction::Ignore { .. }
        ),
        "our own account's review"
    );
}

#[test]
fn a_review_comment_names_its_file_lines_and_hunk() {
    let mut comment = fixture("pull_request_review_comment/created.payload.json");
    comment["pull_request"]["head"]["ref"] = json!("pidevops/T-7");
    let Reaction::ReviewComment {
        comment: line_comment,
        ..
    } = decide("github.pull_request_review_comment.created", &comment, None)
    else {
        panic!("a review comment");
    };
    assert_eq!(
        (line_comment.id, line_comment.review, line_comment.place()),
        (284312630, Some(237895671), "README.md:265".to_owned())
    );
    let text = line_comment.text();
    assert_eq!(
        text,
        "Line comment by Codertocat on README.md:265:\nMaybe you should use more emoji on this line.\n\
         On this diff:\n```diff\n@@ -1 +1 @@\n-# Hello-World\n```"
    );
    // A multi-line comment names its range; a long hunk keeps the lines that end at the comment.
    comment["comment"]["start_line"] = json!(260);
    comment["comment"]["diff_hunk"] = json!((1..=100)
        .map(|n| format!("+line {n}"))
        .collect::<Vec<_>>()
        .join("\n"));
    let Reaction::ReviewComment {
        comment: ranged, ..
    } = decide("github.pull_request_review_comment.created", &comment, None)
    else {
        panic!("a review comment");
    };
    assert_eq!(ranged.place(), "README.md:260-265");
    assert!(
        ranged.hunk.starts_with("+line 81\n") && ranged.hunk.ends_with("+line 100"),
        "{}",
        ranged.hunk
    );
    // On an outdated diff GitHub sends no line.
    comment["comment"]["line"] = json!(null);
    let Reaction::ReviewComment {
        comment: outdated, ..
    } = decide("github.pull_request_review_comment.created", &comment, None)
    else {
        panic!("a review comment");
    };
    assert_eq!(outdated.place(), "README.md (an outdated line)");
}

#[test]
fn closing_a_tasks_pull_request_reaches_the_task() {
    let mut closed = fixture("pull_request/closed.payload.json");
    closed["pull_request"]["head"]["ref"] = json!("pidevops/T-7");
    assert_eq!(
        decide("github.pull_request.closed", &closed, None),
        Reaction::ClosedUnmerged {
            task: t7(),
            by: "Codertocat".into()
        }
    );
    closed["pull_request"]["merged"] = json!(true);
    let mut by = closed["sender"].clone();
    by["login"] = json!("octocat");
    closed["pull_request"]["merged_by"] = by;
    assert_eq!(
        decide("github.pull_request.closed", &closed, None),
        Reaction::Merged {
            task: t7(),
            by: "octocat".into()
        }
    );
    closed["pull_request"]["head"]["ref"] = json!("pidevops/not-a-task");
    assert_eq!(
        decide("github.pull_request.closed", &closed, None),
        Reaction::None
    );
}

#[test]
fn githubs_merge_queue_taking_a_pull_request_out_reaches_the_task_with_its_reason() {
    let mut dequeued = fixture("pull_request/closed.payload.json");
    dequeued["action"] = json!("dequeued");
    dequeued["pull_request"]["head"]["ref"] = json!("pidevops/T-7");
    dequeued["reason"] = json!("MERGE_CONFLICT");
    assert_eq!(
        decide("github.pull_request.dequeued", &dequeued, None),
        Reaction::Dequeued {
            task: t7(),
            reason: "MERGE_CONFLICT".into()
        }
    );
    // Out because it merged: its `closed` comes, nothing to do here.
    dequeued["reason"] = json!("ALREADY_MERGED");
    assert!(matches!(
        decide("github.pull_request.dequeued", &dequeued, None),
        Reaction::Ignore { .. }
    ));
    // A stranger's text in the reason is clipped, never a wall of text on the task.
    dequeued["reason"] = json!("x".repeat(10_000));
    let Reaction::Dequeued { reason, .. } = decide("github.pull_request.dequeued", &dequeued, None)
    else {
        panic!("not dequeued");
    };
    assert!(reason.chars().count() < 2_000, "{}", reason.len());
    dequeued["pull_request"]["head"]["ref"] = json!("feature/x");
    assert_eq!(
        decide("github.pull_request.dequeued", &dequeued, None),
        Reaction::None
    );
}

/// `payload` made to be about T-7's pull request #2 in `acme/app`, from the repository itself.
fn ours(mut payload: Value) -> Value {
    payload["repository"]["full_name"] = json!("acme/app");
    if payload.get("pull_request").is_some() {
        payload["pull_request"]["number"] = json!(2);
        payload["pull_request"]["head"]["ref"] = json!("pidevops/T-7");
        payload["pull_request"]["head"]["repo"]["full_name"] = json!("acme/app");
        payload["pull_request"]["base"]["repo"]["full_name"] = json!("acme/app");
    }
    payload
}

#[test]
// A table of cases, one a line: longer as cases are added, not harder to read.
#[allow(clippy::too_many_lines)]
fn only_the_tasks_own_pull_request_in_its_repository_by_trusted_people_is_admitted() {
    let repo: RepoName = "acme/app".parse().unwrap();
    let trusted: BTreeSet<String> = ["OWNER", "MEMBER", "COLLABORATOR"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    let expected = Expected {
        repo: &repo,
        pr: Some(2),
        trusted: &trusted,
    };
    let review = ours(fixture("pull_request_review/submitted.payload.json"));
    let comment = ours(fixture("pull_request_review_comment/created.payload.json"));
    let closed = ours(fixture("pull_request/closed.payload.json"));
    let suite = ours(fixture("check_suite/completed.payload.json"));
    let run = ours(fixture("check_run/completed.payload.json"));
    let workflow = ours(fixture("workflow_run/completed.payload.json"));
    let with = |payload: &Value, path: &[&str], value: Value| {
        let mut payload = payload.clone();
        let mut at = &mut payload;
        for key in path {
            at = &mut at[*key];
        }
        *at = value;
        payload
    };
    let review_t = "github.pull_request_review.submitted";
    let comment_t = "github.pull_request_review_comment.created";
    let closed_t = "github.pull_request.closed";
    // (case, event type, payload, expected task, refused because …)
    let no_pr = Expected {
        pr: None,
        ..expected
    };
    let other_pr = Expected {
        pr: Some(3),
        ..expected
    };
    let cases: Vec<(&str, &str, Value, &Expected, Option<&str>)> = vec![
        (
            "a trusted review",
            review_t,
            review.clone(),
            &expected,
            None,
        ),
        (
            "a trusted comment",
            comment_t,
            comment.clone(),
            &expected,
            None,
        ),
        (
            "our own pull request closed",
            closed_t,
            closed.clone(),
            &expected,
            None,
        ),
        (
            "CI on our repository",
            "github.check_suite.completed",
            suite.clone(),
            &expected,
            None,
        ),
        (
            "a check run on our repository",
            "github.check_run.completed",
            run.clone(),
            &expected,
            None,
        ),
        (
            "a workflow on our repository",
            "github.workflow_run.completed",
            with(
                &workflow,
                &["workflow_run", "head_repository", "full_name"],
                json!("acme/app"),
            ),
            &expected,
            None,
        ),
        (
            "names in another case",
            closed_t,
            with(&closed, &["repository", "full_name"], json!("ACME/App")),
            &expected,
            None,
        ),
        (
            "a fork's pull request closed",
            closed_t,
            with(
                &closed,
                &["pull_request", "head", "repo", "full_name"],
                json!("stranger/app"),
            ),
            &expected,
            Some("stranger/app, a fork"),
        ),
        (
            "a deleted fork",
            closed_t,
            with(&closed, &["pull_request", "head", "repo"], Value::Null),
            &expected,
            Some("a fork"),
        ),
        (
            "another pull request",
            closed_t,
            with(&closed, &["pull_request", "number"], json!(9)),
            &expected,
            Some("#9, not the task's #2"),
        ),
        (
            "a task without a pull request",
            closed_t,
            closed.clone(),
            &no_pr,
            Some("opened none"),
        ),
        (
            "a review on another pull request",
            review_t,
            review.clone(),
            &other_pr,
            Some("#2, not the task's #3"),
        ),
        (
            "another repository",
            closed_t,
            with(&closed, &["repository", "full_name"], json!("other/app")),
            &expected,
            Some("from other/app"),
        ),
        (
            "CI on another repository",
            "github.check_suite.completed",
            with(&suite, &["repository", "full_name"], json!("other/app")),
            &expected,
            Some("from other/app"),
        ),
        (
            "a workflow for a fork",
            "github.workflow_run.completed",
            with(
                &workflow,
                &["workflow_run", "head_repository", "full_name"],
                json!("stranger/app"),
            ),
            &expected,
            Some("stranger/app's branch"),
        ),
        (
            "a stranger's review",
            review_t,
            with(&review, &["review", "author_association"], json!("NONE")),
            &expected,
            Some("Codertocat is NONE"),
        ),
        (
            "a contributor's review",
            review_t,
            with(
                &review,
                &["review", "author_association"],
                json!("CONTRIBUTOR"),
            ),
            &expected,
            Some("is CONTRIBUTOR"),
        ),
        (
            "a review without an association",
            review_t,
            with(&review, &["review", "author_association"], Value::Null),
            &expected,
            Some("is NONE"),
        ),
        (
            "a first-timer's comment",
            comment_t,
            with(
                &comment,
                &["comment", "author_association"],
                json!("FIRST_TIME_CONTRIBUTOR"),
            ),
            &expected,
            Some("FIRST_TIME_CONTRIBUTOR"),
        ),
    ];
    for (case, event_type, payload, expected, refused) in cases {
        match (admit(event_type, &payload, expected), refused) {
            (Ok(()), None) => {}
            (Err(why), Some(part)) => assert!(why.contains(part), "{case}: {why}"),
            (got, want) => panic!("{case}: {got:?}, expected refusal {want:?}"),
        }
    }
}
