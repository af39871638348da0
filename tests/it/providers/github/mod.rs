//! GitHub's test kit: the fake REST API (`fake`), the contract tests (`contract`), and here GitHub payloads for
//! tests, whole as GitHub sends them: intake and reactions read issues, labels and users through octocrab's models,
//! which read nothing less. Built from the octokit fixtures, changed where a test says.

mod contract;
#[allow(dead_code)]
pub mod fake;

use serde_json::{json, Value};

/// A fixture under `tests/fixtures/github/` (`issues/opened.payload.json`).
pub fn gh_fixture(path: &str) -> Value {
    let path = crate::common::fixtures_dir().join("github").join(path);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// A label as GitHub sends one, named `name`.
pub fn gh_label(name: &str) -> Value {
    let mut label = gh_fixture("issues/labeled.payload.json")["label"].clone();
    label["name"] = json!(name);
    label
}

/// An issue's `labels`, whole, named `names`.
pub fn gh_labels(names: &[&str]) -> Value {
    names.iter().map(|name| gh_label(name)).collect()
}

/// GitHub's `issues` delivery of `action` (the `opened` fixture's body) for `repo#number`, carrying `labels`, by
/// an author of `association`. A `closed` one has its issue closed; a `labeled` one names the first label as the
/// one added (an `unlabeled` one's removed label is the test's to set: `body["label"] = gh_label(..)`).
pub fn gh_issue_event(
    action: &str,
    repo: &str,
    number: u64,
    labels: &[&str],
    association: &str,
) -> Value {
    let mut body = gh_fixture("issues/opened.payload.json");
    body["action"] = json!(action);
    body["repository"]["full_name"] = json!(repo);
    body["issue"]["number"] = json!(number);
    body["issue"]["url"] = json!(format!(
        "https://api.github.com/repos/{repo}/issues/{number}"
    ));
    body["issue"]["html_url"] = json!(format!("https://github.com/{repo}/issues/{number}"));
    body["issue"]["labels"] = gh_labels(labels);
    body["issue"]["author_association"] = json!(association);
    if action == "closed" {
        body["issue"]["state"] = json!("closed");
    }
    if let ("labeled", Some(first)) = (action, labels.first()) {
        body["label"] = gh_label(first);
    }
    body
}

/// Delivers `body` as GitHub's `event` under a fresh delivery id, signed; the answer must be 200.
pub async fn gh_post(app: &crate::common::TestApp, event: &str, body: &Value) {
    let delivery = uuid::Uuid::new_v4().to_string();
    let r = app
        .post_github(event, &delivery, body.to_string().as_bytes())
        .await;
    assert_eq!(r.status(), 200, "{event}");
}
