use serde_json::json;

use super::*;
use crate::tasks::TaskId;

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/gitlab/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).expect("a fixture")).expect("json")
}

fn t12() -> TaskId {
    "T-12".parse().unwrap()
}

fn own() -> GitlabIntake {
    GitlabIntake {
        label: "pidevops".into(),
        trusted_users: ["alice", "bob"].into_iter().map(str::to_owned).collect(),
        bot_username: Some("pidevops-bot".into()),
    }
}

const SHA: &str = "da1560886d4f094c3e6c9ef40349f7d38b5d27d7";

fn with(payload: &Value, path: &[&str], value: Value) -> Value {
    let mut payload = payload.clone();
    let mut at = &mut payload;
    for key in path {
        at = &mut at[*key];
    }
    *at = value;
    payload
}

#[test]
fn pipelines_and_jobs_are_ci_results_on_their_commit() {
    let own = own();
    let failed = fixture("pipeline_failed");
    assert_eq!(
        decide("gitlab.pipeline", &failed, &own),
        Reaction::ChecksFailed {
            task: t12(),
            sha: SHA.into(),
            summary:
                "pipeline #2366 failed: unit (https://gitlab.example.com/acme/platform/api/-/pipelines/2366)"
                    .into()
        }
    );
    // A job allowed to fail fails nothing; a second failed job is named too.
    let mut two = failed.clone();
    let mut lint = failed["builds"][0].clone();
    lint["id"] = json!(381);
    lint["name"] = json!("lint");
    let mut flaky = lint.clone();
    flaky["id"] = json!(382);
    flaky["name"] = json!("flaky");
    flaky["allow_failure"] = json!(true);
    two["builds"] = json!([failed["builds"][0], flaky, lint]);
    let Reaction::ChecksFailed { summary, .. } = decide("gitlab.pipeline", &two, &own) else {
        panic!("a failed pipeline");
    };
    assert!(
        summary.starts_with("pipeline #2366 failed: unit, lint ("),
        "{summary}"
    );
    assert_eq!(
        decide("gitlab.pipeline", &fixture("pipeline_success"), &own),
        Reaction::ChecksPassed {
            task: t12(),
            sha: SHA.into(),
            name: "pipeline".into()
        }
    );
    assert_eq!(
        decide(
            "gitlab.pipeline",
            &with(&failed, &["object_attributes", "status"], json!("running")),
            &own
        ),
        Reaction::Ignore {
            task: t12(),
            why: "pipeline is running".into()
        }
    );
    assert_eq!(
        decide(
            "gitlab.pipeline",
            &with(&failed, &["object_attributes", "ref"], json!("main")),
            &own
        ),
        Reaction::None,
        "not a pidevops branch"
    );
    assert_eq!(
        decide("gitlab.build", &fixture("job_success"), &own),
        Reaction::ChecksPassed {
            task: t12(),
            sha: SHA.into(),
            name: "unit".into()
        },
        "a job is a check named after it"
    );
    assert!(
        matches!(
            decide("gitlab.build", &fixture("job_failed"), &own),
            Reaction::Ignore { ref why, .. } if why.contains("its pipeline reports it")
        ),
        "a failed job is its pipeline's to send back, once"
    );
}

#[test]
fn a_merge_request_approved_unapproved_merged_or_closed_reaches_its_task() {
    let own = own();
    assert_eq!(
        decide(
            "gitlab.merge_request.approved",
            &fixture("merge_request_approved"),
            &own
        ),
        Reaction::Approved {
            task: t12(),
            by: "bob".into(),
            sha: SHA.into()
        }
    );
    assert_eq!(
        decide(
            "gitlab.merge_request.unapproved",
            &fixture("merge_request_unapproved"),
            &own
        ),
        Reaction::ReviewDismissed {
            task: t12(),
            by: "bob".into()
        }
    );
    assert_eq!(
        decide(
            "gitlab.merge_request.merge",
            &fixture("merge_request_merge"),
            &own
        ),
        Reaction::Merged {
            task: t12(),
            by: "alice".into()
        }
    );
    assert_eq!(
        decide(
            "gitlab.merge_request.close",
            &fixture("merge_request_close"),
            &own
        ),
        Reaction::ClosedUnmerged {
            task: t12(),
            by: "alice".into()
        }
    );
    assert!(matches!(
        decide(
            "gitlab.merge_request.update",
            &fixture("merge_request_close"),
            &own
        ),
        Reaction::Ignore { .. }
    ));
    let other_branch = with(
        &fixture("merge_request_merge"),
        &["object_attributes", "source_branch"],
        json!("feature/x"),
    );
    assert_eq!(
        decide("gitlab.merge_request.merge", &other_branch, &own),
        Reaction::None
    );
}

