//! GitLab's test kit: its fixtures as GitLab sends them (`tests/fixtures/gitlab/`), its fake REST API on loopback
//! (`fake`), and its suite through the real app (`suite`).

pub mod fake;
mod merge_requests;
mod suite;

use serde_json::Value;

/// A fixture under `tests/fixtures/gitlab/` (`issue_open`).
pub fn gl_fixture(name: &str) -> Value {
    let path = crate::common::fixtures_dir()
        .join("gitlab")
        .join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}
