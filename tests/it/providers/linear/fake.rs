//! A fake Linear GraphQL API on loopback. It keeps issues with their team's workflow states, comments, agent
//! activities, session links and every checklist (`plan`) a session was given; records every operation; refuses a
//! wrong API key; and answers 500, 429 or Linear's `RATELIMITED` error when told to.
//!
//! It holds every request to Linear's published schema (`providers::linear::schema`): an operation that does not
//! validate, or variables that do not coerce to its input types, is refused as Linear refuses it (400,
//! `GRAPHQL_VALIDATION_FAILED`), and every answer it gives is checked to fit the operation's selection (a misfit is
//! the fake's bug: 500 `FAKE_ANSWER_DOES_NOT_FIT`, and recorded in [`FakeLinear::misfits`]). Operations are
//! recognised by their root field, as the validated document names it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

pub const LINEAR_KEY: &str = "lin_api_test_key_0123456789";

/// A team's workflow states: (id, name, type).
pub fn default_states() -> Vec<(String, String, String)> {
    [
        ("st-todo", "Ready for Pi-Dev", "unstarted"),
        ("st-progress", "Pi-Dev: In Progress", "started"),
        ("st-review", "In Review", "started"),
        ("st-done", "Done", "completed"),
        ("st-blocked", "Pi-Dev: Blocked", "started"),
    ]
    .into_iter()
    .map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned()))
    .collect()
}

#[derive(Clone, Debug)]
pub struct Issue {
    pub id: String,
    pub identifier: String,
    pub title: String,
    pub description: String,
    pub labels: Vec<String>,
    pub state: String,
    pub states: Vec<(String, String, String)>,
    pub updated_at: String,
    pub team: String,
}

#[derive(Clone, Debug)]
pub struct Call {
    /// `commentCreate`, `agentActivityCreate`, `issueUpdate`, `issues`, …
    pub op: String,
    pub variables: Value,
}

#[derive(Default)]
struct Inner {
    issues: BTreeMap<String, Issue>,
    comments: BTreeMap<String, (String, String)>,
    activities: BTreeMap<String, (String, Value)>,
    session_urls: BTreeMap<String, Value>,
    /// Every `plan` each session was given, in order (Linear keeps the last; the test reads the history).
    session_plans: BTreeMap<String, Vec<Value>>,
    calls: Vec<Call>,
    /// Answers for the next calls of an operation (its root field), in order: an HTTP status (500, 429) or 400
    /// for `RATELIMITED`. Scoped like the fake GitHub's by method: a call of another operation (the poller's own
    /// `issues` query, on its own schedule) never takes a failure meant for this one.
    failures: BTreeMap<String, VecDeque<u16>>,
    /// Every `issues` query fails with this status until cleared.
    issues_fail: Option<u16>,
    /// Answers of the fake's own that did not fit the schema (its bugs), and requests that did not validate.
    misfits: Vec<String>,
    refused: Vec<String>,
}

#[derive(Clone, Default)]
pub struct FakeLinear {
    inner: Arc<Mutex<Inner>>,
    pub url: String,
}

impl FakeLinear {
    pub async fn start() -> Self {
        let mut fake = FakeLinear::default();
        let router = Router::new()
            .route("/graphql", post(graphql))
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        fake.url = format!("http://{}/graphql", listener.local_addr().unwrap());
        tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        fake
    }

    pub fn add_issue(&self, issue: Issue) {
        let mut inner = self.inner.lock().unwrap();
        inner.issues.insert(issue.id.clone(), issue);
    }

    pub fn issue(&self, id: &str) -> Option<Issue> {
        self.inner.lock().unwrap().issues.get(id).cloned()
    }

    /// The name of the issue's state.
    pub fn state_of(&self, id: &str) -> Option<String> {
        let inner = self.inner.lock().unwrap();
        let issue = inner.issues.get(id)?;
        issue
            .states
            .iter()
            .find(|s| s.0 == issue.state)
            .map(|s| s.1.clone())
    }