#[test]
fn a_note_on_the_merge_request_is_a_follow_up_and_a_diff_note_says_where() {
    let own = own();
    assert_eq!(
        decide("gitlab.note", &fixture("note_merge_request"), &own),
        Reaction::Reviewed {
            task: t12(),
            review: 1250,
            by: "alice".into(),
            changes_requested: false,
            body: "The empty page should keep the cursor it was asked for.".into()
        }
    );
    let Reaction::ReviewComment { task, comment } =
        decide("gitlab.note", &fixture("note_merge_request_diff"), &own)
    else {
        panic!("a diff note is a line comment");
    };
    assert_eq!(task, t12());
    assert_eq!(comment.id, 1251);
    assert_eq!(comment.review, None, "sends the task back itself");
    assert_eq!(comment.place(), "src/items.rs:40-44");
    assert!(
        comment
            .text()
            .starts_with("Line comment by alice on src/items.rs:40-44:\nReturn an empty page here"),
        "{}",
        comment.text()
    );
    let one_line = with(
        &fixture("note_merge_request_diff"),
        &["object_attributes", "position", "line_range"],
        Value::Null,
    );
    let Reaction::ReviewComment { comment, .. } = decide("gitlab.note", &one_line, &own) else {
        panic!("a diff note");
    };
    assert_eq!(comment.place(), "src/items.rs:44");

    let note = fixture("note_merge_request");
    for (case, payload, why) in [
        (
            "the bot's own note",
            with(&note, &["user", "username"], json!("pidevops-bot")),
            "pidevops's own account",
        ),
        (
            "a command",
            with(
                &note,
                &["object_attributes", "note"],
                json!("/pidevops retry"),
            ),
            "intake's",
        ),
        (
            "a mention",
            with(
                &note,
                &["object_attributes", "note"],
                json!("@pidevops-bot look again"),
            ),
            "intake's",
        ),
        (
            "an edit",
            with(&note, &["object_attributes", "action"], json!("update")),
            "edited",
        ),
        (
            "GitLab's own",
            with(&note, &["object_attributes", "system"], json!(true)),
            "GitLab's own note",
        ),
    ] {
        match decide("gitlab.note", &payload, &own) {
            Reaction::Ignore { task, why: got } => {
                assert_eq!(task, t12());
                assert!(got.contains(why), "{case}: {got}");
            }
            other => panic!("{case}: {other:?}"),
        }
    }
    assert_eq!(
        decide("gitlab.note", &fixture("note_issue"), &own),
        Reaction::None,
        "a note on an issue is intake's"
    );
}

