//! Telegram, whole: everything pidevops knows of it that is Telegram's alone, each part implementing the narrow
//! trait of the layer it plugs into.
//!
//! - `client.rs`: the Bot API client at `TELEGRAM_API_URL`, answering in `effects::CallError`/`Produced`;
//! - `webhook.rs`: updates pushed to the webhook (`ingress::Webhook`: the secret token, the parse);
//! - `updates.rs`: the long poll (`telegram_updates`) for a machine with no public address: a poller, so
//!   ingress itself never calls out;
//! - `intake.rs`: its intake rules (`intake::rules::SourceRules`): `/new`, `/plan`, replies to pidevops's
//!   questions, and who may command (shared with the bot);
//! - `messages.rs`: its record of a message pidevops sent about a task (`telegram-message:<chat>:<id>`), which a
//!   reply finds, and a notice's key;
//! - `doctor.rs`: its line in `doctor` (the Bot API, and how updates arrive);
//! - `effects/`: the `effects:telegram` policy (`effects::ProviderPolicy`), its actions (`TelegramAction`), its
//!   pure request builders and the bot's commands and buttons (`bot.rs`).
//!
//! Its entry in `domain::registry::PROVIDERS` names it to everything that lists providers; start-up builds its
//! loops, and `providers::webhook` mounts its webhook.

mod client;
pub mod doctor;
pub mod effects;
pub mod intake;
pub mod messages;
pub mod settings;
pub mod updates;
pub mod webhook;

pub use client::*;
pub use messages::{message_stream, SentMessage, MESSAGE_SENT};