    /// Comments posted: (issue id, body), in id order.
    pub fn comments(&self) -> Vec<(String, String)> {
        self.inner
            .lock()
            .unwrap()
            .comments
            .values()
            .cloned()
            .collect()
    }

    /// Activities posted: (session, content), in the order they were made.
    pub fn activities(&self) -> Vec<(String, Value)> {
        let inner = self.inner.lock().unwrap();
        let mut made: Vec<(usize, (String, Value))> = inner
            .activities
            .iter()
            .map(|(id, a)| {
                let order = inner
                    .calls
                    .iter()
                    .position(|c| {
                        c.op == "agentActivityCreate"
                            && c.variables["input"]["id"].as_str() == Some(id)
                    })
                    .unwrap_or(usize::MAX);
                (order, a.clone())
            })
            .collect();
        made.sort_by_key(|(order, _)| *order);
        made.into_iter().map(|(_, a)| a).collect()
    }

    pub fn session_urls(&self, session: &str) -> Option<Value> {
        self.inner
            .lock()
            .unwrap()
            .session_urls
            .get(session)
            .cloned()
    }

    /// Every checklist (`agentSessionUpdate` `plan`) the session was given, oldest first.
    pub fn session_plans(&self, session: &str) -> Vec<Value> {
        self.inner
            .lock()
            .unwrap()
            .session_plans
            .get(session)
            .cloned()
            .unwrap_or_default()
    }

    pub fn calls(&self) -> Vec<Call> {
        self.inner.lock().unwrap().calls.clone()
    }

    /// The next calls of operation `op` (its root field: `issue`, `commentCreate`, …) are answered with these
    /// statuses, in order (500, 429; 400 means Linear's `RATELIMITED`); other operations answer as usual.
    pub fn fail_next_op(&self, op: &str, statuses: &[u16]) {
        self.inner
            .lock()
            .unwrap()
            .failures
            .entry(op.to_owned())
            .or_default()
            .extend(statuses);
    }

    /// Answers the fake made that do not fit Linear's schema (each one a bug in the fake).
    pub fn misfits(&self) -> Vec<String> {
        self.inner.lock().unwrap().misfits.clone()
    }

    /// Requests refused because they do not validate against Linear's schema, with why.
    pub fn refused(&self) -> Vec<String> {
        self.inner.lock().unwrap().refused.clone()
    }

    /// Every `issues` query answers `status` (None: answer normally again).
    pub fn fail_issue_queries(&self, status: Option<u16>) {
        self.inner.lock().unwrap().issues_fail = status;
    }
}

fn error(status: StatusCode, message: &str, code: &str) -> Response {
    (
        status,
        Json(json!({ "errors": [{ "message": message, "extensions": { "code": code } }] })),
    )
        .into_response()
}

fn issue_json(issue: &Issue) -> Value {
    let state = issue.states.iter().find(|s| s.0 == issue.state);
    json!({
        "id": issue.id,
        "identifier": issue.identifier,
        "title": issue.title,
        "description": issue.description,
        "priority": 2,
        "updatedAt": issue.updated_at,
        "url": format!("https://linear.app/acme/issue/{}", issue.identifier),
        "state": { "id": issue.state, "name": state.map(|s| s.1.clone()), "type": state.map(|s| s.2.clone()) },
        "team": { "key": issue.team },
        "labels": { "nodes": issue.labels.iter().map(|l| json!({ "name": l })).collect::<Vec<_>>() },
    })
}

