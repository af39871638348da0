//! Slack through the real app: its signed webhook and intake (`webhook.rs`), Socket Mode against a fake socket
//! (`socket.rs`).

pub mod socket;
pub mod webhook;
