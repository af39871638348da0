//! Every operation pidevops sends to Linear, each a `.graphql` document beside this file, typed against Linear's
//! published schema (`schemas/linear/schema.graphql`, where it came from in `schemas/linear/SOURCE.md`) by
//! `graphql_client` at build time: a field, argument or input type Linear does not have fails the build, and the
//! variables and answers are Rust types generated from the schema. `tests/it/providers/linear/contract.rs` validates the
//! same documents with another implementation (apollo-compiler), and the fake Linear refuses any request that does
//! not validate.

#![allow(clippy::all, missing_docs, non_camel_case_types, dead_code)]

use graphql_client::GraphQLQuery;

// Linear's custom scalars, as the operations use them.
/// `DateTime` and `DateTimeOrDuration`: ISO 8601 text.
pub type DateTime = String;
pub type DateTimeOrDuration = String;
/// `JSONObject`: any JSON object (an activity's content, a session's plan).
pub type JSONObject = serde_json::Value;
pub type JSON = serde_json::Value;
pub type TimelessDate = String;
pub type TimelessDateOrDuration = String;
pub type Duration = String;
pub type UUID = String;

/// Every operation's file name and text, for the tests that validate them all.
pub const DOCUMENTS: &[(&str, &str)] = &[
    ("viewer.graphql", include_str!("viewer.graphql")),
    (
        "comment_create.graphql",
        include_str!("comment_create.graphql"),
    ),
    (
        "comment_by_id.graphql",
        include_str!("comment_by_id.graphql"),
    ),
    (
        "agent_activity_create.graphql",
        include_str!("agent_activity_create.graphql"),
    ),
    (
        "agent_activity_by_id.graphql",
        include_str!("agent_activity_by_id.graphql"),
    ),
    (
        "agent_session_update.graphql",
        include_str!("agent_session_update.graphql"),
    ),
    ("issue_states.graphql", include_str!("issue_states.graphql")),
    ("issue_update.graphql", include_str!("issue_update.graphql")),
    (
        "changed_issues.graphql",
        include_str!("changed_issues.graphql"),
    ),
];

#[derive(GraphQLQuery)]
#[graphql(
    schema_path = "schemas/linear/schema.graphql",
    query_path = "src/providers/linear/client/operations/viewer.graphql",
    response_derives = "Debug, Clone",
    variables_derives = "Debug, Clone, Default",
    skip_serializing_none
)]
pub struct Viewer;

#[derive(GraphQLQuery)]
#[graphql(
    schema_path = "schemas/linear/schema.graphql",
    query_path = "src/providers/linear/client/operations/comment_create.graphql",
    response_derives = "Debug, Clone",
    variables_derives = "Debug, Clone, Default",
    skip_serializing_none
)]
pub struct CommentCreate;

#[derive(GraphQLQuery)]
#[graphql(
    schema_path = "schemas/linear/schema.graphql",
    query_path = "src/providers/linear/client/operations/comment_by_id.graphql",
    response_derives = "Debug, Clone",
    variables_derives = "Debug, Clone, Default",
    skip_serializing_none
)]
pub struct CommentById;

#[derive(GraphQLQuery)]
#[graphql(
    schema_path = "schemas/linear/schema.graphql",
    query_path = "src/providers/linear/client/operations/agent_activity_create.graphql",
    response_derives = "Debug, Clone",
    variables_derives = "Debug, Clone, Default",
    skip_serializing_none
)]
pub struct AgentActivityCreate;

#[derive(GraphQLQuery)]
#[graphql(
    schema_path = "schemas/linear/schema.graphql",
    query_path = "src/providers/linear/client/operations/agent_activity_by_id.graphql",
    response_derives = "Debug, Clone",
    variables_derives = "Debug, Clone, Default",
    skip_serializing_none
)]
pub struct AgentActivityById;

#[derive(GraphQLQuery)]
#[graphql(
    schema_path = "schemas/linear/schema.graphql",
    query_path = "src/providers/linear/client/operations/agent_session_update.graphql",
    response_derives = "Debug, Clone",
    variables_derives = "Debug, Clone, Default",
    skip_serializing_none
)]
pub struct AgentSessionUpdate;

#[derive(GraphQLQuery)]
#[graphql(
    schema_path = "schemas/linear/schema.graphql",
    query_path = "src/providers/linear/client/operations/issue_states.graphql",
    response_derives = "Debug, Clone",
    variables_derives = "Debug, Clone, Default",
    skip_serializing_none
)]
pub struct IssueStates;

#[derive(GraphQLQuery)]
#[graphql(
    schema_path = "schemas/linear/schema.graphql",
    query_path = "src/providers/linear/client/operations/issue_update.graphql",
    response_derives = "Debug, Clone",
    variables_derives = "Debug, Clone, Default",
    skip_serializing_none
)]
pub struct IssueUpdate;

#[derive(GraphQLQuery)]
#[graphql(
    schema_path = "schemas/linear/schema.graphql",
    query_path = "src/providers/linear/client/operations/changed_issues.graphql",
    response_derives = "Debug, Clone, serde::Serialize",
    variables_derives = "Debug, Clone, Default",
    skip_serializing_none
)]
pub struct ChangedIssues;