#[test]
// A table of cases, one a line: longer as cases are added, not harder to read.
#[allow(clippy::too_many_lines)]
fn only_the_tasks_own_merge_request_in_its_project_by_trusted_users_is_admitted() {
    let own = own();
    let repo: RepoName = "acme/platform/api".parse().unwrap();
    let expected = Expected {
        repo: &repo,
        pr: Some(7),
    };
    let no_mr = Expected {
        pr: None,
        ..expected
    };
    let approved = fixture("merge_request_approved");
    let merged = fixture("merge_request_merge");
    let note = fixture("note_merge_request");
    let diff = fixture("note_merge_request_diff");
    let pipeline = fixture("pipeline_failed");
    let job = fixture("job_success");
    let fork = fixture("merge_request_fork_merge");
    let approved_t = "gitlab.merge_request.approved";
    let merge_t = "gitlab.merge_request.merge";
    let cases: Vec<(&str, &str, Value, &Expected, Option<&str>)> = vec![
        (
            "a trusted approval",
            approved_t,
            approved.clone(),
            &expected,
            None,
        ),
        (
            "its merge request merged",
            merge_t,
            merged.clone(),
            &expected,
            None,
        ),
        (
            "a trusted note",
            "gitlab.note",
            note.clone(),
            &expected,
            None,
        ),
        (
            "a trusted diff note",
            "gitlab.note",
            diff.clone(),
            &expected,
            None,
        ),
        (
            "its pipeline",
            "gitlab.pipeline",
            pipeline.clone(),
            &expected,
            None,
        ),
        ("a job", "gitlab.build", job.clone(), &expected, None),
        (
            "names in another case",
            merge_t,
            with(
                &merged,
                &["project", "path_with_namespace"],
                json!("ACME/Platform/API"),
            ),
            &expected,
            None,
        ),
        (
            "a fork's merge request",
            merge_t,
            fork.clone(),
            &expected,
            Some("!8, not the task's !7"),
        ),
        (
            "a fork's merge request numbered as the task's",
            merge_t,
            with(&fork, &["object_attributes", "iid"], json!(7)),
            &expected,
            Some("comes from project 88, a fork"),
        ),
        (
            "a fork's note numbered as the task's",
            "gitlab.note",
            with(&note, &["merge_request", "source_project_id"], json!(88)),
            &expected,
            Some("a fork"),
        ),
        (
            "a pipeline of a fork's merge request",
            "gitlab.pipeline",
            with(
                &pipeline,
                &["merge_request", "source_project_id"],
                json!(88),
            ),
            &expected,
            Some("a pipeline of merge request !7 comes from project 88, a fork"),
        ),
        (
            "another merge request",
            merge_t,
            with(&merged, &["object_attributes", "iid"], json!(9)),
            &expected,
            Some("!9, not the task's !7"),
        ),
        (
            "a note on another merge request",
            "gitlab.note",
            with(&note, &["merge_request", "iid"], json!(9)),
            &expected,
            Some("!9, not the task's !7"),
        ),
        (
            "a task without a merge request",
            merge_t,
            merged.clone(),
            &no_mr,
            Some("opened none"),
        ),
        (
            "another project",
            merge_t,
            with(
                &merged,
                &["project", "path_with_namespace"],
                json!("other/api"),
            ),
            &expected,
            Some("from other/api"),
        ),
        (
            "CI in another project",
            "gitlab.pipeline",
            with(
                &pipeline,
                &["project", "path_with_namespace"],
                json!("other/api"),
            ),
            &expected,
            Some("from other/api"),
        ),
        (
            "an old job hook without its project",
            "gitlab.build",
            with(&job, &["project"], Value::Null),
            &expected,
            Some("from an unnamed project"),
        ),
        (
            "a stranger's note",
            "gitlab.note",
            with(&note, &["user", "username"], json!("mallory")),
            &expected,
            Some("mallory is not in [intake.gitlab] trusted_users"),
        ),
        (
            "a note whose author is someone else",
            "gitlab.note",
            with(&note, &["object_attributes", "author_id"], json!(66)),
            &expected,
            Some("the note's author (id 66) is not alice"),
        ),
        (
            "a stranger's approval",
            approved_t,
            with(&approved, &["user", "username"], json!("mallory")),
            &expected,
            Some("mallory is not in"),
        ),
    ];
    for (case, event_type, payload, expected, refused) in cases {
        match (admit(event_type, &payload, expected, &own), refused) {
            (Ok(()), None) => {}
            (Err(why), Some(part)) => assert!(why.contains(part), "{case}: {why}"),
            (got, want) => panic!("{case}: {got:?}, expected refusal {want:?}"),
        }
    }
}

#[test]
fn the_log_tails_share_the_budget_and_a_missing_one_says_why() {
    let long = "x".repeat(5000);
    let text = details(&[
        (
            "unit",
            Ok(format!("{long}\nassertion failed: page.is_empty()")),
        ),
        ("lint", Err("GitLab answered 403 Forbidden".to_owned())),
    ]);
    assert!(text.starts_with("unit log (its end):\n"), "{text}");
    assert!(text.contains(
        "assertion failed: page.is_empty()\nlint: log unavailable: GitLab answered 403 Forbidden"
    ));
    assert!(text.chars().count() < DETAILS_BUDGET, "{}", text.len());
}

