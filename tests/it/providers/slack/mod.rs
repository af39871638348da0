//! Slack through the real app: its signed webhook and intake (`webhook`), Socket Mode against a fake socket
//! (`socket`), the fake Web API (`fake`), the client's contract against it (`contract`) and the outbound suite
//! (`suite`).

mod contract;
#[allow(dead_code)]
pub mod fake;
mod flow;
pub mod socket;
mod suite;
pub mod webhook;
