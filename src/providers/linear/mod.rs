//! Linear, whole: everything pidevops knows of it that is Linear's alone, each part implementing the narrow trait
//! of the layer it plugs into.
//!
//! - `client/`: the GraphQL client at `LINEAR_API_URL` (`operations/`: the documents, checked against Linear's
//!   published schema), answering in `effects::CallError`/`Produced`;
//! - `webhook.rs`: signed `Linear-Delivery`s (`ingress::Webhook`: the signature, the clock skew, the parse);
//! - `poller.rs`: `linear_poller`, what a missed delivery would have said, in its shape;
//! - `intake.rs`: its intake rules (`intake::rules::SourceRules`): an issue ready for pidevops, its withdrawal, an
//!   agent session's delegation, follow-ups and stop signal;
//! - `doctor.rs`: its line in `doctor` (the API with `LINEAR_API_KEY`);
//! - `effects/`: the `effects:linear` policy (`effects::ProviderPolicy`), its actions (`LinearAction`), its pure
//!   request builders (`requests.rs`) and a plan's checklist in its agent session (`plan.rs`).
//!
//! Its entry in `domain::registry::PROVIDERS` names it to everything that lists providers; start-up builds its
//! loops, and `providers::webhook` mounts its webhook.

mod client;
pub mod doctor;
pub mod effects;
pub mod intake;
pub mod poller;
pub mod settings;
pub mod webhook;

pub use client::*;