#[tokio::test]
async fn without_a_token_a_failure_still_says_which_jobs_and_why_no_log() {
    let rules = GitlabReactions::new(GitlabSettings {
        token: None,
        url: "https://gitlab.example.com".into(),
        intake: own(),
        projects: Vec::new(),
    });
    let repo: RepoName = "acme/platform/api".parse().unwrap();
    let details = rules
        .failure_details(&repo, "gitlab.pipeline", &fixture("pipeline_failed"))
        .await;
    assert_eq!(
        details.as_deref(),
        Some("unit: log unavailable: GITLAB_TOKEN is not set")
    );
    assert_eq!(
        rules
            .failure_details(&repo, "gitlab.build", &fixture("job_failed"))
            .await,
        None
    );
    assert_eq!(
        rules.place(&fixture("note_merge_request")),
        "acme/platform/api!7"
    );
    assert_eq!(rules.review_key(1250), "gitlab:note:1250");
}

/// `merge_request_approved` made into the hook GitLab sends when `bob` submits a review with "Request changes":
/// action `update`, his state in `changes.reviewers` turned `requested_changes`.
fn changes_requested_by_bob() -> Value {
    let mut hook = fixture("merge_request_approved");
    hook["object_attributes"]["action"] = json!("update");
    hook["object_attributes"]["updated_at"] = json!("2026-12-05 11:20:00 UTC");
    hook["changes"] = json!({ "reviewers": {
        "previous": [{ "id": 52, "username": "bob", "state": "unreviewed" }],
        "current": [{ "id": 52, "username": "bob", "state": "requested_changes" }]
    }});
    hook
}

#[test]
fn a_review_submitted_with_request_changes_sends_the_task_back_once_by_a_trusted_reviewer() {
    let own = own();
    let rules = GitlabReactions::new(GitlabSettings {
        token: None,
        url: "https://gitlab.example.com".into(),
        intake: own.clone(),
        projects: Vec::new(),
    });
    let hook = changes_requested_by_bob();
    let Reaction::Reviewed {
        task,
        review,
        by,
        changes_requested,
        body,
    } = decide("gitlab.merge_request.update", &hook, &own)
    else {
        panic!("a review asking for changes")
    };
    assert_eq!(
        (task, by.as_str(), changes_requested, body.as_str()),
        (t12(), "bob", true, "")
    );
    // Delivered again: the same key, so it attaches once; never a note's key.
    let again = decide("gitlab.merge_request.update", &hook, &own);
    assert!(matches!(again, Reaction::Reviewed { review: r, .. } if r == review));
    let key = rules.review_key(review);
    assert!(key.starts_with("gitlab:review:"), "{key}");
    assert_ne!(key, rules.review_key(1241));

    // Any other update, or a state someone else's: nothing.
    let mut edited = hook.clone();
    edited["changes"] = json!({ "title": { "previous": "a", "current": "b" } });
    assert!(matches!(
        decide("gitlab.merge_request.update", &edited, &own),
        Reaction::Ignore { .. }
    ));
    let mut already = hook.clone();
    already["changes"]["reviewers"]["previous"][0]["state"] = json!("requested_changes");
    assert!(matches!(
        decide("gitlab.merge_request.update", &already, &own),
        Reaction::Ignore { .. }
    ));

    // Only a trusted reviewer's counts.
    let repo: RepoName = "acme/platform/api".parse().unwrap();
    let expected = Expected {
        repo: &repo,
        pr: Some(7),
    };
    assert_eq!(
        admit("gitlab.merge_request.update", &hook, &expected, &own),
        Ok(())
    );
    let mut stranger = hook.clone();
    stranger["user"]["username"] = json!("mallory");
    let refused = admit("gitlab.merge_request.update", &stranger, &expected, &own).unwrap_err();
    assert!(refused.contains("mallory is not in"), "{refused}");
}