async fn graphql(
    State(fake): State<FakeLinear>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let query = body["query"].as_str().unwrap_or_default().to_owned();
    let variables = body["variables"].clone();
    let document = super::schema::validate_request(&query, &variables);
    let op = match &document {
        Ok(document) => root_field(document),
        Err(_) => "invalid".to_owned(),
    };
    let op = op.as_str();
    let mut inner = fake.inner.lock().unwrap();
    inner.calls.push(Call {
        op: op.to_owned(),
        variables: variables.clone(),
    });
    let document = match document {
        Ok(document) => document,
        Err(why) => {
            inner.refused.push(why.clone());
            return error(StatusCode::BAD_REQUEST, &why, "GRAPHQL_VALIDATION_FAILED");
        }
    };
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(LINEAR_KEY) {
        return error(
            StatusCode::BAD_REQUEST,
            "Authentication required",
            "AUTHENTICATION_ERROR",
        );
    }
    if op == "issues" {
        if let Some(status) = inner.issues_fail {
            return error(
                StatusCode::from_u16(status).unwrap(),
                "failing on purpose",
                "INTERNAL_SERVER_ERROR",
            );
        }
    }
    if let Some(status) = inner.failures.get_mut(op).and_then(VecDeque::pop_front) {
        return match status {
            400 => error(
                StatusCode::BAD_REQUEST,
                "Rate limit exceeded",
                "RATELIMITED",
            ),
            429 => (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", "1")],
                Json(json!({ "errors": [{ "message": "slow down" }] })),
            )
                .into_response(),
            other => error(
                StatusCode::from_u16(other).unwrap(),
                "failing on purpose",
                "INTERNAL_SERVER_ERROR",
            ),
        };
    }
    let data = match op {
        "viewer" => json!({ "viewer": { "id": "u-pidevops", "name": "pidevops bot" } }),
        "commentCreate" => {
            let input = &variables["input"];
            let id = input["id"].as_str().unwrap_or_default().to_owned();
            if inner.comments.contains_key(&id) {
                return error(StatusCode::OK, "Entity already exists", "INVALID_INPUT");
            }
            let issue = input["issueId"].as_str().unwrap_or_default().to_owned();
            if !inner.issues.contains_key(&issue) {
                return error(StatusCode::OK, "Entity not found: Issue", "INVALID_INPUT");
            }
            let text = input["body"].as_str().unwrap_or_default().to_owned();
            inner.comments.insert(id.clone(), (issue, text));
            json!({ "commentCreate": { "success": true, "comment": { "id": id, "url": format!("https://linear.app/comment/{id}") } } })
        }
        "comment" => {
            let id = variables["id"].as_str().unwrap_or_default();
            match inner.comments.get(id) {
                Some(_) => {
                    json!({ "comment": { "id": id, "url": format!("https://linear.app/comment/{id}") } })
                }
                None => return error(StatusCode::OK, "Entity not found: Comment", "INVALID_INPUT"),
            }
        }
        "agentActivityCreate" => {
            let input = &variables["input"];
            let id = input["id"].as_str().unwrap_or_default().to_owned();
            if inner.activities.contains_key(&id) {
                return error(StatusCode::OK, "Entity already exists", "INVALID_INPUT");
            }
            let session = input["agentSessionId"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            inner
                .activities
                .insert(id.clone(), (session, input["content"].clone()));
            json!({ "agentActivityCreate": { "success": true, "agentActivity": { "id": id } } })
        }
        "agentActivity" => {
            let id = variables["id"].as_str().unwrap_or_default();
            match inner.activities.get(id) {
                Some(_) => json!({ "agentActivity": { "id": id } }),
                None => {
                    return error(
                        StatusCode::OK,
                        "Entity not found: AgentActivity",
                        "INVALID_INPUT",
                    )
                }
            }
        }
        "agentSessionUpdate" => {
            let id = variables["id"].as_str().unwrap_or_default().to_owned();
            let input = &variables["input"];
            if let Some(urls) = input.get("externalUrls") {
                inner.session_urls.insert(id.clone(), urls.clone());
            }
            if let Some(plan) = input.get("plan") {
                // Linear's shape: a list of `{content, status}`, status one of four.
                let valid = plan.as_array().is_some_and(|steps| {
                    steps.iter().all(|step| {
                        step["content"].is_string()
                            && matches!(
                                step["status"].as_str(),
                                Some("pending" | "inProgress" | "completed" | "canceled")
                            )
                    })
                });
                if !valid {
                    return error(StatusCode::OK, "Argument Validation Error", "INVALID_INPUT");
                }
                inner
                    .session_plans
                    .entry(id)
                    .or_default()
                    .push(plan.clone());
            }
            json!({ "agentSessionUpdate": { "success": true } })
        }
        "issue" => {
            let id = variables["id"].as_str().unwrap_or_default();
            match inner.issues.get(id) {
                Some(issue) => {
                    let state = issue.states.iter().find(|s| s.0 == issue.state);
                    json!({ "issue": {
                        "state": { "id": issue.state, "name": state.map(|s| s.1.clone()) },
                        "team": { "key": issue.team, "states": { "nodes": issue.states.iter().map(|(id, name, kind)| json!({ "id": id, "name": name, "type": kind })).collect::<Vec<_>>() } },
                    } })
                }
                None => return error(StatusCode::OK, "Entity not found: Issue", "INVALID_INPUT"),
            }
        }
        "issueUpdate" => {
            let id = variables["id"].as_str().unwrap_or_default().to_owned();
            let state = variables["input"]["stateId"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            match inner.issues.get_mut(&id) {
                Some(issue) if issue.states.iter().any(|s| s.0 == state) => {
                    issue.state = state;
                    issue.updated_at = now;
                }
                _ => return error(StatusCode::OK, "Entity not found", "INVALID_INPUT"),
            }
            json!({ "issueUpdate": { "success": true } })
        }
        "issues" => {
            // updatedAt > since, carrying the label; pages of `first`, the cursor an index.
            let since = variables["since"].as_str().unwrap_or_default().to_owned();
            let label = variables["label"]
                .as_str()
                .unwrap_or_default()
                .to_lowercase();
            let first = variables["first"].as_u64().unwrap_or(50) as usize;
            let start: usize = variables["after"]
                .as_str()
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            let since_time = chrono::DateTime::parse_from_rfc3339(&since).ok();
            let mut matching: Vec<&Issue> = inner
                .issues
                .values()
                .filter(|i| i.labels.iter().any(|l| l.to_lowercase() == label))
                .filter(|i| {
                    let updated = chrono::DateTime::parse_from_rfc3339(&i.updated_at).ok();
                    match (since_time, updated) {
                        (Some(since), Some(updated)) => updated > since,
                        _ => true,
                    }
                })
                .collect();
            matching.sort_by(|a, b| a.updated_at.cmp(&b.updated_at));
            let page: Vec<Value> = matching
                .iter()
                .skip(start)
                .take(first)
                .map(|i| issue_json(i))
                .collect();
            let next = start + page.len();
            json!({ "issues": {
                "nodes": page,
                "pageInfo": { "hasNextPage": next < matching.len(), "endCursor": next.to_string() },
            } })
        }
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "unknown operation",
                "GRAPHQL_PARSE_FAILED",
            )
        }
    };
    if let Err(misfit) = super::schema::fits(&document, &data) {
        inner.misfits.push(misfit.clone());
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("the fake's answer does not fit Linear's schema: {misfit}"),
            "FAKE_ANSWER_DOES_NOT_FIT",
        );
    }
    Json(json!({ "data": data })).into_response()
}

/// The root field the operation asks for (`commentCreate`, `issues`, …): pidevops's operations ask for one each.
fn root_field(document: &apollo_compiler::ExecutableDocument) -> String {
    document
        .operations
        .get(None)
        .ok()
        .and_then(|op| op.selection_set.selections.first())
        .and_then(|selection| selection.as_field())
        .map(|field| field.name.to_string())
        .unwrap_or_else(|| "unknown".to_owned())
}

impl FakeLinear {
    /// Points `settings` at this fake, with the API key `key`: its two variables, set as an operator would.
    pub fn point_settings(&self, settings: &mut pidevops::config::Settings, key: &str) {
        settings.providers.set("LINEAR_API_KEY", Some(key)).unwrap();
        settings
            .providers
            .set("LINEAR_API_URL", Some(&self.url))
            .unwrap();
    }
}
