//! Slack, whole: everything pidevops knows of it that is Slack's alone, each part implementing the narrow trait
//! of the layer it plugs into.
//!
//! - `settings.rs`: its variables and `[slack.channels]`, typed; who may command, and where;
//! - `webhook.rs`: the Events API, interactivity and slash commands on one signed route (`ingress::Webhook`:
//!   the `v0` signature, the five-minute window, the `url_verification` handshake), and the same events of
//!   Socket Mode's payloads;
//! - `intake/`: its intake rules (`intake::rules::SourceRules`): a mention, a direct message or `/pidevops`
//!   makes a task; a reply in a task's thread is its answer or a follow-up;
//! - `messages.rs`: its record of a thread it speaks in about a task (`slack-message:<channel>:<ts>`), which a
//!   reply in the thread finds, and a notice's key;
//! - `socket.rs`: the `slack_socket` loop, Socket Mode for a pidevops with no public URL (`SLACK_APP_TOKEN`):
//!   each envelope's event appended, the same event as the webhook's, before its ack;
//! - `client.rs`: the Web API client at `SLACK_API_URL` (slack-morphism's request and response types),
//!   answering in `effects::CallError`/`Produced`;
//! - `effects/`: the `effects:slack` policy (`effects::ProviderPolicy`): each Slack task's story in its thread
//!   (the thread started by pidevops for `/pidevops`), its actions (`SlackAction`), its pure request builders,
//!   and the buttons (`buttons.rs`: a press steers the board, answered to the presser alone);
//! - `doctor.rs`: its line in `doctor` (`auth.test`).
//!
//! Its entry in `domain::registry::PROVIDERS` names it to everything that lists providers; `providers::webhook`
//! mounts its webhook, and start-up's catalog builds its effects loop.

mod client;
pub mod doctor;
pub mod effects;
pub mod intake;
pub mod messages;
pub mod settings;
pub mod socket;
pub mod webhook;

pub use client::*;
pub use messages::{message_stream, SentMessage, MESSAGE_SENT};
