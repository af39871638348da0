use serde_json::Value;

use super::*;
use crate::intake::rules::IntakeConfig;

const REPO: &str = "acme/platform/api";

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/gitlab/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

fn own() -> GitlabIntake {
    GitlabIntake {
        label: "pidevops".to_owned(),
        trusted_users: ["alice".to_owned()].into(),
        bot_username: Some("pidevops-bot".to_owned()),
    }
}

fn shared() -> IntakeConfig {
    IntakeConfig {
        allowed_repos: crate::board::AllowedRepos::new([REPO, "acme/web"]).unwrap(),
        code_hosts: [(REPO.parse().unwrap(), Source::Gitlab)].into(),
        ..IntakeConfig::default()
    }
}

fn decide_with(
    event_type: &str,
    data: &Value,
    shared: &IntakeConfig,
    own: &GitlabIntake,
) -> Decision {
    decide_json(event_type, data, &Config { shared, own })
}

fn decide_on(event_type: &str, data: &Value) -> Decision {
    decide_with(event_type, data, &shared(), &own())
}

fn reason(decision: Decision) -> String {
    match decision {
        Decision::Ignore { reason } => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_labeled_issue_of_its_trusted_author_in_an_allowed_gitlab_project_becomes_a_task() {
    for (event_type, fixture_name) in [
        ("gitlab.issue.open", "issue_open"),
        ("gitlab.issue.update", "issue_update_label"),
    ] {
        let decision = decide_on(event_type, &fixture(fixture_name));
        let Decision::Create { key, draft } = decision else {
            panic!("{fixture_name}: {decision:?}")
        };
        assert_eq!(key, "gitlab:acme/platform/api#23");
        assert_eq!(draft.repo.as_str(), REPO);
        assert_eq!(draft.spec.title(), "Paginate /v1/items past the last page");
        assert!(draft.spec.done_when().contains("answers 200"));
        let link = draft.links.get(GITLAB_ISSUE).unwrap();
        assert_eq!(link.to_string(), "acme/platform/api#23");
        assert!(draft.ticket_version.is_some());
    }
}

#[test]
fn an_issue_without_the_label_or_an_edit_is_not_intake_s() {
    let mut unlabeled = fixture("issue_open");
    unlabeled["object_attributes"]["labels"] = serde_json::json!([]);
    assert_eq!(
        decide_on("gitlab.issue.open", &unlabeled),
        Decision::NotIntake
    );
    let mut edited = fixture("issue_update_label");
    edited["changes"] = serde_json::json!({"title": {"previous": "a", "current": "b"}});
    assert_eq!(
        decide_on("gitlab.issue.update", &edited),
        Decision::NotIntake
    );
    assert_eq!(
        decide_on(
            "gitlab.merge_request.merge",
            &fixture("merge_request_merge")
        ),
        Decision::NotIntake
    );
}

#[test]
fn a_stranger_s_issue_is_refused_saying_who_may_ask() {
    let mut stranger = fixture("issue_open");
    stranger["user"]["username"] = "mallory".into();
    stranger["user"]["id"] = 66.into();
    stranger["object_attributes"]["author_id"] = 66.into();
    let why = reason(decide_on("gitlab.issue.open", &stranger));
    assert!(
        why.contains("mallory is not in [intake.gitlab] trusted_users"),
        "{why}"
    );
    // No one is trusted until named.
    let nobody = GitlabIntake {
        trusted_users: Default::default(),
        ..own()
    };
    let why = reason(decide_with(
        "gitlab.issue.open",
        &fixture("issue_open"),
        &shared(),
        &nobody,
    ));
    assert!(why.contains("alice is not in"), "{why}");
}

#[test]
fn a_trusted_user_labeling_a_stranger_s_issue_is_refused() {
    let mut labeled_for = fixture("issue_update_label");
    labeled_for["object_attributes"]["author_id"] = 66.into();
    let why = reason(decide_on("gitlab.issue.update", &labeled_for));
    assert!(why.contains("someone else wrote (author id 66)"), "{why}");
}

#[test]
fn an_unallowed_project_a_fork_or_a_github_repository_of_the_name_is_refused() {
    // A fork is another project: its path is not the allowed one.
    for path in [
        "mallory/api",
        "acme/platform/api-fork",
        "acme/platform/api/sub",
    ] {
        let mut elsewhere = fixture("issue_open");
        elsewhere["project"]["path_with_namespace"] = path.into();
        let why = reason(decide_on("gitlab.issue.open", &elsewhere));
        assert!(
            why.contains("is not an allowed repository"),
            "{path}: {why}"
        );
    }
    // `acme/web` is allowed but GitHub's: GitLab's issues do not make its work.
    let mut github_one = fixture("issue_open");
    github_one["project"]["path_with_namespace"] = "acme/web".into();
    let why = reason(decide_on("gitlab.issue.open", &github_one));
    assert!(why.contains("acme/web is a github repository"), "{why}");
    // A path that is no repository name never becomes a key.
    let mut climbing = fixture("issue_open");
    climbing["project"]["path_with_namespace"] = "acme/../etc".into();
    let why = reason(decide_on("gitlab.issue.open", &climbing));
    assert!(why.contains("cannot become a task"), "{why}");
}

#[test]
fn pidevops_s_own_account_a_confidential_issue_and_an_unreadable_one_make_nothing() {
    let mut own_account = fixture("issue_open");
    own_account["user"]["username"] = "PIDEVOPS-BOT".into();
    assert!(reason(decide_on("gitlab.issue.open", &own_account)).contains("own account"));
    let mut confidential = fixture("issue_open");
    confidential["object_attributes"]["confidential"] = true.into();
    assert!(reason(decide_on("gitlab.issue.open", &confidential)).contains("confidential"));
    let mut closed = fixture("issue_update_label");
    closed["object_attributes"]["state"] = "closed".into();
    assert!(reason(decide_on("gitlab.issue.update", &closed)).contains("the issue is closed"));
    let mut broken = fixture("issue_open");
    broken["object_attributes"]["iid"] = "twenty-three".into();
    assert!(reason(decide_on("gitlab.issue.open", &broken)).contains("does not read as GitLab's"));
}

#[test]
fn closing_or_taking_the_label_off_withdraws_the_issue_s_task() {
    let Decision::Withdraw {
        key,
        why,
        ticket_version,
        ..
    } = decide_on("gitlab.issue.close", &fixture("issue_close"))
    else {
        panic!("closing withdraws")
    };
    assert_eq!(key, "gitlab:acme/platform/api#23");
    assert_eq!(why, Withdrawal::Closed);
    assert!(ticket_version.is_some());
    let Decision::Withdraw { key, why, .. } =
        decide_on("gitlab.issue.update", &fixture("issue_update_unlabel"))
    else {
        panic!("taking the label off withdraws")
    };
    assert_eq!(key, "gitlab:acme/platform/api#23");
    assert_eq!(why, Withdrawal::Unasked);
}

/// The comment a decision hands intake, or a panic saying what it was instead.
fn comment(decision: Decision) -> crate::intake::rules::comment::Comment {
    match decision {
        Decision::Comment(comment) => *comment,
        other => panic!("not a comment: {other:?}"),
    }
}

#[test]
fn a_trusted_note_on_the_issue_is_intake_s_comment_keyed_by_its_id() {
    let note = comment(decide_on("gitlab.note", &fixture("note_issue")));
    assert_eq!(note.host, &HOST);
    assert_eq!(note.issue_key(), "gitlab:acme/platform/api#23");
    assert_eq!(
        note.ask,
        Ask::Text("keep the old cursor format working too".into())
    );
    assert_eq!(note.origin_key(), "gitlab:comment:1241");
    assert_eq!(note.stream(), "gitlab-note:acme/platform/api:1241");
    assert!(!note.pull_request);
    assert!(
        matches!(&note.draft, Some(Err(why)) if why.contains("labels it")),
        "a note never makes a task: {:?}",
        note.draft
    );
    let mut mention = fixture("note_issue");
    mention["object_attributes"]["note"] = "@pidevops-bot: also cover the CLI".into();
    let note = comment(decide_on("gitlab.note", &mention));
    assert_eq!(note.ask, Ask::Text("also cover the CLI".into()));
}

#[test]
fn a_trusted_note_on_a_merge_request_or_a_command_is_intake_s_too() {
    let mut on_mr = fixture("note_issue");
    on_mr["object_attributes"]["noteable_type"] = "MergeRequest".into();
    on_mr["merge_request"] = serde_json::json!({"iid": 7});
    on_mr.as_object_mut().unwrap().remove("issue");
    let note = comment(decide_on("gitlab.note", &on_mr));
    assert!(note.pull_request);
    assert_eq!(note.number, 7);
    assert_eq!(note.draft, None, "a merge request is never made a task");
    for (text, command, reason) in [
        (
            "/pidevops cancel not needed",
            CommentCommand::Cancel,
            Some("not needed"),
        ),
        ("@pidevops-bot retry", CommentCommand::Retry, None),
        ("/PIDEVOPS Status", CommentCommand::Status, None),
    ] {
        let mut said = fixture("note_issue");
        said["object_attributes"]["note"] = text.into();
        assert_eq!(
            comment(decide_on("gitlab.note", &said)).ask,
            Ask::Command {
                command,
                reason: reason.map(str::to_owned)
            },
            "{text}"
        );
    }
    let mut bare = fixture("note_issue");
    bare["object_attributes"]["note"] = "/pidevops".into();
    assert_eq!(
        comment(decide_on("gitlab.note", &bare)).ask,
        Ask::Unknown(String::new())
    );
}

#[test]
fn a_stranger_s_note_is_recorded_as_ignored_and_changes_nothing() {
    let mut stranger = fixture("note_issue");
    stranger["user"]["username"] = "mallory".into();
    stranger["user"]["id"] = 66.into();
    stranger["object_attributes"]["author_id"] = 66.into();
    let why = reason(decide_on("gitlab.note", &stranger));
    assert!(
        why.contains("mallory is not in [intake.gitlab] trusted_users"),
        "{why}"
    );
}

#[test]
fn notes_not_for_pidevops_are_said_so() {
    let mut chat = fixture("note_issue");
    chat["object_attributes"]["note"] = "looks good to me".into();
    assert_eq!(decide_on("gitlab.note", &chat), Decision::NotIntake);
    let mut system = fixture("note_issue");
    system["object_attributes"]["system"] = true.into();
    assert_eq!(decide_on("gitlab.note", &system), Decision::NotIntake);
    let mut on_commit = fixture("note_issue");
    on_commit["object_attributes"]["noteable_type"] = "Commit".into();
    assert!(reason(decide_on("gitlab.note", &on_commit)).contains("only issues and merge requests"));
    let mut edited = fixture("note_issue");
    edited["object_attributes"]["action"] = "update".into();
    assert!(reason(decide_on("gitlab.note", &edited)).contains("edited"));
    let mut elsewhere = fixture("note_issue");
    elsewhere["project"]["path_with_namespace"] = "mallory/api".into();
    assert!(reason(decide_on("gitlab.note", &elsewhere)).contains("not an allowed repository"));
}

#[test]
fn what_a_note_asks_is_read_after_the_prefix_or_the_mention() {
    let bot = Some("pidevops-bot");
    for (note, asked) in [
        ("/pidevops do it", Some("do it")),
        ("/PIDEVOPS", Some("")),
        ("/pidevopsy no", None),
        ("@pidevops-bot please", Some("please")),
        ("@pidevops-botx please", None),
        ("email pidevops-bot@x", None),
        ("plain words", None),
    ] {
        assert_eq!(addressed(note, bot).as_deref(), asked, "{note}");
    }
    assert_eq!(addressed("@pidevops-bot hi", None), None);
}
