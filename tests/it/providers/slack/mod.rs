//! Slack: its signed webhook and intake through the real app.

pub mod webhook;
