//! GitLab's test kit: its fixtures as GitLab sends them (`tests/fixtures/gitlab/`), its fake REST API on loopback
//! (`fake`), its suite through the real app (`suite`), `gitlab_poller` through it (`poller`), and `init --gitlab`
//! and doctor's access lines (`setup`), and its reactions (`reactions`).

pub mod fake;
mod flow;
mod merge_requests;
pub(crate) mod poller;
mod reactions;
mod setup;
mod suite;

use serde_json::Value;

/// A fixture under `tests/fixtures/gitlab/` (`issue_open`).
pub fn gl_fixture(name: &str) -> Value {
    let path = crate::common::fixtures_dir()
        .join("gitlab")
        .join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}
