//! Slack's test kit: the fake Web API (`fake`), the contract tests (`contract`) and the suite through the real
//! app (`suite`).

mod contract;
#[allow(dead_code)]
pub mod fake;
mod suite;
