//! GitHub, whole: everything pidevops knows of it that is GitHub's alone, each part implementing the narrow trait
//! of the layer it plugs into.
//!
//! - `client.rs`: the API client (octocrab) at `GITHUB_API_URL`, answering in `effects::CallError`/`Produced`;
//! - `webhook.rs`: `X-GitHub-Event` deliveries (`ingress::Webhook`: the signature, the parse);
//! - `poller.rs`: `github_poller`, what a missed delivery would have said, in its shape;
//! - `intake/`: its intake rules (`intake::rules::SourceRules`): an issue labeled for pidevops, its withdrawal
//!   (`mod.rs`, `issue.rs`), a comment addressed to pidevops (`comment.rs`);
//! - `reactions/`: its reactions (`reactions::rules::HostRules`): what a check, workflow, review, line comment or
//!   closed pull request on a `pidevops/<task>` branch means for the task, and whether it may move it;
//! - `doctor.rs`: its lines in `doctor` (the API with `GITHUB_TOKEN`, each repository's webhook);
//! - `effects/`: the `effects:github` policy (`effects::ProviderPolicy`), its actions (`GithubAction`), its pure
//!   request builders, and a combined plan's one pull request (`combined.rs`).
//!
//! Its entry in `domain::registry::PROVIDERS` names it to everything that lists providers; start-up builds its
//! loops, and `providers::webhook` mounts its webhook.

mod client;
pub mod doctor;
pub mod effects;
pub mod intake;
pub mod poller;
pub mod reactions;
pub mod settings;
pub mod webhook;

pub use client::*;
