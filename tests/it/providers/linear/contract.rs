//! pidevops's Linear operations held to Linear's published schema (`schemas/linear`): every operation the client
//! sends validates (by apollo-compiler, a second implementation beside graphql_client's build-time check), a
//! misspelled field, input field or input type is caught, every operation's variables as the client builds them
//! coerce to the schema's input types, and the real client run against the validating fake leaves no refused
//! request and no answer of the fake's that does not fit.

use pidevops::providers::linear::operations::DOCUMENTS;
use pidevops::providers::linear::{LinearClient, PlanStep, PlanStepStatus};
use serde_json::json;

use crate::providers::linear::fake::{default_states, FakeLinear, Issue, LINEAR_KEY};
use crate::providers::linear::schema::{validate, validate_request};

#[test]
fn every_operation_validates_against_linears_schema() {
    for (name, document) in DOCUMENTS {
        if let Err(why) = validate(document) {
            panic!("{name} does not validate against Linear's schema:\n{why}");
        }
    }
    // Every document beside the client is one of them (a new one cannot skip this test).
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/providers/linear/client/operations"
    );
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".graphql"))
        .collect();
    files.sort();
    let mut listed: Vec<String> = DOCUMENTS.iter().map(|(n, _)| (*n).to_owned()).collect();
    listed.sort();
    assert_eq!(files, listed);
}

#[test]
fn a_misspelled_field_input_field_or_input_type_fails() {
    let comment = DOCUMENTS
        .iter()
        .find(|(n, _)| *n == "comment_create.graphql")
        .unwrap()
        .1;
    let misspelled = comment.replace("url", "ulr");
    let why = validate(&misspelled).expect_err("a field Linear does not have");
    assert!(why.contains("ulr"), "{why}");
    let renamed = comment.replace("CommentCreateInput!", "CommentCreationInput!");
    let why = validate(&renamed).expect_err("an input type Linear does not have");
    assert!(why.contains("CommentCreationInput"), "{why}");
    let wrong_argument = comment.replace(
        "commentCreate(input: $input)",
        "commentCreate(data: $input)",
    );
    assert!(validate(&wrong_argument).is_err());

    let good = json!({ "input": { "id": "c", "issueId": "i", "body": "hello" } });
    validate_request(comment, &good).expect("the client's shape");
    let why = validate_request(
        comment,
        &json!({ "input": { "issueID": "i", "body": "x" } }),
    )
    .expect_err("an input field Linear does not have");
    assert!(why.contains("issueID"), "{why}");
    let update = DOCUMENTS
        .iter()
        .find(|(n, _)| *n == "issue_update.graphql")
        .unwrap()
        .1;
    assert!(
        validate_request(update, &json!({ "input": { "stateId": "s" } })).is_err(),
        "id is required"
    );
    let poll = DOCUMENTS
        .iter()
        .find(|(n, _)| *n == "changed_issues.graphql")
        .unwrap()
        .1;
    assert!(
        validate_request(
            poll,
            &json!({ "since": "2026-01-01T00:00:00Z", "label": "x", "first": "50" })
        )
        .is_err(),
        "first is an Int"
    );
}

/// The client's every call against the validating fake: each is made, none refused, every answer fits.
#[tokio::test]
async fn the_client_against_the_validating_fake_sends_only_what_linear_accepts() {
    let fake = FakeLinear::start().await;
    fake.add_issue(Issue {
        id: "4f1b7a0e-95a4-4cc2-9b61-1f2a4c36c0aa".into(),
        identifier: "ENG-7".into(),
        title: "Fix the login".into(),
        description: String::new(),
        labels: vec!["pidevops".into()],
        state: "st-todo".into(),
        states: default_states(),
        updated_at: "2026-12-01T10:00:00.000Z".into(),
        team: "ENG".into(),
    });
    let client = LinearClient::new(&fake.url, &LINEAR_KEY.to_owned().into()).unwrap();
    let issue: uuid::Uuid = "4f1b7a0e-95a4-4cc2-9b61-1f2a4c36c0aa".parse().unwrap();
    assert_eq!(client.viewer().await.unwrap(), "pidevops bot");
    client.comment("k:1", issue, "hello").await.unwrap();
    // Made once: a second attempt finds it (the lookup operation).
    client.comment("k:1", issue, "hello").await.unwrap();
    client
        .activity(
            "k:2",
            "session-1",
            &json!({ "type": "thought", "body": "thinking" }),
        )
        .await
        .unwrap();
    client
        .activity(
            "k:2",
            "session-1",
            &json!({ "type": "thought", "body": "thinking" }),
        )
        .await
        .unwrap();
    client
        .session_urls(
            "session-1",
            &[(
                "Pull request".into(),
                "https://github.com/a/b/pull/1".into(),
            )],
        )
        .await
        .unwrap();
    client
        .session_plan(
            "session-1",
            &[PlanStep {
                content: "Write the fix".into(),
                status: PlanStepStatus::InProgress,
            }],
        )
        .await
        .unwrap();
    client
        .move_issue(issue, &["Pi-Dev: In Progress".to_owned()], "started")
        .await
        .unwrap();
    let unknown = client
        .move_issue(uuid::Uuid::nil(), &["Done".to_owned()], "completed")
        .await
        .expect_err("an issue the key cannot see");
    assert!(unknown.to_string().contains("not visible"), "{unknown}");
    let ops: Vec<String> = fake.calls().into_iter().map(|c| c.op).collect();
    for op in [
        "viewer",
        "commentCreate",
        "comment",
        "agentActivityCreate",
        "agentActivity",
        "agentSessionUpdate",
        "issue",
        "issueUpdate",
    ] {
        assert!(ops.iter().any(|o| o == op), "{op} was made: {ops:?}");
    }
    assert_eq!(
        fake.refused(),
        Vec::<String>::new(),
        "every request validates"
    );
    assert_eq!(fake.misfits(), Vec::<String>::new(), "every answer fits");
}

/// The fake refuses what Linear would: a request that does not validate never reaches its handlers.
#[tokio::test]
async fn the_fake_refuses_an_operation_that_does_not_validate() {
    let fake = FakeLinear::start().await;
    let answer: serde_json::Value = reqwest::Client::new()
        .post(&fake.url)
        .header("authorization", LINEAR_KEY)
        .json(&json!({ "query": "query { viewer { id nmae } }" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        answer["errors"][0]["extensions"]["code"],
        "GRAPHQL_VALIDATION_FAILED"
    );
    assert!(
        answer["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("nmae"),
        "{answer}"
    );
    assert_eq!(fake.refused().len(), 1);
}
