//! Slack, whole: everything pidevops knows of it that is Slack's alone, each part implementing the narrow trait
//! of the layer it plugs into.
//!
//! - `settings.rs`: its variables and `[slack.channels]`, typed; who may command, and where;
//! - `webhook.rs`: the Events API, interactivity and slash commands on one signed route (`ingress::Webhook`:
//!   the `v0` signature, the five-minute window, the `url_verification` handshake), and the same events of
//!   Socket Mode's payloads;
//! - `intake.rs`: its intake rules (`intake::rules::SourceRules`): a mention, a direct message or `/pidevops`
//!   makes a task; a reply in a task's thread is its answer or a follow-up;
//! - `messages.rs`: its record of a thread it speaks in about a task (`slack-message:<channel>:<ts>`), which a
//!   reply in the thread finds, and a notice's key.
//!
//! Its entry in `domain::registry::PROVIDERS` names it to everything that lists providers; `providers::webhook`
//! mounts its webhook.

mod client;
pub mod intake;
pub mod messages;
pub mod settings;
pub mod webhook;

pub use client::*;
